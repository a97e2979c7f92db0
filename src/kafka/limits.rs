//! Each destination's limit on a record batch (`max.message.bytes`), the
//! producer's `batch.size` that stays under every limit it knows, and the
//! size a record takes in a batch of its own.
//!
//! The broker refuses a whole batch above the topic's limit and librdkafka
//! does not split a refused batch, so one record too large would take every
//! record batched with it down. Two rules keep a row's fault to that row:
//! a record over its topic's limit on its own is refused before it joins a
//! batch, and the producer never builds a batch over the smallest limit of
//! the topics it has learned.
//!
//! Sizes are uncompressed: a record is refused when its uncompressed batch
//! is over the limit, even if compression would have brought it under
//! (Kafka's Java producer checks its own request limit the same way).
//!
//! The same description gives the topic's time window
//! (`message.timestamp.before.max.ms`, `.after.max.ms`): the broker refuses
//! a whole batch for one record outside it, and under the gap-less
//! guarantee librdkafka reports every record of it as refused, so the
//! window tells the record at fault from the rest.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::error::{Cause, Code, Error};
use crate::kafka::settings::{self, Cluster};
use crate::router::Record;

/// The topic configuration that bounds a record batch.
pub const TOPIC_LIMIT: &str = "max.message.bytes";
/// The topic configurations that bound a record's timestamp (Kafka 3.6+),
/// the one they replaced, and whether the broker stamps records itself.
const TIMESTAMP_BEFORE: &str = "message.timestamp.before.max.ms";
const TIMESTAMP_AFTER: &str = "message.timestamp.after.max.ms";
const TIMESTAMP_DIFFERENCE: &str = "message.timestamp.difference.max.ms";
const TIMESTAMP_TYPE: &str = "message.timestamp.type";
/// The producer setting that bounds the batches librdkafka builds.
pub const BATCH_SIZE: &str = "batch.size";
/// librdkafka's default `batch.size`.
pub const DEFAULT_BATCH_SIZE: usize = 1_000_000;
/// A v2 record batch's header, with the offset and length before it: the
/// broker compares this plus the records with the limit.
pub const BATCH_OVERHEAD: usize = 61;
/// The smallest `batch.size` the relay sets: below it, every record is a
/// batch of its own anyway.
const MIN_BATCH_SIZE: usize = 1024;

const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes `record` takes as the only record of a v2 batch, uncompressed:
/// exactly what the broker compares with `max.message.bytes`.
pub fn framed_size(record: &Record) -> usize {
    let field = |bytes: Option<&[u8]>| match bytes {
        Some(b) => varint_len(b.len() as i64) + b.len(),
        None => varint_len(-1),
    };
    let mut body = 1 // attributes
        + varint_len(0) // timestamp delta
        + varint_len(0) // offset delta
        + field(record.key_bytes())
        + field(record.value_bytes())
        + varint_len(record.headers().len() as i64);
    for (name, value) in record.headers() {
        body += varint_len(name.len() as i64) + name.len();
        body += match value {
            Some(v) => varint_len(v.len() as i64) + v.len(),
            None => varint_len(-1),
        };
    }
    BATCH_OVERHEAD + varint_len(body as i64) + body
}

/// Bytes of Kafka's zig-zag variable-length encoding of `n`.
/// Seven bits a byte, from the highest set bit: no loop, as Kafka's
/// `ByteUtils.sizeOfVarlong` (it runs about 36 times per record).
fn varint_len(n: i64) -> usize {
    let z = ((n << 1) ^ (n >> 63)) as u64;
    let bits = 64 - (z | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// The `batch.size` that keeps librdkafka's batches under `limit`.
/// librdkafka counts the request's own framing inside `batch.size`, and
/// compression can add a little to data it cannot shrink (lz4's bound is
/// n/255 + 16; zstd's, gzip's and snappy's in practice less): the margin
/// covers both.
pub fn batch_size_under(limit: usize) -> usize {
    limit.saturating_sub(limit / 64 + 256).max(MIN_BATCH_SIZE)
}

/// What the relay knows of a topic's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// The topic's effective `max.message.bytes`, as DescribeConfigs gave it.
    Described(usize),
    /// The principal may not describe the topic: a bound learned from the
    /// batches the broker refused, used as the `batch.size` itself.
    Inferred(usize),
}

impl Limit {
    /// The largest record (as a batch of its own) the topic takes, when known.
    pub fn record_bound(self) -> Option<usize> {
        match self {
            Limit::Described(n) => Some(n),
            Limit::Inferred(_) => None,
        }
    }

    fn batch_bound(self) -> usize {
        match self {
            Limit::Described(n) => batch_size_under(n),
            Limit::Inferred(n) => n,
        }
    }
}

/// What a topic's description says about the records it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Described {
    /// The effective `max.message.bytes`.
    pub max_message_bytes: usize,
    pub window: TimeWindow,
}

