//! The record a row must be, kept small (the value and each header as a
//! digest: a row waits in memory for as long as a margin), and the fields
//! a record found in Kafka differs in.

use std::hash::{Hash, Hasher};

use crate::kafka::window::Found;
use crate::router::Record;

/// The record a row must be, kept small: the value and each header (its
/// name and value) as a digest.
#[derive(Debug)]
pub(super) struct Expected {
    key: Box<[u8]>,
    value_len: usize,
    value_digest: u64,
    headers: Box<[u64]>,
}

fn digest(bytes: &[u8]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

fn header_digest(name: &str, value: Option<&[u8]>) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    name.hash(&mut h);
    value.hash(&mut h);
    h.finish()
}

impl Expected {
    pub(super) fn of(record: &Record) -> Expected {
        Expected {
            key: record.key.to_vec().into_boxed_slice(),
            value_len: record.value.len(),
            value_digest: digest(&record.value),
            headers: record.headers().map(|(n, v)| header_digest(n, v)).collect(),
        }
    }

    /// The fields of `found` that differ from this record.
    pub(super) fn differences(&self, found: &Found) -> Vec<String> {
        let mut fields = Vec::new();
        if found.key.as_deref() != Some(&self.key[..]) {
            fields.push("key".to_string());
        }
        let value = found.value.as_deref().unwrap_or_default();
        if found.value.is_none()
            || value.len() != self.value_len
            || digest(value) != self.value_digest
        {
            fields.push("value".to_string());
        }
        if found.headers.len() != self.headers.len() {
            fields.push("headers (names or order)".to_string());
        } else {
            for (want, (name, got)) in self.headers.iter().zip(&found.headers) {
                if *want != header_digest(name, got.as_deref()) {
                    fields.push(format!("header {name}"));
                }
            }
        }
        fields
    }
}
