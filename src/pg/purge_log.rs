//! The purge log (`V007`): what `purge` deleted, one entry per batch and
//! destination, written in the statement that deletes the batch; `replay`
//! reads it to refuse a window that retention has thinned.

use tokio_postgres::Client;

use super::sqlstate::query_error;
use super::window::Bounds;
use crate::config::OutboxConfig;
use crate::contract::outbox::objects;
use crate::error::{Code, Error};

const OUTBOX_TABLE: &str = "outbox_table";
const PURGED_AT: &str = "purged_at";
const DESTINATION: &str = "destination";
const STATUS: &str = "status";
const CREATED_FROM: &str = "created_from";
const CREATED_TO: &str = "created_to";
const ROW_COUNT: &str = "row_count";

fn log(outbox: &OutboxConfig) -> String {
    format!("{}.{}", outbox.schema, objects::PURGE_LOG_TABLE)
}

/// The `INSERT` that records the rows of the CTE `gone` (their destination
/// and creation time, as `destination` and `created_at` name them), for a
/// data-modifying `WITH` beside the `DELETE`.
pub(crate) fn record_from(
    outbox: &OutboxConfig,
    gone: &str,
    destination: &str,
    created_at: &str,
    status: &str,
) -> String {
    format!(
        "INSERT INTO {log} ({OUTBOX_TABLE}, {DESTINATION}, {STATUS}, {CREATED_FROM}, {CREATED_TO}, {ROW_COUNT})
         SELECT {table}, {destination}, {status}, min({created_at}), max({created_at}), count(*)
         FROM {gone} GROUP BY {destination}",
        log = log(outbox),
        table = crate::quote::literal(&outbox.qualified_table()),
        status = crate::quote::literal(status),
    )
}

/// Rows of a window that a purge deleted, for one destination and status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Thinned {
    pub(crate) destination: String,
    pub(crate) status: String,
    pub(crate) rows: i64,
    /// The first and last creation time among them, as `timestamptz` text.
    pub(crate) created_from: String,
    pub(crate) created_to: String,
    /// The last purge that deleted some.
    pub(crate) purged_at: String,
}

/// What purges deleted from `bounds` (of `destination`, when given): the
/// batches whose creation times overlap it. A batch that straddles an edge
/// counts whole: the log does not say which of its rows fell inside.
pub(crate) async fn thinned(
    client: &Client,
    outbox: &OutboxConfig,
    bounds: &Bounds,
    destination: Option<&str>,
) -> Result<Vec<Thinned>, Error> {
    let rows = client
        .query(
            &format!(
                "SELECT {DESTINATION}, {STATUS}, sum({ROW_COUNT})::int8, min({CREATED_FROM})::text,
                        max({CREATED_TO})::text, max({PURGED_AT})::text
                 FROM {log}
                 WHERE {OUTBOX_TABLE} = $1 AND ($2::text IS NULL OR {DESTINATION} = $2)
                   AND {CREATED_TO} >= $3::text::timestamptz AND {CREATED_FROM} < $4::text::timestamptz
                 GROUP BY {DESTINATION}, {STATUS} ORDER BY 1, 2",
                log = log(outbox),
            ),
            &[
                &outbox.qualified_table(),
                &destination,
                &bounds.since,
                &bounds.until,
            ],
        )
        .await
        .map_err(query_error(Code::PG_QUERY_FAILED))
        .map_err(|e| e.context("reading what purge deleted (the purge log, migration V007)"))?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            Some(Thinned {
                destination: r.try_get(0).ok()?,
                status: r.try_get(1).ok()?,
                rows: r.try_get(2).ok()?,
                created_from: r.try_get(3).ok()?,
                created_to: r.try_get(4).ok()?,
                purged_at: r.try_get(5).ok()?,
            })
        })
        .collect())
}
