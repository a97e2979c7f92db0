//! An outbox row as typed values, decoded from PostgreSQL's text forms (what
//! pgoutput sends and what `::text` casts return), so streamed rows and rows
//! read with SQL (a cutover's backlog) go through one decoder.

use super::outbox::{self, Column, PgType};
use super::value::{self, Timestamp, Uuid};
use crate::error::{Code, Error};

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

/// One inserted outbox row, values in [`outbox::COLUMNS`] order. A row that
/// could not be fully decoded still travels with its problem, so the relay
/// records it as FAILED instead of dropping it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRow {
    values: Vec<Value>,
    problem: Option<Error>,
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

    /// Why the row could not be decoded, if it could not (a `Row`-class error).
    pub fn problem(&self) -> Option<&Error> {
        self.problem.as_ref()
    }

    /// Decodes a row from `(column name, text)` pairs; names outside the
    /// definition are ignored, `None` is SQL NULL.
    pub fn from_text<'a>(columns: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) -> Self {
        let mut decoder = RowDecoder::new();
        for (name, text) in columns {
            if let Some(index) = outbox::COLUMNS.iter().position(|c| c.name == name) {
                match text {
                    Some(t) => decoder.text(index, t.as_bytes()),
                    None => decoder.null(index),
                }
            }
        }
        decoder.finish()
    }
}

/// Builds an [`OutboxRow`] column by column (by index in the definition).
#[derive(Debug)]
pub struct RowDecoder {
    values: Vec<Value>,
    problem: Option<Error>,
}

impl Default for RowDecoder {
    fn default() -> Self {
        RowDecoder::new()
    }
}

impl RowDecoder {
    pub fn new() -> RowDecoder {
        RowDecoder {
            values: vec![Value::Null; outbox::COLUMNS.len()],
            problem: None,
        }
    }

    /// Notes why the row cannot be published; the first problem is kept.
    pub fn problem(&mut self, code: Code, detail: impl Into<String>) {
        if self.problem.is_none() {
            self.problem = Some(Error::new(code, detail));
        }
    }

    pub fn null(&mut self, index: usize) {
        if let Some(v) = self.values.get_mut(index) {
            *v = Value::Null;
        }
    }

    /// A column's text form.
    pub fn text(&mut self, index: usize, bytes: &[u8]) {
        let Some(column) = outbox::COLUMNS.get(index) else {
            return;
        };
        let decoded = match std::str::from_utf8(bytes) {
            Ok(text) => decode_text(column, text).map_err(|e| format!("{}: {e}", column.name)),
            Err(_) => Err(format!("{}: not UTF-8", column.name)),
        };
        match decoded {
            Ok(value) => self.values[index] = value,
            Err(detail) => self.problem(Code::ROW_UNDECODABLE, detail),
        }
    }

    /// The row; a NULL in a NOT NULL column is a problem of the row.
    pub fn finish(mut self) -> OutboxRow {
        if let Some(column) = outbox::COLUMNS
            .iter()
            .zip(&self.values)
            .find(|(c, v)| !c.nullable && **v == Value::Null)
            .map(|(c, _)| c)
        {
            self.problem(Code::ROW_UNDECODABLE, format!("{} is NULL", column.name));
        }
        OutboxRow {
            values: self.values,
            problem: self.problem,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_columns_decode_by_name_and_nulls_in_required_columns_are_problems() {
        let row = OutboxRow::from_text([
            ("message_id", Some("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")),
            ("message_version", Some("7")),
            ("not_in_the_definition", Some("ignored")),
        ]);
        assert_eq!(
            row.message_id().map(|u| u.to_string()).as_deref(),
            Some("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")
        );
        assert_eq!(row.get(&outbox::MESSAGE_VERSION), &Value::Integer(7));
        let problem = row.problem().unwrap();
        assert_eq!(problem.code(), "ROW_UNDECODABLE");
        assert_eq!(problem.detail(), "destination is NULL");

        let bad = OutboxRow::from_text([("message_version", Some("seven"))]);
        assert!(bad
            .problem()
            .unwrap()
            .detail()
            .starts_with("message_version"));
    }
}
