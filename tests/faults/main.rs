//! Tests that stop or restart the shared PostgreSQL and Kafka. They run in
//! their own binary (cargo runs binaries one after another, so never beside
//! `tests/it`) and one at a time.

#[macro_use]
extern crate outbox_cdc_testkit;
/// The shared harness (`tests/support`).
use outbox_cdc_testkit as common;

mod relay_faults;
mod replication_restart;
mod slot_recovery;

/// Held by each test for its whole run: two tests restarting the same server
/// at once would each see the other's outage.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
