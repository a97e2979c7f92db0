//! The Outbox Event Router's options that decide a record's bytes, as data,
//! with the router's 3.6 defaults and value sets
//! (`EventRouterConfigDefinition` in Debezium 3.6.1). A contract holds one
//! [`RouterOptions`]; the mapper routes with it and the generator writes it
//! back as the transform's properties, so the two cannot disagree.

use std::collections::BTreeMap;

use super::topic::{RuleError, TopicRule};
use crate::error::{Code, Error};

/// The router's option names, each once. `table.field.event.type` is
/// accepted for import's sake but decides no byte in 3.6.
pub mod keys {
    pub const EVENT_ID: &str = "table.field.event.id";
    pub const EVENT_KEY: &str = "table.field.event.key";
    pub const EVENT_TYPE: &str = "table.field.event.type";
    pub const EVENT_TIMESTAMP: &str = "table.field.event.timestamp";
    pub const PAYLOAD: &str = "table.field.event.payload";
    pub const SCHEMA_VERSION: &str = "table.field.event.schema.version";
    pub const ADDITIONAL_PLACEMENT: &str = "table.fields.additional.placement";
    pub const ADDITIONAL_MISSING: &str = "table.field.additional.missing";
    pub const ROUTE_BY_FIELD: &str = "route.by.field";
    pub const ROUTE_TOPIC_REGEX: &str = "route.topic.regex";
    pub const ROUTE_TOPIC_REPLACEMENT: &str = "route.topic.replacement";
    pub const TOMBSTONE_ON_EMPTY_PAYLOAD: &str = "route.tombstone.on.empty.payload";
    pub const EXPAND_JSON_PAYLOAD: &str = "table.expand.json.payload";
    pub const JSON_PAYLOAD_NULL_BEHAVIOR: &str = "table.json.payload.null.behavior";
    pub const OP_INVALID_BEHAVIOR: &str = "table.op.invalid.behavior";

    /// Every option, in the order the generator writes them.
    pub const ALL: [&str; 15] = [
        EVENT_ID,
        EVENT_KEY,
        EVENT_TYPE,
        PAYLOAD,
        EVENT_TIMESTAMP,
        SCHEMA_VERSION,
        EXPAND_JSON_PAYLOAD,
        JSON_PAYLOAD_NULL_BEHAVIOR,
        ROUTE_BY_FIELD,
        ROUTE_TOPIC_REGEX,
        ROUTE_TOPIC_REPLACEMENT,
        TOMBSTONE_ON_EMPTY_PAYLOAD,
        OP_INVALID_BEHAVIOR,
        ADDITIONAL_PLACEMENT,
        ADDITIONAL_MISSING,
    ];
}

/// The router's defaults (3.6.1).
pub mod defaults {
    pub const EVENT_ID: &str = "id";
    pub const EVENT_KEY: &str = "aggregateid";
    pub const EVENT_TYPE: &str = "type";
    pub const PAYLOAD: &str = "payload";
    pub const ROUTE_BY_FIELD: &str = "aggregatetype";
    pub const ROUTE_TOPIC_REGEX: &str = "(?<routedByValue>.*)";
    pub const ROUTE_TOPIC_REPLACEMENT: &str = "outbox.event.${routedByValue}";
}

/// Where an additional column goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    Header,
    /// A field of the value's struct, after `payload`.
    Envelope,
    /// The record's partition (an `int4` column).
    Partition,
}

impl Placement {
    pub const fn as_str(self) -> &'static str {
        match self {
            Placement::Header => "header",
            Placement::Envelope => "envelope",
            Placement::Partition => "partition",
        }
    }
}

/// `column:placement[:alias]`: one entry of
/// `table.fields.additional.placement`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Additional {
    pub column: String,
    pub placement: Placement,
    /// The header's or envelope field's name; the column's when not given.
    pub alias: String,
}

/// What an UPDATE of the outbox gets (a DELETE is always dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvalidOp {
    /// Dropped with a warning.
    Warn,
    /// Dropped with an error in the log.
    Error,
    /// The relay stops.
    Fatal,
}

