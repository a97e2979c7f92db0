//! `relay.delivery = "transactional"` end to end, as processes, against the
//! real PostgreSQL and Kafka: read_committed consumers see every source
//! transaction whole and once across SIGKILLs, a second producer with the
//! same transactional id fences the first, a row Kafka refuses is FAILED
//! without holding its neighbours.

use crate::common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use common::kafka::{self, Consumed, READ_COMMITTED, READ_UNCOMMITTED};
use common::relay::{self as relay, RelayProcess};

mod not_kept;
use common::replication as rep;
use outbox_cdc::lsn::Lsn;

/// Transactional delivery with small transactions, so a run has many.
pub(crate) const TRANSACTIONAL: &str =
    "delivery = \"transactional\"\n[relay.transactional]\nmax_ms = 50\n";

fn config(
    services: &common::Services,
    db: &str,
    prefix: &str,
    extra: &str,
) -> (String, std::path::PathBuf) {
    let slot = format!("{db}_relay");
    let path = relay::config(
        services,
        db,
        prefix,
        &slot,
        &format!("{TRANSACTIONAL}{extra}"),
    );
    (slot, path)
}

/// In each partition, the records of one source transaction are adjacent
/// (what a read_committed consumer sees has no gaps inside a transaction).
fn assert_contiguous(records: &[Consumed], written: &HashMap<String, common::Written>) {
    let mut by_partition: BTreeMap<(String, i32), Vec<&Consumed>> = BTreeMap::new();
    for r in records {
        by_partition
            .entry((r.topic.clone(), r.partition))
            .or_default()
            .push(r);
    }
    let mut transactions = 0;
    for ((topic, partition), mut rs) in by_partition {
        rs.sort_by_key(|r| r.offset);
        let mut finished: HashSet<(usize, usize)> = HashSet::new();
        let mut current: Option<(usize, usize)> = None;
        for r in rs {
            let tx = written[&r.id()].tx;
            if current != Some(tx) {
                assert!(
                    finished.insert(tx),
                    "{topic}/{partition}: transaction {tx:?} is split (record {} at offset {})",
                    r.id(),
                    r.offset
                );
                transactions += 1;
                current = Some(tx);
            }
        }
    }
    assert!(transactions > 0);
}

