//! What an on-call engineer scrapes and is paged by: the metrics (defined
//! once in [`names`]), the relay's health and readiness, the HTTP endpoint
//! that serves them, and the alerting rules generated from the same names.
//!
//! Recording is an atomic add on a handle the pipeline holds; nothing on
//! the per-message path looks a metric up by name. Figures that are cheaper
//! to read than to keep current (seconds behind source) are computed when
//! scraped.

pub mod dashboard;
pub(crate) mod held;
pub mod http;
pub mod names;
pub mod rules;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus::core::Collector;
use prometheus::{
    Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use crate::error::Code;
pub(crate) use held::HeldPartition;
use names::Def;

/// The commit this binary was built from (`unknown` outside a git tree).
pub const BUILD_COMMIT: &str = env!("OUTBOX_CDC_COMMIT");

/// What the relay is configured to allow, exported beside the gauges it
/// bounds (from `[relay]`, which builds it), and whether transactional
/// outcomes exist from the start.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_in_flight_messages: usize,
    pub max_in_flight_bytes: usize,
    pub slot_wal_margin_bytes: u64,
    pub transactional: bool,
    /// Kafka acknowledging nothing in flight for this long: not ready.
    pub kafka_stall: std::time::Duration,
}

pub struct Metrics {
    registry: Registry,
    pub(crate) records_published: IntCounterVec,
    rows_failed: IntCounterVec,
    dead_letters: IntCounterVec,
    updates_dropped: IntCounterVec,
    deliveries: IntCounterVec,
    restarts: IntCounterVec,
    pub(crate) in_flight_messages: IntGauge,
    pub(crate) in_flight_bytes: IntGauge,
    pub(crate) commit_to_ack: Histogram,
    seconds_behind: Gauge,
    kafka_unacknowledged: Gauge,
    /// The partitions Kafka holds, as the producer last reported them.
    held: held::Board,
    /// Commit time (Unix µs) of the oldest transaction not settled; 0: none.
    oldest_unsettled_micros: AtomicI64,
    pub(crate) slot_confirmed_lag: IntGauge,
    pub(crate) slot_retained_wal: IntGauge,
    slot_wal_status: IntGaugeVec,
    slot_safe_wal_size: IntGaugeVec,
    pub(crate) slot_active: IntGauge,
    pub(crate) slot_checks_failed: IntCounter,
    pub(crate) heartbeats: IntCounter,
    pub(crate) heartbeats_received: IntCounter,
    pub(crate) handover_backlog: IntGauge,
    pub(crate) rows_pending: IntGauge,
    pub(crate) other_readers: IntGauge,
    pub(crate) journaled: IntCounter,
    /// Replayed rows found published after a restart, not sent again.
    pub(crate) left_out_as_published: IntCounter,
    pub(crate) marks_written: IntCounter,
    kafka_transactions: IntCounterVec,
    spans: IntCounterVec,
    standby: IntGauge,
    ready: IntGauge,
    pub(crate) confirmed: IntCounter,
    health: Health,
}

/// What `/healthz` and `/readyz` answer.
#[derive(Default)]
struct Health {
    streaming: AtomicBool,
    kafka_reachable: AtomicBool,
    /// Since when Kafka has acknowledged none of the records in flight
    /// (Unix µs), 0 when it acknowledges or nothing is in flight.
    unacknowledged_since_micros: AtomicI64,
    kafka_stall_micros: i64,
    standby: AtomicBool,
    /// The relay's loop has ended (stopped or failed): not alive.
    ended: AtomicBool,
    /// Why the relay is not ready, in words, for `/readyz`'s body.
    why_not: Mutex<String>,
}

fn opts(def: &Def) -> Opts {
    Opts::new(def.name, def.help)
}

fn counter_vec(def: &Def) -> IntCounterVec {
    IntCounterVec::new(opts(def), def.labels).unwrap_or_else(|e| unreachable_def(def, e))
}

fn gauge_vec(def: &Def) -> IntGaugeVec {
    IntGaugeVec::new(opts(def), def.labels).unwrap_or_else(|e| unreachable_def(def, e))
}

