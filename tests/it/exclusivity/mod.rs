//! One relay per outbox: start-up refusals, the cutover with its backlog
//! hand-over under load, a standby taking over, and the `check` report.

mod check;

use crate::common;
use crate::common::cli::Cli;

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use common::kafka;
use common::relay::{self as relay, RelayProcess};
use common::replication as rep;
use outbox_cdc::config::Config;
use outbox_cdc::replication::ReplicationConnection;
use tokio_postgres::Client;

fn outbox_cdc(args: &[&str], config: &Path) -> std::process::Output {
    Cli::new(args).config(config).output()
}

async fn slot_state(client: &Client, slot: &str) -> Option<String> {
    client
        .query_opt(
            "SELECT confirmed_flush_lsn::text || ' ' || active::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()
        // NULL while the slot is still being created.
        .and_then(|r| r.get(0))
}

async fn insert_rows(client: &Client, n: i32, tag: &str) {
    client
        .execute(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key)
             SELECT gen_random_uuid(), 'ex', 'T', 1, 'x', convert_to($2 || g, 'UTF8'), 'k' || (g % 7) FROM generate_series(1, $1) g",
            &[&n, &tag],
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn run_refuses_beside_another_relay_and_leaves_the_slot_untouched() {
    let services = require_services!();
    let prefix = common::unique_prefix("refuse");
    let db = common::migrated_db(&services, "refuse", &prefix).await;
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    // The slot exists (as after a cutover) so "untouched" can be checked.
    db.client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await
        .unwrap();
    insert_rows(&db.client, 10, "r").await;
    let before = slot_state(&db.client, &slot).await;
    let refuse = |expected: &'static [&'static str]| {
        let config = config.clone();
        let client = &db.client;
        let slot = slot.clone();
        let before = before.clone();
        async move {
            let out = outbox_cdc(&["run"], &config);
            let stderr = String::from_utf8_lossy(&out.stderr).to_string();
            assert!(!out.status.success(), "run must refuse: {stderr}");
            assert!(
                expected.iter().any(|c| stderr.contains(c)),
                "expected one of {expected:?}: {stderr}"
            );
            assert_eq!(
                slot_state(client, &slot).await,
                before,
                "the slot was touched"
            );
            stderr
        }
    };

    // Undeclared.
    let stderr = refuse(&["NO_OUTBOX_RELAY", "DUPLICATE_OUTBOX_RELAY"]).await;
    assert!(
        stderr.contains("cutover --to cdc"),
        "says what to do: {stderr}"
    );
    // Declared POLLING.
    db.client
        .execute("INSERT INTO public.outbox_relay_mode (outbox_table, mode) VALUES ('public.messaging_outbox', 'POLLING')", &[])
        .await
        .unwrap();
    refuse(&["DUPLICATE_OUTBOX_RELAY"]).await;
    // CDC, but a polling relay holds a live lease (claimed before the switch).
    db.client
        .batch_execute(
            "UPDATE public.messaging_outbox SET status = 'IN_FLIGHT', lease_owner = 'poller', lease_expires_at = now() + interval '1 hour'
              WHERE message_id = (SELECT message_id FROM public.messaging_outbox LIMIT 1);
             UPDATE public.outbox_relay_mode SET mode = 'CHANGE_DATA_CAPTURE';",
        )
        .await
        .unwrap();
    let stderr = refuse(&["DUPLICATE_OUTBOX_RELAY"]).await;
    assert!(stderr.contains("live polling lease"), "{stderr}");
    // The lease ends; but with the fence disabled a polling relay between two
    // polls (holding no lease) could still claim rows.
    db.client
        .batch_execute(
            "UPDATE public.messaging_outbox SET status = 'PENDING', lease_owner = NULL, lease_expires_at = NULL;
             ALTER TABLE public.messaging_outbox DISABLE TRIGGER outbox_cdc_fence;",
        )
        .await
        .unwrap();
    let stderr = refuse(&["DUPLICATE_OUTBOX_RELAY"]).await;
    assert!(stderr.contains("fence"), "{stderr}");
    db.client
        .batch_execute("ALTER TABLE public.messaging_outbox ENABLE TRIGGER outbox_cdc_fence")
        .await
        .unwrap();

    // Debezium's slot for the same outbox is active.
    let cfg = Config::load(&config, &common::env).unwrap();
    let dbz_slot = cfg.debezium.slot.clone();
    db.client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&dbz_slot],
        )
        .await
        .unwrap();
    let mut holder = ReplicationConnection::connect(&rep::options(&services, &db.name))
        .await
        .unwrap();
    holder
        .start_replication(&outbox_cdc::replication::StartReplication {
            slot: &dbz_slot,
            from: outbox_cdc::lsn::Lsn::ZERO,
            publication: "outbox_cdc_publication",
            messages: outbox_cdc::replication::Messages::Left,
            values: outbox_cdc::replication::Values::Text,
        })
        .await
        .unwrap();
    let stderr = refuse(&["DUPLICATE_OUTBOX_RELAY"]).await;
    assert!(stderr.contains("Debezium"), "{stderr}");
    // The same slot name is the cluster's, but that slot streams another
    // database: an outbox elsewhere with the same Debezium slot name is
    // not refused for it.
    let other_prefix = common::unique_prefix("refuse_other");
    let other = common::migrated_db(&services, "refuse_other", &other_prefix).await;
    let (_, other_config) = relay::default_config(&services, &other.name, &other_prefix);
    let other_cfg = Config::load(&other_config, &common::env).unwrap();
    assert_eq!(other_cfg.debezium.slot, dbz_slot);
    let out = outbox_cdc(&["cutover", "--to", "cdc"], &other_config);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = outbox_cdc(&["cutover", "--to", "polling"], &other_config);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        out.status.success() && !stderr.contains("Debezium"),
        "another database's active slot refused this one: {stderr}"
    );
    other.drop(&services).await;
    drop(holder);
    rep::drop_slot(&db.client, &dbz_slot).await;
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

