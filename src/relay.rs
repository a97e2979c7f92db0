//! `outbox-cdc run`: slot → mapper → Kafka → watermark → slot.
//!
//! One session is one replication connection and one producer. A rejected
//! message is recorded as FAILED and the stream goes on; an ambiguous or
//! transient failure ends the session, and the next one starts from the last
//! settled LSN with a new producer, publishing the unsettled messages again
//! under the same ids (never one message alone: that could reorder its key).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use tokio::sync::mpsc;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, ConfigError};
use crate::db::{self, DbError};
use crate::exclusivity::{self, ExclusivityError};
use crate::handover::{self, State};
use crate::lsn::Lsn;
use crate::mapper;
use crate::marker::{Guard, Marker};
use crate::publisher::{self, Delivery, Outcome, PublishError, Publisher, Ticket};
use crate::replication::connection::{ConnectOptions, ReplicationConnection};
use crate::replication::reader::{self, Event, Feedback, ReaderOptions, ReaderStats};
use crate::replication::rows::{OutboxRow, Value};
use crate::replication::setup::{self, SlotSpec};
use crate::replication::supervisor::Backoff;
use crate::replication::ReplicationError;
use crate::value::{Timestamp, Uuid};
use crate::watermark::Watermark;

#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Kafka(#[from] PublishError),
    #[error(transparent)]
    Replication(#[from] ReplicationError),
    #[error(transparent)]
    Exclusivity(#[from] ExclusivityError),
    #[error("ROW_MARKING_FAILED: cannot record FAILED rows: {0}")]
    Marking(tokio_postgres::Error),
    #[error("HANDOVER_INCOMPLETE: a cutover stopped before it listed the backlog; run `outbox-cdc cutover --to cdc` again")]
    HandoverIncomplete,
    #[error("HANDOVER_FAILED: {0}")]
    Handover(tokio_postgres::Error),
}

impl RelayError {
    pub fn code(&self) -> &'static str {
        match self {
            RelayError::Config(e) => e.code(),
            RelayError::Db(e) => e.code(),
            RelayError::Kafka(e) => e.code(),
            RelayError::Replication(e) => e.code(),
            RelayError::Exclusivity(e) => e.code(),
            RelayError::Marking(_) => "ROW_MARKING_FAILED",
            RelayError::HandoverIncomplete => "HANDOVER_INCOMPLETE",
            RelayError::Handover(_) => "HANDOVER_FAILED",
        }
    }
}

/// Counters for operators and tests.
#[derive(Debug, Default)]
pub struct RelayStats {
    pub published: AtomicU64,
    pub failed: AtomicU64,
    pub restarts: AtomicU64,
    pub settled: AtomicU64,
    pub reader: Arc<ReaderStats>,
}

/// Why a session ended.
enum SessionEnd {
    /// Shutdown requested and drained (or the drain deadline passed).
    Stopped,
    /// Ambiguous or transient: rebuild and replay.
    Restart(String),
}

/// A rejected or refused row waiting to be recorded.
struct Failure {
    tx: u64,
    id: Uuid,
    code: &'static str,
    detail: String,
}

pub struct Relay {
    cfg: Config,
    kafka: ClientConfig,
    connect: ConnectOptions,
    spec: SlotSpec,
    reader_opts: ReaderOptions,
    marker: Arc<Marker>,
    /// FAILED rows and hand-over; reconnected when a restart finds it closed.
    sql: Client,
    env: Env,
    /// PUBLISHED marks go to their own task and connection, so bookkeeping
    /// never holds up publication.
    published_marks: Option<PublishedMarks>,
    pub stats: Arc<RelayStats>,
}

/// The background task that marks rows PUBLISHED.
struct PublishedMarks {
    batches: mpsc::Sender<Vec<Uuid>>,
    task: tokio::task::JoinHandle<()>,
}