impl InvalidOp {
    pub const ALL: [InvalidOp; 3] = [InvalidOp::Warn, InvalidOp::Error, InvalidOp::Fatal];

    /// As the router's option spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            InvalidOp::Warn => "warn",
            InvalidOp::Error => "error",
            InvalidOp::Fatal => "fatal",
        }
    }
}

/// What an additional column missing from the change gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    Error,
    Ignore,
}

/// Whether a payload of `null` or blank text is a tombstone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmptyPayload {
    /// Published as any other payload.
    Value,
    /// A record with a null value.
    Tombstone,
}

/// How the payload column is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadForm {
    /// As the column's value.
    Verbatim,
    /// Parsed as JSON text, with a schema inferred from it.
    ExpandJson,
}

/// What an expanded JSON `null` member becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonNull {
    /// Left out.
    Ignore,
    /// Kept, as optional bytes.
    OptionalBytes,
}

/// The router's options that decide bytes. Values are the router's; an
/// option the configuration does not set has the router's default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterOptions {
    pub event_id: String,
    /// Debezium writes a null key when the option is set empty.
    pub event_key: Option<String>,
    pub event_type: String,
    pub payload: String,
    /// A `timestamp` column whose value becomes the record's timestamp;
    /// without it, the time Debezium handled the change.
    pub event_timestamp: Option<String>,
    pub schema_version: Option<String>,
    pub additional: Vec<Additional>,
    pub missing: Missing,
    pub route_by: String,
    pub topic_regex: String,
    pub topic_replacement: String,
    pub empty_payload: EmptyPayload,
    pub payload_form: PayloadForm,
    pub json_null: JsonNull,
    pub invalid_op: InvalidOp,
}

impl Default for RouterOptions {
    fn default() -> Self {
        RouterOptions {
            event_id: defaults::EVENT_ID.into(),
            event_key: Some(defaults::EVENT_KEY.into()),
            event_type: defaults::EVENT_TYPE.into(),
            payload: defaults::PAYLOAD.into(),
            event_timestamp: None,
            schema_version: None,
            additional: Vec::new(),
            missing: Missing::Error,
            route_by: defaults::ROUTE_BY_FIELD.into(),
            topic_regex: defaults::ROUTE_TOPIC_REGEX.into(),
            topic_replacement: defaults::ROUTE_TOPIC_REPLACEMENT.into(),
            empty_payload: EmptyPayload::Value,
            payload_form: PayloadForm::Verbatim,
            json_null: JsonNull::Ignore,
            invalid_op: InvalidOp::Warn,
        }
    }
}

fn invalid(option: &str, reason: impl std::fmt::Display) -> Error {
    Error::new(
        Code::CONTRACT_OPTION_INVALID,
        format!("`{option}`: {reason}"),
    )
}

/// The router's enums compare without regard to case, after a trim.
fn choice<T: Copy>(option: &str, value: &str, choices: &[(&str, T)]) -> Result<T, Error> {
    let value = value.trim();
    choices
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(value))
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
            invalid(
                option,
                format!("{value:?} is not one of {}", names.join(", ")),
            )
        })
}

/// Kafka's `ConfigDef` boolean: `true` or `false`, any case, trimmed.
fn boolean(option: &str, value: &str) -> Result<bool, Error> {
    choice(option, value, &[("true", true), ("false", false)])
}

fn column_name(option: &str, value: &str) -> Result<String, Error> {
    let value = value.trim();
    if value.is_empty() {
        return Err(invalid(option, "names no column"));
    }
    Ok(value.to_string())
}

