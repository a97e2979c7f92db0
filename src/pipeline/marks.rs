//! Published-row bookkeeping on its own task and connection, so it never
//! holds up publication. Each batch of confirmed ids is recorded in the
//! journal (`pg::journal`: one INSERT per batch, not an UPDATE per row); a
//! write that fails is retried with backoff and counted, never dropped while
//! the relay runs; at any stop the queue is flushed, and what cannot be
//! written by the deadline is logged with its count.
//!
//! The slot is confirmed from here: a batch carries the position its rows'
//! transactions end at, and that position is settled only once the batch and
//! every batch before it are recorded. So a transaction the slot has passed
//! always has its rows recorded; a crash before that loses only the
//! confirmation, and the transactions come again and are recorded then.
//!
//! The journal is folded into the rows' status (PUBLISHED) by the same task
//! whenever nothing is queued and the relay keeps up with the slot (in the
//! last second the walsender said it had sent past the WAL flushed at the
//! previous look, or no row came for a second) and has had no full batch for
//! a second (the walsender is done with a backlog long before Kafka has all
//! of it; a relay kept busy above a batch every second folds when the load
//! drops), and at a clean stop: a
//! backlog drains at the speed of the stream, and the table catches up once
//! it is drained.

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
use crate::pg::journal::{self, Journal};
use crate::pg::lsn::Lsn;
use crate::replication::Feedback;

use super::session::MARK_BATCH;

/// Ids per journal entry (and so per fold's UPDATE).
const CHUNK: usize = 5000;

/// How recent the walsender's last wait must be for the relay to count as
/// keeping up.
const KEEPING_UP: Duration = Duration::from_secs(1);

/// After a fold fails, how long until the next try (folding gates nothing).
const FOLD_RETRY: Duration = Duration::from_secs(5);

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
    journal: Journal,
    stats: Arc<RelayStats>,
    client: Option<Client>,
    backoff: Backoff,
    /// Told when PostgreSQL cannot be reached for marks.
    stalled: Arc<tokio::sync::Notify>,
    journaled: prometheus::IntCounter,
    folded: prometheus::IntCounter,
    /// Rows read at the last look, and when it changed.
    rows_seen: (u64, tokio::time::Instant),
    /// No fold before this (set after a failed one).
    fold_after: tokio::time::Instant,
    /// The server's flushed WAL position at the last look.
    flush_seen: Option<Lsn>,
    /// When the pipeline last queued a full batch: it had more confirmed
    /// rows than one batch takes, so it is still working off a backlog.
    full_batch_at: Option<tokio::time::Instant>,
}

