//! When a published row counts as settled: the one thing the two delivery
//! modes do differently. The session's loop calls a [`Settlement`] at each
//! point where they differ, and nowhere else asks which mode it is in.
//!
//! - [`Idempotent`]: each report settles its message; a source transaction
//!   settles when all of its messages and all earlier ones have, in commit
//!   order ([`super::watermark`]).
//! - [`Transactional`]: whole source transactions go into a Kafka
//!   transaction; reports only collect what Kafka took, and the commit,
//!   with the progress, settles them all at once.
//!
//! The rule both keep: the settled position never passes a source
//! transaction whose rows are not in Kafka (confirmed, or committed) or
//! recorded FAILED. The recorder then holds the slot until the rows are
//! journaled too.

mod idempotent;
mod transactional;

use std::future::Future;

use tokio::time::Instant;

pub(crate) use idempotent::Idempotent;
pub(crate) use transactional::Transactional;

use super::ledger::Ledger;
use super::parts::{Current, Parts};
use super::recheck::Recheck;
use super::shared::Shared;
use super::sink::{Delivery, Sink};
use super::watermark::TxSeq;
use crate::error::Error;
use crate::lsn::Lsn;
use crate::pg::row_status::Guard;
use crate::row::value::{Timestamp, Uuid};

/// What a strategy starts from.
pub(crate) struct Start<'s, K> {
    pub(crate) sink: &'s K,
    pub(crate) shared: &'s Shared,
}

/// How a session settles what it publishes.
pub(crate) trait Settlement: Send + Sized {
    /// Readies the sink at a session's start.
    fn start<K: Sink>(start: Start<'_, K>) -> impl Future<Output = Result<Self, Error>> + Send;

    /// Whether a new session looks streamed rows up, to leave out those an
    /// earlier one published and recorded ([`Recheck`]).
    fn recheck(shared: &Shared) -> Recheck;

    /// Whether the source transaction whose commit record is at
    /// `final_lsn` is in Kafka already (its rows are then only marked).
    fn already_published(&self, final_lsn: Lsn) -> bool;

    /// Before a record of `bytes` is sent.
    fn before_send<K: Sink, L: Ledger>(
        &mut self,
        parts: &mut Parts<'_, K, L>,
        bytes: usize,
    ) -> Result<(), Error>;

    /// One delivery report (already counted as no longer in flight).
    fn on_delivery<K: Sink, L: Ledger>(&mut self, parts: &mut Parts<'_, K, L>, d: Delivery);

    /// A record refused for good before it left the process, or by the
    /// broker: a row's fault is recorded FAILED, an operator's never.
    fn rejected<K: Sink, L: Ledger>(
        &mut self,
        parts: &mut Parts<'_, K, L>,
        tx: TxSeq,
        id: Uuid,
        error: Error,
    );

    /// A source transaction's commit was read, ending at `end_lsn`.
    fn committed<K: Sink, L: Ledger>(
        &mut self,
        parts: &mut Parts<'_, K, L>,
        end_lsn: Lsn,
        commit_time: Timestamp,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// After each step of the loop: record failures, settle what can be.
    fn after_step<K: Sink, L: Ledger>(
        &mut self,
        parts: &mut Parts<'_, K, L>,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// When something is due by time alone, between source transactions.
    fn due(&self) -> Option<Instant>;

    fn on_due<K: Sink, L: Ledger>(
        &mut self,
        parts: &mut Parts<'_, K, L>,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// While draining, whether the stream is still read (a source
    /// transaction is never split).
    fn reads_while_draining(&self, current: Current) -> bool;

    /// While draining: whether everything that can settle has.
    fn drained<K: Sink, L: Ledger>(
        &mut self,
        parts: &mut Parts<'_, K, L>,
        current: Current,
    ) -> impl Future<Output = Result<bool, Error>> + Send;

    /// The commit time (Unix µs) of the oldest unsettled source
    /// transaction, for "seconds behind source".
    fn oldest_unsettled<K, L>(&self, parts: &Parts<'_, K, L>) -> Option<i64>;

    /// After a backlog's records are all reported and its failures
    /// recorded under `guard`.
    fn finish_backlog<K: Sink, L: Ledger>(
        &mut self,
        parts: &mut Parts<'_, K, L>,
        guard: Guard,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// At the session's end: closes what is open; returns an error that
    /// must stop the relay whatever else ended the session (fenced).
    fn close<K: Sink, L: Ledger>(
        &mut self,
        parts: &mut Parts<'_, K, L>,
    ) -> impl Future<Output = Option<Error>> + Send;
}

/// The delivery modes, for choosing a strategy once per session.
pub(crate) use crate::error::policy::Mode;

/// Seconds from a commit (Unix µs) to `now`, for the latency histogram.
fn seconds_since(now: i64, at: i64) -> f64 {
    (now - at).max(0) as f64 / 1e6
}
