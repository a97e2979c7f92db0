//! The one error model: every failure carries a stable code, and every code
//! carries the class that decides what happens next.
//!
//! Codes are named exactly as operators see them (`Code::PG_AUTH_FAILED`
//! prints `PG_AUTH_FAILED`), so searching the source for a code from a log
//! line lands where it is raised. Errors are classified where they are made,
//! from SQLSTATEs and typed client errors, never from message text: a server
//! with `lc_messages` in another language must give the same codes.
//!
//! What happens after a failure is decided in one place, [`policy`], from
//! the code alone.

pub mod policy;

use std::fmt;

/// What a failure asks of the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// Passing (network, restart, overload): the relay retries with backoff.
    Transient,
    /// Needs an operator (configuration, permissions, schema): the relay stops.
    Operator,
    /// One row's data: the row is recorded as FAILED and the stream goes on.
    Row,
}

macro_rules! codes {
    ($($(#[$doc:meta])* $code:ident => $class:ident,)*) => {
        /// Every stable code, with its class.
        #[allow(non_camel_case_types)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Code {
            $($(#[$doc])* $code,)*
        }

        impl Code {
            pub const ALL: &'static [Code] = &[$(Code::$code,)*];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Code::$code => stringify!($code),)*
                }
            }

            pub const fn class(self) -> Class {
                match self {
                    $(Code::$code => Class::$class,)*
                }
            }
        }
    };
}

codes! {
    // Configuration.
    CONFIG_UNREADABLE => Operator,
    CONFIG_SYNTAX => Operator,
    CONFIG_UNKNOWN_KEY => Operator,
    CONFIG_MISSING_KEY => Operator,
    CONFIG_INVALID_VALUE => Operator,
    CONFIG_SECRET_IN_FILE => Operator,
    CONFIG_SECRET_UNAVAILABLE => Operator,

    // PostgreSQL connections.
    /// Cannot connect (refused, timed out, server starting, too many connections).
    PG_CONNECT_FAILED => Transient,
    /// An established connection broke or the server shut down.
    PG_CONNECTION_LOST => Transient,
    PG_TLS_REFUSED => Operator,
    PG_TLS_FAILED => Operator,
    /// Wrong password, unknown role, or no `pg_hba.conf` entry.
    PG_AUTH_FAILED => Operator,
    PG_AUTH_UNSUPPORTED => Operator,
    /// E.g. the role lacks `REPLICATION`.
    PG_PERMISSION_DENIED => Operator,
    /// The role lacks a table privilege the relay needs (the message names
    /// it and the `GRANT` that fixes it).
    PG_PRIVILEGE_MISSING => Operator,
    /// Bytes from the server the client does not understand.
    PG_PROTOCOL => Transient,
    /// A statement the server refused, with its SQLSTATE.
    PG_QUERY_FAILED => Operator,
    /// A replication command the server refused, with its SQLSTATE.
    PG_SERVER_ERROR => Operator,

    // Server settings and headroom.
    PG_WAL_LEVEL_NOT_LOGICAL => Operator,
    PG_ENCODING_UNSUPPORTED => Operator,
    SLOTS_EXHAUSTED => Operator,
    WAL_SENDERS_EXHAUSTED => Operator,
    /// Warning: `max_slot_wal_keep_size = -1`.
    UNLIMITED_SLOT_WAL => Operator,

    // The outbox's schema.
    PUBLICATION_MISSING => Operator,
    PUBLICATION_MISSING_TABLE => Operator,
    /// The publication must publish inserts, and only inserts.
    PUBLICATION_NOT_INSERT_ONLY => Operator,
    ROUTING_KEY_MISSING => Operator,
    ROUTING_KEY_GENERATED => Operator,
    ROUTING_KEY_TRIGGER_MISSING => Operator,
    CONSTRAINT_MISSING => Operator,
    /// Warning: a constraint exists but old rows were not validated.
    CONSTRAINT_NOT_VALIDATED => Operator,
    /// A contract column is missing or has a type the contract cannot encode.
    OUTBOX_SCHEMA_DRIFT => Operator,
    /// Warning: a column's nullability differs from the definition.
    OUTBOX_COLUMN_NULLABILITY => Operator,

    // The replication slot.
    SLOT_MISSING => Operator,
    /// A setting asks for what this PostgreSQL major does not offer
    /// (`postgres.failover_slot` before 17).
    PG_FEATURE_UNAVAILABLE => Operator,
    /// `postgres.failover_slot` is on but a promoted standby would not have
    /// the slot: what is missing is named.
    FAILOVER_NOT_READY => Operator,
    SLOT_WRONG_PLUGIN => Operator,
    SLOT_WRONG_DATABASE => Operator,
    SLOT_NOT_LOGICAL => Operator,
    /// The server removed WAL the slot needed; `cutover --to cdc --recover`
    /// makes a new slot and hands over every row not yet published.
    SLOT_INVALIDATED => Operator,
    /// Warning from the slot guard: `safe_wal_size` is under
    /// `relay.slot_wal_margin_bytes`.
    SLOT_WAL_AT_RISK => Operator,
    /// Another process streams from the slot; a relay waits as a standby.
    SLOT_IN_USE => Operator,
    PGOUTPUT_MALFORMED => Operator,

    // Relay exclusivity and cutover.
    DUPLICATE_OUTBOX_RELAY => Operator,
    NO_OUTBOX_RELAY => Operator,
    LEASE_WAIT_TIMEOUT => Operator,
    CDC_RELAY_RUNNING => Operator,
    SLOT_EXISTS_BEFORE_CUTOVER => Operator,
    HANDOVER_INCOMPLETE => Operator,
    HANDOVER_FAILED => Operator,
    /// `cutover --to cdc --recover` when there is nothing to recover (the
    /// slot is healthy) or the outbox was never cut over.
    RECOVERY_REFUSED => Operator,
    ROW_MARKING_FAILED => Operator,
    /// `redrive` stopped before every matching row was published (the
    /// rest stay FAILED).
    REDRIVE_INCOMPLETE => Operator,
    /// `replay` stopped before every row of the window was published, or
    /// the destination refused rows (their status is unchanged).
    REPLAY_INCOMPLETE => Operator,
    /// `replay`: `purge` has deleted rows of the window, so a replay would
    /// leave them out; nothing was published.
    REPLAY_WINDOW_PURGED => Operator,
    /// `purge`: a slot has not confirmed the purge's horizon in time (the
    /// relay is stopped or far behind); nothing was deleted.
    PURGE_SLOT_BEHIND => Transient,

    // Migrations.
    MIGRATION_TEMPLATE => Operator,
    MIGRATION_CHECKSUM_MISMATCH => Operator,
    MIGRATION_FAILED => Operator,

    // Kafka.
    KAFKA_CONFIG_INVALID => Operator,
    KAFKA_UNREACHABLE => Transient,
    /// SASL authentication failed: the credentials are wrong.
    KAFKA_AUTH_FAILED => Operator,
    /// The principal may not use its transactional id, its progress group
    /// or the cluster (an ACL): the relay waits until it is granted.
    KAFKA_NOT_AUTHORIZED => Operator,
    /// The TLS handshake with the cluster failed (e.g. a CA that does not
    /// match the brokers' certificates).
    KAFKA_TLS_FAILED => Operator,
    /// Not stored for a passing reason (queue timeout, broker down), or the
    /// producer's task failed: the session restarts and replays.
    KAFKA_PRODUCE_FAILED => Transient,
    /// Possibly stored: the session restarts and replays under the same ids.
    KAFKA_DELIVERY_AMBIGUOUS => Transient,
    /// Transactional delivery: another producer with the same
    /// `transactional.id` started; this relay stops and never publishes again.
    KAFKA_PRODUCER_FENCED => Operator,
    /// Transactional delivery: a Kafka transaction was aborted (none of its
    /// records is visible to read_committed consumers); the session
    /// restarts and publishes its source transactions again.
    KAFKA_TRANSACTION_ABORTED => Transient,
    /// Transactional delivery: a commit's outcome is unknown (it timed
    /// out); the next session learns it from the progress in Kafka.
    KAFKA_TRANSACTION_OUTCOME_UNKNOWN => Transient,
    TOPIC_MISSING => Operator,
    /// Warning: a new topic's partitions were not all served by their
    /// leaders in time (the cause says why); the relay produced anyway.
    TOPIC_NOT_SERVED => Transient,
    /// The broker refused a batch as too large although its records fit
    /// the topic on their own, or a topic's limit is below the producer's
    /// batch size: the session restarts and publishes them again in
    /// batches under the topic's limit (learned again). No row is FAILED.
    BATCH_OVER_TOPIC_LIMIT => Transient,
    /// The principal may not describe a topic's configuration
    /// (DESCRIBE_CONFIGS): its `max.message.bytes` is learned from the
    /// batches the broker refuses instead.
    TOPIC_LIMIT_UNKNOWN => Operator,

    // The broker refused a record for a reason of the operator's (an ACL, a
    // missing topic, a policy): no row is marked FAILED for it; the session
    // ends and the relay retries with backoff until it is fixed.
    TOPIC_AUTHORIZATION_FAILED => Operator,
    TOPIC_UNKNOWN => Operator,
    POLICY_VIOLATION => Operator,

    // One row: recorded as FAILED with the code.
    MESSAGE_TOO_LARGE => Row,
    INVALID_TOPIC => Row,
    INVALID_RECORD => Row,
    HEADERS_NOT_FLAT => Row,
    RESERVED_HEADER_NAME => Row,
    ILLEGAL_TOPIC_NAME => Row,
    HEADER_UNENCODABLE => Row,
    ROW_UNDECODABLE => Row,
    ROW_SHAPE_MISMATCH => Row,
    /// A row came without a decodable message id: it cannot be recorded
    /// FAILED, so the relay stops before the slot passes it.
    ROW_UNIDENTIFIABLE => Operator,

    // The process.
    /// `http.listen` cannot be bound.
    HTTP_LISTEN_FAILED => Operator,
    /// The runtime or a task of the relay failed.
    INTERNAL => Operator,
    /// Standard output or a file could not be written.
    OUTPUT_UNWRITABLE => Operator,
    /// `check` found errors.
    UNHEALTHY => Operator,
    /// A command-line argument is malformed (checked before anything
    /// connects).
    ARGUMENT_INVALID => Operator,
    /// `audit`: rows of the window are missing from Kafka.
    AUDIT_LOST => Operator,
    /// `audit`: records differ from their rows, are out of per-key order,
    /// or have no row.
    AUDIT_MISMATCH => Operator,
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<str> for Code {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

/// A failure: one code, then what happened with its cause beneath it (the
/// server's message and SQLSTATE, or the OS error), said once, and the typed
/// evidence the code was decided from, for logs and for the retry policy's
/// tests (never for deciding again from text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {detail}")]
pub struct Error {
    code: Code,
    detail: String,
    cause: Option<Cause>,
}

impl Error {
    pub fn new(code: Code, detail: impl Into<String>) -> Error {
        Error {
            code,
            detail: detail.into(),
            cause: None,
        }
    }

    /// The same error with its typed cause.
    pub fn caused_by(mut self, cause: Cause) -> Error {
        self.cause = Some(cause);
        self
    }

    pub fn code(&self) -> Code {
        self.code
    }

    pub fn class(&self) -> Class {
        self.code.class()
    }

    pub fn is_transient(&self) -> bool {
        self.class() == Class::Transient
    }

    /// The typed evidence beneath the code, when there is one.
    pub fn cause(&self) -> Option<&Cause> {
        self.cause.as_ref()
    }

    /// The message without its code (for reports that show the code apart).
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// Says what was being done when it failed.
    pub fn context(mut self, what: impl fmt::Display) -> Error {
        self.detail = format!("{what}: {}", self.detail);
        self
    }

    /// Adds what the operator most likely has to do.
    pub fn hint(mut self, what: impl fmt::Display) -> Error {
        self.detail = format!("{}. Hint: {what}", self.detail);
        self
    }

    /// Whether the typed cause is the OS refusing the connection.
    pub fn refused(&self) -> bool {
        matches!(
            self.cause,
            Some(Cause::Io(std::io::ErrorKind::ConnectionRefused))
        )
    }

    /// The same failure under another code, keeping its detail and cause
    /// (a failure whose meaning depends on where it happened).
    pub fn recoded(mut self, code: Code) -> Error {
        self.code = code;
        self
    }

    /// The configuration key whose value was refused.
    pub fn config_key(&self) -> Option<&str> {
        match &self.cause {
            Some(Cause::ConfigKey(k)) => Some(k),
            _ => None,
        }
    }

    /// The SQLSTATE beneath, for a log field.
    pub fn sqlstate(&self) -> Option<&str> {
        match &self.cause {
            Some(Cause::Sqlstate(s)) => Some(s),
            _ => None,
        }
    }

    /// librdkafka's code beneath, for a log field.
    pub fn kafka_error(&self) -> Option<String> {
        match &self.cause {
            Some(Cause::Kafka(c)) => Some(format!("{c:?}")),
            _ => None,
        }
    }

    /// The I/O error kind beneath, for a log field.
    pub fn io_error(&self) -> Option<String> {
        match &self.cause {
            Some(Cause::Io(kind)) => Some(format!("{kind:?}")),
            _ => None,
        }
    }

    /// rustls's refusal beneath, for a log field.
    pub fn tls_error(&self) -> Option<String> {
        match &self.cause {
            Some(Cause::Tls(e)) => Some(e.clone()),
            _ => None,
        }
    }
}

/// The typed evidence an error's code was decided from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// The server's SQLSTATE.
    Sqlstate(String),
    /// librdkafka's error code.
    Kafka(rdkafka::types::RDKafkaErrorCode),
    /// The operating system's kind of an I/O failure (a reset, a refusal,
    /// an end of file).
    Io(std::io::ErrorKind),
    /// rustls refused the peer (a certificate, a protocol, an alert), as
    /// rustls names it: `InvalidCertificate(UnknownIssuer)`.
    Tls(String),
    /// The configuration key whose value was refused (`relay.max_ms`), so
    /// the variable that set it can be named.
    ConfigKey(String),
}

/// Logs an [`Error`] at a level with its code and typed cause as fields
/// (`sqlstate`, `kafka_error`, `io_error`, `tls_error`; absent ones are left
/// out), then the caller's fields and message.
#[macro_export]
macro_rules! log_error {
    ($level:ident, $e:expr, $($rest:tt)+) => {{
        let e: &$crate::error::Error = &$e;
        tracing::$level!(
            code = %e.code(),
            sqlstate = e.sqlstate(),
            kafka_error = e.kafka_error(),
            io_error = e.io_error(),
            tls_error = e.tls_error(),
            error = %e,
            $($rest)+
        )
    }};
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `e` and every source beneath it, joined with `: `, each said once (some
/// errors repeat their source in their own message).
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_print_as_named_and_are_unique() {
        assert_eq!(Code::PG_AUTH_FAILED.to_string(), "PG_AUTH_FAILED");
        let mut names: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n);
        for name in names {
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'),
                "{name}"
            );
        }
    }

    #[test]
    fn an_error_shows_its_code_once_then_its_context_and_cause() {
        let e = Error::new(Code::PG_CONNECT_FAILED, "Connection refused (os error 111)")
            .context("cannot connect to 127.0.0.1:1");
        assert_eq!(
            e.to_string(),
            "PG_CONNECT_FAILED: cannot connect to 127.0.0.1:1: Connection refused (os error 111)"
        );
        assert_eq!(e.class(), Class::Transient);
        assert_eq!(e.code(), "PG_CONNECT_FAILED");
    }
}
