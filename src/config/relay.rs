//! `[relay]`: how `outbox-cdc run` behaves. Settings of transactional
//! delivery live in `[relay.transactional]`, which only
//! `delivery = "transactional"` may have, and are read only through
//! [`RelayConfig::delivery`], so no code path reads them for an idempotent
//! relay.

use serde::{Deserialize, Serialize};

use super::{invalid, non_empty};
use crate::contract::outbox;
use crate::error::{Code, Error};

pub const DEFAULT_DRAIN_TIMEOUT_SECS: u64 = 30;
/// Each in-flight message of 500 bytes holds about 3 KiB in librdkafka (the
/// payload, the 16 headers it copies one by one, the encoded batch; a
/// 100-row drain peaked at 29.8 MiB with 2 500, 51.4 MiB with 10 000): 2 500
/// cover 25 000 msg/s at 100 ms acknowledgement latency.
pub const DEFAULT_MAX_IN_FLIGHT_MESSAGES: usize = 2_500;
pub const DEFAULT_MAX_IN_FLIGHT_BYTES: usize = 64 << 20;
pub const DEFAULT_OPERATOR_ERROR_THRESHOLD: usize = 1;
pub const DEFAULT_SLOT_CHECK_INTERVAL_SECS: u64 = 15;
pub const DEFAULT_SLOT_WAL_MARGIN_BYTES: u64 = 1 << 30;
/// A killed broker's leaders move within about 10 s (the controller's
/// `broker.session.timeout.ms` is 9 s); a stall past that is no failover.
pub const DEFAULT_KAFKA_STALL_SECS: u64 = 15;
pub const DEFAULT_TRANSACTION_MAX_RECORDS: usize = 20_000;
pub const DEFAULT_TRANSACTION_MAX_BYTES: usize = 32 << 20;
pub const DEFAULT_TRANSACTION_MAX_MS: u64 = 100;
pub const DEFAULT_PROGRESS_TOPIC: &str = "outbox-cdc.progress";

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct RelayConfig {
    /// Record published rows in the journal, folded into `PUBLISHED` with
    /// `published_at` when the relay keeps up.
    pub mark_published: bool,
    /// On SIGTERM/SIGINT, how long in-flight messages may take to settle.
    pub drain_timeout_secs: u64,
    /// Backpressure: at most this many messages unacknowledged by Kafka.
    pub max_in_flight_messages: usize,
    /// Backpressure: at most this many bytes unacknowledged by Kafka.
    pub max_in_flight_bytes: usize,
    /// Create the relay's slot when it is missing. Off by default: the slot
    /// comes from `outbox-cdc cutover`, which hands the backlog over.
    pub create_slot: bool,
    /// Records the broker refuses for an operator's reason (authorization,
    /// a missing topic, a policy) in one session before it ends; the relay
    /// then retries with backoff. No row is marked FAILED for them. In
    /// transactional delivery the first one ends the session (its Kafka
    /// transaction cannot commit without the record).
    pub operator_error_threshold: usize,
    /// `idempotent` (at least once, the default) or `transactional` (whole
    /// source transactions per Kafka transaction, progress kept in Kafka).
    pub delivery: DeliveryMode,
    /// `[relay.transactional]`: read through [`RelayConfig::delivery`].
    transactional: TransactionalConfig,
    /// Seconds between `pg_logical_emit_message` heartbeats in the outbox's
    /// database; 0 (the default) sends none. For servers whose WAL is
    /// written by activity the relay never sees.
    pub heartbeat_interval_secs: u64,
    /// Ask pgoutput for values in binary form (PostgreSQL 14+; ignored
    /// before): the walsender skips the text output of bytea, uuid and
    /// timestamptz, and the relay their parsing.
    pub pgoutput_binary: bool,
    /// How often the slot guard reads the slot (and probes Kafka for
    /// readiness).
    pub slot_check_interval_secs: u64,
    /// The slot guard warns (`SLOT_WAL_AT_RISK`) when the slot's
    /// `safe_wal_size` falls under this many bytes.
    pub slot_wal_margin_bytes: u64,
    /// What records do once the relay has read all the WAL there is.
    pub when_caught_up: WhenCaughtUp,
    /// Kafka acknowledging none of the records in flight for this long
    /// makes the relay not ready (`/readyz`): a cluster that cannot meet
    /// `min.insync.replicas` answers metadata requests but takes no write.
    pub kafka_stall_secs: u64,
    /// The outbox's one relay, or a copy beside it that records nothing.
    pub role: Role,
}