/// How far a record's timestamp may lie before or after the broker's
/// clock (`None`: no bound; a `LogAppendTime` topic has none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimeWindow {
    pub before_ms: Option<i64>,
    pub after_ms: Option<i64>,
}

impl TimeWindow {
    /// Whether a record stamped `timestamp_ms` is inside the window at
    /// `now_ms`. Judged on the relay's clock: a record near a bound may be
    /// judged inside and published again, which settles it as time passes.
    pub fn takes(&self, timestamp_ms: i64, now_ms: i64) -> bool {
        let after_start = self
            .before_ms
            .is_none_or(|b| timestamp_ms >= now_ms.saturating_sub(b));
        let before_end = self
            .after_ms
            .is_none_or(|a| timestamp_ms <= now_ms.saturating_add(a));
        after_start && before_end
    }

    /// The window a topic's configuration entries give.
    fn of(entry: impl Fn(&str) -> Option<String>) -> TimeWindow {
        if entry(TIMESTAMP_TYPE).as_deref() == Some("LogAppendTime") {
            return TimeWindow::default();
        }
        let bound = |name: &str| {
            entry(name)
                .or_else(|| entry(TIMESTAMP_DIFFERENCE))
                .and_then(|v| v.parse::<i64>().ok())
                .filter(|&ms| ms < i64::MAX)
        };
        TimeWindow {
            before_ms: bound(TIMESTAMP_BEFORE),
            after_ms: bound(TIMESTAMP_AFTER),
        }
    }
}

/// The limits learned so far, shared by a relay's sessions: each session's
/// producer is made with the `batch.size` they allow, and a topic whose
/// limit is stale is described again by the next session that writes to it.
#[derive(Debug, Default)]
pub struct Limits {
    known: Mutex<HashMap<String, Limit>>,
    /// Each described topic's time window.
    windows: Mutex<HashMap<String, TimeWindow>>,
}

impl Limits {
    pub fn get(&self, topic: &str) -> Option<Limit> {
        self.lock().get(topic).copied()
    }

    pub fn learn(&self, topic: &str, limit: Limit) {
        self.lock().insert(topic.to_string(), limit);
    }

    pub fn learn_window(&self, topic: &str, window: TimeWindow) {
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        windows.insert(topic.to_string(), window);
    }

    /// `topic`'s time window, when it was described.
    pub fn window(&self, topic: &str) -> Option<TimeWindow> {
        let windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        windows.get(topic).copied()
    }

    /// The broker refused a batch for `topic` that the relay built under
    /// `batch_size`: the limit is described again; when it cannot be, the
    /// next batches are half as large.
    pub fn refused(&self, topic: &str, batch_size: usize) {
        let mut known = self.lock();
        match known.get(topic).copied() {
            Some(Limit::Described(_)) => {
                known.remove(topic);
            }
            Some(Limit::Inferred(n)) => {
                known.insert(
                    topic.to_string(),
                    Limit::Inferred((n.min(batch_size) / 2).max(MIN_BATCH_SIZE)),
                );
            }
            None => {
                known.insert(
                    topic.to_string(),
                    Limit::Inferred((batch_size / 2).max(MIN_BATCH_SIZE)),
                );
            }
        }
    }

