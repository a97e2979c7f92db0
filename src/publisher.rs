//! Kafka publishing on rdkafka: an idempotent producer with `acks=all` and
//! Java-compatible key placement, a delivery context that classifies every
//! report into three outcomes, and no await per message.
//!
//! Error policy (the evidence is librdkafka's per-message persistence status,
//! not the error code alone):
//! - persisted: `Confirmed`;
//! - not persisted and refused for good (too large, not authorised, invalid
//!   topic): `Rejected`, recorded as FAILED and never retried;
//! - not persisted for a reason that may pass (timeout in queue, broker
//!   down): `Retry`;
//! - possibly persisted: `Ambiguous`.
//!
//! `Retry` and `Ambiguous` both stop the pipeline, which rebuilds the
//! producer and replays from the last settled LSN under the same ids.

use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;
use tokio::sync::mpsc;

use crate::config::{Config, ConfigError};
use crate::mapper::Record;
use crate::value::Uuid;

/// What the relay learns about one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Confirmed,
    Rejected { code: &'static str, detail: String },
    Retry { detail: String },
    Ambiguous { detail: String },
}

/// Which message a delivery report is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    /// The relay's sequence number of the message's transaction.
    pub tx: u64,
    pub message_id: Uuid,
    pub bytes: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub ticket: Ticket,
    pub outcome: Outcome,
    pub partition: i32,
}

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("KAFKA_CONFIG_INVALID: {0}")]
    Invalid(String),
    #[error("KAFKA_UNREACHABLE: cannot reach the Kafka cluster at {servers}: {detail}")]
    Unreachable { servers: String, detail: String },
    #[error("KAFKA_AUTH_FAILED: {0}")]
    Auth(String),
    #[error("KAFKA_PRODUCE_FAILED: {0}")]
    Produce(String),
}

impl PublishError {
    pub fn code(&self) -> &'static str {
        match self {
            PublishError::Config(e) => e.code(),
            PublishError::Invalid(_) => "KAFKA_CONFIG_INVALID",
            PublishError::Unreachable { .. } => "KAFKA_UNREACHABLE",
            PublishError::Auth(_) => "KAFKA_AUTH_FAILED",
            PublishError::Produce(_) => "KAFKA_PRODUCE_FAILED",
        }
    }
}

/// Codes for failures that no retry can fix, when nothing was stored.
fn permanent(code: RDKafkaErrorCode) -> Option<&'static str> {
    use RDKafkaErrorCode::*;
    Some(match code {
        MessageSizeTooLarge | MessageBatchTooLarge | InvalidMessageSize => "MESSAGE_TOO_LARGE",
        TopicAuthorizationFailed => "TOPIC_AUTHORIZATION_FAILED",
        InvalidTopic => "INVALID_TOPIC",
        UnknownTopicOrPartition | UnknownTopic | UnknownPartition => "TOPIC_UNKNOWN",
        InvalidRecord | InvalidMessage => "INVALID_RECORD",
        PolicyViolation => "POLICY_VIOLATION",
        _ => return None,
    })
}

/// The three-outcome classification of one report.
pub fn classify(error: Option<&KafkaError>, status: PersistStatus) -> Outcome {
    let Some(error) = error else {
        return Outcome::Confirmed;
    };
    match status {
        PersistStatus::Persisted => Outcome::Confirmed,
        PersistStatus::PossiblyPersisted => Outcome::Ambiguous {
            detail: error.to_string(),
        },
        PersistStatus::NotPersisted => match error.rdkafka_error_code().and_then(permanent) {
            Some(code) => Outcome::Rejected {
                code,
                detail: error.to_string(),
            },
            None => Outcome::Retry {
                detail: error.to_string(),
            },
        },
    }
}

/// librdkafka's per-message persistence status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PersistStatus {
    NotPersisted,
    PossiblyPersisted,
    Persisted,
}

fn persist_status(result: &DeliveryResult<'_>) -> PersistStatus {
    let message = match result {
        Ok(m) => m,
        Err((_, m)) => m,
    };
    // SAFETY: the pointer is the live message of this delivery report; the
    // call only reads its status field.
    let status = unsafe { rdkafka::bindings::rd_kafka_message_status(message.ptr()) };
    match status {
        rdkafka::bindings::rd_kafka_msg_status_t::RD_KAFKA_MSG_STATUS_PERSISTED => {
            PersistStatus::Persisted
        }
        rdkafka::bindings::rd_kafka_msg_status_t::RD_KAFKA_MSG_STATUS_POSSIBLY_PERSISTED => {
            PersistStatus::PossiblyPersisted
        }
        rdkafka::bindings::rd_kafka_msg_status_t::RD_KAFKA_MSG_STATUS_NOT_PERSISTED => {
            PersistStatus::NotPersisted
        }
    }
}

