//! The relay's engine: slot → plan → Kafka → settlement → recorder → slot.
//!
//! A [`Relay`] is prepared for one job ([`jobs`]: streaming, a cutover's
//! hand-over, a redrive, a replay, the dead letters' redrive), each a type
//! with the settings it publishes under. [`Relay::prepare`] checks both
//! sides before anything touches the slot. Streaming runs sessions under
//! the [`Supervisor`]: one session is one
//! replication stream and one producer. A rejected message is recorded as
//! FAILED and the stream goes on; any other failure ends the session, and
//! the retry policy ([`crate::error::policy`]) decides what follows: a new
//! session from the last settled position, publishing the unsettled
//! messages again under the same ids (never one message alone: that could
//! reorder its key), a standby, or a stop.
//!
//! Seams: a session speaks to Kafka through [`sink::Sink`] and records rows
//! through [`ledger::Ledger`] and [`ledger::Journal`]; the unit tests in
//! `testing` put in-memory fakes behind them.

mod backlog;
mod jobs;
mod kafka_wait;
mod ledger;
mod monitor;
mod parts;
mod recheck;
mod recorder;
mod session;
mod settlement;
mod shared;
mod sink;
mod stats;
mod supervisor;
#[cfg(test)]
mod testing;
mod watermark;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::ClientConfig;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

pub use backlog::{Redriven, ReplayPlace};
pub use jobs::{DeadLetterRedrive, HandOver, Job, Publishing, Redrive, Replay, Streaming};
pub use shared::Marks;
pub use stats::RelayStats;
pub use supervisor::{Attempt, Backoff, Supervisor};

use crate::config::{Config, Delivery, Env, Objects, PostgresConfig, RelayConfig, Role};
use crate::contract::definition::{Contract, Status};
use crate::error::{policy, Code, Error};
use crate::finding;
use crate::kafka::held::{Held, Report};
use crate::kafka::progress::Progress;
use crate::kafka::topic_creation::TopicCreation;
use crate::kafka::{limits, probe, settings};
use crate::lsn::Lsn;
use crate::metrics::{HeldPartition, Metrics};
use crate::pg::checks::{self, Purpose};
use crate::pg::dead_letter::DeadLetters;
use crate::pg::journal::PublishedAmong;
use crate::pg::row_status::Marker;
use crate::pg::{connect, declaration, grants};
use crate::replication::{self, Feedback, SourceOptions, Stream};
use crate::router::Plan;
use crate::rules::When;
use ledger::{PgJournal, PgLedger};
use recorder::{Links, Recorder};
use session::{Flow, Session};
use settlement::{Idempotent, Mode, Settlement, Transactional};
use shared::Shared;
use sink::KafkaSink;

/// The engine, prepared for one job.
pub struct Relay<J> {
    job: J,
    /// Where the bookkeeping connection goes.
    postgres: PostgresConfig,
    /// The outbox's objects: the hand-over lists, the diagnosis.
    objects: Objects,
    env: Arc<Env>,
    producer: ClientConfig,
    /// The producer's `batch.size` when no topic's limit asks for less.
    batch_size: usize,
    /// Describes destinations' limits (and creates them).
    admin: Arc<sink::Admin>,
    /// The connector's `topic.creation.*`.
    creation: Option<Arc<TopicCreation>>,
    source: SourceOptions,
    marker: Marker,
    /// Where an outbox that keeps no status records what it cannot publish.
    dead_letters: DeadLetters,
    published: PublishedAmong,
    /// FAILED rows, the hand-over and the preflight; reconnected by the
    /// next session when a restart finds it closed.
    sql: tokio::sync::Mutex<Client>,
    /// A session has streamed from the slot: a later session that finds it
    /// missing must not create it again.
    streamed: AtomicBool,
    /// The server process of the last session's replication connection
    /// (0: none yet). A session that lost a silent connection ends that
    /// process itself rather than wait out the server's
    /// `wal_sender_timeout` while it holds the slot.
    walsender: AtomicI32,
    /// Transactional delivery's progress in Kafka; `None` when idempotent.
    progress: Option<Arc<Progress>>,
    mode: Mode,
    shared: Shared,
    /// The slot guard's settings; taken when `run` starts it.
    watch: Option<monitor::Watch>,
    pub stats: Arc<RelayStats>,
}