fn int_gauge(def: &Def) -> IntGauge {
    IntGauge::with_opts(opts(def)).unwrap_or_else(|e| unreachable_def(def, e))
}

fn int_counter(def: &Def) -> IntCounter {
    IntCounter::with_opts(opts(def)).unwrap_or_else(|e| unreachable_def(def, e))
}

/// The definitions are constants checked by a unit test; a bad one is a
/// programming error, caught before release.
#[cold]
fn unreachable_def(def: &Def, e: prometheus::Error) -> ! {
    panic!("metric definition {} is invalid: {e}", def.name)
}

/// Whether this relay streams from the slot or waits for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Active,
    Standby,
}

impl Metrics {
    pub fn new(relay: Limits) -> Metrics {
        use names::*;
        let registry = Registry::new();
        let deliveries = counter_vec(&DELIVERIES);
        // The confirmed outcome is the hot one: a handle, not a lookup.
        let confirmed = deliveries.with_label_values(&[CONFIRMED]);
        let m = Metrics {
            records_published: counter_vec(&RECORDS_PUBLISHED),
            rows_failed: counter_vec(&ROWS_FAILED),
            dead_letters: counter_vec(&DEAD_LETTERS),
            updates_dropped: counter_vec(&UPDATES_DROPPED),
            deliveries,
            restarts: counter_vec(&SESSION_RESTARTS),
            in_flight_messages: int_gauge(&IN_FLIGHT_MESSAGES),
            in_flight_bytes: int_gauge(&IN_FLIGHT_BYTES),
            commit_to_ack: Histogram::with_opts(
                HistogramOpts::new(COMMIT_TO_ACK.name, COMMIT_TO_ACK.help)
                    .buckets(LATENCY_BUCKETS.to_vec()),
            )
            .unwrap_or_else(|e| unreachable_def(&COMMIT_TO_ACK, e)),
            seconds_behind: Gauge::with_opts(opts(&SECONDS_BEHIND_SOURCE))
                .unwrap_or_else(|e| unreachable_def(&SECONDS_BEHIND_SOURCE, e)),
            oldest_unsettled_micros: AtomicI64::new(0),
            kafka_unacknowledged: Gauge::with_opts(opts(&KAFKA_UNACKNOWLEDGED))
                .unwrap_or_else(|e| unreachable_def(&KAFKA_UNACKNOWLEDGED, e)),
            held: held::Board::new(&PARTITION_HELD)
                .unwrap_or_else(|e| unreachable_def(&PARTITION_HELD, e)),
            slot_confirmed_lag: int_gauge(&SLOT_CONFIRMED_LAG),
            slot_retained_wal: int_gauge(&SLOT_RETAINED_WAL),
            slot_wal_status: gauge_vec(&SLOT_WAL_STATUS),
            slot_safe_wal_size: gauge_vec(&SLOT_SAFE_WAL_SIZE),
            slot_active: int_gauge(&SLOT_ACTIVE),
            slot_checks_failed: int_counter(&SLOT_CHECKS_FAILED),
            heartbeats: int_counter(&HEARTBEATS),
            heartbeats_received: int_counter(&HEARTBEATS_RECEIVED),
            handover_backlog: int_gauge(&HANDOVER_BACKLOG),
            rows_pending: int_gauge(&ROWS_PENDING),
            other_readers: int_gauge(&OTHER_READERS),
            journaled: int_counter(&JOURNALED),
            left_out_as_published: int_counter(&LEFT_OUT_AS_PUBLISHED),
            marks_written: int_counter(&MARKS_WRITTEN),
            kafka_transactions: counter_vec(&KAFKA_TRANSACTIONS),
            spans: counter_vec(&SPANS),
            standby: int_gauge(&STANDBY),
            ready: int_gauge(&READY),
            confirmed,
            health: Health {
                kafka_stall_micros: i64::try_from(relay.kafka_stall.as_micros())
                    .unwrap_or(i64::MAX),
                ..Health::default()
            },
            registry,
        };
        let limits = [
            (&IN_FLIGHT_MESSAGES_LIMIT, relay.max_in_flight_messages),
            (&IN_FLIGHT_BYTES_LIMIT, relay.max_in_flight_bytes),
            (
                &SLOT_SAFE_WAL_MARGIN,
                usize::try_from(relay.slot_wal_margin_bytes).unwrap_or(usize::MAX),
            ),
        ];
        for (def, value) in limits {
            let g = int_gauge(def);
            g.set(i64::try_from(value).unwrap_or(i64::MAX));
            m.register(def, Box::new(g));
        }
        let build = gauge_vec(&BUILD_INFO);
        build
            .with_label_values(&[env!("CARGO_PKG_VERSION"), BUILD_COMMIT])
            .set(1);
        m.register(&BUILD_INFO, Box::new(build));
        // Every label value known in advance is exported at 0, so a rate()
        // over it works from the first scrape.
        for behavior in crate::contract::options::InvalidOp::ALL {
            m.updates_dropped.with_label_values(&[behavior.as_str()]);
        }
        for outcome in [CONFIRMED, REJECTED, AMBIGUOUS, RETRY] {
            m.deliveries.with_label_values(&[outcome]);
        }
        if relay.transactional {
            for outcome in [COMMITTED, ABORTED] {
                m.kafka_transactions.with_label_values(&[outcome]);
            }
        }
        let collectors: Vec<(&Def, Box<dyn Collector>)> = vec![
            (&RECORDS_PUBLISHED, Box::new(m.records_published.clone())),
            (&ROWS_FAILED, Box::new(m.rows_failed.clone())),
            (&DEAD_LETTERS, Box::new(m.dead_letters.clone())),
            (&UPDATES_DROPPED, Box::new(m.updates_dropped.clone())),
            (&DELIVERIES, Box::new(m.deliveries.clone())),
            (&SESSION_RESTARTS, Box::new(m.restarts.clone())),
            (&IN_FLIGHT_MESSAGES, Box::new(m.in_flight_messages.clone())),
            (&IN_FLIGHT_BYTES, Box::new(m.in_flight_bytes.clone())),
            (&COMMIT_TO_ACK, Box::new(m.commit_to_ack.clone())),
            (&SECONDS_BEHIND_SOURCE, Box::new(m.seconds_behind.clone())),
            (
                &KAFKA_UNACKNOWLEDGED,
                Box::new(m.kafka_unacknowledged.clone()),
            ),
            (&PARTITION_HELD, Box::new(m.held.gauge.clone())),
            (&SLOT_CONFIRMED_LAG, Box::new(m.slot_confirmed_lag.clone())),
            (&SLOT_RETAINED_WAL, Box::new(m.slot_retained_wal.clone())),
            (&SLOT_WAL_STATUS, Box::new(m.slot_wal_status.clone())),
            (&SLOT_SAFE_WAL_SIZE, Box::new(m.slot_safe_wal_size.clone())),
            (&SLOT_ACTIVE, Box::new(m.slot_active.clone())),
            (&SLOT_CHECKS_FAILED, Box::new(m.slot_checks_failed.clone())),
            (&HEARTBEATS, Box::new(m.heartbeats.clone())),
            (
                &HEARTBEATS_RECEIVED,
                Box::new(m.heartbeats_received.clone()),
            ),
            (&HANDOVER_BACKLOG, Box::new(m.handover_backlog.clone())),
            (&ROWS_PENDING, Box::new(m.rows_pending.clone())),
            (&OTHER_READERS, Box::new(m.other_readers.clone())),
            (&JOURNALED, Box::new(m.journaled.clone())),
            (
                &LEFT_OUT_AS_PUBLISHED,
                Box::new(m.left_out_as_published.clone()),
            ),
            (&MARKS_WRITTEN, Box::new(m.marks_written.clone())),
            (&KAFKA_TRANSACTIONS, Box::new(m.kafka_transactions.clone())),
            (&SPANS, Box::new(m.spans.clone())),
            (&STANDBY, Box::new(m.standby.clone())),
            (&READY, Box::new(m.ready.clone())),
        ];
        for (def, c) in collectors {
            m.register(def, c);
        }
        // CPU and memory under Prometheus's standard names (the dashboard's).
        #[cfg(target_os = "linux")]
        m.register(
            &PROCESS_RESIDENT_MEMORY,
            Box::new(prometheus::process_collector::ProcessCollector::for_self()),
        );
        m
    }

