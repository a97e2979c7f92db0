//! The integration tests against the real PostgreSQL, Kafka and Kafka
//! Connect that `scripts/services.sh` starts, in one binary: one link
//! instead of one per file. Tests that restart the shared services live in
//! `tests/faults`, a binary of their own: cargo runs test binaries one after
//! another, so those restarts never hit these tests.

#[macro_use]
extern crate outbox_cdc_testkit;
/// The shared harness (`tests/support`).
use outbox_cdc_testkit as common;

mod audit;
mod book;
mod bookkeeping;
mod commands;
mod connector_config;
mod connector_import;
mod contracts;
mod dashboard;
mod debezium;
mod docs;
mod errors;
mod examples;
mod exclusivity;
mod image;
mod kafka_roundtrip;
mod least_privilege;
mod limits;
mod mapper;
mod migrations;
mod operations;
mod otel;
mod relay;
mod replay;
mod replication;
mod secured;
mod status;
mod strimzi;
mod transactional;
