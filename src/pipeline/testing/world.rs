//! A world for the settlement tests: the WAL of committed source
//! transactions, the slot's confirmed position, the in-memory broker and
//! table, and a relay process (its shared state and recorder) that runs
//! sessions over them on a paused clock. The session runs in the test's own
//! task and is polled until it waits, so each step is deterministic.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use std::collections::BTreeMap;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::broker::{Answers, Broker, LIMIT};
use super::table::Table;
use crate::config::{Config, RelayConfig, TransactionalConfig};
use crate::contract::definition::{Contract, Converters, Status};
use crate::error::Error;
use crate::lsn::Lsn;
use crate::metrics::Metrics;
use crate::pipeline::recorder::{Links, Recorder};
use crate::pipeline::session::Session;
use crate::pipeline::settlement::Settlement;
use crate::pipeline::shared::{Bounds, Marks, Shared};
use crate::pipeline::stats::RelayStats;
use crate::replication::{Change, Event, Events, Feedback, ReaderStats};
use crate::router::{Plan, TableColumn};
use crate::row::value::{Timestamp, Uuid};
use crate::row::OutboxRow;

/// What a source transaction does to a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Insert,
    /// Only a table that keeps no status streams these (to be dropped as
    /// `table.op.invalid.behavior` says); the messaging outbox's are its
    /// own marks, which the reader never hands on.
    Update,
}

/// One outbox row, as the test writes it.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) id: Uuid,
    pub(crate) key: String,
    pub(crate) destination: &'static str,
    /// Larger than the broker takes: a row's own fault.
    pub(crate) too_large: bool,
    pub(crate) op: Op,
}

impl Row {
    pub(crate) fn new(n: u32, key: &str) -> Row {
        let mut id = [0u8; 16];
        id[12..].copy_from_slice(&n.to_be_bytes());
        id[6] = 0x40;
        id[8] = 0x80;
        Row {
            id: Uuid(id),
            key: key.to_string(),
            destination: "orders",
            too_large: false,
            op: Op::Insert,
        }
    }

    pub(crate) fn updated(mut self) -> Row {
        self.op = Op::Update;
        self
    }

    /// The row in Debezium's documented table: `id`, `aggregatetype` (the
    /// destination), `aggregateid` (the key), `type`, `payload`.
    fn documented(&self) -> Vec<Option<Bytes>> {
        let payload = if self.too_large {
            format!("{{\"s\": \"{}\"}}", "x".repeat(LIMIT))
        } else {
            "{\"n\": 1}".to_string()
        };
        [
            self.id.to_string(),
            self.destination.to_string(),
            self.key.clone(),
            "T".to_string(),
            payload,
        ]
        .into_iter()
        .map(|v| Some(Bytes::from(v)))
        .collect()
    }

    fn change(&self, plan: &Arc<Plan>) -> Change {
        match self.op {
            Op::Insert => Change::Insert {
                id: self.id,
                plan: plan.clone(),
                values: self.documented(),
            },
            Op::Update => Change::Update {
                id: self.id,
                plan: plan.clone(),
            },
        }
    }

    pub(crate) fn too_large(mut self) -> Row {
        self.too_large = true;
        self
    }

    pub(crate) fn to(mut self, destination: &'static str) -> Row {
        self.destination = destination;
        self
    }

    fn decoded(&self) -> OutboxRow {
        let payload = if self.too_large {
            format!("\\x{}", "ab".repeat(LIMIT))
        } else {
            "\\x01".to_string()
        };
        let id = self.id.to_string();
        OutboxRow::from_text([
            ("message_id", Some(id.as_str())),
            ("destination", Some(self.destination)),
            ("message_type", Some("T")),
            ("message_version", Some("1")),
            ("content_type", Some("x")),
            ("payload", Some(payload.as_str())),
            ("headers", Some("{}")),
            ("status", Some("PENDING")),
            ("attempts", Some("0")),
            ("lease_token", Some("0")),
            ("created_at", Some("2024-05-06 07:08:09+00")),
            ("partition_key", Some(self.key.as_str())),
            ("routing_key", Some(self.key.as_str())),
        ])
    }
}

/// A committed source transaction.
#[derive(Debug, Clone)]
pub(crate) struct SourceTx {
    pub(crate) final_lsn: Lsn,
    pub(crate) end_lsn: Lsn,
    pub(crate) rows: Vec<Row>,
}

/// How the relay under test is set up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Setup {
    pub(crate) marks: Marks,
    pub(crate) operator_error_threshold: usize,
    pub(crate) max_in_flight_messages: usize,
    pub(crate) bounds: Bounds,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            marks: Marks::Journaled,
            operator_error_threshold: 1,
            max_in_flight_messages: 5_000,
            bounds: Bounds {
                records: 1_000,
                bytes: 1 << 20,
                age: Duration::from_millis(100),
            },
        }
    }
}