    fn register(&self, def: &Def, c: Box<dyn Collector>) {
        if let Err(e) = self.registry.register(c) {
            unreachable_def(def, e);
        }
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn render(&self) -> String {
        let behind = match self.oldest_unsettled_micros.load(Ordering::Relaxed) {
            0 => 0.0,
            oldest => ((unix_micros() - oldest).max(0) as f64) / 1e6,
        };
        self.seconds_behind.set(behind);
        self.kafka_unacknowledged
            .set(self.unacknowledged_micros() as f64 / 1e6);
        self.held.export(unix_micros());
        self.standby
            .set(self.health.standby.load(Ordering::Relaxed) as i64);
        self.ready.set(self.is_ready() as i64);
        TextEncoder::new()
            .encode_to_string(&self.registry.gather())
            .unwrap_or_else(|e| format!("# encoding failed: {e}\n"))
    }

    /// A destination's published counter, for the session to keep.
    pub(crate) fn published_counter(&self, destination: &str) -> IntCounter {
        self.records_published.with_label_values(&[destination])
    }

    pub(crate) fn row_failed(&self, code: Code) {
        self.rows_failed.with_label_values(&[code.as_str()]).inc();
    }

    pub(crate) fn dead_lettered(&self, code: Code) {
        self.dead_letters.with_label_values(&[code.as_str()]).inc();
    }

    /// An UPDATE of a status-less outbox, by what
    /// `table.op.invalid.behavior` made of it.
    pub(crate) fn update_dropped(&self, behavior: crate::contract::options::InvalidOp) {
        self.updates_dropped
            .with_label_values(&[behavior.as_str()])
            .inc();
    }

    pub(crate) fn delivery(&self, outcome: &str) {
        self.deliveries.with_label_values(&[outcome]).inc();
    }

    pub(crate) fn restarted(&self, reason: Code) {
        self.restarts.with_label_values(&[reason.as_str()]).inc();
    }

    pub(crate) fn kafka_transaction(&self, outcome: &str) {
        self.kafka_transactions.with_label_values(&[outcome]).inc();
    }

    /// `n` spans recorded, exported or dropped (`names::RECORDED`, ...).
    pub(crate) fn spans(&self, outcome: &str, n: u64) {
        self.spans.with_label_values(&[outcome]).inc_by(n);
    }

    /// The handle of one span outcome, for a count on the data path.
    pub(crate) fn spans_counter(&self, outcome: &str) -> IntCounter {
        self.spans.with_label_values(&[outcome])
    }

    /// The commit time of the oldest transaction read and not yet settled
    /// (Unix µs), or `None` when everything read is settled.
    pub(crate) fn set_oldest_unsettled(&self, micros: Option<i64>) {
        self.oldest_unsettled_micros
            .store(micros.unwrap_or(0).max(0), Ordering::Relaxed);
    }

    /// Since when Kafka has acknowledged none of the records in flight
    /// (Unix µs), or `None` while it acknowledges or nothing is in flight.
    pub(crate) fn set_unacknowledged_since(&self, micros: Option<i64>) {
        self.health
            .unacknowledged_since_micros
            .store(micros.unwrap_or(0).max(0), Ordering::Relaxed);
    }

    /// The partitions Kafka holds, reported once a statistics interval.
    pub(crate) fn set_held(&self, held: Vec<HeldPartition>) {
        self.held.set(held);
    }

    /// The partitions held for `relay.kafka_stall_secs` or longer, in words.
    fn held_past_stall(&self) -> Option<String> {
        self.held
            .describe(self.health.kafka_stall_micros, unix_micros())
    }

    /// How long Kafka has acknowledged none of the records in flight (µs).
    fn unacknowledged_micros(&self) -> i64 {
        match self
            .health
            .unacknowledged_since_micros
            .load(Ordering::Relaxed)
        {
            0 => 0,
            since => (unix_micros() - since).max(0),
        }
    }

    /// Kafka has acknowledged none of the records in flight for
    /// `relay.kafka_stall_secs`.
    fn kafka_stalled(&self) -> bool {
        self.unacknowledged_micros() >= self.health.kafka_stall_micros
    }

    /// The slot as last read by the guard; `None` when it does not exist.
    pub(crate) fn set_slot(&self, slot: Option<&SlotFigures>) {
        let status = slot.map_or("missing", |s| s.wal_status.as_deref().unwrap_or("missing"));
        for s in names::WAL_STATUSES {
            self.slot_wal_status
                .with_label_values(&[*s])
                .set((*s == status) as i64);
        }
        self.slot_safe_wal_size.reset();
        let Some(s) = slot else {
            self.slot_active.set(0);
            return;
        };
        self.slot_active.set(s.active as i64);
        self.slot_confirmed_lag
            .set(s.confirmed_lag_bytes.unwrap_or(0));
        self.slot_retained_wal.set(s.retained_bytes.unwrap_or(0));
        if let Some(safe) = s.safe_wal_size {
            self.slot_safe_wal_size
                .with_label_values::<&str>(&[])
                .set(safe);
        }
    }

    // Health.

    /// A session streams: the relay is no standby.
    pub(crate) fn streaming_began(&self) {
        self.health.streaming.store(true, Ordering::Relaxed);
        self.health.standby.store(false, Ordering::Relaxed);
    }

    pub(crate) fn streaming_ended(&self) {
        self.health.streaming.store(false, Ordering::Relaxed);
        self.set_unacknowledged_since(None);
        // The session's producer, whose partitions these were, is gone.
        self.set_held(Vec::new());
    }

    pub(crate) fn set_role(&self, role: Role) {
        self.health
            .standby
            .store(role == Role::Standby, Ordering::Relaxed);
    }

    /// What the last probe of Kafka found.
    pub(crate) fn set_kafka(&self, probe: &Result<(), crate::error::Error>) {
        self.health
            .kafka_reachable
            .store(probe.is_ok(), Ordering::Relaxed);
    }

    /// Why the relay is not streaming, in the words of the error that
    /// stopped it (cleared when a session streams again).
    pub(crate) fn set_not_ready_because(&self, why: impl Into<String>) {
        if let Ok(mut w) = self.health.why_not.lock() {
            *w = why.into();
        }
    }

    pub(crate) fn set_ended(&self) {
        self.health.ended.store(true, Ordering::Relaxed);
        self.streaming_ended();
    }

    pub fn is_alive(&self) -> bool {
        !self.health.ended.load(Ordering::Relaxed)
    }

    pub fn is_ready(&self) -> bool {
        self.health.streaming.load(Ordering::Relaxed)
            && self.health.kafka_reachable.load(Ordering::Relaxed)
            && !self.kafka_stalled()
    }

    /// `/readyz`'s body: what the relay is doing, and when not ready, why.
    pub fn readiness(&self) -> String {
        let h = &self.health;
        if !self.is_alive() {
            return "not ready: the relay has stopped".into();
        }
        if h.standby.load(Ordering::Relaxed) {
            return "not ready: standby (another relay streams from the slot; this one takes over when it is free)".into();
        }
        let streaming = h.streaming.load(Ordering::Relaxed);
        let kafka = h.kafka_reachable.load(Ordering::Relaxed);
        let held = self.held_past_stall();
        match (streaming, kafka) {
            (true, true) if self.kafka_stalled() => format!(
                "not ready: streaming from the slot, but Kafka has acknowledged none of the {} records in flight for {:.0} s (relay.kafka_stall_secs); librdkafka retries them until message.timeout.ms{}",
                self.in_flight_messages.get(),
                self.unacknowledged_micros() as f64 / 1e6,
                held.map_or(String::new(), |h| format!("; {h}"))
            ),
            // Idempotent delivery publishes the other partitions: ready,
            // and says which ones wait (transactional delivery is not
            // ready by then: a held partition holds its commit).
            (true, true) => match held {
                Some(h) => format!(
                    "ready, degraded: streaming from the slot, Kafka reachable, but {h}; Kafka acknowledged none of their records for relay.kafka_stall_secs or longer, and the relay publishes the other partitions"
                ),
                None => "ready: streaming from the slot, Kafka reachable".into(),
            },
            (true, false) => {
                "not ready: streaming from the slot, but Kafka is not reachable".into()
            }
            (false, _) => {
                let why = h.why_not.lock().map(|w| w.clone()).unwrap_or_default();
                if why.is_empty() {
                    "not ready: not streaming yet".into()
                } else {
                    format!("not ready: not streaming: {why}")
                }
            }
        }
    }
}

/// The slot figures the guard reads.
#[derive(Debug, Clone, Default)]
pub(crate) struct SlotFigures {
    pub(crate) active: bool,
    pub(crate) wal_status: Option<String>,
    pub(crate) confirmed_lag_bytes: Option<i64>,
    pub(crate) retained_bytes: Option<i64>,
    pub(crate) safe_wal_size: Option<i64>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

pub(crate) fn unix_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> crate::config::Config {
        let text = "[postgres]\ndbname = \"d\"\nuser = \"u\"\npassword = { env = \"X\" }\n[outbox]\ntopic_prefix = \"outbox.\"\n[kafka]\nbootstrap_servers = \"127.0.0.1:1\"\n";
        crate::config::Config::parse(text, std::path::Path::new("t.toml"), &|_| None).unwrap()
    }

