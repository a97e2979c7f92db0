//! Rows published from a list instead of the slot, chunk by chunk, each
//! settled and marked before the next (so a restart publishes again at most
//! the chunk it interrupted), under the rows' own ids:
//!
//! - a cutover's backlog ([`hand_over`]): the rows committed before the
//!   slot's starting point, in the listed order, before the session
//!   streams; then the hand-over is closed. Runs on the session that holds
//!   the slot.
//! - a redrive ([`redrive`]): FAILED rows, oldest first (so each key keeps
//!   its order), marked PUBLISHED under the `Failed` guard; a row that
//!   fails again stays FAILED with its new code.
//! - a replay ([`replay`]): every row of a window, oldest first, with a
//!   ledger that writes nothing ([`Untouched`]): no status changes.
//! - the dead letters' redrive ([`dead_letters`]): an outbox that keeps no
//!   status, the stored records of its dead-letter table in the order they
//!   were written, each removed once confirmed.

use tokio_util::sync::CancellationToken;

use super::ledger::{Ledger, Untouched};
use super::session::{Flow, Session};
use super::settlement::Settlement;
use super::sink::Sink;
use crate::config::Objects;
use crate::contract::outbox;
use crate::error::{Code, Error};
use crate::finding::Finding;
use crate::pg::dead_letter::{DeadLetters, Selection};
use crate::pg::handover::{self, FailedCursor, FailedFilter, State};
use crate::pg::row_status::Guard;
use crate::pg::window::{self, Entries};
use crate::row::value::{Timestamp, Uuid};
use crate::row::{Datum, OutboxRow};
use crate::rules::Rule;

/// Rows read from the list per query.
const CHUNK: i64 = 1000;

/// Ids marked PUBLISHED per statement.
const MARK_CHUNK: usize = 5000;

/// No commit time is known for a backlog row: its creation time stands in.
pub(super) fn created_at(row: &OutboxRow) -> Timestamp {
    match row.get(&outbox::CREATED_AT) {
        Datum::Timestamp(t) => *t,
        _ => Timestamp::Micros(0),
    }
}

/// Publishes a READY hand-over list and marks it DONE. `Flow::Stopped` when
/// shutdown came first; `Err` when the session must end.
pub(super) async fn hand_over<K: Sink, L: Ledger, S: Settlement>(
    session: &mut Session<'_, K, L, S>,
    sql: &tokio_postgres::Client,
    objs: &Objects,
    shutdown: &CancellationToken,
) -> Result<Flow, Error> {
    if !matches!(handover::state(sql, objs).await?, Some((State::Ready, _))) {
        return Ok(Flow::Continue);
    }
    let tx = session.parts.watermark.begin();
    let mut after = 0i64;
    let mut handed = 0u64;
    let listed = handover::list_len(sql, objs).await?;
    let backlog = &session.parts.shared.metrics.handover_backlog;
    backlog.set(listed);
    loop {
        let chunk = handover::read_chunk(sql, objs, after, CHUNK).await?;
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
    handover::set_state(sql, objs, State::Done, done, None).await?;
    handover::clear_list(sql, objs).await?;
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

/// A relay must not stream while a cutover is half done.
pub(super) async fn handover_finding(
    sql: &tokio_postgres::Client,
    objs: &Objects,
) -> Result<Finding, Error> {
    Ok(
        match handover::state(sql, objs).await? {
            Some((State::Preparing, _)) => Finding::error(
                Rule::Handover,
                Code::HANDOVER_INCOMPLETE,
                "a cutover stopped before it listed the backlog; run `outbox-cdc cutover --to cdc` again",
            ),
            _ => Finding::ok(Rule::Handover, "no cutover is half done"),
        },
    )
}

/// What a redrive did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Redriven {
    /// FAILED rows that matched.
    pub selected: u64,
    /// Marked PUBLISHED.
    pub published: u64,
}

/// Publishes the matching FAILED rows. `Err` when the session had to end
/// (a restart's reason keeps its code).
pub(super) async fn redrive<K: Sink, L: Ledger, S: Settlement>(
    session: &mut Session<'_, K, L, S>,
    sql: &tokio_postgres::Client,
    objs: &Objects,
    filter: &FailedFilter,
    shutdown: &CancellationToken,
) -> Result<Redriven, Error> {
    let mut done = Redriven::default();
    let mut cursor = FailedCursor::default();
    let tx = session.parts.watermark.begin();
    let backlog = &session.parts.shared.metrics.handover_backlog;
    loop {
        let rows = handover::failed_chunk(sql, objs, filter, &mut cursor, CHUNK).await?;
        if rows.is_empty() {
            break;
        }
        done.selected += rows.len() as u64;
        backlog.add(rows.len() as i64);
        session.produce_rows(tx, rows, created_at).await;
        let settled = settle_redriven(session, Redriving::FailedRows, &mut done, shutdown).await;
        backlog.set(0);
        settled?;
    }
    Ok(done)
}

/// What a redrive publishes again, for its guard and its words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Redriving {
    FailedRows,
    DeadLetters,
}

