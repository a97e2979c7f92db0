//! The seeded nemesis soak: a steady workload, an active relay and a standby
//! on the same slot (both through the proxies), and a nemesis that injects
//! network and process faults at times drawn from the seed. At the end a
//! checker that shares no code with the relay reads PostgreSQL and Kafka.
//! `scripts/soak.sh` runs it; the test suite runs a short one.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::relay::{self, RelayProcess};
use crate::toxiproxy::{self, Link, Proxies, Stream, Toxic};
use crate::workload::{self, Readiness, Seeded, Tap, Workload};
use crate::{kafka, Services};

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

pub struct Options {
    pub duration: Duration,
    pub seed: u64,
    pub delivery: Delivery,
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

/// The checker's findings and the figures.
#[derive(Debug, Clone)]
pub struct Report {
    pub seed: u64,
    pub delivery: Delivery,
    /// As asked (`--minutes`), for the replay line.
    pub planned_minutes: f64,
    pub minutes: f64,
    pub faults: Vec<Injected>,
    pub committed: usize,
    pub records: usize,
    pub lost: usize,
    pub duplicates: usize,
    /// Records a read_committed consumer sees beyond one per id
    /// (transactional delivery: must be 0).
    pub committed_duplicates: Option<usize>,
    pub out_of_order_keys: usize,
    pub pending_after_stop: usize,
    pub published_not_in_kafka: usize,
    /// Relay exits the nemesis did not cause.
    pub unexpected_exits: usize,
    /// Records arriving per 10 s from the start.
    pub throughput: Vec<usize>,
}

impl Report {
    /// Everything the soak promises; the violations, in words.
    pub fn violations(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.lost > 0 {
            v.push(format!("{} committed rows are not in Kafka", self.lost));
        }
        if self.committed_duplicates.is_some_and(|d| d > 0) {
            v.push(format!(
                "{} duplicates for a read_committed consumer in transactional delivery",
                self.committed_duplicates.unwrap_or(0)
            ));
        }
        if self.out_of_order_keys > 0 {
            v.push(format!(
                "{} keys' first deliveries out of commit order",
                self.out_of_order_keys
            ));
        }
        if self.pending_after_stop > 0 {
            v.push(format!(
                "{} rows PENDING after the slot confirmed them",
                self.pending_after_stop
            ));
        }
        if self.published_not_in_kafka > 0 {
            v.push(format!(
                "{} rows PUBLISHED but not in Kafka",
                self.published_not_in_kafka
            ));
        }
        if self.unexpected_exits > 0 {
            v.push(format!(
                "{} relay exits the nemesis did not cause",
                self.unexpected_exits
            ));
        }
        for f in &self.faults {
            if !f.ready_again || f.recovery.is_none() {
                v.push(format!(
                    "{} at {:.1} s: no recovery within {RECOVERY_BUDGET:?}",
                    f.kind.name(),
                    f.at
                ));
            }
        }
        v
    }

    /// Per kind: count, max and p99 recovery in seconds.
    pub fn recovery_by_kind(&self) -> BTreeMap<Kind, (usize, f64, f64)> {
        let mut by: BTreeMap<Kind, Vec<f64>> = BTreeMap::new();
        for f in &self.faults {
            by.entry(f.kind)
                .or_default()
                .push(f.recovery.unwrap_or(f64::NAN));
        }
        by.into_iter()
            .map(|(k, mut v)| {
                v.sort_by(|a, b| a.total_cmp(b));
                let max = v.last().copied().unwrap_or(0.0);
                let p99 = v[((v.len() as f64 * 0.99).ceil() as usize).clamp(1, v.len()) - 1];
                (k, (v.len(), max, p99))
            })
            .collect()
    }

