//! The preflight rules, one list: each rule with the codes it gives, how
//! severe each is, and which commands obey it. A [`Finding`] names its rule,
//! so no finding exists outside the list; `check` reports them all, and
//! `run` and every session (a standby's polls too) stop on the errors of the
//! rules they obey, reading [`Rule::obeyed_by`]. The rule table in the guide
//! (`docs/reference/preflight-rules.md`) is written from here.
//!
//! A leaf beside `finding`: the rules' facts and judgements live with their
//! subjects (`pg::checks`, `pg::grants`, `pg::failover`, `kafka::probe`).
//!
//! [`Finding`]: crate::finding::Finding

use crate::contract::outbox;
use crate::error::Code;

/// Who obeys a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// `outbox-cdc check` reports it.
    Check,
    /// `run` refuses to start on its error (so do `run --handover-only`,
    /// `redrive` and `replay`, which start a relay of their own).
    Start,
    /// Every session refuses to stream on its error, a standby's polls
    /// included; the retry policy decides what follows (`SLOT_IN_USE`: the
    /// relay waits as a standby).
    Session,
}

impl When {
    pub const ALL: [When; 3] = [When::Check, When::Start, When::Session];
}

/// How severe a code of a rule is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
    /// A warning in `check` (nothing streams yet), an error for a relay
    /// about to stream.
    ErrorWhenStreaming,
}

impl Severity {
    const fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::ErrorWhenStreaming => "warning in `check`, error when streaming",
        }
    }
}

use Severity::{Error as E, ErrorWhenStreaming as S, Warning as W};
use When::{Check as C, Session as Se, Start as St};

macro_rules! rules {
    ($($(#[$doc:meta])* $rule:ident => $name:expr, [$($code:ident: $sev:ident),*], [$($when:ident),*], $about:literal,)*) => {
        /// Every preflight rule.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Rule {
            $($(#[$doc])* $rule,)*
        }

        impl Rule {
            pub const ALL: &'static [Rule] = &[$(Rule::$rule,)*];

            /// As `check` prints it.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Rule::$rule => $name,)*
                }
            }

            /// The codes it gives, each with its severity. A failure to
            /// read its facts (a connection, a query) gives that failure's
            /// own code instead.
            pub const fn codes(self) -> &'static [(Code, Severity)] {
                match self {
                    $(Rule::$rule => &[$((Code::$code, $sev),)*],)*
                }
            }

            /// Who obeys it.
            pub const fn obeyed(self) -> &'static [When] {
                match self {
                    $(Rule::$rule => &[$($when,)*],)*
                }
            }

            /// What it holds the database or the cluster to.
            pub const fn about(self) -> &'static str {
                match self {
                    $(Rule::$rule => $about,)*
                }
            }
        }
    };
}

