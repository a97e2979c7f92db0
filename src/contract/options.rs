//! The Outbox Event Router's options that decide a record's bytes: one
//! table ([`OPTIONS`]), an entry per option with its name, the router's
//! default, what it means, how its value is read and written back, and the
//! columns it names (`EventRouterConfigDefinition` in Debezium 3.6.1). A
//! contract holds one [`RouterOptions`]; the router's plan is compiled from
//! it, the generator writes it back as the transform's properties, the
//! catalog check and the plan take its columns from the entries, and the
//! configuration reference and import read the same entries, so none of
//! them can disagree.

use std::collections::BTreeMap;

pub use super::role::{Named, Role};
use super::topic::{RuleError, TopicRule};
use crate::error::{Code, Error};

/// The name of the header that carries the event id: the router's own,
/// which it adds to every record.
pub const ID_HEADER: &str = "id";

/// When the generator writes an option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Every generated configuration has always named it.
    Always,
    /// Only when it differs from the router's default, so the platform's
    /// files stay as they were.
    WhenChanged,
}

/// One option of the router.
pub struct RouterOption {
    /// The option's name, without the transform's `transforms.<alias>.`.
    pub key: &'static str,
    /// The router's default as the option spells it; `None`: unset.
    pub default: Option<&'static str>,
    /// What it decides, for the configuration reference.
    pub doc: &'static str,
    pub written: Written,
    /// Reads a value into the options, refusing what the router refuses.
    read: fn(&mut RouterOptions, &str) -> Result<(), Error>,
    /// The value as the option spells it; `None`: unset.
    show: fn(&RouterOptions) -> Option<String>,
    /// The columns it names.
    columns: for<'a> fn(&'a RouterOptions) -> Vec<Named<'a>>,
}

impl std::fmt::Debug for RouterOption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.key)
    }
}

fn none(_: &RouterOptions) -> Vec<Named<'_>> {
    Vec::new()
}

fn optional(value: &str) -> Option<String> {
    Some(value.trim().to_string()).filter(|v| !v.is_empty())
}

pub const EVENT_ID: RouterOption = RouterOption {
    key: "table.field.event.id",
    default: Some("id"),
    doc: "the column whose value is the `id` header",
    written: Written::Always,
    read: |o, v| {
        o.event_id = column_name(EVENT_ID.key, v)?;
        Ok(())
    },
    show: |o| Some(o.event_id.clone()),
    columns: |o| vec![Named::of(&o.event_id, Role::EventId)],
};

pub const EVENT_KEY: RouterOption = RouterOption {
    key: "table.field.event.key",
    default: Some("aggregateid"),
    doc: "the column whose value is the record's key; empty: a null key",
    written: Written::Always,
    read: |o, v| {
        o.event_key = optional(v);
        Ok(())
    },
    show: |o| o.event_key.clone(),
    columns: |o| {
        o.event_key
            .iter()
            .map(|k| Named::of(k, Role::Key))
            .collect()
    },
};

pub const EVENT_TYPE: RouterOption = RouterOption {
    key: "table.field.event.type",
    default: Some("type"),
    doc: "read by the router before 2.0; decides no byte in 3.6",
    written: Written::WhenChanged,
    read: |o, v| {
        o.event_type = column_name(EVENT_TYPE.key, v)?;
        Ok(())
    },
    show: |o| Some(o.event_type.clone()),
    columns: none,
};

pub const PAYLOAD: RouterOption = RouterOption {
    key: "table.field.event.payload",
    default: Some("payload"),
    doc: "the column whose value is the record's value (or the envelope's `payload`)",
    written: Written::Always,
    read: |o, v| {
        o.payload = column_name(PAYLOAD.key, v)?;
        Ok(())
    },
    show: |o| Some(o.payload.clone()),
    columns: |o| vec![Named::of(&o.payload, Role::Payload)],
};

