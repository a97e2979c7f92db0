//! The configuration reference (`docs/reference/configuration.md`), written
//! from what each section says its keys mean (its `MEANINGS`, beside the
//! keys), the keys the sections' serde definitions take (`keys`), the
//! defaults their `Default`s give and the overrides' names.

/// Each key and what it means, from the sections' own lists; a test fails
/// when a key has none.
fn meanings() -> impl Iterator<Item = &'static (&'static str, &'static str)> {
    [
        super::postgres::MEANINGS,
        super::outbox::MEANINGS,
        super::kafka::MEANINGS,
        super::relay::MEANINGS,
        super::debezium::MEANINGS,
        super::http::MEANINGS,
        crate::otel::config::MEANINGS,
    ]
    .into_iter()
    .flatten()
}

use super::keys;

/// Keys the file must give when their section is there.
const REQUIRED: &[&str] = &[
    "postgres.dbname",
    "postgres.user",
    "kafka.bootstrap_servers",
    "http.listen",
    "otel.endpoint",
];

/// A configuration with every section, the required keys given
/// placeholders: what serde's defaults make of the rest.
pub(super) fn defaults() -> Option<toml::Table> {
    let text =
        "[postgres]\ndbname = \"d\"\nuser = \"u\"\n[kafka]\nbootstrap_servers = \"k:9092\"\n\
                [http]\nlisten = \"127.0.0.1:1\"\n\
                [otel]\nendpoint = \"http://127.0.0.1:1\"\n";
    let cfg = super::Config::parse(text, std::path::Path::new("defaults"), &|_| None).ok()?;
    toml::Table::try_from(&cfg).ok()
}

/// The value at a dotted path of a table (`relay.transactional.max_ms`).
pub(crate) fn at<'a>(table: &'a toml::Table, path: &str) -> Option<&'a toml::Value> {
    let mut parts = path.split('.');
    let mut value = table.get(parts.next()?)?;
    for part in parts {
        value = value.as_table()?.get(part)?;
    }
    Some(value)
}

/// A key's default as TOML writes it; `None` for a required key, `Some("")`
/// for one that is unset unless given.
pub fn default_of(key: &str) -> Option<String> {
    if REQUIRED.contains(&key) {
        return None;
    }
    let defaults = defaults()?;
    Some(at(&defaults, key).map_or(String::new(), toml::Value::to_string))
}

/// The configuration reference: each table's keys with type, default,
/// environment variable and meaning.
pub fn reference_markdown() -> String {
    let defaults = defaults().unwrap_or_default();
    let scalar: Vec<String> = keys::scalar_keys()
        .iter()
        .map(|(t, k)| format!("{t}.{k}"))
        .collect();
    let mut out = String::from(
        "# Configuration reference\n\nGenerated from the configuration's definitions (`src/config/`; `scripts/regenerate.sh`); do not edit by hand.\n\
         `[postgres]` and `[kafka]` are required, every other section optional; `[http]` and `[otel]` are off when absent, \
         `[relay.transactional]` applies to `relay.delivery = \"transactional\"` only. \
         Each key that takes one value can be set from the environment by the variable named.\n",
    );
    let mut table = String::new();
    for (key, meaning) in meanings() {
        let (section, name) = key.rsplit_once('.').unwrap_or(("", key));
        if section != table {
            out.push_str(&format!(
                "\n## [{section}]\n\n| key | type | default | environment | meaning |\n|---|---|---|---|---|\n"
            ));
            table = section.to_string();
        }
        let value = at(&defaults, key);
        let kind = match value {
            _ if !scalar.contains(&key.to_string()) => "table or reference",
            Some(toml::Value::String(_)) => "text",
            Some(toml::Value::Integer(_)) => "integer",
            Some(toml::Value::Boolean(_)) => "true or false",
            Some(toml::Value::Float(_)) => "number",
            Some(_) => "table or reference",
            None => "text or integer, optional",
        };
        let default = if REQUIRED.contains(key) {
            "required".to_string()
        } else {
            value.map_or("unset".to_string(), |v| {
                format!("`{}`", v.to_string().replace('|', "\\|"))
            })
        };
        let env = if scalar.contains(&key.to_string()) {
            format!("`{}`", super::env_override_name(section, name))
        } else {
            "none".to_string()
        };
        out.push_str(&format!(
            "| `{name}` | {kind} | {default} | {env} | {} |\n",
            meaning.replace('|', "\\|")
        ));
    }
    out.push_str(&router_options());
    out
}

/// `[outbox.router]`'s keys: the Outbox Event Router's options, from their
/// one table (`contract::options`).
fn router_options() -> String {
    let mut out = String::from(
        "\n## [outbox.router]\n\nThe `debezium` contract's Outbox Event Router options, by the router's own names \
         (`\"table.field.event.key\" = \"order_id\"`); an option left out has the router's 3.6 default. \
         Any other key is refused, with the nearest option named.\n\n\
         | option | default | meaning |\n|---|---|---|\n",
    );
    for o in crate::contract::options::OPTIONS {
        let default = o.default.map_or("unset".to_string(), |d| format!("`{d}`"));
        out.push_str(&format!(
            "| `{}` | {} | {} |\n",
            o.key,
            default.replace('|', "\\|"),
            o.doc.replace('|', "\\|")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_has_its_meaning_and_every_meaning_its_key() {
        let tables = ["debezium.server", "debezium.strimzi", "relay.transactional"];
        let known: Vec<String> = keys::all_keys()
            .into_iter()
            .filter(|k| !tables.contains(&k.as_str()))
            .collect();
        for key in &known {
            assert!(meanings().any(|(k, _)| k == key), "{key} has no meaning");
        }
        for (key, meaning) in meanings() {
            assert!(known.contains(&key.to_string()), "{key} is no key");
            assert!(!meaning.is_empty(), "{key}");
        }
        assert_eq!(
            default_of("relay.max_in_flight_messages").as_deref(),
            Some("2500")
        );
        assert_eq!(default_of("postgres.dbname"), None);
    }
}
