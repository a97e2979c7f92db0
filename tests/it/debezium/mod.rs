//! Debezium, for real: Debezium 3.6.1 on real Kafka Connect and as Debezium
//! Server runs the generated configuration. This module holds the harness
//! (Connect's REST API, starting and stopping each deployment, records made
//! comparable); the tests are split by what they test:
//!
//! - [`parity`]: the records Debezium emits equal the relay's, byte for byte;
//! - [`connect`]: Connect's validation accepts every key, and Debezium fails
//!   loudly on the polling platform's table and on a dropped column, and
//!   takes over from polling by the documented cutover;
//! - [`server`]: Debezium Server's own offsets and start-up checks;
//! - [`router`]: the Outbox Event Router on other tables (the debezium
//!   contract, custom options) equals the relay's router;
//! - [`takeover`]: the relay takes a live connector's stream over, on
//!   Connect and on Server, and hands it back, under load;
//! - [`beside`]: the relay beside Debezium, compared by `audit --beside`;
//! - [`rest_tls`]: Connect's REST API over HTTPS with a client certificate.

mod beside;
mod connect;
mod parity;
mod rest_tls;
mod router;
mod server;
mod takeover;

use crate::common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::kafka::{self, Consumed};
use common::replication as rep;
use outbox_cdc::config::Config;
use outbox_cdc::connector::{self, Target};

/// Debezium's `runId` context header: a UUIDv7 each process makes at its
/// start, so two processes' records are compared by its form. Replaces a
/// value of that form by a marker and returns it; a value of another form
/// stays, so the comparison shows it.
fn run_id_by_form(headers: &mut [(String, Option<Vec<u8>>)]) -> Option<Vec<u8>> {
    let (_, value) = headers
        .iter_mut()
        .find(|(n, _)| n == "__debezium.context.runId")?;
    let raw = value.clone()?;
    if let Some(masked) = outbox_cdc::router::run::mask_run_id(&raw) {
        *value = Some(masked);
    }
    Some(raw)
}

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
        .expect("the configuration names a contract")
        .into_iter()
        .map(|(k, v)| (k, serde_json::Value::String(v)))
        .collect();
    start_connector(
        &cfg.debezium.connector_name,
        config,
        &cfg.debezium.slot,
        client,
    )
    .await;
}

/// Starts connector `name` on `config` and waits until `slot` streams.
async fn start_connector(
    name: &str,
    config: serde_json::Map<String, serde_json::Value>,
    slot: &str,
    client: &tokio_postgres::Client,
) {
    let body = serde_json::json!({"name": name, "config": config});
    let (status, text) = http("POST", "/connectors", Some(&body.to_string()));
    assert!(status == 201 || status == 200, "{status}: {text}");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, text) = http("GET", &format!("/connectors/{name}/status"), None);
        let status: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let running = status["connector"]["state"] == "RUNNING"
            && status["tasks"]
                .as_array()
                .is_some_and(|t| !t.is_empty() && t.iter().all(|t| t["state"] == "RUNNING"));
        let active = slot_streams(client, slot).await;
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
