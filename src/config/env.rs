//! Environment overrides: `OUTBOX_CDC_<SECTION>_<KEY>` for the keys listed
//! here, applied to the file's table before it is decoded.

use super::invalid;
use crate::error::Error;

/// Prefix of the environment variables that override file values.
pub const ENV_PREFIX: &str = "OUTBOX_CDC_";

/// The kind of value an environment override carries.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Str,
    Int,
    /// An integer, or a comma-separated list kept as a string.
    IntOrList,
}

/// Environment overrides: `OUTBOX_CDC_<SECTION>_<KEY>` for these keys. The
/// README's configuration reference lists the same table.
const ENV_OVERRIDES: &[(&str, &str, Kind)] = &[
    ("postgres", "host", Kind::Str),
    ("postgres", "port", Kind::IntOrList),
    ("postgres", "dbname", Kind::Str),
    ("postgres", "user", Kind::Str),
    ("postgres", "sslmode", Kind::Str),
    ("postgres", "sslrootcert", Kind::Str),
    ("postgres", "application_name", Kind::Str),
    ("postgres", "slot", Kind::Str),
    ("postgres", "publication", Kind::Str),
    ("outbox", "schema", Kind::Str),
    ("outbox", "table", Kind::Str),
    ("outbox", "topic_prefix", Kind::Str),
    ("kafka", "bootstrap_servers", Kind::Str),
    ("debezium", "connector_name", Kind::Str),
    ("debezium", "slot", Kind::Str),
    ("debezium", "topic_prefix", Kind::Str),
    ("debezium", "database_hostname", Kind::Str),
    ("debezium", "database_port", Kind::Int),
];

/// The environment variable that overrides `section.key`.
pub fn env_override_name(section: &str, key: &str) -> String {
    format!(
        "{ENV_PREFIX}{}_{}",
        section.to_ascii_uppercase(),
        key.to_ascii_uppercase()
    )
}

/// Every override variable with the key it sets, for documentation.
pub fn env_overrides() -> Vec<(String, String)> {
    ENV_OVERRIDES
        .iter()
        .map(|(s, k, _)| (env_override_name(s, k), format!("{s}.{k}")))
        .collect()
}

pub(super) fn apply_env_overrides(
    table: &mut toml::Table,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), Error> {
    for (section, key, kind) in ENV_OVERRIDES {
        let name = env_override_name(section, key);
        let Some(raw) = env(&name) else { continue };
        let value = match kind {
            Kind::Str => toml::Value::String(raw),
            Kind::IntOrList => match raw.trim().parse() {
                Ok(n) => toml::Value::Integer(n),
                Err(_) if raw.split(',').all(|p| p.trim().parse::<u16>().is_ok()) => {
                    toml::Value::String(raw)
                }
                Err(_) => {
                    return Err(invalid(
                        &format!("{section}.{key}"),
                        format!(
                            "{name}={raw:?} is not an integer or a comma-separated list of them"
                        ),
                    ))
                }
            },
            Kind::Int => toml::Value::Integer(raw.trim().parse().map_err(|_| {
                invalid(
                    &format!("{section}.{key}"),
                    format!("{name}={raw:?} is not an integer"),
                )
            })?),
        };
        let entry = table
            .entry(section.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        match entry {
            toml::Value::Table(t) => {
                t.insert(key.to_string(), value);
            }
            _ => return Err(invalid(section, "must be a table")),
        }
    }
    Ok(())
}
