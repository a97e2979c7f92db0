//! A struct value's forms for the converters (an expanded payload, an
//! envelope) and the envelope schema names the router gives.

use std::collections::HashMap;

use super::{Plan, Slot, ENVELOPE_PAYLOAD};
use crate::contract::convert::{self, Datum, Optionality};
use crate::contract::converters::StructForms;
use crate::contract::expand::Expansion;
use crate::contract::schema;
use crate::error::{Code, Error};

/// The envelope schemas' names the router has given, as its
/// `payloadSchemaCache` and `versionedValueSchema` hold them: the first
/// routed value's name stays for every later record of the same payload
/// schema (or, with `table.field.event.schema.version`, of the same
/// version).
#[derive(Debug, Default)]
pub(super) struct EnvelopeNames {
    by_payload: HashMap<Vec<u8>, String>,
    /// The version's payload schema and name.
    by_version: HashMap<Option<i64>, (Vec<u8>, String)>,
}

/// The router's bound on `payloadSchemaCache`; past it the relay keeps the
/// names it has (Debezium evicts the least recently used).
const ENVELOPE_NAMES: usize = 10_000;

impl Plan {
    /// The envelope's schema name: `<topic.prefix>.<schema>.<table>.` +
    /// the routed value + `.Value` for the first record of its payload
    /// schema (or version), that first name for the rest.
    pub(super) fn envelope_name(
        &self,
        version: Option<i64>,
        routed: &str,
        payload_schema: &[u8],
    ) -> Result<String, Error> {
        let fresh = || match self.record_name.rfind('.') {
            Some(dot) => format!(
                "{}{routed}.{}",
                &self.record_name[..dot + 1],
                &self.record_name[dot + 1..]
            ),
            None => format!("{routed}.{}", self.record_name),
        };
        let mut names = self
            .envelope_names
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if self.schema_version.is_some() {
            if let Some((schema, name)) = names.by_version.get(&version) {
                return match schema.as_slice() == payload_schema {
                    true => Ok(name.clone()),
                    false => Err(Error::new(
                        Code::PAYLOAD_NOT_REPRODUCED,
                        "a payload of another schema under a schema version the router has seen: Debezium's task fails on it (Struct schemas do not match)",
                    )),
                };
            }
            let name = fresh();
            if names.by_version.len() < ENVELOPE_NAMES {
                names
                    .by_version
                    .insert(version, (payload_schema.to_vec(), name.clone()));
            }
            return Ok(name);
        }
        if let Some(name) = names.by_payload.get(payload_schema) {
            return Ok(name.clone());
        }
        let name = fresh();
        if names.by_payload.len() < ENVELOPE_NAMES {
            names
                .by_payload
                .insert(payload_schema.to_vec(), name.clone());
        }
        Ok(name)
    }
}

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
        convert::write_json_string(&mut out, ENVELOPE_PAYLOAD);
        out.push(b':');
        match self.expanded {
            Some((e, _)) => out.extend_from_slice(e.json()),
            None => convert::write_json(&mut out, self.payload),
        }
        for (alias, value, _) in &self.fields {
            out.push(b',');
            convert::write_json_string(&mut out, alias);
            out.push(b':');
            convert::write_json(&mut out, value);
        }
        out.push(b'}');
        out
    }

    /// `Struct.toString()`: the fields that are not null.
    fn java(&self) -> String {
        let text =
            |d: &Datum| convert::string_bytes(d).map(|b| String::from_utf8_lossy(&b).into_owned());
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
