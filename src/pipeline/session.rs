//! One session: events from the stream are mapped and produced, delivery
//! reports come back, rejected and refused rows are recorded as FAILED, and
//! the settled position goes to the recorder and from there to the reader.
//! Nothing awaits per message: records are enqueued and reports come back
//! in batches; in-flight messages and bytes are bounded.
//!
//! The loop here is the same for both delivery modes. What settles a row,
//! and when, is the [`Settlement`] strategy's: `Idempotent` settles each
//! source transaction in commit order as Kafka confirms it; `Transactional`
//! settles whole Kafka transactions at their commit.
//!
//! ```text
//! Events ──▶ on_event ──▶ map ──▶ Sink::send        Sink::reports ──▶ on_delivery
//!                          │                                             │
//!                          └─ refusal ─▶ failures ─▶ Ledger::failed ◀────┤ (row's fault)
//!                                                                        ▼
//!                          Settlement::after_step ─▶ settles ─▶ Recorder ─▶ Feedback
//! ```

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::kafka_wait::KafkaWait;
use super::ledger::Ledger;
use super::parts::{Current, Failure, Parts};
use super::recheck::Recheck;
use super::recorder::MARK_INTERVAL;
use super::settlement::{Settlement, Start};
use super::shared::Shared;
use super::sink::{Delivery, Sink, Ticket};
use super::watermark::TxSeq;
use crate::config::relay::WhenCaughtUp;
use crate::error::{Code, Error};
use crate::kafka::limits::{self, Limit};
use crate::kafka::publisher::{Outcome, SendError};
use crate::lsn::Lsn;
use crate::pg::dead_letter::Content;
use crate::pg::row_status::Guard;
use crate::replication::Change;
use crate::replication::{Event, Events, ReaderStats};
use crate::router::Record;
use crate::row::value::{Timestamp, Uuid};
use crate::row::OutboxRow;

/// How long a session whose producer stopped itself waits for the
/// reports of what it sent (the refusal's among them).
const STOPPED_REPORTS_WAIT: Duration = Duration::from_secs(2);

/// Delivery reports taken per step.
const REPORT_BATCH: usize = 512;

/// A progress line this often.
const PROGRESS_LOG: Duration = Duration::from_secs(10);

pub(super) struct Session<'a, K, L, S> {
    pub(super) parts: Parts<'a, K, L>,
    pub(super) settlement: S,
    current: Current,
    recheck: Recheck,
}

/// What a closed session leaves for the relay.
struct Closed {
    /// Confirmed rows not yet handed to the recorder.
    published: Vec<Uuid>,
    /// The settled position that waits for them.
    settles: Option<Lsn>,
    /// The producer failed for good (fenced): this outranks whatever ended
    /// the session.
    fatal: Option<Error>,
}

/// Whether a backlog goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flow {
    Continue,
    /// Shutdown was asked for.
    Stopped,
}

impl<'a, K: Sink, L: Ledger, S: Settlement> Session<'a, K, L, S> {
    /// A session over `sink`; the strategy readies the sink first.
    pub(super) async fn open(shared: &'a Shared, sink: K, ledger: L) -> Result<Self, Error> {
        if let Some(e) = shared.trouble.stopped() {
            return Err(e);
        }
        let settlement = S::start(Start {
            sink: &sink,
            shared,
        })
        .await?;
        Ok(Session {
            parts: Parts::new(shared, sink, ledger),
            settlement,
            current: Current::Idle,
            recheck: S::recheck(shared),
        })
    }

    /// Streams until shutdown (drained: `Ok`), or until something ends the
    /// session (`Err`: the retry policy decides what follows).
    pub(super) async fn pump(
        &mut self,
        events: &mut Events,
        reader: &ReaderStats,
        shutdown: &CancellationToken,
    ) -> Result<(), Error> {
        let mut pace = Pace::new();
        loop {
            if self.wait(events, shutdown, &mut pace).await? == Woke::DrainDeadline {
                tracing::warn!(
                    in_flight = self.parts.in_flight.messages,
                    "drain deadline passed; unsettled messages will be published again on restart"
                );
                return Ok(());
            }
            self.settlement.after_step(&mut self.parts).await?;
            self.parts.hand_over_marks().await;
            if let Some(e) = self.parts.shared.trouble.stopped() {
                self.parts.end_with(e);
            }
            if let Some(e) = self.parts.ending.take() {
                return Err(e);
            }
            if pace.draining.is_some()
                && self
                    .settlement
                    .drained(&mut self.parts, self.current)
                    .await?
            {
                return self.parts.ending.take().map_or(Ok(()), Err);
            }
            self.export(reader, &mut pace);
            let now = crate::metrics::unix_micros();
            if let Some(e) = pace.kafka.overdue(now, self.parts.shared.delivery_deadline) {
                return Err(e);
            }
        }
    }