impl<J: Job> Relay<J> {
    /// Validates both sides before anything touches the slot: Kafka answers,
    /// the SQL and replication log-ins work, this relay may own the outbox,
    /// and no cutover is half done.
    pub async fn prepare(cfg: Config, env: Arc<Env>, job: J) -> Result<Relay<J>, Error> {
        let contract = cfg.outbox.contract()?;
        let publishing = job.publishing(&cfg, &contract);
        let stream = Purpose::Stream {
            create_slot: cfg.relay.create_slot,
        };
        finding::obey(
            When::Start,
            vec![checks::streaming_finding(
                &contract,
                stream,
                cfg.relay.mode(),
            )],
        )?;
        let cluster = cfg.kafka_cluster(&*env)?;
        let transactional_id = cfg
            .relay
            .transactional()
            .then_some(publishing.transactional_id.as_str());
        let producer = settings::producer_config(&cluster, transactional_id);
        probe::reachable(&cluster).await?;
        let objects = cfg.objects();
        let sql = connect::connect(&cfg.postgres, &*env).await?;
        let claim = (job.source() == jobs::Source::Slot).then_some(cfg.relay.role);
        start_rules(&sql, &contract, &objects, stream, claim).await?;
        let source = SourceOptions::new(&cfg.postgres, &cfg.outbox, &cfg.relay, &*env)?;
        replication::check_log_in(&source.connect).await?;
        let (mode, progress) = match cfg.relay.delivery() {
            Delivery::Transactional(t) => {
                let group = publishing.transactional_id.clone();
                let progress = Progress::open(&cluster, &t.progress_topic, group).await?;
                (Mode::Transactional, Some(Arc::new(progress)))
            }
            Delivery::Idempotent => (Mode::Idempotent, None),
        };
        let stats = Arc::new(RelayStats::default());
        let journal = (publishing.marks == Marks::Journaled)
            .then(|| PgJournal::new(cfg.postgres.clone(), &cfg.outbox, env.clone()));
        let rows = Contract::messaging(&publishing.topic_prefix).with_context(contract.context);
        let plan = Plan::of_definition(&rows)?.with_run(&source.run);
        let mut shared = shared(&cfg.relay, &publishing, plan, journal, stats.clone());
        shared.status = contract.status;
        shared.delivery_deadline = settings::delivery_deadline(&producer);
        if let Some(o) = &cfg.otel {
            let tracing =
                crate::otel::Tracing::start(o, &publishing.topic_prefix, shared.metrics.clone())?;
            shared.otel = Some(Arc::new(tracing));
        }
        let batch_size = limits::configured_batch_size(&cluster)?;
        let admin = limits::admin(&cluster)?;
        let watch = Some(monitor::Watch::new(
            &cfg.postgres,
            &cfg.relay,
            cluster,
            env.clone(),
            &objects,
        ));
        Ok(Relay {
            job,
            watch,
            marker: Marker::new(&cfg.outbox),
            dead_letters: DeadLetters::new(&cfg.outbox),
            published: PublishedAmong::new(&cfg.outbox),
            postgres: cfg.postgres,
            objects,
            env,
            producer,
            batch_size,
            admin: Arc::new(admin),
            creation: cfg.kafka.topic_creation()?.map(Arc::new),
            source,
            sql: tokio::sync::Mutex::new(sql),
            streamed: AtomicBool::new(false),
            walsender: AtomicI32::new(0),
            progress,
            mode,
            shared,
            stats,
        })
    }

