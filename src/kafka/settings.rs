//! The librdkafka settings of the relay's producer: the ones the product owns
//! (delivery guarantees and key placement are part of the record contract,
//! not tuning) and the defaults an operator may change.

use rdkafka::config::ClientConfig;

use crate::secret::Secret;

/// The cluster and the operator's librdkafka properties (secrets
/// resolved): what every client of the relay is made from.
#[derive(Debug, Clone)]
pub struct Cluster {
    pub bootstrap_servers: String,
    pub properties: Vec<(String, Secret)>,
}

impl Cluster {
    fn has(&self, key: &str) -> bool {
        self.properties.iter().any(|(k, _)| k == key)
    }
}

/// A property `kafka.properties` may not set, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owned {
    pub key: &'static str,
    /// The value the relay sets; `None` when it comes from elsewhere.
    pub value: Option<&'static str>,
    pub why: &'static str,
}

const OWNED: [Owned; 7] = [
    Owned {
        key: "bootstrap.servers",
        value: None,
        why: "set `kafka.bootstrap_servers` instead",
    },
    Owned {
        key: "enable.idempotence",
        value: Some("true"),
        why: "the relay always runs an idempotent producer",
    },
    Owned {
        key: "acks",
        value: Some("all"),
        why: "the relay always uses acks=all",
    },
    // Java's murmur2 placement, so keys land where Kafka's Java producer (and
    // so Debezium) puts them. librdkafka's default is CRC32.
    Owned {
        key: "partitioner",
        value: Some("murmur2_random"),
        why: "the relay uses murmur2_random so keys land where Kafka's Java producer puts them",
    },
    Owned {
        key: "transactional.id",
        value: None,
        why: "set `relay.transactional_id` (used with `relay.delivery = \"transactional\"`)",
    },
    Owned {
        key: "max.in.flight.requests.per.connection",
        value: Some("5"),
        why: "the idempotent producer keeps order with at most 5",
    },
    // A batch the broker refuses for good (a limit lowered under it, an ACL)
    // leaves a gap in the partition's sequence. Without this, librdkafka
    // bumps the epoch and sends the batches in flight behind it again at
    // once, ahead of the refused records the relay publishes again: first
    // deliveries out of per-key order. With it, the producer stops (a
    // fatal error) and the next session publishes in order.
    Owned {
        key: "enable.gapless.guarantee",
        value: Some("true"),
        why:
            "a refused batch must stop the producer, not let later batches of its partition pass it",
    },
];

/// Defaults the operator may override through `kafka.properties`.
/// `message.timeout.ms` counts time in librdkafka's local queue too, so it
/// must cover a full in-flight window on a slow cluster. `linger.ms` is 10
/// for a backlog: librdkafka sends one partition per produce request
/// (librdkafka#1700), and below a full batch the broker's cost per request
/// is most of its cost per message. A caught-up relay does not wait it out
/// (`send_now`): against `linger.ms=0`, 1-row backlogs drain about 1.5
/// times as fast (docs/benchmark.md, the paired drains).
pub const DEFAULTS: [(&str, &str); 4] = [
    ("message.timeout.ms", "120000"),
    ("linger.ms", "10"),
    ("batch.num.messages", "10000"),
    ("queue.buffering.max.kbytes", "1048576"),
];

/// The owned property named `key`, if it is one.
pub fn owned(key: &str) -> Option<&'static Owned> {
    OWNED.iter().find(|o| o.key == key)
}

/// The owned properties with fixed values.
pub fn owned_values() -> impl Iterator<Item = (&'static str, &'static str)> {
    OWNED.iter().filter_map(|o| o.value.map(|v| (o.key, v)))
}

