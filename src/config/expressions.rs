//! References in the configuration's values, resolved when it is read, as
//! Kafka Connect's config providers resolve a connector's: `${env:NAME}`
//! (with `${env:NAME:-DEFAULT}` for a default, as Debezium Server's
//! `${NAME:DEFAULT}` reads), `${file:PATH:KEY}` (a key of a Java properties
//! file) and `${directory:DIR:FILE}` (a file's content). A value that is
//! one reference takes its key's type (a number where the key's default is
//! one, text otherwise); a reference inside a longer text is replaced in it. `connector-config
//! import` writes a deployment's expressions this way, so a value known
//! only where the relay runs is never copied literally. Anything else in
//! `${...}` (a router's `${routedByValue}`) is left as it is.

use super::env::scalar;
use crate::error::{Code, Error};

/// The providers the relay resolves.
const PROVIDERS: [&str; 3] = ["env:", "file:", "directory:"];

/// Resolves every reference in the table's string values (nested tables
/// and arrays too); `key` is the table's path, for errors.
pub(super) fn resolve(
    table: &mut toml::Table,
    key: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), Error> {
    let mut types = Types::default();
    walk(
        table,
        key,
        &mut Lookup {
            env,
            types: &mut types,
        },
    )
}

/// What a walk needs: the environment, and the keys' defaults for their types.
struct Lookup<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    types: &'a mut Types,
}

/// The configuration's defaults, read once a whole-value reference needs
/// its key's type.
#[derive(Default)]
struct Types(Option<Option<toml::Table>>);

impl Types {
    /// Whether `key`'s default is a number or a boolean.
    fn is_scalar(&mut self, key: &str) -> bool {
        let defaults = self.0.get_or_insert_with(super::reference::defaults);
        let value = defaults.as_ref().and_then(|d| super::reference::at(d, key));
        matches!(
            value,
            Some(toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_))
        )
    }
}

fn walk(table: &mut toml::Table, key: &str, lookup: &mut Lookup<'_>) -> Result<(), Error> {
    for (name, value) in table.iter_mut() {
        let path = match key {
            "" => name.clone(),
            k => format!("{k}.{name}"),
        };
        resolve_value(value, &path, lookup)?;
    }
    Ok(())
}

