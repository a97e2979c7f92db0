//! The backlog a cutover hands to the relay: the list of rows committed
//! before the slot's starting point and not yet PUBLISHED or FAILED, in
//! order. The cutover writes it; the relay publishes it before it streams.

use tokio_postgres::Client;

use super::rows::{decode, text_columns};
use super::sqlstate::query_error;
use crate::config::Objects;
use crate::contract::outbox::{self, objects, Status};
use crate::error::{Code, Error};
use crate::lsn::Lsn;
use crate::row::OutboxRow;

/// Where a hand-over stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// The slot may exist but the list is incomplete: re-run the cutover.
    Preparing,
    /// The relay publishes the list before it streams.
    Ready,
    Done,
}

impl State {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            State::Preparing => "PREPARING",
            State::Ready => "READY",
            State::Done => "DONE",
        }
    }
    fn parse(s: &str) -> Option<State> {
        [State::Preparing, State::Ready, State::Done]
            .into_iter()
            .find(|x| x.as_str() == s)
    }
}

fn state_table(objs: &Objects) -> String {
    format!("{}.{}", objs.outbox.schema, objects::HANDOVER_STATE_TABLE)
}

fn list_table(objs: &Objects) -> String {
    format!("{}.{}", objs.outbox.schema, objects::HANDOVER_TABLE)
}

/// The hand-over state of this outbox and the slot it belongs to.
pub(crate) async fn state(
    client: &Client,
    objs: &Objects,
) -> Result<Option<(State, String)>, Error> {
    let row = client
        .query_opt(
            &format!(
                "SELECT state, slot FROM {} WHERE outbox_table = $1",
                state_table(objs)
            ),
            &[&objs.outbox.qualified_table()],
        )
        .await
        .map_err(query_error(Code::HANDOVER_FAILED))?;
    Ok(row.and_then(|r| State::parse(r.get::<_, &str>(0)).map(|s| (s, r.get(1)))))
}

pub(crate) async fn set_state(
    client: &Client,
    objs: &Objects,
    state: State,
    rows: i64,
    consistent_point: Option<Lsn>,
) -> Result<(), Error> {
    let point = consistent_point.map(|l| l.to_string());
    client
        .execute(
            &format!(
                "INSERT INTO {} (outbox_table, slot, state, rows_listed, consistent_point, changed_at)
                 VALUES ($1, $2, $3, $4, $5::text::pg_lsn, now())
                 ON CONFLICT (outbox_table) DO UPDATE SET slot = EXCLUDED.slot, state = EXCLUDED.state,
                     rows_listed = EXCLUDED.rows_listed,
                     consistent_point = COALESCE(EXCLUDED.consistent_point, {0}.consistent_point),
                     changed_at = now()",
                state_table(objs)
            ),
            &[&objs.outbox.qualified_table(), &objs.slot, &state.as_str(), &rows, &point],
        )
        .await
        .map_err(query_error(Code::HANDOVER_FAILED))?;
    Ok(())
}

/// Rows on the hand-over list.
pub(crate) async fn list_len(client: &Client, objs: &Objects) -> Result<i64, Error> {
    Ok(client
        .query_one(
            &format!(
                "SELECT count(*) FROM {} WHERE outbox_table = $1",
                list_table(objs)
            ),
            &[&objs.outbox.qualified_table()],
        )
        .await
        .map_err(query_error(Code::HANDOVER_FAILED))?
        .get(0))
}

pub(crate) async fn clear_list(client: &Client, objs: &Objects) -> Result<u64, Error> {
    client
        .execute(
            &format!("DELETE FROM {} WHERE outbox_table = $1", list_table(objs)),
            &[&objs.outbox.qualified_table()],
        )
        .await
        .map_err(query_error(Code::HANDOVER_FAILED))
}

