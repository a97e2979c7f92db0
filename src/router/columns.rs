//! A column as Debezium's PostgreSQL connector hands it to Kafka Connect:
//! its schema type, its value read from PostgreSQL's text form, and its
//! default as Debezium parses it. Each form here was measured against
//! Debezium 3.6.1 and Kafka Connect 4.3.

use bytes::Bytes;

use crate::row::value;
use crate::row::{Datum, Text};

/// The PostgreSQL types whose Debezium form the relay reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    Uuid,
    /// `text`, `varchar`, `char(n)` (padded, as stored).
    Text,
    Int16,
    Int32,
    Int64,
    Bool,
    /// `jsonb` or `json`: Debezium's `io.debezium.data.Json`, a string.
    Json,
    /// `binary.handling.mode=bytes`.
    Bytea,
    /// `io.debezium.time.ZonedTimestamp`: a string in UTC.
    Timestamptz,
    /// `timestamp(0..3)`: `io.debezium.time.Timestamp`, milliseconds.
    TimestampMillis,
    /// `timestamp(4..6)` or without precision: `io.debezium.time.MicroTimestamp`.
    TimestampMicros,
}

/// A Kafka Connect schema type, as far as the converters tell them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    String,
    Integer,
    Boolean,
    Bytes,
}

impl ColumnType {
    /// The type of a column of type `oid` and modifier `typmod`
    /// (`pg_attribute.atttypmod`, as Relation messages carry it).
    pub fn of(oid: u32, typmod: i32) -> Option<ColumnType> {
        Some(match oid {
            2950 => ColumnType::Uuid,
            25 | 1043 | 1042 => ColumnType::Text,
            21 => ColumnType::Int16,
            23 => ColumnType::Int32,
            20 => ColumnType::Int64,
            16 => ColumnType::Bool,
            3802 | 114 => ColumnType::Json,
            17 => ColumnType::Bytea,
            1184 => ColumnType::Timestamptz,
            // Precision is the modifier itself; -1 is none (6).
            1114 if (0..=3).contains(&typmod) => ColumnType::TimestampMillis,
            1114 => ColumnType::TimestampMicros,
            _ => return None,
        })
    }

    pub const fn shape(self) -> Shape {
        match self {
            ColumnType::Uuid | ColumnType::Text | ColumnType::Json | ColumnType::Timestamptz => {
                Shape::String
            }
            ColumnType::Int16
            | ColumnType::Int32
            | ColumnType::Int64
            | ColumnType::TimestampMillis
            | ColumnType::TimestampMicros => Shape::Integer,
            ColumnType::Bool => Shape::Boolean,
            ColumnType::Bytea => Shape::Bytes,
        }
    }

    /// The value of a column from its text form (pgoutput's and `::text`'s).
    pub fn decode(self, text: &Bytes) -> Result<Datum, String> {
        let s = std::str::from_utf8(text).map_err(|_| "not UTF-8".to_string())?;
        let int = |s: &str| {
            s.parse::<i64>()
                .map_err(|_| format!("{s:?} is not an integer"))
        };
        Ok(match self {
            ColumnType::Uuid | ColumnType::Text | ColumnType::Json => {
                Datum::String(Text::new(text.clone()).map_err(|e| e.to_string())?)
            }
            ColumnType::Int16 | ColumnType::Int32 | ColumnType::Int64 => Datum::Integer(int(s)?),
            ColumnType::Bool => match s {
                "t" => Datum::Boolean(true),
                "f" => Datum::Boolean(false),
                other => return Err(format!("{other:?} is not a boolean")),
            },
            ColumnType::Bytea => {
                Datum::Bytes(value::parse_bytea_hex(s).map_err(|e| e.to_string())?.into())
            }
            ColumnType::Timestamptz => {
                Datum::Timestamp(value::parse_timestamptz(s).map_err(|e| e.to_string())?)
            }
            ColumnType::TimestampMillis | ColumnType::TimestampMicros => {
                // A timestamp without time zone reads as one at UTC.
                let with_zone = match s.strip_suffix(" BC") {
                    Some(body) => format!("{body}+00 BC"),
                    None => format!("{s}+00"),
                };
                if s.ends_with("infinity") {
                    return Err(format!("{s} has no Debezium form"));
                }
                let micros = value::parse_timestamptz(&with_zone)
                    .map_err(|e| e.to_string())?
                    .unix_micros();
                Datum::Integer(match self {
                    ColumnType::TimestampMillis => micros.div_euclid(1000),
                    _ => micros,
                })
            }
        })
    }
}

