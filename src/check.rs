//! `outbox-cdc check`: a preflight and health report. Each finding has a
//! stable code; any error makes the exit status non-zero.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use serde::Serialize;
use tokio_postgres::Client;

use crate::config::Config;
use crate::db;
use crate::exclusivity;
use crate::outbox::{self, RelayMode, Status};
use crate::publisher;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    Warn,
    Error,
}

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub check: &'static str,
    pub level: Level,
    /// Stable code for warnings and errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<&'static str>,
    pub detail: String,
}

#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub ok: bool,
    pub findings: Vec<Finding>,
}

impl Report {
    fn ok(&mut self, check: &'static str, detail: impl Into<String>) {
        self.push(check, Level::Ok, None, detail);
    }
    fn warn(&mut self, check: &'static str, code: &'static str, detail: impl Into<String>) {
        self.push(check, Level::Warn, Some(code), detail);
    }
    fn error(&mut self, check: &'static str, code: &'static str, detail: impl Into<String>) {
        self.push(check, Level::Error, Some(code), detail);
    }
    fn push(
        &mut self,
        check: &'static str,
        level: Level,
        code: Option<&'static str>,
        detail: impl Into<String>,
    ) {
        self.findings.push(Finding {
            check,
            level,
            code,
            detail: detail.into(),
        });
    }

    pub fn codes(&self) -> Vec<&'static str> {
        self.findings.iter().filter_map(|f| f.code).collect()
    }

    pub fn render_human(&self) -> String {
        let mut out = String::new();
        for f in &self.findings {
            let level = match f.level {
                Level::Ok => "ok   ",
                Level::Warn => "WARN ",
                Level::Error => "ERROR",
            };
            match f.code {
                Some(code) => {
                    out.push_str(&format!("{level} {:<22} {code}: {}\n", f.check, f.detail))
                }
                None => out.push_str(&format!("{level} {:<22} {}\n", f.check, f.detail)),
            }
        }
        out.push_str(if self.ok {
            "healthy\n"
        } else {
            "not healthy\n"
        });
        out
    }
}

