//! An in-memory outbox table and published journal behind the [`Ledger`]
//! and [`Journal`] seams. Writes can fail (as a lost connection does) or
//! stall until the test lets them go.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::error::{Code, Error};
use crate::lsn::Lsn;
use crate::pg::dead_letter::Letter;
use crate::pg::row_status::Guard;
use crate::pipeline::ledger::{Journal, Ledger};
use crate::row::value::Uuid;

/// A row's status, as the relay leaves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Pending,
    Published,
    Failed(Code),
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) rows: HashMap<Uuid, Status>,
    /// Journal entries not yet folded.
    pub(crate) journal: Vec<Vec<Uuid>>,
    /// Every id ever journaled (folded or not).
    pub(crate) journaled: Vec<Uuid>,
    /// The next this many journal writes fail (a lost connection).
    pub(crate) journal_failures: usize,
    /// The next this many journal writes are refused by the server (a
    /// trigger, a revoked privilege): not worth trying again.
    pub(crate) journal_refusals: usize,
    /// The next this many FAILED marks fail.
    pub(crate) mark_failures: usize,
    /// Journal writes wait until this is false.
    pub(crate) journal_stalled: bool,
    /// An outbox that keeps no status: its dead-letter table.
    pub(crate) letters: Vec<Letter>,
}

/// The test's handle on the table.
#[derive(Clone, Default)]
pub(crate) struct Table {
    state: Arc<Mutex<State>>,
    unstalled: Arc<Notify>,
}

fn lost() -> Error {
    Error::new(Code::PG_CONNECTION_LOST, "the connection broke")
}

impl Table {
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An application committed this row.
    pub(crate) fn insert(&self, id: Uuid) {
        self.state().rows.insert(id, Status::Pending);
    }

    pub(crate) fn status(&self, id: &Uuid) -> Option<Status> {
        self.state().rows.get(id).copied()
    }

    /// Whether the row is published as far as the table can tell: marked,
    /// or in the journal.
    pub(crate) fn recorded(&self, id: &Uuid) -> bool {
        let s = self.state();
        s.rows.get(id) == Some(&Status::Published) || s.journaled.contains(id)
    }

    pub(crate) fn stall_journal(&self) {
        self.state().journal_stalled = true;
    }

    pub(crate) fn release_journal(&self) {
        self.state().journal_stalled = false;
        self.unstalled.notify_waiters();
    }

    pub(crate) fn journal(&self) -> FakeJournal {
        FakeJournal(self.clone())
    }

    fn mark(&self, ids: &[Uuid], to: Status, guard: Guard) -> u64 {
        let mut s = self.state();
        let mut changed = 0;
        for id in ids {
            if let Some(status) = s.rows.get_mut(id) {
                let may = match guard {
                    Guard::Pending => *status == Status::Pending,
                    Guard::HandedOver => !matches!(*status, Status::Published | Status::Failed(_)),
                    Guard::Failed => matches!(*status, Status::Failed(_)),
                };
                if may {
                    *status = to;
                    changed += 1;
                }
            }
        }
        changed
    }
}

impl Ledger for Table {
    async fn failed(&self, ids: &[Uuid], code: Code, guard: Guard) -> Result<u64, Error> {
        {
            let mut s = self.state();
            if s.mark_failures > 0 {
                s.mark_failures -= 1;
                return Err(lost());
            }
        }
        Ok(self.mark(ids, Status::Failed(code), guard))
    }

    async fn published(&self, ids: &[Uuid], guard: Guard) -> Result<u64, Error> {
        Ok(self.mark(ids, Status::Published, guard))
    }

    async fn dead_letters(&self, letters: &[Letter]) -> Result<u64, Error> {
        let mut s = self.state();
        if s.mark_failures > 0 {
            s.mark_failures -= 1;
            return Err(lost());
        }
        s.letters.extend_from_slice(letters);
        Ok(letters.len() as u64)
    }

    async fn published_among(&self, ids: &[Uuid]) -> Result<Vec<Uuid>, Error> {
        let s = self.state();
        Ok(ids
            .iter()
            .filter(|id| {
                s.rows.get(*id) == Some(&Status::Published)
                    || s.journal.iter().any(|entry| entry.contains(*id))
            })
            .copied()
            .collect())
    }
}

/// The journal side of the table, for the recorder.
pub(crate) struct FakeJournal(Table);

impl Journal for FakeJournal {
    async fn record(&mut self, ids: &[Uuid]) -> Result<(), Error> {
        loop {
            let released = self.0.unstalled.notified();
            {
                let mut s = self.0.state();
                if s.journal_failures > 0 {
                    s.journal_failures -= 1;
                    return Err(lost());
                }
                if s.journal_refusals > 0 {
                    s.journal_refusals -= 1;
                    return Err(Error::new(
                        Code::ROW_MARKING_FAILED,
                        "permission denied for table outbox_cdc_published (SQLSTATE 42501)",
                    ));
                }
                if !s.journal_stalled {
                    s.journal.push(ids.to_vec());
                    s.journaled.extend_from_slice(ids);
                    return Ok(());
                }
            }
            released.await;
        }
    }

    async fn fold_one(&mut self) -> Result<Option<u64>, Error> {
        let entry = {
            let mut s = self.0.state();
            if s.journal.is_empty() {
                return Ok(None);
            }
            s.journal.remove(0)
        };
        Ok(Some(self.0.mark(&entry, Status::Published, Guard::Pending)))
    }

    async fn wal_flushed(&mut self) -> Result<Lsn, Error> {
        Ok(Lsn::ZERO)
    }
}