/// Settles a redrive's chunk and records what Kafka confirmed (marks its
/// rows PUBLISHED, removes its letters); `Err` when the redrive must stop,
/// saying how far it got.
async fn settle_redriven<K: Sink, L: Ledger, S: Settlement>(
    session: &mut Session<'_, K, L, S>,
    what: Redriving,
    done: &mut Redriven,
    shutdown: &CancellationToken,
) -> Result<(), Error> {
    // A letter's refusal is written back to it, whatever the guard.
    let guard = match what {
        Redriving::FailedRows => Guard::Failed,
        Redriving::DeadLetters => Guard::Pending,
    };
    let flow = match session.parts.ending.take() {
        Some(e) => Err(e),
        None => session.settle_backlog(guard, shutdown).await,
    };
    done.published += mark(session, guard).await?;
    let (noun, published, rest) = match what {
        Redriving::FailedRows => ("rows", "PUBLISHED", "stay FAILED"),
        Redriving::DeadLetters => ("letters", "removed", "stay"),
    };
    match flow {
        Ok(Flow::Continue) => Ok(()),
        Ok(Flow::Stopped) => Err(Error::new(
            Code::REDRIVE_INCOMPLETE,
            format!(
                "stopped after {} of the {noun}; run it again: {noun} already published are {published}",
                done.published
            ),
        )),
        Err(reason) => Err(reason.context(format!(
            "the redrive stopped after publishing {} {noun}; the rest {rest}: fix the cause and run it again",
            done.published
        ))),
    }
}

/// Publishes the dead letters `selection` takes again. `Err` when the
/// session had to end; what was confirmed before is removed all the same.
pub(super) async fn dead_letters<K: Sink, L: Ledger, S: Settlement>(
    session: &mut Session<'_, K, L, S>,
    sql: &tokio_postgres::Client,
    letters: &DeadLetters,
    selection: &Selection,
    shutdown: &CancellationToken,
) -> Result<Redriven, Error> {
    let mut done = Redriven::default();
    let tx = session.parts.watermark.begin();
    let mut after = 0;
    loop {
        let round = letters.read(sql, selection, after, CHUNK).await?;
        let Some(last) = round.last() else { break };
        after = last.seq;
        done.selected += round.len() as u64;
        let records: Vec<_> = round.into_iter().map(|letter| letter.record).collect();
        session.produce_records(tx, &records).await;
        settle_redriven(session, Redriving::DeadLetters, &mut done, shutdown).await?;
    }
    Ok(done)
}

/// A replay's place in its window, kept across the attempts of one run: the
/// rows are read once, in (creation time, id) order, and a chunk stays
/// unsettled until Kafka confirmed it, so an attempt that ends publishes
/// that chunk again, never skips it.
pub struct ReplayPlace {
    entries: Entries,
    table: String,
    unsettled: Option<Vec<String>>,
    ledger: Untouched,
    /// Rows read and settled: each one confirmed by Kafka or refused.
    pub selected: u64,
}

impl ReplayPlace {
    pub(crate) fn new(entries: Entries, table: String) -> ReplayPlace {
        ReplayPlace {
            entries,
            table,
            unsettled: None,
            ledger: Untouched::default(),
            selected: 0,
        }
    }

    pub(super) fn ledger(&self) -> Untouched {
        self.ledger.clone()
    }

    /// The rows the destination refused, with their codes.
    pub fn refused(&self) -> Vec<(Uuid, Code)> {
        self.ledger.refused()
    }

    /// Rows Kafka confirmed: a chunk settles whole before the next, so
    /// every row read and not refused.
    pub fn published(&self) -> u64 {
        self.selected
            .saturating_sub(self.ledger.refused().len() as u64)
    }

    /// The unsettled chunk's ids, or the next chunk's.
    async fn chunk(&mut self) -> Result<Vec<String>, Error> {
        if let Some(ids) = &self.unsettled {
            return Ok(ids.clone());
        }
        let ids: Vec<String> = self
            .entries
            .page(CHUNK as usize)
            .await
            .map_err(|e| e.context("reading the window's ids"))?
            .into_iter()
            .map(|e| e.id)
            .collect();
        self.unsettled = Some(ids.clone());
        Ok(ids)
    }
}

/// Publishes the rows of a replay's window. `Err` when the session had to
/// end (a restart's reason keeps its code).
pub(super) async fn replay<K: Sink, L: Ledger, S: Settlement>(
    session: &mut Session<'_, K, L, S>,
    sql: &tokio_postgres::Client,
    replay: &mut ReplayPlace,
    shutdown: &CancellationToken,
) -> Result<(), Error> {
    let tx = session.parts.watermark.begin();
    loop {
        let ids = replay.chunk().await?;
        if ids.is_empty() {
            return Ok(());
        }
        let rows: Vec<OutboxRow> = window::rows(sql, &replay.table, &ids)
            .await
            .map_err(|e| e.context("reading the window's rows"))?
            .into_iter()
            .map(|r| r.row)
            .collect();
        let read = rows.len() as u64;
        session.produce_rows(tx, rows, created_at).await;
        // The ledger writes nothing: the guard is never used.
        let flow = match session.parts.ending.take() {
            Some(e) => Err(e),
            None => session.settle_backlog(Guard::Pending, shutdown).await,
        };
        // Nothing is marked: the confirmed ids only leave the session.
        session.take_published();
        match flow {
            Ok(Flow::Continue) => {
                replay.unsettled = None;
                replay.selected += read;
            }
            Ok(Flow::Stopped) => {
                return Err(Error::new(
                    Code::REPLAY_INCOMPLETE,
                    format!(
                        "stopped after {} rows of the window; no row's status changed",
                        replay.selected
                    ),
                ))
            }
            Err(reason) => {
                return Err(reason.context(format!(
                    "the replay stopped after {} rows of the window; no row's status changed",
                    replay.selected
                )))
            }
        }
    }
}