#[tokio::test]
async fn read_committed_consumers_see_every_source_transaction_whole_and_once_across_sigkills() {
    let services = require_services!();
    let prefix = common::unique_prefix("txk");
    let db = common::cdc_db(&services, "txkill", &prefix).await;
    let (slot, config) = config(&services, &db.name, &prefix, "");
    let mut relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;

    const TOTAL: usize = 50_000;
    let writer = common::spawn_write_keyed(&db.name, 5, TOTAL / 5, 200);
    let mut pauses = common::KillTimes::new(0x2545_f491_4f6c_dd1d);
    let mut kills = 0;
    while kills < 12 {
        tokio::time::sleep(pauses.next_pause()).await;
        relay.signal("KILL");
        relay.wait(Duration::from_secs(10)).expect("killed");
        kills += 1;
        relay = RelayProcess::spawn(&config);
    }
    let written = writer.await.unwrap();
    assert_eq!(written.len(), TOTAL);
    let topic = format!("{prefix}keyed");
    // Everything arrives, then the relay stops cleanly.
    let seen = kafka::consume_ids_at(
        &services.kafka_bootstrap,
        &[&topic],
        TOTAL,
        Duration::from_secs(90),
        READ_COMMITTED,
    );
    assert_eq!(
        kafka::by_id(&seen).len(),
        TOTAL,
        "every id is committed in Kafka after {kills} kills"
    );
    common::wait_until_marked(&db.client).await;
    relay.signal("TERM");
    let status = relay
        .wait(Duration::from_secs(30))
        .expect("stops on SIGTERM");
    assert!(status.success(), "{}", relay.log_text());

    // The whole topic, as each kind of consumer reads it.
    let committed = kafka::consume_all(
        &services.kafka_bootstrap,
        &[&topic],
        Duration::from_secs(8),
        READ_COMMITTED,
    );
    let uncommitted = kafka::consume_all(
        &services.kafka_bootstrap,
        &[&topic],
        Duration::from_secs(8),
        READ_UNCOMMITTED,
    );
    let ids = kafka::by_id(&committed);
    assert_eq!(ids.len(), TOTAL);
    let duplicates: Vec<&String> = ids
        .iter()
        .filter(|(_, c)| c.len() > 1)
        .map(|(id, _)| id)
        .collect();
    assert!(
        duplicates.is_empty(),
        "read_committed saw {} ids more than once after {kills} kills (e.g. {:?})",
        duplicates.len(),
        duplicates.iter().take(3).collect::<Vec<_>>()
    );
    assert_eq!(committed.len(), TOTAL);
    let all = kafka::by_id(&uncommitted);
    assert_eq!(all.len(), TOTAL, "read_uncommitted sees at least every id");
    assert!(uncommitted.len() >= TOTAL);
    eprintln!(
        "{kills} kills, {TOTAL} ids: read_committed saw {} records (0 duplicates); read_uncommitted saw {} records ({} from aborted transactions)",
        committed.len(),
        uncommitted.len(),
        uncommitted.len() - TOTAL
    );
    for (key, ns) in kafka::first_delivery_order(&committed) {
        let expected: Vec<u64> = (1..=ns.len() as u64).collect();
        assert_eq!(ns, expected, "{key} is in commit order");
    }
    assert_contiguous(&committed, &written);
    common::bookkeeping_matches_kafka(&db.client, &ids).await;
    // The progress committed with the records: the group is the default
    // transactional id, the offset the LSN as a number, the metadata its text.
    let (offset, metadata) = kafka::committed_metadata(
        &services.kafka_bootstrap,
        &format!("outbox-cdc.{}.{slot}", db.name),
        "outbox-cdc.progress",
    )
    .expect("a progress offset");
    let progress: Lsn = metadata.parse().unwrap();
    assert_eq!(offset as u64, progress.0);
    let confirmed = rep::confirmed_flush(&db.client, &slot).await;
    assert!(
        progress.0 > 0 && progress <= confirmed,
        "progress {progress}, slot confirmed {confirmed}"
    );
    drop(relay);
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

#[tokio::test]
async fn a_second_relay_with_the_same_transactional_id_fences_the_first_for_good() {
    let services = require_services!();
    let prefix = common::unique_prefix("txf");
    let db = common::cdc_db(&services, "txfence", &prefix).await;
    // Long transactions: the first relay is inside its first one when it is
    // frozen (2 s after it starts; it commits after 8 s).
    let (slot, config) = config(&services, &db.name, &prefix, "max_ms = 8000\n");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("max_ms = 50\n", "")).unwrap();
    let mut zombie = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;

    const TOTAL: usize = 600;
    let writer = {
        let services = common::services().unwrap();
        let name = db.name.clone();
        tokio::spawn(async move {
            let client = services.connect(&name).await;
            let mut ids = Vec::new();
            for i in 0..TOTAL {
                let row = client
                    .query_one(
                        "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key)
                         VALUES (gen_random_uuid(), 'fenced', 'T', 1, 'x', '\\x01', $1) RETURNING message_id::text",
                        &[&format!("k{}", i % 7)],
                    )
                    .await
                    .unwrap();
                ids.push(row.get::<_, String>(0));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            ids
        })
    };
    // The first relay is inside its first transaction once a record of it
    // is visible to read_uncommitted (it commits 8 s after it began).
    let begun = {
        let bootstrap = services.kafka_bootstrap.clone();
        let topic = format!("{prefix}fenced");
        tokio::task::spawn_blocking(move || {
            kafka::consume_ids_at(
                &bootstrap,
                &[&topic],
                1,
                Duration::from_secs(30),
                READ_UNCOMMITTED,
            )
        })
        .await
        .unwrap()
    };
    assert!(
        !begun.is_empty(),
        "the first relay publishes: {}",
        zombie.log_text()
    );
    // The first relay freezes (a long GC pause, a stalled VM) and its
    // replication connection is cut, so the slot is free for another.
    zombie.signal("STOP");
    db.client
        .execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL",
            &[&slot],
        )
        .await
        .unwrap();
    rep::wait_inactive(&db.client, &slot).await;
    let successor = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    // The successor's producer fences the first once its transactions are
    // initialised, which may come after it streams (slowly, under load).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !successor
        .log_text()
        .contains("transactional producer ready")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the successor's producer is not ready: {}",
            successor.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    // It wakes up inside its transaction: Kafka has fenced it. Two endings
    // are correct, depending on which it notices first once thawed:
    // - the fence (a produce or commit refused): it stops with
    //   KAFKA_PRODUCER_FENCED and never starts another session;
    // - its cut replication connection: the session ends, its open
    //   transaction is aborted (a broker may accept that abort from the
    //   fenced epoch), and the next session finds the successor on the slot
    //   and stands by. A standby opens no producer before it holds the slot,
    //   so it cannot fence the successor back.
    // Either way it commits nothing: the counts below hold in both.
    zombie.signal("CONT");
    // An abort may block up to its 60 s call timeout before it reports.
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(status) = zombie.child.try_wait().unwrap() {
            break Some(status);
        }
        if zombie.log_text().contains("standby") || std::time::Instant::now() > deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let log = zombie.log_text();
    match status {
        Some(status) => {
            assert_eq!(status.code(), Some(1), "{log}");
            assert!(log.contains("KAFKA_PRODUCER_FENCED"), "{log}");
            assert!(
                !log.contains("restarting the pipeline"),
                "a fenced relay never starts another session: {log}"
            );
        }
        None => {
            assert!(
                log.contains("PG_CONNECTION_LOST") && log.contains("standby"),
                "the fenced relay stops, or stands by after its cut connection: {log}"
            );
            assert!(
                log.matches("transactional producer ready").count() <= 1,
                "a standby opens no second producer: {log}"
            );
        }
    }

    let ids = writer.await.unwrap();
    let topic = format!("{prefix}fenced");
    kafka::consume_ids_at(
        &services.kafka_bootstrap,
        &[&topic],
        TOTAL,
        Duration::from_secs(60),
        READ_COMMITTED,
    );
    let committed = kafka::consume_all(
        &services.kafka_bootstrap,
        &[&topic],
        Duration::from_secs(8),
        READ_COMMITTED,
    );
    let seen = kafka::by_id(&committed);
    assert_eq!(seen.len(), TOTAL, "every id is committed");
    assert!(ids.iter().all(|id| seen.contains_key(id)));
    assert_eq!(committed.len(), TOTAL, "and none twice");
    let mut successor = successor;
    assert!(
        successor.child.try_wait().unwrap().is_none(),
        "the successor keeps streaming: {}",
        successor.log_text()
    );
    common::wait_until_marked(&db.client).await;
    // A standing-by zombie stops cleanly when asked, before the successor
    // leaves the slot for it.
    if zombie.child.try_wait().unwrap().is_none() {
        zombie.signal("TERM");
        let stopped = zombie.wait(Duration::from_secs(30));
        assert!(
            stopped.is_some_and(|s| s.success()),
            "the standby stops on TERM: {}",
            zombie.log_text()
        );
    }
    successor.signal("TERM");
    assert!(successor.wait(Duration::from_secs(30)).unwrap().success());
    common::bookkeeping_matches_kafka(&db.client, &seen).await;
    drop(successor);
    drop(zombie);
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

#[tokio::test]
async fn a_row_kafka_refuses_is_failed_and_its_transaction_is_published_without_it() {
    let services = require_services!();
    let prefix = common::unique_prefix("txp");
    let db = common::cdc_db(&services, "txpoison", &prefix).await;
    // The broker refuses records over 20 000 bytes on this topic only; the
    // producer's own limit (1 MB) lets them leave.
    kafka::create_topic_with(
        &services.kafka_bootstrap,
        &format!("{prefix}tight"),
        1,
        &[("max.message.bytes", "20000")],
    )
    .await;
    let (slot, config) = config(&services, &db.name, &prefix, "");
    let relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    db.client
        .batch_execute(
            "BEGIN;
             INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key)
             VALUES ('00000000-0000-4000-8000-00000000a001', 'small', 'T', 1, 'x', '\\x01', 'k'),
                    ('00000000-0000-4000-8000-00000000a002', 'tight', 'T', 1, 'x', convert_to(repeat('x', 50000), 'UTF8'), 'k'),
                    ('00000000-0000-4000-8000-00000000a003', 'small', 'T', 1, 'x', '\\x03', 'k');
             COMMIT;
             INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key)
             VALUES ('00000000-0000-4000-8000-00000000a004', 'small', 'T', 1, 'x', '\\x04', 'k');",
        )
        .await
        .unwrap();
    let topic = format!("{prefix}small");
    kafka::consume_ids_at(
        &services.kafka_bootstrap,
        &[&topic],
        3,
        Duration::from_secs(60),
        READ_COMMITTED,
    );
    let committed = kafka::consume_all(
        &services.kafka_bootstrap,
        &[&topic],
        Duration::from_secs(5),
        READ_COMMITTED,
    );
    let ids: Vec<String> = committed.iter().map(Consumed::id).collect();
    assert_eq!(
        ids,
        vec![
            "00000000-0000-4000-8000-00000000a001",
            "00000000-0000-4000-8000-00000000a003",
            "00000000-0000-4000-8000-00000000a004"
        ],
        "the neighbours once each, in order; the refused row left out"
    );
    let uncommitted = kafka::consume_all(
        &services.kafka_bootstrap,
        &[&topic],
        Duration::from_secs(5),
        READ_UNCOMMITTED,
    );
    // The first attempt was aborted: whatever of it reached the log is
    // invisible to read_committed consumers.
    assert!(uncommitted.len() >= committed.len());
    eprintln!(
        "read_uncommitted saw {} records, read_committed {}",
        uncommitted.len(),
        committed.len()
    );
    common::wait_until_marked(&db.client).await;
    let rows = common::text_pairs(
        &db.client,
        "SELECT message_id::text, status || ' ' || coalesce(last_failure_code, '') FROM public.messaging_outbox ORDER BY message_id",
    )
    .await;
    assert_eq!(
        rows,
        vec![
            (
                "00000000-0000-4000-8000-00000000a001".to_string(),
                "PUBLISHED ".to_string()
            ),
            (
                "00000000-0000-4000-8000-00000000a002".to_string(),
                "FAILED MESSAGE_TOO_LARGE".to_string()
            ),
            (
                "00000000-0000-4000-8000-00000000a003".to_string(),
                "PUBLISHED ".to_string()
            ),
            (
                "00000000-0000-4000-8000-00000000a004".to_string(),
                "PUBLISHED ".to_string()
            ),
        ]
    );
    drop(relay);
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

