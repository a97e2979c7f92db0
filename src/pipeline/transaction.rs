//! Transactional delivery's state within a session: the open Kafka
//! transaction (what it holds, when it is due) and the progress read from
//! Kafka at the session's start.
//!
//! A Kafka transaction holds whole source transactions: it is closed only
//! between them, at the first boundary past any bound (records, bytes, age).
//! Its records become visible to read_committed consumers together, with the
//! end LSN of its last source transaction as the progress; until then
//! nothing of it settles, so the slot never passes what Kafka has not
//! committed.

use std::time::Duration;

use tokio::time::Instant;

use crate::config::RelayConfig;
use crate::contract::value::Uuid;
use crate::error::Error;
use crate::kafka::progress::Progress;
use crate::pg::lsn::Lsn;

/// Group commit's bounds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    pub(super) records: usize,
    pub(super) bytes: usize,
    pub(super) age: Duration,
}

impl Bounds {
    pub(super) fn from_config(relay: &RelayConfig) -> Bounds {
        Bounds {
            records: relay.transaction_max_records,
            bytes: relay.transaction_max_bytes,
            age: Duration::from_millis(relay.transaction_max_ms),
        }
    }
}

/// The open Kafka transaction.
#[derive(Debug, Default)]
pub(super) struct KafkaTxn {
    /// When it began; `None` when no transaction is open.
    pub(super) began: Option<Instant>,
    pub(super) records: usize,
    pub(super) bytes: usize,
    /// The end of the last whole source transaction in it: the progress it
    /// commits.
    pub(super) last_end: Option<Lsn>,
    /// Rows Kafka confirmed: published once the transaction commits.
    pub(super) confirmed: Vec<Uuid>,
    /// Rows Kafka refused for the row's own reason: recorded FAILED once the
    /// transaction is aborted, and left out when it is published again.
    pub(super) poison: Vec<(Uuid, Error)>,
    /// Any other failed delivery (an operator's refusal, a timeout).
    pub(super) failed: Option<Error>,
    /// Confirmed records by the session's destination index: counted as
    /// published at the commit.
    pub(super) by_destination: Vec<u64>,
    /// Commit times (Unix µs) of its source transactions.
    pub(super) commits: Vec<i64>,
}

impl KafkaTxn {
    pub(super) fn is_open(&self) -> bool {
        self.began.is_some()
    }

    /// One delivery failed: the transaction can only abort.
    pub(super) fn doomed(&self) -> bool {
        self.failed.is_some() || !self.poison.is_empty()
    }

    /// At a source transaction boundary: whether to commit now.
    pub(super) fn full(&self, bounds: &Bounds, now: Instant) -> bool {
        self.records >= bounds.records
            || self.bytes >= bounds.bytes
            || self.began.is_some_and(|b| now >= b + bounds.age)
    }

    /// When an idle open transaction is due.
    pub(super) fn deadline(&self, bounds: &Bounds) -> Option<Instant> {
        self.began.map(|b| b + bounds.age)
    }
}

/// Transactional delivery's part of a session.
pub(super) struct Transactional {
    pub(super) progress: std::sync::Arc<Progress>,
    pub(super) bounds: Bounds,
    /// Source transactions whose commit record lies before this position
    /// are already in Kafka: their rows are marked, not published again.
    pub(super) published_before: Option<Lsn>,
    /// The current source transaction is one of those.
    pub(super) skipping: bool,
    pub(super) txn: KafkaTxn,
}

impl Transactional {
    /// Whether a source transaction whose commit record is at `final_lsn`
    /// is already in Kafka. The progress is the end of the last one
    /// published: every earlier commit record starts before it, every later
    /// one at or after it.
    pub(super) fn already_published(&self, final_lsn: Lsn) -> bool {
        before(self.published_before, final_lsn)
    }
}

fn before(progress: Option<Lsn>, final_lsn: Lsn) -> bool {
    progress.is_some_and(|p| final_lsn < p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds() -> Bounds {
        Bounds {
            records: 3,
            bytes: 100,
            age: Duration::from_millis(50),
        }
    }

    #[test]
    fn a_transaction_is_due_past_any_bound() {
        let now = Instant::now();
        let mut t = KafkaTxn {
            began: Some(now),
            ..KafkaTxn::default()
        };
        assert!(!t.full(&bounds(), now));
        t.records = 3;
        assert!(t.full(&bounds(), now));
        t.records = 1;
        t.bytes = 100;
        assert!(t.full(&bounds(), now));
        t.bytes = 10;
        assert!(t.full(&bounds(), now + Duration::from_millis(50)));
        assert_eq!(t.deadline(&bounds()), Some(now + Duration::from_millis(50)));
        assert_eq!(KafkaTxn::default().deadline(&bounds()), None);
    }

    #[test]
    fn only_commits_before_the_progress_are_skipped() {
        let mut t = KafkaTxn::default();
        assert!(!t.doomed());
        t.poison.push((
            Uuid([1; 16]),
            Error::new(crate::error::Code::MESSAGE_TOO_LARGE, "big"),
        ));
        assert!(t.doomed());
        // The last published transaction: commit record at 0x100, ends 0x130.
        assert!(before(Some(Lsn(0x130)), Lsn(0x100)));
        // The next one's commit record starts at or after 0x130.
        assert!(!before(Some(Lsn(0x130)), Lsn(0x130)));
        assert!(!before(None, Lsn(0x10)));
    }
}
