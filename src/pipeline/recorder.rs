//! The recorder: published-row bookkeeping on its own task and connection,
//! so it never holds up publication. Each batch of confirmed ids is
//! recorded in the journal (one INSERT per batch, not an UPDATE per row); a
//! write that fails for a passing reason (the retry policy's `retry`) is
//! retried with backoff and counted, never dropped while the relay runs;
//! any other failure stops the relay with its code, the slot before the
//! rows. At any stop the queue is flushed, and what cannot be written by
//! the deadline is logged with its count.
//!
//! The slot is confirmed from here: a batch carries the position its rows'
//! transactions end at, and that position is settled only once the batch
//! and every batch before it are recorded. So a transaction the slot has
//! passed always has its rows recorded; a crash before that loses only the
//! confirmation, and the transactions come again and are recorded then.
//!
//! The journal is folded into the rows' status (PUBLISHED) by the same task
//! whenever nothing is queued and the relay keeps up with the slot (in the
//! last second the walsender said it had sent past the WAL flushed at the
//! previous look, or no row came for a second) and has had no full batch
//! for a second (the walsender is done with a backlog long before Kafka has
//! all of it), and at a clean stop: a backlog drains at the speed of the
//! stream, and the table catches up once it is drained.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio::time::Instant;

use super::ledger::Journal;
use super::stats::RelayStats;
use super::supervisor::Backoff;
use crate::error::policy::{self, Directive};
use crate::error::{Code, Error};
use crate::lsn::Lsn;
use crate::replication::Feedback;
use crate::row::value::Uuid;

/// PUBLISHED marks go to the recorder at least this often, or per this many.
/// The interval is the window a crash leaves: rows Kafka confirmed and the
/// relay had not yet recorded are sent again by the next session (at 250 ms
/// the kill test's restarts sent about 1.4 times as many again as at 100 ms).
pub(super) const MARK_BATCH: usize = 5000;
pub(super) const MARK_INTERVAL: Duration = Duration::from_millis(100);

/// Ids per journal entry (and so per fold's UPDATE).
const CHUNK: usize = 5000;

/// How recent the walsender's last wait must be for the relay to count as
/// keeping up.
const KEEPING_UP: Duration = Duration::from_secs(1);

/// How long past its deadline the recorder may take to give up.
const FINISH_GRACE: Duration = Duration::from_secs(1);

/// After a fold fails, how long until the next try (folding gates nothing).
const FOLD_RETRY: Duration = Duration::from_secs(5);

/// What the recorder is asked to do, in order.
enum Item {
    /// Record `ids`; then, if all so far are recorded, confirm `settles`.
    Batch {
        ids: Vec<Uuid>,
        settles: Option<Lsn>,
    },
    /// Answer once everything queued before is done.
    Flush(oneshot::Sender<()>),
}

/// What the recorder reports to and reads from.
pub(super) struct Links {
    pub(super) stats: Arc<RelayStats>,
    pub(super) journaled: prometheus::IntCounter,
    pub(super) folded: prometheus::IntCounter,
    pub(super) feedback: Feedback,
    pub(super) trouble: Arc<Trouble>,
}

/// What the recorder tells the sessions when it cannot record: the slot
/// waits for the rows, so no session may go on as if they were recorded.
#[derive(Debug, Default)]
pub(crate) struct Trouble {
    /// Told when PostgreSQL cannot be reached (a write the policy retries):
    /// the session ends its replication connection rather than keep the
    /// walsender waiting.
    stalled: Notify,
    /// A write the policy does not retry: every session ends with it, and
    /// the policy stops the relay.
    stopped: Mutex<Option<Error>>,
    any_stop: AtomicBool,
}

impl Trouble {
    /// Waits until the recorder stalls or stops.
    pub(crate) async fn alarmed(&self) {
        self.stalled.notified().await;
    }

    /// The write failure the recorder gave up on, if any.
    pub(crate) fn stopped(&self) -> Option<Error> {
        if !self.any_stop.load(Ordering::Acquire) {
            return None;
        }
        self.stopped
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn stall(&self) {
        self.stalled.notify_waiters();
    }

    fn stop(&self, e: Error) {
        *self.stopped.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
        self.any_stop.store(true, Ordering::Release);
        self.stalled.notify_waiters();
    }
}

/// The handle sessions queue batches on.
pub(super) struct Recorder {
    batches: mpsc::Sender<Item>,
    task: tokio::task::JoinHandle<()>,
    /// When the queue is closed, how long the task may keep trying.
    flush_deadline: watch::Sender<Option<Instant>>,
}

struct Task<J> {
    journal: J,
    links: Links,
    backoff: Backoff,
    deadline: watch::Receiver<Option<Instant>>,
    /// Rows read at the last look, and when it changed.
    rows_seen: (u64, Instant),
    /// No fold before this (set after a failed one).
    fold_after: Instant,
    /// The server's flushed WAL position at the last look.
    flush_seen: Option<Lsn>,
    /// When the last full batch came: the pipeline had more confirmed rows
    /// than one batch takes, so it is still working off a backlog.
    full_batch_at: Option<Instant>,
    /// Ids given up on (the deadline passed): no later position is
    /// confirmed.
    unwritten: usize,
    /// Journal entries may be left to fold (an earlier run may have left
    /// some).
    unfolded: bool,
}

impl Recorder {
    pub(super) fn start<J: Journal>(journal: J, links: Links) -> Recorder {
        let (batches, rx) = mpsc::channel::<Item>(64);
        let (flush_deadline, deadline) = watch::channel(None);
        let now = Instant::now();
        let task = Task {
            journal,
            links,
            backoff: Backoff::new(Duration::from_millis(200), Duration::from_secs(10)),
            deadline,
            rows_seen: (0, now),
            fold_after: now,
            flush_seen: None,
            full_batch_at: None,
            unwritten: 0,
            unfolded: true,
        };
        Recorder {
            batches,
            task: tokio::spawn(task.run(rx)),
            flush_deadline,
        }
    }

