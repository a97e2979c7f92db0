//! Read rate of the replication reader alone: rows per second from the slot
//! with no Kafka, over a backlog written before the reader starts.
//!
//!     scripts/services.sh start && eval "$(scripts/services.sh env)"
//!     cargo bench --bench slot_read -- [rows] [payload_bytes]
//!
//! Not a test: it asserts nothing about time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_cdc::config::{Config, Secret, SslMode};
use outbox_cdc::migrate::{self, Scope};
use outbox_cdc::replication::connection::{ConnectOptions, ReplicationConnection};
use outbox_cdc::replication::reader::{self, Event, Feedback, ReaderOptions, ReaderStats};
use outbox_cdc::replication::setup::{self, SlotSpec};
use tokio::sync::mpsc;
use tokio_postgres::NoTls;
use tokio_util::sync::CancellationToken;

fn var(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set: eval \"$(scripts/services.sh env)\""))
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let rows: i64 = args
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let payload: i32 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(500);
    let (host, port, user, password) = (
        var("OUTBOX_TEST_PG_HOST"),
        var("OUTBOX_TEST_PG_PORT"),
        var("OUTBOX_TEST_PG_USER"),
        var("OUTBOX_TEST_PG_PASSWORD"),
    );
    let dbname = "bench_slot_read";
    let connect = |db: &str| {
        let url = format!("host={host} port={port} user={user} password={password} dbname={db}");
        async move {
            let (c, conn) = tokio_postgres::connect(&url, NoTls).await.unwrap();
            tokio::spawn(conn);
            c
        }
    };
    let admin = connect("postgres").await;
    let slot = "bench_slot_read";
    admin
        .execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", &[&slot])
        .await
        .unwrap();
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {dbname} WITH (FORCE)"))
        .await
        .unwrap();
    admin
        .batch_execute(&format!("CREATE DATABASE {dbname}"))
        .await
        .unwrap();
    let mut client = connect(dbname).await;
    let cfg = Config::parse(
        &format!("[postgres]\nhost = \"{host}\"\nport = {port}\ndbname = \"{dbname}\"\nuser = \"{user}\"\nsslmode = \"disable\"\n[outbox]\n[kafka]\nbootstrap_servers = \"x\"\n"),
        std::path::Path::new("bench.toml"),
        &|_| None,
    )
    .unwrap();
    migrate::migrate(&mut client, &cfg, Scope::All)
        .await
        .unwrap();

    let opts = ConnectOptions {
        host: host.clone(),
        port: port.parse().unwrap(),
        dbname: dbname.into(),
        user: user.clone(),
        password: Some(Secret::new(password.clone())),
        sslmode: SslMode::Disable,
        sslrootcert: None,
        application_name: "outbox-cdc-bench".into(),
        connect_timeout: Duration::from_secs(10),
    };
    let spec = SlotSpec {
        slot: slot.into(),
        publication: cfg.postgres.publication.clone(),
        schema: "public".into(),
        table: "messaging_outbox".into(),
        create_if_missing: true,
    };
    let mut conn = ReplicationConnection::connect(&opts).await.unwrap();
    let state = setup::prepare(&mut conn, &spec).await.unwrap();

    eprintln!("writing a backlog of {rows} rows with {payload}-byte payloads in transactions of 100 000 rows");
    let t = Instant::now();
    let mut done = 0i64;
    while done < rows {
        let n = (rows - done).min(100_000);
        client
            .execute(
                "INSERT INTO messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key, tenant, traceparent, correlation_id) \
                 SELECT md5('r' || g)::uuid, 'orders', 'OrderPlaced', 1, 'application/json', convert_to(repeat('x', $3), 'UTF8'), \
                        'customer-' || (g % 1000), 'acme', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', 'corr-' || g \
                 FROM generate_series($1::bigint, $2::bigint) g",
                &[&(done + 1), &(done + n), &payload],
            )
            .await
            .unwrap();
        done += n;
    }
    eprintln!("backlog written in {:.1} s", t.elapsed().as_secs_f64());

    let (feedback, settled) = Feedback::new(state.confirmed_flush);
    let (tx, mut events) = mpsc::channel(64);
    let cancel = CancellationToken::new();
    let stats = Arc::new(ReaderStats::default());
    let ropts = ReaderOptions::new(slot, &spec.publication, "public", "messaging_outbox");
    let start = Instant::now();
    let handle = tokio::spawn({
        let (cancel, stats) = (cancel.clone(), stats.clone());
        async move {
            reader::stream(
                conn,
                &ropts,
                state.confirmed_flush,
                tx,
                settled,
                cancel,
                stats,
            )
            .await
        }
    });
    let mut received = 0i64;
    let mut bytes = 0usize;
    while received < rows {
        match events.recv().await {
            Some(Event::Rows(r)) => {
                received += r.len() as i64;
                bytes += r.iter().map(|x| x.size_hint()).sum::<usize>();
            }
            Some(Event::Commit { end_lsn, .. }) => feedback.settle(end_lsn),
            Some(Event::Begin { .. }) => {}
            None => break,
        }
    }
    let secs = start.elapsed().as_secs_f64();
    cancel.cancel();
    let _ = handle.await;
    println!(
        "slot_read: {received} rows in {secs:.2} s = {:.0} rows/s ({:.1} MB/s of decoded row data)",
        received as f64 / secs,
        bytes as f64 / secs / 1e6
    );
    drop(client);
    admin
        .execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", &[&slot])
        .await
        .unwrap();
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {dbname} WITH (FORCE)"))
        .await
        .unwrap();
}
