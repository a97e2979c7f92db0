//! One session: events from the stream are mapped and produced, delivery
//! reports settle them in the watermark, rejected and refused rows are
//! recorded as FAILED, and the settled position goes back to the reader.
//! Nothing awaits per message: records are enqueued and reports come back
//! through the producer's context; in-flight messages and bytes are bounded.
//!
//! In transactional delivery the reports do not settle anything: whole
//! source transactions go into a Kafka transaction (`transaction`), and
//! only its commit, with the progress, publishes and settles them.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use prometheus::IntCounter;
use tokio::sync::mpsc;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

use super::supervisor::SessionEnd;
use super::transaction::{Bounds, KafkaTxn, Transactional};
use super::watermark::{TxSeq, Watermark};
use super::Relay;
use crate::contract::mapper::{self, Record};
use crate::contract::outbox;
use crate::contract::row::{OutboxRow, Value};
use crate::contract::value::{Timestamp, Uuid};
use crate::error::{Class, Code, Error};
use crate::kafka::publisher::{Delivery, Outcome, Publisher, SendError, Ticket};
use crate::metrics::{names, unix_micros};
use crate::pg::lsn::Lsn;
use crate::pg::marks::Guard;
use crate::replication::{Event, Stream};

/// A rejected or refused row waiting to be recorded.
struct Failure {
    /// `None` in transactional delivery, where reports settle nothing.
    tx: Option<TxSeq>,
    id: Uuid,
    error: Error,
}

/// What Kafka has not acknowledged yet.
#[derive(Debug, Default, Clone, Copy)]
struct InFlight {
    messages: usize,
    bytes: usize,
}

/// PUBLISHED marks go to their task at least this often, or per this many.
pub(super) const MARK_BATCH: usize = 5000;
const MARK_INTERVAL: Duration = Duration::from_millis(250);

/// Delivery reports taken from their channel per step.
const REPORT_BATCH: usize = 512;

/// How long the first record for a topic waits for the topic to be ready.
const TOPIC_READY_WAIT: Duration = Duration::from_secs(10);

pub(super) struct Session<'a> {
    relay: &'a Relay,
    /// FAILED rows and the hand-over.
    sql: &'a Client,
    publisher: Publisher<TxSeq>,
    reports: mpsc::UnboundedReceiver<Delivery<TxSeq>>,
    watermark: Watermark,
    /// The open transaction: sequence number and commit time.
    current: Option<(TxSeq, Timestamp)>,
    in_flight: InFlight,
    failures: Vec<Failure>,
    published: Vec<Uuid>,
    /// The settled position not yet handed to the marking task with the
    /// marks it waits for.
    settles: Option<Lsn>,
    /// Set by the first ambiguous or transient failure; ends the session.
    restart: Option<Error>,
    /// Records the broker refused for an operator's reason (an ACL, a
    /// missing topic): never FAILED, they hold the watermark until the
    /// session ends and a later one publishes them again.
    operator_rejections: usize,
    /// Transactional delivery; `None` for idempotent.
    tx_mode: Option<Transactional>,
    /// The relay's poison rows as this session started: rows are added
    /// only by an abort, which ends the session, so a copy needs no lock
    /// per row.
    poison: std::collections::HashSet<Uuid>,
    /// Topics seen in this session, each with its published counter: a
    /// delivery report counts by index, without a lookup by name.
    destinations: HashMap<String, u32>,
    published_by_destination: Vec<IntCounter>,
}

/// What a closed session leaves.
pub(super) struct Closed {
    /// Rows confirmed but not yet handed to the marking task.
    pub(super) published: Vec<Uuid>,
    /// The settled position that waits for them.
    pub(super) settles: Option<Lsn>,
    /// The producer failed for good (fenced): the relay must stop.
    pub(super) fatal: Option<Error>,
}