async fn one<T>(
    client: &Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Option<T>, tokio_postgres::Error>
where
    T: for<'a> tokio_postgres::types::FromSql<'a>,
{
    Ok(client.query_opt(sql, params).await?.map(|r| r.get(0)))
}

/// The named constraints the CDC migration adds.
const CONSTRAINTS: [&str; 7] = [
    "ck_outbox_routing_key",
    "ck_outbox_destination_topic",
    "ck_outbox_headers_flat",
    "ck_outbox_headers_reserved",
    "ck_outbox_traceparent",
    "ck_outbox_tenant",
    "ck_outbox_schema_uri_subject",
];

pub async fn run(cfg: &Config, env: &(dyn Fn(&str) -> Option<String> + Sync)) -> Report {
    let mut r = Report::default();
    let mut destinations = Vec::new();
    match db::connect(cfg, env).await {
        Err(e) => r.error("postgres", e.code(), e.to_string()),
        Ok(client) => match database(&client, cfg, &mut r).await {
            Ok(d) => destinations = d,
            Err(e) => r.error("postgres", "PG_QUERY_FAILED", e.to_string()),
        },
    }
    kafka(cfg, env, &destinations, &mut r).await;
    r.ok = r.findings.iter().all(|f| f.level != Level::Error);
    r
}

/// The database checks; returns the destinations of unpublished rows.
async fn database(
    c: &Client,
    cfg: &Config,
    r: &mut Report,
) -> Result<Vec<String>, tokio_postgres::Error> {
    let table = cfg.qualified_table();
    let version: String = one(c, "SELECT current_setting('server_version')", &[])
        .await?
        .unwrap_or_default();
    r.ok("server_version", version);
    let wal_level: String = one(c, "SELECT current_setting('wal_level')", &[])
        .await?
        .unwrap_or_default();
    if wal_level == "logical" {
        r.ok("wal_level", "logical");
    } else {
        r.error(
            "wal_level",
            "PG_WAL_LEVEL_NOT_LOGICAL",
            format!("wal_level is {wal_level}; set logical and restart"),
        );
    }
    let slots = c
        .query_one(
            "SELECT current_setting('max_replication_slots')::int - (SELECT count(*) FROM pg_replication_slots)::int,
                    current_setting('max_wal_senders')::int - (SELECT count(*) FROM pg_stat_replication)::int,
                    current_setting('max_slot_wal_keep_size')",
            &[],
        )
        .await?;
    let (slot_room, sender_room, keep): (i32, i32, String) =
        (slots.get(0), slots.get(1), slots.get(2));
    let slot = c
        .query_opt(
            "SELECT active, wal_status, (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint, plugin::text
               FROM pg_replication_slots WHERE slot_name = $1",
            &[&cfg.postgres.slot],
        )
        .await?;
    match (slot_room, &slot) {
        (0, None) => r.error(
            "slot_headroom",
            "SLOTS_EXHAUSTED",
            "max_replication_slots leaves no room for the relay's slot",
        ),
        (n, _) => r.ok("slot_headroom", format!("{n} free replication slots")),
    }
    if sender_room <= 0 {
        r.error(
            "sender_headroom",
            "WAL_SENDERS_EXHAUSTED",
            "max_wal_senders leaves no room for the relay",
        );
    } else {
        r.ok("sender_headroom", format!("{sender_room} free WAL senders"));
    }
    if keep == "-1" {
        r.warn(
            "max_slot_wal_keep_size",
            "UNLIMITED_SLOT_WAL",
            "-1 (unlimited): a stopped relay makes PostgreSQL keep WAL until the disk fills; consider a bound",
        );
    } else {
        r.ok("max_slot_wal_keep_size", keep);
    }
    let privileged: bool = one(
        c,
        "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user",
        &[],
    )
    .await?
    .unwrap_or(false);
    if privileged {
        r.ok(
            "replication_privilege",
            format!("{} may stream", cfg.postgres.user),
        );
    } else {
        r.error(
            "replication_privilege",
            "NO_REPLICATION_PRIVILEGE",
            format!(
                "{} lacks the REPLICATION attribute (ALTER ROLE {} REPLICATION)",
                cfg.postgres.user, cfg.postgres.user
            ),
        );
    }

    let publication = c
        .query_opt(
            "SELECT pubinsert, pubupdate, pubdelete, pubtruncate, puballtables FROM pg_publication WHERE pubname = $1",
            &[&cfg.postgres.publication],
        )
        .await?;
    match publication {
        None => r.error(
            "publication",
            "PUBLICATION_MISSING",
            format!(
                "publication {} does not exist; run `outbox-cdc migrate`",
                cfg.postgres.publication
            ),
        ),
        Some(p) => {
            let (ins, upd, del, tru): (bool, bool, bool, bool) =
                (p.get(0), p.get(1), p.get(2), p.get(3));
            let covers: Option<i32> = one(
                c,
                "SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3",
                &[&cfg.postgres.publication, &cfg.outbox.schema, &cfg.outbox.table],
            )
            .await?;
            if covers.is_none() {
                r.error(
                    "publication",
                    "PUBLICATION_MISSING_TABLE",
                    format!("{} does not cover {table}", cfg.postgres.publication),
                );
            } else if !ins || upd || del || tru {
                r.error(
                    "publication",
                    "PUBLICATION_NOT_INSERT_ONLY",
                    format!("{} must publish inserts only (insert={ins} update={upd} delete={del} truncate={tru})", cfg.postgres.publication),
                );
            } else {
                r.ok(
                    "publication",
                    format!("{} publishes inserts of {table}", cfg.postgres.publication),
                );
            }
        }
    }

    let routing = c
        .query_opt(
            "SELECT a.attgenerated::text FROM pg_attribute a WHERE a.attrelid = $1::text::regclass AND a.attname = $2 AND NOT a.attisdropped",
            &[&table, &outbox::ROUTING_KEY.name],
        )
        .await?;
    let trigger: Option<String> = one(
        c,
        "SELECT tgenabled::text FROM pg_trigger WHERE tgrelid = $1::text::regclass AND tgname = 'outbox_cdc_routing_key'",
        &[&table],
    )
    .await?;
    match routing.map(|row| row.get::<_, String>(0)) {
        None => r.error("routing_key", "ROUTING_KEY_MISSING", format!("{table} has no {} column", outbox::ROUTING_KEY.name)),
        Some(g) if !g.is_empty() => r.error(
            "routing_key",
            "ROUTING_KEY_GENERATED",
            "routing_key is a generated column, which pgoutput does not replicate before PostgreSQL 18; run `outbox-cdc migrate --cdc-only`",
        ),
        Some(_) if trigger.as_deref().is_none_or(|t| t == "D") => r.error(
            "routing_key",
            "ROUTING_KEY_TRIGGER_MISSING",
            "the trigger that keeps routing_key is missing or disabled",
        ),
        Some(_) => r.ok("routing_key", "plain column kept by its trigger"),
    }

    let rows = c
        .query(
            "SELECT conname::text, convalidated FROM pg_constraint WHERE conrelid = $1::text::regclass AND contype = 'c'",
            &[&table],
        )
        .await?;
    let present: Vec<(String, bool)> = rows.iter().map(|x| (x.get(0), x.get(1))).collect();
    let missing: Vec<&str> = CONSTRAINTS
        .iter()
        .copied()
        .filter(|n| !present.iter().any(|(p, _)| p == n))
        .collect();
    let unvalidated: Vec<&str> = CONSTRAINTS
        .iter()
        .copied()
        .filter(|n| present.iter().any(|(p, v)| p == n && !v))
        .collect();
    if !missing.is_empty() {
        r.error(
            "constraints",
            "CONSTRAINT_MISSING",
            format!("missing: {}", missing.join(", ")),
        );
    } else if !unvalidated.is_empty() {
        r.warn(
            "constraints",
            "CONSTRAINT_NOT_VALIDATED",
            format!(
                "NOT VALID (old rows violate them; the relay records such rows FAILED): {}",
                unvalidated.join(", ")
            ),
        );
    } else {
        r.ok("constraints", "present and validated");
    }

    let relay_active = match &slot {
        None => {
            r.warn(
                "slot",
                "SLOT_MISSING",
                format!(
                    "slot {} does not exist; `outbox-cdc cutover --to cdc` creates it",
                    cfg.postgres.slot
                ),
            );
            false
        }
        Some(s) => {
            let (active, wal_status, lag, plugin): (
                bool,
                Option<String>,
                Option<i64>,
                Option<String>,
            ) = (s.get(0), s.get(1), s.get(2), s.get(3));
            let wal_status = wal_status.unwrap_or_default();
            if wal_status == "lost" {
                r.error(
                    "slot",
                    "SLOT_INVALIDATED",
                    format!("slot {} has lost required WAL", cfg.postgres.slot),
                );
            } else if plugin.as_deref() != Some("pgoutput") {
                r.error(
                    "slot",
                    "SLOT_WRONG_PLUGIN",
                    format!(
                        "slot {} uses {}",
                        cfg.postgres.slot,
                        plugin.unwrap_or_default()
                    ),
                );
            } else {
                r.ok(
                    "slot",
                    format!(
                        "{} exists, {}, lag {} bytes, wal_status {wal_status}",
                        cfg.postgres.slot,
                        if active { "active" } else { "inactive" },
                        lag.unwrap_or(0)
                    ),
                );
            }
            active
        }
    };

    let declared = match exclusivity::declared_mode(c, cfg).await {
        Ok(d) => d,
        Err(e) => {
            r.error("relay_mode", e.code(), e.to_string());
            return Ok(Vec::new());
        }
    };
    let debezium_active = exclusivity::slot_activity(c, &cfg.debezium.slot)
        .await
        .ok()
        .flatten()
        .is_some_and(|s| s.active);
    match declared.mode {
        None => r.error("relay_mode", "NO_OUTBOX_RELAY", format!("no relay mode declared for {table}; run `outbox-cdc cutover --to cdc`")),
        Some(RelayMode::Polling) => r.error(
            "relay_mode",
            "DUPLICATE_OUTBOX_RELAY",
            format!("{table} is declared POLLING: the CDC relay must not run beside the polling relay"),
        ),
        Some(RelayMode::ChangeDataCapture) if relay_active && debezium_active => r.error(
            "relay_mode",
            "DUPLICATE_OUTBOX_RELAY",
            "both the relay's slot and Debezium's slot are active: two CDC relays publish this outbox",
        ),
        Some(RelayMode::ChangeDataCapture) if !relay_active && !debezium_active => r.error(
            "relay_mode",
            "NO_OUTBOX_RELAY",
            format!("{table} is CHANGE_DATA_CAPTURE but neither {} nor {} is active: nothing publishes it", cfg.postgres.slot, cfg.debezium.slot),
        ),
        Some(RelayMode::ChangeDataCapture) => r.ok(
            "relay_mode",
            format!("CHANGE_DATA_CAPTURE, published by {}", if relay_active { "outbox-cdc" } else { "Debezium" }),
        ),
    }
    match exclusivity::live_leases(c, cfg).await {
        Ok(0) => r.ok("polling_leases", "no live polling lease"),
        Ok(n) => r.error(
            "polling_leases",
            "DUPLICATE_OUTBOX_RELAY",
            format!("{n} rows hold a live polling lease: a polling relay is running"),
        ),
        Err(e) => r.error("polling_leases", e.code(), e.to_string()),
    }
    let destinations: Vec<String> = c
        .query(
            &format!(
                "SELECT DISTINCT {dest} FROM (SELECT {dest} FROM {table} WHERE {status} NOT IN ('{p}', '{f}') LIMIT 10000) d LIMIT 100",
                dest = outbox::DESTINATION.name,
                status = outbox::STATUS.name,
                p = Status::Published.as_str(),
                f = Status::Failed.as_str(),
            ),
            &[],
        )
        .await?
        .iter()
        .map(|x| x.get(0))
        .collect();
    Ok(destinations)
}

async fn kafka(
    cfg: &Config,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
    destinations: &[String],
    r: &mut Report,
) {
    let cc = match publisher::client_config(cfg, env) {
        Ok(cc) => cc,
        Err(e) => return r.error("kafka", e.code(), e.to_string()),
    };
    let admin: AdminClient<DefaultClientContext> = match cc.create() {
        Ok(a) => a,
        Err(e) => return r.error("kafka", "KAFKA_CONFIG_INVALID", e.to_string()),
    };
    let servers = cfg.kafka.bootstrap_servers.clone();
    let prefix = cfg.outbox.topic_prefix.clone();
    let fetched = tokio::task::spawn_blocking(move || {
        let md = admin.inner().fetch_metadata(None, Duration::from_secs(10));
        (admin, md)
    })
    .await;
    let (admin, md) = match fetched {
        Ok((admin, Ok(md))) => (admin, md),
        Ok((_, Err(e))) => return r.error("kafka", "KAFKA_UNREACHABLE", format!("{servers}: {e}")),
        Err(e) => return r.error("kafka", "KAFKA_UNREACHABLE", format!("{servers}: {e}")),
    };
    r.ok(
        "kafka",
        format!("{} brokers reachable at {servers}", md.brokers().len()),
    );
    let existing: Vec<String> = md.topics().iter().map(|t| t.name().to_string()).collect();
    let missing: Vec<String> = destinations
        .iter()
        .map(|d| format!("{prefix}{d}"))
        .filter(|t| !existing.contains(t))
        .collect();
    if missing.is_empty() {
        r.ok(
            "topics",
            format!("{} target topics present", destinations.len()),
        );
        return;
    }
    let broker = md.brokers().first().map(|b| b.id()).unwrap_or(0);
    let auto_create = admin
        .describe_configs(
            &[ResourceSpecifier::Broker(broker)],
            &AdminOptions::new().request_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .ok()
        .and_then(|mut rs| rs.pop())
        .and_then(|res| res.ok())
        .and_then(|res| {
            res.get("auto.create.topics.enable")
                .and_then(|e| e.value.clone())
        })
        .is_some_and(|v| v == "true");
    if auto_create {
        r.ok(
            "topics",
            format!(
                "{} target topics will be auto-created: {}",
                missing.len(),
                missing.join(", ")
            ),
        );
    } else {
        r.error(
            "topics",
            "TOPIC_MISSING",
            format!("missing and not auto-creatable: {}", missing.join(", ")),
        );
    }
}