pub const EVENT_TIMESTAMP: RouterOption = RouterOption {
    key: "table.field.event.timestamp",
    default: None,
    doc: "a `timestamp` column whose value is the record's timestamp; unset: the source transaction's commit time (Debezium: the time it handled the change)",
    written: Written::WhenChanged,
    read: |o, v| {
        o.event_timestamp = optional(v);
        Ok(())
    },
    show: |o| o.event_timestamp.clone(),
    columns: |o| {
        o.event_timestamp
            .iter()
            .map(|c| Named::of(c, Role::Timestamp))
            .collect()
    },
};

pub const SCHEMA_VERSION: RouterOption = RouterOption {
    key: "table.field.event.schema.version",
    default: None,
    doc: "an `integer` column whose value is the envelope schema's version (read only with an envelope field)",
    written: Written::WhenChanged,
    read: |o, v| {
        o.schema_version = optional(v);
        Ok(())
    },
    show: |o| o.schema_version.clone(),
    columns: |o| {
        o.schema_version
            .iter()
            .filter(|_| o.has_envelope())
            .map(|c| Named::of(c, Role::SchemaVersion))
            .collect()
    },
};

pub const EXPAND_JSON_PAYLOAD: RouterOption = RouterOption {
    key: "table.expand.json.payload",
    default: Some("false"),
    doc: "`true`: a string payload is parsed as JSON and written as a struct with a schema inferred from it; one whose expansion fails Debezium's own task (a top-level array, an integer beyond `long`) is refused as a row (`PAYLOAD_NOT_REPRODUCED`)",
    written: Written::Always,
    read: |o, v| {
        o.payload_form = match boolean(EXPAND_JSON_PAYLOAD.key, v)? {
            true => PayloadForm::ExpandJson,
            false => PayloadForm::Verbatim,
        };
        Ok(())
    },
    show: |o| Some((o.payload_form == PayloadForm::ExpandJson).to_string()),
    columns: none,
};

pub const JSON_PAYLOAD_NULL_BEHAVIOR: RouterOption = RouterOption {
    key: "table.json.payload.null.behavior",
    default: Some("ignore"),
    doc: "what an expanded payload's `null` members become: `ignore` (left out) or `optional_bytes` (kept, as optional bytes)",
    written: Written::WhenChanged,
    read: |o, v| {
        o.json_null = choice(
            JSON_PAYLOAD_NULL_BEHAVIOR.key,
            v,
            &[
                ("ignore", JsonNull::Ignore),
                ("optional_bytes", JsonNull::OptionalBytes),
            ],
        )?;
        Ok(())
    },
    show: |o| {
        Some(match o.json_null {
            JsonNull::Ignore => "ignore".into(),
            JsonNull::OptionalBytes => "optional_bytes".into(),
        })
    },
    columns: none,
};

pub const ROUTE_BY_FIELD: RouterOption = RouterOption {
    key: "route.by.field",
    default: Some("aggregatetype"),
    doc: "the column whose value the topic rule routes by (text, varchar or uuid)",
    written: Written::Always,
    read: |o, v| {
        o.route_by = column_name(ROUTE_BY_FIELD.key, v)?;
        Ok(())
    },
    show: |o| Some(o.route_by.clone()),
    columns: |o| vec![Named::of(&o.route_by, Role::RouteBy)],
};

pub const ROUTE_TOPIC_REGEX: RouterOption = RouterOption {
    key: "route.topic.regex",
    default: Some("(?<routedByValue>.*)"),
    doc: "the regex the routing value must match whole for the replacement to apply (as `java.util.regex` reads it; look-around and back-references are refused)",
    written: Written::WhenChanged,
    read: |o, v| {
        o.topic_regex = v.to_string();
        Ok(())
    },
    show: |o| Some(o.topic_regex.clone()),
    columns: none,
};