    /// The relay's metrics and health, for the HTTP endpoint.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.shared.metrics.clone()
    }

    /// A new producer, batching under every limit learned so far.
    fn sink(&self) -> Result<KafkaSink, Error> {
        let batch_size = self.shared.limits.batch_size(self.batch_size);
        if batch_size < self.batch_size {
            tracing::info!(
                batch_size,
                "batching under the smallest destination limit learned"
            );
        }
        KafkaSink::new(
            &self.producer,
            batch_size,
            sink::SinkParts {
                progress: self.progress.clone(),
                admin: self.admin.clone(),
                creation: self.creation.clone(),
                held: Some(self.held_report()),
            },
        )
    }

    /// Where the producer reports the partitions Kafka holds: the gauge
    /// and `/readyz`'s body.
    fn held_report(&self) -> Report {
        let metrics = self.shared.metrics.clone();
        Arc::new(move |held: Vec<Held>| {
            metrics.set_held(
                held.into_iter()
                    .map(|h| HeldPartition {
                        destination: h.topic,
                        partition: h.partition,
                        leader: h.leader,
                        since_micros: h.since_micros,
                    })
                    .collect(),
            );
        })
    }

    fn ledger<'s>(&'s self, sql: &'s Client) -> PgLedger<'s> {
        PgLedger {
            sql,
            marker: &self.marker,
            dead_letters: &self.dead_letters,
            published: &self.published,
            within: self.postgres.query_timeout(),
        }
    }

    async fn session(&self, attempt: Attempt, shutdown: &CancellationToken) -> Result<(), Error> {
        match self.mode {
            Mode::Idempotent => self.stream::<Idempotent>(attempt, shutdown).await,
            Mode::Transactional => self.stream::<Transactional>(attempt, shutdown).await,
        }
    }

    /// One session: the stream, the backlog if a cutover left one, then
    /// streaming until shutdown or a failure.
    async fn stream<S: Settlement>(
        &self,
        attempt: Attempt,
        shutdown: &CancellationToken,
    ) -> Result<(), Error> {
        let mut sql = self.sql.lock().await;
        if !connect::answers(&sql, self.postgres.query_timeout()).await {
            *sql = connect::connect(&self.postgres, &*self.env).await?;
            tracing::info!("reconnected the bookkeeping connection");
        }
        // Debezium makes a run id each time its task starts; the relay, each
        // time a session does.
        self.source.run.renew();
        let source = SourceOptions {
            streamed_before: self.streamed.load(Ordering::Relaxed),
            own_walsender: match self.walsender.load(Ordering::Relaxed) {
                0 => None,
                pid => Some(pid),
            },
            ..self.source.clone()
        };
        let mut stream = match Stream::open(&sql, &source, &self.shared.feedback).await {
            Ok(s) => s,
            Err(e) => return Err(self.diagnose(&sql, e).await),
        };
        self.streamed.store(true, Ordering::Relaxed);
        self.walsender.store(stream.walsender, Ordering::Relaxed);
        let metrics = &self.shared.metrics;
        metrics.set_role(crate::metrics::Role::Active);
        if attempt.after_standby {
            tracing::info!(slot = %self.source.slot, "the slot is free: taking over");
        }
        let opened = match self.sink() {
            Ok(sink) => Session::<_, _, S>::open(&self.shared, sink, self.ledger(&sql)).await,
            Err(e) => Err(e),
        };
        let mut session = match opened {
            Ok(s) => s,
            Err(e) => {
                let _ = stream.stop().await;
                return Err(e);
            }
        };
        metrics.streaming_began();
        // A table that keeps no status has no cutover, so no hand-over.
        let handed_over = match self.shared.status {
            Status::Kept => backlog::hand_over(&mut session, &sql, &self.objects, shutdown).await,
            Status::NotKept => Ok(Flow::Continue),
        };
        let end = match handed_over {
            Ok(Flow::Continue) => {
                session
                    .pump(&mut stream.events, &stream.stats, shutdown)
                    .await
            }
            Ok(Flow::Stopped) => Ok(()),
            Err(e) => Err(e),
        };
        metrics.streaming_ended();
        let end = session.finish(end).await;
        let reader = stream.stop().await;
        match (end, reader) {
            (Ok(()), Ok(_)) => Ok(()),
            (Ok(()), Err(e)) => {
                crate::log_error!(warn, e, "the reader ended with an error while stopping");
                Ok(())
            }
            // The stream ended under the session: the reader says why.
            (Err(e), Err(r)) if policy::directive(&e) == policy::Directive::Retry => {
                let within = self.postgres.query_timeout();
                match tokio::time::timeout(within, self.diagnose(&sql, r.clone())).await {
                    Ok(diagnosed) => Err(diagnosed),
                    Err(_) => Err(r),
                }
            }
            (Err(e), _) => Err(e),
        }
    }

    /// A replication command the server refused names no specific code (a
    /// dropped publication, an invalidated slot share SQLSTATEs with other
    /// conditions): the preflight's rules read the catalog and name it.
    /// The walsender decodes a commit once it is in the WAL, a moment before
    /// the committing backend leaves the process array: a catalog read in
    /// that moment still sees the old state, so the catalog is read up to
    /// [`DIAGNOSIS_READS`] times before the server's own words stand.
    async fn diagnose(&self, sql: &Client, e: Error) -> Error {
        name_refusal(e, || self.catalog_findings(sql), DIAGNOSIS_PAUSE).await
    }

    /// The preflight's rules for the publication and the slot, as the
    /// catalog stands now.
    async fn catalog_findings(&self, sql: &Client) -> Result<(), Error> {
        let src = &self.source;
        let server = checks::server(sql).await?;
        let publication =
            checks::publication(sql, &src.publication, &src.schema, &src.table).await?;
        let slot = checks::slot(sql, &src.slot).await?;
        finding::obey(
            When::Session,
            [
                checks::publication_finding(
                    publication.as_ref(),
                    &src.publication,
                    &self.objects.qualified_table(),
                    self.shared.status,
                ),
                checks::slot_finding(slot.as_ref(), &src.slot, &server, Purpose::Report),
            ],
        )
    }

    async fn finish_marks(&mut self) {
        // A stop may take the drain's time again to record its marks.
        let within = self.shared.drain_timeout();
        if let Some(recorder) = self.shared.recorder.take() {
            recorder.finish(within).await;
        }
    }
}

