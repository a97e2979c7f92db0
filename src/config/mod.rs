//! `outbox-cdc.toml`: loading, environment overrides, secrets and
//! validation, one file per section (`postgres`, `outbox`, `kafka`,
//! `debezium`, `relay`, `http`), each with its defaults (`DEFAULT_*`,
//! written once) and its own validation.
//!
//! Loading is strict: an unknown key is an error naming the key, because a
//! misspelt setting that is silently ignored is a production incident
//! waiting for its trigger. Secrets never sit in the file: they come from
//! an environment variable or a file the configuration names.

pub mod debezium;
pub mod env;
pub mod http;
pub mod kafka;
pub mod otel;
pub mod outbox;
pub mod postgres;
pub mod relay;
pub mod secrets;
#[cfg(test)]
mod tests;

use std::fmt;
use std::path::Path;

use serde::Deserialize;

pub use debezium::{
    DebeziumConfig, DebeziumServerConfig, OffsetStorage, ProviderReference, SecretKeyRef,
    StrimziConfig,
};
pub use env::{env_override_name, env_overrides, ENV_PREFIX};
pub use http::HttpConfig;
pub use kafka::KafkaConfig;
pub use otel::{OtelConfig, OtlpProtocol};
pub use outbox::OutboxConfig;
pub use postgres::{
    Ports, PostgresConfig, SslMode, DEFAULT_PASSWORD_ENV, DEFAULT_WAL_RECEIVER_TIMEOUT_SECS,
};
pub use relay::{Delivery, DeliveryMode, RelayConfig, TransactionalConfig};
pub use secrets::{PropertyValue, SecretSource};

use crate::error::{Code, Error};
use crate::kafka::settings;
pub use crate::secret::Secret;

/// Where configuration values and secrets are looked up by name: the
/// process environment in production, a table in tests.
pub type Env = dyn Fn(&str) -> Option<String> + Send + Sync;

fn invalid(key: &str, reason: impl fmt::Display) -> Error {
    Error::new(Code::CONFIG_INVALID_VALUE, format!("`{key}`: {reason}"))
}

fn secret_in_file(key: &str) -> Error {
    Error::new(
        Code::CONFIG_SECRET_IN_FILE,
        format!("`{key}` is a secret; name an environment variable (`{{ env = \"NAME\" }}`) or a file (`{{ file = \"/path\" }}`) instead of writing it in the configuration"),
    )
}

#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    pub postgres: PostgresConfig,
    pub outbox: OutboxConfig,
    pub kafka: KafkaConfig,
    #[serde(default)]
    pub debezium: DebeziumConfig,
    #[serde(default)]
    pub relay: RelayConfig,
    /// The metrics and health endpoint; off when absent.
    pub http: Option<HttpConfig>,
    /// OpenTelemetry spans for published records; off when absent.
    pub otel: Option<OtelConfig>,
}

