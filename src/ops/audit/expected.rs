//! The record a row must be, kept small (the value as a digest), and the
//! fields a record found in Kafka differs in.

use std::hash::{Hash, Hasher};

use crate::contract::mapper::Record;
use crate::kafka::window::Found;

/// The record a row must be, kept small: the value as a digest.
#[derive(Debug)]
pub(super) struct Expected {
    key: Vec<u8>,
    value_len: usize,
    value_digest: u64,
    headers: Vec<(&'static str, Option<Vec<u8>>)>,
}

fn digest(bytes: &[u8]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

impl Expected {
    pub(super) fn of(record: &Record) -> Expected {
        Expected {
            key: record.key.to_vec(),
            value_len: record.value.len(),
            value_digest: digest(&record.value),
            headers: record
                .headers()
                .map(|(n, v)| (n, v.map(<[u8]>::to_vec)))
                .collect(),
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
        let names = |hs: &mut dyn Iterator<Item = &str>| hs.map(str::to_string).collect::<Vec<_>>();
        let expected_names = names(&mut self.headers.iter().map(|(n, _)| *n));
        let found_names = names(&mut found.headers.iter().map(|(n, _)| n.as_str()));
        if expected_names != found_names {
            fields.push("headers (names or order)".to_string());
        } else {
            for ((name, want), (_, got)) in self.headers.iter().zip(&found.headers) {
                if want != got {
                    fields.push(format!("header {name}"));
                }
            }
        }
        fields
    }
}
