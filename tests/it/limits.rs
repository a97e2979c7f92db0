//! Topics with small `max.message.bytes`: a record too large fails that row
//! alone, whatever was batched with it, in both delivery modes, when the
//! limit changes while the relay runs, and for a principal that may not
//! describe topics.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use outbox_cdc::kafka::limits;
use outbox_cdc::router::Record;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;

use crate::common::cli::Cli;
use crate::common::kafka::{self, READ_COMMITTED, READ_UNCOMMITTED};
use crate::common::relay::{self, RelayProcess};
use crate::common::{self, replication as rep};
use crate::transactional::TRANSACTIONAL;

const BIG: usize = 50_000;

/// One row in its own transaction; `n` is its key's sequence number
/// (`correlation_id`), `payload` its size.
async fn insert(client: &tokio_postgres::Client, key: &str, n: &str, payload: usize) -> String {
    client
        .query_one(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key, correlation_id)
             VALUES (gen_random_uuid(), 'small', 'T', 1, 'x', convert_to(repeat('p', $1), 'UTF8'), $2, $3) RETURNING message_id::text",
            &[&(payload as i32), &key, &n],
        )
        .await
        .unwrap()
        .get(0)
}

/// The rows of the issue: 30 one-row transactions, a 50 kB row, 30 more,
/// then one transaction of 5 small rows, a 50 kB row and 5 small rows.
/// Returns the small rows' ids and the big ones'.
async fn write_scenario(client: &tokio_postgres::Client) -> (Vec<String>, Vec<String>) {
    let mut seq: BTreeMap<String, u32> = BTreeMap::new();
    let mut next = |i: usize| {
        let key = format!("k{}", i % 5);
        let n = seq.entry(key.clone()).or_default();
        *n += 1;
        (key, n.to_string())
    };
    let (mut small, mut big) = (Vec::new(), Vec::new());
    for i in 0..30 {
        let (k, n) = next(i);
        small.push(insert(client, &k, &n, 100).await);
    }
    big.push(insert(client, "k0", "big", BIG).await);
    for i in 30..60 {
        let (k, n) = next(i);
        small.push(insert(client, &k, &n, 100).await);
    }
    client.batch_execute("BEGIN").await.unwrap();
    for i in 60..65 {
        let (k, n) = next(i);
        small.push(insert(client, &k, &n, 100).await);
    }
    big.push(insert(client, "k1", "big", BIG).await);
    for i in 65..70 {
        let (k, n) = next(i);
        small.push(insert(client, &k, &n, 100).await);
    }
    client.batch_execute("COMMIT").await.unwrap();
    (small, big)
}

async fn failed(client: &tokio_postgres::Client) -> Vec<(String, String)> {
    common::text_pairs(
        client,
        "SELECT message_id::text, last_failure_code FROM public.messaging_outbox WHERE status = 'FAILED' ORDER BY 1",
    )
    .await
}

/// Exactly `ids` are FAILED, each with `MESSAGE_TOO_LARGE`.
async fn assert_failed_too_large(
    client: &tokio_postgres::Client,
    ids: &[String],
    why: &str,
    log: &str,
) {
    let mut expected: Vec<(String, String)> = ids
        .iter()
        .map(|id| (id.clone(), "MESSAGE_TOO_LARGE".to_string()))
        .collect();
    expected.sort();
    assert_eq!(failed(client).await, expected, "{why}: {log}");
}

/// `{prefix}small`: 3 partitions that take batches of at most 20 000 bytes.
async fn small_limit_topic(services: &common::Services, prefix: &str) -> String {
    let topic = format!("{prefix}small");
    kafka::create_topic_with(
        &services.kafka_bootstrap,
        &topic,
        3,
        &[("max.message.bytes", "20000")],
    )
    .await;
    topic
}