/// `table.fields.additional.placement`, split as the router splits it: on
/// `,`, then on `:`, each part trimmed.
fn additional(value: &str) -> Result<Vec<Additional>, Error> {
    let option = keys::ADDITIONAL_PLACEMENT;
    if value.trim().is_empty() {
        return Ok(Vec::new());
    }
    value
        .split(',')
        .map(|entry| {
            let parts: Vec<&str> = entry.split(':').map(str::trim).collect();
            let (column, placement, alias) = match parts.as_slice() {
                [column, placement] => (*column, *placement, *column),
                [column, placement, alias] => (*column, *placement, *alias),
                _ => {
                    return Err(invalid(
                        option,
                        format!("{entry:?} is not column:placement or column:placement:alias"),
                    ))
                }
            };
            let placement = choice(
                option,
                placement,
                &[
                    ("header", Placement::Header),
                    ("envelope", Placement::Envelope),
                    ("partition", Placement::Partition),
                ],
            )?;
            if column.is_empty() || alias.is_empty() {
                return Err(invalid(option, format!("{entry:?} names no column")));
            }
            Ok(Additional {
                column: column.to_string(),
                placement,
                alias: alias.to_string(),
            })
        })
        .collect()
}

impl RouterOptions {
    /// The options from the router's own keys (a connector's `transforms.<alias>.`
    /// prefix removed); every key left out has the router's default. An
    /// unknown key is refused with the nearest known one, so a misspelt
    /// option never passes silently.
    pub fn from_options(options: &BTreeMap<String, String>) -> Result<RouterOptions, Error> {
        let mut o = RouterOptions::default();
        for (key, value) in options {
            match key.as_str() {
                keys::EVENT_ID => o.event_id = column_name(key, value)?,
                keys::EVENT_KEY => {
                    o.event_key = Some(value.trim().to_string()).filter(|v| !v.is_empty())
                }
                keys::EVENT_TYPE => o.event_type = column_name(key, value)?,
                keys::PAYLOAD => o.payload = column_name(key, value)?,
                keys::EVENT_TIMESTAMP => {
                    o.event_timestamp = Some(value.trim().to_string()).filter(|v| !v.is_empty())
                }
                keys::SCHEMA_VERSION => {
                    o.schema_version = Some(value.trim().to_string()).filter(|v| !v.is_empty())
                }
                keys::ADDITIONAL_PLACEMENT => o.additional = additional(value)?,
                keys::ADDITIONAL_MISSING => {
                    o.missing = choice(
                        key,
                        value,
                        &[("error", Missing::Error), ("ignore", Missing::Ignore)],
                    )?
                }
                keys::ROUTE_BY_FIELD => o.route_by = column_name(key, value)?,
                keys::ROUTE_TOPIC_REGEX => o.topic_regex = value.clone(),
                keys::ROUTE_TOPIC_REPLACEMENT => o.topic_replacement = value.clone(),
                keys::TOMBSTONE_ON_EMPTY_PAYLOAD => {
                    o.empty_payload = match boolean(key, value)? {
                        true => EmptyPayload::Tombstone,
                        false => EmptyPayload::Value,
                    }
                }
                keys::EXPAND_JSON_PAYLOAD => {
                    o.payload_form = match boolean(key, value)? {
                        true => PayloadForm::ExpandJson,
                        false => PayloadForm::Verbatim,
                    }
                }
                keys::JSON_PAYLOAD_NULL_BEHAVIOR => {
                    o.json_null = choice(
                        key,
                        value,
                        &[
                            ("ignore", JsonNull::Ignore),
                            ("optional_bytes", JsonNull::OptionalBytes),
                        ],
                    )?
                }
                keys::OP_INVALID_BEHAVIOR => {
                    o.invalid_op = choice(key, value, &InvalidOp::ALL.map(|b| (b.as_str(), b)))?
                }
                other => {
                    let hint = crate::spelling::nearest(other, &keys::ALL)
                        .map_or(String::new(), |k| format!(" (did you mean `{k}`?)"));
                    return Err(Error::new(
                        Code::CONTRACT_OPTION_INVALID,
                        format!(
                            "`{other}` is not an Outbox Event Router option that decides bytes{hint}"
                        ),
                    ));
                }
            }
        }
        o.topic_rule()?;
        Ok(o)
    }

