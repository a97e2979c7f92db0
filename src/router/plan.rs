//! A contract compiled against a table's columns: a [`Plan`] resolves
//! every column the contract names once (what `check` reports when it does
//! not fit), so that routing a row (`emit`) looks nothing up. Every
//! contract, the platform's too, is compiled here.

use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::columns::{ColumnType, Optionality, Shape, Slot};
use super::envelope::EnvelopeNames;
use super::json::write_json_string;
use super::record::HeaderNames;
use super::run::Run;
use crate::contract::context::{self, RunId};
use crate::contract::converters::{BytesSchema, Converters};
use crate::contract::definition::{Contract, EmptyRoute, Role};
use crate::contract::options::{
    EmptyPayload, InvalidOp, JsonNull, Missing, Named, PayloadForm, ID_HEADER,
};
use crate::contract::outbox;
use crate::contract::topic::TopicRule;
use crate::error::{Code, Error};
use crate::row::{Datum, Text};

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

/// A contract resolved against a table's columns.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The table's column names, for messages.
    pub(super) names: Vec<String>,
    pub(super) converters: Converters,
    pub(super) event_id: Slot,
    pub(super) key: Option<Slot>,
    pub(super) payload: Slot,
    pub(super) route_by: Slot,
    pub(super) timestamp: Option<Slot>,
    /// Debezium's context headers, then `id`, then the contract's header
    /// placements, by alias.
    pub(super) header_names: HeaderNames,
    /// The context headers' values, when the contract has them.
    pub(super) context: Option<Context>,
    /// The header placements' columns, in [`Plan::header_names`]' order
    /// after `id`.
    pub(super) headers: Vec<Slot>,
    pub(super) envelope: Vec<(Arc<str>, Slot)>,
    pub(super) partition: Option<Slot>,
    pub(super) topic: TopicRule,
    pub(super) empty_payload: EmptyPayload,
    pub(super) payload_form: PayloadForm,
    pub(super) json_null: JsonNull,
    pub(super) invalid_op: InvalidOp,
    /// `table.field.event.schema.version`'s column, with an envelope.
    pub(super) schema_version: Option<Slot>,
    /// The platform's application headers, checked and never published.
    pub(super) application_headers: Option<Slot>,
    pub(super) empty_route: EmptyRoute,
    /// Debezium's row schema name, after which an envelope's is named.
    pub(super) record_name: String,
    /// The payload column's name: an expanded payload's schema is named
    /// after it.
    pub(super) payload_name: String,
    pub(super) envelope_names: Arc<Mutex<EnvelopeNames>>,
}

/// Debezium's context headers' values: the logical name, the task, the
/// plugin, and (3.4+) the run, which changes with each session.
#[derive(Debug, Clone)]
pub(super) struct Context {
    pub(super) values: [Datum; 3],
    pub(super) run: Option<Arc<Run>>,
}

/// The platform's table as its definition gives it: what the messaging
/// contract is compiled against (the stream's relation check has made sure
/// the real table has these columns, in types that decode the same).
pub fn definition_columns() -> Vec<TableColumn> {
    outbox::COLUMNS
        .iter()
        .map(|c| TableColumn {
            name: c.name.to_string(),
            type_oid: c.ty.oid(),
            typmod: -1,
            type_name: c.ty.catalog_name().to_string(),
            optionality: match c.nullable {
                true => Optionality::Optional,
                false => Optionality::Required,
            },
            default: None,
        })
        .collect()
}

impl Plan {
    /// Resolves `contract` against `columns`; every problem is returned,
    /// each with its code.
    pub fn new(contract: &Contract, columns: &[TableColumn]) -> Result<Plan, Vec<Misfit>> {
        let r = &contract.router;
        let mut misfits = Vec::new();
        let (mut event_id, mut key, mut payload, mut route_by) = (None, None, None, None);
        let (mut timestamp, mut schema_version, mut partition) = (None, None, None);
        let context = contract.context.as_ref();
        let mut header_names: Vec<Arc<str>> = context
            .map(|c| c.names().into_iter().map(Arc::from).collect())
            .unwrap_or_default();
        header_names.push(Arc::from(ID_HEADER));
        let mut headers = Vec::new();
        let mut envelope = Vec::new();
        let rules = contract.rules.application_headers.iter().map(|c| Named {
            column: c,
            role: Role::ApplicationHeaders,
            alias: c,
        });
        let mut application_headers = None;
        for named in r.named_columns().into_iter().chain(rules) {
            let additional = matches!(named.role, Role::Header | Role::Envelope | Role::Partition);
            if additional
                && r.missing == Missing::Ignore
                && !columns.iter().any(|c| c.name == named.column)
            {
                continue;
            }
            let slot = match resolve(named, columns) {
                Ok(slot) => slot,
                Err(misfit) => {
                    misfits.push(misfit);
                    continue;
                }
            };
            match named.role {
                Role::EventId => event_id = Some(slot),
                Role::Key => key = Some(slot),
                Role::Payload => payload = Some(slot),
                Role::RouteBy => route_by = Some(slot),
                Role::Timestamp => timestamp = Some(slot),
                Role::SchemaVersion => schema_version = Some(slot),
                Role::Header => {
                    header_names.push(Arc::from(named.alias));
                    headers.push(slot);
                }
                Role::Envelope => envelope.push((Arc::from(named.alias), slot)),
                Role::Partition => partition = Some(slot),
                Role::ApplicationHeaders => application_headers = Some(slot),
                Role::Table => {}
            }
        }
        let topic = r.topic_rule();
        // A key the options name but the table lacks is a misfit already.
        let key_slot = match (&r.event_key, &key) {
            (Some(_), None) => None,
            (_, k) => Some(k),
        };
        converter_misfits(
            contract,
            columns,
            (key_slot, payload.as_ref()),
            &envelope,
            &mut misfits,
        );
        match (event_id, payload, route_by, topic) {
            (Some(event_id), Some(payload), Some(route_by), Ok(topic)) if misfits.is_empty() => {
                Ok(Plan {
                    names: columns.iter().map(|c| c.name.clone()).collect(),
                    converters: contract.converters.clone(),
                    event_id,
                    key,
                    payload,
                    route_by,
                    timestamp,
                    header_names: header_names.into(),
                    context: context.map(|c| Context {
                        values: [c.logical_name.as_str(), context::TASK, context::PLUGIN]
                            .map(|v| Datum::String(Text::from(v))),
                        run: (c.run_id == RunId::Written).then(|| Arc::new(Run::starting())),
                    }),
                    headers,
                    envelope,
                    partition,
                    topic,
                    empty_payload: r.empty_payload,
                    payload_form: r.payload_form,
                    json_null: r.json_null,
                    invalid_op: r.invalid_op,
                    schema_version,
                    application_headers,
                    empty_route: contract.rules.empty_route,
                    record_name: contract.record_name.clone(),
                    payload_name: r.payload.clone(),
                    envelope_names: Arc::default(),
                })
            }
            _ => Err(misfits),
        }
    }

