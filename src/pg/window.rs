//! The outbox rows of a time window, for `audit`: the destinations written
//! in it, its rows page by page in creation order (ids and keys first, so
//! a partition's scan reads only its own rows whole), and rows looked up by
//! id.

use std::collections::HashMap;

use tokio_postgres::Client;

use super::rows::{decode, text_columns};
use super::sqlstate::query_error;
use crate::contract::outbox;
use crate::contract::row::OutboxRow;
use crate::error::{Code, Error};

/// A window of creation times, `[since, until)`, as `timestamptz` text.
#[derive(Debug, Clone)]
pub(crate) struct Bounds {
    pub(crate) since: String,
    pub(crate) until: String,
}

/// One row of the window.
#[derive(Debug)]
pub(crate) struct WindowRow {
    pub(crate) row: OutboxRow,
    /// Microseconds since the Unix epoch.
    pub(crate) created_us: i64,
    pub(crate) status: Option<String>,
}

/// A row found by id.
#[derive(Debug, Clone)]
pub(crate) struct Known {
    pub(crate) destination: String,
    /// `None` for an infinite `created_at`.
    pub(crate) created_us: Option<i64>,
    pub(crate) status: Option<String>,
    pub(crate) routing_key: String,
}

/// Where a read of the window is, in (creation time, id) order.
#[derive(Debug, Clone)]
pub(crate) struct Cursor {
    created_at: String,
    message_id: String,
}

impl Default for Cursor {
    fn default() -> Self {
        Cursor {
            created_at: "-infinity".into(),
            message_id: "00000000-0000-0000-0000-000000000000".into(),
        }
    }
}

fn failed(e: tokio_postgres::Error) -> Error {
    query_error(Code::PG_QUERY_FAILED)(e)
}

/// The destinations with rows in `bounds` (only `only`, when given).
pub(crate) async fn destinations(
    client: &Client,
    table: &str,
    bounds: &Bounds,
    only: Option<&str>,
) -> Result<Vec<String>, Error> {
    let rows = client
        .query(
            &format!(
                "SELECT DISTINCT {destination} FROM {table}
                 WHERE {created} >= $1::text::timestamptz AND {created} < $2::text::timestamptz
                   AND ($3::text IS NULL OR {destination} = $3)
                 ORDER BY 1",
                destination = outbox::DESTINATION.name,
                created = outbox::CREATED_AT.name,
            ),
            &[&bounds.since, &bounds.until, &only],
        )
        .await
        .map_err(failed)?;
    Ok(rows.iter().filter_map(|r| r.try_get(0).ok()).collect())
}

/// One destination's rows in a window.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slice<'a> {
    pub(crate) table: &'a str,
    pub(crate) destination: &'a str,
    pub(crate) bounds: &'a Bounds,
}

/// A row of the window as its key page names it: enough to know its
/// partition before its columns are read.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) id: String,
    /// `None` when NULL (the mapper refuses such a row).
    pub(crate) routing_key: Option<String>,
}

/// The next `limit` rows of `destination` in `bounds` after `cursor`, by
/// id and routing key only; the cursor moves past them.
pub(crate) async fn entries(
    client: &Client,
    of: &Slice<'_>,
    cursor: &mut Cursor,
    limit: i64,
) -> Result<Vec<Entry>, Error> {
    let Slice {
        table,
        destination,
        bounds,
    } = of;
    let rows = client
        .query(
            &format!(
                "SELECT {created}::text, {id}::text, {routing_key} FROM {table}
                 WHERE {destination} = $1
                   AND {created} >= $2::text::timestamptz AND {created} < $3::text::timestamptz
                   AND ({created}, {id}) > ($4::text::timestamptz, $5::text::uuid)
                 ORDER BY {created}, {id} LIMIT $6",
                created = outbox::CREATED_AT.name,
                id = outbox::MESSAGE_ID.name,
                routing_key = outbox::ROUTING_KEY.name,
                destination = outbox::DESTINATION.name,
            ),
            &[
                &destination,
                &bounds.since,
                &bounds.until,
                &cursor.created_at,
                &cursor.message_id,
                &limit,
            ],
        )
        .await
        .map_err(failed)?;
    if let Some(last) = rows.last() {
        if let (Ok(at), Ok(id)) = (last.try_get(0), last.try_get(1)) {
            cursor.created_at = at;
            cursor.message_id = id;
        }
    }
    Ok(rows
        .iter()
        .filter_map(|r| {
            Some(Entry {
                id: r.try_get(1).ok()?,
                routing_key: r.try_get(2).ok().flatten(),
            })
        })
        .collect())
}

/// The rows with these ids, whole, in (creation time, id) order.
pub(crate) async fn rows(
    client: &Client,
    table: &str,
    ids: &[String],
) -> Result<Vec<WindowRow>, Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let columns = text_columns(client, "", Code::PG_QUERY_FAILED).await?;
    let rows = client
        .query(
            &format!(
                "SELECT CASE WHEN isfinite({created}) THEN (extract(epoch FROM {created}) * 1000000)::int8 END, {status}, {columns} FROM {table}
                 WHERE {id} = ANY($1::text[]::uuid[])
                 ORDER BY {created}, {id}",
                created = outbox::CREATED_AT.name,
                id = outbox::MESSAGE_ID.name,
                status = outbox::STATUS.name,
            ),
            &[&ids],
        )
        .await
        .map_err(failed)?;
    Ok(rows
        .iter()
        .map(|r| WindowRow {
            created_us: r.try_get(0).unwrap_or_default(),
            status: r.try_get(1).ok().flatten(),
            row: decode(r, 2),
        })
        .collect())
}

/// The rows with these ids, by id (hyphenated, lowercase).
pub(crate) async fn lookup(
    client: &Client,
    table: &str,
    ids: &[String],
) -> Result<HashMap<String, Known>, Error> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = client
        .query(
            &format!(
                "SELECT {id}::text, {destination}, CASE WHEN isfinite({created}) THEN (extract(epoch FROM {created}) * 1000000)::int8 END,
                        {status}, {routing_key}
                 FROM {table} WHERE {id} = ANY($1::text[]::uuid[])",
                id = outbox::MESSAGE_ID.name,
                destination = outbox::DESTINATION.name,
                created = outbox::CREATED_AT.name,
                status = outbox::STATUS.name,
                routing_key = outbox::ROUTING_KEY.name,
            ),
            &[&ids],
        )
        .await
        .map_err(failed)?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            Some((
                r.try_get::<_, String>(0).ok()?,
                Known {
                    destination: r.try_get(1).ok()?,
                    created_us: r.try_get(2).ok().flatten(),
                    status: r.try_get(3).ok().flatten(),
                    routing_key: r.try_get(4).ok()?,
                },
            ))
        })
        .collect())
}
