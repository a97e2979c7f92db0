//! The Outbox Event Router over one table: a [`Plan`] resolves a contract
//! against the table's columns once (what `check` reports when it does not
//! fit), then routes each inserted row to the record Debezium 3.6.1 emits
//! for it (`EventRouterDelegate.apply`), through the contract's converters.

use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::convert::{self, ColumnType, Datum, Optionality, Shape};
use super::converters::{BytesSchema, Schemas};
use super::definition::{Contract, Converters, Role};
use super::expand::{self, Unexpanded};
use super::outbox;
use super::router::{EmptyPayload, InvalidOp, JsonNull, Missing, PayloadForm, Placement};
use super::schema::ColumnSchema;
use super::topic::TopicRule;
use crate::error::{Code, Error};
use forms::{payload_schema, EnvelopeForms, EnvelopeNames, ExpandedForms};

/// The name of the header that carries the event id: the router's own.
pub const ID_HEADER: &str = "id";
/// The value struct's first field when the contract has envelope fields.
pub const ENVELOPE_PAYLOAD: &str = "payload";

/// A column as the catalog or a Relation message describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableColumn {
    pub name: String,
    pub type_oid: u32,
    pub typmod: i32,
    /// `format_type()`'s spelling, for messages.
    pub type_name: String,
    /// From the catalog: a Relation message does not say.
    pub optionality: Optionality,
    /// The default's expression (`pg_get_expr(adbin)`), from the catalog.
    pub default: Option<String>,
}

/// Why a contract does not fit a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Misfit {
    pub column: String,
    pub role: Role,
    pub problem: String,
    pub code: Code,
}

impl std::fmt::Display for Misfit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            self.column,
            self.role.as_str(),
            self.problem
        )
    }
}

#[derive(Debug, Clone)]
struct Slot {
    index: usize,
    ty: ColumnType,
    /// Debezium's default for the column: what `Struct.get` gives for NULL.
    default: Option<Datum>,
    optionality: Optionality,
}

impl Slot {
    fn schema(&self) -> ColumnSchema<'_> {
        ColumnSchema {
            ty: self.ty,
            optionality: self.optionality,
            default: self.default.as_ref(),
        }
    }
}

/// A contract resolved against a table's columns.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The table's column names, for messages.
    names: Vec<String>,
    converters: Converters,
    event_id: Slot,
    key: Option<Slot>,
    payload: Slot,
    route_by: Slot,
    timestamp: Option<Slot>,
    headers: Vec<(Arc<str>, Slot)>,
    envelope: Vec<(Arc<str>, Slot)>,
    partition: Option<Slot>,
    topic: TopicRule,
    empty_payload: EmptyPayload,
    payload_form: PayloadForm,
    json_null: JsonNull,
    invalid_op: InvalidOp,
    /// `table.field.event.schema.version`'s column, with an envelope.
    schema_version: Option<Slot>,
    /// Debezium's row schema name, after which an envelope's is named.
    record_name: String,
    /// The payload column's name: an expanded payload's schema is named
    /// after it.
    payload_name: String,
    envelope_names: Arc<Mutex<EnvelopeNames>>,
}

/// One record as Debezium emits it for a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routed {
    /// The event id column's text, for logs and the dead-letter table.
    pub id: String,
    pub topic: String,
    pub partition: Option<i32>,
    pub key: Option<Bytes>,
    /// `None` is a tombstone.
    pub value: Option<Bytes>,
    pub headers: Vec<(Arc<str>, Option<Vec<u8>>)>,
    /// The event timestamp column's, or `fallback_ms` (Debezium: the time it
    /// handled the change, a documented difference).
    pub timestamp_ms: i64,
}

