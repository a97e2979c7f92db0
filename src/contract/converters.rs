//! Kafka Connect's converters, by role (key, value, headers), as a
//! deployment names them, and what each can write without failing
//! Debezium's task. A contract holds one [`Converters`]; the generator
//! writes it back as the deployment's `key.converter`, `value.converter`
//! and `header.converter` settings, and `connector-config import` reads it
//! from them, so the three cannot disagree. The bytes they write are the
//! router's (`router::converters`).

use std::collections::BTreeMap;

/// The converter classes, each once.
pub mod classes {
    pub const JSON: &str = "org.apache.kafka.connect.json.JsonConverter";
    pub const STRING: &str = "org.apache.kafka.connect.storage.StringConverter";
    pub const BYTE_ARRAY: &str = "org.apache.kafka.connect.converters.ByteArrayConverter";
    pub const BINARY_DATA: &str = "io.debezium.converters.BinaryDataConverter";
    pub const SIMPLE_HEADER: &str = "org.apache.kafka.connect.storage.SimpleHeaderConverter";
}

/// `JsonConverter`'s `schemas.enable`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schemas {
    /// `{"schema": ..., "payload": ...}` (JsonConverter's default).
    Enabled,
    Disabled,
}

/// A key or value converter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Converter {
    /// `StringConverter`: `toString()` of the value.
    String,
    Json(Schemas),
    /// `ByteArrayConverter`: bytes only; anything else fails the task.
    ByteArray,
    /// `BinaryDataConverter` (and 1.x's `ByteBufferConverter`, the same
    /// bytes): bytes as they are, anything else through its delegate
    /// (`delegate.converter.type`); without one, Debezium's task fails on
    /// anything but bytes.
    BinaryData(Option<Box<Converter>>),
}

/// A header converter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderConverter {
    /// `SimpleHeaderConverter`: text, numbers as text, bytes in base64.
    Simple,
    Json(Schemas),
}

/// The three converters of a deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converters {
    pub key: Converter,
    pub value: Converter,
    pub header: HeaderConverter,
}

/// Why a deployment's converter settings are not ones the relay writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unwritable {
    /// The setting, e.g. `value.converter`.
    pub setting: String,
    pub why: String,
    /// The converter writes through a schema registry.
    pub registry: Registry,
}

/// Whether a converter needs a schema registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registry {
    Needed,
    NotNeeded,
}

impl Converters {
    /// The names `[outbox] converters` takes for the usual sets.
    pub const PRESETS: [&'static str; 2] = ["platform", "json"];

    /// `StringConverter` keys, `BinaryDataConverter` values delegating to
    /// `JsonConverter` without schemas, `SimpleHeaderConverter` headers:
    /// the platform's set.
    pub fn platform() -> Converters {
        Converters {
            key: Converter::String,
            value: Converter::BinaryData(Some(Box::new(Converter::Json(Schemas::Disabled)))),
            header: HeaderConverter::Simple,
        }
    }

    /// `JsonConverter` without schemas for keys and values,
    /// `SimpleHeaderConverter` headers: Debezium's documented default.
    pub fn json() -> Converters {
        Converters {
            key: Converter::Json(Schemas::Disabled),
            value: Converter::Json(Schemas::Disabled),
            header: HeaderConverter::Simple,
        }
    }

    pub fn preset(name: &str) -> Option<Converters> {
        match name {
            "platform" => Some(Converters::platform()),
            "json" => Some(Converters::json()),
            _ => None,
        }
    }

    /// The preset's name, when the set is one.
    pub fn preset_name(&self) -> Option<&'static str> {
        Converters::PRESETS
            .into_iter()
            .find(|p| Converters::preset(p).as_ref() == Some(self))
    }

    /// Whether Debezium's heartbeat records (structs, key and value) pass
    /// these converters: ByteArrayConverter fails the task on them.
    pub fn writes_heartbeats(&self) -> bool {
        self.key.writes_struct().is_ok() && self.value.writes_struct().is_ok()
    }

    /// `key JsonConverter (schemas.enable=false), value ..., headers ...`.
    pub fn describe(&self) -> String {
        format!(
            "key {}, value {}, headers {}",
            self.key.describe(),
            self.value.describe(),
            self.header.describe()
        )
    }

