//! Kafka Connect runs the generated configuration: its validation knows
//! every key, Debezium fails loudly on the polling platform's generated
//! routing key and on a dropped contract column, and the documented cutover
//! from polling to Debezium loses nothing.

use super::*;

#[tokio::test]
async fn connect_validates_the_generated_configuration_and_knows_every_key() {
    let services = require_services!();
    let db = common::migrated_db(&services, "validate", "v.").await;
    let cfg = test_config(&services, &db.name, "v.", "validate");
    let mut config = connector::connector_properties(&cfg).unwrap();
    config.push(("name".into(), cfg.debezium.connector_name.clone()));
    let report = validate(&config);
    let errors: Vec<String> = report["configs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| !c["value"]["errors"].as_array().is_none_or(|e| e.is_empty()))
        .map(|c| format!("{}: {}", c["value"]["name"], c["value"]["errors"]))
        .collect();
    assert_eq!(report["error_count"], 0, "{errors:?}");
    assert_eq!(unknown_keys(&config, &report), Vec::<String>::new());

    // A misspelt key, which Connect itself would accept silently, is caught.
    let mut misspelt = config.clone();
    misspelt.push((
        "transforms.outbox.table.field.event.kee".into(),
        "routing_key".into(),
    ));
    misspelt.push(("tombstones.on.delet".into(), "false".into()));
    let report = validate(&misspelt);
    assert_eq!(
        unknown_keys(&misspelt, &report),
        vec![
            "transforms.outbox.table.field.event.kee".to_string(),
            "tombstones.on.delet".to_string()
        ]
    );
    db.drop(&services).await;
}

/// Debezium's slot is held by a walsender and has a confirmed position:
/// created and streaming.
/// The polling platform's table, with routing_key GENERATED ALWAYS ... STORED.
const LEGACY: &str = "
CREATE TABLE public.messaging_outbox (
    message_id uuid PRIMARY KEY, destination text NOT NULL, message_type text NOT NULL,
    message_version integer NOT NULL, content_type text NOT NULL, payload bytea NOT NULL,
    headers jsonb NOT NULL DEFAULT '{}', status text NOT NULL DEFAULT 'PENDING',
    attempts integer NOT NULL DEFAULT 0, created_at timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz, lease_expires_at timestamptz, lease_owner text,
    lease_token bigint NOT NULL DEFAULT 0, next_attempt_at timestamptz, last_failure_code text,
    producer text, occurred_at timestamptz, correlation_id text, causation_id text, tenant text,
    partition_key text, ordering_key text, traceparent text, tracestate text, baggage text,
    schema_subject text, schema_uri text);
ALTER TABLE public.messaging_outbox
    ADD COLUMN routing_key TEXT GENERATED ALWAYS AS (COALESCE(partition_key, message_id::TEXT)) STORED;
CREATE TABLE public.outbox_cdc_heartbeat (id bigserial PRIMARY KEY, connector text NOT NULL, beat_at timestamptz NOT NULL DEFAULT now());
CREATE PUBLICATION outbox_cdc_publication FOR TABLE public.messaging_outbox, public.outbox_cdc_heartbeat WITH (publish = 'insert');
";

/// The connector's status, and the trace of a failed task if one failed.
#[tokio::test]
async fn debezium_fails_on_a_generated_routing_key_and_works_after_the_migration() {
    let services = require_services!();
    let prefix = common::unique_prefix("trap");
    let mut db = services.fresh_db("trap").await;
    db.client.batch_execute(LEGACY).await.unwrap();

    // Before: pgoutput on PostgreSQL 15 does not carry the generated column,
    // so the Event Router cannot find its key field.
    let before = test_config(&services, &db.name, &prefix, "before");
    start_debezium(&before, &db.client).await;
    db.client
        .batch_execute(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key)
             VALUES ('00000000-0000-4000-8000-0000000000f1', 'orders', 'T', 1, 'x', '\\x01', 'customer-1')",
        )
        .await
        .unwrap();
    let topic = format!("{prefix}orders");
    match outcome(&before, &services.kafka_bootstrap, &topic).await {
        Err(trace) => {
            let cause = trace
                .lines()
                .filter(|l| l.contains("routing_key"))
                .collect::<Vec<_>>()
                .join(" | ");
            assert!(
                !cause.is_empty(),
                "the failure names the missing field: {trace}"
            );
            eprintln!("Debezium on the generated column failed as expected: {cause}");
        }
        Ok(records) => assert!(
            records
                .iter()
                .all(|r| r.key.as_deref() != Some(&b"customer-1"[..])),
            "a generated routing_key cannot reach Debezium"
        ),
    }
    stop_debezium(&before);
    tokio::time::sleep(Duration::from_secs(2)).await;
    rep::drop_slot(&db.client, &before.debezium.slot).await;

    // The CDC migration converts the column in place before PostgreSQL 18,
    // and from 18 on keeps it generated and publishes it; either way
    // Debezium now keys on it.
    let cfg = db.config(&prefix);
    outbox_cdc::ops::migrate::migrate(
        &mut db.client,
        &cfg.objects(),
        outbox_cdc::ops::migrate::Scope::CdcOnly,
    )
    .await
    .unwrap();
    let generated: String = db
        .client
        .query_one(
            "SELECT attgenerated::text FROM pg_attribute
              WHERE attrelid = 'public.messaging_outbox'::regclass AND attname = 'routing_key'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let major: u32 = std::env::var("OUTBOX_TEST_PG_MAJOR")
        .unwrap_or_else(|_| "15".into())
        .parse()
        .unwrap();
    assert_eq!(generated, if major >= 18 { "s" } else { "" });
    let after = test_config(&services, &db.name, &prefix, "after");
    start_debezium(&after, &db.client).await;
    db.client
        .batch_execute(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key)
             VALUES ('00000000-0000-4000-8000-0000000000f2', 'orders', 'T', 1, 'x', '\\x02', 'customer-2')",
        )
        .await
        .unwrap();
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        10,
        Duration::from_secs(20),
    );
    let converted = records
        .iter()
        .find(|r| r.id() == "00000000-0000-4000-8000-0000000000f2")
        .expect("Debezium published the row after the migration");
    assert_eq!(converted.key.as_deref(), Some(&b"customer-2"[..]));
    stop_debezium(&after);
    tokio::time::sleep(Duration::from_secs(2)).await;
    rep::drop_slot(&db.client, &after.debezium.slot).await;
    db.drop(&services).await;
}

