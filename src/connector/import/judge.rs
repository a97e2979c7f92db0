//! What of a deployment's settings the relay honours byte for byte, what it
//! refuses (with a code and the setting's name), and what decides no byte
//! of the router's records and is left behind.

use std::collections::BTreeMap;

use super::read::{Deployment, Source};
use crate::contract::converters::Registry;
use crate::contract::definition::{Contract, ContractName, Converters};
use crate::contract::options::RouterOptions;
use crate::error::Code;

/// A setting the relay cannot honour byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: Code,
    /// The setting, by Kafka Connect's name.
    pub setting: String,
    pub why: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.code, self.setting, self.why)
    }
}

/// Where a password comes from: a reference, never the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretReference {
    Env(String),
    /// A file; with a key, a Java properties file and that key's value.
    File {
        path: String,
        key: Option<String>,
    },
}

/// The relay's configuration made of a deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    pub source: Source,
    pub host: Option<String>,
    pub port: Option<String>,
    pub dbname: Option<String>,
    pub user: Option<String>,
    pub password: Option<SecretReference>,
    pub sslmode: Option<String>,
    pub sslrootcert: Option<String>,
    pub publication: String,
    pub contract: ContractName,
    pub schema: String,
    pub table: String,
    /// The messaging contract's topic prefix.
    pub topic_prefix: Option<String>,
    pub converters: Converters,
    /// The router's options as the deployment set them.
    pub router: BTreeMap<String, String>,
    pub bootstrap_servers: String,
    pub connector_name: Option<String>,
    /// The connector's slot, which a takeover streams from.
    pub slot: String,
    pub logical_name: Option<String>,
    pub heartbeat_interval_ms: Option<String>,
    /// Settings that decide no byte of the router's records, each with why.
    pub left_behind: Vec<(String, &'static str)>,
}

const POSTGRES_CONNECTOR: &str = "io.debezium.connector.postgresql.PostgresConnector";
const EVENT_ROUTER: &str = "io.debezium.transforms.outbox.EventRouter";
/// Debezium's defaults where the file sets none.
const DEFAULT_SLOT: &str = "debezium";
const DEFAULT_PUBLICATION: &str = "dbz_publication";

/// Settings the relay carries over, each read below.
const CARRIED: &[&str] = &[
    "connector.class",
    "plugin.name",
    "database.hostname",
    "database.port",
    "database.user",
    "database.password",
    "database.dbname",
    "database.sslmode",
    "database.sslrootcert",
    "topic.prefix",
    "slot.name",
    "publication.name",
    "table.include.list",
    "transforms",
    "heartbeat.interval.ms",
];

/// Connector settings that decide bytes of the router's records: the values
/// the relay reproduces (the first is Debezium's default; an absent setting
/// has it). Any other value is refused.
const DECIDING: &[(&str, &[&str], Code, &str)] = &[
    ("binary.handling.mode", &["bytes"], Code::IMPORT_OPTION_UNSUPPORTED, "the relay writes bytea columns as bytes"),
    ("time.precision.mode", &["adaptive", "adaptive_time_microseconds"], Code::IMPORT_OPTION_UNSUPPORTED, "the relay writes timestamps in Debezium's adaptive forms"),
    ("field.name.adjustment.mode", &["none"], Code::IMPORT_NAMES_ADJUSTED, "adjusted field names change the envelope's and the expanded payload's names"),
    ("sanitize.field.names", &["false"], Code::IMPORT_NAMES_ADJUSTED, "sanitized field names change the envelope's and the expanded payload's names"),
    ("extended.headers.enabled", &["false"], Code::IMPORT_OPTION_UNSUPPORTED, "Debezium 3.2+ adds __debezium.context.* headers to every record, one of them a random id per run, which no other process can reproduce; set it to false in the deployment first (consumers then see four headers fewer)"),
    ("provide.transaction.metadata", &["false"], Code::IMPORT_OPTION_UNSUPPORTED, "the relay writes no transaction topic"),
    ("post.processors", &[""], Code::IMPORT_OPTION_UNSUPPORTED, "post processors change the row before the router sees it"),
    ("converters", &[""], Code::IMPORT_OPTION_UNSUPPORTED, "custom column converters change the row's values"),
    ("column.include.list", &[""], Code::IMPORT_OPTION_UNSUPPORTED, "a column list changes the row the router sees"),
    ("column.exclude.list", &[""], Code::IMPORT_OPTION_UNSUPPORTED, "a column list changes the row the router sees"),
];

/// Prefixes of connector settings that change values (masks, truncation).
const DECIDING_PREFIXES: &[&str] = &["column.mask.", "column.truncate."];

