//! Everything of a session but its strategy: the sink and the ledger, the
//! watermark, what is in flight, the rows to record FAILED, the marks owed
//! and the reason the session must end. The strategy's methods take it, so
//! both delivery modes share one set of rules for what they have in common.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;

use prometheus::IntCounter;
use tokio::time::Instant;

use super::ledger::Ledger;
use super::recorder::{MARK_BATCH, MARK_INTERVAL};
use super::shared::Shared;
use super::sink::{Delivery, Sink, Ticket};
use super::watermark::{TxSeq, Watermark};
use crate::contract::definition::Status;
use crate::contract::options::InvalidOp;
use crate::contract::outbox;
use crate::error::{policy, Code, Error};
use crate::kafka::limits::{Described, Limit};
use crate::kafka::publisher::Outcome;
use crate::lsn::Lsn;
use crate::metrics::names;
use crate::otel::{Acknowledged, Seed};
use crate::pg::dead_letter::{Content, Letter};
use crate::pg::row_status::Guard;
use crate::router::Record;
use crate::row::value::{Timestamp, Uuid};
use crate::row::OutboxRow;

/// A rejected or refused row waiting to be recorded.
#[derive(Debug)]
pub(crate) struct Failure {
    /// The source transaction it holds; `None` once nothing waits on it
    /// (a row refused inside an aborted Kafka transaction).
    pub(crate) tx: Option<TxSeq>,
    pub(crate) id: Uuid,
    pub(crate) error: Error,
}

/// What Kafka has not acknowledged yet.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct InFlight {
    pub(crate) messages: usize,
    pub(crate) bytes: usize,
}

/// The source transaction being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Current {
    /// Between source transactions.
    Idle,
    /// Its rows are published.
    Publishing(TxSeq, Timestamp),
    /// Already in Kafka (transactional delivery's progress says so): its
    /// rows are only marked.
    AlreadyPublished,
}

pub(crate) struct Parts<'a, K, L> {
    pub(crate) shared: &'a Shared,
    pub(crate) sink: K,
    pub(crate) ledger: L,
    /// Numbers source transactions (and, when idempotent, settles them).
    pub(crate) watermark: Watermark,
    pub(crate) in_flight: InFlight,
    /// Rows to record FAILED before their transactions settle.
    pub(crate) failures: Vec<Failure>,
    /// An outbox that keeps no status: what its refused rows would have
    /// been, by id, for the dead-letter table.
    pub(crate) letters: HashMap<Uuid, Content>,
    /// Confirmed rows not yet handed to the recorder.
    pub(crate) published: Vec<Uuid>,
    /// The settled position that waits for `published`.
    pub(crate) settles: Option<Lsn>,
    /// Set by the first failure that ends the session.
    pub(crate) ending: Option<Error>,
    /// Topics seen in this session, by name and by index: a report names
    /// its topic by index, without a lookup by name.
    destinations: foldhash::HashMap<String, u32>,
    by_index: Vec<Destination>,
    /// The relay's poison rows as this session started: rows are added
    /// only when a session ends, so a copy needs no lock per row.
    poison: HashSet<Uuid>,
    /// Whether the producer's queue was purged after a refused batch.
    purged: Purged,
    last_mark: Instant,
}

/// A topic this session writes to.
struct Destination {
    name: String,
    published: IntCounter,
    limit: Option<Limit>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purged {
    No,
    Yes,
}

impl<K: Sink, L: Ledger> Parts<'_, K, L> {
    /// The first reason to end the session wins, unless a later one weighs
    /// more: this process must never publish again (fenced), or an operator
    /// must act (a refused topic stops the producer, and the records purged
    /// behind it report a passing failure that must not hide why).
    pub(crate) fn end_with(&mut self, e: Error) {
        if self
            .ending
            .as_ref()
            .is_none_or(|old| weight(&e) > weight(old))
        {
            self.ending = Some(e);
        }
    }

    /// A row Kafka refused for its own reason, recorded FAILED in an
    /// earlier session: left out when its transaction is published again.
    pub(crate) fn poisoned(&self, row: &OutboxRow) -> bool {
        !self.poison.is_empty() && row.message_id().is_some_and(|id| self.poison.contains(&id))
    }

    /// The same, by a routed row's id.
    pub(crate) fn poisoned_id(&self, id: Uuid) -> bool {
        !self.poison.is_empty() && self.poison.contains(&id)
    }

    /// Keeps a refused record for the dead-letter table, when the outbox
    /// keeps no status (otherwise the row itself is marked FAILED).
    pub(crate) fn keep_letter(&mut self, record: &Record) {
        if self.shared.status == Status::NotKept {
            self.letters
                .insert(record.message_id, Content::of_record(record));
        }
    }