impl PublishedMarks {
    fn start(cfg: Config, env: Env, marker: Arc<Marker>) -> PublishedMarks {
        let (batches, mut rx) = mpsc::channel::<Vec<Uuid>>(64);
        let task = tokio::spawn(async move {
            let mut client: Option<Client> = None;
            while let Some(ids) = rx.recv().await {
                if client.as_ref().is_none_or(Client::is_closed) {
                    client = db::connect(&cfg, &*env).await.ok();
                }
                let Some(c) = &client else {
                    tracing::warn!(
                        rows = ids.len(),
                        "could not mark rows PUBLISHED: no database connection"
                    );
                    continue;
                };
                for chunk in ids.chunks(5000) {
                    if let Err(e) = marker.published(c, chunk, Guard::Pending).await {
                        // Bookkeeping only: the messages are in Kafka and the slot is right.
                        tracing::warn!(error = %e, rows = chunk.len(), "could not mark rows PUBLISHED");
                    }
                }
            }
        });
        PublishedMarks { batches, task }
    }

    /// Waits until every queued mark is written.
    async fn finish(self) {
        drop(self.batches);
        let _ = self.task.await;
    }
}

/// Where secrets come from (the process environment in production).
pub type Env = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// A database error on the bookkeeping connection: a lost connection is
/// worth a restart, a refusal by the server (permissions, schema) is not.
fn bookkeeping_is_transient(e: &tokio_postgres::Error) -> bool {
    e.code().is_none()
        || e.code().is_some_and(|c| {
            let c = c.code();
            c.starts_with("08") || c.starts_with("57P") || c.starts_with("53")
        })
}

impl Relay {
    /// Validates both sides before anything touches the slot: Kafka answers,
    /// SQL and replication log-ins work, the publication is right.
    pub async fn prepare(cfg: Config, env: Env) -> Result<Relay, RelayError> {
        let kafka = publisher::client_config(&cfg, &*env)?;
        let (probe, _) = Publisher::new(&kafka)?;
        let servers = cfg.kafka.bootstrap_servers.clone();
        tokio::task::spawn_blocking(move || {
            probe.check_reachable(&servers, Duration::from_secs(10))
        })
        .await
        .map_err(|e| PublishError::Produce(e.to_string()))??;
        let sql = db::connect(&cfg, &*env).await?;
        exclusivity::startup_check(&sql, &cfg).await?;
        if matches!(
            handover::state(&sql, &cfg)
                .await
                .map_err(RelayError::Handover)?,
            Some((State::Preparing, _))
        ) {
            return Err(RelayError::HandoverIncomplete);
        }
        let connect = ConnectOptions::from_config(&cfg, &*env)?;
        let spec = SlotSpec {
            slot: cfg.postgres.slot.clone(),
            publication: cfg.postgres.publication.clone(),
            schema: cfg.outbox.schema.clone(),
            table: cfg.outbox.table.clone(),
            create_if_missing: cfg.relay.create_slot,
        };
        let reader_opts =
            ReaderOptions::new(&spec.slot, &spec.publication, &spec.schema, &spec.table);
        let marker = Arc::new(Marker::new(&cfg));
        let published_marks = cfg
            .relay
            .mark_published
            .then(|| PublishedMarks::start(cfg.clone(), env.clone(), marker.clone()));
        Ok(Relay {
            cfg,
            kafka,
            connect,
            spec,
            reader_opts,
            marker,
            sql,
            env,
            published_marks,
            stats: Arc::new(RelayStats::default()),
        })
    }

    /// A new bookkeeping connection when the old one was lost (e.g. the
    /// server restarted).
    async fn reconnect_sql(&mut self) -> Result<(), RelayError> {
        if self.sql.is_closed() {
            self.sql = db::connect(&self.cfg, &*self.env).await?;
            tracing::info!("reconnected the bookkeeping connection");
        }
        Ok(())
    }

    async fn open(&self) -> Result<(ReplicationConnection, Lsn), ReplicationError> {
        let mut conn = ReplicationConnection::connect(&self.connect).await?;
        let state = setup::prepare(&mut conn, &self.spec).await?;
        if state.created {
            tracing::warn!(
                slot = %self.spec.slot,
                "created the replication slot: rows committed before now are not streamed (hand them over with `outbox-cdc cutover`)"
            );
        }
        Ok((conn, state.confirmed_flush))
    }

