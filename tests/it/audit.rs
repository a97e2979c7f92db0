//! `outbox-cdc audit` against the real PostgreSQL and Kafka: a window
//! streamed through SIGKILLs audits clean; records deleted from a
//! partition's head are reported lost by id; a duplicate, a reordered
//! record, a record that differs from its row and an orphan, made by hand,
//! are each reported with their offsets.

use std::collections::BTreeSet;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde_json::Value;

use crate::common::cli::{self, Cli};
use crate::common::kafka::{self, Consumed};
use crate::common::relay::{self, RelayProcess};
use crate::common::{self, replication as rep};

/// The database's clock now, as `--since` takes it.
async fn now(client: &tokio_postgres::Client) -> String {
    client
        .query_one(
            "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

async fn insert(client: &tokio_postgres::Client, destination: &str, key: &str) -> String {
    client
        .query_one(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key)
             VALUES (gen_random_uuid(), $1, 'T', 1, 'text/plain', convert_to('body of ' || $2, 'UTF8'), $2) RETURNING message_id::text",
            &[&destination, &key],
        )
        .await
        .unwrap()
        .get(0)
}

/// Runs `audit` as JSON: the exit status and the report.
fn audit(config: &std::path::Path, since: &str) -> (Option<i32>, Value) {
    let out = Cli::new(&["audit", "--since", since, "--format", "json"])
        .config(config)
        .output();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("a JSON report ({e}): {}", cli::text(&out)));
    (out.status.code(), report)
}

fn findings<'a>(report: &'a Value, kind: &str) -> Vec<&'a Value> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == kind)
        .collect()
}

async fn stop(mut relay: RelayProcess) {
    relay.signal("TERM");
    let status = relay.wait(Duration::from_secs(30));
    assert!(status.is_some_and(|s| s.success()), "{}", relay.log_text());
}

async fn delete_before(bootstrap: &str, topic: &str, offset: i64) {
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(offset))
        .unwrap();
    let done = admin
        .delete_records(&tpl, &AdminOptions::new())
        .await
        .unwrap();
    let low = done.find_partition(topic, 0).unwrap();
    assert_eq!(low.error(), Ok(()));
    assert_eq!(
        low.offset(),
        Offset::Offset(offset),
        "the new low watermark"
    );
}

#[tokio::test]
async fn a_window_streamed_through_sigkills_audits_clean() {
    let services = require_services!();
    let prefix = common::unique_prefix("audit");
    let db = common::cdc_db(&services, "audit", &prefix).await;
    let since = now(&db.client).await;
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    let mut relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    const TOTAL: usize = 6_000;
    let writer = common::spawn_write_keyed(&db.name, 3, TOTAL / 3, 40);
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(800)).await;
        relay.signal("KILL");
        relay.wait(Duration::from_secs(10)).expect("killed");
        relay = RelayProcess::spawn(&config);
    }
    writer.await.unwrap();
    common::wait_until_marked(&db.client).await;

    let (status, report) = audit(&config, &since);
    assert_eq!(status, Some(0), "{report:#}");
    assert_eq!(report["rows"], TOTAL, "{report:#}");
    assert_eq!(report["delivered"], TOTAL);
    for count in [
        "lost",
        "unsettled",
        "failed",
        "differing",
        "out_of_order",
        "orphans",
    ] {
        assert_eq!(report[count], 0, "{count}: {report:#}");
    }
    let records = report["records"].as_u64().unwrap();
    let duplicates = report["duplicates"].as_u64().unwrap();
    assert_eq!(records, TOTAL as u64 + duplicates, "{report:#}");

    let human = Cli::new(&["audit", "--since", &since])
        .config(&config)
        .output();
    assert!(human.status.success());
    eprintln!("{}", String::from_utf8_lossy(&human.stdout));
    stop(relay).await;
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

