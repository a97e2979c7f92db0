//! Shared set-up for integration tests: the real PostgreSQL and Kafka that
//! `scripts/services.sh` starts, found through the variables it exports.
//!
//! A missing service fails the test. Only for local work, and never when `CI`
//! is set, `OUTBOX_TEST_ALLOW_MISSING_SERVICES=1` turns that into a skip.
#![allow(dead_code)]

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use outbox_cdc::config::Config;
use tokio_postgres::{Client, NoTls};

pub struct Services {
    pub pg_host: String,
    pub pg_port: u16,
    pub pg_user: String,
    pub pg_password: String,
    pub kafka_bootstrap: String,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The `[postgres]`, `[outbox]` and `[kafka]` tables every test
/// configuration starts with; callers append the tables they need.
pub fn config_head(
    (host, port, user): (&str, u16, &str),
    db: &str,
    slot: Option<&str>,
    topic_prefix: &str,
    kafka: &str,
) -> String {
    let slot = slot
        .map(|s| format!("slot = \"{s}\"\n"))
        .unwrap_or_default();
    format!(
        r#"[postgres]
host = "{host}"
port = {port}
dbname = "{db}"
user = "{user}"
password = {{ env = "OUTBOX_TEST_PG_PASSWORD" }}
sslmode = "disable"
{slot}
[outbox]
topic_prefix = "{topic_prefix}"

[kafka]
bootstrap_servers = "{kafka}"
"#
    )
}

/// One keyed outbox row whose per-key sequence number (in `payload` and
/// `correlation_id`) is taken under the key's row lock in `key_seq`, so per
/// key that number's order is the commit order; `causation_id` holds the
/// WAL insert position. Returns the id and that position.
pub const KEYED_INSERT: &str = "WITH s AS (UPDATE public.key_seq SET n = n + 1 WHERE k = $1 RETURNING n)
     INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version,
         content_type, payload, partition_key, correlation_id, causation_id)
     SELECT gen_random_uuid(), 'keyed', 'K', 1, 'text/plain', convert_to(s.n::text, 'UTF8'), $1, s.n::text,
            pg_current_wal_insert_lsn()::text FROM s
     RETURNING message_id::text, causation_id";

/// One row [`write_keyed`] committed.
#[derive(Debug, Clone, Copy)]
pub struct Written {
    /// At or after the end of its commit record.
    pub committed_by: outbox_cdc::lsn::Lsn,
    /// Its source transaction: (writer, transaction number).
    pub tx: (usize, usize),
}

/// Writers commit transactions of 1 to 5 rows whose per-key sequence number
/// is assigned under the key's row lock, so for each key that number's order
/// is the commit order.
pub async fn write_keyed(
    services: &Services,
    db: &str,
    writers: usize,
    per_writer: usize,
    keys: usize,
) -> std::collections::HashMap<String, Written> {
    let setup = services.connect(db).await;
    setup
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS public.key_seq (k text PRIMARY KEY, n bigint NOT NULL);
             INSERT INTO public.key_seq SELECT 'key-' || g, 0 FROM generate_series(0, {}) g ON CONFLICT DO NOTHING;",
            keys - 1
        ))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let mut client = services.connect(db).await;
        tasks.push(tokio::spawn(async move {
            let mut written = 0;
            let mut t = 0usize;
            let mut committed = Vec::new();
            while written < per_writer {
                let tx = client.transaction().await.unwrap();
                let rows = (1 + (w + t) % 5).min(per_writer - written);
                let mut ids = Vec::new();
                for i in 0..rows {
                    let key = format!("key-{}", (w * 7919 + t * 31 + i * 17) % keys);
                    let row = tx.query_one(KEYED_INSERT, &[&key]).await.unwrap();
                    ids.push(row.get::<_, String>(0));
                }
                tx.commit().await.unwrap();
                let committed_by = replication::insert_lsn(&client).await;
                committed.extend(ids.into_iter().map(|id| {
                    (
                        id,
                        Written {
                            committed_by,
                            tx: (w, t),
                        },
                    )
                }));
                written += rows;
                t += 1;
            }
            committed
        }));
    }
    let mut committed = std::collections::HashMap::new();
    for t in tasks {
        committed.extend(t.await.unwrap());
    }
    committed
}