    #[test]
    fn every_definition_is_exposed_with_help_and_units_in_its_name() {
        let m = Metrics::new(config().relay.metric_limits());
        m.published_counter("outbox.orders").inc_by(3);
        m.row_failed(Code::MESSAGE_TOO_LARGE);
        m.dead_lettered(Code::MESSAGE_TOO_LARGE);
        m.restarted(Code::PG_CONNECTION_LOST);
        // A labelled family shows once it has a child.
        m.kafka_transaction(names::COMMITTED);
        m.spans(names::DROPPED, 2);
        m.set_held(vec![HeldPartition {
            destination: "outbox.orders".into(),
            partition: 1,
            leader: 2,
            since_micros: 1,
        }]);
        m.commit_to_ack.observe(0.012);
        m.set_slot(Some(&SlotFigures {
            active: true,
            wal_status: Some("reserved".into()),
            confirmed_lag_bytes: Some(10),
            retained_bytes: Some(20),
            safe_wal_size: Some(30),
        }));
        let text = m.render();
        for def in names::ALL {
            assert!(
                text.contains(&format!("# HELP {} ", def.name)),
                "{} has no HELP in:\n{text}",
                def.name
            );
            match def.kind {
                names::Kind::Counter => assert!(def.name.ends_with("_total"), "{}", def.name),
                _ => assert!(!def.name.ends_with("_total"), "{}", def.name),
            }
        }
        assert!(
            text.contains("outbox_cdc_records_published_total{destination=\"outbox.orders\"} 3")
        );
        assert!(text.contains("outbox_cdc_rows_failed_total{code=\"MESSAGE_TOO_LARGE\"} 1"));
        assert!(text.contains("outbox_cdc_spans_total{outcome=\"dropped\"} 2"));
        assert!(text.contains("outbox_cdc_slot_wal_status{status=\"reserved\"} 1"));
        assert!(text.contains("outbox_cdc_slot_wal_status{status=\"lost\"} 0"));
        assert!(text.contains("outbox_cdc_slot_safe_wal_size_bytes 30"));
        assert!(text.contains("outbox_cdc_commit_to_ack_seconds_bucket{le=\"0.02\"} 1"));
        assert!(text.contains("outbox_cdc_in_flight_messages_limit 2500"));
    }

