//! `outbox-cdc run`: slot → mapper → Kafka → watermark → slot.
//!
//! [`Relay::prepare`] checks both sides before anything touches the slot.
//! [`Relay::run`] runs sessions under the [`Supervisor`]: one session is one
//! replication stream and one producer. A rejected message is recorded as
//! FAILED and the stream goes on; an ambiguous or transient failure ends the
//! session, and the next one starts from the last settled LSN with a new
//! producer, publishing the unsettled messages again under the same ids
//! (never one message alone: that could reorder its key).

mod handover;
mod marks;
mod monitor;
mod redrive;
mod session;
mod stats;
mod supervisor;
mod transaction;
mod watermark;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::ClientConfig;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

pub use redrive::Redriven;
pub use stats::RelayStats;
pub use supervisor::{Attempt, Backoff, SessionEnd, Supervisor};

use crate::config::{Config, Env};
use crate::contract::value::Uuid;
use crate::error::{Code, Error};
use crate::kafka::progress::Progress;
use crate::kafka::{probe, settings};
use crate::metrics::Metrics;
use crate::pg::checks::{self, Purpose};
use crate::pg::lsn::Lsn;
use crate::pg::marks::Marker;
use crate::pg::{connect, grants};
use crate::preflight;
use crate::replication::{self, Feedback, SourceOptions, Stream};
use marks::PublishedMarks;
use session::Session;

pub struct Relay {
    cfg: Config,
    env: Arc<Env>,
    kafka: ClientConfig,
    source: SourceOptions,
    marker: Arc<Marker>,
    /// FAILED rows, the hand-over and the preflight; reconnected by the
    /// next session when a restart finds it closed.
    sql: tokio::sync::Mutex<Client>,
    /// Settled position, across sessions: a new session starts after it.
    feedback: Feedback,
    marks: Option<PublishedMarks>,
    /// PUBLISHED marks cannot reach PostgreSQL: the session must end.
    marks_stalled: Arc<tokio::sync::Notify>,
    /// A session has streamed from the slot: a later session that finds it
    /// missing must not create it again.
    streamed: AtomicBool,
    /// Transactional delivery's progress in Kafka; `None` when idempotent.
    progress: Option<Arc<Progress>>,
    /// Rows Kafka refused inside an aborted transaction, recorded FAILED:
    /// left out when their transaction is published again.
    poison: std::sync::Mutex<HashSet<Uuid>>,
    pub stats: Arc<RelayStats>,
    metrics: Arc<Metrics>,
}

impl Relay {
    /// Validates both sides before anything touches the slot: Kafka answers,
    /// the SQL and replication log-ins work, this relay may own the outbox,
    /// and no cutover is half done.
    pub async fn prepare(cfg: Config, env: Arc<Env>) -> Result<Relay, Error> {
        let kafka = settings::producer_config(&cfg, &*env)?;
        probe::reachable(&cfg, &*env).await?;
        let sql = connect::connect(&cfg, &*env).await?;
        preflight::first_error(grants::findings(&sql, &cfg).await?)?;
        let ownership = checks::ownership(&sql, &cfg).await?;
        preflight::first_error(checks::ownership_findings(
            &ownership,
            &cfg,
            Purpose::Stream {
                create_slot: cfg.relay.create_slot,
            },
        ))?;
        handover::require_not_preparing(&sql, &cfg).await?;
        let source = SourceOptions::from_config(&cfg, &*env)?;
        replication::check_log_in(&source.connect).await?;
        let progress = match cfg.relay.transactional() {
            true => Some(Arc::new(Progress::open(&cfg, &*env).await?)),
            false => None,
        };
        let marker = Arc::new(Marker::new(&cfg));
        let stats = Arc::new(RelayStats::default());
        let metrics = Arc::new(Metrics::new(&cfg));
        let (feedback, _) = Feedback::new(Lsn::ZERO);
        let marks_stalled = Arc::new(tokio::sync::Notify::new());
        let marks = cfg.relay.mark_published.then(|| {
            PublishedMarks::start(
                cfg.clone(),
                env.clone(),
                stats.clone(),
                metrics.journaled.clone(),
                metrics.marks_written.clone(),
                feedback.clone(),
                marks_stalled.clone(),
            )
        });
        Ok(Relay {
            cfg,
            env,
            kafka,
            source,
            marker,
            sql: tokio::sync::Mutex::new(sql),
            feedback,
            marks,
            marks_stalled,
            streamed: AtomicBool::new(false),
            progress,
            poison: std::sync::Mutex::new(HashSet::new()),
            stats,
            metrics,
        })
    }

