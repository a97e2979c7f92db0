//! `outbox-cdc run` end to end, as a process, against the real PostgreSQL and
//! Kafka: the records, per-key order, crash safety, FAILED rows, graceful
//! stop and bad configuration. Expected values are literals or computed here.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::kafka::{self, java_partition, Consumed};
use common::relay::{self as relay, RelayProcess};
use common::replication as rep;
use outbox_cdc::lsn::Lsn;

/// Stops the relay, drops its slot and the database.
async fn finish(services: &common::Services, db: common::TestDb, slot: &str, relay: RelayProcess) {
    drop(relay);
    rep::drop_slot(&db.client, slot).await;
    db.drop(services).await;
}

fn h(name: &str, value: Option<&str>) -> (String, Option<Vec<u8>>) {
    (name.to_string(), value.map(|v| v.as_bytes().to_vec()))
}

#[tokio::test]
async fn every_committed_insert_appears_in_kafka_as_the_contract_says() {
    let services = require_services!();
    let prefix = common::unique_prefix("rec");
    let db = common::cdc_db(&services, "records", &prefix).await;
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    let relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;

    let before_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    db.client
        .batch_execute(
            r#"
            INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type,
                payload, created_at, producer, occurred_at, correlation_id, causation_id, tenant, partition_key,
                ordering_key, traceparent, tracestate, baggage, schema_subject, schema_uri, headers)
            VALUES ('A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', 'orders', 'OrderPlaced', 3, 'application/json',
                convert_to('{"a":1}', 'UTF8'), '2024-05-06 09:08:09.1+02', 'shop', '2024-05-06 07:08:09.123456+00',
                'c-1', NULL, 'acme', 'customer-42', 'o-1',
                '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', 'a=b', 'k=v', 'orders-value',
                'https://s/1', '{"x-app": "not published"}');
            INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type,
                payload, created_at)
            VALUES ('00000000-0000-4000-8000-0000000000b2', 'payments', 'Captured', -5, '', '', '1999-12-31 23:59:59+00');
            INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type,
                payload, created_at, correlation_id, partition_key)
            VALUES ('00000000-0000-4000-8000-0000000000c3', 'orders', 'T', 2147483647, 'application/octet-stream',
                (SELECT string_agg(set_byte('\x00'::bytea, 0, g), ''::bytea) FROM generate_series(0, 255) g),
                '2024-01-01 00:00:00+00', E'😀 quote" back\\', 'customer-42');
            "#,
        )
        .await
        .unwrap();
    let after_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;

    let orders = format!("{prefix}orders");
    let payments = format!("{prefix}payments");
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&orders, &payments],
        3,
        Duration::from_secs(60),
    );
    assert_eq!(kafka::by_id(&records).len(), 3, "{records:?}");
    let by_id: BTreeMap<String, &Consumed> = records.iter().map(|r| (r.id(), r)).collect();
    let partitions = kafka::partitions(&services.kafka_bootstrap, &orders);
    assert_eq!(
        partitions, 6,
        "the test broker creates 6 partitions per topic"
    );

    let a = by_id["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"];
    assert_eq!(a.topic, orders);
    assert_eq!(a.key.as_deref(), Some(&b"customer-42"[..]));
    assert_eq!(a.partition, java_partition(b"customer-42", partitions));
    assert_eq!(a.value.as_deref(), Some(&b"{\"a\":1}"[..]));
    assert_eq!(
        a.headers,
        vec![
            h("id", Some("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")),
            h("msg.type", Some("OrderPlaced")),
            h("msg.version", Some("3")),
            h("msg.content-type", Some("application/json")),
            h("msg.created-at", Some("2024-05-06T07:08:09.100000Z")),
            h("msg.destination", Some("orders")),
            h("msg.producer", Some("shop")),
            h("msg.occurred-at", Some("2024-05-06T07:08:09.123456Z")),
            h("msg.correlation-id", Some("c-1")),
            h("msg.causation-id", None),
            h("msg.tenant", Some("acme")),
            h("msg.partition-key", Some("customer-42")),
            h("msg.ordering-key", Some("o-1")),
            h(
                "traceparent",
                Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            ),
            h("tracestate", Some("a=b")),
            h("baggage", Some("k=v")),
        ]
    );
    let ts = a.timestamp.expect("a timestamp");
    assert!(
        ts >= before_ms - 1000 && ts <= after_ms + 1000,
        "commit time {ts} not within [{before_ms}, {after_ms}]"
    );

    let b = by_id["00000000-0000-4000-8000-0000000000b2"];
    assert_eq!(b.topic, payments);
    assert_eq!(
        b.key.as_deref(),
        Some(&b"00000000-0000-4000-8000-0000000000b2"[..])
    );
    assert_eq!(
        b.partition,
        java_partition(b"00000000-0000-4000-8000-0000000000b2", partitions)
    );
    assert_eq!(
        b.value.as_deref(),
        Some(&b""[..]),
        "an empty value, not a tombstone"
    );
    assert_eq!(
        b.headers,
        vec![
            h("id", Some("00000000-0000-4000-8000-0000000000b2")),
            h("msg.type", Some("Captured")),
            h("msg.version", Some("-5")),
            h("msg.content-type", Some("")),
            h("msg.created-at", Some("1999-12-31T23:59:59.000000Z")),
            h("msg.destination", Some("payments")),
            h("msg.producer", None),
            h("msg.occurred-at", None),
            h("msg.correlation-id", None),
            h("msg.causation-id", None),
            h("msg.tenant", None),
            h("msg.partition-key", None),
            h("msg.ordering-key", None),
            h("traceparent", None),
            h("tracestate", None),
            h("baggage", None),
        ]
    );

    let c = by_id["00000000-0000-4000-8000-0000000000c3"];
    assert_eq!(
        c.value.as_deref(),
        Some(&(0u8..=255).collect::<Vec<u8>>()[..])
    );
    assert_eq!(c.header("msg.version"), Some(&b"2147483647"[..]));
    assert_eq!(
        c.header("msg.correlation-id"),
        Some("😀 quote\" back\\".as_bytes())
    );
    assert_eq!(c.partition, a.partition, "same key, same partition");
    assert!(c.offset > a.offset, "same key, commit order");

    // Rows are marked PUBLISHED (in batches) without touching others.
    let mut published = 0i64;
    for _ in 0..50 {
        published = db
            .client
            .query_one("SELECT count(*) FROM public.messaging_outbox WHERE status = 'PUBLISHED' AND published_at IS NOT NULL", &[])
            .await
            .unwrap()
            .get(0);
        if published == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(published, 3);
    finish(&services, db, &slot, relay).await;
}