    pub fn json(&self) -> String {
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|f| {
                format!(
                    r#"{{"kind":"{}","at_secs":{:.1},"hold_secs":{:.1},"recovery_secs":{},"ready_again":{}}}"#,
                    f.kind.name(),
                    f.at,
                    f.hold,
                    f.recovery.map_or("null".into(), |r| format!("{r:.1}")),
                    f.ready_again
                )
            })
            .collect();
        let kinds: Vec<String> = self
            .recovery_by_kind()
            .iter()
            .map(|(k, (n, max, p99))| {
                format!(
                    r#"{{"kind":"{}","count":{n},"max_secs":{max:.1},"p99_secs":{p99:.1}}}"#,
                    k.name()
                )
            })
            .collect();
        let violations: Vec<String> = self.violations().iter().map(|v| format!("{v:?}")).collect();
        format!(
            "{{\n  \"seed\": {},\n  \"delivery\": \"{}\",\n  \"minutes\": {:.1},\n  \"faults_injected\": {},\n  \"committed\": {},\n  \"records\": {},\n  \"lost\": {},\n  \"duplicates\": {},\n  \"read_committed_duplicates\": {},\n  \"out_of_order_keys\": {},\n  \"pending_after_stop\": {},\n  \"published_not_in_kafka\": {},\n  \"unexpected_exits\": {},\n  \"recovery_by_kind\": [{}],\n  \"faults\": [\n    {}\n  ],\n  \"throughput_per_10s\": {:?},\n  \"violations\": [{}]\n}}\n",
            self.seed,
            self.delivery.as_str(),
            self.minutes,
            self.faults.len(),
            self.committed,
            self.records,
            self.lost,
            self.duplicates,
            self.committed_duplicates.map_or("null".into(), |d| d.to_string()),
            self.out_of_order_keys,
            self.pending_after_stop,
            self.published_not_in_kafka,
            self.unexpected_exits,
            kinds.join(", "),
            faults.join(",\n    "),
            self.throughput,
            violations.join(", ")
        )
    }

    /// The report's file names without extension.
    pub fn stem(&self) -> String {
        format!("soak-{}-{}", self.delivery.as_str(), self.seed)
    }

    /// The throughput over time with the faults shaded.
    pub fn chart(&self) -> String {
        let faults: Vec<(String, f64, f64)> = self
            .faults
            .iter()
            .map(|f| (f.kind.name().to_string(), f.at, f.hold))
            .collect();
        throughput_chart(self.delivery.as_str(), self.seed, &self.throughput, &faults)
    }

