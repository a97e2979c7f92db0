//! What `status` reads of an outbox that keeps its rows' status: the
//! backlog not yet published (a row listed in the journal is published,
//! whatever its status still says), rows FAILED by code, and when each
//! destination last had a row published.

use tokio_postgres::Client;

use super::journal::{MESSAGE_IDS, OUTBOX_TABLE, RECORDED_AT};
use super::sqlstate::query_error;
use crate::config::OutboxConfig;
use crate::contract::outbox::{self, objects, Status};
use crate::error::{Code, Error};

fn query(context: &'static str) -> impl Fn(tokio_postgres::Error) -> Error {
    move |e| query_error(Code::PG_QUERY_FAILED)(e).context(context)
}

fn journal(o: &OutboxConfig) -> String {
    format!("{}.{}", o.schema, objects::PUBLISHED_JOURNAL_TABLE)
}

/// Rows PENDING and not in the journal, and the oldest one's age in seconds.
/// The journal's ids are unnested so the server can hash them once (an
/// anti-join): `= ANY(ids)` per row scanned every journal entry for every
/// row, minutes on a 10 000 000-row backlog.
pub(crate) async fn pending(c: &Client, o: &OutboxConfig) -> Result<(i64, Option<f64>), Error> {
    let row = c
        .query_one(
            &format!(
                "SELECT count(*), extract(epoch FROM now() - min(t.{created}))::float8
                   FROM {table} t
                  WHERE t.{status} = $2
                    AND NOT EXISTS (SELECT 1 FROM {journal} j
                                      CROSS JOIN LATERAL unnest(j.{MESSAGE_IDS}) AS i(id)
                                     WHERE j.{OUTBOX_TABLE} = $1 AND i.id = t.{id})",
                created = outbox::CREATED_AT.name,
                status = outbox::STATUS.name,
                id = outbox::MESSAGE_ID.name,
                table = o.qualified_table(),
                journal = journal(o),
            ),
            &[&o.qualified_table(), &Status::Pending.as_str()],
        )
        .await
        .map_err(query("counting the rows not yet published"))?;
    Ok((row.get(0), row.get(1)))
}

/// Rows FAILED, by their last failure's code.
pub(crate) async fn failed(
    c: &Client,
    o: &OutboxConfig,
) -> Result<Vec<(Option<String>, i64)>, Error> {
    let rows = c
        .query(
            &format!(
                "SELECT {code}, count(*) FROM {table} WHERE {status} = $1 GROUP BY 1 ORDER BY 1",
                code = outbox::LAST_FAILURE_CODE.name,
                status = outbox::STATUS.name,
                table = o.qualified_table(),
            ),
            &[&Status::Failed.as_str()],
        )
        .await
        .map_err(query("counting the rows FAILED"))?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Each destination's latest publication: a PUBLISHED mark's time, or a
/// journal entry's not yet folded.
pub(crate) async fn last_published(
    c: &Client,
    o: &OutboxConfig,
) -> Result<Vec<(String, String)>, Error> {
    let rows = c
        .query(
            &format!(
                "SELECT destination, max(at)::text FROM (
                   SELECT {destination} AS destination, max({published}) AS at
                     FROM {table} WHERE {status} = $2 GROUP BY 1
                   UNION ALL
                   SELECT t.{destination}, max(j.{RECORDED_AT})
                     FROM {journal} j CROSS JOIN LATERAL unnest(j.{MESSAGE_IDS}) AS i(id)
                     JOIN {table} t ON t.{id} = i.id
                    WHERE j.{OUTBOX_TABLE} = $1 GROUP BY 1
                 ) p WHERE at IS NOT NULL GROUP BY destination ORDER BY destination",
                destination = outbox::DESTINATION.name,
                published = outbox::PUBLISHED_AT.name,
                status = outbox::STATUS.name,
                id = outbox::MESSAGE_ID.name,
                table = o.qualified_table(),
                journal = journal(o),
            ),
            &[&o.qualified_table(), &Status::Published.as_str()],
        )
        .await
        .map_err(query("reading when each destination was last published"))?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// How long the slot has been inactive, where the server says
/// (`inactive_since`, PostgreSQL 17+); `None` before 17 or while active.
pub(crate) async fn slot_inactive_secs(c: &Client, slot: &str) -> Result<Option<f64>, Error> {
    let row = c
        .query_opt(
            "SELECT extract(epoch FROM now() - (to_jsonb(s) ->> 'inactive_since')::timestamptz)::float8
               FROM pg_replication_slots s WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(query("reading how long the slot has been inactive"))?;
    Ok(row.and_then(|r| r.get(0)))
}