#[tokio::test]
async fn records_deleted_from_a_partition_are_reported_lost_by_id() {
    let services = require_services!();
    let prefix = common::unique_prefix("auditdel");
    let db = common::cdc_db(&services, "auditdel", &prefix).await;
    let topic = format!("{prefix}ledger");
    kafka::create_topic(&services.kafka_bootstrap, &topic, 1).await;
    let since = now(&db.client).await;
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    let relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    for i in 0..20 {
        insert(&db.client, "ledger", &format!("k{}", i % 4)).await;
    }
    common::wait_until_marked(&db.client).await;
    stop(relay).await;

    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        20,
        Duration::from_secs(10),
    );
    let gone: BTreeSet<String> = records
        .iter()
        .filter(|r| r.offset < 6)
        .map(Consumed::id)
        .collect();
    let kept: BTreeSet<String> = records
        .iter()
        .filter(|r| r.offset >= 6)
        .map(Consumed::id)
        .collect();
    let lost: BTreeSet<String> = gone.difference(&kept).cloned().collect();
    assert_eq!(lost.len(), 6, "one record per row in a clean run");
    delete_before(&services.kafka_bootstrap, &topic, 6).await;

    let (status, report) = audit(&config, &since);
    assert_eq!(status, Some(3), "AUDIT_LOST: {report:#}");
    assert_eq!(report["lost"], 6, "{report:#}");
    let reported: BTreeSet<String> = findings(&report, "lost")
        .iter()
        .map(|f| f["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(reported, lost);
    for f in findings(&report, "lost") {
        assert_eq!(f["status"], "PUBLISHED", "the relay had published it: {f}");
        assert_eq!(f["topic"], topic.as_str());
    }
    assert_eq!(report["delivered"], 14);
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

#[tokio::test]
async fn a_duplicate_a_reordered_a_differing_and_an_orphan_record_made_by_hand_are_reported() {
    let services = require_services!();
    let prefix = common::unique_prefix("audithand");
    let db = common::cdc_db(&services, "audithand", &prefix).await;
    let topic = format!("{prefix}hand");
    kafka::create_topic(&services.kafka_bootstrap, &topic, 1).await;
    let since = now(&db.client).await;
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    let relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    let a1 = insert(&db.client, "hand", "r").await;
    // Commits within one millisecond share a record timestamp, and the
    // audit accuses no one between them: a1 and a2 commit apart.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let a2 = insert(&db.client, "hand", "r").await;
    let b = insert(&db.client, "hand", "d").await;
    common::wait_until_marked(&db.client).await;
    stop(relay).await;
    // A row no relay publishes: its only record is made by hand.
    let c = insert(&db.client, "hand", "c").await;

    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        3,
        Duration::from_secs(10),
    );
    let at = |id: &str| records.iter().find(|r| r.id() == id).unwrap().clone();
    let (r1, r2, rb) = (at(&a1), at(&a2), at(&b));
    assert_eq!((r1.offset, r2.offset, rb.offset), (0, 1, 2));
    // a1's first delivery goes after a2's: out of its key's order.
    delete_before(&services.kafka_bootstrap, &topic, 1).await;
    kafka::produce_copy(&services.kafka_bootstrap, &r1, None, None).await; // 3
    kafka::produce_copy(&services.kafka_bootstrap, &rb, None, None).await; // 4: b again
    let stranger = "7d444840-9dc0-11d1-b245-5ffdce74fad2";
    kafka::produce_copy(&services.kafka_bootstrap, &rb, Some(stranger), None).await; // 5: no row
    kafka::produce_copy(&services.kafka_bootstrap, &rb, Some(&c), Some(b"tampered")).await; // 6

    let (status, report) = audit(&config, &since);
    assert_eq!(status, Some(4), "AUDIT_MISMATCH: {report:#}");
    assert_eq!(report["lost"], 0, "{report:#}");
    assert_eq!(report["rows"], 4);

    let reordered = findings(&report, "out_of_order");
    assert_eq!(reordered.len(), 1, "{report:#}");
    assert_eq!(reordered[0]["id"], a1.as_str());
    assert_eq!(reordered[0]["after"], a2.as_str());
    assert_eq!(reordered[0]["offset"], 3);
    assert_eq!(reordered[0]["key"], "r");

    let duplicates = findings(&report, "duplicate");
    assert_eq!(duplicates.len(), 1, "{report:#}");
    assert_eq!(duplicates[0]["id"], b.as_str());
    assert_eq!(duplicates[0]["first_offset"], 2);
    assert_eq!(duplicates[0]["offset"], 4);

    let orphans = findings(&report, "orphan");
    assert_eq!(orphans.len(), 1, "{report:#}");
    assert_eq!(orphans[0]["id"], stranger);
    assert_eq!(orphans[0]["offset"], 5);

    let differing = findings(&report, "differs");
    assert_eq!(differing.len(), 1, "{report:#}");
    assert_eq!(differing[0]["id"], c.as_str());
    assert_eq!(differing[0]["status"], "PENDING");
    let fields: Vec<&str> = differing[0]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(fields.contains(&"value"), "{fields:?}");
    assert!(fields.contains(&"key"), "{fields:?}");
    assert!(fields.contains(&"header msg.partition-key"), "{fields:?}");

    let human = Cli::new(&["audit", "--since", &since])
        .config(&config)
        .output();
    assert_eq!(human.status.code(), Some(4));
    let text = String::from_utf8_lossy(&human.stdout);
    eprintln!("{text}");
    assert!(text.contains(&format!("OUT OF ORDER {a1}")), "{text}");
    assert!(cli::text(&human).contains("AUDIT_MISMATCH"));
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

#[test]
fn a_malformed_window_is_refused_before_anything_connects() {
    let out = Cli::new(&["audit", "--since", "yesterday"])
        .config(std::path::Path::new("/nonexistent/outbox-cdc.toml"))
        .output();
    assert_eq!(out.status.code(), Some(2), "{}", cli::text(&out));
    let text = cli::text(&out);
    assert!(
        text.contains("ARGUMENT_INVALID") && text.contains("--since"),
        "{text}"
    );
}

/// The peak resident memory of `audit` over a window of a million rows,
/// read from `/proc` while it runs (`VmHWM`). By hand:
/// `cargo test --release --test it -- --ignored audit::a_million_rows --nocapture`.
#[tokio::test]
#[ignore = "a measurement: about a minute of writing and relaying, then the audit"]
async fn a_million_rows_are_audited_in_bounded_memory() {
    const ROWS: i64 = 1_000_000;
    let services = require_services!();
    let prefix = common::unique_prefix("auditmem");
    let db = common::cdc_db(&services, "auditmem", &prefix).await;
    let since = now(&db.client).await;
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    let relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    for chunk in 0..(ROWS / 10_000) {
        db.client
            .execute(
                "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key)
                 SELECT gen_random_uuid(), 'bulk', 'T', 1, 'text/plain', convert_to(repeat('x', 200), 'UTF8'), 'key-' || ((g + $1::int8) % 5000)
                 FROM generate_series(1, 10000) g",
                &[&(chunk * 10_000)],
            )
            .await
            .unwrap();
    }
    let written = std::time::Instant::now();
    eprintln!("{ROWS} rows written");
    // A debug relay takes minutes over a million rows: wait longer than
    // the suite's usual catch-up budget.
    while common::rows_with_status(&db.client, "PENDING").await > 0 {
        assert!(
            written.elapsed() < Duration::from_secs(1800),
            "the relay never caught up"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    eprintln!("relayed in {:.1} s", written.elapsed().as_secs_f64());
    stop(relay).await;

    let started = std::time::Instant::now();
    let mut child = Cli::new(&["audit", "--since", &since, "--format", "json"])
        .config(&config)
        .command()
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status_file = format!("/proc/{}/status", child.id());
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || serde_json::from_reader::<_, Value>(stdout));
    let mut peak_kb = 0u64;
    while child.try_wait().unwrap().is_none() {
        if let Ok(status) = std::fs::read_to_string(&status_file) {
            if let Some(kb) = status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            {
                peak_kb = peak_kb.max(kb);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let report = reader.join().unwrap().unwrap();
    let took = started.elapsed();
    assert_eq!(report["rows"], ROWS, "{report:#}");
    assert_eq!(report["lost"], 0);
    eprintln!(
        "audit of {ROWS} rows ({} records, {} partitions): peak RSS {:.1} MiB, {:.1} s",
        report["records"],
        report["topics"][0]["partitions"],
        peak_kb as f64 / 1024.0,
        took.as_secs_f64()
    );
    assert!(peak_kb < 256 * 1024, "peak RSS {peak_kb} kB");
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}
