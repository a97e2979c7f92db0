//! A row through its plan: the record Debezium 3.6.1's Outbox Event Router
//! emits for an inserted row (`EventRouterDelegate.apply`), written by the
//! contract's converters. The platform's rows (typed values in the
//! definition's order) and a routed table's (text forms in the table's
//! order) take the same path; only [`Row`] differs.

use std::borrow::Cow;

use bytes::Bytes;

use super::checks;
use super::columns::Slot;
use super::columns::{ColumnType, Optionality};
use super::converters::StructForms;
use super::envelope::{payload_schema, EnvelopeForms, ExpandedForms, ENVELOPE_NAMES};
use super::expand::{self, Unexpanded};
use super::plan::Plan;
use super::record::{HeaderWriter, Parts, Record};
use super::schema::ColumnSchema;
use crate::contract::converters::Schemas;
use crate::contract::definition::EmptyRoute;
use crate::contract::options::{EmptyPayload, PayloadForm};
use crate::contract::outbox;
use crate::error::{Code, Error};
use crate::row::value::Uuid;
use crate::row::{Datum, OutboxRow};

/// A row as a plan reads it: a column's value by its index.
pub trait Row {
    /// The value at `index` as `ty` reads it (NULL as it is); `Ok(None)`
    /// when the row has no such column, `Err` when the value does not read.
    fn value(&self, index: usize, ty: ColumnType) -> Result<Option<Cow<'_, Datum>>, String>;

    /// Why the whole row cannot be published, when decoding it said so.
    fn problem(&self) -> Option<&Error> {
        None
    }
}

/// The platform's row, decoded by the definition's types already.
impl Row for OutboxRow {
    fn value(&self, index: usize, _: ColumnType) -> Result<Option<Cow<'_, Datum>>, String> {
        Ok(self.at(index).map(Cow::Borrowed))
    }

    fn problem(&self) -> Option<&Error> {
        OutboxRow::problem(self)
    }
}

/// A routed table's row: its columns' text forms (`None`: NULL), each read
/// when the plan asks for it.
impl Row for [Option<Bytes>] {
    fn value(&self, index: usize, ty: ColumnType) -> Result<Option<Cow<'_, Datum>>, String> {
        match self.get(index) {
            None => Ok(None),
            Some(None) => Ok(Some(Cow::Owned(Datum::Null))),
            Some(Some(text)) => ty.decode(text).map(|d| Some(Cow::Owned(d))),
        }
    }
}

/// Bytes reserved for a record's header values: the platform's usual 16.
const HEADER_BYTES: usize = 256;

