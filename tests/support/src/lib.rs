//! The harness the integration tests and the benchmark share: the real
//! PostgreSQL and Kafka that `scripts/services.sh` starts, throwaway
//! databases, the relay as a process and as a command, readers, consumers.
//! One file per role:
//!
//! - `services`: the services, found through `scripts/services.sh env`;
//!   second sets of them; restarting PostgreSQL;
//! - `db`: databases, the rows tests write, what they read back;
//! - `config`: configuration files for the relay under test;
//! - `chart`: SVG charts for the benchmark's and the soak's reports;
//! - `cli`: the binary as a command;
//! - `cluster`: the three-broker Kafka cluster and its faults;
//! - `container`: the image under podman;
//! - `relay`: the binary as a child process, with its log;
//! - `replication`: a reader against a test database;
//! - `kafka`: topics, consumers, Java's partitioner.

pub mod chart;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod container;
pub mod db;
pub mod kafka;
pub mod prometheus;
pub mod relay;
pub mod replication;
pub mod services;
pub mod soak;
pub mod toxiproxy;
pub mod workload;

pub use config::config_head;
pub use db::{
    bookkeeping_matches_kafka, cdc_db, claim_sql, migrated_db, rows_with_status, spawn_write_keyed,
    text_pairs, texts, unique_prefix, wait_until_marked, write_keyed, KillTimes, TestDb, Written,
    KEYED_INSERT,
};
pub use services::{env, free_port, restart_postgres, services, ExtraServices, Secured, Services};
