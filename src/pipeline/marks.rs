//! PUBLISHED marks on their own task and connection, so bookkeeping never
//! holds up publication. A batch whose UPDATE fails is retried with backoff
//! and counted, never dropped while the relay runs; at any stop the queue is
//! flushed, and what cannot be written by the deadline is logged with its
//! count.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_postgres::Client;

use super::stats::RelayStats;
use super::supervisor::Backoff;
use crate::config::{Config, Env};
use crate::contract::value::Uuid;
use crate::pg::connect;
use crate::pg::marks::{Guard, Marker};

/// Rows per UPDATE.
const CHUNK: usize = 5000;

/// The handle the pipeline queues batches on.
pub(super) struct PublishedMarks {
    batches: mpsc::Sender<Vec<Uuid>>,
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
                    return true;
                }
                Err(e) => e,
            };
            self.stats.mark_failures.fetch_add(1, Ordering::Relaxed);
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
    ) -> PublishedMarks {
        let (batches, mut rx) = mpsc::channel::<Vec<Uuid>>(64);
        let (deadline_tx, deadline) = tokio::sync::watch::channel(None);
        let mut writer = Writer {
            cfg,
            env,
            marker,
            stats,
            client: None,
            backoff: Backoff::new(Duration::from_millis(200), Duration::from_secs(10)),
        };
        let task = tokio::spawn(async move {
            let mut unwritten = 0usize;
            while let Some(ids) = rx.recv().await {
                for chunk in ids.chunks(CHUNK) {
                    if unwritten > 0 || !writer.write(chunk, &deadline).await {
                        unwritten += chunk.len();
                    }
                }
            }
            if unwritten > 0 {
                // Their messages are in Kafka and the slot is past them; the
                // rows stay PENDING until marked by hand or a later redrive.
                tracing::error!(rows = unwritten, "stopped with rows not marked PUBLISHED: the database could not be written before the deadline");
            }
        });
        PublishedMarks {
            batches,
            task,
            flush_deadline: Arc::new(deadline_tx),
        }
    }

    /// Queues rows to be marked (waits only when the task is far behind).
    pub(super) async fn queue(&self, ids: Vec<Uuid>) {
        if ids.is_empty() {
            return;
        }
        if let Err(lost) = self.batches.send(ids).await {
            tracing::error!(
                rows = lost.0.len(),
                "the PUBLISHED marking task stopped; rows stay PENDING"
            );
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
