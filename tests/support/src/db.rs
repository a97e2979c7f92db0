//! Throwaway databases, the outbox rows tests write, and what the tests
//! read back from the table.

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use outbox_cdc::config::Config;
use tokio_postgres::{Client, NoTls};

use crate::config::config_head;
use crate::{kafka, replication, services, Services};

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
    key_seq(&services.connect(db).await, keys).await;
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

/// The per-key sequence table [`KEYED_INSERT`] counts in, for keys
/// `key-0` to `key-<keys - 1>`.
pub async fn key_seq(client: &Client, keys: usize) {
    client
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS public.key_seq (k text PRIMARY KEY, n bigint NOT NULL);
             INSERT INTO public.key_seq SELECT 'key-' || g, 0 FROM generate_series(0, {}) g ON CONFLICT DO NOTHING;",
            keys - 1
        ))
        .await
        .unwrap();
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

/// A fresh database with every migration applied, declared
/// CHANGE_DATA_CAPTURE (as a cutover leaves it).
pub async fn cdc_db(services: &Services, label: &str, topic_prefix: &str) -> TestDb {
    let db = migrated_db(services, label, topic_prefix).await;
    db.declare_cdc().await;
    db
}

/// A fresh database with every migration applied.
pub async fn migrated_db(services: &Services, label: &str, topic_prefix: &str) -> TestDb {
    let mut db = services.fresh_db(label).await;
    let cfg = db.config(topic_prefix);
    outbox_cdc::ops::migrate::migrate(
        &mut db.client,
        &cfg.objects(),
        outbox_cdc::ops::migrate::Scope::All,
    )
    .await
    .unwrap();
    db
}