    /// The topic rule, compiled: refuses what Kafka's `RegexRouter` would
    /// read differently.
    pub fn topic_rule(&self) -> Result<TopicRule, Error> {
        TopicRule::new(&self.topic_regex, &self.topic_replacement).map_err(|e| match e {
            RuleError::Regex(e) => invalid(keys::ROUTE_TOPIC_REGEX, e),
            RuleError::Replacement(e) => invalid(keys::ROUTE_TOPIC_REPLACEMENT, e),
        })
    }

    /// The transform's settings, in [`keys::ALL`]'s order. The options every
    /// generated configuration has always named are always written; the
    /// others only when they differ from the router's default, so the
    /// platform's files stay as they were.
    pub fn properties(&self) -> Vec<(&'static str, String)> {
        let d = RouterOptions::default();
        let mut p = vec![
            (keys::EVENT_ID, self.event_id.clone()),
            (keys::EVENT_KEY, self.event_key.clone().unwrap_or_default()),
        ];
        if self.event_type != d.event_type {
            p.push((keys::EVENT_TYPE, self.event_type.clone()));
        }
        p.push((keys::PAYLOAD, self.payload.clone()));
        if let Some(ts) = &self.event_timestamp {
            p.push((keys::EVENT_TIMESTAMP, ts.clone()));
        }
        if let Some(v) = &self.schema_version {
            p.push((keys::SCHEMA_VERSION, v.clone()));
        }
        p.push((
            keys::EXPAND_JSON_PAYLOAD,
            (self.payload_form == PayloadForm::ExpandJson).to_string(),
        ));
        if self.json_null != d.json_null {
            p.push((keys::JSON_PAYLOAD_NULL_BEHAVIOR, "optional_bytes".into()));
        }
        p.push((keys::ROUTE_BY_FIELD, self.route_by.clone()));
        if self.topic_regex != d.topic_regex {
            p.push((keys::ROUTE_TOPIC_REGEX, self.topic_regex.clone()));
        }
        p.push((
            keys::ROUTE_TOPIC_REPLACEMENT,
            self.topic_replacement.clone(),
        ));
        p.push((
            keys::TOMBSTONE_ON_EMPTY_PAYLOAD,
            (self.empty_payload == EmptyPayload::Tombstone).to_string(),
        ));
        if self.invalid_op != d.invalid_op {
            p.push((keys::OP_INVALID_BEHAVIOR, self.invalid_op.as_str().into()));
        }
        if !self.additional.is_empty() {
            let list: Vec<String> = self
                .additional
                .iter()
                // Always with the alias: the platform's files have always
                // named it, and the meaning is the same.
                .map(|a| format!("{}:{}:{}", a.column, a.placement.as_str(), a.alias))
                .collect();
            p.push((keys::ADDITIONAL_PLACEMENT, list.join(",")));
        }
        if self.missing != d.missing {
            p.push((keys::ADDITIONAL_MISSING, "ignore".into()));
        }
        p
    }

    /// The columns the options name, each once, in the order named.
    pub fn columns(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        let named = [
            Some(self.event_id.as_str()),
            self.event_key.as_deref(),
            Some(self.payload.as_str()),
            Some(self.route_by.as_str()),
            self.event_timestamp.as_deref(),
            self.schema_version.as_deref(),
        ];
        let extra = self.additional.iter().map(|a| Some(a.column.as_str()));
        for name in named.into_iter().chain(extra).flatten() {
            if !out.contains(&name) {
                out.push(name);
            }
        }
        out
    }

