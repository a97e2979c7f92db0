//! Side by side: Debezium 3.6.1 on Connect, configured as its outbox
//! documentation does, and the relay on its own slot with the imported
//! configuration, its route writing under `shadow.`, both under the
//! takeover's load. `audit --beside shadow.` matches every record of
//! Debezium's with the relay's by event id: none missing, none different,
//! each key in the same order; then a record only Debezium has and one the
//! relay wrote differently are found and named.

use super::takeover::{documented_connector, documented_table, imported, Load};
use super::*;

const SHADOW: &str = "shadow.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_beside_compares_a_relay_run_beside_debezium_record_by_record() {
    let services = require_services!();
    let label = "bsd";
    let p = common::unique_prefix(label);
    let db = documented_table(&services, label).await;
    let aggregate = format!("{p}Order");
    let topic = format!("outbox.event.{aggregate}");
    let shadow = format!("{SHADOW}{topic}");
    for t in [&topic, &shadow] {
        kafka::create_topic(&services.kafka_bootstrap, t, 3).await;
    }
    kafka::serve_topics(&services.kafka_bootstrap, &[&topic, &shadow]);
    let dir = std::env::temp_dir()
        .join("outbox-cdc-beside")
        .join(std::process::id().to_string());
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("relay.toml");
    let name = format!("{}-{label}", db.name);
    start_connector(
        &name,
        documented_connector(&services, &db.name, &name),
        &format!("{}_dbz", db.name),
        &db.client,
    )
    .await;
    let cfg = imported(&services, &dir, &path, &name, &format!("{}_relay", db.name));
    // The relay's own route: Debezium's topics, under the shadow prefix.
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains("[outbox.router]"), "{text}");
    std::fs::write(
        &path,
        format!(
            "{text}role = \"copy\"\nmark_published = false\n\n[outbox.router]\n\"route.topic.replacement\" = \"{SHADOW}outbox.event.${{routedByValue}}\"\n"
        ),
    )
    .unwrap();
    let out = common::cli::Cli::new(&["migrate"]).config(&path).output();
    assert!(out.status.success(), "{}", common::cli::text(&out));
    db.client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&cfg.postgres.slot],
        )
        .await
        .unwrap();
    let mut relay = common::relay::RelayProcess::spawn(&path);

    let load = Load::start(&services, &db.name, &aggregate).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let committed = load.stop().await;
    let both = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        committed.len(),
        Duration::from_secs(30),
    );
    let mine = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&shadow],
        committed.len(),
        Duration::from_secs(30),
    );
    assert_eq!(kafka::by_id(&both).len(), committed.len());
    assert_eq!(kafka::by_id(&mine).len(), committed.len());
    relay.signal("TERM");
    relay.wait(Duration::from_secs(30));
    stop_debezium(&cfg);

    let audit = |format: &str| {
        common::cli::Cli::new(&[
            "audit", "--since", "2m", "--beside", SHADOW, "--margin", "1m", "--format", format,
        ])
        .config(&path)
        .output()
    };
    let out = audit("json");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", common::cli::text(&out)));
    assert!(out.status.success(), "{report}");
    assert_eq!(
        report["rows"],
        serde_json::json!(committed.len()),
        "{report}"
    );
    assert_eq!(
        report["delivered"],
        serde_json::json!(committed.len()),
        "{report}"
    );
    for zero in ["lost", "differing", "out_of_order", "orphans"] {
        assert_eq!(report[zero], serde_json::json!(0), "{zero}: {report}");
    }
    eprintln!(
        "side by side: {} records of Debezium's matched by the relay's, byte for byte and in per-key order",
        report["delivered"]
    );

    // A record only Debezium has, and one the relay wrote differently.
    let lost = "00000000-0000-4000-8000-00000000beef";
    let differs = "00000000-0000-4000-8000-00000000cafe";
    kafka::produce_copy(&services.kafka_bootstrap, &both[0], Some(lost), None).await;
    kafka::produce_copy(&services.kafka_bootstrap, &both[1], Some(differs), None).await;
    kafka::produce_copy(
        &services.kafka_bootstrap,
        &mine[0],
        Some(differs),
        Some(b"{\"changed\": true}"),
    )
    .await;
    let out = audit("human");
    let text = common::cli::text(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(text.contains("AUDIT_LOST"), "{text}");
    assert!(
        text.contains("00000000-0000-4000-8000-00000000beef"),
        "{text}"
    );
    assert!(text.contains("lost 1,"), "{text}");
    assert!(text.contains("differing 1,"), "{text}");
    assert!(text.contains(differs), "{text}");

    rep::drop_slot(&db.client, &cfg.debezium.slot).await;
    rep::drop_slot(&db.client, &cfg.postgres.slot).await;
    std::fs::remove_dir_all(&dir).ok();
    db.drop(&services).await;
}
