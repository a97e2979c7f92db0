//! The keys each table of `outbox-cdc.toml` takes, read from the section
//! types' own serde definitions (never a second list), so an unknown key is
//! found before anything else is checked and named with the nearest known
//! one.

use serde::de::{self, Deserialize, Visitor};

use super::*;
use crate::error::{Code, Error};

/// A table of the file and the keys it takes.
struct Table {
    /// `""` for the top level, else a dotted path (`relay.transactional`).
    path: &'static str,
    keys: &'static [&'static str],
}

/// What a capture deserializer found: the struct's field names.
#[derive(Debug)]
struct Fields(&'static [&'static str]);

impl std::fmt::Display for Fields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "fields")
    }
}

impl std::error::Error for Fields {}

impl de::Error for Fields {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Fields(&[])
    }
}

/// Answers `deserialize_struct` with the field names and nothing else.
struct Capture;

impl<'de> de::Deserializer<'de> for Capture {
    type Error = Fields;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Fields> {
        Err(Fields(&[]))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Fields> {
        Err(Fields(fields))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// The keys of a section type, as serde names them.
fn keys_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    match T::deserialize(Capture) {
        Err(Fields(keys)) => keys,
        Ok(_) => &[],
    }
}

fn tables() -> Vec<Table> {
    let table = |path, keys| Table { path, keys };
    vec![
        table("", keys_of::<Config>()),
        table("postgres", keys_of::<PostgresConfig>()),
        table("outbox", keys_of::<OutboxConfig>()),
        table("kafka", keys_of::<KafkaConfig>()),
        table("relay", keys_of::<RelayConfig>()),
        table(
            "relay.transactional",
            keys_of::<relay::TransactionalConfig>(),
        ),
        table("debezium", keys_of::<DebeziumConfig>()),
        table("debezium.server", keys_of::<DebeziumServerConfig>()),
        table("debezium.strimzi", keys_of::<StrimziConfig>()),
        table("http", keys_of::<HttpConfig>()),
        table("otel", keys_of::<OtelConfig>()),
    ]
}

/// The first key or section of `table` that no definition takes, with the
/// nearest one that exists.
pub(super) fn unknown(table: &toml::Table) -> Option<Error> {
    let known = tables();
    // Other tables (`kafka.properties`, a secret's `{ env = ... }`) are
    // free-form or checked by their own decoding.
    let keys_at = |path: &str| known.iter().find(|t| t.path == path).map(|t| t.keys);
    let mut pending: Vec<(String, &toml::Table)> = vec![(String::new(), table)];
    while let Some((path, t)) = pending.pop() {
        let Some(keys) = keys_at(&path) else { continue };
        let mut names: Vec<&String> = t.keys().collect();
        names.sort();
        for name in names {
            let full = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}.{name}")
            };
            if !keys.contains(&name.as_str()) {
                let what = if path.is_empty() {
                    format!("unknown section `[{name}]`")
                } else {
                    format!("unknown key `{full}`")
                };
                let hint = crate::spelling::nearest(name, keys).map_or(String::new(), |k| {
                    if path.is_empty() {
                        format!(": did you mean `[{k}]`?")
                    } else {
                        format!(": did you mean `{path}.{k}`?")
                    }
                });
                return Some(Error::new(
                    Code::CONFIG_UNKNOWN_KEY,
                    format!("{what}{hint}"),
                ));
            }
            if let Some(sub) = t.get(name).and_then(toml::Value::as_table) {
                pending.push((full, sub));
            }
        }
    }
    None
}

/// Keys whose value is a table or a secret reference: not one value an
/// environment variable could carry.
const NOT_SCALAR: &[&str] = &[
    "kafka.properties",
    "outbox.router",
    "postgres.password",
    "debezium.password",
    "debezium.strimzi.password_secret",
];

/// Every key that takes one value, as (table path, key), in the order the
/// definitions give them: what the environment can override.
pub(crate) fn scalar_keys() -> Vec<(&'static str, &'static str)> {
    let known = tables();
    let is_table = |full: &str| known.iter().any(|t| t.path == full);
    known
        .iter()
        .filter(|t| !t.path.is_empty())
        .flat_map(|t| t.keys.iter().map(move |k| (t.path, *k)))
        .filter(|(path, key)| {
            let full = format!("{path}.{key}");
            !is_table(&full) && !NOT_SCALAR.contains(&full.as_str())
        })
        .collect()
}

/// Every key, scalar or not, as `section.key`.
pub(crate) fn all_keys() -> Vec<String> {
    tables()
        .iter()
        .filter(|t| !t.path.is_empty())
        .flat_map(|t| t.keys.iter().map(move |k| format!("{}.{k}", t.path)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keys_are_the_types_own() {
        let postgres = keys_of::<PostgresConfig>();
        assert!(postgres.contains(&"dbname") && postgres.contains(&"wal_receiver_timeout_secs"));
        assert!(keys_of::<Config>().contains(&"otel"));
        assert!(keys_of::<relay::TransactionalConfig>().contains(&"progress_topic"));
    }
}
