//! Kafka as production runs it (`scripts/services.sh start-cluster`): three
//! brokers behind a controller of their own, replication factor 3 and
//! `min.insync.replicas=2`. Each test runs a steady load (2 writers, 1- to
//! 5-row transactions, 200 keys), injects one fault, heals it, and checks
//! what a consumer reading the topic end to end finds:
//!
//! - lost: 0;
//! - duplicates: 0 for a `read_committed` consumer in transactional
//!   delivery; in idempotent delivery, none without a session restart;
//! - per-key order of first deliveries: no violation.
//!
//! It notes the time to detect (`/readyz` stops answering 200), the time to
//! recover (from the heal to the first row committed after it, in Kafka)
//! and the session restarts with their codes, in `cluster-faults.jsonl`
//! under Cargo's test directory; the network-faults page's cluster table
//! comes from these figures.
//!
//! The relay reaches each broker through its own Toxiproxy proxy, so one
//! broker's link can be cut alone; the checker reads the brokers directly.
//! Its own binary, one test at a time: the cluster is shared.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::time::{Duration, Instant};

use outbox_cdc_testkit as common;

use common::kafka;
use common::relay::{self, RelayProcess};
use common::toxiproxy::{Link, Proxies};
use common::workload::{self, Answer, Looks, Readiness, Tap, Workload};

use common::cluster::{Cluster, Fault};

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The budgets the relay runs with here (the user guide gives the defaults).
const SLOT_CHECK_INTERVAL_SECS: u64 = 5;

/// The relay's delivery mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Idempotent,
    Transactional,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Idempotent => "idempotent",
            Mode::Transactional => "transactional",
        }
    }
}

/// What one fault did, as the checker found it.
#[derive(Debug)]
struct Figures {
    committed: usize,
    lost: usize,
    /// Records read more than once (at read_uncommitted).
    duplicates: usize,
    /// For transactional delivery: duplicates a read_committed consumer saw.
    committed_duplicates: Option<usize>,
    out_of_order: usize,
    detection: Option<Duration>,
    recovery: Duration,
    /// The codes of the session restarts, in order.
    restarts: Vec<String>,
    warnings: String,
}

