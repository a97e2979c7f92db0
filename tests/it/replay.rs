//! `outbox-cdc replay`: a window published again, byte for byte and in
//! per-key order, to a new prefix, with no row's status changed; a dry run
//! that counts and publishes nothing; a window `purge` thinned, refused.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use crate::common::cli::{self, Cli};
use crate::common::kafka::{self, Consumed};
use crate::common::relay::{self, RelayProcess};
use crate::common::{self, replication as rep};

/// The database's clock now, as `--since` and `--until` take it.
async fn now(client: &tokio_postgres::Client) -> String {
    client
        .query_one(
            "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

async fn insert(client: &tokio_postgres::Client, key: &str, n: i32) -> String {
    client
        .query_one(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key, headers, correlation_id)
             VALUES (gen_random_uuid(), 'ledger', 'LedgerPosted', 2, 'application/json', convert_to('{\"n\":' || $2 || '}', 'UTF8'), $1, '{\"origin\":\"replay-test\"}', 'corr-' || $2)
             RETURNING message_id::text",
            &[&key, &n.to_string()],
        )
        .await
        .unwrap()
        .get(0)
}

/// Every row's status and publication time, by id.
async fn statuses(client: &tokio_postgres::Client) -> Vec<(String, String, Option<String>)> {
    client
        .query(
            "SELECT message_id::text, status, published_at::text FROM public.messaging_outbox ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// Each partition's ids in offset order.
fn order(records: &[Consumed]) -> BTreeMap<i32, Vec<String>> {
    let mut by_partition: BTreeMap<i32, Vec<(i64, String)>> = BTreeMap::new();
    for r in records {
        by_partition
            .entry(r.partition)
            .or_default()
            .push((r.offset, r.id()));
    }
    by_partition
        .into_iter()
        .map(|(p, mut v)| {
            v.sort();
            (p, v.into_iter().map(|(_, id)| id).collect())
        })
        .collect()
}

#[tokio::test]
async fn a_replay_to_a_new_prefix_is_byte_identical_in_order_and_changes_no_status() {
    let services = require_services!();
    let prefix = common::unique_prefix("replay");
    let db = common::cdc_db(&services, "replay", &prefix).await;
    let topic = format!("{prefix}ledger");
    let rebuild = format!("{prefix}rebuild.");
    let rebuilt = format!("{rebuild}ledger");
    kafka::create_topic(&services.kafka_bootstrap, &topic, 3).await;
    kafka::create_topic(&services.kafka_bootstrap, &rebuilt, 3).await;
    let since = now(&db.client).await;
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    let relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    let mut ids = Vec::new();
    for n in 0..40 {
        ids.push(insert(&db.client, &format!("acct-{}", n % 7), n).await);
    }
    common::wait_until_marked(&db.client).await;
    let mut stopping = relay;
    stopping.signal("TERM");
    assert!(stopping
        .wait(Duration::from_secs(30))
        .is_some_and(|s| s.success()));
    // A row no relay published: a replay publishes it too, and it stays PENDING.
    let pending = insert(&db.client, "acct-3", 40).await;
    let until = now(&db.client).await;
    // After the window: not replayed.
    let later = insert(&db.client, "acct-3", 41).await;
    let before = statuses(&db.client).await;

    let dry = Cli::new(&[
        "replay",
        "--since",
        &since,
        "--until",
        &until,
        "--to-topic-prefix",
        &rebuild,
        "--dry-run",
    ])
    .config(&config)
    .output();
    assert!(dry.status.success(), "{}", cli::text(&dry));
    let said = String::from_utf8_lossy(&dry.stdout).to_string();
    assert!(
        said.contains(&format!("41 rows of ledger -> {rebuilt}")),
        "{said}"
    );
    assert!(
        said.contains("dry run: 41 rows would be published again"),
        "{said}"
    );
    let nothing = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&rebuilt],
        1,
        Duration::from_secs(3),
    );
    assert!(nothing.is_empty(), "a dry run published {}", nothing.len());

    let out = Cli::new(&[
        "replay",
        "--since",
        &since,
        "--until",
        &until,
        "--to-topic-prefix",
        &rebuild,
    ])
    .config(&config)
    .output();
    assert!(out.status.success(), "{}", cli::text(&out));
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(said.contains("replayed 41 rows: 41 published"), "{said}");
    assert_eq!(
        statuses(&db.client).await,
        before,
        "no row's status changed"
    );

    let original = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        40,
        Duration::from_secs(10),
    );
    let copy = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&rebuilt],
        41,
        Duration::from_secs(10),
    );
    assert_eq!(original.len(), 40);
    assert_eq!(copy.len(), 41, "each row once");
    let copied: HashSet<String> = copy.iter().map(Consumed::id).collect();
    assert!(copied.contains(&pending));
    assert!(!copied.contains(&later), "a row after the window");
    for o in &original {
        let c = copy.iter().find(|c| c.id() == o.id()).unwrap();
        assert_eq!(c.partition, o.partition, "{}", o.id());
        assert_eq!(c.key, o.key, "{}", o.id());
        assert_eq!(c.value, o.value, "{}", o.id());
        assert_eq!(c.headers, o.headers, "{}", o.id());
    }
    // Per partition, the copy's order is the original's, with the row no
    // relay published last in its partition.
    let copy_order = order(&copy);
    for (partition, ids) in order(&original) {
        let replayed: Vec<String> = copy_order[&partition]
            .iter()
            .filter(|id| **id != pending)
            .cloned()
            .collect();
        assert_eq!(replayed, ids, "partition {partition}");
    }
    let last = copy.iter().find(|c| c.id() == pending).unwrap();
    assert_eq!(copy_order[&last.partition].last(), Some(&pending));
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