/// Delivery reports go to the relay through an unbounded channel; the relay
/// bounds what is in flight, so the channel cannot grow past that.
pub struct DeliveryContext {
    reports: mpsc::UnboundedSender<Delivery>,
}

impl ClientContext for DeliveryContext {}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Box<Ticket>;

    fn delivery(&self, result: &DeliveryResult<'_>, ticket: Box<Ticket>) {
        use rdkafka::Message;
        let status = persist_status(result);
        let (error, partition) = match result {
            Ok(m) => (None, m.partition()),
            Err((e, m)) => (Some(e), m.partition()),
        };
        let _ = self.reports.send(Delivery {
            ticket: *ticket,
            outcome: classify(error, status),
            partition,
        });
    }
}

/// librdkafka settings the relay owns; `kafka.properties` may not change them.
pub fn owned_settings() -> [(&'static str, &'static str); 4] {
    [
        ("enable.idempotence", "true"),
        ("acks", "all"),
        // Java's murmur2 placement, so keys land where Kafka's Java producer
        // (and so Debezium) puts them. librdkafka's default is CRC32.
        ("partitioner", "murmur2_random"),
        ("max.in.flight.requests.per.connection", "5"),
    ]
}

/// Defaults the operator may override through `kafka.properties`.
const DEFAULTS: [(&str, &str); 4] = [
    ("message.timeout.ms", "120000"),
    ("linger.ms", "5"),
    ("batch.num.messages", "10000"),
    ("queue.buffering.max.kbytes", "1048576"),
];

pub fn client_config(
    cfg: &Config,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<ClientConfig, PublishError> {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &cfg.kafka.bootstrap_servers);
    for (k, v) in DEFAULTS {
        cc.set(k, v);
    }
    for (k, v) in cfg.kafka_properties(env)? {
        cc.set(k, v.expose());
    }
    for (k, v) in owned_settings() {
        cc.set(k, v);
    }
    Ok(cc)
}

pub struct Publisher {
    producer: ThreadedProducer<DeliveryContext>,
}

impl Publisher {
    pub fn new(
        cc: &ClientConfig,
    ) -> Result<(Publisher, mpsc::UnboundedReceiver<Delivery>), PublishError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let producer = cc
            .create_with_context(DeliveryContext { reports: tx })
            .map_err(|e| PublishError::Invalid(e.to_string()))?;
        Ok((Publisher { producer }, rx))
    }

    /// Fails unless the cluster answers a metadata request.
    pub fn check_reachable(&self, servers: &str, timeout: Duration) -> Result<(), PublishError> {
        match self.producer.client().fetch_metadata(None, timeout) {
            Ok(md) if !md.brokers().is_empty() => Ok(()),
            Ok(_) => Err(PublishError::Unreachable {
                servers: servers.to_string(),
                detail: "no broker in metadata".into(),
            }),
            Err(e) => {
                let text = e.to_string();
                if text.contains("uthentication") || text.contains("SASL") {
                    Err(PublishError::Auth(text))
                } else {
                    Err(PublishError::Unreachable {
                        servers: servers.to_string(),
                        detail: text,
                    })
                }
            }
        }
    }

    /// Enqueues a record. `Err(Some(outcome))` when librdkafka refuses it
    /// locally for good; `Err(None)` when its queue is full (retry after
    /// reports drain).
    pub fn send(&self, record: &Record, ticket: Ticket) -> Result<(), Option<Outcome>> {
        let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
        for (name, value) in &record.headers {
            headers = headers.insert(Header {
                key: name,
                value: value.as_deref(),
            });
        }
        let mut br = BaseRecord::with_opaque_to(&record.topic, Box::new(ticket))
            .key(&record.key)
            .payload(&record.value)
            .headers(headers);
        if let Some(ts) = record.timestamp_ms {
            br = br.timestamp(ts);
        }
        match self.producer.send(br) {
            Ok(()) => Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => Err(None),
            Err((e, _)) => Err(Some(match e.rdkafka_error_code().and_then(permanent) {
                Some(code) => Outcome::Rejected {
                    code,
                    detail: e.to_string(),
                },
                None => Outcome::Retry {
                    detail: e.to_string(),
                },
            })),
        }
    }

    /// Messages queued or in flight.
    pub fn in_flight(&self) -> i32 {
        self.producer.in_flight_count()
    }

    /// Drops whatever is queued or in flight (before a rebuild). Their
    /// reports arrive as failures and are ignored by the caller.
    pub fn purge(&self) {
        self.producer
            .purge(rdkafka::producer::PurgeConfig::default().queue().inflight());
    }
}
