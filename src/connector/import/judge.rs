//! What of a deployment's settings the relay honours byte for byte, what it
//! refuses (with a code and the setting's name), and what decides no byte
//! of the router's records and is left behind. Older names are read by
//! their current meaning first (`legacy`), and expressions become the
//! relay's references (`values`).

use std::collections::BTreeMap;

use super::legacy::{self, Release};
use super::read::{Deployment, Source};
use super::values::{self, Router};
use crate::contract::context::{self, DebeziumVersion};
use crate::contract::converters::Registry;
use crate::contract::definition::{Contract, ContractName, Converters};
use crate::contract::options::{self as router_options, RouterOptions};
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
    /// The Debezium release the deployment runs, and why the import takes it.
    pub release: Release,
    /// `extended.headers.enabled` as the deployment set it.
    pub extended_headers: Option<bool>,
    /// The connector's decoding plugin (its slot's): `pgoutput` or
    /// `decoderbufs`, Debezium's default.
    pub plugin: String,
    /// The connector's `topic.creation.*` settings, without the prefix.
    pub topic_creation: BTreeMap<String, String>,
    /// What the import read otherwise than the file says: older names by
    /// their current meaning, converters the worker decides, expressions as
    /// references, router options Debezium does not read. One line each.
    pub notes: Vec<String>,
}

/// What the user tells the import beyond the file.
#[derive(Debug, Clone, Default)]
pub struct Given {
    /// The brokers, when the file does not name them.
    pub bootstrap: Option<String>,
    /// The Kafka Connect worker's settings (its `connect-distributed.properties`
    /// or a Strimzi `KafkaConnect`'s `spec.config`): the converters the
    /// connector does not name are its.
    pub worker: BTreeMap<String, String>,
    /// The Debezium release and how it is known, when the user names it
    /// or Kafka Connect says it.
    pub version: Option<Release>,
    /// The outbox table (schema, table), when the connector's table list
    /// names more than it or none.
    pub table: Option<(String, String)>,
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
    context::SETTING,
];

/// The decoding plugins the connector reads a slot with; the relay reads
/// its own slot with pgoutput, and takes a slot of either over.
const PLUGINS: [&str; 2] = ["pgoutput", "decoderbufs"];
/// The Kafka Connect worker's converters in Debezium's images and Strimzi:
/// Kafka's JsonConverter with its schemas on.
const WORKER_CONVERTERS: [(&str, &str); 4] = [
    (
        "key.converter",
        "org.apache.kafka.connect.json.JsonConverter",
    ),
    ("key.converter.schemas.enable", "true"),
    (
        "value.converter",
        "org.apache.kafka.connect.json.JsonConverter",
    ),
    ("value.converter.schemas.enable", "true"),
];

/// Connector settings that decide bytes of the router's records: the values
/// the relay reproduces (the first is Debezium's default; an absent setting
/// has it). Any other value is refused.
const DECIDING: &[(&str, &[&str], Code, &str)] = &[
    (
        "binary.handling.mode",
        &["bytes"],
        Code::IMPORT_OPTION_UNSUPPORTED,
        "the relay writes bytea columns as bytes",
    ),
    (
        "time.precision.mode",
        &["adaptive", "adaptive_time_microseconds"],
        Code::IMPORT_OPTION_UNSUPPORTED,
        "the relay writes timestamps in Debezium's adaptive forms",
    ),
    (
        "field.name.adjustment.mode",
        &["none"],
        Code::IMPORT_NAMES_ADJUSTED,
        "adjusted field names change the envelope's and the expanded payload's names",
    ),
    (
        "sanitize.field.names",
        &["false"],
        Code::IMPORT_NAMES_ADJUSTED,
        "sanitized field names change the envelope's and the expanded payload's names",
    ),
    (
        "provide.transaction.metadata",
        &["false"],
        Code::IMPORT_OPTION_UNSUPPORTED,
        "the relay writes no transaction topic",
    ),
    (
        "post.processors",
        &[""],
        Code::IMPORT_OPTION_UNSUPPORTED,
        "post processors change the row before the router sees it",
    ),
    (
        "converters",
        &[""],
        Code::IMPORT_OPTION_UNSUPPORTED,
        "custom column converters change the row's values",
    ),
    (
        "column.include.list",
        &[""],
        Code::IMPORT_OPTION_UNSUPPORTED,
        "a column list changes the row the router sees",
    ),
    (
        "column.exclude.list",
        &[""],
        Code::IMPORT_OPTION_UNSUPPORTED,
        "a column list changes the row the router sees",
    ),
];

