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

/// The limits learned so far, shared by a relay's sessions: each session's
/// producer is made with the `batch.size` they allow, and a topic whose
/// limit is stale is described again by the next session that writes to it.
#[derive(Debug, Default)]
pub struct Limits {
    known: Mutex<HashMap<String, Limit>>,
}

impl Limits {
    pub fn get(&self, topic: &str) -> Option<Limit> {
        self.lock().get(topic).copied()
    }

    pub fn learn(&self, topic: &str, limit: Limit) {
        self.lock().insert(topic.to_string(), limit);
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

/// Asks the cluster for `topic`'s effective `max.message.bytes` (its own
/// setting, or the broker's default it inherits). `TOPIC_LIMIT_UNKNOWN`
/// when the principal may not describe the topic's configuration.
pub async fn describe(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
) -> Result<usize, Error> {
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
    let value = resource
        .get(TOPIC_LIMIT)
        .and_then(|entry| entry.value.as_deref())
        .ok_or_else(|| {
            Error::new(
                Code::KAFKA_PRODUCE_FAILED,
                format!("describing topic {topic}: no {TOPIC_LIMIT} in the answer"),
            )
        })?;
    value.parse().map_err(|_| {
        Error::new(
            Code::KAFKA_PRODUCE_FAILED,
            format!("describing topic {topic}: {TOPIC_LIMIT} is {value:?}"),
        )
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
}
