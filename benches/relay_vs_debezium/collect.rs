//! What the bench reads back: the records a consumer saw on a topic, with
//! the broker's append times.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, Timestamp as KafkaTimestamp, TopicPartitionList};

use crate::engine::Engine;
use crate::engines::Running;
use crate::numbers::now_ms;
use crate::services::Services;
use outbox_cdc::contract::outbox;

/// What a consumer saw on a topic: for each message id, the broker's append
/// time of its first copy. Ids are kept as numbers: a map of 10 000 000
/// strings grew to about 1 GiB, and the bench's consumer, growing it, took
/// CPU from what it measured.
#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) first: HashMap<u128, i64>,
    pub(crate) records: usize,
    pub(crate) errors: usize,
}

/// A message id as the key of [`Seen::first`]: a UUID's text as its 128-bit
/// number, any other id as two 64-bit hashes of its bytes.
pub(crate) fn id_key(text: &[u8]) -> u128 {
    let (mut n, mut digits) = (0u128, 0);
    for &b in text.iter().filter(|b| **b != b'-') {
        match char::from(b).to_digit(16) {
            Some(d) => n = n << 4 | u128::from(d),
            None => return hashed(text),
        }
        digits += 1;
    }
    if digits == 32 {
        n
    } else {
        hashed(text)
    }
}

fn hashed(text: &[u8]) -> u128 {
    use std::hash::{Hash, Hasher};
    let half = |seed: u8| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        seed.hash(&mut h);
        text.hash(&mut h);
        h.finish()
    };
    u128::from(half(0)) << 64 | u128::from(half(1))
}

pub(crate) struct Collector {
    pub(crate) seen: Arc<Mutex<Seen>>,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) thread: std::thread::JoinHandle<Result<()>>,
}

impl Collector {
    pub(crate) fn start(
        bootstrap: &str,
        topic: &str,
        partitions: i32,
        engine: Engine,
    ) -> Result<Collector> {
        Collector::start_topics(bootstrap, &[topic.to_string()], partitions, engine)
    }

    /// A consumer of every partition of `topics`.
    pub(crate) fn start_topics(
        bootstrap: &str,
        topics: &[String],
        partitions: i32,
        engine: Engine,
    ) -> Result<Collector> {
        let topic = topics.first().map(String::as_str).unwrap_or_default();
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
        for topic in topics {
            for p in 0..partitions {
                tpl.add_partition_offset(topic, p, Offset::Beginning)?;
            }
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
                        .map(id_key)
                        .ok_or_else(|| anyhow!("a record without an id header"))?;
                    seen.records += 1;
                    seen.first.entry(id).or_insert(at);
                }
                Ok(())
            }
        });
        Ok(Collector { seen, stop, thread })
    }

    pub(crate) fn distinct(&self) -> usize {
        self.seen.lock().map(|s| s.first.len()).unwrap_or(0)
    }

    pub(crate) async fn wait_for(&self, n: usize, timeout: Duration) -> Result<()> {
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

    pub(crate) fn finish(self) -> Result<Seen> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow!("consumer panicked"))??;
        let seen = Arc::try_unwrap(self.seen).map_err(|_| anyhow!("consumer still shared"))?;
        seen.into_inner().map_err(|_| anyhow!("poisoned"))
    }
}

pub(crate) async fn wait_until_seen(
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
