//! The outbox rows of a time window, for `audit` and `replay`: the
//! destinations written in it, its rows streamed in creation order (ids
//! and keys first, so a partition's scan reads only its own rows whole),
//! and rows looked up by id.

use std::collections::HashMap;

use tokio_postgres::Client;

use super::rows::{decode, text_columns};
use super::sqlstate::query_error;
use crate::contract::outbox;
use crate::error::{Code, Error};
use crate::row::OutboxRow;

/// A window of creation times, `[since, until)`, as `timestamptz` text.
#[derive(Debug, Clone)]
pub(crate) struct Bounds {
    pub(crate) since: String,
    pub(crate) until: String,
}

impl Bounds {
    /// `[since_us, until_us)` in Unix µs.
    pub(crate) fn from_unix_micros(since_us: i64, until_us: i64) -> Bounds {
        Bounds {
            since: show_time(since_us),
            until: show_time(until_us),
        }
    }
}

/// A time as `timestamptz` text (UTC).
pub(crate) fn show_time(us: i64) -> String {
    crate::row::value::Timestamp::from_unix_micros(us)
        .map(crate::row::value::Timestamp::to_utc_string)
        .unwrap_or_else(|| format!("{us} us"))
}

/// How many rows each destination has in `bounds` (only `only`, when given).
pub(crate) async fn counts(
    client: &Client,
    table: &str,
    bounds: &Bounds,
    only: Option<&str>,
) -> Result<Vec<(String, i64)>, Error> {
    let rows = client
        .query(
            &format!(
                "SELECT {destination}, count(*) FROM {table}
                 WHERE {created} >= $1::text::timestamptz AND {created} < $2::text::timestamptz
                   AND ($3::text IS NULL OR {destination} = $3)
                 GROUP BY 1 ORDER BY 1",
                destination = outbox::DESTINATION.name,
                created = outbox::CREATED_AT.name,
            ),
            &[&bounds.since, &bounds.until, &only],
        )
        .await
        .map_err(failed)?;
    Ok(rows
        .iter()
        .filter_map(|r| Some((r.try_get(0).ok()?, r.try_get(1).ok()?)))
        .collect())
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

/// The rows of a window to read: one destination's, or every one's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slice<'a> {
    pub(crate) table: &'a str,
    pub(crate) destination: Option<&'a str>,
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

/// A window's rows by id and routing key, in (creation time, id) order,
/// streamed by one statement on a connection of its own: the server sorts
/// the window once, and the client holds one page (tokio-postgres stops
/// reading the socket while a page is not taken). Pages of `LIMIT` after a
/// cursor would sort the window again for each page: without an index on
/// the creation time, a million rows took hours.
pub(crate) struct Entries {
    rows: std::pin::Pin<Box<tokio_postgres::RowStream>>,
    /// The stream ended: polled again it would say its connection closed.
    ended: bool,
    /// Keeps the statement's connection open.
    _client: Client,
}

impl Entries {
    pub(crate) async fn open(client: Client, of: &Slice<'_>) -> Result<Entries, Error> {
        let statement = format!(
            "SELECT {id}::text, {routing_key} FROM {table}
             WHERE ($1::text IS NULL OR {destination} = $1)
               AND {created} >= $2::text::timestamptz AND {created} < $3::text::timestamptz
             ORDER BY {created}, {id}",
            created = outbox::CREATED_AT.name,
            id = outbox::MESSAGE_ID.name,
            routing_key = outbox::ROUTING_KEY.name,
            destination = outbox::DESTINATION.name,
            table = of.table,
        );
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
            [&of.destination, &of.bounds.since, &of.bounds.until];
        let rows = client.query_raw(&statement, params).await.map_err(failed)?;
        Ok(Entries {
            rows: Box::pin(rows),
            ended: false,
            _client: client,
        })
    }

    /// Up to `limit` more entries; fewer only at the window's end.
    pub(crate) async fn page(&mut self, limit: usize) -> Result<Vec<Entry>, Error> {
        use futures_util::StreamExt;
        let mut out = Vec::with_capacity(limit);
        while out.len() < limit && !self.ended {
            let Some(row) = self.rows.next().await else {
                self.ended = true;
                break;
            };
            let row = row.map_err(failed)?;
            if let Ok(id) = row.try_get(0) {
                out.push(Entry {
                    id,
                    routing_key: row.try_get(1).ok().flatten(),
                });
            }
        }
        Ok(out)
    }
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