/// Which relay this is to its outbox: the declaration in the database
/// names one relay per outbox; a copy is declared beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The outbox's relay: it claims an undeclared outbox, and is refused
    /// on a slot the declaration does not name.
    #[default]
    Relay,
    /// A copy on a slot of its own (a shadow run beside Debezium, a load
    /// test): declared as such, never the outbox's relay, and it marks no
    /// row (`mark_published = false`).
    Copy,
}

/// What records do once the relay has read all the WAL there is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WhenCaughtUp {
    /// Go out at once: `linger.ms` batches a backlog only.
    #[default]
    Send,
    /// Wait out `linger.ms` like a backlog's records (fewer, larger
    /// produce requests on a busy stream; `linger.ms` of latency).
    Linger,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            mark_published: true,
            drain_timeout_secs: DEFAULT_DRAIN_TIMEOUT_SECS,
            max_in_flight_messages: DEFAULT_MAX_IN_FLIGHT_MESSAGES,
            max_in_flight_bytes: DEFAULT_MAX_IN_FLIGHT_BYTES,
            create_slot: false,
            operator_error_threshold: DEFAULT_OPERATOR_ERROR_THRESHOLD,
            delivery: DeliveryMode::default(),
            transactional: TransactionalConfig::default(),
            heartbeat_interval_secs: 0,
            pgoutput_binary: true,
            slot_check_interval_secs: DEFAULT_SLOT_CHECK_INTERVAL_SECS,
            slot_wal_margin_bytes: DEFAULT_SLOT_WAL_MARGIN_BYTES,
            when_caught_up: WhenCaughtUp::default(),
            kafka_stall_secs: DEFAULT_KAFKA_STALL_SECS,
            role: Role::default(),
        }
    }
}

/// How records reach Kafka.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryMode {
    /// Idempotent producer, at least once; a relay crash replays what the
    /// slot had not confirmed.
    #[default]
    Idempotent,
    /// Transactional producer: read_committed consumers see each source
    /// transaction whole, once.
    Transactional,
}

/// `[relay.transactional]`: transactional delivery's settings.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct TransactionalConfig {
    /// The producer's `transactional.id`; defaults to
    /// `outbox-cdc.<dbname>.<slot>`. One per relay: another relay that
    /// starts with the same id fences this one.
    pub id: Option<String>,
    /// Group commit: a Kafka transaction closes at the first source
    /// transaction boundary past any of these bounds.
    pub max_records: usize,
    pub max_bytes: usize,
    pub max_ms: u64,
    /// The topic whose committed offset (under the transactional id as the
    /// group) holds the last source commit published, written in the same
    /// Kafka transaction as the records.
    pub progress_topic: String,
}

impl Default for TransactionalConfig {
    fn default() -> Self {
        TransactionalConfig {
            id: None,
            max_records: DEFAULT_TRANSACTION_MAX_RECORDS,
            max_bytes: DEFAULT_TRANSACTION_MAX_BYTES,
            max_ms: DEFAULT_TRANSACTION_MAX_MS,
            progress_topic: DEFAULT_PROGRESS_TOPIC.into(),
        }
    }
}

/// The delivery mode with the settings that belong to it.
#[derive(Debug, Clone, Copy)]
pub enum Delivery<'c> {
    Idempotent,
    Transactional(&'c TransactionalConfig),
}

/// Keys of `[relay]` that moved into `[relay.transactional]`, with their
/// new names.
const MOVED: &[(&str, &str)] = &[
    ("transactional_id", "id"),
    ("transaction_max_records", "max_records"),
    ("transaction_max_bytes", "max_bytes"),
    ("transaction_max_ms", "max_ms"),
    ("progress_topic", "progress_topic"),
];