    /// A contract of the platform's table, compiled against its definition
    /// (the stream's relation check holds the real table to it).
    pub fn of_definition(contract: &Contract) -> Result<Plan, Error> {
        Plan::new(contract, &definition_columns()).map_err(|misfits| {
            let what: Vec<String> = misfits.iter().map(ToString::to_string).collect();
            Error::new(
                Code::INTERNAL,
                format!(
                    "the {} contract does not fit the platform's table: {}",
                    contract.name.as_str(),
                    what.join("; ")
                ),
            )
        })
    }

    /// The plan with its run's id read from `run` (a relay's plans share
    /// one, renewed as each session starts); a plan without a run id in its
    /// headers is as it was.
    pub fn with_run(mut self, run: &Arc<Run>) -> Plan {
        if let Some(c) = self.context.as_mut().filter(|c| c.run.is_some()) {
            c.run = Some(run.clone());
        }
        self
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
            write_json_string(&mut out, name);
            out.push(b':');
            match value {
                Some(text) => write_json_string(&mut out, &String::from_utf8_lossy(text)),
                None => out.extend_from_slice(b"null"),
            }
        }
        out.push(b'}');
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// What a column of `role` must be, and the words that say so.
fn accepts(role: Role) -> (fn(ColumnType) -> bool, &'static str) {
    match role {
        Role::RouteBy => (
            |t| t.shape() == Shape::String,
            "the router reads it as a string (text, varchar, uuid)",
        ),
        Role::Timestamp => (
            |t| matches!(t, ColumnType::TimestampMillis | ColumnType::TimestampMicros),
            "the router reads a timestamp without time zone (Debezium's Timestamp or MicroTimestamp)",
        ),
        Role::SchemaVersion => (
            |t| t == ColumnType::Int32,
            "the router reads it as an integer",
        ),
        Role::Partition => (
            |t| t == ColumnType::Int32,
            "the router reads the partition as an integer",
        ),
        Role::ApplicationHeaders => (
            |t| t == ColumnType::Json,
            "application headers are a jsonb object",
        ),
        Role::EventId
        | Role::Key
        | Role::Payload
        | Role::Header
        | Role::Envelope
        | Role::Table => (|_| true, ""),
    }
}

/// The column `named` names, in a type its role accepts.
fn resolve(named: Named<'_>, columns: &[TableColumn]) -> Result<Slot, Misfit> {
    let misfit = |problem: String, code: Code| Misfit {
        column: named.column.to_string(),
        role: named.role,
        problem,
        code,
    };
    let Some((index, column)) = columns
        .iter()
        .enumerate()
        .find(|(_, c)| c.name == named.column)
    else {
        return Err(misfit(
            "the table has no such column".into(),
            Code::CONTRACT_COLUMN_MISSING,
        ));
    };
    let (accepted, want) = accepts(named.role);
    match ColumnType::of(column.type_oid, column.typmod) {
        Some(ty) if accepted(ty) => Ok(Slot {
            index,
            ty,
            default: column
                .default
                .as_deref()
                .and_then(|e| ty.debezium_default(e)),
            optionality: column.optionality,
        }),
        Some(_) => Err(misfit(
            format!("is {}; {want}", column.type_name),
            Code::CONTRACT_COLUMN_TYPE,
        )),
        None => Err(misfit(
            format!(
                "is {}, whose Debezium form the relay does not reproduce (uuid, text, varchar, char, smallint, integer, bigint, boolean, jsonb, json, bytea, timestamp, timestamptz)",
                column.type_name
            ),
            Code::CONTRACT_COLUMN_TYPE,
        )),
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
            format!("({} is empty)", crate::contract::options::EVENT_KEY.key),
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
