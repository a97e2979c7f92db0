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
}
