//! Reading what landed in Kafka, and where Kafka's Java producer would
//! have put it.
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

/// Per key, the sequence numbers of first deliveries in offset order.
pub fn first_delivery_order(records: &[Consumed]) -> BTreeMap<String, Vec<u64>> {
    let mut sorted: Vec<&Consumed> = records.iter().collect();
    sorted.sort_by_key(|r| (r.partition, r.offset));
    let mut seen = HashSet::new();
    let mut per_key: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for r in sorted {
        if !seen.insert(r.id()) {
            continue;
        }
        let key = String::from_utf8(r.key.clone().unwrap()).unwrap();
        let n: u64 = std::str::from_utf8(r.header("msg.correlation-id").unwrap())
            .unwrap()
            .parse()
            .unwrap();
        per_key.entry(key).or_default().push(n);
    }
    per_key
}

/// Kafka's `Utils.murmur2`: the relay's own (`kafka::placement`), not
/// librdkafka's, so tests do not trust the producer's placement.
pub fn java_murmur2(data: &[u8]) -> i32 {
    outbox_cdc::kafka::placement::murmur2(data)
}

/// Java's partitioner for a keyed record.
pub fn java_partition(key: &[u8], partitions: i32) -> i32 {
    outbox_cdc::kafka::placement::partition(key, partitions)
}

#[derive(Debug, Clone)]
pub struct Consumed {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub timestamp: Option<i64>,
}

impl Consumed {
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
    }
    pub fn id(&self) -> String {
        String::from_utf8(self.header("id").expect("an id header").to_vec()).unwrap()
    }
}

/// Whether a topic exists now (no waiting).
pub fn topic_exists(bootstrap: &str, topic: &str) -> bool {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map(|md| {
            md.topics()
                .iter()
                .any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
        })
        .unwrap_or(false)
}

/// Creates a topic as the harness's super user (a least-privilege
/// principal may not auto-create it).
pub async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let t = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    for r in admin
        .create_topics([&t], &AdminOptions::new())
        .await
        .unwrap()
    {
        r.unwrap_or_else(|(t, e)| panic!("creating topic {t}: {e}"));
    }
}

/// Creates topics by the broker's defaults (a producer's metadata request
/// auto-creates them) and returns once every partition is served at its
/// leader. For Debezium's Java producer: Kafka before 4.5 (KAFKA-15591)
/// lets the second batch to a just created partition in ahead of a
/// refused first one, whose retries then fail OUT_OF_ORDER_SEQUENCE_NUMBER
/// until Debezium's engine gives up. The relay waits for this itself.
pub fn serve_topics(bootstrap: &str, topics: &[&str]) {
    use rdkafka::producer::{BaseProducer, Producer};
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    for topic in topics {
        if let Err(e) = outbox_cdc::kafka::readiness::wait_until_served(
            producer.client(),
            topic,
            Duration::from_secs(60),
        ) {
            panic!("topic {topic} was not served within 60 s: {e}");
        }
    }
}

/// The sum of `topic`'s partitions' high watermarks: what has been written.
pub fn written(bootstrap: &str, topic: &str) -> i64 {
    ends(bootstrap, topic).iter().sum()
}

/// `topic`'s partitions' high watermarks, by partition.
pub fn ends(bootstrap: &str, topic: &str) -> Vec<i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    (0..partitions(bootstrap, topic))
        .map(|p| {
            consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .unwrap()
                .1
        })
        .collect()
}

/// Partition counts of topics (waiting for them to exist).
pub fn partitions(bootstrap: &str, topic: &str) -> i32 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let md = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .unwrap();
        if let Some(t) = md
            .topics()
            .iter()
            .find(|t| t.name() == topic && t.error().is_none())
        {
            if !t.partitions().is_empty() {
                return t.partitions().len() as i32;
            }
        }
        assert!(Instant::now() < deadline, "topic {topic} never appeared");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Reads `topics` from the beginning until `count` records arrived or
/// `idle` passed without a new one.
pub fn consume(bootstrap: &str, topics: &[&str], count: usize, idle: Duration) -> Vec<Consumed> {
    consume_until(bootstrap, topics, idle, READ_UNCOMMITTED, |records, _| {
        records >= count
    })
}

/// librdkafka's consumer default, as the other helpers read.
pub const READ_UNCOMMITTED: &str = "read_uncommitted";
pub const READ_COMMITTED: &str = "read_committed";

/// Reads `topics` from the beginning at `isolation` until `idle` passed
/// without a record: everything there is.
pub fn consume_all(
    bootstrap: &str,
    topics: &[&str],
    idle: Duration,
    isolation: &str,
) -> Vec<Consumed> {
    consume_until(bootstrap, topics, idle, isolation, |_, _| false)
}

/// [`consume_ids`] at `isolation`.
pub fn consume_ids_at(
    bootstrap: &str,
    topics: &[&str],
    distinct: usize,
    idle: Duration,
    isolation: &str,
) -> Vec<Consumed> {
    consume_until(bootstrap, topics, idle, isolation, |_, ids| ids >= distinct)
}

