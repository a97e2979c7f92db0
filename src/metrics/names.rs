//! The one definition of every metric: its exposed name (units in the
//! name, `_total` on counters), help text and labels. The registry and the
//! generated alerting rules both read these, so they cannot drift.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

#[derive(Debug, Clone, Copy)]
pub struct Def {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub labels: &'static [&'static str],
}

const fn counter(name: &'static str, help: &'static str, labels: &'static [&'static str]) -> Def {
    Def {
        name,
        help,
        kind: Kind::Counter,
        labels,
    }
}

const fn gauge(name: &'static str, help: &'static str, labels: &'static [&'static str]) -> Def {
    Def {
        name,
        help,
        kind: Kind::Gauge,
        labels,
    }
}

/// The metrics reference (`docs/reference/metrics.md`): every metric with
/// its type, labels and help, written from these definitions; a test fails
/// when the committed page is stale.
pub fn reference_markdown() -> String {
    let mut out = String::from(
        "# Metrics reference\n\nGenerated from `src/metrics/names.rs` (`scripts/regenerate.sh`); do not edit by hand.\nEvery metric is served at `/metrics` when `[http]` is set.\n\n| metric | type | labels | what it counts |\n|---|---|---|---|\n",
    );
    for def in ALL.iter().chain(STANDARD) {
        let kind = match def.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let labels = def
            .labels
            .iter()
            .map(|l| format!("`{l}`"))
            .collect::<Vec<_>>()
            .join(", ");
        out.push_str(&format!(
            "| `{}` | {kind} | {labels} | {} |\n",
            def.name,
            def.help.replace('|', "\\|")
        ));
    }
    out
}

/// Label names.
pub const DESTINATION: &str = "destination";
pub const CODE: &str = "code";
pub const OUTCOME: &str = "outcome";
pub const BEHAVIOR: &str = "behavior";
pub const REASON: &str = "reason";
pub const STATUS: &str = "status";
pub const VERSION: &str = "version";
pub const COMMIT: &str = "commit";
pub const PARTITION: &str = "partition";
pub const LEADER: &str = "leader";