impl RelayConfig {
    pub fn delivery(&self) -> Delivery<'_> {
        match self.delivery {
            DeliveryMode::Idempotent => Delivery::Idempotent,
            DeliveryMode::Transactional => Delivery::Transactional(&self.transactional),
        }
    }

    /// The delivery mode, as the retry policy weighs it.
    pub fn mode(&self) -> crate::error::policy::Mode {
        match self.delivery {
            DeliveryMode::Idempotent => crate::error::policy::Mode::Idempotent,
            DeliveryMode::Transactional => crate::error::policy::Mode::Transactional,
        }
    }

    pub fn transactional(&self) -> bool {
        self.delivery == DeliveryMode::Transactional
    }

    /// The limits the metrics export beside what they bound.
    pub fn metric_limits(&self) -> crate::metrics::Limits {
        crate::metrics::Limits {
            max_in_flight_messages: self.max_in_flight_messages,
            max_in_flight_bytes: self.max_in_flight_bytes,
            slot_wal_margin_bytes: self.slot_wal_margin_bytes,
            transactional: self.transactional(),
            kafka_stall: std::time::Duration::from_secs(self.kafka_stall_secs),
        }
    }

    /// Transactional delivery with these settings.
    pub fn set_transactional(&mut self, t: TransactionalConfig) {
        self.delivery = DeliveryMode::Transactional;
        self.transactional = t;
    }

    /// Before typed decoding: the old names of moved keys, and
    /// `[relay.transactional]` beside an idempotent delivery, are named.
    pub(super) fn check_raw(relay: Option<&toml::Value>) -> Result<(), Error> {
        let Some(relay) = relay.and_then(toml::Value::as_table) else {
            return Ok(());
        };
        for (old, new) in MOVED {
            if relay.contains_key(*old) {
                return Err(Error::new(
                    Code::CONFIG_UNKNOWN_KEY,
                    format!(
                        "`relay.{old}` moved: write it as `{new}` under `[relay.transactional]`"
                    ),
                ));
            }
        }
        let transactional =
            relay.get("delivery").and_then(toml::Value::as_str) == Some("transactional");
        if relay.contains_key("transactional") && !transactional {
            return Err(invalid(
                "relay.transactional",
                "applies to `delivery = \"transactional\"` only; remove it or set relay.delivery",
            ));
        }
        Ok(())
    }

    pub(super) fn validate(&self) -> Result<(), Error> {
        for (key, value) in [
            (
                "relay.operator_error_threshold",
                self.operator_error_threshold,
            ),
            ("relay.max_in_flight_messages", self.max_in_flight_messages),
            (
                "relay.slot_check_interval_secs",
                self.slot_check_interval_secs as usize,
            ),
            ("relay.kafka_stall_secs", self.kafka_stall_secs as usize),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be positive"));
            }
        }
        if self.role == Role::Copy && self.mark_published {
            return Err(invalid(
                "relay.role",
                "a copy records nothing: set relay.mark_published = false beside `role = \"copy\"`",
            ));
        }
        if self.max_in_flight_bytes < 1 << 20 {
            return Err(invalid(
                "relay.max_in_flight_bytes",
                "must be at least 1 MiB",
            ));
        }
        self.transactional.validate()
    }
}

impl TransactionalConfig {
    fn validate(&self) -> Result<(), Error> {
        for (key, value) in [
            ("relay.transactional.max_records", self.max_records),
            ("relay.transactional.max_bytes", self.max_bytes),
            ("relay.transactional.max_ms", self.max_ms as usize),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be positive"));
            }
        }
        if let Some(id) = &self.id {
            non_empty("relay.transactional.id", id)?;
        }
        if !outbox::is_legal_topic_name(&self.progress_topic) {
            return Err(invalid(
                "relay.transactional.progress_topic",
                "may only hold ASCII letters, digits, '.', '_' and '-'",
            ));
        }
        Ok(())
    }
}

