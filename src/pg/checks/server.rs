//! The server's side of logical replication: settings, headroom, and the
//! features its major offers.

use tokio_postgres::Client;

use super::query;
use crate::error::{Code, Error};
use crate::finding::Finding;
use crate::rules::Rule;

/// `server_version_num` of the first release whose pgoutput sends values in
/// binary form on request (14).
pub(crate) const BINARY_PGOUTPUT_VERSION_NUM: i32 = 140_000;

/// `server_version_num` of the first release with failover slots (17).
pub(crate) const FAILOVER_SLOTS_SINCE: i32 = 170_000;
/// ... and of the first that publishes stored generated columns (18).
pub(crate) const GENERATED_COLUMNS_PUBLISHED_SINCE: i32 = 180_000;

/// The server's side of logical replication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Server {
    pub(crate) version: String,
    /// `server_version_num`: 170004 for 17.4.
    pub(crate) version_num: i32,
    pub(crate) wal_level: String,
    pub(crate) encoding: String,
    pub(crate) database: String,
    pub(crate) free_slots: i32,
    pub(crate) free_senders: i32,
    pub(crate) max_slot_wal_keep_size: String,
}

pub(crate) async fn server(c: &Client) -> Result<Server, Error> {
    let r = c
        .query_one(
            "SELECT current_setting('server_version'), current_setting('wal_level'),
                    pg_encoding_to_char(d.encoding)::text, current_database()::text,
                    current_setting('max_replication_slots')::int - (SELECT count(*) FROM pg_replication_slots)::int,
                    current_setting('max_wal_senders')::int - (SELECT count(*) FROM pg_stat_replication)::int,
                    current_setting('max_slot_wal_keep_size'),
                    current_setting('server_version_num')::int
               FROM pg_database d WHERE d.datname = current_database()",
            &[],
        )
        .await
        .map_err(query("reading server settings"))?;
    Ok(Server {
        version: r.get(0),
        wal_level: r.get(1),
        encoding: r.get(2),
        database: r.get(3),
        free_slots: r.get(4),
        free_senders: r.get(5),
        max_slot_wal_keep_size: r.get(6),
        version_num: r.get(7),
    })
}

impl Server {
    /// `postgres.failover_slot` needs PostgreSQL 17 or newer.
    pub(crate) fn require_failover_slots(&self) -> Result<(), Error> {
        if self.version_num >= FAILOVER_SLOTS_SINCE {
            return Ok(());
        }
        Err(Error::new(
            Code::PG_FEATURE_UNAVAILABLE,
            format!(
                "postgres.failover_slot needs PostgreSQL 17 or newer; the server runs {}",
                self.version
            ),
        ))
    }

    /// Settings without which nothing can stream.
    pub(crate) fn findings(&self) -> Vec<Finding> {
        let yes = |since: i32| {
            if self.version_num >= since {
                "yes"
            } else {
                "no"
            }
        };
        let mut out = vec![Finding::ok(
            Rule::ServerVersion,
            format!(
                "{} (failover slots: {}; stored generated columns published: {})",
                self.version,
                yes(FAILOVER_SLOTS_SINCE),
                yes(GENERATED_COLUMNS_PUBLISHED_SINCE)
            ),
        )];
        out.push(if self.wal_level == "logical" {
            Finding::ok(Rule::WalLevel, "logical")
        } else {
            Finding::error(
                Rule::WalLevel,
                Code::PG_WAL_LEVEL_NOT_LOGICAL,
                format!(
                    "wal_level is {}; logical replication needs wal_level=logical (restart required)",
                    self.wal_level
                ),
            )
        });
        out.push(if self.encoding == "UTF8" {
            Finding::ok(Rule::Encoding, "UTF8")
        } else {
            Finding::error(
                Rule::Encoding,
                Code::PG_ENCODING_UNSUPPORTED,
                format!(
                    "database encoding is {}; the relay needs UTF8",
                    self.encoding
                ),
            )
        });
        out
    }

    /// Room for one more sender, and a bound on retained WAL.
    pub(crate) fn headroom(&self) -> Vec<Finding> {
        let mut out = Vec::new();
        out.push(if self.free_senders <= 0 {
            Finding::error(
                Rule::SenderHeadroom,
                Code::WAL_SENDERS_EXHAUSTED,
                "max_wal_senders leaves no room for the relay",
            )
        } else {
            Finding::ok(
                Rule::SenderHeadroom,
                format!("{} free WAL senders", self.free_senders),
            )
        });
        out.push(if self.max_slot_wal_keep_size == "-1" {
            Finding::warn(
                Rule::SlotWalKeep,
                Code::UNLIMITED_SLOT_WAL,
                "-1 (unlimited): a stopped relay makes PostgreSQL keep WAL until the disk fills; consider a bound",
            )
        } else {
            Finding::ok(Rule::SlotWalKeep, &self.max_slot_wal_keep_size)
        });
        out
    }
}