/// The converter set the deployment names, when the relay writes it.
fn converters(d: &Deployment, refused: &mut Vec<Refusal>) -> Option<Converters> {
    Converters::from_settings(&d.settings)
        .map_err(|problems| {
            refused.extend(problems.into_iter().map(|p| Refusal {
                code: match p.registry {
                    Registry::Needed => Code::CONVERTER_NEEDS_REGISTRY,
                    Registry::NotNeeded => Code::IMPORT_CONVERTER_UNSUPPORTED,
                },
                setting: p.setting,
                why: p.why,
            }))
        })
        .ok()
}

/// `schema.table` from an include list of exactly one table, as the
/// connector reads it (a regular expression, where `.` and `\.` both match
/// the dot).
fn table(list: Option<&String>) -> Result<(String, String), String> {
    let Some(list) = list.map(|l| l.trim()).filter(|l| !l.is_empty()) else {
        return Err(
            "not set: the connector captures every table, and the relay streams one".into(),
        );
    };
    if list.contains(',') {
        return Err(format!(
            "{list:?} names several tables, and the relay streams one"
        ));
    }
    let plain = list.replace("\\.", ".");
    let ident = |s: &str| {
        s.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
    };
    match plain.split_once('.') {
        Some((schema, table)) if ident(schema) && ident(table) => {
            Ok((schema.to_string(), table.to_string()))
        }
        _ => Err(format!(
            "{list:?} is a pattern, not one schema.table: the relay streams one table"
        )),
    }
}

/// A password as a reference: Kafka's config providers (`env`, `file`,
/// `directory`), or Debezium Server's `${NAME}`.
fn secret(value: &str, source: Source) -> Option<SecretReference> {
    let inner = value.trim().strip_prefix("${")?.strip_suffix('}')?;
    match inner.split_once(':') {
        Some(("env", name)) => Some(SecretReference::Env(name.to_string())),
        Some(("file", rest)) => {
            let (path, key) = rest.rsplit_once(':')?;
            Some(SecretReference::File {
                path: path.to_string(),
                key: Some(key.to_string()),
            })
        }
        Some(("directory", rest)) => {
            let (dir, file) = rest.rsplit_once(':')?;
            Some(SecretReference::File {
                path: format!("{}/{file}", dir.trim_end_matches('/')),
                key: None,
            })
        }
        None if source == Source::DebeziumServer => Some(SecretReference::Env(inner.to_string())),
        _ => None,
    }
}