#[tokio::test]
async fn ten_thousand_messages_over_a_hundred_keys_keep_per_key_commit_order() {
    let services = require_services!();
    let prefix = common::unique_prefix("ord");
    let db = common::cdc_db(&services, "order", &prefix).await;
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    let relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;

    common::write_keyed(&services, &db.name, 10, 1000, 100).await;
    let topic = format!("{prefix}keyed");
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        10_000,
        Duration::from_secs(60),
    );
    assert_eq!(
        kafka::by_id(&records).len(),
        10_000,
        "every message arrived"
    );
    // Duplicates only come from a restart (e.g. a delivery timeout on a
    // loaded machine), and the relay says so in its log.
    if !relay.log_text().contains("restarting the pipeline") {
        assert_eq!(records.len(), 10_000, "no duplicates without a restart");
    }
    let order = kafka::first_delivery_order(&records);
    assert_eq!(order.len(), 100);
    for (key, ns) in &order {
        let expected: Vec<u64> = (1..=ns.len() as u64).collect();
        assert_eq!(ns, &expected, "{key}");
        let partition = records
            .iter()
            .find(|r| r.key.as_deref() == Some(key.as_bytes()))
            .unwrap()
            .partition;
        assert_eq!(partition, java_partition(key.as_bytes(), 6), "{key}");
    }
    finish(&services, db, &slot, relay).await;
}

