//! Whether a topic's partitions can take a new producer's first records.
//!
//! Metadata names a new partition's leader tens of milliseconds before that
//! broker serves it, and a broker that holds no state for a producer accepts
//! any sequence. So a session's first batch to a partition could be refused
//! as "not leader" while the next one is appended; publishing the first again
//! would put it behind later records of its key. Before a session's first
//! record for a topic, every partition must answer a ListOffsets at its
//! leader, which the broker refuses until it serves the partition.

use std::time::{Duration, Instant};

use rdkafka::client::{Client, ClientContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::error::{Cause, Code, Error};

const POLL: Duration = Duration::from_millis(20);
const CALL: Duration = Duration::from_secs(2);

/// Blocks up to `within` until every partition of `topic` has a leader that
/// serves it (asking for the metadata also has the broker auto-create the
/// topic). `Err` (`TOPIC_NOT_SERVED`, with the last refusal as its cause)
/// when not in time or refused; the produce then reports what is wrong with
/// the topic.
pub fn wait_until_served<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    within: Duration,
) -> Result<(), Error> {
    let deadline = Instant::now() + within;
    let left = || deadline.saturating_duration_since(Instant::now()).min(CALL);
    let mut last: Option<RDKafkaErrorCode> = None;
    loop {
        match partitions_with_leaders(client, topic, left()) {
            Listed::Led(partitions) => {
                let unserved = partitions.iter().find_map(|p| {
                    match client.fetch_watermarks(topic, *p, left()) {
                        Ok(_) => None,
                        // The principal may not list offsets: the leaders
                        // are all there is to wait for.
                        Err(KafkaError::MetadataFetch(
                            RDKafkaErrorCode::TopicAuthorizationFailed,
                        )) => None,
                        Err(e) => Some(e.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail)),
                    }
                });
                match unserved {
                    None => return Ok(()),
                    Some(code) => last = Some(code),
                }
            }
            Listed::Refused(code) => return Err(not_served(topic, "refused", Some(code))),
            Listed::NotYet(code) => last = code.or(last),
        }
        if Instant::now() + POLL >= deadline {
            return Err(not_served(topic, &format!("not within {within:?}"), last));
        }
        std::thread::sleep(POLL);
    }
}

fn not_served(topic: &str, why: &str, cause: Option<RDKafkaErrorCode>) -> Error {
    let detail = match cause {
        Some(code) => format!("topic {topic}: {why}: the last answer was {code}"),
        None => format!("topic {topic}: {why}: no answer"),
    };
    let e = Error::new(Code::TOPIC_NOT_SERVED, detail);
    match cause {
        Some(code) => e.caused_by(Cause::Kafka(code)),
        None => e,
    }
}

enum Listed {
    Led(Vec<i32>),
    /// Refused for good: waiting changes nothing.
    Refused(RDKafkaErrorCode),
    /// Not yet, with the reason when the broker gave one.
    NotYet(Option<RDKafkaErrorCode>),
}

fn partitions_with_leaders<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    within: Duration,
) -> Listed {
    let metadata = match client.fetch_metadata(Some(topic), within) {
        Ok(m) => m,
        Err(e) => return Listed::NotYet(e.rdkafka_error_code()),
    };
    let Some(t) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Listed::NotYet(None);
    };
    if let Some(e) = t.error() {
        let code = RDKafkaErrorCode::from(e);
        return if code == RDKafkaErrorCode::TopicAuthorizationFailed {
            Listed::Refused(code)
        } else {
            Listed::NotYet(Some(code))
        };
    }
    let leaderless = t
        .partitions()
        .iter()
        .find(|p| p.error().is_some() || p.leader() < 0);
    match leaderless {
        _ if t.partitions().is_empty() => Listed::NotYet(None),
        None => Listed::Led(t.partitions().iter().map(|p| p.id()).collect()),
        Some(p) => Listed::NotYet(p.error().map(RDKafkaErrorCode::from)),
    }
}
