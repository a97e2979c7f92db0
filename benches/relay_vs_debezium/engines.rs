//! The relays under measurement (outbox-cdc's engines and Debezium on
//! Kafka Connect): a database, topic and configuration each, started and
//! stopped, and the rows every scenario writes.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Result};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use serde_json::{json, Value as Json};
use tokio_postgres::Client;

use outbox_cdc::config::Config;
use outbox_cdc::connector as connector_config;
use outbox_cdc::kafka::settings;

use crate::args::Args;
use crate::cpu::{usage, Usage};
use crate::engine::Engine;
use crate::rows::{Contract, Outbox};
use crate::services::Services;
use crate::*;

/// One database with the outbox, its bench topic and configuration.
pub(crate) struct Bench {
    pub(crate) db: String,
    /// The first of `topics`: the one topic of every scenario but curve (a).
    pub(crate) topic: String,
    /// One per destination the rows are spread over.
    pub(crate) topics: Vec<String>,
    pub(crate) config_path: PathBuf,
    pub(crate) config: Config,
    pub(crate) client: Client,
    /// Where the scenario's rows go.
    pub(crate) outbox: Outbox,
}

pub(crate) async fn prepare(s: &Services, a: &Args, name: &str, engine: Engine) -> Result<Bench> {
    let admin = s.connect("postgres").await?;
    admin
        .execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active",
            &[&name],
        )
        .await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    admin
        .execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1",
            &[&name],
        )
        .await?;
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await?;
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await?;
    let client = s.connect(name).await?;
    if let Some(sql) = a.contract.setup_sql() {
        client.batch_execute(sql).await?;
    }
    // Unique per run: Kafka Connect keeps a connector's offsets by name.
    let run = format!(
        "{name}_{}",
        SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs()
    );
    let prefix = format!("{run}.");
    let outbox = a.contract.outbox(&prefix);
    let relay_settings = format!(
        "{}\n{}",
        std::env::var("BENCH_RELAY_SETTINGS").unwrap_or_default(),
        match engine {
            Engine::RelayUnmarked => "mark_published = false".to_string(),
            Engine::RelayTransactional => "delivery = \"transactional\"".to_string(),
            Engine::RelayFixedLinger => "when_caught_up = \"linger\"".to_string(),
            // The same build under other settings, run for run beside the
            // default: BENCH_BASELINE_SETTINGS.
            Engine::RelayBaseline => std::env::var("BENCH_BASELINE_SETTINGS").unwrap_or_default(),
            _ => String::new(),
        }
    );
    let kafka_properties = format!(
        "{}\n{}",
        std::env::var("BENCH_KAFKA_PROPERTIES").unwrap_or_default(),
        match engine {
            Engine::RelayLinger0 => "\"linger.ms\" = \"0\"",
            _ => "",
        }
    );
    // The harness's head, as the integration tests write it.
    let head = outbox_cdc_testkit::config_head(
        (&s.base.pg_host, s.base.pg_port, &s.base.pg_user),
        name,
        Some(&format!("{name}_relay")),
        &prefix,
        &s.kafka,
    );
    let head = head.replacen(
        "[outbox]\n",
        &format!("[outbox]\n{}", a.contract.outbox_settings()),
        1,
    );
    let text = format!(
        r#"{head}
[debezium]
connector_name = "{run}"
slot = "{name}_dbz"
topic_prefix = "{run}"

[kafka.properties]
{kafka_properties}

[relay]
{relay_settings}
{http}"#,
        kafka_properties = kafka_properties,
        relay_settings = relay_settings,
        http = match engine {
            Engine::RelayMetrics => format!("\n[http]\nlisten = \"127.0.0.1:{METRICS_PORT}\"\n"),
            Engine::RelayOtel => {
                format!(
                    "\n[otel]\nendpoint = \"http://127.0.0.1:{OTEL_PORT}\"\nsample_ratio = 1.0\n"
                )
            }
            Engine::RelayOtelDefault =>
                format!("\n[otel]\nendpoint = \"http://127.0.0.1:{OTEL_PORT}\"\n"),
            _ => String::new(),
        },
    );
    let dir = PathBuf::from(".cache/bench");
    std::fs::create_dir_all(&dir)?;
    let config_path = dir.join(format!("{name}.toml"));
    std::fs::write(&config_path, &text)?;
    let env = |k: &str| std::env::var(k).ok();
    let config = Config::parse(&text, &config_path, &env).map_err(|e| anyhow!("{e}"))?;
    // A build's migrations are part of it: the baseline migrates with its own.
    relay_command(&engine.relay_bin(), &config_path, &["migrate"])?;
    start_point(a.contract, engine, &config_path, &config, &client).await?;
    let topics = outbox_topics(&config, &outbox, a.destinations)?;
    create_topics(&s.kafka, &topics, a.partitions, s.replication).await?;
    Ok(Bench {
        db: name.to_string(),
        topic: topics[0].clone(),
        topics,
        config_path,
        config,
        client,
        outbox,
    })
}

