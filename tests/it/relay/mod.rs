//! `outbox-cdc run` end to end, as a process, against the real PostgreSQL and
//! Kafka: the records, per-key order, crash safety, FAILED rows, graceful
//! stop and bad configuration. Expected values are literals or computed here.

mod failures;

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
    let slot = format!("{}_relay", db.name);
    let http = common::free_port();
    let config = relay::config(
        &services,
        &db.name,
        &prefix,
        &slot,
        &format!("\n[http]\nlisten = \"127.0.0.1:{http}\"\n"),
    );
    let mut relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;

    const TOTAL: usize = 50_000;
    let writer = common::spawn_write_keyed(&db.name, 5, TOTAL / 5, 200);
    let mut pauses = common::KillTimes::new(0x9e37_79b9_7f4a_7c15);
    let mut kills = 0;
    let mut windows: Vec<(Lsn, Lsn)> = Vec::new();
    let mut logs: Vec<String> = Vec::new();
    // Replayed rows each relay found published and left out, as its
    // metrics said just before it was killed.
    let left_out_metric = "outbox_cdc_replayed_rows_left_out_total";
    let mut left_out = 0.0;
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
        left_out += relay::metric(http, left_out_metric).unwrap_or(0.0);
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
    left_out += relay::metric(http, left_out_metric).unwrap_or(0.0);
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
    logs.push(relay.log_text());
    // Each restart looks its replay up and leaves out the rows the journal
    // or the table records as published: without the lookup, they would
    // have come twice too.
    eprintln!(
        "{kills} kills: {} records for {TOTAL} messages: {duplicates} duplicates ({:.0} per kill); {left_out} replayed rows left out as published ({:.0} per kill without the lookup)",
        records.len(),
        duplicates as f64 / kills as f64,
        (duplicates as f64 + left_out) / kills as f64,
    );
    // How many it finds depends on where each kill falls (between a journal
    // write and the slot's confirmation): a figure, not a check. The lookup
    // is checked by `a_restart_behind_what_was_recorded_sends_none_of_it_again`.
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

/// A crash leaves the slot behind what the journal recorded; here a copy of
/// the slot made before the rows were written stands for that slot, so the
/// whole replay is rows the relay recorded as published.
#[tokio::test]
async fn a_restart_behind_what_was_recorded_sends_none_of_it_again() {
    let services = require_services!();
    let prefix = common::unique_prefix("behind");
    let db = common::cdc_db(&services, "behind", &prefix).await;
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    let mut relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    relay.signal("TERM");
    assert!(relay.wait(Duration::from_secs(30)).unwrap().success());
    rep::wait_inactive(&db.client, &slot).await;
    let behind = format!("{slot}_behind");
    db.client
        .execute(
            "SELECT pg_copy_logical_replication_slot($1, $2)",
            &[&slot, &behind],
        )
        .await
        .unwrap();

    let mut relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    common::write_keyed(&services, &db.name, 4, 250, 20).await;
    let topic = format!("{prefix}keyed");
    let first = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        1000,
        Duration::from_secs(60),
    );
    assert_eq!(kafka::by_id(&first).len(), 1000);
    common::wait_until_marked(&db.client).await;
    relay.signal("TERM");
    assert!(relay.wait(Duration::from_secs(30)).unwrap().success());
    let before = kafka::written(&services.kafka_bootstrap, &topic);

    // The same relay, its slot put back where the copy stands (the slot
    // the outbox's declaration names, as after a crash): 1 000 rows replayed.
    rep::drop_slot(&db.client, &slot).await;
    db.client
        .execute(
            "SELECT pg_copy_logical_replication_slot($1, $2)",
            &[&behind, &slot],
        )
        .await
        .unwrap();
    rep::drop_slot(&db.client, &behind).await;
    let http = common::free_port();
    let behind_config = relay::config(
        &services,
        &db.name,
        &prefix,
        &slot,
        &format!("\n[http]\nlisten = \"127.0.0.1:{http}\"\n"),
    );
    let mut again = RelayProcess::spawn(&behind_config);
    let end = rep::insert_lsn(&db.client).await;
    let reached =
        rep::wait_confirmed(&db.client, &slot, |lsn| lsn >= end, Duration::from_secs(60)).await;
    assert!(
        reached >= end,
        "the slot behind reached {reached}, not {end}"
    );
    let left_out = relay::metric(http, "outbox_cdc_replayed_rows_left_out_total");
    // Give a wrongly replayed row time to show up.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = kafka::written(&services.kafka_bootstrap, &topic);
    assert_eq!(after, before, "rows recorded as published came again");
    assert_eq!(left_out, Some(1000.0), "{}", again.log_text());
    again.signal("TERM");
    assert!(again.wait(Duration::from_secs(30)).unwrap().success());
    finish(&services, db, &slot, again).await;
}
