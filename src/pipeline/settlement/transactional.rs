//! Transactional delivery: whole source transactions per Kafka transaction.
//!
//! A Kafka transaction is closed only between source transactions, at the
//! first boundary past any bound (records, bytes, age). Its records become
//! visible to read_committed consumers together, with the end LSN of its
//! last source transaction as the progress; until then nothing of it
//! settles, so the slot never passes what Kafka has not committed.
//!
//! A failed delivery aborts the transaction: rows Kafka refused for their
//! own reason are recorded FAILED and remembered (`Shared::poison`), and the
//! session ends; the next one starts from the slot and publishes the same
//! source transactions again without them. A new session first fences any
//! older producer with the id, then reads the progress: source transactions
//! whose commit record lies before it are only marked, not published again.

use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::{seconds_since, Settlement, Start};
use crate::error::policy::{self, Failure as Refusal, Mode, Next};
use crate::error::{Code, Error};
use crate::kafka::publisher::Outcome;
use crate::lsn::Lsn;
use crate::metrics::{names, unix_micros};
use crate::pg::row_status::Guard;
use crate::pipeline::ledger::Ledger;
use crate::pipeline::parts::{Current, Failure, Parts};
use crate::pipeline::recheck::Recheck;
use crate::pipeline::shared::{Bounds, Shared};
use crate::pipeline::sink::{Delivery, Sink};
use crate::pipeline::watermark::{TxSeq, Watermark};
use crate::row::value::{Timestamp, Uuid};

/// The open Kafka transaction.
#[derive(Debug, Default)]
struct KafkaTxn {
    /// When it began; `None` when no transaction is open.
    began: Option<Instant>,
    records: usize,
    bytes: usize,
    /// The end of the last whole source transaction in it: the progress it
    /// commits.
    last_end: Option<Lsn>,
    /// Rows Kafka confirmed: published once the transaction commits.
    confirmed: Vec<Uuid>,
    /// Rows Kafka refused for the row's own reason: recorded FAILED once
    /// the transaction is aborted, and left out when it is published again.
    poison: Vec<(Uuid, Error)>,
    /// Any other failed delivery (an operator's refusal, a timeout).
    failed: Option<Error>,
    /// Confirmed records by the session's destination index: counted as
    /// published at the commit.
    by_destination: Vec<u64>,
    /// Commit times (Unix µs) of its source transactions.
    commits: Vec<i64>,
}

impl KafkaTxn {
    fn is_open(&self) -> bool {
        self.began.is_some()
    }

    /// One delivery failed: the transaction can only abort.
    fn doomed(&self) -> bool {
        self.failed.is_some() || !self.poison.is_empty()
    }

    /// At a source transaction boundary: whether to commit now.
    fn full(&self, bounds: &Bounds, now: Instant) -> bool {
        self.records >= bounds.records
            || self.bytes >= bounds.bytes
            || self.began.is_some_and(|b| now >= b + bounds.age)
    }

    /// When an idle open transaction is due.
    fn deadline(&self, bounds: &Bounds) -> Option<Instant> {
        self.began.map(|b| b + bounds.age)
    }
}

pub(crate) struct Transactional {
    bounds: Bounds,
    /// Source transactions whose commit record lies before this position
    /// are already in Kafka.
    published_before: Option<Lsn>,
    txn: KafkaTxn,
}

/// Whether a source transaction whose commit record is at `final_lsn` is
/// before the progress. The progress is the end of the last one published:
/// every earlier commit record starts before it, every later one at or
/// after it.
fn before(progress: Option<Lsn>, final_lsn: Lsn) -> bool {
    progress.is_some_and(|p| final_lsn < p)
}

