//! Environment overrides: `OUTBOX_CDC_<TABLE>_<KEY>` for every key that
//! takes one value (`OUTBOX_CDC_RELAY_TRANSACTIONAL_MAX_MS` for
//! `relay.transactional.max_ms`), applied to the file's table before it is
//! decoded. The keys come from the sections' own definitions (`keys`).

use super::invalid;
use crate::error::Error;

/// Prefix of the environment variables that override file values.
pub const ENV_PREFIX: &str = "OUTBOX_CDC_";

/// The environment variable that overrides `table.key` (`table` may be a
/// dotted path).
pub fn env_override_name(table: &str, key: &str) -> String {
    format!(
        "{ENV_PREFIX}{}_{}",
        table.replace('.', "_").to_ascii_uppercase(),
        key.to_ascii_uppercase()
    )
}

/// Every override variable with the key it sets, for documentation.
pub fn env_overrides() -> Vec<(String, String)> {
    super::keys::scalar_keys()
        .into_iter()
        .map(|(t, k)| (env_override_name(t, k), format!("{t}.{k}")))
        .collect()
}

/// A value an environment variable set, for errors that blame it.
#[derive(Debug, Clone)]
pub(super) struct Applied {
    /// `table.key`.
    pub(super) key: String,
    pub(super) variable: String,
    pub(super) value: String,
}

/// What TOML would read on the right of `=`, when that is a number or a
/// boolean; otherwise the text itself (a host, a list of ports).
pub(super) fn scalar(raw: &str) -> toml::Value {
    let parsed = format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"));
    match parsed {
        Some(v @ (toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_))) => v,
        _ => toml::Value::String(raw.to_string()),
    }
}

/// Sets `path` (`table.key`, tables created as needed) to `value`.
pub(super) fn set(table: &mut toml::Table, path: &str, value: toml::Value) -> Result<(), Error> {
    let mut parts: Vec<&str> = path.split('.').collect();
    let Some(key) = parts.pop() else {
        return Ok(());
    };
    let mut here = table;
    for (i, part) in parts.iter().enumerate() {
        let entry = here
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        here = match entry {
            toml::Value::Table(t) => t,
            _ => return Err(invalid(&parts[..=i].join("."), "must be a table")),
        };
    }
    here.insert(key.to_string(), value);
    Ok(())
}

pub(super) fn apply_env_overrides(
    table: &mut toml::Table,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Applied>, Error> {
    let mut applied = Vec::new();
    for (name, key) in env_overrides() {
        let Some(raw) = env(&name) else { continue };
        set(table, &key, scalar(&raw))?;
        applied.push(Applied {
            key,
            variable: name,
            value: raw,
        });
    }
    Ok(applied)
}

/// The process's own variables under the prefix that are not overrides.
const OTHER_VARIABLES: &[&str] = &[
    // The build's (build.rs): a packager sets the commit, cargo both.
    "OUTBOX_CDC_COMMIT",
    "OUTBOX_CDC_RUSTC",
    "OUTBOX_CDC_CONFIG",
    "OUTBOX_CDC_LOG",
    "OUTBOX_CDC_LOG_FORMAT",
    super::postgres::DEFAULT_PASSWORD_ENV,
];

/// A warning for each `OUTBOX_CDC_*` variable in `vars` that sets nothing,
/// so a misspelt or unsupported override is not silently ignored.
/// `referenced` are the variables the configuration names for secrets.
pub fn unused_variables(
    vars: impl IntoIterator<Item = String>,
    referenced: &[&str],
) -> Vec<String> {
    let overrides: Vec<String> = env_overrides().into_iter().map(|(v, _)| v).collect();
    let keys = super::keys::all_keys();
    let mut warnings = Vec::new();
    for var in vars {
        if !var.starts_with(ENV_PREFIX)
            || overrides.contains(&var)
            || OTHER_VARIABLES.contains(&var.as_str())
            || referenced.contains(&var.as_str())
        {
            continue;
        }
        let key = keys.iter().find(|k| {
            let (table, key) = k.rsplit_once('.').unwrap_or(("", k));
            env_override_name(table, key) == var
        });
        let message = match key {
            Some(key) => format!(
                "{var} is ignored: `{key}` has no environment override; set it in the configuration file"
            ),
            None => {
                let known: Vec<&str> = overrides
                    .iter()
                    .map(String::as_str)
                    .chain(OTHER_VARIABLES.iter().copied())
                    .collect();
                match crate::spelling::nearest(&var, &known) {
                    Some(near) => format!("{var} is ignored: no such setting; did you mean {near}?"),
                    None => format!("{var} is ignored: no such setting"),
                }
            }
        };
        warnings.push(message);
    }
    warnings.sort();
    warnings
}
