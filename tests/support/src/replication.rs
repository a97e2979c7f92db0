//! Starting a reader against a test database.
use std::time::Duration;

use outbox_cdc::config::{Secret, SslMode};
use outbox_cdc::error::Error;
use outbox_cdc::lsn::Lsn;
use outbox_cdc::replication::{ConnectOptions, Event, Events, Feedback, SourceOptions, Stream};
use outbox_cdc::row::value::Timestamp;
use outbox_cdc::row::OutboxRow;

use crate::Services;

pub const PUBLICATION: &str = "outbox_cdc_publication";

pub fn options(s: &Services, dbname: &str) -> ConnectOptions {
    ConnectOptions {
        host: s.pg_host.clone(),
        port: s.pg_port,
        dbname: dbname.to_string(),
        user: s.pg_user.clone(),
        password: Some(secret(&s.pg_password)),
        sslmode: SslMode::Disable,
        sslrootcert: None,
        application_name: "outbox-cdc-test".into(),
        connect_timeout: Duration::from_secs(10),
        user_timeout: Duration::from_secs(30),
        more_hosts: Vec::new(),
    }
}

pub fn secret(s: &str) -> Secret {
    Secret::new(s)
}

/// Streaming `slot` of the test outbox through `publication`; the slot
/// is created when missing.
pub fn source(s: &Services, dbname: &str, slot: &str, publication: &str) -> SourceOptions {
    SourceOptions {
        connect: options(s, dbname),
        slot: slot.to_string(),
        publication: publication.to_string(),
        schema: "public".into(),
        table: "messaging_outbox".into(),
        create_slot: true,
        failover_slot: false,
        streamed_before: false,
        own_walsender: None,
        messages: false,
        binary: true,
        routed: None,
        run: Default::default(),
        tuning: Default::default(),
    }
}

/// A running stream and the feedback that settles it.
pub struct Reader {
    pub stream: Stream,
    pub feedback: Feedback,
    pub start: Lsn,
}

impl Reader {
    pub fn events(&mut self) -> &mut Events {
        &mut self.stream.events
    }

    /// Stops the reader; the position it confirmed last.
    pub async fn stop(self) -> Result<Lsn, Error> {
        self.stream.stop().await
    }
}

pub async fn start(sql: &tokio_postgres::Client, opts: &SourceOptions) -> Result<Reader, Error> {
    let (feedback, _) = Feedback::new(Lsn::ZERO);
    let stream = Stream::open(sql, opts, &feedback).await?;
    let start = stream.start;
    Ok(Reader {
        stream,
        feedback,
        start,
    })
}

/// A transaction as the consumer sees it.
#[derive(Debug, Clone)]
pub struct Tx {
    pub xid: u32,
    pub final_lsn: Lsn,
    pub commit_lsn: Lsn,
    pub end_lsn: Lsn,
    pub begin_time: Timestamp,
    pub commit_time: Timestamp,
    pub rows: Vec<OutboxRow>,
}

/// Assembles events into transactions until `rows` rows arrived (or the
/// timeout passed), checking the Begin/Rows/Commit grammar as it goes.
pub async fn collect(events: &mut Events, rows: usize, timeout: Duration) -> Vec<Tx> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut done: Vec<Tx> = Vec::new();
    let mut open: Option<Tx> = None;
    let mut count = 0;
    while count < rows || open.is_some() {
        let Ok(Some(event)) = tokio::time::timeout_at(deadline, events.recv()).await else {
            break;
        };
        match event {
            Event::Begin {
                xid,
                final_lsn,
                commit_time,
            } => {
                assert!(open.is_none(), "Begin inside a transaction");
                open = Some(Tx {
                    xid,
                    final_lsn,
                    commit_lsn: Lsn::ZERO,
                    end_lsn: Lsn::ZERO,
                    begin_time: commit_time,
                    commit_time,
                    rows: Vec::new(),
                });
            }
            Event::Changes(_) => panic!("the messaging outbox streamed a routed table's changes"),
            Event::CaughtUp => assert!(open.is_none(), "CaughtUp inside a transaction"),
            Event::Rows(r) => {
                count += r.len();
                open.as_mut()
                    .expect("Rows outside a transaction")
                    .rows
                    .extend(r);
            }
            Event::Commit {
                xid,
                commit_lsn,
                end_lsn,
                commit_time,
            } => {
                let mut tx = open.take().expect("Commit outside a transaction");
                assert_eq!(tx.xid, xid);
                tx.commit_lsn = commit_lsn;
                tx.end_lsn = end_lsn;
                tx.commit_time = commit_time;
                done.push(tx);
            }
        }
    }
    done
}

/// Waits until a relay streams from `slot`. A slot is active while it
/// is being created too, before its consistent point, so `active` alone
/// would let a test write rows the slot will never carry; a confirmed
/// position is set only once creation is done.
pub async fn wait_streaming(client: &tokio_postgres::Client, slot: &str) {
    let streaming = "active AND confirmed_flush_lsn IS NOT NULL";
    wait_slot(client, slot, streaming, 1, "nothing streamed from").await;
}

/// Polls (for up to 30 s) until `count` slots named `slot` match `condition`.
async fn wait_slot(
    client: &tokio_postgres::Client,
    slot: &str,
    condition: &str,
    count: i64,
    failure: &str,
) {
    let sql =
        format!("SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND {condition}");
    for _ in 0..300 {
        let n: i64 = client.query_one(&sql, &[&slot]).await.unwrap().get(0);
        if n == count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{failure} {slot}");
}

async fn lsn_of(client: &tokio_postgres::Client, sql: &str) -> Lsn {
    client
        .query_one(sql, &[])
        .await
        .unwrap()
        .get::<_, String>(0)
        .parse()
        .unwrap()
}

/// The WAL insert position: at or after the end of every record
/// written so far (a commit that returned included).
pub async fn insert_lsn(client: &tokio_postgres::Client) -> Lsn {
    lsn_of(client, "SELECT pg_current_wal_insert_lsn()::text").await
}

/// The server's current WAL position.
pub async fn current_lsn(client: &tokio_postgres::Client) -> Lsn {
    lsn_of(client, "SELECT pg_current_wal_lsn()::text").await
}

/// Waits until no walsender holds `slot`: a client's last status update
/// is processed by its walsender after the client has gone, so a
/// confirmed position read before this can still move.
pub async fn wait_inactive(client: &tokio_postgres::Client, slot: &str) {
    wait_slot(client, slot, "active", 0, "a walsender still holds").await;
}

/// `confirmed_flush_lsn` of a slot.
pub async fn confirmed_flush(client: &tokio_postgres::Client, slot: &str) -> Lsn {
    let text: Option<String> = client
        .query_opt(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()
        .and_then(|r| r.get(0));
    text.unwrap_or_else(|| "0/0".into()).parse().unwrap()
}

/// Waits until the slot's confirmed position satisfies `ok`.
pub async fn wait_confirmed(
    client: &tokio_postgres::Client,
    slot: &str,
    ok: impl Fn(Lsn) -> bool,
    timeout: Duration,
) -> Lsn {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let lsn = confirmed_flush(client, slot).await;
        if ok(lsn) || tokio::time::Instant::now() > deadline {
            return lsn;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn drop_slot(client: &tokio_postgres::Client, slot: &str) {
    for _ in 0..50 {
        let r = client
            .execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active",
                &[&slot],
            )
            .await
            .unwrap();
        let left: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .unwrap()
            .get(0);
        if r > 0 || left == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("slot {slot} stayed active");
}
