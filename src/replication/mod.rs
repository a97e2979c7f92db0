//! The relay's source: our own walsender client, and [`Stream`], the one
//! call that the relay, the tests and the benchmark use to stream a slot.
//!
//! Layers, bottom up: [`codec`] frames backend messages (cancel-safe, so a
//! read can sit in `select!`); [`connection`] opens a `replication=database`
//! session over TCP or TLS and authenticates; [`slot`] speaks the slot
//! commands; [`pgoutput`] decodes the stream; [`relations`] turns tuples into
//! contract rows and stops on schema drift; [`reader`] streams committed
//! transactions and sends feedback.

pub(crate) mod codec;
pub mod connection;
mod events;
mod liveness;
pub(crate) mod pgoutput;
mod reader;
pub(crate) mod relations;
pub mod slot;
mod transport;

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

pub use connection::{ConnectOptions, Messages, ReplicationConnection, StartReplication, Values};
pub use reader::{Change, Event, Events, Feedback, ReaderStats, Tuning};

use crate::config::{Env, OutboxConfig, PostgresConfig, RelayConfig};
use crate::contract::definition::{Contract, ContractName, Status};
use crate::error::{Code, Error};
use crate::finding::{self, Finding};
use crate::lsn::Lsn;
use crate::pg::checks::{self, Purpose};
use crate::router::Run;
use crate::rules::{Rule, When};

/// Logs in for replication and asks IDENTIFY_SYSTEM: a role without
/// `REPLICATION` or a wrong password ends here, before any slot is touched.
pub async fn check_log_in(opts: &ConnectOptions) -> Result<(), Error> {
    let mut conn = ReplicationConnection::connect(opts).await?;
    let identified = conn.identify_system().await.map(|_| ());
    conn.close().await;
    identified
}

/// What to stream and how to reach it.
#[derive(Debug, Clone)]
pub struct SourceOptions {
    pub connect: ConnectOptions,
    pub slot: String,
    pub publication: String,
    pub schema: String,
    pub table: String,
    /// Create the slot when it is missing (`run` with `relay.create_slot`).
    pub create_slot: bool,
    /// Create the slot with `FAILOVER`, and turn it on for an existing one
    /// (`postgres.failover_slot`, PostgreSQL 17+).
    pub failover_slot: bool,
    /// This process has streamed from the slot: if it is missing now, it was
    /// lost (a failover to a standby without it, or dropped), and creating
    /// it again would skip what was committed since.
    pub streamed_before: bool,
    /// The server process of this relay's last replication connection,
    /// ended if it still holds the slot (see `Stream::walsender`).
    pub own_walsender: Option<i32>,
    /// Ask pgoutput for logical decoding messages (the relay's heartbeats,
    /// counted and never published).
    pub messages: bool,
    /// Values in binary form where the server offers it (14+); a routed
    /// contract's are always text, which its plan reads.
    pub binary: bool,
    /// The outbox's contract when it is not the messaging one: its rows are
    /// routed as the Outbox Event Router routes them.
    pub routed: Option<Arc<Contract>>,
    /// The run a routed outbox's records belong to (Debezium's `runId`
    /// context header): the relay renews it as each session starts.
    pub run: Arc<Run>,
    pub tuning: Tuning,
}

/// The prefix of the relay's heartbeat messages (`pg_logical_emit_message`).
pub const HEARTBEAT_PREFIX: &str = "outbox-cdc.heartbeat";

impl SourceOptions {
    /// The relay's source, from `[postgres]`, `[outbox]` and `[relay]`.
    pub fn new(
        postgres: &PostgresConfig,
        outbox: &OutboxConfig,
        relay: &RelayConfig,
        env: &Env,
    ) -> Result<SourceOptions, Error> {
        Ok(SourceOptions {
            connect: ConnectOptions::from_postgres(postgres, env)?,
            slot: postgres.slot.clone(),
            messages: relay.heartbeat_interval_secs > 0,
            binary: relay.pgoutput_binary,
            routed: routed(outbox)?,
            run: Arc::new(Run::starting()),
            publication: postgres.publication.clone(),
            schema: outbox.schema.clone(),
            table: outbox.table.clone(),
            create_slot: relay.create_slot,
            failover_slot: postgres.failover_slot,
            streamed_before: false,
            own_walsender: None,
            tuning: Tuning {
                receive_timeout: postgres.wal_receiver_timeout(),
                ..Tuning::default()
            },
        })
    }
}

/// The outbox's contract when its rows are routed (any but messaging).
fn routed(outbox: &OutboxConfig) -> Result<Option<Arc<Contract>>, Error> {
    let contract = outbox.contract()?;
    Ok((contract.name != ContractName::Messaging).then(|| Arc::new(contract)))
}

/// A running reader: committed transactions arrive on `events`; the
/// consumer settles them through the [`Feedback`] it opened the stream with.
pub struct Stream {
    pub events: Events,
    pub stats: Arc<ReaderStats>,
    /// Where streaming started: the slot's confirmed position or the
    /// feedback's settled one, whichever is later.
    pub start: Lsn,
    /// Whether this call created the slot.
    pub created: bool,
    /// The server process (walsender) serving this stream.
    pub walsender: i32,
    cancel: CancellationToken,
    handle: JoinHandle<Result<Lsn, Error>>,
}

