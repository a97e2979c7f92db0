//! outbox-cdc: a change-data-capture relay for a transactional outbox.
#![warn(unreachable_pub)]
//!
//! `docs/ARCHITECTURE.md` is the map. In short: [`contract`] says what a row
//! and its Kafka record are; [`replication`] streams committed rows from the
//! slot; [`pipeline`] maps, publishes and settles them; [`kafka`] and [`pg`]
//! speak to the two sides; [`preflight`] holds the findings `check` reports
//! and `run` obeys; [`cutover`] hands an outbox between relays; [`cli`] is
//! the command line. Every failure is an [`error::Error`] with a stable code.

pub mod allocator;
pub mod cli;
pub mod config;
pub mod contract;
pub mod error;
pub mod finding;
pub mod kafka;
pub mod lsn;
pub mod metrics;
pub mod ops;
pub mod otel;
pub mod pg;
pub mod pipeline;
pub(crate) mod quote;
pub mod replication;
pub mod secret;