#[tokio::test]
async fn sigkill_at_random_moments_loses_nothing_and_keeps_per_key_order() {
    let services = require_services!();
    let prefix = common::unique_prefix("kill");
    let db = common::cdc_db(&services, "crash", &prefix).await;
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    let mut relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;

    const TOTAL: usize = 50_000;
    let writer = common::spawn_write_keyed(&db.name, 5, TOTAL / 5, 200);
    let mut pauses = common::KillTimes::new(0x9e37_79b9_7f4a_7c15);
    let mut kills = 0;
    let mut windows: Vec<(Lsn, Lsn)> = Vec::new();
    let mut logs: Vec<String> = Vec::new();
    while kills < 12 {
        tokio::time::sleep(pauses.next_pause()).await;
        // What the slot had confirmed at most at the kill (read before it),
        // and how far WAL went at least (read after it).
        let confirmed: Lsn = db
            .client
            .query_one(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .unwrap()
            .get::<_, String>(0)
            .parse()
            .unwrap();
        relay.signal("KILL");
        relay.wait(Duration::from_secs(10)).expect("killed");
        logs.push(relay.log_text());
        let reached = rep::insert_lsn(&db.client).await;
        windows.push((confirmed, reached));
        kills += 1;
        relay = RelayProcess::spawn(&config);
    }
    let committed_by = writer.await.unwrap();
    let topic = format!("{prefix}keyed");
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        TOTAL,
        Duration::from_secs(60),
    );
    let ids = kafka::by_id(&records);
    assert_eq!(
        ids.len(),
        TOTAL,
        "every message is in Kafka after the kills"
    );
    common::wait_until_marked(&db.client).await;
    relay.signal("TERM");
    assert!(relay
        .wait(Duration::from_secs(30))
        .expect("stops on SIGTERM")
        .success());

    let expected: i64 = db
        .client
        .query_one("SELECT count(*) FROM public.messaging_outbox", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(expected as usize, TOTAL);
    assert_eq!(
        ids.len(),
        TOTAL,
        "every message is in Kafka after {kills} kills"
    );
    let duplicates = records.len() - ids.len();
    eprintln!(
        "{kills} kills: {} records for {TOTAL} messages ({duplicates} duplicates)",
        records.len()
    );
    logs.push(relay.log_text());
    for (key, ns) in kafka::first_delivery_order(&records) {
        let expected: Vec<u64> = (1..=ns.len() as u64).collect();
        assert_eq!(
            ns,
            expected,
            "first deliveries of {key} are in commit order; the sessions warned:\n{}",
            relay::warnings_in(&logs)
        );
    }
    // Duplicates carry the same bytes as the first delivery, and only rows
    // the slot had not confirmed at some kill come twice: each duplicated
    // row was inserted before that kill and committed after what the slot
    // had confirmed (the position read just after its COMMIT returned is at
    // or past the commit; other sessions' WAL between insert and commit makes
    // the insert position alone too early a bound).
    // A relay that restarts its own pipeline (a delivery timed out on a
    // loaded machine) replays from the position it had settled, and logs it.
    for log in &logs {
        windows.extend(
            relay::replays_in(log)
                .into_iter()
                .map(|settled| (settled, Lsn(u64::MAX))),
        );
    }
    for copies in ids.values().filter(|c| c.len() > 1) {
        assert!(copies
            .iter()
            .all(|c| c.value == copies[0].value && c.headers == copies[0].headers));
        let written: Lsn = std::str::from_utf8(copies[0].header("msg.causation-id").unwrap())
            .unwrap()
            .parse()
            .unwrap();
        let committed = committed_by[&copies[0].id()].committed_by;
        assert!(
            windows
                .iter()
                .any(|(confirmed, reached)| committed >= *confirmed && written <= *reached),
            "message {} (inserted at {written}, committed by {committed}) was settled at every kill but came twice; windows {windows:?}",
            copies[0].id()
        );
    }
    common::bookkeeping_matches_kafka(&db.client, &ids).await;
    finish(&services, db, &slot, relay).await;
}

#[tokio::test]
async fn rejected_and_refused_rows_become_failed_and_the_stream_goes_on() {
    let services = require_services!();
    let prefix = common::unique_prefix("fail");
    let db = common::cdc_db(&services, "failed", &prefix).await;
    // An old table whose reserved-name constraint is missing.
    db.client
        .batch_execute(
            "ALTER TABLE public.messaging_outbox DROP CONSTRAINT ck_outbox_headers_reserved",
        )
        .await
        .unwrap();
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    let relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;

    db.client
        .batch_execute(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload)
             VALUES ('00000000-0000-4000-8000-00000000f001', 'big', 'T', 1, 'x', convert_to(repeat('x', 2000000), 'UTF8'));
             INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, headers)
             VALUES ('00000000-0000-4000-8000-00000000f002', 'small', 'T', 1, 'x', '\\x01', '{\"msg.type\": \"spoofed\"}');",
        )
        .await
        .unwrap();
    let after_bad: Lsn = db
        .client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get::<_, String>(0)
        .parse()
        .unwrap();
    db.client
        .batch_execute(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload)
             VALUES ('00000000-0000-4000-8000-00000000f003', 'small', 'T', 1, 'x', '\\x02');",
        )
        .await
        .unwrap();
    let topic = format!("{prefix}small");
    let records = kafka::consume(
        &services.kafka_bootstrap,
        &[&topic],
        1,
        Duration::from_secs(60),
    );
    let ids: Vec<String> = records.iter().map(Consumed::id).collect();
    assert_eq!(ids, vec!["00000000-0000-4000-8000-00000000f003"]);

    let mut rows: Vec<(String, String, Option<String>)> = Vec::new();
    for _ in 0..100 {
        rows = db
            .client
            .query("SELECT message_id::text, status, last_failure_code FROM public.messaging_outbox ORDER BY message_id", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        if rows.iter().all(|r| r.1 != "PENDING") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        rows,
        vec![
            (
                "00000000-0000-4000-8000-00000000f001".into(),
                "FAILED".into(),
                Some("MESSAGE_TOO_LARGE".into())
            ),
            (
                "00000000-0000-4000-8000-00000000f002".into(),
                "FAILED".into(),
                Some("RESERVED_HEADER_NAME".into())
            ),
            (
                "00000000-0000-4000-8000-00000000f003".into(),
                "PUBLISHED".into(),
                None
            ),
        ]
    );
    let confirmed = rep::wait_confirmed(
        &db.client,
        &slot,
        |l| l >= after_bad,
        Duration::from_secs(15),
    )
    .await;
    assert!(
        confirmed >= after_bad,
        "the slot advanced past the failed rows"
    );
    let log = relay.log_text();
    assert!(
        log.contains("MESSAGE_TOO_LARGE") && log.contains("RESERVED_HEADER_NAME"),
        "{log}"
    );
    finish(&services, db, &slot, relay).await;
}

