//! Debezium's stored position for its PostgreSQL connector: what a takeover
//! reads to skip what Debezium has published, and what a hand-back writes
//! so that the connector resumes where the relay stopped. Kafka Connect
//! keeps it behind its REST API ([`connect`], KIP-875), Debezium Server in
//! its offsets file ([`file`]).
//!
//! The keys are `PostgresOffsetContext`'s (Debezium 3.6.1). Its own resume
//! rule reads `lsn_commit` (else `lsn_proc`): every transaction that ends at
//! or before it was published, since Kafka Connect and Debezium Server
//! store an offset only once every record before it is acknowledged.

pub mod connect;
pub mod file;

use serde_json::{Map, Value};

use crate::error::{Code, Error};
use crate::lsn::Lsn;

const LSN: &str = "lsn";
const LSN_PROC: &str = "lsn_proc";
const LSN_COMMIT: &str = "lsn_commit";
const MESSAGE_TYPE: &str = "messageType";
const TS_USEC: &str = "ts_usec";
/// The source partition's one key: `{"server": <topic.prefix>}`.
const SERVER: &str = "server";

/// The connector's source partition, named by its `topic.prefix`.
pub fn partition(topic_prefix: &str) -> Value {
    let mut p = Map::new();
    p.insert(SERVER.into(), Value::String(topic_prefix.into()));
    Value::Object(p)
}

/// Debezium's PostgreSQL offset, as far as a move between it and the relay
/// reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offset {
    /// Every transaction that ends at or before it was published.
    pub committed: Lsn,
    /// The last change published, past `committed` when Debezium stopped
    /// inside a transaction (published in part).
    pub processed: Option<Lsn>,
    /// What Debezium last processed: a change (`INSERT`, ...) means the
    /// transaction around it was published in part, even when the change
    /// starts where the previous transaction ended (`lsn_proc` equal to
    /// `lsn_commit`), as its own resume search reads it.
    pub last: Option<String>,
}

impl Offset {
    /// Reads the stored JSON object as Debezium's loader does.
    pub fn from_json(value: &Value) -> Result<Offset, Error> {
        let lsn = |key: &str| -> Result<Option<Lsn>, Error> {
            match value.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v.as_u64().map(|n| Some(Lsn(n))).ok_or_else(|| {
                    Error::new(
                        Code::OFFSET_INVALID,
                        format!("Debezium's offset has `{key}` = {v}, not an LSN as a number"),
                    )
                }),
            }
        };
        let processed = lsn(LSN_PROC)?;
        let committed = lsn(LSN_COMMIT)?.or(processed).or(lsn(LSN)?);
        let committed = committed.ok_or_else(|| {
            Error::new(
                Code::OFFSET_INVALID,
                format!("Debezium's offset {value} has no `{LSN_COMMIT}`, `{LSN_PROC}` or `{LSN}`"),
            )
        })?;
        let last = value
            .get(MESSAGE_TYPE)
            .and_then(Value::as_str)
            .map(str::to_string);
        Ok(Offset {
            committed,
            processed,
            last,
        })
    }

    /// Whether Debezium published changes of a transaction it had not
    /// finished: that transaction is sent again whole.
    pub fn inside_a_transaction(&self) -> bool {
        let a_change = self
            .last
            .as_deref()
            .is_some_and(|t| !matches!(t, "BEGIN" | "COMMIT"));
        a_change || self.processed.is_some_and(|p| p > self.committed)
    }

    /// The offset Debezium itself stores after a transaction that ends at
    /// `end`: it then resumes with the first transaction that ends after it.
    pub fn after_commit(end: Lsn, now_micros: i64) -> Value {
        let mut o = Map::new();
        o.insert(LSN_PROC.into(), end.0.into());
        o.insert(MESSAGE_TYPE.into(), "COMMIT".into());
        o.insert(LSN_COMMIT.into(), end.0.into());
        o.insert(LSN.into(), end.0.into());
        o.insert(TS_USEC.into(), now_micros.into());
        Value::Object(o)
    }
}

#[cfg(test)]
mod tests;