rules! {
    Postgres => "postgres", [], [C, St],
        "a SQL connection to the outbox's database, and the catalog reads every rule below needs",
    ServerVersion => "server_version", [], [C],
        "the server's version, and whether it has failover slots and publishes stored generated columns",
    WalLevel => "wal_level", [PG_WAL_LEVEL_NOT_LOGICAL: E], [C, Se],
        "`wal_level = logical`",
    Encoding => "encoding", [PG_ENCODING_UNSUPPORTED: E], [C, Se],
        "the database encoding is UTF8",
    SenderHeadroom => "sender_headroom", [WAL_SENDERS_EXHAUSTED: E], [C],
        "`max_wal_senders` leaves room for the relay",
    SlotWalKeep => "max_slot_wal_keep_size", [UNLIMITED_SLOT_WAL: W], [C],
        "retained WAL is bounded, so a stopped relay cannot fill the disk",
    Publication => "publication", [PUBLICATION_MISSING: E, PUBLICATION_MISSING_TABLE: E, PUBLICATION_NOT_INSERT_ONLY: E], [C, Se],
        "the publication exists, covers the outbox and publishes inserts only",
    Columns => "columns", [OUTBOX_SCHEMA_DRIFT: E, OUTBOX_COLUMN_NULLABILITY: W], [C],
        "every contract column is there with a type the contract can encode (a session checks the same in the stream: `OUTBOX_SCHEMA_DRIFT`)",
    Contract => "contract", [CONTRACT_COLUMN_MISSING: E, CONTRACT_COLUMN_TYPE: E, CONTRACT_OPTION_INVALID: E, CONTRACT_NOT_STREAMED: S], [C, St],
        "the outbox table fits the configured contract (`[outbox] contract`), each missing column or unfit type named; `check` also names the built-in contracts that fit; a relay streams the messaging contract only so far",
    RoutingKey => outbox::ROUTING_KEY.name, [ROUTING_KEY_MISSING: E, ROUTING_KEY_GENERATED: E, ROUTING_KEY_TRIGGER_MISSING: E], [C],
        "the routing key is a plain column kept by its trigger (or, on PostgreSQL 18+, a stored generated column the publication publishes)",
    Constraints => "constraints", [CONSTRAINT_MISSING: E, CONSTRAINT_NOT_VALIDATED: W], [C],
        "the CHECK constraints of the CDC migration are there and validated",
    Slot => "slot", [SLOT_MISSING: S, SLOTS_EXHAUSTED: E, SLOT_NOT_LOGICAL: E, SLOT_WRONG_PLUGIN: E, SLOT_WRONG_DATABASE: E, SLOT_INVALIDATED: E, SLOT_IN_USE: S], [C, Se],
        "the relay's slot is a pgoutput slot of this database, not invalidated, and free to stream from (or, with `relay.create_slot`, can be made); a slot that disappears under a running relay is never made again",
    SlotWalMargin => "slot_wal_margin", [SLOT_WAL_AT_RISK: W], [C],
        "the slot's `safe_wal_size` is above `relay.slot_wal_margin_bytes` (the slot guard warns of the same while the relay runs)",
    Heartbeat => "heartbeat", [PG_PRIVILEGE_MISSING: E], [C],
        "with `relay.heartbeat_interval_secs`, the role may execute `pg_logical_emit_message`",
    BacklogOrder => "backlog_order", [], [C],
        "the order a cutover's backlog goes out in",
    PublishedJournal => "published_journal", [], [C],
        "how many published rows wait in the journal to be marked `PUBLISHED`",
    FailoverSlot => "failover_slot", [PG_FEATURE_UNAVAILABLE: E, FAILOVER_NOT_READY: E], [C, Se],
        "with `postgres.failover_slot`: PostgreSQL 17+, and (`check`) everything a promoted standby needs to have the slot",
    Privileges => "privileges", [PG_PRIVILEGE_MISSING: E, DEAD_LETTER_MISSING: E], [C, St],
        "the role holds every table privilege the relay needs (`migrate --print-grants`)",
    RelayMode => "relay_mode", [NO_OUTBOX_RELAY: E, DUPLICATE_OUTBOX_RELAY: E], [C, St],
        "the outbox is declared CHANGE_DATA_CAPTURE, and one relay publishes it: not Debezium beside this one, and (`check`) not nobody",
    RelayDeclaration => "relay_declaration", [OUTBOX_HELD_BY_ANOTHER_SLOT: E, DECLARATION_MISSING: E], [C, St],
        "the outbox's declaration names this relay's slot on this database system, or nothing yet (the relay claims the outbox at its first start); a declared copy is never the outbox's relay",
    OtherReaders => "other_readers", [SECOND_OUTBOX_READER: E, OUTBOX_READER_UNCERTAIN: W], [C],
        "no active slot but the declared relay's and its declared copies streams a publication that includes the outbox (the relay's `outbox_cdc_other_readers` gauge says the same while it runs)",
    PollingLeases => "polling_leases", [DUPLICATE_OUTBOX_RELAY: E], [C, St],
        "no row holds a live polling lease",
    Fence => "fence", [DUPLICATE_OUTBOX_RELAY: E], [C, St],
        "the fence trigger refuses polling claims",
    Handover => "handover", [HANDOVER_INCOMPLETE: E], [St],
        "no cutover stopped before it listed the backlog",
    ReplicationLogIn => "replication_log_in", [PG_PERMISSION_DENIED: E], [C, St],
        "the role may log in for replication (`REPLICATION`)",
    Kafka => "kafka", [], [C, St],
        "the cluster answers a metadata request",
    Topics => "topics", [TOPIC_MISSING: E], [C],
        "the topics of rows not yet published exist or will be auto-created",
    TopicPermissions => "topic_permissions", [TOPIC_AUTHORIZATION_FAILED: E], [C],
        "the principal may WRITE and DESCRIBE those topics",
    TopicLimits => "topic_limits", [TOPIC_LIMIT_UNKNOWN: W], [C],
        "each topic's `max.message.bytes` is known (the relay batches under it)",
}

impl Rule {
    /// Whether `when` obeys this rule.
    pub fn obeyed_by(self, when: When) -> bool {
        self.obeyed().contains(&when)
    }

    /// Whether this rule gives `code`.
    pub fn gives(self, code: Code) -> bool {
        self.codes().iter().any(|(c, _)| *c == code)
    }
}

impl PartialEq<&str> for Rule {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl serde::Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// The rule table (`docs/reference/preflight-rules.md`); a test fails when
/// the committed page is stale.
pub fn reference_markdown() -> String {
    let mut out = String::from(
        "# Preflight rules\n\nGenerated from `src/rules.rs` (`scripts/regenerate.sh`); do not edit by hand.\n\
         Every finding of `outbox-cdc check` comes from one of these rules. `check` reports every rule it lists; \
         `run` refuses to start on an error of a rule marked *start* (so do `run --handover-only`, `redrive` and `replay`); \
         every session refuses to stream on an error of a rule marked *session*, a standby's polls included, \
         and the [retry policy](error-codes.md) decides what follows. A failure to read a rule's facts \
         (a connection, a query) is reported under the rule with that failure's own code.\n\n\
         | rule | codes | check | start | session | what it holds |\n|---|---|---|---|---|---|\n",
    );
    let mark = |r: Rule, w: When| if r.obeyed_by(w) { "yes" } else { "" };
    for rule in Rule::ALL {
        let codes = rule
            .codes()
            .iter()
            .map(|(c, s)| format!("`{c}` ({})", s.as_str()))
            .collect::<Vec<_>>()
            .join(", ");
        out.push_str(&format!(
            "| `{rule}` | {} | {} | {} | {} | {} |\n",
            if codes.is_empty() { "none" } else { &codes },
            mark(*rule, When::Check),
            mark(*rule, When::Start),
            mark(*rule, When::Session),
            rule.about()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_every_rule_is_obeyed_by_someone() {
        let mut names: Vec<&str> = Rule::ALL.iter().map(|r| r.name()).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n);
        for rule in Rule::ALL {
            assert!(!rule.obeyed().is_empty(), "{rule}");
        }
        assert_eq!(Rule::RoutingKey.name(), "routing_key");
    }

    #[test]
    fn the_standby_follows_from_the_slot_rule_a_session_obeys() {
        assert!(Rule::Slot.gives(Code::SLOT_IN_USE));
        assert!(Rule::Slot.obeyed_by(When::Session));
        assert!(!Rule::Slot.obeyed_by(When::Start));
        assert!(Rule::RelayMode.obeyed_by(When::Start));
        assert!(!Rule::Topics.obeyed_by(When::Start));
    }
}