#[tokio::test]
async fn after_sigterm_the_slot_covers_everything_acknowledged() {
    let services = require_services!();
    let prefix = common::unique_prefix("term");
    let db = common::cdc_db(&services, "term", &prefix).await;
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    let mut relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    common::write_keyed(&services, &db.name, 4, 500, 20).await;
    let topic = format!("{prefix}keyed");
    let first = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        2000,
        Duration::from_secs(60),
    );
    assert_eq!(kafka::by_id(&first).len(), 2000);
    relay.signal("TERM");
    let status = relay
        .wait(Duration::from_secs(30))
        .expect("exits after draining");
    assert!(
        status.success(),
        "exit status {status:?}\n{}",
        relay.log_text()
    );

    // Everything in Kafka when the relay stopped (duplicates from an earlier
    // restart, if the machine was loaded, included).
    let before = kafka::consume(
        &services.kafka_bootstrap,
        &[&topic],
        usize::MAX,
        Duration::from_secs(3),
    )
    .len();

    let mut again = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    common::write_keyed(&services, &db.name, 1, 1, 20).await;
    let all = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        2001,
        Duration::from_secs(30),
    );
    assert_eq!(kafka::by_id(&all).len(), 2001);
    // Give a wrongly replayed backlog time to show up.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = kafka::consume(
        &services.kafka_bootstrap,
        &[&topic],
        usize::MAX,
        Duration::from_secs(3),
    )
    .len();
    assert_eq!(
        after,
        before + 1,
        "restarting after SIGTERM delivered duplicates"
    );
    again.signal("TERM");
    assert!(again.wait(Duration::from_secs(30)).unwrap().success());
    finish(&services, db, &slot, again).await;
}

