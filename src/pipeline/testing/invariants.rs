//! The settlement invariants, one scripted case each, for both delivery
//! modes where the rule is the same. The runner checks the general
//! invariants after every step (the slot never passes a row that is not in
//! Kafka and recorded, or FAILED; only a row's own fault makes it FAILED;
//! first deliveries per key in commit order; transactional: nothing visible
//! twice); each case adds what it is about.

use std::time::Duration;

use super::broker::{partition_of, Answers, Fault};
use super::script::{Runner, Step};
use super::table::Status;
use super::world::{Row, Setup, World};
use crate::error::policy::{self, Directive};
use crate::error::Code;
use crate::lsn::Lsn;
use crate::pipeline::settlement::Mode;

type Expect = fn(&Runner);

struct Case {
    name: &'static str,
    modes: &'static [Mode],
    answers: Answers,
    steps: fn() -> Vec<Step>,
    expect: Expect,
}

const BOTH: &[Mode] = &[Mode::Idempotent, Mode::Transactional];
const IDEMPOTENT: &[Mode] = &[Mode::Idempotent];
const TRANSACTIONAL: &[Mode] = &[Mode::Transactional];

fn row(n: u32) -> Row {
    Row::new(n, &format!("k{n}"))
}

fn end_of(r: &Runner, tx: usize) -> Lsn {
    r.world.wal[tx].end_lsn
}

fn directives(r: &Runner) -> Vec<Directive> {
    r.ends
        .iter()
        .filter_map(|e| e.err().map(policy::for_code))
        .collect()
}

/// Rows 1 to 4 in three transactions; row 2 is too large.
fn a_too_large_row_among_small_ones() -> Vec<Step> {
    vec![
        Step::Commit(vec![row(1)]),
        Step::Commit(vec![row(2).too_large(), row(3)]),
        Step::Commit(vec![row(4)]),
        Step::Deliver(3),
        Step::Wait(2_000),
    ]
}

fn only_the_too_large_row_failed(r: &Runner) {
    assert_eq!(
        r.world.table.status(&row(2).id),
        Some(Status::Failed(Code::MESSAGE_TOO_LARGE))
    );
    let visible: Vec<_> = r.world.broker.visible().iter().map(|v| v.id).collect();
    for n in [1, 3, 4] {
        assert!(visible.contains(&row(n).id), "row {n} in Kafka");
    }
    assert_eq!(r.settled(), end_of(r, 2), "the slot passed them all");
}