pub const RECORDS_PUBLISHED: Def = counter(
    "outbox_cdc_records_published_total",
    "Records Kafka confirmed (in transactional delivery: committed), by destination topic.",
    &[DESTINATION],
);
pub const ROWS_FAILED: Def = counter(
    "outbox_cdc_rows_failed_total",
    "Outbox rows recorded as FAILED, by error code.",
    &[CODE],
);
pub const DEAD_LETTERS: Def = counter(
    "outbox_cdc_dead_letters_total",
    "Rows of an outbox that keeps no status written to its dead-letter table (not published), by error code.",
    &[CODE],
);
pub const UPDATES_DROPPED: Def = counter(
    "outbox_cdc_updates_dropped_total",
    "UPDATEs of an outbox that keeps no status, dropped or refused as table.op.invalid.behavior says (warn, error, fatal).",
    &[BEHAVIOR],
);
pub const DELIVERIES: Def = counter(
    "outbox_cdc_deliveries_total",
    "Kafka delivery reports, by outcome: confirmed, rejected (refused for good), ambiguous (possibly stored) or retry (not stored, replayed).",
    &[OUTCOME],
);
pub const SESSION_RESTARTS: Def = counter(
    "outbox_cdc_session_restarts_total",
    "Pipeline sessions restarted after a failure, by the error code that ended them.",
    &[REASON],
);
pub const IN_FLIGHT_MESSAGES: Def = gauge(
    "outbox_cdc_in_flight_messages",
    "Messages produced and not yet acknowledged by Kafka.",
    &[],
);
pub const IN_FLIGHT_MESSAGES_LIMIT: Def = gauge(
    "outbox_cdc_in_flight_messages_limit",
    "relay.max_in_flight_messages: the backpressure bound on in-flight messages.",
    &[],
);
pub const IN_FLIGHT_BYTES: Def = gauge(
    "outbox_cdc_in_flight_bytes",
    "Bytes of records produced and not yet acknowledged by Kafka.",
    &[],
);
pub const IN_FLIGHT_BYTES_LIMIT: Def = gauge(
    "outbox_cdc_in_flight_bytes_limit",
    "relay.max_in_flight_bytes: the backpressure bound on in-flight bytes.",
    &[],
);
pub const COMMIT_TO_ACK: Def = Def {
    name: "outbox_cdc_commit_to_ack_seconds",
    help: "Time from a source transaction's commit in PostgreSQL to the acknowledgement of all its records by Kafka.",
    kind: Kind::Histogram,
    labels: &[],
};
pub const SECONDS_BEHIND_SOURCE: Def = gauge(
    "outbox_cdc_seconds_behind_source",
    "Age of the oldest source commit read and not yet settled in Kafka; 0 when caught up.",
    &[],
);
pub const KAFKA_UNACKNOWLEDGED: Def = gauge(
    "outbox_cdc_kafka_unacknowledged_seconds",
    "How long Kafka has acknowledged none of the records in flight; 0 while it acknowledges or nothing is in flight. Past relay.kafka_stall_secs the relay is not ready.",
    &[],
);
pub const PARTITION_HELD: Def = gauge(
    "outbox_cdc_partition_unacknowledged_seconds",
    "Age of the oldest record a partition holds that Kafka has not acknowledged, to within librdkafka's statistics.interval.ms (1 s unless set), by destination topic, partition and leader broker id; present only while the partition has acknowledged none of its records for a whole interval (held), gone once it acknowledges or drains.",
    &[DESTINATION, PARTITION, LEADER],
);
pub const SLOT_CONFIRMED_LAG: Def = gauge(
    "outbox_cdc_slot_confirmed_flush_lag_bytes",
    "WAL between the server's current position and the slot's confirmed_flush_lsn.",
    &[],
);
pub const SLOT_RETAINED_WAL: Def = gauge(
    "outbox_cdc_slot_retained_wal_bytes",
    "WAL the slot retains: between the server's current position and its restart_lsn.",
    &[],
);
pub const SLOT_WAL_STATUS: Def = gauge(
    "outbox_cdc_slot_wal_status",
    "1 for the slot's wal_status (reserved, extended, unreserved, lost; missing when the slot is gone), 0 for the others.",
    &[STATUS],
);
pub const SLOT_SAFE_WAL_SIZE: Def = gauge(
    "outbox_cdc_slot_safe_wal_size_bytes",
    "WAL that can still be written before the slot is in danger of losing WAL (safe_wal_size); absent when max_slot_wal_keep_size is unlimited.",
    &[],
);
pub const SLOT_SAFE_WAL_MARGIN: Def = gauge(
    "outbox_cdc_slot_safe_wal_margin_bytes",
    "relay.slot_wal_margin_bytes: the slot guard warns when safe_wal_size falls under it.",
    &[],
);
pub const SLOT_ACTIVE: Def = gauge(
    "outbox_cdc_slot_active",
    "1 when a walsender streams from the slot (this relay or another).",
    &[],
);
pub const SLOT_CHECKS_FAILED: Def = counter(
    "outbox_cdc_slot_checks_failed_total",
    "Slot guard reads that failed (PostgreSQL unreachable or refusing).",
    &[],
);
pub const HEARTBEATS: Def = counter(
    "outbox_cdc_heartbeats_total",
    "Heartbeat messages written with pg_logical_emit_message.",
    &[],
);
pub const HEARTBEATS_RECEIVED: Def = counter(
    "outbox_cdc_heartbeats_received_total",
    "The relay's own heartbeat messages read back from the slot (consumed, never published).",
    &[],
);
pub const HANDOVER_BACKLOG: Def = gauge(
    "outbox_cdc_handover_backlog_rows",
    "Rows of a cutover's or recovery's hand-over list not yet published.",
    &[],
);
pub const JOURNALED: Def = counter(
    "outbox_cdc_rows_journaled_published_total",
    "Rows Kafka confirmed, recorded in the published journal (the slot passes them only after).",
    &[],
);
pub const LEFT_OUT_AS_PUBLISHED: Def = counter(
    "outbox_cdc_replayed_rows_left_out_total",
    "Rows the slot sent again after a restart that were already published and recorded (journaled or PUBLISHED): settled without being sent twice.",
    &[],
);
pub const MARKS_WRITTEN: Def = counter(
    "outbox_cdc_rows_marked_published_total",
    "Outbox rows whose status became PUBLISHED (journal folded into the table).",
    &[],
);
pub const KAFKA_TRANSACTIONS: Def = counter(
    "outbox_cdc_kafka_transactions_total",
    "Transactional delivery: Kafka transactions, by outcome (committed, aborted).",
    &[OUTCOME],
);
pub const SPANS: Def = counter(
    "outbox_cdc_spans_total",
    "[otel] spans by outcome: recorded (ended and queued for export), exported (the collector took them), dropped (the collector refused them or did not answer); recorded less the other two is what is queued or was lost to a full queue.",
    &[OUTCOME],
);
pub const STANDBY: Def = gauge(
    "outbox_cdc_standby",
    "1 while another relay holds the slot and this one waits to take over.",
    &[],
);
pub const READY: Def = gauge(
    "outbox_cdc_ready",
    "1 while streaming from the slot with Kafka reachable (what /readyz answers).",
    &[],
);
pub const BUILD_INFO: Def = gauge(
    "outbox_cdc_build_info",
    "Always 1; the version and commit of this build.",
    &[VERSION, COMMIT],
);

