//! Row to Kafka record: topic, key, value, headers and timestamp, exactly as
//! the contract (and the generated Debezium configuration) makes them.
//!
//! Pure code over the definition. Rows that slipped past the database
//! constraints (an old table whose constraints are not validated) are
//! refused with a code, so the relay records them as FAILED.

use super::outbox::{self, HeaderEncoding};
use super::row::{OutboxRow, Value};
use super::value::{Timestamp, Uuid};
use crate::error::{Code, Error};

/// One Kafka record, ready to produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub message_id: Uuid,
    pub topic: String,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    /// `id`, then the 15 canonical headers; `None` is a header with a null value.
    pub headers: Vec<(&'static str, Option<Vec<u8>>)>,
    /// Milliseconds since the Unix epoch: the source transaction's commit time.
    pub timestamp_ms: Option<i64>,
}

impl Record {
    /// Bytes this record holds, for in-flight accounting.
    pub fn size(&self) -> usize {
        self.topic.len()
            + self.key.len()
            + self.value.len()
            + self
                .headers
                .iter()
                .map(|(n, v)| n.len() + v.as_ref().map_or(0, Vec::len))
                .sum::<usize>()
    }
}

fn refuse(code: Code, detail: impl Into<String>) -> Error {
    Error::new(code, detail)
}

/// A column's value as header bytes (`SimpleHeaderConverter`'s form).
fn header_bytes(value: &Value, encoding: HeaderEncoding) -> Result<Option<Vec<u8>>, String> {
    Ok(match (value, encoding) {
        (Value::Null, _) => None,
        (Value::Text(s), HeaderEncoding::Text) => Some(s.as_bytes().to_vec()),
        (Value::Uuid(u), HeaderEncoding::Uuid) => Some(u.hyphenated().to_vec()),
        (Value::Integer(i), HeaderEncoding::Integer) => Some(i.to_string().into_bytes()),
        (Value::Bigint(i), HeaderEncoding::Integer) => Some(i.to_string().into_bytes()),
        // `infinity` and `-infinity` as Debezium 3.6.1 publishes them.
        (Value::Timestamp(t), HeaderEncoding::Timestamp) => Some(t.to_utc_string().into_bytes()),
        (other, encoding) => return Err(format!("{other:?} cannot be written as {encoding:?}")),
    })
}

/// Application headers must be a flat object of strings outside the
/// platform's namespace; they are not published (Debezium parity), only checked.
fn check_application_headers(value: &Value) -> Result<(), Error> {
    let text = match value {
        Value::Json(text) => text,
        Value::Null => return Ok(()),
        other => {
            return Err(refuse(
                Code::HEADERS_NOT_FLAT,
                format!("headers column holds {other:?}"),
            ))
        }
    };
    let parsed: serde_json::Value = serde_json::from_str(text)
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

/// Maps a row; `commit_time` is the source transaction's commit time.
pub fn map(row: &OutboxRow, topic_prefix: &str, commit_time: Timestamp) -> Result<Record, Error> {
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
    let topic = format!("{topic_prefix}{destination}");
    if destination.is_empty() || !outbox::is_legal_topic_name(&topic) {
        return Err(refuse(
            Code::ILLEGAL_TOPIC_NAME,
            format!("{topic:?} is not a legal Kafka topic name"),
        ));
    }
    let key = text(&outbox::ROUTING_KEY)?.as_bytes().to_vec();
    let value = match row.get(&outbox::PAYLOAD) {
        Value::Bytes(b) => b.clone(),
        other => {
            return Err(refuse(
                Code::ROW_UNDECODABLE,
                format!("payload is {other:?}"),
            ))
        }
    };
    check_application_headers(row.get(&outbox::HEADERS))?;

    let mut headers = Vec::with_capacity(1 + outbox::CANONICAL_HEADERS.len());
    for h in std::iter::once(&outbox::ID_HEADER).chain(outbox::CANONICAL_HEADERS.iter()) {
        let bytes = header_bytes(row.get(&h.column), h.encoding())
            .map_err(|e| refuse(Code::HEADER_UNENCODABLE, format!("{}: {e}", h.name)))?;
        headers.push((h.name, bytes));
    }
    Ok(Record {
        message_id,
        topic,
        key,
        value,
        headers,
        timestamp_ms: commit_time.unix_millis(),
    })
}
