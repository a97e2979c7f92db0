//! One session: events from the stream are mapped and produced, delivery
//! reports settle them in the watermark, rejected and refused rows are
//! recorded as FAILED, and the settled position goes back to the reader.
//! Nothing awaits per message: records are enqueued and reports come back
//! through the producer's context; in-flight messages and bytes are bounded.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

use super::supervisor::SessionEnd;
use super::watermark::{TxSeq, Watermark};
use super::Relay;
use crate::contract::mapper::{self, Record};
use crate::contract::outbox;
use crate::contract::row::{OutboxRow, Value};
use crate::contract::value::{Timestamp, Uuid};
use crate::error::{Class, Code, Error};
use crate::kafka::publisher::{Delivery, Outcome, Publisher, SendError, Ticket};
use crate::pg::lsn::Lsn;
use crate::pg::marks::Guard;
use crate::replication::{Event, Stream};

/// A rejected or refused row waiting to be recorded.
struct Failure {
    tx: TxSeq,
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
const MARK_BATCH: usize = 5000;
const MARK_INTERVAL: Duration = Duration::from_millis(250);

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
}

impl<'a> Session<'a> {
    pub(super) fn new(relay: &'a Relay, sql: &'a Client) -> Result<Session<'a>, Error> {
        let (publisher, reports) = Publisher::new(&relay.kafka)?;
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
        })
    }

    /// Ends the session: a session that did not stop cleanly drops what
    /// librdkafka still holds (the next one publishes it again). Returns the
    /// rows confirmed but not yet handed to the marking task, and the
    /// settled position that waits for them.
    pub(super) fn close(mut self, clean: bool) -> (Vec<Uuid>, Option<Lsn>) {
        if !clean || self.restart.is_some() {
            self.publisher.purge();
        }
        (std::mem::take(&mut self.published), self.settles.take())
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
        loop {
            let room = self.in_flight.messages < cfg.max_in_flight_messages
                && self.in_flight.bytes < cfg.max_in_flight_bytes;
            tokio::select! {
                biased;
                _ = shutdown.cancelled(), if draining.is_none() => {
                    tracing::info!(in_flight = self.in_flight.messages, "stopping: draining in-flight messages");
                    draining = Some(tokio::time::Instant::now() + drain_timeout);
                }
                Some(delivery) = self.reports.recv() => self.on_delivery(delivery),
                _ = self.relay.marks_stalled.notified() => {
                    self.restart.get_or_insert_with(|| Error::new(
                        Code::PG_CONNECTION_LOST,
                        "PUBLISHED marks cannot reach PostgreSQL; the slot waits for them, so the replication connection is closed rather than kept waiting",
                    ));
                }
                event = stream.events.recv(), if room && draining.is_none() && self.restart.is_none() => match event {
                    Some(event) => self.on_event(event).await,
                    // The reader ended: the session's closing says why.
                    None => return Ok(SessionEnd::Restart(Error::new(
                        Code::PG_CONNECTION_LOST,
                        "the replication stream ended",
                    ))),
                },
                _ = tick.tick() => {}
                _ = sleep_until(draining), if draining.is_some() => {
                    tracing::warn!(in_flight = self.in_flight.messages, "drain deadline passed; unsettled messages will be published again on restart");
                    return Ok(SessionEnd::Stopped);
                }
            }
            self.record_failures(Guard::Pending).await?;
            if let Some(lsn) = self.watermark.advance() {
                self.relay.stats.settled.store(lsn.0, Ordering::Relaxed);
                // Every row of the transactions up to `lsn` is in
                // `published` or an earlier batch: the slot follows them.
                self.settles = Some(lsn);
            }
            // Without marks the position goes on at once.
            let due = self.published.len() >= MARK_BATCH
                || last_mark.elapsed() >= MARK_INTERVAL
                || !self.relay.cfg.relay.mark_published;
            if due && (!self.published.is_empty() || self.settles.is_some()) {
                last_mark = Instant::now();
                let batch = std::mem::take(&mut self.published);
                self.relay.queue_marks(batch, self.settles.take()).await;
            }
            if let Some(reason) = self.restart.take() {
                return Ok(SessionEnd::Restart(reason));
            }
            if draining.is_some() && self.in_flight.messages == 0 && self.failures.is_empty() {
                return Ok(SessionEnd::Stopped);
            }
            if last_report.elapsed() >= Duration::from_secs(10) {
                last_report = Instant::now();
                let s = &self.relay.stats;
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

    /// Produces `rows` as part of `tx`, a pseudo-transaction that never
    /// commits in the slot (a cutover's backlog). `Some(end)` when the
    /// session must end.
    pub(super) async fn produce_rows(
        &mut self,
        tx: TxSeq,
        rows: &[OutboxRow],
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
        match d.outcome {
            Outcome::Confirmed => {
                self.watermark.settle_one(d.ticket.tag);
                self.relay.stats.published.fetch_add(1, Ordering::Relaxed);
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

    async fn on_event(&mut self, event: Event) {
        match event {
            Event::Begin { commit_time, .. } => {
                self.current = Some((self.watermark.begin(), commit_time));
            }
            Event::Rows(rows) => {
                let Some((tx, commit_time)) = self.current else {
                    self.restart =
                        Some(Error::new(Code::PG_PROTOCOL, "rows outside a transaction"));
                    return;
                };
                for row in &rows {
                    self.watermark.add(tx);
                    self.map_and_produce(tx, row, commit_time).await;
                    if self.restart.is_some() {
                        return;
                    }
                }
            }
            Event::Commit { end_lsn, .. } => {
                if let Some((tx, _)) = self.current.take() {
                    self.watermark.commit(tx, end_lsn);
                }
            }
        }
    }

    /// Maps a row and enqueues its record, or queues the refusal to be
    /// recorded as FAILED.
    async fn map_and_produce(&mut self, tx: TxSeq, row: &OutboxRow, timestamp: Timestamp) {
        match mapper::map(row, &self.relay.cfg.outbox.topic_prefix, timestamp) {
            Ok(record) => self.produce(tx, &record).await,
            Err(error) => self.failures.push(Failure {
                tx,
                id: row.message_id().unwrap_or(Uuid([0; 16])),
                error,
            }),
        }
    }

    /// Enqueues one record; waits only when librdkafka's queue is full.
    async fn produce(&mut self, tx: TxSeq, record: &Record) {
        let ticket = Ticket {
            tag: tx,
            message_id: record.message_id,
            bytes: record.size(),
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
            self.failures.push(Failure { tx, id, error });
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
            self.watermark.settle_one(f.tx);
            self.relay.stats.failed.fetch_add(1, Ordering::Relaxed);
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