    #[test]
    fn seconds_behind_is_the_age_of_the_oldest_unsettled_commit_and_zero_when_caught_up() {
        let m = Metrics::new(config().relay.metric_limits());
        m.set_oldest_unsettled(Some(unix_micros() - 5_000_000));
        let behind = |t: &str| -> f64 {
            t.lines()
                .find_map(|l| l.strip_prefix("outbox_cdc_seconds_behind_source "))
                .unwrap()
                .parse()
                .unwrap()
        };
        let b = behind(&m.render());
        assert!((5.0..60.0).contains(&b), "{b}");
        m.set_oldest_unsettled(None);
        assert_eq!(behind(&m.render()), 0.0);
    }

    #[test]
    fn a_standby_is_alive_but_not_ready_and_says_so() {
        let m = Metrics::new(config().relay.metric_limits());
        m.set_kafka(&Ok(()));
        m.set_role(Role::Standby);
        assert!(m.is_alive() && !m.is_ready());
        assert!(m.readiness().contains("standby"), "{}", m.readiness());
        m.streaming_began();
        assert!(m.is_ready(), "{}", m.readiness());
        m.set_kafka(&Err(crate::error::Error::new(
            crate::error::Code::KAFKA_UNREACHABLE,
            "no answer",
        )));
        assert!(!m.is_ready());
        assert!(m.readiness().contains("Kafka"), "{}", m.readiness());
    }