impl Settlement for Transactional {
    async fn start<K: Sink>(start: Start<'_, K>) -> Result<Self, Error> {
        let published_before = start.sink.start_transactions().await?;
        tracing::info!(
            progress = %published_before.map(|l| l.to_string()).unwrap_or_else(|| "none".into()),
            "transactional producer ready"
        );
        Ok(Transactional {
            bounds: start.shared.bounds(),
            published_before,
            txn: KafkaTxn::default(),
        })
    }

    /// The progress in Kafka already says which source transactions are
    /// there, whole.
    fn recheck(_: &Shared) -> Recheck {
        Recheck::Done
    }

    fn already_published(&self, final_lsn: Lsn) -> bool {
        before(self.published_before, final_lsn)
    }

    fn before_send<K: Sink, L: Ledger>(
        &mut self,
        parts: &mut Parts<'_, K, L>,
        bytes: usize,
    ) -> Result<(), Error> {
        if !self.txn.is_open() {
            parts.sink.begin_transaction()?;
            self.txn.began = Some(Instant::now());
        }
        self.txn.records += 1;
        self.txn.bytes += bytes;
        Ok(())
    }

    fn on_delivery<K: Sink, L: Ledger>(&mut self, _: &mut Parts<'_, K, L>, d: Delivery) {
        let id = d.ticket.message_id;
        match d.outcome {
            Outcome::Confirmed => {
                self.txn.confirmed.push(id);
                let i = d.ticket.destination as usize;
                if self.txn.by_destination.len() <= i {
                    self.txn.by_destination.resize(i + 1, 0);
                }
                if let Some(n) = self.txn.by_destination.get_mut(i) {
                    *n += 1;
                }
            }
            Outcome::Rejected(error) if records_failed(&error) => {
                self.txn.poison.push((id, error));
            }
            Outcome::Rejected(error) | Outcome::Retry(error) | Outcome::Ambiguous(error) => {
                self.txn
                    .failed
                    .get_or_insert_with(|| error.context(format!("message {id}")));
            }
        }
    }

    /// A row's fault before the record left the process: the row never
    /// joined the Kafka transaction and is recorded FAILED before it
    /// commits. An operator's: the transaction cannot commit without the
    /// record, so the session ends and a later one tries again.
    fn rejected<K: Sink, L: Ledger>(
        &mut self,
        parts: &mut Parts<'_, K, L>,
        tx: TxSeq,
        id: Uuid,
        error: Error,
    ) {
        if records_failed(&error) {
            parts.failures.push(Failure {
                tx: Some(tx),
                id,
                error,
            });
        } else {
            parts.end_with(error.context(format!("message {id}")));
        }
    }

    async fn committed<K: Sink, L: Ledger>(
        &mut self,
        parts: &mut Parts<'_, K, L>,
        end_lsn: Lsn,
        commit_time: Timestamp,
    ) -> Result<(), Error> {
        if !self.txn.is_open() {
            // Nothing of it went to Kafka (each row was left out or
            // refused): it settles once its refusals are recorded.
            parts.record_failures(Guard::Pending).await?;
            parts.settle(end_lsn);
            return Ok(());
        }
        self.txn.last_end = Some(end_lsn);
        self.txn.commits.push(commit_time.unix_micros());
        if self.txn.full(&self.bounds, Instant::now()) {
            self.end(parts, Guard::Pending).await?;
        }
        Ok(())
    }

    async fn after_step<K: Sink, L: Ledger>(
        &mut self,
        parts: &mut Parts<'_, K, L>,
    ) -> Result<(), Error> {
        if self.txn.doomed() {
            self.end(parts, Guard::Pending).await?;
        }
        parts.record_failures(Guard::Pending).await
    }

    fn due(&self) -> Option<Instant> {
        self.txn.deadline(&self.bounds)
    }

    async fn on_due<K: Sink, L: Ledger>(
        &mut self,
        parts: &mut Parts<'_, K, L>,
    ) -> Result<(), Error> {
        self.end(parts, Guard::Pending).await
    }

    fn reads_while_draining(&self, current: Current) -> bool {
        current != Current::Idle
    }

