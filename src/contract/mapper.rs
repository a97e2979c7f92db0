//! Row to Kafka record: topic, key, value, headers and timestamp, exactly as
//! the contract (and the generated Debezium configuration) makes them.
//!
//! Pure code over the definition. Rows that slipped past the database
//! constraints (an old table whose constraints are not validated) are
//! refused with a code, so the relay records them as FAILED.

use std::sync::Arc;

use bytes::Bytes;

use super::outbox::{self, HeaderEncoding};
use super::route::Routed;
use super::row::{OutboxRow, Value};
use super::value::{Timestamp, Uuid};
use crate::error::{Code, Error};

/// One Kafka record, ready to produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The messaging contract's `message_id`; for a routed row, its place in
    /// the slot ([`Uuid::from_position`]), unique where the event id may not be.
    pub message_id: Uuid,
    pub topic: String,
    /// Shares the replication message's buffer, as the row's values do.
    pub key: Bytes,
    pub value: Bytes,
    /// Which of `key` and `value` are null rather than empty.
    nulls: Nulls,
    /// The partition a `partition` placement chose; `None` lets the
    /// producer's partitioner choose (by key).
    pub partition: Option<i32>,
    headers: Headers,
    /// Milliseconds since the Unix epoch: the source transaction's commit time.
    pub timestamp_ms: Option<i64>,
}

/// Which parts of a record are null: a routed row may have no key (a NULL
/// key column, or none configured) and no value (a tombstone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Nulls {
    Neither,
    Key,
    Value,
    Both,
}

/// How many headers a record carries: `id`, then the canonical ones.
pub const HEADER_COUNT: usize = 1 + outbox::CANONICAL_HEADERS.len();

/// A record's headers. The large variant is the hot one: kept inline, it
/// costs no allocation per record (boxed, it would).
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)]
enum Headers {
    /// The messaging contract's: the values share one buffer, one
    /// allocation per record instead of one per header (librdkafka copies
    /// them on produce anyway).
    Canonical {
        bytes: Vec<u8>,
        /// Each header's name and its value's range in `bytes`; `None` is null.
        spans: [(&'static str, Option<(u32, u32)>); HEADER_COUNT],
    },
    /// A routed row's, as the contract's placements name them.
    Routed(Vec<(Arc<str>, Option<Vec<u8>>)>),
}

/// A record's headers in order, without allocating.
pub struct HeaderIter<'a> {
    headers: &'a Headers,
    at: usize,
}

impl<'a> Iterator for HeaderIter<'a> {
    type Item = (&'a str, Option<&'a [u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        let item = match self.headers {
            Headers::Canonical { bytes, spans } => spans.get(self.at).map(|(name, span)| {
                let value = span.and_then(|(start, end)| bytes.get(start as usize..end as usize));
                (*name, value)
            }),
            Headers::Routed(list) => list
                .get(self.at)
                .map(|(name, value)| (&**name, value.as_deref())),
        };
        self.at += 1;
        item
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let len = match self.headers {
            Headers::Canonical { spans, .. } => spans.len(),
            Headers::Routed(list) => list.len(),
        };
        let left = len.saturating_sub(self.at);
        (left, Some(left))
    }
}

impl ExactSizeIterator for HeaderIter<'_> {}

impl Record {
    /// The messaging contract: `id`, then the 15 canonical headers; for a
    /// routed row, the router's. `None` is a header with a null value.
    pub fn headers(&self) -> HeaderIter<'_> {
        HeaderIter {
            headers: &self.headers,
            at: 0,
        }
    }

    /// A header's value; `None` when null or absent.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v)
    }

    /// The key as Kafka gets it; `None` is a null key.
    pub fn key_bytes(&self) -> Option<&[u8]> {
        match self.nulls {
            Nulls::Key | Nulls::Both => None,
            Nulls::Neither | Nulls::Value => Some(&self.key),
        }
    }

    /// The value as Kafka gets it; `None` is a tombstone.
    pub fn value_bytes(&self) -> Option<&[u8]> {
        match self.nulls {
            Nulls::Value | Nulls::Both => None,
            Nulls::Neither | Nulls::Key => Some(&self.value),
        }
    }

