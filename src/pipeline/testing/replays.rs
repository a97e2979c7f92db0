//! After a crash, idempotent delivery leaves out of the slot's replay the
//! rows an earlier session published and recorded (`pipeline::recheck`),
//! and sends again only those Kafka confirmed that were not recorded.

use super::broker::{partition_of, Answers, Fault};
use super::invariants::runtime;
use super::script::{Runner, Step};
use super::world::{Row, Setup, World};
use crate::pipeline::settlement::Mode;
use crate::row::value::Uuid;

/// Rows 1 (key a) and 2, 3, 4 (key b) in three transactions; rows 2 and 3
/// are confirmed, row 1 holds the slot, and the relay is killed.
fn crash_with_confirmed_rows(journal: Step) -> Vec<Step> {
    let mut steps = before_the_crash(journal);
    steps.extend(replayed_and_answered());
    steps
}

/// The slot's replay, every record of it confirmed.
fn replayed_and_answered() -> [Step; 3] {
    [
        Step::Deliver(3),
        Step::Answer {
            partition: None,
            n: 10,
            fault: None,
        },
        Step::Wait(1_000),
    ]
}

fn before_the_crash(journal: Step) -> Vec<Step> {
    let pb = partition_of(b"b");
    assert_ne!(partition_of(b"a"), pb, "the keys must land apart");
    vec![
        journal,
        Step::Commit(vec![Row::new(1, "a")]),
        Step::Commit(vec![Row::new(2, "b"), Row::new(3, "b")]),
        Step::Commit(vec![Row::new(4, "b")]),
        Step::Deliver(3),
        Step::Answer {
            partition: Some(pb),
            n: 2,
            fault: None,
        },
        Step::Wait(1_000),
        Step::Crash,
        Step::ReleaseJournal,
    ]
}

/// How often each of rows 1 to 4 is in Kafka, after everything settled.
fn copies(steps: Vec<Step>) -> Vec<usize> {
    runtime().block_on(async {
        let mut r = Runner::new(
            World::new(Answers::Held),
            Mode::Idempotent,
            Setup::default(),
        );
        r.play(&steps).await;
        r.finish().await;
        r.check_done();
        let visible: Vec<Uuid> = r.world.broker.visible().iter().map(|v| v.id).collect();
        [(1, "a"), (2, "b"), (3, "b"), (4, "b")]
            .iter()
            .map(|(n, key)| {
                let id = Row::new(*n, key).id;
                visible.iter().filter(|v| **v == id).count()
            })
            .collect()
    })
}

#[test]
fn rows_kafka_confirmed_and_the_relay_recorded_are_not_sent_again() {
    // The journal records rows 2 and 3 before the crash.
    assert_eq!(
        copies(crash_with_confirmed_rows(Step::Wait(0))),
        [1, 1, 1, 1]
    );
}

#[test]
fn rows_kafka_confirmed_that_were_not_recorded_come_again() {
    // The journal takes nothing before the crash: at least once.
    assert_eq!(
        copies(crash_with_confirmed_rows(Step::StallJournal)),
        [1, 2, 2, 1]
    );
}

#[test]
fn a_session_that_ends_before_its_lookup_is_done_leaves_it_to_the_next() {
    // The restarted process's first session looks rows 2 and 3 up, then
    // ends on row 1's passing failure; the next session replays them too.
    let mut steps = before_the_crash(Step::Wait(0));
    steps.extend([
        Step::Deliver(3),
        Step::Answer {
            partition: Some(partition_of(b"a")),
            n: 1,
            fault: Some(Fault::Retry),
        },
        Step::Wait(1_000),
    ]);
    steps.extend(replayed_and_answered());
    assert_eq!(copies(steps), [1, 1, 1, 1]);
}