#[tokio::test(flavor = "multi_thread")]
async fn idempotent_a_killed_leader_loses_nothing() {
    run(Fault::LeaderKilled, Mode::Idempotent).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn transactional_a_killed_leader_loses_nothing_and_duplicates_nothing() {
    run(Fault::LeaderKilled, Mode::Transactional).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn idempotent_a_rolling_restart_loses_nothing() {
    run(Fault::RollingRestart, Mode::Idempotent).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn transactional_a_rolling_restart_loses_nothing_and_duplicates_nothing() {
    run(Fault::RollingRestart, Mode::Transactional).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn idempotent_a_reassignment_of_every_leader_loses_nothing() {
    run(Fault::Reassignment, Mode::Idempotent).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn transactional_a_reassignment_of_every_leader_loses_nothing_and_duplicates_nothing() {
    run(Fault::Reassignment, Mode::Transactional).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn idempotent_a_frozen_leader_loses_nothing() {
    run(Fault::Frozen, Mode::Idempotent).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn transactional_a_frozen_leader_loses_nothing_and_duplicates_nothing() {
    run(Fault::Frozen, Mode::Transactional).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn idempotent_two_brokers_down_is_not_ready_and_loses_nothing() {
    run(Fault::QuorumLost, Mode::Idempotent).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn transactional_two_brokers_down_is_not_ready_and_loses_nothing() {
    run(Fault::QuorumLost, Mode::Transactional).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn idempotent_a_cut_link_to_one_broker_loses_nothing() {
    run(Fault::LinkCut, Mode::Idempotent).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn transactional_a_cut_link_to_one_broker_loses_nothing_and_duplicates_nothing() {
    run(Fault::LinkCut, Mode::Transactional).await;
}

async fn run(fault: Fault, mode: Mode) -> Figures {
    let services = common::services().expect("the cluster tests need the services");
    let _alone = ONE_AT_A_TIME.lock().await;
    let cluster = Cluster::from_env();
    let proxies = Proxies::from_env();
    // Only the cluster's proxies: the other fault tests may use theirs.
    for broker in Cluster::BROKERS {
        proxies.clear(Link::ClusterBroker(broker));
    }
    cluster.all_up();
    let prefix = common::unique_prefix("cluster");
    let db = common::cdc_db(&services, "cluster", &prefix).await;
    let topic = format!("{prefix}keyed");
    kafka::create_replicated_topic(&cluster.bootstrap, &topic, 6).await;
    cluster.wait_in_sync(&topic, Duration::from_secs(60));
    let http_port = common::free_port();
    let slot = format!("{}_relay", db.name);
    let config = relay_config(
        &services,
        &cluster,
        &Relayed {
            db: &db.name,
            prefix: &prefix,
            slot: &slot,
            mode,
            http_port,
        },
    );
    let mut relay = RelayProcess::spawn(&config);
    let ready = Readiness::watch(http_port);
    let began = Instant::now();
    assert!(
        ready
            .wait(Answer::Ready, began, Duration::from_secs(90))
            .is_some(),
        "the relay never became ready:\n{}",
        relay.log_text()
    );
    let isolation = match mode {
        Mode::Idempotent => kafka::READ_UNCOMMITTED,
        Mode::Transactional => kafka::READ_COMMITTED,
    };
    let tap = Tap::start(&cluster.bootstrap, std::slice::from_ref(&topic), isolation);
    let load = Workload::start(
        &services,
        &db.name,
        workload::Load {
            writers: 2,
            per_sec: 25,
            keys: 200,
            seed: 51,
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;

    // A fault that holds one broker's partitions: the held partitions'
    // gauge and /readyz's body, looked at throughout.
    let looks = matches!(fault, Fault::Frozen | Fault::LinkCut).then(|| Looks::watch(http_port));
    // `status` names them too, while the relay publishes the others.
    let status = (looks.is_some() && mode == Mode::Idempotent).then(|| {
        let (config, until) = (
            config.clone(),
            Instant::now() + fault.hold() + Duration::from_secs(5),
        );
        std::thread::spawn(move || held_in_status(&config, until))
    });
    let injected = Instant::now();
    eprintln!("[cluster] {} ({})", fault.name(), mode.name());
    cluster.inject(fault, &proxies, &topic).await;
    let healed = Instant::now();
    let detection = ready
        .first(Answer::NotReady, injected)
        .filter(|at| *at <= healed)
        .map(|at| at - injected);
    let mark = workload::marker(&db.client).await.unwrap();
    let missing = tap.wait_for(&HashSet::from([mark.clone()]), Duration::from_secs(180));
    assert!(
        missing.is_empty(),
        "{}: nothing published within 180 s of the heal:\n{}",
        fault.name(),
        relay::warnings_in(&[relay.log_text()])
    );
    let recovery = tap
        .arrived_at(&mark)
        .map(|at| at.saturating_duration_since(healed))
        .unwrap_or_default();
    tokio::time::sleep(Duration::from_secs(2)).await;
    if let Some(looks) = looks {
        held_partitions_are_seen_and_cleared(fault, mode, &looks, (injected, healed)).await;
    }
    if let Some(status) = status {
        let said = status.join().unwrap();
        let at = said
            .as_ref()
            .map(|(at, _)| at.saturating_duration_since(injected));
        eprintln!("[cluster] status said PARTITION_HELD after {at:?}");
        assert!(
            said.as_ref()
                .is_some_and(|(_, out)| out.contains(&topic) && out.contains("\"leader\"")),
            "{}: status never named a held partition during the fault: {said:?}",
            fault.name()
        );
    }
    let committed = load.stop().await;

    let table = workload::outbox_ids(&db.client).await;
    assert!(committed.keys().all(|id| table.contains(id)));
    let missing = tap.wait_for(&table, Duration::from_secs(180));
    let mut records = tap.records();
    drop(tap);
    // A consumer may read an offset again after a leader moves; a
    // duplicate is a record written twice, at two offsets.
    let mut offsets = HashSet::new();
    records.retain(|r| offsets.insert((r.partition, r.offset)));
    let distinct: HashSet<&str> = records.iter().map(|r| r.id.as_str()).collect();
    let twice = twice_written(&records);
    let committed_duplicates = match mode {
        Mode::Idempotent => None,
        // Everything a read_committed consumer reads, once more from the
        // start: the tap read it live, this reads what stayed.
        Mode::Transactional => {
            let seen = kafka::consume_all(
                &cluster.bootstrap,
                &[topic.as_str()],
                Duration::from_secs(10),
                kafka::READ_COMMITTED,
            );
            let ids: Vec<String> = seen
                .iter()
                .filter_map(|c| c.header("id"))
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .collect();
            let once: HashSet<&String> = ids.iter().collect();
            Some(ids.len() - once.len())
        }
    };
    let log = relay.log_text();
    let figures = Figures {
        committed: table.len(),
        lost: missing.len(),
        duplicates: records.len() - distinct.len(),
        committed_duplicates,
        out_of_order: workload::out_of_order(&records).len(),
        detection,
        recovery,
        restarts: restart_codes(&log),
        warnings: relay::warnings_in(std::slice::from_ref(&log)),
    };
    note(fault, mode, &figures);

    assert_eq!(
        figures.lost,
        0,
        "{} ({}): committed rows never reached Kafka:\n{}",
        fault.name(),
        mode.name(),
        figures.warnings
    );
    assert_eq!(
        figures.out_of_order,
        0,
        "{} ({}): first deliveries out of per-key commit order",
        fault.name(),
        mode.name()
    );
    match mode {
        Mode::Transactional => assert_eq!(
            figures.committed_duplicates,
            Some(0),
            "{}: a read_committed consumer saw duplicates:\n{}",
            fault.name(),
            figures.warnings
        ),
        // A duplicate is a record sent again by a new session.
        Mode::Idempotent => assert!(
            figures.duplicates == 0 || !figures.restarts.is_empty(),
            "{}: {} duplicates without a session restart ({twice}):\n{}",
            fault.name(),
            figures.duplicates,
            figures.warnings
        ),
    }
    if fault == Fault::QuorumLost {
        assert!(
            figures.detection.is_some(),
            "{} ({}): /readyz answered 200 while no partition could take a write:\n{}",
            fault.name(),
            mode.name(),
            figures.warnings
        );
    }
    assert!(
        relay.child.try_wait().unwrap().is_none(),
        "{}: the relay exited:\n{log}",
        fault.name()
    );
    assert_eq!(common::rows_with_status(&db.client, "FAILED").await, 0);
    for line in relay::plain(&log).lines() {
        assert!(
            !line.contains("awaiting the operator") && !line.contains("class=operator"),
            "{}: an operator stop for a broker fault: {line}",
            fault.name()
        );
    }
    relay.signal("TERM");
    assert!(relay
        .wait(Duration::from_secs(60))
        .is_some_and(|s| s.success()));
    common::replication::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
    figures
}

/// The held partitions' gauge is gone after the heal; in idempotent
/// delivery it rose during the fault, and `/readyz` stayed 200 and said degraded
/// once a partition is held past `relay.kafka_stall_secs` (15 s), then no
/// more.
async fn held_partitions_are_seen_and_cleared(
    fault: Fault,
    mode: Mode,
    looks: &Looks,
    (injected, healed): (Instant, Instant),
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let clear = |l: &workload::Look| l.held.is_empty() && l.body.starts_with("ready: ");
    while Instant::now() < deadline && !looks.all().last().is_some_and(clear) {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let all = looks.all();
    let secs = |at: Instant| at.saturating_duration_since(injected).as_secs_f64();
    let rose = all.iter().find(|l| l.at >= injected && !l.held.is_empty());
    let over = |bound: f64| all.iter().find(|l| l.at >= injected && l.oldest() > bound);
    let peak = all.iter().map(workload::Look::oldest).fold(0.0, f64::max);
    let degraded = all
        .iter()
        .find(|l| l.at >= injected && l.body.starts_with("ready, degraded"));
    // From the first look of the last run without a held partition.
    let cleared = all
        .iter()
        .rev()
        .take_while(|l| l.held.is_empty())
        .last()
        .filter(|_| all.last().is_some_and(clear));
    eprintln!(
        r#"{{"fault":"{}","mode":"{}","held_seen_secs":{},"held_past_alert_secs":{},"held_peak_secs":{peak:.1},"degraded_secs":{},"cleared_after_heal_secs":{},"partitions":{:?}}}"#,
        fault.name(),
        mode.name(),
        rose.map_or("null".into(), |l| format!("{:.1}", secs(l.at))),
        over(15.0).map_or("null".into(), |l| format!("{:.1}", secs(l.at))),
        degraded.map_or("null".into(), |l| format!("{:.1}", secs(l.at))),
        cleared.map_or("null".into(), |l| {
            match l.at.checked_duration_since(healed) {
                Some(d) => format!("{:.1}", d.as_secs_f64()),
                None => format!("-{:.1}", (healed - l.at).as_secs_f64()),
            }
        }),
        over(0.0).map(|l| l.held.clone()).unwrap_or_default(),
    );
    assert!(
        cleared.is_some(),
        "{}: held partitions still reported 60 s after the heal: {:?}",
        fault.name(),
        all.last()
    );
    // Transactional delivery may wait in a transaction call at a cut-off
    // coordinator instead, with no record held in a partition.
    if mode == Mode::Idempotent {
        assert!(
            rose.is_some_and(|l| l.at <= healed),
            "{}: no held partition was seen during the fault",
            fault.name()
        );
        for l in all.iter().filter(|l| l.body.starts_with("ready, degraded")) {
            assert_eq!(l.status, Some(200), "{}", l.body);
            assert!(l.body.contains("leader broker"), "{}", l.body);
        }
        // Past the stall time (and a look's margin) the body says so.
        if over(17.0).is_some_and(|l| l.status == Some(200)) {
            assert!(
                degraded.is_some(),
                "{}: a partition held past relay.kafka_stall_secs and /readyz never said degraded",
                fault.name()
            );
        }
    }
}

/// `status --format json` every second until it reports `PARTITION_HELD`
/// (when and what it said), or `until`.
fn held_in_status(config: &std::path::Path, until: Instant) -> Option<(Instant, String)> {
    while Instant::now() < until {
        let out = common::cli::Cli::new(&["status", "--format", "json"])
            .config(config)
            .output();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains("PARTITION_HELD") {
            return Some((Instant::now(), text));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    None
}

/// The relay one fault runs against.
struct Relayed<'a> {
    db: &'a str,
    prefix: &'a str,
    slot: &'a str,
    mode: Mode,
    http_port: u16,
}

/// The relay's configuration: the cluster through the per-broker proxies,
/// PostgreSQL directly.
fn relay_config(
    services: &common::Services,
    cluster: &Cluster,
    relayed: &Relayed<'_>,
) -> std::path::PathBuf {
    let Relayed {
        db,
        prefix,
        slot,
        mode,
        http_port,
    } = *relayed;
    let through = common::Services {
        pg_host: services.pg_host.clone(),
        pg_port: services.pg_port,
        pg_user: services.pg_user.clone(),
        pg_password: services.pg_password.clone(),
        kafka_bootstrap: cluster.proxied.clone(),
    };
    let mut extra = format!("slot_check_interval_secs = {SLOT_CHECK_INTERVAL_SECS}\n");
    if mode == Mode::Transactional {
        extra.push_str("delivery = \"transactional\"\n");
    }
    extra.push_str(&format!("\n[http]\nlisten = \"127.0.0.1:{http_port}\"\n"));
    let path = relay::config(&through, db, prefix, slot, &extra);
    // OUTBOX_TEST_KAFKA_DEBUG=eos,msg,...: librdkafka's debug contexts, to
    // read what a fault did to the producer.
    if let Ok(debug) = std::env::var("OUTBOX_TEST_KAFKA_DEBUG") {
        let text = std::fs::read_to_string(&path).unwrap().replace(
            "[kafka.properties]\n",
            &format!("[kafka.properties]\n\"debug\" = \"{debug}\"\n"),
        );
        std::fs::write(&path, text).unwrap();
    }
    path
}

/// The records written more than once: id, then each copy's partition
/// and offset.
fn twice_written(records: &[workload::Arrived]) -> String {
    let mut by_id: BTreeMap<&str, Vec<&workload::Arrived>> = BTreeMap::new();
    for r in records {
        by_id.entry(r.id.as_str()).or_default().push(r);
    }
    by_id
        .into_iter()
        .filter(|(_, copies)| copies.len() > 1)
        .map(|(id, copies)| {
            let at: Vec<String> = copies
                .iter()
                .map(|c| format!("{}@{}", c.partition, c.offset))
                .collect();
            format!("{id} at {}", at.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The codes of the session restarts the relay logged, in order.
fn restart_codes(log: &str) -> Vec<String> {
    relay::plain(log)
        .lines()
        .filter(|l| l.contains("restarting the pipeline"))
        .map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("code="))
                .unwrap_or("?")
                .to_string()
        })
        .collect()
}

/// Appends the figures to `cluster-faults.jsonl` and prints them.
fn note(fault: Fault, mode: Mode, f: &Figures) {
    let secs = |d: Option<Duration>| d.map_or("null".into(), |d| format!("{:.1}", d.as_secs_f64()));
    let mut by_code: BTreeMap<&str, usize> = BTreeMap::new();
    for code in &f.restarts {
        *by_code.entry(code.as_str()).or_default() += 1;
    }
    let codes: Vec<String> = by_code
        .iter()
        .map(|(code, n)| format!(r#""{code}":{n}"#))
        .collect();
    let per_restart = match f.restarts.len() {
        0 => "null".to_string(),
        n => format!("{:.1}", f.duplicates as f64 / n as f64),
    };
    let line = format!(
        r#"{{"fault":"{}","mode":"{}","committed":{},"lost":{},"duplicates":{},"committed_duplicates":{},"duplicates_per_restart":{per_restart},"out_of_order":{},"detection_secs":{},"recovery_secs":{:.1},"restarts":{},"restart_codes":{{{}}}}}"#,
        fault.name(),
        mode.name(),
        f.committed,
        f.lost,
        f.duplicates,
        f.committed_duplicates
            .map_or("null".into(), |n| n.to_string()),
        f.out_of_order,
        secs(f.detection),
        f.recovery.as_secs_f64(),
        f.restarts.len(),
        codes.join(",")
    );
    eprintln!("{line}");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cluster-faults.jsonl");
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(file, "{line}");
    }
}
