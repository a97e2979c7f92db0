//! The journal of published rows: what the relay records before the slot
//! passes a transaction, in place of a PUBLISHED mark per row.
//!
//! A mark is a non-HOT UPDATE of the whole row (`status` is in the polling
//! relay's index predicates, so no mark can be HOT): about 950 bytes of WAL
//! and two index entries per message, which the walsender decodes too. A
//! journal entry is one INSERT of an array of ids per batch: about 17 bytes
//! of WAL per message. Folding turns entries into PUBLISHED marks (with
//! `published_at` the time the entry was recorded) when the relay has spare
//! time, and before anything reads the table's status for a decision
//! (`cutover`, `purge`, `redrive`). A row is published when it is PUBLISHED
//! or listed here; a row listed here was confirmed by Kafka.

use std::time::SystemTime;

use bytes::BytesMut;
use tokio_postgres::types::{to_sql_checked, FromSql, IsNull, ToSql, Type};
use tokio_postgres::Client;

use super::row_status::Marker;
use super::sqlstate::query_error;
use crate::config::OutboxConfig;
use crate::contract::outbox::{objects, Status, MESSAGE_ID, STATUS};
use crate::error::{Code, Error};
use crate::lsn::Lsn;
use crate::row::value::Uuid;

/// The journal's columns (`migrations/V004__published_journal.sql`).
pub(crate) const OUTBOX_TABLE: &str = "outbox_table";
pub(crate) const RECORDED_AT: &str = "recorded_at";
pub(crate) const MESSAGE_IDS: &str = "message_ids";

/// Ids travel in PostgreSQL's binary form: 16 bytes each, no text.
impl ToSql for Uuid {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(&self.0);
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::UUID
    }

    to_sql_checked!();
}

impl<'a> FromSql<'a> for Uuid {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Uuid, Box<dyn std::error::Error + Sync + Send>> {
        let bytes: [u8; 16] = raw
            .try_into()
            .map_err(|_| format!("a uuid of {} bytes", raw.len()))?;
        Ok(Uuid(bytes))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::UUID
    }
}

/// What one fold did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Folded {
    /// Journal entries folded.
    pub entries: u64,
    /// Ids they listed.
    pub ids: u64,
    /// Rows that became PUBLISHED (the others were already, or are gone).
    pub marked: u64,
}

impl std::ops::AddAssign for Folded {
    fn add_assign(&mut self, o: Folded) {
        self.entries += o.entries;
        self.ids += o.ids;
        self.marked += o.marked;
    }
}

pub struct Journal {
    outbox: String,
    record: String,
    take: String,
    count: String,
    marker: Marker,
}

/// Journal entries a replay's lookup after a crash reads besides the
/// table: the newest ones, at least 1.6 s of recording (an entry is
/// written at least every 100 ms while rows are confirmed). The slot passes
/// rows soon after they are recorded, so the rows it sends again were
/// recorded in the last moments before the crash; one recorded earlier and
/// missed is sent again, as at-least-once allows.
const RECENT_ENTRIES: u32 = 16;

/// Which of a chunk's ids are published already: PUBLISHED in the table,
/// or listed in a recent journal entry. One statement, so a fold that moves
/// ids from the journal to the table between two reads cannot hide them.
pub struct PublishedAmong {
    outbox: String,
    sql: String,
}

impl PublishedAmong {
    pub fn new(outbox: &OutboxConfig) -> PublishedAmong {
        let journal = format!("{}.{}", outbox.schema, objects::PUBLISHED_JOURNAL_TABLE);
        let table = outbox.qualified_table();
        let id = MESSAGE_ID.name;
        let status = STATUS.name;
        let published = Status::Published.as_str();
        // `= ANY(array)` on the key, as the marks do (see `row_status`).
        PublishedAmong {
            outbox: table.clone(),
            sql: format!(
                "SELECT t.{id} FROM {table} t
                  WHERE t.{id} = ANY($1::uuid[]) AND t.{status} = '{published}'
                 UNION
                 SELECT j.m FROM (
                     SELECT unnest({MESSAGE_IDS}) AS m FROM (
                         SELECT {MESSAGE_IDS} FROM {journal} WHERE {OUTBOX_TABLE} = $2
                          ORDER BY {RECORDED_AT} DESC LIMIT {RECENT_ENTRIES}) recent) j
                  WHERE j.m = ANY($1::uuid[])"
            ),
        }
    }

