//! outbox-cdc: a change-data-capture relay for a transactional outbox.
#![warn(unreachable_pub)]
//!
//! `docs/ARCHITECTURE.md` is the map. In short: [`contract`] says what a row
//! and its Kafka record are; [`replication`] streams committed rows from the
//! slot; [`pipeline`] maps, publishes and settles them; [`kafka`] and [`pg`]
//! speak to the two sides; [`ops`] holds the engines of the operator's
//! commands (`check`'s preflight, `cutover`, `migrate`, `purge`, `redrive`,
//! `audit`, `replay`); [`config`] reads the configuration file; [`cli`] is
//! the command line. Every failure is an [`error::Error`] with a stable code,
//! and [`error::policy`] decides what follows it.

pub mod allocator;
pub mod cli;
pub mod config;
pub mod connector;
pub mod contract;
pub mod error;
pub mod finding;
pub mod format;
pub mod kafka;
pub mod lsn;
pub mod metrics;
pub mod ops;
pub mod otel;
pub mod pg;
pub mod pipeline;
pub(crate) mod quote;
pub mod replication;
pub mod router;
pub mod row;
pub mod rules;
pub mod secret;
pub mod spelling;
#[cfg(test)]
mod test_support;