    pub fn markdown(&self) -> String {
        let mut md = format!(
            "# Nemesis soak: {} delivery, seed {}, {:.1} minutes\n\nReplay: `scripts/soak.sh --minutes {} --seed {} --delivery {}`\n\n",
            self.delivery.as_str(),
            self.seed,
            self.minutes,
            self.planned_minutes,
            self.seed,
            self.delivery.as_str()
        );
        md.push_str(&format!(
            "| faults injected | rows committed | records in Kafka | lost | duplicates | read_committed duplicates | keys out of order | PENDING after stop | PUBLISHED not in Kafka | unexpected relay exits |\n|---|---|---|---|---|---|---|---|---|---|\n| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n\n",
            self.faults.len(),
            self.committed,
            self.records,
            self.lost,
            self.duplicates,
            self.committed_duplicates.map_or("n/a".into(), |d| d.to_string()),
            self.out_of_order_keys,
            self.pending_after_stop,
            self.published_not_in_kafka,
            self.unexpected_exits
        ));
        md.push_str("## Recovery by fault kind\n\nFrom the heal until a row committed after it arrived in Kafka.\n\n| fault | count | max | p99 |\n|---|---|---|---|\n");
        for (k, (n, max, p99)) in self.recovery_by_kind() {
            md.push_str(&format!(
                "| {} | {n} | {max:.1} s | {p99:.1} s |\n",
                k.name()
            ));
        }
        md.push_str("\n## Faults, in order\n\n| at | fault | held | recovery | ready again |\n|---|---|---|---|---|\n");
        for f in &self.faults {
            md.push_str(&format!(
                "| {:.1} s | {} | {:.1} s | {} | {} |\n",
                f.at,
                f.kind.name(),
                f.hold,
                f.recovery.map_or("none".into(), |r| format!("{r:.1} s")),
                if f.ready_again { "yes" } else { "no" }
            ));
        }
        md.push_str(&format!(
            "\n## Throughput\n\nRecords arriving in Kafka per second, averaged over 10 s, with each fault shaded while it was held and each kill or restart a line (the table above).\n\n![Throughput over time, faults shaded]({}-throughput.svg)\n",
            self.stem()
        ));
        let violations = self.violations();
        md.push_str(&format!(
            "\n## Verdict\n\n{}\n",
            if violations.is_empty() {
                "Every promise held.".to_string()
            } else {
                violations
                    .iter()
                    .map(|v| format!("- {v}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            }
        ));
        md
    }
}

/// The soak's chart from its figures (the report's, or a committed report's
/// JSON): records per second in each 10 s interval, and each fault (kind,
/// start, hold in seconds) shaded by what it hit.
pub fn throughput_chart(
    delivery: &str,
    seed: u64,
    per_10s: &[usize],
    faults: &[(String, f64, f64)],
) -> String {
    crate::chart::Timeline {
        title: format!("Nemesis soak, {delivery} delivery, seed {seed}: records per second"),
        unit: "records per second".into(),
        points: per_10s
            .iter()
            .enumerate()
            .map(|(i, n)| (i as f64 * 10.0 + 5.0, *n as f64 / 10.0))
            .collect(),
        spans: faults
            .iter()
            .map(|(kind, at, hold)| crate::chart::Span {
                start: *at,
                length: *hold,
                category: if kind.starts_with("kafka") {
                    "Kafka faults"
                } else if kind.starts_with("relay") {
                    "relay killed"
                } else {
                    "PostgreSQL faults"
                }
                .into(),
            })
            .collect(),
    }
    .svg()
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

fn config(
    services: &Services,
    proxies: &Proxies,
    db: &str,
    prefix: &str,
    slot: &str,
    port: u16,
    delivery: Delivery,
) -> PathBuf {
    let proxied = Services {
        pg_host: "127.0.0.1".into(),
        pg_port: toxiproxy::port(&proxies.pg),
        pg_user: services.pg_user.clone(),
        pg_password: services.pg_password.clone(),
        kafka_bootstrap: proxies.kafka.clone(),
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
    kafka::create_topic(&services.kafka_bootstrap, &topic, 6).await;
    let slot = format!("{}_relay", db.name);
    let mut members: Vec<Member> = (0..2)
        .map(|_| {
            let port = crate::free_port();
            Member {
                config: config(
                    services,
                    &proxies,
                    &db.name,
                    &prefix,
                    &slot,
                    port,
                    opts.delivery,
                ),
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
            .wait(true, began, Duration::from_secs(90))
            .is_some(),
        "the first relay never became ready"
    );
    members[1].process = Some(RelayProcess::spawn(&members[1].config));
    let tap = Tap::start(
        &services.kafka_bootstrap,
        std::slice::from_ref(&topic),
        kafka::READ_UNCOMMITTED,
    );
    let load = Workload::start(services, &db.name, 2, 25, 200, opts.seed).await;
    let start = Instant::now();
    let mut rng = Seeded::new(opts.seed);
    let mut faults = Vec::new();
    let mut direct = services.connect(&db.name).await;

    loop {
        let gap = Duration::from_secs(rng.between(5, 15));
        let kind = KINDS[rng.between(0, KINDS.len() as u64 - 1) as usize];
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
        inject(kind, hold, &proxies, &mut members, &slot, &direct).await;
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
                    .records()
                    .iter()
                    .find(|r| r.id == mark)
                    .map(|r| r.at.saturating_duration_since(healed).as_secs_f64());
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
    let report = check(
        services,
        opts,
        &db,
        &slot,
        &topic,
        tap,
        members,
        faults,
        committed.len(),
        start,
    )
    .await;
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
            .any(|m| m.ready.first(true, healed).is_some() || m.ready_now())
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
    proxies: &Proxies,
    members: &mut [Member],
    slot: &str,
    direct: &tokio_postgres::Client,
) {
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
        _ => {}
    }
}

fn both(toxic: Toxic) -> Vec<(Stream, Toxic)> {
    vec![
        (Stream::Downstream, toxic.clone()),
        (Stream::Upstream, toxic),
    ]
}

#[allow(clippy::too_many_arguments)]
async fn check(
    services: &Services,
    opts: &Options,
    db: &crate::TestDb,
    slot: &str,
    topic: &str,
    tap: Tap,
    mut members: Vec<Member>,
    faults: Vec<Injected>,
    committed_seen: usize,
    start: Instant,
) -> Report {
    let client = services.connect(&db.name).await;
    let table: HashSet<String> = crate::texts(
        &client,
        "SELECT message_id::text FROM public.messaging_outbox",
    )
    .await
    .into_iter()
    .collect();
    assert!(table.len() >= committed_seen);
    let missing = tap.wait_for(&table, Duration::from_secs(240));
    let records = tap.records();
    drop(tap);
    let distinct: HashSet<&str> = records.iter().map(|r| r.id.as_str()).collect();
    let out_of_order = workload::out_of_order(&records).len();
    let mut throughput = Vec::new();
    for r in &records {
        let bucket = (r.at.saturating_duration_since(start).as_secs() / 10) as usize;
        if throughput.len() <= bucket {
            throughput.resize(bucket + 1, 0);
        }
        throughput[bucket] += 1;
    }
    // No exit but the nemesis's kills, then a clean stop of both.
    let mut unexpected_exits = 0;
    for m in &mut members {
        if let Some(p) = m.process.as_mut() {
            if p.child.try_wait().ok().flatten().is_some() {
                unexpected_exits += 1;
                eprintln!(
                    "a relay exited by itself:\n{}",
                    relay::warnings_in(&[p.log_text()])
                );
            }
        }
    }
    for m in &mut members {
        if let Some(p) = m.process.as_mut() {
            p.signal("TERM");
            if !p.wait(Duration::from_secs(60)).is_some_and(|s| s.success()) {
                unexpected_exits += 1;
            }
        }
    }
    let statuses = crate::text_pairs(
        &client,
        "WITH j AS (SELECT DISTINCT unnest(message_ids) AS id FROM public.outbox_cdc_published)
         SELECT o.message_id::text,
                CASE WHEN o.status = 'PENDING' AND j.id IS NOT NULL THEN 'JOURNALED' ELSE o.status END
           FROM public.messaging_outbox o LEFT JOIN j ON j.id = o.message_id",
    )
    .await;
    let pending_after_stop = statuses.iter().filter(|(_, s)| s == "PENDING").count();
    let published_not_in_kafka = statuses
        .iter()
        .filter(|(id, s)| (s == "PUBLISHED" || s == "JOURNALED") && !distinct.contains(id.as_str()))
        .count();
    let committed_duplicates = match opts.delivery {
        Delivery::Transactional => {
            let seen = kafka::consume_all(
                &services.kafka_bootstrap,
                &[topic],
                Duration::from_secs(10),
                kafka::READ_COMMITTED,
            );
            Some(seen.len() - kafka::by_id(&seen).len())
        }
        Delivery::Idempotent => None,
    };
    let report = Report {
        seed: opts.seed,
        delivery: opts.delivery,
        planned_minutes: opts.duration.as_secs_f64() / 60.0,
        minutes: start.elapsed().as_secs_f64() / 60.0,
        faults,
        committed: table.len(),
        records: records.len(),
        lost: missing.len(),
        duplicates: records.len() - distinct.len(),
        committed_duplicates,
        out_of_order_keys: out_of_order,
        pending_after_stop,
        published_not_in_kafka,
        unexpected_exits,
        throughput,
    };
    write(&report, &opts.report_dir);
    crate::replication::drop_slot(&client, slot).await;
    drop(client);
    report
}

fn write(report: &Report, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let stem = report.stem();
    std::fs::write(dir.join(format!("{stem}-throughput.svg")), report.chart()).unwrap();
    std::fs::write(dir.join(format!("{stem}.json")), report.json()).unwrap();
    std::fs::write(dir.join(format!("{stem}.md")), report.markdown()).unwrap();
    eprintln!(
        "the soak's report: {}",
        dir.join(format!("{stem}.md")).display()
    );
}
