//! A model-based property test: random interleavings of commits, deliveries,
//! broker answers and faults, journal and mark failures, crashes, fencing
//! and shutdowns, played against both delivery modes. After every step the
//! runner checks the invariants against the reference (the WAL, the
//! in-memory broker and table); at the end, with every fault healed,
//! everything committed must be in Kafka or FAILED for its own fault, and
//! the slot at the end of the WAL. A failing case shrinks to a short script.

use proptest::prelude::*;

use super::broker::{Answers, Fault, PARTITIONS};
use super::script::{Runner, Step};
use super::world::{Row, Setup, World};
use crate::error::Code;
use crate::pipeline::settlement::Mode;
use crate::pipeline::shared::Marks;

/// A step before its rows are numbered.
#[derive(Debug, Clone)]
enum Op {
    Commit(Vec<(u8, bool, bool, bool)>),
    Deliver(usize),
    Answer(Option<u64>, usize, Option<Fault>),
    Wait(u64),
    StallJournal,
    ReleaseJournal,
    FailJournal(usize),
    RefuseJournal,
    FailMarks(usize),
    Deny,
    Allow,
    FailCommit(Code),
    Fence,
    Shutdown,
    Crash,
}

fn fault() -> impl Strategy<Value = Option<Fault>> {
    prop_oneof![
        6 => Just(None),
        1 => Just(Some(Fault::Retry)),
        1 => any::<bool>().prop_map(|stored| Some(Fault::Ambiguous { stored })),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    // (key, too large, to the topic an operator may deny, an UPDATE where
    // the table keeps no status)
    let row = (
        0u8..4,
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.1),
    );
    prop_oneof![
        6 => prop::collection::vec(row, 1..4).prop_map(Op::Commit),
        4 => (1usize..4).prop_map(Op::Deliver),
        6 => (prop::option::of(0..PARTITIONS), 1usize..4, fault())
            .prop_map(|(p, n, f)| Op::Answer(p, n, f)),
        3 => (1u64..400).prop_map(Op::Wait),
        1 => Just(Op::StallJournal),
        1 => Just(Op::ReleaseJournal),
        1 => (1usize..3).prop_map(Op::FailJournal),
        1 => Just(Op::RefuseJournal),
        1 => Just(Op::FailMarks(1)),
        1 => Just(Op::Deny),
        1 => Just(Op::Allow),
        1 => prop_oneof![
            Just(Code::KAFKA_TRANSACTION_ABORTED),
            Just(Code::KAFKA_TRANSACTION_OUTCOME_UNKNOWN),
        ]
        .prop_map(Op::FailCommit),
        1 => Just(Op::Fence),
        1 => Just(Op::Shutdown),
        1 => Just(Op::Crash),
    ]
}

/// Which outbox the relay streams.
#[derive(Debug, Clone, Copy)]
enum Outbox {
    Messaging,
    /// Debezium's documented table, which keeps no status.
    Documented,
}

/// Numbers the rows of `ops` into steps.
fn steps(ops: &[Op], outbox: Outbox) -> Vec<Step> {
    let mut n = 0u32;
    ops.iter()
        .map(|op| match op {
            Op::Commit(rows) => Step::Commit(
                rows.iter()
                    .map(|(key, too_large, audit, update)| {
                        n += 1;
                        let mut r = Row::new(n, &format!("k{key}"));
                        if *update && matches!(outbox, Outbox::Documented) {
                            r = r.updated();
                        }
                        if *too_large {
                            r = r.too_large();
                        }
                        if *audit {
                            r = r.to("audit");
                        }
                        r
                    })
                    .collect(),
            ),
            Op::Deliver(k) => Step::Deliver(*k),
            Op::Answer(partition, k, fault) => Step::Answer {
                partition: *partition,
                n: *k,
                fault: *fault,
            },
            Op::Wait(ms) => Step::Wait(*ms),
            Op::StallJournal => Step::StallJournal,
            Op::ReleaseJournal => Step::ReleaseJournal,
            Op::FailJournal(k) => Step::FailJournal(*k),
            Op::RefuseJournal => Step::RefuseJournal,
            Op::FailMarks(k) => Step::FailMarks(*k),
            Op::Deny => Step::Deny("audit"),
            Op::Allow => Step::Allow("audit"),
            Op::FailCommit(code) => Step::FailCommit(*code),
            Op::Fence => Step::Fence,
            Op::Shutdown => Step::Shutdown,
            Op::Crash => Step::Crash,
        })
        .collect()
}

fn play(mode: Mode, outbox: Outbox, answers: Answers, marks: Marks, ops: &[Op]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build();
    let Ok(runtime) = runtime else {
        panic!("a test runtime");
    };
    runtime.block_on(async {
        let setup = Setup {
            marks,
            ..Setup::default()
        };
        let world = match outbox {
            Outbox::Messaging => World::new(answers),
            Outbox::Documented => World::routed(answers),
        };
        let mut r = Runner::new(world, mode, setup);
        r.play(&steps(ops, outbox)).await;
        r.finish().await;
        r.check_done();
    });
}

fn marks() -> impl Strategy<Value = Marks> {
    prop_oneof![4 => Just(Marks::Journaled), 1 => Just(Marks::Off)]
}

fn answers() -> impl Strategy<Value = Answers> {
    prop_oneof![3 => Just(Answers::Held), 1 => Just(Answers::Immediate)]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn idempotent_settlement_holds_under_any_interleaving(
        ops in prop::collection::vec(op(), 1..40),
        answers in answers(),
        marks in marks(),
    ) {
        play(Mode::Idempotent, Outbox::Messaging, answers, marks, &ops);
    }

    #[test]
    fn transactional_settlement_holds_under_any_interleaving(
        ops in prop::collection::vec(op(), 1..40),
        answers in answers(),
        marks in marks(),
    ) {
        play(Mode::Transactional, Outbox::Messaging, answers, marks, &ops);
    }

    /// A table that keeps no status streams with idempotent delivery only;
    /// its marks are the dead letters (the mark failures fail their writes).
    #[test]
    fn settlement_of_a_table_that_keeps_no_status_holds_under_any_interleaving(
        ops in prop::collection::vec(op(), 1..40),
        answers in answers(),
    ) {
        play(Mode::Idempotent, Outbox::Documented, answers, Marks::Off, &ops);
    }
}
