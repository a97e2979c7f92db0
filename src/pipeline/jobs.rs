//! What a relay is for. Each job says what it is through its own type, with
//! the settings it publishes under ([`Publishing`]): the topics its rows go
//! to, its transactional id, how many of an operator's refusals end a
//! session, and what becomes of the ids Kafka confirmed. No command edits
//! the configuration to select a job; `[relay]` and `[outbox]` stay as the
//! user wrote them.
//!
//! - [`Streaming`] (`run`): the slot, under the supervisor.
//! - [`HandOver`] (`run --handover-only`): a cutover's backlog to Debezium.
//! - [`Redrive`]: FAILED rows again, marked PUBLISHED once in Kafka.
//! - [`Replay`]: a window's rows again, whatever their status, writing none.
//! - [`DeadLetterRedrive`]: an outbox that keeps no status, its dead-letter
//!   table published again, each letter removed once in Kafka.
//!
//! Every job runs the same sessions: records settle by the same rules and
//! `error::policy` decides what follows each failure.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::backlog::{self, ReplayPlace};
use super::ledger::Redelivered;
use super::session::Session;
use super::settlement::{Idempotent, Mode, Settlement, Transactional};
use super::shared::Marks;
use super::{monitor, relearning, Redriven, Relay, Supervisor};
use crate::config::Config;
use crate::contract::definition::{Contract, Status};
use crate::error::Error;
use crate::pg::dead_letter::Selection;
use crate::pg::handover::FailedFilter;

/// What a job publishes under, where streaming reads `[relay]` and
/// `[outbox]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publishing {
    /// The messaging contract's records go to `topic_prefix + destination`.
    pub(crate) topic_prefix: String,
    /// The producer's `transactional.id` in transactional delivery, and the
    /// group its progress is committed under.
    pub(crate) transactional_id: String,
    /// Records the broker refuses for an operator's reason that one session
    /// takes before it ends (idempotent delivery).
    pub(crate) operator_refusals: usize,
    pub(crate) marks: Marks,
}

/// Where a job reads what it publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The outbox's slot: the job is the outbox's one relay (or a declared
    /// copy), so the declaration is judged and claimed.
    Slot,
    /// Rows or letters read by SQL, beside whatever relay holds the outbox.
    Table,
}

/// A job of the relay's engine.
pub trait Job: Send + Sync {
    /// The settings it publishes under, from the configuration as the user
    /// wrote it.
    fn publishing(&self, cfg: &Config, contract: &Contract) -> Publishing;

    /// Where it reads: streaming reads the slot, the others the tables.
    fn source(&self) -> Source {
        Source::Table
    }
}

/// An operator's refusal ends a one-off job's session at once: it has no
/// supervisor to wait for the operator.
const AT_ONCE: usize = 1;

/// Streaming's settings: `[outbox]`'s prefix, `[relay]`'s id and threshold,
/// and the journal when the table keeps status and `relay.mark_published`
/// asks for it.
fn streaming(cfg: &Config, contract: &Contract) -> Publishing {
    Publishing {
        topic_prefix: cfg.outbox.topic_prefix.clone(),
        transactional_id: cfg.transactional_id(),
        operator_refusals: cfg.relay.operator_error_threshold,
        marks: match (contract.status, cfg.relay.mark_published) {
            (Status::Kept, true) => Marks::Journaled,
            _ => Marks::Off,
        },
    }
}

/// `run`: the slot, under the supervisor, until shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Streaming;

impl Job for Streaming {
    fn publishing(&self, cfg: &Config, contract: &Contract) -> Publishing {
        streaming(cfg, contract)
    }

    fn source(&self) -> Source {
        Source::Slot
    }
}

/// `run --handover-only`: a READY hand-over list published, then the relay
/// returns without streaming (a cutover to Debezium, which streams from
/// its own slot). It publishes as streaming does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandOver;

impl Job for HandOver {
    fn publishing(&self, cfg: &Config, contract: &Contract) -> Publishing {
        streaming(cfg, contract)
    }
}

/// `redrive`: the FAILED rows a filter selects, published again and marked
/// PUBLISHED by the job itself; a row that fails again stays FAILED with
/// its new code. Its transactional id is its own, so it never fences the
/// running relay.
#[derive(Debug, Clone)]
pub struct Redrive {
    pub(crate) filter: FailedFilter,
}

impl Redrive {
    pub(crate) fn new(filter: FailedFilter) -> Redrive {
        Redrive { filter }
    }
}

impl Job for Redrive {
    fn publishing(&self, cfg: &Config, contract: &Contract) -> Publishing {
        redriving(cfg, contract)
    }
}

/// A redrive's settings: streaming's topics, its own transactional id, an
/// operator's refusal ends it, and it records what Kafka confirmed itself.
fn redriving(cfg: &Config, contract: &Contract) -> Publishing {
    Publishing {
        transactional_id: format!("{}.redrive", cfg.transactional_id()),
        operator_refusals: AT_ONCE,
        marks: Marks::Taken,
        ..streaming(cfg, contract)
    }
}

