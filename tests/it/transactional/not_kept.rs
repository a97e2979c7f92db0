//! Exactly-once for a table that keeps no status (Debezium's documented
//! table, each row inserted and deleted in one transaction): each source
//! transaction's records and the slot position they reach commit in one
//! Kafka transaction, and the slot is confirmed only up to what Kafka
//! committed.

use super::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The documented table and a relay configuration for it, transactional.
async fn documented(
    services: &common::Services,
    label: &str,
    extra: &str,
) -> (common::TestDb, String, std::path::PathBuf, String) {
    let db = services.fresh_db(label).await;
    db.client
        .batch_execute(
            "CREATE TABLE public.outboxevent (id uuid NOT NULL PRIMARY KEY, aggregatetype varchar(255) NOT NULL,
                aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb);
             CREATE PUBLICATION outbox_cdc_publication FOR TABLE public.outboxevent;",
        )
        .await
        .unwrap();
    let p = common::unique_prefix(label);
    let slot = format!("{}_relay", db.name);
    let path = relay::config(services, &db.name, &p, &slot, extra);
    let text = std::fs::read_to_string(&path).unwrap().replacen(
        "[outbox]\n",
        "[outbox]\ntable = \"outboxevent\"\ncontract = \"debezium\"\n",
        1,
    );
    std::fs::write(&path, text).unwrap();
    let out = common::cli::Cli::new(&["migrate"]).config(&path).output();
    assert!(out.status.success(), "{}", common::cli::text(&out));
    (db, slot, path, format!("outbox.event.{p}Order"))
}

