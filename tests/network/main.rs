//! Network faults on the relay's links, through Toxiproxy: silent links
//! (black holes), slow links (latency with jitter, a bandwidth cap) and
//! resets (mid-stream and in the TLS handshake). Each test runs a steady
//! workload, injects one fault, heals it, and checks that nothing was lost,
//! that first deliveries kept per-key commit order and that the relay never
//! exited. It notes how long the relay took to notice the fault (`/readyz`
//! stops answering 200) and to publish again after the heal, in
//! `network-faults.jsonl` under Cargo's test directory; the network-faults page's table
//! comes from these figures. Durations are asserted only against the
//! detection budgets the user guide documents.
//!
//! Its own binary, one test at a time: the proxies are shared.

use std::collections::HashSet;
use std::io::Write;
use std::time::{Duration, Instant};

use outbox_cdc_testkit as common;

use common::relay::{self, RelayProcess};
use common::toxiproxy::{self, Link, Proxies, Stream, Toxic};
use common::workload::{self, Answer, Readiness, Tap, Workload};

mod soak;

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The budgets these tests configure (the user guide gives the defaults).
const WAL_RECEIVER_TIMEOUT_SECS: u64 = 10;
const QUERY_TIMEOUT_SECS: u64 = 10;
const SLOT_CHECK_INTERVAL_SECS: u64 = 5;
/// The Kafka probe's own timeout (`kafka::probe`).
const KAFKA_PROBE_SECS: u64 = 10;

/// What a fault should do to the relay.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// `/readyz` stops answering 200 within the budget; the relay
    /// recovers after the heal.
    Detected { budget: Duration },
    /// The relay keeps streaming, slower: ready throughout, no restart.
    Degraded,
    /// Connections break and are made again: retried as transient, never
    /// an operator stop; readiness may flicker.
    Retried,
}

struct Fault {
    name: &'static str,
    link: Link,
    toxics: Vec<(Stream, Toxic)>,
    expect: Expect,
    /// How long the fault stays (after detection, for `Detected`).
    hold: Duration,
    /// How the relay connects to PostgreSQL.
    pg: PgLink,
}

/// How the relay connects to PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PgLink {
    Plain,
    /// `verify-full` with the test CA.
    Tls,
}

/// The relay one fault runs against.
struct Relayed<'a> {
    db: &'a str,
    prefix: &'a str,
    http_port: u16,
    pg: PgLink,
}