    /// Waits for the next thing to do and does it.
    async fn wait(
        &mut self,
        events: &mut Events,
        shutdown: &CancellationToken,
        pace: &mut Pace,
    ) -> Result<Woke, Error> {
        let due = match self.current {
            Current::Idle => self.settlement.due(),
            _ => None,
        };
        let reading = self.has_room()
            && self.parts.ending.is_none()
            && (pace.draining.is_none() || self.settlement.reads_while_draining(self.current));
        let drain_timeout = self.parts.shared.drain_timeout();
        tokio::select! {
            biased;
            _ = shutdown.cancelled(), if pace.draining.is_none() => {
                tracing::info!(in_flight = self.parts.in_flight.messages, "stopping: draining in-flight messages");
                pace.draining = Some(Instant::now() + drain_timeout);
            }
            // One step per batch of reports, not per message.
            1.. = self.parts.sink.reports(&mut pace.reports, REPORT_BATCH) => {
                let mut reports = std::mem::take(&mut pace.reports);
                for d in reports.drain(..) {
                    self.on_delivery(d);
                }
                pace.reports = reports;
            }
            _ = self.parts.shared.trouble.alarmed() => {
                let e = self.parts.shared.trouble.stopped().unwrap_or_else(|| Error::new(
                    Code::PG_CONNECTION_LOST,
                    "published rows cannot be recorded in PostgreSQL; the slot waits for them, so the replication connection is closed rather than kept waiting",
                ));
                self.parts.end_with(e);
            }
            event = events.recv(), if reading => match event {
                Some(event) => {
                    self.on_event(event).await?;
                    // The rest of the reader's batch in this step: a stream
                    // of 1-row transactions is three events a row, and a
                    // step per event cost more than the events.
                    while pace.draining.is_none() && self.has_room() && self.parts.ending.is_none() {
                        let Some(event) = events.next_received() else { break };
                        self.on_event(event).await?;
                    }
                }
                // The reader ended: its own result says why.
                None => return Err(Error::new(Code::PG_CONNECTION_LOST, "the replication stream ended")),
            },
            _ = pace.tick.tick() => {}
            _ = sleep_until(due), if due.is_some() => {
                self.settlement.on_due(&mut self.parts).await?;
            }
            _ = sleep_until(pace.draining), if pace.draining.is_some() => return Ok(Woke::DrainDeadline),
        }
        Ok(Woke::Step)
    }

    /// Whether the in-flight bounds let another record be sent.
    fn has_room(&self) -> bool {
        let relay = &self.parts.shared.relay;
        self.parts.in_flight.messages < relay.max_in_flight_messages
            && self.parts.in_flight.bytes < relay.max_in_flight_bytes
    }

