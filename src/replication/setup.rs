//! Before streaming: the server can do logical replication, the publication
//! covers the outbox and publishes inserts, and the slot exists (created when
//! allowed) and belongs to us. Each failure has its own code.

use super::connection::ReplicationConnection;
use super::ReplicationError;
use crate::lsn::Lsn;

#[derive(Debug, Clone)]
pub struct SlotSpec {
    pub slot: String,
    pub publication: String,
    pub schema: String,
    pub table: String,
    /// Create the slot when it is missing (`run` may; `check` never does).
    pub create_if_missing: bool,
}

/// Where streaming starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotState {
    pub confirmed_flush: Lsn,
    pub created: bool,
}

pub(crate) fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

pub(crate) fn ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

fn one(rows: &[Vec<Option<String>>], what: &str) -> Result<Option<String>, ReplicationError> {
    rows.first()
        .and_then(|r| r.first())
        .cloned()
        .ok_or_else(|| ReplicationError::Protocol(format!("no answer to {what}")))
}

fn lsn(text: Option<&str>, what: &str) -> Result<Lsn, ReplicationError> {
    text.unwrap_or("0/0")
        .parse()
        .map_err(|e| ReplicationError::Protocol(format!("{what}: {e}")))
}

/// Checks the server and the publication, then finds or creates the slot.
pub async fn prepare(
    conn: &mut ReplicationConnection,
    spec: &SlotSpec,
) -> Result<SlotState, ReplicationError> {
    conn.simple_query("IDENTIFY_SYSTEM", None).await?;
    let wal_level = one(
        &conn.simple_query("SHOW wal_level", None).await?,
        "SHOW wal_level",
    )?
    .unwrap_or_default();
    if wal_level != "logical" {
        return Err(ReplicationError::WalLevel(wal_level));
    }
    let rows = conn
        .simple_query(
            "SELECT current_database()::text, pg_encoding_to_char(encoding)::text FROM pg_database WHERE datname = current_database()",
            None,
        )
        .await?;
    let row = rows
        .first()
        .ok_or_else(|| ReplicationError::Protocol("no current database".into()))?;
    let database = row.first().cloned().flatten().unwrap_or_default();
    let encoding = row.get(1).cloned().flatten().unwrap_or_default();
    if encoding != "UTF8" {
        return Err(ReplicationError::Encoding(encoding));
    }

    let publication = conn
        .simple_query(
            &format!(
                "SELECT pubinsert::text FROM pg_publication WHERE pubname = {}",
                literal(&spec.publication)
            ),
            None,
        )
        .await?;
    match publication
        .first()
        .and_then(|r| r.first())
        .cloned()
        .flatten()
        .as_deref()
    {
        None => {
            return Err(ReplicationError::PublicationMissing(
                spec.publication.clone(),
            ))
        }
        Some("true") => {}
        Some(_) => {
            return Err(ReplicationError::PublicationNotInserts(
                spec.publication.clone(),
            ))
        }
    }
    let covered = conn
        .simple_query(
            &format!(
                "SELECT 1 FROM pg_publication_tables WHERE pubname = {} AND schemaname = {} AND tablename = {}",
                literal(&spec.publication),
                literal(&spec.schema),
                literal(&spec.table)
            ),
            None,
        )
        .await?;
    if covered.is_empty() {
        return Err(ReplicationError::PublicationMissingTable {
            publication: spec.publication.clone(),
            table: format!("{}.{}", spec.schema, spec.table),
        });
    }

    let slot = conn
        .simple_query(
            &format!(
                "SELECT plugin::text, slot_type, database::text, active::text, active_pid::text, \
                 confirmed_flush_lsn::text, wal_status FROM pg_replication_slots WHERE slot_name = {}",
                literal(&spec.slot)
            ),
            Some(&spec.slot),
        )
        .await?;
    let Some(row) = slot.first() else {
        if !spec.create_if_missing {
            return Err(ReplicationError::SlotMissing(spec.slot.clone()));
        }
        let created = conn
            .simple_query(
                &format!(
                    "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput NOEXPORT_SNAPSHOT",
                    ident(&spec.slot)
                ),
                Some(&spec.slot),
            )
            .await?;
        let consistent = created.first().and_then(|r| r.get(1)).cloned().flatten();
        tracing::info!(slot = %spec.slot, at = ?consistent, "created replication slot");
        return Ok(SlotState {
            confirmed_flush: lsn(consistent.as_deref(), "consistent point")?,
            created: true,
        });
    };
    let field = |i: usize| row.get(i).cloned().flatten().unwrap_or_default();
    if field(1) != "logical" {
        return Err(ReplicationError::SlotNotLogical(spec.slot.clone()));
    }
    if field(0) != "pgoutput" {
        return Err(ReplicationError::SlotWrongPlugin {
            slot: spec.slot.clone(),
            plugin: field(0),
        });
    }
    if field(2) != database {
        return Err(ReplicationError::SlotWrongDatabase {
            slot: spec.slot.clone(),
            database: field(2),
        });
    }
    if field(6) == "lost" {
        return Err(ReplicationError::SlotInvalidated(spec.slot.clone()));
    }
    if field(3) == "true" {
        return Err(ReplicationError::SlotInUse {
            slot: spec.slot.clone(),
            pid: field(4),
        });
    }
    Ok(SlotState {
        confirmed_flush: lsn(
            row.get(5).cloned().flatten().as_deref(),
            "confirmed_flush_lsn",
        )?,
        created: false,
    })
}
