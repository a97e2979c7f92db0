//! Streaming: committed transactions out, settlement feedback in.
//!
//! The consumer receives [`Event`]s through a bounded channel and reports the
//! LSN up to which everything is settled through a [`Feedback`]. The slot is
//! confirmed only up to that LSN, so nothing unsettled can be lost; while
//! nothing is outstanding, the server's keepalive position is confirmed so an
//! idle outbox beside busy tables does not retain WAL. Status updates keep
//! flowing while the consumer applies backpressure.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::StreamExt;
use postgres_protocol::message::backend::Message;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::codec::Backend;
use super::connection::{lost, refusal, server_error, Command, ReplicationConnection};
use super::events::Batch;
pub use super::events::{Change, Event, Events};
use super::liveness::{listen, silent, Listen, Silence};
use super::pgoutput::{self, PgOutput};
use super::relations::{Decoded, Relations};
use crate::error::{Code, Error};
use crate::lsn::Lsn;
use crate::row::value::{Timestamp, Uuid, PG_EPOCH_OFFSET_MICROS};
use crate::row::OutboxRow;

/// The consumer's side of acknowledgement.
#[derive(Debug, Clone)]
pub struct Feedback(Arc<watch::Sender<Lsn>>);

impl Feedback {
    pub fn new(start: Lsn) -> (Feedback, watch::Receiver<Lsn>) {
        let (tx, rx) = watch::channel(start);
        (Feedback(Arc::new(tx)), rx)
    }

    /// Everything up to `lsn` (a commit's end LSN) is settled. Never moves back.
    pub fn settle(&self, lsn: Lsn) {
        self.0.send_if_modified(|current| {
            if lsn > *current {
                *current = lsn;
                true
            } else {
                false
            }
        });
    }

    pub fn settled(&self) -> Lsn {
        *self.0.borrow()
    }

    /// Another receiver of the settled position (a new reader after a restart).
    pub fn subscribe(&self) -> watch::Receiver<Lsn> {
        self.0.subscribe()
    }
}

/// Counters an operator may want.
#[derive(Debug, Default)]
pub struct ReaderStats {
    pub transactions: AtomicU64,
    pub rows: AtomicU64,
    /// Updates, deletes and truncates: the publication should not send them.
    pub skipped_changes: AtomicU64,
    pub other_table_rows: AtomicU64,
    pub status_updates: AtomicU64,
    /// Last LSN confirmed to the server.
    pub confirmed: AtomicU64,
    /// The relay's own heartbeat messages read from the slot.
    pub heartbeats: AtomicU64,
    /// When the reader last read a walsender keepalive with nothing waiting
    /// for its consumer (microseconds since the epoch). The walsender sends
    /// one when it has decoded all the WAL there is, which during a drain is
    /// long before the relay has published it: the socket still holds the
    /// backlog, and the consumer's queue is full.
    pub keepalive_at: AtomicU64,
    /// What that keepalive said the walsender had sent (an LSN): a keepalive
    /// comes at a stream's start and whenever the walsender passes the
    /// flush position it knew, so only this says whether it caught up.
    pub keepalive_sent: AtomicU64,
}

/// How the reader paces itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// Rows per `Rows` event: bounds the memory one event holds. At 100 a
    /// transaction of any size buffers no more rows than 100-row ones do.
    pub chunk_rows: usize,
    /// Bytes of row values per `Rows` event and per batch, whichever of the
    /// two bounds comes first: 100 rows of 256 KiB payloads are 25 MiB, and
    /// the channel holds `channel_capacity` batches.
    pub chunk_bytes: usize,
    /// A status update at least this often (well inside wal_sender_timeout).
    pub status_interval: Duration,
    /// How often settlement is checked and, when it moved, reported.
    pub feedback_interval: Duration,
    /// Batches of events buffered between the reader and its consumer.
    pub channel_capacity: usize,
    /// The stream may stay silent this long while the reader waits on it
    /// (`postgres.wal_receiver_timeout_secs`); halfway, the reader asks the
    /// server for a reply, so only a dead link or server reaches it.
    pub receive_timeout: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            chunk_rows: 100,
            chunk_bytes: 1 << 20,
            status_interval: Duration::from_secs(10),
            feedback_interval: Duration::from_millis(200),
            channel_capacity: 8,
            receive_timeout: Duration::from_secs(crate::config::DEFAULT_WAL_RECEIVER_TIMEOUT_SECS),
        }
    }
}