/// SIGTERM: the relay drains and exits 0; then the slot and the database go.
async fn stop_and_drop(
    mut relay: RelayProcess,
    db: common::TestDb,
    slot: &str,
    services: &common::Services,
) {
    relay.signal("TERM");
    let status = relay.wait(Duration::from_secs(30));
    assert!(status.is_some_and(|s| s.success()), "{}", relay.log_text());
    rep::drop_slot(&db.client, slot).await;
    db.drop(services).await;
}

/// How often each small row may be in Kafka.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Copies {
    /// A read_committed consumer of transactional delivery: once.
    Once,
    /// At least once.
    AtLeastOnce,
}

/// Every small row in Kafka (as often as `copies` says), first deliveries
/// per key in commit order, and none of the big rows.
fn assert_published(records: &[kafka::Consumed], small: &[String], big: &[String], copies: Copies) {
    let by_id = kafka::by_id(records);
    for id in small {
        assert!(by_id.contains_key(id), "small row {id} is in Kafka");
    }
    for id in big {
        assert!(!by_id.contains_key(id), "big row {id} was never published");
    }
    if copies == Copies::Once {
        assert_eq!(records.len(), small.len(), "each small row once");
    }
    for (key, ns) in kafka::first_delivery_order(records) {
        let expected: Vec<u64> = (1..=ns.len() as u64).collect();
        assert_eq!(ns, expected, "{key}: first deliveries in commit order");
    }
}

/// The relay is frozen while the rows are committed, so it meets them as a
/// backlog and batches them as densely as it can.
async fn run_scenario(label: &str, extra: &str, isolation: &str) {
    let services = require_services!();
    let prefix = common::unique_prefix(label);
    let db = common::cdc_db(&services, label, &prefix).await;
    let topic = small_limit_topic(&services, &prefix).await;
    let slot = format!("{}_relay", db.name);
    let config = relay::config(&services, &db.name, &prefix, &slot, extra);
    let relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    relay.signal("STOP");
    let (small, big) = write_scenario(&db.client).await;
    relay.signal("CONT");
    common::wait_until_marked(&db.client).await;
    let log = relay.log_text();
    assert_failed_too_large(&db.client, &big, "only the oversized rows are FAILED", &log).await;
    kafka::consume_ids_at(
        &services.kafka_bootstrap,
        &[&topic],
        small.len(),
        Duration::from_secs(60),
        isolation,
    );
    let records = kafka::consume_all(
        &services.kafka_bootstrap,
        &[&topic],
        Duration::from_secs(5),
        isolation,
    );
    let copies = match isolation {
        READ_COMMITTED => Copies::Once,
        _ => Copies::AtLeastOnce,
    };
    assert_published(&records, &small, &big, copies);
    let log = relay.log_text();
    assert!(
        log.contains("takes batches up to"),
        "the relay learned the topic's limit: {log}"
    );
    assert!(
        log.contains("not sent"),
        "the big rows were refused before sending: {log}"
    );
    stop_and_drop(relay, db, &slot, &services).await;
}

#[tokio::test]
async fn an_oversized_row_fails_alone_among_small_rows_idempotent() {
    run_scenario("lim_idem", "", READ_UNCOMMITTED).await;
}

#[tokio::test]
async fn an_oversized_row_fails_alone_among_small_rows_transactional() {
    run_scenario("lim_txn", TRANSACTIONAL, READ_COMMITTED).await;
}

/// The mapper's fixture record, with a payload of `payload` bytes.
fn record(payload: usize) -> Record {
    let hex = format!("\\x{}", "ab".repeat(payload));
    crate::mapper::map(&[("payload", Some(hex.as_str()))]).unwrap()
}

/// Produces `record` alone, uncompressed, as the relay would.
async fn produce_alone(bootstrap: &str, topic: &str, record: &Record) -> Result<(), String> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("message.max.bytes", "10000000")
        .create()
        .unwrap();
    let mut headers = rdkafka::message::OwnedHeaders::new();
    for (name, value) in record.headers() {
        headers = headers.insert(rdkafka::message::Header { key: name, value });
    }
    let mut r = FutureRecord::to(topic)
        .key(&record.key[..])
        .payload(&record.value[..])
        .headers(headers);
    if let Some(ts) = record.timestamp_ms {
        r = r.timestamp(ts);
    }
    producer
        .send(r, Duration::from_secs(30))
        .await
        .map(|_| ())
        .map_err(|(e, _)| e.to_string())
}

