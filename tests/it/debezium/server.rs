//! Debezium Server: it resumes from its offsets file, and refuses a
//! misspelt format key at start-up.

use super::*;

/// The generated file's default offset store: Debezium Server stops
/// cleanly, keeps its position in `data/offsets.dat` under the engine's
/// name (`kafka`, the sink's, whatever the connector is called), and on
/// start resumes after it: rows written while it was down arrive, rows
/// before it are not sent again.
#[tokio::test]
async fn debezium_server_resumes_from_its_offsets_file() {
    let services = require_services!();
    let prefix = common::unique_prefix("srvfile");
    let db = common::migrated_db(&services, "srvfile", &prefix).await;
    db.declare_cdc().await;
    let mut cfg = test_config(&services, &db.name, &prefix, "srvfile");
    cfg.debezium.server.offset_flush_interval_ms = 500;
    let insert = |from: i32, to: i32| {
        format!(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload)
             SELECT md5('srvfile' || g)::uuid, 'orders', 'T', 1, 'application/json', '\\x7b7d'::bytea
             FROM generate_series({from}, {to}) g"
        )
    };
    let topic = format!("{prefix}orders");
    kafka::serve_topics(&services.kafka_bootstrap, &[&topic]);
    let server = start_debezium_server(&cfg, &db.client).await;
    db.client.batch_execute(&insert(1, 20)).await.unwrap();
    let first = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        20,
        Duration::from_secs(60),
    );
    assert_eq!(first.len(), 20);
    let dir = server.dir.clone();
    drop(server);
    let offsets = std::fs::read(dir.join("data/offsets.dat")).expect("the offsets file");
    let text = String::from_utf8_lossy(&offsets);
    assert!(text.contains("[\"kafka\",{\"server\":\""), "{text}");
    assert!(text.contains("\"lsn\""), "{text}");

    db.client.batch_execute(&insert(21, 40)).await.unwrap();
    let server = restart_debezium_server(&cfg, &db.client).await;
    let all = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        40,
        Duration::from_secs(60),
    );
    drop(server);
    let by_id = kafka::by_id(&all);
    assert_eq!(
        by_id.len(),
        40,
        "every row, including those written while it was down"
    );
    let repeated: Vec<&String> = by_id
        .iter()
        .filter(|(_, r)| r.len() > 1)
        .map(|(id, _)| id)
        .collect();
    assert!(
        repeated.is_empty(),
        "sent again after a clean stop: {repeated:?}"
    );
    std::fs::remove_dir_all(dir).unwrap();
    rep::drop_slot(&db.client, &cfg.debezium.slot).await;
    db.drop(&services).await;
}

/// Server judges its own keys at start-up: a converter without its class
/// (here a misspelt `class`) stops it with Debezium's message, before it
/// touches the slot.
#[tokio::test]
async fn debezium_server_refuses_a_misspelt_format_key_at_start_up() {
    let services = require_services!();
    let db = common::migrated_db(&services, "srvbad", "srvbad.").await;
    db.declare_cdc().await;
    let cfg = test_config(&services, &db.name, "srvbad.", "srvbad");
    let dir = server_dir(&cfg);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let generated = connector::render(&cfg, Target::DebeziumServer).unwrap();
    let broken = generated.replace(
        "debezium.format.header.class=",
        "debezium.format.header.clas=",
    );
    assert_ne!(broken, generated);
    let properties = dir.join("generated.properties");
    std::fs::write(&properties, broken).unwrap();
    let out = debezium_server_command(&properties, &dir).output().unwrap();
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{log}");
    assert!(
        log.contains("`clientprovided` header converter requires a 'class' configuration"),
        "{log}"
    );
    let slots: i64 = db
        .client
        .query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1",
            &[&cfg.debezium.slot],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(slots, 0, "the slot was never created");
    std::fs::remove_dir_all(dir).unwrap();
    db.drop(&services).await;
}