#[tokio::test]
async fn bad_configuration_ends_start_up_without_touching_the_slot() {
    let services = require_services!();
    let prefix = common::unique_prefix("bad");
    let db = common::cdc_db(&services, "badcfg", &prefix).await;
    let slot_exists = |slot: String| {
        let client = &db.client;
        async move {
            client
                .query_one(
                    "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1",
                    &[&slot],
                )
                .await
                .unwrap()
                .get::<_, i64>(0)
                == 1
        }
    };
    let run = |config: &std::path::Path, envs: &[(&str, &str)]| {
        let mut cmd = std::process::Command::new(crate::common::cli::bin());
        cmd.args(["run", "--config"]).arg(config);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };

    // Unreachable Kafka.
    let slot = format!("{}_a", db.name);
    let config = relay::config(&services, &db.name, &prefix, &slot, "");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace(&services.kafka_bootstrap, "127.0.0.1:1");
    std::fs::write(&config, text).unwrap();
    let out = run(&config, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("KAFKA_UNREACHABLE"), "{stderr}");
    assert!(!slot_exists(slot).await);

    // Wrong password.
    let slot = format!("{}_b", db.name);
    let config = relay::config(&services, &db.name, &prefix, &slot, "");
    let out = run(&config, &[("OUTBOX_TEST_PG_PASSWORD", "wrong")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("PG_AUTH_FAILED"), "{stderr}");
    assert!(!slot_exists(slot).await);

    // A user without the REPLICATION attribute.
    let role = format!("relay_norep_{}", std::process::id());
    db.client
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN PASSWORD 'pw';
             GRANT ALL ON ALL TABLES IN SCHEMA public TO {role};"
        ))
        .await
        .unwrap();
    let slot = format!("{}_c", db.name);
    let config = relay::config(&services, &db.name, &prefix, &slot, "");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        &format!("user = \"{}\"", services.pg_user),
        &format!("user = \"{role}\""),
    );
    std::fs::write(&config, text).unwrap();
    let out = run(&config, &[("OUTBOX_TEST_PG_PASSWORD", "pw")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("PG_PERMISSION_DENIED"), "{stderr}");
    assert!(!slot_exists(slot).await);
    db.client
        .batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role};"))
        .await
        .unwrap();
    db.drop(&services).await;
}

