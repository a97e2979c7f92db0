//! Parity: Debezium on Kafka Connect and as Debezium Server, and the relay,
//! on the same corpus, emit the same records byte for byte.

use super::*;
use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use common::relay::{self as relay, RelayProcess};
use outbox_cdc::config::OffsetStorage;

const CORPUS: &str = r#"
INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, created_at,
    producer, occurred_at, correlation_id, causation_id, tenant, partition_key, ordering_key, traceparent, tracestate, baggage,
    schema_subject, schema_uri)
SELECT md5('corpus' || g)::uuid,
       (ARRAY['orders', 'payments', 'audit.log', 'edge_cases'])[1 + g % 4],
       'Type' || (g % 13),
       (ARRAY[0, 1, -1, 2147483647, -2147483648, 42])[1 + g % 6],
       (ARRAY['application/json', '', 'text/plain; charset=utf-8'])[1 + g % 3],
       convert_to('{"n":' || g || '}', 'UTF8'),
       timestamptz '2024-01-01 00:00:00+00' + g * interval '1.001001 second',
       CASE WHEN g % 5 = 0 THEN NULL ELSE 'svc-' || (g % 3) END,
       CASE WHEN g % 7 = 0 THEN NULL ELSE timestamptz '2023-06-30 23:59:59.5+00' + g * interval '1 microsecond' END,
       CASE WHEN g % 4 = 0 THEN NULL ELSE 'corr-' || g END,
       CASE WHEN g % 3 = 0 THEN NULL ELSE 'cause-' || g END,
       CASE WHEN g % 6 = 0 THEN NULL ELSE 'tenant-' || (g % 4) END,
       CASE WHEN g % 3 = 0 THEN NULL ELSE 'key-' || (g % 57) END,
       CASE WHEN g % 2 = 0 THEN NULL ELSE 'ord-' || (g % 9) END,
       CASE WHEN g % 8 = 0 THEN NULL ELSE '00-' || md5('t' || g) || '-' || substr(md5('p' || g), 1, 16) || '-01' END,
       CASE WHEN g % 9 = 0 THEN NULL ELSE 'vendor=' || g END,
       CASE WHEN g % 10 = 0 THEN NULL ELSE 'k=' || g || ',q=1' END,
       CASE WHEN g % 11 = 0 THEN NULL ELSE 'subject-' || (g % 2) END,
       CASE WHEN g % 11 = 0 OR g % 2 = 0 THEN NULL ELSE 'https://schemas.example/' || g END
FROM generate_series(1, 600) g;
"#;

