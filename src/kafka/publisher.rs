//! Kafka publishing on rdkafka: an idempotent producer with `acks=all` and
//! Java-compatible key placement, a delivery context that classifies every
//! report into one of four outcomes, and no await per message.
//!
//! How a report is classified (the evidence is librdkafka's per-message
//! persistence status, not the error code alone):
//! - persisted: `Confirmed`;
//! - not persisted and refused for good: `Rejected`, with a code whose class
//!   says whose fault it is: a row's (too large, an invalid record or topic
//!   name: the settlement records the row FAILED) or an operator's (not
//!   authorised, a missing topic, a policy: nothing is recorded, the slot
//!   holds before it and the relay awaits the operator);
//! - not persisted for a reason that may pass (timeout in queue, broker
//!   down): `Retry` (`KAFKA_PRODUCE_FAILED`);
//! - possibly persisted: `Ambiguous` (`KAFKA_DELIVERY_AMBIGUOUS`).
//!
//! `Retry` and `Ambiguous` both end the session, which rebuilds the producer
//! and replays from the last settled LSN under the same ids.

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;
use tokio::sync::mpsc;

use super::enqueue::{Enqueuer, Outgoing};
use super::held::Watcher;
use super::send_now::{self, SendNow};
use crate::error::{Cause, Code, Error};
use crate::router::Record;

/// What the relay learns about one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    Confirmed,
    /// Definitely not stored: the row is recorded as FAILED with the code.
    Rejected(Error),
    /// Not stored, for a reason that may pass.
    Retry(Error),
    /// Possibly stored.
    Ambiguous(Error),
}

/// Which message a delivery report is about. `T` is the caller's tag (the
/// relay's transaction sequence number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket<T> {
    pub(crate) tag: T,
    pub(crate) message_id: crate::row::value::Uuid,
    pub(crate) bytes: usize,
    /// The caller's index of the record's topic (for per-destination counts).
    pub(crate) destination: u32,
    /// The record's timestamp as sent: a refused record's report has none.
    pub(crate) timestamp_ms: Option<i64>,
    /// The record's span, when it is traced.
    pub(crate) trace: Option<crate::otel::Seed>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Delivery<T> {
    pub(crate) ticket: Ticket<T>,
    pub(crate) outcome: Outcome,
    pub(crate) partition: i32,
    /// Where Kafka stored it; negative when it did not.
    pub(crate) offset: i64,
    /// A rejected record as it was sent, for a dead-letter table (rare:
    /// copied only when Kafka refused it for good).
    pub(crate) returned: Option<Box<Record>>,
}

/// Why a record was not enqueued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SendError {
    /// librdkafka's local queue is full: try again after reports drain.
    QueueFull,
    /// Refused for good before leaving the process (a row's fault).
    Rejected(Error),
    /// Refused for a reason that may pass.
    Failed(Error),
}

/// Codes for failures that no retry can fix, when nothing was stored.
fn permanent(code: RDKafkaErrorCode) -> Option<Code> {
    use RDKafkaErrorCode::*;
    Some(match code {
        MessageSizeTooLarge | MessageBatchTooLarge | InvalidMessageSize => Code::MESSAGE_TOO_LARGE,
        TopicAuthorizationFailed => Code::TOPIC_AUTHORIZATION_FAILED,
        InvalidTopic => Code::INVALID_TOPIC,
        UnknownTopicOrPartition | UnknownTopic | UnknownPartition => Code::TOPIC_UNKNOWN,
        InvalidRecord | InvalidMessage => Code::INVALID_RECORD,
        // The record's time is outside the topic's
        // `message.timestamp.before.max.ms` / `after.max.ms`.
        InvalidTimestamp => Code::INVALID_TIMESTAMP,
        PolicyViolation => Code::POLICY_VIOLATION,
        _ => return None,
    })
}

fn permanent_code(cause: &Cause) -> Option<Code> {
    match cause {
        Cause::Kafka(code) => permanent(*code),
        _ => None,
    }
}

/// librdkafka's per-message persistence status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PersistStatus {
    NotPersisted,
    PossiblyPersisted,
    Persisted,
}