fn resolve_value(value: &mut toml::Value, key: &str, lookup: &mut Lookup<'_>) -> Result<(), Error> {
    match value {
        toml::Value::String(text) if text.contains("${") => {
            let whole = is_one_reference(text);
            let resolved = substitute(text, key, lookup.env)?;
            *value = match whole && lookup.types.is_scalar(key) {
                true => scalar(&resolved),
                false => toml::Value::String(resolved),
            };
        }
        toml::Value::Table(t) => walk(t, key, lookup)?,
        toml::Value::Array(items) => {
            for item in items {
                resolve_value(item, key, lookup)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Whether `text` is a single reference the relay resolves, and nothing else.
fn is_one_reference(text: &str) -> bool {
    text.starts_with("${")
        && text.ends_with('}')
        && text.matches("${").count() == 1
        && is_reference(&text[2..])
}

/// `text` with each reference replaced by what it names.
fn substitute(
    text: &str,
    key: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, Error> {
    each_expression(text, |inner, whole| match is_reference(inner) {
        true => lookup(inner, key, env),
        // Not a reference: a router's group, kept as written.
        false => Ok(whole.to_string()),
    })
}

/// Whether the inside of a `${...}` is a reference the relay resolves.
pub fn is_reference(inner: &str) -> bool {
    PROVIDERS.iter().any(|p| inner.starts_with(p))
}

/// `text` with each `${...}` replaced by what `rewrite` makes of its inside
/// and of the whole expression; an unclosed `${` stays as written.
pub fn each_expression<E>(
    text: &str,
    mut rewrite: impl FnMut(&str, &str) -> Result<String, E>,
) -> Result<String, E> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        out.push_str(&rewrite(&after[..end], &rest[start..start + 2 + end + 1])?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn unavailable(key: &str, reference: &str, why: String) -> Error {
    Error::new(
        Code::CONFIG_REFERENCE_UNAVAILABLE,
        format!("`{key}`: ${{{reference}}}: {why}"),
    )
}

/// What one reference (`env:NAME`, `file:PATH:KEY`, `directory:DIR:FILE`)
/// names.
fn lookup(inner: &str, key: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, Error> {
    let (provider, rest) = inner.split_once(':').unwrap_or((inner, ""));
    match provider {
        "env" => {
            let (name, default) = match rest.split_once(":-") {
                Some((name, default)) => (name, Some(default)),
                None => (rest, None),
            };
            env(name)
                .or_else(|| default.map(str::to_string))
                .ok_or_else(|| {
                    unavailable(
                        key,
                        inner,
                        format!("environment variable {name} is not set"),
                    )
                })
        }
        "file" => {
            let (path, prop) = rest.rsplit_once(':').ok_or_else(|| {
                unavailable(key, inner, "a file reference is ${file:PATH:KEY}".into())
            })?;
            let text = std::fs::read_to_string(path)
                .map_err(|e| unavailable(key, inner, format!("cannot read {path}: {e}")))?;
            let pairs = crate::format::properties::parse(&text);
            crate::format::properties::get(&pairs, prop)
                .ok_or_else(|| unavailable(key, inner, format!("{path} has no key {prop}")))
        }
        _ => {
            let (dir, file) = rest.rsplit_once(':').ok_or_else(|| {
                unavailable(
                    key,
                    inner,
                    "a directory reference is ${directory:DIR:FILE}".into(),
                )
            })?;
            let path = std::path::Path::new(dir).join(file);
            std::fs::read_to_string(&path)
                .map(|s| s.strip_suffix('\n').unwrap_or(&s).to_string())
                .map_err(|e| {
                    unavailable(key, inner, format!("cannot read {}: {e}", path.display()))
                })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "DB" => Some("orders".into()),
            "PORT" => Some("5433".into()),
            _ => None,
        }
    }

    #[test]
    fn references_resolve_with_their_type_and_other_braces_stay() {
        let mut t: toml::Table = r#"
            [postgres]
            dbname = "${env:PORT}"
            port = "${env:PORT}"
            host = "db-${env:DB}.internal"
            user = "${env:USER_UNSET:-relay}"
            [relay]
            max_in_flight_messages = "${env:PORT}"
            [outbox.router]
            "route.topic.replacement" = "events.${routedByValue}"
        "#
        .parse()
        .unwrap();
        resolve(&mut t, "", &env).unwrap();
        let pg = t["postgres"].as_table().unwrap();
        // A number where the key's default is one, text where it is text.
        assert_eq!(pg["dbname"].as_str(), Some("5433"));
        assert_eq!(
            t["relay"]["max_in_flight_messages"].as_integer(),
            Some(5433)
        );
        assert_eq!(pg["port"].as_integer(), Some(5433));
        assert_eq!(pg["host"].as_str(), Some("db-orders.internal"));
        assert_eq!(pg["user"].as_str(), Some("relay"));
        assert_eq!(
            t["outbox"]["router"]["route.topic.replacement"].as_str(),
            Some("events.${routedByValue}")
        );
    }

    #[test]
    fn an_unresolvable_reference_is_refused_naming_its_key() {
        let mut t: toml::Table = "[postgres]\nuser = \"${env:NOPE}\"\n".parse().unwrap();
        let e = resolve(&mut t, "", &env).unwrap_err();
        assert_eq!(e.code(), "CONFIG_REFERENCE_UNAVAILABLE");
        assert_eq!(
            e.detail(),
            "`postgres.user`: ${env:NOPE}: environment variable NOPE is not set"
        );
        let dir = std::env::temp_dir().join(format!("outbox-cdc-refs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("db.properties"), "name=from-file\n").unwrap();
        std::fs::write(dir.join("user"), "from-dir\n").unwrap();
        let mut t: toml::Table = format!(
            "[postgres]\ndbname = \"${{file:{0}/db.properties:name}}\"\nuser = \"${{directory:{0}:user}}\"\n",
            dir.display()
        )
        .parse()
        .unwrap();
        resolve(&mut t, "", &env).unwrap();
        assert_eq!(t["postgres"]["dbname"].as_str(), Some("from-file"));
        assert_eq!(t["postgres"]["user"].as_str(), Some("from-dir"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