#[tokio::test]
async fn schema_drift_stops_the_relay_before_the_drifted_rows_and_compatible_changes_stream_on() {
    let services = require_services!();
    let prefix = common::unique_prefix("drift");
    let db = common::cdc_db(&services, "drift", &prefix).await;
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    let mut relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    let topic = format!("{prefix}orders");
    let insert = |id: &str| {
        format!(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, tenant)
             VALUES ('{id}', 'orders', 'T', 1, 'x', '\\x01', 'acme')"
        )
    };

    // Compatible changes: an added column, text to varchar(n).
    db.client
        .batch_execute(&format!(
            "{};
             ALTER TABLE public.messaging_outbox ADD COLUMN note text DEFAULT 'n';
             ALTER TABLE public.messaging_outbox ALTER COLUMN tenant TYPE varchar(64);
             {};",
            insert("00000000-0000-4000-8000-0000000000c1"),
            insert("00000000-0000-4000-8000-0000000000c2")
        ))
        .await
        .unwrap();
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        2,
        Duration::from_secs(60),
    );
    assert_eq!(kafka::by_id(&records).len(), 2, "both rows streamed");
    let after = records
        .iter()
        .find(|r| r.id() == "00000000-0000-4000-8000-0000000000c2")
        .unwrap();
    assert_eq!(after.header("msg.tenant"), Some(&b"acme"[..]));
    let settled = rep::current_lsn(&db.client).await;
    rep::wait_confirmed(&db.client, &slot, |l| l >= settled, Duration::from_secs(30)).await;

    // A contract column dropped: the relay stops, naming it, before the row.
    db.client
        .batch_execute(&format!(
            "ALTER TABLE public.messaging_outbox DROP COLUMN baggage; {};",
            insert("00000000-0000-4000-8000-0000000000c3")
        ))
        .await
        .unwrap();
    let committed = rep::current_lsn(&db.client).await;
    let status = tokio::task::spawn_blocking(move || {
        let status = relay.wait(Duration::from_secs(60));
        (status, relay)
    })
    .await
    .unwrap();
    relay = status.1;
    let log = relay.log_text();
    assert!(
        status.0.is_some_and(|s| !s.success()),
        "the relay stops: {log}"
    );
    let error = log
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_default();
    assert!(
        error.starts_with("error: OUTBOX_SCHEMA_DRIFT")
            && error.contains("column baggage is missing"),
        "{log}"
    );
    let confirmed = rep::confirmed_flush(&db.client, &slot).await;
    assert!(
        confirmed < committed,
        "the slot stays before the drifted row: {confirmed} vs {committed}"
    );
    let records = kafka::consume(
        &services.kafka_bootstrap,
        &[&topic],
        3,
        Duration::from_secs(3),
    );
    assert!(
        records
            .iter()
            .all(|r| r.id() != "00000000-0000-4000-8000-0000000000c3"),
        "nothing of the drifted row was published"
    );
    let pending: String = db
        .client
        .query_one(
            "SELECT status FROM public.messaging_outbox WHERE message_id = '00000000-0000-4000-8000-0000000000c3'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        pending, "PENDING",
        "the row waits for the operator, not FAILED"
    );

    // `check` says the same through the catalog comparison.
    let cfg = outbox_cdc::config::Config::load(&config, &common::env).unwrap();
    let report = outbox_cdc::ops::preflight::report(&cfg, &common::env).await;
    let drift = report
        .findings
        .iter()
        .find(|f| f.code.is_some_and(|c| c == "OUTBOX_SCHEMA_DRIFT"))
        .unwrap_or_else(|| panic!("{:?}", report.codes()));
    assert!(drift.detail.contains("baggage"), "{}", drift.detail);
    finish(&services, db, &slot, relay).await;
}