/// Where the engine starts reading, made before any row is written.
async fn start_point(
    contract: Contract,
    engine: Engine,
    config_path: &Path,
    config: &Config,
    client: &Client,
) -> Result<()> {
    let debezium = matches!(engine, Engine::Debezium | Engine::DebeziumExactlyOnce);
    match contract {
        // The documented deployment: cutover declares the relay and
        // creates its slot.
        Contract::Messaging => relay_command(
            &engine.relay_bin(),
            config_path,
            &["cutover", "--to", if debezium { "debezium" } else { "cdc" }],
        ),
        // A table that keeps no status has nothing to hand over: the
        // engine's slot is where it starts.
        Contract::Debezium => {
            let slot = match debezium {
                true => &config.debezium.slot,
                false => &config.postgres.slot,
            };
            client
                .execute(
                    "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
                    &[slot],
                )
                .await?;
            Ok(())
        }
    }
}

/// The topics of the rows spread over `destinations`, as the contract's
/// router names them.
fn outbox_topics(config: &Config, outbox: &Outbox, destinations: i64) -> Result<Vec<String>> {
    let rule = config
        .outbox
        .contract()
        .and_then(|c| c.router.topic_rule())
        .map_err(|e| anyhow!("{e}"))?;
    Ok(outbox
        .routes(destinations)
        .iter()
        .map(|r| rule.topic(r))
        .collect())
}

/// Sends SIGTERM to `pid` and waits until `child` (the same process, or
/// the one that runs it) exits; kills `child` and fails after `within`.
pub(crate) async fn terminate(
    child: &mut Child,
    pid: u32,
    within: Duration,
    what: &str,
) -> Result<()> {
    Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()?;
    let deadline = Instant::now() + within;
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            child.kill()?;
            bail!("{what} did not stop");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

pub(crate) fn relay_command(bin: &Path, config: &Path, args: &[&str]) -> Result<()> {
    let out = Command::new(bin)
        .args(args)
        .arg("--config")
        .arg(config)
        .output()?;
    if !out.status.success() {
        bail!(
            "outbox-cdc {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

pub(crate) async fn drop_bench(s: &Services, b: Bench) -> Result<()> {
    drop(b.client);
    let admin = s.connect("postgres").await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let active: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE database = $1 AND active",
                &[&b.db],
            )
            .await?
            .get(0);
        if active == 0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    admin
        .execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1 AND NOT active",
            &[&b.db],
        )
        .await?;
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", b.db))
        .await?;
    delete_topics(&s.kafka, &b.topics).await
}

/// Deletes a scenario's topic once its records are counted: a full run
/// writes gigabytes to Kafka, and kept topics filled the disk over a day.
pub(crate) async fn delete_topic(bootstrap: &str, topic: &str) -> Result<()> {
    delete_topics(bootstrap, &[topic.to_string()]).await
}

pub(crate) async fn delete_topics(bootstrap: &str, topics: &[String]) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    for chunk in names.chunks(500) {
        for r in admin.delete_topics(chunk, &AdminOptions::new()).await? {
            r.map_err(|(t, e)| anyhow!("deleting topic {t}: {e}"))?;
        }
    }
    Ok(())
}

pub(crate) async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> Result<()> {
    create_topics(bootstrap, &[topic.to_string()], partitions, 1).await
}

pub(crate) async fn create_topics(
    bootstrap: &str,
    topics: &[String],
    partitions: i32,
    replication: i32,
) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    for chunk in topics.chunks(500) {
        let new: Vec<NewTopic> = chunk
            .iter()
            .map(|t| {
                NewTopic::new(t, partitions, TopicReplication::Fixed(replication))
                    .set("message.timestamp.type", "LogAppendTime")
            })
            .collect();
        for r in admin.create_topics(&new, &AdminOptions::new()).await? {
            r.map_err(|(t, e)| anyhow!("creating topic {t}: {e}"))?;
        }
    }
    // Served before any engine's first record: Debezium's producer does not
    // survive a partition the broker does not serve yet (KAFKA-15591).
    let producer: rdkafka::producer::BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let names = topics.to_vec();
    let served = tokio::task::spawn_blocking(move || {
        use rdkafka::producer::Producer;
        for name in &names {
            outbox_cdc::kafka::readiness::wait_until_served(
                producer.client(),
                name,
                Duration::from_secs(60),
            )
            .map_err(|e| anyhow!("topic {name} was not served within 60 s: {e}"))?;
        }
        Ok::<_, anyhow::Error>(())
    })
    .await?;
    served
}

