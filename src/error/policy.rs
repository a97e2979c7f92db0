//! The one retry policy: what follows a failure, decided here and nowhere
//! else, from the code and, for one refused record, the delivery mode.
//!
//! - [`for_code`]: what the relay does after a failure ended a session (the
//!   supervisor obeys it; the recorder retries a journal write only when it
//!   says [`Directive::Retry`]).
//! - [`next`]: what a session does with a failure that settlement reports
//!   (a record refused for good, a delivery that failed otherwise): record
//!   the row FAILED, hold it, or end the session.
//!
//! The error-code reference (`docs/reference/error-codes.md`) shows each
//! code's directive, and its refusal where the delivery modes differ,
//! generated from here.

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

    /// How much a reason to end a session weighs against another: the
    /// heaviest is the one the session ends with.
    pub const fn weight(self) -> u8 {
        match self {
            Directive::Fatal => 3,
            Directive::Stop => 2,
            Directive::AwaitOperator => 1,
            _ => 0,
        }
    }
}

/// The delivery mode: what follows one refused record depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// At least once, each record settled by its own report.
    Idempotent,
    /// Source transactions in Kafka transactions, settled at the commit.
    Transactional,
}

impl Mode {
    pub const ALL: [Mode; 2] = [Mode::Idempotent, Mode::Transactional];

    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Idempotent => "idempotent",
            Mode::Transactional => "transactional",
        }
    }
}

/// A failure as settlement reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// One record definitely not stored (refused by the mapper, by its
    /// topic's known limit or by the broker).
    Refused(Code),
    /// Anything else: a delivery that may pass or may have been stored, a
    /// call that failed.
    Failed(Code),
}

/// What a session does with a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The row's own fault: it is recorded FAILED and settles; the stream
    /// goes on (a refusal by the broker stops the producer, so the session
    /// then ends and the next publishes again without the row).
    RecordFailed,
    /// An operator's fault the relay outwaits (idempotent delivery): the
    /// row holds the slot and the session goes on, until
    /// `relay.operator_error_threshold` such refusals end it.
    Hold,
    /// The session ends; the directive says what follows.
    End(Directive),
}

