//! The one retry policy: what the relay does after a failure ended a
//! session, decided from the error's code alone. The supervisor obeys it and
//! nothing else decides; the error-code reference
//! (`docs/reference/error-codes.md`) shows each code's directive, generated
//! from here.

use super::{Class, Code, Error};

/// What happens after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Directive {
    /// Passing (the network, a restart, overload): a new session from the
    /// last settled position after a backoff.
    Retry,
    /// An operator must act, and the relay sees by itself when they have (an
    /// ACL granted, a topic created, a policy changed): not ready, logged at
    /// error level, a new session after a backoff. Nothing is marked FAILED
    /// and the slot holds before the refused rows.
    AwaitOperator,
    /// One row's data: the row is recorded FAILED with the code and the
    /// stream goes on. Should such an error ever end a session (before the
    /// row was recorded), the next session records it: a retry.
    RecordFailed,
    /// Another relay streams from the slot: wait as a standby and take over
    /// when it is free.
    Standby,
    /// An operator must act before the relay can do anything useful
    /// (configuration, credentials, schema, ownership): the process stops.
    Stop,
    /// This process must never publish again (another producer fenced it) or
    /// is broken (`INTERNAL`): it stops, and this outranks whatever else
    /// ended the session.
    Fatal,
}

impl Directive {
    /// As the error-code reference writes it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Directive::Retry => "retry",
            Directive::AwaitOperator => "await operator",
            Directive::RecordFailed => "record FAILED",
            Directive::Standby => "standby",
            Directive::Stop => "stop",
            Directive::Fatal => "stop (fatal)",
        }
    }

    /// Whether the supervisor starts another session.
    pub const fn restarts(self) -> bool {
        matches!(
            self,
            Directive::Retry
                | Directive::AwaitOperator
                | Directive::RecordFailed
                | Directive::Standby
        )
    }
}

/// The directive for `code`.
pub const fn for_code(code: Code) -> Directive {
    match code {
        Code::SLOT_IN_USE => Directive::Standby,
        // Every row to the topic would meet them, and an operator can lift
        // them while the relay runs: whether a delivery report, a
        // transaction's commit or the progress read surfaced them.
        Code::TOPIC_AUTHORIZATION_FAILED
        | Code::KAFKA_NOT_AUTHORIZED
        | Code::TOPIC_UNKNOWN
        | Code::POLICY_VIOLATION
        | Code::TOPIC_LIMIT_UNKNOWN => Directive::AwaitOperator,
        Code::KAFKA_PRODUCER_FENCED | Code::INTERNAL => Directive::Fatal,
        _ => match code.class() {
            Class::Transient => Directive::Retry,
            Class::Row => Directive::RecordFailed,
            Class::Operator => Directive::Stop,
        },
    }
}