    /// The settings as Kafka Connect names them, every one written out
    /// (`schemas.enable` too, whatever its default).
    pub fn settings(&self) -> Vec<(String, String)> {
        let mut p = Vec::new();
        self.key.settings("key.converter", &mut p);
        self.value.settings("value.converter", &mut p);
        match self.header {
            HeaderConverter::Simple => {
                p.push(("header.converter".into(), classes::SIMPLE_HEADER.into()))
            }
            HeaderConverter::Json(schemas) => {
                Converter::Json(schemas).settings("header.converter", &mut p)
            }
        }
        p
    }

    /// Reads Kafka Connect's settings (`key.converter`, `value.converter`,
    /// `header.converter` and theirs); other keys are not looked at. A
    /// missing header converter is the worker's default,
    /// `SimpleHeaderConverter`; a missing key or value converter is the
    /// worker's, which the settings do not show.
    pub fn from_settings(s: &BTreeMap<String, String>) -> Result<Converters, Vec<Unwritable>> {
        let mut problems = Vec::new();
        let key = Converter::read("key.converter", s, &mut problems);
        let value = Converter::read("value.converter", s, &mut problems);
        let header = match s.get("header.converter").map(|c| c.trim()) {
            None => Some(HeaderConverter::Simple),
            Some(c) if simple_name(c) == "SimpleHeaderConverter" => Some(HeaderConverter::Simple),
            Some(_) => match Converter::read("header.converter", s, &mut problems) {
                Some(Converter::Json(schemas)) => Some(HeaderConverter::Json(schemas)),
                Some(other) => {
                    problems.push(Unwritable {
                        setting: "header.converter".into(),
                        why: format!(
                            "{}: the relay writes headers as SimpleHeaderConverter or JsonConverter does",
                            other.describe()
                        ),
                        registry: Registry::NotNeeded,
                    });
                    None
                }
                None => None,
            },
        };
        match (key, value, header) {
            (Some(key), Some(value), Some(header)) if problems.is_empty() => {
                Ok(Converters { key, value, header })
            }
            _ => Err(problems),
        }
    }
}

fn simple_name(class: &str) -> &str {
    class.rsplit('.').next().unwrap_or(class)
}

/// JsonConverter's `schemas.enable`: on unless set otherwise (Kafka's
/// `ConfigDef` boolean, trimmed, any case).
fn schemas(value: Option<&String>) -> Schemas {
    match value.is_none_or(|v| v.trim().eq_ignore_ascii_case("true")) {
        true => Schemas::Enabled,
        false => Schemas::Disabled,
    }
}

impl Converter {
    pub(crate) fn describe(&self) -> String {
        match self {
            Converter::String => "StringConverter".into(),
            Converter::Json(Schemas::Enabled) => "JsonConverter (schemas.enable=true)".into(),
            Converter::Json(Schemas::Disabled) => "JsonConverter (schemas.enable=false)".into(),
            Converter::ByteArray => "ByteArrayConverter".into(),
            Converter::BinaryData(Some(d)) => {
                format!("BinaryDataConverter delegating to {}", d.describe())
            }
            Converter::BinaryData(None) => "BinaryDataConverter without a delegate".into(),
        }
    }

    fn settings(&self, prefix: &str, p: &mut Vec<(String, String)>) {
        let class = match self {
            Converter::String => classes::STRING,
            Converter::Json(_) => classes::JSON,
            Converter::ByteArray => classes::BYTE_ARRAY,
            Converter::BinaryData(_) => classes::BINARY_DATA,
        };
        p.push((prefix.to_string(), class.into()));
        match self {
            Converter::Json(s) => p.push((
                format!("{prefix}.schemas.enable"),
                (*s == Schemas::Enabled).to_string(),
            )),
            Converter::BinaryData(Some(d)) => {
                d.settings(&format!("{prefix}.delegate.converter.type"), p)
            }
            Converter::BinaryData(None) | Converter::String | Converter::ByteArray => {}
        }
    }