#[tokio::test]
async fn failed_journal_writes_are_retried_a_stop_reports_what_it_could_not_write_and_a_refusal_stops_the_relay(
) {
    let services = require_services!();
    let prefix = common::unique_prefix("marks");
    let db = common::cdc_db(&services, "marks", &prefix).await;
    // A gate that makes every write to the published journal fail while it
    // is closed, with the SQLSTATE it holds: a serialization failure
    // (40001) passes and is tried again; a plain exception (P0001) would
    // not pass, and stops the relay.
    db.client
        .batch_execute(
            "CREATE TABLE public.mark_gate (closed text);
             INSERT INTO public.mark_gate VALUES ('40001');
             CREATE FUNCTION public.refuse_marks() RETURNS trigger LANGUAGE plpgsql AS $$
             DECLARE state text := (SELECT closed FROM public.mark_gate);
             BEGIN
               IF state IS NOT NULL THEN
                 RAISE EXCEPTION USING ERRCODE = state, MESSAGE = 'the journal is closed for this test';
               END IF;
               RETURN NEW;
             END $$;
             CREATE TRIGGER refuse_marks BEFORE INSERT ON public.outbox_cdc_published
               FOR EACH ROW EXECUTE FUNCTION public.refuse_marks();",
        )
        .await
        .unwrap();
    let slot = format!("{}_relay", db.name);
    let config = relay::config(&services, &db.name, &prefix, &slot, "");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("drain_timeout_secs = 20", "drain_timeout_secs = 3");
    std::fs::write(&config, text).unwrap();
    let relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    let write = |n: i64, from: i64| {
        format!(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload)
             SELECT md5('mark' || g)::uuid, 'orders', 'T', 1, 'x', '\\x01' FROM generate_series({from}, {}) g",
            from + n - 1
        )
    };
    db.client.batch_execute(&write(50, 1)).await.unwrap();
    let topic = format!("{prefix}orders");
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        50,
        Duration::from_secs(60),
    );
    assert_eq!(kafka::by_id(&records).len(), 50);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !relay
        .log_text()
        .contains("could not record published rows; retrying")
    {
        assert!(std::time::Instant::now() < deadline, "{}", relay.log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(common::rows_with_status(&db.client, "PUBLISHED").await, 0);

    // The gate opens: the retried marks land, nothing was dropped.
    db.client
        .batch_execute("UPDATE public.mark_gate SET closed = NULL")
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while common::rows_with_status(&db.client, "PUBLISHED").await < 50 {
        assert!(std::time::Instant::now() < deadline, "{}", relay.log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Closed again, then a stop: what cannot be written is counted in the log.
    db.client
        .batch_execute("UPDATE public.mark_gate SET closed = '40001'")
        .await
        .unwrap();
    db.client.batch_execute(&write(10, 51)).await.unwrap();
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        60,
        Duration::from_secs(60),
    );
    assert_eq!(kafka::by_id(&records).len(), 60);
    relay.signal("TERM");
    let (status, relay) = tokio::task::spawn_blocking(move || {
        let mut relay = relay;
        (relay.wait(Duration::from_secs(60)), relay)
    })
    .await
    .unwrap();
    assert!(status.is_some_and(|s| s.success()), "{}", relay.log_text());
    let log = relay.log_text();
    let gave_up = log
        .lines()
        .find(|l| l.contains("stopped with published rows not recorded"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(gave_up.contains("rows=10"), "{gave_up}");
    assert_eq!(common::rows_with_status(&db.client, "PENDING").await, 10);
    drop(relay);

    // The slot stayed before their transaction: once the database takes
    // marks again, the next start publishes those 10 rows again (and only
    // them) and marks them.
    db.client
        .batch_execute("UPDATE public.mark_gate SET closed = NULL")
        .await
        .unwrap();
    let relay = RelayProcess::spawn(&config);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while common::rows_with_status(&db.client, "PENDING").await > 0 {
        assert!(std::time::Instant::now() < deadline, "{}", relay.log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(common::rows_with_status(&db.client, "PUBLISHED").await, 60);
    let records = kafka::consume(
        &services.kafka_bootstrap,
        &[&topic],
        70,
        Duration::from_secs(30),
    );
    let again: std::collections::BTreeSet<String> = kafka::by_id(&records)
        .into_iter()
        .filter(|(_, copies)| copies.len() > 1)
        .map(|(id, _)| id)
        .collect();
    let last_ten: std::collections::BTreeSet<String> = common::texts(
        &db.client,
        "SELECT md5('mark' || g)::uuid::text FROM generate_series(51, 60) g",
    )
    .await
    .into_iter()
    .collect();
    assert_eq!(records.len(), 70);
    assert_eq!(again, last_ten);

    // A write the server refuses for a reason that does not pass: the
    // relay does not try again but stops with the code (exit status 1),
    // the slot before the row, which stays PENDING.
    db.client
        .batch_execute("UPDATE public.mark_gate SET closed = 'P0001'")
        .await
        .unwrap();
    db.client.batch_execute(&write(1, 61)).await.unwrap();
    let (status, relay) = tokio::task::spawn_blocking(move || {
        let mut relay = relay;
        (relay.wait(Duration::from_secs(60)), relay)
    })
    .await
    .unwrap();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(1),
        "{}",
        relay.log_text()
    );
    let log = relay.log_text();
    assert!(
        log.contains("cannot record published rows, and trying again would not help"),
        "{log}"
    );
    assert!(log.contains("ROW_MARKING_FAILED"), "{log}");
    assert_eq!(
        log.matches("could not record published rows; retrying")
            .count(),
        0,
        "the refusal was not tried again: {log}"
    );
    assert_eq!(common::rows_with_status(&db.client, "PENDING").await, 1);
    finish(&services, db, &slot, relay).await;
}
