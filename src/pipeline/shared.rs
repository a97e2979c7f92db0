//! What every session of a relay shares, and what outlives them: the
//! options, the metrics, the settled position and the recorder that moves
//! it, and the rows an aborted Kafka transaction refused.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::recorder::{Recorder, Trouble};
use super::stats::RelayStats;
use crate::config::{Delivery, RelayConfig, TransactionalConfig};
use crate::contract::definition::Status;
use crate::lsn::Lsn;
use crate::metrics::Metrics;
use crate::replication::Feedback;
use crate::router::Plan;
use crate::row::value::Uuid;

/// What becomes of the ids Kafka confirmed: the job decides it
/// (`pipeline::jobs`), from the contract and `relay.mark_published`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marks {
    /// Journaled by the recorder, which confirms the slot after them.
    Journaled,
    /// Taken by the job after each chunk, which records them itself (a
    /// redrive's PUBLISHED marks, a dead letter's removal).
    Taken,
    /// Not recorded: the slot follows Kafka's confirmations alone.
    Off,
}

impl Marks {
    /// Whether the session keeps the confirmed ids for someone to record.
    pub(crate) fn on(self) -> bool {
        self != Marks::Off
    }
}

/// Transactional delivery's group commit: a Kafka transaction closes at
/// the first source transaction boundary past any of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bounds {
    pub(crate) records: usize,
    pub(crate) bytes: usize,
    pub(crate) age: Duration,
}

impl Bounds {
    pub(crate) fn of(t: &TransactionalConfig) -> Bounds {
        Bounds {
            records: t.max_records,
            bytes: t.max_bytes,
            age: Duration::from_millis(t.max_ms),
        }
    }
}

pub(crate) struct Shared {
    /// `[relay]`: a session reads its settings here, so a new one needs no
    /// plumbing between the section and the place that reads it.
    pub(crate) relay: RelayConfig,
    /// The messaging contract compiled against its definition: the
    /// platform's rows ([`crate::row::OutboxRow`]) become records through
    /// it. A routed outbox's rows bring the plan of their relation.
    pub(crate) plan: Arc<Plan>,
    /// Whether the outbox keeps status: FAILED marks, or the dead-letter
    /// table for a row that cannot be published.
    pub(crate) status: Status,
    /// What becomes of the confirmed ids.
    pub(crate) marks: Marks,
    /// Records the broker refuses for an operator's reason that one
    /// session takes before it ends (idempotent delivery).
    pub(crate) operator_refusals: usize,
    /// Destinations' limits learned so far: each session's producer
    /// batches under them.
    pub(crate) limits: crate::kafka::limits::Limits,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) stats: Arc<RelayStats>,
    /// The settled position, across sessions: a new session starts after it.
    pub(crate) feedback: Feedback,
    /// Records confirmed rows and then settles their position; `None` when
    /// rows are not marked (the position is settled at once).
    pub(crate) recorder: Option<Recorder>,
    /// The recorder cannot record: the session must end.
    pub(crate) trouble: Arc<Trouble>,
    /// Rows Kafka refused inside an aborted transaction, recorded FAILED:
    /// left out when their transaction is published again.
    pub(crate) poison: Mutex<HashSet<Uuid>>,
    /// A session of this process got past the window its replay is looked
    /// up in (`pipeline::recheck`): later sessions replay without it. One
    /// that ended inside it (Kafka still starting, a passing error) leaves
    /// the lookup to the next.
    pub(crate) rechecked: std::sync::atomic::AtomicBool,
    /// Spans for published records; `None` unless `[otel]` is configured.
    pub(crate) otel: Option<Arc<crate::otel::Tracing>>,
    /// librdkafka reports every record within this
    /// (`kafka::settings::delivery_deadline`): nothing acknowledged for
    /// longer means it lost track of them (`KAFKA_STALLED`).
    pub(crate) delivery_deadline: std::time::Duration,
}

impl Shared {
    pub(crate) fn marks(&self) -> Marks {
        self.marks
    }

    /// Transactional delivery's group commit (the defaults when idempotent:
    /// never read).
    pub(crate) fn bounds(&self) -> Bounds {
        match self.relay.delivery() {
            Delivery::Transactional(t) => Bounds::of(t),
            Delivery::Idempotent => Bounds::of(&TransactionalConfig::default()),
        }
    }

    /// How long a drain may take at shutdown.
    pub(crate) fn drain_timeout(&self) -> Duration {
        Duration::from_secs(self.relay.drain_timeout_secs)
    }

    /// Queues rows to be recorded and the position their transactions end
    /// at (waits only when the recorder is far behind); without marks the
    /// position is settled at once.
    pub(crate) async fn queue_marks(&self, ids: Vec<Uuid>, settles: Option<Lsn>) {
        match &self.recorder {
            Some(recorder) => recorder.queue(ids, settles).await,
            None => {
                if let Some(lsn) = settles {
                    self.feedback.settle(lsn);
                }
            }
        }
    }

    /// Waits (up to the drain timeout) until the recorder has recorded
    /// what is queued and settled its position.
    pub(crate) async fn flush_marks(&self) {
        if let Some(recorder) = &self.recorder {
            recorder.flush(self.drain_timeout()).await;
        }
    }

    /// The rows refused in aborted transactions so far.
    pub(crate) fn poison(&self) -> HashSet<Uuid> {
        self.poison
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn add_poison(&self, ids: impl IntoIterator<Item = Uuid>) {
        self.poison
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(ids);
    }
}