    async fn drained<K: Sink, L: Ledger>(
        &mut self,
        parts: &mut Parts<'_, K, L>,
        current: Current,
    ) -> Result<bool, Error> {
        if current != Current::Idle {
            return Ok(false);
        }
        self.end(parts, Guard::Pending).await?;
        Ok(true)
    }

    fn oldest_unsettled<K, L>(&self, _: &Parts<'_, K, L>) -> Option<i64> {
        self.txn.commits.first().copied()
    }

    async fn finish_backlog<K: Sink, L: Ledger>(
        &mut self,
        parts: &mut Parts<'_, K, L>,
        guard: Guard,
    ) -> Result<(), Error> {
        self.end(parts, guard).await
    }

    /// Aborts an open transaction, which is also where a frozen relay
    /// learns it was fenced.
    async fn close<K: Sink, L: Ledger>(&mut self, parts: &mut Parts<'_, K, L>) -> Option<Error> {
        let mut fatal = None;
        if self.txn.is_open() {
            if let Err(e) = parts.sink.abort_transaction().await {
                crate::log_error!(
                    warn,
                    e,
                    "aborting the open Kafka transaction at the session's end"
                );
                fatal = Some(e).filter(|e| policy::directive(e) == policy::Directive::Fatal);
            }
        }
        fatal.or_else(|| {
            parts
                .sink
                .fatal_error()
                .filter(|e| policy::directive(e) == policy::Directive::Fatal)
        })
    }
}

impl Transactional {
    /// Ends the open Kafka transaction: commits it with the progress, or,
    /// when a delivery failed, aborts it, records the rows Kafka refused as
    /// FAILED and ends the session, whose successor publishes the rest
    /// again. `Err` only when recording FAILED rows failed.
    async fn end<K: Sink, L: Ledger>(
        &mut self,
        parts: &mut Parts<'_, K, L>,
        guard: Guard,
    ) -> Result<(), Error> {
        if !self.txn.is_open() {
            return Ok(());
        }
        self.await_reports(parts).await;
        // Refusals of the mapper are FAILED before their transaction counts
        // as published (a later session would mark its rows PUBLISHED).
        parts.record_failures(guard).await?;
        let txn = std::mem::take(&mut self.txn);
        if txn.doomed() || parts.ending.is_some() {
            return self.abort(parts, txn, guard).await;
        }
        match parts.sink.commit_transaction(txn.last_end).await {
            Ok(()) => {
                committed(parts, txn);
                Ok(())
            }
            Err(e) => {
                if e.code() == Code::KAFKA_TRANSACTION_ABORTED {
                    abort_quietly(parts).await;
                }
                // Unknown outcome: the next session's producer resolves it
                // and the progress says which source transactions are in.
                parts.end_with(e);
                Ok(())
            }
        }
    }

    /// Every report of the open transaction.
    async fn await_reports<K: Sink, L: Ledger>(&mut self, parts: &mut Parts<'_, K, L>) {
        let mut reports = Vec::new();
        while parts.in_flight.messages > 0 {
            if parts.sink.reports(&mut reports, 512).await == 0 {
                parts.end_with(Error::new(
                    Code::INTERNAL,
                    "the producer's delivery reports stopped",
                ));
                return;
            }
            for d in reports.drain(..) {
                parts.account(&d);
                self.on_delivery(parts, d);
            }
        }
    }

