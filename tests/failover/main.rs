//! A primary failover under load, on a real PostgreSQL 17 primary and a
//! streaming physical standby made by copying the stopped primary's data
//! directory: with a failover slot the relay continues on the promoted
//! standby and loses nothing; without one it stops with `SLOT_MISSING`, and
//! `cutover --to cdc` recovers every row. Its own binary: the clusters are
//! its own, and a shared-service restart of `tests/faults` must not hit it.

#[macro_use]
extern crate outbox_cdc_testkit;
/// The shared harness (`tests/support`).
use outbox_cdc_testkit as common;

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::kafka;
use common::relay::{self as relay, RelayProcess};
use outbox_cdc::lsn::Lsn;
use tokio_postgres::config::TargetSessionAttrs;
use tokio_postgres::{Client, NoTls};

mod pair;

use pair::{Cluster, Pair, SlotKind};

/// A client of whichever of the pair accepts writes, as an application
/// with libpq's multi-host string would have.
async fn writable(pair: &Pair, db: &str) -> Option<Client> {
    let (client, conn) = tokio_postgres::Config::new()
        .host("127.0.0.1")
        .port(pair.primary.port)
        .host("127.0.0.1")
        .port(pair.standby.port)
        .user("postgres")
        .dbname(db)
        .target_session_attrs(TargetSessionAttrs::ReadWrite)
        .connect_timeout(Duration::from_secs(2))
        .connect(NoTls)
        .await
        .ok()?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Some(client)
}

/// Writes one-row transactions with a per-key sequence number until `stop`,
/// reconnecting after failures; returns, per accepted commit, a WAL
/// position at or after its end (for the duplicate windows).
async fn write_until(
    pair: &Pair,
    db: &str,
    keys: usize,
    stop: Arc<AtomicBool>,
) -> BTreeMap<String, Lsn> {
    let mut written = BTreeMap::new();
    let mut client: Option<Client> = None;
    let mut t = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let Some(c) = client.as_mut() else {
            client = writable(pair, db).await;
            if client.is_none() {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            continue;
        };
        let key = format!("key-{}", (t * 31) % keys);
        let attempt = async {
            let tx = c.transaction().await?;
            let row = tx.query_one(common::KEYED_INSERT, &[&key]).await?;
            tx.commit().await?;
            let after: String = c
                .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
                .await?
                .get(0);
            Ok::<_, tokio_postgres::Error>((row.get::<_, String>(0), after))
        };
        match attempt.await {
            Ok((id, after)) => {
                written.insert(id, after.parse().unwrap());
                t += 1;
            }
            Err(_) => client = None,
        }
    }
    written
}

async fn prepare_db(pair: &Pair, label: &str, prefix: &str) -> String {
    let services = pair.services("127.0.0.1:1");
    let db = common::migrated_db(&services, label, prefix).await;
    db.declare_cdc().await;
    db.client
        .batch_execute(
            "CREATE TABLE public.key_seq (k text PRIMARY KEY, n bigint NOT NULL);
             INSERT INTO public.key_seq SELECT 'key-' || g, 0 FROM generate_series(0, 49) g;",
        )
        .await
        .unwrap();
    db.name.clone()
}

/// What the slot named `slot` is on `cluster`: (synced, temporary,
/// confirmed position), or `None`.
async fn slot_on(c: &Client, slot: &str) -> Option<(bool, bool, Option<Lsn>)> {
    c.query_opt(
        "SELECT synced, temporary, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
        &[&slot],
    )
    .await
    .unwrap()
    .map(|r| {
        (
            r.get(0),
            r.get(1),
            r.get::<_, Option<String>>(2).and_then(|s| s.parse().ok()),
        )
    })
}

/// `outbox-cdc check --format json` on `config`: (exit ok, the
/// failover_slot finding's level and detail).
fn check_failover(config: &std::path::Path) -> (bool, String, String) {
    let out = Command::new(crate::common::cli::bin())
        .args(["check", "--format", "json", "--config"])
        .arg(config)
        .env("OUTBOX_TEST_PG_PASSWORD", "unused-under-trust")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    let finding = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "failover_slot")
        .unwrap_or_else(|| panic!("no failover_slot finding: {report}"))
        .clone();
    (
        out.status.success(),
        finding["level"].as_str().unwrap().to_string(),
        finding["detail"].as_str().unwrap().to_string(),
    )
}