/// Prefixes of connector settings that change values (masks, truncation).
const DECIDING_PREFIXES: &[&str] = &["column.mask.", "column.truncate."];

/// The converter set the deployment names, the worker's for a role it
/// leaves to the worker: as `given` says, or Debezium's images' default.
fn converters(
    settings: &BTreeMap<String, String>,
    given: &Given,
    notes: &mut Vec<String>,
    refused: &mut Vec<Refusal>,
) -> Option<Converters> {
    let mut settings = settings.clone();
    for role in ["key.converter", "value.converter", "header.converter"] {
        if settings.contains_key(role) {
            continue;
        }
        let own = |k: &str| k == role || k.starts_with(&format!("{role}."));
        let worker: Vec<(String, String)> = given
            .worker
            .iter()
            .filter(|(k, _)| own(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if let Some((_, class)) = worker.iter().find(|(k, _)| k == role) {
            notes.push(format!("{role}: the worker's, {class}"));
            settings.extend(worker);
        } else if role != "header.converter" {
            settings.extend(
                WORKER_CONVERTERS
                    .iter()
                    .filter(|(k, _)| own(k))
                    .map(|(k, v)| (k.to_string(), v.to_string())),
            );
            notes.push(format!(
                "{role}: not set, so the worker's decides: assumed Kafka Connect's JsonConverter with schemas.enable=true (the Debezium images' and Strimzi's worker default); name the worker's with --worker-config, and confirm with `audit --beside` before a takeover"
            ));
        }
    }
    Converters::from_settings(&settings)
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

/// The transform alias of the Outbox Event Router, when the chain names one.
fn router_alias(settings: &BTreeMap<String, String>) -> Option<String> {
    settings
        .get("transforms")?
        .split(',')
        .map(str::trim)
        .find(|a| {
            settings
                .get(&format!("transforms.{a}.type"))
                .map(|t| t.trim())
                == Some(EVENT_ROUTER)
        })
        .map(str::to_string)
}

/// The settings with every expression made a reference the relay
/// resolves; a value no process of the relay's can read is refused.
fn with_references(
    settings: &BTreeMap<String, String>,
    source: Source,
    router_prefix: Option<&str>,
    refused: &mut Vec<Refusal>,
) -> (BTreeMap<String, String>, Vec<String>) {
    let mut notes = Vec::new();
    let mut out = BTreeMap::new();
    let replacement =
        router_prefix.map(|p| format!("{p}{}", router_options::ROUTE_TOPIC_REPLACEMENT.key));
    for (k, v) in settings {
        let router = match Some(k) == replacement.as_ref() {
            true => Router::Replacement,
            false => Router::Other,
        };
        match values::references(v, source, router) {
            Ok(r) => {
                if r != *v {
                    notes.push(format!("{k}: {v} written as {r}, which the relay resolves where it runs"));
                }
                out.insert(k.clone(), r);
            }
            Err(at) => refused.push(Refusal {
                code: Code::IMPORT_VALUE_AT_DEPLOY,
                setting: k.clone(),
                why: format!(
                    "{}: a value known only where the connector is deployed (another config provider, a secret, a template's parameter without a default); give the relay its value or a reference (${{env:NAME}}, ${{file:PATH:KEY}})",
                    at.expression
                ),
            }),
        }
    }
    (out, notes)
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
/// `directory`), as `with_references` writes every expression.
fn secret(value: &str) -> Option<SecretReference> {
    let inner = value.trim().strip_prefix("${")?.strip_suffix('}')?;
    match inner.split_once(':') {
        // A default is a literal password: the variable alone is taken.
        Some(("env", name)) => Some(SecretReference::Env(
            name.split_once(":-").map_or(name, |(n, _)| n).to_string(),
        )),
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
        _ => None,
    }
}

/// Judges a deployment: the relay's configuration, or every refusal.
pub fn judge(d: &Deployment, given: &Given, bootstrap: &str) -> Result<Imported, Vec<Refusal>> {
    let mut refused = Vec::new();
    let router_prefix = router_alias(&d.settings).map(|a| format!("transforms.{a}."));
    let release = match &given.version {
        Some(release) => release.clone(),
        None => legacy::release(&d.settings),
    };
    let (named, mut notes) = legacy::current_names(&d.settings, router_prefix.as_deref());
    let (settings, expressions) =
        with_references(&named, d.source, router_prefix.as_deref(), &mut refused);
    notes.extend(expressions);
    notes.extend(d.notes.iter().cloned());
    let s = &settings;
    let converters = converters(s, given, &mut notes, &mut refused);
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
    // Debezium's default plugin, in every release.
    let plugin = get("plugin.name").unwrap_or_else(|| "decoderbufs".into());
    if !PLUGINS.contains(&plugin.as_str()) {
        refuse(
            Code::IMPORT_PLUGIN_UNSUPPORTED,
            "plugin.name",
            format!("{plugin:?}: the relay takes a slot of pgoutput or decoderbufs over"),
        );
    }
    if let Some(sink) = get("debezium.sink.type") {
        refuse(
            Code::IMPORT_NOT_KAFKA,
            "debezium.sink.type",
            format!("{sink:?}: Debezium Server writes to another system than Kafka, and the relay writes to Kafka"),
        );
    }
    let extended_headers = match get(context::SETTING).map(|v| v.to_ascii_lowercase()) {
        None => None,
        Some(v) if v == "true" => Some(true),
        Some(v) if v == "false" => Some(false),
        Some(v) => {
            refuse(
                Code::IMPORT_OPTION_UNSUPPORTED,
                context::SETTING,
                format!("{v:?}: Debezium takes true or false"),
            );
            None
        }
    };
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
                o if router_options::option(o).is_some() => {
                    router.insert(o.to_string(), v.clone());
                }
                // 2.5 to 3.5's name, which 3.6 no longer reads.
                "table.fields.additional.error.on.missing"
                    if release.version <= DebeziumVersion::new(3, 5, 0) =>
                {
                    let missing = match v.trim().eq_ignore_ascii_case("false") {
                        true => "ignore",
                        false => "error",
                    };
                    let current = router_options::ADDITIONAL_MISSING.key;
                    notes.push(format!(
                        "{k}={v} read as {current}={missing}, its meaning in Debezium {}",
                        release.version
                    ));
                    router.insert(current.to_string(), missing.into());
                }
                o => {
                    let names = router_options::OPTIONS.map(|o| o.key);
                    if let Some(near) = crate::spelling::nearest(o, &names) {
                        notes.push(format!("{k}: Debezium's router reads no such option; did the deployment mean {near}?"));
                    }
                    left_behind.push((
                        k.clone(),
                        "Debezium's Outbox Event Router does not read it (a name of another release, or none), so neither does the relay",
                    ))
                }
            }
        }
    }
    // A reference stands for its value where the relay runs: the options
    // are judged with a plain one in its place.
    let judged: BTreeMap<String, String> = router
        .iter()
        .map(|(k, v)| (k.clone(), values::without_references(v)))
        .collect();
    let options = RouterOptions::from_options(&judged).map_err(|e| e.detail().to_string());
    if let Err(why) = &options {
        refuse(
            Code::CONTRACT_OPTION_INVALID,
            &format!("transforms.{}", router_alias.as_deref().unwrap_or("?")),
            why.clone(),
        );
    }

    let (schema, table) = match (table(s.get("table.include.list")), &given.table) {
        (Ok(t), _) => t,
        (Err(why), Some((schema, table))) => {
            notes.push(format!(
                "table.include.list: {why}; the outbox is {schema}.{table}, as --table names it"
            ));
            (schema.clone(), table.clone())
        }
        (Err(why), None) => {
            refused.push(Refusal {
                code: Code::IMPORT_TABLE_UNNAMED,
                setting: "table.include.list".into(),
                why: format!("{why}; name the outbox with --table SCHEMA.TABLE"),
            });
            (String::new(), String::new())
        }
    };
    let password = match s.get("database.password") {
        None => None,
        Some(v) => match secret(v) {
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
            || k.starts_with("topic.creation.")
    };
    let topic_creation: BTreeMap<String, String> = s
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("topic.creation.")?.to_string(), v.clone())))
        .collect();
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
        release,
        extended_headers,
        plugin,
        topic_creation,
        notes,
    })
}
