//! A struct value's forms for the converters (an expanded payload, an
//! envelope) and the envelope schema names the router gives.

use std::collections::HashMap;

use super::columns::{Optionality, Slot};
use super::converters::{string_bytes, StructForms};
use super::expand::Expansion;
use super::json::{write_json, write_json_string};
use super::schema;
use crate::row::Datum;

/// The envelope schemas' names the router has given, as its
/// `payloadSchemaCache` and `versionedValueSchema` hold them: the first
/// routed value's name stays for every later record of the same payload
/// schema (or, with `table.field.event.schema.version`, of the same
/// version).
#[derive(Debug, Default)]
pub(super) struct EnvelopeNames {
    pub(super) by_payload: HashMap<Vec<u8>, String>,
    /// The version's payload schema and name.
    pub(super) by_version: HashMap<Option<i64>, (Vec<u8>, String)>,
}

/// The router's bound on `payloadSchemaCache`; past it the relay keeps the
/// names it has (Debezium evicts the least recently used).
pub(super) const ENVELOPE_NAMES: usize = 10_000;

/// The value struct's first field when the contract has envelope fields.
pub const ENVELOPE_PAYLOAD: &str = "payload";

/// The payload's schema as JsonConverter writes it, as a struct's field
/// named `payload`.
pub(super) fn payload_schema(slot: &Slot, expanded: Option<(&Expansion, &str)>) -> Vec<u8> {
    let mut out = Vec::with_capacity(96);
    match expanded {
        Some((e, name)) => e.write_schema(&mut out, name, Some(ENVELOPE_PAYLOAD)),
        None => slot.schema().write(&mut out, Some(ENVELOPE_PAYLOAD)),
    }
    out
}

/// An expanded payload's forms, its schema named after the payload column.
pub(super) struct ExpandedForms<'a> {
    pub(super) expansion: &'a Expansion,
    pub(super) name: &'a str,
}

impl StructForms for ExpandedForms<'_> {
    fn json(&self) -> Vec<u8> {
        self.expansion.json().to_vec()
    }

    fn java(&self) -> String {
        self.expansion.java()
    }

    fn schema(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        self.expansion.write_schema(&mut out, self.name, None);
        out
    }
}

/// An envelope's forms: `payload`, then each envelope field by its alias.
pub(super) struct EnvelopeForms<'a> {
    pub(super) payload: &'a Datum,
    pub(super) payload_slot: &'a Slot,
    pub(super) expanded: Option<(&'a Expansion, &'a str)>,
    pub(super) fields: Vec<(&'a str, Datum, &'a Slot)>,
    /// The schema's name and version, when a converter writes schemas.
    pub(super) name: Option<(String, Option<i64>)>,
}

impl StructForms for EnvelopeForms<'_> {
    fn json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.push(b'{');
        write_json_string(&mut out, ENVELOPE_PAYLOAD);
        out.push(b':');
        match self.expanded {
            Some((e, _)) => out.extend_from_slice(e.json()),
            None => write_json(&mut out, self.payload),
        }
        for (alias, value, _) in &self.fields {
            out.push(b',');
            write_json_string(&mut out, alias);
            out.push(b':');
            write_json(&mut out, value);
        }
        out.push(b'}');
        out
    }

    /// `Struct.toString()`: the fields that are not null.
    fn java(&self) -> String {
        let text = |d: &Datum| string_bytes(d).map(|b| String::from_utf8_lossy(&b).into_owned());
        let payload = match self.expanded {
            Some((e, _)) => Some(e.java()),
            None => text(self.payload),
        };
        let parts: Vec<String> = std::iter::once((ENVELOPE_PAYLOAD, payload))
            .chain(
                self.fields
                    .iter()
                    .map(|(alias, value, _)| (*alias, text(value))),
            )
            .filter_map(|(name, value)| value.map(|v| format!("{name}={v}")))
            .collect();
        format!("Struct{{{}}}", parts.join(","))
    }

    fn schema(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        let payload = payload_schema(self.payload_slot, self.expanded);
        schema::structure(
            &mut out,
            |out| {
                out.extend_from_slice(&payload);
                for (alias, _, slot) in &self.fields {
                    out.push(b',');
                    slot.schema().write(out, Some(alias));
                }
            },
            &schema::Struct {
                optionality: Optionality::Required,
                name: self.name.as_ref().map(|(n, _)| n.as_str()),
                version: self.name.as_ref().and_then(|(_, v)| *v),
                field: None,
            },
        );
        out
    }
}