    /// An UPDATE of a routed outbox, as `table.op.invalid.behavior` says:
    /// dropped with a warning or an error in the log, or refused.
    pub(crate) fn invalid_op(&self, id: Uuid, behavior: InvalidOp) -> Result<(), Error> {
        self.shared.metrics.update_dropped(behavior);
        match behavior {
            InvalidOp::Warn => {
                tracing::warn!(change = %id, "an UPDATE of the outbox table is not an event; dropped (table.op.invalid.behavior = warn)");
            }
            InvalidOp::Error => {
                tracing::error!(change = %id, "an UPDATE of the outbox table is not an event; dropped (table.op.invalid.behavior = error)");
            }
            InvalidOp::Fatal => {
                return Err(Error::new(
                    Code::OUTBOX_UPDATE_REFUSED,
                    format!("an UPDATE of the outbox table (change {id}) and table.op.invalid.behavior = fatal: stopping before it"),
                ))
            }
        }
        Ok(())
    }

    /// In-flight accounting and outcome counters, for every report.
    pub(crate) fn account(&mut self, d: &Delivery) {
        self.in_flight.messages = self.in_flight.messages.saturating_sub(1);
        self.in_flight.bytes = self.in_flight.bytes.saturating_sub(d.ticket.bytes);
        let m = &self.shared.metrics;
        match &d.outcome {
            Outcome::Confirmed => m.confirmed.inc(),
            Outcome::Rejected(_) => m.delivery(names::REJECTED),
            Outcome::Retry(_) => m.delivery(names::RETRY),
            Outcome::Ambiguous(_) => m.delivery(names::AMBIGUOUS),
        }
    }

    /// The record's span seed when it is traced, and, when
    /// `otel.propagate` is set, the record with the relay's span context
    /// in place of the row's.
    pub(crate) fn trace(&self, record: &Record) -> (Option<Seed>, Option<Record>) {
        let Some(otel) = &self.shared.otel else {
            return (None, None);
        };
        let header = outbox::TRACEPARENT_HEADER.name;
        let commit_us = record.timestamp_ms.unwrap_or_default().saturating_mul(1000);
        let Some(seed) = otel.seed(record.header(header), commit_us) else {
            return (None, None);
        };
        let traced = otel
            .propagates()
            .then(|| record.with_header(header, seed.traceparent().as_bytes()));
        (Some(seed), traced)
    }

    /// Ends a traced record's span at its report.
    pub(crate) fn trace_acknowledged(&self, d: &Delivery) {
        let (Some(otel), Some(seed)) = (&self.shared.otel, &d.ticket.trace) else {
            return;
        };
        let topic = self
            .by_index
            .get(d.ticket.destination as usize)
            .map_or("", |x| x.name.as_str());
        let (outcome, offset) = match &d.outcome {
            Outcome::Confirmed => ("published", Some(d.offset)),
            Outcome::Rejected(_) => ("refused", None),
            Outcome::Retry(_) => ("retried", None),
            Outcome::Ambiguous(_) => ("ambiguous", None),
        };
        let id = d.ticket.message_id.to_string();
        let ack = Acknowledged {
            message_id: &id,
            topic,
            partition: d.partition,
            offset,
            outcome,
        };
        otel.acknowledged(seed, &ack, crate::metrics::unix_micros());
    }

    /// Counts a confirmed record as published to its destination.
    pub(crate) fn count_published(&self, destination: u32, n: u64) {
        if let Some(d) = self.by_index.get(destination as usize) {
            d.published.inc_by(n);
        }
    }

    /// Rows whose PUBLISHED mark is owed (when the relay marks rows).
    pub(crate) fn owe_marks(&mut self, ids: impl IntoIterator<Item = Uuid>) {
        if self.shared.marks().on() {
            self.published.extend(ids);
        }
    }

    /// `position` is settled once the marks owed so far are recorded.
    pub(crate) fn settle(&mut self, position: Lsn) {
        self.shared
            .stats
            .settled
            .store(position.0, Ordering::Relaxed);
        self.settles = Some(position);
    }

