//! The Debezium PostgreSQL connector configuration (connector plus Outbox
//! Event Router) that makes a real Debezium emit the records the relay emits.
//!
//! Pinned to Debezium 3.6.1.Final key names. Every column and header name
//! comes from [`crate::contract::outbox`]; nothing here restates the contract.
//!
//! One set of settings, written for each way teams deploy Debezium: Kafka
//! Connect ([`connect`]), Debezium Server ([`server`]) and Strimzi
//! ([`strimzi`]). Each writer only renames and adds what its runtime needs
//! around the connector; none decides a connector setting of its own.

mod connect;
pub mod import;
pub mod offsets;
mod server;
mod strimzi;

use crate::config::{Config, DebeziumConfig, OutboxConfig, ProviderReference};
use crate::contract::context;
use crate::contract::definition::{Contract, Converters, Status};
use crate::contract::outbox::objects;
use crate::error::Error;

/// The Debezium release whose key names this generator writes.
pub const DEBEZIUM_VERSION: &str = "3.6.1.Final";

/// The transform's alias in `transforms=`.
const ROUTER_ALIAS: &str = "outbox";

/// Heartbeat rows older than this are deleted by the heartbeat query itself,
/// so the table stays a handful of rows.
const HEARTBEAT_RETENTION: &str = "1 hour";

/// The connector's own settings: the source, its slot and publication.
fn source_properties(cfg: &Config, contract: &Contract) -> Vec<(String, String)> {
    let pg = &cfg.postgres;
    let dbz = &cfg.debezium;
    let mut p: Vec<(String, String)> = Vec::new();
    let mut set = |k: &str, v: String| p.push((k.to_string(), v));
    // Debezium connects to one host: the first listed, unless
    // `debezium.database_hostname` and `database_port` say otherwise.
    let first = pg
        .endpoints()
        .into_iter()
        .next()
        .unwrap_or_else(|| (pg.host.clone(), 5432));

    set(
        "connector.class",
        "io.debezium.connector.postgresql.PostgresConnector".into(),
    );
    set("tasks.max", "1".into());

    // Source: pgoutput over Debezium's own slot and the publication our
    // migration creates (Debezium must not create or alter it).
    set("plugin.name", dbz.plugin_name.as_str().into());
    set(
        "database.hostname",
        dbz.database_hostname
            .clone()
            .unwrap_or_else(|| first.0.clone()),
    );
    set(
        "database.port",
        dbz.database_port.unwrap_or(first.1).to_string(),
    );
    set("database.user", pg.user.clone());
    set(
        "database.password",
        cfg.debezium_password_reference().placeholder(),
    );
    set("database.dbname", pg.dbname.clone());
    set("database.sslmode", pg.sslmode.as_str().into());
    if let Some(ca) = &pg.sslrootcert {
        set("database.sslrootcert", ca.display().to_string());
    }
    set("topic.prefix", dbz.topic_prefix.clone());
    set("slot.name", dbz.slot.clone());
    set("publication.name", pg.publication.clone());
    set("publication.autocreate.mode", "disabled".into());
    set("table.include.list", cfg.qualified_table());
    // The relay publishes committed INSERTs only; rows written before the
    // connector starts are handed over by a cutover, not by a snapshot.
    set("snapshot.mode", "no_data".into());
    // A table that keeps status is updated by its marks: only inserts are
    // events. One that keeps none sees the router's own handling of
    // updates (`table.op.invalid.behavior`) and deletes (dropped).
    set(
        "skipped.operations",
        match contract.status {
            Status::Kept => "u,d,t",
            Status::NotKept => "t",
        }
        .into(),
    );
    set("tombstones.on.delete", "false".into());
    // From 3.2.1 the context headers (`__debezium.context.*`, before `id`)
    // are a setting; the relay writes the same ones.
    if cfg.outbox.debezium.version.has_setting() {
        set(context::SETTING, contract.context.is_some().to_string());
    }
    set("binary.handling.mode", "bytes".into());
    // The topics the worker creates before their first record (KIP-158);
    // the relay creates them the same way.
    for (k, v) in &cfg.kafka.topic_creation {
        set(&format!("topic.creation.{k}"), v.clone());
    }

    // An idle outbox beside busy tables would otherwise pin WAL: the
    // heartbeat inserts into a published table that Debezium does not
    // capture, so its slot has something to confirm.
    // Heartbeat records are structs, which ByteArrayConverter fails on:
    // with it, Debezium runs without them.
    match contract.converters.writes_heartbeats() {
        true => {
            set(
                "heartbeat.interval.ms",
                dbz.heartbeat_interval_ms.to_string(),
            );
            set(
                "heartbeat.action.query",
                heartbeat_query(&cfg.outbox, &cfg.debezium),
            );
        }
        false => set("heartbeat.interval.ms", "0".into()),
    }
    p
}