/// `writers` tasks, each inserting and deleting one row per transaction
/// over keys of its own, the key's sequence number in the payload, until
/// stopped: the ids committed.
async fn write(
    services: &common::Services,
    db: &str,
    aggregate: &str,
    writers: usize,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Vec<String>>> {
    let mut handles = Vec::new();
    for w in 0..writers {
        let client = services.connect(db).await;
        let (stop, aggregate) = (stop.clone(), aggregate.to_string());
        handles.push(tokio::spawn(async move {
            let mut committed = Vec::new();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let key = format!("w{w}k{}", n % 5);
                let id = format!("00000000-0000-4000-8000-{:04x}{:08x}", w, n);
                client
                    .batch_execute(&format!(
                        "BEGIN;
                         INSERT INTO public.outboxevent VALUES ('{id}', '{aggregate}', '{key}', 'T', '{{\"n\": {n}}}');
                         DELETE FROM public.outboxevent WHERE id = '{id}';
                         COMMIT;"
                    ))
                    .await
                    .unwrap();
                committed.push(id);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            committed
        }));
    }
    handles
}

#[tokio::test]
async fn a_table_that_keeps_no_status_is_published_exactly_once_across_sigkills() {
    let services = require_services!();
    let (db, slot, config, topic) = documented(&services, "eos", TRANSACTIONAL).await;
    let aggregate = topic.trim_start_matches("outbox.event.").to_string();
    kafka::create_topic(&services.kafka_bootstrap, &topic, 3).await;
    let mut relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    let stop = Arc::new(AtomicBool::new(false));
    let writers = write(&services, &db.name, &aggregate, 2, stop.clone()).await;
    let mut pauses = common::KillTimes::new(0x5f37_59df_1c2b_4e93);
    let mut kills = 0;
    while kills < 6 {
        tokio::time::sleep(pauses.next_pause()).await;
        relay.signal("KILL");
        relay.wait(Duration::from_secs(10)).expect("killed");
        kills += 1;
        relay = RelayProcess::spawn(&config);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let mut committed = Vec::new();
    for w in writers {
        committed.extend(w.await.unwrap());
    }
    let seen = kafka::consume_ids_at(
        &services.kafka_bootstrap,
        &[&topic],
        committed.len(),
        Duration::from_secs(90),
        READ_COMMITTED,
    );
    assert_eq!(
        kafka::by_id(&seen).len(),
        committed.len(),
        "{}",
        relay.log_text()
    );
    relay.signal("TERM");
    assert!(relay
        .wait(Duration::from_secs(30))
        .is_some_and(|s| s.success()));
    let all = kafka::consume_all(
        &services.kafka_bootstrap,
        &[&topic],
        Duration::from_secs(8),
        READ_COMMITTED,
    );
    let ids = kafka::by_id(&all);
    let lost = committed.iter().filter(|id| !ids.contains_key(*id)).count();
    let duplicates = ids.values().filter(|c| c.len() > 1).count();
    assert_eq!((lost, duplicates), (0, 0), "after {kills} kills");
    assert_eq!(all.len(), committed.len());
    // Per key, the payloads' sequence numbers rise.
    let mut by_key: BTreeMap<Vec<u8>, Vec<u64>> = BTreeMap::new();
    let mut sorted: Vec<&Consumed> = all.iter().collect();
    sorted.sort_by_key(|r| (r.partition, r.offset));
    for r in sorted {
        let value: serde_json::Value =
            serde_json::from_slice(r.value.as_deref().unwrap_or_default()).unwrap_or_default();
        let n = value
            .get("payload")
            .unwrap_or(&value)
            .get("n")
            .and_then(|n| n.as_u64());
        by_key
            .entry(r.key.clone().unwrap_or_default())
            .or_default()
            .extend(n);
    }
    for (key, ns) in &by_key {
        assert!(
            ns.windows(2).all(|w| w[0] < w[1]),
            "{} out of order: {ns:?}",
            String::from_utf8_lossy(key)
        );
    }
    eprintln!(
        "exactly once, no status kept: {kills} kills, {} rows, read_committed saw each once",
        committed.len()
    );
    rep::drop_slot(&db.client, &slot).await;
}

/// The slot is confirmed only up to what Kafka committed: records sent in
/// a Kafka transaction still open (a long `max_ms`) leave the slot before
/// their rows, through a SIGKILL, and the next relay publishes them once.
#[tokio::test]
async fn the_slot_never_passes_a_position_kafka_has_not_committed() {
    let services = require_services!();
    let open = "delivery = \"transactional\"\n[relay.transactional]\nmax_ms = 60000\nmax_records = 100000\n";
    let (db, slot, config, topic) = documented(&services, "eosslot", open).await;
    let aggregate = topic.trim_start_matches("outbox.event.").to_string();
    kafka::create_topic(&services.kafka_bootstrap, &topic, 1).await;
    let mut relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    let before: String = db
        .client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);
    let before: Lsn = before.parse().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writers = write(&services, &db.name, &aggregate, 1, stop.clone()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let committed: Vec<String> = writers.into_iter().next().unwrap().await.unwrap();
    assert!(!committed.is_empty());
    // Every record is in Kafka, in the open transaction.
    let sent = kafka::consume_ids_at(
        &services.kafka_bootstrap,
        &[&topic],
        committed.len(),
        Duration::from_secs(30),
        READ_UNCOMMITTED,
    );
    assert_eq!(kafka::by_id(&sent).len(), committed.len());
    assert!(kafka::consume_all(
        &services.kafka_bootstrap,
        &[&topic],
        Duration::from_secs(2),
        READ_COMMITTED
    )
    .is_empty());
    // Several status updates later, the slot is still before the rows.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let confirmed = rep::confirmed_flush(&db.client, &slot).await;
    assert!(
        confirmed <= before,
        "the slot was confirmed at {confirmed}, past {before}, before Kafka committed"
    );
    relay.signal("KILL");
    relay.wait(Duration::from_secs(10)).expect("killed");
    let confirmed = rep::confirmed_flush(&db.client, &slot).await;
    assert!(confirmed <= before, "{confirmed} > {before}");
    // The next relay publishes them again, and read_committed sees each once.
    let config_text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("max_ms = 60000", "max_ms = 50");
    std::fs::write(&config, config_text).unwrap();
    let mut relay = RelayProcess::spawn(&config);
    let got = kafka::consume_ids_at(
        &services.kafka_bootstrap,
        &[&topic],
        committed.len(),
        Duration::from_secs(60),
        READ_COMMITTED,
    );
    let ids = kafka::by_id(&got);
    assert_eq!(ids.len(), committed.len());
    assert!(ids.values().all(|c| c.len() == 1));
    // Committed, the slot moves past them.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut after = rep::confirmed_flush(&db.client, &slot).await;
    while after <= before {
        assert!(
            std::time::Instant::now() < deadline,
            "the slot stayed at {after} after Kafka committed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        after = rep::confirmed_flush(&db.client, &slot).await;
    }
    relay.signal("TERM");
    relay.wait(Duration::from_secs(30));
    eprintln!(
        "an open Kafka transaction of {} records held the slot at or before {before} (confirmed {confirmed}); committed, it moved to {after}",
        committed.len()
    );
    rep::drop_slot(&db.client, &slot).await;
}
