//! The bytes Kafka Connect's converters write for a column's value or a
//! struct: `JsonConverter` (with or without schemas), `StringConverter`,
//! `ByteArrayConverter`, `BinaryDataConverter` and `SimpleHeaderConverter`,
//! each form measured against Kafka Connect 4.3. Which converters a
//! contract names, and what fails Debezium's task, is the contract's
//! (`contract::converters`).

use bytes::Bytes;

use super::columns::Shape;
use super::json::{base64, write_json};
use super::schema::{self, ColumnSchema};
use crate::contract::converters::{Converter, HeaderConverter, Schemas};
use crate::row::Datum;

/// `SimpleHeaderConverter`'s bytes appended to `out`: strings as they are,
/// numbers and booleans as text, bytes in base64; `false` is a null header.
pub fn write_header(out: &mut Vec<u8>, datum: &Datum) -> bool {
    use std::io::Write as _;
    match datum {
        Datum::Null => return false,
        Datum::String(_) | Datum::Uuid(_) | Datum::Timestamp(_) => {
            datum.write_string(out);
        }
        // Writing to a `Vec` cannot fail.
        Datum::Integer(i) => {
            let _ = write!(out, "{i}");
        }
        Datum::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Datum::Bytes(b) => out.extend_from_slice(base64(b).as_bytes()),
    }
    true
}

/// [`write_header`]'s bytes on their own; `None` is a null header.
pub fn header_bytes(datum: &Datum) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    write_header(&mut out, datum).then_some(out)
}

/// `StringConverter`: `toString()`; `None` for null. Bytes have no stable
/// text (`[B@…`); the contract check refuses them as a key.
pub fn string_bytes(datum: &Datum) -> Option<Vec<u8>> {
    match datum {
        Datum::Bytes(_) => None,
        other => header_bytes(other),
    }
}

impl Converter {
    /// The bytes this converter writes for a column's value (`None`: a
    /// null) under the column's schema. The plan refused what fails
    /// Debezium's task (ByteArray on another type) or has no stable bytes
    /// (`toString()` of bytes).
    pub fn column(&self, datum: &Datum, schema: &ColumnSchema<'_>) -> Option<Vec<u8>> {
        match self {
            Converter::String => string_bytes(datum),
            Converter::Json(schemas) => {
                let mut out = Vec::new();
                write_json(&mut out, datum);
                Some(match schemas {
                    Schemas::Disabled => out,
                    Schemas::Enabled => {
                        let mut s = Vec::with_capacity(96);
                        schema.write(&mut s, None);
                        schema::envelope(&s, &out)
                    }
                })
            }
            Converter::ByteArray => match datum {
                Datum::Bytes(b) => Some(b.to_vec()),
                _ => None,
            },
            Converter::BinaryData(delegate) => match (datum, schema.ty.shape(), delegate) {
                (Datum::Bytes(b), _, _) => Some(b.to_vec()),
                (Datum::Null, Shape::Bytes, _) => None,
                (other, _, Some(delegate)) => delegate.column(other, schema),
                // Debezium's task fails here; the plan refused such a column.
                (_, _, None) => None,
            },
        }
    }

    /// [`Converter::column`]'s bytes, sharing the value's buffer where the
    /// converter writes it as it is (text through `StringConverter`, bytes
    /// through `ByteArrayConverter` or `BinaryDataConverter`): a record's
    /// key and value are then slices of the replication message.
    pub fn shared(&self, datum: &Datum, schema: &ColumnSchema<'_>) -> Option<Bytes> {
        match (self, datum) {
            (Converter::String, Datum::String(text)) => Some(text.bytes()),
            (Converter::ByteArray | Converter::BinaryData(_), Datum::Bytes(b)) => Some(b.clone()),
            _ => self.column(datum, schema).map(Bytes::from),
        }
    }

    /// A struct's bytes (an envelope, an expanded payload): its JSON, or
    /// `Struct.toString()` for StringConverter. The plan refused
    /// ByteArrayConverter here.
    pub fn structure(&self, forms: &dyn StructForms) -> Option<Vec<u8>> {
        match self {
            Converter::String => Some(forms.java().into_bytes()),
            Converter::Json(Schemas::Disabled) => Some(forms.json()),
            Converter::Json(Schemas::Enabled) => {
                Some(schema::envelope(&forms.schema(), &forms.json()))
            }
            Converter::ByteArray => None,
            Converter::BinaryData(Some(d)) => d.structure(forms),
            Converter::BinaryData(None) => None,
        }
    }
}

/// A struct value's forms, each written only when a converter asks.
pub trait StructForms {
    /// As JsonConverter writes the value.
    fn json(&self) -> Vec<u8>;
    /// `Struct.toString()`, as StringConverter writes it.
    fn java(&self) -> String;
    /// The struct's schema, as JsonConverter writes it.
    fn schema(&self) -> Vec<u8>;
}

impl HeaderConverter {
    /// Appends a header's bytes to `out`; `false` is a null header.
    pub fn write(&self, out: &mut Vec<u8>, datum: &Datum, schema: &ColumnSchema<'_>) -> bool {
        match self {
            HeaderConverter::Simple => write_header(out, datum),
            // Never null: a null value under the column's schema is `null`.
            HeaderConverter::Json(s) => match Converter::Json(*s).column(datum, schema) {
                Some(bytes) => {
                    out.extend_from_slice(&bytes);
                    true
                }
                None => false,
            },
        }
    }

    /// A header's bytes; `None` is a null header.
    pub fn column(&self, datum: &Datum, schema: &ColumnSchema<'_>) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        self.write(&mut out, datum, schema).then_some(out)
    }
}

#[cfg(test)]
mod tests;
