//! The seeded nemesis soak: a steady workload, an active relay and a standby
//! on the same slot (both through the proxies), and a nemesis that injects
//! network and process faults at times drawn from the seed. At the end a
//! checker that shares no code with the relay reads PostgreSQL and Kafka.
//! On the three-broker cluster (`--kafka cluster`) the nemesis draws the
//! cluster's faults (`cluster::Fault`) in place of the single broker's.
//! `scripts/soak.sh` runs it; the test suite runs a short one.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::cluster::{Cluster, Fault};
use crate::relay::{self, RelayProcess};
use crate::toxiproxy::{self, Link, Proxies, Stream, Toxic};
use crate::workload::{self, Answer, Readiness, Seeded, Tap, Workload};
use crate::{kafka, Services};

mod check;
mod report;

pub use report::{throughput_chart, Report};

/// How the relays deliver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    Idempotent,
    Transactional,
}

impl Delivery {
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::Idempotent => "idempotent",
            Delivery::Transactional => "transactional",
        }
    }

    pub fn parse(text: &str) -> Option<Delivery> {
        match text {
            "idempotent" => Some(Delivery::Idempotent),
            "transactional" => Some(Delivery::Transactional),
            _ => None,
        }
    }
}

/// Which Kafka the relays publish to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kafka {
    /// The single broker, through its proxy.
    Single,
    /// The three-broker cluster, each broker through its own proxy.
    Cluster,
}

impl Kafka {
    pub fn parse(text: &str) -> Option<Kafka> {
        match text {
            "single" => Some(Kafka::Single),
            "cluster" => Some(Kafka::Cluster),
            _ => None,
        }
    }
}

pub struct Options {
    pub duration: Duration,
    pub seed: u64,
    pub delivery: Delivery,
    pub kafka: Kafka,
    /// Where `soak-<delivery>-<seed>.md` and `.json` go.
    pub report_dir: PathBuf,
}

/// The relays' budgets under the soak.
const WAL_RECEIVER_TIMEOUT_SECS: u64 = 10;
const QUERY_TIMEOUT_SECS: u64 = 10;
const SLOT_CHECK_INTERVAL_SECS: u64 = 5;
/// A fault's recovery (readiness back, a row committed after the heal in
/// Kafka) must come within this.
const RECOVERY_BUDGET: Duration = Duration::from_secs(120);

/// The faults the nemesis draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    PostgresBlackHole,
    KafkaBlackHole,
    PostgresLatency,
    KafkaLatency,
    PostgresBandwidth,
    KafkaBandwidth,
    PostgresReset,
    RelayKill,
    WalsenderTerminated,
    PostgresRestart,
    KafkaRestart,
    /// A fault of the three-broker cluster.
    Cluster(Fault),
}

const KINDS: [Kind; 11] = [
    Kind::PostgresBlackHole,
    Kind::KafkaBlackHole,
    Kind::PostgresLatency,
    Kind::KafkaLatency,
    Kind::PostgresBandwidth,
    Kind::KafkaBandwidth,
    Kind::PostgresReset,
    Kind::RelayKill,
    Kind::WalsenderTerminated,
    Kind::PostgresRestart,
    Kind::KafkaRestart,
];

