//! OpenTelemetry, off unless `[otel]` is configured: one span per traced
//! record, from its source transaction's commit to Kafka's acknowledgement,
//! a child of the row's `traceparent` when it has one.
//!
//! Whether a record is traced is decided when it is produced (a row's
//! sampled `traceparent` is followed, an unsampled one never; other rows by
//! `sample_ratio`), because the span's context must be
//! known then to write it into the record (`propagate`). The span itself is
//! built when the acknowledgement comes, with the times it covers, and
//! handed to the SDK's batch exporter; a record not traced costs one check.

pub mod config;

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer,
    TracerProvider,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    IdGenerator, RandomIdGenerator, Sampler, SdkTracerProvider, SpanData, SpanExporter,
};

use crate::error::{Code, Error};
use crate::metrics::{names, Metrics};
pub use config::{OtelConfig, OtlpProtocol};

/// The span's name: what the relay did with the record.
const SPAN_NAME: &str = "outbox publish";

/// What a traced record carries from its production to its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seed {
    trace_id: u128,
    /// The row's span, `None` for a trace of the relay's own.
    parent: Option<u64>,
    span_id: u64,
    /// The source transaction's commit, Unix µs.
    commit_us: i64,
}

impl Seed {
    /// The relay's span as a W3C `traceparent` (sampled).
    pub(crate) fn traceparent(&self) -> String {
        format!("00-{:032x}-{:016x}-01", self.trace_id, self.span_id)
    }
}

/// What the acknowledgement tells about a traced record.
pub(crate) struct Acknowledged<'a> {
    pub(crate) message_id: &'a str,
    pub(crate) topic: &'a str,
    pub(crate) partition: i32,
    /// `None` when Kafka did not store it.
    pub(crate) offset: Option<i64>,
    /// `published`, `refused`, `retried` or `ambiguous`.
    pub(crate) outcome: &'static str,
}

/// The tracer and its decisions.
pub struct Tracing {
    provider: SdkTracerProvider,
    tracer: opentelemetry_sdk::trace::SdkTracer,
    /// `sample_ratio` as a bound on a 63-bit draw.
    bound: u64,
    propagate: bool,
    /// Stripped from a topic to name the row's destination.
    topic_prefix: String,
    /// Spans ended and handed to the batch processor.
    recorded: prometheus::IntCounter,
    /// The sampling draws' state, seeded per process.
    draws: std::sync::atomic::AtomicU64,
    ids: RandomIdGenerator,
}

impl std::fmt::Debug for Tracing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracing")
            .field("bound", &self.bound)
            .field("propagate", &self.propagate)
            .finish()
    }
}

thread_local! {
    /// The ids the next span takes: chosen at production, used when the
    /// span is built at the acknowledgement on the same thread.
    static NEXT: Cell<(Option<u128>, Option<u64>)> = const { Cell::new((None, None)) };
}

/// Hands the SDK the ids chosen at production.
#[derive(Debug, Default)]
struct Chosen(RandomIdGenerator);

impl IdGenerator for Chosen {
    fn new_trace_id(&self) -> TraceId {
        let (trace, span) = NEXT.with(Cell::get);
        NEXT.with(|n| n.set((None, span)));
        trace.map_or_else(|| self.0.new_trace_id(), TraceId::from)
    }

    fn new_span_id(&self) -> SpanId {
        let (trace, span) = NEXT.with(Cell::get);
        NEXT.with(|n| n.set((trace, None)));
        span.map_or_else(|| self.0.new_span_id(), SpanId::from)
    }
}

