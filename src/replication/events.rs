//! What the reader hands its consumer: committed transactions as events,
//! in batches over a bounded channel.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::lsn::Lsn;
use crate::router::Plan;
use crate::row::value::{Timestamp, Uuid};
use crate::row::OutboxRow;

/// What the reader delivers, in commit order. Every outbox transaction is
/// `Begin`, one or more `Rows` chunks, `Commit`; transactions without outbox
/// rows are not delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Begin {
        xid: u32,
        /// LSN of the commit record.
        final_lsn: Lsn,
        commit_time: Timestamp,
    },
    Rows(Vec<OutboxRow>),
    /// A routed outbox's changes (any contract but messaging), chunked as
    /// `Rows` are.
    Changes(Vec<Change>),
    Commit {
        xid: u32,
        commit_lsn: Lsn,
        /// Settling this LSN settles the transaction.
        end_lsn: Lsn,
        commit_time: Timestamp,
    },
    /// The walsender sent a keepalive after the transactions before this:
    /// it has no more WAL to decode, so nothing will follow soon and what
    /// the consumer holds should go out now rather than wait for a batch
    /// to fill. Between transactions only; a backlog's stream has none.
    CaughtUp,
}

/// A change of a routed outbox. DELETEs never come (the router drops them,
/// so the reader does); each change's `id` is its place in the slot
/// ([`Uuid::from_position`]).
#[derive(Debug, Clone)]
pub enum Change {
    /// An inserted row: its columns' text forms in the table's order.
    Insert {
        id: Uuid,
        plan: Arc<Plan>,
        values: Vec<Option<Bytes>>,
    },
    /// An UPDATE: what it gets is the contract's `table.op.invalid.behavior`.
    Update { id: Uuid, plan: Arc<Plan> },
}

impl PartialEq for Change {
    fn eq(&self, other: &Change) -> bool {
        match (self, other) {
            (
                Change::Insert {
                    id, plan, values, ..
                },
                Change::Insert {
                    id: i,
                    plan: p,
                    values: v,
                },
            ) => id == i && Arc::ptr_eq(plan, p) && values == v,
            (Change::Update { id, plan }, Change::Update { id: i, plan: p }) => {
                id == i && Arc::ptr_eq(plan, p)
            }
            _ => false,
        }
    }
}

impl Eq for Change {}

/// The consumer's end of the reader's channel. The reader sends the events
/// of everything it could read at once as one batch (at most `chunk_rows`
/// rows), so a stream of small transactions costs one channel hand-off, and
/// one wake-up of the consumer, per batch rather than three per transaction.
#[derive(Debug)]
pub struct Events {
    rx: mpsc::Receiver<Vec<Event>>,
    buffered: std::vec::IntoIter<Event>,
}

impl Events {
    pub(crate) fn new(rx: mpsc::Receiver<Vec<Event>>) -> Events {
        Events {
            rx,
            buffered: Vec::new().into_iter(),
        }
    }

    /// The next event, or `None` once the reader has ended and every event
    /// it sent was received. Cancel-safe: nothing is lost if the future is
    /// dropped, so it can sit in `select!`.
    pub async fn recv(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.buffered.next() {
                return Some(event);
            }
            self.buffered = self.rx.recv().await?.into_iter();
        }
    }

    /// The next event of the batch already received, without waiting or
    /// touching the channel: the consumer takes a batch in one step.
    pub fn next_received(&mut self) -> Option<Event> {
        self.buffered.next()
    }

    /// The next event if one is ready now.
    pub fn try_recv(&mut self) -> Result<Event, mpsc::error::TryRecvError> {
        loop {
            if let Some(event) = self.buffered.next() {
                return Ok(event);
            }
            self.buffered = self.rx.try_recv()?.into_iter();
        }
    }
}

/// Events read but not yet handed to the consumer, with their row count.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) events: Vec<Event>,
    pub(super) rows: usize,
    /// The bytes of the rows' values.
    pub(super) bytes: usize,
}

impl Batch {
    /// An event of rows whose values hold `bytes` bytes.
    pub(super) fn push_sized(&mut self, event: Event, bytes: usize) {
        self.bytes += bytes;
        self.push(event);
    }

    pub(super) fn push(&mut self, event: Event) {
        match &event {
            Event::Rows(rows) => self.rows += rows.len(),
            Event::Changes(changes) => self.rows += changes.len(),
            _ => {}
        }
        self.events.push(event);
    }

    /// No more reading until the consumer takes it: bounds the memory a
    /// batch holds like one chunk does, and a run of empty transactions.
    pub(super) fn full(&self, chunk_rows: usize, chunk_bytes: usize) -> bool {
        self.rows >= chunk_rows || self.bytes >= chunk_bytes || self.events.len() >= 3 * chunk_rows
    }

    pub(super) fn take(&mut self) -> Vec<Event> {
        self.rows = 0;
        self.bytes = 0;
        std::mem::take(&mut self.events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(n: u64) -> Event {
        Event::Commit {
            xid: n as u32,
            commit_lsn: Lsn(n),
            end_lsn: Lsn(n + 1),
            commit_time: Timestamp::from_pg_micros(0),
        }
    }

    #[test]
    fn a_batch_is_full_at_a_chunk_of_rows() {
        // (rows, bytes)
        let tuning = (2, 1 << 20);
        let mut batch = Batch::default();
        batch.push(commit(1));
        batch.push(Event::Rows(Vec::new()));
        assert!(!batch.full(tuning.0, tuning.1), "no rows yet, two events");
        for n in 2..6 {
            batch.push(commit(n));
        }
        assert!(
            batch.full(tuning.0, tuning.1),
            "six events: three per chunk row"
        );
        assert_eq!(batch.take().len(), 6);
        assert!(!batch.full(tuning.0, tuning.1));
        assert!(batch.events.is_empty());

        let row = || OutboxRow::from_text([]);
        batch.push(Event::Rows(vec![row()]));
        assert!(!batch.full(tuning.0, tuning.1), "one row of two");
        batch.push(Event::Rows(vec![row()]));
        assert!(
            batch.full(tuning.0, tuning.1),
            "two rows of two, in two events"
        );
        batch.take();

        // Large rows: the bytes bound comes first.
        let tuning = (100, 1000);
        batch.push_sized(Event::Rows(vec![row()]), 600);
        assert!(!batch.full(tuning.0, tuning.1), "600 bytes of 1000");
        batch.push_sized(Event::Rows(vec![row()]), 600);
        assert!(batch.full(tuning.0, tuning.1), "1200 bytes in two rows");
        batch.take();
        assert!(!batch.full(tuning.0, tuning.1), "taken: nothing counted");
    }

    #[tokio::test]
    async fn events_come_out_one_at_a_time_in_the_order_of_their_batches() {
        let (tx, rx) = mpsc::channel(4);
        let mut events = Events::new(rx);
        tx.send(vec![commit(1), commit(2)]).await.unwrap();
        tx.send(Vec::new()).await.unwrap();
        tx.send(vec![commit(3)]).await.unwrap();
        assert_eq!(events.try_recv(), Ok(commit(1)));
        assert_eq!(events.recv().await, Some(commit(2)));
        assert_eq!(events.recv().await, Some(commit(3)));
        assert_eq!(events.try_recv(), Err(mpsc::error::TryRecvError::Empty));
        drop(tx);
        assert_eq!(events.recv().await, None);
    }
}