/// What real Debezium does when a contract column disappears from the table
/// (the user guide's "Schema drift" cites it): its task fails on the next row,
/// naming the column, and publishes nothing of that row.
#[tokio::test]
async fn debezium_fails_its_task_when_a_contract_column_is_dropped() {
    let services = require_services!();
    let prefix = common::unique_prefix("dbzdrift");
    let db = common::migrated_db(&services, "dbzdrift", &prefix).await;
    let cfg = test_config(&services, &db.name, &prefix, "drift");
    start_debezium(&cfg, &db.client).await;
    let insert = |id: &'static str| {
        format!(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload)
             VALUES ('{id}', 'orders', 'T', 1, 'x', '\\x01')"
        )
    };
    db.client
        .batch_execute(&insert("00000000-0000-4000-8000-0000000000d1"))
        .await
        .unwrap();
    let topic = format!("{prefix}orders");
    let first = outcome(&cfg, &services.kafka_bootstrap, &topic)
        .await
        .expect("Debezium publishes while the table is whole");
    assert_eq!(first[0].id(), "00000000-0000-4000-8000-0000000000d1");

    db.client
        .batch_execute(&format!(
            "ALTER TABLE public.messaging_outbox DROP COLUMN baggage; {}",
            insert("00000000-0000-4000-8000-0000000000d2")
        ))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let trace = loop {
        let (text, failed) = task_failure(&cfg);
        if let Some(trace) = failed {
            break trace;
        }
        assert!(
            Instant::now() < deadline,
            "Debezium's task did not fail on the drifted row: {text}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let cause: Vec<&str> = trace.lines().filter(|l| l.contains("baggage")).collect();
    assert!(!cause.is_empty(), "the failure names the column: {trace}");
    eprintln!(
        "Debezium on a dropped contract column: {}",
        cause.join(" | ")
    );
    let records = kafka::consume(
        &services.kafka_bootstrap,
        &[&topic],
        2,
        Duration::from_secs(3),
    );
    assert!(
        records
            .iter()
            .all(|r| r.id() != "00000000-0000-4000-8000-0000000000d2"),
        "Debezium published nothing of the drifted row"
    );
    stop_debezium(&cfg);
    tokio::time::sleep(Duration::from_secs(2)).await;
    rep::drop_slot(&db.client, &cfg.debezium.slot).await;
    db.drop(&services).await;
}

#[tokio::test]
async fn the_documented_cutover_from_polling_to_debezium_loses_nothing() {
    let services = require_services!();
    let prefix = common::unique_prefix("todbz");
    let db = common::migrated_db(&services, "todbz", &prefix).await;
    db.client
        .batch_execute(
            "CREATE TABLE public.key_seq (k text PRIMARY KEY, n bigint NOT NULL);
             INSERT INTO public.key_seq SELECT 'key-' || g, 0 FROM generate_series(0, 19) g;
             INSERT INTO public.outbox_relay_mode (outbox_table, mode) VALUES ('public.messaging_outbox', 'POLLING');",
        )
        .await
        .unwrap();
    let insert = "WITH s AS (UPDATE public.key_seq SET n = n + 1 WHERE k = $1 RETURNING n)
         INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type,
             payload, partition_key, correlation_id, created_at)
         SELECT gen_random_uuid(), 'moved', 'T', 1, 'x', convert_to(s.n::text, 'UTF8'), $1, s.n::text, clock_timestamp() FROM s";
    for i in 0..1500 {
        db.client
            .execute(insert, &[&format!("key-{}", i % 20)])
            .await
            .unwrap();
    }
    db.client
        .batch_execute(
            "UPDATE public.messaging_outbox SET status = 'AMBIGUOUS' WHERE random() < 0.2",
        )
        .await
        .unwrap();
    let writer = {
        let client = services.connect(&db.name).await;
        tokio::spawn(async move {
            for i in 0..500 {
                client
                    .execute(insert, &[&format!("key-{}", i % 20)])
                    .await
                    .unwrap();
            }
        })
    };
    let dir = std::env::temp_dir().join(format!("outbox-cdc-todbz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("outbox-cdc.toml");
    std::fs::write(&file, config_text(&services, &db.name, &prefix, "todbz")).unwrap();
    let cli = |args: &[&str]| {
        std::process::Command::new(crate::common::cli::bin())
            .args(args)
            .arg("--config")
            .arg(&file)
            .output()
            .unwrap()
    };

    // 1. Fence the polling relay, create Debezium's slot, list the backlog.
    let out = cli(&["cutover", "--to", "debezium"]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // 2. Publish the backlog (the same records Debezium makes).
    let out = cli(&["run", "--handover-only"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 3. Deploy the generated connector configuration; it streams from the slot.
    let cfg = Config::load(&file, &common::env).unwrap();
    start_debezium(&cfg, &db.client).await;
    writer.await.unwrap();

    let topic = format!("{prefix}moved");
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        2000,
        Duration::from_secs(60),
    );
    let ids = kafka::by_id(&records);
    assert_eq!(ids.len(), 2000, "every row, from the backlog or the stream");
    for (key, ns) in kafka::first_delivery_order(&records) {
        let expected: Vec<u64> = (1..=ns.len() as u64).collect();
        assert_eq!(ns, expected, "{key}");
    }
    stop_debezium(&cfg);
    tokio::time::sleep(Duration::from_secs(2)).await;
    rep::drop_slot(&db.client, &cfg.debezium.slot).await;
    std::fs::remove_dir_all(dir).unwrap();
    db.drop(&services).await;
}