pub const ROUTE_TOPIC_REPLACEMENT: RouterOption = RouterOption {
    key: "route.topic.replacement",
    default: Some("outbox.event.${routedByValue}"),
    doc: "the topic, with `$n` and `${name}` taking the regex's groups; a value the regex does not match is the topic itself",
    written: Written::Always,
    read: |o, v| {
        o.topic_replacement = v.to_string();
        Ok(())
    },
    show: |o| Some(o.topic_replacement.clone()),
    columns: none,
};

pub const TOMBSTONE_ON_EMPTY_PAYLOAD: RouterOption = RouterOption {
    key: "route.tombstone.on.empty.payload",
    default: Some("false"),
    doc: "`true`: a null or blank payload is a tombstone (a record with a null value)",
    written: Written::Always,
    read: |o, v| {
        o.empty_payload = match boolean(TOMBSTONE_ON_EMPTY_PAYLOAD.key, v)? {
            true => EmptyPayload::Tombstone,
            false => EmptyPayload::Value,
        };
        Ok(())
    },
    show: |o| Some((o.empty_payload == EmptyPayload::Tombstone).to_string()),
    columns: none,
};

pub const OP_INVALID_BEHAVIOR: RouterOption = RouterOption {
    key: "table.op.invalid.behavior",
    default: Some("warn"),
    doc: "what an UPDATE of the outbox gets: `warn` or `error` (dropped, logged at that level) or `fatal` (the relay stops, `OUTBOX_UPDATE_REFUSED`); a DELETE is always dropped",
    written: Written::WhenChanged,
    read: |o, v| {
        o.invalid_op = choice(
            OP_INVALID_BEHAVIOR.key,
            v,
            &InvalidOp::ALL.map(|b| (b.as_str(), b)),
        )?;
        Ok(())
    },
    show: |o| Some(o.invalid_op.as_str().into()),
    columns: none,
};

pub const ADDITIONAL_PLACEMENT: RouterOption = RouterOption {
    key: "table.fields.additional.placement",
    default: None,
    doc: "`column:placement[:alias]`, comma separated: more columns as headers, envelope fields (after `payload`) or the record's partition (`partition`, an `integer` column)",
    written: Written::WhenChanged,
    read: |o, v| {
        o.additional = additional(v)?;
        Ok(())
    },
    show: |o| {
        let list: Vec<String> = o
            .additional
            .iter()
            // Always with the alias: the platform's files have always named
            // it, and the meaning is the same.
            .map(|a| format!("{}:{}:{}", a.column, a.placement.as_str(), a.alias))
            .collect();
        Some(list.join(",")).filter(|l| !l.is_empty())
    },
    columns: |o| {
        o.additional
            .iter()
            .map(|a| Named {
                column: &a.column,
                role: match a.placement {
                    Placement::Header => Role::Header,
                    Placement::Envelope => Role::Envelope,
                    Placement::Partition => Role::Partition,
                },
                alias: &a.alias,
            })
            .collect()
    },
};

pub const ADDITIONAL_MISSING: RouterOption = RouterOption {
    key: "table.field.additional.missing",
    default: Some("error"),
    doc: "what an additional column the table lacks gets: `error` (the contract does not fit) or `ignore` (left out)",
    written: Written::WhenChanged,
    read: |o, v| {
        o.missing = choice(
            ADDITIONAL_MISSING.key,
            v,
            &[("error", Missing::Error), ("ignore", Missing::Ignore)],
        )?;
        Ok(())
    },
    show: |o| {
        Some(match o.missing {
            Missing::Error => "error".into(),
            Missing::Ignore => "ignore".into(),
        })
    },
    columns: none,
};

/// Every option, in the order the generator writes them.
pub const OPTIONS: [&RouterOption; 15] = [
    &EVENT_ID,
    &EVENT_KEY,
    &EVENT_TYPE,
    &PAYLOAD,
    &EVENT_TIMESTAMP,
    &SCHEMA_VERSION,
    &EXPAND_JSON_PAYLOAD,
    &JSON_PAYLOAD_NULL_BEHAVIOR,
    &ROUTE_BY_FIELD,
    &ROUTE_TOPIC_REGEX,
    &ROUTE_TOPIC_REPLACEMENT,
    &TOMBSTONE_ON_EMPTY_PAYLOAD,
    &OP_INVALID_BEHAVIOR,
    &ADDITIONAL_PLACEMENT,
    &ADDITIONAL_MISSING,
];