    /// This record with `name`'s value replaced (an absent name changes
    /// nothing): the relay's span context in place of the row's.
    pub fn with_header(&self, name: &str, value: &[u8]) -> Record {
        let mut record = self.clone();
        match &mut record.headers {
            Headers::Canonical { bytes, spans } => {
                let start = bytes.len();
                bytes.extend_from_slice(value);
                let end = bytes.len();
                if let Some(span) = spans.iter_mut().find(|(n, _)| *n == name) {
                    span.1 = u32::try_from(start).ok().zip(u32::try_from(end).ok());
                }
            }
            Headers::Routed(list) => {
                if let Some(slot) = list.iter_mut().find(|(n, _)| &**n == name) {
                    slot.1 = Some(value.to_vec());
                }
            }
        }
        record
    }

    /// Bytes this record holds, for in-flight accounting.
    pub fn size(&self) -> usize {
        let headers: usize = match &self.headers {
            Headers::Canonical { bytes, spans } => {
                bytes.len() + spans.iter().map(|(n, _)| n.len()).sum::<usize>()
            }
            Headers::Routed(list) => list
                .iter()
                .map(|(n, v)| n.len() + v.as_ref().map_or(0, Vec::len))
                .sum(),
        };
        self.topic.len() + self.key.len() + self.value.len() + headers
    }

    /// The record of a routed row; `message_id` is its place in the slot.
    pub fn routed(routed: Routed, message_id: Uuid) -> Record {
        Record::copied(Copied {
            message_id,
            topic: routed.topic,
            key: routed.key,
            value: routed.value,
            partition: routed.partition,
            headers: routed.headers,
            timestamp_ms: Some(routed.timestamp_ms),
        })
    }

    /// A record from its parts (a routed row; a message Kafka returned; a
    /// dead letter read back).
    pub fn copied(parts: Copied) -> Record {
        let nulls = match (&parts.key, &parts.value) {
            (Some(_), Some(_)) => Nulls::Neither,
            (None, Some(_)) => Nulls::Key,
            (Some(_), None) => Nulls::Value,
            (None, None) => Nulls::Both,
        };
        Record {
            message_id: parts.message_id,
            topic: parts.topic,
            key: parts.key.unwrap_or_default(),
            value: parts.value.unwrap_or_default(),
            nulls,
            partition: parts.partition,
            headers: Headers::Routed(parts.headers),
            timestamp_ms: parts.timestamp_ms,
        }
    }
}

/// A record's parts, each as Kafka holds it (`None` is null).
#[derive(Debug, Clone)]
pub struct Copied {
    pub message_id: Uuid,
    pub topic: String,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub partition: Option<i32>,
    pub headers: Vec<(Arc<str>, Option<Vec<u8>>)>,
    pub timestamp_ms: Option<i64>,
}

fn refuse(code: Code, detail: impl Into<String>) -> Error {
    Error::new(code, detail)
}

/// Appends a column's value as header bytes (`SimpleHeaderConverter`'s
/// form); `false` is a null header.
fn write_header(
    out: &mut Vec<u8>,
    value: &Value,
    encoding: HeaderEncoding,
) -> Result<bool, String> {
    use std::io::Write;
    match (value, encoding) {
        (Value::Null, _) => return Ok(false),
        (Value::Text(s), HeaderEncoding::Text) => out.extend_from_slice(s.as_bytes()),
        (Value::Uuid(u), HeaderEncoding::Uuid) => out.extend_from_slice(&u.hyphenated()),
        (Value::Integer(i), HeaderEncoding::Integer) => {
            write!(out, "{i}").map_err(|e| e.to_string())?
        }
        (Value::Bigint(i), HeaderEncoding::Integer) => {
            write!(out, "{i}").map_err(|e| e.to_string())?
        }
        // `infinity` and `-infinity` as Debezium 3.6.1 publishes them.
        (Value::Timestamp(t), HeaderEncoding::Timestamp) => t.write_utc(out),
        (other, encoding) => return Err(format!("{other:?} cannot be written as {encoding:?}")),
    }
    Ok(true)
}