/// The faults the nemesis draws from on `kafka`: on the cluster, its own
/// Kafka faults in place of the single broker's.
fn kinds(kafka: Kafka) -> Vec<Kind> {
    match kafka {
        Kafka::Single => KINDS.to_vec(),
        Kafka::Cluster => KINDS
            .into_iter()
            .filter(|k| {
                !matches!(
                    k,
                    Kind::KafkaBlackHole
                        | Kind::KafkaLatency
                        | Kind::KafkaBandwidth
                        | Kind::KafkaRestart
                )
            })
            .chain(Fault::ALL.map(Kind::Cluster))
            .collect(),
    }
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::PostgresBlackHole => "postgres black hole",
            Kind::KafkaBlackHole => "kafka black hole",
            Kind::PostgresLatency => "postgres latency 200±50 ms",
            Kind::KafkaLatency => "kafka latency 200±50 ms",
            Kind::PostgresBandwidth => "postgres bandwidth 100 KB/s",
            Kind::KafkaBandwidth => "kafka bandwidth 100 KB/s",
            Kind::PostgresReset => "postgres reset_peer",
            Kind::RelayKill => "relay SIGKILL",
            Kind::WalsenderTerminated => "walsender terminated",
            Kind::PostgresRestart => "postgresql restart",
            Kind::KafkaRestart => "kafka restart",
            Kind::Cluster(f) => f.name(),
        }
    }

    /// How long the fault stays before the heal.
    fn hold(self, rng: &mut Seeded) -> Duration {
        let secs = match self {
            Kind::PostgresBlackHole => WAL_RECEIVER_TIMEOUT_SECS + rng.between(2, 8),
            Kind::KafkaBlackHole => rng.between(10, 25),
            Kind::PostgresLatency | Kind::KafkaLatency => rng.between(5, 15),
            Kind::PostgresBandwidth | Kind::KafkaBandwidth => rng.between(5, 15),
            Kind::PostgresReset => rng.between(2, 5),
            Kind::RelayKill => rng.between(1, 4),
            Kind::WalsenderTerminated | Kind::PostgresRestart | Kind::KafkaRestart => 0,
            Kind::Cluster(f) => return f.hold(),
        };
        Duration::from_secs(secs)
    }
}

/// One fault as injected, with what followed.
#[derive(Debug, Clone)]
pub struct Injected {
    pub kind: Kind,
    /// Seconds from the soak's start.
    pub at: f64,
    pub hold: f64,
    /// From the heal until a row committed after it arrived in Kafka.
    pub recovery: Option<f64>,
    /// A relay answered `/readyz` 200 again within the budget.
    pub ready_again: bool,
}

/// A relay slot of the pair: its config, its process, its `/readyz`.
struct Member {
    config: PathBuf,
    port: u16,
    process: Option<RelayProcess>,
    ready: Readiness,
    /// Logs of processes the nemesis killed.
    killed: usize,
}

impl Member {
    fn ready_now(&self) -> bool {
        workload::ready(self.port)
    }
}

/// What both members of the pair run on: the proxies, the database, the
/// topic prefix, the slot they share and the delivery mode.
struct Stage<'a> {
    proxies: &'a Proxies,
    /// The relays' Kafka: through the proxies.
    relay_kafka: &'a str,
    /// The cluster, when the relays publish to it, and the topic.
    cluster: Option<&'a Cluster>,
    topic: &'a str,
    db: &'a str,
    prefix: &'a str,
    slot: &'a str,
    delivery: Delivery,
}

/// A member's configuration: through the proxies, `/readyz` on `port`.
fn config(services: &Services, stage: &Stage<'_>, port: u16) -> PathBuf {
    let Stage {
        proxies,
        relay_kafka,
        cluster: _,
        topic: _,
        db,
        prefix,
        slot,
        delivery,
    } = *stage;
    let proxied = Services {
        pg_host: "127.0.0.1".into(),
        pg_port: toxiproxy::port(&proxies.pg),
        pg_user: services.pg_user.clone(),
        pg_password: services.pg_password.clone(),
        kafka_bootstrap: relay_kafka.to_string(),
    };
    let mut extra = format!("slot_check_interval_secs = {SLOT_CHECK_INTERVAL_SECS}\n");
    if delivery == Delivery::Transactional {
        extra.push_str("delivery = \"transactional\"\n");
    }
    extra.push_str(&format!("\n[http]\nlisten = \"127.0.0.1:{port}\"\n"));
    // One directory per member: the two share the slot's name.
    let path = relay::config(&proxied, db, prefix, slot, &extra);
    let text = std::fs::read_to_string(&path).unwrap().replace(
        "sslmode = \"disable\"\n",
        &format!(
            "sslmode = \"disable\"\nwal_receiver_timeout_secs = {WAL_RECEIVER_TIMEOUT_SECS}\nquery_timeout_secs = {QUERY_TIMEOUT_SECS}\n"
        ),
    );
    let own = path.with_file_name(format!("{slot}-{port}.toml"));
    std::fs::write(&own, text).unwrap();
    own
}

async fn marker(client: &tokio_postgres::Client) -> Option<String> {
    workload::marker(client).await.ok()
}

fn services_script(arg: &str) {
    let script = std::env::var("OUTBOX_TEST_SERVICES").expect("OUTBOX_TEST_SERVICES");
    let status = std::process::Command::new("bash")
        .arg(script)
        .arg(arg)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "services.sh {arg}");
}

