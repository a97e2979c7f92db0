//! The replication reader against the real PostgreSQL 15: values, commit
//! order, large and concurrent transactions, resume, feedback, idle WAL,
//! authentication, TLS and set-up failures.

mod connection;

use crate::common;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use common::replication::{self as rep, Tx, PUBLICATION};
use outbox_cdc::contract::outbox;
use outbox_cdc::lsn::Lsn;
use outbox_cdc::replication::ReplicationConnection;
use outbox_cdc::row::value::Timestamp;
use outbox_cdc::row::Datum;
use tokio_postgres::Client;

const INSERT: &str = "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, \
    content_type, payload, headers, created_at, producer, occurred_at, correlation_id, causation_id, tenant, \
    partition_key, ordering_key, traceparent, tracestate, baggage, schema_subject, schema_uri) \
    VALUES ($1::text::uuid, $2, $3, $4, $5, $6, $7::text::jsonb, $8::text::timestamptz, $9, $10::text::timestamptz, \
    $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)";

/// A row to insert: every column the test controls.
#[derive(Clone)]
struct Row {
    id: String,
    destination: String,
    message_type: String,
    version: i32,
    content_type: String,
    payload: Vec<u8>,
    headers: String,
    created_at: String,
    text: [Option<String>; 11],
    occurred_at: Option<String>,
}

impl Row {
    fn simple(id: String, correlation: &str) -> Row {
        Row {
            id,
            destination: "orders".into(),
            message_type: "OrderPlaced".into(),
            version: 1,
            content_type: "application/json".into(),
            payload: b"{}".to_vec(),
            headers: "{}".into(),
            created_at: "2024-01-01 00:00:00+00".into(),
            text: [
                None,
                Some(correlation.to_string()),
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
            ],
            occurred_at: None,
        }
    }
}

async fn insert(client: &impl tokio_postgres::GenericClient, r: &Row) {
    let t = &r.text;
    client
        .execute(
            INSERT,
            &[
                &r.id,
                &r.destination,
                &r.message_type,
                &r.version,
                &r.content_type,
                &r.payload,
                &r.headers,
                &r.created_at,
                &t[0],
                &r.occurred_at,
                &t[1],
                &t[2],
                &t[3],
                &t[4],
                &t[5],
                &t[6],
                &t[7],
                &t[8],
                &t[9],
                &t[10],
            ],
        )
        .await
        .unwrap();
}

fn text(v: &Datum) -> Option<&str> {
    match v {
        Datum::String(s) => Some(s.as_str()),
        Datum::Null => None,
        other => panic!("not text: {other:?}"),
    }
}

fn ts(v: &Datum) -> String {
    match v {
        Datum::Timestamp(t) => t.to_utc_string(),
        other => panic!("not a timestamp: {other:?}"),
    }
}

fn id_of(row: &outbox_cdc::row::OutboxRow) -> String {
    row.message_id().expect("a message id").to_string()
}