/// Application headers must be a flat object of strings outside the
/// platform's namespace; they are not published (Debezium parity), only checked.
fn check_application_headers(value: &Value) -> Result<(), Error> {
    let text = match value {
        // The common case, without building a JSON tree for every record.
        Value::Json(text) if text.as_bytes() == b"{}" => return Ok(()),
        Value::Json(text) => text,
        Value::Null => return Ok(()),
        other => {
            return Err(refuse(
                Code::HEADERS_NOT_FLAT,
                format!("headers column holds {other:?}"),
            ))
        }
    };
    let parsed: serde_json::Value = serde_json::from_slice(text.as_bytes())
        .map_err(|e| refuse(Code::HEADERS_NOT_FLAT, format!("headers are not JSON: {e}")))?;
    let object = parsed
        .as_object()
        .ok_or_else(|| refuse(Code::HEADERS_NOT_FLAT, "headers are not a JSON object"))?;
    for (name, v) in object {
        if outbox::is_reserved_header_name(name) {
            return Err(refuse(
                Code::RESERVED_HEADER_NAME,
                format!("application header {name:?} is in the platform's namespace"),
            ));
        }
        if !v.is_string() {
            return Err(refuse(
                Code::HEADERS_NOT_FLAT,
                format!("application header {name:?} is not a string"),
            ));
        }
    }
    Ok(())
}

/// `row`'s destination, when it reads as text (what [`map`] checks is
/// checked there).
pub fn destination_of(row: &OutboxRow) -> Option<&str> {
    match row.get(&outbox::DESTINATION) {
        Value::Text(d) => Some(d.as_str()),
        _ => None,
    }
}

/// Maps a row; `commit_time` is the source transaction's commit time.
/// The row is consumed: its payload and key move into the record.
pub fn map(
    mut row: OutboxRow,
    topic_prefix: &str,
    commit_time: Timestamp,
) -> Result<Record, Error> {
    if let Some(problem) = row.problem() {
        return Err(problem.clone());
    }
    let message_id = row
        .message_id()
        .ok_or_else(|| refuse(Code::ROW_UNDECODABLE, "no message id"))?;
    let text = |column: &outbox::Column| match row.get(column) {
        Value::Text(s) => Ok(s.as_str()),
        other => Err(refuse(
            Code::ROW_UNDECODABLE,
            format!("{} is {other:?}", column.name),
        )),
    };
    let destination = text(&outbox::DESTINATION)?;
    // Not `format!`: its machinery cost 3 % of a drain's CPU here.
    let mut topic = String::with_capacity(topic_prefix.len() + destination.len());
    topic.push_str(topic_prefix);
    topic.push_str(destination);
    if destination.is_empty() || !outbox::is_legal_topic_name(&topic) {
        return Err(refuse(
            Code::ILLEGAL_TOPIC_NAME,
            format!("{topic:?} is not a legal Kafka topic name"),
        ));
    }
    text(&outbox::ROUTING_KEY)?;
    if !matches!(row.get(&outbox::PAYLOAD), Value::Bytes(_)) {
        return Err(refuse(
            Code::ROW_UNDECODABLE,
            format!("payload is {:?}", row.get(&outbox::PAYLOAD)),
        ));
    }
    check_application_headers(row.get(&outbox::HEADERS))?;

    let mut bytes = Vec::with_capacity(256);
    let mut spans = [("", None); HEADER_COUNT];
    let all = std::iter::once(&outbox::ID_HEADER).chain(outbox::CANONICAL_HEADERS.iter());
    for (slot, h) in spans.iter_mut().zip(all) {
        let start = bytes.len();
        let present = write_header(&mut bytes, row.get(&h.column), h.encoding())
            .map_err(|e| refuse(Code::HEADER_UNENCODABLE, format!("{}: {e}", h.name)))?;
        let span = present
            .then(|| Some((u32::try_from(start).ok()?, u32::try_from(bytes.len()).ok()?)))
            .flatten();
        if present && span.is_none() {
            return Err(refuse(
                Code::HEADER_UNENCODABLE,
                format!("{}: too large", h.name),
            ));
        }
        *slot = (h.name, span);
    }
    let key = match row.take(&outbox::ROUTING_KEY) {
        Value::Text(key) => key.into_bytes(),
        _ => Bytes::new(),
    };
    let value = match row.take(&outbox::PAYLOAD) {
        Value::Bytes(b) => b,
        _ => Bytes::new(),
    };
    Ok(Record {
        message_id,
        topic,
        key,
        value,
        nulls: Nulls::Neither,
        partition: None,
        headers: Headers::Canonical { bytes, spans },
        timestamp_ms: commit_time.unix_millis(),
    })
}