/// Everything one streaming run needs; [`super::Stream::open`] builds it.
pub(crate) struct Reader {
    pub(crate) conn: ReplicationConnection,
    pub(crate) slot: String,
    pub(crate) schema: String,
    pub(crate) table: String,
    /// `None`: the messaging contract.
    pub(crate) routed: Option<super::relations::RoutedTable>,
    pub(crate) tuning: Tuning,
    pub(crate) start: Lsn,
    pub(crate) events: mpsc::Sender<Vec<Event>>,
    pub(crate) settled: watch::Receiver<Lsn>,
    pub(crate) cancel: CancellationToken,
    pub(crate) stats: Arc<ReaderStats>,
}

fn now_pg_micros() -> i64 {
    let since_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or_default();
    since_unix - PG_EPOCH_OFFSET_MICROS
}

fn malformed(what: impl Into<String>) -> Error {
    Error::new(Code::PGOUTPUT_MALFORMED, what)
}

fn be_u64(data: &[u8], at: usize) -> Result<u64, Error> {
    data.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_be_bytes)
        .ok_or_else(|| malformed("truncated replication message header"))
}

struct State {
    relations: Relations,
    /// Position of the last WAL data received.
    received: Lsn,
    /// The reader never reports settlement below where it started.
    start: Lsn,
    /// End of the last transaction handed to the consumer.
    last_delivered_end: Lsn,
    settled: Lsn,
    /// A position safe to confirm while nothing is outstanding: a keepalive's
    /// WAL end or the end of a transaction without outbox rows.
    idle_position: Lsn,
    in_transaction: Option<OpenTransaction>,
    /// A transaction was handed on since the last [`Event::CaughtUp`].
    delivered_since_caught_up: bool,
    last_sent_flush: Lsn,
    last_status: Instant,
    /// Whether the server is heard from, for the receive timeout.
    silence: Silence,
    tuning: Tuning,
    stats: Arc<ReaderStats>,
}

/// Whether anything waits for the consumer when a keepalive is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Consumer {
    /// Nothing waits: a keepalive now means the relay keeps up.
    Idle,
    Busy,
}

struct OpenTransaction {
    xid: u32,
    final_lsn: Lsn,
    commit_time: Timestamp,
    delivered_begin: bool,
    chunk: Vec<OutboxRow>,
    /// The bytes of the values in `chunk` (or `changes`).
    chunk_bytes: usize,
    changes: Vec<Change>,
    /// The routed outbox's changes so far, for their ids.
    ordinal: u64,
    skip: bool,
}

impl OpenTransaction {
    /// `Begin` for the consumer before the transaction's first row.
    fn begin(&mut self, pending: &mut Batch) {
        if !self.delivered_begin {
            self.delivered_begin = true;
            pending.push(Event::Begin {
                xid: self.xid,
                final_lsn: self.final_lsn,
                commit_time: self.commit_time,
            });
        }
    }

    /// The next routed change's id.
    fn next_id(&mut self) -> Uuid {
        self.ordinal += 1;
        Uuid::from_position(self.final_lsn.0, self.ordinal)
    }

    /// A routed change, handed on in chunks as rows are.
    fn change(&mut self, change: Change, bytes: usize, pending: &mut Batch, tuning: &Tuning) {
        self.begin(pending);
        self.changes.push(change);
        self.chunk_bytes += bytes;
        if self.changes.len() >= tuning.chunk_rows || self.chunk_bytes >= tuning.chunk_bytes {
            pending.push_sized(
                Event::Changes(std::mem::take(&mut self.changes)),
                std::mem::take(&mut self.chunk_bytes),
            );
        }
    }

    /// An outbox row, handed on in chunks.
    fn row(&mut self, row: OutboxRow, bytes: usize, pending: &mut Batch, tuning: &Tuning) {
        self.begin(pending);
        self.chunk.push(row);
        self.chunk_bytes += bytes;
        if self.chunk.len() >= tuning.chunk_rows || self.chunk_bytes >= tuning.chunk_bytes {
            pending.push_sized(
                Event::Rows(std::mem::take(&mut self.chunk)),
                std::mem::take(&mut self.chunk_bytes),
            );
        }
    }
}

impl State {
    /// The LSN to report as flushed.
    fn flush(&self) -> Lsn {
        // Settlement below the start (a consumer that began at 0/0) counts
        // as the start.
        let base = self.settled.max(self.start);
        let outstanding = self.in_transaction.is_some() || base < self.last_delivered_end;
        if outstanding {
            base
        } else {
            base.max(self.idle_position)
        }
    }
}