#[tokio::test]
async fn every_value_arrives_exactly_as_inserted() {
    let services = require_services!();
    let db = common::migrated_db(&services, "values", "outbox.").await;
    let slot = format!("{}_s", db.name);
    let mut reader = rep::start(
        &db.client,
        &rep::source(&services, &db.name, &slot, PUBLICATION),
    )
    .await
    .unwrap();

    let all_bytes: Vec<u8> = (0..=255).collect();
    let nasty = "quote\" apostrophe' back\\slash tab\t nl\n cr\r bell\u{7} nul-free \u{1f}";
    let r1 = Row {
        id: "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11".into(),
        destination: "orders.v1".into(),
        message_type: "Order\"Placed'".into(),
        version: 0,
        content_type: String::new(),
        payload: all_bytes.clone(),
        headers: r#"{"x-note": "ends with \\", "emoji": "😀"}"#.into(),
        created_at: "2024-02-29 23:59:59.999999+00".into(),
        text: [
            Some(String::new()),                // producer
            Some("😀 non-BMP 𝄞 ümlaut".into()), // correlation_id
            Some(nasty.into()),                 // causation_id
            Some("acme".into()),                // tenant
            Some("key ends with \\".into()),    // partition_key
            None,                               // ordering_key
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
            Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE".into()),
            Some("k=v,q='x'".into()),
            Some("orders-value".into()),
            Some("https://schemas.example/orders/1".into()),
        ],
        occurred_at: Some("2024-01-01 10:00:00.1+02".into()),
    };
    let r2 = Row {
        id: "00000000-0000-4000-8000-000000000002".into(),
        payload: Vec::new(),
        version: i32::MAX,
        created_at: "1999-12-31 23:59:59+00".into(),
        text: Default::default(),
        ..Row::simple(String::new(), "")
    };
    let r3 = Row {
        id: "00000000-0000-4000-8000-000000000003".into(),
        version: i32::MIN,
        created_at: "9999-12-31 23:59:59.999999+00".into(),
        occurred_at: Some("0001-01-01 00:00:00+00 BC".into()),
        ..Row::simple(String::new(), "c3")
    };
    insert(&db.client, &r1).await;
    insert(&db.client, &r2).await;
    insert(&db.client, &r3).await;
    // A Relation message comes again after DDL; rows keep decoding.
    db.client
        .batch_execute("ALTER TABLE public.messaging_outbox ADD COLUMN extra text DEFAULT 'x'")
        .await
        .unwrap();
    let r4 = Row::simple("00000000-0000-4000-8000-000000000004".into(), "after ddl");
    insert(&db.client, &r4).await;

    let txs = rep::collect(reader.events(), 4, Duration::from_secs(30)).await;
    assert_eq!(txs.len(), 4);
    let rows: Vec<_> = txs.iter().flat_map(|t| t.rows.clone()).collect();
    for row in &rows {
        assert_eq!(row.problem(), None, "{row:?}");
    }
    let a = &rows[0];
    assert_eq!(id_of(a), "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11");
    assert_eq!(text(a.get(&outbox::DESTINATION)), Some("orders.v1"));
    assert_eq!(text(a.get(&outbox::MESSAGE_TYPE)), Some("Order\"Placed'"));
    assert_eq!(a.get(&outbox::MESSAGE_VERSION), &Datum::Integer(0));
    assert_eq!(text(a.get(&outbox::CONTENT_TYPE)), Some(""));
    assert_eq!(a.get(&outbox::PAYLOAD), &Datum::Bytes(all_bytes.into()));
    assert_eq!(
        a.get(&outbox::HEADERS),
        &Datum::String(r#"{"emoji": "😀", "x-note": "ends with \\"}"#.into())
    );
    assert_eq!(
        ts(a.get(&outbox::CREATED_AT)),
        "2024-02-29T23:59:59.999999Z"
    );
    assert_eq!(
        ts(a.get(&outbox::OCCURRED_AT)),
        "2024-01-01T08:00:00.100000Z"
    );
    assert_eq!(text(a.get(&outbox::PRODUCER)), Some(""));
    assert_eq!(
        text(a.get(&outbox::CORRELATION_ID)),
        Some("😀 non-BMP 𝄞 ümlaut")
    );
    assert_eq!(text(a.get(&outbox::CAUSATION_ID)), Some(nasty));
    assert_eq!(
        text(a.get(&outbox::PARTITION_KEY)),
        Some("key ends with \\")
    );
    assert_eq!(text(a.get(&outbox::ROUTING_KEY)), Some("key ends with \\"));
    assert_eq!(text(a.get(&outbox::ORDERING_KEY)), None);
    assert_eq!(text(a.get(&outbox::BAGGAGE)), Some("k=v,q='x'"));
    assert_eq!(text(a.get(&outbox::STATUS)), Some("PENDING"));
    assert_eq!(a.get(&outbox::ATTEMPTS), &Datum::Integer(0));
    assert_eq!(a.get(&outbox::LEASE_TOKEN), &Datum::Integer(0));

    let b = &rows[1];
    assert_eq!(b.get(&outbox::PAYLOAD), &Datum::Bytes(Default::default()));
    assert_eq!(b.get(&outbox::MESSAGE_VERSION), &Datum::Integer(2147483647));
    assert_eq!(
        ts(b.get(&outbox::CREATED_AT)),
        "1999-12-31T23:59:59.000000Z"
    );
    assert_eq!(
        text(b.get(&outbox::ROUTING_KEY)),
        Some("00000000-0000-4000-8000-000000000002")
    );
    for column in outbox::COLUMNS.iter().filter(|c| c.nullable) {
        assert_eq!(b.get(column), &Datum::Null, "{}", column.name);
    }
    let c = &rows[2];
    assert_eq!(
        c.get(&outbox::MESSAGE_VERSION),
        &Datum::Integer(-2147483648)
    );
    assert_eq!(
        ts(c.get(&outbox::CREATED_AT)),
        "9999-12-31T23:59:59.999999Z"
    );
    assert_eq!(
        ts(c.get(&outbox::OCCURRED_AT)),
        "0000-01-01T00:00:00.000000Z"
    );
    assert_eq!(
        text(rows[3].get(&outbox::CORRELATION_ID)),
        Some("after ddl")
    );

    // Commit order and plausible commit times.
    for w in txs.windows(2) {
        assert!(w[0].end_lsn < w[1].end_lsn);
    }
    for t in &txs {
        assert!(
            t.commit_lsn < t.end_lsn && t.final_lsn == t.commit_lsn,
            "{t:?}"
        );
        assert_eq!(t.begin_time, t.commit_time);
        assert!(matches!(t.commit_time, Timestamp::Micros(_)));
    }
    reader.stop().await.unwrap();
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

/// One big transaction, many concurrent small ones, rollbacks and other
/// tables: each outbox row once, transactions whole, in commit order.
#[tokio::test]
async fn large_and_concurrent_transactions_arrive_whole_once_and_in_commit_order() {
    let services = require_services!();
    let db = common::migrated_db(&services, "bulk", "outbox.").await;
    db.client
        .batch_execute(
            "CREATE TABLE public.other_table (id bigint PRIMARY KEY, note text);
             ALTER PUBLICATION outbox_cdc_publication ADD TABLE public.other_table;",
        )
        .await
        .unwrap();
    let slot = format!("{}_s", db.name);
    let mut reader = rep::start(
        &db.client,
        &rep::source(&services, &db.name, &slot, PUBLICATION),
    )
    .await
    .unwrap();

    const BIG: usize = 100_000;
    const WRITERS: usize = 8;
    const TXS_PER_WRITER: usize = 25;
    let big = {
        let client = services.connect(&db.name).await;
        tokio::spawn(async move {
            client
                .execute(
                    "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, \
                     content_type, payload, correlation_id, partition_key) \
                     SELECT md5('big' || g)::uuid, 'bulk', 'Bulk', 1, 'application/octet-stream', \
                            convert_to(repeat('p', 100) || g, 'UTF8'), 'big-' || g, 'k' || (g % 97) \
                     FROM generate_series(1, $1::int) g",
                    &[&(BIG as i32)],
                )
                .await
                .unwrap();
        })
    };
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let mut client = services.connect(&db.name).await;
        writers.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            let mut rolled_back = Vec::new();
            for t in 0..TXS_PER_WRITER {
                let tx = client.transaction().await.unwrap();
                let n = 1 + (w + t) % 5;
                for i in 0..n {
                    let id = format!("{:08x}-0000-4000-8000-{:04x}{:08x}", w, t, i);
                    insert(&tx, &Row::simple(id.clone(), &format!("w{w}-t{t}-i{i}"))).await;
                    ids.push(id);
                }
                tx.execute(
                    "INSERT INTO public.other_table VALUES ($1, 'noise')",
                    &[&((w * 1000 + t) as i64)],
                )
                .await
                .unwrap();
                tx.commit().await.unwrap();
                // A rolled-back transaction now and then.
                if t % 7 == 0 {
                    let tx = client.transaction().await.unwrap();
                    let id = format!("{:08x}-dead-4000-8000-{:012x}", w, t);
                    insert(&tx, &Row::simple(id.clone(), "rolled back")).await;
                    rolled_back.push(id);
                    tx.rollback().await.unwrap();
                }
            }
            (ids, rolled_back)
        }));
    }
    big.await.unwrap();
    let mut expected: HashSet<String> = HashSet::new();
    let mut rolled_back: Vec<String> = Vec::new();
    for w in writers {
        let (ids, rb) = w.await.unwrap();
        expected.extend(ids);
        rolled_back.extend(rb);
    }
    assert!(!rolled_back.is_empty());
    let small = expected.len();

    let txs: Vec<Tx> = rep::collect(reader.events(), BIG + small, Duration::from_secs(180)).await;
    let rows: Vec<String> = txs.iter().flat_map(|t| t.rows.iter().map(id_of)).collect();
    assert_eq!(rows.len(), BIG + small, "rows delivered");
    let unique: HashSet<&String> = rows.iter().collect();
    assert_eq!(unique.len(), rows.len(), "each row once");
    for id in &rolled_back {
        assert!(!unique.contains(id), "rolled-back row {id} was delivered");
    }
    for id in &expected {
        assert!(unique.contains(id), "missing {id}");
    }
    // Commit order: end LSNs strictly increase; each writer's transactions
    // arrive in the order it committed them; the big one is whole and in order.
    for w in txs.windows(2) {
        assert!(w[0].end_lsn < w[1].end_lsn, "commit order");
    }
    let mut last_seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut big_tx = None;
    for tx in &txs {
        let corr = |r: &outbox_cdc::row::OutboxRow| {
            text(r.get(&outbox::CORRELATION_ID)).unwrap().to_string()
        };
        let first = corr(&tx.rows[0]);
        if first.starts_with("big-") {
            assert!(big_tx.is_none(), "the big transaction arrived once");
            big_tx = Some(tx);
            continue;
        }
        let (writer, t) = first.split_once("-t").unwrap();
        let t: usize = t.split('-').next().unwrap().parse().unwrap();
        if let Some(prev) = last_seen.insert(writer.to_string(), t) {
            assert!(prev < t, "{writer}: t{prev} then t{t}");
        }
        assert!(
            tx.rows
                .iter()
                .all(|r| corr(r).starts_with(&format!("{writer}-t{t}-"))),
            "transactions are not mixed"
        );
    }
    let big_tx = big_tx.expect("the big transaction");
    assert_eq!(big_tx.rows.len(), BIG);
    for (i, row) in big_tx.rows.iter().enumerate() {
        assert_eq!(
            text(row.get(&outbox::CORRELATION_ID)),
            Some(format!("big-{}", i + 1).as_str())
        );
    }
    assert!(
        reader
            .stream
            .stats
            .other_table_rows
            .load(std::sync::atomic::Ordering::Relaxed)
            >= (WRITERS * TXS_PER_WRITER) as u64
    );
    reader.stop().await.unwrap();
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