const CASES: &[Case] = &[
    Case {
        name: "the slot waits until confirmed rows are journaled",
        modes: BOTH,
        answers: Answers::Immediate,
        steps: || {
            vec![
                Step::StallJournal,
                Step::Commit(vec![row(1)]),
                Step::Commit(vec![row(2), row(3)]),
                Step::Deliver(2),
                Step::Wait(2_000),
            ]
        },
        expect: |r| {
            assert_eq!(r.world.broker.visible().len(), 3, "in Kafka");
            assert_eq!(r.settled(), Lsn::ZERO, "but not journaled");
        },
    },
    Case {
        name: "once journaled, the slot follows",
        modes: BOTH,
        answers: Answers::Immediate,
        steps: || {
            vec![
                Step::StallJournal,
                Step::Commit(vec![row(1)]),
                Step::Commit(vec![row(2)]),
                Step::Deliver(2),
                Step::Wait(2_000),
                Step::ReleaseJournal,
                Step::Wait(1_000),
            ]
        },
        expect: |r| assert_eq!(r.settled(), end_of(r, 1)),
    },
    Case {
        name: "unconfirmed rows hold the slot in commit order",
        modes: IDEMPOTENT,
        answers: Answers::Held,
        steps: || {
            let (a, b) = (Row::new(1, "a"), Row::new(2, "b"));
            let (pa, pb) = (partition_of(b"a"), partition_of(b"b"));
            assert_ne!(pa, pb, "the keys must land apart");
            vec![
                Step::Commit(vec![a]),
                Step::Commit(vec![b]),
                Step::Deliver(2),
                // The later transaction is confirmed first: nothing settles.
                Step::Answer {
                    partition: Some(pb),
                    n: 1,
                    fault: None,
                },
                Step::Wait(1_000),
            ]
        },
        expect: |r| assert_eq!(r.settled(), Lsn::ZERO),
    },
    Case {
        name: "a row's fault fails that row alone and the stream goes on",
        modes: BOTH,
        answers: Answers::Immediate,
        steps: a_too_large_row_among_small_ones,
        expect: |r| {
            only_the_too_large_row_failed(r);
            assert!(
                directives(r).iter().all(|d| *d == Directive::Retry),
                "at most a republication: {:?}",
                r.ends
            );
        },
    },
    Case {
        name: "an operator's refusal marks nothing FAILED and holds the slot",
        modes: BOTH,
        answers: Answers::Immediate,
        steps: || {
            vec![
                Step::Deny("audit"),
                Step::Commit(vec![row(1)]),
                Step::Commit(vec![row(2).to("audit")]),
                Step::Commit(vec![row(3)]),
                Step::Deliver(3),
                Step::Wait(2_000),
            ]
        },
        expect: |r| {
            assert!(r.settled() < end_of(r, 1), "held before the refused row");
            assert_eq!(r.world.table.status(&row(2).id), Some(Status::Pending));
            assert_eq!(
                r.ends.first(),
                Some(&Err(Code::TOPIC_AUTHORIZATION_FAILED)),
                "{:?}",
                r.ends
            );
            assert!(directives(r).contains(&Directive::AwaitOperator));
        },
    },
    Case {
        name: "once the operator acts, the held rows go out",
        modes: BOTH,
        answers: Answers::Immediate,
        steps: || {
            vec![
                Step::Deny("audit"),
                Step::Commit(vec![row(1)]),
                Step::Commit(vec![row(2).to("audit")]),
                Step::Deliver(2),
                Step::Wait(1_000),
                Step::Allow("audit"),
                Step::Deliver(2),
                Step::Wait(2_000),
            ]
        },
        expect: |r| {
            assert_eq!(r.settled(), end_of(r, 1));
            assert!(r
                .world
                .broker
                .visible()
                .iter()
                .any(|v| v.id == row(2).id));
        },
    },
    Case {
        name: "a row the broker refuses alone is FAILED when the topic's limit is unknown",
        modes: BOTH,
        answers: Answers::Immediate,
        steps: || {
            let mut steps = vec![Step::DenyDescribe];
            steps.extend(a_too_large_row_among_small_ones());
            steps
        },
        expect: only_the_too_large_row_failed,
    },
    Case {
        name: "idempotent: each row the broker refuses stops the producer once, and is left out after",
        modes: IDEMPOTENT,
        answers: Answers::Immediate,
        steps: || {
            vec![
                Step::DenyDescribe,
                Step::Commit(vec![row(1)]),
                Step::Commit(vec![row(2).too_large(), row(3)]),
                Step::Commit(vec![row(4).too_large()]),
                Step::Commit(vec![row(5)]),
                Step::Deliver(4),
                Step::Wait(3_000),
            ]
        },
        expect: |r| {
            for n in [2, 4] {
                assert_eq!(
                    r.world.table.status(&row(n).id),
                    Some(Status::Failed(Code::MESSAGE_TOO_LARGE)),
                    "row {n}"
                );
                assert_eq!(r.world.broker.state().sends.get(&row(n).id), Some(&1), "row {n} sent once");
            }
            let visible: Vec<_> = r.world.broker.visible().iter().map(|v| v.id).collect();
            for n in [1, 3, 5] {
                assert!(visible.contains(&row(n).id), "row {n} in Kafka");
            }
            assert!(r.ends.len() <= 2, "a session per refusal at most: {:?}", r.ends);
            assert!(directives(r).iter().all(|d| *d == Directive::Retry), "{:?}", r.ends);
            assert_eq!(r.settled(), end_of(r, 3));
        },
    },
    Case {
        name: "a row over its topic's known limit is never sent",
        modes: BOTH,
        answers: Answers::Immediate,
        steps: || {
            vec![
                Step::Commit(vec![row(1), row(2).too_large(), row(3)]),
                Step::Deliver(1),
                Step::Wait(1_000),
            ]
        },
        expect: |r| {
            assert!(r.ends.is_empty(), "no session ends: {:?}", r.ends);
            assert_eq!(
                r.world.table.status(&row(2).id),
                Some(Status::Failed(Code::MESSAGE_TOO_LARGE))
            );
            let stored: Vec<_> = r.world.broker.state().log.iter().map(|v| v.id).collect();
            assert_eq!(stored, vec![row(1).id, row(3).id], "the broker never saw it");
            assert_eq!(r.settled(), end_of(r, 0));
        },
    },
    Case {
        name: "a batch refused as too large fails no row: its records go out again in order",
        modes: BOTH,
        answers: Answers::Held,
        steps: || {
            let p = partition_of(b"k");
            vec![
                Step::Commit(vec![Row::new(1, "k")]),
                Step::Commit(vec![Row::new(2, "k")]),
                Step::Deliver(2),
                Step::Answer {
                    partition: Some(p),
                    n: 2,
                    fault: Some(Fault::BatchTooLarge),
                },
                Step::Wait(10),
                Step::Deliver(2),
                Step::Answer {
                    partition: None,
                    n: 10,
                    fault: None,
                },
                Step::Wait(1_000),
            ]
        },
        expect: |r| {
            assert_eq!(r.ends.first(), Some(&Err(Code::BATCH_OVER_TOPIC_LIMIT)));
            for n in [1, 2] {
                let row = Row::new(n, "k");
                assert_ne!(
                    r.world.table.status(&row.id),
                    Some(Status::Failed(Code::MESSAGE_TOO_LARGE)),
                    "row {n} fits"
                );
            }
            let ids: Vec<_> = r.world.broker.visible().iter().map(|v| v.id).collect();
            assert_eq!(ids, vec![Row::new(1, "k").id, Row::new(2, "k").id]);
            assert_eq!(r.settled(), end_of(r, 1));
        },
    },
    Case {
        name: "an ambiguous delivery restarts from the last settled position under the same ids",
        modes: IDEMPOTENT,
        answers: Answers::Held,
        steps: || {
            let p = partition_of(b"k");
            vec![
                Step::Commit(vec![Row::new(1, "k")]),
                Step::Commit(vec![Row::new(2, "k")]),
                Step::Deliver(2),
                Step::Answer {
                    partition: Some(p),
                    n: 1,
                    fault: Some(Fault::Ambiguous { stored: true }),
                },
                Step::Wait(10),
                Step::Deliver(2),
                Step::Answer {
                    partition: None,
                    n: 10,
                    fault: None,
                },
                Step::Wait(1_000),
            ]
        },
        expect: |r| {
            assert_eq!(r.ends.first(), Some(&Err(Code::KAFKA_DELIVERY_AMBIGUOUS)));
            let ids: Vec<_> = r.world.broker.visible().iter().map(|v| v.id).collect();
            let first = Row::new(1, "k").id;
            assert_eq!(
                ids.iter().filter(|i| **i == first).count(),
                2,
                "published again under its own id: {ids:?}"
            );
            assert_eq!(r.settled(), end_of(r, 1));
        },
    },
    Case {
        name: "transactional: what the progress says is in Kafka is marked, not published again",
        modes: TRANSACTIONAL,
        answers: Answers::Immediate,
        steps: || {
            vec![
                Step::StallJournal,
                Step::Commit(vec![row(1)]),
                Step::Commit(vec![row(2)]),
                Step::Deliver(2),
                Step::Wait(1_000),
                // Committed in Kafka with its progress, not journaled: the
                // slot did not move.
                Step::Crash,
                Step::ReleaseJournal,
                Step::Deliver(2),
                Step::Wait(1_000),
            ]
        },
        expect: |r| {
            assert_eq!(r.world.broker.visible().len(), 2, "nothing twice");
            assert_eq!(r.settled(), end_of(r, 1), "the skipped ones settle");
        },
    },
    Case {
        name: "transactional: a row Kafka refuses aborts its transaction, which goes out again without it",
        modes: TRANSACTIONAL,
        answers: Answers::Immediate,
        steps: || {
            vec![
                Step::DenyDescribe,
                Step::Commit(vec![row(1), row(2).too_large(), row(3)]),
                Step::Deliver(1),
                Step::Wait(500),
                Step::Deliver(1),
                Step::Wait(1_000),
            ]
        },
        expect: |r| {
            assert_eq!(r.ends.first(), Some(&Err(Code::KAFKA_TRANSACTION_ABORTED)));
            let ids: Vec<_> = r.world.broker.visible().iter().map(|v| v.id).collect();
            assert_eq!(ids, vec![row(1).id, row(3).id]);
        },
    },
    Case {
        name: "transactional: a source transaction with nothing to publish settles once its refusal is recorded",
        modes: TRANSACTIONAL,
        answers: Answers::Immediate,
        steps: || {
            vec![
                Step::Commit(vec![row(1).too_large()]),
                Step::Deliver(1),
                Step::Wait(1_000),
            ]
        },
        expect: |r| {
            assert_eq!(
                r.world.table.status(&row(1).id),
                Some(Status::Failed(Code::MESSAGE_TOO_LARGE))
            );
            assert_eq!(r.settled(), end_of(r, 0), "nothing else holds it");
        },
    },
    Case {
        name: "transactional: a refused row is left out of its transaction only once it is FAILED",
        modes: TRANSACTIONAL,
        answers: Answers::Immediate,
        steps: || {
            vec![
                Step::FailMarks(1),
                Step::Commit(vec![row(1), row(2).too_large()]),
                Step::Deliver(1),
                Step::Wait(1_000),
            ]
        },
        expect: |r| {
            assert_eq!(
                r.world.table.status(&row(2).id),
                Some(Status::Failed(Code::MESSAGE_TOO_LARGE)),
                "recorded by a later session"
            );
            assert_eq!(r.settled(), end_of(r, 0));
        },
    },
    Case {
        name: "transactional: a fenced producer stops the relay for good",
        modes: TRANSACTIONAL,
        answers: Answers::Held,
        steps: || {
            vec![
                Step::Commit(vec![row(1)]),
                Step::Deliver(1),
                Step::Fence,
                Step::Answer {
                    partition: None,
                    n: 10,
                    fault: None,
                },
                Step::Wait(1_000),
            ]
        },
        expect: |r| {
            assert_eq!(r.ends.first(), Some(&Err(Code::KAFKA_PRODUCER_FENCED)));
            assert_eq!(directives(r).first(), Some(&Directive::Fatal));
            assert!(r.world.broker.visible().is_empty());
            assert_eq!(r.settled(), Lsn::ZERO);
        },
    },
    Case {
        name: "transactional: an authorization refusal at the commit awaits the operator",
        modes: TRANSACTIONAL,
        answers: Answers::Immediate,
        steps: || {
            vec![
                Step::FailCommit(Code::TOPIC_AUTHORIZATION_FAILED),
                Step::Commit(vec![row(1)]),
                Step::Deliver(1),
                Step::Wait(1_000),
            ]
        },
        expect: |r| {
            assert_eq!(r.ends.first(), Some(&Err(Code::TOPIC_AUTHORIZATION_FAILED)));
            assert_eq!(directives(r).first(), Some(&Directive::AwaitOperator));
        },
    },
    Case {
        name: "a journal that cannot be written ends the session; nothing passes it",
        modes: BOTH,
        answers: Answers::Immediate,
        steps: || {
            vec![
                Step::FailJournal(2),
                Step::Commit(vec![row(1)]),
                Step::Deliver(1),
                Step::Wait(1_000),
            ]
        },
        expect: |r| {
            assert_eq!(r.ends.first(), Some(&Err(Code::PG_CONNECTION_LOST)));
        },
    },
    Case {
        name: "a journal write the server refuses is not tried again: the relay stops before the row",
        modes: BOTH,
        answers: Answers::Immediate,
        steps: || {
            vec![
                Step::RefuseJournal,
                Step::Commit(vec![row(1)]),
                Step::Deliver(1),
                Step::Wait(1_000),
            ]
        },
        expect: |r| {
            // Tried again, the second write would have passed.
            assert_eq!(r.ends.first(), Some(&Err(Code::ROW_MARKING_FAILED)));
            assert_eq!(directives(r), vec![Directive::Stop]);
            assert_eq!(r.settled(), Lsn::ZERO);
            assert!(!r.world.table.recorded(&row(1).id));
        },
    },
    Case {
        name: "a FAILED mark that cannot be written holds the slot before its row",
        modes: IDEMPOTENT,
        answers: Answers::Immediate,
        steps: || {
            vec![
                Step::FailMarks(1),
                Step::Commit(vec![row(1)]),
                Step::Commit(vec![row(2).too_large()]),
                Step::Deliver(2),
                Step::Wait(10),
            ]
        },
        expect: |r| {
            assert_eq!(r.ends.first(), Some(&Err(Code::PG_CONNECTION_LOST)));
            assert!(r.settled() < end_of(r, 1));
        },
    },
];