/// How a backlog's rows are ordered; each key must go out in commit order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BacklogOrder {
    /// `pg_xact_commit_timestamp` of the inserting transaction (with
    /// `track_commit_timestamp = on`): commit order, even for transactions
    /// that started in one order and committed in the other.
    CommitTime,
    /// `created_at` (the inserting transaction's start): commit order
    /// unless two transactions on one key overlapped.
    CreatedAt,
}

impl BacklogOrder {
    /// Commit time when the server records it.
    pub(crate) async fn of_server(client: &Client) -> Result<BacklogOrder, Error> {
        let on: bool = client
            .query_one(
                "SELECT current_setting('track_commit_timestamp') = 'on'",
                &[],
            )
            .await
            .map_err(query_error(Code::HANDOVER_FAILED))?
            .get(0);
        Ok(if on {
            BacklogOrder::CommitTime
        } else {
            BacklogOrder::CreatedAt
        })
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            BacklogOrder::CommitTime => "in commit order (track_commit_timestamp)",
            BacklogOrder::CreatedAt => {
                "in created_at order (turn on track_commit_timestamp for commit order when transactions on one key overlap)"
            }
        }
    }
}

/// The SQL that selects the backlog: rows not yet PUBLISHED or FAILED, in
/// `order`. Only a row untouched since its INSERT (PENDING, never claimed,
/// never attempted) has that transaction as its `xmin`; it is placed by its
/// commit time, any other row (or one whose commit time is unknown: frozen,
/// or from before the setting) by `created_at`, which precedes its commit.
pub(crate) fn backlog_query(objs: &Objects, order: BacklogOrder) -> String {
    let created = outbox::CREATED_AT.name;
    let first = match order {
        BacklogOrder::CommitTime => format!(
            "CASE WHEN {status} = '{pending}' AND {token} = 0 AND {attempts} = 0
                  THEN coalesce(pg_xact_commit_timestamp(xmin), {created}) ELSE {created} END, ",
            status = outbox::STATUS.name,
            pending = Status::Pending.as_str(),
            token = outbox::LEASE_TOKEN.name,
            attempts = outbox::ATTEMPTS.name,
        ),
        BacklogOrder::CreatedAt => String::new(),
    };
    format!(
        "SELECT {id}::text FROM {table} WHERE {status} NOT IN ('{published}', '{failed}') ORDER BY {first}{created}, {id}",
        id = outbox::MESSAGE_ID.name,
        table = objs.outbox.qualified_table(),
        status = outbox::STATUS.name,
        published = Status::Published.as_str(),
        failed = Status::Failed.as_str(),
    )
}

/// Writes the list (in chunks) in the given order.
pub(crate) async fn write_list(
    client: &Client,
    objs: &Objects,
    ids: &[String],
) -> Result<(), Error> {
    for (chunk_index, chunk) in ids.chunks(10_000).enumerate() {
        let offset = (chunk_index * 10_000) as i64;
        client
            .execute(
                &format!(
                    "INSERT INTO {} (outbox_table, seq, message_id)
                     SELECT $1, $2 + t.ord, t.id::uuid FROM unnest($3::text[]) WITH ORDINALITY AS t(id, ord)",
                    list_table(objs)
                ),
                &[&objs.outbox.qualified_table(), &offset, &chunk],
            )
            .await
        .map_err(query_error(Code::HANDOVER_FAILED))?;
    }
    Ok(())
}

/// Reads the unpublished rows of the list after `after_seq`, decoded like
/// streamed rows. Returns `(seq, row)` pairs.
pub(crate) async fn read_chunk(
    client: &Client,
    objs: &Objects,
    after_seq: i64,
    limit: i64,
) -> Result<Vec<(i64, OutboxRow)>, Error> {
    let columns = text_columns(client, "o.", Code::HANDOVER_FAILED).await?;
    let rows = client
        .query(
            &format!(
                "SELECT h.seq, {columns} FROM {list} h JOIN {table} o ON o.{id} = h.message_id
                 WHERE h.outbox_table = $1 AND h.seq > $2 AND o.{status} NOT IN ('{published}', '{failed}')
                 ORDER BY h.seq LIMIT $3",
                list = list_table(objs),
                table = objs.outbox.qualified_table(),
                id = outbox::MESSAGE_ID.name,
                status = outbox::STATUS.name,
                published = Status::Published.as_str(),
                failed = Status::Failed.as_str(),
            ),
            &[&objs.outbox.qualified_table(), &after_seq, &limit],
        )
        .await
        .map_err(query_error(Code::HANDOVER_FAILED))?;
    Ok(rows
        .iter()
        .map(|r| {
            let seq: i64 = r.get(0);
            (seq, decode(r, 1))
        })
        .collect())
}