async fn insert_tx(client: &Client, ids: &[&str]) {
    for id in ids {
        insert(client, &Row::simple(id.to_string(), id)).await;
    }
}

#[tokio::test]
async fn settlement_moves_the_slot_and_a_restarted_reader_resumes_after_it() {
    let services = require_services!();
    let db = common::migrated_db(&services, "resume", "outbox.").await;
    let slot = format!("{}_s", db.name);
    let source = rep::source(&services, &db.name, &slot, PUBLICATION);
    let mut reader = rep::start(&db.client, &source).await.unwrap();
    let created_at = rep::confirmed_flush(&db.client, &slot).await;

    insert_tx(&db.client, &["00000000-0000-4000-8000-00000000000a"]).await;
    insert_tx(&db.client, &["00000000-0000-4000-8000-00000000000b"]).await;
    let txs = rep::collect(reader.events(), 2, Duration::from_secs(30)).await;
    assert_eq!(txs.len(), 2);
    let (a, b) = (&txs[0], &txs[1]);

    // Nothing settled: the slot stays where it was.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(rep::confirmed_flush(&db.client, &slot).await < a.end_lsn);

    reader.feedback.settle(a.end_lsn);
    let confirmed = rep::wait_confirmed(
        &db.client,
        &slot,
        |l| l >= a.end_lsn,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(
        confirmed, a.end_lsn,
        "advances to the settled transaction, not past b"
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        rep::confirmed_flush(&db.client, &slot).await,
        a.end_lsn,
        "never past unsettled data"
    );
    assert!(confirmed > created_at);

    assert_eq!(reader.stop().await.unwrap(), a.end_lsn);
    // The walsender leaves after its client; until then the slot is in use.
    rep::wait_inactive(&db.client, &slot).await;

    // A new reader starts after a and delivers b (unsettled) again, then new work.
    let mut again = rep::start(&db.client, &source).await.unwrap();
    assert_eq!(again.start, a.end_lsn);
    insert_tx(&db.client, &["00000000-0000-4000-8000-00000000000c"]).await;
    let txs = rep::collect(again.events(), 2, Duration::from_secs(30)).await;
    let ids: Vec<String> = txs.iter().flat_map(|t| t.rows.iter().map(id_of)).collect();
    assert_eq!(
        ids,
        vec![
            "00000000-0000-4000-8000-00000000000b",
            "00000000-0000-4000-8000-00000000000c"
        ]
    );
    assert_eq!(txs[0].end_lsn, b.end_lsn);
    again.feedback.settle(txs[1].end_lsn);
    rep::wait_confirmed(
        &db.client,
        &slot,
        |l| l >= txs[1].end_lsn,
        Duration::from_secs(10),
    )
    .await;
    again.stop().await.unwrap();
    rep::wait_inactive(&db.client, &slot).await;

    // Everything settled: a third reader delivers nothing old.
    let mut third = rep::start(&db.client, &source).await.unwrap();
    insert_tx(&db.client, &["00000000-0000-4000-8000-00000000000d"]).await;
    let txs = rep::collect(third.events(), 1, Duration::from_secs(30)).await;
    let ids: Vec<String> = txs.iter().flat_map(|t| t.rows.iter().map(id_of)).collect();
    assert_eq!(ids, vec!["00000000-0000-4000-8000-00000000000d"]);
    third.stop().await.unwrap();
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

#[tokio::test]
async fn an_idle_outbox_beside_a_busy_table_does_not_retain_wal() {
    let services = require_services!();
    let db = common::migrated_db(&services, "idle", "outbox.").await;
    db.client
        .batch_execute("CREATE TABLE public.busy (id bigint, filler text)")
        .await
        .unwrap();
    let slot = format!("{}_s", db.name);
    let mut reader = rep::start(
        &db.client,
        &rep::source(&services, &db.name, &slot, PUBLICATION),
    )
    .await
    .unwrap();
    let before = rep::confirmed_flush(&db.client, &slot).await;
    for round in 0..8 {
        db.client
            .execute(
                "INSERT INTO public.busy SELECT g, repeat('x', 1000) FROM generate_series($1::bigint, $1::bigint + 4999) g",
                &[&(round * 5000i64)],
            )
            .await
            .unwrap();
    }
    let generated: Lsn = db
        .client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get::<_, String>(0)
        .parse()
        .unwrap();
    assert!(
        generated.0 - before.0 > 40 << 20,
        "the busy table wrote at least 40 MiB of WAL"
    );
    let confirmed = rep::wait_confirmed(
        &db.client,
        &slot,
        |l| generated.0.saturating_sub(l.0) < 1 << 20,
        Duration::from_secs(30),
    )
    .await;
    assert!(
        generated.0.saturating_sub(confirmed.0) < 1 << 20,
        "the slot retains {} bytes of WAL",
        generated.0 - confirmed.0
    );
    assert!(reader.events().try_recv().is_err(), "nothing was delivered");
    reader.stop().await.unwrap();
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

#[tokio::test]
async fn updates_deletes_and_truncates_are_skipped_and_counted() {
    let services = require_services!();
    let db = common::migrated_db(&services, "skip", "outbox.").await;
    db.client
        .batch_execute(
            "CREATE PUBLICATION everything FOR TABLE public.messaging_outbox WITH (publish = 'insert')",
        )
        .await
        .unwrap();
    let slot = format!("{}_s", db.name);
    // The relay refuses a publication of more than inserts; one changed
    // under a running stream still only ever delivers inserts.
    let mut reader = rep::start(
        &db.client,
        &rep::source(&services, &db.name, &slot, "everything"),
    )
    .await
    .unwrap();
    db.client
        .batch_execute(
            "ALTER PUBLICATION everything SET (publish = 'insert, update, delete, truncate')",
        )
        .await
        .unwrap();
    insert_tx(&db.client, &["00000000-0000-4000-8000-0000000000e1"]).await;
    db.client
        .batch_execute(
            "UPDATE public.messaging_outbox SET status = 'PUBLISHED';
             DELETE FROM public.messaging_outbox;
             TRUNCATE public.messaging_outbox;",
        )
        .await
        .unwrap();
    insert_tx(&db.client, &["00000000-0000-4000-8000-0000000000e2"]).await;
    let txs = rep::collect(reader.events(), 2, Duration::from_secs(30)).await;
    let ids: Vec<String> = txs.iter().flat_map(|t| t.rows.iter().map(id_of)).collect();
    assert_eq!(
        ids,
        vec![
            "00000000-0000-4000-8000-0000000000e1",
            "00000000-0000-4000-8000-0000000000e2"
        ]
    );
    assert_eq!(
        reader
            .stream
            .stats
            .skipped_changes
            .load(std::sync::atomic::Ordering::Relaxed),
        3
    );
    reader.stop().await.unwrap();
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

/// The walsender's keepalive once it has sent all the WAL there is becomes
/// `CaughtUp` after the last transaction of a backlog, and never inside
/// one: the relay sends at once only when nothing more is coming.
#[tokio::test]
async fn a_backlog_is_followed_by_one_caught_up_and_none_comes_between_its_transactions() {
    use outbox_cdc::replication::Event;
    let services = require_services!();
    let db = common::migrated_db(&services, "caught_up", "outbox.").await;
    let slot = format!("{}_s", db.name);
    let source = rep::source(&services, &db.name, &slot, PUBLICATION);
    // The slot, then a backlog written while no reader streams.
    let first = rep::start(&db.client, &source).await.unwrap();
    first.stop().await.unwrap();
    rep::wait_inactive(&db.client, &slot).await;
    const BACKLOG: usize = 300;
    for i in 0..BACKLOG {
        let id = format!("00000000-0000-4000-8000-{i:012}");
        insert_tx(&db.client, &[id.as_str()]).await;
    }
    let mut reader = rep::start(&db.client, &source).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let (mut commits, mut caught_up_at) = (0, Vec::new());
    while caught_up_at.is_empty() || commits < BACKLOG {
        let event = tokio::time::timeout_at(deadline, reader.events().recv())
            .await
            .expect("the backlog and a CaughtUp within 30 s")
            .expect("the reader is streaming");
        match event {
            Event::Commit { .. } => commits += 1,
            Event::CaughtUp => caught_up_at.push(commits),
            _ => {}
        }
    }
    assert_eq!(
        caught_up_at,
        vec![BACKLOG],
        "CaughtUp after the backlog's last commit only"
    );
    // Streaming live: each transaction the walsender sends before it waits
    // again is followed by one.
    insert_tx(&db.client, &["00000000-0000-4000-8000-10000000000a"]).await;
    let next = tokio::time::timeout(Duration::from_secs(30), async {
        let mut seen = Vec::new();
        while let Some(e) = reader.events().recv().await {
            let done = e == Event::CaughtUp;
            seen.push(e);
            if done {
                return seen;
            }
        }
        seen
    })
    .await
    .expect("a CaughtUp after a live transaction");
    assert!(
        matches!(
            next.as_slice(),
            [
                Event::Begin { .. },
                Event::Rows(_),
                Event::Commit { .. },
                Event::CaughtUp
            ]
        ),
        "{next:?}"
    );
    reader.stop().await.unwrap();
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}