impl Writer {
    /// Records one chunk, retrying with backoff until it succeeds or the
    /// deadline (set only once the relay stops) passes. `false` when given up.
    async fn write(
        &mut self,
        ids: &[Uuid],
        deadline: &tokio::sync::watch::Receiver<Option<tokio::time::Instant>>,
    ) -> bool {
        self.backoff.reset();
        loop {
            let result = match self.client.as_ref().filter(|c| !c.is_closed()) {
                Some(c) => self.journal.record(c, ids).await,
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
                    self.journaled.inc_by(ids.len() as u64);
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
            tracing::warn!(code = %error.code(), error = %error, rows = ids.len(), ?delay, "could not record published rows; retrying");
            tokio::time::sleep(delay).await;
        }
    }

    /// Whether the relay keeps up with the slot, so a fold costs the stream
    /// nothing: no row came for a second, or, in the last second, the
    /// walsender said (with nothing waiting for the relay) that it had sent
    /// past the WAL flushed at the last look. A keepalive alone is no proof:
    /// one comes at a stream's start, with the whole backlog still to decode.
    async fn keeping_up(&mut self) -> bool {
        let now = tokio::time::Instant::now();
        if now < self.fold_after {
            return false;
        }
        // The walsender can be done with a backlog while thousands of its
        // rows are still on their way to Kafka: a fold then competes with
        // publishing them, in the relay and in PostgreSQL.
        if self
            .full_batch_at
            .is_some_and(|at| now.duration_since(at) < KEEPING_UP)
        {
            return false;
        }
        let rows = self.stats.rows_read.load(Ordering::Relaxed);
        if rows != self.rows_seen.0 {
            self.rows_seen = (rows, now);
        }
        if now.duration_since(self.rows_seen.1) >= KEEPING_UP {
            return true;
        }
        let keepalive = self.stats.keepalive_at.load(Ordering::Relaxed) as i64;
        if crate::metrics::unix_micros() - keepalive >= KEEPING_UP.as_micros() as i64 {
            return false;
        }
        let Some(client) = self.client.as_ref().filter(|c| !c.is_closed()) else {
            return false;
        };
        let Ok(flushed) = journal::wal_flushed(client).await else {
            return false;
        };
        let sent = Lsn(self.stats.keepalive_sent.load(Ordering::Relaxed));
        let caught_up = self.flush_seen.is_some_and(|seen| sent >= seen);
        self.flush_seen = Some(flushed);
        caught_up
    }

    /// Folds one journal entry; `false` once none is left (or on failure,
    /// which is logged and tried again later).
    async fn fold_one(&mut self) -> bool {
        let client = match self.client.as_ref().filter(|c| !c.is_closed()) {
            Some(c) => c,
            None => match connect::connect(&self.cfg, &*self.env).await {
                Ok(c) => self.client.insert(c),
                Err(e) => return self.fold_failed(e),
            },
        };
        match self.journal.fold_one(client).await {
            Ok(Some(f)) => {
                self.stats
                    .marks_folded
                    .fetch_add(f.marked, Ordering::Relaxed);
                self.folded.inc_by(f.marked);
                true
            }
            Ok(None) => false,
            Err(e) => self.fold_failed(e),
        }
    }

    fn fold_failed(&mut self, e: crate::error::Error) -> bool {
        tracing::warn!(code = %e.code(), error = %e, "could not fold the published journal into the table; trying again later");
        self.fold_after = tokio::time::Instant::now() + FOLD_RETRY;
        true
    }
}

impl PublishedMarks {
    pub(super) fn start(
        cfg: Config,
        env: Arc<Env>,
        stats: Arc<RelayStats>,
        journaled: prometheus::IntCounter,
        folded: prometheus::IntCounter,
        feedback: Feedback,
        stalled: Arc<tokio::sync::Notify>,
    ) -> PublishedMarks {
        let (batches, mut rx) = mpsc::channel::<Item>(64);
        let (deadline_tx, deadline) = tokio::sync::watch::channel(None);
        let now = tokio::time::Instant::now();
        let mut writer = Writer {
            journal: Journal::new(&cfg),
            cfg,
            env,
            stats,
            client: None,
            backoff: Backoff::new(Duration::from_millis(200), Duration::from_secs(10)),
            stalled,
            journaled,
            folded,
            rows_seen: (0, now),
            fold_after: now,
            flush_seen: None,
            full_batch_at: None,
        };
        let task = tokio::spawn(async move {
            let mut unwritten = 0usize;
            // An earlier run may have left entries.
            let mut unfolded = true;
            loop {
                let item = if unfolded && writer.keeping_up().await {
                    match rx.try_recv() {
                        Ok(item) => Some(item),
                        Err(mpsc::error::TryRecvError::Empty) => {
                            unfolded = writer.fold_one().await;
                            continue;
                        }
                        Err(mpsc::error::TryRecvError::Disconnected) => None,
                    }
                } else if unfolded {
                    // Look again whether the relay keeps up.
                    match tokio::time::timeout(KEEPING_UP / 4, rx.recv()).await {
                        Ok(item) => item,
                        Err(_) => continue,
                    }
                } else {
                    rx.recv().await
                };
                let Some(item) = item else { break };
                let (ids, settles) = match item {
                    Item::Batch { ids, settles } => {
                        if ids.len() >= MARK_BATCH {
                            writer.full_batch_at = Some(tokio::time::Instant::now());
                        }
                        (ids, settles)
                    }
                    Item::Flush(done) => {
                        let _ = done.send(());
                        continue;
                    }
                };
                for chunk in ids.chunks(CHUNK) {
                    if unwritten > 0 || !writer.write(chunk, &deadline).await {
                        unwritten += chunk.len();
                    }
                    unfolded = true;
                }
                // Once a mark is given up, no later position is confirmed:
                // those transactions come again on the next start.
                if let (0, Some(lsn)) = (unwritten, settles) {
                    feedback.settle(lsn);
                }
            }
            if unwritten > 0 {
                // Their messages are in Kafka; the slot was not confirmed past
                // them, so the next start publishes them again and records them.
                tracing::error!(rows = unwritten, "stopped with published rows not recorded: the database could not be written before the deadline; the slot stays before them");
                return;
            }
            // A clean stop leaves the table telling the truth, if time allows;
            // what is left is folded by the next start, `cutover` or `purge`.
            let until = deadline.borrow().unwrap_or_else(tokio::time::Instant::now);
            while unfolded && tokio::time::Instant::now() < until {
                writer.fold_after = tokio::time::Instant::now();
                unfolded =
                    writer.fold_one().await && writer.fold_after <= tokio::time::Instant::now();
            }
            if unfolded {
                tracing::info!("stopped before the published journal was folded into the table; the next start folds the rest");
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