const OLD_ROWS: &str = "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version,
        content_type, payload, status, created_at, published_at)
    SELECT gen_random_uuid(), 'history', 'T', 1, 'x', '\\x00', 'PUBLISHED', now() - $1::text::interval, now() - $2::text::interval
      FROM generate_series(1, $3::int)";

#[tokio::test]
async fn a_window_purge_thinned_is_refused_naming_what_is_gone() {
    let services = require_services!();
    let prefix = common::unique_prefix("replaypurged");
    let db = common::cdc_db(&services, "replaypurged", &prefix).await;
    // A transaction open since before the rows, as another test's can be
    // in CI: the purge's horizon stays behind it.
    let holder = services.connect(&db.name).await;
    holder
        .batch_execute("BEGIN; SELECT txid_current();")
        .await
        .unwrap();
    for (created, published, n) in [("3 days", "2 days", 50), ("2 hours", "1 hour", 10)] {
        db.client
            .execute(OLD_ROWS, &[&created, &published, &n])
            .await
            .unwrap();
    }
    // No relay has made its slot yet: the purge waits for none.
    let (_, config) = relay::default_config(&services, &db.name, &prefix);
    let held = Cli::new(&["purge", "--older-than", "1d"])
        .config(&config)
        .output();
    assert!(held.status.success(), "{}", cli::text(&held));
    let purged: i64 = db
        .client
        .query_one("SELECT count(*) FROM public.outbox_cdc_purged", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        purged,
        0,
        "rows committed after a running transaction began are not deleted yet: {}",
        cli::text(&held)
    );
    holder.batch_execute("COMMIT").await.unwrap();
    // The purge deletes only rows committed before the oldest transaction
    // running anywhere on the server; another test's long transaction can
    // hold that back, so it runs again until the rows are gone.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let logged = loop {
        let purge = Cli::new(&["purge", "--older-than", "1d"])
            .config(&config)
            .output();
        assert!(purge.status.success(), "{}", cli::text(&purge));
        let logged: i64 = db
            .client
            .query_one(
                "SELECT coalesce(sum(row_count), 0)::int8 FROM public.outbox_cdc_purged WHERE destination = 'history' AND status = 'PUBLISHED'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if logged > 0 || std::time::Instant::now() > deadline {
            break logged;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(logged, 50, "the purge recorded what it deleted");

    let refused = Cli::new(&["replay", "--since", "4d", "--until", "30m", "--dry-run"])
        .config(&config)
        .output();
    assert_eq!(refused.status.code(), Some(1), "{}", cli::text(&refused));
    let text = cli::text(&refused);
    assert!(text.contains("REPLAY_WINDOW_PURGED"), "{text}");
    assert!(text.contains("50 PUBLISHED rows of history"), "{text}");

    // A window after the purged rows is whole.
    let whole = Cli::new(&["replay", "--since", "3h", "--until", "30m", "--dry-run"])
        .config(&config)
        .output();
    assert!(whole.status.success(), "{}", cli::text(&whole));
    let said = String::from_utf8_lossy(&whole.stdout).to_string();
    assert!(
        said.contains("dry run: 10 rows would be published again"),
        "{said}"
    );

    let malformed = Cli::new(&[
        "replay",
        "--since",
        "3h",
        "--until",
        "30m",
        "--to-topic-prefix",
        "a b",
    ])
    .config(&config)
    .output();
    assert_eq!(
        malformed.status.code(),
        Some(2),
        "{}",
        cli::text(&malformed)
    );
    assert!(cli::text(&malformed).contains("ARGUMENT_INVALID"));
    db.drop(&services).await;
}

#[tokio::test]
async fn a_transactional_replay_beside_the_running_relay_fences_nothing() {
    let services = require_services!();
    let prefix = common::unique_prefix("replaytx");
    let db = common::cdc_db(&services, "replaytx", &prefix).await;
    let topic = format!("{prefix}ledger");
    kafka::create_topic(&services.kafka_bootstrap, &topic, 2).await;
    let slot = format!("{}_relay", db.name);
    let config = relay::config(
        &services,
        &db.name,
        &prefix,
        &slot,
        crate::transactional::TRANSACTIONAL,
    );
    let since = now(&db.client).await;
    let mut relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    let mut first = Vec::new();
    for n in 0..20 {
        first.push(insert(&db.client, &format!("acct-{}", n % 3), n).await);
    }
    common::wait_until_marked(&db.client).await;
    let until = now(&db.client).await;

    // Into the original topic, while the relay streams.
    let out = Cli::new(&["replay", "--since", &since, "--until", &until])
        .config(&config)
        .output();
    assert!(out.status.success(), "{}", cli::text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("replayed 20 rows: 20 published"),
        "{}",
        cli::text(&out)
    );
    // The relay was not fenced: it goes on publishing.
    let mut second = Vec::new();
    for n in 20..30 {
        second.push(insert(&db.client, &format!("acct-{}", n % 3), n).await);
    }
    common::wait_until_marked(&db.client).await;
    assert!(
        relay.wait(Duration::from_millis(10)).is_none(),
        "{}",
        relay.log_text()
    );

    let records = kafka::consume_all(
        &services.kafka_bootstrap,
        &[&topic],
        Duration::from_secs(5),
        kafka::READ_COMMITTED,
    );
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for r in &records {
        *seen.entry(r.id()).or_default() += 1;
    }
    for id in &first {
        assert_eq!(
            seen.get(id),
            Some(&2),
            "{id}: the relay's record and the replay's"
        );
    }
    for id in &second {
        assert_eq!(seen.get(id), Some(&1), "{id}");
    }
    relay.signal("TERM");
    assert!(relay
        .wait(Duration::from_secs(30))
        .is_some_and(|s| s.success()));
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}
