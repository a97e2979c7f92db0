//! An in-memory Kafka behind the [`Sink`] seam: partitions answered in
//! order, a message size limit, topics an operator can deny, transient
//! failures that fail the rest of a partition (as an idempotent producer
//! does), a refusal for good that stops an idempotent producer (librdkafka's
//! `enable.gapless.guarantee`), transactions with an epoch that fences older
//! producers, and the progress a transactional relay commits.
//!
//! The test holds the [`Broker`]; each session gets a [`FakeSink`], one
//! producer. Answers come when the test says so ([`Broker::answer`]) or at
//! once ([`Answers::Immediate`]).

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::mpsc;

use crate::error::{Code, Error};
use crate::kafka::limits;
use crate::kafka::publisher::{Outcome, SendError};
use crate::lsn::Lsn;
use crate::pipeline::sink::{Delivery, Sink, Ticket};
use crate::router::Record;
use crate::row::value::Uuid;

/// Partitions per topic.
pub(crate) const PARTITIONS: u64 = 3;

/// Every topic's `max.message.bytes`: a record framed larger is refused as
/// too large. The test rows are under it, and a row made too large has a
/// value of this size alone.
pub(crate) const LIMIT: usize = 1024;

/// When the broker answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answers {
    /// As each record is sent.
    Immediate,
    /// When the test calls [`Broker::answer`].
    Held,
}

/// A transient failure the test makes the head of a partition meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Not stored, for a reason that may pass.
    Retry,
    /// Possibly stored: `stored` says whether it was.
    Ambiguous { stored: bool },
    /// Refused as too large with the batch it was in, though it fits on
    /// its own; nothing later of the partition is appended (the broker
    /// expects the refused sequence numbers first).
    BatchTooLarge,
}

/// Whether a stored record is visible to a read_committed consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Visibility {
    Visible,
    /// In the open transaction of the producer with this epoch.
    Open(u64),
    Aborted,
}

#[derive(Debug, Clone)]
pub(crate) struct Stored {
    pub(crate) id: Uuid,
    pub(crate) topic: String,
    pub(crate) key: Vec<u8>,
    pub(crate) visibility: Visibility,
}