/// Everything that outlives a relay process.
pub(crate) struct World {
    pub(crate) broker: Broker,
    pub(crate) table: Table,
    pub(crate) wal: Vec<SourceTx>,
    /// The slot's confirmed position: where a new process starts.
    pub(crate) slot: Lsn,
    /// A table that keeps no status (Debezium's documented one, the
    /// router's defaults): its rows come as routed changes.
    pub(crate) routed: Option<Arc<Plan>>,
}

impl World {
    pub(crate) fn new(answers: Answers) -> World {
        World {
            broker: Broker::new(answers),
            table: Table::default(),
            wal: Vec::new(),
            slot: Lsn::ZERO,
            routed: None,
        }
    }

    /// A world whose outbox is Debezium's documented table, which keeps no
    /// status; UPDATEs are logged and dropped (`warn`).
    pub(crate) fn routed(answers: Answers) -> World {
        let column = |name: &str, type_oid: u32, type_name: &str| TableColumn {
            name: name.into(),
            type_oid,
            typmod: -1,
            type_name: type_name.into(),
            optionality: crate::router::columns::Optionality::Optional,
            default: None,
        };
        let table = [
            column("id", 2950, "uuid"),
            column("aggregatetype", 1043, "character varying(255)"),
            column("aggregateid", 1043, "character varying(255)"),
            column("type", 1043, "character varying(255)"),
            column("payload", 3802, "jsonb"),
        ];
        let plan = Contract::debezium(&BTreeMap::new(), Converters::json())
            .map_err(|e| e.to_string())
            .and_then(|c| Plan::new(&c, &table).map_err(|m| format!("{m:?}")));
        match plan {
            Ok(plan) => World {
                routed: Some(Arc::new(plan)),
                ..World::new(answers)
            },
            Err(e) => panic!("the documented table's plan: {e}"),
        }
    }

    /// The topic a destination's records go to.
    pub(crate) fn topic(&self, destination: &str) -> String {
        match self.routed {
            Some(_) => format!("outbox.event.{destination}"),
            None => format!("t.{destination}"),
        }
    }

    /// An application commits `rows` in one transaction. A routed row's id
    /// is its place in the slot, as the reader makes it.
    pub(crate) fn commit(&mut self, mut rows: Vec<Row>) -> Lsn {
        let n = self.wal.len() as u64 + 1;
        for (ordinal, r) in rows.iter_mut().enumerate() {
            match self.routed {
                Some(_) => r.id = Uuid::from_position(n * 0x100, ordinal as u64 + 1),
                None => self.table.insert(r.id),
            }
        }
        let tx = SourceTx {
            final_lsn: Lsn(n * 0x100),
            end_lsn: Lsn(n * 0x100 + 0x30),
            rows,
        };
        let end = tx.end_lsn;
        self.wal.push(tx);
        end
    }
}

/// A relay process: its shared state and recorder.
pub(crate) struct Process {
    pub(crate) shared: Arc<Shared>,
}

pub(crate) fn relay_config() -> RelayConfig {
    let text = "[postgres]\ndbname = \"d\"\nuser = \"u\"\n[outbox]\n[kafka]\nbootstrap_servers = \"k:1\"\n";
    match Config::parse(text, std::path::Path::new("test.toml"), &|_| None) {
        Ok(c) => c.relay,
        Err(e) => panic!("{e}"),
    }
}

impl Process {
    /// A process that starts from the slot's position.
    pub(crate) fn start(world: &World, setup: Setup) -> Process {
        let mut relay = relay_config();
        let status = match world.routed {
            Some(_) => Status::NotKept,
            None => Status::Kept,
        };
        relay.max_in_flight_messages = setup.max_in_flight_messages;
        relay.drain_timeout_secs = 5;
        relay.set_transactional(TransactionalConfig {
            max_records: setup.bounds.records,
            max_bytes: setup.bounds.bytes,
            max_ms: setup.bounds.age.as_millis() as u64,
            ..TransactionalConfig::default()
        });
        let metrics = Arc::new(Metrics::new(relay.metric_limits()));
        let stats = Arc::new(RelayStats::default());
        let (feedback, _) = Feedback::new(world.slot);
        let trouble = Arc::new(crate::pipeline::recorder::Trouble::default());
        let recorder = setup.marks.on().then(|| {
            Recorder::start(
                world.table.journal(),
                Links {
                    stats: stats.clone(),
                    journaled: metrics.journaled.clone(),
                    folded: metrics.marks_written.clone(),
                    feedback: feedback.clone(),
                    trouble: trouble.clone(),
                },
            )
        });
        Process {
            shared: Arc::new(Shared {
                status,
                marks: setup.marks,
                operator_refusals: setup.operator_error_threshold,
                limits: crate::kafka::limits::Limits::default(),
                relay,
                plan: std::sync::Arc::new(
                    crate::router::Plan::of_definition(
                        &crate::contract::definition::Contract::messaging("t."),
                    )
                    .unwrap(),
                ),
                metrics,
                stats,
                feedback,
                recorder,
                trouble,
                poison: Default::default(),
                rechecked: Default::default(),
                otel: None,
                delivery_deadline: std::time::Duration::from_secs(120),
            }),
        }
    }

