//! outbox-cdc: a change-data-capture relay for a transactional outbox.
//!
//! Data flows one way: the outbox definition ([`outbox`]) says what a row and
//! its Kafka record are; [`migrate`] creates the table and the CDC objects;
//! [`connector_config`] writes the Debezium configuration that produces the
//! same records; [`catalog`] proves the database matches the definition.

pub mod catalog;
pub mod check;
pub mod config;
pub mod connector_config;
pub mod cutover;
pub mod db;
pub mod exclusivity;
pub mod handover;
pub mod lsn;
pub mod mapper;
pub mod marker;
pub mod migrate;
pub mod outbox;
pub mod properties;
pub mod publisher;
pub mod relay;
pub mod replication;
pub mod tail;
pub mod value;
pub mod watermark;
