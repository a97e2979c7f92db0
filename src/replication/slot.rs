//! Slot commands over a replication session. Whether a slot may be used is
//! judged by the rules of `pg::checks` (`slot_finding`) from the catalog,
//! for `run` in [`super::Stream::open`] and for `check` in the preflight;
//! this module only speaks the replication protocol.

use super::connection::{Command, ReplicationConnection};
use crate::error::{Code, Error};
use crate::lsn::Lsn;
use crate::quote::ident;

/// A slot just created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedSlot {
    /// Where streaming from the slot starts.
    pub consistent_point: Lsn,
    /// The exported snapshot's name, valid while the creating session stays
    /// idle: the database as of the consistent point.
    pub snapshot: Option<String>,
}

/// How a new slot is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewSlot {
    pub snapshot: Snapshot,
    pub failover: Failover,
}

/// Whether the creating session exports a snapshot of the database as of
/// the slot's consistent point (a cutover lists the backlog under it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Snapshot {
    Export,
    None,
}

/// Whether standbys with `sync_replication_slots` keep a copy (17+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failover {
    On,
    Off,
}

/// `postgres.failover_slot`, as a slot option.
impl From<bool> for Failover {
    fn from(on: bool) -> Failover {
        if on {
            Failover::On
        } else {
            Failover::Off
        }
    }
}

/// `CREATE_REPLICATION_SLOT ... LOGICAL pgoutput`, exporting a snapshot when
/// asked (a cutover lists the backlog under it), with `FAILOVER` when asked
/// (PostgreSQL 17+: standbys with `sync_replication_slots` keep a copy).
pub async fn create(
    conn: &mut ReplicationConnection,
    slot: &str,
    options: NewSlot,
) -> Result<CreatedSlot, Error> {
    let export = options.snapshot == Snapshot::Export;
    let command = if options.failover == Failover::On {
        // The option list (PostgreSQL 15+) is the only form with FAILOVER.
        let snapshot = if export { "export" } else { "nothing" };
        format!(
            "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput (SNAPSHOT '{snapshot}', FAILOVER true)",
            ident(slot)
        )
    } else {
        let snapshot = if export {
            "EXPORT_SNAPSHOT"
        } else {
            "NOEXPORT_SNAPSHOT"
        };
        format!(
            "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput {snapshot}",
            ident(slot)
        )
    };
    let rows = conn
        .simple_query(&command, Command::CreateSlot)
        .await
        .map_err(|e| e.context(format!("creating slot {slot}")))?;
    // slot_name, consistent_point, snapshot_name, output_plugin
    let row = rows.first();
    let field = |i: usize| row.and_then(|r| r.get(i)).cloned().flatten();
    let consistent_point = field(1)
        .ok_or_else(|| {
            Error::new(
                Code::PG_PROTOCOL,
                "CREATE_REPLICATION_SLOT gave no consistent point",
            )
        })?
        .parse()
        .map_err(|e| Error::new(Code::PG_PROTOCOL, format!("consistent point: {e}")))?;
    tracing::info!(%slot, at = %consistent_point, failover = ?options.failover, "created replication slot");
    Ok(CreatedSlot {
        consistent_point,
        snapshot: field(2),
    })
}

/// `ALTER_REPLICATION_SLOT ... (FAILOVER true)` (PostgreSQL 17+), for a slot
/// made before `postgres.failover_slot` was turned on.
pub async fn enable_failover(conn: &mut ReplicationConnection, slot: &str) -> Result<(), Error> {
    conn.simple_query(
        &format!("ALTER_REPLICATION_SLOT {} (FAILOVER true)", ident(slot)),
        Command::Query,
    )
    .await
    .map_err(|e| e.context(format!("enabling failover on slot {slot}")))?;
    tracing::info!(%slot, "the slot is now a failover slot");
    Ok(())
}