    #[test]
    fn a_partition_held_past_the_stall_time_leaves_the_relay_ready_but_degraded() {
        let m = Metrics::new(config().relay.metric_limits());
        m.set_kafka(&Ok(()));
        m.streaming_began();
        let held = |secs: i64| {
            vec![HeldPartition {
                destination: "outbox.orders".into(),
                partition: 3,
                leader: 2,
                since_micros: unix_micros() - secs * 1_000_000,
            }]
        };
        let series = |m: &Metrics| -> Option<f64> {
            m.render().lines().find_map(|l| {
                let rest = l.strip_prefix("outbox_cdc_partition_unacknowledged_seconds{")?;
                assert!(
                    rest.contains("partition=\"3\"") && rest.contains("leader=\"2\""),
                    "{l}"
                );
                rest.split_whitespace().last()?.parse().ok()
            })
        };
        // Under relay.kafka_stall_secs (15 s): in the gauge, not the body.
        m.set_held(held(10));
        assert!((10.0..60.0).contains(&series(&m).unwrap()));
        assert_eq!(
            m.readiness(),
            "ready: streaming from the slot, Kafka reachable"
        );
        m.set_held(held(20));
        assert!(m.is_ready());
        let body = m.readiness();
        assert!(body.starts_with("ready, degraded: "), "{body}");
        assert!(
            body.contains("1 partition held: outbox.orders partition 3 (leader broker 2) for 20 s"),
            "{body}"
        );
        // The session's end takes its producer's partitions with it.
        m.streaming_ended();
        m.streaming_began();
        assert_eq!(series(&m), None);
        assert_eq!(
            m.readiness(),
            "ready: streaming from the slot, Kafka reachable"
        );
    }

