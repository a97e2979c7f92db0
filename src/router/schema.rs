//! Kafka Connect schemas as `JsonConverter` writes them with
//! `schemas.enable=true`: `{"schema": ..., "payload": ...}`, the schema's
//! keys in its order (`type`, `fields` or `items`, `optional`, `name`,
//! `version`, `default`, then a struct field's `field`). Debezium's column
//! schemas carry their logical names (`io.debezium.data.Json`, ...), the
//! column's optionality and its parsed default.

use super::columns::{ColumnType, Optionality, Slot};
use super::json::{write_json, write_json_string};
use crate::row::Datum;

/// A column's Kafka Connect schema, as Debezium's PostgreSQL connector
/// builds it.
#[derive(Debug, Clone, Copy)]
pub struct ColumnSchema<'a> {
    pub ty: ColumnType,
    pub optionality: Optionality,
    pub default: Option<&'a Datum>,
}

impl ColumnType {
    /// The schema type and Debezium's logical name (each at version 1).
    fn connect(self) -> (&'static str, Option<&'static str>) {
        match self {
            ColumnType::Uuid => ("string", Some("io.debezium.data.Uuid")),
            ColumnType::Text => ("string", None),
            ColumnType::Int16 => ("int16", None),
            ColumnType::Int32 => ("int32", None),
            ColumnType::Int64 => ("int64", None),
            ColumnType::Bool => ("boolean", None),
            ColumnType::Json => ("string", Some("io.debezium.data.Json")),
            ColumnType::Bytea => ("bytes", None),
            ColumnType::Timestamptz => ("string", Some("io.debezium.time.ZonedTimestamp")),
            ColumnType::TimestampMillis => ("int64", Some("io.debezium.time.Timestamp")),
            ColumnType::TimestampMicros => ("int64", Some("io.debezium.time.MicroTimestamp")),
        }
    }
}

pub(crate) fn optional(out: &mut Vec<u8>, o: Optionality) {
    out.extend_from_slice(match o {
        Optionality::Optional => b",\"optional\":true",
        Optionality::Required => b",\"optional\":false",
    });
}

/// `,"field":"name"` when the schema is a struct's field.
pub fn field(out: &mut Vec<u8>, name: Option<&str>) {
    if let Some(name) = name {
        out.extend_from_slice(b",\"field\":");
        write_json_string(out, name);
    }
}

impl ColumnSchema<'_> {
    pub fn write(&self, out: &mut Vec<u8>, field_name: Option<&str>) {
        let (ty, name) = self.ty.connect();
        out.extend_from_slice(b"{\"type\":\"");
        out.extend_from_slice(ty.as_bytes());
        out.push(b'"');
        optional(out, self.optionality);
        if let Some(name) = name {
            out.extend_from_slice(b",\"name\":");
            write_json_string(out, name);
            out.extend_from_slice(b",\"version\":1");
        }
        if let Some(default) = self.default {
            out.extend_from_slice(b",\"default\":");
            write_json(out, default);
        }
        field(out, field_name);
        out.push(b'}');
    }
}

/// `{"schema": <schema>, "payload": <payload>}`.
pub fn envelope(schema: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(schema.len() + payload.len() + 24);
    out.extend_from_slice(b"{\"schema\":");
    out.extend_from_slice(schema);
    out.extend_from_slice(b",\"payload\":");
    out.extend_from_slice(payload);
    out.push(b'}');
    out
}

/// What a struct's schema says besides its fields.
#[derive(Debug, Clone, Copy)]
pub struct Struct<'a> {
    pub optionality: Optionality,
    pub name: Option<&'a str>,
    pub version: Option<i64>,
    /// Its name as a field of an enclosing struct.
    pub field: Option<&'a str>,
}

/// A struct's schema: `fields` written by `fields`, then the rest.
pub fn structure(out: &mut Vec<u8>, fields: impl FnOnce(&mut Vec<u8>), s: &Struct<'_>) {
    out.extend_from_slice(b"{\"type\":\"struct\",\"fields\":[");
    fields(out);
    out.push(b']');
    optional(out, s.optionality);
    if let Some(name) = s.name {
        out.extend_from_slice(b",\"name\":");
        write_json_string(out, name);
    }
    if let Some(v) = s.version {
        out.extend_from_slice(format!(",\"version\":{v}").as_bytes());
    }
    field(out, s.field);
    out.push(b'}');
}

/// A primitive or array schema of an expanded payload (always optional).
pub fn optional_primitive(out: &mut Vec<u8>, ty: &str, field_name: Option<&str>) {
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(ty.as_bytes());
    out.extend_from_slice(b"\",\"optional\":true");
    field(out, field_name);
    out.push(b'}');
}

impl Slot {
    /// The column's schema, as Debezium gives it.
    pub(crate) fn schema(&self) -> ColumnSchema<'_> {
        ColumnSchema {
            ty: self.ty,
            optionality: self.optionality,
            default: self.default.as_ref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::Text;

    #[test]
    fn column_schemas_are_written_as_json_converter_writes_debeziums() {
        let write = |s: ColumnSchema<'_>, field_name: Option<&str>| {
            let mut out = Vec::new();
            s.write(&mut out, field_name);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(
            write(
                ColumnSchema {
                    ty: ColumnType::Json,
                    optionality: Optionality::Optional,
                    default: None
                },
                None
            ),
            r#"{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1}"#
        );
        let d = Datum::String(Text::from("k"));
        assert_eq!(
            write(
                ColumnSchema {
                    ty: ColumnType::Text,
                    optionality: Optionality::Required,
                    default: Some(&d)
                },
                Some("aggregateid")
            ),
            r#"{"type":"string","optional":false,"default":"k","field":"aggregateid"}"#
        );
    }
}