/// Whether a column may hold NULL (`pg_attribute.attnotnull`): Debezium's
/// schema is optional when it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Optionality {
    Optional,
    Required,
}

/// `PostgresDefaultValueConverter`'s `FUNCTION_DEFAULT_PATTERN`: a default
/// that calls a function (`now()`, `gen_random_uuid()`, `nextval(...)`).
fn is_function_call(expr: &str) -> bool {
    let body = expr.strip_prefix('(').unwrap_or(expr);
    let name_len = body
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .unwrap_or(body.len());
    // `(?:.+(?:, ?.+)*)?` before the `)` matches anything, so a `(` after a
    // name and a `)` somewhere after it is a call.
    name_len > 0 && body[name_len..].starts_with('(') && body[name_len + 1..].contains(')')
}

/// Debezium's `extractDefault(value, placeholder)`: a function call or
/// `CURRENT_TIMESTAMP` and its kin give the placeholder; a value without a
/// quote is itself (or null after `NULL::`); otherwise the text between the
/// first two quotes (non-greedy: `'it''s'` gives `it`).
fn extract_default(expr: &str, placeholder: &'static str) -> Option<String> {
    const CURRENT: [&str; 5] = [
        "current_timestamp",
        "current_time",
        "current_date",
        "localtime",
        "localtimestamp",
    ];
    if is_function_call(expr) || CURRENT.contains(&expr.to_ascii_lowercase().as_str()) {
        return Some(placeholder.to_string());
    }
    let Some(open) = expr.find('\'') else {
        return (!expr.starts_with("NULL::")).then(|| expr.to_string());
    };
    let rest = &expr[open + 1..];
    rest.find('\'').map(|close| rest[..close].to_string())
}

impl ColumnType {
    /// The default Debezium puts in the column's schema, from the column's
    /// `pg_get_expr(adbin)` (what the JDBC driver's `COLUMN_DEF` holds), as
    /// `PostgresDefaultValueConverter` parses it; `None` where it has none
    /// (no mapper for bytea, an expression it cannot parse). A NULL in the
    /// column reads as this default wherever the router calls `Struct.get`.
    pub fn debezium_default(self, expr: &str) -> Option<Datum> {
        let trimmed = match self {
            ColumnType::Text | ColumnType::Json | ColumnType::Bytea => expr,
            _ => expr.trim(),
        };
        // `parseNullDefault`'s wrap, for the types that have it.
        let null_cast = trimmed.starts_with("NULL::");
        let integer = |text: Option<String>| -> Option<Datum> {
            let n: i64 = text?.parse().ok()?;
            let fits = match self {
                ColumnType::Int16 => i16::try_from(n).is_ok(),
                ColumnType::Int32 => i32::try_from(n).is_ok(),
                _ => true,
            };
            fits.then_some(Datum::Integer(n))
        };
        match self {
            ColumnType::Text => extract_default(trimmed, "").map(|t| Datum::String(Text::from(t))),
            ColumnType::Json => {
                extract_default(trimmed, "{}").map(|t| Datum::String(Text::from(t)))
            }
            ColumnType::Bytea => None,
            ColumnType::Int16 | ColumnType::Int32 | ColumnType::Int64 if null_cast => None,
            ColumnType::Int16 | ColumnType::Int32 | ColumnType::Int64 => {
                integer(extract_default(trimmed, "0"))
            }
            ColumnType::Bool if null_cast => None,
            ColumnType::Bool => extract_default(trimmed, "false")
                .map(|t| Datum::Boolean(t.eq_ignore_ascii_case("true"))),
            ColumnType::Uuid => {
                let text = extract_default(trimmed, "00000000-0000-0000-0000-000000000000")?;
                let uuid = value::parse_uuid(&text).ok()?;
                Some(Datum::String(Text::from(uuid.to_string())))
            }
            ColumnType::Timestamptz | ColumnType::TimestampMillis | ColumnType::TimestampMicros => {
                let text = extract_default(trimmed, "1970-01-01")?;
                // The JDBC driver reads a text without an offset at UTC.
                let with_zone = match text.contains('+') || text.rfind('-').is_some_and(|i| i > 9) {
                    true => text.clone(),
                    false if text.len() <= 10 => format!("{text} 00:00:00+00"),
                    false => format!("{text}+00"),
                };
                let t = value::parse_timestamptz(&with_zone).ok()?;
                Some(match self {
                    ColumnType::Timestamptz => Datum::Timestamp(t),
                    ColumnType::TimestampMillis => Datum::Integer(t.unix_micros().div_euclid(1000)),
                    _ => Datum::Integer(t.unix_micros()),
                })
            }
        }
    }
}

