//! Outbox rows: pgoutput tuples turned into the definition's typed values.

use std::collections::HashMap;

use super::pgoutput::{Relation, TupleValue};
use crate::outbox::{self, Column, PgType};
use crate::value::{self, Timestamp, Uuid};

/// A typed column value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Null,
    Text(String),
    Integer(i32),
    Bigint(i64),
    Uuid(Uuid),
    Timestamp(Timestamp),
    Bytes(Vec<u8>),
    /// jsonb as PostgreSQL prints it.
    Json(String),
}

/// Why a row could not be fully decoded. The row still travels, so the relay
/// can record it as FAILED instead of dropping it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowProblem {
    pub code: &'static str,
    pub detail: String,
}

/// One inserted outbox row, values in [`outbox::COLUMNS`] order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRow {
    values: Vec<Value>,
    pub problem: Option<RowProblem>,
}

impl OutboxRow {
    pub fn get(&self, column: &Column) -> &Value {
        outbox::COLUMNS
            .iter()
            .position(|c| c.name == column.name)
            .and_then(|i| self.values.get(i))
            .unwrap_or(&Value::Null)
    }

    pub fn message_id(&self) -> Option<Uuid> {
        match self.get(&outbox::MESSAGE_ID) {
            Value::Uuid(u) => Some(*u),
            _ => None,
        }
    }

    /// Approximate heap size, for memory bounds.
    pub fn size_hint(&self) -> usize {
        self.values
            .iter()
            .map(|v| match v {
                Value::Text(s) | Value::Json(s) => s.len(),
                Value::Bytes(b) => b.len(),
                _ => 0,
            })
            .sum::<usize>()
            + self.values.len() * std::mem::size_of::<Value>()
    }
}

/// Relations seen in the stream, by oid; replaced when re-sent after DDL.
#[derive(Debug, Default)]
pub struct Relations {
    /// For the outbox relation: per relation column, the definition index.
    by_oid: HashMap<u32, Option<Vec<Option<usize>>>>,
    schema: String,
    table: String,
}

impl Relations {
    pub fn new(schema: &str, table: &str) -> Relations {
        Relations {
            by_oid: HashMap::new(),
            schema: schema.to_string(),
            table: table.to_string(),
        }
    }

    pub fn learn(&mut self, rel: &Relation) {
        let mapping = (rel.namespace == self.schema && rel.name == self.table).then(|| {
            rel.columns
                .iter()
                .map(|c| outbox::COLUMNS.iter().position(|d| d.name == c.name))
                .collect()
        });
        self.by_oid.insert(rel.oid, mapping);
    }

    /// `Some(true)` for the outbox, `Some(false)` for another published table,
    /// `None` for an oid no Relation message announced.
    pub fn is_outbox(&self, oid: u32) -> Option<bool> {
        self.by_oid.get(&oid).map(Option::is_some)
    }

    /// Decodes an inserted tuple of the outbox relation.
    pub fn decode(&self, oid: u32, tuple: &[TupleValue]) -> Option<OutboxRow> {
        let mapping = self.by_oid.get(&oid)?.as_ref()?;
        let mut values = vec![Value::Null; outbox::COLUMNS.len()];
        let mut seen = vec![false; outbox::COLUMNS.len()];
        let mut problem: Option<RowProblem> = None;
        // The first problem is the one reported.
        let note = |problem: &mut Option<RowProblem>, code: &'static str, detail: String| {
            problem.get_or_insert(RowProblem { code, detail });
        };
        if tuple.len() != mapping.len() {
            note(
                &mut problem,
                "ROW_SHAPE_MISMATCH",
                format!("{} values for {} columns", tuple.len(), mapping.len()),
            );
        }
        for (value, index) in tuple.iter().zip(mapping) {
            let Some(i) = *index else { continue };
            seen[i] = true;
            let column = &outbox::COLUMNS[i];
            values[i] = match value {
                TupleValue::Null => Value::Null,
                TupleValue::Text(bytes) => match std::str::from_utf8(bytes) {
                    Ok(text) => decode_text(column, text).unwrap_or_else(|e| {
                        note(
                            &mut problem,
                            "ROW_UNDECODABLE",
                            format!("{}: {e}", column.name),
                        );
                        Value::Null
                    }),
                    Err(_) => {
                        note(
                            &mut problem,
                            "ROW_UNDECODABLE",
                            format!("{}: not UTF-8", column.name),
                        );
                        Value::Null
                    }
                },
                TupleValue::Unchanged | TupleValue::Binary(_) => {
                    note(
                        &mut problem,
                        "ROW_UNDECODABLE",
                        format!("{}: unexpected tuple value kind", column.name),
                    );
                    Value::Null
                }
            };
        }
        for (i, column) in outbox::COLUMNS.iter().enumerate() {
            if !seen[i] && !column.nullable {
                note(
                    &mut problem,
                    "ROW_MISSING_COLUMN",
                    format!("the stream carries no {} column", column.name),
                );
            } else if seen[i] && !column.nullable && values[i] == Value::Null && problem.is_none() {
                note(
                    &mut problem,
                    "ROW_UNDECODABLE",
                    format!("{} is NULL", column.name),
                );
            }
        }
        Some(OutboxRow { values, problem })
    }
}

fn decode_text(column: &Column, text: &str) -> Result<Value, value::ValueError> {
    let int_err = |kind| value::ValueError {
        kind,
        text: text.chars().take(40).collect(),
    };
    Ok(match column.ty {
        PgType::Text => Value::Text(text.to_string()),
        PgType::Jsonb => Value::Json(text.to_string()),
        PgType::Integer => Value::Integer(text.parse().map_err(|_| int_err("not an integer"))?),
        PgType::Bigint => Value::Bigint(text.parse().map_err(|_| int_err("not a bigint"))?),
        PgType::Uuid => Value::Uuid(value::parse_uuid(text)?),
        PgType::Timestamptz => Value::Timestamp(value::parse_timestamptz(text)?),
        PgType::Bytea => Value::Bytes(value::parse_bytea_hex(text)?),
    })
}