/// The three-outcome classification of one report about a record for
/// `topic` (named in the error, since the broker's message does not).
/// `topic` is read only for an error's text: librdkafka gives it as a C
/// string, measured and checked as UTF-8 at each call.
pub(crate) fn classify<'t>(
    error: Option<&KafkaError>,
    status: PersistStatus,
    topic: impl Fn() -> &'t str,
    offset: i64,
) -> Outcome {
    let Some(error) = error else {
        // With acks=all every stored record has an offset. A success without
        // one is librdkafka voiding a refused sequence it takes for one the
        // broker holds, as the broker acknowledged later ones. A broker with
        // no state for a producer accepts any sequence, so when it refused
        // the first batch and appended the next (a partition not yet served,
        // `readiness`), that "duplicate" is a record the broker dropped.
        // Republishing costs at most a duplicate; trusting it can lose it.
        if offset < 0 {
            return Outcome::Ambiguous(Error::new(
                Code::KAFKA_DELIVERY_AMBIGUOUS,
                format!(
                    "topic {}: delivered without an offset (the broker reported a duplicate sequence); \
                     publishing it again rather than trusting it",
                    topic()
                ),
            ));
        }
        return Outcome::Confirmed;
    };
    let detail = format!("topic {}: {}", topic(), crate::error::chain(error));
    let cause = error
        .rdkafka_error_code()
        .map(Cause::Kafka)
        .unwrap_or(Cause::Kafka(RDKafkaErrorCode::Unknown));
    let error = |code: Code| Error::new(code, detail.clone()).caused_by(cause.clone());
    match status {
        // librdkafka says the broker stored it despite the error (e.g. a
        // duplicate sequence): kept as confirmed, but said, so a record
        // counted as published yet missing from the log can be traced.
        PersistStatus::Persisted => {
            tracing::warn!(%detail, "a delivery report carried an error with the status persisted; counted as confirmed");
            Outcome::Confirmed
        }
        PersistStatus::PossiblyPersisted => {
            Outcome::Ambiguous(error(Code::KAFKA_DELIVERY_AMBIGUOUS))
        }
        PersistStatus::NotPersisted => match permanent_code(&cause) {
            Some(code) => Outcome::Rejected(error(code)),
            None => Outcome::Retry(error(Code::KAFKA_PRODUCE_FAILED)),
        },
    }
}

fn persist_status(result: &DeliveryResult<'_>) -> PersistStatus {
    let message = match result {
        Ok(m) => m,
        Err((_, m)) => m,
    };
    // SAFETY: the pointer is the live message of this delivery report; the
    // call only reads its status field.
    let status = unsafe { rdkafka::bindings::rd_kafka_message_status(message.ptr()) };
    match status {
        rdkafka::bindings::rd_kafka_msg_status_t::RD_KAFKA_MSG_STATUS_PERSISTED => {
            PersistStatus::Persisted
        }
        rdkafka::bindings::rd_kafka_msg_status_t::RD_KAFKA_MSG_STATUS_POSSIBLY_PERSISTED => {
            PersistStatus::PossiblyPersisted
        }
        rdkafka::bindings::rd_kafka_msg_status_t::RD_KAFKA_MSG_STATUS_NOT_PERSISTED => {
            PersistStatus::NotPersisted
        }
    }
}

/// Delivery reports go to the relay through an unbounded channel; the relay
/// bounds what is in flight, so the channel cannot grow past that.
pub(crate) struct DeliveryContext<T> {
    reports: mpsc::UnboundedSender<Delivery<T>>,
    /// Reads librdkafka's statistics for the held partitions, when asked.
    held: Option<Watcher>,
}

impl<T: Send + Sync + 'static> ClientContext for DeliveryContext<T> {
    /// Read for the held partitions only; never logged.
    fn stats_raw(&self, statistics: &[u8]) {
        if let Some(w) = &self.held {
            w.statistics(statistics);
        }
    }
}