#[tokio::test]
async fn the_framed_size_is_what_the_broker_compares_with_the_limit() {
    let services = require_services!();
    let prefix = common::unique_prefix("framed");
    for payload in [0, 100, 20_000] {
        let r = record(payload);
        let size = limits::framed_size(&r);
        let exact = format!("{prefix}exact{payload}");
        let under = format!("{prefix}under{payload}");
        for (topic, limit) in [(&exact, size), (&under, size - 1)] {
            kafka::create_topic_with(
                &services.kafka_bootstrap,
                topic,
                1,
                &[("max.message.bytes", &limit.to_string())],
            )
            .await;
        }
        let taken = produce_alone(&services.kafka_bootstrap, &exact, &r).await;
        assert_eq!(taken, Ok(()), "{size} bytes fit a limit of {size}");
        let refused = produce_alone(&services.kafka_bootstrap, &under, &r).await;
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("MessageSizeTooLarge")),
            "{size} bytes are over a limit of {}: {refused:?}",
            size - 1
        );
    }
}

#[tokio::test]
async fn a_backlog_of_small_rows_to_a_small_limit_with_lz4_fails_nothing() {
    let services = require_services!();
    let prefix = common::unique_prefix("lz4lim");
    let db = common::cdc_db(&services, "lz4lim", &prefix).await;
    let topic = small_limit_topic(&services, &prefix).await;
    let slot = format!("{}_relay", db.name);
    let config = relay::config(&services, &db.name, &prefix, &slot, "");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace(
            "[kafka.properties]\n",
            "[kafka.properties]\n\"compression.type\" = \"lz4\"\n",
        ),
    )
    .unwrap();
    let relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    relay.signal("STOP");
    const ROWS: i32 = 20_000;
    for chunk in 0..20 {
        db.client
            .execute(
                "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key)
                 SELECT gen_random_uuid(), 'small', 'T', 1, 'application/json',
                        convert_to('{\"order\":' || g || ',\"lines\":[' || repeat('{\"sku\":\"' || md5(g::text) || '\"},', 3) || '{}]}', 'UTF8'),
                        'k' || (g % 50)
                 FROM generate_series($1::int, $2::int) g",
                &[&(chunk * 1000), &(chunk * 1000 + 999)],
            )
            .await
            .unwrap();
    }
    relay.signal("CONT");
    common::wait_until_marked(&db.client).await;
    assert_eq!(failed(&db.client).await, vec![], "{}", relay.log_text());
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        ROWS as usize,
        Duration::from_secs(60),
    );
    assert_eq!(kafka::by_id(&records).len(), ROWS as usize);
    stop_and_drop(relay, db, &slot, &services).await;
}