/// Catalog reads a refusal without a specific code gets before the server's
/// words stand, [`DIAGNOSIS_PAUSE`] apart: enough for a commit the walsender
/// already decoded to become visible.
const DIAGNOSIS_READS: u32 = 3;
const DIAGNOSIS_PAUSE: Duration = Duration::from_millis(200);

/// The specific code `read` finds for a refusal the server gave no specific
/// code, or the refusal as it came.
async fn name_refusal<F, Fut>(e: Error, mut read: F, pause: Duration) -> Error
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    if e.code() != Code::PG_SERVER_ERROR {
        return e;
    }
    for n in 1..=DIAGNOSIS_READS {
        match read().await {
            Err(specific) if specific.code() != e.code() => {
                return specific.context(format!("the server stopped the stream ({})", e.detail()));
            }
            Err(_) => return e,
            Ok(()) if n < DIAGNOSIS_READS => tokio::time::sleep(pause).await,
            Ok(()) => {}
        }
    }
    e
}

/// Attempts a one-off backlog gets to learn topics' limits: a few topics' worth.
const RELEARNS: usize = 8;

/// Runs a one-off job (a hand-over, a redrive, a replay) again while it
/// ends only to batch under a topic limit it just learned: [`RELEARNS`]
/// times. The one place a backlog is tried again: it runs without the
/// supervisor, and nothing else it meets passes by itself.
async fn relearning<T, F, Fut>(mut attempt: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let mut result = attempt().await;
    for _ in 0..RELEARNS {
        match &result {
            Err(e) if e.code() == Code::BATCH_OVER_TOPIC_LIMIT => {
                crate::log_error!(info, e, "publishing again under the limit");
                result = attempt().await;
            }
            _ => break,
        }
    }
    result
}

/// The rules `run` obeys at start (`rules::When::Start`). For the
/// platform's table: the privileges first, since reading the others' facts
/// needs them, then ownership and the hand-over. For a table that keeps no
/// status: its dead-letter table's privileges and that it fits the
/// contract (the platform's objects, modes, fence and hand-over, are not
/// there to check). Then, for a job that streams the slot (`claim`), the
/// declaration of the outbox's one relay.
async fn start_rules(
    sql: &Client,
    contract: &Contract,
    objects: &Objects,
    stream: Purpose,
    claim: Option<Role>,
) -> Result<(), Error> {
    let outbox = &objects.outbox;
    match contract.status {
        Status::Kept => {
            finding::obey(When::Start, grants::findings(sql, objects).await?)?;
            let ownership = checks::ownership(sql, objects).await?;
            let mut findings = checks::ownership_findings(&ownership, objects, stream);
            findings.push(backlog::handover_finding(sql, objects).await?);
            finding::obey(When::Start, findings)?;
        }
        Status::NotKept => {
            finding::obey(When::Start, grants::findings(sql, objects).await?)?;
            let columns = checks::table_columns(sql, &outbox.schema, &outbox.table).await?;
            let fit = checks::contract_findings(
                contract,
                &outbox.topic_prefix,
                &outbox.qualified_table(),
                &columns,
            );
            finding::obey(When::Start, fit)?;
        }
    }
    match claim {
        Some(role) => declared(sql, objects, role).await,
        None => Ok(()),
    }
}

