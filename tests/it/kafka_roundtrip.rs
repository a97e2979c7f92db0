//! A produce and consume round trip against the real local Kafka broker,
//! with the producer settings the relay depends on: Java-compatible key
//! placement (murmur2), headers with null values, and an empty value that is
//! not a tombstone.

use crate::common;

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, OwnedHeaders};
use rdkafka::producer::{BaseProducer, FutureProducer, FutureRecord, Producer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

const PARTITIONS: i32 = 6;

use common::kafka::{java_murmur2, java_partition};

#[test]
fn the_test_murmur2_matches_kafkas_own_test_vectors() {
    // From Kafka's UtilsTest.testMurmur2.
    assert_eq!(java_murmur2(b"21"), -973932308);
    assert_eq!(java_murmur2(b"foobar"), -790332482);
    assert_eq!(java_murmur2(b"a-little-bit-long-string"), -985981536);
    assert_eq!(java_murmur2(b"a-little-bit-longer-string"), -1486304829);
    assert_eq!(
        java_murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"),
        -58897971
    );
    assert_eq!(java_murmur2(b"abc"), 479470107);
}

#[tokio::test]
async fn records_round_trip_with_java_placement_null_headers_and_empty_values() {
    let services = require_services!();
    let topic = format!(
        "roundtrip-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    );
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &services.kafka_bootstrap)
        .create()
        .unwrap();
    let created = admin
        .create_topics(
            &[NewTopic::new(
                &topic,
                PARTITIONS,
                TopicReplication::Fixed(1),
            )],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .unwrap();
    assert!(created.iter().all(|r| r.is_ok()), "{created:?}");

    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &services.kafka_bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("partitioner", "murmur2_random")
        .create()
        .unwrap();
    let keys: Vec<String> = (0..60).map(|i| format!("customer-{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        let value: Vec<u8> = if i == 0 {
            Vec::new()
        } else {
            vec![i as u8, 0, 255]
        };
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "id",
                value: Some(key.as_bytes()),
            })
            .insert(Header {
                key: "msg.tenant",
                value: None::<&[u8]>,
            })
            .insert(Header {
                key: "msg.type",
                value: Some("OrderPlaced"),
            });
        let partition = producer
            .send(
                FutureRecord::to(&topic)
                    .key(key.as_bytes())
                    .payload(&value)
                    .headers(headers),
                Duration::from_secs(30),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("produce failed: {e}"))
            .partition;
        assert_eq!(
            partition,
            java_partition(key.as_bytes(), PARTITIONS),
            "key {key}"
        );
    }

    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &services.kafka_bootstrap)
        .set("group.id", format!("{topic}-reader"))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        assignment
            .add_partition_offset(&topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.len() < keys.len() && Instant::now() < deadline {
        let Some(result) = consumer.poll(Duration::from_millis(500)) else {
            continue;
        };
        // Transient client errors come through poll; the client recovers.
        let m = match result {
            Ok(m) => m,
            Err(e) => {
                eprintln!("consumer: {e}");
                continue;
            }
        };
        let key = String::from_utf8(m.key().unwrap().to_vec()).unwrap();
        let headers = m.headers().expect("headers");
        let names: Vec<(String, Option<Vec<u8>>)> = headers
            .iter()
            .map(|h| (h.key.to_string(), h.value.map(|v| v.to_vec())))
            .collect();
        assert_eq!(
            names,
            vec![
                ("id".to_string(), Some(key.as_bytes().to_vec())),
                ("msg.tenant".to_string(), None),
                ("msg.type".to_string(), Some(b"OrderPlaced".to_vec())),
            ]
        );
        seen.push((key, m.partition(), m.payload().map(|p| p.to_vec())));
    }
    assert_eq!(
        seen.len(),
        keys.len(),
        "consumed {} of {}",
        seen.len(),
        keys.len()
    );
    for (key, partition, payload) in &seen {
        assert_eq!(
            *partition,
            java_partition(key.as_bytes(), PARTITIONS),
            "key {key}"
        );
        let i: usize = key.trim_start_matches("customer-").parse().unwrap();
        if i == 0 {
            assert_eq!(
                payload.as_deref(),
                Some(&[][..]),
                "an empty value, not a tombstone"
            );
        } else {
            assert_eq!(payload.as_deref(), Some(&[i as u8, 0, 255][..]));
        }
    }
    let used: std::collections::BTreeSet<i32> = seen.iter().map(|s| s.1).collect();
    assert!(used.len() > 1, "keys spread over partitions");
}

/// Metadata names a new topic's leaders before the broker serves them (a
/// produce then may be refused for one batch and accepted for the next, out
/// of order); the readiness wait returns only once every partition answers.
#[tokio::test]
async fn a_new_topic_is_ready_only_once_every_partition_is_served() {
    let services = require_services!();
    let bootstrap = services.kafka_bootstrap.clone();
    let topics: Vec<String> = (0..5)
        .map(|i| common::unique_prefix(&format!("ready{i}")) + "topic")
        .collect();
    tokio::task::spawn_blocking(move || {
        // Producers, as the relay's: their metadata requests auto-create.
        let client = || -> BaseProducer {
            ClientConfig::new()
                .set("bootstrap.servers", &bootstrap)
                .create()
                .unwrap()
        };
        let waiter = client();
        let other = client();
        for topic in &topics {
            outbox_cdc::kafka::readiness::wait_until_served(
                waiter.client(),
                topic,
                Duration::from_secs(30),
            )
            .unwrap();
            // Straight after, from another client: no partition is refused.
            let metadata = other
                .client()
                .fetch_metadata(Some(topic), Duration::from_secs(10))
                .unwrap();
            let partitions = metadata.topics()[0].partitions();
            assert_eq!(partitions.len(), PARTITIONS as usize, "{topic}");
            for p in partitions {
                let answer =
                    other
                        .client()
                        .fetch_watermarks(topic, p.id(), Duration::from_secs(10));
                assert_eq!(answer.ok(), Some((0, 0)), "{topic} partition {}", p.id());
            }
        }
        // A name the broker refuses never becomes ready, and the error
        // says what the broker answered.
        let refused = outbox_cdc::kafka::readiness::wait_until_served(
            waiter.client(),
            "not a valid topic name",
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert_eq!(refused.code(), "TOPIC_NOT_SERVED");
        assert!(
            refused.to_string().contains("not a valid topic name"),
            "{refused}"
        );
        assert!(
            matches!(refused.cause(), Some(outbox_cdc::error::Cause::Kafka(_))),
            "the broker's answer is the cause: {refused:?}"
        );
    })
    .await
    .unwrap();
}
