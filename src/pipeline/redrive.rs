//! `outbox-cdc redrive`: FAILED rows published again once their cause is
//! fixed, through the backlog's path: oldest first (so each key keeps its
//! order), under the row's own id, chunk by chunk, each chunk settled and
//! marked PUBLISHED before the next. A row that fails again stays FAILED
//! with its new code; running the command again is harmless.

use tokio_util::sync::CancellationToken;

use super::backlog::{created_at, mark};
use super::ledger::Ledger;
use super::session::{Flow, Session};
use super::settlement::Settlement;
use super::sink::Sink;
use crate::config::Config;
use crate::error::{Code, Error};
use crate::pg::handover::{self, FailedCursor, FailedFilter};
use crate::pg::row_status::Guard;

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
pub(super) async fn publish<K: Sink, L: Ledger, S: Settlement>(
    session: &mut Session<'_, K, L, S>,
    sql: &tokio_postgres::Client,
    cfg: &Config,
    filter: &FailedFilter,
    shutdown: &CancellationToken,
) -> Result<Redriven, Error> {
    let mut done = Redriven::default();
    let mut cursor = FailedCursor::default();
    let tx = session.parts.watermark.begin();
    let backlog = &session.parts.shared.metrics.handover_backlog;
    loop {
        let rows = handover::failed_chunk(sql, cfg, filter, &mut cursor, CHUNK).await?;
        if rows.is_empty() {
            break;
        }
        done.selected += rows.len() as u64;
        backlog.add(rows.len() as i64);
        session.produce_rows(tx, rows, created_at).await;
        let flow = match session.parts.ending.take() {
            Some(e) => Err(e),
            None => session.settle_backlog(Guard::Failed, shutdown).await,
        };
        done.published += mark(session, Guard::Failed).await?;
        backlog.set(0);
        match flow {
            Ok(Flow::Continue) => {}
            Ok(Flow::Stopped) => {
                return Err(Error::new(
                    Code::REDRIVE_INCOMPLETE,
                    format!(
                        "stopped after {} of the rows; run it again: rows already published are PUBLISHED",
                        done.published
                    ),
                ))
            }
            Err(reason) => {
                return Err(reason.context(format!(
                    "the redrive stopped after publishing {} rows; the rest stay FAILED: fix the cause and run it again",
                    done.published
                )))
            }
        }
    }
    Ok(done)
}