/// Judges a deployment: the relay's configuration, or every refusal.
pub fn judge(d: &Deployment, bootstrap: &str) -> Result<Imported, Vec<Refusal>> {
    let s = &d.settings;
    let mut refused = Vec::new();
    let mut refuse = |code: Code, setting: &str, why: String| {
        refused.push(Refusal {
            code,
            setting: setting.to_string(),
            why,
        })
    };
    let get = |k: &str| s.get(k).map(|v| v.trim().to_string());

    let class = get("connector.class").unwrap_or_default();
    if class != POSTGRES_CONNECTOR && class != "PostgresConnector" {
        refuse(
            Code::IMPORT_NOT_POSTGRES,
            "connector.class",
            format!("{class:?}: the relay reads PostgreSQL ({POSTGRES_CONNECTOR})"),
        );
    }
    match get("plugin.name").as_deref() {
        Some("pgoutput") => {}
        other => refuse(
            Code::IMPORT_PLUGIN_UNSUPPORTED,
            "plugin.name",
            format!(
                "{}: the relay decodes pgoutput",
                other.map_or(
                    "not set (Debezium's default is decoderbufs)".into(),
                    |p| format!("{p:?}")
                )
            ),
        ),
    }
    if let Some(sink) = get("debezium.sink.type") {
        refuse(
            Code::IMPORT_OPTION_UNSUPPORTED,
            "debezium.sink.type",
            format!("{sink:?}: the relay writes to Kafka"),
        );
    }
    for (key, allowed, code, why) in DECIDING {
        if let Some(v) = get(key) {
            if !allowed.iter().any(|a| a.eq_ignore_ascii_case(&v)) {
                refuse(*code, key, format!("{v:?}: {why}"));
            }
        } else if key == &"extended.headers.enabled" {
            refuse(*code, key, format!("not set (true by default): {why}"));
        }
    }
    for key in s.keys() {
        if DECIDING_PREFIXES.iter().any(|p| key.starts_with(p)) {
            refuse(
                Code::IMPORT_OPTION_UNSUPPORTED,
                key,
                "masks and truncation change the row's values".into(),
            );
        }
    }
    if let Some(ops) = get("skipped.operations") {
        if ops.split(',').any(|o| o.trim() == "c") {
            refuse(
                Code::IMPORT_OPTION_UNSUPPORTED,
                "skipped.operations",
                format!("{ops:?} skips inserts, which are the outbox's events"),
            );
        }
    }

    // The transform chain: the Event Router alone, unconditioned.
    let aliases: Vec<String> = get("transforms")
        .unwrap_or_default()
        .split(',')
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty())
        .collect();
    let mut router_alias = None;
    for alias in &aliases {
        let ty = get(&format!("transforms.{alias}.type")).unwrap_or_default();
        if ty != EVENT_ROUTER {
            refuse(
                Code::IMPORT_TRANSFORM_CHAIN,
                &format!("transforms.{alias}.type"),
                format!(
                    "{ty:?}: the relay reproduces the Outbox Event Router ({EVENT_ROUTER}) alone"
                ),
            );
        } else if router_alias.is_some() {
            refuse(
                Code::IMPORT_TRANSFORM_CHAIN,
                "transforms",
                "the Outbox Event Router twice".into(),
            );
        } else {
            router_alias = Some(alias.clone());
        }
        for conditional in ["predicate", "negate"] {
            let key = format!("transforms.{alias}.{conditional}");
            if s.contains_key(&key) {
                refuse(
                    Code::IMPORT_PREDICATE,
                    &key,
                    "a predicate decides which records a transform sees; the relay routes every row".into(),
                );
            }
        }
    }
    if aliases.is_empty() {
        refuse(
            Code::IMPORT_TRANSFORM_CHAIN,
            "transforms",
            "no Outbox Event Router: the connector emits change events, which the relay does not"
                .into(),
        );
    }
    let mut router = BTreeMap::new();
    let mut left_behind: Vec<(String, &'static str)> = Vec::new();
    if let Some(alias) = &router_alias {
        let prefix = format!("transforms.{alias}.");
        for (k, v) in s {
            let Some(option) = k.strip_prefix(&prefix) else {
                continue;
            };
            match option {
                "type" | "predicate" | "negate" => {}
                o if o.starts_with("tracing.") => left_behind.push((
                    k.clone(),
                    "tracing decides no byte of the records; the relay's own is [otel]",
                )),
                o => {
                    router.insert(o.to_string(), v.clone());
                }
            }
        }
    }
    let options = RouterOptions::from_options(&router).map_err(|e| e.detail().to_string());
    if let Err(why) = &options {
        refuse(
            Code::CONTRACT_OPTION_INVALID,
            &format!("transforms.{}", router_alias.as_deref().unwrap_or("?")),
            why.clone(),
        );
    }

    let converters = converters(d, &mut refused);
    let (schema, table) = match table(s.get("table.include.list")) {
        Ok(t) => t,
        Err(why) => {
            refused.push(Refusal {
                code: Code::IMPORT_OPTION_UNSUPPORTED,
                setting: "table.include.list".into(),
                why,
            });
            (String::new(), String::new())
        }
    };
    let password = match s.get("database.password") {
        None => None,
        Some(v) => match secret(v, d.source) {
            Some(r) => Some(r),
            None => {
                refused.push(Refusal {
                    code: Code::IMPORT_SECRET_LITERAL,
                    setting: "database.password".into(),
                    why: "is not a config provider reference (${env:NAME}, ${file:PATH:KEY} or ${directory:DIR:FILE}); the relay takes passwords by reference and the value is not repeated here".into(),
                });
                None
            }
        },
    };

    let uses = |k: &str| {
        CARRIED.contains(&k)
            || DECIDING.iter().any(|(d, ..)| *d == k)
            || DECIDING_PREFIXES.iter().any(|p| k.starts_with(p))
            || k.starts_with("transforms.")
            || k.starts_with("key.converter")
            || k.starts_with("value.converter")
            || k.starts_with("header.converter")
            || k == "debezium.sink.type"
            || k == "skipped.operations"
    };
    for k in s.keys().filter(|k| !uses(k)) {
        left_behind.push((k.clone(), "decides no byte of the router's records"));
    }
    left_behind.sort();

    let (Ok(options), Some(converters), true) = (options, converters, refused.is_empty()) else {
        return Err(refused);
    };
    // The platform's own contract, when the options are exactly its.
    let messaging_prefix = options
        .topic_replacement
        .strip_suffix("${routedByValue}")
        .filter(|p| {
            Contract::messaging(p).router == options && converters == Converters::platform()
        })
        .map(str::to_string);
    Ok(Imported {
        source: d.source,
        host: get("database.hostname"),
        port: get("database.port"),
        dbname: get("database.dbname"),
        user: get("database.user"),
        password,
        sslmode: get("database.sslmode"),
        sslrootcert: get("database.sslrootcert"),
        publication: get("publication.name").unwrap_or_else(|| DEFAULT_PUBLICATION.into()),
        contract: match messaging_prefix {
            Some(_) => ContractName::Messaging,
            None => ContractName::Debezium,
        },
        schema,
        table,
        router: if messaging_prefix.is_some() {
            BTreeMap::new()
        } else {
            router
        },
        topic_prefix: messaging_prefix,
        converters,
        bootstrap_servers: bootstrap.to_string(),
        connector_name: d.name.clone(),
        slot: get("slot.name").unwrap_or_else(|| DEFAULT_SLOT.into()),
        logical_name: get("topic.prefix"),
        heartbeat_interval_ms: get("heartbeat.interval.ms"),
        left_behind,
    })
}