    /// Queues rows to record and the position to confirm after them (waits
    /// only when the task is far behind).
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
                "the recorder stopped; rows stay PENDING and the slot before them"
            );
        }
    }

    /// Waits, for at most `within`, until everything queued is recorded and
    /// its position settled.
    pub(super) async fn flush(&self, within: Duration) {
        let (done, written) = oneshot::channel();
        if self.batches.send(Item::Flush(done)).await.is_ok() {
            let _ = tokio::time::timeout(within, written).await;
        }
    }

    /// Records what is queued, trying for at most `within`, then folds
    /// until that deadline. A write that hangs past it (a silent
    /// connection) is abandoned: the slot was not confirmed past its rows,
    /// so the next start publishes and records them again.
    pub(super) async fn finish(mut self, within: Duration) {
        let _ = self.flush_deadline.send(Some(Instant::now() + within));
        drop(self.batches);
        match tokio::time::timeout(within + FINISH_GRACE, &mut self.task).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "the recorder failed"),
            Err(_) => {
                self.task.abort();
                tracing::error!(?within, "the recorder did not finish within the drain timeout (a write hangs); the slot stays before what it held");
            }
        }
    }
}

#[cfg(test)]
impl Recorder {
    /// The process died: whatever was queued is lost.
    pub(super) fn crash(self) {
        self.task.abort();
    }
}

impl<J: Journal> Task<J> {
    async fn run(mut self, mut rx: mpsc::Receiver<Item>) {
        while let Some(item) = self.next(&mut rx).await {
            match item {
                Item::Batch { ids, settles } => self.batch(ids, settles).await,
                Item::Flush(done) => {
                    let _ = done.send(());
                }
            }
        }
        self.stop().await;
    }

    /// The next item; folds while waiting for one when the relay keeps up.
    async fn next(&mut self, rx: &mut mpsc::Receiver<Item>) -> Option<Item> {
        loop {
            if !self.unfolded {
                return rx.recv().await;
            }
            if self.keeping_up().await {
                match rx.try_recv() {
                    Ok(item) => return Some(item),
                    Err(mpsc::error::TryRecvError::Empty) => {
                        self.unfolded = self.fold_one().await;
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => return None,
                }
            } else if let Ok(item) = tokio::time::timeout(KEEPING_UP / 4, rx.recv()).await {
                // Otherwise look again whether the relay keeps up.
                return item;
            }
        }
    }

    async fn batch(&mut self, ids: Vec<Uuid>, settles: Option<Lsn>) {
        if ids.len() >= MARK_BATCH {
            self.full_batch_at = Some(Instant::now());
        }
        for chunk in ids.chunks(CHUNK) {
            if self.unwritten > 0 || !self.write(chunk).await {
                self.unwritten += chunk.len();
            }
            self.unfolded = true;
        }
        // Once a batch is given up, no later position is confirmed: those
        // transactions come again on the next start.
        if let (0, Some(lsn)) = (self.unwritten, settles) {
            self.links.feedback.settle(lsn);
        }
    }

    /// Records one chunk, retrying what the policy retries with backoff
    /// until it succeeds or the deadline (set only once the relay stops)
    /// passes. `false` when given up.
    async fn write(&mut self, ids: &[Uuid]) -> bool {
        self.backoff.reset();
        loop {
            let error = match self.journal.record(ids).await {
                Ok(()) => {
                    let n = ids.len() as u64;
                    self.links
                        .stats
                        .marks_written
                        .fetch_add(n, Ordering::Relaxed);
                    self.links.journaled.inc_by(n);
                    return true;
                }
                Err(e) => e,
            };
            self.links
                .stats
                .mark_failures
                .fetch_add(1, Ordering::Relaxed);
            if policy::directive(&error) != Directive::Retry {
                crate::log_error!(
                    error,
                    error,
                    rows = ids.len(),
                    "cannot record published rows, and trying again would not help: the relay stops; the slot stays before them"
                );
                self.links.trouble.stop(error);
                return false;
            }
            if matches!(
                error.code(),
                Code::PG_CONNECTION_LOST | Code::PG_CONNECT_FAILED
            ) {
                // The slot waits for these ids, and a server shutting down
                // waits for the slot's walsender to be confirmed: the
                // session ends its replication connection so neither waits
                // on the other.
                self.links.trouble.stall();
            }
            let delay = self.backoff.next_delay();
            let until = *self.deadline.borrow();
            if until.is_some_and(|d| Instant::now() + delay > d) {
                return false;
            }
            crate::log_error!(
                warn,
                error,
                rows = ids.len(),
                ?delay,
                "could not record published rows; retrying"
            );
            // A stop sets the deadline: the next try comes at once, so a
            // backoff of up to 10 s never outlasts the drain.
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                Ok(()) = self.deadline.changed() => {}
            }
        }
    }