impl Plan {
    /// What the router's `Struct.getString`/`getInt32`/`getInt64` read: the
    /// column's value, NULL as it is.
    fn raw<'a, R: Row + ?Sized>(&self, row: &'a R, slot: &Slot) -> Result<Cow<'a, Datum>, Error> {
        match row.value(slot.index, slot.ty) {
            Ok(Some(datum)) => Ok(datum),
            Ok(None) => Err(Error::new(
                Code::ROW_SHAPE_MISMATCH,
                format!("the row has no column {}", slot.index + 1),
            )),
            Err(e) => {
                let name = self.names.get(slot.index).map_or("?", String::as_str);
                Err(Error::new(Code::ROW_UNDECODABLE, format!("{name}: {e}")))
            }
        }
    }

    /// What its `Struct.get` reads: NULL is the column's default.
    fn datum<'a, R: Row + ?Sized>(
        &'a self,
        row: &'a R,
        slot: &'a Slot,
    ) -> Result<Cow<'a, Datum>, Error> {
        let value = self.raw(row, slot)?;
        match (&*value, &slot.default) {
            (Datum::Null, Some(default)) => Ok(Cow::Borrowed(default)),
            _ => Ok(value),
        }
    }

    /// Appends the row's topic to `out`; `false` when the routing value
    /// gives none (NULL, or not a string).
    pub fn write_topic<R: Row + ?Sized>(&self, row: &R, out: &mut String) -> bool {
        match self.raw(row, &self.route_by).as_deref() {
            Ok(Datum::String(value)) => {
                self.topic.write(value.as_str(), out);
                true
            }
            Ok(d @ (Datum::Uuid(_) | Datum::Timestamp(_))) => {
                let mut text = Vec::with_capacity(36);
                d.write_string(&mut text);
                self.topic.write(&String::from_utf8_lossy(&text), out);
                true
            }
            _ => false,
        }
    }

    /// The topic of the rows whose routing value is `value`.
    pub fn topic_for(&self, value: &str) -> String {
        self.topic.topic(value)
    }

    /// The row's topic, refused as the router would fail on it.
    fn topic<R: Row + ?Sized>(&self, row: &R) -> Result<String, Error> {
        let mut topic = String::new();
        if !self.write_topic(row, &mut topic) {
            return Err(Error::new(
                Code::ILLEGAL_TOPIC_NAME,
                "the routing column is NULL: the record has no topic",
            ));
        }
        let empty = || {
            matches!(self.raw(row, &self.route_by).as_deref(),
                Ok(Datum::String(v)) if v.as_bytes().is_empty())
        };
        if !outbox::is_legal_topic_name(&topic)
            || (self.empty_route == EmptyRoute::Refused && empty())
        {
            return Err(Error::new(
                Code::ILLEGAL_TOPIC_NAME,
                format!("{topic:?} is not a legal Kafka topic name"),
            ));
        }
        Ok(topic)
    }

    /// The record for an inserted row. `message_id` is its identity (see
    /// [`Record::message_id`]); `fallback_ms` its timestamp unless the
    /// contract names a column for it (Debezium: the time it handled the
    /// change, a documented difference).
    pub fn record<R: Row + ?Sized>(
        &self,
        row: &R,
        message_id: Uuid,
        fallback_ms: Option<i64>,
    ) -> Result<Record, Error> {
        if let Some(problem) = row.problem() {
            return Err(problem.clone());
        }
        let topic = self.topic(row)?;
        if let Some(slot) = &self.application_headers {
            checks::application_headers(&*self.raw(row, slot)?)?;
        }
        let timestamp_ms = match &self.timestamp {
            None => fallback_ms,
            Some(slot) => match *self.raw(row, slot)? {
                Datum::Integer(v) if slot.ty == ColumnType::TimestampMillis => Some(v),
                // Java's `long / 1_000` truncates toward zero, as Rust's does.
                Datum::Integer(v) => Some(v / 1000),
                _ => fallback_ms,
            },
        };
        let headers = self.headers(row)?;
        let partition = match self
            .partition
            .as_ref()
            .map(|s| self.raw(row, s))
            .transpose()?
        {
            Some(d) => match *d {
                Datum::Integer(p) => i32::try_from(p).ok(),
                _ => None,
            },
            None => None,
        };
        let value = self.value(row)?;
        let key = match &self.key {
            None => None,
            Some(slot) => self
                .converters
                .key
                .shared(&*self.datum(row, slot)?, &slot.schema()),
        };
        Ok(Record::new(Parts {
            message_id,
            topic,
            key,
            value,
            partition,
            headers,
            timestamp_ms,
        }))
    }

    /// Debezium's context headers, `id` (the event id), then each header
    /// placement, in one buffer.
    fn headers<R: Row + ?Sized>(&self, row: &R) -> Result<super::record::Headers, Error> {
        let header = &self.converters.header;
        let mut w = HeaderWriter::new(&self.header_names, HEADER_BYTES);
        let mut names = self.header_names.iter();
        let mut close = |w: &mut HeaderWriter, present: bool| {
            let closed = match present {
                true => w.close_value(),
                false => w.close_null(),
            };
            match (closed, names.next()) {
                (true, _) => Ok(()),
                (false, name) => Err(Error::new(
                    Code::HEADER_UNENCODABLE,
                    format!("{}: too large", name.map_or("?", |n| &**n)),
                )),
            }
        };
        if let Some(context) = &self.context {
            // Debezium's `Schema.STRING_SCHEMA`: a required string.
            let schema = ColumnSchema {
                ty: ColumnType::Text,
                optionality: Optionality::Required,
                default: None,
            };
            let run = context.run.as_ref().map(|r| Datum::Uuid(r.id()));
            for datum in context.values.iter().chain(run.as_ref()) {
                let present = header.write(w.values(), datum, &schema);
                close(&mut w, present)?;
            }
        }
        for slot in std::iter::once(&self.event_id).chain(&self.headers) {
            let datum = self.datum(row, slot)?;
            let present = header.write(w.values(), &datum, &slot.schema());
            close(&mut w, present)?;
        }
        Ok(w.finish())
    }

    /// The record's value: the payload as the converter writes it, an
    /// expanded payload, an envelope, or a tombstone (`None`).
    fn value<R: Row + ?Sized>(&self, row: &R) -> Result<Option<Bytes>, Error> {
        let payload = self.datum(row, &self.payload)?;
        let expanded = self.expanded(&payload)?;
        let conv = &self.converters.value;
        Ok(
            if let Some(exp) = expanded.as_ref().filter(|_| self.envelope.is_empty()) {
                conv.structure(&ExpandedForms {
                    expansion: exp,
                    name: &self.payload_name,
                })
                .map(Bytes::from)
            } else if expanded.is_none()
                && self.empty_payload == EmptyPayload::Tombstone
                && payload.is_blank()
            {
                None
            } else if !self.envelope.is_empty() {
                let mut fields = Vec::with_capacity(self.envelope.len());
                for (alias, slot) in &self.envelope {
                    fields.push((&**alias, self.datum(row, slot)?.into_owned(), slot));
                }
                let name = match conv.schemas() {
                    Schemas::Enabled => Some(self.envelope_schema_name(row, expanded.as_ref())?),
                    Schemas::Disabled => None,
                };
                let forms = EnvelopeForms {
                    payload: &payload,
                    payload_slot: &self.payload,
                    expanded: expanded.as_ref().map(|e| (e, self.payload_name.as_str())),
                    fields,
                    name,
                };
                conv.structure(&forms as &dyn StructForms).map(Bytes::from)
            } else {
                conv.shared(&payload, &self.payload.schema())
            },
        )
    }

    /// An expanded JSON payload, or `None` where Debezium keeps the text;
    /// refused where Debezium's task fails or its bytes are not reproduced.
    /// An expanded payload is a struct: never blank, written as JSON by
    /// either converter (BinaryDataConverter delegates non-bytes).
    fn expanded(&self, payload: &Datum) -> Result<Option<expand::Expansion>, Error> {
        let (Datum::String(text), PayloadForm::ExpandJson) = (payload, self.payload_form) else {
            return Ok(None);
        };
        match expand::expand(text.as_str(), self.json_null) {
            Ok(expansion) => Ok(Some(expansion)),
            Err(Unexpanded::KeptAsText) => Ok(None),
            Err(Unexpanded::NoSchema) if self.envelope.is_empty() => Ok(None),
            // The schema is the struct's, the value the string:
            // `toString()` writes the string where JSON fails.
            Err(Unexpanded::FailsDebezium)
                if self.envelope.is_empty() && self.converters.value.writes_text() =>
            {
                Ok(None)
            }
            Err(why) => Err(Error::new(
                Code::PAYLOAD_NOT_REPRODUCED,
                match why {
                    Unexpanded::NotReproduced => "Debezium's expansion of this payload depends on Java's hash order (objects of different shapes in one array) or holds a lone surrogate",
                    _ => "Debezium's task fails on this payload (a schema inferred, the value not convertible: a top-level array, an integer beyond long, an empty array beside an envelope field)",
                },
            )),
        }
    }

    /// The envelope schema's name and version, as the router caches them.
    fn envelope_schema_name<R: Row + ?Sized>(
        &self,
        row: &R,
        expanded: Option<&expand::Expansion>,
    ) -> Result<(String, Option<i64>), Error> {
        let version = match &self.schema_version {
            Some(slot) => match *self.raw(row, slot)? {
                Datum::Integer(v) => Some(v),
                _ => None,
            },
            None => None,
        };
        let mut routed = Vec::new();
        self.raw(row, &self.route_by)?.write_string(&mut routed);
        let routed = String::from_utf8_lossy(&routed);
        let schema = payload_schema(
            &self.payload,
            expanded.map(|e| (e, self.payload_name.as_str())),
        );
        Ok((self.envelope_name(version, &routed, &schema)?, version))
    }

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
