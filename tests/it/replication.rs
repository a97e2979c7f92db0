//! The replication reader against the real PostgreSQL 15: values, commit
//! order, large and concurrent transactions, resume, feedback, idle WAL,
//! authentication, TLS and set-up failures.

use crate::common;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use common::replication::{self as rep, Tx, PUBLICATION};
use outbox_cdc::contract::outbox;
use outbox_cdc::contract::row::Value;
use outbox_cdc::contract::value::Timestamp;
use outbox_cdc::lsn::Lsn;
use outbox_cdc::replication::ReplicationConnection;
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

fn text(v: &Value) -> Option<&str> {
    match v {
        Value::Text(s) => Some(s.as_str()),
        Value::Null => None,
        other => panic!("not text: {other:?}"),
    }
}

fn ts(v: &Value) -> String {
    match v {
        Value::Timestamp(t) => t.to_utc_string(),
        other => panic!("not a timestamp: {other:?}"),
    }
}

fn id_of(row: &outbox_cdc::contract::row::OutboxRow) -> String {
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
    assert_eq!(a.get(&outbox::MESSAGE_VERSION), &Value::Integer(0));
    assert_eq!(text(a.get(&outbox::CONTENT_TYPE)), Some(""));
    assert_eq!(a.get(&outbox::PAYLOAD), &Value::Bytes(all_bytes.into()));
    assert_eq!(
        a.get(&outbox::HEADERS),
        &Value::Json(r#"{"emoji": "😀", "x-note": "ends with \\"}"#.into())
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
    assert_eq!(a.get(&outbox::ATTEMPTS), &Value::Integer(0));
    assert_eq!(a.get(&outbox::LEASE_TOKEN), &Value::Bigint(0));

    let b = &rows[1];
    assert_eq!(b.get(&outbox::PAYLOAD), &Value::Bytes(Default::default()));
    assert_eq!(b.get(&outbox::MESSAGE_VERSION), &Value::Integer(2147483647));
    assert_eq!(
        ts(b.get(&outbox::CREATED_AT)),
        "1999-12-31T23:59:59.000000Z"
    );
    assert_eq!(
        text(b.get(&outbox::ROUTING_KEY)),
        Some("00000000-0000-4000-8000-000000000002")
    );
    for column in outbox::COLUMNS.iter().filter(|c| c.nullable) {
        assert_eq!(b.get(column), &Value::Null, "{}", column.name);
    }
    let c = &rows[2];
    assert_eq!(
        c.get(&outbox::MESSAGE_VERSION),
        &Value::Integer(-2147483648)
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
        let corr = |r: &outbox_cdc::contract::row::OutboxRow| {
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

async fn identify(opts: &outbox_cdc::replication::ConnectOptions) -> Result<bool, String> {
    let mut conn = ReplicationConnection::connect(opts)
        .await
        .map_err(|e| e.code().to_string())?;
    let row = conn
        .identify_system()
        .await
        .map_err(|e| e.code().to_string())?;
    assert_eq!(row.len(), 4, "systemid, timeline, xlogpos, dbname");
    let major = std::env::var("OUTBOX_TEST_PG_MAJOR").unwrap_or_else(|_| "15".into());
    assert!(
        conn.server_version.starts_with(&format!("{major}.")),
        "{} is not PostgreSQL {major}",
        conn.server_version
    );
    Ok(conn.tls)
}

#[tokio::test]
async fn trust_cleartext_md5_and_scram_log_ins_work_and_bad_credentials_are_refused() {
    let services = require_services!();
    let db = services.fresh_db("auth").await;
    let pid = std::process::id();
    let (scram, md5, norepl) = (
        format!("relay_scram_{pid}"),
        format!("relay_md5_{pid}"),
        format!("relay_norepl_{pid}"),
    );
    let (trust, clear) = (format!("relay_trust_{pid}"), format!("relay_clear_{pid}"));
    // pg_hba.conf (scripts/services.sh) trusts members of relay_trust and asks
    // members of relay_clear for a cleartext password.
    for group in ["relay_trust", "relay_clear"] {
        let _ = db
            .client
            .batch_execute(&format!("CREATE ROLE {group} NOLOGIN"))
            .await;
    }
    db.client
        .batch_execute(&format!(
            "SET password_encryption = 'scram-sha-256';
             DROP ROLE IF EXISTS {scram}; CREATE ROLE {scram} LOGIN REPLICATION PASSWORD 'scram-pw';
             SET password_encryption = 'md5';
             DROP ROLE IF EXISTS {md5}; CREATE ROLE {md5} LOGIN REPLICATION PASSWORD 'md5-pw';
             DROP ROLE IF EXISTS {norepl}; CREATE ROLE {norepl} LOGIN PASSWORD 'x';
             SET password_encryption = 'scram-sha-256';
             DROP ROLE IF EXISTS {trust}; CREATE ROLE {trust} LOGIN REPLICATION IN ROLE relay_trust;
             DROP ROLE IF EXISTS {clear}; CREATE ROLE {clear} LOGIN REPLICATION PASSWORD 'clear-pw' IN ROLE relay_clear;"
        ))
        .await
        .unwrap();
    let stored = |role: String| {
        let client = &db.client;
        async move {
            client
                .query_one(
                    "SELECT rolpassword FROM pg_authid WHERE rolname = $1",
                    &[&role],
                )
                .await
                .unwrap()
                .get::<_, String>(0)
        }
    };
    assert!(stored(scram.clone()).await.starts_with("SCRAM-SHA-256$"));
    assert!(stored(md5.clone()).await.starts_with("md5"));

    let mut opts = rep::options(&services, &db.name);
    opts.user = scram.clone();
    opts.password = Some(rep::secret("scram-pw"));
    assert_eq!(identify(&opts).await, Ok(false));
    opts.password = Some(rep::secret("wrong"));
    assert_eq!(identify(&opts).await, Err("PG_AUTH_FAILED".into()));

    opts.user = md5.clone();
    opts.password = Some(rep::secret("md5-pw"));
    assert_eq!(identify(&opts).await, Ok(false));
    opts.password = Some(rep::secret("wrong"));
    assert_eq!(identify(&opts).await, Err("PG_AUTH_FAILED".into()));
    opts.password = None;
    assert_eq!(identify(&opts).await, Err("PG_AUTH_FAILED".into()));

    opts.user = norepl.clone();
    opts.password = Some(rep::secret("x"));
    assert_eq!(identify(&opts).await, Err("PG_PERMISSION_DENIED".into()));

    // Trust: no password asked, none needed.
    opts.user = trust.clone();
    opts.password = None;
    assert_eq!(identify(&opts).await, Ok(false));
    // Cleartext: the server asks for the password itself.
    opts.user = clear.clone();
    opts.password = Some(rep::secret("clear-pw"));
    assert_eq!(identify(&opts).await, Ok(false));
    opts.password = Some(rep::secret("wrong"));
    assert_eq!(identify(&opts).await, Err("PG_AUTH_FAILED".into()));

    db.client
        .batch_execute(&format!(
            "DROP ROLE {scram}; DROP ROLE {md5}; DROP ROLE {norepl}; DROP ROLE {trust}; DROP ROLE {clear};"
        ))
        .await
        .unwrap();
    db.drop(&services).await;
}

#[tokio::test]
async fn tls_verify_full_works_with_the_test_ca_and_wrong_names_or_cas_fail() {
    let services = require_services!();
    let ca =
        std::env::var("OUTBOX_TEST_PG_CA").expect("OUTBOX_TEST_PG_CA from scripts/services.sh env");
    let db = services.fresh_db("tls").await;
    let pid = std::process::id();
    let scram = format!("relay_tls_{pid}");
    db.client
        .batch_execute(&format!(
            "SET password_encryption = 'scram-sha-256';
             DROP ROLE IF EXISTS {scram}; CREATE ROLE {scram} LOGIN REPLICATION PASSWORD 'tls-pw';"
        ))
        .await
        .unwrap();
    let mut opts = rep::options(&services, &db.name);
    opts.host = "localhost".into();
    opts.user = scram.clone();
    opts.password = Some(rep::secret("tls-pw"));
    opts.sslrootcert = Some(ca.clone().into());

    // SCRAM over TLS binds the channel (SCRAM-SHA-256-PLUS).
    opts.sslmode = outbox_cdc::config::SslMode::VerifyFull;
    assert_eq!(identify(&opts).await, Ok(true));
    opts.sslmode = outbox_cdc::config::SslMode::Require;
    assert_eq!(identify(&opts).await, Ok(true));
    opts.sslmode = outbox_cdc::config::SslMode::Disable;
    assert_eq!(identify(&opts).await, Ok(false));

    // The certificate names localhost, not 127.0.0.1.
    opts.host = "127.0.0.1".into();
    opts.sslmode = outbox_cdc::config::SslMode::VerifyFull;
    assert_eq!(identify(&opts).await, Err("PG_TLS_FAILED".into()));
    opts.sslmode = outbox_cdc::config::SslMode::VerifyCa;
    assert_eq!(identify(&opts).await, Ok(true));

    // A CA that did not sign the server certificate.
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let other_ca = std::env::temp_dir().join(format!("outbox-cdc-other-ca-{pid}.pem"));
    std::fs::write(&other_ca, other.cert.pem()).unwrap();
    opts.sslrootcert = Some(other_ca.clone());
    assert_eq!(identify(&opts).await, Err("PG_TLS_FAILED".into()));

    // The SQL connections say the same, from rustls's error type.
    let sql = |ca: &std::path::Path| {
        let text = common::config_head(
            ("localhost", services.pg_port, &scram),
            &db.name,
            None,
            "tls.",
            "127.0.0.1:1",
        )
        .replace(
            "sslmode = \"disable\"",
            &format!(
                "sslmode = \"verify-full\"\nsslrootcert = {:?}",
                ca.display().to_string()
            ),
        );
        outbox_cdc::config::Config::parse(&text, std::path::Path::new("tls.toml"), &|_| None)
            .unwrap()
    };
    let env = |n: &str| (n == "OUTBOX_TEST_PG_PASSWORD").then(|| "tls-pw".to_string());
    let refused = outbox_cdc::pg::connect::connect(&sql(&other_ca).postgres, &env)
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(refused.code(), "PG_TLS_FAILED", "{refused}");
    outbox_cdc::pg::connect::connect(&sql(std::path::Path::new(&ca)).postgres, &env)
        .await
        .unwrap();
    std::fs::remove_file(other_ca).unwrap();

    db.client
        .batch_execute(&format!("DROP ROLE {scram}"))
        .await
        .unwrap();
    db.drop(&services).await;
}

#[tokio::test]
async fn set_up_failures_have_their_own_codes() {
    let services = require_services!();
    let db = common::migrated_db(&services, "setup", "outbox.").await;
    let slot = format!("{}_s", db.name);
    let source =
        |slot: &str, publication: &str| rep::source(&services, &db.name, slot, publication);
    let open = |source: outbox_cdc::replication::SourceOptions| {
        let client = &db.client;
        async move {
            rep::start(client, &source)
                .await
                .map(|_| ())
                .map_err(|e| e.code().as_str())
        }
    };
    let mut missing = source(&slot, PUBLICATION);
    missing.create_slot = false;
    let cases = [
        (missing, "SLOT_MISSING", ""),
        (
            source(&slot, "no_such_publication"),
            "PUBLICATION_MISSING",
            "",
        ),
        (
            source(&slot, "elsewhere"),
            "PUBLICATION_MISSING_TABLE",
            "CREATE TABLE public.unrelated (id int); CREATE PUBLICATION elsewhere FOR TABLE public.unrelated",
        ),
        (
            source(&slot, "deletes_only"),
            "PUBLICATION_NOT_INSERT_ONLY",
            "CREATE PUBLICATION deletes_only FOR TABLE public.messaging_outbox WITH (publish = 'delete')",
        ),
    ];
    for (source, code, set_up) in cases {
        db.client.batch_execute(set_up).await.unwrap();
        assert_eq!(open(source).await, Err(code), "{code}");
    }

    let wrong_plugin = format!("{}_td", db.name);
    db.client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'test_decoding')",
            &[&wrong_plugin],
        )
        .await
        .unwrap();
    assert_eq!(
        open(source(&wrong_plugin, PUBLICATION)).await,
        Err("SLOT_WRONG_PLUGIN")
    );
    rep::drop_slot(&db.client, &wrong_plugin).await;

    let other_db = services.fresh_db("setup_other").await;
    let foreign = format!("{}_foreign", db.name);
    other_db
        .client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&foreign],
        )
        .await
        .unwrap();
    assert_eq!(
        open(source(&foreign, PUBLICATION)).await,
        Err("SLOT_WRONG_DATABASE")
    );
    rep::drop_slot(&db.client, &foreign).await;
    other_db.drop(&services).await;

    // A slot held by a running reader: its own code, so a relay can stand by.
    let reader = rep::start(&db.client, &source(&slot, PUBLICATION))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(open(source(&slot, PUBLICATION)).await, Err("SLOT_IN_USE"));
    // And START_REPLICATION on it says the same, from the server's SQLSTATE.
    let mut conn = ReplicationConnection::connect(&rep::options(&services, &db.name))
        .await
        .unwrap();
    let err = conn
        .start_replication(&outbox_cdc::replication::StartReplication {
            slot: &slot,
            from: Lsn::ZERO,
            publication: PUBLICATION,
            messages: outbox_cdc::replication::Messages::Left,
            values: outbox_cdc::replication::Values::Text,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), "SLOT_IN_USE");
    assert_eq!(
        outbox_cdc::error::policy::directive(&err).as_str(),
        "standby"
    );
    reader.stop().await.unwrap();
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

#[tokio::test]
async fn the_supervisor_stops_on_a_definite_failure_instead_of_looping() {
    use outbox_cdc::pipeline::Supervisor;
    use outbox_cdc::replication::{Feedback, Stream};
    let services = require_services!();
    let db = common::migrated_db(&services, "definite", "outbox.").await;
    let slot = format!("{}_s", db.name);
    let mut source = rep::source(&services, &db.name, &slot, PUBLICATION);
    source.create_slot = false;
    let (feedback, _) = Feedback::new(Lsn::ZERO);
    let mut supervisor = Supervisor::new(feedback.clone());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        supervisor.run(&shutdown, |_| async {
            let stream = Stream::open(&db.client, &source, &feedback).await?;
            stream.stop().await?;
            Ok(())
        }),
    )
    .await
    .expect("a definite failure ends the supervisor at once");
    assert_eq!(result.unwrap_err().code(), "SLOT_MISSING");
    assert_eq!(supervisor.restarts(), 0);
    db.drop(&services).await;
}

/// A session whose connection went silent leaves its walsender holding the
/// slot until the server's `wal_sender_timeout`. The next session ends that
/// walsender, known by the pid it recorded, and streams at once; a process
/// it did not record (another relay's) still makes the slot in use.
#[tokio::test]
async fn a_relay_ends_its_own_silent_walsender_and_no_other() {
    let services = require_services!();
    let db = common::migrated_db(&services, "own_walsender", "outbox.").await;
    let slot = format!("{}_s", db.name);
    // Made by a first reader, then held by a connection that stops
    // reading: a silent client, as the server sees one.
    rep::start(
        &db.client,
        &rep::source(&services, &db.name, &slot, PUBLICATION),
    )
    .await
    .unwrap()
    .stop()
    .await
    .unwrap();
    let mut held = ReplicationConnection::connect(&rep::options(&services, &db.name))
        .await
        .unwrap();
    held.start_replication(&outbox_cdc::replication::StartReplication {
        slot: &slot,
        from: Lsn::ZERO,
        publication: PUBLICATION,
        messages: outbox_cdc::replication::Messages::Left,
        values: outbox_cdc::replication::Values::Text,
    })
    .await
    .unwrap();
    let pid = held.backend_pid;
    assert!(pid > 0, "the server's BackendKeyData names its process");
    let active: Option<i32> = db
        .client
        .query_one(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(active, Some(pid));

    let mut other = rep::source(&services, &db.name, &slot, PUBLICATION);
    other.own_walsender = Some(pid + 1);
    let err = rep::start(&db.client, &other)
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(err.code(), "SLOT_IN_USE", "{err}");

    let mut own = rep::source(&services, &db.name, &slot, PUBLICATION);
    own.own_walsender = Some(pid);
    let reader = rep::start(&db.client, &own).await.unwrap();
    let still: i64 = db
        .client
        .query_one(
            "SELECT count(*) FROM pg_stat_replication WHERE pid = $1",
            &[&pid],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(still, 0, "the silent walsender was ended");
    drop(held);
    reader.stop().await.unwrap();
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}
