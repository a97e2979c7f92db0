//! A steady workload and the instruments that watch a relay under faults:
//! writers that commit 1- to 5-row transactions over many keys at a fixed
//! rate, a tap that reads the topic continuously and notes when each record
//! arrived, and a poller of `/readyz`. Shared by the network fault tests
//! and the soak.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use crate::db::KEYED_INSERT;
use crate::Services;

/// A deterministic pseudo-random sequence (xorshift64*): a seed replays the
/// same choices.
#[derive(Debug, Clone)]
pub struct Seeded(u64);

impl Seeded {
    pub fn new(seed: u64) -> Seeded {
        Seeded(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn draw(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.draw() % (high - low + 1)
    }
}

/// A row the workload saw committed.
#[derive(Debug, Clone)]
pub struct Committed {
    pub key: String,
    /// Its per-key sequence number (its payload): per key, commit order.
    pub seq: u64,
    /// When the commit returned.
    pub at: Instant,
}

/// Writers on their own tasks until [`Workload::stop`].
pub struct Workload {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<HashMap<String, Committed>>>,
    pub started: Instant,
}

/// How hard a [`Workload`] writes.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    /// Connections, each committing on its own.
    pub writers: usize,
    /// Transactions a second per writer, of 1 to 5 rows.
    pub per_sec: u64,
    /// Keys the rows spread over.
    pub keys: usize,
    /// Seeds each writer's choices.
    pub seed: u64,
}

impl Workload {
    /// `load.writers` connections, each committing `load.per_sec`
    /// transactions a second of 1 to 5 rows over `load.keys` keys. A writer
    /// whose connection breaks (PostgreSQL restarts) reconnects; a
    /// transaction whose commit did not return is not counted here, and the
    /// checker reads the table.
    pub async fn start(services: &Services, db: &str, load: Load) -> Workload {
        let Load {
            writers,
            per_sec,
            keys,
            seed,
        } = load;
        crate::db::key_seq(&services.connect(db).await, keys).await;
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for w in 0..writers {
            let stop = stop.clone();
            let (host, port, user, password) = (
                services.pg_host.clone(),
                services.pg_port,
                services.pg_user.clone(),
                services.pg_password.clone(),
            );
            let db = db.to_string();
            let mut rng = Seeded::new(seed.wrapping_add(w as u64 * 7919));
            tasks.push(tokio::spawn(async move {
                let mut committed = HashMap::new();
                let mut client: Option<tokio_postgres::Client> = None;
                let mut tick =
                    tokio::time::interval(Duration::from_micros(1_000_000 / per_sec.max(1)));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    if client.as_ref().is_none_or(|c| c.is_closed()) {
                        client = connect(&host, port, &user, &password, &db).await;
                        if client.is_none() {
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            continue;
                        }
                    }
                    let Some(c) = client.as_mut() else { continue };
                    let rows = rng.between(1, 5);
                    let keys_now: Vec<String> = (0..rows)
                        .map(|_| format!("key-{}", rng.between(0, keys as u64 - 1)))
                        .collect();
                    if let Ok(done) = one_transaction(c, &keys_now).await {
                        let at = Instant::now();
                        for (id, key, seq) in done {
                            committed.insert(id, Committed { key, seq, at });
                        }
                    }
                }
                committed
            }));
        }
        Workload {
            stop,
            tasks,
            started: Instant::now(),
        }
    }

    /// Stops the writers; what they saw committed, by id.
    pub async fn stop(self) -> HashMap<String, Committed> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = HashMap::new();
        for t in self.tasks {
            all.extend(t.await.unwrap());
        }
        all
    }
}

async fn connect(
    host: &str,
    port: u16,
    user: &str,
    password: &str,
    db: &str,
) -> Option<tokio_postgres::Client> {
    let (client, conn) = tokio_postgres::Config::new()
        .host(host)
        .port(port)
        .user(user)
        .password(password)
        .dbname(db)
        .connect_timeout(Duration::from_secs(5))
        .connect(tokio_postgres::NoTls)
        .await
        .ok()?;
    tokio::spawn(conn);
    Some(client)
}

/// One transaction of keyed rows: (id, key, per-key sequence) each.
async fn one_transaction(
    c: &mut tokio_postgres::Client,
    keys: &[String],
) -> Result<Vec<(String, String, u64)>, tokio_postgres::Error> {
    let insert = KEYED_INSERT.replace(
        "RETURNING message_id::text, causation_id",
        "RETURNING message_id::text, correlation_id",
    );
    let tx = c.transaction().await?;
    let mut done = Vec::new();
    for key in keys {
        let row = tx.query_one(&insert, &[key]).await?;
        let seq = row.get::<_, String>(1).parse().unwrap_or(0);
        done.push((row.get::<_, String>(0), key.clone(), seq));
    }
    tx.commit().await?;
    Ok(done)
}