impl Plan {
    /// Resolves `contract` against `columns`; every problem is returned,
    /// each with its code.
    pub fn new(contract: &Contract, columns: &[TableColumn]) -> Result<Plan, Vec<Misfit>> {
        let r = &contract.router;
        let mut misfits = Vec::new();
        let mut find = |name: &str,
                        role: Role,
                        accepts: &dyn Fn(ColumnType) -> bool,
                        want: &str| {
            let Some((index, column)) = columns.iter().enumerate().find(|(_, c)| c.name == name)
            else {
                misfits.push(Misfit {
                    column: name.to_string(),
                    role,
                    problem: "the table has no such column".into(),
                    code: Code::CONTRACT_COLUMN_MISSING,
                });
                return None;
            };
            match ColumnType::of(column.type_oid, column.typmod) {
                Some(ty) if accepts(ty) => Some(Slot {
                    index,
                    ty,
                    default: column
                        .default
                        .as_deref()
                        .and_then(|e| ty.debezium_default(e)),
                    optionality: column.optionality,
                }),
                Some(_) => {
                    misfits.push(Misfit {
                        column: name.to_string(),
                        role,
                        problem: format!("is {}; {want}", column.type_name),
                        code: Code::CONTRACT_COLUMN_TYPE,
                    });
                    None
                }
                None => {
                    misfits.push(Misfit {
                        column: name.to_string(),
                        role,
                        problem: format!(
                            "is {}, whose Debezium form the relay does not reproduce (uuid, text, varchar, char, smallint, integer, bigint, boolean, jsonb, json, bytea, timestamp, timestamptz)",
                            column.type_name
                        ),
                        code: Code::CONTRACT_COLUMN_TYPE,
                    });
                    None
                }
            }
        };
        let any = |_: ColumnType| true;
        let string = |t: ColumnType| t.shape() == Shape::String;
        let int32 = |t: ColumnType| t == ColumnType::Int32;
        let timestamp =
            |t: ColumnType| matches!(t, ColumnType::TimestampMillis | ColumnType::TimestampMicros);

        let event_id = find(&r.event_id, Role::EventId, &any, "");
        let key = match &r.event_key {
            Some(k) => find(k, Role::Key, &any, "").map(Some),
            None => Some(None),
        };
        let payload = find(&r.payload, Role::Payload, &any, "");
        let route_by = find(
            &r.route_by,
            Role::RouteBy,
            &string,
            "the router reads it as a string (text, varchar, uuid)",
        );
        let ts = match &r.event_timestamp {
            Some(t) => find(
                t,
                Role::Timestamp,
                &timestamp,
                "the router reads a timestamp without time zone (Debezium's Timestamp or MicroTimestamp)",
            )
            .map(Some),
            None => Some(None),
        };
        let mut schema_version = None;
        if let Some(v) = r.schema_version.as_ref().filter(|_| r.has_envelope()) {
            schema_version = find(
                v,
                Role::SchemaVersion,
                &int32,
                "the router reads it as an integer",
            );
        }
        let mut headers = Vec::new();
        let mut envelope = Vec::new();
        let mut partition = None;
        for a in &r.additional {
            if r.missing == Missing::Ignore && !columns.iter().any(|c| c.name == a.column) {
                continue;
            }
            let alias: Arc<str> = Arc::from(a.alias.as_str());
            match a.placement {
                Placement::Header => {
                    if let Some(s) = find(&a.column, Role::Header, &any, "") {
                        headers.push((alias, s));
                    }
                }
                Placement::Envelope => {
                    if let Some(s) = find(&a.column, Role::Envelope, &any, "") {
                        envelope.push((alias, s));
                    }
                }
                Placement::Partition => {
                    partition = find(
                        &a.column,
                        Role::Partition,
                        &int32,
                        "the router reads the partition as an integer",
                    );
                }
            }
        }
        let topic = r.topic_rule();
        converter_misfits(
            contract,
            columns,
            (key.as_ref(), payload.as_ref()),
            &envelope,
            &mut misfits,
        );
        match (event_id, key, payload, route_by, ts, topic) {
            (
                Some(event_id),
                Some(key),
                Some(payload),
                Some(route_by),
                Some(timestamp),
                Ok(topic),
            ) if misfits.is_empty() => Ok(Plan {
                names: columns.iter().map(|c| c.name.clone()).collect(),
                converters: contract.converters.clone(),
                event_id,
                key,
                payload,
                route_by,
                timestamp,
                headers,
                envelope,
                partition,
                topic,
                empty_payload: r.empty_payload,
                payload_form: r.payload_form,
                json_null: r.json_null,
                invalid_op: r.invalid_op,
                schema_version,
                record_name: contract.record_name.clone(),
                payload_name: r.payload.clone(),
                envelope_names: Arc::default(),
            }),
            _ => Err(misfits),
        }
    }

    /// What an UPDATE of the table gets.
    pub fn invalid_op(&self) -> InvalidOp {
        self.invalid_op
    }

    /// The event id column's text in `values`, when it has one.
    pub fn event_id_text(&self, values: &[Option<Bytes>]) -> Option<String> {
        values
            .get(self.event_id.index)?
            .as_ref()
            .map(|b| String::from_utf8_lossy(b).into_owned())
    }

