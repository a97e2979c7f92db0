//! `outbox-cdc status` against the real PostgreSQL in each state it
//! judges: the slot missing, a relay streaming with everything published
//! (healthy), rows FAILED, and the slot left inactive.

use std::time::Duration;

use serde_json::Value;

use crate::common::cli::{self, Cli};
use crate::common::relay::{self, RelayProcess};
use crate::common::{self, replication as rep};

fn status(path: &std::path::Path, extra: &[&str]) -> (Option<i32>, Value, String) {
    let mut args = vec!["status", "--format", "json"];
    args.extend_from_slice(extra);
    let out = Cli::new(&args).config(path).output();
    let json = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code(), json, cli::text(&out))
}

#[tokio::test]
async fn status_says_what_is_wrong_with_a_code_and_is_quiet_when_healthy() {
    let services = require_services!();
    let prefix = common::unique_prefix("status");
    let db = common::cdc_db(&services, "status", &prefix).await;
    let (slot, path) = relay::default_config(&services, &db.name, &prefix);

    // No slot yet: nothing streams the outbox.
    let (code, json, text) = status(&path, &[]);
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(json["problems"][0]["code"], "SLOT_MISSING", "{text}");
    assert!(text.contains("error: SLOT_MISSING"), "{text}");

    // A relay streams (its slot made at start) and publishes everything:
    // healthy.
    let mut running = RelayProcess::spawn(&path);
    rep::wait_streaming(&db.client, &slot).await;
    db.client
        .batch_execute(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload)
             SELECT md5('status' || g)::uuid, 'orders', 'T', 1, 'application/json', '\\x7b7d'::bytea
             FROM generate_series(1, 3) g",
        )
        .await
        .unwrap();
    common::wait_until_marked(&db.client).await;
    let (code, json, text) = status(&path, &[]);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(json["problems"], serde_json::json!([]), "{text}");
    assert_eq!(json["slot"]["active"], true, "{text}");
    assert!(json["slot"]["active_pid"].as_i64().is_some(), "{text}");
    assert_eq!(json["rows"]["kind"], "kept", "{text}");
    assert_eq!(json["rows"]["relay_mode"], "CHANGE_DATA_CAPTURE", "{text}");
    assert_eq!(json["rows"]["fence"], true, "{text}");
    assert_eq!(json["rows"]["pending"], 0, "{text}");
    assert_eq!(json["rows"]["last_published"][0][0], "orders", "{text}");
    let human = Cli::new(&["status"]).config(&path).output();
    let human = cli::text(&human);
    assert!(
        human.contains(&format!("slot {slot}: active (process")),
        "{human}"
    );
    assert!(human.contains("healthy"), "{human}");

    // A row FAILED: named by its code.
    db.client
        .batch_execute(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload,
                                                  status, last_failure_code)
             VALUES (md5('status-failed')::uuid, 'orders', 'T', 1, 'application/json', '\\x7b7d'::bytea,
                     'FAILED', 'RECORD_TOO_LARGE')",
        )
        .await
        .unwrap();
    let (code, json, text) = status(&path, &[]);
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(json["problems"][0]["code"], "ROWS_FAILED", "{text}");
    assert_eq!(
        json["rows"]["failed"][0]["code"], "RECORD_TOO_LARGE",
        "{text}"
    );
    assert_eq!(json["rows"]["failed"][0]["count"], 1, "{text}");

    // The relay stopped: the slot is inactive past the threshold, which
    // comes first.
    running.signal("TERM");
    running.wait(Duration::from_secs(30));
    let (code, json, text) = status(&path, &["--inactive-after", "0s"]);
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(json["problems"][0]["code"], "SLOT_INACTIVE", "{text}");
    assert_eq!(json["problems"][1]["code"], "ROWS_FAILED", "{text}");
    assert_eq!(json["slot"]["active"], false, "{text}");

    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

/// A slot the server invalidated (`wal_status` lost), on a PostgreSQL of
/// its own that keeps 1 MB of WAL for slots: `SLOT_INVALIDATED`, with the
/// way to recover.
#[tokio::test]
async fn status_reports_a_lost_slot() {
    let services = require_services!();
    let pg_port = common::free_port();
    let extra = tokio::task::spawn_blocking(move || {
        common::ExtraServices::start(
            "statuslost",
            &[("OUTBOX_TEST_PG_PORT", pg_port.to_string())],
            &["start-postgres"],
        )
    })
    .await
    .unwrap();
    let other = common::Services {
        pg_port,
        ..services
    };
    let prefix = common::unique_prefix("lost");
    let db = common::cdc_db(&other, "statuslost", &prefix).await;
    let (slot, path) = relay::default_config(&other, &db.name, &prefix);
    let setup = [
        "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'".to_string(),
        "SELECT pg_reload_conf()".to_string(),
        format!("SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')"),
        "CREATE TABLE filler (b text)".to_string(),
    ];
    for sql in &setup {
        db.client.batch_execute(sql).await.unwrap();
    }
    // WAL past the slot's allowance, segment after segment, then a checkpoint.
    for _ in 0..4 {
        for sql in [
            "INSERT INTO filler SELECT repeat('x', 1000) FROM generate_series(1, 20000)",
            "SELECT pg_switch_wal()",
            "CHECKPOINT",
        ] {
            db.client.batch_execute(sql).await.unwrap();
        }
    }
    let (code, json, text) = status(&path, &[]);
    assert_eq!(json["slot"]["wal_status"], "lost", "{text}");
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(json["problems"][0]["code"], "SLOT_INVALIDATED", "{text}");
    assert!(text.contains("--recover"), "{text}");
    drop(db);
    drop(extra);
}

/// The slot guard's count of the rows not yet published ends on the server
/// when the relay stops waiting for it: a count that cannot finish (a lock
/// here; a 10 000 000-row backlog in production) never leaves one busy
/// backend behind per tick.
#[tokio::test]
async fn a_count_the_guard_gives_up_on_ends_on_the_server_too() {
    let services = require_services!();
    let prefix = common::unique_prefix("guardq");
    let db = common::cdc_db(&services, "guardq", &prefix).await;
    let slot = format!("{}_relay", db.name);
    let path = relay::config(
        &services,
        &db.name,
        &prefix,
        &slot,
        "slot_check_interval_secs = 1",
    );
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("[postgres]\n"), "{text}");
    std::fs::write(
        &path,
        text.replacen("[postgres]\n", "[postgres]\nquery_timeout_secs = 2\n", 1),
    )
    .unwrap();
    let mut running = RelayProcess::spawn(&path);
    rep::wait_streaming(&db.client, &slot).await;
    // Another session holds the table: every count waits for its lock.
    let holder = services.connect(&db.name).await;
    holder
        .batch_execute("BEGIN; LOCK TABLE public.messaging_outbox IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let mut most = 0i64;
    for _ in 0..16 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let waiting: i64 = db
            .client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        most = most.max(waiting);
    }
    holder.batch_execute("ROLLBACK").await.unwrap();
    let log = running.log_text();
    assert!(
        log.contains("cannot count the rows not yet published"),
        "the guard counted through the lock: {log}"
    );
    assert_eq!(most, 1, "counts waiting for the lock at once: {log}");
    running.signal("TERM");
    let status = running.wait(Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "{}",
        running.log_text()
    );
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}
