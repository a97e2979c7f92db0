//! PUBLISHED marks on their own task and connection, so bookkeeping never
//! holds up publication. A batch whose UPDATE fails is retried with backoff
//! and counted, never dropped while the relay runs; at any stop the queue is
//! flushed, and what cannot be written by the deadline is logged with its
//! count.
//!
//! The slot is confirmed from here: a batch carries the position its rows'
//! transactions end at, and that position is settled only once the batch and
//! every batch before it are written. So a transaction the slot has passed
//! always has its rows marked; a crash before the marks loses only the
//! confirmation, and the transactions come again and are marked then.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_postgres::Client;

use super::stats::RelayStats;
use super::supervisor::Backoff;
use crate::config::{Config, Env};
use crate::contract::value::Uuid;
use crate::error::Code;
use crate::pg::connect;
use crate::pg::lsn::Lsn;
use crate::pg::marks::{Guard, Marker};
use crate::replication::Feedback;

/// Rows per UPDATE.
const CHUNK: usize = 5000;

/// What the marking task is asked to do, in order.
enum Item {
    /// Mark `ids`; then, if all marks so far are written, confirm `settles`.
    Batch {
        ids: Vec<Uuid>,
        settles: Option<Lsn>,
    },
    /// Answer once everything queued before is done.
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// The handle the pipeline queues batches on.
pub(super) struct PublishedMarks {
    batches: mpsc::Sender<Item>,
    task: tokio::task::JoinHandle<()>,
    /// When the queue is closed, how long the task may keep trying.
    flush_deadline: Arc<tokio::sync::watch::Sender<Option<tokio::time::Instant>>>,
}

struct Writer {
    cfg: Config,
    env: Arc<Env>,
    marker: Arc<Marker>,
    stats: Arc<RelayStats>,
    client: Option<Client>,
    backoff: Backoff,
    /// Told when PostgreSQL cannot be reached for marks.
    stalled: Arc<tokio::sync::Notify>,
    written: prometheus::IntCounter,
}

impl Writer {
    /// Writes one chunk, retrying with backoff until it succeeds or the
    /// deadline (set only once the relay stops) passes. `false` when given up.
    async fn write(
        &mut self,
        ids: &[Uuid],
        deadline: &tokio::sync::watch::Receiver<Option<tokio::time::Instant>>,
    ) -> bool {
        self.backoff.reset();
        loop {
            let result = match self.client.as_ref().filter(|c| !c.is_closed()) {
                Some(c) => self
                    .marker
                    .published(c, ids, Guard::Pending)
                    .await
                    .map(|_| ()),
                None => match connect::connect(&self.cfg, &*self.env).await {
                    Ok(c) => {
                        self.client = Some(c);
                        continue;
                    }
                    Err(e) => Err(e),
                },
            };
            let error = match result {
                Ok(()) => {
                    self.stats
                        .marks_written
                        .fetch_add(ids.len() as u64, Ordering::Relaxed);
                    self.written.inc_by(ids.len() as u64);
                    return true;
                }
                Err(e) => e,
            };
            self.stats.mark_failures.fetch_add(1, Ordering::Relaxed);
            if matches!(
                error.code(),
                Code::PG_CONNECTION_LOST | Code::PG_CONNECT_FAILED
            ) {
                // The slot waits for these marks, and a server shutting down
                // waits for the slot's walsender to be confirmed: the
                // session ends its replication connection so neither waits
                // on the other.
                self.stalled.notify_waiters();
            }
            let delay = self.backoff.next_delay();
            let until = *deadline.borrow();
            if until.is_some_and(|d| tokio::time::Instant::now() + delay > d) {
                return false;
            }
            tracing::warn!(code = %error.code(), error = %error, rows = ids.len(), ?delay, "could not mark rows PUBLISHED; retrying");
            tokio::time::sleep(delay).await;
        }
    }
}

impl PublishedMarks {
    pub(super) fn start(
        cfg: Config,
        env: Arc<Env>,
        marker: Arc<Marker>,
        stats: Arc<RelayStats>,
        written: prometheus::IntCounter,
        feedback: Feedback,
        stalled: Arc<tokio::sync::Notify>,
    ) -> PublishedMarks {
        let (batches, mut rx) = mpsc::channel::<Item>(64);
        let (deadline_tx, deadline) = tokio::sync::watch::channel(None);
        let mut writer = Writer {
            cfg,
            env,
            marker,
            stats,
            client: None,
            backoff: Backoff::new(Duration::from_millis(200), Duration::from_secs(10)),
            stalled,
            written,
        };
        let task = tokio::spawn(async move {
            let mut unwritten = 0usize;
            while let Some(item) = rx.recv().await {
                let (ids, settles) = match item {
                    Item::Batch { ids, settles } => (ids, settles),
                    Item::Flush(done) => {
                        let _ = done.send(());
                        continue;
                    }
                };
                for chunk in ids.chunks(CHUNK) {
                    if unwritten > 0 || !writer.write(chunk, &deadline).await {
                        unwritten += chunk.len();
                    }
                }
                // Once a mark is given up, no later position is confirmed:
                // those transactions come again on the next start.
                if let (0, Some(lsn)) = (unwritten, settles) {
                    feedback.settle(lsn);
                }
            }
            if unwritten > 0 {
                // Their messages are in Kafka; the slot was not confirmed past
                // them, so the next start publishes them again and marks them.
                tracing::error!(rows = unwritten, "stopped with rows not marked PUBLISHED: the database could not be written before the deadline; the slot stays before them");
            }
        });
        PublishedMarks {
            batches,
            task,
            flush_deadline: Arc::new(deadline_tx),
        }
    }

    /// Queues rows to be marked and the position to confirm after them
    /// (waits only when the task is far behind).
    pub(super) async fn queue(&self, ids: Vec<Uuid>, settles: Option<Lsn>) {
        if ids.is_empty() && settles.is_none() {
            return;
        }
        let rows = ids.len();
        if self
            .batches
            .send(Item::Batch { ids, settles })
            .await
            .is_err()
        {
            tracing::error!(
                rows,
                "the PUBLISHED marking task stopped; rows stay PENDING and the slot before them"
            );
        }
    }

    /// Waits, for at most `within`, until everything queued is written and
    /// its position settled.
    pub(super) async fn flush(&self, within: Duration) {
        let (done, written) = tokio::sync::oneshot::channel();
        if self.batches.send(Item::Flush(done)).await.is_ok() {
            let _ = tokio::time::timeout(within, written).await;
        }
    }

    /// Writes what is queued, trying for at most `within`.
    pub(super) async fn finish(self, within: Duration) {
        let _ = self
            .flush_deadline
            .send(Some(tokio::time::Instant::now() + within));
        drop(self.batches);
        if let Err(e) = self.task.await {
            tracing::error!(error = %e, "the PUBLISHED marking task failed");
        }
    }
}
