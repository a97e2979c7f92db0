//! `outbox-cdc config validate`: the configuration checked offline, as far
//! as it can be without a network: its syntax, keys and values, the secrets
//! it names (resolvable, never printed), and the Kafka properties as
//! librdkafka itself accepts them. `outbox-cdc config show`: every
//! effective value with where it came from.

use super::ConfigArg;
use crate::config::reference::at;
use crate::error::{Code, Error};
use crate::ops::config_check;

#[derive(clap::Subcommand)]
pub(super) enum ConfigCommand {
    /// Check the configuration offline: syntax, keys, values, secrets resolvable, Kafka properties accepted by librdkafka; nothing connects.
    #[command(
        after_help = "Examples:\n  outbox-cdc config validate -c /etc/outbox-cdc/outbox-cdc.toml\n  OUTBOX_CDC_RELAY_DELIVERY=transactional outbox-cdc config validate"
    )]
    Validate,
    /// Print every effective value, each marked file, env (with its variable) or default; secrets are references, and secret-looking Kafka properties are redacted.
    #[command(
        after_help = "Examples:\n  outbox-cdc config show -c /etc/outbox-cdc/outbox-cdc.toml\n  OUTBOX_CDC_RELAY_MAX_IN_FLIGHT_MESSAGES=20000 outbox-cdc config show"
    )]
    Show,
}

pub(super) fn run(command: ConfigCommand, config: &ConfigArg) -> Result<(), Error> {
    match command {
        ConfigCommand::Validate => validate(config),
        ConfigCommand::Show => show(config),
    }
}

fn validate(config: &ConfigArg) -> Result<(), Error> {
    let cfg = config.load()?;
    config_check::validate(&cfg, &super::env)?;
    println!("{}: valid", config.path.display());
    Ok(())
}

fn show(config: &ConfigArg) -> Result<(), Error> {
    let cfg = config.load()?;
    let text = std::fs::read_to_string(&config.path).map_err(|e| {
        Error::new(
            Code::CONFIG_UNREADABLE,
            format!("cannot read {}: {e}", config.path.display()),
        )
    })?;
    let file: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        Error::new(
            Code::CONFIG_SYNTAX,
            format!("{}: {e}", config.path.display()),
        )
    })?;
    let effective = toml::Table::try_from(&cfg)
        .map_err(|e| Error::new(Code::INTERNAL, format!("showing the configuration: {e}")))?;
    let mut out = String::new();
    let mut section = "";
    for (table, key) in crate::config::keys::scalar_keys() {
        let top = table.split('.').next().unwrap_or(table);
        if effective.get(top).is_none()
            || (table == "relay.transactional" && !cfg.relay.transactional())
        {
            continue; // an optional section that is off
        }
        if table != section {
            out.push_str(&format!("\n[{table}]\n"));
            section = table;
        }
        let path = format!("{table}.{key}");
        let variable = crate::config::env_override_name(table, key);
        let source = if super::env(&variable).is_some() {
            format!("env {variable}")
        } else if at(&file, &path).is_some() {
            "file".to_string()
        } else {
            "default".to_string()
        };
        let value = at(&effective, &path).map_or("(not set)".to_string(), |v| v.to_string());
        out.push_str(&format!("{key} = {value}  # {source}\n"));
    }
    // References, never values: a secret's source, and the Kafka properties.
    if let Some(password) = at(&effective, "postgres.password") {
        out.push_str(&format!(
            "\n# postgres.password = {password}  # a reference\n"
        ));
    }
    if let Some(props) = at(&effective, "kafka.properties").and_then(toml::Value::as_table) {
        out.push_str("\n[kafka.properties]\n");
        for (name, value) in props {
            let shown = match value {
                toml::Value::String(_) if crate::config::kafka::is_secret_property(name) => {
                    "\"<redacted>\"".to_string()
                }
                v => v.to_string(),
            };
            out.push_str(&format!("{:?} = {shown}  # file\n", name));
        }
    }
    print!("{}", out.trim_start());
    Ok(())
}
