//! The platform's outbox row as typed values, decoded by the definition's
//! column types from PostgreSQL's text forms (what pgoutput sends before
//! 14 and what `::text` casts return) or its binary ones, so streamed rows
//! and rows read with SQL (a cutover's backlog) go through one decoder.

use bytes::Bytes;

use super::datum::{Datum, Text};
use super::value::{self, Timestamp, Uuid};
use crate::contract::outbox::{self, Column, PgType};
use crate::error::{Code, Error};

/// A value's bytes inside the buffer they arrived in, sliced out only when
/// the row keeps them (a slice is a shared count: two atomic operations).
#[derive(Debug, Clone)]
pub struct ValueBytes<'a> {
    buffer: &'a Bytes,
    range: std::ops::Range<usize>,
}

impl<'a> ValueBytes<'a> {
    /// `range` of `buffer`; a range outside it stands for no bytes.
    pub fn new(buffer: &'a Bytes, range: std::ops::Range<usize>) -> Self {
        let range = match buffer.get(range.clone()) {
            Some(_) => range,
            None => 0..0,
        };
        ValueBytes { buffer, range }
    }

    pub fn whole(buffer: &'a Bytes) -> Self {
        ValueBytes {
            buffer,
            range: 0..buffer.len(),
        }
    }

    pub fn as_slice(&self) -> &'a [u8] {
        self.buffer.get(self.range.clone()).unwrap_or_default()
    }

    /// The bytes, sharing the buffer.
    pub fn to_bytes(&self) -> Bytes {
        self.buffer.slice(self.range.clone())
    }

    /// Without the first `n` bytes (all of them if fewer).
    fn skip(&self, n: usize) -> Self {
        let start = (self.range.start + n).min(self.range.end);
        ValueBytes {
            buffer: self.buffer,
            range: start..self.range.end,
        }
    }
}

/// One inserted row of the platform's table, values in
/// [`outbox::COLUMNS`] order. A row that
/// could not be fully decoded still travels with its problem, so the relay
/// records it as FAILED instead of dropping it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRow {
    values: Vec<Datum>,
    problem: Option<Error>,
}

impl OutboxRow {
    pub fn get(&self, column: &Column) -> &Datum {
        self.values.get(column.index).unwrap_or(&Datum::Null)
    }

    /// The value at `index` of the definition's columns.
    pub fn at(&self, index: usize) -> Option<&Datum> {
        self.values.get(index)
    }

    /// Moves a column's value out, leaving NULL (the mapper's payload).
    pub fn take(&mut self, column: &Column) -> Datum {
        self.values
            .get_mut(column.index)
            .map(std::mem::take)
            .unwrap_or(Datum::Null)
    }

    pub fn message_id(&self) -> Option<Uuid> {
        match self.get(&outbox::MESSAGE_ID) {
            Datum::Uuid(u) => Some(*u),
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
                    Some(t) => {
                        let bytes = Bytes::copy_from_slice(t.as_bytes());
                        decoder.text(index, ValueBytes::whole(&bytes));
                    }
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
    values: Vec<Datum>,
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
            values: std::iter::repeat_with(Datum::default)
                .take(outbox::COLUMNS.len())
                .collect(),
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
            *v = Datum::Null;
        }
    }

    /// A column's text form.
    pub fn text(&mut self, index: usize, bytes: ValueBytes<'_>) {
        let Some(column) = outbox::COLUMNS.get(index) else {
            return;
        };
        let decoded = match std::str::from_utf8(bytes.as_slice()) {
            Ok(text) => {
                decode_text(column, text, &bytes).map_err(|e| format!("{}: {e}", column.name))
            }
            Err(_) => Err(format!("{}: not UTF-8", column.name)),
        };
        match decoded {
            Ok(value) => self.values[index] = value,
            Err(detail) => self.problem(Code::ROW_UNDECODABLE, detail),
        }
    }