impl Stream {
    /// Checks the server, the publication and the slot with the same rules
    /// as `check` (over `sql`), creates the slot when allowed, logs in for
    /// replication and starts streaming after everything `feedback` settled.
    pub async fn open(
        sql: &Client,
        opts: &SourceOptions,
        feedback: &Feedback,
    ) -> Result<Stream, Error> {
        let server = checks::server(sql).await?;
        let publication =
            checks::publication(sql, &opts.publication, &opts.schema, &opts.table).await?;
        let mut slot = checks::slot(sql, &opts.slot).await?;
        if let (Some(pid), Some(held)) = (opts.own_walsender, &slot) {
            if held.active_pid == Some(pid)
                && checks::end_own_walsender(sql, &opts.slot, pid).await?
            {
                tracing::warn!(
                    slot = %opts.slot,
                    pid,
                    "ended this relay's previous walsender, which still held the slot after its connection went silent"
                );
                slot = checks::slot(sql, &opts.slot).await?;
            }
        }
        // The rules every session obeys (`rules::When::Session`); a slot in
        // use makes this relay a standby.
        let mut findings = Vec::new();
        let lost = slot.is_none() && opts.streamed_before;
        if lost {
            findings.push(Finding::error(
                Rule::Slot,
                Code::SLOT_MISSING,
                format!(
                    "replication slot {} no longer exists on this server (a failover to a standby without a \
                     synchronised copy, or a dropped slot); rows committed after {} may not be in Kafka. \
                     `outbox-cdc cutover --to cdc --recover` creates a new slot and hands over every row not yet \
                     PUBLISHED or FAILED (rows already published but not yet marked go out again)",
                    opts.slot,
                    feedback.settled()
                ),
            ));
        }
        if opts.failover_slot {
            findings.push(match server.require_failover_slots() {
                Ok(()) => Finding::ok(Rule::FailoverSlot, "failover slots are available"),
                Err(e) => Finding::failed(Rule::FailoverSlot, &e),
            });
        }
        findings.extend(server.findings());
        findings.push(checks::publication_finding(
            publication.as_ref(),
            &opts.publication,
            &format!("{}.{}", opts.schema, opts.table),
            opts.routed.as_ref().map_or(Status::Kept, |c| c.status),
        ));
        if !lost {
            let purpose = Purpose::Stream {
                create_slot: opts.create_slot,
            };
            findings.push(checks::slot_finding(
                slot.as_ref(),
                &opts.slot,
                &server,
                purpose,
            ));
        }
        finding::obey(When::Session, findings)?;

        let mut conn = ReplicationConnection::connect(&opts.connect).await?;
        let (confirmed, created) = match slot {
            Some(s) => {
                if opts.failover_slot && s.failover == Some(false) {
                    slot::enable_failover(&mut conn, &opts.slot).await?;
                }
                let confirmed = s.confirmed_flush.ok_or_else(|| {
                    Error::new(
                        Code::PG_PROTOCOL,
                        format!("slot {} has no confirmed position", opts.slot),
                    )
                })?;
                (confirmed, false)
            }
            None => {
                let new_slot = slot::NewSlot {
                    snapshot: slot::Snapshot::None,
                    failover: slot::Failover::from(opts.failover_slot),
                };
                let made = slot::create(&mut conn, &opts.slot, new_slot).await?;
                tracing::warn!(
                    slot = %opts.slot,
                    "created the replication slot: rows committed before now are not streamed (hand them over with `outbox-cdc cutover`)"
                );
                (made.consistent_point, true)
            }
        };
        let start = confirmed.max(feedback.settled());
        let binary = opts.binary
            && opts.routed.is_none()
            && server.version_num >= checks::BINARY_PGOUTPUT_VERSION_NUM;
        // What Debezium reads of the columns from the catalog and a
        // Relation message does not carry: NULL allowed, defaults.
        let routed = match &opts.routed {
            Some(contract) => Some(relations::RoutedTable {
                contract: contract.clone(),
                run: opts.run.clone(),
                catalog: crate::pg::catalog::table_columns(sql, &opts.schema, &opts.table).await?,
            }),
            None => None,
        };
        conn.start_replication(&StartReplication {
            slot: &opts.slot,
            from: start,
            publication: &opts.publication,
            messages: match opts.messages {
                true => Messages::Included,
                false => Messages::Left,
            },
            values: match binary {
                true => Values::Binary,
                false => Values::Text,
            },
        })
        .await?;

        let walsender = conn.backend_pid;
        let (tx, events) = mpsc::channel(opts.tuning.channel_capacity);
        let cancel = CancellationToken::new();
        let stats = Arc::new(ReaderStats::default());
        let reader = reader::Reader {
            conn,
            slot: opts.slot.clone(),
            schema: opts.schema.clone(),
            table: opts.table.clone(),
            routed,
            tuning: opts.tuning,
            start,
            events: tx,
            settled: feedback.subscribe(),
            cancel: cancel.clone(),
            stats: stats.clone(),
        };
        Ok(Stream {
            events: Events::new(events),
            stats,
            start,
            created,
            walsender,
            cancel,
            handle: tokio::spawn(reader.run()),
        })
    }

    /// Whether the reader has ended (its result is then ready in `stop`).
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// Stops the reader after it reports the last settled position, and
    /// returns the position confirmed to the server, or why it ended.
    pub async fn stop(self) -> Result<Lsn, Error> {
        self.cancel.cancel();
        drop(self.events);
        match self.handle.await {
            Ok(result) => result,
            Err(join) => Err(Error::new(
                Code::INTERNAL,
                format!("the replication reader task: {join}"),
            )),
        }
    }
}