/// What each key of `[relay]` and `[relay.transactional]` means, written beside the keys: the
/// configuration reference is generated from it, and a test fails when a
/// key has none.
pub(crate) const MEANINGS: &[(&str, &str)] = &[
    ("relay.mark_published", "record published rows in the journal before the slot passes them, and mark them `PUBLISHED` with `published_at` (only where the row is still `PENDING`) when the relay keeps up; `false` leaves every row `PENDING`"),
    ("relay.drain_timeout_secs", "on SIGTERM/SIGINT, how long in-flight messages may take to settle"),
    ("relay.max_in_flight_messages", "backpressure: messages not yet acknowledged by Kafka (bounds memory, about 3 KiB each with 500-byte payloads: a 100-row drain peaked at 30 MiB with 2 500, 51 MiB with 10 000; 2 500 cover 25 000 msg/s at 100 ms acknowledgement latency, 250 000 at 10 ms; raise it for many destinations or a distant cluster)"),
    ("relay.max_in_flight_bytes", "backpressure: bytes not yet acknowledged by Kafka"),
    ("relay.create_slot", "create `postgres.slot` when it is missing; normally `cutover` creates it (and hands the backlog over)"),
    ("relay.operator_error_threshold", "records the broker refuses for an operator's reason (`TOPIC_AUTHORIZATION_FAILED`, `TOPIC_UNKNOWN`, `POLICY_VIOLATION`) in one session before it ends; the relay then retries with backoff and marks no row `FAILED` for them"),
    ("relay.delivery", "`idempotent` (at least once) or `transactional` (each source transaction whole and once for read_committed consumers); see [Delivery modes](../concepts/delivery-modes.md)"),
    ("relay.heartbeat_interval_secs", "write a transactional `pg_logical_emit_message` this often, for servers whose WAL is written by activity the relay never sees (see [the heartbeat](../operating/monitoring.md#the-slot-guard-and-the-heartbeat)); the role needs `EXECUTE` on it (`check` says)"),
    ("relay.pgoutput_binary", "on PostgreSQL 14+, ask pgoutput for values in binary form: the walsender skips the text output of `bytea` (hex, twice the size), `uuid` and `timestamptz`, and the relay their parsing; ignored before 14"),
    ("relay.slot_check_interval_secs", "how often the slot guard reads the slot's figures (and probes Kafka for readiness)"),
    ("relay.kafka_stall_secs", "when Kafka acknowledges none of the records in flight for this long, `/readyz` answers 503 and says so (a cluster that cannot meet `min.insync.replicas` answers metadata requests but takes no write); librdkafka keeps retrying them until `message.timeout.ms`. In idempotent delivery a partition held this long (a cut link, a frozen leader) leaves `/readyz` at 200 with `ready, degraded` and the partitions in its body, and is a problem for `status`"),
    ("relay.slot_wal_margin_bytes", "the slot guard warns (`SLOT_WAL_AT_RISK`) and `check` warns when the slot's `safe_wal_size` is under this"),
    ("relay.when_caught_up", "`send` (the default): once the relay has read all the WAL there is, records go out at once, and `kafka.properties`' `linger.ms` batches a backlog only; `linger`: they wait out `linger.ms` too (fewer, larger produce requests on a busy stream, for that much latency); see [the benchmark](../benchmark.md)"),
    ("relay.role", "`relay` (the default): the outbox's one relay, which claims an undeclared outbox at its first start and is refused (`OUTBOX_HELD_BY_ANOTHER_SLOT`) on a slot the outbox's declaration does not name; `copy`: a copy on a slot of its own that records nothing (needs `mark_published = false`), such as the shadow run beside Debezium that `audit --beside` compares: declared as a copy at start, never the outbox's relay, never counted by `SECOND_OUTBOX_READER`"),
    ("relay.transactional.id", "transactional: the producer's `transactional.id` and the group of its progress; one per relay (per outbox and slot), since a relay that starts with it fences the one before: set it when relays of two clusters with the same database and slot names share a Kafka cluster"),
    ("relay.transactional.max_records", "transactional group commit: a Kafka transaction closes at the first source transaction boundary past this many records,"),
    ("relay.transactional.max_bytes", "or this many record bytes,"),
    ("relay.transactional.max_ms", "or this age"),
    ("relay.transactional.progress_topic", "transactional: the topic (one partition, created when missing, never written) whose committed offset under the transactional id holds the progress"),
];
