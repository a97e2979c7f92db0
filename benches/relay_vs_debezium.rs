//! outbox-cdc and Debezium side by side on the same local services, with the
//! two raw baselines that bound what any relay can do on this machine.
//!
//!     scripts/bench.sh [--rows N] [--payload BYTES] [--rate MSG_PER_S] [--seconds S]
//!
//! Every figure of one run lands in `docs/benchmark.json` and the table in
//! `docs/benchmark.md`. Time in Kafka is the broker's: the bench topics use
//! `message.timestamp.type=LogAppendTime`, so "first to last record" and
//! "commit to Kafka" are read off the records by a consumer, the same way for
//! both relays. Not a test: it asserts nothing about time.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{Offset, Timestamp as KafkaTimestamp, TopicPartitionList};
use serde_json::{json, Value as Json};
use tokio_postgres::{Client, NoTls};

use outbox_cdc::config::{Config, Secret, SslMode};
use outbox_cdc::contract::debezium as connector_config;
use outbox_cdc::contract::mapper::{self, Record};
use outbox_cdc::contract::outbox;
use outbox_cdc::kafka::settings;
use outbox_cdc::lsn::Lsn;
use outbox_cdc::replication::{
    slot, ConnectOptions, Event, Feedback, ReplicationConnection, SourceOptions, Stream,
};

// The relay's allocator, for the baselines' librdkafka and reader too.
outbox_cdc::use_jemalloc!();

/// The bench's slots: no snapshot, no failover copy.
const NO_SNAPSHOT: slot::NewSlot = slot::NewSlot {
    snapshot: slot::Snapshot::None,
    failover: slot::Failover::Off,
};

const READ_BASELINE: &str = "reader only (no Kafka)";
const PRODUCE_BASELINE: &str = "librdkafka only (no PostgreSQL)";
const RELAY_BIN: &str = env!("CARGO_BIN_EXE_outbox-cdc");
/// Every bench row goes to this destination, so each run has one topic.
const DESTINATION: &str = "orders";
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Debezium tuned for throughput as its documentation describes: larger
/// batches and queue, a short poll interval, and the Connect producer given
/// the relay's own producer settings (batching with linger, idempotent,
/// acks=all, five requests in flight, no compression) through
/// `producer.override.*`. Extra or changed keys: BENCH_DEBEZIUM_PROPERTIES
/// as `key=value,key=value`.
const DEBEZIUM_TUNING: [(&str, &str); 8] = [
    ("max.batch.size", "8192"),
    ("max.queue.size", "32768"),
    ("poll.interval.ms", "50"),
    ("producer.override.batch.size", "1000000"),
    ("producer.override.compression.type", "none"),
    ("producer.override.acks", "all"),
    ("producer.override.enable.idempotence", "true"),
    (
        "producer.override.max.in.flight.requests.per.connection",
        "5",
    ),
];

#[derive(Debug, Clone)]
struct Args {
    rows: i64,
    payload: i32,
    tx_sizes: Vec<i64>,
    rate: u32,
    seconds: u32,
    partitions: i32,
    out: PathBuf,
    /// Scenario groups to run (baselines, backlog, steady) and engines; for
    /// profiling one part. The committed results come from a full run.
    only: Vec<String>,
    engines: Vec<Engine>,
    /// Drains per backlog scenario; the table shows the median.
    repeat: usize,
    /// The one-transaction scenario (`--only bigtx`): its rows and payload.
    big_rows: i64,
    big_payload: i32,
    /// The instructions scenario (`--only instructions`): its smaller backlog.
    instr_rows: i64,
}

impl Args {
    fn parse() -> Result<Args> {
        let mut a = Args {
            rows: 200_000,
            payload: 500,
            tx_sizes: vec![1, 100],
            rate: 2_000,
            seconds: 30,
            partitions: 6,
            out: PathBuf::from("docs"),
            only: ["baselines", "backlog", "steady", "instructions", "bigtx"]
                .map(String::from)
                .to_vec(),
            engines: vec![Engine::Relay, Engine::RelayUnmarked, Engine::Debezium],
            repeat: 3,
            big_rows: 1_000_000,
            big_payload: 1024,
            instr_rows: 20_000,
        };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            let mut value = || it.next().ok_or_else(|| anyhow!("{flag} needs a value"));
            match flag.as_str() {
                "--rows" => a.rows = value()?.parse()?,
                "--payload" => a.payload = value()?.parse()?,
                "--tx-sizes" => {
                    a.tx_sizes = value()?
                        .split(',')
                        .map(str::parse)
                        .collect::<Result<_, _>>()?
                }
                "--rate" => a.rate = value()?.parse()?,
                "--seconds" => a.seconds = value()?.parse()?,
                "--partitions" => a.partitions = value()?.parse()?,
                "--out" => a.out = value()?.into(),
                "--repeat" => a.repeat = value()?.parse()?,
                "--big-rows" => a.big_rows = value()?.parse()?,
                "--big-payload" => a.big_payload = value()?.parse()?,
                "--instr-rows" => a.instr_rows = value()?.parse()?,
                "--only" => a.only = value()?.split(',').map(str::to_string).collect(),
                "--engines" => {
                    a.engines = value()?
                        .split(',')
                        .map(|e| match e {
                            "outbox-cdc" => Ok(Engine::Relay),
                            "outbox-cdc-unmarked" => Ok(Engine::RelayUnmarked),
                            "outbox-cdc-baseline" => Ok(Engine::RelayBaseline),
                            "debezium" => Ok(Engine::Debezium),
                            "outbox-cdc-transactional" => Ok(Engine::RelayTransactional),
                            "outbox-cdc-metrics" => Ok(Engine::RelayMetrics),
                            "debezium-exactly-once" => Ok(Engine::DebeziumExactlyOnce),
                            other => Err(anyhow!("unknown engine {other}")),
                        })
                        .collect::<Result<_>>()?
                }
                // cargo bench passes --bench to harness=false programs.
                "--bench" | "--render-only" => {}
                other => bail!("unknown argument {other}"),
            }
        }
        if a.repeat == 0
            || a.rows < 2
            || a.payload < 0
            || a.rate == 0
            || a.seconds == 0
            || a.tx_sizes.is_empty()
        {
            bail!("rows >= 2, payload >= 0, rate > 0, seconds > 0 and at least one tx size");
        }
        Ok(a)
    }
}

/// The local services, from `scripts/services.sh env`.
#[derive(Debug, Clone)]
struct Services {
    host: String,
    port: u16,
    user: String,
    password: String,
    kafka: String,
    connect_url: String,
    script: PathBuf,
    state: PathBuf,
}

impl Services {
    fn from_env() -> Result<Services> {
        let var = |n: &str| {
            std::env::var(n)
                .with_context(|| format!("{n} is not set: eval \"$(scripts/services.sh env)\""))
        };
        Ok(Services {
            host: var("OUTBOX_TEST_PG_HOST")?,
            port: var("OUTBOX_TEST_PG_PORT")?.parse()?,
            user: var("OUTBOX_TEST_PG_USER")?,
            password: var("OUTBOX_TEST_PG_PASSWORD")?,
            kafka: var("OUTBOX_TEST_KAFKA_BOOTSTRAP")?,
            connect_url: var("OUTBOX_TEST_CONNECT_URL")?,
            script: var("OUTBOX_TEST_SERVICES")?.into(),
            state: var("OUTBOX_TEST_STATE_DIR")?.into(),
        })
    }

    async fn connect(&self, db: &str) -> Result<Client> {
        let url = format!(
            "host={} port={} user={} password={} dbname={db}",
            self.host, self.port, self.user, self.password
        );
        let (c, conn) = tokio_postgres::connect(&url, NoTls).await?;
        tokio::spawn(conn);
        Ok(c)
    }

    fn services(&self, command: &str) -> Result<()> {
        self.services_with(command, &[])
    }

    fn services_with(&self, command: &str, env: &[(&str, &str)]) -> Result<()> {
        let out = Command::new(&self.script)
            .arg(command)
            .envs(env.iter().copied())
            .output()?;
        if !out.status.success() {
            bail!(
                "services.sh {command}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    fn connect_pid(&self) -> Result<u32> {
        let text = std::fs::read_to_string(self.state.join("connect.pid"))?;
        Ok(text.trim().parse()?)
    }

    /// Kafka Connect's REST API through curl: (status, body).
    fn rest(&self, method: &str, path: &str, body: Option<&str>) -> Result<(u16, String)> {
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "-X", method, "-H", "Content-Type: application/json"]);
        cmd.args([
            "-w",
            "\n%{http_code}",
            &format!("{}{path}", self.connect_url),
        ]);
        if let Some(b) = body {
            cmd.args(["--data-binary", b]);
        }
        let out = cmd.output()?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        Ok((code.trim().parse().unwrap_or(0), body.to_string()))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    Relay,
    /// The relay without its PUBLISHED bookkeeping, to show what that costs.
    RelayUnmarked,
    /// Another build of the relay (`BENCH_BASELINE_BIN`), to compare two
    /// versions in one run.
    RelayBaseline,
    Debezium,
    /// `relay.delivery = "transactional"`.
    RelayTransactional,
    /// The relay with its HTTP endpoint on and scraped every second, to
    /// show what the metrics cost.
    RelayMetrics,
    /// Kafka Connect's exactly-once source support (KIP-618): the worker
    /// with `exactly.once.source.support=enabled`, the connector with
    /// `exactly.once.support=required`.
    DebeziumExactlyOnce,
}

impl Engine {
    fn tag(self) -> &'static str {
        match self {
            Engine::Relay => "outbox-cdc",
            Engine::RelayUnmarked => "outbox-cdc (mark_published = false)",
            Engine::RelayBaseline => "outbox-cdc (BENCH_BASELINE_BIN)",
            Engine::Debezium => "debezium",
            Engine::RelayTransactional => "outbox-cdc (delivery = transactional)",
            Engine::RelayMetrics => "outbox-cdc ([http] on, /metrics scraped every second)",
            Engine::DebeziumExactlyOnce => "debezium (exactly.once.support = required)",
        }
    }

    /// Records become visible to read_committed consumers only when their
    /// transaction commits: these engines are read that way, and timed by
    /// when the consumer received a record, not by its append time.
    fn transactional(self) -> bool {
        matches!(
            self,
            Engine::RelayTransactional | Engine::DebeziumExactlyOnce
        )
    }