/// Rows with a per-key sequence assigned under the key's row lock, and a
/// creation time taken after the lock: both follow commit order per key.
async fn insert_keyed(client: &Client, keys: i32, n: i32) {
    for i in 0..n {
        let key = format!("key-{}", i % keys);
        client
            .execute(
                "WITH s AS (UPDATE public.key_seq SET n = n + 1 WHERE k = $1 RETURNING n)
                 INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version,
                     content_type, payload, partition_key, correlation_id, created_at)
                 SELECT gen_random_uuid(), 'cut', 'T', 1, 'x', convert_to(s.n::text, 'UTF8'), $1, s.n::text, clock_timestamp() FROM s",
                &[&key],
            )
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn cutover_under_load_hands_the_backlog_over_without_loss_or_double_publication() {
    let services = require_services!();
    let prefix = common::unique_prefix("cut");
    let db = common::migrated_db(&services, "cutover", &prefix).await;
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    // The cutover creates the slot: the relay must not.
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("create_slot = true", "create_slot = false");
    std::fs::write(&config, text).unwrap();
    db.client
        .batch_execute(
            "CREATE TABLE public.key_seq (k text PRIMARY KEY, n bigint NOT NULL);
             INSERT INTO public.key_seq SELECT 'key-' || g, 0 FROM generate_series(0, 49) g;
             CREATE TABLE public.polling_published (message_id uuid PRIMARY KEY);
             INSERT INTO public.outbox_relay_mode (outbox_table, mode) VALUES ('public.messaging_outbox', 'POLLING');",
        )
        .await
        .unwrap();
    // 10 000 unpublished rows; some AMBIGUOUS; some under live leases of a
    // polling relay that then dies (its leases expire on their own).
    insert_keyed(&db.client, 50, 10_000).await;
    db.client
        .batch_execute(
            "UPDATE public.messaging_outbox SET status = 'AMBIGUOUS', attempts = 1, last_failure_code = 'TIMEOUT'
              WHERE message_id IN (SELECT message_id FROM public.messaging_outbox ORDER BY random() LIMIT 500)",
        )
        .await
        .unwrap();
    let crashed = db
        .client
        .query(&common::claim_sql("crashed-poller", 4, 200), &[])
        .await
        .unwrap();
    assert_eq!(crashed.len(), 200);

    // A live polling relay publishes (records to polling_published) until fenced.
    let poller = {
        let client = services.connect(&db.name).await;
        tokio::spawn(async move {
            let mut published = 0;
            loop {
                let claimed = match client
                    .query(&common::claim_sql("live-poller", 30, 25), &[])
                    .await
                {
                    Ok(rows) => rows,
                    Err(e) => {
                        let db = e.as_db_error().expect("a database error");
                        assert!(
                            db.message().contains("OUTBOX_CLAIM_FENCED"),
                            "{}",
                            db.message()
                        );
                        return published;
                    }
                };
                for r in &claimed {
                    let id: String = r.get(0);
                    let token: i64 = r.get(1);
                    client
                        .execute(
                            "INSERT INTO public.polling_published VALUES ($1::text::uuid)",
                            &[&id],
                        )
                        .await
                        .unwrap();
                    // The fenced mark of the platform's relay.
                    client
                        .execute(
                            "UPDATE public.messaging_outbox SET status = 'PUBLISHED', published_at = now(), lease_owner = NULL,
                                    lease_expires_at = NULL WHERE message_id = $1::text::uuid AND status = 'IN_FLIGHT'
                                    AND lease_owner = 'live-poller' AND lease_token = $2",
                            &[&id, &token],
                        )
                        .await
                        .unwrap();
                    published += 1;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    // Inserts continue throughout.
    let writer = {
        let client = services.connect(&db.name).await;
        tokio::spawn(async move {
            insert_keyed(&client, 50, 3000).await;
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;

    let out = tokio::task::spawn_blocking({
        let config = config.clone();
        move || {
            outbox_cdc(
                &["cutover", "--to", "cdc", "--lease-wait-secs", "60"],
                &config,
            )
        }
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "cutover failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("waiting for"),
        "the cutover waited for live leases: {stdout}"
    );
    let polled = poller.await.unwrap();
    assert!(
        polled > 0,
        "the polling relay published something before the switch"
    );

    let mut relay = RelayProcess::spawn(&config);
    writer.await.unwrap();
    let total: i64 = db
        .client
        .query_one("SELECT count(*) FROM public.messaging_outbox", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(total, 13_000);
    let by_poller: HashSet<String> = db
        .client
        .query("SELECT message_id::text FROM public.polling_published", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let topic = format!("{prefix}cut");
    let expected_cdc = total as usize - by_poller.len();
    let records = kafka::consume(
        &services.kafka_bootstrap,
        &[&topic],
        expected_cdc,
        Duration::from_secs(90),
    );
    let ids = kafka::by_id(&records);
    assert_eq!(
        ids.len(),
        expected_cdc,
        "every row the polling relay did not publish is in Kafka"
    );
    let both: Vec<&String> = ids.keys().filter(|id| by_poller.contains(*id)).collect();
    assert!(
        both.is_empty(),
        "{} rows published by both relays",
        both.len()
    );

    // Per key, CDC first deliveries follow the key's sequence (skipping what polling published).
    for (key, ns) in kafka::first_delivery_order(&records) {
        assert!(ns.windows(2).all(|w| w[0] < w[1]), "{key}: {ns:?}");
    }
    // Every row is accounted for: PUBLISHED by one relay or the other, and
    // the hand-over is DONE. The relay marks the list's rows before it sets
    // the state, so the two are read together until both hold.
    let (mut pending, mut state) = (-1i64, String::new());
    for _ in 0..100 {
        let row = db
            .client
            .query_one(
                "SELECT (SELECT count(*) FROM public.messaging_outbox WHERE status <> 'PUBLISHED'), \
                        (SELECT state FROM public.outbox_cdc_handover_state)",
                &[],
            )
            .await
            .unwrap();
        (pending, state) = (row.get(0), row.get(1));
        if pending == 0 && state == "DONE" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(pending, 0);
    assert_eq!(state, "DONE");

    relay.signal("TERM");
    assert!(relay.wait(Duration::from_secs(30)).unwrap().success());
    // Back to polling: refused while the relay runs is covered by the code; now it is stopped.
    let out = outbox_cdc(&["cutover", "--to", "polling"], &config);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        slot_state(&db.client, &slot).await,
        None,
        "the relay's slot is dropped"
    );
    let mode: String = db
        .client
        .query_one("SELECT mode FROM public.outbox_relay_mode", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(mode, "POLLING");
    db.drop(&services).await;
}

#[tokio::test]
async fn cutover_dry_run_changes_nothing_and_polling_is_refused_while_the_relay_runs() {
    let services = require_services!();
    let prefix = common::unique_prefix("dry");
    let db = common::migrated_db(&services, "dryrun", &prefix).await;
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    insert_rows(&db.client, 5, "d").await;
    let out = outbox_cdc(&["cutover", "--to", "cdc", "--dry-run"], &config);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        stdout.contains("dry run") && stdout.contains("5 rows not yet PUBLISHED"),
        "{stdout}"
    );
    let modes: i64 = db
        .client
        .query_one("SELECT count(*) FROM public.outbox_relay_mode", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(modes, 0);
    assert_eq!(slot_state(&db.client, &slot).await, None);

    let out = outbox_cdc(&["cutover", "--to", "cdc"], &config);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let again = outbox_cdc(&["cutover", "--to", "cdc"], &config);
    assert!(String::from_utf8_lossy(&again.stdout).contains("already cut over"));
    let relay = RelayProcess::spawn(&config);
    for _ in 0..100 {
        if slot_state(&db.client, &slot)
            .await
            .is_some_and(|s| s.ends_with("true"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let out = outbox_cdc(&["cutover", "--to", "polling"], &config);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("CDC_RELAY_RUNNING"));
    drop(relay);
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

#[tokio::test]
async fn a_standby_takes_over_when_the_active_relay_is_killed() {
    let services = require_services!();
    let prefix = common::unique_prefix("standby");
    let db = common::migrated_db(&services, "standby", &prefix).await;
    db.declare_cdc().await;
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    let mut active = RelayProcess::spawn(&config);
    for _ in 0..100 {
        if slot_state(&db.client, &slot)
            .await
            .is_some_and(|s| s.ends_with("true"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let standby = RelayProcess::spawn(&config);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        standby.log_text().contains("standby"),
        "{}",
        standby.log_text()
    );
    insert_rows(&db.client, 3000, "a").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    active.signal("KILL");
    active.wait(Duration::from_secs(10)).unwrap();
    insert_rows(&db.client, 3000, "b").await;
    let topic = format!("{prefix}ex");
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        6000,
        Duration::from_secs(30),
    );
    assert_eq!(
        kafka::by_id(&records).len(),
        6000,
        "zero loss across the takeover"
    );
    assert!(
        standby.log_text().contains("taking over"),
        "{}",
        standby.log_text()
    );
    drop(standby);
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

/// Rows the relay published are in its journal before the slot passes
/// them; while the journal cannot be folded into the table they stay
/// `PENDING` there. `cutover --to polling` folds them first, so the poller
/// gets exactly the rows that never went out: none twice, none never.
#[tokio::test]
async fn cutover_to_polling_marks_journaled_rows_so_the_poller_gets_only_unpublished_ones() {
    let services = require_services!();
    let prefix = common::unique_prefix("journal");
    let db = common::migrated_db(&services, "journal", &prefix).await;
    db.declare_cdc().await;
    // A gate that refuses every PUBLISHED mark: the fold cannot run.
    db.client
        .batch_execute(
            "CREATE FUNCTION public.refuse_marks() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               IF NEW.status = 'PUBLISHED' THEN RAISE EXCEPTION 'no marks in this test'; END IF;
               RETURN NEW;
             END $$;
             CREATE TRIGGER refuse_marks BEFORE UPDATE ON public.messaging_outbox
               FOR EACH ROW EXECUTE FUNCTION public.refuse_marks();",
        )
        .await
        .unwrap();
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    let mut relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    insert_rows(&db.client, 300, "published").await;
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&format!("{prefix}ex")],
        300,
        Duration::from_secs(60),
    );
    assert_eq!(kafka::by_id(&records).len(), 300);
    // The slot passes the rows once the journal has them.
    let end = rep::insert_lsn(&db.client).await;
    for _ in 0..300 {
        if rep::confirmed_flush(&db.client, &slot).await >= end {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(rep::confirmed_flush(&db.client, &slot).await >= end);
    relay.signal("KILL");
    relay.wait(Duration::from_secs(10)).expect("killed");
    let journaled: i64 = db
        .client
        .query_one(
            "SELECT count(DISTINCT id) FROM public.outbox_cdc_published, unnest(message_ids) AS id",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(journaled, 300);
    assert_eq!(common::rows_with_status(&db.client, "PENDING").await, 300);
    // Written after the relay stopped: never published.
    insert_rows(&db.client, 20, "unpublished").await;

    db.client
        .batch_execute("DROP TRIGGER refuse_marks ON public.messaging_outbox")
        .await
        .unwrap();
    let out = outbox_cdc(&["cutover", "--to", "polling"], &config);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(
            "20 rows not yet PUBLISHED or FAILED (after marking 300 journaled rows PUBLISHED)"
        ),
        "{stdout}"
    );
    let pending = common::texts(
        &db.client,
        "SELECT convert_from(payload, 'UTF8') FROM public.messaging_outbox WHERE status = 'PENDING'",
    )
    .await;
    assert_eq!(pending.len(), 20);
    assert!(
        pending.iter().all(|p| p.starts_with("unpublished")),
        "{pending:?}"
    );
    let published = common::texts(
        &db.client,
        "SELECT message_id::text FROM public.messaging_outbox WHERE status = 'PUBLISHED' AND published_at IS NOT NULL",
    )
    .await;
    let in_kafka = kafka::by_id(&records);
    assert_eq!(published.len(), 300);
    assert!(published.iter().all(|id| in_kafka.contains_key(id)));
    let left: i64 = db
        .client
        .query_one("SELECT count(*) FROM public.outbox_cdc_published", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "the journal is folded and emptied");
    db.drop(&services).await;
}
