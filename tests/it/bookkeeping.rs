//! The row bookkeeping's SQL against a real PostgreSQL: marks that wait for
//! rows not yet visible, and the published journal's fold.

use outbox_cdc::pg::row_status::{Guard, Marker};
use std::time::Duration;
use tokio_postgres::Client;
use tokio_postgres::NoTls;

fn var(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} from scripts/services.sh env (a real PostgreSQL)"))
}

/// A client of the test PostgreSQL (the variables `scripts/services.sh env`
/// prints; a missing one fails the test).
async fn connect(db: &str) -> Client {
    let (client, conn) = tokio_postgres::Config::new()
        .host(var("OUTBOX_TEST_PG_HOST"))
        .port(var("OUTBOX_TEST_PG_PORT").parse().unwrap())
        .user(var("OUTBOX_TEST_PG_USER"))
        .password(var("OUTBOX_TEST_PG_PASSWORD"))
        .dbname(db)
        .connect(NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

const INSERT: &str = "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload)
                      VALUES ($1::text::uuid, 'orders', 'T', 1, 'x', '\\x00')";

async fn status(c: &Client, id: &str) -> String {
    c.query_one(
        "SELECT status FROM public.messaging_outbox WHERE message_id = $1::text::uuid",
        &[&id],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test]
async fn a_mark_waits_for_a_row_it_cannot_see_yet_and_skips_a_deleted_one() {
    let db = format!("t_marks_{}", std::process::id());
    let admin = connect("postgres").await;
    for sql in [
        format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"),
        format!("CREATE DATABASE {db}"),
    ] {
        admin.batch_execute(&sql).await.unwrap();
    }
    let mut client = connect(&db).await;
    let text = format!(
        "[postgres]\ndbname = \"{db}\"\nuser = \"u\"\npassword = {{ env = \"X\" }}\n[outbox]\ntopic_prefix = \"outbox.\"\n[kafka]\nbootstrap_servers = \"127.0.0.1:1\"\n"
    );
    let cfg = outbox_cdc::config::Config::parse(&text, std::path::Path::new("t.toml"), &|_| None)
        .unwrap();
    outbox_cdc::ops::migrate::migrate(
        &mut client,
        &cfg.objects(),
        outbox_cdc::ops::migrate::Scope::All,
    )
    .await
    .unwrap();
    let marker = Marker::new(&cfg.outbox);

    // A row committed a moment after the mark starts, as a transaction
    // the walsender sent before its commit was visible.
    let late = "00000000-0000-4000-8000-00000000aa01";
    let mut writer = connect(&db).await;
    let tx = writer.transaction().await.unwrap();
    tx.execute(INSERT, &[&late]).await.unwrap();
    let id = outbox_cdc::row::value::parse_uuid(late).unwrap();
    let marking = {
        let client = connect(&db).await;
        let marker = Marker::new(&cfg.outbox);
        tokio::spawn(async move { marker.published(&client, &[id], Guard::Pending).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!marking.is_finished(), "the mark waits for the row");
    tx.commit().await.unwrap();
    assert_eq!(marking.await.unwrap().unwrap(), 1);
    assert_eq!(status(&client, late).await, "PUBLISHED");

    // A row that is gone is reported, the others are marked.
    let kept = "00000000-0000-4000-8000-00000000aa02";
    client.execute(INSERT, &[&kept]).await.unwrap();
    let gone = outbox_cdc::row::value::parse_uuid("00000000-0000-4000-8000-00000000aa03").unwrap();
    let changed = marker
        .failed(
            &client,
            &[outbox_cdc::row::value::parse_uuid(kept).unwrap(), gone],
            "MESSAGE_TOO_LARGE",
            Guard::Pending,
        )
        .await
        .unwrap();
    assert_eq!(changed, 1);
    assert_eq!(status(&client, kept).await, "FAILED");

    drop((client, writer));
    admin
        .batch_execute(&format!("DROP DATABASE {db} WITH (FORCE)"))
        .await
        .unwrap();
}

fn id(n: u32) -> outbox_cdc::row::value::Uuid {
    outbox_cdc::row::value::parse_uuid(&format!("00000000-0000-4000-8000-{n:012}")).unwrap()
}

async fn statuses(c: &Client) -> Vec<(String, String, bool)> {
    c.query(
        "SELECT message_id::text, status, published_at IS NOT NULL
           FROM public.messaging_outbox ORDER BY message_id",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

#[tokio::test]
async fn recorded_ids_fold_into_published_once_and_only_pending_rows_change() {
    let db = format!("t_journal_{}", std::process::id());
    let admin = connect("postgres").await;
    for sql in [
        format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"),
        format!("CREATE DATABASE {db}"),
    ] {
        admin.batch_execute(&sql).await.unwrap();
    }
    let mut client = connect(&db).await;
    let text = format!(
        "[postgres]\ndbname = \"{db}\"\nuser = \"u\"\npassword = {{ env = \"X\" }}\n[outbox]\ntopic_prefix = \"outbox.\"\n[kafka]\nbootstrap_servers = \"127.0.0.1:1\"\n"
    );
    let cfg = outbox_cdc::config::Config::parse(&text, std::path::Path::new("t.toml"), &|_| None)
        .unwrap();
    outbox_cdc::ops::migrate::migrate(
        &mut client,
        &cfg.objects(),
        outbox_cdc::ops::migrate::Scope::All,
    )
    .await
    .unwrap();
    for n in 1..=4 {
        client
            .execute(
                "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload)
                 VALUES ($1::text::uuid, 'orders', 'T', 1, 'x', '\\x00')",
                &[&id(n).to_string()],
            )
            .await
            .unwrap();
    }
    // Row 4 was refused by Kafka: FAILED is never overwritten.
    client
        .execute(
            "UPDATE public.messaging_outbox SET status = 'FAILED' WHERE message_id = $1::text::uuid",
            &[&id(4).to_string()],
        )
        .await
        .unwrap();
    let journal = outbox_cdc::pg::journal::Journal::new(&cfg.outbox);
    journal.record(&client, &[id(1), id(2)]).await.unwrap();
    // Published again after a restart, and a failed row listed by mistake.
    journal.record(&client, &[id(2), id(4)]).await.unwrap();
    assert_eq!(journal.unfolded(&client).await.unwrap(), (2, 4));
    let recorded: Vec<std::time::SystemTime> = client
        .query("SELECT recorded_at FROM public.outbox_cdc_published", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    client.batch_execute("SELECT pg_sleep(0.05)").await.unwrap();
    assert!(
        statuses(&client)
            .await
            .iter()
            .all(|(_, s, _)| s != "PUBLISHED"),
        "recording changes no row"
    );

    // An entry another folder holds is skipped, not waited for.
    let mut other = connect(&db).await;
    let held = other.transaction().await.unwrap();
    let taken = held
        .query_opt(
            "SELECT 1 FROM public.outbox_cdc_published LIMIT 1 FOR UPDATE",
            &[],
        )
        .await
        .unwrap();
    assert!(taken.is_some());
    let first = journal.fold_all(&client).await.unwrap();
    assert_eq!(first.entries, 1, "one entry was free");
    held.rollback().await.unwrap();
    let second = journal.fold_all(&client).await.unwrap();
    assert_eq!(first.entries + second.entries, 2);
    assert_eq!(first.ids + second.ids, 4);
    assert_eq!(first.marked + second.marked, 2, "rows 1 and 2, once each");
    assert_eq!(journal.unfolded(&client).await.unwrap(), (0, 0));
    assert_eq!(
        statuses(&client).await,
        vec![
            (id(1).to_string(), "PUBLISHED".into(), true),
            (id(2).to_string(), "PUBLISHED".into(), true),
            (id(3).to_string(), "PENDING".into(), false),
            (id(4).to_string(), "FAILED".into(), false),
        ]
    );
    // published_at is when the entry was recorded, not when it was folded.
    let stamped: Vec<bool> = client
        .query(
            "SELECT published_at = ANY($1::timestamptz[]) FROM public.messaging_outbox
              WHERE status = 'PUBLISHED'",
            &[&recorded],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(stamped, vec![true, true]);

    drop((client, other));
    admin
        .batch_execute(&format!("DROP DATABASE {db} WITH (FORCE)"))
        .await
        .unwrap();
}