/// [`write_keyed`] on its own task, beside what the test does meanwhile.
pub fn spawn_write_keyed(
    db: &str,
    writers: usize,
    per_writer: usize,
    keys: usize,
) -> tokio::task::JoinHandle<std::collections::HashMap<String, Written>> {
    let services = services().expect("services");
    let db = db.to_string();
    tokio::spawn(async move { write_keyed(&services, &db, writers, per_writer, keys).await })
}

/// Deterministic but irregular pauses between kills: 300 ms to 2 s.
pub struct KillTimes(u64);

impl KillTimes {
    pub fn new(seed: u64) -> KillTimes {
        KillTimes(seed ^ std::process::id() as u64 | 1)
    }

    pub fn next_pause(&mut self) -> std::time::Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        std::time::Duration::from_millis(300 + self.0 % 1700)
    }
}

/// The polling platform's claim statement (as its relay runs it), with a
/// configurable lease.
pub fn claim_sql(owner: &str, lease_secs: i32, limit: i32) -> String {
    format!(
        "UPDATE public.messaging_outbox o
            SET status = 'IN_FLIGHT', lease_expires_at = now() + interval '{lease_secs} seconds',
                lease_owner = '{owner}', lease_token = o.lease_token + 1
          WHERE o.message_id IN (
                SELECT message_id FROM public.messaging_outbox
                 WHERE status IN ('PENDING', 'AMBIGUOUS', 'IN_FLIGHT')
                   AND (lease_expires_at IS NULL OR lease_expires_at <= now())
                   AND (next_attempt_at IS NULL OR next_attempt_at <= now())
                   AND attempts < 10
                 ORDER BY created_at LIMIT {limit} FOR UPDATE SKIP LOCKED)
          RETURNING o.message_id::text, o.lease_token"
    )
}

/// The services, or `None` when a local run opted out of them.
pub fn services() -> Option<Services> {
    let found = (|| {
        Some(Services {
            pg_host: var("OUTBOX_TEST_PG_HOST")?,
            pg_port: var("OUTBOX_TEST_PG_PORT")?.parse().ok()?,
            pg_user: var("OUTBOX_TEST_PG_USER")?,
            pg_password: var("OUTBOX_TEST_PG_PASSWORD")?,
            kafka_bootstrap: var("OUTBOX_TEST_KAFKA_BOOTSTRAP")?,
        })
    })();
    if found.is_some() {
        return found;
    }
    let in_ci = var("CI").is_some_and(|v| v != "false" && v != "0");
    let opted_out = var("OUTBOX_TEST_ALLOW_MISSING_SERVICES").as_deref() == Some("1");
    if opted_out && !in_ci {
        eprintln!("SKIPPED: OUTBOX_TEST_* service variables are not set (OUTBOX_TEST_ALLOW_MISSING_SERVICES=1)");
        return None;
    }
    panic!(
        "the integration tests need PostgreSQL and Kafka: run `scripts/test.sh`, or \
         `scripts/services.sh start && eval \"$(scripts/services.sh env)\"` before `cargo test`"
    );
}

