//! A column's value as the relay holds it between decoding and writing:
//! one type for every contract, whether it came in PostgreSQL's text form
//! or its binary one.

use std::fmt;

use bytes::Bytes;

use super::value::{Timestamp, Uuid};

/// A column's value in its Kafka Connect form (Debezium's schema type):
/// `uuid`, `json` and `timestamptz` are Connect strings, kept typed here so
/// that writing them costs no allocation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Datum {
    #[default]
    Null,
    /// Text as stored (`text`, `varchar`, `char`, `json`, `jsonb`, and a
    /// `uuid` read from its text form).
    String(Text),
    Integer(i64),
    Boolean(bool),
    Bytes(Bytes),
    /// A `uuid` read in binary form; its Connect form is the lowercase
    /// hyphenated text.
    Uuid(Uuid),
    /// A `timestamptz`; its Connect form (`ZonedTimestamp`) is the UTC text
    /// with six fraction digits.
    Timestamp(Timestamp),
}

impl Datum {
    /// `Object.toString().trim().isEmpty()`, the router's test of an empty
    /// payload: Java's `trim` drops every char up to U+0020.
    pub fn is_blank(&self) -> bool {
        match self {
            Datum::Null => true,
            Datum::String(t) => t.as_bytes().iter().all(|b| *b <= b' '),
            // `byte[].toString()` is never blank, nor is a number, a uuid
            // or a timestamp.
            Datum::Integer(_)
            | Datum::Boolean(_)
            | Datum::Bytes(_)
            | Datum::Uuid(_)
            | Datum::Timestamp(_) => false,
        }
    }

    /// Appends the value's Connect string form when it has one (text, a
    /// uuid, a timestamp); `false` for any other value.
    pub fn write_string(&self, out: &mut Vec<u8>) -> bool {
        match self {
            Datum::String(t) => out.extend_from_slice(t.as_bytes()),
            Datum::Uuid(u) => out.extend_from_slice(&u.hyphenated()),
            Datum::Timestamp(t) => t.write_utc(out),
            Datum::Null | Datum::Integer(_) | Datum::Boolean(_) | Datum::Bytes(_) => return false,
        }
        true
    }
}

/// UTF-8 text that shares the buffer it arrived in: a streamed row's text
/// columns are slices of its replication message, checked once, never
/// copied (a copy and an allocation per column were a tenth of the relay's
/// work per message).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Text(Bytes);

impl Text {
    /// `bytes` if they are UTF-8.
    pub fn new(bytes: Bytes) -> Result<Text, std::str::Utf8Error> {
        std::str::from_utf8(&bytes)?;
        Ok(Text(bytes))
    }

    /// Bytes the caller has already checked as UTF-8.
    pub(crate) fn checked(bytes: Bytes) -> Text {
        Text(bytes)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The text, checked again (cheap where it is read: short values).
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    pub fn into_bytes(self) -> Bytes {
        self.0
    }

    /// The bytes, sharing the buffer.
    pub fn bytes(&self) -> Bytes {
        self.0.clone()
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl From<String> for Text {
    fn from(s: String) -> Text {
        Text(Bytes::from(s))
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Text {
        Text(Bytes::copy_from_slice(s.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_strings_write_their_connect_text_and_others_write_nothing() {
        let mut out = Vec::new();
        let uuid = Uuid([0xab; 16]);
        assert!(Datum::Uuid(uuid).write_string(&mut out));
        assert_eq!(out, b"abababab-abab-abab-abab-abababababab");
        out.clear();
        assert!(Datum::Timestamp(Timestamp::Micros(1)).write_string(&mut out));
        assert_eq!(out, b"2000-01-01T00:00:00.000001Z");
        out.clear();
        assert!(Datum::String(Text::from("é\\")).write_string(&mut out));
        assert_eq!(out, "é\\".as_bytes());
        for other in [
            Datum::Null,
            Datum::Integer(1),
            Datum::Boolean(true),
            Datum::Bytes(Bytes::from_static(b"x")),
        ] {
            out.clear();
            assert!(!other.write_string(&mut out), "{other:?}");
            assert!(out.is_empty());
        }
        assert!(Datum::String(Text::from(" \t\n")).is_blank());
        assert!(!Datum::Uuid(uuid).is_blank());
    }
}