impl Config {
    /// Reads `path`, applies environment overrides and validates.
    pub fn load(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::new(
                Code::CONFIG_UNREADABLE,
                format!("cannot read {}: {e}", path.display()),
            )
        })?;
        Config::parse(&text, path, env)
    }

    /// Loads with the process environment.
    pub fn load_from_process_env(path: &Path) -> Result<Config, Error> {
        Config::load(path, &|name| std::env::var(name).ok())
    }

    pub fn parse(
        text: &str,
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, Error> {
        let syntax = |message: String| {
            Error::new(
                Code::CONFIG_SYNTAX,
                format!("{}: {message}", path.display()),
            )
        };
        let mut table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| syntax(e.to_string()))?;
        reject_literal_secret(&table, "postgres", "password")?;
        env::apply_env_overrides(&mut table, env)?;
        require_keys(&table)?;
        RelayConfig::check_raw(table.get("relay"))?;

        let mut unknown = Vec::new();
        let config: Config =
            serde_ignored::deserialize(toml::Value::Table(table), |p| unknown.push(p.to_string()))
                .map_err(|e: toml::de::Error| syntax(e.to_string()))?;
        if let Some(key) = unknown.into_iter().next() {
            return Err(Error::new(
                Code::CONFIG_UNKNOWN_KEY,
                format!("unknown key `{key}` in {}", path.display()),
            ));
        }
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), Error> {
        self.postgres.validate()?;
        self.debezium.validate(&self.postgres.slot)?;
        self.outbox.validate()?;
        self.kafka.validate()?;
        self.relay.validate()?;
        if let Some(http) = &self.http {
            http.validate()?;
        }
        if let Some(otel) = &self.otel {
            otel.validate()?;
        }
        Ok(())
    }

    /// The PostgreSQL password, from the configured source or the default
    /// environment variable; `None` when neither is set (trust or peer auth).
    pub fn postgres_password(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Secret>, Error> {
        self.postgres.password(env)
    }

    /// The cluster and its librdkafka properties with secrets resolved.
    pub fn kafka_cluster(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<settings::Cluster, Error> {
        self.kafka.cluster(env)
    }

    /// How the Debezium connector refers to the password.
    pub fn debezium_password_reference(&self) -> ProviderReference {
        if let Some(reference) = &self.debezium.password {
            return reference.clone();
        }
        let env = match &self.postgres.password {
            Some(SecretSource::Env { env }) => env.clone(),
            _ => DEFAULT_PASSWORD_ENV.to_string(),
        };
        ProviderReference::Env { env }
    }

    /// The producer's `transactional.id` in transactional delivery (also a
    /// redrive's, which adds its own suffix).
    pub fn transactional_id(&self) -> String {
        match self.relay.delivery() {
            Delivery::Transactional(t) if t.id.is_some() => t.id.clone().unwrap_or_default(),
            _ => format!("outbox-cdc.{}.{}", self.postgres.dbname, self.postgres.slot),
        }
    }

    /// The producer's `transactional.id` when delivery is transactional.
    pub fn producer_transactional_id(&self) -> Option<String> {
        self.relay.transactional().then(|| self.transactional_id())
    }

    /// `schema.table`, as Debezium's include lists and our catalog queries
    /// name it.
    pub fn qualified_table(&self) -> String {
        self.outbox.qualified_table()
    }
}

fn reject_literal_secret(table: &toml::Table, section: &str, key: &str) -> Result<(), Error> {
    if let Some(v) = table.get(section).and_then(|s| s.get(key)) {
        if v.is_str() {
            return Err(secret_in_file(&format!("{section}.{key}")));
        }
    }
    Ok(())
}

/// Keys without a default, as `(section, key)`; `None` is the section
/// itself. Checked before deserializing, so a missing key is named without
/// reading serde's message.
const REQUIRED_KEYS: &[(&str, Option<&str>)] = &[
    ("postgres", None),
    ("postgres", Some("dbname")),
    ("postgres", Some("user")),
    ("outbox", None),
    ("kafka", None),
    ("kafka", Some("bootstrap_servers")),
];

fn require_keys(table: &toml::Table) -> Result<(), Error> {
    for (section, key) in REQUIRED_KEYS {
        let present = match (table.get(*section), key) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(s), Some(k)) => s.get(k).is_some(),
        };
        if !present {
            let name = match key {
                Some(k) => format!("{section}.{k}"),
                None => format!("[{section}]"),
            };
            return Err(Error::new(
                Code::CONFIG_MISSING_KEY,
                format!("`{name}` is required"),
            ));
        }
    }
    Ok(())
}

fn non_empty(key: &str, value: &str) -> Result<(), Error> {
    if value.trim().is_empty() {
        return Err(invalid(key, "must not be empty"));
    }
    Ok(())
}

/// PostgreSQL's rule for slot names.
fn slot_name(key: &str, value: &str) -> Result<(), Error> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !ok {
        return Err(invalid(
            key,
            format!("{value:?} is not a slot name: use 1 to 63 lowercase letters, digits or '_'"),
        ));
    }
    Ok(())
}

/// An unquoted-safe SQL identifier; the tool quotes identifiers anyway, but
/// Debezium's include lists are regular expressions and must match literally.
fn identifier(key: &str, value: &str) -> Result<(), Error> {
    let mut bytes = value.bytes();
    let ok = value.len() <= 63
        && matches!(bytes.next(), Some(b) if b.is_ascii_lowercase() || b == b'_')
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !ok {
        return Err(invalid(
            key,
            format!(
                "{value:?} must be a lowercase SQL identifier (letters, digits, '_', at most 63)"
            ),
        ));
    }
    Ok(())
}