    /// Whether the value is a struct (`payload` and the envelope fields)
    /// rather than the payload alone.
    pub fn has_envelope(&self) -> bool {
        self.additional
            .iter()
            .any(|a| a.placement == Placement::Envelope)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(pairs: &[(&str, &str)]) -> Result<RouterOptions, Error> {
        RouterOptions::from_options(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn an_empty_configuration_has_the_routers_defaults() {
        let o = options(&[]).unwrap();
        assert_eq!(o.event_id, "id");
        assert_eq!(o.event_key.as_deref(), Some("aggregateid"));
        assert_eq!(o.payload, "payload");
        assert_eq!(o.route_by, "aggregatetype");
        assert_eq!(o.topic_regex, "(?<routedByValue>.*)");
        assert_eq!(o.topic_replacement, "outbox.event.${routedByValue}");
        assert_eq!(o.empty_payload, EmptyPayload::Value);
        assert_eq!(o.payload_form, PayloadForm::Verbatim);
        assert_eq!(o.invalid_op, InvalidOp::Warn);
        assert_eq!(o.missing, Missing::Error);
        assert_eq!(o.json_null, JsonNull::Ignore);
        assert_eq!(
            o.columns(),
            vec!["id", "aggregateid", "payload", "aggregatetype"]
        );
        assert!(!o.has_envelope());
    }

    #[test]
    fn placements_split_and_trim_as_the_router_does() {
        let o = options(&[
            (
                "table.fields.additional.placement",
                " type:header:eventType , tenant:envelope,shard:PARTITION",
            ),
            ("table.field.additional.missing", "IGNORE"),
            ("route.tombstone.on.empty.payload", " True "),
            ("table.op.invalid.behavior", "fatal"),
        ])
        .unwrap();
        assert_eq!(
            o.additional,
            vec![
                Additional {
                    column: "type".into(),
                    placement: Placement::Header,
                    alias: "eventType".into()
                },
                Additional {
                    column: "tenant".into(),
                    placement: Placement::Envelope,
                    alias: "tenant".into()
                },
                Additional {
                    column: "shard".into(),
                    placement: Placement::Partition,
                    alias: "shard".into()
                },
            ]
        );
        assert_eq!(o.missing, Missing::Ignore);
        assert_eq!(o.empty_payload, EmptyPayload::Tombstone);
        assert_eq!(o.invalid_op, InvalidOp::Fatal);
        assert!(o.has_envelope());
        let props = o.properties();
        let get = |k: &str| props.iter().find(|(p, _)| *p == k).map(|(_, v)| v.as_str());
        assert_eq!(
            get("table.fields.additional.placement"),
            Some("type:header:eventType,tenant:envelope:tenant,shard:partition:shard")
        );
        assert_eq!(get("table.field.additional.missing"), Some("ignore"));
        assert_eq!(get("table.op.invalid.behavior"), Some("fatal"));
        assert_eq!(get("route.tombstone.on.empty.payload"), Some("true"));
        // Written back, the options read as they were.
        let pairs: Vec<(&str, &str)> = props.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let again = options(&pairs).unwrap();
        assert_eq!(again, o);
    }

    #[test]
    fn bad_values_and_unknown_options_are_refused_with_the_option_named() {
        for (pairs, expected) in [
            (
                vec![("table.op.invalid.behavior", "skip")],
                "`table.op.invalid.behavior`: \"skip\" is not one of warn, error, fatal",
            ),
            (
                vec![("table.fields.additional.placement", "a:body")],
                "`table.fields.additional.placement`: \"body\" is not one of header, envelope, partition",
            ),
            (
                vec![("table.fields.additional.placement", "a")],
                "`table.fields.additional.placement`: \"a\" is not column:placement or column:placement:alias",
            ),
            (
                vec![("table.expand.json.payload", "yes")],
                "`table.expand.json.payload`: \"yes\" is not one of true, false",
            ),
            (
                vec![("table.field.event.payloads", "body")],
                "`table.field.event.payloads` is not an Outbox Event Router option that decides bytes (did you mean `table.field.event.payload`?)",
            ),
            (
                vec![("table.field.event.id", " ")],
                "`table.field.event.id`: names no column",
            ),
        ] {
            let error = options(&pairs).unwrap_err();
            assert_eq!(error.code(), "CONTRACT_OPTION_INVALID");
            assert_eq!(error.detail(), expected);
        }
    }
}
