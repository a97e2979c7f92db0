//! The Debezium PostgreSQL connector configuration (connector plus Outbox
//! Event Router) that makes a real Debezium emit the records the relay emits.
//!
//! Pinned to Debezium 3.6.1.Final key names. Every column and header name
//! comes from [`crate::outbox`]; nothing here restates the contract.

use super::outbox::{self, objects};
use super::properties;
use crate::config::Config;

/// The Debezium release whose key names this generator writes.
pub const DEBEZIUM_VERSION: &str = "3.6.1.Final";

/// The transform's alias in `transforms=`.
const ROUTER_ALIAS: &str = "outbox";

/// Heartbeat rows older than this are deleted by the heartbeat query itself,
/// so the table stays a handful of rows.
const HEARTBEAT_RETENTION: &str = "1 hour";

/// The connector's configuration, in a stable order.
pub fn connector_properties(cfg: &Config) -> Vec<(String, String)> {
    let pg = &cfg.postgres;
    let dbz = &cfg.debezium;
    let mut p: Vec<(String, String)> = Vec::new();
    let mut set = |k: &str, v: String| p.push((k.to_string(), v));

    set(
        "connector.class",
        "io.debezium.connector.postgresql.PostgresConnector".into(),
    );
    set("tasks.max", "1".into());

    // Source: pgoutput over Debezium's own slot and the publication our
    // migration creates (Debezium must not create or alter it).
    set("plugin.name", "pgoutput".into());
    set(
        "database.hostname",
        dbz.database_hostname
            .clone()
            .unwrap_or_else(|| pg.host.clone()),
    );
    set(
        "database.port",
        dbz.database_port.unwrap_or(pg.port).to_string(),
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
    set("skipped.operations", "u,d,t".into());
    set("tombstones.on.delete", "false".into());
    // Debezium 3.2+ would add __debezium.context.* headers, one a random id
    // per run, which no relay can reproduce.
    set("extended.headers.enabled", "false".into());
    set("binary.handling.mode", "bytes".into());

    // An idle outbox beside busy tables would otherwise pin WAL: the
    // heartbeat inserts into a published table that Debezium does not
    // capture, so its slot has something to confirm.
    set(
        "heartbeat.interval.ms",
        dbz.heartbeat_interval_ms.to_string(),
    );
    set("heartbeat.action.query", heartbeat_query(cfg));

    // Converters: key as UTF-8 text, value bytes verbatim (heartbeat records
    // are structs and go through the JSON delegate), headers as
    // SimpleHeaderConverter writes them.
    set(
        "key.converter",
        "org.apache.kafka.connect.storage.StringConverter".into(),
    );
    set(
        "value.converter",
        "io.debezium.converters.BinaryDataConverter".into(),
    );
    set(
        "value.converter.delegate.converter.type",
        "org.apache.kafka.connect.json.JsonConverter".into(),
    );
    set(
        "value.converter.delegate.converter.type.schemas.enable",
        "false".into(),
    );
    set(
        "header.converter",
        "org.apache.kafka.connect.storage.SimpleHeaderConverter".into(),
    );

    // The Outbox Event Router: one record per row, keyed on routing_key.
    let t = |k: &str| format!("transforms.{ROUTER_ALIAS}.{k}");
    set("transforms", ROUTER_ALIAS.into());
    set(
        &t("type"),
        "io.debezium.transforms.outbox.EventRouter".into(),
    );
    set(&t("table.field.event.id"), outbox::MESSAGE_ID.name.into());
    set(&t("table.field.event.key"), outbox::ROUTING_KEY.name.into());
    set(&t("table.field.event.payload"), outbox::PAYLOAD.name.into());
    set(&t("table.expand.json.payload"), "false".into());
    set(&t("route.by.field"), outbox::DESTINATION.name.into());
    set(
        &t("route.topic.replacement"),
        format!("{}${{routedByValue}}", cfg.outbox.topic_prefix),
    );
    // An empty payload is an empty value, never a tombstone.
    set(&t("route.tombstone.on.empty.payload"), "false".into());
    set(
        &t("table.fields.additional.placement"),
        additional_placement(),
    );
    p
}

/// `column:header:name` for the 15 canonical headers, in contract order.
fn additional_placement() -> String {
    outbox::CANONICAL_HEADERS
        .iter()
        .map(|h| format!("{}:header:{}", h.column.name, h.name))
        .collect::<Vec<_>>()
        .join(",")
}

fn heartbeat_query(cfg: &Config) -> String {
    let table = format!("{}.{}", cfg.outbox.schema, objects::HEARTBEAT_TABLE);
    format!(
        "WITH expired AS (DELETE FROM {table} WHERE beat_at < now() - interval '{HEARTBEAT_RETENTION}') \
         INSERT INTO {table} (connector, beat_at) VALUES ('{}', now())",
        cfg.debezium.connector_name.replace('\'', "''")
    )
}

fn comment(cfg: &Config) -> Vec<String> {
    vec![
        format!(
            "Debezium {DEBEZIUM_VERSION} PostgreSQL connector for the outbox {}.",
            cfg.qualified_table()
        ),
        "Generated by `outbox-cdc connector-config` from the outbox definition; do not edit."
            .into(),
        "Needs a Kafka Connect worker with config.providers=env".into(),
        "(config.providers.env.class=org.apache.kafka.common.config.provider.EnvVarConfigProvider)"
            .into(),
        "or the file provider, matching database.password below.".into(),
    ]
}

/// The configuration as a Kafka Connect standalone `.properties` file.
pub fn render_properties(cfg: &Config) -> String {
    let mut pairs = vec![("name".to_string(), cfg.debezium.connector_name.clone())];
    pairs.extend(connector_properties(cfg));
    let comment = comment(cfg);
    let lines: Vec<&str> = comment.iter().map(String::as_str).collect();
    properties::render(&lines, &pairs)
}

/// The configuration as the Kafka Connect REST body.
pub fn render_json(cfg: &Config) -> String {
    let config: serde_json::Map<String, serde_json::Value> = connector_properties(cfg)
        .into_iter()
        .map(|(k, v)| (k, serde_json::Value::String(v)))
        .collect();
    let body = serde_json::json!({
        "name": cfg.debezium.connector_name,
        "config": config,
    });
    format!("{body:#}\n")
}

/// The forms the configuration is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A `.properties` file for Kafka Connect standalone.
    Properties,
    /// The Kafka Connect REST body `{"name": ..., "config": {...}}`.
    Json,
}

pub fn render(cfg: &Config, format: Format) -> String {
    match format {
        Format::Properties => render_properties(cfg),
        Format::Json => render_json(cfg),
    }
}