/// The directive for `code`, after it ended a session.
pub const fn for_code(code: Code) -> Directive {
    match code {
        Code::SLOT_IN_USE => Directive::Standby,
        // Every row to the topic would meet them, and an operator can lift
        // them while the relay runs: whether a delivery report, a
        // transaction's commit or the progress read surfaced them.
        Code::TOPIC_AUTHORIZATION_FAILED
        | Code::KAFKA_NOT_AUTHORIZED
        | Code::TOPIC_UNKNOWN
        | Code::TOPIC_NOT_CREATED
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

/// What a session does with `failure` in `mode`. A failure that is not a
/// definite refusal ends the session whatever its code: only a record
/// known not to be stored may be recorded FAILED or held.
pub const fn next(failure: Failure, mode: Mode) -> Next {
    let code = match failure {
        Failure::Refused(code) => code,
        Failure::Failed(code) => return Next::End(for_code(code)),
    };
    match (for_code(code), mode) {
        (Directive::RecordFailed, _) => Next::RecordFailed,
        // A Kafka transaction cannot commit without the record: it ends at
        // once, and the next session publishes it again.
        (Directive::AwaitOperator, Mode::Idempotent) => Next::Hold,
        (d, _) => Next::End(d),
    }
}

/// What the reference says a refused record of `code` gets, where the
/// delivery modes differ: `None` where they agree with the directive.
pub fn refusal_note(code: Code) -> Option<String> {
    let [idempotent, transactional] = Mode::ALL.map(|m| next(Failure::Refused(code), m));
    if idempotent == transactional {
        return None;
    }
    let say = |n: Next| match n {
        Next::RecordFailed => "record FAILED".to_string(),
        Next::Hold => format!(
            "held until `relay.operator_error_threshold` refusals, then {}",
            for_code(code).as_str()
        ),
        Next::End(d) => format!("{} at once", d.as_str()),
    };
    Some(format!(
        "a refused record: {}, {}; {}, {}",
        Mode::Idempotent.as_str(),
        say(idempotent),
        Mode::Transactional.as_str(),
        say(transactional)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every code's directive, written out: a code added to `codes!` fails
    /// here until someone decides what the relay does after it.
    /// Every code's directive after it ended a session, then what a
    /// record refused with it gets in idempotent and in transactional
    /// delivery (`R`: record FAILED, `H`: hold, `end(d)`: end the session),
    /// written out: a code added to `codes!` fails here until someone
    /// decides what the relay does after it.
    const EXPECTED: &[(&str, Directive, Next, Next)] = {
        use Directive::*;
        const R: Next = Next::RecordFailed;
        const H: Next = Next::Hold;
        const fn end(d: Directive) -> Next {
            Next::End(d)
        }
        &[
            ("CONFIG_UNREADABLE", Stop, end(Stop), end(Stop)),
            ("CONFIG_SYNTAX", Stop, end(Stop), end(Stop)),
            ("CONFIG_UNKNOWN_KEY", Stop, end(Stop), end(Stop)),
            ("CONFIG_MISSING_KEY", Stop, end(Stop), end(Stop)),
            ("CONFIG_INVALID_VALUE", Stop, end(Stop), end(Stop)),
            ("CONFIG_SECRET_IN_FILE", Stop, end(Stop), end(Stop)),
            ("CONFIG_SECRET_UNAVAILABLE", Stop, end(Stop), end(Stop)),
            ("CONFIG_REFERENCE_UNAVAILABLE", Stop, end(Stop), end(Stop)),
            ("PG_CONNECT_FAILED", Retry, end(Retry), end(Retry)),
            ("PG_CONNECTION_LOST", Retry, end(Retry), end(Retry)),
            ("PG_TLS_REFUSED", Stop, end(Stop), end(Stop)),
            ("PG_TLS_FAILED", Stop, end(Stop), end(Stop)),
            ("PG_AUTH_FAILED", Stop, end(Stop), end(Stop)),
            ("PG_AUTH_UNSUPPORTED", Stop, end(Stop), end(Stop)),
            ("PG_PERMISSION_DENIED", Stop, end(Stop), end(Stop)),
            ("PG_PRIVILEGE_MISSING", Stop, end(Stop), end(Stop)),
            ("PG_PROTOCOL", Retry, end(Retry), end(Retry)),
            ("PG_STATEMENT_CONFLICT", Retry, end(Retry), end(Retry)),
            ("PG_QUERY_FAILED", Stop, end(Stop), end(Stop)),
            ("PG_SERVER_ERROR", Stop, end(Stop), end(Stop)),
            ("PG_WAL_LEVEL_NOT_LOGICAL", Stop, end(Stop), end(Stop)),
            ("PG_ENCODING_UNSUPPORTED", Stop, end(Stop), end(Stop)),
            ("SLOTS_EXHAUSTED", Stop, end(Stop), end(Stop)),
            ("WAL_SENDERS_EXHAUSTED", Stop, end(Stop), end(Stop)),
            ("UNLIMITED_SLOT_WAL", Stop, end(Stop), end(Stop)),
            ("PUBLICATION_MISSING", Stop, end(Stop), end(Stop)),
            ("PUBLICATION_MISSING_TABLE", Stop, end(Stop), end(Stop)),
            ("PUBLICATION_NOT_INSERT_ONLY", Stop, end(Stop), end(Stop)),
            ("ROUTING_KEY_MISSING", Stop, end(Stop), end(Stop)),
            ("ROUTING_KEY_GENERATED", Stop, end(Stop), end(Stop)),
            ("ROUTING_KEY_TRIGGER_MISSING", Stop, end(Stop), end(Stop)),
            ("CONSTRAINT_MISSING", Stop, end(Stop), end(Stop)),
            ("CONSTRAINT_NOT_VALIDATED", Stop, end(Stop), end(Stop)),
            ("OUTBOX_SCHEMA_DRIFT", Stop, end(Stop), end(Stop)),
            ("OUTBOX_COLUMN_NULLABILITY", Stop, end(Stop), end(Stop)),
            ("CONTRACT_OPTION_INVALID", Stop, end(Stop), end(Stop)),
            ("CONTRACT_COLUMN_MISSING", Stop, end(Stop), end(Stop)),
            ("CONTRACT_COLUMN_TYPE", Stop, end(Stop), end(Stop)),
            ("IMPORT_UNREADABLE", Stop, end(Stop), end(Stop)),
            ("IMPORT_NOT_POSTGRES", Stop, end(Stop), end(Stop)),
            ("IMPORT_PLUGIN_UNSUPPORTED", Stop, end(Stop), end(Stop)),
            ("IMPORT_TRANSFORM_CHAIN", Stop, end(Stop), end(Stop)),
            ("IMPORT_PREDICATE", Stop, end(Stop), end(Stop)),
            ("IMPORT_CONVERTER_UNSUPPORTED", Stop, end(Stop), end(Stop)),
            ("CONVERTER_NEEDS_REGISTRY", Stop, end(Stop), end(Stop)),
            ("IMPORT_NAMES_ADJUSTED", Stop, end(Stop), end(Stop)),
            ("IMPORT_OPTION_UNSUPPORTED", Stop, end(Stop), end(Stop)),
            ("IMPORT_NOT_KAFKA", Stop, end(Stop), end(Stop)),
            ("IMPORT_VALUE_AT_DEPLOY", Stop, end(Stop), end(Stop)),
            ("IMPORT_SEVERAL_CONNECTORS", Stop, end(Stop), end(Stop)),
            ("IMPORT_TABLE_UNNAMED", Stop, end(Stop), end(Stop)),
            ("IMPORT_SECRET_LITERAL", Stop, end(Stop), end(Stop)),
            ("CONTRACT_NOT_STREAMED", Stop, end(Stop), end(Stop)),
            ("OUTBOX_UPDATE_REFUSED", Stop, end(Stop), end(Stop)),
            ("SLOT_MISSING", Stop, end(Stop), end(Stop)),
            ("PG_FEATURE_UNAVAILABLE", Stop, end(Stop), end(Stop)),
            ("FAILOVER_NOT_READY", Stop, end(Stop), end(Stop)),
            ("SLOT_INACTIVE", Stop, end(Stop), end(Stop)),
            ("PARTITION_HELD", Stop, end(Stop), end(Stop)),
            ("ROWS_FAILED", Stop, end(Stop), end(Stop)),
            ("SLOT_WRONG_PLUGIN", Stop, end(Stop), end(Stop)),
            ("SLOT_WRONG_DATABASE", Stop, end(Stop), end(Stop)),
            ("SLOT_NOT_LOGICAL", Stop, end(Stop), end(Stop)),
            ("SLOT_INVALIDATED", Stop, end(Stop), end(Stop)),
            ("SLOT_WAL_AT_RISK", Stop, end(Stop), end(Stop)),
            ("SLOT_IN_USE", Standby, end(Standby), end(Standby)),
            ("PGOUTPUT_MALFORMED", Stop, end(Stop), end(Stop)),
            ("DUPLICATE_OUTBOX_RELAY", Stop, end(Stop), end(Stop)),
            ("NO_OUTBOX_RELAY", Stop, end(Stop), end(Stop)),
            ("OUTBOX_HELD_BY_ANOTHER_SLOT", Stop, end(Stop), end(Stop)),
            ("SECOND_OUTBOX_READER", Stop, end(Stop), end(Stop)),
            ("DECLARATION_MISSING", Stop, end(Stop), end(Stop)),
            ("OUTBOX_READER_UNCERTAIN", Stop, end(Stop), end(Stop)),
            ("LEASE_WAIT_TIMEOUT", Stop, end(Stop), end(Stop)),
            ("CDC_RELAY_RUNNING", Stop, end(Stop), end(Stop)),
            ("SLOT_EXISTS_BEFORE_CUTOVER", Stop, end(Stop), end(Stop)),
            ("TAKEOVER_SLOT_MISSING", Stop, end(Stop), end(Stop)),
            ("CONNECTOR_NOT_STOPPED", Stop, end(Stop), end(Stop)),
            ("CONNECT_REST_FAILED", Stop, end(Stop), end(Stop)),
            ("CONNECT_TLS_FAILED", Stop, end(Stop), end(Stop)),
            ("OFFSET_INVALID", Stop, end(Stop), end(Stop)),
            ("OFFSET_FILE_INVALID", Stop, end(Stop), end(Stop)),
            ("HANDOVER_INCOMPLETE", Stop, end(Stop), end(Stop)),
            ("HANDOVER_FAILED", Stop, end(Stop), end(Stop)),
            ("RECOVERY_REFUSED", Stop, end(Stop), end(Stop)),
            ("ROW_MARKING_FAILED", Stop, end(Stop), end(Stop)),
            ("DEAD_LETTER_FAILED", Stop, end(Stop), end(Stop)),
            ("DEAD_LETTER_MISSING", Stop, end(Stop), end(Stop)),
            ("STATUS_NOT_KEPT", Stop, end(Stop), end(Stop)),
            ("REDRIVE_INCOMPLETE", Stop, end(Stop), end(Stop)),
            ("REPLAY_INCOMPLETE", Stop, end(Stop), end(Stop)),
            ("REPLAY_WINDOW_PURGED", Stop, end(Stop), end(Stop)),
            ("PURGE_SLOT_BEHIND", Retry, end(Retry), end(Retry)),
            ("MIGRATION_TEMPLATE", Stop, end(Stop), end(Stop)),
            ("MIGRATION_CHECKSUM_MISMATCH", Stop, end(Stop), end(Stop)),
            ("MIGRATION_FAILED", Stop, end(Stop), end(Stop)),
            ("KAFKA_CONFIG_INVALID", Stop, end(Stop), end(Stop)),
            ("KAFKA_UNREACHABLE", Retry, end(Retry), end(Retry)),
            ("KAFKA_AUTH_FAILED", Stop, end(Stop), end(Stop)),
            ("KAFKA_NOT_AUTHORIZED", AwaitOperator, H, end(AwaitOperator)),
            ("KAFKA_TLS_FAILED", Stop, end(Stop), end(Stop)),
            ("KAFKA_PRODUCE_FAILED", Retry, end(Retry), end(Retry)),
            ("KAFKA_DELIVERY_AMBIGUOUS", Retry, end(Retry), end(Retry)),
            ("KAFKA_PRODUCER_FENCED", Fatal, end(Fatal), end(Fatal)),
            ("KAFKA_TRANSACTION_ABORTED", Retry, end(Retry), end(Retry)),
            (
                "KAFKA_TRANSACTION_OUTCOME_UNKNOWN",
                Retry,
                end(Retry),
                end(Retry),
            ),
            ("KAFKA_STALLED", Retry, end(Retry), end(Retry)),
            ("TOPIC_MISSING", Stop, end(Stop), end(Stop)),
            ("TOPIC_NOT_SERVED", Retry, end(Retry), end(Retry)),
            ("BATCH_OVER_TOPIC_LIMIT", Retry, end(Retry), end(Retry)),
            ("TOPIC_LIMIT_UNKNOWN", AwaitOperator, H, end(AwaitOperator)),
            (
                "TOPIC_AUTHORIZATION_FAILED",
                AwaitOperator,
                H,
                end(AwaitOperator),
            ),
            ("TOPIC_UNKNOWN", AwaitOperator, H, end(AwaitOperator)),
            ("TOPIC_NOT_CREATED", AwaitOperator, H, end(AwaitOperator)),
            ("PLUGIN_MISSING", Stop, end(Stop), end(Stop)),
            ("POLICY_VIOLATION", AwaitOperator, H, end(AwaitOperator)),
            ("MESSAGE_TOO_LARGE", RecordFailed, R, R),
            ("INVALID_TOPIC", RecordFailed, R, R),
            ("INVALID_RECORD", RecordFailed, R, R),
            ("INVALID_TIMESTAMP", RecordFailed, R, R),
            ("HEADERS_NOT_FLAT", RecordFailed, R, R),
            ("RESERVED_HEADER_NAME", RecordFailed, R, R),
            ("ILLEGAL_TOPIC_NAME", RecordFailed, R, R),
            ("HEADER_UNENCODABLE", RecordFailed, R, R),
            ("PAYLOAD_NOT_REPRODUCED", RecordFailed, R, R),
            ("ROW_UNDECODABLE", RecordFailed, R, R),
            ("ROW_SHAPE_MISMATCH", RecordFailed, R, R),
            ("ROW_UNIDENTIFIABLE", Stop, end(Stop), end(Stop)),
            ("HTTP_LISTEN_FAILED", Stop, end(Stop), end(Stop)),
            ("INTERNAL", Fatal, end(Fatal), end(Fatal)),
            ("OUTPUT_UNWRITABLE", Stop, end(Stop), end(Stop)),
            ("UNHEALTHY", Stop, end(Stop), end(Stop)),
            ("ARGUMENT_INVALID", Stop, end(Stop), end(Stop)),
            ("AUDIT_LOST", Stop, end(Stop), end(Stop)),
            ("AUDIT_MISMATCH", Stop, end(Stop), end(Stop)),
        ]
    };

    #[test]
    fn every_code_has_the_directive_written_for_it() {
        assert_eq!(Code::ALL.len(), EXPECTED.len(), "a code without a row here");
        for code in Code::ALL {
            let Some((_, want, idempotent, transactional)) =
                EXPECTED.iter().find(|(name, ..)| code == name)
            else {
                panic!("{code} has no row in EXPECTED");
            };
            assert_eq!(for_code(*code), *want, "{code}");
            assert_eq!(
                next(Failure::Refused(*code), Mode::Idempotent),
                *idempotent,
                "{code} refused, idempotent"
            );
            assert_eq!(
                next(Failure::Refused(*code), Mode::Transactional),
                *transactional,
                "{code} refused, transactional"
            );
            for mode in Mode::ALL {
                assert_eq!(
                    next(Failure::Failed(*code), mode),
                    Next::End(*want),
                    "{code}: a failure that is not a refusal ends the session"
                );
            }
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

    #[test]
    fn the_reference_names_the_modes_only_where_they_differ() {
        assert_eq!(refusal_note(Code::MESSAGE_TOO_LARGE), None);
        assert_eq!(refusal_note(Code::PG_CONNECTION_LOST), None);
        assert_eq!(
            refusal_note(Code::TOPIC_UNKNOWN).as_deref(),
            Some("a refused record: idempotent, held until `relay.operator_error_threshold` refusals, then await operator; transactional, await operator at once")
        );
    }
}
