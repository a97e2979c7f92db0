//! The Kafka side of a session, behind a trait: records out, delivery
//! reports in, and the transaction calls. Production wraps rdkafka
//! ([`KafkaSink`]); the unit tests use an in-memory broker that can refuse,
//! stall, fail ambiguously and fence (`testing::FakeSink`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::ClientConfig;
use tokio::sync::mpsc;

use super::watermark::TxSeq;
use crate::error::Error;
use crate::kafka::progress::Progress;
use crate::kafka::publisher::{Publisher, SendError};
use crate::kafka::topic_creation::{self, TopicCreation};
use crate::kafka::{held, limits};
use crate::lsn::Lsn;
use crate::router::Record;

pub(crate) type Delivery = crate::kafka::publisher::Delivery<TxSeq>;
pub(crate) type Ticket = crate::kafka::publisher::Ticket<TxSeq>;

/// How long a session's first record for a topic waits for the topic to be
/// served on every partition.
const TOPIC_READY_WAIT: Duration = Duration::from_secs(10);

/// What a session asks of Kafka. Nothing here awaits per message: `send`
/// enqueues, and reports come back in batches.
pub(crate) trait Sink: Send + Sync {
    /// Enqueues one record; its report arrives through [`Sink::reports`].
    fn send(&self, record: &Record, ticket: Ticket) -> Result<(), SendError>;

    /// Waits for reports and moves up to `max` of them into `into`; 0 once
    /// no report can come any more.
    fn reports(
        &mut self,
        into: &mut Vec<Delivery>,
        max: usize,
    ) -> impl Future<Output = usize> + Send;

    /// Before a session's first record for `topic`: waits until every
    /// partition is served by its leader. `Err` says why it is not (the
    /// session produces anyway and the report says what is wrong).
    fn topic_ready(&self, topic: &str) -> impl Future<Output = Result<(), Error>> + Send;

    /// `topic`'s effective `max.message.bytes` and time window;
    /// `TOPIC_LIMIT_UNKNOWN` when the principal may not describe it.
    fn topic_limit(
        &self,
        topic: &str,
    ) -> impl Future<Output = Result<limits::Described, Error>> + Send;

    /// The producer's `batch.size`: a record framed larger is always a
    /// batch of its own.
    fn batch_size(&self) -> usize;

    /// Drops whatever is queued or in flight (a session that did not stop
    /// cleanly: the next one publishes it again).
    fn purge(&self);

    /// Sends what is queued without waiting for a batch to fill: the relay
    /// has caught up with the slot. Never blocks.
    fn send_now(&self);

    /// Transactional delivery: fences any older producer with the id and
    /// resolves its open transaction, then reads the progress (the end LSN
    /// of the last source transaction in Kafka).
    fn start_transactions(&self) -> impl Future<Output = Result<Option<Lsn>, Error>> + Send;

    fn begin_transaction(&self) -> Result<(), Error>;

    /// Commits the open transaction with `progress` as the relay's position.
    fn commit_transaction(
        &self,
        progress: Option<Lsn>,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    fn abort_transaction(&self) -> impl Future<Output = Result<(), Error>> + Send;

    /// The producer's fatal error, if it has one (a fenced producer has).
    fn fatal_error(&self) -> Option<Error>;
}

/// The production sink: one rdkafka producer per session.
pub(crate) struct KafkaSink {
    publisher: Publisher<TxSeq>,
    reports: mpsc::UnboundedReceiver<Delivery>,
    /// Transactional delivery's progress; `None` when idempotent.
    progress: Option<Arc<Progress>>,
    /// Describes topics' limits; shared by the relay's sessions.
    admin: Arc<Admin>,
    batch_size: usize,
    creation: Option<Arc<TopicCreation>>,
}

pub(crate) type Admin = rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext>;

/// What a session's sink is made of, besides the producer's settings.
#[derive(Clone)]
pub(crate) struct SinkParts {
    pub(crate) progress: Option<Arc<Progress>>,
    pub(crate) admin: Arc<Admin>,
    /// The connector's `topic.creation.*`: a topic is created before its
    /// first record, as Kafka Connect creates it.
    pub(crate) creation: Option<Arc<TopicCreation>>,
    /// Where the partitions Kafka holds are reported (the metrics).
    pub(crate) held: Option<held::Report>,
}

impl KafkaSink {
    /// A producer from `producer` with `batch_size` as its `batch.size`.
    pub(crate) fn new(
        producer: &ClientConfig,
        batch_size: usize,
        parts: SinkParts,
    ) -> Result<KafkaSink, Error> {
        let mut producer = producer.clone();
        producer.set(limits::BATCH_SIZE, batch_size.to_string());
        let watcher = parts.held.map(|report| {
            if producer.get(held::STATISTICS_INTERVAL).is_none() {
                producer.set(
                    held::STATISTICS_INTERVAL,
                    held::DEFAULT_STATISTICS_INTERVAL_MS,
                );
            }
            held::Watcher::new(report)
        });
        let (publisher, reports) = Publisher::new(&producer, watcher)?;
        Ok(KafkaSink {
            publisher,
            reports,
            progress: parts.progress,
            admin: parts.admin,
            creation: parts.creation,
            batch_size,
        })
    }
}

impl Sink for KafkaSink {
    fn send(&self, record: &Record, ticket: Ticket) -> Result<(), SendError> {
        self.publisher.send(record, ticket)
    }

    async fn reports(&mut self, into: &mut Vec<Delivery>, max: usize) -> usize {
        self.reports.recv_many(into, max).await
    }

    async fn topic_ready(&self, topic: &str) -> Result<(), Error> {
        if let Some(rules) = &self.creation {
            topic_creation::create(&self.admin, topic, &rules.spec(topic)).await?;
        }
        self.publisher.topic_ready(topic, TOPIC_READY_WAIT).await
    }

    async fn topic_limit(&self, topic: &str) -> Result<limits::Described, Error> {
        limits::describe(&self.admin, topic).await
    }

    fn batch_size(&self) -> usize {
        self.batch_size
    }

    fn purge(&self) {
        self.publisher.purge();
    }

    fn send_now(&self) {
        self.publisher.send_now();
    }

    async fn start_transactions(&self) -> Result<Option<Lsn>, Error> {
        self.publisher.init_transactions().await?;
        match &self.progress {
            Some(progress) => progress.read().await,
            None => Ok(None),
        }
    }

    fn begin_transaction(&self) -> Result<(), Error> {
        self.publisher.begin_transaction()
    }

    async fn commit_transaction(&self, progress: Option<Lsn>) -> Result<(), Error> {
        let offsets = match (progress, &self.progress) {
            (Some(lsn), Some(p)) => Some(p.offsets(lsn)?),
            _ => None,
        };
        self.publisher.commit_transaction(offsets).await
    }

    async fn abort_transaction(&self) -> Result<(), Error> {
        self.publisher.abort_transaction().await
    }

    fn fatal_error(&self) -> Option<Error> {
        self.publisher.fatal_error()
    }
}