    /// `values` as a JSON object of the columns' text forms (`null` for
    /// NULL): a row kept whole when it could not be routed.
    pub fn row_json(&self, values: &[Option<Bytes>]) -> String {
        let mut out = vec![b'{'];
        for (i, (name, value)) in self.names.iter().zip(values).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            convert::write_json_string(&mut out, name);
            out.push(b':');
            match value {
                Some(text) => convert::write_json_string(&mut out, &String::from_utf8_lossy(text)),
                None => out.extend_from_slice(b"null"),
            }
        }
        out.push(b'}');
        String::from_utf8_lossy(&out).into_owned()
    }

    /// The record for an inserted row: `values` are its columns' text
    /// forms in the table's order, `None` for NULL.
    pub fn route(&self, values: &[Option<Bytes>], fallback_ms: i64) -> Result<Routed, Error> {
        // What the router's `Struct.getString`/`getInt32`/`getInt64` read:
        // the column's value, NULL as it is.
        let raw = |slot: &Slot| -> Result<Datum, Error> {
            match values.get(slot.index) {
                Some(Some(text)) => slot.ty.decode(text).map_err(|e| {
                    let name = self.names.get(slot.index).map_or("?", String::as_str);
                    Error::new(Code::ROW_UNDECODABLE, format!("{name}: {e}"))
                }),
                Some(None) => Ok(Datum::Null),
                None => Err(Error::new(
                    Code::ROW_SHAPE_MISMATCH,
                    format!("the row has {} values", values.len()),
                )),
            }
        };
        // What its `Struct.get` reads: NULL is the column's default.
        let datum = |slot: &Slot| -> Result<Datum, Error> {
            match (raw(slot)?, &slot.default) {
                (Datum::Null, Some(default)) => Ok(default.clone()),
                (value, _) => Ok(value),
            }
        };
        let id = datum(&self.event_id)?;
        let topic = match raw(&self.route_by)? {
            Datum::String(t) => self.topic.topic(t.as_str()),
            _ => {
                return Err(Error::new(
                    Code::ILLEGAL_TOPIC_NAME,
                    "the routing column is NULL: the record has no topic",
                ))
            }
        };
        if !outbox::is_legal_topic_name(&topic) {
            return Err(Error::new(
                Code::ILLEGAL_TOPIC_NAME,
                format!("{topic:?} is not a legal Kafka topic name"),
            ));
        }
        let timestamp_ms = match &self.timestamp {
            None => fallback_ms,
            Some(slot) => match raw(slot)? {
                Datum::Integer(v) if slot.ty == ColumnType::TimestampMillis => v,
                // Java's `long / 1_000` truncates toward zero, as Rust's does.
                Datum::Integer(v) => v / 1000,
                _ => fallback_ms,
            },
        };
        let mut headers = Vec::with_capacity(1 + self.headers.len());
        let header = &self.converters.header;
        headers.push((
            Arc::from(ID_HEADER),
            header.column(&id, &self.event_id.schema()),
        ));
        for (alias, slot) in &self.headers {
            headers.push((alias.clone(), header.column(&datum(slot)?, &slot.schema())));
        }
        let partition = match self.partition.as_ref().map(raw).transpose()? {
            Some(Datum::Integer(p)) => i32::try_from(p).ok(),
            _ => None,
        };
        let payload = datum(&self.payload)?;
        // An expanded payload is a struct: never blank, written as JSON by
        // either converter (BinaryDataConverter delegates non-bytes).
        let expanded = match (&payload, self.payload_form) {
            (Datum::String(text), PayloadForm::ExpandJson) => {
                match expand::expand(text.as_str(), self.json_null) {
                    Ok(expansion) => Some(expansion),
                    Err(Unexpanded::KeptAsText) => None,
                    Err(Unexpanded::NoSchema) if self.envelope.is_empty() => None,
                    // The schema is the struct's, the value the string:
                    // `toString()` writes the string where JSON fails.
                    Err(Unexpanded::FailsDebezium)
                        if self.envelope.is_empty() && self.converters.value.writes_text() =>
                    {
                        None
                    }
                    Err(why) => {
                        return Err(Error::new(
                            Code::PAYLOAD_NOT_REPRODUCED,
                            match why {
                                Unexpanded::NotReproduced => "Debezium's expansion of this payload depends on Java's hash order (objects of different shapes in one array) or holds a lone surrogate",
                                _ => "Debezium's task fails on this payload (a schema inferred, the value not convertible: a top-level array, an integer beyond long, an empty array beside an envelope field)",
                            },
                        ))
                    }
                }
            }
            _ => None,
        };
        let conv = &self.converters.value;
        let value = if let Some(exp) = expanded.as_ref().filter(|_| self.envelope.is_empty()) {
            conv.structure(&ExpandedForms {
                expansion: exp,
                name: &self.payload_name,
            })
        } else if expanded.is_none()
            && self.empty_payload == EmptyPayload::Tombstone
            && payload.is_blank()
        {
            None
        } else if !self.envelope.is_empty() {
            let mut fields = Vec::with_capacity(self.envelope.len());
            for (alias, slot) in &self.envelope {
                fields.push((&**alias, datum(slot)?, slot));
            }
            let forms = EnvelopeForms {
                payload: &payload,
                payload_slot: &self.payload,
                expanded: expanded.as_ref().map(|e| (e, self.payload_name.as_str())),
                fields,
                name: match conv.schemas() {
                    Schemas::Enabled => {
                        let version = match &self.schema_version {
                            Some(slot) => match raw(slot)? {
                                Datum::Integer(v) => Some(v),
                                _ => None,
                            },
                            None => None,
                        };
                        let routed = match raw(&self.route_by)? {
                            Datum::String(t) => t.as_str().to_string(),
                            _ => String::new(),
                        };
                        let schema = payload_schema(
                            &self.payload,
                            expanded.as_ref().map(|e| (e, self.payload_name.as_str())),
                        );
                        Some((self.envelope_name(version, &routed, &schema)?, version))
                    }
                    Schemas::Disabled => None,
                },
            };
            conv.structure(&forms)
        } else {
            conv.column(&payload, &self.payload.schema())
        }
        .map(Bytes::from);
        let key = match &self.key {
            None => None,
            Some(slot) => self
                .converters
                .key
                .column(&datum(slot)?, &slot.schema())
                .map(Bytes::from),
        };
        Ok(Routed {
            id: match &id {
                Datum::String(t) => t.as_str().to_string(),
                other => convert::header_bytes(other)
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default(),
            },
            topic,
            partition,
            key,
            value,
            headers,
            timestamp_ms,
        })
    }
}

