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

const POLL: Duration = Duration::from_millis(20);
const CALL: Duration = Duration::from_secs(2);

/// Blocks up to `within` until every partition of `topic` has a leader that
/// serves it (asking for the metadata also has the broker auto-create the
/// topic). `false` when not in time or refused; the produce then reports
/// what is wrong with the topic.
pub fn wait_until_served<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    within: Duration,
) -> bool {
    let deadline = Instant::now() + within;
    let left = || deadline.saturating_duration_since(Instant::now()).min(CALL);
    loop {
        match partitions_with_leaders(client, topic, left()) {
            Listed::Led(partitions) => {
                let served = partitions.iter().all(|p| {
                    match client.fetch_watermarks(topic, *p, left()) {
                        Ok(_) => true,
                        // The principal may not list offsets: the leaders
                        // are all there is to wait for.
                        Err(KafkaError::MetadataFetch(
                            RDKafkaErrorCode::TopicAuthorizationFailed,
                        )) => true,
                        Err(_) => false,
                    }
                });
                if served {
                    return true;
                }
            }
            Listed::Refused => return false,
            Listed::NotYet => {}
        }
        if Instant::now() + POLL >= deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

enum Listed {
    Led(Vec<i32>),
    /// Refused for good: waiting changes nothing.
    Refused,
    NotYet,
}

fn partitions_with_leaders<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    within: Duration,
) -> Listed {
    let Ok(metadata) = client.fetch_metadata(Some(topic), within) else {
        return Listed::NotYet;
    };
    let Some(t) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Listed::NotYet;
    };
    if let Some(e) = t.error() {
        return if RDKafkaErrorCode::from(e) == RDKafkaErrorCode::TopicAuthorizationFailed {
            Listed::Refused
        } else {
            Listed::NotYet
        };
    }
    let led = !t.partitions().is_empty()
        && t.partitions()
            .iter()
            .all(|p| p.error().is_none() && p.leader() >= 0);
    if led {
        Listed::Led(t.partitions().iter().map(|p| p.id()).collect())
    } else {
        Listed::NotYet
    }
}