/// The converters a contract's bytes are written by, as Kafka Connect
/// names them (`key.converter=<class>`, `key.converter.<setting>=...`).
/// Every deployment names the same converter classes, so the bytes cannot
/// differ between them.
fn converter_properties(set: &Converters) -> Vec<(String, String)> {
    set.settings()
}

/// The connector's configuration as Kafka Connect takes it, in a stable order.
pub fn connector_properties(cfg: &Config) -> Result<Vec<(String, String)>, Error> {
    Ok(properties(cfg, &cfg.outbox.contract()?))
}

/// [`connector_properties`] for the contract already read.
fn properties(cfg: &Config, contract: &Contract) -> Vec<(String, String)> {
    let mut p = source_properties(cfg, contract);
    p.extend(converter_properties(&contract.converters));
    p.extend(router_properties(contract));
    p
}

/// The Outbox Event Router with the contract's options.
fn router_properties(contract: &Contract) -> Vec<(String, String)> {
    let mut p: Vec<(String, String)> = Vec::new();
    let t = |k: &str| format!("transforms.{ROUTER_ALIAS}.{k}");
    p.push(("transforms".into(), ROUTER_ALIAS.into()));
    p.push((
        t("type"),
        "io.debezium.transforms.outbox.EventRouter".into(),
    ));
    for (k, v) in contract.router.properties() {
        p.push((t(k), v));
    }
    p
}

fn heartbeat_query(outbox: &OutboxConfig, debezium: &DebeziumConfig) -> String {
    let table = format!("{}.{}", outbox.schema, objects::HEARTBEAT_TABLE);
    format!(
        "WITH expired AS (DELETE FROM {table} WHERE beat_at < now() - interval '{HEARTBEAT_RETENTION}') \
         INSERT INTO {table} (connector, beat_at) VALUES ('{}', now())",
        debezium.connector_name.replace('\'', "''")
    )
}

/// The deployments the configuration is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A `.properties` file for Kafka Connect standalone.
    Connect,
    /// The Kafka Connect REST body `{"name": ..., "config": {...}}`.
    ConnectJson,
    /// Debezium Server's `application.properties`.
    DebeziumServer,
    /// A Strimzi `KafkaConnector` resource.
    Strimzi,
    /// A Strimzi `KafkaConnect` resource that builds Debezium in.
    StrimziConnect,
}

impl Target {
    pub const ALL: [Target; 5] = [
        Target::Connect,
        Target::ConnectJson,
        Target::DebeziumServer,
        Target::Strimzi,
        Target::StrimziConnect,
    ];

    /// The file under `connector-config/` that holds this target's output.
    pub fn file_name(self) -> &'static str {
        match self {
            Target::Connect => "outbox-cdc.properties",
            Target::ConnectJson => "outbox-cdc.json",
            Target::DebeziumServer => "outbox-cdc.debezium-server.properties",
            Target::Strimzi => "outbox-cdc.kafkaconnector.yaml",
            Target::StrimziConnect => "outbox-cdc.kafkaconnect.yaml",
        }
    }
}

/// The configuration for one deployment.
pub fn render(cfg: &Config, target: Target) -> Result<String, Error> {
    let contract = cfg.outbox.contract()?;
    Ok(match target {
        Target::Connect => connect::render_properties(cfg, &contract),
        Target::ConnectJson => connect::render_json(cfg, &contract),
        Target::DebeziumServer => server::render(cfg, &contract),
        Target::Strimzi => strimzi::render_connector(cfg, &contract),
        Target::StrimziConnect => strimzi::render_connect(cfg)?,
    })
}

/// The Kafka config provider that resolves `database.password`: its alias
/// in `config.providers` and its class.
fn password_provider(reference: &ProviderReference) -> (&'static str, &'static str) {
    match reference {
        ProviderReference::Env { .. } => (
            "env",
            "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
        ),
        ProviderReference::File { .. } => (
            "file",
            "org.apache.kafka.common.config.provider.FileConfigProvider",
        ),
    }
}