const EDGES: &str = r#"
INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, created_at,
    producer, occurred_at, correlation_id, causation_id, tenant, partition_key, ordering_key, traceparent, tracestate, baggage,
    schema_subject, schema_uri) VALUES
 ('00000000-0000-4000-8000-00000000e001', 'edge_cases', 'AllNull', 7, 'x', '\x00', '2024-02-29 12:00:00+00',
   NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 ('00000000-0000-4000-8000-00000000e002', 'edge_cases', '', 0, '', '', '2024-02-29 12:00:00.000001+00',
   '', '2024-02-29 12:00:00.999999+00', '', '', NULL, '', '', NULL, '', '', '', NULL),
 ('00000000-0000-4000-8000-00000000e003', 'edge_cases', 'Unicode 😀 𝄞 ümlaut', 1, 'text/plain', convert_to('😀', 'UTF8'),
   '2024-01-01 00:00:00.1+00', E'quote" apostrophe\' back\\slash', NULL, E'ends with backslash\\', E'tab\tnewline\ncr\rbell\x07',
   NULL, E'key with \\ backslash', NULL, NULL, E'control \x01\x1f', E'emoji 🎉', NULL, NULL),
 ('00000000-0000-4000-8000-00000000e004', 'edge_cases', 'LongText', 1, 'text/plain', '\x01',
   '1970-01-01 00:00:00+00', repeat('long-', 4000), '0001-01-01 00:00:00+00', repeat('c', 10000), NULL, NULL, 'k-long', NULL,
   NULL, NULL, NULL, NULL, NULL),
 ('00000000-0000-4000-8000-00000000e005', 'edge_cases', 'AllBytes', 2147483647, 'application/octet-stream',
   (SELECT string_agg(set_byte('\x00'::bytea, 0, b), ''::bytea ORDER BY b) FROM generate_series(0, 255) b),
   '9999-12-31 23:59:59.999999+00', NULL, '1900-01-01 00:00:00.000010+00', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 ('00000000-0000-4000-8000-00000000e006', 'edge_cases', 'NearLimit', -2147483648, 'application/octet-stream',
   convert_to(repeat('z', 900000), 'UTF8'), '2000-01-01 00:00:00+00', NULL, NULL, NULL, NULL, NULL, 'k-big', NULL, NULL, NULL,
   NULL, NULL, NULL),
 ('00000000-0000-4000-8000-00000000e007', 'edge_cases', 'FarPast', 1, 'x', '\x02', '0044-03-15 12:00:00+00 BC',
   NULL, '1582-10-15 00:00:00+00', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 ('00000000-0000-4000-8000-00000000e008', 'edge_cases', 'FarFuture', 1, 'x', '\x03', '2999-12-31 23:59:59.123+00',
   NULL, '2262-04-11 23:47:16.854775+00', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 ('00000000-0000-4000-8000-00000000e009', 'edge_cases', 'Infinite', 1, 'x', '\x04', 'infinity',
   NULL, '-infinity', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 ('00000000-0000-4000-8000-00000000e00a', 'edge_cases', 'NegInfinite', 1, 'x', '\x05', '-infinity',
   NULL, 'infinity', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
"#;

/// Concurrent writers, many rows per transaction.
async fn write_corpus(services: &common::Services, db: &str) -> usize {
    let setup = services.connect(db).await;
    setup.batch_execute(CORPUS).await.unwrap();
    setup.batch_execute(EDGES).await.unwrap();
    let mut tasks = Vec::new();
    for w in 0..4 {
        let mut client = services.connect(db).await;
        tasks.push(tokio::spawn(async move {
            for t in 0..25 {
                let tx = client.transaction().await.unwrap();
                tx.execute(
                    "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type,
                         payload, partition_key, correlation_id)
                     SELECT md5('w' || $1::int || '-' || $2::int || '-' || g)::uuid, 'orders', 'Concurrent', g, 'application/json',
                            convert_to('{\"w\":' || $1::int || '}', 'UTF8'),
                            CASE WHEN g % 4 = 0 THEN NULL ELSE 'key-' || (g % 31) END, 'w' || $1::int || 't' || $2::int
                     FROM generate_series(1, 4) g",
                    &[&w, &t],
                )
                .await
                .unwrap();
                tx.commit().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // One transaction of many rows.
    setup
        .execute(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key)
             SELECT md5('bulk' || g)::uuid, 'payments', 'Bulk', g, 'x', convert_to(g::text, 'UTF8'), 'bulk-' || (g % 11)
             FROM generate_series(1, 500) g",
            &[],
        )
        .await
        .unwrap();
    let n: i64 = setup
        .query_one("SELECT count(*) FROM public.messaging_outbox", &[])
        .await
        .unwrap()
        .get(0);
    n as usize
}

/// The parts compared: topic without prefix, partition, key, value, headers.
async fn differential(label: &str, target: Target) {
    let server = target == Target::DebeziumServer;
    let services = common::services().expect("services");
    let (dbz_prefix, relay_prefix) = (
        common::unique_prefix(&format!("{label}d")),
        common::unique_prefix(&format!("{label}r")),
    );
    let db = common::migrated_db(&services, label, &relay_prefix).await;
    db.declare_cdc().await;
    let mut dbz_cfg = test_config(&services, &db.name, &dbz_prefix, label);
    let deployment = if server {
        // Offsets in a Kafka topic here; the file store has its own test.
        dbz_cfg.debezium.server.offset_storage = OffsetStorage::Kafka;
        dbz_cfg.debezium.server.offset_topic = format!("{}offsets", dbz_prefix);
        dbz_cfg.debezium.server.offset_flush_interval_ms = 1000;
        Deployment::Server(start_debezium_server(&dbz_cfg, &db.client).await)
    } else {
        start_debezium(&dbz_cfg, &db.client).await;
        Deployment::Connect(Box::new(dbz_cfg.clone()))
    };
    // Debezium holds its slot: the relay's start-up check would refuse, by
    // design. Here both run on purpose, so the relay checks a different
    // (inactive) Debezium slot name.
    let relay_slot = format!("{}_relay", db.name);
    let config = relay::config(&services, &db.name, &relay_prefix, &relay_slot, "");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("{text}\n[debezium]\nslot = \"{}_elsewhere\"\n", db.name),
    )
    .unwrap();
    let relay = RelayProcess::spawn(&config);
    // Beside Kafka Connect, the corpus also goes through transactional
    // delivery (its own slot and topics), with pgoutput's text forms where
    // the other relay reads binary ones: its records must be the same bytes.
    // Two relays on one outbox is outside the contract: the second records
    // nothing, or the first, looking its replay up at start, would take the
    // rows the second recorded as its own and leave them out.
    let tx_prefix = common::unique_prefix(&format!("{label}t"));
    let tx_slot = format!("{}_relaytx", db.name);
    let tx_relay = (!server).then(|| {
        let config = relay::config(
            &services,
            &db.name,
            &tx_prefix,
            &tx_slot,
            &format!(
                "pgoutput_binary = false\nmark_published = false\nrole = \"copy\"\n{}",
                crate::transactional::TRANSACTIONAL
            ),
        );
        let text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(
            &config,
            format!("{text}\n[debezium]\nslot = \"{}_elsewhere\"\n", db.name),
        )
        .unwrap();
        RelayProcess::spawn(&config)
    });
    for slot in std::iter::once(&relay_slot).chain(tx_relay.as_ref().map(|_| &tx_slot)) {
        for _ in 0..300 {
            if rep::confirmed_flush(&db.client, slot).await.0 > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let started_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let destinations = ["orders", "payments", "audit.log", "edge_cases"];
    let dbz_topics: Vec<String> = destinations
        .iter()
        .map(|d| format!("{dbz_prefix}{d}"))
        .collect();
    // Debezium's producer cannot survive a just created topic on this
    // broker (see `serve_topics`); operators create them beforehand.
    kafka::serve_topics(
        &services.kafka_bootstrap,
        &dbz_topics.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let total = write_corpus(&services, &db.name).await;
    assert!(total >= 1000, "corpus of {total} rows");
    let relay_topics: Vec<String> = destinations
        .iter()
        .map(|d| format!("{relay_prefix}{d}"))
        .collect();
    let relay_records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &relay_topics.iter().map(String::as_str).collect::<Vec<_>>(),
        total,
        Duration::from_secs(90),
    );
    let dbz_records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &dbz_topics.iter().map(String::as_str).collect::<Vec<_>>(),
        total,
        Duration::from_secs(120),
    );
    let tx_records = tx_relay.as_ref().map(|_| {
        let topics: Vec<String> = destinations
            .iter()
            .map(|d| format!("{tx_prefix}{d}"))
            .collect();
        let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
        kafka::consume_ids_at(
            &services.kafka_bootstrap,
            &topics,
            total,
            Duration::from_secs(90),
            kafka::READ_COMMITTED,
        )
    });
    let ended_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    drop(relay);
    drop(tx_relay);
    if let Some(tx_records) = &tx_records {
        let theirs: BTreeMap<String, &Consumed> = dbz_records.iter().map(|r| (r.id(), r)).collect();
        assert_eq!(
            tx_records.len(),
            total,
            "transactional delivery: each row once"
        );
        let differing: Vec<String> = tx_records
            .iter()
            .filter(|r| comparable(r, &tx_prefix) != comparable(theirs[&r.id()], &dbz_prefix))
            .map(Consumed::id)
            .collect();
        assert!(
            differing.is_empty(),
            "transactional delivery: {} of {total} records differ from Debezium's, e.g. {:?}",
            differing.len(),
            differing.first()
        );
        eprintln!("{label}: transactional delivery, {total} records, 0 differences");
    }

    let ours: BTreeMap<String, &Consumed> = relay_records.iter().map(|r| (r.id(), r)).collect();
    let theirs: BTreeMap<String, &Consumed> = dbz_records.iter().map(|r| (r.id(), r)).collect();
    assert_eq!(ours.len(), total, "the relay published every row");
    assert_eq!(
        theirs.len(),
        total,
        "Debezium published every row; it said:\n{}",
        deployment.account()
    );
    let mut differences = Vec::new();
    let mut null_headers_dropped = 0;
    for (id, r) in &ours {
        let d = theirs[id];
        let (mut a, b) = (comparable(r, &relay_prefix), comparable(d, &dbz_prefix));
        if server {
            // Inherent to Debezium Server 3.6.1: its engine (ConverterBuilder)
            // leaves out a header whose converted value is null, where Kafka
            // Connect writes the header with a null value. Pinned exactly:
            // Server's headers are the relay's without the null-valued ones,
            // in the same order, and Server never writes a null header.
            assert!(
                b.4.iter().all(|(_, v)| v.is_some()),
                "Debezium Server wrote a null-valued header for {id}"
            );
            let before = a.4.len();
            a.4.retain(|(_, v)| v.is_some());
            if a.4.len() != before {
                null_headers_dropped += 1;
            }
        }
        if a != b {
            differences.push(format!(
                "message {id}\n relay:\n{} debezium:\n{}",
                describe(&a),
                describe(&b)
            ));
        }
        // Timestamps differ by design; both must be plausible.
        for (who, ts) in [("relay", r.timestamp), ("debezium", d.timestamp)] {
            let ts = ts.expect("a timestamp");
            assert!(
                ts >= started_ms - 5_000 && ts <= ended_ms + 5_000,
                "{who} timestamp {ts} of {id}"
            );
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {total} records differ; the first:\n{}",
        differences.len(),
        differences
            .iter()
            .take(3)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    eprintln!(
        "{label}: {total} records compared, 0 differences; {null_headers_dropped} with null-valued headers left out"
    );
    if server {
        // The corpus has null headers in most records; the pin is not vacuous.
        assert!(null_headers_dropped > total / 2, "{null_headers_dropped}");
    }
    if let Deployment::Server(server) = &deployment {
        sink_producer_took_the_generated_settings(&server.log(), &services.kafka_bootstrap);
    }
    if !server {
        audit_debezium_topics(&config, &relay_prefix, &dbz_prefix, total);
    }
    deployment.stop();
    if server {
        std::fs::remove_dir_all(server_dir(&dbz_cfg)).unwrap();
    }
    rep::drop_slot(&db.client, &relay_slot).await;
    if !server {
        rep::drop_slot(&db.client, &tx_slot).await;
    }
    rep::drop_slot(&db.client, &dbz_cfg.debezium.slot).await;
    db.drop(&services).await;
}

/// `audit` of the outbox against the Debezium deployment's topics: its
/// records are the relay's bytes, so the window audits clean. Four rows of
/// the corpus lie outside the window: created 44 BC, in 9999, at infinity
/// and at -infinity.
fn audit_debezium_topics(
    config: &std::path::Path,
    relay_prefix: &str,
    dbz_prefix: &str,
    total: usize,
) {
    let text = std::fs::read_to_string(config).unwrap();
    let ours = format!("topic_prefix = \"{relay_prefix}\"");
    assert!(text.contains(&ours), "{text}");
    let audited = config.with_extension("debezium-audit.toml");
    std::fs::write(
        &audited,
        text.replace(&ours, &format!("topic_prefix = \"{dbz_prefix}\"")),
    )
    .unwrap();
    let out = common::cli::Cli::new(&[
        "audit",
        "--since",
        "0001-01-01T00:00:00Z",
        "--until",
        "3000-01-01T00:00:00Z",
        "--format",
        "json",
    ])
    .config(&audited)
    .output();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("a JSON report ({e}): {}", common::cli::text(&out)));
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    let dated = total - 4;
    assert_eq!(report["rows"], dated, "{report:#}");
    assert_eq!(report["delivered"], dated, "{report:#}");
    for count in ["lost", "differing", "out_of_order", "orphans", "duplicates"] {
        assert_eq!(report[count], 0, "{count}: {report:#}");
    }
    eprintln!(
        "audit of the Debezium deployment's topics: {} rows, {} records, 0 findings",
        report["rows"], report["records"]
    );
}

/// Server's start-up is where its Kafka sink judges the generated producer
/// settings: the sink's producer is built on the `main` thread, logs the
/// values it took, and names any setting it does not know.
fn sink_producer_took_the_generated_settings(log: &str, bootstrap: &str) {
    let unused: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("(main)") && l.contains("were supplied but are not used"))
        .collect();
    assert!(unused.is_empty(), "unknown sink settings: {unused:?}");
    let start = log
        .lines()
        .position(|l| l.contains("(main) ProducerConfig values"))
        .unwrap_or_else(|| panic!("no sink producer in the log:\n{log}"));
    let block: Vec<&str> = log
        .lines()
        .skip(start + 1)
        .take_while(|l| l.starts_with('\t'))
        .map(str::trim)
        .collect();
    for expected in [
        "acks = -1".to_string(),
        "enable.idempotence = true".to_string(),
        "key.serializer = class org.apache.kafka.common.serialization.ByteArraySerializer".into(),
        "value.serializer = class org.apache.kafka.common.serialization.ByteArraySerializer".into(),
        format!("bootstrap.servers = [{bootstrap}]"),
        // Kafka's built-in placement: murmur2 of the key bytes.
        "partitioner.class = null".into(),
    ] {
        assert!(
            block.contains(&expected.as_str()),
            "{expected} in {block:?}"
        );
    }
}

#[tokio::test]
async fn debezium_and_the_relay_emit_the_same_records() {
    let _services = require_services!();
    differential("parity", Target::Connect).await;
}

#[tokio::test]
async fn debezium_server_and_the_relay_emit_the_same_records() {
    let _services = require_services!();
    differential("server", Target::DebeziumServer).await;
}