/// Runs the soak and writes its report; the report.
pub async fn run(services: &Services, opts: &Options) -> Report {
    let proxies = Proxies::from_env();
    proxies.reset();
    let prefix = crate::unique_prefix("soak");
    let db = crate::cdc_db(services, "soak", &prefix).await;
    let topic = format!("{prefix}keyed");
    let cluster = match opts.kafka {
        Kafka::Single => None,
        Kafka::Cluster => Some(Cluster::from_env()),
    };
    // Where the checker reads, and where the relays publish through.
    let (bootstrap, relay_kafka) = match &cluster {
        None => {
            kafka::create_topic(&services.kafka_bootstrap, &topic, 6).await;
            (services.kafka_bootstrap.clone(), proxies.kafka.clone())
        }
        Some(c) => {
            c.all_up();
            kafka::create_replicated_topic(&c.bootstrap, &topic, 6).await;
            c.wait_in_sync(&topic, Duration::from_secs(60));
            (c.bootstrap.clone(), c.proxied.clone())
        }
    };
    let slot = format!("{}_relay", db.name);
    let stage = Stage {
        proxies: &proxies,
        relay_kafka: &relay_kafka,
        cluster: cluster.as_ref(),
        topic: &topic,
        db: &db.name,
        prefix: &prefix,
        slot: &slot,
        delivery: opts.delivery,
    };
    let mut members: Vec<Member> = (0..2)
        .map(|_| {
            let port = crate::free_port();
            Member {
                config: config(services, &stage, port),
                port,
                process: None,
                ready: Readiness::watch(port),
                killed: 0,
            }
        })
        .collect();
    members[0].process = Some(RelayProcess::spawn(&members[0].config));
    let began = Instant::now();
    assert!(
        members[0]
            .ready
            .wait(Answer::Ready, began, Duration::from_secs(90))
            .is_some(),
        "the first relay never became ready"
    );
    members[1].process = Some(RelayProcess::spawn(&members[1].config));
    let tap = Tap::start(
        &bootstrap,
        std::slice::from_ref(&topic),
        kafka::READ_UNCOMMITTED,
    );
    let load = Workload::start(
        services,
        &db.name,
        workload::Load {
            writers: 2,
            per_sec: 25,
            keys: 200,
            seed: opts.seed,
        },
    )
    .await;
    let start = Instant::now();
    let mut rng = Seeded::new(opts.seed);
    let mut faults = Vec::new();
    let mut direct = services.connect(&db.name).await;
    let kinds = kinds(opts.kafka);

    loop {
        let gap = Duration::from_secs(rng.between(5, 15));
        let kind = kinds[rng.between(0, kinds.len() as u64 - 1) as usize];
        let hold = kind.hold(&mut rng);
        if start.elapsed() + gap + hold >= opts.duration {
            break;
        }
        tokio::time::sleep(gap).await;
        let at = start.elapsed().as_secs_f64();
        eprintln!(
            "[soak {at:>7.1} s] {} for {:.0} s",
            kind.name(),
            hold.as_secs_f64()
        );
        inject(kind, hold, &stage, &mut members, &direct).await;
        let healed = Instant::now();
        // A PostgreSQL restart broke the checker's own connection.
        if direct.is_closed() {
            direct = services.connect(&db.name).await;
        }
        let ready_again = ready_again(&members, healed);
        let mut recovery = None;
        let deadline = healed + RECOVERY_BUDGET;
        let mut mark = None;
        while mark.is_none() && Instant::now() < deadline {
            mark = marker(&direct).await;
            if mark.is_none() {
                tokio::time::sleep(Duration::from_millis(500)).await;
                if direct.is_closed() {
                    direct = services.connect(&db.name).await;
                }
            }
        }
        if let Some(mark) = mark {
            let left = deadline.saturating_duration_since(Instant::now());
            if tap
                .wait_for(&HashSet::from([mark.clone()]), left)
                .is_empty()
            {
                recovery = tap
                    .arrived_at(&mark)
                    .map(|at| at.saturating_duration_since(healed).as_secs_f64());
            }
        }
        eprintln!(
            "[soak {:>7.1} s]   recovered in {}",
            start.elapsed().as_secs_f64(),
            recovery.map_or("never".into(), |r| format!("{r:.1} s"))
        );
        faults.push(Injected {
            kind,
            at,
            hold: hold.as_secs_f64(),
            recovery,
            ready_again,
        });
    }
    let left = opts.duration.saturating_sub(start.elapsed());
    tokio::time::sleep(left).await;
    let committed = load.stop().await;
    let finished = Finished {
        bootstrap: &bootstrap,
        db: &db,
        slot: &slot,
        topic: &topic,
        tap,
        members,
        faults,
        committed_seen: committed.len(),
        start,
    };
    let report = check::check(services, opts, finished).await;
    db.drop(services).await;
    report
}