/// One column the plan reads: where it is in a row and how it reads.
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    pub(crate) index: usize,
    pub(crate) ty: ColumnType,
    /// Debezium's default for the column: what `Struct.get` gives for NULL.
    pub(crate) default: Option<Datum>,
    pub(crate) optionality: Optionality,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_decode_to_debeziums_forms() {
        let d = |t: ColumnType, s: &str| t.decode(&Bytes::copy_from_slice(s.as_bytes()));
        assert_eq!(
            d(ColumnType::Timestamptz, "2024-05-06 09:08:09.5+02").map(|t| String::from_utf8(
                crate::router::converters::header_bytes(&t).unwrap()
            )
            .unwrap()),
            Ok("2024-05-06T07:08:09.500000Z".to_string())
        );
        // 2024-05-06 07:08:09.123456 is 1 714 979 289 123 456 µs after 1970.
        assert_eq!(
            d(ColumnType::TimestampMicros, "2024-05-06 07:08:09.123456"),
            Ok(Datum::Integer(1_714_979_289_123_456))
        );
        assert_eq!(
            d(ColumnType::TimestampMillis, "2024-05-06 07:08:09.123"),
            Ok(Datum::Integer(1_714_979_289_123))
        );
        assert_eq!(
            d(ColumnType::TimestampMillis, "1969-12-31 23:59:59.999"),
            Ok(Datum::Integer(-1))
        );
        assert!(d(ColumnType::TimestampMicros, "infinity").is_err());
        assert_eq!(d(ColumnType::Bool, "t"), Ok(Datum::Boolean(true)));
        assert_eq!(
            d(ColumnType::Bytea, "\\x00ff"),
            Ok(Datum::Bytes(Bytes::from_static(&[0, 255])))
        );
        assert!(d(ColumnType::Int32, "x").is_err());
        assert_eq!(ColumnType::of(1114, 3), Some(ColumnType::TimestampMillis));
        assert_eq!(ColumnType::of(1114, -1), Some(ColumnType::TimestampMicros));
        assert_eq!(ColumnType::of(1700, -1), None);
    }

    #[test]
    fn defaults_are_read_as_debeziums_default_value_converter_reads_them() {
        let d = |t: ColumnType, e: &str| t.debezium_default(e);
        let text = |s: &str| Some(Datum::String(Text::from(s)));
        // `pg_get_expr` spellings, and what Debezium 3.6.1 put in the records.
        assert_eq!(
            d(ColumnType::Text, "'k-default'::character varying"),
            text("k-default")
        );
        assert_eq!(d(ColumnType::Text, "'it''s'::text"), text("it"));
        assert_eq!(d(ColumnType::Text, "NULL::text"), None);
        assert_eq!(
            d(ColumnType::Json, "'{\"d\": 1}'::jsonb"),
            text("{\"d\": 1}")
        );
        assert_eq!(d(ColumnType::Int32, "7"), Some(Datum::Integer(7)));
        assert_eq!(
            d(ColumnType::Int64, "'-5'::integer"),
            Some(Datum::Integer(-5))
        );
        assert_eq!(
            d(ColumnType::Int16, "'3'::smallint"),
            Some(Datum::Integer(3))
        );
        assert_eq!(d(ColumnType::Int16, "70000"), None);
        assert_eq!(
            d(ColumnType::Int64, "nextval('s'::regclass)"),
            Some(Datum::Integer(0))
        );
        assert_eq!(d(ColumnType::Bool, "true"), Some(Datum::Boolean(true)));
        assert_eq!(
            d(ColumnType::Uuid, "gen_random_uuid()"),
            text("00000000-0000-0000-0000-000000000000")
        );
        let epoch = Some(Datum::Timestamp(
            value::parse_timestamptz("1970-01-01 00:00:00+00").unwrap(),
        ));
        assert_eq!(d(ColumnType::Timestamptz, "now()"), epoch);
        assert_eq!(d(ColumnType::Timestamptz, "CURRENT_TIMESTAMP"), epoch);
        assert_eq!(
            d(
                ColumnType::TimestampMillis,
                "'2021-03-04 05:06:07.891'::timestamp without time zone"
            ),
            Some(Datum::Integer(1_614_834_367_891))
        );
        assert_eq!(
            d(ColumnType::TimestampMicros, "now()"),
            Some(Datum::Integer(0))
        );
        assert_eq!(d(ColumnType::Bytea, "'\\x00'::bytea"), None);
    }
}
