//! Scripts of what happens around a relay (commits, answers from the
//! broker, faults, crashes, shutdowns) and a runner that plays them against
//! sessions of either strategy, restarting sessions as the retry policy
//! says, and checks the settlement invariants after every step.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::broker::{Fault, Stored};
use super::table::Status;
use super::world::{Op, Process, Row, Run, Setup, World};
use crate::error::policy::{self, Directive};
use crate::error::{Class, Code, Error};
use crate::lsn::Lsn;
use crate::pipeline::settlement::{Idempotent, Mode, Transactional};
use crate::row::value::Uuid;

/// The supervisor's backoff, shortened.
const RESTART_DELAY: Duration = Duration::from_millis(10);

/// One thing that happens.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// An application commits a source transaction.
    Commit(Vec<Row>),
    /// The reader hands the session the next source transactions.
    Deliver(usize),
    /// The broker answers the oldest `n` records of a partition (of every
    /// partition when `None`), meeting `fault` if given.
    Answer {
        partition: Option<u64>,
        n: usize,
        fault: Option<Fault>,
    },
    /// Time passes while the session runs.
    Wait(u64),
    StallJournal,
    ReleaseJournal,
    /// The next journal writes fail (a lost connection).
    FailJournal(usize),
    /// The next journal write is refused by the server.
    RefuseJournal,
    /// The next FAILED marks fail (a lost connection).
    FailMarks(usize),
    /// An operator's ACL refuses the topic (`t.` + destination).
    Deny(&'static str),
    /// The operator fixes it, once the records held for it are answered.
    Allow(&'static str),
    /// The next Kafka commit fails with this code.
    FailCommit(Code),
    /// Another producer starts with the relay's transactional id.
    Fence,
    /// The relay's principal may no longer describe topics: limits are
    /// learned from the broker's refusals.
    DenyDescribe,
    /// SIGTERM: the session drains and the process stops; a new one starts.
    Shutdown,
    /// SIGKILL: the process dies; a new one starts from the slot.
    Crash,
}

/// Plays steps against a relay of one mode.
pub(crate) struct Runner {
    pub(crate) world: World,
    mode: Mode,
    setup: Setup,
    process: Option<Process>,
    run: Option<Run>,
    /// How each session that ended by itself ended, in order.
    pub(crate) ends: Vec<Result<(), Code>>,
    /// How much of the WAL the walsender has sent: every session is fed
    /// up to here.
    delivered: usize,
    /// SIGTERM came: no new session starts (as the supervisor does).
    stopping: bool,
}

impl Runner {
    pub(crate) fn new(world: World, mode: Mode, setup: Setup) -> Runner {
        // A table that keeps no status has no marks to write.
        let setup = match world.routed {
            Some(_) => Setup {
                marks: crate::pipeline::shared::Marks::Off,
                ..setup
            },
            None => setup,
        };
        Runner {
            world,
            mode,
            setup,
            process: None,
            run: None,
            ends: Vec::new(),
            delivered: 0,
            stopping: false,
        }
    }

    /// The settled position of the running process (or the slot's).
    pub(crate) fn settled(&self) -> Lsn {
        self.process
            .as_ref()
            .map_or(self.world.slot, |p| p.settled().max(self.world.slot))
    }

    /// A running session fed with what the walsender has sent (a process
    /// and a session start when there is none).
    fn feed(&mut self) {
        if self.process.is_none() {
            self.process = Some(Process::start(&self.world, self.setup));
        }
        if self.run.is_none() {
            if let Some(p) = &self.process {
                self.run = Some(match self.mode {
                    Mode::Idempotent => Run::start::<Idempotent>(p, &self.world),
                    Mode::Transactional => Run::start::<Transactional>(p, &self.world),
                });
            }
        }
        if let Some(run) = &mut self.run {
            run.deliver_upto(&self.world, self.delivered);
        }
    }

    /// Plays every step, checking the invariants after each.
    pub(crate) async fn play(&mut self, steps: &[Step]) {
        for step in steps {
            self.apply(step).await;
            self.settle(Duration::from_millis(1)).await;
            self.check(step);
        }
    }

    async fn apply(&mut self, step: &Step) {
        match step {
            Step::Commit(rows) => {
                self.world.commit(rows.clone());
            }
            Step::Deliver(n) => {
                self.delivered = (self.delivered + n).min(self.world.wal.len());
                self.feed();
            }
            Step::Answer {
                partition,
                n,
                fault,
            } => match partition {
                Some(p) => self.world.broker.answer(*p, *n, *fault),
                None => {
                    for p in 0..super::broker::PARTITIONS {
                        self.world.broker.answer(p, *n, *fault);
                    }
                }
            },
            Step::Wait(ms) => self.settle(Duration::from_millis(*ms)).await,
            Step::StallJournal => self.world.table.stall_journal(),
            Step::ReleaseJournal => self.world.table.release_journal(),
            Step::FailJournal(n) => self.world.table.state().journal_failures += n,
            Step::RefuseJournal => self.world.table.state().journal_refusals += 1,
            Step::FailMarks(n) => self.world.table.state().mark_failures += n,
            Step::Deny(d) => {
                let topic = self.world.topic(d);
                self.world.broker.state().denied.insert(topic);
            }
            Step::Allow(d) => {
                self.world.broker.answer_all();
                self.settle(Duration::from_millis(1)).await;
                let topic = self.world.topic(d);
                self.world.broker.state().denied.remove(&topic);
            }
            Step::FailCommit(code) => self.world.broker.state().commit_fails = Some(*code),
            Step::Fence => self.world.broker.fence(),
            Step::DenyDescribe => {
                self.world.broker.state().describe = super::broker::Describe::Denied
            }
            Step::Shutdown => self.shutdown().await,
            Step::Crash => self.crash(),
        }
    }

    /// Lets sessions run for `time`; a session that ends is followed by
    /// what the policy says, and the next one runs for the rest of it.
    pub(crate) async fn settle(&mut self, time: Duration) {
        let until = tokio::time::Instant::now() + time;
        loop {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            let Some(run) = &mut self.run else {
                tokio::time::sleep(left).await;
                return;
            };
            let Some(end) = run.run_for(left).await else {
                return;
            };
            let end = end.clone();
            self.run = None;
            self.after(end).await;
            if left.is_zero() {
                return;
            }
        }
    }

    /// What the supervisor does after a session ended.
    async fn after(&mut self, end: Result<(), Error>) {
        self.ends
            .push(end.as_ref().map(|_| ()).map_err(Error::code));
        match end.as_ref().map_err(policy::directive) {
            // The supervisor starts the next session after a backoff,
            // unless a shutdown came.
            Err(
                Directive::Retry
                | Directive::AwaitOperator
                | Directive::RecordFailed
                | Directive::Standby,
            ) if !self.stopping => {
                tokio::time::sleep(RESTART_DELAY).await;
                self.feed()
            }
            // The process stops; an operator starts another later.
            _ => {
                self.stopping = false;
                if let Some(p) = self.process.take() {
                    p.stop(&mut self.world).await;
                }
            }
        }
    }

    /// SIGTERM, without waiting for the drain.
    pub(crate) fn begin_shutdown(&mut self) {
        self.stopping = self.process.is_some();
        if let Some(run) = &self.run {
            run.shutdown.cancel();
        }
    }

    async fn shutdown(&mut self) {
        self.begin_shutdown();
        for _ in 0..100 {
            if self.run.is_none() {
                break;
            }
            self.settle(Duration::from_millis(100)).await;
        }
        self.stopping = false;
        if let Some(p) = self.process.take() {
            p.stop(&mut self.world).await;
        }
    }

    fn crash(&mut self) {
        if let Some(run) = self.run.take() {
            run.kill(&self.world);
        }
        if let Some(p) = self.process.take() {
            p.crash(&mut self.world);
        }
    }

    /// Every fault healed, the whole WAL delivered and answered until
    /// everything settles, then a clean stop.
    pub(crate) async fn finish(&mut self) {
        {
            let mut b = self.world.broker.state();
            b.denied.clear();
            b.commit_fails = None;
        }
        self.world.table.release_journal();
        {
            let mut t = self.world.table.state();
            t.journal_failures = 0;
            t.journal_refusals = 0;
            t.mark_failures = 0;
        }
        let last = self.world.wal.last().map_or(Lsn::ZERO, |t| t.end_lsn);
        self.delivered = self.world.wal.len();
        // A relay starts whatever the slot says: it folds what an earlier
        // one left in the journal.
        self.feed();
        for _ in 0..200 {
            if self.settled() >= last {
                break;
            }
            self.feed();
            self.settle(Duration::from_millis(1)).await;
            self.world.broker.answer_all();
            self.settle(Duration::from_millis(300)).await;
        }
        self.shutdown().await;
        self.check(&Step::Shutdown);
    }

    /// The invariants that hold after any step.
    pub(crate) fn check(&self, after: &Step) {
        let visible = self.world.broker.visible();
        let settled = self.settled();
        let lettered = self.lettered();
        for tx in self.world.wal.iter().filter(|t| t.end_lsn <= settled) {
            for r in &tx.rows {
                if r.op == Op::Update {
                    assert!(
                        !visible.iter().any(|v| v.id == r.id),
                        "after {after:?}: an UPDATE ({}) was published",
                        r.id
                    );
                    continue;
                }
                if lettered.contains_key(&r.id) {
                    continue;
                }
                match self.world.table.status(&r.id) {
                    Some(Status::Failed(_)) => {}
                    _ => {
                        assert!(
                            visible.iter().any(|v| v.id == r.id),
                            "after {after:?}: the slot ({settled}) passed {} (ends {}), which is not in Kafka",
                            r.id,
                            tx.end_lsn
                        );
                        assert!(
                            !self.setup.marks.on() || self.world.table.recorded(&r.id),
                            "after {after:?}: the slot ({settled}) passed {}, which is not recorded",
                            r.id
                        );
                    }
                }
            }
        }
        let refused: HashSet<Uuid> = self
            .world
            .wal
            .iter()
            .flat_map(|t| &t.rows)
            .filter(|r| r.too_large)
            .map(|r| r.id)
            .collect();
        for (id, code) in &lettered {
            assert_eq!(
                code.class(),
                Class::Row,
                "after {after:?}: {id} dead-lettered with {code}"
            );
            assert!(
                refused.contains(id),
                "after {after:?}: {id} dead-lettered ({code}) though nothing refused it for its own fault"
            );
        }
        for (id, status) in self.world.table.state().rows.iter() {
            if let Status::Failed(code) = status {
                assert_eq!(
                    code.class(),
                    Class::Row,
                    "after {after:?}: {id} FAILED {code}"
                );
                assert!(
                    refused.contains(id),
                    "after {after:?}: {id} FAILED ({code}) though nothing refused it for its own fault"
                );
            }
        }
        if self.mode == Mode::Transactional {
            let mut seen = HashSet::new();
            for v in &visible {
                assert!(seen.insert(v.id), "after {after:?}: {} visible twice", v.id);
            }
        }
        self.check_order(&visible, after);
    }

    /// The rows in the dead-letter table (of a table that keeps no status),
    /// by the id a routed row's record carries, with their codes.
    pub(crate) fn lettered(&self) -> HashMap<Uuid, Code> {
        let ids: HashMap<String, Uuid> = self
            .world
            .wal
            .iter()
            .flat_map(|t| &t.rows)
            .map(|r| (r.id.to_string(), r.id))
            .collect();
        self.world
            .table
            .state()
            .letters
            .iter()
            .filter_map(|l| {
                let id = l.content.event_id.as_ref().and_then(|e| ids.get(e))?;
                Some((*id, l.code))
            })
            .collect()
    }

    /// Per topic and key, first deliveries come in commit order.
    fn check_order(&self, visible: &[Stored], after: &Step) {
        let mut position: HashMap<Uuid, usize> = HashMap::new();
        for (i, r) in self.world.wal.iter().flat_map(|t| &t.rows).enumerate() {
            position.insert(r.id, i);
        }
        let mut last: HashMap<(&str, &[u8]), usize> = HashMap::new();
        let mut seen = HashSet::new();
        for v in visible {
            if !seen.insert(v.id) {
                continue;
            }
            let at = position[&v.id];
            if let Some(before) = last.insert((&v.topic, &v.key), at) {
                assert!(
                    before < at,
                    "after {after:?}: key {:?}: first deliveries out of commit order",
                    String::from_utf8_lossy(&v.key)
                );
            }
        }
    }

    /// The final state: everything committed is in Kafka or FAILED, the
    /// slot at the end, and with marks every published row recorded.
    pub(crate) fn check_done(&self) {
        let last = self.world.wal.last().map_or(Lsn::ZERO, |t| t.end_lsn);
        assert_eq!(self.world.slot, last, "the slot reached the end");
        let visible: HashSet<Uuid> = self.world.broker.visible().iter().map(|v| v.id).collect();
        let lettered = self.lettered();
        let ids: HashSet<String> = self
            .world
            .wal
            .iter()
            .flat_map(|t| &t.rows)
            .map(|r| r.id.to_string())
            .collect();
        // At least once: a crash after a letter was written and before the
        // slot passed its row writes it again, but every letter is a row's.
        for letter in &self.world.table.state().letters {
            assert!(
                letter
                    .content
                    .event_id
                    .as_ref()
                    .is_some_and(|e| ids.contains(e)),
                "a dead letter that is no row's: {:?}",
                letter.content.event_id
            );
        }
        for r in self.world.wal.iter().flat_map(|t| &t.rows) {
            let status = self.world.table.status(&r.id);
            if r.op == Op::Update {
                assert!(!visible.contains(&r.id), "an UPDATE was published");
            } else if self.world.routed.is_some() {
                if r.too_large {
                    assert_eq!(
                        lettered.get(&r.id),
                        Some(&Code::MESSAGE_TOO_LARGE),
                        "{}",
                        r.id
                    );
                } else {
                    assert!(visible.contains(&r.id), "{} is not in Kafka", r.id);
                    assert!(
                        !lettered.contains_key(&r.id),
                        "{} published and dead-lettered",
                        r.id
                    );
                }
            } else if r.too_large {
                assert_eq!(
                    status,
                    Some(Status::Failed(Code::MESSAGE_TOO_LARGE)),
                    "{}",
                    r.id
                );
            } else {
                assert!(visible.contains(&r.id), "{} is not in Kafka", r.id);
                if self.setup.marks.on() {
                    assert_eq!(status, Some(Status::Published), "{} is not PUBLISHED", r.id);
                }
            }
        }
    }
}