/// Skips the calling test when services are absent and skipping is allowed.
#[macro_export]
macro_rules! require_services {
    () => {
        match common::services() {
            Some(s) => s,
            None => return,
        }
    };
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A throwaway database of its own for one test.
pub struct TestDb {
    pub name: String,
    pub client: Client,
    services_pg: (String, u16, String, String),
}

impl Services {
    pub async fn connect(&self, dbname: &str) -> Client {
        let (client, conn) = tokio_postgres::Config::new()
            .host(&self.pg_host)
            .port(self.pg_port)
            .user(&self.pg_user)
            .password(&self.pg_password)
            .dbname(dbname)
            .connect(NoTls)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the test PostgreSQL: {e}"));
        tokio::spawn(async move {
            let _ = conn.await;
        });
        client
    }

    /// Creates a fresh database named after the test.
    pub async fn fresh_db(&self, label: &str) -> TestDb {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("t_{}_{}_{}", label, std::process::id(), n);
        let admin = self.connect("postgres").await;
        for sql in [
            format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            format!("CREATE DATABASE {name}"),
        ] {
            admin.batch_execute(&sql).await.unwrap();
        }
        let client = self.connect(&name).await;
        TestDb {
            name,
            client,
            services_pg: (
                self.pg_host.clone(),
                self.pg_port,
                self.pg_user.clone(),
                self.pg_password.clone(),
            ),
        }
    }
}

impl TestDb {
    /// Declares the outbox CHANGE_DATA_CAPTURE (what a cutover does first).
    pub async fn declare_cdc(&self) {
        self.client
            .execute(
                "INSERT INTO public.outbox_relay_mode (outbox_table, mode) VALUES ('public.messaging_outbox', 'CHANGE_DATA_CAPTURE')
                 ON CONFLICT (outbox_table) DO UPDATE SET mode = EXCLUDED.mode",
                &[],
            )
            .await
            .unwrap();
    }

    /// A relay configuration pointing at this database.
    pub fn config(&self, topic_prefix: &str) -> Config {
        let (host, port, user, _) = &self.services_pg;
        let text = config_head(
            (host, *port, user),
            &self.name,
            None,
            topic_prefix,
            "127.0.0.1:1",
        );
        Config::parse(&text, Path::new("test.toml"), &|n| std::env::var(n).ok())
            .unwrap_or_else(|e| panic!("test configuration: {e}"))
    }

    /// Drops the database (replication slots on it must be gone first).
    pub async fn drop(self, services: &Services) {
        drop(self.client);
        let admin = services.connect("postgres").await;
        admin
            .batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .await
            .unwrap();
    }
}

/// A second set of services (PostgreSQL, and Kafka when asked) on their
/// own ports and state directory, configured through `scripts/services.sh`'s
/// variables; stopped and removed on drop.
pub struct ExtraServices {
    envs: Vec<(&'static str, String)>,
    state: std::path::PathBuf,
}

impl ExtraServices {
    /// Starts what `starts` names (`start-postgres`, `start-kafka`) with
    /// these variables.
    pub fn start(label: &str, envs: &[(&'static str, String)], starts: &[&str]) -> ExtraServices {
        let state = std::env::temp_dir().join(format!("outbox-cdc-{label}-{}", std::process::id()));
        let mut all = vec![("OUTBOX_TEST_STATE_DIR", state.display().to_string())];
        all.extend(envs.iter().cloned());
        let s = ExtraServices { envs: all, state };
        for arg in starts {
            s.script(arg);
        }
        s
    }

    fn script(&self, arg: &str) {
        let script = std::env::var("OUTBOX_TEST_SERVICES")
            .expect("OUTBOX_TEST_SERVICES from scripts/services.sh env");
        let mut cmd = std::process::Command::new("bash");
        cmd.arg(script).arg(arg);
        for (k, v) in &self.envs {
            cmd.env(k, v);
        }
        let out = cmd.stdin(std::process::Stdio::null()).output().unwrap();
        assert!(
            out.status.success(),
            "services.sh {arg}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for ExtraServices {
    fn drop(&mut self) {
        self.script("stop");
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// The secured listener `scripts/services.sh` starts beside the plain one:
/// TLS with the test CA, SASL/SCRAM-SHA-512, ACLs for the relay's principal
/// on topics under `prefix`.
pub struct Secured {
    pub bootstrap: String,
    pub user: String,
    pub password_file: String,
    pub prefix: String,
    pub ca: String,
}

impl Secured {
    pub fn from_env() -> Secured {
        let v = |n: &str| {
            var(n).unwrap_or_else(|| {
                panic!("{n} from scripts/services.sh env (the secured Kafka listener)")
            })
        };
        Secured {
            bootstrap: v("OUTBOX_TEST_KAFKA_SECURE_BOOTSTRAP"),
            user: v("OUTBOX_TEST_KAFKA_RELAY_USER"),
            password_file: v("OUTBOX_TEST_KAFKA_RELAY_PASSWORD_FILE"),
            prefix: v("OUTBOX_TEST_KAFKA_SECURE_PREFIX"),
            ca: v("OUTBOX_TEST_PG_CA"),
        }
    }

    /// `[kafka]` and `[kafka.properties]` for the relay over SASL_SSL, the
    /// password as a secret reference to `password_file`.
    pub fn kafka_tables(&self, password_file: &str, ca: &str) -> String {
        format!(
            r#"[kafka]
bootstrap_servers = "{}"

[kafka.properties]
"security.protocol" = "SASL_SSL"
"sasl.mechanisms" = "SCRAM-SHA-512"
"sasl.username" = "{}"
"sasl.password" = {{ file = "{password_file}" }}
"ssl.ca.location" = "{ca}"
"message.timeout.ms" = "120000"
"#,
            self.bootstrap, self.user
        )
    }
}

/// A port nothing listens on now (the kernel's choice), for a process the
/// test starts next.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// How many outbox rows have `status`.
pub async fn rows_with_status(client: &Client, status: &str) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM public.messaging_outbox WHERE status = $1",
            &[&status],
        )
        .await
        .unwrap()
        .get(0)
}

/// The first text column of every row of `sql`.
pub async fn texts(client: &Client, sql: &str) -> Vec<String> {
    client
        .query(sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Two text columns of every row of `sql` (NULL as an empty string).
pub async fn text_pairs(client: &Client, sql: &str) -> Vec<(String, String)> {
    client
        .query(sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let text = |i| r.get::<_, Option<String>>(i).unwrap_or_default();
            (text(0), text(1))
        })
        .collect()
}

/// Waits until no row is `PENDING`: every id being in Kafka does not mean
/// the relay has caught up (after a restart it may still be publishing the
/// replay), and only what it has read can be marked and confirmed.
pub async fn wait_until_marked(client: &Client) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while rows_with_status(client, "PENDING").await > 0 {
        if std::time::Instant::now() >= deadline {
            let stuck = text_pairs(
                client,
                "SELECT message_id::text, causation_id FROM public.messaging_outbox
                  WHERE status = 'PENDING' ORDER BY causation_id LIMIT 20",
            )
            .await;
            let slots = text_pairs(
                client,
                "SELECT slot_name::text, confirmed_flush_lsn::text FROM pg_replication_slots",
            )
            .await;
            panic!(
                "{} rows stayed PENDING: the relay never caught up; the first (id, causation_id): {stuck:?}; slots {slots:?}",
                rows_with_status(client, "PENDING").await
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// After a clean stop the slot has confirmed every transaction, so the
/// bookkeeping (the table's status, or the journal not yet folded into it)
/// must say every row went out, and nothing it says went out may be missing
/// from Kafka.
pub async fn bookkeeping_matches_kafka(
    client: &tokio_postgres::Client,
    in_kafka: &std::collections::BTreeMap<String, Vec<&kafka::Consumed>>,
) {
    let statuses = text_pairs(
        client,
        "WITH j AS (SELECT DISTINCT unnest(message_ids) AS id FROM public.outbox_cdc_published)
         SELECT o.message_id::text,
                CASE WHEN o.status = 'PENDING' AND j.id IS NOT NULL THEN 'JOURNALED' ELSE o.status END
           FROM public.messaging_outbox o LEFT JOIN j ON j.id = o.message_id",
    )
    .await;
    let pending: Vec<&String> = statuses
        .iter()
        .filter(|(_, s)| s == "PENDING")
        .map(|(id, _)| id)
        .collect();
    assert!(
        pending.is_empty(),
        "{} of {} rows are PENDING after the slot confirmed them (e.g. {:?})",
        pending.len(),
        statuses.len(),
        pending.iter().take(3).collect::<Vec<_>>()
    );
    let missing: Vec<&String> = statuses
        .iter()
        .filter(|(id, s)| (s == "PUBLISHED" || s == "JOURNALED") && !in_kafka.contains_key(id))
        .map(|(id, _)| id)
        .collect();
    assert!(
        missing.is_empty(),
        "PUBLISHED but not in Kafka: {missing:?}"
    );
}

/// A topic prefix no other test (or earlier run) uses.
pub fn unique_prefix(label: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        % 1_000_000_000;
    format!("t{}{label}{nanos}.", std::process::id())
}

/// A fresh database with every migration applied.
pub async fn migrated_db(services: &Services, label: &str, topic_prefix: &str) -> TestDb {
    let mut db = services.fresh_db(label).await;
    let cfg = db.config(topic_prefix);
    outbox_cdc::ops::migrate::migrate(&mut db.client, &cfg, outbox_cdc::ops::migrate::Scope::All)
        .await
        .unwrap();
    db
}

/// Restarts the test PostgreSQL (fast shutdown). The server gets its own log
/// file and no inherited stdio, so it cannot hold the test runner's pipes.
pub fn restart_postgres() {
    use std::process::{Command, Stdio};
    let bin = std::env::var("OUTBOX_TEST_PG_BIN").expect("OUTBOX_TEST_PG_BIN");
    let data = std::env::var("OUTBOX_TEST_PG_DATA").expect("OUTBOX_TEST_PG_DATA");
    let log = format!("{data}/server.log");
    let pg_ctl = format!("{bin}/pg_ctl");
    let args = [
        "-D",
        data.as_str(),
        "-l",
        log.as_str(),
        "-m",
        "fast",
        "-w",
        "-t",
        "120",
        "restart",
    ];
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false);
    let mut cmd = if is_root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", pg_ctl.as_str()]);
        c
    } else {
        Command::new(&pg_ctl)
    };
    let status = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("pg_ctl");
    assert!(status.success(), "pg_ctl restart failed");
}

pub mod replication {
    //! Starting a reader against a test database.
    use std::time::Duration;

    use outbox_cdc::config::{Secret, SslMode};
    use outbox_cdc::contract::row::OutboxRow;
    use outbox_cdc::contract::value::Timestamp;
    use outbox_cdc::error::Error;
    use outbox_cdc::lsn::Lsn;
    use outbox_cdc::replication::{ConnectOptions, Event, Events, Feedback, SourceOptions, Stream};

    use super::Services;

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
            messages: false,
            binary: true,
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

    pub async fn start(
        sql: &tokio_postgres::Client,
        opts: &SourceOptions,
    ) -> Result<Reader, Error> {
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
        let sql = format!(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND {condition}"
        );
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
}

pub mod kafka {
    //! Reading what landed in Kafka, and where Kafka's Java producer would
    //! have put it.
    use std::collections::{BTreeMap, HashSet};
    use std::time::{Duration, Instant};

    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Headers;
    use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

    /// Per key, the sequence numbers of first deliveries in offset order.
    pub fn first_delivery_order(records: &[Consumed]) -> BTreeMap<String, Vec<u64>> {
        let mut sorted: Vec<&Consumed> = records.iter().collect();
        sorted.sort_by_key(|r| (r.partition, r.offset));
        let mut seen = HashSet::new();
        let mut per_key: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for r in sorted {
            if !seen.insert(r.id()) {
                continue;
            }
            let key = String::from_utf8(r.key.clone().unwrap()).unwrap();
            let n: u64 = std::str::from_utf8(r.header("msg.correlation-id").unwrap())
                .unwrap()
                .parse()
                .unwrap();
            per_key.entry(key).or_default().push(n);
        }
        per_key
    }

    /// Kafka's `Utils.murmur2`, written out here so tests do not trust the
    /// producer's own placement.
    pub fn java_murmur2(data: &[u8]) -> i32 {
        let m: u32 = 0x5bd1_e995;
        let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
        let chunks = data.chunks_exact(4);
        let tail = chunks.remainder();
        for c in chunks {
            let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            k = k.wrapping_mul(m);
            k ^= k >> 24;
            k = k.wrapping_mul(m);
            h = h.wrapping_mul(m);
            h ^= k;
        }
        if tail.len() >= 3 {
            h ^= (tail[2] as u32) << 16;
        }
        if tail.len() >= 2 {
            h ^= (tail[1] as u32) << 8;
        }
        if !tail.is_empty() {
            h ^= tail[0] as u32;
            h = h.wrapping_mul(m);
        }
        h ^= h >> 13;
        h = h.wrapping_mul(m);
        h ^= h >> 15;
        h as i32
    }

    /// Java's partitioner for a keyed record.
    pub fn java_partition(key: &[u8], partitions: i32) -> i32 {
        (java_murmur2(key) & 0x7fff_ffff) % partitions
    }

    #[derive(Debug, Clone)]
    pub struct Consumed {
        pub topic: String,
        pub partition: i32,
        pub offset: i64,
        pub key: Option<Vec<u8>>,
        pub value: Option<Vec<u8>>,
        pub headers: Vec<(String, Option<Vec<u8>>)>,
        pub timestamp: Option<i64>,
    }

    impl Consumed {
        pub fn header(&self, name: &str) -> Option<&[u8]> {
            self.headers
                .iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, v)| v.as_deref())
        }
        pub fn id(&self) -> String {
            String::from_utf8(self.header("id").expect("an id header").to_vec()).unwrap()
        }
    }

    /// Whether a topic exists now (no waiting).
    pub fn topic_exists(bootstrap: &str, topic: &str) -> bool {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .create()
            .unwrap();
        consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .map(|md| {
                md.topics()
                    .iter()
                    .any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
            })
            .unwrap_or(false)
    }

    /// Creates a topic as the harness's super user (a least-privilege
    /// principal may not auto-create it).
    pub async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) {
        use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
        let admin: AdminClient<rdkafka::client::DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .create()
            .unwrap();
        let t = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
        for r in admin
            .create_topics([&t], &AdminOptions::new())
            .await
            .unwrap()
        {
            r.unwrap_or_else(|(t, e)| panic!("creating topic {t}: {e}"));
        }
    }

    /// Creates topics by the broker's defaults (a producer's metadata request
    /// auto-creates them) and returns once every partition is served at its
    /// leader. For Debezium's Java producer: Kafka before 4.5 (KAFKA-15591)
    /// lets the second batch to a just created partition in ahead of a
    /// refused first one, whose retries then fail OUT_OF_ORDER_SEQUENCE_NUMBER
    /// until Debezium's engine gives up. The relay waits for this itself.
    pub fn serve_topics(bootstrap: &str, topics: &[&str]) {
        use rdkafka::producer::{BaseProducer, Producer};
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .create()
            .unwrap();
        for topic in topics {
            if let Err(e) = outbox_cdc::kafka::readiness::wait_until_served(
                producer.client(),
                topic,
                Duration::from_secs(60),
            ) {
                panic!("topic {topic} was not served within 60 s: {e}");
            }
        }
    }

    /// Partition counts of topics (waiting for them to exist).
    pub fn partitions(bootstrap: &str, topic: &str) -> i32 {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .create()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let md = consumer
                .fetch_metadata(Some(topic), Duration::from_secs(10))
                .unwrap();
            if let Some(t) = md
                .topics()
                .iter()
                .find(|t| t.name() == topic && t.error().is_none())
            {
                if !t.partitions().is_empty() {
                    return t.partitions().len() as i32;
                }
            }
            assert!(Instant::now() < deadline, "topic {topic} never appeared");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Reads `topics` from the beginning until `count` records arrived or
    /// `idle` passed without a new one.
    pub fn consume(
        bootstrap: &str,
        topics: &[&str],
        count: usize,
        idle: Duration,
    ) -> Vec<Consumed> {
        consume_until(bootstrap, topics, idle, READ_UNCOMMITTED, |records, _| {
            records >= count
        })
    }

    /// librdkafka's consumer default, as the other helpers read.
    pub const READ_UNCOMMITTED: &str = "read_uncommitted";
    pub const READ_COMMITTED: &str = "read_committed";

    /// Reads `topics` from the beginning at `isolation` until `idle` passed
    /// without a record: everything there is.
    pub fn consume_all(
        bootstrap: &str,
        topics: &[&str],
        idle: Duration,
        isolation: &str,
    ) -> Vec<Consumed> {
        consume_until(bootstrap, topics, idle, isolation, |_, _| false)
    }

    /// [`consume_ids`] at `isolation`.
    pub fn consume_ids_at(
        bootstrap: &str,
        topics: &[&str],
        distinct: usize,
        idle: Duration,
        isolation: &str,
    ) -> Vec<Consumed> {
        consume_until(bootstrap, topics, idle, isolation, |_, ids| ids >= distinct)
    }

    /// Reads `topics` from the beginning until `distinct` message ids arrived
    /// (duplicates included in the result) or `idle` passed without a record.
    pub fn consume_ids(
        bootstrap: &str,
        topics: &[&str],
        distinct: usize,
        idle: Duration,
    ) -> Vec<Consumed> {
        consume_until(bootstrap, topics, idle, READ_UNCOMMITTED, |_, ids| {
            ids >= distinct
        })
    }

    /// Reads `topics` from the beginning until `done(records, distinct ids)`
    /// or until `idle` passed without a record.
    fn consume_until(
        bootstrap: &str,
        topics: &[&str],
        idle: Duration,
        isolation: &str,
        done: impl Fn(usize, usize) -> bool,
    ) -> Vec<Consumed> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("isolation.level", isolation)
            .set("group.id", "outbox-cdc-tests")
            .set("enable.auto.commit", "false")
            .set("fetch.max.bytes", "104857600")
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        for topic in topics {
            for p in 0..partitions(bootstrap, topic) {
                tpl.add_partition_offset(topic, p, Offset::Beginning)
                    .unwrap();
            }
        }
        consumer.assign(&tpl).unwrap();
        let mut out: Vec<Consumed> = Vec::new();
        let mut ids = std::collections::HashSet::new();
        let mut last = Instant::now();
        while !done(out.len(), ids.len()) && last.elapsed() < idle {
            let Some(result) = consumer.poll(Duration::from_millis(200)) else {
                continue;
            };
            // Transient client errors (a broker connection dropped on a
            // loaded machine) come through poll too; the client recovers.
            let m = match result {
                Ok(m) => m,
                Err(e) => {
                    eprintln!("consumer: {e}");
                    continue;
                }
            };
            last = Instant::now();
            let c = Consumed {
                topic: m.topic().to_string(),
                partition: m.partition(),
                offset: m.offset(),
                key: m.key().map(<[u8]>::to_vec),
                value: m.payload().map(<[u8]>::to_vec),
                headers: m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                            .collect()
                    })
                    .unwrap_or_default(),
                timestamp: m.timestamp().to_millis(),
            };
            ids.insert(c.id());
            out.push(c);
        }
        out
    }

    /// The offset metadata `group` committed for partition 0 of `topic`
    /// (transactional delivery's progress), read as a read_committed client.
    pub fn committed_metadata(bootstrap: &str, group: &str, topic: &str) -> Option<(i64, String)> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", group)
            .set("isolation.level", "read_committed")
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(topic, 0);
        let tpl = consumer
            .committed_offsets(tpl, Duration::from_secs(30))
            .unwrap();
        let elem = tpl.elements().into_iter().next()?;
        match elem.offset() {
            Offset::Offset(o) => Some((o, elem.metadata().to_string())),
            _ => None,
        }
    }

    /// Creates a topic with topic-level settings, as the harness's super user.
    pub async fn create_topic_with(
        bootstrap: &str,
        topic: &str,
        partitions: i32,
        settings: &[(&str, &str)],
    ) {
        use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
        let admin: AdminClient<rdkafka::client::DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .create()
            .unwrap();
        let mut t = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
        for (k, v) in settings {
            t = t.set(k, v);
        }
        for r in admin
            .create_topics([&t], &AdminOptions::new())
            .await
            .unwrap()
        {
            r.unwrap_or_else(|(t, e)| panic!("creating topic {t}: {e}"));
        }
    }

    /// Records grouped by message id, in (partition, offset) order per key.
    pub fn by_id(records: &[Consumed]) -> BTreeMap<String, Vec<&Consumed>> {
        let mut map: BTreeMap<String, Vec<&Consumed>> = BTreeMap::new();
        for r in records {
            map.entry(r.id()).or_default().push(r);
        }
        map
    }
}

pub mod relay {
    //! The relay binary as a child process.
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use super::Services;

    /// The usual set-up: slot `<db>_relay`, no extra settings; returns the
    /// slot's name and the configuration's path.
    pub fn default_config(s: &Services, db: &str, topic_prefix: &str) -> (String, PathBuf) {
        let slot = format!("{db}_relay");
        let path = config(s, db, topic_prefix, &slot, "");
        (slot, path)
    }

    /// Writes a relay configuration for `db` and returns its path.
    pub fn config(s: &Services, db: &str, topic_prefix: &str, slot: &str, extra: &str) -> PathBuf {
        // Per process, so a failed run's logs stay for a look; the first call
        // removes those of processes that have ended, so no more pile up.
        static SWEPT: std::sync::Once = std::sync::Once::new();
        let root = std::env::temp_dir().join("outbox-cdc-relay");
        SWEPT.call_once(|| {
            for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
                let pid = entry.file_name().to_string_lossy().parse::<u32>().ok();
                if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        });
        let dir = root.join(std::process::id().to_string()).join(db);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{slot}.toml"));
        let head = super::config_head(
            (&s.pg_host, s.pg_port, &s.pg_user),
            db,
            Some(slot),
            topic_prefix,
            &s.kafka_bootstrap,
        );
        let text = format!(
            r#"{head}
[kafka.properties]
"message.timeout.ms" = "120000"

[relay]
drain_timeout_secs = 20
create_slot = true
{extra}
"#
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A relay's log without terminal colour codes.
    pub fn plain(log: &str) -> String {
        let mut plain = String::with_capacity(log.len());
        let mut chars = log.chars();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                for d in chars.by_ref() {
                    if d == 'm' {
                        break;
                    }
                }
            } else {
                plain.push(c);
            }
        }
        plain
    }

    /// The WARN and ERROR lines of each log, for a failure message to carry.
    pub fn warnings_in(logs: &[String]) -> String {
        let mut out = String::new();
        for (i, log) in logs.iter().enumerate() {
            out.push_str(&format!("--- session {i}\n"));
            for line in plain(log)
                .lines()
                .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    /// The settled positions from which a relay's log says it replayed.
    pub fn replays_in(log: &str) -> Vec<outbox_cdc::lsn::Lsn> {
        plain(log)
            .lines()
            .filter(|l| l.contains("restarting the pipeline"))
            .filter_map(|l| l.split("settled=").nth(1))
            .filter_map(|rest| rest.split_whitespace().next())
            .filter_map(|lsn| lsn.parse().ok())
            .collect()
    }

    pub struct RelayProcess {
        pub child: Child,
        pub log: PathBuf,
    }

    impl RelayProcess {
        pub fn spawn(config: &Path) -> RelayProcess {
            let log = config.with_file_name(format!(
                "{}-{}.log",
                config.file_stem().unwrap().to_string_lossy(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos()
            ));
            let file = std::fs::File::create(&log).unwrap();
            let child = Command::new(env!("CARGO_BIN_EXE_outbox-cdc"))
                .args(["run", "--config"])
                .arg(config)
                .env("OUTBOX_CDC_LOG", "info,rdkafka=warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(file)
                .spawn()
                .unwrap();
            RelayProcess { child, log }
        }

        pub fn signal(&self, sig: &str) {
            let status = Command::new("kill")
                .args([&format!("-{sig}"), &self.child.id().to_string()])
                .status()
                .unwrap();
            assert!(status.success());
        }

        /// Waits for the exit status (None after `timeout`).
        pub fn wait(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
            let deadline = Instant::now() + timeout;
            while Instant::now() < deadline {
                if let Some(status) = self.child.try_wait().unwrap() {
                    return Some(status);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            None
        }

        pub fn log_text(&self) -> String {
            std::fs::read_to_string(&self.log).unwrap_or_default()
        }
    }

    impl Drop for RelayProcess {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
