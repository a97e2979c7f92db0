//! Row bookkeeping over an ordinary SQL connection: FAILED rows (which gate
//! settlement) and PUBLISHED rows (in batches). Both updates are guarded by
//! the row's current status, so a row another actor changed is never
//! overwritten.

use tokio_postgres::Client;

use super::sqlstate::query_error;
use crate::config::OutboxConfig;
use crate::contract::outbox::{self, Status};
use crate::error::{Code, Error};
use crate::row::value::Uuid;

/// Which rows an update may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// Streamed rows: only while still PENDING as inserted.
    Pending,
    /// Rows a cutover handed over: any status but PUBLISHED or FAILED
    /// (AMBIGUOUS, EXHAUSTED, IN_FLIGHT with an expired lease), taking the
    /// polling-era lease off.
    HandedOver,
    /// Rows a redrive publishes again: only while still FAILED.
    Failed,
}

pub struct Marker {
    failed: [String; 3],
    published: [String; 3],
    /// Streamed rows folded from the journal, at the time it recorded them.
    folded: String,
}

fn index(guard: Guard) -> usize {
    match guard {
        Guard::Pending => 0,
        Guard::HandedOver => 1,
        Guard::Failed => 2,
    }
}

impl Marker {
    pub fn new(outbox: &OutboxConfig) -> Marker {
        let table = outbox.qualified_table();
        let id = outbox::MESSAGE_ID.name;
        let status = outbox::STATUS.name;
        let lease = outbox::LEASE_EXPIRES_AT.name;
        let pending = format!("{status} = '{}'", Status::Pending.as_str());
        let handed_over = format!(
            "{status} NOT IN ('{}', '{}') AND ({lease} IS NULL OR {lease} <= now())",
            Status::Published.as_str(),
            Status::Failed.as_str()
        );
        let release = format!(
            "{lease} = NULL, {owner} = NULL, {next} = NULL",
            owner = outbox::LEASE_OWNER.name,
            next = outbox::NEXT_ATTEMPT_AT.name
        );
        // Each update also counts, in its own snapshot, how many of the ids
        // it was given are visible at all (see `update_visible`).
        // `= ANY(array)`, not a join with the unnested ids: after a bulk
        // INSERT the statistics can say the table is tiny, and the join was
        // then planned as a nested loop over a sequential scan (a 5 000-id
        // mark took 70 s of CPU). An array predicate is an index scan on the
        // key, or at worst one scan with a hashed lookup.
        let counted = |update: String| {
            format!(
                "WITH changed AS ({update} AND {id} = ANY($1::uuid[]) RETURNING 1)
                 SELECT (SELECT count(*) FROM changed),
                        (SELECT count(DISTINCT w) FROM unnest($1::uuid[]) w),
                        (SELECT count(*) FROM {table} t WHERE t.{id} = ANY($1::uuid[]))"
            )
        };
        let failed = |guard: &str, extra: &str| {
            counted(format!(
                "UPDATE {table} SET {status} = '{failed}', {code} = $2{extra} WHERE {guard}",
                failed = Status::Failed.as_str(),
                code = outbox::LAST_FAILURE_CODE.name,
            ))
        };
        let published = |guard: &str, extra: &str| {
            counted(format!(
                "UPDATE {table} SET {status} = '{published}', {at} = now(){extra} WHERE {guard}",
                published = Status::Published.as_str(),
                at = outbox::PUBLISHED_AT.name,
            ))
        };
        let folded = counted(format!(
            "UPDATE {table} SET {status} = '{published}', {at} = $2 WHERE {pending}",
            published = Status::Published.as_str(),
            at = outbox::PUBLISHED_AT.name,
        ));
        let release = format!(", {release}");
        let redriven = format!("{status} = '{}'", Status::Failed.as_str());
        Marker {
            failed: [
                failed(&pending, ""),
                failed(&handed_over, &release),
                failed(&redriven, ""),
            ],
            published: [
                published(&pending, ""),
                published(&handed_over, &release),
                published(&redriven, ""),
            ],
            folded,
        }
    }

    /// Records rows as FAILED with `code`; returns how many rows changed.
    pub async fn failed(
        &self,
        client: &Client,
        ids: &[Uuid],
        code: &str,
        guard: Guard,
    ) -> Result<u64, Error> {
        update_visible(client, &self.failed[index(guard)], &[&ids, &code]).await
    }

    /// Marks rows PUBLISHED; returns how many rows changed.
    pub async fn published(
        &self,
        client: &Client,
        ids: &[Uuid],
        guard: Guard,
    ) -> Result<u64, Error> {
        update_visible(client, &self.published[index(guard)], &[&ids]).await
    }
}

impl Marker {
    /// Marks PENDING rows PUBLISHED as of `at` (a journal entry's time);
    /// returns how many rows changed.
    pub async fn published_at(
        &self,
        client: &Client,
        ids: &[Uuid],
        at: std::time::SystemTime,
    ) -> Result<u64, Error> {
        update_visible(client, &self.folded, &[&ids, &at]).await
    }
}

/// Runs a counted update until every id it names is visible to it.
///
/// The walsender may send a transaction as soon as its commit record is
/// flushed, a moment before the committing backend makes it visible to other
/// snapshots. An update in that moment would skip the row and leave it
/// PENDING behind a slot already confirmed past it; so it runs again, briefly,
/// until it sees every row. A row still missing after that is not in the
/// table any more (deleted by hand) and is reported.
async fn update_visible(
    client: &Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<u64, Error> {
    let mut changed = 0u64;
    let mut delay = std::time::Duration::from_millis(5);
    for attempt in 0.. {
        let row = client
            .query_one(sql, params)
            .await
            .map_err(query_error(Code::ROW_MARKING_FAILED))?;
        let (now, wanted, visible): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
        changed += now.max(0) as u64;
        if visible >= wanted {
            return Ok(changed);
        }
        if attempt == 12 {
            tracing::warn!(
                missing = wanted - visible,
                "rows to be marked are not in the outbox table (deleted?); the rest are marked"
            );
            return Ok(changed);
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(std::time::Duration::from_millis(500));
    }
    Ok(changed)
}