    /// The row; a NULL in a NOT NULL column is a problem of the row.
    /// A value in PostgreSQL's binary form, of the column's actual type
    /// (`type_oid`, which the relation check let stand for the definition's).
    pub fn binary(&mut self, index: usize, type_oid: u32, bytes: ValueBytes<'_>) {
        let Some(column) = outbox::COLUMNS.get(index) else {
            return;
        };
        match decode_binary(column, type_oid, bytes) {
            Ok(value) => self.values[index] = value,
            Err(e) => self.problem(Code::ROW_UNDECODABLE, format!("{}: {e}", column.name)),
        }
    }

    pub fn finish(mut self) -> OutboxRow {
        if let Some(column) = outbox::COLUMNS
            .iter()
            .zip(&self.values)
            .find(|(c, v)| !c.nullable && **v == Datum::Null)
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

/// `text` is `bytes` checked as UTF-8: text columns keep the bytes.
fn decode_text(
    column: &Column,
    text: &str,
    bytes: &ValueBytes<'_>,
) -> Result<Datum, value::ValueError> {
    let int_err = |kind| value::ValueError {
        kind,
        text: text.chars().take(40).collect(),
    };
    Ok(match column.ty {
        PgType::Text => Datum::String(Text::checked(bytes.to_bytes())),
        PgType::Jsonb => Datum::String(Text::checked(bytes.to_bytes())),
        PgType::Integer => Datum::Integer(i64::from(
            text.parse::<i32>().map_err(|_| int_err("not an integer"))?,
        )),
        PgType::Bigint => Datum::Integer(text.parse().map_err(|_| int_err("not a bigint"))?),
        PgType::Uuid => Datum::Uuid(value::parse_uuid(text)?),
        PgType::Timestamptz => Datum::Timestamp(value::parse_timestamptz(text)?),
        PgType::Bytea => Datum::Bytes(value::parse_bytea_hex(text)?.into()),
    })
}

/// PostgreSQL's binary send forms (`*send` in its sources): integers big
/// endian, uuid its 16 bytes, timestamptz microseconds since 2000-01-01 (the
/// extremes are the infinities), bytea as is, jsonb a version byte (1) and
/// then its text, text and varchar their UTF-8 bytes.
fn decode_binary(column: &Column, type_oid: u32, value: ValueBytes<'_>) -> Result<Datum, String> {
    const INT2: u32 = 21;
    const INT4: u32 = 23;
    let int = |bytes: &[u8]| -> Result<i64, String> {
        match (type_oid, bytes.len()) {
            (INT2, 2) => Ok(i64::from(i16::from_be_bytes(fixed(bytes)?))),
            (INT4, 4) => Ok(i64::from(i32::from_be_bytes(fixed(bytes)?))),
            (_, 8) => Ok(i64::from_be_bytes(fixed(bytes)?)),
            (oid, n) => Err(format!("{n} bytes for an integer of type oid {oid}")),
        }
    };
    let text = |v: &ValueBytes<'_>| Text::new(v.to_bytes()).map_err(|_| "not UTF-8".to_string());
    let bytes = value.as_slice();
    Ok(match column.ty {
        PgType::Text => Datum::String(text(&value)?),
        PgType::Jsonb => match bytes.first() {
            Some(1) => Datum::String(text(&value.skip(1))?),
            _ => return Err("not jsonb version 1".into()),
        },
        PgType::Integer => Datum::Integer(
            i32::try_from(int(bytes)?)
                .map(i64::from)
                .map_err(|_| "out of integer range".to_string())?,
        ),
        PgType::Bigint => Datum::Integer(int(bytes)?),
        PgType::Uuid => Datum::Uuid(Uuid(fixed(bytes)?)),
        PgType::Timestamptz => Datum::Timestamp(match i64::from_be_bytes(fixed(bytes)?) {
            i64::MAX => Timestamp::Infinity,
            i64::MIN => Timestamp::NegInfinity,
            micros => Timestamp::Micros(micros),
        }),
        PgType::Bytea => Datum::Bytes(value.to_bytes()),
    })
}

fn fixed<const N: usize>(bytes: &[u8]) -> Result<[u8; N], String> {
    bytes
        .try_into()
        .map_err(|_| format!("{} bytes where {N} were expected", bytes.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_bytes_share_their_buffer_and_a_range_outside_it_holds_nothing() {
        let buffer = Bytes::from_static(b"\x01{\"a\": 1}tail");
        let json = ValueBytes::new(&buffer, 0..9);
        assert_eq!(json.as_slice(), b"\x01{\"a\": 1}");
        assert_eq!(json.skip(1).as_slice(), b"{\"a\": 1}");
        assert_eq!(json.skip(20).as_slice(), b"");
        let shared = json.to_bytes();
        assert_eq!(shared.as_ptr(), buffer.as_ptr(), "a slice, not a copy");
        assert_eq!(ValueBytes::new(&buffer, 10..99).as_slice(), b"");
        assert_eq!(ValueBytes::new(&buffer, 10..99).to_bytes(), Bytes::new());
        // jsonb's version byte is skipped, not part of the value.
        let mut d = RowDecoder::new();
        let headers = outbox::COLUMNS
            .iter()
            .position(|c| c.name == "headers")
            .unwrap();
        d.binary(headers, 3802, json);
        assert_eq!(
            d.values[headers],
            Datum::String(Text::checked(Bytes::from_static(b"{\"a\": 1}")))
        );
    }

    #[test]
    fn binary_values_decode_as_their_text_forms_do() {
        let index = |name: &str| outbox::COLUMNS.iter().position(|c| c.name == name).unwrap();
        struct D(RowDecoder);
        impl D {
            fn binary(&mut self, index: usize, oid: u32, bytes: &[u8]) {
                let bytes = Bytes::copy_from_slice(bytes);
                self.0.binary(index, oid, ValueBytes::whole(&bytes));
            }
            fn finish(self) -> OutboxRow {
                self.0.finish()
            }
        }
        let mut d = D(RowDecoder::new());
        d.binary(
            index("message_id"),
            2950,
            &[
                0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38,
                0x0a, 0x11,
            ],
        );
        // int2 standing for integer; -5.
        d.binary(index("message_version"), 21, &[0xff, 0xfb]);
        d.binary(index("payload"), 17, b"\x00\\raw");
        d.binary(index("headers"), 3802, b"\x01{\"a\": \"b\"}");
        // 2024-05-06 07:08:09.123456+00 is 768_294_489_123_456 µs after 2000.
        d.binary(
            index("occurred_at"),
            1184,
            &768_294_489_123_456i64.to_be_bytes(),
        );
        d.binary(index("created_at"), 1184, &i64::MAX.to_be_bytes());
        d.binary(index("destination"), 1043, "orders-é".as_bytes());
        let row = d.finish();
        let text = OutboxRow::from_text([
            ("message_id", Some("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")),
            ("message_version", Some("-5")),
            ("payload", Some("\\x005c726177")),
            ("headers", Some("{\"a\": \"b\"}")),
            ("occurred_at", Some("2024-05-06 07:08:09.123456+00")),
            ("created_at", Some("infinity")),
            ("destination", Some("orders-é")),
        ]);
        for name in [
            "message_id",
            "message_version",
            "payload",
            "headers",
            "occurred_at",
            "created_at",
            "destination",
        ] {
            let column = outbox::COLUMNS[index(name)];
            assert_eq!(row.get(&column), text.get(&column), "{name}");
        }

        // Wrong sizes and versions are problems, never panics.
        for (name, oid, bytes) in [
            ("message_id", 2950u32, &[1u8, 2, 3][..]),
            ("message_version", 23, &[0, 0, 1][..]),
            ("occurred_at", 1184, &[0; 7][..]),
            ("headers", 3802, &b"{}"[..]),
            ("destination", 25, &[0xff, 0xfe][..]),
        ] {
            let mut d = D(RowDecoder::new());
            d.binary(index(name), oid, bytes);
            let row = d.finish();
            let problem = row.problem().expect(name).to_string();
            assert!(
                problem.contains("ROW_UNDECODABLE") && problem.contains(name),
                "{problem}"
            );
        }
    }

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
        assert_eq!(row.get(&outbox::MESSAGE_VERSION), &Datum::Integer(7));
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