    /// The relay's metrics and health, for the HTTP endpoint.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// Streams until `shutdown`, restarting sessions after transient
    /// failures. Queued PUBLISHED marks are flushed at any stop.
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<(), Error> {
        let mut supervisor =
            Supervisor::new(self.feedback.clone()).with_metrics(self.metrics.clone());
        let this = &self;
        let result = {
            let _guard =
                monitor::start(&self.cfg, self.env.clone(), self.metrics.clone(), &shutdown);
            supervisor
                .run(&shutdown, |attempt| this.session(attempt, &shutdown))
                .await
        };
        self.metrics.set_ended();
        self.stats
            .restarts
            .store(supervisor.restarts(), std::sync::atomic::Ordering::Relaxed);
        self.finish_marks().await;
        match &result {
            Ok(()) => tracing::info!(settled = %self.feedback.settled(), "relay stopped"),
            Err(e) => {
                tracing::error!(code = %e.code(), error = %e, settled = %self.feedback.settled(), "relay stopped")
            }
        }
        result
    }

    /// Publishes a READY hand-over list and returns without streaming: the
    /// backlog of a cutover to Debezium, which streams from its own slot.
    pub async fn handover_only(mut self, shutdown: CancellationToken) -> Result<(), Error> {
        let result = async {
            let sql = self.sql.lock().await;
            let mut session = Session::new(&self, &sql).await?;
            let end =
                handover::publish(&mut session, &sql, &self.cfg, &self.marker, &shutdown).await;
            let clean = matches!(end, Ok(None | Some(SessionEnd::Stopped)));
            if let Some(fatal) = session.close(clean).await.fatal {
                return Err(fatal);
            }
            match end? {
                None | Some(SessionEnd::Stopped) => Ok(()),
                Some(SessionEnd::Restart(reason)) => Err(handover::interrupted(reason)),
            }
        }
        .await;
        self.finish_marks().await;
        result
    }

    /// Publishes FAILED rows matching `filter` again and returns what it
    /// did; a row that fails again stays FAILED with its new code.
    pub(crate) async fn redrive(
        mut self,
        filter: &crate::pg::handover::FailedFilter,
        shutdown: CancellationToken,
    ) -> Result<Redriven, Error> {
        let result = async {
            let sql = self.sql.lock().await;
            let mut session = Session::new(&self, &sql).await?;
            let done = redrive::publish(
                &mut session,
                &sql,
                &self.cfg,
                &self.marker,
                filter,
                &shutdown,
            )
            .await;
            if let Some(fatal) = session.close(done.is_ok()).await.fatal {
                return Err(fatal);
            }
            done
        }
        .await;
        self.finish_marks().await;
        result
    }

