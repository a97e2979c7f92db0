//! The takeover's positions, made exactly: Debezium's offset past its slot,
//! what the takeover skips, and the relay's position the hand-back writes
//! into Debezium Server's offsets file. Without a running Debezium.

use super::*;

async fn write_rows(client: &tokio_postgres::Client, aggregate: &str, ids: &[String]) {
    for id in ids {
        client
            .batch_execute(&format!(
                "BEGIN;
                 INSERT INTO public.outboxevent (id, aggregatetype, aggregateid, type, payload)
                   VALUES ('{id}', '{aggregate}', 'k', 'Written', '{{}}');
                 DELETE FROM public.outboxevent WHERE id = '{id}';
                 COMMIT;"
            ))
            .await
            .unwrap();
    }
}

fn refused(path: &std::path::Path, args: &[&str], code: &str) {
    let mut all = vec!["cutover"];
    all.extend_from_slice(args);
    let out = common::cli::Cli::new(&all).config(path).output();
    let text = common::cli::text(&out);
    assert!(!out.status.success(), "cutover {args:?} succeeded: {text}");
    assert!(text.contains(code), "cutover {args:?}: {text}");
}

async fn confirmed(client: &tokio_postgres::Client, slot: &str) -> Option<u64> {
    client
        .query_opt(
            "SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()
        .map(|r| r.get::<_, i64>(0) as u64)
}

/// The offset's positions, by key, as Debezium Server's store keeps them.
fn stored(path: &std::path::Path, prefix: &str) -> serde_json::Value {
    let entries =
        outbox_cdc::connector::offsets::file::decode(&std::fs::read(path).unwrap()).unwrap();
    let key = format!(r#"["kafka",{{"server":"{prefix}"}}]"#);
    let (_, value) = entries
        .iter()
        .find(|(k, _)| k.as_deref() == Some(key.as_bytes()))
        .unwrap_or_else(|| panic!("no {key} in the offsets file"));
    serde_json::from_slice(value.as_deref().unwrap()).unwrap()
}

/// Debezium's offset past its slot (it published, then stopped before
/// confirming: a crash between its offset commit and its flush): the
/// takeover counts those transactions and skips them; the relay publishes
/// only what came after. Then the hand-back writes the relay's position
/// into the offsets file. Without a running Debezium: the positions are
/// what is tested, and they are made exactly.
#[tokio::test]
async fn a_takeover_skips_what_debeziums_offset_says_it_published_and_a_hand_back_stores_the_relays_position(
) {
    let services = require_services!();
    let label = "tko";
    let p = common::unique_prefix(label);
    let db = documented_table(&services, label).await;
    let text = config_text(&services, &db.name, &p, label).replace(
        "[outbox]\n",
        "[outbox]\ntable = \"outboxevent\"\ncontract = \"debezium\"\n",
    );
    let cfg = Config::parse(&text, std::path::Path::new("test.toml"), &common::env).unwrap();
    let aggregate = format!("{p}Order");
    let topic = format!("outbox.event.{aggregate}");
    kafka::create_topic(&services.kafka_bootstrap, &topic, 1).await;
    let dir = std::env::temp_dir()
        .join("outbox-cdc-takeover")
        .join(format!("{}-{label}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("relay.toml");
    std::fs::write(&path, format!("{text}\n[relay]\ndrain_timeout_secs = 20\n")).unwrap();
    let out = common::cli::Cli::new(&["migrate"]).config(&path).output();
    assert!(out.status.success(), "{}", common::cli::text(&out));
    let file = dir.join("offsets.dat");
    let file_arg = file.to_string_lossy().to_string();
    let (ours, theirs) = (cfg.postgres.slot.clone(), cfg.debezium.slot.clone());

    refused(&path, &["--to", "cdc"], "TAKEOVER_SLOT_MISSING");
    refused(&path, &["--to", "debezium"], "ARGUMENT_INVALID");
    refused(&path, &["--to", "polling"], "ARGUMENT_INVALID");

    db.client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&theirs],
        )
        .await
        .unwrap();
    let published: Vec<String> = (1..=5).map(|n| id(1, n)).collect();
    write_rows(&db.client, &aggregate, &published).await;
    let offset: i64 = db
        .client
        .query_one("SELECT (pg_current_wal_lsn() - '0/0')::bigint", &[])
        .await
        .unwrap()
        .get(0);
    let key = format!(r#"["kafka",{{"server":"{}"}}]"#, cfg.debezium.topic_prefix);
    let value = format!(
        r#"{{"lsn_proc":{offset},"messageType":"COMMIT","lsn_commit":{offset},"lsn":{offset},"txId":1,"ts_usec":0}}"#
    );
    std::fs::write(
        &file,
        outbox_cdc::connector::offsets::file::encode(&[(
            Some(key.into_bytes()),
            Some(value.into_bytes()),
        )]),
    )
    .unwrap();
    let new: Vec<String> = (1..=4).map(|n| id(2, n)).collect();
    write_rows(&db.client, &aggregate, &new).await;

    let dry = cutover(
        &path,
        &["--to", "cdc", "--offset-file", &file_arg, "--dry-run"],
    );
    assert!(
        dry.contains("5 transactions (5 outbox rows) it published"),
        "{dry}"
    );
    assert!(confirmed(&db.client, &ours).await.is_none(), "{dry}");
    let took = cutover(&path, &["--to", "cdc", "--offset-file", &file_arg]);
    assert!(
        took.contains("5 transactions (5 outbox rows) it published"),
        "{took}"
    );
    assert!(took.contains("nothing is sent again"), "{took}");
    assert_eq!(
        confirmed(&db.client, &ours).await,
        Some(offset as u64),
        "{took}"
    );
    assert_eq!(confirmed(&db.client, &theirs).await, None, "{took}");
    let again = cutover(&path, &["--to", "cdc", "--offset-file", &file_arg]);
    assert!(again.contains("already taken over"), "{again}");

    let mut relay = common::relay::RelayProcess::spawn(&path);
    let got = kafka::consume(
        &services.kafka_bootstrap,
        &[&topic],
        new.len() + 1,
        Duration::from_secs(5),
    );
    refused(
        &path,
        &["--to", "debezium", "--offset-file", &file_arg],
        "CDC_RELAY_RUNNING",
    );
    relay.signal("TERM");
    let status = relay.wait(Duration::from_secs(30));
    assert!(status.is_some_and(|s| s.success()), "{}", relay.log_text());
    let ids: Vec<String> = got.iter().map(Consumed::id).collect();
    assert_eq!(ids, new, "only what Debezium had not published");

    let at = confirmed(&db.client, &ours).await.unwrap();
    assert!(at > offset as u64);
    let handed = cutover(&path, &["--to", "debezium", "--offset-file", &file_arg]);
    assert!(handed.contains("handed back"), "{handed}");
    let back = stored(&file, &cfg.debezium.topic_prefix);
    assert_eq!(back["lsn_commit"], serde_json::json!(at), "{back}");
    assert_eq!(back["lsn_proc"], serde_json::json!(at), "{back}");
    assert_eq!(back["messageType"], "COMMIT", "{back}");
    assert_eq!(confirmed(&db.client, &theirs).await, Some(at));
    assert_eq!(confirmed(&db.client, &ours).await, None);
    let again = cutover(&path, &["--to", "debezium", "--offset-file", &file_arg]);
    assert!(again.contains("already handed back"), "{again}");
    rep::drop_slot(&db.client, &theirs).await;
    std::fs::remove_dir_all(&dir).ok();
    db.drop(&services).await;
}