    /// The ids among `ids` already published.
    pub async fn among(&self, c: &Client, ids: &[Uuid]) -> Result<Vec<Uuid>, Error> {
        let rows = c
            .query(&self.sql, &[&ids, &self.outbox])
            .await
            .map_err(query_error(Code::PG_QUERY_FAILED))?;
        rows.iter()
            .map(|r| r.try_get(0).map_err(query_error(Code::PG_QUERY_FAILED)))
            .collect()
    }
}

/// How far the server has flushed WAL: the fold's pacing compares it with
/// how far the walsender has sent.
pub async fn wal_flushed(c: &Client) -> Result<Lsn, Error> {
    let row = c
        .query_one("SELECT pg_current_wal_flush_lsn()::text", &[])
        .await
        .map_err(query_error(Code::PG_QUERY_FAILED))?;
    Lsn::from_server(row.get(0))
}

impl Journal {
    pub fn new(outbox: &OutboxConfig) -> Journal {
        let journal = format!("{}.{}", outbox.schema, objects::PUBLISHED_JOURNAL_TABLE);
        Journal {
            outbox: outbox.qualified_table(),
            record: format!(
                "INSERT INTO {journal} ({OUTBOX_TABLE}, {MESSAGE_IDS}) VALUES ($1, $2)"
            ),
            // Two folders (the relay and a `purge`) never take one entry twice.
            take: format!(
                "DELETE FROM {journal} WHERE ctid = (
                     SELECT ctid FROM {journal} WHERE {OUTBOX_TABLE} = $1
                      LIMIT 1 FOR UPDATE SKIP LOCKED)
                 RETURNING {RECORDED_AT}, {MESSAGE_IDS}"
            ),
            count: format!(
                "SELECT count(*), coalesce(sum(cardinality({MESSAGE_IDS})), 0)::bigint
                   FROM {journal} WHERE {OUTBOX_TABLE} = $1"
            ),
            marker: Marker::new(outbox),
        }
    }

    /// Records ids Kafka confirmed, as one entry.
    pub async fn record(&self, c: &Client, ids: &[Uuid]) -> Result<(), Error> {
        c.execute(&self.record, &[&self.outbox, &ids])
            .await
            .map_err(query_error(Code::ROW_MARKING_FAILED))?;
        Ok(())
    }

    /// Folds one entry into the rows' status, in one transaction with its
    /// removal; `None` when no entry is left (or all are being folded).
    pub async fn fold_one(&self, c: &Client) -> Result<Option<Folded>, Error> {
        let failed = query_error(Code::ROW_MARKING_FAILED);
        c.batch_execute("BEGIN").await.map_err(&failed)?;
        let result = async {
            let Some(row) = c
                .query_opt(&self.take, &[&self.outbox])
                .await
                .map_err(&failed)?
            else {
                return Ok(None);
            };
            let at: SystemTime = row.try_get(0).map_err(&failed)?;
            let ids: Vec<Uuid> = row.try_get(1).map_err(&failed)?;
            let marked = self.marker.published_at(c, &ids, at).await?;
            Ok(Some(Folded {
                entries: 1,
                ids: ids.len() as u64,
                marked,
            }))
        }
        .await;
        let end = match result {
            Ok(_) => "COMMIT",
            Err(_) => "ROLLBACK",
        };
        let ended = c.batch_execute(end).await.map_err(&failed);
        let folded = result?;
        ended?;
        Ok(folded)
    }

    /// Folds every entry there is.
    pub async fn fold_all(&self, c: &Client) -> Result<Folded, Error> {
        let mut total = Folded::default();
        while let Some(one) = self.fold_one(c).await? {
            total += one;
        }
        Ok(total)
    }

    /// Entries and ids not yet folded.
    pub async fn unfolded(&self, c: &Client) -> Result<(i64, i64), Error> {
        let row = c
            .query_one(&self.count, &[&self.outbox])
            .await
            .map_err(query_error(Code::ROW_MARKING_FAILED))?;
        Ok((row.get(0), row.get(1)))
    }
}