    async fn abort<K: Sink, L: Ledger>(
        &mut self,
        parts: &mut Parts<'_, K, L>,
        txn: KafkaTxn,
        guard: Guard,
    ) -> Result<(), Error> {
        abort_quietly(parts).await;
        if !txn.poison.is_empty() {
            let poisoned: Vec<Uuid> = txn.poison.iter().map(|(id, _)| *id).collect();
            parts
                .failures
                .extend(txn.poison.into_iter().map(|(id, error)| Failure {
                    tx: None,
                    id,
                    error,
                }));
            parts.record_failures(guard).await?;
            // Left out of later sessions only once recorded: a row left out
            // settles with its transaction, so it must be FAILED first.
            let rows = poisoned.len();
            parts.shared.add_poison(poisoned);
            tracing::warn!(rows, "a Kafka transaction was aborted for rows Kafka refused; they are FAILED and the rest is published again");
        }
        parts.end_with(txn.failed.unwrap_or_else(|| {
            Error::new(
                Code::KAFKA_TRANSACTION_ABORTED,
                "rows Kafka refused aborted the transaction; publishing its other rows again",
            )
        }));
        Ok(())
    }
}

/// Whether the policy records a row refused with `error` FAILED; any other
/// refusal ends the session (a Kafka transaction cannot commit without it).
fn records_failed(error: &Error) -> bool {
    policy::next(Refusal::Refused(error.code()), Mode::Transactional) == Next::RecordFailed
}

/// A committed Kafka transaction: its rows are published and its progress
/// settles.
fn committed<K: Sink, L: Ledger>(parts: &mut Parts<'_, K, L>, txn: KafkaTxn) {
    // The watermark settles nothing here; it only numbers transactions, so
    // it is emptied at every commit.
    parts.watermark = Watermark::new();
    let stats = &parts.shared.stats;
    stats.kafka_commits.fetch_add(1, Ordering::Relaxed);
    stats
        .published
        .fetch_add(txn.confirmed.len() as u64, Ordering::Relaxed);
    let m = &parts.shared.metrics;
    m.kafka_transaction(names::COMMITTED);
    let now = unix_micros();
    for at in &txn.commits {
        m.commit_to_ack.observe(seconds_since(now, *at));
    }
    for (i, n) in txn.by_destination.iter().enumerate() {
        parts.count_published(i as u32, *n);
    }
    parts.owe_marks(txn.confirmed);
    if let Some(lsn) = txn.last_end {
        parts.settle(lsn);
    }
}

async fn abort_quietly<K: Sink, L: Ledger>(parts: &mut Parts<'_, K, L>) {
    match parts.sink.abort_transaction().await {
        Ok(()) => {
            parts
                .shared
                .stats
                .kafka_aborts
                .fetch_add(1, Ordering::Relaxed);
            parts.shared.metrics.kafka_transaction(names::ABORTED);
        }
        Err(e) => parts.end_with(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn bounds() -> Bounds {
        Bounds {
            records: 3,
            bytes: 100,
            age: Duration::from_millis(50),
        }
    }

    #[test]
    fn a_transaction_is_due_past_any_bound() {
        let now = Instant::now();
        let mut t = KafkaTxn {
            began: Some(now),
            ..KafkaTxn::default()
        };
        assert!(!t.full(&bounds(), now));
        t.records = 3;
        assert!(t.full(&bounds(), now));
        t.records = 1;
        t.bytes = 100;
        assert!(t.full(&bounds(), now));
        t.bytes = 10;
        assert!(t.full(&bounds(), now + Duration::from_millis(50)));
        assert_eq!(t.deadline(&bounds()), Some(now + Duration::from_millis(50)));
        assert_eq!(KafkaTxn::default().deadline(&bounds()), None);
    }

    #[test]
    fn only_commits_before_the_progress_are_skipped() {
        let mut t = KafkaTxn::default();
        assert!(!t.doomed());
        t.poison
            .push((Uuid([1; 16]), Error::new(Code::MESSAGE_TOO_LARGE, "big")));
        assert!(t.doomed());
        // The last published transaction: commit record at 0x100, ends 0x130.
        assert!(before(Some(Lsn(0x130)), Lsn(0x100)));
        // The next one's commit record starts at or after 0x130.
        assert!(!before(Some(Lsn(0x130)), Lsn(0x130)));
        assert!(!before(None, Lsn(0x10)));
    }
}
