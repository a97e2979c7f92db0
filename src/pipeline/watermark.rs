//! Which LSN may be confirmed: transactions settle in commit order, and a
//! transaction is settled when each of its messages is confirmed by Kafka or
//! durably recorded as FAILED.

use std::collections::VecDeque;

use crate::lsn::Lsn;

/// The relay's sequence number of a source transaction within a session:
/// what a delivery report names to settle its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct TxSeq(u64);

#[derive(Debug)]
struct Tx {
    seq: TxSeq,
    /// Known once the Commit arrived.
    end_lsn: Option<Lsn>,
    /// Messages not yet confirmed or recorded.
    outstanding: usize,
    /// Commit time, Unix µs (0 for a hand-over's pseudo-transaction).
    commit_micros: i64,
}

#[derive(Debug, Default)]
pub(super) struct Watermark {
    txs: VecDeque<Tx>,
    next_seq: u64,
}

impl Watermark {
    pub(super) fn new() -> Watermark {
        Watermark::default()
    }

    /// Opens a transaction without a source commit time; returns its
    /// sequence number.
    pub(super) fn begin(&mut self) -> TxSeq {
        self.begin_at(0)
    }

    /// Opens a source transaction committed at `commit_micros` (Unix µs).
    pub(super) fn begin_at(&mut self, commit_micros: i64) -> TxSeq {
        let seq = TxSeq(self.next_seq);
        self.next_seq += 1;
        self.txs.push_back(Tx {
            seq,
            end_lsn: None,
            outstanding: 0,
            commit_micros,
        });
        seq
    }

    /// The commit time of the oldest transaction not yet settled.
    pub(super) fn oldest_commit(&self) -> Option<i64> {
        self.txs.front().map(|t| t.commit_micros).filter(|m| *m > 0)
    }

    fn tx(&mut self, seq: TxSeq) -> Option<&mut Tx> {
        let front = self.txs.front()?.seq;
        let index = usize::try_from(seq.0.checked_sub(front.0)?).ok()?;
        self.txs.get_mut(index)
    }

    /// One more message to settle in `seq`.
    pub(super) fn add(&mut self, seq: TxSeq) {
        if let Some(tx) = self.tx(seq) {
            tx.outstanding += 1;
        }
    }

    /// One message of `seq` is settled (confirmed, or recorded as FAILED).
    pub(super) fn settle_one(&mut self, seq: TxSeq) {
        if let Some(tx) = self.tx(seq) {
            tx.outstanding = tx.outstanding.saturating_sub(1);
        }
    }

    pub(super) fn commit(&mut self, seq: TxSeq, end_lsn: Lsn) {
        if let Some(tx) = self.tx(seq) {
            tx.end_lsn = Some(end_lsn);
        }
    }

    /// Drops fully settled transactions from the front; returns the end LSN
    /// of the last one dropped.
    #[cfg(test)]
    pub(super) fn advance(&mut self) -> Option<Lsn> {
        self.advance_with(|_| {})
    }

    /// [`Watermark::advance`], telling `settled` each dropped source
    /// transaction's commit time.
    pub(super) fn advance_with(&mut self, mut settled_at: impl FnMut(i64)) -> Option<Lsn> {
        let mut settled = None;
        while let Some(front) = self.txs.front() {
            match front.end_lsn {
                Some(end) if front.outstanding == 0 => {
                    settled = Some(end);
                    if front.commit_micros > 0 {
                        settled_at(front.commit_micros);
                    }
                    self.txs.pop_front();
                }
                _ => break,
            }
        }
        settled
    }

    /// Transactions not yet settled.
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.txs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settles_in_commit_order_only() {
        let mut w = Watermark::new();
        let a = w.begin();
        w.add(a);
        w.add(a);
        w.commit(a, Lsn(100));
        let b = w.begin();
        w.add(b);
        w.commit(b, Lsn(200));
        // b is confirmed first: nothing settles while a is open.
        w.settle_one(b);
        assert_eq!(w.advance(), None);
        w.settle_one(a);
        assert_eq!(w.advance(), None);
        w.settle_one(a);
        assert_eq!(w.advance(), Some(Lsn(200)));
        assert_eq!(w.pending(), 0);
    }

    #[test]
    fn an_uncommitted_transaction_holds_the_watermark() {
        let mut w = Watermark::new();
        let a = w.begin();
        w.add(a);
        w.settle_one(a);
        assert_eq!(w.advance(), None, "no Commit yet");
        w.commit(a, Lsn(7));
        assert_eq!(w.advance(), Some(Lsn(7)));
        // Unknown sequence numbers are ignored.
        w.settle_one(TxSeq(99));
        w.add(TxSeq(99));
        assert_eq!(w.advance(), None);
    }
}