/// The OTLP exporter, counting what it exported and what it dropped, so a
/// collector that is away shows in the metrics rather than nowhere.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    metrics: Arc<Metrics>,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        let result = self.inner.export(batch).await;
        match &result {
            Ok(()) => self.metrics.spans(names::EXPORTED, n),
            Err(e) => {
                self.metrics.spans(names::DROPPED, n);
                tracing::warn!(spans = n, error = %e, "the OpenTelemetry collector did not take a batch of spans");
            }
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

fn at(us: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

/// `traceparent`'s trace id, parent span id and whether it is sampled.
fn parse_traceparent(value: &[u8]) -> Option<(u128, u64, bool)> {
    let text = std::str::from_utf8(value).ok()?;
    let mut parts = text.split('-');
    let version = parts.next()?;
    let trace = parts.next()?;
    let span = parts.next()?;
    let flags = parts.next()?;
    if version.len() != 2 || version == "ff" || trace.len() != 32 || span.len() != 16 {
        return None;
    }
    let trace = u128::from_str_radix(trace, 16).ok().filter(|t| *t != 0)?;
    let span = u64::from_str_radix(span, 16).ok().filter(|s| *s != 0)?;
    let flags = u8::from_str_radix(flags.get(..2)?, 16).ok()?;
    Some((trace, span, flags & 1 == 1))
}

impl Tracing {
    /// Starts the exporter; runs inside the runtime (gRPC needs it).
    pub fn start(
        cfg: &OtelConfig,
        topic_prefix: &str,
        metrics: Arc<Metrics>,
    ) -> Result<Tracing, Error> {
        let failed = |e: &dyn std::fmt::Display| {
            Error::new(
                Code::CONFIG_INVALID_VALUE,
                format!("`otel.endpoint` {}: {e}", cfg.endpoint),
            )
        };
        let exporter = match cfg.protocol {
            OtlpProtocol::HttpProtobuf => {
                // reqwest's rustls takes the process's provider (ring, as
                // everywhere in the relay), even for an http:// endpoint.
                let _ = rustls::crypto::ring::default_provider().install_default();
                let endpoint = match cfg.endpoint.trim_end_matches('/') {
                    // A base URL, as OTEL_EXPORTER_OTLP_ENDPOINT takes it.
                    base if base.matches('/').count() <= 2 => format!("{base}/v1/traces"),
                    full => full.to_string(),
                };
                opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_protocol(Protocol::HttpBinary)
                    .with_endpoint(endpoint)
                    .build()
            }
            OtlpProtocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(cfg.endpoint.clone())
                .build(),
        }
        .map_err(|e| failed(&e))?;
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name(cfg.service_name.clone())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        for outcome in [names::EXPORTED, names::DROPPED] {
            metrics.spans(outcome, 0);
        }
        let recorded = metrics.spans_counter(names::RECORDED);
        let exporter = Counted {
            inner: exporter,
            metrics,
        };
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(Sampler::AlwaysOn)
            .with_id_generator(Chosen::default())
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("outbox-cdc");
        Ok(Tracing {
            provider,
            tracer,
            bound: (cfg.sample_ratio.clamp(0.0, 1.0) * (1u64 << 63) as f64) as u64,
            propagate: cfg.propagate,
            topic_prefix: topic_prefix.to_string(),
            recorded,
            draws: std::sync::atomic::AtomicU64::new({
                use std::hash::{BuildHasher, Hasher};
                let mut h = std::collections::hash_map::RandomState::new().build_hasher();
                h.write_u32(std::process::id());
                h.finish()
            }),
            ids: RandomIdGenerator::default(),
        })
    }

    /// Whether the relay's span context goes into the record.
    pub(crate) fn propagates(&self) -> bool {
        self.propagate
    }

    /// At production: the record's seed when it is traced.
    pub(crate) fn seed(&self, traceparent: Option<&[u8]>, commit_us: i64) -> Option<Seed> {
        let (trace_id, parent) = match traceparent.and_then(parse_traceparent) {
            Some((trace, span, true)) => (trace, Some(span)),
            Some((_, _, false)) => return None,
            None => {
                // The draw is cheap (most records are not traced); the trace
                // id of one that is comes from the SDK's generator.
                if self.draw() >> 1 >= self.bound {
                    return None;
                }
                let trace = u128::from_be_bytes(self.ids.new_trace_id().to_bytes());
                (trace, None)
            }
        };
        Some(Seed {
            trace_id,
            parent,
            span_id: u64::from_be_bytes(self.ids.new_span_id().to_bytes()),
            commit_us,
        })
    }

    /// A uniform 64-bit draw (SplitMix64 over an atomic counter).
    fn draw(&self) -> u64 {
        let mut z = self
            .draws
            .fetch_add(0x9e37_79b9_7f4a_7c15, std::sync::atomic::Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// At the acknowledgement: the span, from the commit to `now_us`.
    pub(crate) fn acknowledged(&self, seed: &Seed, ack: &Acknowledged<'_>, now_us: i64) {
        let parent = match seed.parent {
            Some(span) => Context::new().with_remote_span_context(SpanContext::new(
                TraceId::from(seed.trace_id),
                SpanId::from(span),
                TraceFlags::SAMPLED,
                true,
                TraceState::default(),
            )),
            None => Context::new(),
        };
        let behind = (now_us - seed.commit_us).max(0) as f64 / 1e6;
        let mut attributes = vec![
            KeyValue::new("messaging.system", "kafka"),
            KeyValue::new("messaging.operation.type", "send"),
            KeyValue::new("messaging.destination.name", ack.topic.to_string()),
            KeyValue::new(
                "outbox.destination",
                ack.topic
                    .strip_prefix(self.topic_prefix.as_str())
                    .unwrap_or(ack.topic)
                    .to_string(),
            ),
            KeyValue::new(
                "messaging.destination.partition.id",
                ack.partition.to_string(),
            ),
            KeyValue::new("messaging.message.id", ack.message_id.to_string()),
            KeyValue::new("outbox.outcome", ack.outcome),
            KeyValue::new("outbox.seconds_behind_source", behind),
        ];
        if let Some(offset) = ack.offset {
            attributes.push(KeyValue::new("messaging.kafka.offset", offset));
        }
        NEXT.with(|n| n.set((Some(seed.trace_id), Some(seed.span_id))));
        let mut span = self
            .tracer
            .span_builder(SPAN_NAME)
            .with_kind(SpanKind::Producer)
            .with_start_time(at(seed.commit_us))
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        NEXT.with(|n| n.set((None, None)));
        opentelemetry::trace::Span::end_with_timestamp(&mut span, at(now_us));
        self.recorded.inc();
    }

    /// Exports what is buffered, at most `within`.
    pub fn shutdown(&self, within: Duration) {
        if let Err(e) = self.provider.shutdown_with_timeout(within) {
            tracing::warn!(error = %e, "exporting the last spans");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_gives_its_trace_its_parent_and_its_flag() {
        assert_eq!(
            parse_traceparent(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            Some((0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7, true))
        );
        assert_eq!(
            parse_traceparent(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
                .map(|p| p.2),
            Some(false)
        );
        assert_eq!(
            parse_traceparent(b"00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
            None
        );
        assert_eq!(
            parse_traceparent(b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            None
        );
        assert_eq!(parse_traceparent(b"garbage"), None);
    }

    #[test]
    fn a_seed_writes_the_relays_span_as_the_parent_of_what_follows() {
        let seed = Seed {
            trace_id: 0x4bf92f3577b34da6a3ce929d0e0e4736,
            parent: Some(1),
            span_id: 0xabc,
            commit_us: 0,
        };
        assert_eq!(
            seed.traceparent(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000abc-01"
        );
    }

    fn tracing(sample_ratio: f64) -> Tracing {
        let cfg = OtelConfig {
            endpoint: "http://127.0.0.1:1".into(),
            protocol: OtlpProtocol::HttpProtobuf,
            sample_ratio,
            propagate: false,
            service_name: "t".into(),
        };
        let relay = crate::config::RelayConfig::default();
        Tracing::start(&cfg, "", Arc::new(Metrics::new(relay.metric_limits()))).unwrap()
    }

    #[test]
    fn a_rows_sampled_trace_is_followed_an_unsampled_one_never_and_others_by_the_ratio() {
        let sampled = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let unsampled = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        let none = tracing(0.0);
        let seed = none.seed(Some(sampled), 7).unwrap();
        assert_eq!(seed.trace_id, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(seed.parent, Some(0x00f067aa0ba902b7));
        assert_ne!(seed.span_id, 0);
        assert_eq!(none.seed(None, 7), None);
        let all = tracing(1.0);
        assert_eq!(all.seed(Some(unsampled), 7), None);
        assert!((0..1000).all(|_| all.seed(None, 7).is_some_and(|s| s.parent.is_none())));
        let tenth = tracing(0.1);
        let n = (0..20_000)
            .filter(|_| tenth.seed(None, 7).is_some())
            .count();
        assert!((1_600..2_400).contains(&n), "{n} of 20000 at 0.1");
    }
}