    fn db_tag(self) -> &'static str {
        match self {
            Engine::Relay => "relay",
            Engine::RelayUnmarked => "relay_unmarked",
            Engine::RelayBaseline => "relay_baseline",
            Engine::Debezium => "debezium",
            Engine::RelayTransactional => "relay_tx",
            Engine::RelayMetrics => "relay_metrics",
            Engine::DebeziumExactlyOnce => "debezium_eos",
        }
    }

    /// The relay binary this engine runs.
    fn relay_bin(self) -> PathBuf {
        match self {
            Engine::RelayBaseline => std::env::var_os("BENCH_BASELINE_BIN")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(RELAY_BIN)),
            _ => PathBuf::from(RELAY_BIN),
        }
    }
}

/// One database with the outbox, its bench topic and configuration.
struct Bench {
    db: String,
    topic: String,
    config_path: PathBuf,
    config: Config,
    client: Client,
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}

async fn prepare(s: &Services, a: &Args, name: &str, engine: Engine) -> Result<Bench> {
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
    // Unique per run: Kafka Connect keeps a connector's offsets by name.
    let run = format!(
        "{name}_{}",
        SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs()
    );
    let prefix = format!("{run}.");
    let topic = format!("{prefix}{DESTINATION}");
    let relay_settings = format!(
        "{}\n{}",
        std::env::var("BENCH_RELAY_SETTINGS").unwrap_or_default(),
        match engine {
            Engine::RelayUnmarked => "mark_published = false",
            Engine::RelayTransactional => "delivery = \"transactional\"",
            _ => "",
        }
    );
    let text = format!(
        r#"[postgres]
host = "{host}"
port = {port}
dbname = "{name}"
user = "{user}"
password = {{ env = "OUTBOX_TEST_PG_PASSWORD" }}
sslmode = "disable"
slot = "{name}_relay"

[outbox]
topic_prefix = "{prefix}"

[kafka]
bootstrap_servers = "{kafka}"

[debezium]
connector_name = "{run}"
slot = "{name}_dbz"
topic_prefix = "{run}"

[kafka.properties]
{kafka_properties}

[relay]
{relay_settings}
{http}"#,
        host = s.host,
        port = s.port,
        user = s.user,
        kafka = s.kafka,
        kafka_properties = std::env::var("BENCH_KAFKA_PROPERTIES").unwrap_or_default(),
        relay_settings = relay_settings,
        http = match engine {
            Engine::RelayMetrics => format!("\n[http]\nlisten = \"127.0.0.1:{METRICS_PORT}\"\n"),
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
    // The documented deployment: cutover declares the relay and creates its
    // slot before any row is written.
    let target = match engine {
        Engine::Relay
        | Engine::RelayUnmarked
        | Engine::RelayBaseline
        | Engine::RelayMetrics
        | Engine::RelayTransactional => "cdc",
        Engine::Debezium | Engine::DebeziumExactlyOnce => "debezium",
    };
    relay_command(
        &engine.relay_bin(),
        &config_path,
        &["cutover", "--to", target],
    )?;
    create_topic(&s.kafka, &topic, a.partitions).await?;
    let client = s.connect(name).await?;
    Ok(Bench {
        db: name.to_string(),
        topic,
        config_path,
        config,
        client,
    })
}

fn relay_command(bin: &Path, config: &Path, args: &[&str]) -> Result<()> {
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

async fn drop_bench(s: &Services, b: Bench) -> Result<()> {
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
    delete_topic(&s.kafka, &b.topic).await
}

/// Deletes a scenario's topic once its records are counted: a full run
/// writes gigabytes to Kafka, and kept topics filled the disk over a day.
async fn delete_topic(bootstrap: &str, topic: &str) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    for r in admin.delete_topics(&[topic], &AdminOptions::new()).await? {
        r.map_err(|(t, e)| anyhow!("deleting topic {t}: {e}"))?;
    }
    Ok(())
}

async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let t = NewTopic::new(topic, partitions, TopicReplication::Fixed(1))
        .set("message.timestamp.type", "LogAppendTime");
    for r in admin.create_topics([&t], &AdminOptions::new()).await? {
        r.map_err(|(t, e)| anyhow!("creating topic {t}: {e}"))?;
    }
    // Served before any engine's first record: Debezium's producer does not
    // survive a partition the broker does not serve yet (KAFKA-15591).
    let producer: rdkafka::producer::BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let name = topic.to_string();
    let served = tokio::task::spawn_blocking(move || {
        use rdkafka::producer::Producer;
        outbox_cdc::kafka::readiness::wait_until_served(
            producer.client(),
            &name,
            Duration::from_secs(60),
        )
    })
    .await?;
    served.map_err(|e| anyhow!("topic {topic} was not served within 60 s: {e}"))
}

/// The rows every scenario writes: one destination, 1 000 routing keys,
/// the payload padded to the requested size.
const INSERT_COLUMNS: &str =
    "message_id, destination, message_type, message_version, content_type, payload, \
     partition_key, tenant, traceparent, correlation_id";

fn insert_values(g: &str, tag: &str, payload: i32) -> String {
    format!(
        "md5('{tag}' || {g})::uuid, '{DESTINATION}', 'OrderPlaced', 1, 'application/json', \
         convert_to('{{\"n\":' || {g} || ',\"pad\":\"' || repeat('x', greatest({payload} - 20, 0)) || '\"}}', 'UTF8'), \
         'customer-' || ({g} % 1000), 'acme', '{TRACEPARENT}', 'corr-' || {g}"
    )
}

async fn write_backlog(c: &Client, rows: i64, payload: i32, per_tx: i64) -> Result<f64> {
    let t = Instant::now();
    let values = insert_values("g", "b", payload);
    c.batch_execute(&format!(
        "DO $$
         DECLARE i bigint := 0;
         BEGIN
           WHILE i < {rows} LOOP
             INSERT INTO messaging_outbox ({INSERT_COLUMNS})
             SELECT {values} FROM generate_series(i + 1, least(i + {per_tx}, {rows})) g;
             COMMIT;
             i := i + {per_tx};
           END LOOP;
         END $$;"
    ))
    .await?;
    Ok(t.elapsed().as_secs_f64())
}

/// What a consumer saw on a topic: for each message id, the broker's append
/// time of its first copy.
#[derive(Default)]
struct Seen {
    first: HashMap<String, i64>,
    records: usize,
    errors: usize,
}

struct Collector {
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<()>>,
}

impl Collector {
    fn start(bootstrap: &str, topic: &str, partitions: i32, engine: Engine) -> Result<Collector> {
        let received = engine.transactional();
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set(
                "isolation.level",
                if received {
                    "read_committed"
                } else {
                    "read_uncommitted"
                },
            )
            .set("group.id", format!("bench-{topic}"))
            .set("enable.auto.commit", "false")
            // Engines timed by append time are read in large fetches, so the
            // bench's own consumer costs the broker little; those timed on
            // receipt are read as soon as the broker can answer.
            .set("fetch.wait.max.ms", if received { "10" } else { "500" })
            .set("fetch.min.bytes", if received { "1" } else { "1048576" })
            .create()?;
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition_offset(topic, p, Offset::Beginning)?;
        }
        consumer.assign(&tpl)?;
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (seen, stop) = (seen.clone(), stop.clone());
            move || -> Result<()> {
                while !stop.load(Ordering::Relaxed) {
                    let Some(msg) = consumer.poll(Duration::from_millis(100)) else {
                        continue;
                    };
                    let mut seen = seen.lock().map_err(|_| anyhow!("poisoned"))?;
                    let m = match msg {
                        Ok(m) => m,
                        Err(_) => {
                            seen.errors += 1;
                            continue;
                        }
                    };
                    let KafkaTimestamp::LogAppendTime(appended) = m.timestamp() else {
                        bail!("the bench topic does not carry LogAppendTime");
                    };
                    let at = if received { now_ms() as i64 } else { appended };
                    let id = m
                        .headers()
                        .and_then(|h| h.iter().find(|h| h.key == outbox::ID_HEADER.name))
                        .and_then(|h| h.value)
                        .map(|v| String::from_utf8_lossy(v).to_string())
                        .ok_or_else(|| anyhow!("a record without an id header"))?;
                    seen.records += 1;
                    seen.first.entry(id).or_insert(at);
                }
                Ok(())
            }
        });
        Ok(Collector { seen, stop, thread })
    }

    fn distinct(&self) -> usize {
        self.seen.lock().map(|s| s.first.len()).unwrap_or(0)
    }

    async fn wait_for(&self, n: usize, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while self.distinct() < n {
            if Instant::now() > deadline || self.thread.is_finished() {
                bail!(
                    "{} of {n} messages reached Kafka within {timeout:?}",
                    self.distinct()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    fn finish(self) -> Result<Seen> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow!("consumer panicked"))??;
        let seen = Arc::try_unwrap(self.seen).map_err(|_| anyhow!("consumer still shared"))?;
        seen.into_inner().map_err(|_| anyhow!("poisoned"))
    }
}

/// CPU seconds and peak resident memory of a process, from /proc.
#[derive(Debug, Clone, Copy, Default)]
struct Usage {
    cpu_s: f64,
    peak_rss_mib: f64,
}

fn usage(pid: u32) -> Result<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat (utime, stime) in USER_HZ (100 on Linux).
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let hwm_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    Ok(Usage {
        cpu_s: (ticks(11) + ticks(12)) / 100.0,
        peak_rss_mib: hwm_kib / 1024.0,
    })
}

/// Busy and total jiffies of the whole machine, from /proc/stat.
fn machine_cpu() -> (u64, u64) {
    let v = machine_fields();
    let total: u64 = v.iter().sum();
    // idle and iowait
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

/// CPU ticks of every live process, named by what it is (a walsender, a
/// PostgreSQL backend, the broker, ...), so the machine's time in a window
/// can be split among them.
fn processes() -> HashMap<u32, (String, u64)> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let (head, rest) = stat.rsplit_once(") ").unwrap_or(("", ""));
        let comm = head.split_once(" (").map_or("", |(_, c)| c);
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        out.insert(pid, (process_group(comm, &cmdline), ticks(11) + ticks(12)));
    }
    out
}

fn process_group(comm: &str, cmdline: &str) -> String {
    if let Some(rest) = cmdline.strip_prefix("postgres: ") {
        for role in [
            "walsender",
            "autovacuum",
            "checkpointer",
            "walwriter",
            "background writer",
        ] {
            if rest.contains(role) {
                return format!("postgres {role}");
            }
        }
        return "postgres backend".into();
    }
    if comm == "postgres" {
        // A backend that has exited but is not yet reaped has no cmdline.
        return if cmdline.contains(" -D ") {
            "postgres postmaster".into()
        } else {
            "postgres backend".into()
        };
    }
    if cmdline.contains("relay_vs_debezium") {
        return "bench".into();
    }
    if cmdline.contains("ConnectDistributed") {
        return "kafka connect".into();
    }
    if cmdline.contains("kafka.Kafka") {
        return "kafka broker".into();
    }
    if cmdline.contains("debezium-server") || cmdline.contains("io.debezium.server") {
        return "debezium server".into();
    }
    if comm.starts_with("kworker") {
        return "kernel workers".into();
    }
    comm.to_string()
}

