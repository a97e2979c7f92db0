//! The relay recovers by itself, with zero loss, when Kafka stops mid-stream
//! and starts again, and when PostgreSQL restarts. Its own test binary: it
//! stops services that the other tests share, one fault at a time.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::kafka;
use common::relay::{self as relay, RelayProcess};
use common::replication as rep;
use outbox_cdc::config::DeliveryMode;
use outbox_cdc::ops::migrate::{self, Scope};

fn services_script(arg: &str) {
    let script = std::env::var("OUTBOX_TEST_SERVICES")
        .expect("OUTBOX_TEST_SERVICES from scripts/services.sh env");
    let status = Command::new("bash")
        .arg(script)
        .arg(arg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "services.sh {arg}");
}

async fn insert_batch(services: &common::Services, db: &str, from: i32, count: i32) {
    // A fresh connection each time: the server may have restarted.
    for attempt in 0..100 {
        let result = async {
            let (client, conn) = tokio_postgres::Config::new()
                .host(&services.pg_host)
                .port(services.pg_port)
                .user(&services.pg_user)
                .password(&services.pg_password)
                .dbname(db)
                .connect(tokio_postgres::NoTls)
                .await?;
            tokio::spawn(conn);
            client
                .execute(
                    "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key, correlation_id)
                     SELECT md5('m' || g)::uuid, 'faults', 'T', 1, 'x', convert_to(g::text, 'UTF8'), 'k' || (g % 10), g::text
                     FROM generate_series($1::int, $2::int) g",
                    &[&from, &(from + count - 1)],
                )
                .await
        }
        .await;
        match result {
            Ok(_) => return,
            Err(e) if attempt < 99 => {
                eprintln!("insert retry: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("insert: {e}"),
        }
    }
}

#[tokio::test]
async fn the_relay_recovers_from_kafka_and_postgres_restarts_with_zero_loss() {
    recovers_from_restarts(DeliveryMode::Idempotent).await;
}

/// In transactional delivery read_committed consumers also see no
/// duplicate across both restarts.
#[tokio::test]
async fn transactional_delivery_recovers_from_kafka_and_postgres_restarts_without_duplicates() {
    recovers_from_restarts(DeliveryMode::Transactional).await;
}

/// How long the relay may take to have everything in Kafka once Kafka is
/// back: what is a wait for the loss check, not a timing claim. A session
/// learns of the outage when its deliveries time out (`message.timeout.ms`,
/// 10 s here); a transaction call under way when Kafka went blocks up to its
/// 60 s bound; the supervisor's backoff is at most 30 s; and the broker,
/// just started beside a busy build, still elects its partitions' leaders
/// and loads its transaction state. Passing runs take about 20 s.
const KAFKA_OUTAGE_BUDGET: Duration = Duration::from_secs(150);

async fn recovers_from_restarts(delivery: DeliveryMode) {
    let transactional = delivery == DeliveryMode::Transactional;
    let services = require_services!();
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let prefix = common::unique_prefix(if transactional { "faultx" } else { "faults" });
    let mut db = services.fresh_db("faults").await;
    let cfg = db.config(&prefix);
    migrate::migrate(&mut db.client, &cfg.objects(), Scope::All)
        .await
        .unwrap();
    db.declare_cdc().await;
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    // Deliveries time out quickly while Kafka is away, so the outage is seen.
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "\"message.timeout.ms\" = \"120000\"",
        "\"message.timeout.ms\" = \"10000\"",
    );
    assert!(text.contains("\"10000\""));
    let text = if transactional {
        text.replace("[relay]\n", "[relay]\ndelivery = \"transactional\"\n")
    } else {
        text
    };
    std::fs::write(&config, text).unwrap();
    let mut relay = RelayProcess::spawn(&config);
    for _ in 0..300 {
        if rep::confirmed_flush(&db.client, &slot).await.0 > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let topic = format!("{prefix}faults");
    // Aborted transactions' records are visible only to read_uncommitted.
    let isolation = if transactional {
        kafka::READ_COMMITTED
    } else {
        kafka::READ_UNCOMMITTED
    };

    insert_batch(&services, &db.name, 1, 2000).await;
    let first = kafka::consume_ids_at(
        &services.kafka_bootstrap,
        &[&topic],
        2000,
        Duration::from_secs(60),
        isolation,
    );
    assert_eq!(first.len(), 2000);

    // Kafka goes away mid-stream; rows keep coming; Kafka comes back.
    insert_batch(&services, &db.name, 2001, 2000).await;
    services_script("stop-kafka");
    insert_batch(&services, &db.name, 4001, 2000).await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    services_script("start-kafka");
    insert_batch(&services, &db.name, 6001, 2000).await;
    let records = kafka::consume_ids_at(
        &services.kafka_bootstrap,
        &[&topic],
        8000,
        KAFKA_OUTAGE_BUDGET,
        isolation,
    );
    let ids = kafka::by_id(&records);
    assert_eq!(
        ids.len(),
        8000,
        "zero loss across a Kafka outage ({} records):\n{}",
        records.len(),
        relay.log_text()
    );
    assert!(
        relay.child.try_wait().unwrap().is_none(),
        "the relay kept running:\n{}",
        relay.log_text()
    );

    // PostgreSQL restarts mid-stream.
    drop(db.client);
    insert_batch(&services, &db.name, 8001, 2000).await;
    common::restart_postgres();
    insert_batch(&services, &db.name, 10001, 2000).await;
    db.client = services.connect(&db.name).await;
    let records = kafka::consume_ids_at(
        &services.kafka_bootstrap,
        &[&topic],
        12000,
        Duration::from_secs(90),
        isolation,
    );
    let ids = kafka::by_id(&records);
    assert_eq!(
        ids.len(),
        12000,
        "zero loss across a PostgreSQL restart ({} records):\n{}",
        records.len(),
        relay.log_text()
    );
    assert!(
        relay.child.try_wait().unwrap().is_none(),
        "the relay kept running:\n{}",
        relay.log_text()
    );
    eprintln!("{} records for 12000 messages", records.len());

    common::wait_until_marked(&db.client).await;
    relay.signal("TERM");
    assert!(
        relay
            .wait(Duration::from_secs(60))
            .expect("stops")
            .success(),
        "{}",
        relay.log_text()
    );
    common::bookkeeping_matches_kafka(&db.client, &ids).await;
    if transactional {
        let committed = kafka::consume_all(
            &services.kafka_bootstrap,
            &[&topic],
            Duration::from_secs(8),
            kafka::READ_COMMITTED,
        );
        let uncommitted = kafka::consume_all(
            &services.kafka_bootstrap,
            &[&topic],
            Duration::from_secs(8),
            kafka::READ_UNCOMMITTED,
        );
        eprintln!(
            "read_committed: {} records, read_uncommitted: {} records, for 12000 messages",
            committed.len(),
            uncommitted.len()
        );
        assert_eq!(kafka::by_id(&committed).len(), 12000);
        assert_eq!(committed.len(), 12000, "no duplicates for read_committed");
    }
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}
