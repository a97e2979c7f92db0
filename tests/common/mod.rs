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
    /// A relay configuration pointing at this database.
    pub fn config(&self, topic_prefix: &str) -> Config {
        let (host, port, user, _) = &self.services_pg;
        let text = format!(
            r#"
[postgres]
host = "{host}"
port = {port}
dbname = "{db}"
user = "{user}"
password = {{ env = "OUTBOX_TEST_PG_PASSWORD" }}
sslmode = "disable"

[outbox]
topic_prefix = "{topic_prefix}"

[kafka]
bootstrap_servers = "127.0.0.1:1"
"#,
            db = self.name
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

pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}
