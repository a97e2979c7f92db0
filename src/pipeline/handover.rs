//! A cutover's backlog: the rows committed before the slot's starting point,
//! published in the listed order before the session streams, then marked
//! and the hand-over closed. Runs on the session that holds the slot.

use tokio_util::sync::CancellationToken;

use super::session::Session;
use super::supervisor::SessionEnd;
use crate::config::Config;
use crate::error::{Code, Error};
use crate::pg::handover::{self, State};
use crate::pg::marks::{Guard, Marker};

/// Rows read from the list per query.
const CHUNK: i64 = 1000;

/// Publishes a READY hand-over list and marks it DONE. `Some(end)` when the
/// session must end first (restart or shutdown); `None` when there was
/// nothing to hand over or it is done.
pub(super) async fn publish(
    session: &mut Session<'_>,
    sql: &tokio_postgres::Client,
    cfg: &Config,
    marker: &Marker,
    shutdown: &CancellationToken,
) -> Result<Option<SessionEnd>, Error> {
    if !matches!(handover::state(sql, cfg).await?, Some((State::Ready, _))) {
        return Ok(None);
    }
    let tx = session.begin_pseudo_transaction();
    let mut after = 0i64;
    let mut handed = 0u64;
    let listed = handover::list_len(sql, cfg).await?;
    session.metrics().handover_backlog.set(listed);
    loop {
        let chunk = handover::read_chunk(sql, cfg, after, CHUNK).await?;
        let Some((last, _)) = chunk.last() else { break };
        after = *last;
        let rows: Vec<_> = chunk.into_iter().map(|(_, row)| row).collect();
        handed += rows.len() as u64;
        session
            .metrics()
            .handover_backlog
            .set((listed - handed as i64).max(0));
        if let Some(end) = session.produce_rows(tx, rows).await {
            return Ok(Some(end));
        }
        // Transactional delivery commits and marks chunk by chunk, so a
        // restart publishes again at most the chunk it interrupted.
        if session.transactional() {
            if let Some(end) = session.settle_all(shutdown, Guard::HandedOver).await? {
                return Ok(Some(end));
            }
            if let Some(end) = session.commit_handed_over(Guard::HandedOver).await? {
                return Ok(Some(end));
            }
            mark(session, sql, marker).await?;
        }
    }
    if let Some(end) = session.settle_all(shutdown, Guard::HandedOver).await? {
        return Ok(Some(end));
    }
    mark(session, sql, marker).await?;
    let done = i64::try_from(handed).unwrap_or(i64::MAX);
    handover::set_state(sql, cfg, State::Done, done, None).await?;
    handover::clear_list(sql, cfg).await?;
    session.metrics().handover_backlog.set(0);
    session.reset_watermark();
    tracing::info!(rows = handed, "published the cutover's backlog");
    Ok(None)
}

async fn mark(
    session: &mut Session<'_>,
    sql: &tokio_postgres::Client,
    marker: &Marker,
) -> Result<(), Error> {
    mark_as(session, sql, marker, Guard::HandedOver)
        .await
        .map(|_| ())
}

/// Marks the rows the session confirmed since the last call PUBLISHED;
/// returns how many changed.
pub(super) async fn mark_as(
    session: &mut Session<'_>,
    sql: &tokio_postgres::Client,
    marker: &Marker,
    guard: Guard,
) -> Result<u64, Error> {
    let mut changed = 0;
    for chunk in session.take_published().chunks(5000) {
        changed += marker
            .published(sql, chunk, guard)
            .await
            .map_err(|e| e.context("marking rows PUBLISHED"))?;
    }
    Ok(changed)
}

/// The error `run --handover-only` ends with when the hand-over could not
/// finish: the reason's own code, and what to do.
pub(super) fn interrupted(reason: Error) -> Error {
    let code = reason.code();
    Error::new(
        code,
        format!(
            "{}; run it again: rows already published are skipped",
            reason.detail()
        ),
    )
    .context("the hand-over stopped")
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
