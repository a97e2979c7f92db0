//! One Kafka record, ready to produce, and its headers: names shared with
//! the plan that wrote them, values in one buffer (one allocation per
//! record, not one per header; librdkafka copies them on produce anyway).

use std::sync::Arc;

use bytes::Bytes;

use crate::row::value::Uuid;

/// One Kafka record, ready to produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The row's identity: the event id of a contract that keeps status
    /// (the messaging contract's `message_id`); otherwise the row's place in
    /// the slot ([`Uuid::from_position`]), unique where the event id may
    /// not be.
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
    /// Milliseconds since the Unix epoch: the source transaction's commit
    /// time, or the contract's event timestamp column.
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

impl Nulls {
    fn of(key: Option<&Bytes>, value: Option<&Bytes>) -> Nulls {
        match (key, value) {
            (Some(_), Some(_)) => Nulls::Neither,
            (None, Some(_)) => Nulls::Key,
            (Some(_), None) => Nulls::Value,
            (None, None) => Nulls::Both,
        }
    }
}

/// Header names in order, as a plan holds them: a record keeps a count on
/// them instead of copies.
pub type HeaderNames = Arc<[Arc<str>]>;

/// A header value's end in [`Headers::bytes`] with this bit set: a null.
const NULL: u32 = 1 << 31;

/// A record's headers. `bytes` holds each header's end offset (a `u32`,
/// [`NULL`] set for a null value) and then the values one after another,
/// each starting where the one before it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Headers {
    names: HeaderNames,
    bytes: Vec<u8>,
}

impl Headers {
    /// The bytes where the values start.
    fn values_start(&self) -> usize {
        self.names.len() * 4
    }

    fn end(&self, i: usize) -> Option<u32> {
        let at = i * 4;
        let raw = self.bytes.get(at..at + 4)?;
        Some(u32::from_le_bytes(raw.try_into().ok()?))
    }

    /// The `i`th header's name and value (`None`: null).
    fn get(&self, i: usize) -> Option<(&str, Option<&[u8]>)> {
        let name = self.names.get(i)?;
        let end = self.end(i)?;
        let start = match i {
            0 => self.values_start(),
            _ => (self.end(i - 1)? & !NULL) as usize,
        };
        let value = match end & NULL {
            0 => Some(self.bytes.get(start..end as usize)?),
            _ => None,
        };
        Some((name, value))
    }

    /// Headers from name and value pairs (a message Kafka returned, a dead
    /// letter read back).
    pub fn from_pairs(pairs: &[(Arc<str>, Option<Vec<u8>>)]) -> Headers {
        let names: HeaderNames = pairs.iter().map(|(n, _)| n.clone()).collect();
        let mut w = HeaderWriter::new(&names, 64);
        for (_, value) in pairs {
            if let Some(v) = value {
                w.values().extend_from_slice(v);
            }
            match value {
                Some(_) => w.close_value(),
                None => w.close_null(),
            };
        }
        w.finish()
    }
}

/// Whether a header has a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Presence {
    Value,
    Null,
}

/// Writes a record's headers in order: each value is appended to
/// [`HeaderWriter::values`], then [`HeaderWriter::close`]d.
pub struct HeaderWriter {
    headers: Headers,
    /// The next header to close.
    at: usize,
}

impl HeaderWriter {
    /// Room for `names` and `capacity` bytes of values.
    pub fn new(names: &HeaderNames, capacity: usize) -> HeaderWriter {
        let mut bytes = Vec::with_capacity(names.len() * 4 + capacity);
        bytes.resize(names.len() * 4, 0);
        HeaderWriter {
            headers: Headers {
                names: names.clone(),
                bytes,
            },
            at: 0,
        }
    }

    /// Where the current header's value goes.
    pub fn values(&mut self) -> &mut Vec<u8> {
        &mut self.headers.bytes
    }

    /// Ends the current header: what was appended is its value. `false`
    /// for a value past 2 GiB, which no Kafka record holds.
    pub fn close_value(&mut self) -> bool {
        self.close(Presence::Value)
    }

    /// Ends the current header as a null; anything appended is dropped.
    pub fn close_null(&mut self) -> bool {
        self.close(Presence::Null)
    }

    fn close(&mut self, presence: Presence) -> bool {
        let present = presence == Presence::Value;
        let start = match self.at {
            0 => self.headers.values_start(),
            i => self.headers.end(i - 1).map_or(0, |e| (e & !NULL) as usize),
        };
        if !present {
            self.headers.bytes.truncate(start);
        }
        let Ok(end) = u32::try_from(self.headers.bytes.len()) else {
            return false;
        };
        if end & NULL != 0 {
            return false;
        }
        let stored = if present { end } else { end | NULL };
        let at = self.at * 4;
        if let Some(slot) = self.headers.bytes.get_mut(at..at + 4) {
            slot.copy_from_slice(&stored.to_le_bytes());
        }
        self.at += 1;
        true
    }

