//! The record contract: what an outbox row is and what Kafka record it
//! becomes. Pure code over the definition in [`outbox`]; no I/O.
//! `connector` writes the Debezium configuration that emits the same record.

pub mod convert;
pub mod converters;
pub mod definition;
pub mod expand;
pub mod mapper;
pub mod outbox;
pub mod route;
pub mod router;
pub mod row;
pub mod schema;
pub mod topic;
pub mod value;