/// Reads `topics` from the beginning until `distinct` message ids arrived
/// (duplicates included in the result) or `idle` passed without a record.
pub fn consume_ids(
    bootstrap: &str,
    topics: &[&str],
    distinct: usize,
    idle: Duration,
) -> Vec<Consumed> {
    consume_until(bootstrap, topics, idle, READ_UNCOMMITTED, |_, ids| {
        ids >= distinct
    })
}

/// Reads `topics` from the beginning until `done(records, distinct ids)`
/// or until `idle` passed without a record.
fn consume_until(
    bootstrap: &str,
    topics: &[&str],
    idle: Duration,
    isolation: &str,
    done: impl Fn(usize, usize) -> bool,
) -> Vec<Consumed> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("isolation.level", isolation)
        .set("group.id", "outbox-cdc-tests")
        .set("enable.auto.commit", "false")
        .set("fetch.max.bytes", "104857600")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for topic in topics {
        for p in 0..partitions(bootstrap, topic) {
            tpl.add_partition_offset(topic, p, Offset::Beginning)
                .unwrap();
        }
    }
    consumer.assign(&tpl).unwrap();
    let mut out: Vec<Consumed> = Vec::new();
    let mut ids = std::collections::HashSet::new();
    let mut last = Instant::now();
    while !done(out.len(), ids.len()) && last.elapsed() < idle {
        let Some(result) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        // Transient client errors (a broker connection dropped on a
        // loaded machine) come through poll too; the client recovers.
        let m = match result {
            Ok(m) => m,
            Err(e) => {
                eprintln!("consumer: {e}");
                continue;
            }
        };
        last = Instant::now();
        let c = Consumed {
            topic: m.topic().to_string(),
            partition: m.partition(),
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            headers: m
                .headers()
                .map(|h| {
                    h.iter()
                        .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                        .collect()
                })
                .unwrap_or_default(),
            timestamp: m.timestamp().to_millis(),
        };
        ids.insert(c.id());
        out.push(c);
    }
    out
}

/// The offset metadata `group` committed for partition 0 of `topic`
/// (transactional delivery's progress), read as a read_committed client.
pub fn committed_metadata(bootstrap: &str, group: &str, topic: &str) -> Option<(i64, String)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, 0);
    let tpl = consumer
        .committed_offsets(tpl, Duration::from_secs(30))
        .unwrap();
    let elem = tpl.elements().into_iter().next()?;
    match elem.offset() {
        Offset::Offset(o) => Some((o, elem.metadata().to_string())),
        _ => None,
    }
}

/// Creates a topic with topic-level settings, as the harness's super user.
pub async fn create_topic_with(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    settings: &[(&str, &str)],
) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let mut t = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    for (k, v) in settings {
        t = t.set(k, v);
    }
    for r in admin
        .create_topics([&t], &AdminOptions::new())
        .await
        .unwrap()
    {
        r.unwrap_or_else(|(t, e)| panic!("creating topic {t}: {e}"));
    }
}

/// Creates `topic` with the cluster's default replication factor (-1: the
/// controller's `default.replication.factor`).
pub async fn create_replicated_topic(bootstrap: &str, topic: &str, partitions: i32) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let t = NewTopic::new(topic, partitions, TopicReplication::Fixed(-1));
    for r in admin
        .create_topics([&t], &AdminOptions::new())
        .await
        .unwrap()
    {
        r.unwrap_or_else(|(t, e)| panic!("creating topic {t}: {e}"));
    }
}

/// Records grouped by message id, in (partition, offset) order per key.
pub fn by_id(records: &[Consumed]) -> BTreeMap<String, Vec<&Consumed>> {
    let mut map: BTreeMap<String, Vec<&Consumed>> = BTreeMap::new();
    for r in records {
        map.entry(r.id()).or_default().push(r);
    }
    map
}

/// Produces `record` again as it is (key, value, headers with their nulls,
/// timestamp), or with `id` and `value` in place of its own.
pub async fn produce_copy(
    bootstrap: &str,
    record: &Consumed,
    id: Option<&str>,
    value: Option<&[u8]>,
) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let mut headers = OwnedHeaders::new();
    for (name, v) in &record.headers {
        let v = match (name.as_str(), id) {
            ("id", Some(id)) => Some(id.as_bytes()),
            _ => v.as_deref(),
        };
        headers = headers.insert(Header {
            key: name,
            value: v,
        });
    }
    let key = record.key.clone().unwrap();
    let payload = value.map_or_else(|| record.value.clone().unwrap(), <[u8]>::to_vec);
    let mut copy = FutureRecord::to(&record.topic)
        .partition(record.partition)
        .key(&key)
        .payload(&payload)
        .headers(headers);
    if let Some(ts) = record.timestamp {
        copy = copy.timestamp(ts);
    }
    producer.send(copy, Duration::from_secs(10)).await.unwrap();
}