impl<'a> Session<'a> {
    pub(super) async fn new(relay: &'a Relay, sql: &'a Client) -> Result<Session<'a>, Error> {
        let (publisher, reports) = Publisher::new(&relay.kafka)?;
        let tx_mode = match &relay.progress {
            Some(progress) => {
                // Fences any older producer of this id and resolves its open
                // transaction, so the progress read next is final.
                publisher.init_transactions().await?;
                let published_before = progress.read().await?;
                tracing::info!(
                    transactional_id = %relay.cfg.transactional_id(),
                    progress = %published_before.map(|l| l.to_string()).unwrap_or_else(|| "none".into()),
                    "transactional producer ready"
                );
                Some(Transactional {
                    progress: progress.clone(),
                    bounds: Bounds::from_config(&relay.cfg.relay),
                    published_before,
                    skipping: false,
                    txn: KafkaTxn::default(),
                })
            }
            None => None,
        };
        Ok(Session {
            relay,
            sql,
            publisher,
            reports,
            watermark: Watermark::new(),
            current: None,
            in_flight: InFlight::default(),
            failures: Vec::new(),
            published: Vec::new(),
            settles: None,
            restart: None,
            operator_rejections: 0,
            tx_mode,
            poison: relay
                .poison
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            destinations: HashMap::new(),
            published_by_destination: Vec::new(),
        })
    }

    /// The index of `topic`'s published counter.
    fn destination(&mut self, topic: &str) -> u32 {
        if let Some(i) = self.destinations.get(topic) {
            return *i;
        }
        let i = self.published_by_destination.len() as u32;
        self.published_by_destination
            .push(self.relay.metrics.published_counter(topic));
        self.destinations.insert(topic.to_string(), i);
        i
    }

    /// In-flight gauges and seconds behind source, after each step.
    fn export_gauges(&self) {
        let m = &self.relay.metrics;
        m.in_flight_messages.set(self.in_flight.messages as i64);
        m.in_flight_bytes.set(self.in_flight.bytes as i64);
        let oldest = match &self.tx_mode {
            Some(t) => t
                .txn
                .commits
                .first()
                .copied()
                .or(self.current.map(|(_, c)| c.unix_micros())),
            None => self.watermark.oldest_commit(),
        };
        m.set_oldest_unsettled(oldest);
    }

    pub(super) fn transactional(&self) -> bool {
        self.tx_mode.is_some()
    }

    pub(super) fn metrics(&self) -> &crate::metrics::Metrics {
        &self.relay.metrics
    }

    /// Ends the session: a session that did not stop cleanly drops what
    /// librdkafka still holds (the next one publishes it again), and an open
    /// Kafka transaction is aborted.
    pub(super) async fn close(mut self, clean: bool) -> Closed {
        if !clean || self.restart.is_some() {
            self.publisher.purge();
        }
        let mut fatal = None;
        if self.tx_mode.as_ref().is_some_and(|t| t.txn.is_open()) {
            // Also how a zombie learns it was fenced.
            if let Err(e) = self.publisher.abort_transaction().await {
                tracing::warn!(code = %e.code(), error = %e, "aborting the open Kafka transaction at the session's end");
                if e.code() == Code::KAFKA_PRODUCER_FENCED {
                    fatal = Some(e);
                }
            }
        }
        if self.tx_mode.is_some() {
            fatal = fatal.or_else(|| {
                self.publisher
                    .fatal_error()
                    .filter(|e| e.code() == Code::KAFKA_PRODUCER_FENCED)
            });
        }
        Closed {
            published: std::mem::take(&mut self.published),
            settles: self.settles.take(),
            fatal,
        }
    }

    /// In transactional delivery, between source transactions, a Kafka
    /// transaction is open: when it is due.
    fn commit_due(&self) -> Option<tokio::time::Instant> {
        let t = self.tx_mode.as_ref()?;
        if self.current.is_some() || t.skipping {
            return None;
        }
        t.txn.deadline(&t.bounds)
    }

    /// In transactional delivery, inside a source transaction (a drain waits
    /// for its end: a source transaction is never split).
    fn mid_source_transaction(&self) -> bool {
        self.tx_mode
            .as_ref()
            .is_some_and(|t| self.current.is_some() || t.skipping)
    }

    /// Streams until shutdown (drained), a restart, or an error.
    pub(super) async fn pump(
        &mut self,
        stream: &mut Stream,
        shutdown: &CancellationToken,
    ) -> Result<SessionEnd, Error> {
        let cfg = &self.relay.cfg.relay;
        let drain_timeout = Duration::from_secs(cfg.drain_timeout_secs);
        let mut draining: Option<tokio::time::Instant> = None;
        let mut tick = tokio::time::interval(MARK_INTERVAL);
        let mut last_report = Instant::now();
        let mut last_mark = Instant::now();
        let mut heartbeats_seen = 0u64;
        let mut reports = Vec::with_capacity(REPORT_BATCH);
        loop {
            let commit_due = self.commit_due();
            let room = self.in_flight.messages < cfg.max_in_flight_messages
                && self.in_flight.bytes < cfg.max_in_flight_bytes;
            tokio::select! {
                biased;
                _ = shutdown.cancelled(), if draining.is_none() => {
                    tracing::info!(in_flight = self.in_flight.messages, "stopping: draining in-flight messages");
                    draining = Some(tokio::time::Instant::now() + drain_timeout);
                }
                // Reports arrive one per message: taking them in batches
                // makes the step below once per batch, not per message.
                1.. = self.reports.recv_many(&mut reports, REPORT_BATCH) => {
                    for delivery in reports.drain(..) {
                        self.on_delivery(delivery);
                    }
                }
                _ = self.relay.marks_stalled.notified() => {
                    self.restart.get_or_insert_with(|| Error::new(
                        Code::PG_CONNECTION_LOST,
                        "PUBLISHED marks cannot reach PostgreSQL; the slot waits for them, so the replication connection is closed rather than kept waiting",
                    ));
                }
                event = stream.events.recv(), if room && self.restart.is_none()
                    && (draining.is_none() || self.mid_source_transaction()) => match event {
                    Some(event) => self.on_event(event).await?,
                    // The reader ended: the session's closing says why.
                    None => return Ok(SessionEnd::Restart(Error::new(
                        Code::PG_CONNECTION_LOST,
                        "the replication stream ended",
                    ))),
                },
                _ = tick.tick() => {}
                _ = sleep_until(commit_due), if commit_due.is_some() => {
                    self.end_kafka_transaction(Guard::Pending).await?;
                }
                _ = sleep_until(draining), if draining.is_some() => {
                    tracing::warn!(in_flight = self.in_flight.messages, "drain deadline passed; unsettled messages will be published again on restart");
                    return Ok(SessionEnd::Stopped);
                }
            }
            if self.tx_mode.as_ref().is_some_and(|t| t.txn.doomed()) {
                self.end_kafka_transaction(Guard::Pending).await?;
            }
            self.record_failures(Guard::Pending).await?;
            if self.tx_mode.is_none() {
                let latency = &self.relay.metrics.commit_to_ack;
                let mut now = None;
                let settled = self.watermark.advance_with(|at| {
                    let now = *now.get_or_insert_with(unix_micros);
                    latency.observe((now - at).max(0) as f64 / 1e6)
                });
                if let Some(lsn) = settled {
                    self.relay.stats.settled.store(lsn.0, Ordering::Relaxed);
                    // Every row of the transactions up to `lsn` is in
                    // `published` or an earlier batch: the slot follows them.
                    self.settles = Some(lsn);
                }
            }
            // Without marks the position goes on at once.
            let waiting = !self.published.is_empty() || self.settles.is_some();
            if waiting
                && (!self.relay.cfg.relay.mark_published
                    || self.published.len() >= MARK_BATCH
                    || last_mark.elapsed() >= MARK_INTERVAL)
            {
                last_mark = Instant::now();
                let batch = std::mem::take(&mut self.published);
                self.relay.queue_marks(batch, self.settles.take()).await;
            }
            if let Some(reason) = self.restart.take() {
                return Ok(SessionEnd::Restart(reason));
            }
            if draining.is_some() && self.tx_mode.is_some() && !self.mid_source_transaction() {
                self.end_kafka_transaction(Guard::Pending).await?;
                if let Some(reason) = self.restart.take() {
                    return Ok(SessionEnd::Restart(reason));
                }
                return Ok(SessionEnd::Stopped);
            }
            if draining.is_some() && self.in_flight.messages == 0 && self.failures.is_empty() {
                return Ok(SessionEnd::Stopped);
            }
            self.export_gauges();
            let (read, stats) = (&stream.stats, &self.relay.stats);
            stats
                .keepalive_at
                .store(read.keepalive_at.load(Ordering::Relaxed), Ordering::Relaxed);
            stats.keepalive_sent.store(
                read.keepalive_sent.load(Ordering::Relaxed),
                Ordering::Relaxed,
            );
            stats
                .rows_read
                .store(read.rows.load(Ordering::Relaxed), Ordering::Relaxed);
            let heartbeats = stream.stats.heartbeats.load(Ordering::Relaxed);
            if heartbeats > heartbeats_seen {
                self.relay
                    .metrics
                    .heartbeats_received
                    .inc_by(heartbeats - heartbeats_seen);
                heartbeats_seen = heartbeats;
            }
            if last_report.elapsed() >= Duration::from_secs(10) {
                last_report = Instant::now();
                let s = &self.relay.stats;
                if self.tx_mode.is_some() {
                    tracing::info!(
                        published = s.published.load(Ordering::Relaxed),
                        failed = s.failed.load(Ordering::Relaxed),
                        kafka_commits = s.kafka_commits.load(Ordering::Relaxed),
                        kafka_aborts = s.kafka_aborts.load(Ordering::Relaxed),
                        already_published = s.already_published.load(Ordering::Relaxed),
                        settled = %self.relay.feedback.settled(),
                        "progress"
                    );
                } else {
                    tracing::info!(
                        published = s.published.load(Ordering::Relaxed),
                        failed = s.failed.load(Ordering::Relaxed),
                        in_flight = self.in_flight.messages,
                        settled = %self.relay.feedback.settled(),
                        "progress"
                    );
                }
            }
        }
    }

    /// Produces `rows` as part of `tx`, a pseudo-transaction that never
    /// commits in the slot (a cutover's backlog). `Some(end)` when the
    /// session must end.
    pub(super) async fn produce_rows(
        &mut self,
        tx: TxSeq,
        rows: Vec<OutboxRow>,
    ) -> Option<SessionEnd> {
        for row in rows {
            self.watermark.add(tx);
            // No commit time is known for the backlog: its creation time stands in.
            let created = match row.get(&outbox::CREATED_AT) {
                Value::Timestamp(t) => *t,
                _ => Timestamp::Micros(0),
            };
            self.map_and_produce(tx, row, created).await;
            if let Some(reason) = self.restart.take() {
                return Some(SessionEnd::Restart(reason));
            }
        }
        None
    }

    /// Opens a pseudo-transaction for [`Session::produce_rows`].
    pub(super) fn begin_pseudo_transaction(&mut self) -> TxSeq {
        self.watermark.begin()
    }

    /// Waits for every report, then records the failures under `guard`.
    /// `Some(end)` when the session must end.
    pub(super) async fn settle_all(
        &mut self,
        shutdown: &CancellationToken,
        guard: Guard,
    ) -> Result<Option<SessionEnd>, Error> {
        while self.in_flight.messages > 0 {
            tokio::select! {
                Some(d) = self.reports.recv() => self.on_delivery(d),
                _ = shutdown.cancelled() => return Ok(Some(SessionEnd::Stopped)),
            }
            if let Some(reason) = self.restart.take() {
                return Ok(Some(SessionEnd::Restart(reason)));
            }
        }
        self.record_failures(guard).await?;
        Ok(None)
    }

    /// Commits the hand-over's open Kafka transaction (it carries no
    /// progress: the hand-over list says what is done). `Some(end)` when the
    /// session must end.
    pub(super) async fn commit_handed_over(
        &mut self,
        guard: Guard,
    ) -> Result<Option<SessionEnd>, Error> {
        self.end_kafka_transaction(guard).await?;
        Ok(self.restart.take().map(SessionEnd::Restart))
    }

    /// Rows confirmed since the last call.
    pub(super) fn take_published(&mut self) -> Vec<Uuid> {
        std::mem::take(&mut self.published)
    }

    /// Forgets the hand-over's pseudo-transaction before streaming.
    pub(super) fn reset_watermark(&mut self) {
        self.watermark = Watermark::new();
    }

    fn on_delivery(&mut self, d: Delivery<TxSeq>) {
        self.in_flight.messages = self.in_flight.messages.saturating_sub(1);
        self.in_flight.bytes = self.in_flight.bytes.saturating_sub(d.ticket.bytes);
        let m = &self.relay.metrics;
        match &d.outcome {
            Outcome::Confirmed => m.confirmed.inc(),
            Outcome::Rejected(_) => m.delivery(names::REJECTED),
            Outcome::Retry(_) => m.delivery(names::RETRY),
            Outcome::Ambiguous(_) => m.delivery(names::AMBIGUOUS),
        }
        if let Some(t) = &mut self.tx_mode {
            match d.outcome {
                Outcome::Confirmed => {
                    t.txn.confirmed.push(d.ticket.message_id);
                    let i = d.ticket.destination as usize;
                    if t.txn.by_destination.len() <= i {
                        t.txn.by_destination.resize(i + 1, 0);
                    }
                    if let Some(n) = t.txn.by_destination.get_mut(i) {
                        *n += 1;
                    }
                }
                Outcome::Rejected(error) if error.class() == Class::Row => {
                    t.txn.poison.push((d.ticket.message_id, error));
                }
                Outcome::Rejected(error) | Outcome::Retry(error) | Outcome::Ambiguous(error) => {
                    t.txn.failed.get_or_insert_with(|| {
                        error.context(format!("message {}", d.ticket.message_id))
                    });
                }
            }
            return;
        }
        match d.outcome {
            Outcome::Confirmed => {
                self.watermark.settle_one(d.ticket.tag);
                self.relay.stats.published.fetch_add(1, Ordering::Relaxed);
                if let Some(c) = self
                    .published_by_destination
                    .get(d.ticket.destination as usize)
                {
                    c.inc();
                }
                if self.relay.cfg.relay.mark_published {
                    self.published.push(d.ticket.message_id);
                }
            }
            Outcome::Rejected(error) => self.rejected(d.ticket.tag, d.ticket.message_id, error),
            Outcome::Retry(error) | Outcome::Ambiguous(error) => {
                self.restart.get_or_insert_with(|| {
                    error.context(format!("message {}", d.ticket.message_id))
                });
            }
        }
    }

    async fn on_event(&mut self, event: Event) -> Result<(), Error> {
        if let Some(t) = &mut self.tx_mode {
            match &event {
                Event::Begin { final_lsn, .. } if t.already_published(*final_lsn) => {
                    t.skipping = true;
                    return Ok(());
                }
                Event::Rows(rows) if t.skipping => {
                    // In Kafka already: their marks are still owed.
                    if self.relay.cfg.relay.mark_published {
                        self.published
                            .extend(rows.iter().filter_map(|r| r.message_id()));
                    }
                    return Ok(());
                }
                Event::Commit { end_lsn, .. } if t.skipping => {
                    t.skipping = false;
                    self.relay
                        .stats
                        .already_published
                        .fetch_add(1, Ordering::Relaxed);
                    self.settles = Some(*end_lsn);
                    self.relay.stats.settled.store(end_lsn.0, Ordering::Relaxed);
                    return Ok(());
                }
                _ => {}
            }
        }
        match event {
            Event::Begin { commit_time, .. } => {
                let at = commit_time.unix_micros();
                self.current = Some((self.watermark.begin_at(at), commit_time));
            }
            Event::Rows(rows) => {
                let Some((tx, commit_time)) = self.current else {
                    self.restart =
                        Some(Error::new(Code::PG_PROTOCOL, "rows outside a transaction"));
                    return Ok(());
                };
                for row in rows {
                    self.watermark.add(tx);
                    self.map_and_produce(tx, row, commit_time).await;
                    if self.restart.is_some() {
                        return Ok(());
                    }
                }
            }
            Event::Commit { end_lsn, .. } => {
                let committed = self.current.take();
                if let Some((tx, _)) = committed {
                    self.watermark.commit(tx, end_lsn);
                }
                if let Some(t) = &mut self.tx_mode {
                    t.txn.last_end = Some(end_lsn);
                    if let Some((_, at)) = committed {
                        t.txn.commits.push(at.unix_micros());
                    }
                    if t.txn.full(&t.bounds, tokio::time::Instant::now()) {
                        self.end_kafka_transaction(Guard::Pending).await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Ends the open Kafka transaction: commits it with the progress, or,
    /// when a delivery failed, aborts it, records the rows Kafka refused as
    /// FAILED and ends the session, whose successor publishes the rest
    /// again. `Err` only when the relay must stop (fenced).
    pub(super) async fn end_kafka_transaction(&mut self, guard: Guard) -> Result<(), Error> {
        if !self.tx_mode.as_ref().is_some_and(|t| t.txn.is_open()) {
            return Ok(());
        }
        while self.in_flight.messages > 0 {
            match self.reports.recv().await {
                Some(d) => self.on_delivery(d),
                None => {
                    self.restart.get_or_insert_with(|| {
                        Error::new(Code::INTERNAL, "the producer's delivery reports stopped")
                    });
                    break;
                }
            }
        }
        // Refusals of the mapper are FAILED before their transaction counts
        // as published (a later session would mark its rows PUBLISHED).
        self.record_failures(guard).await?;
        let Some(t) = &mut self.tx_mode else {
            return Ok(());
        };
        let txn = std::mem::take(&mut t.txn);
        if txn.doomed() || self.restart.is_some() {
            return self.abort(txn, guard).await;
        }
        let offsets = match txn.last_end {
            Some(lsn) => Some(t.progress.offsets(lsn)?),
            None => None,
        };
        match self.publisher.commit_transaction(offsets).await {
            Ok(()) => {
                // The watermark settles nothing here; it only numbers
                // transactions, so it is emptied at every commit.
                self.watermark = Watermark::new();
                let stats = &self.relay.stats;
                stats.kafka_commits.fetch_add(1, Ordering::Relaxed);
                let m = &self.relay.metrics;
                m.kafka_transaction(names::COMMITTED);
                for (i, n) in txn.by_destination.iter().enumerate() {
                    if let Some(c) = self.published_by_destination.get(i) {
                        c.inc_by(*n);
                    }
                }
                let now = unix_micros();
                for at in &txn.commits {
                    m.commit_to_ack.observe((now - at).max(0) as f64 / 1e6);
                }
                stats
                    .published
                    .fetch_add(txn.confirmed.len() as u64, Ordering::Relaxed);
                if self.relay.cfg.relay.mark_published {
                    self.published.extend(txn.confirmed);
                }
                if let Some(lsn) = txn.last_end {
                    stats.settled.store(lsn.0, Ordering::Relaxed);
                    self.settles = Some(lsn);
                }
                Ok(())
            }
            Err(e) if e.class() == Class::Operator => Err(e),
            Err(e) => {
                if e.code() == Code::KAFKA_TRANSACTION_ABORTED {
                    self.abort_quietly().await?;
                }
                // Unknown outcome: the next session's producer resolves it
                // and the progress says which source transactions are in.
                self.restart.get_or_insert(e);
                Ok(())
            }
        }
    }

    async fn abort(&mut self, txn: KafkaTxn, guard: Guard) -> Result<(), Error> {
        self.abort_quietly().await?;
        if !txn.poison.is_empty() {
            let poisoned = txn.poison.len();
            {
                let mut set = self.relay.poison.lock().unwrap_or_else(|p| p.into_inner());
                set.extend(txn.poison.iter().map(|(id, _)| *id));
            }
            self.failures
                .extend(txn.poison.into_iter().map(|(id, error)| Failure {
                    tx: None,
                    id,
                    error,
                }));
            self.record_failures(guard).await?;
            tracing::warn!(rows = poisoned, "a Kafka transaction was aborted for rows Kafka refused; they are FAILED and the rest is published again");
        }
        let reason = txn.failed.unwrap_or_else(|| {
            Error::new(
                Code::KAFKA_TRANSACTION_ABORTED,
                "rows Kafka refused aborted the transaction; publishing its other rows again",
            )
        });
        self.restart.get_or_insert(reason);
        Ok(())
    }

    async fn abort_quietly(&mut self) -> Result<(), Error> {
        match self.publisher.abort_transaction().await {
            Ok(()) => {
                self.relay
                    .stats
                    .kafka_aborts
                    .fetch_add(1, Ordering::Relaxed);
                self.relay.metrics.kafka_transaction(names::ABORTED);
                Ok(())
            }
            Err(e) if e.code() == Code::KAFKA_PRODUCER_FENCED => Err(e),
            Err(e) => {
                self.restart.get_or_insert(e);
                Ok(())
            }
        }
    }

    /// Maps a row and enqueues its record, or queues the refusal to be
    /// recorded as FAILED.
    async fn map_and_produce(&mut self, tx: TxSeq, row: OutboxRow, timestamp: Timestamp) {
        if self.tx_mode.is_some() && self.is_poison(&row) {
            self.watermark.settle_one(tx);
            return;
        }
        let id = row.message_id();
        match mapper::map(row, &self.relay.cfg.outbox.topic_prefix, timestamp) {
            Ok(record) => self.produce(tx, &record).await,
            Err(error) => self.failures.push(Failure {
                tx: Some(tx),
                id: id.unwrap_or(Uuid([0; 16])),
                error,
            }),
        }
    }

    /// A row Kafka refused in an aborted transaction of this process: it is
    /// FAILED and left out when its transaction is published again.
    fn is_poison(&self, row: &OutboxRow) -> bool {
        !self.poison.is_empty() && row.message_id().is_some_and(|id| self.poison.contains(&id))
    }

    /// Enqueues one record; waits only when librdkafka's queue is full.
    async fn produce(&mut self, tx: TxSeq, record: &Record) {
        let bytes = record.size();
        if let Some(t) = &mut self.tx_mode {
            if !t.txn.is_open() {
                if let Err(e) = self.publisher.begin_transaction() {
                    self.restart = Some(e);
                    return;
                }
                t.txn.began = Some(tokio::time::Instant::now());
            }
            t.txn.records += 1;
            t.txn.bytes += bytes;
        }
        // One lookup per record; a new topic waits once per session.
        let destination = match self.destinations.get(&record.topic) {
            Some(i) => *i,
            None => {
                if !self
                    .publisher
                    .topic_ready(&record.topic, TOPIC_READY_WAIT)
                    .await
                {
                    tracing::warn!(topic = %record.topic, "the topic is not served on every partition yet; producing anyway");
                }
                self.destination(&record.topic)
            }
        };
        let ticket = Ticket {
            tag: tx,
            message_id: record.message_id,
            bytes,
            destination,
        };
        loop {
            match self.publisher.send(record, ticket) {
                Ok(()) => {
                    self.in_flight.messages += 1;
                    self.in_flight.bytes += ticket.bytes;
                    return;
                }
                Err(SendError::Rejected(error)) => {
                    self.rejected(tx, record.message_id, error);
                    return;
                }
                Err(SendError::Failed(error)) => {
                    self.restart = Some(error.context(format!("producing {}", record.message_id)));
                    return;
                }
                Err(SendError::QueueFull) => {
                    // Let reports drain, then try again.
                    match tokio::time::timeout(Duration::from_millis(100), self.reports.recv())
                        .await
                    {
                        Ok(Some(d)) => self.on_delivery(d),
                        Ok(None) => {
                            self.restart = Some(Error::new(
                                Code::INTERNAL,
                                "the producer's delivery reports stopped",
                            ));
                            return;
                        }
                        Err(_) => {}
                    }
                }
            }
        }
    }

    /// A record Kafka refused for good. A row's fault is recorded as FAILED;
    /// an operator's (authorization, a missing topic, a policy) is never:
    /// past `relay.operator_error_threshold` such refusals the session ends,
    /// and the relay retries with backoff until the operator fixes it.
    fn rejected(&mut self, tx: TxSeq, id: Uuid, error: Error) {
        if error.class() == Class::Row {
            self.failures.push(Failure {
                tx: Some(tx),
                id,
                error,
            });
            return;
        }
        if self.tx_mode.is_some() {
            // The transaction cannot commit without it: abort and retry later.
            self.restart
                .get_or_insert_with(|| error.context(format!("message {id}")));
            return;
        }
        self.operator_rejections += 1;
        if self.operator_rejections >= self.relay.cfg.relay.operator_error_threshold {
            self.restart
                .get_or_insert_with(|| error.context(format!("message {id}")));
        }
    }

    /// Records rejected and refused rows as FAILED, then lets their
    /// transactions settle. Nothing is dropped silently.
    async fn record_failures(&mut self, guard: Guard) -> Result<(), Error> {
        if self.failures.is_empty() {
            return Ok(());
        }
        let failures = std::mem::take(&mut self.failures);
        let mut by_code: BTreeMap<Code, Vec<Uuid>> = BTreeMap::new();
        for f in &failures {
            tracing::error!(code = %f.error.code(), message_id = %f.id, detail = %f.error.detail(), "message not published; row recorded as FAILED");
            by_code.entry(f.error.code()).or_default().push(f.id);
        }
        for (code, ids) in by_code {
            self.relay
                .marker
                .failed(self.sql, &ids, code.as_str(), guard)
                .await
                .map_err(|e| e.context("recording FAILED rows"))?;
        }
        for f in failures {
            if let Some(tx) = f.tx {
                self.watermark.settle_one(tx);
            }
            self.relay.stats.failed.fetch_add(1, Ordering::Relaxed);
            self.relay.metrics.row_failed(f.error.code());
        }
        Ok(())
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