    fn read(
        setting: &str,
        s: &BTreeMap<String, String>,
        problems: &mut Vec<Unwritable>,
    ) -> Option<Converter> {
        let Some(class) = s.get(setting).map(|c| c.trim()) else {
            problems.push(Unwritable {
                setting: setting.into(),
                why: "not set: the worker's converter decides, which these settings do not show; name it".into(),
                registry: Registry::NotNeeded,
            });
            return None;
        };
        let simple = simple_name(class);
        let registry = ["Avro", "Protobuf", "JsonSchema"]
            .iter()
            .any(|r| simple.contains(r))
            || class.contains("apicurio")
            || class.contains("confluent");
        let unwritable = |why: String, registry: Registry| Unwritable {
            setting: setting.into(),
            why,
            registry,
        };
        match simple {
            _ if registry => {
                problems.push(unwritable(
                    format!(
                        "{class} writes through a schema registry, which the relay does not use"
                    ),
                    Registry::Needed,
                ));
                None
            }
            "JsonConverter" => Some(Converter::Json(schemas(
                s.get(&format!("{setting}.schemas.enable")),
            ))),
            "StringConverter" => Some(Converter::String),
            "ByteArrayConverter" => Some(Converter::ByteArray),
            "BinaryDataConverter" => {
                let delegate = format!("{setting}.delegate.converter.type");
                if !s.contains_key(&delegate) {
                    // Bytes only: the plan refuses any other column for it.
                    return Some(Converter::BinaryData(None));
                }
                Converter::read(&delegate, s, problems)
                    .map(|d| Converter::BinaryData(Some(Box::new(d))))
            }
            _ => {
                problems.push(unwritable(
                    format!("{class}: the relay writes StringConverter, JsonConverter, ByteArrayConverter and BinaryDataConverter"),
                    Registry::NotNeeded,
                ));
                None
            }
        }
    }

    /// Whether it writes `value` of a column whose schema is or is not
    /// BYTES without failing Debezium's task or writing unstable bytes.
    pub fn writes_column(&self, bytes_schema: BytesSchema) -> Result<(), &'static str> {
        match (self, bytes_schema) {
            (Converter::String, BytesSchema::Bytes) => {
                Err("StringConverter writes no stable text for bytes (Java's byte[].toString())")
            }
            (Converter::ByteArray, BytesSchema::Other) => {
                Err("ByteArrayConverter takes bytes only: Debezium's task fails on this column")
            }
            (Converter::BinaryData(_), BytesSchema::Bytes) => Ok(()),
            (Converter::BinaryData(Some(d)), BytesSchema::Other) => d.writes_column(bytes_schema),
            (Converter::BinaryData(None), BytesSchema::Other) => Err(
                "BinaryDataConverter without delegate.converter.type takes bytes only: Debezium's task fails on this column",
            ),
            _ => Ok(()),
        }
    }

    /// JsonConverter's `schemas.enable`, for it or its delegate.
    pub fn schemas(&self) -> Schemas {
        match self {
            Converter::Json(s) => *s,
            Converter::BinaryData(Some(d)) => d.schemas(),
            Converter::BinaryData(None) | Converter::String | Converter::ByteArray => {
                Schemas::Disabled
            }
        }
    }

    /// Whether a value that is not bytes reaches `toString()`.
    pub fn writes_text(&self) -> bool {
        match self {
            Converter::String => true,
            Converter::BinaryData(Some(d)) => d.writes_text(),
            _ => false,
        }
    }

    /// Whether a null under a required (non-BYTES) schema fails it, as
    /// JsonConverter fails.
    pub fn fails_on_required_null(&self) -> bool {
        match self {
            Converter::Json(_) => true,
            Converter::BinaryData(Some(d)) => d.fails_on_required_null(),
            Converter::BinaryData(None) | Converter::String | Converter::ByteArray => false,
        }
    }

    /// Whether it writes a struct (an envelope, an expanded payload).
    pub fn writes_struct(&self) -> Result<(), &'static str> {
        match self {
            Converter::ByteArray => {
                Err("ByteArrayConverter takes bytes only: Debezium's task fails on a struct value")
            }
            Converter::BinaryData(Some(d)) => d.writes_struct(),
            Converter::BinaryData(None) => Err(
                "BinaryDataConverter without delegate.converter.type takes bytes only: Debezium's task fails on a struct value",
            ),
            _ => Ok(()),
        }
    }
}

/// Whether a column's Kafka Connect schema is BYTES.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BytesSchema {
    Bytes,
    Other,
}

impl HeaderConverter {
    pub(crate) fn describe(&self) -> String {
        match self {
            HeaderConverter::Simple => "SimpleHeaderConverter".into(),
            HeaderConverter::Json(s) => Converter::Json(*s).describe(),
        }
    }
}

#[cfg(test)]
mod tests;
