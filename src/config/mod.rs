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
mod decoding;
pub mod env;
pub mod expressions;
pub mod http;
pub mod kafka;
pub(crate) mod keys;
pub mod objects;
pub mod outbox;
pub mod postgres;
pub mod reference;
pub mod relay;
mod secrets;
#[cfg(test)]
mod tests;

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

pub use crate::otel::{OtelConfig, OtlpProtocol};
pub use debezium::{
    DebeziumConfig, DebeziumServerConfig, OffsetStorage, ProviderReference, SecretKeyRef,
    StrimziConfig,
};
pub use env::{env_override_name, env_overrides, unused_variables, ENV_PREFIX};
pub use http::HttpConfig;
pub use kafka::KafkaConfig;
pub use objects::Objects;
pub use outbox::OutboxConfig;
pub use postgres::{
    Ports, PostgresConfig, SslMode, DEFAULT_PASSWORD_ENV, DEFAULT_WAL_RECEIVER_TIMEOUT_SECS,
};
pub use relay::{Delivery, DeliveryMode, RelayConfig, Role, TransactionalConfig};
pub use secrets::{PropertyValue, SecretSource};

use crate::error::{Code, Error};
use crate::kafka::settings;
pub use crate::secret::Secret;

/// Where configuration values and secrets are looked up by name: the
/// process environment in production, a table in tests.
pub type Env = dyn Fn(&str) -> Option<String> + Send + Sync;

fn invalid(key: &str, reason: impl fmt::Display) -> Error {
    Error::invalid_value(key, reason)
}

fn secret_in_file(key: &str) -> Error {
    Error::new(
        Code::CONFIG_SECRET_IN_FILE,
        format!("`{key}` is a secret; name an environment variable (`{{ env = \"NAME\" }}`) or a file (`{{ file = \"/path\" }}`) instead of writing it in the configuration"),
    )
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    pub postgres: PostgresConfig,
    /// Optional: every key has a default.
    #[serde(default)]
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
            let error = Error::new(
                Code::CONFIG_UNREADABLE,
                format!("cannot read {}: {e}", path.display()),
            );
            match e.kind() {
                std::io::ErrorKind::NotFound => error.hint(
                    "name the configuration with -c FILE or OUTBOX_CDC_CONFIG; outbox-cdc.example.toml is a documented start",
                ),
                _ => error,
            }
        })?;
        Config::parse(&text, path, env)
    }

    /// Loads with the process environment, warning of `OUTBOX_CDC_*`
    /// variables that set nothing.
    pub fn load_from_process_env(path: &Path) -> Result<Config, Error> {
        let config = Config::load(path, &|name| std::env::var(name).ok())?;
        let referenced = config.secret_variables();
        let referenced: Vec<&str> = referenced.iter().map(String::as_str).collect();
        for warning in env::unused_variables(std::env::vars().map(|(k, _)| k), &referenced) {
            tracing::warn!(code = %Code::CONFIG_UNKNOWN_KEY, "{warning}");
        }
        Ok(config)
    }

    /// The environment variables the configuration names for secrets.
    pub fn secret_variables(&self) -> Vec<String> {
        let mut names = Vec::new();
        if let Some(SecretSource::Env { env }) = &self.postgres.password {
            names.push(env.clone());
        }
        for value in self.kafka.properties.values() {
            if let secrets::PropertyValue::Secret(SecretSource::Env { env }) = value {
                names.push(env.clone());
            }
        }
        if let Some(ProviderReference::Env { env }) = &self.debezium.password {
            names.push(env.clone());
        }
        names
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
        let applied = env::apply_env_overrides(&mut table, env)?;
        expressions::resolve(&mut table, "", env)?;
        RelayConfig::check_raw(table.get("relay"))?;
        // A misspelt key or section, before the required ones it may be.
        if let Some(e) = keys::unknown(&table) {
            return Err(e);
        }
        require_keys(&table)?;

        let (mut config, unknown) = decode(table, &applied, &syntax)?;
        // Debezium names the envelope's schema after its logical name: the
        // contract's bytes need it.
        config.outbox.logical_name = config.debezium.topic_prefix.clone();
        config.outbox.debezium = outbox::Deployed {
            version: config.debezium.release()?,
            extended_headers: config.debezium.extended_headers,
        };
        if let Some(key) = unknown.into_iter().next() {
            return Err(Error::new(
                Code::CONFIG_UNKNOWN_KEY,
                format!("unknown key `{key}` in {}", path.display()),
            ));
        }
        config.validate().map_err(|e| {
            // A refused value an environment variable set: name the variable.
            match applied
                .iter()
                .find(|a| Some(a.key.as_str()) == e.config_key())
            {
                Some(a) => e.context(format!("{}={:?}", a.variable, a.value)),
                None => e,
            }
        })?;
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

    /// The outbox's objects in PostgreSQL.
    pub fn objects(&self) -> Objects {
        Objects {
            outbox: self.outbox.clone(),
            user: self.postgres.user.clone(),
            dbname: self.postgres.dbname.clone(),
            publication: self.postgres.publication.clone(),
            slot: self.postgres.slot.clone(),
            debezium_slot: self.debezium.slot.clone(),
        }
    }
}

/// Decodes the table, naming the key a value fails at (and the variable,
/// when one set it). A variable's value read as a number or a boolean
/// where the key takes text is taken as text and decoded again, once.
fn decode(
    mut table: toml::Table,
    applied: &[env::Applied],
    syntax: &dyn Fn(String) -> Error,
) -> Result<(Config, Vec<String>), Error> {
    let mut as_text: Vec<&str> = Vec::new();
    loop {
        let mut unknown = Vec::new();
        let mut note = |p: serde_ignored::Path<'_>| unknown.push(p.to_string());
        let decoder =
            serde_ignored::Deserializer::new(toml::Value::Table(table.clone()), &mut note);
        let result: Result<Config, serde_path_to_error::Error<toml::de::Error>> =
            serde_path_to_error::deserialize(decoder);
        let e = match result {
            Ok(config) => return Ok((config, unknown)),
            Err(e) => e,
        };
        let key = e.path().to_string();
        let reason = decoding::plain(&key, &e.inner().to_string());
        let Some(a) = applied.iter().find(|a| a.key == key) else {
            return Err(syntax(format!("`{key}`: {reason}")));
        };
        if as_text.contains(&a.key.as_str())
            || matches!(env::scalar(&a.value), toml::Value::String(_))
        {
            return Err(invalid(
                &key,
                format!("{}={:?}: {reason}", a.variable, a.value),
            ));
        }
        env::set(&mut table, &a.key, toml::Value::String(a.value.clone()))?;
        as_text.push(&a.key);
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