#[derive(Debug)]
struct Pending {
    ticket: Ticket,
    id: Uuid,
    key: Vec<u8>,
    topic: String,
    too_large: bool,
    producer: u64,
    /// As sent, returned with a refusal as librdkafka returns it.
    record: Record,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    /// Everything stored, in the order the broker stored it.
    pub(crate) log: Vec<Stored>,
    pending: BTreeMap<u64, VecDeque<Pending>>,
    /// Each producer's report channel, by id.
    producers: BTreeMap<u64, mpsc::UnboundedSender<Delivery>>,
    next_producer: u64,
    /// Transactional: the current epoch and its producer, and every
    /// producer that ever started one.
    epoch: u64,
    epoch_producer: Option<u64>,
    transactional: HashSet<u64>,
    /// The last committed progress.
    pub(crate) progress: Option<Lsn>,
    /// Topics refused for the operator's reason (an ACL).
    pub(crate) denied: HashSet<String>,
    /// Partitions a producer may no longer write (a transient failure).
    broken: HashSet<(u64, u64)>,
    /// Idempotent producers stopped by a refusal for good: nothing more of
    /// theirs is stored.
    stopped: HashSet<u64>,
    answers: Option<Answers>,
    /// The next commit fails with this code.
    pub(crate) commit_fails: Option<Code>,
    /// Sends refused with a full queue, one each.
    pub(crate) queue_full: usize,
    /// How often each message was sent.
    pub(crate) sends: std::collections::HashMap<Uuid, usize>,
    /// Whether the relay's principal may describe topics.
    pub(crate) describe: Describe,
    /// How often a producer was asked to send at once.
    pub(crate) sent_now: usize,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Describe {
    #[default]
    Allowed,
    /// DESCRIBE_CONFIGS is not granted: limits are learned from refusals.
    Denied,
}

/// The producers' `batch.size`: what the relay sets under [`LIMIT`], so no
/// session restarts to batch under it, and a record the broker refuses is
/// one framed larger, a batch of its own.
pub(crate) const BATCH_SIZE: usize = 1024;

/// The test's handle on the broker.
#[derive(Clone, Default)]
pub(crate) struct Broker(Arc<Mutex<State>>);

impl Broker {
    pub(crate) fn new(answers: Answers) -> Broker {
        let b = Broker::default();
        b.state().answers = Some(answers);
        b
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new producer with `batch_size`: a session's sink.
    pub(crate) fn producer(&self, batch_size: usize) -> FakeSink {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut s = self.state();
        let id = s.next_producer;
        s.next_producer += 1;
        s.producers.insert(id, tx);
        FakeSink {
            broker: self.clone(),
            id,
            reports: rx,
            batch_size,
        }
    }

    /// Answers the oldest `n` records of `partition`: stored, or refused
    /// when too large or denied, or `fault` when given (which also fails
    /// every later record of that partition from the same producer).
    pub(crate) fn answer(&self, partition: u64, n: usize, fault: Option<Fault>) {
        let mut s = self.state();
        for _ in 0..n {
            let Some(p) = s.pending.get_mut(&partition).and_then(VecDeque::pop_front) else {
                return;
            };
            s.resolve(p, fault);
        }
    }

    /// Answers every held record, in order, without faults.
    pub(crate) fn answer_all(&self) {
        let partitions: Vec<u64> = self.state().pending.keys().copied().collect();
        for p in partitions {
            self.answer(p, usize::MAX, None);
        }
    }

    /// Records sent and not yet answered.
    pub(crate) fn held(&self) -> usize {
        self.state().pending.values().map(VecDeque::len).sum()
    }

    /// What a read_committed consumer sees, in the log's order.
    pub(crate) fn visible(&self) -> Vec<Stored> {
        self.state()
            .log
            .iter()
            .filter(|r| r.visibility == Visibility::Visible)
            .cloned()
            .collect()
    }

    /// A crash of the producer's process: what it held is never stored.
    pub(crate) fn crash(&self, producer: u64) {
        let mut s = self.state();
        for queue in s.pending.values_mut() {
            queue.retain(|p| p.producer != producer);
        }
        s.producers.remove(&producer);
    }

    /// Another producer with the relay's transactional id started.
    pub(crate) fn fence(&self) {
        self.state().new_epoch(None);
    }
}

impl State {
    fn resolve(&mut self, p: Pending, fault: Option<Fault>) {
        let broken = self.broken.contains(&(p.producer, partition_of(&p.key)));
        let fenced = self.transactional.contains(&p.producer) && self.fenced(p.producer).is_some();
        let outcome = if fenced {
            Outcome::Retry(Error::new(Code::KAFKA_PRODUCE_FAILED, "fenced"))
        } else if self.stopped.contains(&p.producer) {
            Outcome::Retry(Error::new(Code::KAFKA_PRODUCE_FAILED, "purged"))
        } else if p.too_large {
            Outcome::Rejected(Error::new(Code::MESSAGE_TOO_LARGE, "too large"))
        } else if fault == Some(Fault::BatchTooLarge) {
            self.broken.insert((p.producer, partition_of(&p.key)));
            Outcome::Rejected(Error::new(
                Code::MESSAGE_TOO_LARGE,
                "the batch is too large",
            ))
        } else if self.denied.contains(&p.topic) {
            // Nothing after it in the partition is appended: the broker
            // expects its sequence number first (an idempotent producer).
            self.broken.insert((p.producer, partition_of(&p.key)));
            Outcome::Rejected(Error::new(Code::TOPIC_AUTHORIZATION_FAILED, "denied"))
        } else if broken || fault == Some(Fault::Retry) {
            self.broken.insert((p.producer, partition_of(&p.key)));
            Outcome::Retry(Error::new(Code::KAFKA_PRODUCE_FAILED, "timed out"))
        } else if let Some(Fault::Ambiguous { stored }) = fault {
            self.broken.insert((p.producer, partition_of(&p.key)));
            if stored {
                self.store(&p);
            }
            Outcome::Ambiguous(Error::new(Code::KAFKA_DELIVERY_AMBIGUOUS, "maybe"))
        } else {
            self.store(&p);
            Outcome::Confirmed
        };
        let gap = matches!(&outcome, Outcome::Rejected(_));
        if gap && !self.transactional.contains(&p.producer) {
            self.stopped.insert(p.producer);
        }
        if let Some(reports) = self.producers.get(&p.producer) {
            let returned = gap.then(|| Box::new(p.record.clone()));
            let _ = reports.send(Delivery {
                ticket: p.ticket,
                returned,
                outcome,
                partition: partition_of(&p.key) as i32,
                // Offsets are the broker model's log position, not Kafka's.
                offset: -1,
            });
        }
    }

    fn store(&mut self, p: &Pending) {
        let visibility = match self.epoch_producer {
            Some(producer) if producer == p.producer => Visibility::Open(self.epoch),
            _ => Visibility::Visible,
        };
        self.log.push(Stored {
            id: p.id,
            topic: p.topic.clone(),
            key: p.key.clone(),
            visibility,
        });
    }

    /// A new epoch (for `producer`, or for a stranger): the open
    /// transaction of the one before is aborted, and it is fenced.
    fn new_epoch(&mut self, producer: Option<u64>) {
        let old = self.epoch;
        for r in &mut self.log {
            if r.visibility == Visibility::Open(old) {
                r.visibility = Visibility::Aborted;
            }
        }
        self.epoch += 1;
        self.epoch_producer = producer;
    }