/// One relay per outbox, whatever its contract: the declaration must name
/// this relay's slot and database system, or nothing yet. Once every start
/// rule passed, an undeclared outbox is claimed (of two relays claiming at
/// once, one is refused) and a copy declares itself.
async fn declared(sql: &Client, objects: &Objects, role: Role) -> Result<(), Error> {
    let outbox = &objects.outbox;
    let system = declaration::system_identifier(sql).await?;
    let found = declaration::read(sql, outbox).await?;
    let judged = |d: &declaration::Declaration| {
        finding::obey(
            When::Start,
            vec![checks::declaration_finding(d, objects, &system, role)],
        )
    };
    judged(&found)?;
    match (role, &found.held) {
        (Role::Relay, None) => {
            // Another slot streaming it now is a second reader from here on
            // (`check`, the gauge): say so at once.
            let readers = declaration::readers(sql, outbox).await?;
            for f in checks::readers_findings(&readers, &found, objects, None, role) {
                if f.code == Some(Code::SECOND_OUTBOX_READER) {
                    tracing::warn!(code = %Code::SECOND_OUTBOX_READER, "{}", f.detail);
                }
            }
            let after = declaration::claim(sql, outbox, &objects.slot, &system).await?;
            judged(&after)?;
            tracing::info!(slot = %objects.slot, table = %outbox.qualified_table(), "declared this relay the outbox's one relay (it was undeclared)");
            Ok(())
        }
        (Role::Copy, _) => declaration::declare_copy(sql, outbox, &objects.slot, &system).await,
        (Role::Relay, Some(_)) => Ok(()),
    }
}

/// The sessions' shared state under the job's settings, with the recorder
/// started on `journal` when confirmed ids are journaled.
fn shared(
    relay: &RelayConfig,
    publishing: &Publishing,
    plan: Plan,
    journal: Option<PgJournal>,
    stats: Arc<RelayStats>,
) -> Shared {
    let metrics = Arc::new(Metrics::new(relay.metric_limits()));
    let (feedback, _) = Feedback::new(Lsn::ZERO);
    let trouble = Arc::new(recorder::Trouble::default());
    let recorder = journal.map(|journal| {
        let links = Links {
            stats: stats.clone(),
            journaled: metrics.journaled.clone(),
            folded: metrics.marks_written.clone(),
            feedback: feedback.clone(),
            trouble: trouble.clone(),
        };
        Recorder::start(journal, links)
    });
    Shared {
        relay: relay.clone(),
        plan: Arc::new(plan),
        status: Status::Kept,
        marks: publishing.marks,
        operator_refusals: publishing.operator_refusals,
        metrics,
        stats,
        feedback,
        recorder,
        trouble,
        poison: std::sync::Mutex::new(HashSet::new()),
        rechecked: Default::default(),
        limits: limits::Limits::default(),
        otel: None,
        delivery_deadline: settings::default_delivery_deadline(),
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    fn refused() -> Error {
        Error::new(
            Code::PG_SERVER_ERROR,
            "streaming from slot s: publication \"p\" does not exist (SQLSTATE 42704)",
        )
    }

    /// Answers `clean` reads that find nothing wrong, then one that names
    /// the publication missing; counts the reads.
    fn catalog(
        clean: u32,
        reads: &Cell<u32>,
    ) -> impl FnMut() -> std::future::Ready<Result<(), Error>> + '_ {
        move || {
            reads.set(reads.get() + 1);
            std::future::ready(match reads.get() > clean {
                true => Err(Error::new(
                    Code::PUBLICATION_MISSING,
                    "publication p does not exist",
                )),
                false => Ok(()),
            })
        }
    }

    #[tokio::test]
    async fn a_refusal_is_named_by_a_catalog_that_shows_the_drop_a_moment_late() {
        let reads = Cell::new(0);
        let named = name_refusal(refused(), catalog(2, &reads), Duration::ZERO).await;
        assert_eq!(named.code(), Code::PUBLICATION_MISSING);
        assert!(named.to_string().contains("SQLSTATE 42704"), "{named}");
        assert_eq!(reads.get(), 3);
    }

    #[tokio::test]
    async fn a_catalog_that_stays_clean_leaves_the_servers_words_after_three_reads() {
        let reads = Cell::new(0);
        let kept = name_refusal(refused(), catalog(u32::MAX, &reads), Duration::ZERO).await;
        assert_eq!(kept.code(), Code::PG_SERVER_ERROR);
        assert_eq!(reads.get(), 3);
    }

    #[tokio::test]
    async fn a_refusal_with_its_own_code_reads_nothing() {
        let reads = Cell::new(0);
        let lost = Error::new(Code::SLOT_MISSING, "slot s does not exist");
        let kept = name_refusal(lost, catalog(0, &reads), Duration::ZERO).await;
        assert_eq!(kept.code(), Code::SLOT_MISSING);
        assert_eq!(reads.get(), 0);
    }
}