    #[test]
    fn kafka_acknowledging_nothing_for_the_stall_time_makes_the_relay_not_ready() {
        let m = Metrics::new(config().relay.metric_limits());
        m.set_kafka(&Ok(()));
        m.streaming_began();
        m.in_flight_messages.set(7);
        let unacknowledged = |m: &Metrics| -> f64 {
            m.render()
                .lines()
                .find_map(|l| l.strip_prefix("outbox_cdc_kafka_unacknowledged_seconds "))
                .unwrap()
                .parse()
                .unwrap()
        };
        // The default is 15 s.
        m.set_unacknowledged_since(Some(unix_micros() - 14_000_000));
        assert!(m.is_ready(), "{}", m.readiness());
        m.set_unacknowledged_since(Some(unix_micros() - 16_000_000));
        assert!(!m.is_ready());
        assert!(
            m.readiness()
                .contains("Kafka has acknowledged none of the 7 records in flight for 16 s"),
            "{}",
            m.readiness()
        );
        assert!((16.0..60.0).contains(&unacknowledged(&m)));
        m.set_unacknowledged_since(None);
        assert!(m.is_ready(), "{}", m.readiness());
        assert_eq!(unacknowledged(&m), 0.0);
        // A session that ends takes its wait with it.
        m.set_unacknowledged_since(Some(unix_micros() - 16_000_000));
        m.streaming_ended();
        m.streaming_began();
        assert!(m.is_ready(), "{}", m.readiness());
    }
}