/// The directive for `e`.
pub fn directive(e: &Error) -> Directive {
    for_code(e.code())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every code's directive, written out: a code added to `codes!` fails
    /// here until someone decides what the relay does after it.
    const EXPECTED: &[(&str, Directive)] = {
        use Directive::*;
        &[
            ("CONFIG_UNREADABLE", Stop),
            ("CONFIG_SYNTAX", Stop),
            ("CONFIG_UNKNOWN_KEY", Stop),
            ("CONFIG_MISSING_KEY", Stop),
            ("CONFIG_INVALID_VALUE", Stop),
            ("CONFIG_SECRET_IN_FILE", Stop),
            ("CONFIG_SECRET_UNAVAILABLE", Stop),
            ("PG_CONNECT_FAILED", Retry),
            ("PG_CONNECTION_LOST", Retry),
            ("PG_TLS_REFUSED", Stop),
            ("PG_TLS_FAILED", Stop),
            ("PG_AUTH_FAILED", Stop),
            ("PG_AUTH_UNSUPPORTED", Stop),
            ("PG_PERMISSION_DENIED", Stop),
            ("PG_PRIVILEGE_MISSING", Stop),
            ("PG_PROTOCOL", Retry),
            ("PG_QUERY_FAILED", Stop),
            ("PG_SERVER_ERROR", Stop),
            ("PG_WAL_LEVEL_NOT_LOGICAL", Stop),
            ("PG_ENCODING_UNSUPPORTED", Stop),
            ("SLOTS_EXHAUSTED", Stop),
            ("WAL_SENDERS_EXHAUSTED", Stop),
            ("UNLIMITED_SLOT_WAL", Stop),
            ("PUBLICATION_MISSING", Stop),
            ("PUBLICATION_MISSING_TABLE", Stop),
            ("PUBLICATION_NOT_INSERT_ONLY", Stop),
            ("ROUTING_KEY_MISSING", Stop),
            ("ROUTING_KEY_GENERATED", Stop),
            ("ROUTING_KEY_TRIGGER_MISSING", Stop),
            ("CONSTRAINT_MISSING", Stop),
            ("CONSTRAINT_NOT_VALIDATED", Stop),
            ("OUTBOX_SCHEMA_DRIFT", Stop),
            ("OUTBOX_COLUMN_NULLABILITY", Stop),
            ("SLOT_MISSING", Stop),
            ("PG_FEATURE_UNAVAILABLE", Stop),
            ("FAILOVER_NOT_READY", Stop),
            ("SLOT_WRONG_PLUGIN", Stop),
            ("SLOT_WRONG_DATABASE", Stop),
            ("SLOT_NOT_LOGICAL", Stop),
            ("SLOT_INVALIDATED", Stop),
            ("SLOT_WAL_AT_RISK", Stop),
            ("SLOT_IN_USE", Standby),
            ("PGOUTPUT_MALFORMED", Stop),
            ("DUPLICATE_OUTBOX_RELAY", Stop),
            ("NO_OUTBOX_RELAY", Stop),
            ("LEASE_WAIT_TIMEOUT", Stop),
            ("CDC_RELAY_RUNNING", Stop),
            ("SLOT_EXISTS_BEFORE_CUTOVER", Stop),
            ("HANDOVER_INCOMPLETE", Stop),
            ("HANDOVER_FAILED", Stop),
            ("RECOVERY_REFUSED", Stop),
            ("ROW_MARKING_FAILED", Stop),
            ("REDRIVE_INCOMPLETE", Stop),
            ("REPLAY_INCOMPLETE", Stop),
            ("REPLAY_WINDOW_PURGED", Stop),
            ("PURGE_SLOT_BEHIND", Retry),
            ("MIGRATION_TEMPLATE", Stop),
            ("MIGRATION_CHECKSUM_MISMATCH", Stop),
            ("MIGRATION_FAILED", Stop),
            ("KAFKA_CONFIG_INVALID", Stop),
            ("KAFKA_UNREACHABLE", Retry),
            ("KAFKA_AUTH_FAILED", Stop),
            ("KAFKA_NOT_AUTHORIZED", AwaitOperator),
            ("KAFKA_TLS_FAILED", Stop),
            ("KAFKA_PRODUCE_FAILED", Retry),
            ("KAFKA_DELIVERY_AMBIGUOUS", Retry),
            ("KAFKA_PRODUCER_FENCED", Fatal),
            ("KAFKA_TRANSACTION_ABORTED", Retry),
            ("KAFKA_TRANSACTION_OUTCOME_UNKNOWN", Retry),
            ("TOPIC_MISSING", Stop),
            ("TOPIC_NOT_SERVED", Retry),
            ("BATCH_OVER_TOPIC_LIMIT", Retry),
            ("TOPIC_LIMIT_UNKNOWN", AwaitOperator),
            ("TOPIC_AUTHORIZATION_FAILED", AwaitOperator),
            ("TOPIC_UNKNOWN", AwaitOperator),
            ("POLICY_VIOLATION", AwaitOperator),
            ("MESSAGE_TOO_LARGE", RecordFailed),
            ("INVALID_TOPIC", RecordFailed),
            ("INVALID_RECORD", RecordFailed),
            ("HEADERS_NOT_FLAT", RecordFailed),
            ("RESERVED_HEADER_NAME", RecordFailed),
            ("ILLEGAL_TOPIC_NAME", RecordFailed),
            ("HEADER_UNENCODABLE", RecordFailed),
            ("ROW_UNDECODABLE", RecordFailed),
            ("ROW_SHAPE_MISMATCH", RecordFailed),
            ("ROW_UNIDENTIFIABLE", Stop),
            ("HTTP_LISTEN_FAILED", Stop),
            ("INTERNAL", Fatal),
            ("OUTPUT_UNWRITABLE", Stop),
            ("UNHEALTHY", Stop),
            ("ARGUMENT_INVALID", Stop),
            ("AUDIT_LOST", Stop),
            ("AUDIT_MISMATCH", Stop),
        ]
    };

    #[test]
    fn every_code_has_the_directive_written_for_it() {
        assert_eq!(Code::ALL.len(), EXPECTED.len(), "a code without a row here");
        for code in Code::ALL {
            let Some((_, want)) = EXPECTED.iter().find(|(name, _)| code == name) else {
                panic!("{code} has no row in EXPECTED");
            };
            assert_eq!(for_code(*code), *want, "{code}");
            assert_eq!(
                directive(&Error::new(*code, "x")),
                *want,
                "{code}: the error's directive is its code's"
            );
        }
    }

    #[test]
    fn an_authorization_refusal_awaits_the_operator_wherever_it_surfaces() {
        // A delivery report, a commit and the progress read all name a
        // missing ACL with one of these; none stops the relay.
        for code in [Code::TOPIC_AUTHORIZATION_FAILED, Code::KAFKA_NOT_AUTHORIZED] {
            assert_eq!(for_code(code), Directive::AwaitOperator, "{code}");
            assert!(for_code(code).restarts());
        }
        // A wrong password is not an ACL: nothing changes until the
        // configuration does.
        assert_eq!(for_code(Code::KAFKA_AUTH_FAILED), Directive::Stop);
        assert!(!Directive::Fatal.restarts() && !Directive::Stop.restarts());
    }
}