/// `replay`: a window's rows published again under their own ids, to the
/// configured topics or under another prefix, writing no row's status. Its
/// transactional id is its own.
pub struct Replay {
    /// Where the window stands, kept across the attempts of one run.
    place: tokio::sync::Mutex<ReplayPlace>,
    /// Another prefix than `[outbox]`'s, for a rebuild.
    to_topic_prefix: Option<String>,
}

impl Replay {
    pub(crate) fn new(place: ReplayPlace, to_topic_prefix: Option<String>) -> Replay {
        Replay {
            place: tokio::sync::Mutex::new(place),
            to_topic_prefix,
        }
    }
}

impl Job for Replay {
    fn publishing(&self, cfg: &Config, _: &Contract) -> Publishing {
        replaying(cfg, self.to_topic_prefix.as_deref())
    }
}

/// A replay's settings: the prefix it was given, its own transactional id,
/// and nothing recorded.
fn replaying(cfg: &Config, to_topic_prefix: Option<&str>) -> Publishing {
    Publishing {
        topic_prefix: to_topic_prefix
            .unwrap_or(&cfg.outbox.topic_prefix)
            .to_string(),
        transactional_id: format!("{}.replay", cfg.transactional_id()),
        operator_refusals: AT_ONCE,
        marks: Marks::Off,
    }
}

/// `redrive` of an outbox that keeps no status: the dead-letter table's
/// records a selection takes, published again in the order they were
/// written; a letter Kafka confirmed is removed, one refused again stays
/// with its new code and words, one that was never routed stays.
#[derive(Debug, Clone)]
pub struct DeadLetterRedrive {
    pub(crate) selection: Selection,
}

impl DeadLetterRedrive {
    pub(crate) fn new(selection: Selection) -> DeadLetterRedrive {
        DeadLetterRedrive { selection }
    }
}

impl Job for DeadLetterRedrive {
    fn publishing(&self, cfg: &Config, contract: &Contract) -> Publishing {
        redriving(cfg, contract)
    }
}

impl Relay<Streaming> {
    /// Streams until `shutdown`, starting sessions again as the retry
    /// policy says. Queued marks are recorded at any stop.
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<(), Error> {
        let metrics = self.shared.metrics.clone();
        let watch = self.watch.take();
        let mut supervisor =
            Supervisor::new(self.shared.feedback.clone()).with_metrics(metrics.clone());
        let this = &self;
        let result = {
            let _guard = watch.map(|w| monitor::start(w, metrics.clone(), &shutdown));
            supervisor
                .run(&shutdown, |attempt| this.session(attempt, &shutdown))
                .await
        };
        metrics.set_ended();
        self.stats
            .restarts
            .store(supervisor.restarts(), Ordering::Relaxed);
        self.finish_marks().await;
        if let Some(otel) = self.shared.otel.clone() {
            // The exporter's last batch, off the runtime's threads.
            let _ =
                tokio::task::spawn_blocking(move || otel.shutdown(Duration::from_secs(5))).await;
        }
        let settled = self.shared.feedback.settled();
        match &result {
            Ok(()) => tracing::info!(%settled, "relay stopped"),
            Err(e) => crate::log_error!(error, e, %settled, "relay stopped"),
        }
        result
    }
}

impl Relay<HandOver> {
    /// Publishes a READY hand-over list and returns without streaming.
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<(), Error> {
        let result = relearning(|| async {
            match self.mode {
                Mode::Idempotent => self.handover::<Idempotent>(&shutdown).await,
                Mode::Transactional => self.handover::<Transactional>(&shutdown).await,
            }
        })
        .await;
        self.finish_marks().await;
        result
    }

    async fn handover<S: Settlement>(&self, shutdown: &CancellationToken) -> Result<(), Error> {
        let sql = self.sql.lock().await;
        let sink = self.sink()?;
        let mut session = Session::<_, _, S>::open(&self.shared, sink, self.ledger(&sql)).await?;
        let end = backlog::hand_over(&mut session, &sql, &self.objects, shutdown)
            .await
            .map_err(backlog::interrupted);
        session.finish(end.map(|_| ())).await
    }
}

impl Relay<Redrive> {
    /// Publishes the FAILED rows the filter selects again and returns what
    /// it did.
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<Redriven, Error> {
        let result = relearning(|| async {
            match self.mode {
                Mode::Idempotent => self.redrive::<Idempotent>(&shutdown).await,
                Mode::Transactional => self.redrive::<Transactional>(&shutdown).await,
            }
        })
        .await;
        self.finish_marks().await;
        result
    }