impl<T: Copy + Send + Sync + 'static> ProducerContext for DeliveryContext<T> {
    type DeliveryOpaque = Box<Ticket<T>>;

    fn delivery(&self, result: &DeliveryResult<'_>, ticket: Box<Ticket<T>>) {
        use rdkafka::Message;
        let status = persist_status(result);
        let (outcome, partition, offset) = match result {
            Ok(m) => (
                classify(None, status, || m.topic(), m.offset()),
                m.partition(),
                m.offset(),
            ),
            Err((e, m)) => (
                classify(Some(e), status, || m.topic(), m.offset()),
                m.partition(),
                m.offset(),
            ),
        };
        let returned = match (&outcome, result) {
            (Outcome::Rejected(_), Err((_, m))) => Some(Box::new(returned(m, ticket.message_id))),
            _ => None,
        };
        let _ = self.reports.send(Delivery {
            ticket: *ticket,
            outcome,
            partition,
            offset,
            returned,
        });
    }
}

/// A copy of a message Kafka refused, as a record.
fn returned(m: &rdkafka::message::BorrowedMessage<'_>, id: crate::row::value::Uuid) -> Record {
    use rdkafka::message::Headers as _;
    use rdkafka::Message;
    let headers: Vec<(std::sync::Arc<str>, Option<Vec<u8>>)> = m
        .headers()
        .map(|hs| {
            hs.iter()
                .map(|h| (std::sync::Arc::from(h.key), h.value.map(<[u8]>::to_vec)))
                .collect()
        })
        .unwrap_or_default();
    Record::new(crate::router::Parts {
        message_id: id,
        topic: m.topic().to_string(),
        key: m.key().map(bytes::Bytes::copy_from_slice),
        value: m.payload().map(bytes::Bytes::copy_from_slice),
        partition: (m.partition() >= 0).then_some(m.partition()),
        headers: crate::router::Headers::from_pairs(&headers),
        timestamp_ms: m.timestamp().to_millis(),
    })
}

/// One producer and the receiver of its delivery reports.
pub(crate) struct Publisher<T: Copy + Send + Sync + 'static> {
    /// `None` when the producer lingers not at all. Dropped first: its
    /// thread holds the producer and ends before the producer is dropped.
    send_now: Option<SendNow>,
    /// The producer, with a topic handle per destination.
    out: Enqueuer<DeliveryContext<T>>,
}

/// How long a transaction call (init, commit, abort) may block.
const TRANSACTION_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// Adding the progress takes milliseconds; it is the call librdkafka can
/// hang in (see [`Publisher::blocking`]), at every rolling restart that
/// moves the group's coordinator, so it gets a shorter budget. A slow one
/// given up costs a replay, never a duplicate.
const PROGRESS_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// How long after its own timeout a transaction call is given up.
const CALL_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// What librdkafka's flags say of a failed transaction call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Severity {
    /// The producer is unusable (`is_fatal`).
    Fatal,
    /// The transaction must be aborted (`txn_requires_abort`).
    Abortable,
    /// Neither: the call may be made again.
    Retriable,
}

impl Severity {
    fn of(e: &rdkafka::error::RDKafkaError) -> Severity {
        if e.is_fatal() {
            Severity::Fatal
        } else if e.txn_requires_abort() {
            Severity::Abortable
        } else {
            Severity::Retriable
        }
    }
}

/// What a failed transaction call means for the relay, from librdkafka's
/// typed flags and codes, never its text.
pub(crate) fn transaction_code(code: RDKafkaErrorCode, severity: Severity) -> Code {
    use RDKafkaErrorCode::*;
    match (code, severity) {
        (ProducerFenced | Fenced, _) => Code::KAFKA_PRODUCER_FENCED,
        (InvalidProducerEpoch, Severity::Fatal) => Code::KAFKA_PRODUCER_FENCED,
        (TopicAuthorizationFailed, _) => Code::TOPIC_AUTHORIZATION_FAILED,
        (
            TransactionalIdAuthorizationFailed
            | GroupAuthorizationFailed
            | ClusterAuthorizationFailed,
            _,
        ) => Code::KAFKA_NOT_AUTHORIZED,
        (_, Severity::Fatal) => Code::KAFKA_PRODUCE_FAILED,
        (_, Severity::Abortable) => Code::KAFKA_TRANSACTION_ABORTED,
        (_, Severity::Retriable) => Code::KAFKA_TRANSACTION_OUTCOME_UNKNOWN,
    }
}

