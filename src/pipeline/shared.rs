//! What every session of a relay shares, and what outlives them: the
//! options, the metrics, the settled position and the recorder that moves
//! it, and the rows an aborted Kafka transaction refused.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::recorder::{Recorder, Trouble};
use super::stats::RelayStats;
use crate::contract::value::Uuid;
use crate::lsn::Lsn;
use crate::metrics::Metrics;
use crate::replication::Feedback;

/// Whether confirmed rows are recorded (and so marked PUBLISHED).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Marks {
    /// Journaled by the recorder, which confirms the slot after them.
    Journaled,
    /// Not recorded: the slot follows Kafka's confirmations alone.
    Off,
}

impl Marks {
    pub(crate) fn on(self) -> bool {
        self == Marks::Journaled
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
    pub(crate) fn of(t: &crate::config::TransactionalConfig) -> Bounds {
        Bounds {
            records: t.max_records,
            bytes: t.max_bytes,
            age: Duration::from_millis(t.max_ms),
        }
    }
}

/// The session's settings, from `[outbox]` and `[relay]`.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) topic_prefix: String,
    pub(crate) marks: Marks,
    /// Records the broker refuses for an operator's reason in one session
    /// before it ends (idempotent delivery).
    pub(crate) operator_error_threshold: usize,
    /// How long a drain may take at shutdown.
    pub(crate) drain_timeout: Duration,
    pub(crate) max_in_flight_messages: usize,
    pub(crate) max_in_flight_bytes: usize,
    /// Transactional delivery's group commit.
    pub(crate) bounds: Bounds,
}

pub(crate) struct Shared {
    pub(crate) options: Options,
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
    /// Spans for published records; `None` unless `[otel]` is configured.
    pub(crate) otel: Option<Arc<crate::otel::Tracing>>,
}

impl Shared {
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
            recorder.flush(self.options.drain_timeout).await;
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
