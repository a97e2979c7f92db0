//! Running the relay in production: the HTTP endpoint (metrics checked by
//! promtool and scraped by a real Prometheus, health, readiness), the
//! generated alerting rules (promtool's own unit tests), the heartbeat, and
//! the retention and redrive commands, against the real PostgreSQL and
//! Kafka.

use crate::common;
use crate::common::cli::Cli;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::kafka;
use common::prometheus::{tool, Prometheus};
use common::relay::{self as relay, RelayProcess};
use common::replication as rep;

/// A plain HTTP/1.0 GET: (status, body).
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

/// Polls `path` until `ok` holds for its (status, body); returns the body.
fn wait_for(port: u16, path: &str, what: &str, ok: impl Fn(u16, &str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let got = get(port, path);
        if let Some((status, body)) = &got {
            if ok(*status, body) {
                return body.clone();
            }
        }
        assert!(Instant::now() < deadline, "{what}: last answer {got:?}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The value of one sample line `name{labels} value` (or `name value`).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

fn http_extra(port: u16) -> String {
    format!("slot_check_interval_secs = 1\n\n[http]\nlisten = \"127.0.0.1:{port}\"\n")
}

#[tokio::test]
async fn the_endpoint_serves_metrics_prometheus_scrapes_and_a_standby_is_healthy_but_not_ready() {
    let services = require_services!();
    let prefix = common::unique_prefix("met");
    let db = common::cdc_db(&services, "metrics", &prefix).await;
    let port = common::free_port();
    let slot = format!("{}_relay", db.name);
    let config = relay::config(&services, &db.name, &prefix, &slot, &http_extra(port));
    let relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;

    let written = common::write_keyed(&services, &db.name, 2, 500, 20).await;
    let topic = format!("{prefix}keyed");
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        1000,
        Duration::from_secs(90),
    );
    assert_eq!(kafka::by_id(&records).len(), written.len());

    let published = format!("outbox_cdc_records_published_total{{destination=\"{topic}\"}}");
    let text = wait_for(
        port,
        "/metrics",
        "1000 published and caught up",
        |status, body| {
            status == 200
                && sample(body, &published) == Some(1000.0)
                && sample(body, "outbox_cdc_seconds_behind_source") == Some(0.0)
                && sample(body, "outbox_cdc_slot_active") == Some(1.0)
        },
    );
    assert_eq!(
        sample(&text, "outbox_cdc_deliveries_total{outcome=\"confirmed\"}"),
        Some(1000.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "outbox_cdc_slot_wal_status{status=\"reserved\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "outbox_cdc_slot_wal_status{status=\"lost\"}"),
        Some(0.0)
    );
    assert_eq!(sample(&text, "outbox_cdc_in_flight_messages"), Some(0.0));
    assert_eq!(
        sample(&text, "outbox_cdc_in_flight_messages_limit"),
        Some(2500.0)
    );
    assert_eq!(sample(&text, "outbox_cdc_ready"), Some(1.0));
    assert_eq!(sample(&text, "outbox_cdc_standby"), Some(0.0));
    let transactions: std::collections::HashSet<_> = written.values().map(|w| w.tx).collect();
    let observed = sample(&text, "outbox_cdc_commit_to_ack_seconds_count").unwrap();
    assert_eq!(
        observed,
        transactions.len() as f64,
        "one latency per source transaction"
    );
    assert!(sample(&text, "outbox_cdc_commit_to_ack_seconds_sum").unwrap() > 0.0);
    assert!(text.contains(&format!(
        "outbox_cdc_build_info{{commit=\"{}\",version=\"{}\"}} 1",
        text.split("commit=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap(),
        env!("CARGO_PKG_VERSION")
    )));

    // promtool's linter accepts the exposition as Prometheus would read it.
    let mut lint = Command::new(tool("OUTBOX_TEST_PROMTOOL"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    lint.stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let lint = lint.wait_with_output().unwrap();
    assert!(
        lint.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&lint.stdout),
        String::from_utf8_lossy(&lint.stderr)
    );

    assert_eq!(get(port, "/healthz").unwrap().0, 200);
    let (status, body) = get(port, "/readyz").unwrap();
    assert_eq!(
        (status, body.trim()),
        (200, "ready: streaming from the slot, Kafka reachable")
    );

    // A second relay on the same slot waits as a standby: alive, not ready.
    let standby_port = common::free_port();
    let standby_config = relay::config(
        &services,
        &db.name,
        &prefix,
        &slot,
        &http_extra(standby_port),
    );
    let standby_config = {
        let p = standby_config.with_file_name(format!("{slot}-standby.toml"));
        std::fs::rename(&standby_config, &p).unwrap();
        p
    };
    let standby = RelayProcess::spawn(&standby_config);
    let body = wait_for(
        standby_port,
        "/readyz",
        "the standby's readiness",
        |s, b| s == 503 && b.contains("standby"),
    );
    assert!(body.starts_with("not ready: standby"), "{body}");
    assert_eq!(get(standby_port, "/healthz").unwrap().0, 200);
    let standby_metrics = get(standby_port, "/metrics").unwrap().1;
    assert_eq!(sample(&standby_metrics, "outbox_cdc_standby"), Some(1.0));
    assert_eq!(sample(&standby_metrics, "outbox_cdc_ready"), Some(0.0));
    drop(standby);

    // A real Prometheus scrapes the relay; its query API returns the counter.
    let prometheus = Prometheus::start(&db.name, port);
    let prom_port = prometheus.port;
    let query =
        "/api/v1/query?query=outbox_cdc_records_published_total%7Bjob%3D%22outbox-cdc%22%7D";
    let deadline = Instant::now() + Duration::from_secs(90);
    let answer = loop {
        if let Some((200, body)) = get(prom_port, query) {
            if body.contains(&format!("\"destination\":\"{topic}\"")) {
                break body;
            }
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never returned the counter: {}",
            prometheus.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    drop(prometheus);
    assert!(answer.contains("\"status\":\"success\""), "{answer}");
    assert!(
        answer.contains(",\"1000\"]"),
        "the scraped value is 1000: {answer}"
    );

    drop(relay);
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

#[test]
fn the_shipped_alerting_rules_are_generated_valid_and_pass_their_unit_tests() {
    let out = Command::new(crate::common::cli::bin())
        .arg("alert-rules")
        .output()
        .unwrap();
    assert!(out.status.success());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("monitoring");
    let committed = std::fs::read_to_string(root.join("outbox-cdc.rules.yml")).unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        committed,
        "monitoring/outbox-cdc.rules.yml is stale: scripts/regenerate.sh writes it"
    );
    let promtool = tool("OUTBOX_TEST_PROMTOOL");
    for args in [
        &["check", "rules", "outbox-cdc.rules.yml"][..],
        &["test", "rules", "outbox-cdc.rules.test.yml"][..],
    ] {
        let out = Command::new(&promtool)
            .args(args)
            .current_dir(&root)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test]
async fn a_heartbeat_moves_an_idle_outboxs_slot_while_another_database_writes() {
    let services = require_services!();
    let prefix = common::unique_prefix("hb");
    let db = common::cdc_db(&services, "heartbeat", &prefix).await;
    let busy = services.fresh_db("busy").await;
    let port = common::free_port();
    let slot = format!("{}_relay", db.name);
    let extra = format!("heartbeat_interval_secs = 1\n{}", http_extra(port));
    let config = relay::config(&services, &db.name, &prefix, &slot, &extra);
    let relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    let before = rep::confirmed_flush(&db.client, &slot).await;

    // Another database of the cluster writes about 40 MB of WAL.
    busy.client
        .batch_execute(
            "CREATE TABLE churn (id bigint, pad text);
             INSERT INTO churn SELECT g, repeat('x', 200) FROM generate_series(1, 150000) g;",
        )
        .await
        .unwrap();
    let written_to = rep::current_lsn(&busy.client).await;
    assert!(
        written_to.0 - before.0 > 30_000_000,
        "{before} {written_to}"
    );
    rep::wait_confirmed(
        &db.client,
        &slot,
        |c| c >= written_to,
        Duration::from_secs(90),
    )
    .await;

    let text = wait_for(port, "/metrics", "heartbeats read back", |_, b| {
        sample(b, "outbox_cdc_heartbeats_received_total").unwrap_or(0.0) >= 2.0
    });
    assert!(
        sample(&text, "outbox_cdc_heartbeats_total").unwrap() >= 2.0,
        "{text}"
    );
    // Consumed, never published.
    assert!(
        !text.contains("outbox_cdc_records_published_total{"),
        "{text}"
    );
    assert_eq!(
        sample(&text, "outbox_cdc_deliveries_total{outcome=\"confirmed\"}"),
        Some(0.0)
    );
    let log = relay.log_text();
    assert!(!log.contains("heartbeat not written"), "{log}");

    drop(relay);
    rep::drop_slot(&db.client, &slot).await;
    busy.drop(&services).await;
    db.drop(&services).await;
}

fn outbox_cdc(args: &[&str], config: &Path) -> std::process::Output {
    Cli::new(args).config(config).output()
}

/// The number before `what` in a purge's last line.
fn deleted(out: &std::process::Output, what: &str) -> u64 {
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default().to_string();
    last.split(what)
        .next()
        .and_then(|l| l.split_whitespace().last())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of {what} in {text}"))
}

const OLD_ROWS: &str = "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version,
        content_type, payload, status, created_at, published_at, last_failure_code)
    SELECT gen_random_uuid(), 'history', 'T', 1, 'x', '\\x00', $1, now() - $2::text::interval, now() - $3::text::interval, $4
      FROM generate_series(1, $5::int)";

#[tokio::test]
async fn purge_deletes_old_published_rows_in_batches_beside_a_streaming_relay() {
    let services = require_services!();
    let prefix = common::unique_prefix("purge");
    let db = common::cdc_db(&services, "purge", &prefix).await;
    // History from before the relay: published long ago, published an hour
    // ago, failed long ago.
    let insert = db.client.prepare(OLD_ROWS).await.unwrap();
    for (status, created, published, code, n) in [
        ("PUBLISHED", "3 days", "2 days", None, 200_000),
        ("PUBLISHED", "2 hours", "1 hour", None, 1_000),
        ("FAILED", "3 days", "3 days", Some("MESSAGE_TOO_LARGE"), 500),
    ] {
        db.client
            .execute(&insert, &[&status, &created, &published, &code, &n])
            .await
            .unwrap();
    }
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    let relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;

    let writers = common::spawn_write_keyed(&db.name, 4, 2500, 50);
    let dry = outbox_cdc(&["purge", "--older-than", "1d", "--dry-run"], &config);
    assert!(dry.status.success(), "{dry:?}");
    assert!(
        String::from_utf8_lossy(&dry.stdout).contains("would delete 200000 PUBLISHED rows"),
        "{dry:?}"
    );
    // Two purges at once, beside the relay and the writers.
    let purges: Vec<_> = (0..2)
        .map(|_| {
            let config = config.clone();
            std::thread::spawn(move || {
                outbox_cdc(&["purge", "--older-than", "1d", "--batch", "2000"], &config)
            })
        })
        .collect();
    let outs: Vec<_> = purges.into_iter().map(|p| p.join().unwrap()).collect();
    for out in &outs {
        assert!(out.status.success(), "{out:?}");
    }
    let total: u64 = outs
        .iter()
        .map(|o| deleted(o, "PUBLISHED rows published before"))
        .sum();
    assert_eq!(total, 200_000);
    let written = writers.await.unwrap();

    let topic = format!("{prefix}keyed");
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        written.len(),
        Duration::from_secs(120),
    );
    assert_eq!(kafka::by_id(&records).len(), written.len());
    for (key, seq) in kafka::first_delivery_order(&records) {
        assert!(seq.windows(2).all(|w| w[0] < w[1]), "{key}: {seq:?}");
    }
    common::wait_until_marked(&db.client).await;
    let count = |sql: &'static str| {
        let c = &db.client;
        async move { c.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    assert_eq!(
        count("SELECT count(*) FROM public.messaging_outbox WHERE destination = 'history' AND status = 'PUBLISHED'").await,
        1_000,
        "only the rows published an hour ago stay"
    );
    assert_eq!(
        count("SELECT count(*) FROM public.messaging_outbox WHERE status = 'FAILED'").await,
        500,
        "FAILED rows stay unless asked for"
    );
    assert_eq!(
        count("SELECT count(*) FROM public.messaging_outbox WHERE destination = 'keyed' AND status = 'PUBLISHED'").await,
        written.len() as i64
    );

    // FAILED rows too, when asked; a second run finds nothing more.
    let out = outbox_cdc(
        &[
            "purge",
            "--older-than",
            "1d",
            "--failed-older-than",
            "2d",
            "--max-rows",
            "300",
        ],
        &config,
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(deleted(&out, "FAILED rows"), 300, "{out:?}");
    let out = outbox_cdc(
        &["purge", "--older-than", "1d", "--failed-older-than", "2d"],
        &config,
    );
    assert_eq!(deleted(&out, "FAILED rows"), 200, "{out:?}");
    assert_eq!(
        deleted(&out, "PUBLISHED rows published before"),
        0,
        "{out:?}"
    );

    drop(relay);
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

#[tokio::test]
async fn purge_never_deletes_a_row_whose_commit_the_slot_has_not_confirmed() {
    let services = require_services!();
    let prefix = common::unique_prefix("purgeslot");
    let db = common::cdc_db(&services, "purgeslot", &prefix).await;
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    let relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    relay.signal("TERM");
    drop(relay);
    rep::wait_inactive(&db.client, &slot).await;

    // Rows marked PUBLISHED whose INSERT the stopped relay's slot has not
    // confirmed (a relay that died between its marks and its confirmation).
    db.client
        .execute(
            OLD_ROWS,
            &[&"PUBLISHED", &"3 days", &"2 days", &None::<&str>, &10i32],
        )
        .await
        .unwrap();
    let out = outbox_cdc(
        &["purge", "--older-than", "1d", "--wait-secs", "3"],
        &config,
    );
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("error: PURGE_SLOT_BEHIND"), "{stderr}");
    assert!(stderr.contains(&slot), "{stderr}");
    assert_eq!(common::rows_with_status(&db.client, "PUBLISHED").await, 10);

    // Once the relay streams past them, they may go.
    let relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    let out = outbox_cdc(&["purge", "--older-than", "1d"], &config);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        deleted(&out, "PUBLISHED rows published before"),
        10,
        "{out:?}"
    );
    assert_eq!(common::rows_with_status(&db.client, "PUBLISHED").await, 0);

    drop(relay);
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

#[tokio::test]
async fn redrive_publishes_failed_rows_once_their_cause_is_fixed_and_is_idempotent() {
    let services = require_services!();
    let prefix = common::unique_prefix("redrive");
    let db = common::cdc_db(&services, "redrive", &prefix).await;
    // The relay records a row Kafka refuses as too large.
    let small = format!("{prefix}small");
    kafka::create_topic_with(
        &services.kafka_bootstrap,
        &small,
        3,
        &[("max.message.bytes", "20000")],
    )
    .await;
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    let relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    // One row per transaction, each settled before the next, so each is a
    // batch of its own (the broker applies max.message.bytes to a batch).
    for (n, payload) in [
        (1, "'\\x01'"),
        (2, "convert_to(repeat('y', 50000), 'UTF8')"),
        (3, "'\\x03'"),
    ] {
        db.client
            .batch_execute(&format!(
                "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key)
                 VALUES ('00000000-0000-4000-8000-00000000d00{n}', 'small', 'T', {n}, 'x', {payload}, 'k')"
            ))
            .await
            .unwrap();
        common::wait_until_marked(&db.client).await;
    }
    common::wait_until_marked(&db.client).await;
    let status = |id: &'static str| {
        let c = &db.client;
        async move {
            let r = c
                .query_one(
                    "SELECT status || ' ' || coalesce(last_failure_code, '-') FROM public.messaging_outbox WHERE message_id = $1::text::uuid",
                    &[&id],
                )
                .await
                .unwrap();
            r.get::<_, String>(0)
        }
    };
    let too_large = "00000000-0000-4000-8000-00000000d002";
    assert_eq!(status(too_large).await, "FAILED MESSAGE_TOO_LARGE");
    assert_eq!(
        status("00000000-0000-4000-8000-00000000d003").await,
        "PUBLISHED -"
    );

    // A row the polling relay recorded FAILED because its topic was
    // missing; the topic is still missing for a principal that may not
    // create it, so a redrive now fails and changes nothing.
    let sec = common::Secured::from_env();
    let sec_prefix = format!("{}{}", sec.prefix, common::unique_prefix("rdmiss"));
    let missing_topic = format!("{sec_prefix}invoices");
    let sec_config = {
        let text = std::fs::read_to_string(&config).unwrap();
        let head = &text[..text.find("[kafka]").unwrap()];
        let head = head.replace(
            &format!("topic_prefix = \"{prefix}\""),
            &format!("topic_prefix = \"{sec_prefix}\""),
        );
        let tables = sec
            .kafka_tables(&sec.password_file, &sec.ca)
            .replace("\"120000\"", "\"15000\"");
        let path = config.with_file_name(format!("{slot}-secured.toml"));
        std::fs::write(
            &path,
            format!("{head}{tables}\n[relay]\ndrain_timeout_secs = 20\n"),
        )
        .unwrap();
        path
    };
    db.client
        .batch_execute(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key, status, last_failure_code)
             VALUES ('00000000-0000-4000-8000-00000000d004', 'invoices', 'T', 1, 'x', '\\x04', 'k', 'FAILED', 'TOPIC_UNKNOWN');",
        )
        .await
        .unwrap();
    let missing = "00000000-0000-4000-8000-00000000d004";
    let dry = outbox_cdc(
        &["redrive", "--code", "TOPIC_UNKNOWN", "--dry-run"],
        &sec_config,
    );
    assert!(dry.status.success(), "{dry:?}");
    assert!(
        String::from_utf8_lossy(&dry.stdout)
            .contains("1 FAILED rows for invoices with TOPIC_UNKNOWN"),
        "{dry:?}"
    );
    let out = outbox_cdc(&["redrive", "--code", "TOPIC_UNKNOWN"], &sec_config);
    assert!(!out.status.success(), "{out:?}");
    assert_eq!(status(missing).await, "FAILED TOPIC_UNKNOWN");

    // The topic is created: the row goes out under its own id.
    kafka::create_topic(&services.kafka_bootstrap, &missing_topic, 3).await;
    let out = outbox_cdc(&["redrive", "--code", "TOPIC_UNKNOWN"], &sec_config);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("redrove 1 FAILED rows: 1 now PUBLISHED"),
        "{out:?}"
    );
    assert_eq!(status(missing).await, "PUBLISHED TOPIC_UNKNOWN");
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&missing_topic],
        1,
        Duration::from_secs(30),
    );
    assert_eq!(
        records.iter().map(|r| r.id()).collect::<Vec<_>>(),
        vec![missing]
    );

    // The size limit is raised: the too-large row goes out after its key's
    // earlier rows, under its own id.
    let raised = Command::new("bash")
        .arg(std::env::var("OUTBOX_TEST_SERVICES").unwrap())
        .arg("kafka-configs")
        .args([
            "--alter",
            "--entity-type",
            "topics",
            "--entity-name",
            &small,
            "--add-config",
            "max.message.bytes=1048588",
        ])
        .output()
        .unwrap();
    assert!(raised.status.success(), "{raised:?}");
    let out = outbox_cdc(&["redrive", "--destination", "small"], &config);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(status(too_large).await, "PUBLISHED MESSAGE_TOO_LARGE");
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&small],
        3,
        Duration::from_secs(30),
    );
    let mut sorted: Vec<_> = records.iter().collect();
    sorted.sort_by_key(|r| (r.partition, r.offset));
    assert_eq!(
        sorted.iter().map(|r| r.id()).collect::<Vec<_>>(),
        vec![
            "00000000-0000-4000-8000-00000000d001",
            "00000000-0000-4000-8000-00000000d003",
            too_large
        ]
    );

    // Idempotent: nothing FAILED is left, and nothing is published again.
    let again = outbox_cdc(&["redrive"], &config);
    assert!(again.status.success(), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("0 rows match"),
        "{again:?}"
    );
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&small],
        3,
        Duration::from_secs(5),
    );
    assert_eq!(records.len(), 3);

    drop(relay);
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}