/// Where the machine's busy time went between two readings, in µs per
/// message: each group of live processes, the kernel's interrupt handling
/// (loopback TCP is received there) and time the hypervisor took (steal);
/// what is left (processes that came and went) is "other".
fn machine_shares(
    p0: &HashMap<u32, (String, u64)>,
    p1: &HashMap<u32, (String, u64)>,
    m0: &[u64],
    m1: &[u64],
    messages: usize,
) -> Json {
    let jiffy = |i: usize| {
        m1.get(i)
            .copied()
            .unwrap_or(0)
            .saturating_sub(m0.get(i).copied().unwrap_or(0)) as f64
            * 10_000.0
    };
    // /proc/stat: user nice system idle iowait irq softirq steal
    let busy = jiffy(0) + jiffy(1) + jiffy(2) + jiffy(5) + jiffy(6) + jiffy(7);
    let mut by: HashMap<String, f64> = HashMap::new();
    for (pid, (group, t1)) in p1 {
        let t0 = p0.get(pid).map_or(0, |(_, t)| *t);
        *by.entry(group.clone()).or_default() += t1.saturating_sub(t0) as f64 * 10_000.0;
    }
    let irq = jiffy(5) + jiffy(6);
    let steal = jiffy(7);
    let attributed: f64 = by.values().sum::<f64>() + irq + steal;
    by.insert("kernel interrupts".into(), irq);
    by.insert("steal".into(), steal);
    by.insert("other".into(), (busy - attributed).max(0.0));
    let mut v: Vec<(String, f64)> = by.into_iter().filter(|(_, us)| *us > 0.0).collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    let per = messages.max(1) as f64;
    Json::Object(
        v.into_iter()
            .take(10)
            .map(|(g, us)| (g, json!(round(us / per, 1))))
            .collect(),
    )
}

/// The cpu line of /proc/stat, in jiffies.
fn machine_fields() -> Vec<u64> {
    std::fs::read_to_string("/proc/stat")
        .unwrap_or_default()
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect()
}

/// A scenario's machine CPU per message counted from its first record to
/// its last: what its throughput is measured over.
const WINDOW_COST: &str = "machine_cpu_us_per_msg_first_to_last";