/// The entry of an option name.
pub fn option(key: &str) -> Option<&'static RouterOption> {
    OPTIONS.into_iter().find(|o| o.key == key)
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
    /// Every option at the router's default, read from its entry.
    fn default() -> Self {
        let mut o = RouterOptions {
            event_id: String::new(),
            event_key: None,
            event_type: String::new(),
            payload: String::new(),
            event_timestamp: None,
            schema_version: None,
            additional: Vec::new(),
            missing: Missing::Error,
            route_by: String::new(),
            topic_regex: String::new(),
            topic_replacement: String::new(),
            empty_payload: EmptyPayload::Value,
            payload_form: PayloadForm::Verbatim,
            json_null: JsonNull::Ignore,
            invalid_op: InvalidOp::Warn,
        };
        for option in OPTIONS {
            if let Some(default) = option.default {
                // Each default reads (`every_default_reads_as_its_option`).
                let _ = (option.read)(&mut o, default);
            }
        }
        o
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
    let option = ADDITIONAL_PLACEMENT.key;
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
    /// option never passes silently; every refusal is reported, one per
    /// line.
    pub fn from_options(options: &BTreeMap<String, String>) -> Result<RouterOptions, Error> {
        let mut o = RouterOptions::default();
        let mut refused: Vec<String> = Vec::new();
        for (key, value) in options {
            match option(key) {
                Some(entry) => {
                    if let Err(e) = (entry.read)(&mut o, value) {
                        refused.push(e.detail().to_string());
                    }
                }
                None => {
                    let names = OPTIONS.map(|o| o.key);
                    let hint = crate::spelling::nearest(key, &names)
                        .map_or(String::new(), |k| format!(" (did you mean `{k}`?)"));
                    refused.push(format!(
                        "`{key}` is not an Outbox Event Router option that decides bytes{hint}"
                    ));
                }
            }
        }
        if let Err(e) = o.topic_rule() {
            refused.push(e.detail().to_string());
        }
        match refused.is_empty() {
            true => Ok(o),
            false => Err(Error::new(
                Code::CONTRACT_OPTION_INVALID,
                refused.join("; "),
            )),
        }
    }

    /// The topic rule, compiled: refuses what Kafka's `RegexRouter` would
    /// read differently.
    pub fn topic_rule(&self) -> Result<TopicRule, Error> {
        TopicRule::new(&self.topic_regex, &self.topic_replacement).map_err(|e| match e {
            RuleError::Regex(e) => invalid(ROUTE_TOPIC_REGEX.key, e),
            RuleError::Replacement(e) => invalid(ROUTE_TOPIC_REPLACEMENT.key, e),
        })
    }

    /// The transform's settings, in [`OPTIONS`]' order, each as its entry
    /// says it is [`Written`].
    pub fn properties(&self) -> Vec<(&'static str, String)> {
        let d = RouterOptions::default();
        OPTIONS
            .into_iter()
            .filter_map(|o| {
                let value = (o.show)(self);
                match o.written {
                    Written::Always => Some((o.key, value.unwrap_or_default())),
                    Written::WhenChanged => value
                        .filter(|v| Some(v) != (o.show)(&d).as_ref())
                        .map(|v| (o.key, v)),
                }
            })
            .collect()
    }

    /// Every column the options name, in [`OPTIONS`]' order, each as often
    /// as it is named.
    pub fn named_columns(&self) -> Vec<Named<'_>> {
        OPTIONS.iter().flat_map(|o| (o.columns)(self)).collect()
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
mod tests;