/// A row of a key of its own, committed now: the first row after a heal
/// that reaches Kafka tells when the relay recovered. Its id.
pub async fn marker(client: &tokio_postgres::Client) -> Result<String, tokio_postgres::Error> {
    client
        .query_one(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key, correlation_id)
             VALUES (gen_random_uuid(), 'keyed', 'M', 1, 'text/plain', convert_to('marker', 'UTF8'), 'marker-' || gen_random_uuid(), '0')
             RETURNING message_id::text",
            &[],
        )
        .await
        .map(|r| r.get(0))
}

/// Every row's id in the outbox table, whether or not its writer saw the
/// commit: what the tap must read.
pub async fn outbox_ids(client: &tokio_postgres::Client) -> HashSet<String> {
    crate::texts(
        client,
        "SELECT message_id::text FROM public.messaging_outbox",
    )
    .await
    .into_iter()
    .collect()
}

/// A record as the tap saw it.
#[derive(Debug, Clone)]
pub struct Arrived {
    pub id: String,
    pub key: String,
    pub seq: u64,
    pub partition: i32,
    pub offset: i64,
    pub at: Instant,
}

/// Reads topics from the beginning on its own thread, noting arrivals.
pub struct Tap {
    records: Arc<Mutex<Vec<Arrived>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Tap {
    /// Taps `topics` (which must exist) at `isolation` through `bootstrap`.
    pub fn start(bootstrap: &str, topics: &[String], isolation: &str) -> Tap {
        let records = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("isolation.level", isolation)
            .set("group.id", "outbox-cdc-tap")
            .set("enable.auto.commit", "false")
            .set("topic.metadata.refresh.interval.ms", "1000")
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        for topic in topics {
            for p in 0..crate::kafka::partitions(bootstrap, topic) {
                tpl.add_partition_offset(topic, p, Offset::Beginning)
                    .unwrap();
            }
        }
        consumer.assign(&tpl).unwrap();
        let thread = {
            let (records, stop) = (records.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) else {
                        continue;
                    };
                    let header = |name: &str| {
                        m.headers().and_then(|h| {
                            h.iter().find(|h| h.key == name).and_then(|h| {
                                h.value.map(|v| String::from_utf8_lossy(v).into_owned())
                            })
                        })
                    };
                    let arrived = Arrived {
                        id: header("id").unwrap_or_default(),
                        key: m
                            .key()
                            .map(|k| String::from_utf8_lossy(k).into_owned())
                            .unwrap_or_default(),
                        seq: header("msg.correlation-id")
                            .and_then(|n| n.parse().ok())
                            .unwrap_or(0),
                        partition: m.partition(),
                        offset: m.offset(),
                        at: Instant::now(),
                    };
                    records.lock().unwrap().push(arrived);
                }
            })
        };
        Tap {
            records,
            stop,
            thread: Some(thread),
        }
    }

    /// The records so far.
    pub fn records(&self) -> Vec<Arrived> {
        self.records.lock().unwrap().clone()
    }

    /// Distinct ids so far.
    pub fn ids(&self) -> HashSet<String> {
        self.records
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.id.clone())
            .collect()
    }

    /// When the record `id` first arrived.
    pub fn arrived_at(&self, id: &str) -> Option<Instant> {
        self.records
            .lock()
            .unwrap()
            .iter()
            .find(|r| r.id == id)
            .map(|r| r.at)
    }

    /// Waits until every id of `wanted` arrived, or `within` passed;
    /// the ids still missing.
    pub fn wait_for(&self, wanted: &HashSet<String>, within: Duration) -> HashSet<String> {
        let deadline = Instant::now() + within;
        loop {
            let seen = self.ids();
            let missing: HashSet<String> = wanted.difference(&seen).cloned().collect();
            if missing.is_empty() || Instant::now() >= deadline {
                return missing;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The first arrival of a record committed at or after `since`.
    pub fn first_after(
        &self,
        committed: &HashMap<String, Committed>,
        since: Instant,
    ) -> Option<Instant> {
        self.records
            .lock()
            .unwrap()
            .iter()
            .filter(|r| committed.get(&r.id).is_some_and(|c| c.at >= since))
            .map(|r| r.at)
            .min()
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Per key, the sequence numbers in the order of their first delivery.
pub fn first_deliveries(records: &[Arrived]) -> BTreeMap<String, Vec<u64>> {
    let mut seen = HashSet::new();
    let mut sorted: Vec<&Arrived> = records.iter().collect();
    sorted.sort_by_key(|r| (r.partition, r.offset));
    let mut order: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for r in sorted {
        if seen.insert(r.id.clone()) {
            order.entry(r.key.clone()).or_default().push(r.seq);
        }
    }
    order
}

/// Keys whose first deliveries are not in commit order.
pub fn out_of_order(records: &[Arrived]) -> Vec<String> {
    first_deliveries(records)
        .into_iter()
        .filter(|(_, seqs)| seqs.windows(2).any(|w| w[0] >= w[1]))
        .map(|(k, _)| k)
        .collect()
}

/// What `/readyz` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// 200.
    Ready,
    /// Anything else, or no answer.
    NotReady,
}

impl Answer {
    /// What `/readyz` on `port` answers now.
    fn now(port: u16) -> Answer {
        match ready(port) {
            true => Answer::Ready,
            false => Answer::NotReady,
        }
    }
}

/// `/readyz` polled every 100 ms on its own thread: the answers' changes.
pub struct Readiness {
    changes: Arc<Mutex<Vec<(Instant, Answer)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Readiness {
    pub fn watch(port: u16) -> Readiness {
        let changes = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (changes, stop) = (changes.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut last: Option<Answer> = None;
                while !stop.load(Ordering::Relaxed) {
                    let answer = Answer::now(port);
                    if last != Some(answer) {
                        changes.lock().unwrap().push((Instant::now(), answer));
                        last = Some(answer);
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        };
        Readiness {
            changes,
            stop,
            thread: Some(thread),
        }
    }

    /// The first time after `since` the answer was `answer`.
    pub fn first(&self, answer: Answer, since: Instant) -> Option<Instant> {
        self.changes
            .lock()
            .unwrap()
            .iter()
            .find(|(at, r)| *at >= since && *r == answer)
            .map(|(at, _)| *at)
    }

    /// Whether the answer now is 200.
    pub fn now(&self) -> bool {
        self.changes
            .lock()
            .unwrap()
            .last()
            .is_some_and(|(_, r)| *r == Answer::Ready)
    }

    /// Waits until the answer is `answer` (after `since`), up to `within`.
    pub fn wait(&self, answer: Answer, since: Instant, within: Duration) -> Option<Instant> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(at) = self.first(answer, since) {
                return Some(at);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Readiness {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Whether `/readyz` answers 200 now.
pub fn ready(port: u16) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_secs(2))).ok();
    if write!(s, "GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_err() {
        return false;
    }
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text.split_whitespace().nth(1) == Some("200")
}

/// One look at a relay's endpoint: its held partitions (the series of
/// `outbox_cdc_partition_unacknowledged_seconds`, labels and value) and
/// what `/readyz` answered.
#[derive(Debug, Clone)]
pub struct Look {
    pub at: Instant,
    pub held: Vec<(String, f64)>,
    pub status: Option<u16>,
    pub body: String,
}

impl Look {
    /// The oldest held partition's age, 0 when none is held.
    pub fn oldest(&self) -> f64 {
        self.held.iter().map(|(_, v)| *v).fold(0.0, f64::max)
    }
}

/// `/metrics` and `/readyz` looked at every 500 ms on their own thread.
pub struct Looks {
    looks: Arc<Mutex<Vec<Look>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Looks {
    pub fn watch(port: u16) -> Looks {
        let looks = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (looks, stop) = (looks.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let held = get(port, "/metrics")
                        .map(|(_, text)| {
                            text.lines()
                                .filter_map(|l| {
                                    let rest = l.strip_prefix(
                                        "outbox_cdc_partition_unacknowledged_seconds{",
                                    )?;
                                    let (labels, value) = rest.rsplit_once("} ")?;
                                    Some((labels.to_string(), value.trim().parse().ok()?))
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    let (status, body) = get(port, "/readyz").unzip();
                    looks.lock().unwrap().push(Look {
                        at: Instant::now(),
                        held,
                        status,
                        body: body.unwrap_or_default(),
                    });
                    std::thread::sleep(Duration::from_millis(500));
                }
            })
        };
        Looks {
            looks,
            stop,
            thread: Some(thread),
        }
    }

    pub fn all(&self) -> Vec<Look> {
        self.looks.lock().unwrap().clone()
    }
}

impl Drop for Looks {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A plain HTTP/1.0 GET on the loopback: (status, body).
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}