    /// Records rejected and refused rows as FAILED, then lets their
    /// transactions settle. Nothing is dropped silently.
    pub(crate) async fn record_failures(&mut self, guard: Guard) -> Result<(), Error> {
        if self.failures.is_empty() {
            return Ok(());
        }
        let failures = std::mem::take(&mut self.failures);
        if self.shared.status == Status::NotKept {
            let letters: Vec<Letter> = failures
                .iter()
                .map(|f| {
                    let content = self.letters.remove(&f.id).unwrap_or_default();
                    let event_id = content.event_id.as_deref().unwrap_or("?");
                    crate::log_error!(
                        error,
                        f.error,
                        event_id,
                        "message not published; written to the dead-letter table"
                    );
                    Letter {
                        content,
                        code: f.error.code(),
                        message: f.error.detail().to_string(),
                    }
                })
                .collect();
            self.ledger
                .dead_letters(&letters)
                .await
                .map_err(|e| e.context("writing the dead-letter table"))?;
        } else {
            let mut by_code: BTreeMap<Code, Vec<Uuid>> = BTreeMap::new();
            for f in &failures {
                crate::log_error!(error, f.error, message_id = %f.id, "message not published; row recorded as FAILED");
                by_code.entry(f.error.code()).or_default().push(f.id);
            }
            for (code, ids) in by_code {
                self.ledger
                    .failed(&ids, code, guard)
                    .await
                    .map_err(|e| e.context("recording FAILED rows"))?;
            }
        }
        for f in failures {
            if let Some(tx) = f.tx {
                self.watermark.settle_one(tx);
            }
            self.shared.stats.failed.fetch_add(1, Ordering::Relaxed);
            match self.shared.status {
                Status::Kept => self.shared.metrics.row_failed(f.error.code()),
                Status::NotKept => self.shared.metrics.dead_lettered(f.error.code()),
            }
        }
        Ok(())
    }

    /// Hands confirmed rows and the position after them to the recorder, at
    /// least every [`MARK_INTERVAL`] or [`MARK_BATCH`] rows (at once when
    /// the relay does not mark rows).
    pub(crate) async fn hand_over_marks(&mut self) {
        let waiting = !self.published.is_empty() || self.settles.is_some();
        if waiting
            && (!self.shared.marks().on()
                || self.published.len() >= MARK_BATCH
                || self.last_mark.elapsed() >= MARK_INTERVAL)
        {
            self.last_mark = Instant::now();
            let batch = std::mem::take(&mut self.published);
            self.shared.queue_marks(batch, self.settles.take()).await;
        }
    }

    /// The index of `topic` and its limit, when known. A session's first
    /// record for a topic first waits until the topic is served and learns
    /// its limit; a limit below the producer's batch size ends the session
    /// (`BATCH_OVER_TOPIC_LIMIT`): the next producer batches under it.
    pub(crate) async fn destination(&mut self, topic: &str) -> (u32, Option<Limit>) {
        if let Some(i) = self.destinations.get(topic) {
            let limit = self.by_index.get(*i as usize).and_then(|d| d.limit);
            return (*i, limit);
        }
        let looked = look_up(&self.sink, &self.shared.limits, topic).await;
        self.register(topic, looked)
    }

    /// Looks the unknown ones of `destinations` up together, a few at a
    /// time: otherwise a session's first records for many new destinations
    /// wait three round trips to the broker each, one after the other.
    pub(crate) async fn learn_destinations(&mut self, rows: &[OutboxRow]) {
        use futures_util::StreamExt as _;
        // Known topics, the usual case, cost no allocation.
        let mut topic = String::new();
        let mut unknown: Vec<String> = Vec::new();
        for row in rows {
            topic.clear();
            if !self.shared.plan.write_topic(row, &mut topic) {
                continue;
            }
            if !self.destinations.contains_key(&topic) {
                unknown.push(topic.clone());
            }
        }
        unknown.sort_unstable();
        unknown.dedup();
        if unknown.len() < 2 {
            return;
        }
        let (sink, limits) = (&self.sink, &self.shared.limits);
        let looked: Vec<(String, LookedUp)> = futures_util::stream::iter(unknown)
            .map(|t| async move {
                let looked = look_up(sink, limits, &t).await;
                (t, looked)
            })
            .buffered(LOOKUPS_AT_ONCE)
            .collect()
            .await;
        for (topic, looked) in looked {
            self.register(&topic, looked);
        }
    }

    /// Records what was learned of a new destination and gives it an index.
    fn register(&mut self, topic: &str, looked: LookedUp) -> (u32, Option<Limit>) {
        match looked.ready {
            Ok(()) => {}
            Err(e) if e.code() == Code::TOPIC_NOT_SERVED => crate::log_error!(
                warn,
                e,
                topic,
                "the topic is not served on every partition yet; producing anyway"
            ),
            // Not created as the connector's topic.creation says: a record
            // now would let the broker make it otherwise.
            Err(e) => self.end_with(e),
        }
        let limit = self.learn_limit(topic, looked.limit);
        let i = self.by_index.len() as u32;
        self.by_index.push(Destination {
            name: topic.to_string(),
            published: self.shared.metrics.published_counter(topic),
            limit,
        });
        self.destinations.insert(topic.to_string(), i);
        (i, limit)
    }