pub const OTHER_READERS: Def = gauge(
    "outbox_cdc_other_readers",
    "Active slots other than the outbox's declared relay and its declared copies whose publications include the outbox (a Debezium connector restarted after a takeover, a second deployment): two relays publish it. Read every relay.slot_check_interval_secs; slots the role cannot see into are not counted (`check` warns of them).",
    &[],
);
/// Every metric, in exposition order.
pub const ROWS_PENDING: Def = gauge(
    "outbox_cdc_rows_pending",
    "Rows of the platform's table not yet published (PENDING and not in the journal), read every relay.slot_check_interval_secs, or when a count is slow, ten times its length after it; 0 for a table that keeps no status (its dead letters: outbox_cdc_dead_letters_total).",
    &[],
);
/// The process collector's metrics (Linux), under Prometheus's standard
/// names; the dashboard reads these two.
pub const PROCESS_CPU_SECONDS: Def = counter(
    "process_cpu_seconds_total",
    "CPU time the relay's process used, user and system (Prometheus's standard process collector, Linux).",
    &[],
);
pub const PROCESS_RESIDENT_MEMORY: Def = gauge(
    "process_resident_memory_bytes",
    "The relay's resident memory (Prometheus's standard process collector, Linux; also process_virtual_memory_bytes, process_open_fds, process_max_fds, process_start_time_seconds).",
    &[],
);

pub const ALL: &[Def] = &[
    RECORDS_PUBLISHED,
    ROWS_FAILED,
    DEAD_LETTERS,
    UPDATES_DROPPED,
    DELIVERIES,
    SESSION_RESTARTS,
    IN_FLIGHT_MESSAGES,
    IN_FLIGHT_MESSAGES_LIMIT,
    IN_FLIGHT_BYTES,
    IN_FLIGHT_BYTES_LIMIT,
    COMMIT_TO_ACK,
    SECONDS_BEHIND_SOURCE,
    KAFKA_UNACKNOWLEDGED,
    PARTITION_HELD,
    SLOT_CONFIRMED_LAG,
    SLOT_RETAINED_WAL,
    SLOT_WAL_STATUS,
    SLOT_SAFE_WAL_SIZE,
    SLOT_SAFE_WAL_MARGIN,
    SLOT_ACTIVE,
    SLOT_CHECKS_FAILED,
    HEARTBEATS,
    HEARTBEATS_RECEIVED,
    HANDOVER_BACKLOG,
    JOURNALED,
    LEFT_OUT_AS_PUBLISHED,
    MARKS_WRITTEN,
    KAFKA_TRANSACTIONS,
    SPANS,
    STANDBY,
    READY,
    BUILD_INFO,
    ROWS_PENDING,
    OTHER_READERS,
];

/// Exported by the process collector rather than defined by the relay.
pub const STANDARD: &[Def] = &[PROCESS_CPU_SECONDS, PROCESS_RESIDENT_MEMORY];

/// The values `outbox_cdc_slot_wal_status` reports, as PostgreSQL names them.
pub const WAL_STATUSES: &[&str] = &["reserved", "extended", "unreserved", "lost", "missing"];

/// Delivery outcomes.
pub const CONFIRMED: &str = "confirmed";
pub const REJECTED: &str = "rejected";
pub const AMBIGUOUS: &str = "ambiguous";
pub const RETRY: &str = "retry";
/// Kafka transaction outcomes.
pub const COMMITTED: &str = "committed";
/// Span outcomes.
pub const RECORDED: &str = "recorded";
pub const EXPORTED: &str = "exported";
pub const DROPPED: &str = "dropped";
pub const ABORTED: &str = "aborted";

/// Buckets of the commit-to-acknowledgement histogram, in seconds.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0,
];
