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
    /// Rows marked PUBLISHED.
    pub marks_written: AtomicU64,
    /// PUBLISHED-mark UPDATEs that failed (and were retried).
    pub mark_failures: AtomicU64,
    /// Transactional delivery: Kafka transactions committed and aborted.
    pub kafka_commits: AtomicU64,
    pub kafka_aborts: AtomicU64,
    /// Transactional delivery: source transactions found already in Kafka
    /// at a session's start (marked, not published again).
    pub already_published: AtomicU64,
}