    fn learn_limit(
        &mut self,
        topic: &str,
        described: Option<Result<Described, Error>>,
    ) -> Option<Limit> {
        let limits = &self.shared.limits;
        let limit = match (limits.get(topic), described) {
            (Some(known), _) => known,
            (None, Some(Ok(d))) => {
                limits.learn(topic, Limit::Described(d.max_message_bytes));
                limits.learn_window(topic, d.window);
                Limit::Described(d.max_message_bytes)
            }
            (None, Some(Err(e))) => {
                crate::log_error!(
                    warn,
                    e,
                    topic,
                    "the topic's max.message.bytes is unknown: a batch the broker refuses as too large is published again in smaller ones"
                );
                return None;
            }
            (None, None) => return None,
        };
        let batch_size = self.sink.batch_size();
        if limits.batch_size(batch_size) < batch_size {
            self.end_with(Error::new(
                Code::BATCH_OVER_TOPIC_LIMIT,
                format!(
                    "topic {topic} takes batches up to {limit:?} bytes, under the producer's batch.size of {batch_size}: the next session batches under it"
                ),
            ));
        }
        Some(limit)
    }

    /// A record the broker refused as too large: the row's fault when the
    /// record was a batch of its own or is over its topic's known limit.
    /// Otherwise the batch was, and the record fits: the producer's queue
    /// is dropped, the limit is learned again, and the session ends so the
    /// next one publishes it again in smaller batches.
    pub(crate) fn too_large(&mut self, ticket: &Ticket, refusal: Error) -> Outcome {
        let destination = self.by_index.get(ticket.destination as usize);
        let limit = destination
            .and_then(|d| d.limit)
            .and_then(Limit::record_bound);
        let batch_size = self.sink.batch_size();
        let alone = ticket.bytes > batch_size;
        if alone || limit.is_some_and(|l| ticket.bytes > l) {
            let bound = limit.map_or_else(|| "unknown".to_string(), |l| l.to_string());
            return Outcome::Rejected(refusal.context(format!(
                "a record of {} bytes as a batch of its own (the topic's max.message.bytes: {bound})",
                ticket.bytes
            )));
        }
        let topic = destination.map_or("", |d| d.name.as_str());
        // One refused batch reports each of its records: the limit is
        // learned (or halved) once per session.
        if self.purged == Purged::No {
            self.purged = Purged::Yes;
            self.shared.limits.refused(topic, batch_size);
            self.sink.purge();
        }
        Outcome::Retry(refusal.recoded(Code::BATCH_OVER_TOPIC_LIMIT).context(format!(
            "a batch for topic {topic} was refused as too large; its records fit on their own and are published again in smaller batches"
        )))
    }

    /// A record the broker refused for its timestamp. Under the gap-less
    /// guarantee every record of the refused batch is reported so: one
    /// inside the topic's time window was refused for another's, and is
    /// published again by the next session. Without the window (the
    /// principal may not describe the topic) each is taken at its word.
    pub(crate) fn out_of_time(&mut self, ticket: &Ticket, refusal: Error) -> Outcome {
        let topic = self
            .by_index
            .get(ticket.destination as usize)
            .map_or("", |d| d.name.as_str());
        let window = self.shared.limits.window(topic);
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        // No timestamp: librdkafka stamped it when it was sent.
        match (window, ticket.timestamp_ms.unwrap_or(now_ms)) {
            (Some(w), ts) if w.takes(ts, now_ms) => {
                Outcome::Retry(refusal.recoded(Code::KAFKA_PRODUCE_FAILED).context(format!(
                    "a record of topic {topic} inside its time window was refused with another of its batch; it is published again"
                )))
            }
            _ => Outcome::Rejected(refusal),
        }
    }
}

/// How much a reason to end a session weighs against another.
fn weight(e: &Error) -> u8 {
    policy::directive(e).weight()
}

impl<'a, K, L> Parts<'a, K, L> {
    pub(crate) fn new(shared: &'a Shared, sink: K, ledger: L) -> Self {
        Parts {
            shared,
            sink,
            ledger,
            watermark: Watermark::new(),
            in_flight: InFlight::default(),
            failures: Vec::new(),
            letters: HashMap::new(),
            published: Vec::new(),
            settles: None,
            ending: None,
            destinations: foldhash::HashMap::default(),
            by_index: Vec::new(),
            poison: shared.poison(),
            purged: Purged::No,
            last_mark: Instant::now(),
        }
    }
}

/// Destinations looked up at once by [`Parts::learn_destinations`].
const LOOKUPS_AT_ONCE: usize = 16;

/// What the broker said of a new destination: whether it is served, and
/// its `max.message.bytes` (`None`: already known).
struct LookedUp {
    ready: Result<(), Error>,
    limit: Option<Result<Described, Error>>,
}

async fn look_up<K: Sink>(
    sink: &K,
    limits: &crate::kafka::limits::Limits,
    topic: &str,
) -> LookedUp {
    let ready = sink.topic_ready(topic).await;
    let limit = match limits.get(topic) {
        Some(_) => None,
        None => Some(sink.topic_limit(topic).await),
    };
    LookedUp { ready, limit }
}
