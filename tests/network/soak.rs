//! The seeded nemesis soak (`outbox_cdc_testkit::soak`): a short run of each
//! delivery mode with a fixed seed, and the run `scripts/soak.sh` starts.

use std::time::Duration;

use crate::common;
use common::soak::{self, Delivery, Kafka, Options};

/// The suite's seed: a Kafka restart, a black-holed PostgreSQL link, a relay
/// SIGKILL, PostgreSQL latency and a Kafka bandwidth cap, in that order.
const SEED: u64 = 7;
const SHORT: Duration = Duration::from_secs(90);

async fn short(delivery: Delivery) {
    let services = common::services().expect("the soak needs the services");
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let report = soak::run(
        &services,
        &Options {
            duration: SHORT,
            seed: SEED,
            delivery,
            kafka: Kafka::Single,
            report_dir: std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("soak"),
        },
    )
    .await;
    eprintln!("{}", report.markdown());
    assert!(
        report.faults.len() >= 3,
        "the nemesis injected {} faults",
        report.faults.len()
    );
    assert!(
        report.committed > 1000,
        "the workload committed {} rows",
        report.committed
    );
    assert_eq!(report.lost, 0);
    assert_eq!(report.violations(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_short_seeded_soak_loses_nothing_in_idempotent_delivery() {
    short(Delivery::Idempotent).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_short_seeded_soak_loses_nothing_and_duplicates_nothing_in_transactional_delivery() {
    short(Delivery::Transactional).await;
}

/// `scripts/soak.sh` runs this one with its arguments in the environment.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "run by scripts/soak.sh"]
async fn soak_from_the_environment() {
    let services = common::services().expect("the soak needs the services");
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| panic!("{name} (set by scripts/soak.sh)"))
    };
    let minutes: f64 = var("OUTBOX_SOAK_MINUTES").parse().expect("minutes");
    let delivery =
        Delivery::parse(&var("OUTBOX_SOAK_DELIVERY")).expect("idempotent or transactional");
    let report = soak::run(
        &services,
        &Options {
            duration: Duration::from_secs_f64(minutes * 60.0),
            seed: var("OUTBOX_SOAK_SEED").parse().expect("a numeric seed"),
            delivery,
            kafka: Kafka::parse(&var("OUTBOX_SOAK_KAFKA")).expect("single or cluster"),
            report_dir: var("OUTBOX_SOAK_REPORT_DIR").into(),
        },
    )
    .await;
    println!("{}", report.markdown());
    assert_eq!(report.violations(), Vec::<String>::new());
}