    async fn session(
        &self,
        attempt: Attempt,
        shutdown: &CancellationToken,
    ) -> Result<SessionEnd, Error> {
        let mut sql = self.sql.lock().await;
        if sql.is_closed() {
            *sql = connect::connect(&self.cfg, &*self.env).await?;
            tracing::info!("reconnected the bookkeeping connection");
        }
        let source = SourceOptions {
            streamed_before: self.streamed.load(Ordering::Relaxed),
            ..self.source.clone()
        };
        let mut stream = match Stream::open(&sql, &source, &self.feedback).await {
            Ok(s) => s,
            Err(e) => return Err(self.diagnose(&sql, e).await),
        };
        self.streamed.store(true, Ordering::Relaxed);
        self.metrics.set_standby(false);
        if attempt.after_standby {
            tracing::info!(slot = %self.source.slot, "the slot is free: taking over");
        }
        let mut session = match Session::new(self, &sql).await {
            Ok(s) => s,
            Err(e) => {
                let _ = stream.stop().await;
                return Err(e);
            }
        };
        // The backlog of a cutover goes first, while this session holds the slot.
        self.metrics.set_streaming(true);
        let end =
            match handover::publish(&mut session, &sql, &self.cfg, &self.marker, shutdown).await {
                Ok(None) => session.pump(&mut stream, shutdown).await,
                Ok(Some(end)) => Ok(end),
                Err(e) => Err(e),
            };
        self.metrics.set_streaming(false);
        let closed = session.close(matches!(end, Ok(SessionEnd::Stopped))).await;
        self.queue_marks(closed.published, closed.settles).await;
        // A fenced producer outranks whatever ended the session: this relay
        // must not start another.
        let end = match closed.fatal {
            Some(fatal) => Err(fatal),
            None => end,
        };
        if matches!(end, Ok(SessionEnd::Stopped)) {
            // The reader's last status update confirms what the marks allow.
            self.flush_marks().await;
        }
        let reader = stream.stop().await;
        match (end, reader) {
            (Err(e), _) => Err(e),
            (Ok(end), Ok(_)) => Ok(end),
            (Ok(SessionEnd::Stopped), Err(e)) => {
                tracing::warn!(code = %e.code(), error = %e, "the reader ended with an error while stopping");
                Ok(SessionEnd::Stopped)
            }
            // The stream ended under the session: the reader says why.
            (Ok(SessionEnd::Restart(_)), Err(e)) => Err(self.diagnose(&sql, e).await),
        }
    }

    /// A replication command the server refused names no specific code (a
    /// dropped publication, an invalidated slot share SQLSTATEs with other
    /// conditions): the preflight's rules read the catalog and name it.
    async fn diagnose(&self, sql: &Client, e: Error) -> Error {
        if e.code() != Code::PG_SERVER_ERROR {
            return e;
        }
        let found = async {
            let server = checks::server(sql).await?;
            let publication = checks::publication(
                sql,
                &self.source.publication,
                &self.source.schema,
                &self.source.table,
            )
            .await?;
            let slot = checks::slot(sql, &self.source.slot).await?;
            preflight::first_error([
                checks::publication_finding(
                    publication.as_ref(),
                    &self.source.publication,
                    &self.cfg.qualified_table(),
                ),
                checks::slot_finding(slot.as_ref(), &self.source.slot, &server, Purpose::Report),
            ])
        }
        .await;
        match found {
            Err(specific) if specific.code() != e.code() => {
                specific.context(format!("the server stopped the stream ({})", e.detail()))
            }
            _ => e,
        }
    }

    /// Queues rows to be marked PUBLISHED and the position their
    /// transactions end at (waits only when the marking task is far behind);
    /// without marks the position is settled at once.
    async fn queue_marks(&self, ids: Vec<Uuid>, settles: Option<Lsn>) {
        match &self.marks {
            Some(marks) => marks.queue(ids, settles).await,
            None => {
                if let Some(lsn) = settles {
                    self.feedback.settle(lsn);
                }
            }
        }
    }

    async fn flush_marks(&self) {
        if let Some(marks) = &self.marks {
            marks
                .flush(Duration::from_secs(self.cfg.relay.drain_timeout_secs))
                .await;
        }
    }

    async fn finish_marks(&mut self) {
        // A stop may take the drain's time again to write its marks.
        let within = Duration::from_secs(self.cfg.relay.drain_timeout_secs);
        if let Some(marks) = self.marks.take() {
            marks.finish(within).await;
        }
    }
}
