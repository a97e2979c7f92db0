//! The record contract: what an outbox row is, what Kafka record it becomes,
//! and the Debezium configuration that makes Debezium emit the same record.
//! Pure code over the definition in [`outbox`]; no I/O.

pub mod debezium;
pub mod mapper;
pub mod outbox;
pub mod properties;
pub mod row;
pub mod value;
pub mod yaml;