    /// Gauges, counters the recorder reads, and a progress line now and
    /// then.
    fn export(&self, reader: &ReaderStats, pace: &mut Pace) {
        let shared = self.parts.shared;
        let m = &shared.metrics;
        m.in_flight_messages
            .set(self.parts.in_flight.messages as i64);
        m.in_flight_bytes.set(self.parts.in_flight.bytes as i64);
        let open = match self.current {
            Current::Publishing(_, at) => Some(at.unix_micros()),
            _ => None,
        };
        m.set_oldest_unsettled(self.settlement.oldest_unsettled(&self.parts).or(open));
        // The confirmed deliveries' counter: whether Kafka still
        // acknowledges is read from how it moves.
        let since = pace.kafka.step(
            self.parts.in_flight.messages,
            m.confirmed.get(),
            crate::metrics::unix_micros(),
        );
        m.set_unacknowledged_since(since);
        let stats = &shared.stats;
        for (to, from) in [
            (&stats.keepalive_at, &reader.keepalive_at),
            (&stats.keepalive_sent, &reader.keepalive_sent),
            (&stats.rows_read, &reader.rows),
        ] {
            to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        let heartbeats = reader.heartbeats.load(Ordering::Relaxed);
        if heartbeats > pace.heartbeats_seen {
            m.heartbeats_received
                .inc_by(heartbeats - pace.heartbeats_seen);
            pace.heartbeats_seen = heartbeats;
        }
        if pace.last_progress.elapsed() >= PROGRESS_LOG {
            pace.last_progress = Instant::now();
            tracing::info!(
                published = stats.published.load(Ordering::Relaxed),
                failed = stats.failed.load(Ordering::Relaxed),
                in_flight = self.parts.in_flight.messages,
                kafka_commits = stats.kafka_commits.load(Ordering::Relaxed),
                kafka_aborts = stats.kafka_aborts.load(Ordering::Relaxed),
                already_published = stats.already_published.load(Ordering::Relaxed),
                left_out_as_published = stats.left_out_as_published.load(Ordering::Relaxed),
                settled = %shared.feedback.settled(),
                "progress"
            );
        }
    }

    pub(super) fn on_delivery(&mut self, mut d: Delivery) {
        if let Outcome::Rejected(e) = &d.outcome {
            if e.code() == Code::MESSAGE_TOO_LARGE {
                d.outcome = self.parts.too_large(&d.ticket, e.clone());
            } else if e.code() == Code::INVALID_TIMESTAMP {
                d.outcome = self.parts.out_of_time(&d.ticket, e.clone());
            }
        }
        if let Some(record) = d.returned.take() {
            if matches!(d.outcome, Outcome::Rejected(_)) {
                self.parts.keep_letter(&record);
            }
        }
        self.parts.account(&d);
        self.parts.trace_acknowledged(&d);
        self.settlement.on_delivery(&mut self.parts, d);
    }

    async fn on_event(&mut self, event: Event) -> Result<(), Error> {
        match event {
            Event::Begin {
                final_lsn,
                commit_time,
                ..
            } => {
                self.current = if self.settlement.already_published(final_lsn) {
                    Current::AlreadyPublished
                } else {
                    let tx = self.parts.watermark.begin_at(commit_time.unix_micros());
                    Current::Publishing(tx, commit_time)
                };
            }
            Event::Rows(rows) => match self.current {
                // In Kafka already: only their marks are owed.
                Current::AlreadyPublished => self
                    .parts
                    .owe_marks(rows.iter().filter_map(OutboxRow::message_id)),
                Current::Publishing(tx, commit_time) => {
                    let rows = self.recheck.leave_out(&mut self.parts, tx, rows).await;
                    self.produce_rows(tx, rows, |_| commit_time).await;
                }
                Current::Idle => self
                    .parts
                    .end_with(Error::new(Code::PG_PROTOCOL, "rows outside a transaction")),
            },
            Event::Changes(changes) => match self.current {
                // A routed outbox keeps no status: nothing is owed.
                Current::AlreadyPublished => {}
                Current::Publishing(tx, commit_time) => {
                    self.produce_changes(tx, changes, commit_time).await;
                }
                Current::Idle => self
                    .parts
                    .end_with(Error::new(Code::PG_PROTOCOL, "rows outside a transaction")),
            },
            // Nothing more to read for now: what librdkafka holds goes out
            // without waiting for a batch to fill.
            Event::CaughtUp => {
                if self.parts.shared.relay.when_caught_up == WhenCaughtUp::Send {
                    self.parts.sink.send_now();
                }
            }
            Event::Commit { end_lsn, .. } => {
                match std::mem::replace(&mut self.current, Current::Idle) {
                    Current::AlreadyPublished => {
                        self.parts
                            .shared
                            .stats
                            .already_published
                            .fetch_add(1, Ordering::Relaxed);
                        self.parts.settle(end_lsn);
                    }
                    Current::Publishing(tx, commit_time) => {
                        self.parts.watermark.commit(tx, end_lsn);
                        self.settlement
                            .committed(&mut self.parts, end_lsn, commit_time)
                            .await?;
                    }
                    Current::Idle => {}
                }
            }
        }
        Ok(())
    }

    /// Maps and produces `rows` as part of `tx`; each row's record carries
    /// the time `timestamp` gives it. Stops at the first failure that ends
    /// the session.
    pub(super) async fn produce_rows(
        &mut self,
        tx: TxSeq,
        rows: Vec<OutboxRow>,
        timestamp: impl Fn(&OutboxRow) -> Timestamp,
    ) {
        self.parts.learn_destinations(&rows).await;
        if self.parts.ending.is_some() {
            return;
        }
        for row in rows {
            self.parts.watermark.add(tx);
            if self.parts.poisoned(&row) {
                self.parts.watermark.settle_one(tx);
                continue;
            }
            let at = timestamp(&row);
            let Some(id) = row.message_id() else {
                self.parts.end_with(Error::new(
                    Code::ROW_UNIDENTIFIABLE,
                    "a row without a decodable message id cannot be recorded FAILED; stopping before the slot passes it",
                ));
                return;
            };
            match self.parts.shared.plan.record(&row, id, at.unix_millis()) {
                Ok(record) => self.produce(tx, &record).await,
                Err(error) => self.parts.failures.push(Failure {
                    tx: Some(tx),
                    id,
                    error,
                }),
            }
            if self.parts.ending.is_some() {
                return;
            }
        }
    }

    /// Produces stored records as part of `tx` (the dead letters' redrive).
    /// Stops at the first failure that ends the session.
    pub(super) async fn produce_records(&mut self, tx: TxSeq, records: &[Record]) {
        for record in records {
            self.parts.watermark.add(tx);
            self.produce(tx, record).await;
            if self.parts.ending.is_some() {
                return;
            }
        }
    }

    /// Routes and produces a routed outbox's changes as part of `tx`, as the
    /// Outbox Event Router does: an INSERT is a record (timestamped with the
    /// commit unless a column gives the time), an UPDATE gets the
    /// contract's `table.op.invalid.behavior`. A row the plan refuses goes
    /// to the dead-letter table with what could be read of it.
    async fn produce_changes(&mut self, tx: TxSeq, changes: Vec<Change>, commit_time: Timestamp) {
        for change in changes {
            match change {
                Change::Update { id, plan } => {
                    if let Err(e) = self.parts.invalid_op(id, plan.invalid_op()) {
                        self.parts.end_with(e);
                        return;
                    }
                }
                Change::Insert { id, plan, values } => {
                    self.parts.watermark.add(tx);
                    if self.parts.poisoned_id(id) {
                        self.parts.watermark.settle_one(tx);
                        continue;
                    }
                    match plan.record(&values[..], id, commit_time.unix_millis()) {
                        Ok(record) => self.produce(tx, &record).await,
                        Err(error) => {
                            self.parts
                                .letters
                                .insert(id, Content::unrouted(&plan, &values));
                            self.parts.failures.push(Failure {
                                tx: Some(tx),
                                id,
                                error,
                            });
                        }
                    }
                }
            }
            if self.parts.ending.is_some() {
                return;
            }
        }
    }

    /// Enqueues one record; waits only when librdkafka's queue is full.
    async fn produce(&mut self, tx: TxSeq, record: &Record) {
        let (destination, limit) = self.parts.destination(&record.topic).await;
        if self.parts.ending.is_some() {
            return;
        }
        let (trace, traced) = self.parts.trace(record);
        let record = traced.as_ref().unwrap_or(record);
        let bytes = limits::framed_size(record);
        if let Some(bound) = limit.and_then(Limit::record_bound) {
            if bytes > bound {
                let refusal = Error::new(
                    Code::MESSAGE_TOO_LARGE,
                    format!(
                        "a record of {bytes} bytes as a batch of its own is over topic {}'s max.message.bytes of {bound}; not sent",
                        record.topic
                    ),
                );
                self.parts.keep_letter(record);
                self.settlement
                    .rejected(&mut self.parts, tx, record.message_id, refusal);
                return;
            }
        }
        if let Err(e) = self.settlement.before_send(&mut self.parts, bytes) {
            self.parts.end_with(e);
            return;
        }
        let ticket = Ticket {
            tag: tx,
            message_id: record.message_id,
            bytes,
            destination,
            timestamp_ms: record.timestamp_ms,
            trace,
        };
        loop {
            match self.parts.sink.send(record, ticket) {
                Ok(()) => {
                    self.parts.in_flight.messages += 1;
                    self.parts.in_flight.bytes += bytes;
                    return;
                }
                Err(SendError::Rejected(error)) => {
                    self.parts.keep_letter(record);
                    self.settlement
                        .rejected(&mut self.parts, tx, record.message_id, error);
                    return;
                }
                Err(SendError::Failed(error)) => {
                    // A producer stopped by a refusal (gapless) fails sends
                    // before its report is taken: take the reports first, so
                    // the refused row is recorded FAILED, not refused again
                    // by every session.
                    let until = Instant::now() + STOPPED_REPORTS_WAIT;
                    while self.parts.in_flight.messages > 0
                        && self.take_reports(REPORT_BATCH, until).await
                    {}
                    self.parts
                        .end_with(error.context(format!("producing {}", record.message_id)));
                    return;
                }
                Err(SendError::QueueFull) => {
                    self.take_reports(1, Instant::now() + Duration::from_millis(100))
                        .await;
                }
            }
        }
    }

    /// Lets up to `most` reports come until `until`; `false` if none came.
    async fn take_reports(&mut self, most: usize, until: Instant) -> bool {
        let mut taken = Vec::with_capacity(most);
        let reports = self.parts.sink.reports(&mut taken, most);
        let came = match tokio::time::timeout_at(until, reports).await {
            Ok(0) => {
                let stopped = "the producer's delivery reports stopped";
                self.parts.end_with(Error::new(Code::INTERNAL, stopped));
                false
            }
            Ok(_) => true,
            Err(_) => false,
        };
        taken.into_iter().for_each(|d| self.on_delivery(d));
        came
    }

    /// Waits until every record sent is reported (or `shutdown`: `false`).
    pub(super) async fn await_reports(&mut self, shutdown: &CancellationToken) -> bool {
        let mut reports = Vec::with_capacity(REPORT_BATCH);
        while self.parts.in_flight.messages > 0 && self.parts.ending.is_none() {
            tokio::select! {
                n = self.parts.sink.reports(&mut reports, REPORT_BATCH) => {
                    if n == 0 {
                        self.parts.end_with(Error::new(Code::INTERNAL, "the producer's delivery reports stopped"));
                    }
                    for d in reports.drain(..) {
                        self.on_delivery(d);
                    }
                }
                _ = shutdown.cancelled() => return false,
            }
        }
        true
    }

    /// Settles what a backlog (a hand-over, a redrive) sent: every report,
    /// the failures recorded under `guard`, and the strategy's own end
    /// (transactional: the Kafka transaction's commit).
    pub(super) async fn settle_backlog(
        &mut self,
        guard: Guard,
        shutdown: &CancellationToken,
    ) -> Result<Flow, Error> {
        if !self.await_reports(shutdown).await {
            return Ok(Flow::Stopped);
        }
        if let Some(e) = self.parts.ending.take() {
            return Err(e);
        }
        self.parts.record_failures(guard).await?;
        self.settlement
            .finish_backlog(&mut self.parts, guard)
            .await?;
        self.parts.ending.take().map_or(Ok(Flow::Continue), Err)
    }

    /// Confirmed rows of a backlog, taken to be marked at once.
    pub(super) fn take_published(&mut self) -> Vec<Uuid> {
        std::mem::take(&mut self.parts.published)
    }

    /// Ends the session as the relay does: closes it, hands the recorder
    /// what it confirmed, and after a clean stop waits until the recorder
    /// has recorded it (so the reader's last status update confirms it). An
    /// error that must stop the relay (fenced) outranks how it ended.
    pub(super) async fn finish(self, end: Result<(), Error>) -> Result<(), Error> {
        let shared = self.parts.shared;
        let closed = self.close(&end).await;
        shared.queue_marks(closed.published, closed.settles).await;
        let end = closed.fatal.map_or(end, Err);
        if end.is_ok() {
            shared.flush_marks().await;
        }
        end
    }

    /// Ends the session: a session that did not stop cleanly drops what the
    /// producer still holds (the next one publishes it again), and the
    /// strategy closes what it holds open.
    async fn close(mut self, end: &Result<(), Error>) -> Closed {
        if end.is_err() || self.parts.ending.is_some() {
            self.parts.sink.purge();
        }
        let fatal = self.settlement.close(&mut self.parts).await;
        Closed {
            published: std::mem::take(&mut self.parts.published),
            settles: self.parts.settles.take(),
            fatal,
        }
    }
}

/// Why [`Session::wait`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Woke {
    Step,
    DrainDeadline,
}

/// The loop's own clocks and buffers.
struct Pace {
    tick: tokio::time::Interval,
    /// Set by shutdown: the drain's deadline.
    draining: Option<Instant>,
    reports: Vec<Delivery>,
    heartbeats_seen: u64,
    last_progress: Instant,
    kafka: KafkaWait,
}

impl Pace {
    fn new() -> Pace {
        Pace {
            tick: tokio::time::interval(MARK_INTERVAL),
            draining: None,
            reports: Vec::with_capacity(REPORT_BATCH),
            heartbeats_seen: 0,
            last_progress: Instant::now(),
            kafka: KafkaWait::default(),
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