    fn fenced(&self, producer: u64) -> Option<Error> {
        (self.epoch_producer != Some(producer)).then(|| {
            Error::new(
                Code::KAFKA_PRODUCER_FENCED,
                "another producer started with the same transactional.id",
            )
        })
    }

    fn end_transaction(&mut self, to: Visibility) {
        let epoch = self.epoch;
        for r in &mut self.log {
            if r.visibility == Visibility::Open(epoch) {
                r.visibility = to;
            }
        }
    }
}

/// Where a key goes.
pub(crate) fn partition_of(key: &[u8]) -> u64 {
    key.iter()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(*b)))
        % PARTITIONS
}

/// One producer on the in-memory broker.
pub(crate) struct FakeSink {
    broker: Broker,
    pub(crate) id: u64,
    reports: mpsc::UnboundedReceiver<Delivery>,
    batch_size: usize,
}

/// A producer dropped purges what it still holds, as rdkafka's does.
impl Drop for FakeSink {
    fn drop(&mut self) {
        self.purge();
    }
}

impl Sink for FakeSink {
    fn send(&self, record: &Record, ticket: Ticket) -> Result<(), SendError> {
        let mut s = self.broker.state();
        if s.queue_full > 0 {
            s.queue_full -= 1;
            return Err(SendError::QueueFull);
        }
        // librdkafka refuses every produce once the producer has a fatal
        // error, whether or not the refusal's report was taken.
        if s.stopped.contains(&self.id) {
            return Err(SendError::Failed(Error::new(
                Code::KAFKA_PRODUCE_FAILED,
                "Fatal",
            )));
        }
        *s.sends.entry(record.message_id).or_default() += 1;
        let pending = Pending {
            ticket,
            id: record.message_id,
            key: record.key.to_vec(),
            topic: record.topic.clone(),
            too_large: crate::kafka::limits::framed_size(record) > LIMIT,
            producer: self.id,
            record: record.clone(),
        };
        let partition = partition_of(&pending.key);
        if s.answers == Some(Answers::Immediate) {
            s.resolve(pending, None);
        } else {
            s.pending.entry(partition).or_default().push_back(pending);
        }
        Ok(())
    }

    async fn reports(&mut self, into: &mut Vec<Delivery>, max: usize) -> usize {
        self.reports.recv_many(into, max).await
    }

    async fn topic_ready(&self, _: &str) -> Result<(), Error> {
        Ok(())
    }

    async fn topic_limit(&self, topic: &str) -> Result<limits::Described, Error> {
        match self.broker.state().describe {
            Describe::Allowed => Ok(limits::Described {
                max_message_bytes: LIMIT,
                window: Default::default(),
            }),
            Describe::Denied => Err(Error::new(
                Code::TOPIC_LIMIT_UNKNOWN,
                format!("describing topic {topic}: denied"),
            )),
        }
    }

    fn batch_size(&self) -> usize {
        self.batch_size
    }

    fn send_now(&self) {
        self.broker.state().sent_now += 1;
    }

    fn purge(&self) {
        let mut s = self.broker.state();
        for queue in s.pending.values_mut() {
            queue.retain(|p| p.producer != self.id);
        }
    }

    async fn start_transactions(&self) -> Result<Option<Lsn>, Error> {
        let mut s = self.broker.state();
        s.transactional.insert(self.id);
        s.new_epoch(Some(self.id));
        Ok(s.progress)
    }

    fn begin_transaction(&self) -> Result<(), Error> {
        self.broker.state().fenced(self.id).map_or(Ok(()), Err)
    }

    async fn commit_transaction(&self, progress: Option<Lsn>) -> Result<(), Error> {
        let mut s = self.broker.state();
        if let Some(e) = s.fenced(self.id) {
            return Err(e);
        }
        if let Some(code) = s.commit_fails.take() {
            return Err(Error::new(code, "the commit failed"));
        }
        s.end_transaction(Visibility::Visible);
        if progress.is_some() {
            s.progress = progress;
        }
        Ok(())
    }

    async fn abort_transaction(&self) -> Result<(), Error> {
        let mut s = self.broker.state();
        if let Some(e) = s.fenced(self.id) {
            return Err(e);
        }
        s.end_transaction(Visibility::Aborted);
        Ok(())
    }

    fn fatal_error(&self) -> Option<Error> {
        let s = self.broker.state();
        if s.stopped.contains(&self.id) {
            return Some(Error::new(
                Code::KAFKA_PRODUCE_FAILED,
                "a refused batch stopped the producer (gapless guarantee)",
            ));
        }
        // Only a transactional producer can be fenced.
        s.fenced(self.id)
            .filter(|_| s.transactional.contains(&self.id))
    }
}
