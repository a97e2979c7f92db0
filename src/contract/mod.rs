//! What a record must be: the definition of the platform's outbox table
//! and its headers (`outbox`), a contract as a value (`definition`: which
//! columns make the record and how, the built-in contracts, the rules a
//! platform row must keep), the Outbox Event Router's options, one table of
//! them (`options`), what each column a contract names is for (`role`), the topic rule they give (`topic`), the Kafka
//! Connect converters a contract names (`converters`), and the Debezium
//! release with the context headers it writes (`context`). Pure data and
//! parsing, no bytes written: `router` compiles a contract into the records,
//! `connector` into the Debezium configuration that emits the same ones.

pub mod context;
pub mod converters;
pub mod definition;
pub mod options;
pub mod outbox;
pub mod role;
pub mod topic;