    /// The `batch.size` for a new producer: `configured`, or less when a
    /// learned limit asks for less.
    pub fn batch_size(&self, configured: usize) -> usize {
        self.lock()
            .values()
            .map(|l| l.batch_bound())
            .fold(configured, usize::min)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Limit>> {
        // A panic while holding it leaves a map that is still whole.
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The `batch.size` the operator set in `kafka.properties`, or librdkafka's
/// default.
pub fn configured_batch_size(cluster: &Cluster) -> Result<usize, Error> {
    match cluster.properties.iter().find(|(k, _)| k == BATCH_SIZE) {
        None => Ok(DEFAULT_BATCH_SIZE),
        Some((_, v)) => v.expose().parse().map_err(|_| {
            Error::new(
                Code::KAFKA_CONFIG_INVALID,
                format!("kafka.properties.\"{BATCH_SIZE}\" is not a number of bytes"),
            )
        }),
    }
}

/// A client that describes topics, with the cluster's connection settings.
pub fn admin(cluster: &Cluster) -> Result<AdminClient<DefaultClientContext>, Error> {
    settings::consumer_config(cluster)
        .create()
        .map_err(|e| Error::new(Code::KAFKA_CONFIG_INVALID, crate::error::chain(&e)))
}

/// Asks the cluster for `topic`'s effective `max.message.bytes` and time
/// window (its own settings, or the broker's defaults it inherits).
/// `TOPIC_LIMIT_UNKNOWN` when the principal may not describe the topic's
/// configuration.
pub async fn describe(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
) -> Result<Described, Error> {
    let options = AdminOptions::new().request_timeout(Some(DESCRIBE_TIMEOUT));
    let results = admin
        .describe_configs(&[ResourceSpecifier::Topic(topic)], &options)
        .await
        .map_err(|e| describe_error(topic, &e))?;
    let resource = results
        .into_iter()
        .next()
        .ok_or_else(|| {
            Error::new(
                Code::KAFKA_PRODUCE_FAILED,
                format!("describing topic {topic}: no answer"),
            )
        })?
        .map_err(|code| refused(topic, code))?;
    let entry = |name: &str| resource.get(name).and_then(|e| e.value.clone());
    let value = entry(TOPIC_LIMIT).ok_or_else(|| {
        Error::new(
            Code::KAFKA_PRODUCE_FAILED,
            format!("describing topic {topic}: no {TOPIC_LIMIT} in the answer"),
        )
    })?;
    let max_message_bytes = value.parse().map_err(|_| {
        Error::new(
            Code::KAFKA_PRODUCE_FAILED,
            format!("describing topic {topic}: {TOPIC_LIMIT} is {value:?}"),
        )
    })?;
    Ok(Described {
        max_message_bytes,
        window: TimeWindow::of(entry),
    })
}

fn describe_error(topic: &str, e: &KafkaError) -> Error {
    match e.rdkafka_error_code() {
        Some(code) => refused(topic, code),
        None => Error::new(
            Code::KAFKA_PRODUCE_FAILED,
            format!("describing topic {topic}: {}", crate::error::chain(e)),
        ),
    }
}

fn refused(topic: &str, code: RDKafkaErrorCode) -> Error {
    use RDKafkaErrorCode::*;
    let relay_code = match code {
        TopicAuthorizationFailed | ClusterAuthorizationFailed => Code::TOPIC_LIMIT_UNKNOWN,
        _ => Code::KAFKA_PRODUCE_FAILED,
    };
    Error::new(
        relay_code,
        format!("describing the configuration of topic {topic}: {code}"),
    )
    .caused_by(Cause::Kafka(code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_zig_zag() {
        // Kafka's ByteUtils.sizeOfVarint: 0, -1, 63 and -64 take one byte;
        // 64 takes two; 8191 two; 8192 three.
        for (n, len) in [
            (0, 1),
            (-1, 1),
            (63, 1),
            (-64, 1),
            (64, 2),
            (8191, 2),
            (8192, 3),
            (i64::MAX, 10),
            (i64::MIN, 10),
            (1 << 55, 9),
            ((1 << 55) - 1, 8),
        ] {
            assert_eq!(varint_len(n), len, "{n}");
        }
    }

    #[test]
    fn the_batch_size_follows_the_smallest_learned_limit() {
        let limits = Limits::default();
        assert_eq!(limits.batch_size(1_000_000), 1_000_000);
        // Kafka's default limit (1 MiB + 12) leaves librdkafka's default.
        limits.learn("a", Limit::Described(1_048_588));
        assert_eq!(limits.batch_size(1_000_000), 1_000_000);
        limits.learn("b", Limit::Described(20_000));
        assert_eq!(limits.batch_size(1_000_000), 19_432);
        // An operator's smaller batch.size stays.
        assert_eq!(limits.batch_size(8_000), 8_000);
    }

    #[test]
    fn a_refusal_describes_again_or_halves_what_it_could_not_describe() {
        let limits = Limits::default();
        limits.learn("d", Limit::Described(20_000));
        limits.refused("d", 19_432);
        assert_eq!(limits.get("d"), None, "described again");
        limits.refused("u", 1_000_000);
        assert_eq!(limits.get("u"), Some(Limit::Inferred(500_000)));
        limits.refused("u", 500_000);
        assert_eq!(limits.get("u"), Some(Limit::Inferred(250_000)));
        assert_eq!(limits.batch_size(1_000_000), 250_000);
        for _ in 0..40 {
            limits.refused("u", 1_000_000);
        }
        assert_eq!(
            limits.get("u"),
            Some(Limit::Inferred(1024)),
            "bounded below"
        );
    }

    #[test]
    fn a_time_window_takes_what_lies_inside_its_bounds() {
        let entries = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let hour = TimeWindow::of(entries(&[
            ("message.timestamp.before.max.ms", "3600000"),
            ("message.timestamp.after.max.ms", "9223372036854775807"),
        ]));
        assert_eq!(
            hour,
            TimeWindow {
                before_ms: Some(3_600_000),
                after_ms: None
            }
        );
        let now = 1_800_000_000_000;
        assert!(hour.takes(now - 3_600_000, now));
        assert!(!hour.takes(now - 3_600_001, now));
        assert!(hour.takes(now + 86_400_000, now));
        // Kafka before 3.6: one setting for both sides.
        let old = TimeWindow::of(entries(&[("message.timestamp.difference.max.ms", "1000")]));
        assert!(!old.takes(now + 1001, now) && !old.takes(now - 1001, now));
        assert!(old.takes(now + 1000, now) && old.takes(now - 1000, now));
        // The broker's own time: any record goes.
        let stamped = TimeWindow::of(entries(&[
            ("message.timestamp.type", "LogAppendTime"),
            ("message.timestamp.before.max.ms", "1"),
        ]));
        assert!(stamped.takes(0, now));
    }
}