#[tokio::test]
async fn a_limit_lowered_while_the_relay_streams_fails_only_rows_over_it() {
    let services = require_services!();
    let prefix = common::unique_prefix("lowered");
    let db = common::cdc_db(&services, "lowered", &prefix).await;
    let topic = format!("{prefix}small");
    kafka::create_topic(&services.kafka_bootstrap, &topic, 3).await;
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    let relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    let mut seq: BTreeMap<String, u32> = BTreeMap::new();
    let mut write = |i: usize| {
        let key = format!("k{}", i % 5);
        let n = seq.entry(key.clone()).or_default();
        *n += 1;
        // Every fourth row is 4 000 bytes, over the limit to come.
        (key, n.to_string(), if i % 4 == 0 { 4_000 } else { 100 })
    };
    let mut before = Vec::new();
    for i in 0..40 {
        let (k, n, size) = write(i);
        before.push(insert(&db.client, &k, &n, size).await);
    }
    common::wait_until_marked(&db.client).await;
    let lowered = Command::new("bash")
        .arg(std::env::var("OUTBOX_TEST_SERVICES").unwrap())
        .args(["kafka-configs", "--alter", "--entity-type", "topics"])
        .args([
            "--entity-name",
            &topic,
            "--add-config",
            "max.message.bytes=3000",
        ])
        .output()
        .unwrap();
    assert!(lowered.status.success(), "{lowered:?}");
    let (mut small, mut large) = (Vec::new(), Vec::new());
    db.client.batch_execute("BEGIN").await.unwrap();
    for i in 40..120 {
        let (k, n, size) = write(i);
        let id = insert(&db.client, &k, &n, size).await;
        if size > 3_000 {
            large.push(id)
        } else {
            small.push(id)
        }
        if i % 10 == 9 {
            db.client.batch_execute("COMMIT; BEGIN").await.unwrap();
        }
    }
    db.client.batch_execute("COMMIT").await.unwrap();
    common::wait_until_marked(&db.client).await;
    let log = relay.log_text();
    assert_failed_too_large(
        &db.client,
        &large,
        "only rows over the new limit are FAILED",
        &log,
    )
    .await;
    let mut published = before;
    published.extend(small.iter().cloned());
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        published.len(),
        Duration::from_secs(60),
    );
    let by_id = kafka::by_id(&records);
    for id in &published {
        assert!(by_id.contains_key(id), "{id} is in Kafka");
    }
    for (key, ns) in kafka::first_delivery_order(&records) {
        let mut expected: Vec<u64> = ns.clone();
        expected.sort();
        assert_eq!(ns, expected, "{key}: first deliveries in commit order");
    }
    stop_and_drop(relay, db, &slot, &services).await;
}

#[tokio::test]
async fn without_describe_configs_the_refusals_teach_the_limit_and_check_warns() {
    let services = require_services!();
    let sec = common::Secured::from_env();
    let prefix = format!("{}{}", sec.prefix, common::unique_prefix("nodesc"));
    let db = common::cdc_db(&services, "nodesc", &prefix).await;
    let topic = small_limit_topic(&services, &prefix).await;
    let slot = format!("{}_relay", db.name);
    let plain = relay::config(&services, &db.name, &prefix, &slot, "");
    let text = std::fs::read_to_string(&plain).unwrap();
    let head = &text[..text.find("[kafka]").unwrap()];
    let config = plain.with_file_name(format!("{slot}-secured.toml"));
    std::fs::write(
        &config,
        format!(
            "{head}{}\n[relay]\ndrain_timeout_secs = 20\ncreate_slot = true\n",
            sec.kafka_tables(&sec.password_file, &sec.ca)
        ),
    )
    .unwrap();

    let relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    relay.signal("STOP");
    let (small, big) = write_scenario(&db.client).await;

    // `check` looks at the topics of unpublished rows.
    let check = Cli::new(&["check"]).config(&config).output();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(
        report.contains("TOPIC_LIMIT_UNKNOWN") && report.contains(&topic),
        "check warns that the limit cannot be described: {report}"
    );

    relay.signal("CONT");
    common::wait_until_marked(&db.client).await;
    let log = relay.log_text();
    assert_failed_too_large(&db.client, &big, "only the oversized rows are FAILED", &log).await;
    assert!(
        log.contains("TOPIC_LIMIT_UNKNOWN") || log.contains("max.message.bytes is unknown"),
        "{log}"
    );
    let records = kafka::consume_all(
        &services.kafka_bootstrap,
        &[&topic],
        Duration::from_secs(5),
        READ_UNCOMMITTED,
    );
    assert_published(&records, &small, &big, Copies::AtLeastOnce);
    eprintln!(
        "without DESCRIBE_CONFIGS: {} sessions ended by a refused batch ({} records in Kafka for {} rows)",
        log.lines()
            .filter(|l| l.contains("restarting") && l.contains("BATCH_OVER_TOPIC_LIMIT"))
            .count(),
        records.len(),
        small.len()
    );
    stop_and_drop(relay, db, &slot, &services).await;
}