pub(super) fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("a test runtime: {e}"),
    }
}

#[test]
fn settlement_invariants() {
    for case in CASES {
        for mode in case.modes {
            let result = std::panic::catch_unwind(|| {
                runtime().block_on(async {
                    let mut r = Runner::new(World::new(case.answers), *mode, Setup::default());
                    r.play(&(case.steps)()).await;
                    (case.expect)(&r);
                    // Whatever happened, healed, everything goes out.
                    r.finish().await;
                    r.check_done();
                })
            });
            if let Err(panic) = result {
                eprintln!("case failed: {} ({mode:?})", case.name);
                std::panic::resume_unwind(panic);
            }
        }
    }
}

#[test]
fn a_drain_settles_what_is_in_flight_and_stops_cleanly() {
    for mode in BOTH {
        runtime().block_on(async {
            let mut r = Runner::new(World::new(Answers::Held), *mode, Setup::default());
            r.play(&[
                Step::Commit(vec![row(1)]),
                Step::Commit(vec![row(2)]),
                Step::Deliver(2),
                Step::Wait(10),
            ])
            .await;
            assert_eq!(r.world.broker.held(), 2);
            r.begin_shutdown();
            r.settle(Duration::from_millis(10)).await;
            assert!(r.ends.is_empty(), "still draining: {:?}", r.ends);
            r.world.broker.answer_all();
            r.settle(Duration::from_millis(500)).await;
            assert_eq!(r.ends, vec![Ok(())], "{mode:?}");
            assert_eq!(r.world.slot, end_of(&r, 1), "{mode:?}: drained and settled");
            assert_eq!(r.world.table.status(&row(2).id), Some(Status::Published));
        });
    }
}