/// The producer's configuration: defaults, then the operator's properties,
/// then what the relay owns; with `transactional_id`, a transactional
/// producer.
pub fn producer_config(cluster: &Cluster, transactional_id: Option<&str>) -> ClientConfig {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &cluster.bootstrap_servers);
    for (k, v) in DEFAULTS {
        cc.set(k, v);
    }
    for (k, v) in &cluster.properties {
        cc.set(k, v.expose());
    }
    for (k, v) in owned_values() {
        cc.set(k, v);
    }
    if let Some(id) = transactional_id {
        cc.set("transactional.id", id);
        // At least `message.timeout.ms` (librdkafka's rule); the operator's
        // value, if any, wins.
        if !cluster.has(TRANSACTION_TIMEOUT) {
            cc.set(TRANSACTION_TIMEOUT, "120000");
        }
    }
    cc
}

/// How long the broker lets a Kafka transaction stay open before it aborts
/// it: one source transaction must be published within it.
pub const TRANSACTION_TIMEOUT: &str = "transaction.timeout.ms";

const MESSAGE_TIMEOUT: &str = "message.timeout.ms";

/// How long librdkafka may hold a record before it must report it: its
/// `message.timeout.ms`, or the transaction's timeout when that is longer
/// (the broker aborts a transaction left open past it).
pub fn delivery_deadline(cc: &ClientConfig) -> std::time::Duration {
    let ms = |key: &str| cc.get(key).and_then(|v| v.trim().parse::<u64>().ok());
    let message = ms(MESSAGE_TIMEOUT).unwrap_or(300_000);
    let transaction = ms(TRANSACTION_TIMEOUT).unwrap_or(0);
    std::time::Duration::from_millis(message.max(transaction))
}

/// The deadline of a producer on the relay's defaults.
pub fn default_delivery_deadline() -> std::time::Duration {
    let mut cc = ClientConfig::new();
    for (k, v) in DEFAULTS {
        cc.set(k, v);
    }
    delivery_deadline(&cc)
}

/// A consumer's configuration with the operator's connection properties
/// (TLS, SASL); producer-only settings would make the consumer refuse to start.
pub fn consumer_config(cluster: &Cluster) -> ClientConfig {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &cluster.bootstrap_servers);
    for (k, v) in &cluster.properties {
        if !is_producer_only(k) {
            cc.set(k, v.expose());
        }
    }
    cc
}

fn is_producer_only(key: &str) -> bool {
    DEFAULTS.iter().any(|(k, _)| *k == key)
        || key == "compression.type"
        || key == TRANSACTION_TIMEOUT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_contract_settings_are_owned() {
        let values: Vec<_> = owned_values().collect();
        assert_eq!(
            values,
            vec![
                ("enable.idempotence", "true"),
                ("acks", "all"),
                ("partitioner", "murmur2_random"),
                ("max.in.flight.requests.per.connection", "5"),
                ("enable.gapless.guarantee", "true"),
            ]
        );
        assert!(owned("transactional.id").is_some());
        assert!(owned("linger.ms").is_none());
    }

    #[test]
    fn the_delivery_deadline_is_the_longer_of_the_message_and_transaction_timeouts() {
        let cluster = |props: &[(&str, &str)]| Cluster {
            bootstrap_servers: "b:9092".into(),
            properties: props
                .iter()
                .map(|(k, v)| (k.to_string(), Secret::new(v.to_string())))
                .collect(),
        };
        let secs =
            |c: &Cluster, id: Option<&str>| delivery_deadline(&producer_config(c, id)).as_secs();
        assert_eq!(default_delivery_deadline().as_secs(), 120);
        assert_eq!(secs(&cluster(&[]), None), 120);
        assert_eq!(secs(&cluster(&[("message.timeout.ms", "30000")]), None), 30);
        // Transactional: the transaction's timeout when it is longer.
        let longer = cluster(&[
            ("message.timeout.ms", "30000"),
            ("transaction.timeout.ms", "90000"),
        ]);
        assert_eq!(secs(&longer, Some("t")), 90);
        // librdkafka's own default when the value is absent or unreadable.
        let mut cc = ClientConfig::new();
        cc.set("message.timeout.ms", "soon");
        assert_eq!(delivery_deadline(&cc).as_secs(), 300);
    }
}