/// A relay under measurement.
pub(crate) enum Running {
    Relay {
        child: Child,
        scraper: Option<Scraper>,
        /// The collector the `[otel]` engines send their spans to.
        collector: Option<Child>,
    },
    Debezium {
        pid: u32,
        name: String,
    },
}

impl Running {
    pub(crate) async fn start(s: &Services, engine: Engine, b: &Bench) -> Result<(Running, Usage)> {
        match engine {
            Engine::Relay
            | Engine::RelayUnmarked
            | Engine::RelayFixedLinger
            | Engine::RelayLinger0
            | Engine::RelayBaseline
            | Engine::RelayMetrics
            | Engine::RelayOtel
            | Engine::RelayOtelDefault
            | Engine::RelayTransactional => {
                let collector = match engine {
                    Engine::RelayOtel | Engine::RelayOtelDefault => Some(start_collector(b)?),
                    _ => None,
                };
                let log = File::create(b.config_path.with_extension("log"))?;
                let child = Command::new(engine.relay_bin())
                    .args(["run", "--config"])
                    .arg(&b.config_path)
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()?;
                let scraper = (engine == Engine::RelayMetrics).then(Scraper::start);
                Ok((
                    Running::Relay {
                        child,
                        scraper,
                        collector,
                    },
                    Usage::default(),
                ))
            }
            Engine::Debezium | Engine::DebeziumExactlyOnce => {
                // A fresh worker, so its peak memory and CPU are this run's.
                s.services("stop-connect")?;
                if engine == Engine::DebeziumExactlyOnce {
                    s.services_with("start-connect", &[("CONNECT_EXACTLY_ONCE", "1")])?;
                } else {
                    s.services("start-connect")?;
                }
                let pid = s.connect_pid()?;
                let before = usage(pid)?;
                let mut config: serde_json::Map<String, Json> =
                    connector_config::connector_properties(&b.config)?
                        .into_iter()
                        .map(|(k, v)| (k, Json::String(v)))
                        .collect();
                for (k, v) in debezium_tuning() {
                    config.insert(k, Json::String(v));
                }
                if engine == Engine::DebeziumExactlyOnce {
                    config.insert("exactly.once.support".into(), json!("required"));
                }
                let name = b.config.debezium.connector_name.clone();
                let body = json!({"name": name, "config": config}).to_string();
                let (status, text) = s.rest("POST", "/connectors", Some(&body))?;
                if status != 201 && status != 200 {
                    bail!("creating the connector: {status} {text}");
                }
                Ok((Running::Debezium { pid, name }, before))
            }
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        match self {
            Running::Relay { child, .. } => child.id(),
            Running::Debezium { pid, .. } => *pid,
        }
    }

    pub(crate) fn failed(&mut self, s: &Services) -> Option<String> {
        match self {
            Running::Relay { child, .. } => match child.try_wait() {
                Ok(Some(status)) => Some(format!("outbox-cdc exited: {status}")),
                _ => None,
            },
            Running::Debezium { name, .. } => {
                let (_, text) = s
                    .rest("GET", &format!("/connectors/{name}/status"), None)
                    .ok()?;
                text.contains("\"FAILED\"").then_some(text)
            }
        }
    }

    pub(crate) fn stop(self, s: &Services) -> Result<()> {
        match self {
            Running::Relay {
                mut child,
                scraper,
                collector,
            } => {
                if let Some(s) = scraper {
                    s.stop();
                }
                Command::new("kill")
                    .arg("-TERM")
                    .arg(child.id().to_string())
                    .status()?;
                let deadline = Instant::now() + Duration::from_secs(60);
                while child.try_wait()?.is_none() {
                    if Instant::now() > deadline {
                        child.kill()?;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                if let Some(mut c) = collector {
                    let _ = c.kill();
                    let _ = c.wait();
                }
            }
            Running::Debezium { name, .. } => {
                s.rest("DELETE", &format!("/connectors/{name}"), None)?;
                s.services("stop-connect")?;
            }
        }
        Ok(())
    }
}

/// The OTLP/HTTP port of the collector the `[otel]` engines send to.
pub(crate) const OTEL_PORT: u16 = 29318;

/// An OpenTelemetry Collector (`scripts/services.sh` builds it) that takes
/// the spans and prints one line per batch, as a busy one would.
pub(crate) fn start_collector(b: &Bench) -> Result<Child> {
    let bin = std::env::var("OUTBOX_TEST_OTELCOL")
        .map_err(|_| anyhow!("OUTBOX_TEST_OTELCOL from scripts/services.sh env"))?;
    let config = b.config_path.with_extension("otelcol.yaml");
    std::fs::write(
        &config,
        format!(
            "receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: 127.0.0.1:{OTEL_PORT}\n\
             exporters:\n  debug:\n    verbosity: basic\n\
             service:\n  telemetry:\n    metrics:\n      level: none\n  pipelines:\n    traces:\n      receivers: [otlp]\n      exporters: [debug]\n"
        ),
    )?;
    let child = Command::new(bin)
        .arg(format!("--config={}", config.display()))
        .stdout(Stdio::null())
        .stderr(File::create(b.config_path.with_extension("otelcol.log"))?)
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", OTEL_PORT)).is_err() {
        if Instant::now() > deadline {
            bail!("the collector did not listen on {OTEL_PORT}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(child)
}

/// The `[http]` port of the `outbox-cdc-metrics` engine.
pub(crate) const METRICS_PORT: u16 = 29187;

/// Scrapes the relay's `/metrics` every second, as a busy Prometheus would.
pub(crate) struct Scraper {
    pub(crate) stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pub(crate) thread: std::thread::JoinHandle<u64>,
}

impl Scraper {
    pub(crate) fn start() -> Scraper {
        use std::io::{Read, Write};
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut scrapes = 0;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", METRICS_PORT)) {
                    let mut body = Vec::new();
                    if c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").is_ok()
                        && c.read_to_end(&mut body).is_ok()
                    {
                        scrapes += 1;
                    }
                }
                std::thread::sleep(Duration::from_secs(1));
            }
            scrapes
        });
        Scraper { stop, thread }
    }

    pub(crate) fn stop(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Ok(n) = self.thread.join() {
            eprintln!("[bench] /metrics scraped {n} times");
        }
    }
}

pub(crate) fn debezium_tuning() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = DEBEZIUM_TUNING
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    // The relay's own linger, whatever its default is.
    let linger = "linger.ms";
    if let Some((_, v)) = settings::DEFAULTS.iter().find(|(k, _)| *k == linger) {
        out.push((format!("producer.override.{linger}"), v.to_string()));
    }
    for pair in std::env::var("BENCH_DEBEZIUM_PROPERTIES")
        .unwrap_or_default()
        .split(',')
    {
        if let Some((k, v)) = pair.split_once('=') {
            out.retain(|(x, _)| x != k.trim());
            out.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    out
}

/// A backlog of `rows` in transactions of `per_tx`: how long writing it
/// took.
pub(crate) async fn write_backlog(b: &Bench, rows: i64, payload: i32, per_tx: i64) -> Result<f64> {
    write_spread_backlog(b, rows, payload, per_tx, 1).await
}

/// A backlog of `rows` in transactions of `per_tx`, spread over
/// `destinations` destinations: how long writing it took.
pub(crate) async fn write_spread_backlog(
    b: &Bench,
    rows: i64,
    payload: i32,
    per_tx: i64,
    destinations: i64,
) -> Result<f64> {
    let t = Instant::now();
    let from = format!("generate_series(i + 1, least(i + {per_tx}, {rows})) g");
    let write = b.outbox.write(&from, "b", payload, destinations);
    b.client
        .batch_execute(&format!(
            "DO $$
         DECLARE i bigint := 0;
         BEGIN
           WHILE i < {rows} LOOP
             {write};
             COMMIT;
             i := i + {per_tx};
           END LOOP;
         END $$;"
        ))
        .await?;
    let written = t.elapsed().as_secs_f64();
    // The backlog's dirty pages are written now, not by a checkpoint that
    // lands inside one drain and not another.
    b.client.batch_execute("CHECKPOINT").await?;
    Ok(written)
}