    pub fn finish(self) -> Headers {
        self.headers
    }
}

/// A record's headers in order, without allocating.
pub struct HeaderIter<'a> {
    headers: &'a Headers,
    at: usize,
}

impl<'a> Iterator for HeaderIter<'a> {
    type Item = (&'a str, Option<&'a [u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.headers.get(self.at)?;
        self.at += 1;
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.headers.names.len().saturating_sub(self.at);
        (left, Some(left))
    }
}

impl ExactSizeIterator for HeaderIter<'_> {}

/// A record's parts, each as Kafka holds it (`None` is null).
#[derive(Debug, Clone)]
pub struct Parts {
    pub message_id: Uuid,
    pub topic: String,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub partition: Option<i32>,
    pub headers: Headers,
    pub timestamp_ms: Option<i64>,
}

impl Record {
    /// A record from its parts: what a plan wrote, a message Kafka
    /// returned, a dead letter read back.
    pub fn new(parts: Parts) -> Record {
        Record {
            nulls: Nulls::of(parts.key.as_ref(), parts.value.as_ref()),
            message_id: parts.message_id,
            topic: parts.topic,
            key: parts.key.unwrap_or_default(),
            value: parts.value.unwrap_or_default(),
            partition: parts.partition,
            headers: parts.headers,
            timestamp_ms: parts.timestamp_ms,
        }
    }

    /// The headers in order: for the messaging contract `id`, then the 15
    /// canonical headers; for another, the router's. `None` is a header
    /// with a null value.
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
        let pairs: Vec<(Arc<str>, Option<Vec<u8>>)> = self
            .headers()
            .zip(self.headers.names.iter())
            .map(|((n, v), shared)| {
                let v = if n == name { Some(value) } else { v };
                (shared.clone(), v.map(<[u8]>::to_vec))
            })
            .collect();
        let mut record = self.clone();
        record.headers = Headers::from_pairs(&pairs);
        record
    }

    /// Bytes this record holds, for in-flight accounting.
    pub fn size(&self) -> usize {
        let names: usize = self.headers.names.iter().map(|n| n.len()).sum();
        let values = self.headers.bytes.len() - self.headers.values_start();
        self.topic.len() + self.key.len() + self.value.len() + names + values
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> HeaderNames {
        list.iter().map(|n| Arc::from(*n)).collect()
    }

    #[test]
    fn headers_keep_each_value_and_each_null_in_order() {
        let names = names(&["id", "a", "b", "c"]);
        let mut w = HeaderWriter::new(&names, 0);
        w.values().extend_from_slice(b"1234");
        assert!(w.close_value());
        w.values().extend_from_slice(b"dropped");
        assert!(w.close_null());
        assert!(w.close_value());
        w.values().extend_from_slice("é\\".as_bytes());
        assert!(w.close_value());
        let record = Record::new(Parts {
            message_id: Uuid([0; 16]),
            topic: "t".into(),
            key: None,
            value: Some(Bytes::new()),
            partition: None,
            headers: w.finish(),
            timestamp_ms: None,
        });
        let seen: Vec<(&str, Option<&[u8]>)> = record.headers().collect();
        assert_eq!(
            seen,
            vec![
                ("id", Some(&b"1234"[..])),
                ("a", None),
                ("b", Some(&b""[..])),
                ("c", Some("é\\".as_bytes())),
            ]
        );
        assert_eq!(record.headers().len(), 4);
        assert_eq!(record.key_bytes(), None);
        assert_eq!(record.value_bytes(), Some(&b""[..]));
        // The topic, the names (2 + 1 + 1 + 1) and the values (4 + 3).
        assert_eq!(record.size(), 1 + 5 + 7);

        let replaced = record.with_header("a", b"x").with_header("c", b"yz");
        let seen: Vec<(&str, Option<&[u8]>)> = replaced.headers().collect();
        assert_eq!(
            seen,
            vec![
                ("id", Some(&b"1234"[..])),
                ("a", Some(&b"x"[..])),
                ("b", Some(&b""[..])),
                ("c", Some(&b"yz"[..])),
            ]
        );
        assert_eq!(record.with_header("absent", b"x"), record);
        let again = Headers::from_pairs(&[
            (Arc::from("id"), Some(b"1234".to_vec())),
            (Arc::from("a"), None),
            (Arc::from("b"), Some(Vec::new())),
            (Arc::from("c"), Some("é\\".as_bytes().to_vec())),
        ]);
        assert_eq!(again, record.headers);
    }
}
