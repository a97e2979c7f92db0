//! Counters of the pipeline, for logs and operators.

use std::sync::atomic::AtomicU64;

#[derive(Debug, Default)]
pub struct RelayStats {
    /// Messages Kafka confirmed.
    pub published: AtomicU64,
    /// Rows recorded as FAILED.
    pub failed: AtomicU64,
    /// Sessions restarted after a transient failure.
    pub restarts: AtomicU64,
    /// The last LSN settled (as a number).
    pub settled: AtomicU64,
    /// Rows recorded in the published journal.
    pub marks_written: AtomicU64,
    /// Rows the journal's fold marked PUBLISHED.
    pub marks_folded: AtomicU64,
    /// The current reader's last keepalive (microseconds since the epoch),
    /// the LSN it said was sent, and rows read: the journal is folded only
    /// while the relay keeps up.
    pub keepalive_at: AtomicU64,
    pub keepalive_sent: AtomicU64,
    pub rows_read: AtomicU64,
    /// Journal writes that failed (and were retried).
    pub mark_failures: AtomicU64,
    /// Transactional delivery: Kafka transactions committed and aborted.
    pub kafka_commits: AtomicU64,
    pub kafka_aborts: AtomicU64,
    /// Transactional delivery: source transactions found already in Kafka
    /// at a session's start (marked, not published again).
    pub already_published: AtomicU64,
    /// Idempotent delivery: replayed rows found published (journaled or
    /// PUBLISHED) after a restart, and not sent again.
    pub left_out_as_published: AtomicU64,
}