/// Which FAILED rows a redrive publishes again.
#[derive(Debug, Clone, Default)]
pub(crate) struct FailedFilter {
    pub(crate) code: Option<String>,
    pub(crate) destination: Option<String>,
    /// Rows created at or after this `timestamptz` text.
    pub(crate) since: Option<String>,
}

/// Where a redrive is in its (creation time, id) order.
#[derive(Debug, Clone)]
pub(crate) struct FailedCursor {
    created_at: String,
    message_id: String,
}

impl Default for FailedCursor {
    fn default() -> Self {
        FailedCursor {
            created_at: "-infinity".into(),
            message_id: "00000000-0000-0000-0000-000000000000".into(),
        }
    }
}

fn failed_predicate() -> String {
    format!(
        "{status} = '{failed}' AND ($1::text IS NULL OR {code} = $1) AND ($2::text IS NULL OR {destination} = $2)
         AND ($3::text IS NULL OR {created} >= $3::text::timestamptz)",
        status = outbox::STATUS.name,
        failed = Status::Failed.as_str(),
        code = outbox::LAST_FAILURE_CODE.name,
        destination = outbox::DESTINATION.name,
        created = outbox::CREATED_AT.name,
    )
}

/// FAILED rows matching `filter` after `cursor`, oldest first, decoded like
/// streamed rows; the cursor moves past them.
pub(crate) async fn failed_chunk(
    client: &Client,
    objs: &Objects,
    filter: &FailedFilter,
    cursor: &mut FailedCursor,
    limit: i64,
) -> Result<Vec<OutboxRow>, Error> {
    let columns = text_columns(client, "", Code::PG_QUERY_FAILED).await?;
    let rows = client
        .query(
            &format!(
                "SELECT {created}::text, {id}::text, {columns} FROM {table}
                 WHERE {predicate} AND ({created}, {id}) > ($4::text::timestamptz, $5::text::uuid)
                 ORDER BY {created}, {id} LIMIT $6",
                created = outbox::CREATED_AT.name,
                id = outbox::MESSAGE_ID.name,
                table = objs.outbox.qualified_table(),
                predicate = failed_predicate(),
            ),
            &[
                &filter.code,
                &filter.destination,
                &filter.since,
                &cursor.created_at,
                &cursor.message_id,
                &limit,
            ],
        )
        .await
        .map_err(query_error(Code::PG_QUERY_FAILED))?;
    if let Some(last) = rows.last() {
        cursor.created_at = last.get(0);
        cursor.message_id = last.get(1);
    }
    Ok(rows.iter().map(|r| decode(r, 2)).collect())
}

/// How many FAILED rows match `filter`, by code and destination.
pub(crate) async fn failed_counts(
    client: &Client,
    objs: &Objects,
    filter: &FailedFilter,
) -> Result<Vec<(Option<String>, String, i64)>, Error> {
    let rows = client
        .query(
            &format!(
                "SELECT {code}, {destination}, count(*) FROM {table} WHERE {predicate}
                 GROUP BY 1, 2 ORDER BY 1, 2",
                code = outbox::LAST_FAILURE_CODE.name,
                destination = outbox::DESTINATION.name,
                table = objs.outbox.qualified_table(),
                predicate = failed_predicate(),
            ),
            &[&filter.code, &filter.destination, &filter.since],
        )
        .await
        .map_err(query_error(Code::PG_QUERY_FAILED))?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect())
}