/// A caught-up stream asks the producer to send at once, after the
/// records it sent (not before); a backlog the reader is still behind on
/// does not ask, so its records batch.
#[test]
fn the_producer_sends_at_once_only_when_the_reader_has_caught_up() {
    for mode in BOTH {
        runtime().block_on(async {
            let mut r = Runner::new(World::new(Answers::Held), *mode, Setup::default());
            r.play(&[
                Step::Commit(vec![row(1)]),
                Step::Commit(vec![row(2)]),
                Step::Commit(vec![row(3)]),
                Step::Deliver(2),
                Step::Wait(10),
            ])
            .await;
            assert_eq!(
                r.world.broker.state().sent_now,
                0,
                "{mode:?}: behind the WAL"
            );
            assert_eq!(r.world.broker.held(), 2);
            r.play(&[Step::Deliver(1), Step::Wait(10)]).await;
            let s = r.world.broker.state();
            assert_eq!(s.sent_now, 1, "{mode:?}: caught up");
            assert_eq!(s.sends.len(), 3, "{mode:?}: every record was sent before");
        });
    }
}

/// Debezium's documented table, which keeps no status: a row too large for
/// its topic goes to the dead-letter table, an UPDATE is dropped, and the
/// slot passes both only once everything before them is confirmed; a
/// process that dies and starts again from the slot loses nothing.
#[test]
fn a_table_that_keeps_no_status_dead_letters_what_it_cannot_publish_and_drops_updates() {
    runtime().block_on(async {
        let mut r = Runner::new(
            World::routed(Answers::Held),
            Mode::Idempotent,
            Setup::default(),
        );
        r.play(&[
            Step::Commit(vec![row(1)]),
            Step::Commit(vec![row(2).too_large(), row(3).updated(), row(4)]),
            Step::Commit(vec![row(5)]),
            Step::Deliver(3),
            Step::Wait(10),
        ])
        .await;
        assert_eq!(r.settled(), Lsn::ZERO, "nothing confirmed yet");
        assert_eq!(
            r.world.table.state().letters.len(),
            1,
            "the relay knows the topic's limit: the letter is written at once"
        );
        r.world.broker.answer_all();
        r.settle(Duration::from_millis(500)).await;
        assert_eq!(r.settled(), end_of(&r, 2), "the slot passed them all");

        let id = |tx: usize, i: usize| r.world.wal[tx].rows[i].id;
        let letters = r.world.table.state().letters.clone();
        assert_eq!(letters.len(), 1, "{letters:?}");
        let letter = &letters[0];
        assert_eq!(letter.code, Code::MESSAGE_TOO_LARGE);
        assert_eq!(letter.content.event_id, Some(id(1, 0).to_string()));
        let record = letter
            .content
            .record
            .as_deref()
            .expect("the refused record");
        assert_eq!(record.topic, "outbox.event.orders");
        assert_eq!(record.key_bytes(), Some(&b"\"k2\""[..]));
        assert!(record.value_bytes().is_some_and(|v| v.len() > 1024));

        let visible = r.world.broker.visible();
        let published: Vec<(&str, &[u8])> = visible
            .iter()
            .map(|v| (v.topic.as_str(), v.key.as_slice()))
            .collect();
        for key in [&b"\"k1\""[..], b"\"k4\"", b"\"k5\""] {
            assert!(
                published.contains(&("outbox.event.orders", key)),
                "{key:?} in {published:?}"
            );
        }
        assert_eq!(visible.len(), 3, "neither the UPDATE nor the refused row");
        assert!(!visible.iter().any(|v| v.id == id(1, 1)));

        r.play(&[
            Step::Commit(vec![row(6)]),
            Step::Deliver(1),
            Step::Crash,
            Step::Deliver(0),
        ])
        .await;
        r.finish().await;
        r.check_done();
        assert_eq!(r.world.table.state().letters.len(), 1, "no second letter");
    });
}