#[tokio::test]
async fn a_cutover_backlog_goes_out_in_committed_chunks_and_a_crash_repeats_at_most_one() {
    let services = require_services!();
    let prefix = common::unique_prefix("txh");
    let db = common::migrated_db(&services, "txhand", &prefix).await;
    let (_, config) = config(&services, &db.name, &prefix, "");
    // The cutover creates the slot: the relay must not.
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("create_slot = true", "create_slot = false");
    std::fs::write(&config, text).unwrap();
    const BACKLOG: i64 = 60_000;
    db.client
        .batch_execute(&format!(
            "INSERT INTO public.outbox_relay_mode (outbox_table, mode) VALUES ('public.messaging_outbox', 'POLLING');
             INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key)
             SELECT gen_random_uuid(), 'backlog', 'T', 1, 'x', convert_to(g::text, 'UTF8'), 'k' || (g % 50)
             FROM generate_series(1, {BACKLOG}) g;"
        ))
        .await
        .unwrap();
    let out = std::process::Command::new(crate::common::cli::bin())
        .args(["cutover", "--to", "cdc", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Killed once some chunks are committed and marked, before the end.
    let mut relay = RelayProcess::spawn(&config);
    let mut marked_at_kill = 0;
    for _ in 0..3000 {
        marked_at_kill = common::rows_with_status(&db.client, "PUBLISHED").await;
        if marked_at_kill >= 5_000 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    relay.signal("KILL");
    relay.wait(Duration::from_secs(10)).expect("killed");
    assert!(
        (5_000..BACKLOG).contains(&marked_at_kill),
        "killed during the hand-over: {marked_at_kill} rows marked"
    );
    let relay = RelayProcess::spawn(&config);
    let topic = format!("{prefix}backlog");
    kafka::consume_ids_at(
        &services.kafka_bootstrap,
        &[&topic],
        BACKLOG as usize,
        Duration::from_secs(90),
        READ_COMMITTED,
    );
    common::wait_until_marked(&db.client).await;
    let committed = kafka::consume_all(
        &services.kafka_bootstrap,
        &[&topic],
        Duration::from_secs(8),
        READ_COMMITTED,
    );
    let ids = kafka::by_id(&committed);
    assert_eq!(
        ids.len(),
        BACKLOG as usize,
        "every backlog row is committed"
    );
    let duplicates = committed.len() - ids.len();
    eprintln!(
        "hand-over killed after {marked_at_kill} marks: {duplicates} duplicates for read_committed"
    );
    assert!(
        duplicates <= 1000,
        "at most the chunk committed but not yet marked comes again: {duplicates}"
    );
    let state = common::texts(
        &db.client,
        "SELECT state FROM public.outbox_cdc_handover_state",
    )
    .await;
    assert_eq!(state, vec!["DONE"]);
    assert_eq!(
        common::rows_with_status(&db.client, "PUBLISHED").await,
        BACKLOG
    );
    drop(relay);
    rep::drop_slot(&db.client, &format!("{}_relay", db.name)).await;
    db.drop(&services).await;
}
