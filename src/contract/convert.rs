//! A column's value as Debezium's PostgreSQL connector hands it to Kafka
//! Connect (its schema type), and the bytes Kafka Connect's converters
//! write for it: `JsonConverter` without schemas, `StringConverter`,
//! `BinaryDataConverter` and `SimpleHeaderConverter`. Each form here was
//! measured against Kafka Connect 4.3's converters.

use base64::Engine as _;
use bytes::Bytes;

use super::row::Text;
use super::value;

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
                let t = value::parse_timestamptz(s).map_err(|e| e.to_string())?;
                Datum::String(Text::from(t.to_utc_string()))
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

/// A column's value in its Kafka Connect form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Datum {
    Null,
    String(Text),
    Integer(i64),
    Boolean(bool),
    Bytes(Bytes),
}

impl Datum {
    /// `Object.toString().trim().isEmpty()`, the router's test of an empty
    /// payload: Java's `trim` drops every char up to U+0020.
    pub fn is_blank(&self) -> bool {
        match self {
            Datum::Null => true,
            Datum::String(t) => t.as_bytes().iter().all(|b| *b <= b' '),
            // `byte[].toString()` is never blank.
            Datum::Integer(_) | Datum::Boolean(_) | Datum::Bytes(_) => false,
        }
    }
}

/// Appends `s` as a JSON string the way Jackson writes it: `"` and `\`
/// escaped, `\b \t \n \f \r` short, other controls as `\u00XX` in upper
/// case, characters beyond the BMP as two `\uXXXX` surrogates, the rest as
/// UTF-8.
pub fn write_json_string(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\t' => out.extend_from_slice(b"\\t"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            '\r' => out.extend_from_slice(b"\\r"),
            c if (c as u32) < 0x20 || (c as u32) > 0xFFFF => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.extend_from_slice(b"\\u");
                    for shift in [12, 8, 4, 0] {
                        out.push(HEX[usize::from((*unit >> shift) & 0xF)]);
                    }
                }
            }
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `JsonConverter` with `schemas.enable=false`, for a value inside a
/// document (a struct's field) or alone; null is `null`.
pub fn write_json(out: &mut Vec<u8>, datum: &Datum) {
    match datum {
        Datum::Null => out.extend_from_slice(b"null"),
        Datum::String(t) => write_json_string(out, t.as_str()),
        Datum::Integer(i) => out.extend_from_slice(i.to_string().as_bytes()),
        Datum::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Datum::Bytes(b) => write_json_string(out, &base64(b)),
    }
}

/// `SimpleHeaderConverter`: strings as they are, numbers and booleans as
/// text, bytes in base64; `None` is a null header.
pub fn header_bytes(datum: &Datum) -> Option<Vec<u8>> {
    Some(match datum {
        Datum::Null => return None,
        Datum::String(t) => t.as_bytes().to_vec(),
        Datum::Integer(i) => i.to_string().into_bytes(),
        Datum::Boolean(b) => b.to_string().into_bytes(),
        Datum::Bytes(b) => base64(b).into_bytes(),
    })
}

/// `StringConverter`: `toString()`; `None` for null. Bytes have no stable
/// text (`[B@…`); the contract check refuses them as a key.
pub fn string_bytes(datum: &Datum) -> Option<Vec<u8>> {
    match datum {
        Datum::Bytes(_) => None,
        other => header_bytes(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(d: &Datum) -> String {
        let mut out = Vec::new();
        write_json(&mut out, d);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn strings_are_escaped_as_jackson_escapes_them() {
        // Written by Kafka Connect 4.3's JsonConverter (schemas.enable=false)
        // for the same string.
        let s = "a\"b\\c\n\t\r\u{8}\u{c}\u{1}\u{1f}\u{7f}/é😀\u{2028}";
        assert_eq!(
            json(&Datum::String(Text::from(s))),
            "\"a\\\"b\\\\c\\n\\t\\r\\b\\f\\u0001\\u001F\u{7f}/é\\uD83D\\uDE00\u{2028}\""
        );
        assert_eq!(
            json(&Datum::Bytes(Bytes::from_static(&[0, 1, 2, 255]))),
            "\"AAEC/w==\""
        );
        assert_eq!(json(&Datum::Integer(-5)), "-5");
        assert_eq!(json(&Datum::Null), "null");
    }

    #[test]
    fn headers_are_written_as_simple_header_converter_writes_them() {
        assert_eq!(
            header_bytes(&Datum::Bytes(Bytes::from_static(&[0, 1, 2, 255]))),
            Some(b"AAEC/w==".to_vec())
        );
        assert_eq!(
            header_bytes(&Datum::Integer(12345)),
            Some(b"12345".to_vec())
        );
        assert_eq!(header_bytes(&Datum::Boolean(true)), Some(b"true".to_vec()));
        assert_eq!(header_bytes(&Datum::Null), None);
        assert_eq!(string_bytes(&Datum::Bytes(Bytes::from_static(b"x"))), None);
    }

    #[test]
    fn columns_decode_to_debeziums_forms() {
        let d = |t: ColumnType, s: &str| t.decode(&Bytes::copy_from_slice(s.as_bytes()));
        assert_eq!(
            d(ColumnType::Timestamptz, "2024-05-06 09:08:09.5+02"),
            Ok(Datum::String(Text::from("2024-05-06T07:08:09.500000Z")))
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
    fn blank_is_javas_trim_then_empty() {
        assert!(Datum::String(Text::from(" \t\n\r\u{1}")).is_blank());
        assert!(!Datum::String(Text::from(" x ")).is_blank());
        assert!(Datum::Null.is_blank());
        assert!(!Datum::Bytes(Bytes::new()).is_blank());
    }
}
