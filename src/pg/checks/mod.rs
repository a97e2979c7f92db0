//! What the database must look like for the relay to run: the server's
//! settings, the publication, the slot, the outbox's schema and who owns the
//! outbox. Most rules are pure functions over facts read with typed queries
//! (`server`, `publication`, `slot`, `ownership`, `drift_findings`), so they
//! are tested without a database; a few query and judge in one step
//! (`schema_findings`, `heartbeat_finding`, `pending_destinations`) and are
//! tested against PostgreSQL. Each gives [`Finding`](crate::finding::Finding)s:
//! `run` stops on the first error, `check` reports them all: one condition,
//! one code, in both.
//!
//! One file per subject: `server`, `publication`, `slot`, `schema`,
//! `contract`, `ownership`.

mod contract;
mod ownership;
mod publication;
mod schema;
mod server;
mod slot;

use crate::error::{Code, Error};
use crate::pg::sqlstate::query_error;

pub(crate) use super::catalog::table_columns;
pub(crate) use contract::{contract_findings, streaming_finding};
pub(crate) use ownership::{
    declaration_finding, one_relay, ownership, ownership_findings, pending_destinations,
    readers_findings, strangers, OneRelay,
};
pub(crate) use publication::{publication, publication_finding};
pub(crate) use schema::schema_findings;
pub(crate) use server::{server, Server, BINARY_PGOUTPUT_VERSION_NUM};
pub(crate) use slot::{
    end_own_walsender, heartbeat_finding, slot, slot_figures, slot_finding, slot_margin_finding,
    Slot,
};

/// Why the rules are asked: some conditions are fine for a health report
/// but stop a relay that is about to stream, or the other way round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// `outbox-cdc check`.
    Report,
    /// A relay about to stream; it may create its slot when it is missing.
    Stream { create_slot: bool },
}

fn query(context: &'static str) -> impl Fn(tokio_postgres::Error) -> Error {
    move |e| query_error(Code::PG_QUERY_FAILED)(e).context(context)
}

#[cfg(test)]
mod tests {
    use super::publication::Publication;
    use super::server::Server;
    use super::slot::Slot;
    use super::*;
    use crate::error::Code;
    use crate::lsn::Lsn;

    fn server() -> Server {
        Server {
            version: "15.18".into(),
            wal_level: "logical".into(),
            encoding: "UTF8".into(),
            database: "app".into(),
            free_slots: 3,
            free_senders: 3,
            max_slot_wal_keep_size: "-1".into(),
            version_num: 150018,
        }
    }

    fn slot() -> Slot {
        Slot {
            name: "s".into(),
            plugin: Some("pgoutput".into()),
            logical: true,
            database: Some("app".into()),
            active: false,
            active_pid: None,
            confirmed_flush: Some(Lsn(1)),
            wal_status: Some("reserved".into()),
            lag_bytes: Some(0),
            failover: None,
        }
    }

    #[test]
    fn slot_rules_give_one_code_per_condition() {
        let code = |s: Option<&Slot>, srv: &Server, p| slot_finding(s, "s", srv, p).code;
        let stream = Purpose::Stream { create_slot: false };
        assert_eq!(code(Some(&slot()), &server(), stream), None);
        assert_eq!(code(None, &server(), stream), Some(Code::SLOT_MISSING));
        assert_eq!(
            code(None, &server(), Purpose::Stream { create_slot: true }),
            None
        );
        let full = Server {
            free_slots: 0,
            ..server()
        };
        assert_eq!(
            code(None, &full, Purpose::Stream { create_slot: true }),
            Some(Code::SLOTS_EXHAUSTED)
        );
        assert_eq!(
            code(None, &full, Purpose::Report),
            Some(Code::SLOTS_EXHAUSTED)
        );
        let cases = [
            (
                Slot {
                    logical: false,
                    ..slot()
                },
                Code::SLOT_NOT_LOGICAL,
            ),
            (
                Slot {
                    plugin: Some("test_decoding".into()),
                    ..slot()
                },
                Code::SLOT_WRONG_PLUGIN,
            ),
            (
                Slot {
                    database: Some("other".into()),
                    ..slot()
                },
                Code::SLOT_WRONG_DATABASE,
            ),
            (
                Slot {
                    wal_status: Some("lost".into()),
                    ..slot()
                },
                Code::SLOT_INVALIDATED,
            ),
            (
                Slot {
                    active: true,
                    ..slot()
                },
                Code::SLOT_IN_USE,
            ),
        ];
        for (s, expected) in cases {
            assert_eq!(code(Some(&s), &server(), stream), Some(expected), "{s:?}");
        }
        // An active slot is healthy in a report: the relay streams from
        // it; the report names the one process that may.
        let active = Slot {
            active: true,
            active_pid: Some(4242),
            ..slot()
        };
        assert_eq!(code(Some(&active), &server(), Purpose::Report), None);
        let finding = slot_finding(Some(&active), "s", &server(), Purpose::Report);
        assert!(
            finding
                .detail
                .starts_with("s exists, active for process 4242, lag"),
            "{}",
            finding.detail
        );
    }

    #[test]
    fn a_publication_must_publish_inserts_only_unless_the_table_keeps_no_status() {
        use crate::contract::definition::Status;
        let p = Publication {
            insert: true,
            update: false,
            delete: false,
            truncate: false,
            covers_outbox: true,
        };
        let code =
            |p: Option<&Publication>| publication_finding(p, "pub", "public.t", Status::Kept).code;
        assert_eq!(code(Some(&p)), None);
        assert_eq!(code(None), Some(Code::PUBLICATION_MISSING));
        assert_eq!(
            code(Some(&Publication {
                covers_outbox: false,
                ..p
            })),
            Some(Code::PUBLICATION_MISSING_TABLE)
        );
        assert_eq!(
            code(Some(&Publication { insert: false, ..p })),
            Some(Code::PUBLICATION_NOT_INSERT_ONLY)
        );
        assert_eq!(
            code(Some(&Publication { update: true, ..p })),
            Some(Code::PUBLICATION_NOT_INSERT_ONLY)
        );
        // A table that keeps no status: Debezium's publication, all of it.
        let statusless =
            |p: &Publication| publication_finding(Some(p), "pub", "public.t", Status::NotKept).code;
        let everything = Publication {
            update: true,
            delete: true,
            truncate: true,
            ..p
        };
        assert_eq!(statusless(&everything), None);
        assert_eq!(
            statusless(&Publication {
                insert: false,
                ..everything
            }),
            Some(Code::PUBLICATION_NOT_INSERT_ONLY)
        );
        assert_eq!(
            statusless(&Publication {
                covers_outbox: false,
                ..everything
            }),
            Some(Code::PUBLICATION_MISSING_TABLE)
        );
    }

    #[test]
    fn the_slot_margin_warns_under_the_margin_only() {
        let figures = |safe| crate::metrics::SlotFigures {
            active: true,
            wal_status: Some("reserved".into()),
            confirmed_lag_bytes: Some(0),
            retained_bytes: Some(0),
            safe_wal_size: safe,
        };
        let under = slot_margin_finding(Some(&figures(Some(1000))), 4096).unwrap();
        assert_eq!(under.code, Some(Code::SLOT_WAL_AT_RISK));
        assert!(under.detail.contains("1000"), "{}", under.detail);
        let over = slot_margin_finding(Some(&figures(Some(8192))), 4096).unwrap();
        assert_eq!(over.code, None);
        let unlimited = slot_margin_finding(Some(&figures(None)), 4096).unwrap();
        assert_eq!(unlimited.code, None);
        assert!(slot_margin_finding(None, 4096).is_none());
    }
}