/// Whether either relay answers `/readyz` 200 again after `healed`,
/// within the budget.
fn ready_again(members: &[Member], healed: Instant) -> bool {
    let deadline = healed + RECOVERY_BUDGET;
    while Instant::now() < deadline {
        if members
            .iter()
            .any(|m| m.ready.first(Answer::Ready, healed).is_some() || m.ready_now())
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// Injects one fault and heals it after `hold`.
async fn inject(
    kind: Kind,
    hold: Duration,
    stage: &Stage<'_>,
    members: &mut [Member],
    direct: &tokio_postgres::Client,
) {
    let (proxies, slot) = (stage.proxies, stage.slot);
    let toxics: Option<(Link, Vec<(Stream, Toxic)>)> = match kind {
        Kind::PostgresBlackHole => Some((Link::Postgres, both(Toxic::BlackHole))),
        Kind::KafkaBlackHole => Some((Link::Kafka, both(Toxic::BlackHole))),
        Kind::PostgresLatency => Some((
            Link::Postgres,
            both(Toxic::Latency {
                ms: 200,
                jitter_ms: 50,
            }),
        )),
        Kind::KafkaLatency => Some((
            Link::Kafka,
            both(Toxic::Latency {
                ms: 200,
                jitter_ms: 50,
            }),
        )),
        Kind::PostgresBandwidth => {
            Some((Link::Postgres, both(Toxic::Bandwidth { kb_per_sec: 100 })))
        }
        Kind::KafkaBandwidth => Some((Link::Kafka, both(Toxic::Bandwidth { kb_per_sec: 100 }))),
        Kind::PostgresReset => Some((
            Link::Postgres,
            vec![(Stream::Downstream, Toxic::ResetPeer { after_ms: 0 })],
        )),
        _ => None,
    };
    if let Some((link, toxics)) = toxics {
        for (i, (stream, toxic)) in toxics.iter().enumerate() {
            proxies.add(link, &format!("nemesis{i}"), *stream, toxic);
        }
        tokio::time::sleep(hold).await;
        proxies.reset();
        return;
    }
    match kind {
        Kind::RelayKill => {
            // The active one, else the first that runs.
            let victim = members.iter().position(Member::ready_now).unwrap_or(0);
            let m = &mut members[victim];
            if let Some(mut p) = m.process.take() {
                let _ = p.child.kill();
                let _ = p.child.wait();
                m.killed += 1;
            }
            tokio::time::sleep(hold).await;
            m.process = Some(RelayProcess::spawn(&m.config));
        }
        Kind::WalsenderTerminated => {
            let _ = direct
                .execute(
                    "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active",
                    &[&slot],
                )
                .await;
        }
        Kind::PostgresRestart => crate::restart_postgres(),
        Kind::KafkaRestart => {
            services_script("stop-kafka");
            services_script("start-kafka");
        }
        Kind::Cluster(fault) => {
            let cluster = stage
                .cluster
                .expect("the cluster's faults are drawn on the cluster only");
            cluster.inject(fault, proxies, stage.topic).await;
        }
        _ => {}
    }
}

fn both(toxic: Toxic) -> Vec<(Stream, Toxic)> {
    vec![
        (Stream::Downstream, toxic.clone()),
        (Stream::Upstream, toxic),
    ]
}

/// What a soak leaves for its checker.
struct Finished<'a> {
    /// Where the checker reads Kafka.
    bootstrap: &'a str,
    db: &'a crate::TestDb,
    slot: &'a str,
    topic: &'a str,
    tap: Tap,
    members: Vec<Member>,
    faults: Vec<Injected>,
    /// Transactions the workload saw committed.
    committed_seen: usize,
    start: Instant,
}