    async fn redrive<S: Settlement>(
        &self,
        shutdown: &CancellationToken,
    ) -> Result<Redriven, Error> {
        let sql = self.sql.lock().await;
        let sink = self.sink()?;
        let mut session = Session::<_, _, S>::open(&self.shared, sink, self.ledger(&sql)).await?;
        let filter = &self.job.filter;
        let done = backlog::redrive(&mut session, &sql, &self.objects, filter, shutdown).await;
        let end = done.as_ref().map(|_| ()).map_err(Clone::clone);
        session.finish(end).await.and(done)
    }
}

impl Relay<Replay> {
    /// Publishes the window's rows again, under their own ids and without
    /// writing a row's status; the place returned holds what the
    /// destination refused.
    pub async fn run(self, shutdown: CancellationToken) -> Result<ReplayPlace, Error> {
        relearning(|| async {
            let mut place = self.job.place.lock().await;
            match self.mode {
                Mode::Idempotent => self.replay::<Idempotent>(&mut place, &shutdown).await,
                Mode::Transactional => self.replay::<Transactional>(&mut place, &shutdown).await,
            }
        })
        .await?;
        Ok(self.job.place.into_inner())
    }

    async fn replay<S: Settlement>(
        &self,
        place: &mut ReplayPlace,
        shutdown: &CancellationToken,
    ) -> Result<(), Error> {
        let sql = self.sql.lock().await;
        let sink = self.sink()?;
        let ledger = place.ledger();
        let mut session = Session::<_, _, S>::open(&self.shared, sink, ledger).await?;
        let done = backlog::replay(&mut session, &sql, place, shutdown).await;
        session.finish(done).await
    }
}

impl Relay<DeadLetterRedrive> {
    /// Publishes the selected dead letters again and returns what it did.
    /// A table that keeps no status is published idempotently.
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<Redriven, Error> {
        let result = relearning(|| self.redeliver(&shutdown)).await;
        self.finish_marks().await;
        result
    }

    async fn redeliver(&self, shutdown: &CancellationToken) -> Result<Redriven, Error> {
        let sql = self.sql.lock().await;
        let sink = self.sink()?;
        let ledger = Redelivered {
            sql: &sql,
            letters: &self.dead_letters,
            within: self.postgres.query_timeout(),
        };
        let mut session = Session::<_, _, Idempotent>::open(&self.shared, sink, ledger).await?;
        let selection = &self.job.selection;
        let letters = &self.dead_letters;
        let done = backlog::dead_letters(&mut session, &sql, letters, selection, shutdown).await;
        let end = done.as_ref().map(|_| ()).map_err(Clone::clone);
        session.finish(end).await.and(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> Config {
        let text = format!(
            "[postgres]\ndbname = \"app\"\nuser = \"u\"\n[kafka]\nbootstrap_servers = \"k:9092\"\n{extra}"
        );
        Config::parse(&text, std::path::Path::new("t.toml"), &|_| None).unwrap()
    }

    #[test]
    fn each_job_publishes_under_settings_of_its_own_and_streaming_under_the_users() {
        let cfg = config("[relay]\noperator_error_threshold = 7\n");
        let kept = cfg.outbox.contract().unwrap();
        let streaming = Streaming.publishing(&cfg, &kept);
        assert_eq!(
            streaming,
            Publishing {
                topic_prefix: "outbox.".into(),
                transactional_id: "outbox-cdc.app.outbox_cdc_relay".into(),
                operator_refusals: 7,
                marks: Marks::Journaled,
            }
        );
        assert_eq!(HandOver.publishing(&cfg, &kept), streaming);
        let filter = FailedFilter {
            code: None,
            destination: None,
            since: None,
        };
        assert_eq!(
            Redrive::new(filter).publishing(&cfg, &kept),
            Publishing {
                transactional_id: "outbox-cdc.app.outbox_cdc_relay.redrive".into(),
                operator_refusals: 1,
                marks: Marks::Taken,
                ..streaming.clone()
            }
        );
        assert_eq!(
            replaying(&cfg, Some("rebuild.")),
            Publishing {
                topic_prefix: "rebuild.".into(),
                transactional_id: "outbox-cdc.app.outbox_cdc_relay.replay".into(),
                operator_refusals: 1,
                marks: Marks::Off,
            }
        );
        assert_eq!(replaying(&cfg, None).topic_prefix, "outbox.");
        let selection = Selection {
            code: None,
            topic: None,
            since: None,
        };
        let routed = config("[outbox]\ncontract = \"debezium\"\n");
        let not_kept = routed.outbox.contract().unwrap();
        assert_eq!(Streaming.publishing(&routed, &not_kept).marks, Marks::Off);
        let letters = DeadLetterRedrive::new(selection).publishing(&routed, &not_kept);
        assert_eq!(
            (letters.marks, letters.operator_refusals),
            (Marks::Taken, 1)
        );
        // The user's `mark_published = false` is streaming's only.
        let unmarked = config("[relay]\nmark_published = false\n");
        assert_eq!(Streaming.publishing(&unmarked, &kept).marks, Marks::Off);
    }
}