    /// Whether the relay keeps up with the slot, so a fold costs the stream
    /// nothing: no row came for a second, or, in the last second, the
    /// walsender said (with nothing waiting for the relay) that it had sent
    /// past the WAL flushed at the last look. A keepalive alone is no proof:
    /// one comes at a stream's start, with the whole backlog still to decode.
    async fn keeping_up(&mut self) -> bool {
        let now = Instant::now();
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
        let stats = &self.links.stats;
        let rows = stats.rows_read.load(Ordering::Relaxed);
        if rows != self.rows_seen.0 {
            self.rows_seen = (rows, now);
        }
        if now.duration_since(self.rows_seen.1) >= KEEPING_UP {
            return true;
        }
        let keepalive = stats.keepalive_at.load(Ordering::Relaxed) as i64;
        if crate::metrics::unix_micros() - keepalive >= KEEPING_UP.as_micros() as i64 {
            return false;
        }
        let sent = Lsn(stats.keepalive_sent.load(Ordering::Relaxed));
        let Ok(flushed) = self.journal.wal_flushed().await else {
            return false;
        };
        let caught_up = self.flush_seen.is_some_and(|seen| sent >= seen);
        self.flush_seen = Some(flushed);
        caught_up
    }

    /// Folds one journal entry; `false` once none is left (or on failure,
    /// which is logged and tried again later).
    async fn fold_one(&mut self) -> bool {
        match self.journal.fold_one().await {
            Ok(Some(marked)) => {
                self.links
                    .stats
                    .marks_folded
                    .fetch_add(marked, Ordering::Relaxed);
                self.links.folded.inc_by(marked);
                true
            }
            Ok(None) => false,
            Err(e) => self.fold_failed(e),
        }
    }

    fn fold_failed(&mut self, e: Error) -> bool {
        crate::log_error!(
            warn,
            e,
            "could not fold the published journal into the table; trying again later"
        );
        self.fold_after = Instant::now() + FOLD_RETRY;
        true
    }

    /// At the stop: what could not be recorded is said; otherwise the table
    /// is made to tell the truth, if time allows (what is left is folded by
    /// the next start, `cutover` or `purge`).
    async fn stop(mut self) {
        if self.unwritten > 0 {
            // Their messages are in Kafka; the slot was not confirmed past
            // them, so the next start publishes them again and records them.
            tracing::error!(rows = self.unwritten, "stopped with published rows not recorded: the database could not be written before the deadline; the slot stays before them");
            return;
        }
        let until = self.deadline.borrow().unwrap_or_else(Instant::now);
        while self.unfolded && Instant::now() < until {
            self.fold_after = Instant::now();
            self.unfolded = self.fold_one().await && self.fold_after <= Instant::now();
        }
        if self.unfolded {
            tracing::info!("stopped before the published journal was folded into the table; the next start folds the rest");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::pipeline::testing::table::Table;
    use crate::pipeline::testing::world::relay_config;

    /// A stop that comes while the recorder waits out a long backoff ends
    /// it at once: the rows it could not write are said, within the drain.
    #[tokio::test(start_paused = true)]
    async fn a_stop_during_a_backoff_gives_up_within_the_drain() {
        let table = Table::default();
        table.state().journal_failures = usize::MAX;
        let metrics = Metrics::new(relay_config().metric_limits());
        let stats = Arc::new(RelayStats::default());
        let (feedback, _) = Feedback::new(Lsn::ZERO);
        let recorder = Recorder::start(
            table.journal(),
            Links {
                stats: stats.clone(),
                journaled: metrics.journaled.clone(),
                folded: metrics.marks_written.clone(),
                feedback: feedback.clone(),
                trouble: Arc::new(Trouble::default()),
            },
        );
        recorder.queue(vec![Uuid([7; 16])], Some(Lsn(100))).await;
        // Long enough for the backoff to reach its 10 s ceiling.
        tokio::time::sleep(Duration::from_secs(60)).await;
        let tries = stats.mark_failures.load(Ordering::Relaxed);
        assert!(tries > 5, "{tries} tries");
        let started = Instant::now();
        recorder.finish(Duration::from_secs(3)).await;
        let took = started.elapsed();
        assert!(took < Duration::from_secs(3), "the stop took {took:?}");
        assert_eq!(
            feedback.settled(),
            Lsn::ZERO,
            "nothing settled past the rows"
        );
        assert_eq!(stats.marks_written.load(Ordering::Relaxed), 0);
    }
}