/// Whether a column's Kafka Connect schema is BYTES.
fn bytes_schema(ty: ColumnType) -> BytesSchema {
    match ty.shape() {
        Shape::Bytes => BytesSchema::Bytes,
        _ => BytesSchema::Other,
    }
}

/// What the contract's converters cannot write for these columns: what
/// fails Debezium's task (ByteArrayConverter on text, JsonConverter on a
/// null key under a required schema) or has no stable bytes (Java's
/// `byte[].toString()`).
fn converter_misfits(
    contract: &Contract,
    columns: &[TableColumn],
    (key, payload): (Option<&Option<Slot>>, Option<&Slot>),
    envelope: &[(Arc<str>, Slot)],
    misfits: &mut Vec<Misfit>,
) {
    let c = &contract.converters;
    let r = &contract.router;
    let name = |slot: &Slot| {
        columns
            .get(slot.index)
            .map_or("?", |c| c.name.as_str())
            .to_string()
    };
    let mut misfit = |column: String, role: Role, problem: &str, code: Code| {
        misfits.push(Misfit {
            column,
            role,
            problem: problem.to_string(),
            code,
        })
    };
    match key {
        Some(Some(slot)) => {
            if let Err(why) = c.key.writes_column(bytes_schema(slot.ty)) {
                misfit(name(slot), Role::Key, why, Code::CONTRACT_COLUMN_TYPE);
            }
        }
        Some(None) if c.key.fails_on_required_null() => misfit(
            "(table.field.event.key is empty)".into(),
            Role::Key,
            "a null key under Debezium's required string schema, which JsonConverter refuses: Debezium's task fails on every record",
            Code::CONTRACT_OPTION_INVALID,
        ),
        _ => {}
    }
    let Some(payload) = payload else { return };
    let structure = !envelope.is_empty()
        || (r.payload_form == PayloadForm::ExpandJson && payload.ty.shape() == Shape::String);
    if structure {
        if let Err(why) = c.value.writes_struct() {
            misfit(
                name(payload),
                Role::Payload,
                why,
                Code::CONTRACT_COLUMN_TYPE,
            );
        }
    }
    if envelope.is_empty() {
        if let Err(why) = c.value.writes_column(bytes_schema(payload.ty)) {
            misfit(
                name(payload),
                Role::Payload,
                why,
                Code::CONTRACT_COLUMN_TYPE,
            );
        }
    } else if c.value.writes_text() {
        // `Struct.toString()` of the envelope writes each field's.
        for (slot, role) in std::iter::once((payload, Role::Payload))
            .chain(envelope.iter().map(|(_, s)| (s, Role::Envelope)))
        {
            if slot.ty.shape() == Shape::Bytes {
                misfit(
                    name(slot),
                    role,
                    "StringConverter writes no stable text for bytes (Java's byte[].toString())",
                    Code::CONTRACT_COLUMN_TYPE,
                );
            }
        }
    }
}

mod forms;

#[cfg(test)]
mod tests;