/// The machine's busy jiffies every few milliseconds, so its CPU time can
/// be counted over the window a throughput is measured in (first to last
/// record) rather than over the whole run around it: start-up and the
/// tail would otherwise count against some scenarios and not others.
struct CpuTrace {
    samples: Arc<Mutex<Vec<(f64, u64)>>>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl CpuTrace {
    fn start() -> CpuTrace {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (samples, stop) = (samples.clone(), stop.clone());
            move || {
                while !stop.load(Ordering::Relaxed) {
                    let busy = machine_cpu().0;
                    if let Ok(mut v) = samples.lock() {
                        v.push((now_ms(), busy));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        });
        CpuTrace {
            samples,
            stop,
            thread,
        }
    }

    /// Busy CPU time between two wall-clock instants (ms since the epoch),
    /// in µs, each end interpolated between the samples around it.
    fn busy_us(self, from_ms: f64, to_ms: f64) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        let samples = self.samples.lock().map(|v| v.clone()).unwrap_or_default();
        let at = |t: f64| -> f64 {
            let i = samples.partition_point(|(ms, _)| *ms <= t);
            match (
                i.checked_sub(1).and_then(|j| samples.get(j)),
                samples.get(i),
            ) {
                (Some(&(t0, b0)), Some(&(t1, b1))) if t1 > t0 => {
                    b0 as f64 + (b1 as f64 - b0 as f64) * (t - t0) / (t1 - t0)
                }
                (Some(&(_, b)), _) | (None, Some(&(_, b))) => b as f64,
                (None, None) => 0.0,
            }
        };
        (at(to_ms) - at(from_ms)).max(0.0) * 10_000.0
    }
}

/// Busy CPU time of the whole machine between two readings, in µs.
fn jiffies_us(from: (u64, u64), to: (u64, u64)) -> f64 {
    to.0.saturating_sub(from.0) as f64 * 10_000.0
}

/// A relay under measurement.
enum Running {
    Relay {
        child: Child,
        scraper: Option<Scraper>,
    },
    Debezium {
        pid: u32,
        name: String,
    },
}

impl Running {
    async fn start(s: &Services, engine: Engine, b: &Bench) -> Result<(Running, Usage)> {
        match engine {
            Engine::Relay
            | Engine::RelayUnmarked
            | Engine::RelayBaseline
            | Engine::RelayMetrics
            | Engine::RelayTransactional => {
                let log = File::create(b.config_path.with_extension("log"))?;
                let child = Command::new(engine.relay_bin())
                    .args(["run", "--config"])
                    .arg(&b.config_path)
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()?;
                let scraper = (engine == Engine::RelayMetrics).then(Scraper::start);
                Ok((Running::Relay { child, scraper }, Usage::default()))
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
                    connector_config::connector_properties(&b.config)
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

    fn pid(&self) -> u32 {
        match self {
            Running::Relay { child, .. } => child.id(),
            Running::Debezium { pid, .. } => *pid,
        }
    }

    fn failed(&mut self, s: &Services) -> Option<String> {
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

    fn stop(self, s: &Services) -> Result<()> {
        match self {
            Running::Relay { mut child, scraper } => {
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
            }
            Running::Debezium { name, .. } => {
                s.rest("DELETE", &format!("/connectors/{name}"), None)?;
                s.services("stop-connect")?;
            }
        }
        Ok(())
    }
}

/// The `[http]` port of the `outbox-cdc-metrics` engine.
const METRICS_PORT: u16 = 29187;

/// Scrapes the relay's `/metrics` every second, as a busy Prometheus would.
struct Scraper {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl Scraper {
    fn start() -> Scraper {
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

    fn stop(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Ok(n) = self.thread.join() {
            eprintln!("[bench] /metrics scraped {n} times");
        }
    }
}

fn debezium_tuning() -> Vec<(String, String)> {
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

async fn wait_until_seen(
    c: &Collector,
    n: usize,
    run: &mut Running,
    s: &Services,
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        match c.wait_for(n, Duration::from_secs(5)).await {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => {
                if let Some(why) = run.failed(s) {
                    bail!("{why}");
                }
            }
        }
    }
}

/// The medians of repeated runs (peak memory: the highest), with every run.
fn summary(head: Json, runs: Vec<Json>) -> Json {
    let mut out = head.as_object().cloned().unwrap_or_default();
    let median = |key: &str| {
        let mut v: Vec<f64> = runs.iter().filter_map(|r| r[key].as_f64()).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    for key in [
        "throughput_msg_s",
        "first_to_last_s",
        "first_record_after_start_s",
        "cpu_s",
        "machine_cpu_us_per_msg",
        WINDOW_COST,
    ] {
        if let Some(v) = median(key) {
            out.insert(key.into(), json!(v));
        }
    }
    let extreme = |key: &str, pick: fn(f64, f64) -> f64| {
        runs.iter().filter_map(|r| r[key].as_f64()).reduce(pick)
    };
    // Background work only ever adds to a window's CPU time, so the
    // cheapest repetition is the nearest to what the work itself costs.
    if let Some(c) = extreme("machine_cpu_us_per_msg", f64::min) {
        out.insert("machine_cpu_us_per_msg_min".into(), json!(c));
    }
    if let Some(c) = extreme(WINDOW_COST, f64::min) {
        out.insert(format!("{WINDOW_COST}_min"), json!(c));
    }
    if let Some(p) = extreme("peak_rss_mib", f64::max) {
        out.insert("peak_rss_mib".into(), json!(p));
    }
    let dups: u64 = runs.iter().filter_map(|r| r["duplicates"].as_u64()).sum();
    if runs.iter().any(|r| !r["duplicates"].is_null()) {
        out.insert("duplicates".into(), json!(dups));
    }
    out.insert("runs".into(), Json::Array(runs));
    Json::Object(out)
}

async fn backlog_once(s: &Services, a: &Args, engine: Engine, per_tx: i64) -> Result<Json> {
    let name = format!("bench_{}_tx{per_tx}", engine.db_tag());
    let b = prepare(s, a, &name, engine).await?;
    let load_s = write_backlog(&b.client, a.rows, a.payload, per_tx).await?;
    let collector = Collector::start(&s.kafka, &b.topic, a.partitions, engine)?;
    let started = now_ms();
    let trace = CpuTrace::start();
    let (mut run, before) = Running::start(s, engine, &b).await?;
    let procs0 = processes();
    let fields0 = machine_fields();
    let cpu0 = machine_cpu();
    wait_until_seen(
        &collector,
        a.rows as usize,
        &mut run,
        s,
        Duration::from_secs(1800),
    )
    .await?;
    let cpu1 = machine_cpu();
    let procs1 = processes();
    let fields1 = machine_fields();
    let after = usage(run.pid())?;
    run.stop(s)?;
    let seen = collector.finish()?;
    drop_bench(s, b).await?;
    let shares = machine_shares(&procs0, &procs1, &fields0, &fields1, seen.first.len());
    let first = seen.first.values().min().copied().unwrap_or(0);
    let last = seen.first.values().max().copied().unwrap_or(0);
    let span_s = (last - first).max(1) as f64 / 1000.0;
    let rate = (seen.first.len() - 1) as f64 / span_s;
    let in_window = trace.busy_us(first as f64, last as f64) / (seen.first.len() - 1) as f64;
    eprintln!(
        "[bench]   {rate:.0} msg/s over {span_s:.2} s; peak RSS {:.0} MiB",
        after.peak_rss_mib
    );
    Ok(json!({
        "backlog_write_s": round(load_s, 2),
        WINDOW_COST: round(in_window, 1),
        "first_record_after_start_s": round((first as f64 - started) / 1000.0, 2),
        "first_to_last_s": round(span_s, 3),
        "throughput_msg_s": round(rate, 0),
        "records": seen.records,
        "duplicates": seen.records - seen.first.len(),
        "cpu_s": round(after.cpu_s - before.cpu_s, 2),
        "machine_cpu_us_per_msg": round(jiffies_us(cpu0, cpu1) / seen.first.len() as f64, 1),
        "machine_cpu_us_per_msg_by_process": shares,
        "peak_rss_mib": round(after.peak_rss_mib, 1),
    }))
}

/// The relay's instructions per message, from Valgrind's callgrind (this
/// machine's perf has no instruction counter): two backlogs of 100-row
/// transactions, `rows` and twice that; the difference divided by `rows`
/// leaves start-up and shutdown out. Repeatable where times are not.
/// Each relay engine of `--engines` (by default the relay alone), e.g.
/// `outbox-cdc,outbox-cdc-baseline` to compare two builds.
/// Whether `perf stat` can count instructions here (many virtual machines
/// expose no hardware counters; callgrind counts them in software then).
fn perf_counts_instructions() -> bool {
    Command::new("perf")
        .args(["stat", "-x,", "-e", "instructions", "true"])
        .output()
        .map(|o| {
            let text = String::from_utf8_lossy(&o.stderr);
            o.status.success()
                && text.lines().any(|l| {
                    l.split(',')
                        .next()
                        .is_some_and(|n| n.trim().parse::<u64>().is_ok())
                })
        })
        .unwrap_or(false)
}

async fn instructions(s: &Services, a: &Args) -> Result<Vec<Json>> {
    if !perf_counts_instructions() && Command::new("valgrind").arg("--version").output().is_err() {
        bail!("--only instructions needs perf with an instruction counter, or Valgrind (Debian's packages linux-perf, valgrind)");
    }
    let mut out = Vec::new();
    for engine in &a.engines {
        if matches!(
            engine,
            Engine::Relay | Engine::RelayBaseline | Engine::RelayMetrics
        ) {
            out.push(instructions_of(s, a, *engine).await?);
        }
    }
    Ok(out)
}

async fn instructions_of(s: &Services, a: &Args, engine: Engine) -> Result<Json> {
    let rows = a.instr_rows;
    let perf = perf_counts_instructions();
    let counter = if perf { "perf stat" } else { "callgrind" };
    let mut totals = Vec::new();
    for n in [rows, 2 * rows] {
        eprintln!(
            "[bench] {} under {counter}: backlog of {n} rows in transactions of 100",
            engine.tag()
        );
        let name = format!("bench_{}_instr_{n}", engine.db_tag());
        let b = prepare(s, a, &name, engine).await?;
        write_backlog(&b.client, n, a.payload, 100).await?;
        let collector = Collector::start(&s.kafka, &b.topic, a.partitions, engine)?;
        let out = b.config_path.with_extension("callgrind");
        let log = File::create(b.config_path.with_extension("log"))?;
        let mut command = if perf {
            let mut c = Command::new("perf");
            c.args(["stat", "-x,", "-e", "instructions", "-o"])
                .arg(&out)
                .arg("--");
            c
        } else {
            let mut c = Command::new("valgrind");
            c.arg("--tool=callgrind")
                .arg(format!("--callgrind-out-file={}", out.display()));
            c
        };
        let mut child = command
            .arg(engine.relay_bin())
            .args(["run", "--config"])
            .arg(&b.config_path)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        // Scraped every second of a run callgrind slows about fiftyfold: an
        // upper bound of what scraping costs per message.
        let scraper = (engine == Engine::RelayMetrics).then(Scraper::start);
        collector
            .wait_for(n as usize, Duration::from_secs(3600))
            .await?;
        if let Some(s) = scraper {
            s.stop();
        }
        Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()?;
        let deadline = Instant::now() + Duration::from_secs(600);
        while child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                child.kill()?;
                bail!("the relay under callgrind did not stop");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        collector.finish()?;
        drop_bench(s, b).await?;
        let text = std::fs::read_to_string(&out)?;
        let total: u64 = text
            .lines()
            .find_map(|l| match perf {
                // perf's CSV: count,unit,event,...
                true => l.split(',').next().filter(|_| l.contains("instructions")),
                false => l.strip_prefix("summary: "),
            })
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| anyhow!("no instruction count in {}", out.display()))?;
        eprintln!("[bench]   {total} instructions");
        totals.push(total);
    }
    let per_msg = totals[1].saturating_sub(totals[0]) as f64 / rows as f64;
    eprintln!("[bench]   {per_msg:.0} instructions per message");
    Ok(json!({
        "scenario": "instructions",
        "engine": engine.tag(),
        "rows": [rows, 2 * rows],
        "rows_per_transaction": 100,
        "instructions": totals,
        "instructions_per_msg": round(per_msg, 0),
        "counter": counter,
    }))
}

/// Writes `rows` rows and waits until they are in Kafka: the engine streams
/// before a measured load begins.
async fn warm_up(
    s: &Services,
    b: &Bench,
    collector: &Collector,
    run: &mut Running,
    rows: i64,
    payload: i32,
) -> Result<()> {
    b.client
        .batch_execute(&format!(
            "INSERT INTO messaging_outbox ({INSERT_COLUMNS}) SELECT {} FROM generate_series(1, {rows}) g",
            insert_values("g", "w", payload)
        ))
        .await?;
    wait_until_seen(collector, rows as usize, run, s, Duration::from_secs(300)).await
}

/// One source transaction of `big_rows` rows committed while the relay
/// streams: whether memory depends on a transaction's size, and how long
/// its last record takes after the commit.
async fn one_big_transaction(s: &Services, a: &Args, engine: Engine) -> Result<Json> {
    let name = format!("bench_{}_bigtx", engine.db_tag());
    eprintln!(
        "[bench] {}: one transaction of {} rows of {} bytes",
        engine.tag(),
        a.big_rows,
        a.big_payload
    );
    let b = prepare(s, a, &name, engine).await?;
    let collector = Collector::start(&s.kafka, &b.topic, a.partitions, engine)?;
    let (mut run, before) = Running::start(s, engine, &b).await?;
    // Streaming, idle, before the transaction begins.
    warm_up(s, &b, &collector, &mut run, 10, a.big_payload).await?;
    let rss_idle = usage(run.pid())?.peak_rss_mib;
    let t = Instant::now();
    b.client
        .batch_execute(&format!(
            "INSERT INTO messaging_outbox ({INSERT_COLUMNS}) SELECT {} FROM generate_series(1, {}) g",
            insert_values("g", "big", a.big_payload),
            a.big_rows
        ))
        .await?;
    let committed_ms = now_ms();
    let write_s = t.elapsed().as_secs_f64();
    let total = 10 + a.big_rows as usize;
    wait_until_seen(&collector, total, &mut run, s, Duration::from_secs(3600)).await?;
    let after = usage(run.pid())?;
    run.stop(s)?;
    let seen = collector.finish()?;
    drop_bench(s, b).await?;
    let last = seen.first.values().max().copied().unwrap_or(0) as f64;
    let commit_to_last_s = (last - committed_ms) / 1000.0;
    eprintln!(
        "[bench]   commit to last record {commit_to_last_s:.1} s; peak RSS {:.0} MiB (idle {rss_idle:.0} MiB)",
        after.peak_rss_mib
    );
    Ok(json!({
        "scenario": "one_transaction",
        "engine": engine.tag(),
        "rows": a.big_rows,
        "payload_bytes": a.big_payload,
        "write_s": round(write_s, 1),
        "commit_to_last_record_s": round(commit_to_last_s, 1),
        "throughput_msg_s": round(a.big_rows as f64 / commit_to_last_s.max(0.001), 0),
        "cpu_s": round(after.cpu_s - before.cpu_s, 2),
        "peak_rss_mib": round(after.peak_rss_mib, 1),
        "peak_rss_before_mib": round(rss_idle, 1),
        "duplicates": seen.records - seen.first.len(),
    }))
}

/// 1-row transactions at a fixed offered rate from several connections; each
/// commit's wall-clock time is matched with its record's append time.
async fn steady(s: &Services, a: &Args, engine: Engine) -> Result<Json> {
    let name = format!("bench_{}_steady", engine.db_tag());
    eprintln!(
        "[bench] {}: steady stream of {} msg/s for {} s",
        engine.tag(),
        a.rate,
        a.seconds
    );
    let b = prepare(s, a, &name, engine).await?;
    let collector = Collector::start(&s.kafka, &b.topic, a.partitions, engine)?;
    let (mut run, _) = Running::start(s, engine, &b).await?;
    // Warm-up: the relay streams before the measured load begins.
    let warm = 100i64;
    warm_up(s, &b, &collector, &mut run, warm, a.payload).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = usage(run.pid())?;
    let t = Instant::now();
    let procs0 = processes();
    let fields0 = machine_fields();
    let cpu0 = machine_cpu();
    // The writers' connections stay open until their backends are counted.
    let (commits, writers) = generate(s, &b.db, a.rate, a.seconds, a.payload).await?;
    let cpu1 = machine_cpu();
    let shares = machine_shares(
        &procs0,
        &processes(),
        &fields0,
        &machine_fields(),
        commits.len(),
    );
    drop(writers);
    let offered_s = t.elapsed().as_secs_f64();
    let busy = (cpu1.0 - cpu0.0) as f64 / (cpu1.1 - cpu0.1).max(1) as f64;
    wait_until_seen(
        &collector,
        warm as usize + commits.len(),
        &mut run,
        s,
        Duration::from_secs(300),
    )
    .await?;
    let after = usage(run.pid())?;
    run.stop(s)?;
    let seen = collector.finish()?;
    drop_bench(s, b).await?;
    let mut lat: Vec<f64> = commits
        .iter()
        .filter_map(|(id, at)| seen.first.get(id).map(|k| *k as f64 - at))
        .collect();
    if lat.len() != commits.len() {
        bail!(
            "{} of {} committed messages were not seen",
            commits.len() - lat.len(),
            commits.len()
        );
    }
    // The worst latency of each 5-second window: whether a p99 comes from
    // one stall or from the whole stream.
    let start_ms = commits.iter().map(|(_, at)| *at).fold(f64::MAX, f64::min);
    let mut windows: Vec<f64> = Vec::new();
    for ((_, at), l) in commits.iter().zip(&lat) {
        let w = ((at - start_ms) / 5000.0) as usize;
        if windows.len() <= w {
            windows.resize(w + 1, 0.0);
        }
        windows[w] = windows[w].max(round(*l, 1));
    }
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| lat[((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1];
    let (p50, p99, max) = (pct(0.50), pct(0.99), pct(1.0));
    eprintln!(
        "[bench]   p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms; machine CPU busy {:.0} %",
        busy * 100.0
    );
    Ok(json!({
        "scenario": "steady",
        "engine": engine.tag(),
        "messages": commits.len(),
        "offered_msg_s": round(commits.len() as f64 / offered_s, 0),
        "latency_ms": {"p50": round(p50, 1), "p99": round(p99, 1), "max": round(max, 1)},
        "max_latency_ms_by_5s": windows,
        "machine_cpu_busy_pct": round(busy * 100.0, 0),
        "machine_cpu_us_per_msg_by_process": shares,
        "cpu_s": round(after.cpu_s - before.cpu_s, 2),
        "peak_rss_mib": round(after.peak_rss_mib, 1),
    }))
}

async fn generate(
    s: &Services,
    db: &str,
    rate: u32,
    seconds: u32,
    payload: i32,
) -> Result<(Vec<(String, f64)>, Vec<Client>)> {
    let workers = 8u32;
    let total = i64::from(rate) * i64::from(seconds);
    let period = Duration::from_secs_f64(f64::from(workers) / f64::from(rate));
    let mut tasks = Vec::new();
    for w in 0..workers {
        let client = s.connect(db).await?;
        let sql = format!(
            "INSERT INTO messaging_outbox ({INSERT_COLUMNS}) VALUES ({}) RETURNING message_id::text",
            insert_values("$1::bigint", "s", payload)
        );
        let stmt = client.prepare(&sql).await?;
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut g = i64::from(w) + 1;
            while g <= total {
                tick.tick().await;
                let row = client.query_one(&stmt, &[&g]).await?;
                out.push((row.get::<_, String>(0), now_ms()));
                g += i64::from(workers);
            }
            Ok::<_, tokio_postgres::Error>((out, client))
        }));
    }
    let mut all = Vec::new();
    let mut clients = Vec::new();
    for t in tasks {
        let (out, client) = t.await??;
        all.extend(out);
        clients.push(client);
    }
    Ok((all, clients))
}

/// The raw slot-read cost of a backlog in transactions of `per_tx`: the
/// library's reader with no Kafka, read twice from two slots at one position.
/// Once as fast as it goes, once paced to [`READ_PACE`] of that rate,
/// because a reader that keeps up takes each message as the walsender sends
/// it, one segment and one wake-up each, while a relay busy producing lets
/// the socket fill and the walsender write large segments, which costs both
/// sides less per row. The bound takes the cheaper of the two: what reading
/// costs at least. With `records`, a third slot's rows mapped into the
/// records the produce baseline sends (not timed).
async fn slot_read(
    s: &Services,
    a: &Args,
    per_tx: i64,
    records: bool,
) -> Result<(Json, Vec<Record>)> {
    eprintln!(
        "[bench] baseline: slot read of {} rows in transactions of {per_tx}",
        a.rows
    );
    let name = "bench_baseline";
    let b = prepare(s, a, name, Engine::Relay).await?;
    let opts = ConnectOptions {
        host: s.host.clone(),
        port: s.port,
        dbname: name.into(),
        user: s.user.clone(),
        password: Some(Secret::new(s.password.clone())),
        sslmode: SslMode::Disable,
        sslrootcert: None,
        application_name: "outbox-cdc-bench".into(),
        connect_timeout: Duration::from_secs(10),
        more_hosts: Vec::new(),
    };
    let source = SourceOptions {
        connect: opts.clone(),
        slot: format!("{name}_read"),
        publication: b.config.postgres.publication.clone(),
        schema: "public".into(),
        table: "messaging_outbox".into(),
        create_slot: false,
        failover_slot: false,
        streamed_before: false,
        messages: false,
        // As the relay reads it (`relay.pgoutput_binary`).
        binary: std::env::var("BENCH_RELAY_SETTINGS")
            .map_or(true, |s| !s.contains("pgoutput_binary = false")),
        tuning: Default::default(),
    };
    let paced_slot = format!("{name}_paced");
    let records_slot = format!("{name}_records");
    let mut conn = ReplicationConnection::connect(&opts).await?;
    slot::create(&mut conn, &source.slot, NO_SNAPSHOT).await?;
    slot::create(&mut conn, &paced_slot, NO_SNAPSHOT).await?;
    if records {
        slot::create(&mut conn, &records_slot, NO_SNAPSHOT).await?;
    }
    conn.close().await;
    write_backlog(&b.client, a.rows, a.payload, per_tx).await?;

    let free = timed_read(&b.client, &source, a.rows, None).await?;
    let pace = free["throughput_msg_s"].as_f64().unwrap_or(0.0) * READ_PACE;
    let source = SourceOptions {
        slot: paced_slot,
        ..source
    };
    let paced = timed_read(&b.client, &source, a.rows, Some(pace).filter(|p| *p > 0.0)).await?;
    let run = cheaper_of(free, paced, pace, "row");

    let mut out = Vec::new();
    if records {
        let source = SourceOptions {
            slot: records_slot,
            ..source
        };
        let (feedback, _) = Feedback::new(Lsn::ZERO);
        let mut stream = Stream::open(&b.client, &source, &feedback).await?;
        let prefix = &b.config.outbox.topic_prefix;
        let mut commit_time = None;
        while (out.len() as i64) < a.rows {
            match stream.events.recv().await {
                Some(Event::Begin {
                    commit_time: at, ..
                }) => commit_time = Some(at),
                Some(Event::Rows(r)) => {
                    let at = commit_time.ok_or_else(|| anyhow!("a row outside a transaction"))?;
                    for row in r {
                        out.push(mapper::map(row, prefix, at).map_err(|e| anyhow!("{e:?}"))?);
                    }
                }
                Some(Event::Commit { end_lsn, .. }) => feedback.settle(end_lsn),
                None => break,
            }
        }
        let _ = stream.stop().await;
    }
    drop_bench(s, b).await?;
    Ok((run, out))
}

/// The pace of the slower read, as a share of the unpaced rate: below the
/// rate the walsender reaches alone, so its socket fills, and about where
/// relay drains run.
const READ_PACE: f64 = 0.7;

/// One timed read of `rows` rows from `source`'s slot, keeping none of them
/// (the relay holds a row only until Kafka has it, and 200 000 rows held
/// would time the bench's own allocations); with `pace`, no faster than that
/// many rows per second.
async fn timed_read(
    client: &Client,
    source: &SourceOptions,
    rows: i64,
    pace: Option<f64>,
) -> Result<Json> {
    let (feedback, _) = Feedback::new(Lsn::ZERO);
    let procs0 = processes();
    let fields0 = machine_fields();
    let trace = CpuTrace::start();
    let start = Instant::now();
    let cpu0 = machine_cpu();
    let mut stream = Stream::open(client, source, &feedback).await?;
    let mut read = 0usize;
    let mut next_check = 1000;
    let (mut first, mut last, mut first_chunk) = (0.0, 0.0, 0);
    while (read as i64) < rows {
        match stream.events.recv().await {
            Some(Event::Rows(r)) => {
                if read == 0 {
                    first = now_ms();
                    first_chunk = r.len();
                }
                read += r.len();
                last = now_ms();
                if let Some(pace) = pace.filter(|_| read >= next_check) {
                    next_check += 1000;
                    let due = Duration::from_secs_f64(read as f64 / pace);
                    if let Some(wait) = due.checked_sub(start.elapsed()) {
                        tokio::time::sleep(wait).await;
                    }
                }
            }
            Some(Event::Commit { end_lsn, .. }) => feedback.settle(end_lsn),
            Some(_) => {}
            None => break,
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu1 = machine_cpu();
    let procs1 = processes();
    let fields1 = machine_fields();
    let _ = stream.stop().await;
    let shares = machine_shares(&procs0, &procs1, &fields0, &fields1, read);
    // Rows come in chunks: the first chunk's rows are not in the window.
    let in_window = trace.busy_us(first, last) / read.saturating_sub(first_chunk).max(1) as f64;
    Ok(json!({"first_to_last_s": round(secs, 3),
              WINDOW_COST: round(in_window, 1),
              "throughput_msg_s": round(read as f64 / secs, 0),
              "machine_cpu_us_per_msg": round(jiffies_us(cpu0, cpu1) / read.max(1) as f64, 1),
              "machine_cpu_us_per_msg_by_process": shares}))
}

/// How many distinct records the produce baseline cycles through: about the
/// relay's in-flight window.
const HOT_RECORDS: usize = 5000;

/// The raw produce cost: the same records produced by librdkafka with the
/// relay's producer settings and no PostgreSQL, timed in Kafka like the
/// rest. Once as fast as it goes, once paced to [`PRODUCE_PACE`] of that
/// rate, because a producer that outruns its broker thread contends with it
/// for every partition queue, where a relay drain hands over records at
/// about half that rate. The bound takes the cheaper of the two.
async fn raw_produce(s: &Services, a: &Args, records: &[Record]) -> Result<Json> {
    eprintln!(
        "[bench] baseline: producing {} records with no PostgreSQL",
        records.len()
    );
    let free = produce_once(s, a, records, None).await?;
    let pace = free["throughput_msg_s"].as_f64().unwrap_or(0.0) * PRODUCE_PACE;
    let paced = produce_once(s, a, records, Some(pace).filter(|p| *p > 0.0)).await?;
    Ok(cheaper_of(free, paced, pace, "msg"))
}

/// A baseline's result from its free and paced runs: the free run's rate,
/// the cheaper run's machine time (a bound counts what the work costs at
/// least), both runs kept.
fn cheaper_of(free: Json, paced: Json, pace: f64, unit: &str) -> Json {
    let cost = |r: &Json| r[WINDOW_COST].as_f64().unwrap_or(f64::MAX);
    let cheaper = if cost(&paced) < cost(&free) {
        &paced
    } else {
        &free
    };
    eprintln!(
        "[bench]   {} {unit}/s at {} µs/{unit}; paced at {pace:.0}: {} µs/{unit}",
        free["throughput_msg_s"], free[WINDOW_COST], paced[WINDOW_COST]
    );
    json!({
        "first_to_last_s": free["first_to_last_s"],
        "throughput_msg_s": free["throughput_msg_s"],
        "machine_cpu_us_per_msg": cheaper["machine_cpu_us_per_msg"],
        WINDOW_COST: cheaper[WINDOW_COST],
        "machine_cpu_us_per_msg_by_process": cheaper["machine_cpu_us_per_msg_by_process"],
        "unpaced": free,
        "paced": paced,
    })
}

/// The pace of the slower produce, as a share of the unpaced rate: about
/// where relay drains run.
const PRODUCE_PACE: f64 = 0.5;

/// One timed produce of `records` to a topic of its own; with `pace`, no
/// faster than that many records per second.
async fn produce_once(
    s: &Services,
    a: &Args,
    records: &[Record],
    pace: Option<f64>,
) -> Result<Json> {
    let prefix = format!(
        "bench_produce-{}.",
        SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs()
    );
    let topic = format!("{prefix}{DESTINATION}");
    create_topic(&s.kafka, &topic, a.partitions).await?;
    let collector = Collector::start(&s.kafka, &topic, a.partitions, Engine::Relay)?;
    let text = format!("[postgres]\nhost = \"h\"\ndbname = \"d\"\nuser = \"u\"\n[outbox]\n[kafka]\nbootstrap_servers = \"{}\"\n", s.kafka);
    let cfg =
        Config::parse(&text, Path::new("bench.toml"), &|_| None).map_err(|e| anyhow!("{e}"))?;
    let cluster = cfg.kafka_cluster(&|_| None).map_err(|e| anyhow!("{e}"))?;
    let cc = settings::producer_config(&cluster, None);
    // As the relay produces: a polling thread serves delivery reports.
    let producer: ThreadedProducer<rdkafka::producer::DefaultProducerContext> = cc.create()?;
    let n = records.len();
    let procs0 = processes();
    let fields0 = machine_fields();
    let trace = CpuTrace::start();
    let start = Instant::now();
    let cpu0 = machine_cpu();
    // Records from a working set of the size the relay has in hand, each
    // with an id of its own: read from an array of 200 000 records, every
    // one missed the cache (the relay produces records it has just decoded),
    // and the baseline cost more per message than a relay drain's producing.
    let hot = &records[..records.len().min(HOT_RECORDS)];
    let mut id = String::with_capacity(36);
    for (n, r) in (0..n).zip(hot.iter().cycle()) {
        if let Some(pace) = pace.filter(|_| n % 1000 == 0) {
            let due = Duration::from_secs_f64(n as f64 / pace);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        id.clear();
        write!(id, "00000000-0000-4000-8000-{n:012}")?;
        let mut headers = OwnedHeaders::new_with_capacity(r.headers().len());
        for (name, value) in r.headers() {
            let value = match name == outbox::ID_HEADER.name {
                true => Some(id.as_bytes()),
                false => value,
            };
            headers = headers.insert(Header { key: name, value });
        }
        let mut rec = BaseRecord::<[u8], [u8]>::to(&topic)
            .key(&r.key)
            .payload(&r.value)
            .headers(headers);
        if let Some(ts) = r.timestamp_ms {
            rec = rec.timestamp(ts);
        }
        loop {
            match producer.send(rec) {
                Ok(()) => break,
                Err((_, back)) => {
                    rec = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(120))?;
    let wall = start.elapsed().as_secs_f64();
    collector.wait_for(n, Duration::from_secs(300)).await?;
    let cpu1 = machine_cpu();
    let shares = machine_shares(&procs0, &processes(), &fields0, &machine_fields(), n);
    let seen = collector.finish()?;
    delete_topic(&s.kafka, &topic).await?;
    let first = seen.first.values().min().copied().unwrap_or(0);
    let last = seen.first.values().max().copied().unwrap_or(0);
    let span_s = (last - first).max(1) as f64 / 1000.0;
    let rate = (n - 1) as f64 / span_s;
    let in_window = trace.busy_us(first as f64, last as f64) / (n - 1) as f64;
    Ok(json!({"first_to_last_s": round(span_s, 3),
               WINDOW_COST: round(in_window, 1), "producer_wall_s": round(wall, 3), "throughput_msg_s": round(rate, 0),
               "machine_cpu_us_per_msg": round(jiffies_us(cpu0, cpu1) / n as f64, 1),
               "machine_cpu_us_per_msg_by_process": shares}))
}

fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

fn command_line(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .map(|o| {
            let text = if o.stdout.is_empty() {
                o.stderr
            } else {
                o.stdout
            };
            String::from_utf8_lossy(&text)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .unwrap_or_default()
}

async fn environment(s: &Services) -> Result<Json> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: f64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default();
    let pg = s.connect("postgres").await?;
    let pg_version: String = pg.query_one("SHOW server_version", &[]).await?.get(0);
    s.services("start-connect")?;
    let (_, root) = s.rest("GET", "/", None)?;
    let kafka: Json = serde_json::from_str(&root).unwrap_or_default();
    let (_, plugins) = s.rest("GET", "/connector-plugins", None)?;
    let plugins: Json = serde_json::from_str(&plugins).unwrap_or_default();
    let debezium = plugins
        .as_array()
        .and_then(|p| {
            p.iter().find(|p| {
                p["class"]
                    .as_str()
                    .is_some_and(|c| c.contains("PostgresConnector"))
            })
        })
        .and_then(|p| p["version"].as_str())
        .unwrap_or("?")
        .to_string();
    let worker = std::fs::read_to_string(s.state.join("connect.pid"))
        .ok()
        .and_then(|pid| std::fs::read(format!("/proc/{}/cmdline", pid.trim())).ok())
        .map(|c| {
            c.split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).to_string())
                .filter(|a| a.starts_with("-X"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    s.services("stop-connect")?;
    Ok(json!({
        "machine": {
            "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "memory_gib": round(mem_kib / 1024.0 / 1024.0, 1),
            "cpu": model,
            "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        },
        "versions": {
            "outbox-cdc": format!("{} ({})", env!("CARGO_PKG_VERSION"), command_line("git", &["describe", "--always", "--dirty"])),
            "rustc": command_line("rustc", &["--version"]),
            "postgresql": pg_version,
            "kafka": kafka["version"],
            "debezium": debezium,
            "java": command_line("java", &["-version"]),
        },
        "connect_worker_jvm": worker,
    }))
}

fn find<'a>(results: &'a [Json], scenario: &str, engine: &str) -> Option<&'a Json> {
    results
        .iter()
        .find(|r| r["scenario"] == scenario && r["engine"] == engine)
}

fn ratios(a: &Args, results: &[Json]) -> Json {
    let num = |r: Option<&Json>, path: &[&str]| -> Option<f64> {
        let mut v = r?;
        for p in path {
            v = &v[*p];
        }
        v.as_f64()
    };
    let relay = Engine::Relay.tag();
    let dbz = Engine::Debezium.tag();
    let mut out = serde_json::Map::new();
    for tx in &a.tx_sizes {
        let sc = format!("backlog_tx{tx}");
        let r = num(find(results, &sc, relay), &["throughput_msg_s"]);
        let d = num(find(results, &sc, dbz), &["throughput_msg_s"]);
        if let (Some(r), Some(d)) = (r, d) {
            out.insert(
                format!("throughput_vs_debezium_tx{tx}"),
                json!(round(r / d, 2)),
            );
        }
    }
    // Transactional delivery against idempotent delivery and against
    // Debezium with exactly-once source support.
    let tx = Engine::RelayTransactional.tag();
    let eos = Engine::DebeziumExactlyOnce.tag();
    for size in &a.tx_sizes {
        let sc = format!("backlog_tx{size}");
        let t = num(find(results, &sc, tx), &["throughput_msg_s"]);
        for (name, other) in [("idempotent", relay), ("debezium_exactly_once", eos)] {
            let o = num(find(results, &sc, other), &["throughput_msg_s"]);
            if let (Some(t), Some(o)) = (t, o) {
                out.insert(
                    format!("transactional_vs_{name}_tx{size}"),
                    json!(round(t / o, 2)),
                );
            }
        }
    }
    let p99 = |e: &str| num(find(results, "steady", e), &["latency_ms", "p99"]);
    if let (Some(r), Some(d)) = (p99(relay), p99(dbz)) {
        out.insert("p99_vs_debezium".into(), json!(round(r / d, 3)));
    }
    if let Some(r) = p99(relay) {
        out.insert("relay_p99_ms".into(), json!(r));
    }
    let peak = |e: &str| {
        results
            .iter()
            .filter(|r| r["engine"] == e)
            .filter_map(|r| r["peak_rss_mib"].as_f64())
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
    };
    if let (Some(r), Some(d)) = (peak(relay), peak(dbz)) {
        out.insert("peak_memory_vs_debezium".into(), json!(round(r / d, 3)));
    }
    let read = num(
        find(results, "baseline_slot_read_tx100", READ_BASELINE),
        &["throughput_msg_s"],
    );
    let produce = num(
        find(results, "baseline_produce", PRODUCE_BASELINE),
        &["throughput_msg_s"],
    );
    let relay100 = num(find(results, "backlog_tx100", relay), &["throughput_msg_s"]);
    if let (Some(r), Some(p), Some(x)) = (read, produce, relay100) {
        out.insert(
            "throughput_vs_lower_baseline_tx100".into(),
            json!(round(x / r.min(p), 2)),
        );
    }
    // Each baseline leaves the other half of the work undone: a relay must
    // spend both their CPU per message on the same cores. This bound says
    // what the machine can do when both halves share it perfectly; reading
    // is costed on a backlog of the drain's own transaction size, since a
    // 1-row transaction costs the walsender a BEGIN and a COMMIT per row.
    // Each half at its cheapest repetition: a bound must not count the
    // background work some windows caught (the medians are in the results).
    let cpu = |scenario: &str, engine: &str| {
        num(
            find(results, scenario, engine),
            &[&format!("{WINDOW_COST}_min")],
        )
    };
    let cores = std::thread::available_parallelism()
        .map(|n| n.get() as f64)
        .unwrap_or(1.0);
    let mut over = Vec::new();
    let mut bounded = false;
    for tx in &a.tx_sizes {
        let (Some(r), Some(p)) = (
            cpu(&format!("baseline_slot_read_tx{tx}"), READ_BASELINE),
            cpu("baseline_produce", PRODUCE_BASELINE),
        ) else {
            continue;
        };
        bounded = true;
        let bound = cores * 1e6 / (r + p);
        out.insert(
            format!("shared_cpu_bound_msg_s_tx{tx}"),
            json!(round(bound, 0)),
        );
        let sc = format!("backlog_tx{tx}");
        if let Some(v) = num(find(results, &sc, relay), &["throughput_msg_s"]) {
            out.insert(
                format!("throughput_vs_shared_cpu_bound_tx{tx}"),
                json!(round(v / bound, 2)),
            );
        }
        // A bound a relay passes is no bound: the baselines were measured
        // on a slower machine than some drain, and the run is not valid.
        for r in results.iter().filter(|r| {
            r["scenario"] == sc.as_str()
                && r["engine"]
                    .as_str()
                    .is_some_and(|e| e.starts_with("outbox-cdc"))
        }) {
            let runs = r["runs"].as_array().cloned().unwrap_or_default();
            for (i, run) in runs.iter().enumerate() {
                if let Some(v) = run["throughput_msg_s"].as_f64().filter(|v| *v > bound) {
                    over.push(format!(
                        "{} {sc} run {}: {v:.0} msg/s, bound {bound:.0}",
                        r["engine"].as_str().unwrap_or(""),
                        i + 1
                    ));
                }
            }
        }
    }
    if bounded {
        out.insert("valid".into(), json!(over.is_empty()));
        if !over.is_empty() {
            out.insert("over_the_bound".into(), json!(over));
        }
    }
    // The price of PUBLISHED bookkeeping, and the relay's own CPU.
    let unmarked = Engine::RelayUnmarked.tag();
    for tx in &a.tx_sizes {
        let sc = format!("backlog_tx{tx}");
        let on = num(find(results, &sc, relay), &["throughput_msg_s"]);
        let off = num(find(results, &sc, unmarked), &["throughput_msg_s"]);
        if let (Some(on), Some(off)) = (on, off) {
            out.insert(
                format!("bookkeeping_cost_tx{tx}"),
                json!(round(1.0 - on / off, 3)),
            );
        }
        // Each marked drain against the unmarked one that ran right after
        // it: a pair shares its minute of the machine, where medians of
        // three drains each compare different minutes.
        let rates = |e: &str| -> Vec<f64> {
            find(results, &sc, e)
                .and_then(|r| r["runs"].as_array())
                .map(|runs| {
                    runs.iter()
                        .filter_map(|r| r["throughput_msg_s"].as_f64())
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut pairs: Vec<f64> = rates(relay)
            .iter()
            .zip(rates(unmarked))
            .map(|(on, off)| 1.0 - on / off)
            .collect();
        pairs.sort_by(f64::total_cmp);
        if let Some(m) = pairs.get(pairs.len() / 2) {
            out.insert(
                format!("bookkeeping_cost_paired_tx{tx}"),
                json!(round(*m, 3)),
            );
        }
        let cpu = num(find(results, &sc, relay), &["cpu_s"]);
        if let Some(cpu) = cpu {
            out.insert(
                format!("relay_cpu_us_per_msg_tx{tx}"),
                json!(round(cpu * 1e6 / a.rows as f64, 1)),
            );
        }
    }
    if let Some(peak) = results
        .iter()
        .filter(|r| {
            r["engine"] == relay
                && r["scenario"]
                    .as_str()
                    .is_some_and(|x| x.starts_with("backlog"))
        })
        .filter_map(|r| r["peak_rss_mib"].as_f64())
        .reduce(f64::max)
    {
        out.insert("relay_peak_rss_backlog_mib".into(), json!(peak));
    }
    let big = find(results, "one_transaction", relay);
    let big_peak = num(big, &["peak_rss_mib"]);
    let reference_peak = num(big, &["reference_tx100", "peak_rss_mib"]);
    if let (Some(big), Some(small)) = (big_peak, reference_peak) {
        out.insert(
            "one_transaction_peak_rss_vs_tx100".into(),
            json!(round(big / small, 2)),
        );
    }
    Json::Object(out)
}

/// A figure as the tables show it: whole numbers without a fraction.
fn number(v: &Json) -> String {
    match v.as_f64() {
        None => "–".to_string(),
        Some(f) if f.fract() == 0.0 => format!("{}", f as i64),
        Some(f) => format!("{f}"),
    }
}

fn markdown(report: &Json) -> String {
    let mut md = String::new();
    let env = &report["environment"];
    let m = &env["machine"];
    let v = &env["versions"];
    let s = &report["settings"];
    let _ = writeln!(md, "# Benchmark: outbox-cdc and Debezium on one machine\n");
    if report["ratios"]["valid"] == false {
        let over: Vec<String> = report["ratios"]["over_the_bound"]
            .as_array()
            .map(|v| {
                v.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let _ = writeln!(
            md,
            "**This run is invalid**: a relay drain passed the shared-CPU bound of its \
            transaction size ({}), so the baselines do not bound what this machine did. Run it again.\n",
            over.join("; ")
        );
    }
    let _ = writeln!(md, "Generated by `{}` on {}; every figure below comes from that one run \
        (`docs/benchmark.json` holds them all). Reproduce with the same command on a fresh clone.\n",
        report["command"].as_str().unwrap_or(""), report["date"].as_str().unwrap_or(""));
    let _ = writeln!(
        md,
        "- Machine: {} cores, {} GiB, {}; Linux {}",
        m["cores"],
        m["memory_gib"],
        m["cpu"].as_str().unwrap_or("?"),
        m["kernel"].as_str().unwrap_or("?")
    );
    let _ = writeln!(
        md,
        "- Versions: outbox-cdc {}, {}, PostgreSQL {}, Kafka {}, Debezium {}, {}",
        v["outbox-cdc"].as_str().unwrap_or("?"),
        v["rustc"].as_str().unwrap_or("?"),
        v["postgresql"].as_str().unwrap_or("?"),
        v["kafka"].as_str().unwrap_or("?"),
        v["debezium"].as_str().unwrap_or("?"),
        v["java"].as_str().unwrap_or("?")
    );
    let _ = writeln!(md, "- Services: all on this machine (PostgreSQL, one Kafka broker, one Kafka Connect worker with JVM flags `{}`), \
        started by `scripts/services.sh`. The Connect worker is restarted before each Debezium run and stopped otherwise.",
        env["connect_worker_jvm"].as_str().unwrap_or(""));
    let _ = writeln!(md, "- Load: {} rows of about {} bytes of payload per backlog; steady stream of {} msg/s for {} s in 1-row transactions; topic with {} partitions and `LogAppendTime`.",
        s["rows"], s["payload_bytes"], s["rate_msg_s"], s["seconds"], s["partitions"]);
    let tuning: Vec<String> = s["debezium_tuning"]
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| format!("`{k}={}`", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    let _ = writeln!(
        md,
        "- Debezium tuning (on top of the generated configuration): {}.",
        tuning.join(", ")
    );
    let defaults: Vec<String> = settings::DEFAULTS
        .iter()
        .map(|(k, v)| format!("`{k}={v}`"))
        .collect();
    let _ = writeln!(
        md,
        "- outbox-cdc: defaults ({}, idempotent, `acks=all`), PUBLISHED marks on.\n",
        defaults.join(", ")
    );

    let _ = writeln!(
        md,
        "## Throughput: backlog drained, first to last record in Kafka\n"
    );
    let _ = writeln!(md, "Median of {} drains per row (each on a fresh database; every run is in the JSON). \
        CPU is the relay process's (for Debezium, the Connect worker's) from its start to the last record; \
        machine CPU is the busy time of the whole machine (database, broker, relay, bench consumer) per message, \
        over the whole run and, as the throughput is, from the first record to the last.\n",
        s["repeat"]);
    let _ = writeln!(md, "| scenario | relay | msg/s | first to last (s) | first record after start (s) | CPU (s) | machine CPU (µs/msg) | first to last (µs/msg) | peak RSS (MiB) |");
    let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|---:|---:|");
    let results = report["results"].as_array().cloned().unwrap_or_default();
    for r in results.iter().filter(|r| {
        r["scenario"]
            .as_str()
            .is_some_and(|x| x.starts_with("backlog") || x.starts_with("baseline"))
    }) {
        let cell = |k: &str| number(&r[k]);
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r["scenario"].as_str().unwrap_or(""),
            r["engine"].as_str().unwrap_or(""),
            cell("throughput_msg_s"),
            cell("first_to_last_s"),
            cell("first_record_after_start_s"),
            cell("cpu_s"),
            cell("machine_cpu_us_per_msg"),
            cell(WINDOW_COST),
            cell("peak_rss_mib")
        );
    }
    let bounds: Vec<String> = report["ratios"]
        .as_object()
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| {
                    let tx = k.strip_prefix("shared_cpu_bound_msg_s_tx")?;
                    Some(format!("{} msg/s for {tx}-row transactions", number(v)))
                })
                .collect()
        })
        .unwrap_or_default();
    if !bounds.is_empty() {
        let _ = writeln!(md, "\nThe baselines bound what any relay can do here. The slot-read baseline reads a backlog \
            of each transaction size twice, as fast as it goes and paced at {READ_PACE} of that rate, and its machine CPU is \
            the cheaper of the two: a reader that keeps up takes every message as the walsender sends it, one segment \
            and one wake-up each, while a busy relay lets the socket fill. The produce baseline sends the same records \
            with the relay's producer settings and allocator, also twice, as fast as it goes and paced at {PRODUCE_PACE} of \
            that rate, and keeps the cheaper: a producer that outruns librdkafka's broker thread contends with it for \
            every partition queue. The shared-CPU bound is cores × 10⁶ / (read + produce \
            µs/msg), each counted from its first message to its last, as throughputs are (start-up and the tail cost \
            the same CPU whatever the backlog, and a drain's throughput leaves them out), and each at its cheapest \
            repetition (background work only adds to a window; the baselines run before every repetition of the drains \
            and once after the last): {}. A run in which a relay drain passes it is marked \
            invalid.", bounds.join(", "));
    }
    let _ = writeln!(
        md,
        "\n## Latency: commit to Kafka at a fixed offered load\n"
    );
    let _ = writeln!(
        md,
        "| relay | offered msg/s | p50 (ms) | p99 (ms) | max (ms) | CPU (s) | machine busy | peak RSS (MiB) |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in results.iter().filter(|r| r["scenario"] == "steady") {
        let l = &r["latency_ms"];
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} % | {} |",
            r["engine"].as_str().unwrap_or(""),
            number(&r["offered_msg_s"]),
            number(&l["p50"]),
            number(&l["p99"]),
            number(&l["max"]),
            number(&r["cpu_s"]),
            number(&r["machine_cpu_busy_pct"]),
            number(&r["peak_rss_mib"])
        );
    }
    let _ = writeln!(md, "\nLatency is the broker's append time of the record minus the time the writer's COMMIT returned \
        (1 ms resolution: the broker stamps milliseconds). CPU is for the measured window of each scenario.\n");
    let _ = writeln!(md, "Engines that publish in Kafka transactions (`delivery = transactional`, Debezium with \
        `exactly.once.support = required`) are read by a `read_committed` consumer, and their times are when that \
        consumer received a record: a record is not visible before its transaction commits, so its append time \
        would flatter them.\n");
    let _ = writeln!(md, "## Where the machine's time went\n");
    let _ = writeln!(md, "Busy time of the whole machine per message, split by process from `/proc` over the same \
        window as the machine CPU above (for drains, the run whose throughput is the median). `bench` is the bench's own \
        process: the reader in the slot-read baseline, the producer in the produce baseline, and in every scenario its \
        consumer (and, for the steady stream, its writers' client side); `other` is time of processes that exited \
        within the window. The split shows why costs measured apart do not simply add up: the walsender spends less per row when \
        its reader applies back-pressure (hence the paced read), and the broker's share moves with the size of produce \
        requests and with its own background work.\n");
    let _ = writeln!(md, "| scenario | relay | machine µs/msg by process |");
    let _ = writeln!(md, "|---|---|---|");
    for r in results.iter().filter(|r| {
        r["scenario"]
            .as_str()
            .is_some_and(|x| x.starts_with("backlog") || x.starts_with("baseline") || x == "steady")
    }) {
        let runs = r["runs"].as_array().cloned().unwrap_or_default();
        let typical = runs
            .iter()
            .find(|x| x["throughput_msg_s"] == r["throughput_msg_s"])
            .unwrap_or(r);
        let Some(split) = typical["machine_cpu_us_per_msg_by_process"].as_object() else {
            continue;
        };
        let mut parts: Vec<(&String, f64)> = split
            .iter()
            .filter_map(|(k, v)| v.as_f64().map(|v| (k, v)))
            .collect();
        parts.sort_by(|a, b| b.1.total_cmp(&a.1));
        let cells: Vec<String> = parts.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(
            md,
            "| {} | {} | {} |",
            r["scenario"].as_str().unwrap_or(""),
            r["engine"].as_str().unwrap_or(""),
            cells.join(" · ")
        );
    }
    let _ = writeln!(md);
    let counted: Vec<&Json> = results
        .iter()
        .filter(|r| r["scenario"] == "instructions")
        .collect();
    if let Some(r) = counted.first() {
        let _ = writeln!(md, "## Instructions per message\n");
        let how = match r["counter"].as_str() {
            Some("perf stat") => "counted by `perf stat -e instructions`",
            _ => "under Valgrind's callgrind (this machine's perf has no instruction counter)",
        };
        let _ = writeln!(md, "The relay process {how} (all its threads, librdkafka's included), \
            draining backlogs of {} and {} rows in 100-row transactions; the difference of the two totals divided by \
            the smaller backlog leaves start-up and shutdown out. Unlike times, this figure repeats within a few per cent from run to run.\n",
            number(&r["rows"][0]), number(&r["rows"][1]));
        let _ = writeln!(md, "| relay | instructions per message |");
        let _ = writeln!(md, "|---|---:|");
        for r in &counted {
            let _ = writeln!(
                md,
                "| {} | {} |",
                r["engine"].as_str().unwrap_or(""),
                number(&r["instructions_per_msg"])
            );
        }
        let _ = writeln!(md);
    }
    let big: Vec<&Json> = results
        .iter()
        .filter(|r| r["scenario"] == "one_transaction")
        .collect();
    if !big.is_empty() {
        let _ = writeln!(md, "## One large source transaction\n");
        let _ = writeln!(md, "Peak RSS is compared with a reference drain of as many rows of the same payloads \
            in 100-row transactions: memory should depend on what is in flight, not on how large a transaction is.\n");
        let _ = writeln!(md, "| relay | rows | payload (bytes) | commit to last record (s) | msg/s | CPU (s) | peak RSS (MiB) | peak RSS before it (MiB) | reference peak RSS, 100-row transactions (MiB) |");
        let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for r in big {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r["engine"].as_str().unwrap_or(""),
                number(&r["rows"]),
                number(&r["payload_bytes"]),
                number(&r["commit_to_last_record_s"]),
                number(&r["throughput_msg_s"]),
                number(&r["cpu_s"]),
                number(&r["peak_rss_mib"]),
                number(&r["peak_rss_before_mib"]),
                number(&r["reference_tx100"]["peak_rss_mib"])
            );
        }
        let _ = writeln!(md);
    }
    let _ = writeln!(md, "## Against the goals\n");
    let _ = writeln!(md, "| ratio | value | goal |");
    let _ = writeln!(md, "|---|---:|---|");
    if let Some(o) = report["ratios"].as_object() {
        for (k, v) in o {
            if k == "valid" || k == "over_the_bound" {
                continue;
            }
            let goal = if k.starts_with("transactional_vs_idempotent_tx100") {
                "≥ 0.8"
            } else if k == "throughput_vs_debezium_tx1" {
                "≥ 3"
            } else if k.starts_with("transactional_vs_debezium_exactly_once")
                || k.starts_with("throughput_vs_debezium")
            {
                "≥ 2"
            } else if k.starts_with("p99_vs") {
                "≤ 0.2"
            } else if k == "relay_p99_ms" {
                "≤ 20"
            } else if k.starts_with("peak_memory") {
                "≤ 0.1"
            } else if k.starts_with("throughput_vs_lower_baseline")
                || k == "throughput_vs_shared_cpu_bound_tx100"
            {
                "≥ 0.8"
            } else if k == "throughput_vs_shared_cpu_bound_tx1" {
                "≥ 0.6"
            } else if k.starts_with("bookkeeping_cost") {
                "≤ 0.1"
            } else if k == "relay_cpu_us_per_msg_tx100" {
                "≤ 8"
            } else if k == "one_transaction_peak_rss_vs_tx100" {
                "≤ 1.1"
            } else if k == "relay_peak_rss_backlog_mib" {
                "≤ 48"
            } else {
                "(context)"
            };
            let _ = writeln!(md, "| {k} | {} | {goal} |", number(v));
        }
    }
    md
}

/// As `outbox-cdc run` does, the bench runs as a task on the runtime's
/// workers: the future `block_on` drives sits on the main thread, and a read
/// baseline there paid a wake-up across cores for every batch from the
/// reader, which the relay does not (its session is a task beside the
/// reader), so the bound counted a costlier read than a relay's.
#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    tokio::spawn(bench()).await?
}

async fn bench() -> Result<()> {
    let a = Args::parse()?;
    if std::env::args().any(|x| x == "--render-only") {
        // Rewrites the table from the results file, measuring nothing.
        let text = std::fs::read_to_string(a.out.join("benchmark.json"))?;
        let report: Json = serde_json::from_str(&text)?;
        std::fs::write(a.out.join("benchmark.md"), markdown(&report))?;
        return Ok(());
    }
    let s = Services::from_env()?;
    let environment = environment(&s).await?;
    let mut results = Vec::new();
    let runs = |group: &str| a.only.iter().any(|g| g == group);
    // Baselines and drains take turns within each repetition, so the bound
    // the baselines give is measured on the machine the drains ran on.
    let (mut reads, mut produces, mut records) =
        (vec![Vec::new(); a.tx_sizes.len()], Vec::new(), Vec::new());
    let mut drains: Vec<Vec<Vec<Json>>> = vec![vec![Vec::new(); a.engines.len()]; a.tx_sizes.len()];
    // The baselines run before every repetition of the drains and once
    // after the last, so every drain has a baseline window on either side.
    let baseline_passes = a.repeat + usize::from(runs("backlog"));
    for i in 0..baseline_passes {
        if runs("baselines") {
            eprintln!("[bench] baselines ({}/{baseline_passes})", i + 1);
            for (tx, reads) in a.tx_sizes.iter().zip(reads.iter_mut()) {
                let (read, r) = slot_read(&s, &a, *tx, records.is_empty()).await?;
                reads.push(read);
                if records.is_empty() {
                    records = r;
                }
            }
            produces.push(raw_produce(&s, &a, &records).await?);
        }
        if runs("backlog") && i < a.repeat {
            for (tx, per_engine) in a.tx_sizes.iter().zip(drains.iter_mut()) {
                for (engine, runs) in a.engines.iter().zip(per_engine.iter_mut()) {
                    eprintln!(
                        "[bench] {}: backlog of {} rows in transactions of {tx} ({}/{})",
                        engine.tag(),
                        a.rows,
                        i + 1,
                        a.repeat
                    );
                    runs.push(backlog_once(&s, &a, *engine, *tx).await?);
                }
            }
        }
    }
    if runs("baselines") {
        let head = |scenario: &str, engine: &str, tx: i64| json!({"scenario": scenario, "engine": engine, "rows": records.len(), "rows_per_transaction": tx});
        for (tx, reads) in a.tx_sizes.iter().zip(reads) {
            let scenario = format!("baseline_slot_read_tx{tx}");
            results.push(summary(head(&scenario, READ_BASELINE, *tx), reads));
        }
        // The records of the first size's backlog; Kafka sees no transactions.
        let first = a.tx_sizes.first().copied().unwrap_or(100);
        results.push(summary(
            head("baseline_produce", PRODUCE_BASELINE, first),
            produces,
        ));
    }
    for (tx, per_engine) in a.tx_sizes.iter().zip(drains) {
        for (engine, runs) in a.engines.iter().zip(per_engine) {
            if !runs.is_empty() {
                results.push(summary(
                    json!({
                        "scenario": format!("backlog_tx{tx}"),
                        "engine": engine.tag(),
                        "rows": a.rows,
                        "rows_per_transaction": tx,
                    }),
                    runs,
                ));
            }
        }
    }
    if runs("steady") {
        for engine in a.engines.clone() {
            results.push(steady(&s, &a, engine).await?);
        }
    }
    if runs("instructions") {
        results.extend(instructions(&s, &a).await?);
    }
    if runs("bigtx") {
        for engine in a.engines.clone() {
            let mut big = one_big_transaction(&s, &a, engine).await?;
            // The same rows in 100-row transactions: what memory is when the
            // transaction size is not the question. As many rows, because the
            // peak grows with a drain's length until the in-flight window is
            // reached (one 1 000 000-row drain: 33 MiB at 200 000 rows, 43
            // MiB from 600 000 on), and a shorter reference would charge that
            // to the transaction.
            let reference = Args {
                rows: a.big_rows,
                payload: a.big_payload,
                ..a.clone()
            };
            eprintln!(
                "[bench] {}: reference, {} rows of {} bytes in transactions of 100",
                engine.tag(),
                reference.rows,
                reference.payload
            );
            let r = backlog_once(&s, &reference, engine, 100).await?;
            if let Some(o) = big.as_object_mut() {
                o.insert(
                    "reference_tx100".into(),
                    json!({"rows": reference.rows, "payload_bytes": reference.payload,
                           "peak_rss_mib": r["peak_rss_mib"], "throughput_msg_s": r["throughput_msg_s"]}),
                );
            }
            results.push(big);
        }
    }
    let tuning: serde_json::Map<String, Json> = debezium_tuning()
        .into_iter()
        .map(|(k, v)| (k, Json::String(v)))
        .collect();
    let command = std::env::var("BENCH_COMMAND").unwrap_or_else(|_| "scripts/bench.sh".into());
    let date = command_line("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]);
    let report = json!({
        "date": date,
        "command": command,
        "environment": environment,
        "settings": {
            "rows": a.rows, "payload_bytes": a.payload, "tx_sizes": a.tx_sizes, "rate_msg_s": a.rate,
            "seconds": a.seconds, "partitions": a.partitions, "repeat": a.repeat, "debezium_tuning": tuning,
            "relay_settings": std::env::var("BENCH_RELAY_SETTINGS").unwrap_or_default(),
            "relay_kafka_properties": std::env::var("BENCH_KAFKA_PROPERTIES").unwrap_or_default(),
        },
        "results": results,
        "ratios": ratios(&a, &results),
    });
    std::fs::create_dir_all(&a.out)?;
    let mut f = File::create(a.out.join("benchmark.json"))?;
    writeln!(f, "{}", serde_json::to_string_pretty(&report)?)?;
    std::fs::write(a.out.join("benchmark.md"), markdown(&report))?;
    println!("{}", serde_json::to_string_pretty(&report["ratios"])?);
    Ok(())
}
