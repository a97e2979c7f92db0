//! Debezium parity: real Debezium 3.6.1 on real Kafka Connect runs the
//! generated configuration, Connect's validation accepts every key, and the
//! records it emits equal the relay's, byte for byte.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::kafka::{self, Consumed};
use common::relay::{self as relay, RelayProcess};
use common::replication as rep;
use outbox_cdc::config::{Config, OffsetStorage};
use outbox_cdc::connector::{self, Target};

/// A minimal HTTP/1.1 client for Kafka Connect's REST API.
fn http(method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let url = std::env::var("OUTBOX_TEST_CONNECT_URL")
        .expect("OUTBOX_TEST_CONNECT_URL from scripts/services.sh env");
    let hostport = url.trim_start_matches("http://").trim_end_matches('/');
    let mut stream =
        TcpStream::connect(hostport).unwrap_or_else(|e| panic!("Kafka Connect at {hostport}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let body = body.unwrap_or("");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\nAccept: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        let mut out = String::new();
        let mut rest = rest;
        while let Some((size, after)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            out.push_str(&after[..n]);
            rest = &after[n + 2..];
        }
        out
    } else {
        rest.to_string()
    };
    (status, body)
}

fn test_config(services: &common::Services, db: &str, outbox_prefix: &str, label: &str) -> Config {
    let text = config_text(services, db, outbox_prefix, label);
    Config::parse(&text, std::path::Path::new("test.toml"), &common::env).unwrap()
}

fn config_text(services: &common::Services, db: &str, outbox_prefix: &str, label: &str) -> String {
    let head = common::config_head(
        (&services.pg_host, services.pg_port, &services.pg_user),
        db,
        Some(&format!("{db}_relay")),
        outbox_prefix,
        &services.kafka_bootstrap,
    );
    format!(
        r#"{head}
[debezium]
connector_name = "{db}-{label}"
slot = "{db}_dbz"
topic_prefix = "{db}-{label}"
heartbeat_interval_ms = 1000
"#
    )
}

/// Keys of the generated configuration that Connect's validation does not
/// know. Converter settings (`*.converter.*`) belong to the converter, which
/// Connect does not describe, so they are judged by the converter at start.
fn unknown_keys(generated: &[(String, String)], validation: &serde_json::Value) -> Vec<String> {
    let known: BTreeSet<String> = validation["configs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["definition"]["name"].as_str().map(str::to_string))
        .collect();
    generated
        .iter()
        .map(|(k, _)| k.clone())
        .filter(|k| !known.contains(k))
        .filter(|k| {
            !["key.converter.", "value.converter.", "header.converter."]
                .iter()
                .any(|p| k.starts_with(p))
        })
        .collect()
}

fn validate(config: &[(String, String)]) -> serde_json::Value {
    let body: serde_json::Map<String, serde_json::Value> = config
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    let (status, text) = http(
        "PUT",
        "/connector-plugins/io.debezium.connector.postgresql.PostgresConnector/config/validate",
        Some(&serde_json::Value::Object(body).to_string()),
    );
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

#[tokio::test]
async fn connect_validates_the_generated_configuration_and_knows_every_key() {
    let services = require_services!();
    let db = common::migrated_db(&services, "validate", "v.").await;
    let cfg = test_config(&services, &db.name, "v.", "validate");
    let mut config = connector::connector_properties(&cfg);
    config.push(("name".into(), cfg.debezium.connector_name.clone()));
    let report = validate(&config);
    let errors: Vec<String> = report["configs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| !c["value"]["errors"].as_array().is_none_or(|e| e.is_empty()))
        .map(|c| format!("{}: {}", c["value"]["name"], c["value"]["errors"]))
        .collect();
    assert_eq!(report["error_count"], 0, "{errors:?}");
    assert_eq!(unknown_keys(&config, &report), Vec::<String>::new());

    // A misspelt key, which Connect itself would accept silently, is caught.
    let mut misspelt = config.clone();
    misspelt.push((
        "transforms.outbox.table.field.event.kee".into(),
        "routing_key".into(),
    ));
    misspelt.push(("tombstones.on.delet".into(), "false".into()));
    let report = validate(&misspelt);
    assert_eq!(
        unknown_keys(&misspelt, &report),
        vec![
            "transforms.outbox.table.field.event.kee".to_string(),
            "tombstones.on.delet".to_string()
        ]
    );
    db.drop(&services).await;
}

/// Debezium's slot is held by a walsender and has a confirmed position:
/// created and streaming.
async fn slot_streams(client: &tokio_postgres::Client, slot: &str) -> bool {
    rep::confirmed_flush(client, slot).await.0 > 0
        && client
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active",
                &[&slot],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
            == 1
}

/// Starts the connector through the REST API and waits until its slot streams.
async fn start_debezium(cfg: &Config, client: &tokio_postgres::Client) {
    let config: serde_json::Map<String, serde_json::Value> = connector::connector_properties(cfg)
        .into_iter()
        .map(|(k, v)| (k, serde_json::Value::String(v)))
        .collect();
    let body = serde_json::json!({"name": cfg.debezium.connector_name, "config": config});
    let (status, text) = http("POST", "/connectors", Some(&body.to_string()));
    assert!(status == 201 || status == 200, "{status}: {text}");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, text) = http(
            "GET",
            &format!("/connectors/{}/status", cfg.debezium.connector_name),
            None,
        );
        let status: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let running = status["connector"]["state"] == "RUNNING"
            && status["tasks"]
                .as_array()
                .is_some_and(|t| !t.is_empty() && t.iter().all(|t| t["state"] == "RUNNING"));
        let active = slot_streams(client, &cfg.debezium.slot).await;
        if running && active {
            return;
        }
        if status["tasks"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["state"] == "FAILED"))
        {
            panic!("the Debezium task failed: {text}");
        }
        assert!(Instant::now() < deadline, "Debezium did not start: {text}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn stop_debezium(cfg: &Config) {
    http(
        "DELETE",
        &format!("/connectors/{}", cfg.debezium.connector_name),
        None,
    );
}

/// The corpus: every edge the contract names, plus volume.
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
pub(crate) type Comparable = (
    String,
    i32,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Vec<(String, Option<Vec<u8>>)>,
);

pub(crate) fn comparable(r: &Consumed, prefix: &str) -> Comparable {
    (
        r.topic.trim_start_matches(prefix).to_string(),
        r.partition,
        r.key.clone(),
        r.value.clone(),
        r.headers.clone(),
    )
}

fn show(bytes: &Option<Vec<u8>>) -> String {
    match bytes {
        None => "null".into(),
        Some(b) if b.len() > 80 => format!("{} bytes", b.len()),
        Some(b) => format!("{:?}", String::from_utf8_lossy(b)),
    }
}

fn describe(c: &Comparable) -> String {
    let mut s = format!(
        "  topic {} partition {} key {} value {}\n",
        c.0,
        c.1,
        show(&c.2),
        show(&c.3)
    );
    for (n, v) in &c.4 {
        s.push_str(&format!("    {n} = {}\n", show(v)));
    }
    s
}

/// A Debezium deployment running the generated configuration.
enum Deployment {
    /// A connector on the shared Kafka Connect worker.
    Connect(Box<Config>),
    /// A Debezium Server process on `--target debezium-server`'s file.
    Server(DebeziumServer),
}

impl Deployment {
    /// What Debezium says went wrong: the server's WARN and ERROR lines, or
    /// the connector's task status.
    fn account(&self) -> String {
        match self {
            Deployment::Connect(cfg) => task_failure(cfg).0,
            Deployment::Server(server) => server
                .log()
                .lines()
                .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
                .take(40)
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    fn stop(self) {
        match self {
            Deployment::Connect(cfg) => stop_debezium(&cfg),
            Deployment::Server(server) => drop(server),
        }
    }
}

/// Debezium Server in its own directory, stopped (SIGTERM, then SIGKILL)
/// when dropped.
struct DebeziumServer {
    child: Child,
    dir: PathBuf,
}

impl DebeziumServer {
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

impl Drop for DebeziumServer {
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").arg(&pid).status();
        for _ in 0..100 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `scripts/services.sh debezium-server PROPERTIES DIR` on a free HTTP port.
fn debezium_server_command(properties: &std::path::Path, dir: &std::path::Path) -> Command {
    let services_sh = std::env::var("OUTBOX_TEST_SERVICES")
        .expect("OUTBOX_TEST_SERVICES from scripts/services.sh env");
    let mut cmd = Command::new("bash");
    cmd.arg(services_sh)
        .arg("debezium-server")
        .arg(properties)
        .arg(dir)
        .env(
            "OUTBOX_TEST_DEBEZIUM_SERVER_HTTP_PORT",
            common::free_port().to_string(),
        )
        .stdin(Stdio::null());
    cmd
}

/// Starts Debezium Server through `scripts/services.sh debezium-server` on
/// the generated `application.properties` and waits until its slot streams.
async fn start_debezium_server(cfg: &Config, client: &tokio_postgres::Client) -> DebeziumServer {
    let dir = server_dir(cfg);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    restart_debezium_server(cfg, client).await
}

fn server_dir(cfg: &Config) -> PathBuf {
    std::env::temp_dir().join(format!(
        "outbox-cdc-dbz-server-{}-{}",
        std::process::id(),
        cfg.debezium.slot
    ))
}

/// Starts Debezium Server in the directory a previous run used.
async fn restart_debezium_server(cfg: &Config, client: &tokio_postgres::Client) -> DebeziumServer {
    let dir = server_dir(cfg);
    let properties = dir.join("generated.properties");
    std::fs::write(
        &properties,
        connector::render(cfg, Target::DebeziumServer).unwrap(),
    )
    .unwrap();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("server.log"))
        .unwrap();
    let child = debezium_server_command(&properties, &dir)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut server = DebeziumServer { child, dir };
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!("Debezium Server exited ({status}):\n{}", server.log());
        }
        let streaming = slot_streams(client, &cfg.debezium.slot).await;
        if streaming {
            return server;
        }
        assert!(
            Instant::now() < deadline,
            "Debezium Server did not start:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The relay and one Debezium deployment on the same corpus: every record
/// equal in topic (after the prefix), partition, key, value and headers.
async fn differential(label: &str, server: bool) {
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
    let tx_prefix = common::unique_prefix(&format!("{label}t"));
    let tx_slot = format!("{}_relaytx", db.name);
    let tx_relay = (!server).then(|| {
        let config = relay::config(
            &services,
            &db.name,
            &tx_prefix,
            &tx_slot,
            &format!(
                "pgoutput_binary = false\n{}",
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
    differential("parity", false).await;
}

#[tokio::test]
async fn debezium_server_and_the_relay_emit_the_same_records() {
    let _services = require_services!();
    differential("server", true).await;
}

/// The generated file's default offset store: Debezium Server stops
/// cleanly, keeps its position in `data/offsets.dat` under the engine's
/// name (`kafka`, the sink's, whatever the connector is called), and on
/// start resumes after it: rows written while it was down arrive, rows
/// before it are not sent again.
#[tokio::test]
async fn debezium_server_resumes_from_its_offsets_file() {
    let services = require_services!();
    let prefix = common::unique_prefix("srvfile");
    let db = common::migrated_db(&services, "srvfile", &prefix).await;
    db.declare_cdc().await;
    let mut cfg = test_config(&services, &db.name, &prefix, "srvfile");
    cfg.debezium.server.offset_flush_interval_ms = 500;
    let insert = |from: i32, to: i32| {
        format!(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload)
             SELECT md5('srvfile' || g)::uuid, 'orders', 'T', 1, 'application/json', '\\x7b7d'::bytea
             FROM generate_series({from}, {to}) g"
        )
    };
    let topic = format!("{prefix}orders");
    kafka::serve_topics(&services.kafka_bootstrap, &[&topic]);
    let server = start_debezium_server(&cfg, &db.client).await;
    db.client.batch_execute(&insert(1, 20)).await.unwrap();
    let first = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        20,
        Duration::from_secs(60),
    );
    assert_eq!(first.len(), 20);
    let dir = server.dir.clone();
    drop(server);
    let offsets = std::fs::read(dir.join("data/offsets.dat")).expect("the offsets file");
    let text = String::from_utf8_lossy(&offsets);
    assert!(text.contains("[\"kafka\",{\"server\":\""), "{text}");
    assert!(text.contains("\"lsn\""), "{text}");

    db.client.batch_execute(&insert(21, 40)).await.unwrap();
    let server = restart_debezium_server(&cfg, &db.client).await;
    let all = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        40,
        Duration::from_secs(60),
    );
    drop(server);
    let by_id = kafka::by_id(&all);
    assert_eq!(
        by_id.len(),
        40,
        "every row, including those written while it was down"
    );
    let repeated: Vec<&String> = by_id
        .iter()
        .filter(|(_, r)| r.len() > 1)
        .map(|(id, _)| id)
        .collect();
    assert!(
        repeated.is_empty(),
        "sent again after a clean stop: {repeated:?}"
    );
    std::fs::remove_dir_all(dir).unwrap();
    rep::drop_slot(&db.client, &cfg.debezium.slot).await;
    db.drop(&services).await;
}

/// Server judges its own keys at start-up: a converter without its class
/// (here a misspelt `class`) stops it with Debezium's message, before it
/// touches the slot.
#[tokio::test]
async fn debezium_server_refuses_a_misspelt_format_key_at_start_up() {
    let services = require_services!();
    let db = common::migrated_db(&services, "srvbad", "srvbad.").await;
    db.declare_cdc().await;
    let cfg = test_config(&services, &db.name, "srvbad.", "srvbad");
    let dir = server_dir(&cfg);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let generated = connector::render(&cfg, Target::DebeziumServer).unwrap();
    let broken = generated.replace(
        "debezium.format.header.class=",
        "debezium.format.header.clas=",
    );
    assert_ne!(broken, generated);
    let properties = dir.join("generated.properties");
    std::fs::write(&properties, broken).unwrap();
    let out = debezium_server_command(&properties, &dir).output().unwrap();
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{log}");
    assert!(
        log.contains("`clientprovided` header converter requires a 'class' configuration"),
        "{log}"
    );
    let slots: i64 = db
        .client
        .query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1",
            &[&cfg.debezium.slot],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(slots, 0, "the slot was never created");
    std::fs::remove_dir_all(dir).unwrap();
    db.drop(&services).await;
}

/// The polling platform's table, with routing_key GENERATED ALWAYS ... STORED.
const LEGACY: &str = "
CREATE TABLE public.messaging_outbox (
    message_id uuid PRIMARY KEY, destination text NOT NULL, message_type text NOT NULL,
    message_version integer NOT NULL, content_type text NOT NULL, payload bytea NOT NULL,
    headers jsonb NOT NULL DEFAULT '{}', status text NOT NULL DEFAULT 'PENDING',
    attempts integer NOT NULL DEFAULT 0, created_at timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz, lease_expires_at timestamptz, lease_owner text,
    lease_token bigint NOT NULL DEFAULT 0, next_attempt_at timestamptz, last_failure_code text,
    producer text, occurred_at timestamptz, correlation_id text, causation_id text, tenant text,
    partition_key text, ordering_key text, traceparent text, tracestate text, baggage text,
    schema_subject text, schema_uri text);
ALTER TABLE public.messaging_outbox
    ADD COLUMN routing_key TEXT GENERATED ALWAYS AS (COALESCE(partition_key, message_id::TEXT)) STORED;
CREATE TABLE public.outbox_cdc_heartbeat (id bigserial PRIMARY KEY, connector text NOT NULL, beat_at timestamptz NOT NULL DEFAULT now());
CREATE PUBLICATION outbox_cdc_publication FOR TABLE public.messaging_outbox, public.outbox_cdc_heartbeat WITH (publish = 'insert');
";

/// The connector's status, and the trace of a failed task if one failed.
fn task_failure(cfg: &Config) -> (String, Option<String>) {
    let (_, text) = http(
        "GET",
        &format!("/connectors/{}/status", cfg.debezium.connector_name),
        None,
    );
    let status: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let trace = status["tasks"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["state"] == "FAILED"))
        .map(|failed| failed["trace"].as_str().unwrap_or_default().to_string());
    (text, trace)
}

/// Waits for the connector's task to fail, or for `count` records on `topic`.
async fn outcome(cfg: &Config, bootstrap: &str, topic: &str) -> Result<Vec<Consumed>, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (text, failed) = task_failure(cfg);
        if let Some(trace) = failed {
            return Err(trace);
        }
        if kafka::topic_exists(bootstrap, topic) {
            let records = kafka::consume_ids(bootstrap, &[topic], 1, Duration::from_secs(2));
            if !records.is_empty() {
                return Ok(records);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            Instant::now() < deadline,
            "neither a record nor a failed task: {text}"
        );
    }
}

#[tokio::test]
async fn debezium_fails_on_a_generated_routing_key_and_works_after_the_migration() {
    let services = require_services!();
    let prefix = common::unique_prefix("trap");
    let mut db = services.fresh_db("trap").await;
    db.client.batch_execute(LEGACY).await.unwrap();

    // Before: pgoutput on PostgreSQL 15 does not carry the generated column,
    // so the Event Router cannot find its key field.
    let before = test_config(&services, &db.name, &prefix, "before");
    start_debezium(&before, &db.client).await;
    db.client
        .batch_execute(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key)
             VALUES ('00000000-0000-4000-8000-0000000000f1', 'orders', 'T', 1, 'x', '\\x01', 'customer-1')",
        )
        .await
        .unwrap();
    let topic = format!("{prefix}orders");
    match outcome(&before, &services.kafka_bootstrap, &topic).await {
        Err(trace) => {
            let cause = trace
                .lines()
                .filter(|l| l.contains("routing_key"))
                .collect::<Vec<_>>()
                .join(" | ");
            assert!(
                !cause.is_empty(),
                "the failure names the missing field: {trace}"
            );
            eprintln!("Debezium on the generated column failed as expected: {cause}");
        }
        Ok(records) => assert!(
            records
                .iter()
                .all(|r| r.key.as_deref() != Some(&b"customer-1"[..])),
            "a generated routing_key cannot reach Debezium"
        ),
    }
    stop_debezium(&before);
    tokio::time::sleep(Duration::from_secs(2)).await;
    rep::drop_slot(&db.client, &before.debezium.slot).await;

    // The CDC migration converts the column in place before PostgreSQL 18,
    // and from 18 on keeps it generated and publishes it; either way
    // Debezium now keys on it.
    let cfg = db.config(&prefix);
    outbox_cdc::ops::migrate::migrate(
        &mut db.client,
        &cfg.objects(),
        outbox_cdc::ops::migrate::Scope::CdcOnly,
    )
    .await
    .unwrap();
    let generated: String = db
        .client
        .query_one(
            "SELECT attgenerated::text FROM pg_attribute
              WHERE attrelid = 'public.messaging_outbox'::regclass AND attname = 'routing_key'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let major: u32 = std::env::var("OUTBOX_TEST_PG_MAJOR")
        .unwrap_or_else(|_| "15".into())
        .parse()
        .unwrap();
    assert_eq!(generated, if major >= 18 { "s" } else { "" });
    let after = test_config(&services, &db.name, &prefix, "after");
    start_debezium(&after, &db.client).await;
    db.client
        .batch_execute(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key)
             VALUES ('00000000-0000-4000-8000-0000000000f2', 'orders', 'T', 1, 'x', '\\x02', 'customer-2')",
        )
        .await
        .unwrap();
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        10,
        Duration::from_secs(20),
    );
    let converted = records
        .iter()
        .find(|r| r.id() == "00000000-0000-4000-8000-0000000000f2")
        .expect("Debezium published the row after the migration");
    assert_eq!(converted.key.as_deref(), Some(&b"customer-2"[..]));
    stop_debezium(&after);
    tokio::time::sleep(Duration::from_secs(2)).await;
    rep::drop_slot(&db.client, &after.debezium.slot).await;
    db.drop(&services).await;
}

/// What real Debezium does when a contract column disappears from the table
/// (the user guide's "Schema drift" cites it): its task fails on the next row,
/// naming the column, and publishes nothing of that row.
#[tokio::test]
async fn debezium_fails_its_task_when_a_contract_column_is_dropped() {
    let services = require_services!();
    let prefix = common::unique_prefix("dbzdrift");
    let db = common::migrated_db(&services, "dbzdrift", &prefix).await;
    let cfg = test_config(&services, &db.name, &prefix, "drift");
    start_debezium(&cfg, &db.client).await;
    let insert = |id: &'static str| {
        format!(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload)
             VALUES ('{id}', 'orders', 'T', 1, 'x', '\\x01')"
        )
    };
    db.client
        .batch_execute(&insert("00000000-0000-4000-8000-0000000000d1"))
        .await
        .unwrap();
    let topic = format!("{prefix}orders");
    let first = outcome(&cfg, &services.kafka_bootstrap, &topic)
        .await
        .expect("Debezium publishes while the table is whole");
    assert_eq!(first[0].id(), "00000000-0000-4000-8000-0000000000d1");

    db.client
        .batch_execute(&format!(
            "ALTER TABLE public.messaging_outbox DROP COLUMN baggage; {}",
            insert("00000000-0000-4000-8000-0000000000d2")
        ))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let trace = loop {
        let (text, failed) = task_failure(&cfg);
        if let Some(trace) = failed {
            break trace;
        }
        assert!(
            Instant::now() < deadline,
            "Debezium's task did not fail on the drifted row: {text}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let cause: Vec<&str> = trace.lines().filter(|l| l.contains("baggage")).collect();
    assert!(!cause.is_empty(), "the failure names the column: {trace}");
    eprintln!(
        "Debezium on a dropped contract column: {}",
        cause.join(" | ")
    );
    let records = kafka::consume(
        &services.kafka_bootstrap,
        &[&topic],
        2,
        Duration::from_secs(3),
    );
    assert!(
        records
            .iter()
            .all(|r| r.id() != "00000000-0000-4000-8000-0000000000d2"),
        "Debezium published nothing of the drifted row"
    );
    stop_debezium(&cfg);
    tokio::time::sleep(Duration::from_secs(2)).await;
    rep::drop_slot(&db.client, &cfg.debezium.slot).await;
    db.drop(&services).await;
}

#[tokio::test]
async fn the_documented_cutover_from_polling_to_debezium_loses_nothing() {
    let services = require_services!();
    let prefix = common::unique_prefix("todbz");
    let db = common::migrated_db(&services, "todbz", &prefix).await;
    db.client
        .batch_execute(
            "CREATE TABLE public.key_seq (k text PRIMARY KEY, n bigint NOT NULL);
             INSERT INTO public.key_seq SELECT 'key-' || g, 0 FROM generate_series(0, 19) g;
             INSERT INTO public.outbox_relay_mode (outbox_table, mode) VALUES ('public.messaging_outbox', 'POLLING');",
        )
        .await
        .unwrap();
    let insert = "WITH s AS (UPDATE public.key_seq SET n = n + 1 WHERE k = $1 RETURNING n)
         INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type,
             payload, partition_key, correlation_id, created_at)
         SELECT gen_random_uuid(), 'moved', 'T', 1, 'x', convert_to(s.n::text, 'UTF8'), $1, s.n::text, clock_timestamp() FROM s";
    for i in 0..1500 {
        db.client
            .execute(insert, &[&format!("key-{}", i % 20)])
            .await
            .unwrap();
    }
    db.client
        .batch_execute(
            "UPDATE public.messaging_outbox SET status = 'AMBIGUOUS' WHERE random() < 0.2",
        )
        .await
        .unwrap();
    let writer = {
        let client = services.connect(&db.name).await;
        tokio::spawn(async move {
            for i in 0..500 {
                client
                    .execute(insert, &[&format!("key-{}", i % 20)])
                    .await
                    .unwrap();
            }
        })
    };
    let dir = std::env::temp_dir().join(format!("outbox-cdc-todbz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("outbox-cdc.toml");
    std::fs::write(&file, config_text(&services, &db.name, &prefix, "todbz")).unwrap();
    let cli = |args: &[&str]| {
        std::process::Command::new(crate::common::cli::bin())
            .args(args)
            .arg("--config")
            .arg(&file)
            .output()
            .unwrap()
    };

    // 1. Fence the polling relay, create Debezium's slot, list the backlog.
    let out = cli(&["cutover", "--to", "debezium"]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // 2. Publish the backlog (the same records Debezium makes).
    let out = cli(&["run", "--handover-only"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 3. Deploy the generated connector configuration; it streams from the slot.
    let cfg = Config::load(&file, &common::env).unwrap();
    start_debezium(&cfg, &db.client).await;
    writer.await.unwrap();

    let topic = format!("{prefix}moved");
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        2000,
        Duration::from_secs(60),
    );
    let ids = kafka::by_id(&records);
    assert_eq!(ids.len(), 2000, "every row, from the backlog or the stream");
    for (key, ns) in kafka::first_delivery_order(&records) {
        let expected: Vec<u64> = (1..=ns.len() as u64).collect();
        assert_eq!(ns, expected, "{key}");
    }
    stop_debezium(&cfg);
    tokio::time::sleep(Duration::from_secs(2)).await;
    rep::drop_slot(&db.client, &cfg.debezium.slot).await;
    std::fs::remove_dir_all(dir).unwrap();
    db.drop(&services).await;
}