    pub(crate) fn settled(&self) -> Lsn {
        self.shared.feedback.settled()
    }

    /// The recorder, once no session holds the shared state.
    fn recorder(&mut self) -> Option<Recorder> {
        Arc::get_mut(&mut self.shared).and_then(|s| s.recorder.take())
    }

    /// The process dies: the slot keeps what was settled, the recorder's
    /// queue is lost.
    pub(crate) fn crash(mut self, world: &mut World) {
        world.slot = world.slot.max(self.settled());
        if let Some(r) = self.recorder() {
            r.crash();
        }
    }

    /// The process stops cleanly: the recorder records what is queued.
    pub(crate) async fn stop(mut self, world: &mut World) {
        if let Some(r) = self.recorder() {
            r.finish(Duration::from_secs(5)).await;
        }
        world.slot = world.slot.max(self.settled());
    }
}

/// The reader's side: events of the WAL after where the session started.
pub(crate) struct Reader {
    tx: mpsc::Sender<Vec<Event>>,
    /// The next WAL entry to send.
    next: usize,
}

impl Reader {
    /// Sends the source transactions of the WAL before index `upto`.
    pub(crate) fn deliver_upto(&mut self, world: &World, upto: usize) -> usize {
        let mut sent = 0;
        while self.next < upto {
            let Some(t) = world.wal.get(self.next) else {
                break;
            };
            self.next += 1;
            let commit_time = Timestamp::Micros(1_700_000_000_000_000 + self.next as i64);
            let events = vec![
                Event::Begin {
                    xid: self.next as u32,
                    final_lsn: t.final_lsn,
                    commit_time,
                },
                match &world.routed {
                    Some(plan) => Event::Changes(t.rows.iter().map(|r| r.change(plan)).collect()),
                    None => Event::Rows(t.rows.iter().map(Row::decoded).collect()),
                },
                Event::Commit {
                    xid: self.next as u32,
                    commit_lsn: t.final_lsn,
                    end_lsn: t.end_lsn,
                    commit_time,
                },
            ];
            if self.tx.try_send(events).is_err() {
                self.next -= 1;
                break;
            }
            sent += 1;
        }
        // The walsender's keepalive once it has sent all the WAL there is
        // (lost with a full channel, as a real one may be lost).
        if sent > 0 && self.next == world.wal.len() {
            let _ = self.tx.try_send(vec![Event::CaughtUp]);
        }
        sent
    }
}

type Running = Pin<Box<dyn Future<Output = Result<(), Error>>>>;

/// A session of strategy `S` running on a process.
pub(crate) struct Run {
    future: Option<Running>,
    pub(crate) reader: Option<Reader>,
    pub(crate) shutdown: CancellationToken,
    pub(crate) producer: u64,
    /// How the session ended, once it has.
    pub(crate) ended: Option<Result<(), Error>>,
}

impl Run {
    /// Starts a session from the process's settled position.
    pub(crate) fn start<S: Settlement + 'static>(process: &Process, world: &World) -> Run {
        let (tx, rx) = mpsc::channel(1024);
        let from = process.settled().max(world.slot);
        let next = world.wal.iter().take_while(|t| t.end_lsn <= from).count();
        let sink = world
            .broker
            .producer(process.shared.limits.batch_size(super::broker::BATCH_SIZE));
        let producer = sink.id;
        let ledger = world.table.clone();
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let shared = process.shared.clone();
        let future: Running = Box::pin(async move {
            let mut events = Events::new(rx);
            let stats = ReaderStats::default();
            let mut session = Session::<_, _, S>::open(&shared, sink, ledger).await?;
            let end = session.pump(&mut events, &stats, &token).await;
            session.finish(end).await
        });
        Run {
            future: Some(future),
            reader: Some(Reader { tx, next }),
            shutdown,
            producer,
            ended: None,
        }
    }

    /// Lets the session run until it waits, advancing the paused clock by
    /// `time`; returns how it ended, if it did.
    pub(crate) async fn run_for(&mut self, time: Duration) -> Option<&Result<(), Error>> {
        if let Some(f) = self.future.as_mut() {
            tokio::select! {
                biased;
                end = f => {
                    self.future = None;
                    self.ended = Some(end);
                }
                _ = tokio::time::sleep(time) => {}
            }
        }
        self.ended.as_ref()
    }

    pub(crate) fn deliver_upto(&mut self, world: &World, upto: usize) -> usize {
        self.reader
            .as_mut()
            .map_or(0, |r| r.deliver_upto(world, upto))
    }

    /// Drops the session (a crash): nothing of it runs again.
    pub(crate) fn kill(mut self, world: &World) {
        self.future = None;
        world.broker.crash(self.producer);
    }
}
