//! A slot the server invalidates (`max_slot_wal_keep_size`) loses nothing:
//! the slot guard warns first, `run` stops with `SLOT_INVALIDATED` and the
//! command that recovers, and `cutover --to cdc --recover` hands over every
//! row not yet PUBLISHED or FAILED. It changes a server setting of the
//! shared cluster, so it runs here, one at a time, and resets it.

use crate::common;

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use common::kafka;
use common::relay::{self as relay, RelayProcess};
use common::replication as rep;

/// `max_slot_wal_keep_size` for the test; reset on drop, even after a panic.
struct KeepSize;

impl KeepSize {
    fn set(value: &str) -> KeepSize {
        psql(&[
            &format!("ALTER SYSTEM SET max_slot_wal_keep_size = '{value}'"),
            "SELECT pg_reload_conf()",
        ]);
        KeepSize
    }
}

impl Drop for KeepSize {
    fn drop(&mut self) {
        psql(&[
            "ALTER SYSTEM RESET max_slot_wal_keep_size",
            "SELECT pg_reload_conf()",
        ]);
    }
}

/// Each statement on its own (ALTER SYSTEM refuses a transaction block),
/// on a connection of its own: also called from `drop`, outside any runtime.
fn psql(statements: &[&str]) {
    let statements: Vec<String> = statements.iter().map(|s| s.to_string()).collect();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let services = common::services().expect("services");
            let admin = services.connect("postgres").await;
            for sql in &statements {
                admin
                    .simple_query(sql)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
            }
        })
    })
    .join()
    .unwrap();
}

#[tokio::test]
async fn an_invalidated_slot_is_recovered_and_every_row_reaches_kafka_in_key_order() {
    let services = require_services!();
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let prefix = common::unique_prefix("recover");
    let db = common::migrated_db(&services, "recover", &prefix).await;
    db.declare_cdc().await;
    let _keep = KeepSize::set("64MB");
    let slot = format!("{}_relay", db.name);
    let config = relay::config(
        &services,
        &db.name,
        &prefix,
        &slot,
        "slot_check_interval_secs = 1\n",
    );
    let topic = format!("{prefix}keyed");

    // The relay streams; it is SIGKILLed while writers go on, leaving rows
    // that reached Kafka but were not yet marked, and a backlog.
    let mut relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    let writers = common::spawn_write_keyed(&db.name, 3, 2000, 40);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The guard's first check probes Kafka first: on a busy machine it may
    // take longer than the pause.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !relay.log_text().contains("SLOT_WAL_AT_RISK") && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    relay.signal("KILL");
    let _ = relay.wait(Duration::from_secs(10));
    let guard_log = relay.log_text();
    assert!(
        guard_log.contains("SLOT_WAL_AT_RISK"),
        "the slot guard warns: safe_wal_size is under the default 1 GiB margin\n{guard_log}"
    );
    let written = writers.await.unwrap();
    assert_eq!(written.len(), 6000);

    // Another table writes WAL past max_slot_wal_keep_size until a
    // checkpoint invalidates the stopped relay's slot.
    let admin = services.connect(&db.name).await;
    admin
        .batch_execute("CREATE TABLE churn (id bigint, pad text)")
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        admin
            .batch_execute(
                "INSERT INTO churn SELECT g, repeat('w', 300) FROM generate_series(1, 100000) g;
                 TRUNCATE churn; SELECT pg_switch_wal(); CHECKPOINT;",
            )
            .await
            .unwrap();
        let status: Option<String> = admin
            .query_one(
                "SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .unwrap()
            .get(0);
        if status.as_deref() == Some("lost") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the slot was never invalidated: {status:?}"
        );
    }

    // `run` stops at once and names the recovery.
    let mut stopped = RelayProcess::spawn(&config);
    let status = stopped.wait(Duration::from_secs(60)).expect("run exits");
    assert!(!status.success());
    let log = stopped.log_text();
    assert!(log.contains("SLOT_INVALIDATED"), "{log}");
    assert!(
        log.contains("outbox-cdc cutover --to cdc --recover"),
        "{log}"
    );

    // What Kafka has now, and which of those rows the table still calls
    // PENDING: only these may be published twice.
    let before = kafka::consume_all(
        &services.kafka_bootstrap,
        &[&topic],
        Duration::from_secs(5),
        kafka::READ_UNCOMMITTED,
    );
    let in_kafka: HashSet<String> = before.iter().map(|r| r.id()).collect();
    let pending: HashSet<String> = common::texts(
        &db.client,
        "SELECT message_id::text FROM public.messaging_outbox WHERE status = 'PENDING'",
    )
    .await
    .into_iter()
    .collect();
    let unmarked: HashSet<&String> = in_kafka.intersection(&pending).collect();
    assert!(!pending.is_empty(), "the test leaves a backlog");

    let out = std::process::Command::new(crate::common::cli::bin())
        .args(["cutover", "--to", "cdc", "--recover", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        said.contains(&format!("dropped the invalidated slot {slot}")),
        "{said}"
    );
    assert!(
        said.contains(&format!("handed over {} rows", pending.len())),
        "{said}"
    );

    let relay = RelayProcess::spawn(&config);
    common::wait_until_marked(&db.client).await;
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        written.len(),
        Duration::from_secs(120),
    );
    let by_id = kafka::by_id(&records);
    for id in written.keys() {
        assert!(by_id.contains_key(id), "{id} never reached Kafka");
    }
    for (key, seq) in kafka::first_delivery_order(&records) {
        assert!(seq.windows(2).all(|w| w[0] < w[1]), "{key}: {seq:?}");
    }
    let twice: BTreeMap<&String, usize> = by_id
        .iter()
        .filter(|(_, r)| r.len() > 1)
        .map(|(id, r)| (id, r.len()))
        .collect();
    for id in twice.keys() {
        assert!(
            unmarked.contains(id),
            "{id} was published twice but was not a published-and-unmarked row"
        );
    }
    println!(
        "recovery: {} rows written, {} in Kafka before, {} of them unmarked, {} handed over, {} published twice",
        written.len(),
        in_kafka.len(),
        unmarked.len(),
        pending.len(),
        twice.len()
    );
    assert_eq!(common::rows_with_status(&db.client, "PENDING").await, 0);

    drop(relay);
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}
