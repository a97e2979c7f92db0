//! The engines the benchmark compares: the relay in its variants and
//! Debezium in its.

use std::path::PathBuf;

use crate::RELAY_BIN;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Engine {
    Relay,
    /// The relay without its PUBLISHED bookkeeping, to show what that costs.
    RelayUnmarked,
    /// The relay as it was before it sent at once when caught up
    /// (`when_caught_up = "linger"`): every record waits out `linger.ms`.
    /// The paired drains show what sending at once costs a backlog.
    RelayFixedLinger,
    /// The relay with `linger.ms=0`: the other way to low latency, which
    /// the paired drains show costs 1-row backlogs.
    RelayLinger0,
    /// Another build of the relay (`BENCH_BASELINE_BIN`), to compare two
    /// versions in one run.
    RelayBaseline,
    Debezium,
    /// `relay.delivery = "transactional"`.
    RelayTransactional,
    /// The relay with its HTTP endpoint on and scraped every second, to
    /// show what the metrics cost.
    RelayMetrics,
    /// `[otel]` with `sample_ratio = 1.0`: a span for every record, sent
    /// to a local collector, to show what tracing costs at its most.
    RelayOtel,
    /// `[otel]` with its default `sample_ratio`: with `--traceparent none`
    /// a share of the records is traced; rows with a sampled `traceparent`
    /// (the default rows) are all traced, whatever the ratio.
    RelayOtelDefault,
    /// Kafka Connect's exactly-once source support (KIP-618): the worker
    /// with `exactly.once.source.support=enabled`, the connector with
    /// `exactly.once.support=required`.
    DebeziumExactlyOnce,
}

impl Engine {
    pub(crate) fn tag(self) -> &'static str {
        match self {
            Engine::Relay => "outbox-cdc",
            Engine::RelayUnmarked => "outbox-cdc (mark_published = false)",
            Engine::RelayFixedLinger => "outbox-cdc (when_caught_up = linger)",
            Engine::RelayLinger0 => "outbox-cdc (linger.ms = 0)",
            Engine::RelayBaseline => "outbox-cdc (BENCH_BASELINE_BIN)",
            Engine::Debezium => "debezium",
            Engine::RelayTransactional => "outbox-cdc (delivery = transactional)",
            Engine::RelayMetrics => "outbox-cdc ([http] on, /metrics scraped every second)",
            Engine::RelayOtel => "outbox-cdc ([otel] on, every record traced)",
            Engine::RelayOtelDefault => "outbox-cdc ([otel] on, default sampling)",
            Engine::DebeziumExactlyOnce => "debezium (exactly.once.support = required)",
        }
    }

    /// Records become visible to read_committed consumers only when their
    /// transaction commits: these engines are read that way, and timed by
    /// when the consumer received a record, not by its append time.
    pub(crate) fn transactional(self) -> bool {
        matches!(
            self,
            Engine::RelayTransactional | Engine::DebeziumExactlyOnce
        )
    }

    pub(crate) fn db_tag(self) -> &'static str {
        match self {
            Engine::Relay => "relay",
            Engine::RelayUnmarked => "relay_unmarked",
            Engine::RelayFixedLinger => "relay_fixed_linger",
            Engine::RelayLinger0 => "relay_linger0",
            Engine::RelayBaseline => "relay_baseline",
            Engine::Debezium => "debezium",
            Engine::RelayTransactional => "relay_tx",
            Engine::RelayMetrics => "relay_metrics",
            Engine::RelayOtel => "relay_otel",
            Engine::RelayOtelDefault => "relay_otel_default",
            Engine::DebeziumExactlyOnce => "debezium_eos",
        }
    }

    /// The relay binary this engine runs.
    pub(crate) fn relay_bin(self) -> PathBuf {
        match self {
            Engine::RelayBaseline => std::env::var_os("BENCH_BASELINE_BIN")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(RELAY_BIN)),
            _ => PathBuf::from(RELAY_BIN),
        }
    }
}