    /// Opens the slot, or, while another relay streams from it, waits as a
    /// standby and takes over when it is free. `None` when shut down.
    async fn open_or_stand_by(
        &self,
        shutdown: &CancellationToken,
    ) -> Result<Option<(ReplicationConnection, Lsn)>, RelayError> {
        let mut announced = false;
        loop {
            match self.open().await {
                Ok(opened) => {
                    if announced {
                        tracing::info!(slot = %self.spec.slot, "the slot is free: taking over");
                    }
                    return Ok(Some(opened));
                }
                Err(ReplicationError::SlotInUse { slot, pid }) => {
                    if !announced {
                        tracing::info!(%slot, %pid, "standby: another relay streams from the slot; waiting to take over");
                        announced = true;
                    }
                    tokio::select! {
                        _ = shutdown.cancelled() => return Ok(None),
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Publishes a READY hand-over list and returns, without streaming: the
    /// backlog of a cutover to Debezium, which streams from its own slot.
    pub async fn handover_only(&mut self, shutdown: CancellationToken) -> Result<(), RelayError> {
        let (publisher, mut reports) = Publisher::new(&self.kafka)?;
        let mut session = Session::new(self, publisher);
        match session.publish_handover(&mut reports, &shutdown).await? {
            None => Ok(()),
            Some(SessionEnd::Stopped) => Ok(()),
            Some(SessionEnd::Restart(reason)) => Err(PublishError::Produce(format!(
                "the hand-over stopped ({reason}); run it again: rows already published are skipped"
            ))
            .into()),
        }
    }

    /// Streams until `shutdown`, restarting sessions after transient failures.
    pub async fn run(&mut self, shutdown: CancellationToken) -> Result<(), RelayError> {
        let Some((first, start)) = self.open_or_stand_by(&shutdown).await? else {
            return Ok(());
        };
        let (feedback, _) = Feedback::new(start);
        let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
        let mut conn = Some((first, start));
        loop {
            let began = Instant::now();
            let opened = match conn.take() {
                Some(c) => Ok(c),
                None => match self.open_or_stand_by(&shutdown).await {
                    Ok(Some(c)) => Ok(c),
                    Ok(None) => return Ok(()),
                    Err(RelayError::Replication(e)) => Err(e),
                    Err(e) => return Err(e),
                },
            };
            let outcome = match opened {
                Ok((c, slot_position)) => match self.reconnect_sql().await {
                    Ok(()) => {
                        let start = slot_position.max(feedback.settled());
                        self.session(c, start, &feedback, &shutdown).await
                    }
                    Err(e) => Err(e),
                },
                Err(e) if e.is_transient() => Ok(SessionEnd::Restart(e.to_string())),
                Err(e) => Err(e.into()),
            };
            let outcome = match outcome {
                Err(RelayError::Marking(e) | RelayError::Handover(e))
                    if bookkeeping_is_transient(&e) =>
                {
                    Ok(SessionEnd::Restart(format!("bookkeeping connection: {e}")))
                }
                Err(RelayError::Db(DbError::Connect { source, .. })) => Ok(SessionEnd::Restart(
                    format!("bookkeeping connection: {source}"),
                )),
                other => other,
            };
            match outcome? {
                SessionEnd::Stopped => {
                    self.finish_marks().await;
                    tracing::info!(settled = %feedback.settled(), "relay stopped");
                    return Ok(());
                }
                SessionEnd::Restart(reason) => {
                    if shutdown.is_cancelled() {
                        return Ok(());
                    }
                    self.stats.restarts.fetch_add(1, Ordering::Relaxed);
                    if began.elapsed() > Duration::from_secs(30) {
                        backoff.reset();
                    }
                    let delay = backoff.next_delay();
                    tracing::warn!(%reason, ?delay, settled = %feedback.settled(), "restarting the pipeline from the last settled position");
                    tokio::select! {
                        _ = shutdown.cancelled() => return Ok(()),
                        _ = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
    }

    async fn session(
        &mut self,
        conn: ReplicationConnection,
        start: Lsn,
        feedback: &Feedback,
        shutdown: &CancellationToken,
    ) -> Result<SessionEnd, RelayError> {
        let (publisher, mut reports) = Publisher::new(&self.kafka)?;
        let (event_tx, mut events) = mpsc::channel::<Event>(8);
        let reader_cancel = CancellationToken::new();
        let reader = tokio::spawn({
            let opts = self.reader_opts.clone();
            let cancel = reader_cancel.clone();
            let stats = self.stats.reader.clone();
            let settled = feedback.subscribe();
            async move { reader::stream(conn, &opts, start, event_tx, settled, cancel, stats).await }
        });
        let mut session = Session::new(self, publisher);
        // The backlog of a cutover goes first, while this session holds the slot.
        let end = match session.publish_handover(&mut reports, shutdown).await {
            Ok(None) => {
                session
                    .pump(&mut reports, &mut events, feedback, shutdown, &reader)
                    .await
            }
            Ok(Some(end)) => Ok(end),
            Err(e) => Err(e),
        };
        let published = std::mem::take(&mut session.published);
        if session.restart.is_some() || end.is_err() {
            session.publisher.purge();
        }
        drop(session);
        reader_cancel.cancel();
        let reader_result = reader.await;
        self.mark_published(published).await;
        let end = end?;
        match reader_result {
            Ok(Ok(_)) | Ok(Err(ReplicationError::ConsumerGone(_))) => Ok(end),
            Ok(Err(e)) if e.is_transient() => Ok(SessionEnd::Restart(e.to_string())),
            Ok(Err(e)) => Err(e.into()),
            Err(join) => Ok(SessionEnd::Restart(format!("reader task: {join}"))),
        }
    }

    /// Queues rows to be marked PUBLISHED (waits only when the marking task
    /// is far behind).
    async fn mark_published(&self, ids: Vec<Uuid>) {
        if ids.is_empty() {
            return;
        }
        if let Some(marks) = &self.published_marks {
            if marks.batches.send(ids).await.is_err() {
                tracing::warn!("the PUBLISHED marking task stopped");
            }
        }
    }

    /// Writes the PUBLISHED marks still queued (on stop).
    async fn finish_marks(&mut self) {
        if let Some(marks) = self.published_marks.take() {
            marks.finish().await;
        }
    }
}

struct Session<'a> {
    relay: &'a Relay,
    publisher: Publisher,
    watermark: Watermark,
    /// The open transaction: sequence number and commit time.
    current: Option<(u64, Timestamp)>,
    in_flight: usize,
    in_flight_bytes: usize,
    failures: Vec<Failure>,
    published: Vec<Uuid>,
    restart: Option<String>,
}

impl<'r> Session<'r> {
    fn new(relay: &'r Relay, publisher: Publisher) -> Session<'r> {
        Session {
            relay,
            publisher,
            watermark: Watermark::new(),
            current: None,
            in_flight: 0,
            in_flight_bytes: 0,
            failures: Vec::new(),
            published: Vec::new(),
            restart: None,
        }
    }

    async fn pump(
        &mut self,
        reports: &mut mpsc::UnboundedReceiver<Delivery>,
        events: &mut mpsc::Receiver<Event>,
        feedback: &Feedback,
        shutdown: &CancellationToken,
        reader: &tokio::task::JoinHandle<Result<Lsn, ReplicationError>>,
    ) -> Result<SessionEnd, RelayError> {
        let limits = (
            self.relay.cfg.relay.max_in_flight_messages,
            self.relay.cfg.relay.max_in_flight_bytes,
        );
        let drain_timeout = Duration::from_secs(self.relay.cfg.relay.drain_timeout_secs);
        let mut draining: Option<tokio::time::Instant> = None;
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        let mut last_report = Instant::now();
        let mut last_mark = Instant::now();
        loop {
            let room = self.in_flight < limits.0 && self.in_flight_bytes < limits.1;
            tokio::select! {
                biased;
                _ = shutdown.cancelled(), if draining.is_none() => {
                    tracing::info!(in_flight = self.in_flight, "stopping: draining in-flight messages");
                    draining = Some(tokio::time::Instant::now() + drain_timeout);
                }
                Some(delivery) = reports.recv() => self.on_delivery(delivery),
                event = events.recv(), if room && draining.is_none() && self.restart.is_none() => match event {
                    Some(event) => self.on_event(event, reports).await,
                    None => {
                        // The reader ended: its result says why.
                        if reader.is_finished() {
                            return Ok(SessionEnd::Restart("the replication stream ended".into()));
                        }
                    }
                },
                _ = tick.tick() => {}
                _ = sleep_until(draining), if draining.is_some() => {
                    tracing::warn!(in_flight = self.in_flight, "drain deadline passed; unsettled messages will be published again on restart");
                    return Ok(SessionEnd::Stopped);
                }
            }
            self.record_failures(Guard::Pending).await?;
            if let Some(lsn) = self.watermark.advance() {
                feedback.settle(lsn);
                self.relay.stats.settled.store(lsn.0, Ordering::Relaxed);
            }
            if self.published.len() >= 5000
                || (!self.published.is_empty() && last_mark.elapsed() >= Duration::from_millis(250))
            {
                last_mark = Instant::now();
                let batch = std::mem::take(&mut self.published);
                self.relay.mark_published(batch).await;
            }
            if let Some(reason) = self.restart.take() {
                return Ok(SessionEnd::Restart(reason));
            }
            if draining.is_some() && self.in_flight == 0 && self.failures.is_empty() {
                return Ok(SessionEnd::Stopped);
            }
            if last_report.elapsed() >= Duration::from_secs(10) {
                last_report = Instant::now();
                let s = &self.relay.stats;
                tracing::info!(
                    published = s.published.load(Ordering::Relaxed),
                    failed = s.failed.load(Ordering::Relaxed),
                    in_flight = self.in_flight,
                    settled = %feedback.settled(),
                    "progress"
                );
            }
        }
    }

    /// Publishes a READY hand-over list in order, records every outcome, and
    /// marks it DONE. `Some(end)` ends the session (restart or shutdown).
    async fn publish_handover(
        &mut self,
        reports: &mut mpsc::UnboundedReceiver<Delivery>,
        shutdown: &CancellationToken,
    ) -> Result<Option<SessionEnd>, RelayError> {
        let cfg = &self.relay.cfg;
        let sql = &self.relay.sql;
        if !matches!(
            handover::state(sql, cfg)
                .await
                .map_err(RelayError::Handover)?,
            Some((State::Ready, _))
        ) {
            return Ok(None);
        }
        let tx = self.watermark.begin();
        let mut after = 0i64;
        let mut handed = 0u64;
        loop {
            let chunk = handover::read_chunk(sql, cfg, after, 1000)
                .await
                .map_err(RelayError::Handover)?;
            let Some((last, _)) = chunk.last() else { break };
            after = *last;
            for (_, row) in &chunk {
                self.watermark.add(tx);
                // No commit time is known for the backlog: its creation time stands in.
                let created = match row.get(&crate::outbox::CREATED_AT) {
                    Value::Timestamp(t) => *t,
                    _ => Timestamp::Micros(0),
                };
                self.map_and_produce(tx, row, created, reports).await;
                handed += 1;
                if let Some(reason) = self.restart.take() {
                    return Ok(Some(SessionEnd::Restart(reason)));
                }
            }
        }
        // Wait for every report of the hand-over.
        while self.in_flight > 0 {
            tokio::select! {
                Some(d) = reports.recv() => self.on_delivery(d),
                _ = shutdown.cancelled() => return Ok(Some(SessionEnd::Stopped)),
            }
            if let Some(reason) = self.restart.take() {
                return Ok(Some(SessionEnd::Restart(reason)));
            }
        }
        self.record_failures(Guard::HandedOver).await?;
        let published = std::mem::take(&mut self.published);
        for chunk in published.chunks(5000) {
            self.relay
                .marker
                .published(sql, chunk, Guard::HandedOver)
                .await
                .map_err(RelayError::Handover)?;
        }
        handover::set_state(sql, cfg, State::Done, handed as i64, None)
            .await
            .map_err(RelayError::Handover)?;
        handover::clear_list(sql, cfg)
            .await
            .map_err(RelayError::Handover)?;
        // The pseudo-transaction of the hand-over never commits in the slot.
        self.watermark = Watermark::new();
        tracing::info!(rows = handed, "published the cutover's backlog; streaming");
        Ok(None)
    }

    fn on_delivery(&mut self, d: Delivery) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.in_flight_bytes = self.in_flight_bytes.saturating_sub(d.ticket.bytes);
        match d.outcome {
            Outcome::Confirmed => {
                self.watermark.settle_one(d.ticket.tx);
                self.relay.stats.published.fetch_add(1, Ordering::Relaxed);
                if self.relay.cfg.relay.mark_published {
                    self.published.push(d.ticket.message_id);
                }
            }
            Outcome::Rejected { code, detail } => self.failures.push(Failure {
                tx: d.ticket.tx,
                id: d.ticket.message_id,
                code,
                detail,
            }),
            Outcome::Retry { detail } | Outcome::Ambiguous { detail } => {
                if self.restart.is_none() {
                    self.restart = Some(format!("message {}: {detail}", d.ticket.message_id));
                }
            }
        }
    }

    async fn on_event(&mut self, event: Event, reports: &mut mpsc::UnboundedReceiver<Delivery>) {
        match event {
            Event::Begin { commit_time, .. } => {
                self.current = Some((self.watermark.begin(), commit_time));
            }
            Event::Rows(rows) => {
                let Some((tx, commit_time)) = self.current else {
                    self.restart = Some("rows outside a transaction".into());
                    return;
                };
                for row in &rows {
                    self.watermark.add(tx);
                    self.map_and_produce(tx, row, commit_time, reports).await;
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
    async fn map_and_produce(
        &mut self,
        tx: u64,
        row: &OutboxRow,
        timestamp: Timestamp,
        reports: &mut mpsc::UnboundedReceiver<Delivery>,
    ) {
        match mapper::map(row, &self.relay.cfg.outbox.topic_prefix, timestamp) {
            Ok(record) => self.produce(tx, &record, reports).await,
            Err(refusal) => self.failures.push(Failure {
                tx,
                id: row.message_id().unwrap_or(Uuid([0; 16])),
                code: refusal.code,
                detail: refusal.detail,
            }),
        }
    }

    /// Enqueues one record; waits only when librdkafka's queue is full.
    async fn produce(
        &mut self,
        tx: u64,
        record: &mapper::Record,
        reports: &mut mpsc::UnboundedReceiver<Delivery>,
    ) {
        let ticket = Ticket {
            tx,
            message_id: record.message_id,
            bytes: record.size(),
        };
        loop {
            match self.publisher.send(record, ticket) {
                Ok(()) => {
                    self.in_flight += 1;
                    self.in_flight_bytes += ticket.bytes;
                    return;
                }
                Err(Some(Outcome::Rejected { code, detail })) => {
                    self.failures.push(Failure {
                        tx,
                        id: record.message_id,
                        code,
                        detail,
                    });
                    return;
                }
                Err(Some(other)) => {
                    self.restart = Some(format!("produce {}: {other:?}", record.message_id));
                    return;
                }
                Err(None) => {
                    // Queue full: let reports drain, then try again.
                    match tokio::time::timeout(Duration::from_millis(100), reports.recv()).await {
                        Ok(Some(d)) => self.on_delivery(d),
                        Ok(None) => {
                            self.restart = Some("delivery reports stopped".into());
                            return;
                        }
                        Err(_) => {}
                    }
                }
            }
        }
    }

    /// Records rejected and refused rows as FAILED, then lets their
    /// transactions settle. Nothing is dropped silently.
    async fn record_failures(&mut self, guard: Guard) -> Result<(), RelayError> {
        if self.failures.is_empty() {
            return Ok(());
        }
        let failures = std::mem::take(&mut self.failures);
        let mut by_code: BTreeMap<&'static str, Vec<Uuid>> = BTreeMap::new();
        for f in &failures {
            tracing::error!(code = f.code, message_id = %f.id, detail = %f.detail, "message not published; row recorded as FAILED");
            by_code.entry(f.code).or_default().push(f.id);
        }
        for (code, ids) in by_code {
            self.relay
                .marker
                .failed(&self.relay.sql, &ids, code, guard)
                .await
                .map_err(RelayError::Marking)?;
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