async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn slot_active(c: &Cluster, slot: &str) -> bool {
    let client = c.connect("postgres").await;
    client
        .query_opt(
            "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .ok()
        .flatten()
        .is_some_and(|r| r.get::<_, bool>(0))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_promoted_standby_with_a_synchronised_slot_continues_the_stream_without_loss() {
    let services = require_services!();
    let pair = Pair::start("sync", 25517).await;
    let prefix = common::unique_prefix("fo");
    let db = prepare_db(&pair, "failover", &prefix).await;
    let (slot, config) = pair.relay_config(&db, &prefix, SlotKind::Failover);
    // As an operator would: the cutover makes the slot (with FAILOVER, and
    // an exported snapshot for the hand-over).
    cutover_to_cdc(&config);
    let mut relay = RelayProcess::spawn(&config);
    let primary = pair.primary.connect(&db).await;
    common::replication::wait_streaming(&primary, &slot).await;
    assert!(
        failover_flag(&primary, &slot).await,
        "the cutover created the slot with FAILOVER"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let pair = Arc::new(pair);
    let writer = {
        let (pair, db, stop) = (pair.clone(), db.clone(), stop.clone());
        tokio::spawn(async move { write_until(&pair, &db, 50, stop).await })
    };
    // Streaming under load, and the standby holds a synchronised copy.
    let standby = pair.standby.connect("postgres").await;
    wait_for(
        "the standby has a synchronised copy of the slot",
        Duration::from_secs(90),
        || async { matches!(slot_on(&standby, &slot).await, Some((true, false, Some(_)))) },
    )
    .await;
    // `check` reads the primary and the listed standby and finds nothing missing.
    let (_, level, detail) = check_failover(&config);
    assert_eq!(level, "ok", "{detail}");
    assert!(
        detail.contains(&format!(
            "standbys 127.0.0.1:{} keep a synchronised copy",
            pair.standby.port
        )),
        "{detail}"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    let synced_at_kill = slot_on(&standby, &slot).await.and_then(|s| s.2).unwrap();
    let confirmed_at_kill = common::replication::confirmed_flush(&primary, &slot).await;
    let reached: Lsn = common::replication::insert_lsn(&primary).await;
    drop(primary);
    drop(standby);

    let killed = Instant::now();
    pair.primary.pg_ctl(&["-m", "immediate", "stop"]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    pair.standby.pg_ctl(&["promote"]);
    let promoted = Instant::now();
    wait_for(
        "the relay streams from the promoted standby",
        Duration::from_secs(120),
        || {
            let pair = pair.clone();
            let slot = slot.clone();
            async move { slot_active(&pair.standby, &slot).await }
        },
    )
    .await;
    let back_after = killed.elapsed();
    let back_after_promotion = promoted.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, Ordering::Relaxed);
    let accepted = writer.await.unwrap();

    // What the promoted primary holds is what must be in Kafka, and nothing else.
    let new_primary = pair.standby.connect(&db).await;
    let (in_db, records) = rows_and_records(&new_primary, &services, &prefix).await;
    let ids = kafka::by_id(&records);
    let in_kafka: HashSet<String> = ids.keys().cloned().collect();
    assert_eq!(
        in_db.difference(&in_kafka).count(),
        0,
        "every row the promoted primary holds is in Kafka"
    );
    assert_eq!(
        in_kafka.difference(&in_db).count(),
        0,
        "Kafka has no row the promoted primary lacks (the relay never ran ahead of the standby)"
    );
    for (key, ns) in kafka::first_delivery_order(&records) {
        let expected: Vec<u64> = (1..=ns.len() as u64).collect();
        assert_eq!(
            ns, expected,
            "first deliveries of {key} are in commit order"
        );
    }
    // Duplicates only from the window the relay had not settled when the
    // primary died: it logs that position when it restarts its pipeline.
    let log = relay.log_text();
    let mut windows: Vec<(Lsn, Lsn)> = vec![(confirmed_at_kill, reached)];
    windows.extend(
        relay::replays_in(&log)
            .into_iter()
            .map(|settled| (settled, Lsn(u64::MAX))),
    );
    let mut duplicates = 0;
    for copies in ids.values().filter(|c| c.len() > 1) {
        duplicates += copies.len() - 1;
        let written: Lsn = std::str::from_utf8(copies[0].header("msg.causation-id").unwrap())
            .unwrap()
            .parse()
            .unwrap();
        let Some(committed_by) = accepted.get(&copies[0].id()) else {
            continue; // its commit's outcome reached no client: no bound known
        };
        assert!(
            windows
                .iter()
                .any(|(from, to)| *committed_by >= *from && written <= *to),
            "message {} (written at {written}, committed by {committed_by}) came twice outside every unsettled window {windows:?}",
            copies[0].id()
        );
    }
    eprintln!(
        "failover: {} rows committed ({} accepted by the writer), {} records, {duplicates} duplicates; \
         streaming again {:.1} s after the kill ({:.1} s after the promotion); synchronised position at the kill {synced_at_kill}",
        in_db.len(),
        accepted.len(),
        records.len(),
        back_after.as_secs_f64(),
        back_after_promotion.as_secs_f64()
    );
    assert!(
        in_db.len() > 500,
        "the writer kept writing through the failover"
    );

    relay.signal("TERM");
    assert!(relay
        .wait(Duration::from_secs(60))
        .expect("stops on SIGTERM")
        .success());
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_failover_slot_the_relay_stops_with_slot_missing_and_cutover_recovers_every_row()
{
    let services = require_services!();
    let pair = Pair::start("nosync", 25527).await;
    let prefix = common::unique_prefix("nofo");
    let db = prepare_db(&pair, "nofailover", &prefix).await;
    let (slot, config) = pair.relay_config(&db, &prefix, SlotKind::PrimaryOnly);
    let mut relay = RelayProcess::spawn(&config);
    let primary = pair.primary.connect(&db).await;
    common::replication::wait_streaming(&primary, &slot).await;

    let stop = Arc::new(AtomicBool::new(false));
    let pair = Arc::new(pair);
    let writer = {
        let (pair, db, stop) = (pair.clone(), db.clone(), stop.clone());
        tokio::spawn(async move { write_until(&pair, &db, 50, stop).await })
    };
    tokio::time::sleep(Duration::from_secs(4)).await;
    // Asked for failover, `check` names what a promoted standby would lack:
    // this slot was made without FAILOVER, so the standby has no copy.
    let asking = config.with_file_name("asking-failover.toml");
    std::fs::write(
        &asking,
        std::fs::read_to_string(&config)
            .unwrap()
            .replace("failover_slot = false", "failover_slot = true"),
    )
    .unwrap();
    let (healthy, level, detail) = check_failover(&asking);
    assert!(!healthy);
    assert_eq!(level, "error", "{detail}");
    assert!(detail.contains("is not a failover slot"), "{detail}");
    assert!(detail.contains("has no copy of slot"), "{detail}");
    drop(primary);
    pair.primary.pg_ctl(&["-m", "immediate", "stop"]);
    pair.standby.pg_ctl(&["promote"]);
    let status = relay
        .wait(Duration::from_secs(120))
        .expect("the relay stops on its own");
    assert!(!status.success());
    let log = relay.log_text();
    assert!(log.contains("SLOT_MISSING"), "{log}");
    assert!(log.contains("outbox-cdc cutover --to cdc"), "{log}");
    // Writes go on against the new primary while no relay runs.
    tokio::time::sleep(Duration::from_secs(2)).await;

    cutover_to_cdc(&config);
    let mut relay = RelayProcess::spawn(&config);
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();

    let new_primary = pair.standby.connect(&db).await;
    let (in_db, records) = rows_and_records(&new_primary, &services, &prefix).await;
    let in_kafka: HashSet<String> = kafka::by_id(&records).keys().cloned().collect();
    assert_eq!(
        in_db.difference(&in_kafka).count(),
        0,
        "after the cutover every row of the promoted primary is in Kafka"
    );
    eprintln!(
        "failover without a failover slot: {} rows, {} records ({} duplicates)",
        in_db.len(),
        records.len(),
        records.len() - in_kafka.len()
    );
    relay.signal("TERM");
    assert!(relay
        .wait(Duration::from_secs(60))
        .expect("stops on SIGTERM")
        .success());

    // Turned on later, `postgres.failover_slot` makes the existing slot a
    // failover slot at start-up.
    assert!(!failover_flag(&new_primary, &slot).await);
    let mut relay = RelayProcess::spawn(&asking);
    common::replication::wait_streaming(&new_primary, &slot).await;
    assert!(
        failover_flag(&new_primary, &slot).await,
        "{}",
        relay.log_text()
    );
    relay.signal("TERM");
    assert!(relay
        .wait(Duration::from_secs(60))
        .expect("stops on SIGTERM")
        .success());
}

/// The ids the database holds, and the records of the test's topic read
/// until every one of them arrived (or a minute passed without a record).
async fn rows_and_records(
    c: &Client,
    services: &common::Services,
    prefix: &str,
) -> (HashSet<String>, Vec<kafka::Consumed>) {
    let in_db: HashSet<String> =
        common::texts(c, "SELECT message_id::text FROM public.messaging_outbox")
            .await
            .into_iter()
            .collect();
    let topic = format!("{prefix}keyed");
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        in_db.len(),
        Duration::from_secs(60),
    );
    (in_db, records)
}

/// `outbox-cdc cutover --to cdc` with `config`, which must succeed.
fn cutover_to_cdc(config: &std::path::Path) {
    let out = Command::new(crate::common::cli::bin())
        .args(["cutover", "--to", "cdc", "--config"])
        .arg(config)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cutover: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn failover_flag(c: &Client, slot: &str) -> bool {
    c.query_one(
        "SELECT failover FROM pg_replication_slots WHERE slot_name = $1",
        &[&slot],
    )
    .await
    .unwrap()
    .get(0)
}