fn transaction_error(e: &KafkaError, during: &str) -> Error {
    let (code, severity) = match e {
        KafkaError::Transaction(t) => (t.code(), Severity::of(t)),
        other => (
            other
                .rdkafka_error_code()
                .unwrap_or(RDKafkaErrorCode::Unknown),
            Severity::Retriable,
        ),
    };
    fenced_or(
        transaction_code(code, severity),
        during,
        &crate::error::chain(e),
    )
    .caused_by(Cause::Kafka(code))
}

fn fenced_or(code: Code, during: &str, cause: &str) -> Error {
    let detail = if code == Code::KAFKA_PRODUCER_FENCED {
        format!("{during}: {cause}; another producer started with the same transactional.id, so this relay stops and never publishes again")
    } else {
        format!("{during}: {cause}")
    };
    Error::new(code, detail)
}

impl<T: Copy + Send + Sync + 'static> Publisher<T> {
    /// A producer from `cc`; with `held`, its statistics go there (`cc`
    /// sets their interval).
    pub(crate) fn new(
        cc: &ClientConfig,
        held: Option<Watcher>,
    ) -> Result<(Self, mpsc::UnboundedReceiver<Delivery<T>>), Error> {
        let (tx, rx) = mpsc::unbounded_channel();
        let producer: ThreadedProducer<DeliveryContext<T>> = cc
            .create_with_context(DeliveryContext { reports: tx, held })
            .map_err(|e| Error::new(Code::KAFKA_CONFIG_INVALID, crate::error::chain(&e)))?;
        let producer = std::sync::Arc::new(producer);
        let window = send_now::linger(cc);
        let send_now = match window.is_zero() {
            true => None,
            false => {
                let theirs = std::sync::Arc::clone(&producer);
                let flush = move |window: std::time::Duration| {
                    let ms = i32::try_from(window.as_millis()).unwrap_or(i32::MAX).max(1);
                    // SAFETY: the closure owns a reference to the producer,
                    // so its handle outlives the call; rd_kafka_flush may be
                    // called from any thread, and with event-based delivery
                    // reports (rust-rdkafka's) it only waits.
                    unsafe {
                        rdkafka::bindings::rd_kafka_flush(theirs.client().native_ptr(), ms);
                    }
                };
                Some(SendNow::start(window, flush).map_err(|e| {
                    Error::new(Code::INTERNAL, format!("starting the send-now thread: {e}"))
                })?)
            }
        };
        Ok((
            Publisher {
                send_now,
                out: Enqueuer::new(producer),
            },
            rx,
        ))
    }

    /// What librdkafka holds is sent without waiting out `linger.ms`: the
    /// relay has caught up with the slot ([`SendNow`]).
    pub(crate) fn send_now(&self) {
        if let Some(s) = &self.send_now {
            s.ring();
        }
    }

    /// Runs a blocking librdkafka transaction call off the runtime's threads,
    /// and gives it up `CALL_GRACE` after its own timeout: librdkafka does
    /// not always honour it (a group coordinator lost during
    /// `send_offsets_to_transaction` blocks that call for good,
    /// librdkafka#5456 and #5511; seen when two of three brokers died). A
    /// call given up keeps its thread and its producer until it returns;
    /// the next session's producer fences it.
    async fn blocking<R: Send + 'static>(
        &self,
        during: &'static str,
        within: std::time::Duration,
        call: impl FnOnce(
                &ThreadedProducer<DeliveryContext<T>>,
                std::time::Duration,
            ) -> Result<R, KafkaError>
            + Send
            + 'static,
    ) -> Result<R, Error> {
        let producer = self.out.producer().clone();
        let running = tokio::task::spawn_blocking(move || call(&producer, within));
        match tokio::time::timeout(within + CALL_GRACE, running).await {
            Ok(Ok(result)) => result.map_err(|e| transaction_error(&e, during)),
            Ok(Err(e)) => Err(Error::new(Code::INTERNAL, format!("{during}: {e}"))),
            Err(_) => Err(Error::new(
                Code::KAFKA_TRANSACTION_OUTCOME_UNKNOWN,
                format!(
                    "{during}: librdkafka did not return within {} s, past its own timeout; the producer is given up",
                    (within + CALL_GRACE).as_secs()
                ),
            )),
        }
    }

    /// Waits, up to `within`, until every partition of `topic` is served by
    /// its leader (see [`readiness`](super::readiness)).
    pub(crate) async fn topic_ready(
        &self,
        topic: &str,
        within: std::time::Duration,
    ) -> Result<(), Error> {
        let producer = self.out.producer().clone();
        let name = topic.to_string();
        tokio::task::spawn_blocking(move || {
            super::readiness::wait_until_served(producer.client(), &name, within)
        })
        .await
        .unwrap_or_else(|e| {
            Err(Error::new(
                Code::INTERNAL,
                format!("waiting until topic {topic} is served: the task failed: {e}"),
            ))
        })
    }

    /// Registers the transactional id with its coordinator: any older
    /// producer with the same id is fenced and its open transaction aborted.
    pub(crate) async fn init_transactions(&self) -> Result<(), Error> {
        self.blocking(
            "starting the transactional producer",
            TRANSACTION_CALL_TIMEOUT,
            |p, within| p.init_transactions(within),
        )
        .await
        .map_err(|e| match e.code() {
            // No transaction of ours is open yet: nothing is unknown, the
            // coordinator was not reached.
            Code::KAFKA_TRANSACTION_OUTCOME_UNKNOWN | Code::KAFKA_TRANSACTION_ABORTED => {
                e.recoded(Code::KAFKA_UNREACHABLE)
            }
            _ => e,
        })
    }

    pub(crate) fn begin_transaction(&self) -> Result<(), Error> {
        self.out
            .producer()
            .begin_transaction()
            .map_err(|e| transaction_error(&e, "beginning a Kafka transaction"))
    }

    /// Adds `offsets` (the progress) to the open transaction and commits it.
    pub(crate) async fn commit_transaction(
        &self,
        offsets: Option<(
            rdkafka::TopicPartitionList,
            rdkafka::consumer::ConsumerGroupMetadata,
        )>,
    ) -> Result<(), Error> {
        if let Some((offsets, group)) = offsets {
            self.blocking(
                "adding the progress to a Kafka transaction",
                PROGRESS_CALL_TIMEOUT,
                move |p, within| p.send_offsets_to_transaction(&offsets, &group, within),
            )
            .await?;
        }
        self.blocking(
            "committing a Kafka transaction",
            TRANSACTION_CALL_TIMEOUT,
            |p, within| p.commit_transaction(within),
        )
        .await
    }

    pub(crate) async fn abort_transaction(&self) -> Result<(), Error> {
        self.blocking(
            "aborting a Kafka transaction",
            TRANSACTION_CALL_TIMEOUT,
            |p, within| p.abort_transaction(within),
        )
        .await
    }

    /// The producer's fatal error, if it has one (a fenced producer has).
    pub(crate) fn fatal_error(&self) -> Option<Error> {
        let (code, reason) = self.out.producer().client().fatal_error()?;
        Some(fenced_or(
            transaction_code(code, Severity::Fatal),
            "the producer failed for good",
            &format!("{reason} ({code:?})"),
        ))
    }

    /// Enqueues a record; its report arrives on the receiver.
    pub(crate) fn send(&self, record: &Record, ticket: Ticket<T>) -> Result<(), SendError> {
        match self.out.enqueue(Outgoing::of(record), Box::new(ticket)) {
            Ok(()) => Ok(()),
            Err(RDKafkaErrorCode::QueueFull) => Err(SendError::QueueFull),
            Err(code) => {
                let e = KafkaError::MessageProduction(code);
                let detail = format!("topic {}: {}", record.topic, crate::error::chain(&e));
                let cause = Cause::Kafka(code);
                Err(match permanent(code) {
                    Some(code) => SendError::Rejected(Error::new(code, detail).caused_by(cause)),
                    None => SendError::Failed(
                        Error::new(Code::KAFKA_PRODUCE_FAILED, detail).caused_by(cause),
                    ),
                })
            }
        }
    }

    /// Drops whatever is queued or in flight (before a rebuild). Their
    /// reports arrive as failures and are ignored by the caller.
    pub(crate) fn purge(&self) {
        self.out
            .producer()
            .purge(rdkafka::producer::PurgeConfig::default().queue().inflight());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(outcome: &Outcome) -> Option<Code> {
        match outcome {
            Outcome::Confirmed => None,
            Outcome::Rejected(e) | Outcome::Retry(e) | Outcome::Ambiguous(e) => Some(e.code()),
        }
    }

    #[test]
    fn a_success_with_an_offset_is_confirmed() {
        assert!(matches!(
            classify(None, PersistStatus::Persisted, || "t", 0),
            Outcome::Confirmed
        ));
        assert!(matches!(
            classify(None, PersistStatus::Persisted, || "t", 41),
            Outcome::Confirmed
        ));
    }

    #[test]
    fn a_success_without_an_offset_is_published_again() {
        for offset in [-1, -1001] {
            let outcome = classify(None, PersistStatus::Persisted, || "orders", offset);
            assert!(matches!(outcome, Outcome::Ambiguous(_)), "{offset}");
            assert_eq!(code(&outcome), Some(Code::KAFKA_DELIVERY_AMBIGUOUS));
        }
    }

    #[test]
    fn transaction_failures_are_classified_by_code_and_flags() {
        use RDKafkaErrorCode::*;
        assert_eq!(
            transaction_code(ProducerFenced, Severity::Fatal),
            Code::KAFKA_PRODUCER_FENCED
        );
        assert_eq!(
            transaction_code(Fenced, Severity::Fatal),
            Code::KAFKA_PRODUCER_FENCED
        );
        assert_eq!(
            transaction_code(InvalidProducerEpoch, Severity::Fatal),
            Code::KAFKA_PRODUCER_FENCED
        );
        assert_eq!(
            transaction_code(InvalidProducerEpoch, Severity::Abortable),
            Code::KAFKA_TRANSACTION_ABORTED
        );
        assert_eq!(
            transaction_code(TransactionalIdAuthorizationFailed, Severity::Fatal),
            Code::KAFKA_NOT_AUTHORIZED
        );
        // One authorization failure, one code, wherever it surfaces: a
        // commit refused for a topic's ACL is what a delivery report says.
        assert_eq!(
            transaction_code(TopicAuthorizationFailed, Severity::Abortable),
            Code::TOPIC_AUTHORIZATION_FAILED
        );
        assert_eq!(
            classify(
                Some(&KafkaError::MessageProduction(TopicAuthorizationFailed)),
                PersistStatus::NotPersisted,
                || "t",
                -1
            ),
            Outcome::Rejected(
                Error::new(
                    Code::TOPIC_AUTHORIZATION_FAILED,
                    "topic t: Message production error: TopicAuthorizationFailed (Broker: Topic authorization failed)"
                )
                .caused_by(Cause::Kafka(TopicAuthorizationFailed))
            )
        );
        assert_eq!(
            transaction_code(MessageTimedOut, Severity::Abortable),
            Code::KAFKA_TRANSACTION_ABORTED
        );
        assert_eq!(
            transaction_code(OperationTimedOut, Severity::Retriable),
            Code::KAFKA_TRANSACTION_OUTCOME_UNKNOWN
        );
        assert_eq!(
            transaction_code(OutOfOrderSequenceNumber, Severity::Fatal),
            Code::KAFKA_PRODUCE_FAILED
        );
    }

    #[test]
    fn failures_follow_the_persistence_status() {
        let timeout = KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut);
        assert!(matches!(
            classify(Some(&timeout), PersistStatus::PossiblyPersisted, || "t", -1),
            Outcome::Ambiguous(_)
        ));
        assert!(matches!(
            classify(Some(&timeout), PersistStatus::NotPersisted, || "t", -1),
            Outcome::Retry(_)
        ));
        let too_large = KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge);
        assert_eq!(
            code(&classify(
                Some(&too_large),
                PersistStatus::NotPersisted,
                || "t",
                -1
            )),
            Some(Code::MESSAGE_TOO_LARGE)
        );
    }
}
