//! Idempotent delivery: at least once, per message. Each confirmation
//! settles its message; a source transaction settles in commit order once
//! all of its messages and all earlier ones are confirmed or recorded
//! FAILED. An ambiguous or passing failure ends the session, whose
//! successor publishes again from the settled position under the same ids.
//!
//! A record the broker refuses for good leaves a gap in its partition's
//! sequence, and the producer stops there (`enable.gapless.guarantee`): the
//! session ends, and a row refused for its own reason, recorded FAILED, is
//! left out when its transaction is published again (`Shared::poison`), so
//! every session gets past at least one such row.

use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::{seconds_since, Settlement, Start};
use crate::error::policy::{self, Failure as Refusal, Mode, Next};
use crate::error::Error;
use crate::kafka::publisher::Outcome;
use crate::lsn::Lsn;
use crate::metrics::unix_micros;
use crate::pg::row_status::Guard;
use crate::pipeline::ledger::Ledger;
use crate::pipeline::parts::{Current, Failure, Parts};
use crate::pipeline::recheck::Recheck;
use crate::pipeline::shared::Shared;
use crate::pipeline::sink::{Delivery, Sink};
use crate::pipeline::watermark::TxSeq;
use crate::row::value::{Timestamp, Uuid};

pub(crate) struct Idempotent {
    /// Records refused for an operator's reason in this session: they hold
    /// the watermark until the session ends and a later one publishes them.
    operator_rejections: usize,
    /// Rows the broker refused for their own reason in this session: poison
    /// once they are recorded FAILED.
    refused: Vec<Uuid>,
}

impl Settlement for Idempotent {
    async fn start<K: Sink>(_: Start<'_, K>) -> Result<Self, Error> {
        Ok(Idempotent {
            operator_rejections: 0,
            refused: Vec::new(),
        })
    }

    /// With marks on, a crashed session's confirmed rows are recorded: a
    /// lookup finds them, until a session of this process is past them.
    fn recheck(shared: &Shared) -> Recheck {
        match (&shared.recorder, shared.rechecked.load(Ordering::Relaxed)) {
            (Some(_), false) => Recheck::after_restart(&shared.relay),
            _ => Recheck::Done,
        }
    }

    fn already_published(&self, _: Lsn) -> bool {
        false
    }

    fn before_send<K: Sink, L: Ledger>(
        &mut self,
        _: &mut Parts<'_, K, L>,
        _: usize,
    ) -> Result<(), Error> {
        Ok(())
    }

    fn on_delivery<K: Sink, L: Ledger>(&mut self, parts: &mut Parts<'_, K, L>, d: Delivery) {
        let ticket = d.ticket;
        match d.outcome {
            Outcome::Confirmed => {
                parts.watermark.settle_one(ticket.tag);
                parts.shared.stats.published.fetch_add(1, Ordering::Relaxed);
                parts.count_published(ticket.destination, 1);
                parts.owe_marks([ticket.message_id]);
            }
            Outcome::Rejected(error) => self.rejected(parts, ticket.tag, ticket.message_id, error),
            Outcome::Retry(error) | Outcome::Ambiguous(error) => {
                parts.end_with(error.context(format!("message {}", ticket.message_id)));
            }
        }
    }

    /// What follows is the policy's: a row's fault is recorded FAILED, an
    /// operator's holds the row until `relay.operator_error_threshold`
    /// refusals end the session (at once when the refusal stopped the
    /// producer), anything else ends it.
    fn rejected<K: Sink, L: Ledger>(
        &mut self,
        parts: &mut Parts<'_, K, L>,
        tx: TxSeq,
        id: Uuid,
        error: Error,
    ) {
        let stopped = parts.sink.fatal_error();
        match policy::next(Refusal::Refused(error.code()), Mode::Idempotent) {
            Next::RecordFailed => {
                parts.failures.push(Failure {
                    tx: Some(tx),
                    id,
                    error,
                });
                self.refused.push(id);
                if let Some(stopped) = stopped {
                    parts.end_with(stopped.context(format!("after message {id} was refused")));
                }
            }
            Next::Hold => {
                self.operator_rejections += 1;
                if stopped.is_some() || self.operator_rejections >= parts.shared.operator_refusals {
                    parts.end_with(error.context(format!("message {id}")));
                }
            }
            Next::End(_) => parts.end_with(error.context(format!("message {id}"))),
        }
    }

    async fn committed<K: Sink, L: Ledger>(
        &mut self,
        _: &mut Parts<'_, K, L>,
        _: Lsn,
        _: Timestamp,
    ) -> Result<(), Error> {
        Ok(())
    }

    async fn after_step<K: Sink, L: Ledger>(
        &mut self,
        parts: &mut Parts<'_, K, L>,
    ) -> Result<(), Error> {
        parts.record_failures(Guard::Pending).await?;
        if !self.refused.is_empty() {
            parts.shared.add_poison(self.refused.drain(..));
        }
        let latency = &parts.shared.metrics.commit_to_ack;
        let mut now = None;
        let settled = parts.watermark.advance_with(|at| {
            let now = *now.get_or_insert_with(unix_micros);
            latency.observe(seconds_since(now, at));
        });
        if let Some(lsn) = settled {
            // Every row of the transactions up to `lsn` is confirmed (and
            // owed its mark) or recorded FAILED.
            parts.settle(lsn);
        }
        Ok(())
    }

    fn due(&self) -> Option<Instant> {
        None
    }

    async fn on_due<K: Sink, L: Ledger>(&mut self, _: &mut Parts<'_, K, L>) -> Result<(), Error> {
        Ok(())
    }

    fn reads_while_draining(&self, _: Current) -> bool {
        false
    }

    async fn drained<K: Sink, L: Ledger>(
        &mut self,
        parts: &mut Parts<'_, K, L>,
        _: Current,
    ) -> Result<bool, Error> {
        Ok(parts.in_flight.messages == 0 && parts.failures.is_empty())
    }

    fn oldest_unsettled<K, L>(&self, parts: &Parts<'_, K, L>) -> Option<i64> {
        parts.watermark.oldest_commit()
    }

    async fn finish_backlog<K: Sink, L: Ledger>(
        &mut self,
        _: &mut Parts<'_, K, L>,
        _: Guard,
    ) -> Result<(), Error> {
        Ok(())
    }

    async fn close<K: Sink, L: Ledger>(&mut self, _: &mut Parts<'_, K, L>) -> Option<Error> {
        None
    }
}
