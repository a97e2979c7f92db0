//! A cutover's backlog: the rows committed before the slot's starting
//! point, published in the listed order before the session streams, chunk
//! by chunk (each settled and marked before the next, so a restart
//! publishes again at most the chunk it interrupted), then the hand-over
//! closed. Runs on the session that holds the slot.

use tokio_util::sync::CancellationToken;

use super::ledger::Ledger;
use super::session::{Flow, Session};
use super::settlement::Settlement;
use super::sink::Sink;
use crate::config::Config;
use crate::contract::outbox;
use crate::contract::row::{OutboxRow, Value};
use crate::contract::value::Timestamp;
use crate::error::{Code, Error};
use crate::pg::handover::{self, State};
use crate::pg::row_status::Guard;

/// Rows read from the list per query.
const CHUNK: i64 = 1000;

/// Ids marked PUBLISHED per statement.
const MARK_CHUNK: usize = 5000;

/// No commit time is known for a backlog row: its creation time stands in.
pub(super) fn created_at(row: &OutboxRow) -> Timestamp {
    match row.get(&outbox::CREATED_AT) {
        Value::Timestamp(t) => *t,
        _ => Timestamp::Micros(0),
    }
}

/// Publishes a READY hand-over list and marks it DONE. `Flow::Stopped` when
/// shutdown came first; `Err` when the session must end.
pub(super) async fn publish<K: Sink, L: Ledger, S: Settlement>(
    session: &mut Session<'_, K, L, S>,
    sql: &tokio_postgres::Client,
    cfg: &Config,
    shutdown: &CancellationToken,
) -> Result<Flow, Error> {
    if !matches!(handover::state(sql, cfg).await?, Some((State::Ready, _))) {
        return Ok(Flow::Continue);
    }
    let tx = session.parts.watermark.begin();
    let mut after = 0i64;
    let mut handed = 0u64;
    let listed = handover::list_len(sql, cfg).await?;
    let backlog = &session.parts.shared.metrics.handover_backlog;
    backlog.set(listed);
    loop {
        let chunk = handover::read_chunk(sql, cfg, after, CHUNK).await?;
        let Some((last, _)) = chunk.last() else { break };
        after = *last;
        let rows: Vec<_> = chunk.into_iter().map(|(_, row)| row).collect();
        handed += rows.len() as u64;
        backlog.set((listed - handed as i64).max(0));
        session.produce_rows(tx, rows, created_at).await;
        if let Some(e) = session.parts.ending.take() {
            return Err(e);
        }
        if session.settle_backlog(Guard::HandedOver, shutdown).await? == Flow::Stopped {
            return Ok(Flow::Stopped);
        }
        mark(session, Guard::HandedOver).await?;
    }
    let done = i64::try_from(handed).unwrap_or(i64::MAX);
    handover::set_state(sql, cfg, State::Done, done, None).await?;
    handover::clear_list(sql, cfg).await?;
    backlog.set(0);
    session.parts.watermark = super::watermark::Watermark::new();
    tracing::info!(rows = handed, "published the cutover's backlog");
    Ok(Flow::Continue)
}

/// Marks the rows the session confirmed since the last call PUBLISHED
/// under `guard`; returns how many changed.
pub(super) async fn mark<K: Sink, L: Ledger, S: Settlement>(
    session: &mut Session<'_, K, L, S>,
    guard: Guard,
) -> Result<u64, Error> {
    let mut changed = 0;
    for chunk in session.take_published().chunks(MARK_CHUNK) {
        changed += session
            .parts
            .ledger
            .published(chunk, guard)
            .await
            .map_err(|e| e.context("marking rows PUBLISHED"))?;
    }
    Ok(changed)
}

/// The error `run --handover-only` ends with when the hand-over could not
/// finish: the reason's own code, and what to do.
pub(super) fn interrupted(reason: Error) -> Error {
    let detail = format!(
        "{}; run it again: rows already published are skipped",
        reason.detail()
    );
    let cause = reason.cause().cloned();
    let e = Error::new(reason.code(), detail).context("the hand-over stopped");
    match cause {
        Some(c) => e.caused_by(c),
        None => e,
    }
}

/// Refuses to stream while a cutover is half done.
pub(super) async fn require_not_preparing(
    sql: &tokio_postgres::Client,
    cfg: &Config,
) -> Result<(), Error> {
    if matches!(
        handover::state(sql, cfg).await?,
        Some((State::Preparing, _))
    ) {
        return Err(Error::new(
            Code::HANDOVER_INCOMPLETE,
            "a cutover stopped before it listed the backlog; run `outbox-cdc cutover --to cdc` again",
        ));
    }
    Ok(())
}
