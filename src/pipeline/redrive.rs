//! `outbox-cdc redrive`: FAILED rows published again once their cause is
//! fixed, through the hand-over's path: oldest first (so each key keeps its
//! order), under the row's own id, chunk by chunk, each chunk settled and
//! marked PUBLISHED before the next. A row that fails again stays FAILED
//! with its new code; running the command again is harmless.

use tokio_util::sync::CancellationToken;

use super::handover::mark_as;
use super::session::Session;
use super::supervisor::SessionEnd;
use crate::config::Config;
use crate::error::{Code, Error};
use crate::pg::handover::{self, FailedCursor, FailedFilter};
use crate::pg::marks::{Guard, Marker};

/// Rows read per query.
const CHUNK: i64 = 1000;

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
pub(super) async fn publish(
    session: &mut Session<'_>,
    sql: &tokio_postgres::Client,
    cfg: &Config,
    marker: &Marker,
    filter: &FailedFilter,
    shutdown: &CancellationToken,
) -> Result<Redriven, Error> {
    let mut done = Redriven::default();
    let mut cursor = FailedCursor::default();
    let tx = session.begin_pseudo_transaction();
    loop {
        let rows = handover::failed_chunk(sql, cfg, filter, &mut cursor, CHUNK).await?;
        if rows.is_empty() {
            break;
        }
        done.selected += rows.len() as u64;
        session.metrics().handover_backlog.add(rows.len() as i64);
        let end = match session.produce_rows(tx, rows).await {
            Some(end) => Some(end),
            None => session.settle_all(shutdown, Guard::Failed).await?,
        };
        let end = match end {
            None if session.transactional() => session.commit_handed_over(Guard::Failed).await?,
            end => end,
        };
        done.published += mark_as(session, sql, marker, Guard::Failed).await?;
        session.metrics().handover_backlog.set(0);
        match end {
            None => {}
            Some(SessionEnd::Stopped) => {
                return Err(Error::new(
                    Code::REDRIVE_INCOMPLETE,
                    format!(
                        "stopped after {} of the rows; run it again: rows already published are PUBLISHED",
                        done.published
                    ),
                ))
            }
            Some(SessionEnd::Restart(reason)) => {
                return Err(reason.context(format!(
                    "the redrive stopped after publishing {} rows; the rest stay FAILED: fix the cause and run it again",
                    done.published
                )))
            }
        }
    }
    Ok(done)
}