impl Reader {
    /// Streams until cancelled or the consumer goes away (`Ok`, with the
    /// position last confirmed to the server), or until an error. Before
    /// returning `Ok` it reports the last settled position.
    pub(crate) async fn run(self) -> Result<Lsn, Error> {
        let Reader {
            mut conn,
            slot,
            schema,
            table,
            routed,
            tuning,
            start,
            events,
            settled: mut settled_rx,
            cancel,
            stats,
        } = self;
        tracing::info!(%slot, %start, "streaming");
        let mut st = State {
            relations: Relations::new(&schema, &table, routed),
            received: start,
            start,
            last_delivered_end: start,
            settled: *settled_rx.borrow_and_update(),
            idle_position: start,
            in_transaction: None,
            delivered_since_caught_up: false,
            last_sent_flush: Lsn::ZERO,
            last_status: Instant::now(),
            silence: Silence::heard(),
            tuning,
            stats,
        };
        let mut pending = Batch::default();
        let mut ticker = tokio::time::interval(tuning.feedback_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        send_status(&mut conn, &mut st).await?;
        // One registration for the whole stream: a fresh `cancelled()` per
        // frame registered and dropped a waiter each time (6.7 % of the
        // relay's CPU in a 1-row drain).
        let cancelled = cancel.cancelled();
        tokio::pin!(cancelled);

        loop {
            tokio::select! {
                biased;
                // Read on while frames are at hand and the batch has room;
                // hand the batch over when the stream pauses or it is full.
                frame = conn.framed.next(), if !pending.full(tuning.chunk_rows, tuning.chunk_bytes) => {
                    let message = match frame {
                        Some(Ok(Backend::Message(m))) => m,
                        Some(Ok(Backend::CopyBothResponse)) => {
                            return Err(Error::new(Code::PG_PROTOCOL, "a second CopyBothResponse"))
                        }
                        Some(Err(e)) => return Err(lost(e)),
                        None => return Err(Error::new(Code::PG_CONNECTION_LOST, "the server closed the stream")),
                    };
                    st.silence.hear();
                    match message {
                        Message::CopyData(body) => {
                            // The frame's own bytes: an inserted row's values are slices of
                            // them (a copy per row was measured: the refcounts cost the same).
                            let data = body.into_bytes();
                            if data.first() == Some(&b'k') {
                                // A keepalive may ask for a reply: report what is settled now.
                                st.settled = st.settled.max(*settled_rx.borrow());
                            }
                            // Nothing waiting for the consumer: a keepalive read now
                            // means the relay, not only the walsender, keeps up.
                            let consumer = match pending.events.is_empty()
                                && events.capacity() == events.max_capacity()
                            {
                                true => Consumer::Idle,
                                false => Consumer::Busy,
                            };
                            handle_copy_data(&mut conn, &mut st, data, &mut pending, consumer).await?;
                        }
                        Message::CopyDone | Message::CommandComplete(_) | Message::ReadyForQuery(_) => {
                            return Err(Error::new(Code::PG_CONNECTION_LOST, "the server ended the stream"))
                        }
                        Message::ErrorResponse(body) => {
                            return Err(refusal(server_error(&body), Command::Streaming)
                                .context(format!("streaming from slot {slot}")));
                        }
                        Message::NoticeResponse(_) | Message::ParameterStatus(_) => {}
                        _ => return Err(Error::new(Code::PG_PROTOCOL, "unexpected message while streaming")),
                    }
                }
                permit = events.reserve(), if !pending.events.is_empty() => {
                    let Ok(permit) = permit else {
                        return finish(conn, &mut st, &settled_rx).await;
                    };
                    permit.send(pending.take());
                    // Under a steady backlog this branch and the one above are
                    // always ready and the two below never polled: look at the
                    // cancellation and report here, once a batch.
                    if cancel.is_cancelled() {
                        return finish(conn, &mut st, &settled_rx).await;
                    }
                    if st.last_status.elapsed() >= tuning.feedback_interval {
                        report(&mut conn, &mut st, &settled_rx).await?;
                    }
                }
                _ = &mut cancelled => {
                    return finish(conn, &mut st, &settled_rx).await;
                }
                // Settlement is read here rather than on every change: waking
                // the reader per settled transaction costs more than it gains.
                _ = ticker.tick() => {
                    if settled_rx.has_changed().is_err() {
                        // The consumer dropped its Feedback: report and stop.
                        return finish(conn, &mut st, &settled_rx).await;
                    }
                    report(&mut conn, &mut st, &settled_rx).await?;
                    // Silence counts only while the reader listens: a full
                    // batch waiting on the consumer leaves the socket unread.
                    st.silence = st.silence.at_tick();
                    if pending.full(tuning.chunk_rows, tuning.chunk_bytes) {
                        st.silence = Silence::heard();
                    }
                    match listen(st.silence, tuning.receive_timeout) {
                        Listen::Wait => {}
                        Listen::Ping => {
                            st.silence.pinged = true;
                            send_status_with(&mut conn, &mut st, Reply::Requested).await?;
                        }
                        Listen::GiveUp => return Err(silent(tuning.receive_timeout)),
                    }
                }
            }
        }
    }
}

/// Sends a status update when settlement moved or one is due.
async fn report(
    conn: &mut ReplicationConnection,
    st: &mut State,
    settled_rx: &watch::Receiver<Lsn>,
) -> Result<(), Error> {
    st.settled = st.settled.max(*settled_rx.borrow());
    let due = st.last_status.elapsed() >= st.tuning.status_interval;
    if due || st.flush() != st.last_sent_flush {
        send_status(conn, st).await?;
    }
    Ok(())
}

/// Reports the last settled position and closes the session.
async fn finish(
    mut conn: ReplicationConnection,
    st: &mut State,
    settled_rx: &watch::Receiver<Lsn>,
) -> Result<Lsn, Error> {
    st.settled = st.settled.max(*settled_rx.borrow());
    send_status(&mut conn, st).await?;
    let confirmed = st.last_sent_flush;
    conn.close().await;
    Ok(confirmed)
}

async fn handle_copy_data(
    conn: &mut ReplicationConnection,
    st: &mut State,
    data: Bytes,
    pending: &mut Batch,
    consumer: Consumer,
) -> Result<(), Error> {
    match data.first() {
        Some(b'w') => {
            let wal_start = Lsn(be_u64(&data, 1)?);
            let _wal_end = be_u64(&data, 9)?;
            st.received = st.received.max(wal_start);
            let message =
                pgoutput::decode(data.slice(25.min(data.len())..)).map_err(|e| malformed(e.0))?;
            on_pgoutput(st, message, pending)
        }
        Some(b'k') => {
            let wal_end = Lsn(be_u64(&data, 1)?);
            let reply = data.get(17).copied().unwrap_or(0) == 1;
            if consumer == Consumer::Idle {
                st.stats.keepalive_at.store(
                    crate::metrics::unix_micros().max(0) as u64,
                    Ordering::Relaxed,
                );
                st.stats.keepalive_sent.store(wal_end.0, Ordering::Relaxed);
            }
            st.received = st.received.max(wal_end);
            if st.in_transaction.is_none() {
                st.idle_position = st.idle_position.max(wal_end);
                // The walsender sends a keepalive before it waits for WAL:
                // what it sent so far is all there is.
                if st.delivered_since_caught_up {
                    st.delivered_since_caught_up = false;
                    pending.push(Event::CaughtUp);
                }
            }
            if reply {
                send_status(conn, st).await?;
            }
            Ok(())
        }
        other => Err(malformed(format!(
            "unknown replication message {:?}",
            other.map(|b| *b as char)
        ))),
    }
}

fn on_pgoutput(st: &mut State, message: PgOutput, pending: &mut Batch) -> Result<(), Error> {
    match message {
        PgOutput::Begin {
            final_lsn,
            commit_time,
            xid,
        } => {
            // Already settled (a resend after reconnect): skip it whole.
            let skip = final_lsn < st.settled.max(st.start);
            st.in_transaction = Some(OpenTransaction {
                xid,
                final_lsn,
                commit_time: Timestamp::from_pg_micros(commit_time),
                delivered_begin: false,
                chunk: Vec::new(),
                chunk_bytes: 0,
                changes: Vec::new(),
                ordinal: 0,
                skip,
            });
        }
        PgOutput::Relation(rel) => st.relations.learn(&rel)?,
        PgOutput::Insert { relation, tuple } => {
            let tx = st
                .in_transaction
                .as_mut()
                .ok_or_else(|| malformed("Insert outside a transaction"))?;
            match st.relations.is_outbox(relation) {
                None => {
                    return Err(malformed(format!(
                        "Insert into relation {relation} before its Relation message"
                    )))
                }
                Some(false) => {
                    st.stats.other_table_rows.fetch_add(1, Ordering::Relaxed);
                }
                Some(true) if tx.skip => {}
                Some(true) => {
                    let bytes = tuple.value_bytes();
                    let decoded = st
                        .relations
                        .decode(relation, tuple)
                        .ok_or_else(|| malformed("outbox relation vanished"))?;
                    st.stats.rows.fetch_add(1, Ordering::Relaxed);
                    match decoded {
                        Decoded::Outbox(row) => tx.row(row, bytes, pending, &st.tuning),
                        Decoded::Routed(plan, values) => {
                            let id = tx.next_id();
                            let change = Change::Insert { id, plan, values };
                            tx.change(change, bytes, pending, &st.tuning);
                        }
                    }
                }
            }
        }
        // A routed outbox's UPDATE goes to the consumer, which applies the
        // contract's `table.op.invalid.behavior`; its DELETE is dropped.
        PgOutput::Update { relation } if st.relations.plan(relation).is_some() => {
            let tx = st
                .in_transaction
                .as_mut()
                .ok_or_else(|| malformed("Update outside a transaction"))?;
            if let (false, Some(plan)) = (tx.skip, st.relations.plan(relation)) {
                let change = Change::Update {
                    id: tx.next_id(),
                    plan: plan.clone(),
                };
                tx.change(change, 0, pending, &st.tuning);
            }
        }
        PgOutput::Commit {
            commit_lsn,
            end_lsn,
            commit_time,
        } => {
            let tx = st
                .in_transaction
                .take()
                .ok_or_else(|| malformed("Commit outside a transaction"))?;
            st.received = st.received.max(end_lsn);
            if tx.delivered_begin {
                if !tx.chunk.is_empty() {
                    pending.push_sized(Event::Rows(tx.chunk), tx.chunk_bytes);
                }
                if !tx.changes.is_empty() {
                    pending.push_sized(Event::Changes(tx.changes), tx.chunk_bytes);
                }
                pending.push(Event::Commit {
                    xid: tx.xid,
                    commit_lsn,
                    end_lsn,
                    commit_time: Timestamp::from_pg_micros(commit_time),
                });
                st.last_delivered_end = end_lsn;
                st.delivered_since_caught_up = true;
                st.stats.transactions.fetch_add(1, Ordering::Relaxed);
            } else {
                // Nothing for the consumer: settled as soon as all before it is.
                st.idle_position = st.idle_position.max(end_lsn);
            }
        }
        PgOutput::Update { .. } | PgOutput::Delete { .. } | PgOutput::Truncate { .. } => {
            st.stats.skipped_changes.fetch_add(1, Ordering::Relaxed);
        }
        PgOutput::Message { prefix, .. } => {
            if prefix == super::HEARTBEAT_PREFIX {
                st.stats.heartbeats.fetch_add(1, Ordering::Relaxed);
            }
        }
        PgOutput::Origin { .. } | PgOutput::Type { .. } => {}
    }
    Ok(())
}

/// A standby status update: written = received, flushed = applied = settled
/// (or the idle position when nothing is outstanding).
/// Whether a status update asks the server to answer at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    NotAsked,
    Requested,
}

async fn send_status(conn: &mut ReplicationConnection, st: &mut State) -> Result<(), Error> {
    send_status_with(conn, st, Reply::NotAsked).await
}

async fn send_status_with(
    conn: &mut ReplicationConnection,
    st: &mut State,
    reply: Reply,
) -> Result<(), Error> {
    let flush = st.flush();
    let written = st.received.max(flush);
    let mut msg = Vec::with_capacity(34);
    msg.push(b'r');
    msg.extend_from_slice(&written.0.to_be_bytes());
    msg.extend_from_slice(&flush.0.to_be_bytes());
    msg.extend_from_slice(&flush.0.to_be_bytes());
    msg.extend_from_slice(&now_pg_micros().to_be_bytes());
    msg.push(match reply {
        Reply::NotAsked => 0,
        Reply::Requested => 1,
    });
    conn.send_copy_data(&msg).await?;
    st.last_sent_flush = flush;
    st.last_status = Instant::now();
    st.stats.status_updates.fetch_add(1, Ordering::Relaxed);
    st.stats.confirmed.store(flush.0, Ordering::Relaxed);
    Ok(())
}
