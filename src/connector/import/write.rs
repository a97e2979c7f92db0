//! The relay's configuration file for an imported deployment: only what
//! the deployment decided, every other key at the relay's default.

use super::judge::{Imported, SecretReference};
use crate::contract::definition::ContractName;

fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn reference(r: &SecretReference) -> String {
    match r {
        SecretReference::Env(name) => format!("{{ env = {} }}", quoted(name)),
        SecretReference::File { path, key: None } => format!("{{ file = {} }}", quoted(path)),
        SecretReference::File {
            path,
            key: Some(key),
        } => format!("{{ file = {}, key = {} }}", quoted(path), quoted(key)),
    }
}

/// The file's text; `from` names what it was imported from.
pub fn render(i: &Imported, from: &str) -> String {
    let mut l: Vec<String> = vec![
        format!(
            "# Imported by `outbox-cdc connector-config import` from {} ({from}).",
            i.source.as_str()
        ),
        "# The relay writes this connector's records byte for byte; `outbox-cdc check`".into(),
        "# judges the table against the contract. Other keys have the relay's defaults.".into(),
    ];
    if !i.notes.is_empty() {
        l.push("# Read otherwise than written:".into());
        l.extend(i.notes.iter().map(|n| format!("#   {n}")));
    }
    if !i.left_behind.is_empty() {
        l.push("# Left behind (they decide no byte of the router's records):".into());
        l.extend(i.left_behind.iter().map(|(k, _)| format!("#   {k}")));
    }
    l.push(String::new());
    l.push("[postgres]".into());
    for (key, v) in [
        ("host", &i.host),
        ("dbname", &i.dbname),
        ("user", &i.user),
        ("sslmode", &i.sslmode),
        ("sslrootcert", &i.sslrootcert),
    ] {
        if let Some(v) = v {
            l.push(format!("{key} = {}", quoted(v)));
        }
    }
    if let Some(port) = &i.port {
        l.push(match port.parse::<u16>() {
            Ok(p) => format!("port = {p}"),
            Err(_) => format!("port = {}", quoted(port)),
        });
    }
    if let Some(p) = &i.password {
        l.push(format!("password = {}", reference(p)));
    }
    l.push(format!("publication = {}", quoted(&i.publication)));
    l.push(String::new());
    l.push("[outbox]".into());
    l.push(format!("contract = {}", quoted(i.contract.as_str())));
    l.push(format!("schema = {}", quoted(&i.schema)));
    l.push(format!("table = {}", quoted(&i.table)));
    if let Some(prefix) = &i.topic_prefix {
        l.push(format!("topic_prefix = {}", quoted(prefix)));
    }
    let preset = i.converters.preset_name();
    let settings_table = match (i.contract, preset) {
        (ContractName::Messaging, Some("platform")) => false,
        (_, Some(name)) => {
            l.push(format!("converters = {}", quoted(name)));
            false
        }
        (_, None) => true,
    };
    if !i.router.is_empty() {
        l.push(String::new());
        l.push("# The Outbox Event Router's options, as the deployment set them.".into());
        l.push("[outbox.router]".into());
        l.extend(
            i.router
                .iter()
                .map(|(k, v)| format!("{} = {}", quoted(k), quoted(v))),
        );
    }
    if settings_table {
        l.push(String::new());
        l.push("# The converters, by Kafka Connect's names.".into());
        l.push("[outbox.converters]".into());
        l.extend(
            i.converters
                .settings()
                .iter()
                .map(|(k, v)| format!("{} = {}", quoted(k), quoted(v))),
        );
    }
    l.push(String::new());
    l.push("[kafka]".into());
    l.push(format!(
        "bootstrap_servers = {}",
        quoted(&i.bootstrap_servers)
    ));
    if !i.topic_creation.is_empty() {
        l.push(String::new());
        l.push(
            "# The connector's topic creation: the relay creates each topic as the worker would."
                .into(),
        );
        l.push("[kafka.topic_creation]".into());
        l.extend(
            i.topic_creation
                .iter()
                .map(|(k, v)| format!("{} = {}", quoted(k), quoted(v))),
        );
    }
    l.push(String::new());
    l.push("# The connector imported, by its slot and names.".into());
    l.push("[debezium]".into());
    l.push(format!("# {}", i.release.why));
    l.push(format!(
        "version = {}",
        quoted(&i.release.version.to_string())
    ));
    // Written out: the platform's contract would otherwise take `false`.
    if i.release.version.context(i.extended_headers).is_some() || i.extended_headers.is_some() {
        let on = i.release.version.context(i.extended_headers).is_some();
        l.push(format!("extended_headers = {on}"));
    }
    if i.plugin != "pgoutput" {
        l.push(format!("plugin_name = {}", quoted(&i.plugin)));
    }
    if let Some(name) = &i.connector_name {
        l.push(format!("connector_name = {}", quoted(name)));
    }
    l.push(format!("slot = {}", quoted(&i.slot)));
    if let Some(prefix) = &i.logical_name {
        l.push(format!("topic_prefix = {}", quoted(prefix)));
    }
    // Debezium's own reference: a config provider takes env and file keys.
    if let Some(r @ (SecretReference::Env(_) | SecretReference::File { key: Some(_), .. })) =
        &i.password
    {
        l.push(format!("password = {}", reference(r)));
    }
    // Debezium without heartbeats (0, its default) leaves the relay's own.
    if let Some(ms) = i
        .heartbeat_interval_ms
        .as_ref()
        .filter(|ms| ms.trim() != "0")
    {
        l.push(match ms.parse::<u64>() {
            Ok(n) => format!("heartbeat_interval_ms = {n}"),
            Err(_) => format!("heartbeat_interval_ms = {}", quoted(ms)),
        });
    }
    let mut text = l.join("\n");
    text.push('\n');
    text
}