struct Figures {
    detection: Option<Duration>,
    /// From the fault to the first log line of each kind of connection
    /// giving up on a silent server: (what, after).
    gave_up: Vec<(&'static str, Duration)>,
    recovery: Duration,
    records: usize,
    distinct: usize,
    lost: usize,
    restarts: usize,
    /// The relay's warnings and errors, for a failure's message.
    warnings: String,
}

/// The relay's configuration through the proxies, with this suite's budgets.
fn proxied_config(
    services: &common::Services,
    proxies: &Proxies,
    relayed: &Relayed<'_>,
) -> (String, std::path::PathBuf) {
    let Relayed {
        db,
        prefix,
        http_port,
        pg,
    } = *relayed;
    let proxied = common::Services {
        pg_host: "127.0.0.1".into(),
        pg_port: toxiproxy::port(&proxies.pg),
        pg_user: services.pg_user.clone(),
        pg_password: services.pg_password.clone(),
        kafka_bootstrap: proxies.kafka.clone(),
    };
    let slot = format!("{db}_relay");
    let extra = format!(
        "slot_check_interval_secs = {SLOT_CHECK_INTERVAL_SECS}\n\n[http]\nlisten = \"127.0.0.1:{http_port}\"\n"
    );
    let path = relay::config(&proxied, db, prefix, &slot, &extra);
    let text = std::fs::read_to_string(&path).unwrap();
    let budgets = format!(
        "wal_receiver_timeout_secs = {WAL_RECEIVER_TIMEOUT_SECS}\nquery_timeout_secs = {QUERY_TIMEOUT_SECS}\n"
    );
    let text = match pg {
        // The server's certificate names localhost.
        PgLink::Tls => {
            let ca = std::env::var("OUTBOX_TEST_PG_CA").expect("OUTBOX_TEST_PG_CA");
            text.replace("host = \"127.0.0.1\"", "host = \"localhost\"")
                .replace(
                    "sslmode = \"disable\"\n",
                    &format!("sslmode = \"verify-full\"\nsslrootcert = \"{ca}\"\n{budgets}"),
                )
        }
        PgLink::Plain => text.replace(
            "sslmode = \"disable\"\n",
            &format!("sslmode = \"disable\"\n{budgets}"),
        ),
    };
    assert!(text.contains("wal_receiver_timeout_secs"));
    std::fs::write(&path, text).unwrap();
    (slot, path)
}

async fn marker(db: &tokio_postgres::Client) -> String {
    workload::marker(db).await.unwrap()
}

async fn run(fault: Fault) -> Figures {
    let services = common::services().expect("the network tests need the services");
    let _alone = ONE_AT_A_TIME.lock().await;
    let proxies = Proxies::from_env();
    proxies.reset();
    let prefix = common::unique_prefix("net");
    let db = common::cdc_db(&services, "net", &prefix).await;
    let topic = format!("{prefix}keyed");
    common::kafka::create_topic(&services.kafka_bootstrap, &topic, 6).await;
    let http_port = common::free_port();
    let relayed = Relayed {
        db: &db.name,
        prefix: &prefix,
        http_port,
        pg: fault.pg,
    };
    let (slot, config) = proxied_config(&services, &proxies, &relayed);
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
    let isolation = common::kafka::READ_UNCOMMITTED;
    let tap = Tap::start(
        &services.kafka_bootstrap,
        std::slice::from_ref(&topic),
        isolation,
    );
    let load = Workload::start(
        &services,
        &db.name,
        workload::Load {
            writers: 2,
            per_sec: 20,
            keys: 50,
            seed: 35,
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Every connection of the relay goes through the proxies.
    let ports = toxiproxy::remote_ports(relay.child.id());
    let behind = toxiproxy::port(&proxies.kafka_behind);
    let direct_kafka = toxiproxy::port(&services.kafka_bootstrap);
    assert!(
        ports.contains(&toxiproxy::port(&proxies.kafka))
            && ports.contains(&toxiproxy::port(&proxies.pg)),
        "the relay's connections {ports:?} should include both proxies"
    );
    assert!(
        !ports.contains(&behind)
            && !ports.contains(&direct_kafka)
            && !ports.contains(&services.pg_port),
        "the relay bypassed a proxy: its connections {ports:?}"
    );

    let injected = Instant::now();
    let injected_at = std::time::SystemTime::now();
    for (i, (stream, toxic)) in fault.toxics.iter().enumerate() {
        proxies.add(fault.link, &format!("fault{i}"), *stream, toxic);
    }
    let detection = match fault.expect {
        Expect::Detected { budget } => {
            let seen = ready.wait(Answer::NotReady, injected, budget + Duration::from_secs(5));
            let Some(at) = seen else {
                panic!(
                    "{}: not detected within its budget of {budget:?}:\n{}",
                    fault.name,
                    relay.log_text()
                );
            };
            tokio::time::sleep(fault.hold).await;
            Some(at - injected)
        }
        Expect::Degraded | Expect::Retried => {
            tokio::time::sleep(fault.hold).await;
            None
        }
    };
    if matches!(fault.expect, Expect::Degraded) {
        assert!(
            ready.first(Answer::NotReady, injected).is_none(),
            "{}: the relay stopped being ready under a slow link:\n{}",
            fault.name,
            relay.log_text()
        );
    }
    proxies.reset();
    let healed = Instant::now();
    let mark = marker(&db.client).await;
    let missing = tap.wait_for(&HashSet::from([mark.clone()]), Duration::from_secs(120));
    assert!(
        missing.is_empty(),
        "{}: nothing published within 120 s of the heal:\n{}",
        fault.name,
        relay.log_text()
    );
    let arrived = tap.arrived_at(&mark).unwrap();
    let recovery = arrived.saturating_duration_since(healed);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let committed = load.stop().await;

    let table = workload::outbox_ids(&db.client).await;
    assert!(committed.keys().all(|id| table.contains(id)));
    let missing = tap.wait_for(&table, Duration::from_secs(120));
    let records = tap.records();
    let distinct: HashSet<&str> = records.iter().map(|r| r.id.as_str()).collect();
    let log = relay.log_text();
    let restarts = relay::plain(&log)
        .lines()
        .filter(|l| l.contains("restarting the pipeline"))
        .count();
    let figures = Figures {
        detection,
        gave_up: gave_up(&log, injected_at),
        recovery,
        records: records.len(),
        distinct: distinct.len(),
        lost: missing.len(),
        restarts,
        warnings: relay::warnings_in(std::slice::from_ref(&log)),
    };
    note(&fault, &figures);
    assert!(
        missing.is_empty(),
        "{}: {} committed rows never reached Kafka:\n{}",
        fault.name,
        missing.len(),
        figures.warnings
    );
    assert_eq!(
        workload::out_of_order(&records),
        Vec::<String>::new(),
        "{}: first deliveries out of per-key commit order",
        fault.name
    );
    assert!(
        relay.child.try_wait().unwrap().is_none(),
        "{}: the relay exited:\n{log}",
        fault.name
    );
    assert_eq!(common::rows_with_status(&db.client, "FAILED").await, 0);
    match fault.expect {
        Expect::Degraded => assert_eq!(
            restarts, 0,
            "{}: a slow link restarted the pipeline:\n{}",
            fault.name, figures.warnings
        ),
        Expect::Detected { .. } | Expect::Retried => {}
    }
    // A transient fault is never an operator's stop.
    for line in relay::plain(&log).lines() {
        assert!(
            !line.contains("awaiting the operator") && !line.contains("class=operator"),
            "{}: an operator stop for a network fault: {line}",
            fault.name
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

/// The relay's log lines that say a connection was given up as silent, by
/// connection: the replication stream, the journal, the bookkeeping's
/// marks and the slot guard.
const GIVE_UPS: [(&str, &[&str]); 4] = [
    ("replication", &["postgres.wal_receiver_timeout_secs"]),
    (
        "journal",
        &[
            "answer the journal's insert",
            "answer folding the journal",
            "answer reading the flushed WAL position",
        ],
    ),
    ("marks", &["answer marking rows"]),
    // The guard's tick reads the slot, then counts the unpublished rows: a
    // fault that falls between the two silences the count.
    (
        "guard",
        &[
            "answer the slot guard",
            "answer counting the rows not yet published",
            "answer a heartbeat",
        ],
    ),
];

fn gave_up(log: &str, since: std::time::SystemTime) -> Vec<(&'static str, Duration)> {
    let plain = relay::plain(log);
    GIVE_UPS
        .iter()
        .filter_map(|(what, needles)| {
            plain
                .lines()
                .filter(|l| needles.iter().any(|n| l.contains(n)))
                .filter_map(log_time)
                .find_map(|at| at.duration_since(since).ok())
                .map(|after| (*what, after))
        })
        .collect()
}

/// A log line's timestamp (`2026-12-03T16:33:40.281942Z ...`).
fn log_time(line: &str) -> Option<std::time::SystemTime> {
    let stamp = line.split_whitespace().next()?.strip_suffix('Z')?;
    let (date, time) = stamp.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':');
    let (h, min, sec) = (
        t.next()?.parse::<u64>().ok()?,
        t.next()?.parse::<u64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
    );
    // Days since 1970-01-01 (Howard Hinnant's days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = u64::try_from(era * 146_097 + doe - 719_468).ok()?;
    let secs = days * 86_400 + h * 3600 + min * 60;
    Some(std::time::UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_secs_f64(sec))
}

/// Appends the figures to `network-faults.jsonl` and prints them.
fn note(fault: &Fault, f: &Figures) {
    let secs =
        |d: Option<Duration>| d.map_or("null".to_string(), |d| format!("{:.1}", d.as_secs_f64()));
    let line = format!(
        r#"{{"fault":"{}","link":"{}","detection_secs":{},"gave_up_secs":{{{}}},"recovery_secs":{},"records":{},"distinct":{},"lost":{},"duplicates":{},"restarts":{}}}"#,
        fault.name,
        fault.link.proxy(),
        secs(f.detection),
        f.gave_up
            .iter()
            .map(|(what, after)| format!(r#""{what}":{:.1}"#, after.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(","),
        secs(Some(f.recovery)),
        f.records,
        f.distinct,
        f.lost,
        f.records - f.distinct,
        f.restarts
    );
    eprintln!("{line}");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("network-faults.jsonl");
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(file, "{line}");
    }
}

fn both(toxic: Toxic) -> Vec<(Stream, Toxic)> {
    vec![
        (Stream::Downstream, toxic.clone()),
        (Stream::Upstream, toxic),
    ]
}

/// A silent PostgreSQL link: the replication stream, the bookkeeping and
/// the slot guard's connections all stop hearing the server at once (a
/// dropped NAT entry). The replication receive timeout notices first.
#[tokio::test(flavor = "multi_thread")]
async fn a_black_holed_postgres_link_is_noticed_and_left() {
    let f = run(Fault {
        name: "postgres black hole",
        link: Link::Postgres,
        toxics: both(Toxic::BlackHole),
        expect: Expect::Detected {
            budget: Duration::from_secs(WAL_RECEIVER_TIMEOUT_SECS + 1),
        },
        hold: Duration::from_secs(QUERY_TIMEOUT_SECS + 2),
        pg: PgLink::Plain,
    })
    .await;
    assert!(
        f.restarts >= 1,
        "the silent session was not replaced:\n{}",
        f.warnings
    );
    // The stream and the guard (which reads every few seconds) each gave up
    // on their own budget, neither waited on TCP. A journal insert that was
    // out gives up on the same budget and closes the stream itself (the
    // slot waits for it), so the stream's side is whichever came first; the
    // journal and the marks give up only if they had a statement out
    // (figures in the report).
    let budget = Duration::from_secs(
        WAL_RECEIVER_TIMEOUT_SECS.max(QUERY_TIMEOUT_SECS) + SLOT_CHECK_INTERVAL_SECS + 2,
    );
    let first = |kinds: &[&str]| {
        f.gave_up
            .iter()
            .filter(|(w, _)| kinds.contains(w))
            .map(|(_, a)| *a)
            .min()
    };
    for (what, kinds) in [
        ("replication", &["replication", "journal"][..]),
        ("guard", &["guard"][..]),
    ] {
        let after = first(kinds);
        assert!(
            after.is_some_and(|a| a <= budget),
            "the {what} connection gave up after {after:?} (budget {budget:?}); all: {:?}\n{}",
            f.gave_up,
            f.warnings
        );
    }
}

/// A broker that accepts connections and never answers.
#[tokio::test(flavor = "multi_thread")]
async fn a_black_holed_broker_is_reported_and_survived() {
    run(Fault {
        name: "kafka black hole",
        link: Link::Kafka,
        toxics: both(Toxic::BlackHole),
        expect: Expect::Detected {
            budget: Duration::from_secs(SLOT_CHECK_INTERVAL_SECS + KAFKA_PROBE_SECS + 1),
        },
        hold: Duration::from_secs(12),
        pg: PgLink::Plain,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn latency_with_jitter_on_postgres_slows_without_restarts() {
    run(Fault {
        name: "postgres latency 200 ms ± 50 ms",
        link: Link::Postgres,
        toxics: both(Toxic::Latency {
            ms: 200,
            jitter_ms: 50,
        }),
        expect: Expect::Degraded,
        hold: Duration::from_secs(12),
        pg: PgLink::Plain,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn latency_with_jitter_on_kafka_slows_without_restarts() {
    run(Fault {
        name: "kafka latency 200 ms ± 50 ms",
        link: Link::Kafka,
        toxics: both(Toxic::Latency {
            ms: 200,
            jitter_ms: 50,
        }),
        expect: Expect::Degraded,
        hold: Duration::from_secs(12),
        pg: PgLink::Plain,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_100_kb_per_second_postgres_link_slows_without_restarts() {
    run(Fault {
        name: "postgres bandwidth 100 KB/s",
        link: Link::Postgres,
        toxics: both(Toxic::Bandwidth { kb_per_sec: 100 }),
        expect: Expect::Degraded,
        hold: Duration::from_secs(12),
        pg: PgLink::Plain,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_100_kb_per_second_kafka_link_slows_without_restarts() {
    run(Fault {
        name: "kafka bandwidth 100 KB/s",
        link: Link::Kafka,
        toxics: both(Toxic::Bandwidth { kb_per_sec: 100 }),
        expect: Expect::Degraded,
        hold: Duration::from_secs(12),
        pg: PgLink::Plain,
    })
    .await;
}

/// Every PostgreSQL connection reset as soon as data flows.
#[tokio::test(flavor = "multi_thread")]
async fn resets_mid_stream_are_retried() {
    let f = run(Fault {
        name: "postgres reset mid-stream",
        link: Link::Postgres,
        toxics: vec![(Stream::Downstream, Toxic::ResetPeer { after_ms: 0 })],
        expect: Expect::Retried,
        hold: Duration::from_secs(8),
        pg: PgLink::Plain,
    })
    .await;
    assert!(f.restarts >= 1, "the reset session was replaced");
}

/// With TLS to PostgreSQL, every new connection is reset 150 ms after it
/// opens: the server's answers are 100 ms late, so the reset falls in the
/// TLS handshake, after the server agreed to TLS.
#[tokio::test(flavor = "multi_thread")]
async fn resets_in_the_tls_handshake_are_retried() {
    let f = run(Fault {
        name: "postgres reset in the TLS handshake",
        link: Link::Postgres,
        toxics: vec![
            (
                Stream::Downstream,
                Toxic::Latency {
                    ms: 100,
                    jitter_ms: 0,
                },
            ),
            (Stream::Downstream, Toxic::ResetPeer { after_ms: 150 }),
        ],
        expect: Expect::Retried,
        hold: Duration::from_secs(10),
        pg: PgLink::Tls,
    })
    .await;
    assert!(f.restarts >= 1, "the reset session was replaced");
}
