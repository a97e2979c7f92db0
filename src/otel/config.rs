//! `[otel]`: OpenTelemetry spans for published records; off when absent.
//! The section lives beside what it configures; `config` reads it.

use serde::{Deserialize, Serialize};

use crate::error::Error;

fn invalid(key: &str, reason: &str) -> Error {
    Error::invalid_value(key, reason)
}

/// How spans reach the collector.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub enum OtlpProtocol {
    /// OTLP/HTTP with protobuf bodies (port 4318 by convention).
    #[default]
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    /// OTLP/gRPC (port 4317 by convention).
    #[serde(rename = "grpc")]
    Grpc,
}

/// A span from a source transaction's commit to Kafka's acknowledgement of
/// each sampled record.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct OtelConfig {
    /// The collector: `http://host:4318` (the exporter adds `/v1/traces`)
    /// or, for gRPC, `http://host:4317`.
    pub endpoint: String,
    #[serde(default)]
    pub protocol: OtlpProtocol,
    /// The share of records whose row has no sampled `traceparent` that get
    /// a span of their own trace (0 to 1). A row's sampled `traceparent`
    /// is always followed, an unsampled one never.
    #[serde(default = "default_sample_ratio")]
    pub sample_ratio: f64,
    /// Writes the relay's span context into each traced record's
    /// `traceparent` header. Off by default: it breaks byte parity with a
    /// Debezium deployment that does not trace.
    #[serde(default)]
    pub propagate: bool,
    /// `service.name` of the spans.
    #[serde(default = "default_service_name")]
    pub service_name: String,
}

fn default_sample_ratio() -> f64 {
    0.01
}

fn default_service_name() -> String {
    "outbox-cdc".into()
}

impl OtelConfig {
    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.endpoint.starts_with("https://") {
            // Not built in: spans go to a collector or agent beside the relay.
            return Err(invalid(
                "otel.endpoint",
                "TLS to the collector is not supported: send to a collector or agent beside the relay, e.g. http://127.0.0.1:4318",
            ));
        }
        if !self.endpoint.starts_with("http://") {
            return Err(invalid(
                "otel.endpoint",
                "must be a URL, e.g. http://127.0.0.1:4318",
            ));
        }
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            return Err(invalid("otel.sample_ratio", "must be between 0 and 1"));
        }
        if self.service_name.is_empty() {
            return Err(invalid("otel.service_name", "must not be empty"));
        }
        Ok(())
    }
}

/// What each key of `[otel]` means, written beside the keys: the
/// configuration reference is generated from it, and a test fails when a
/// key has none.
pub(crate) const MEANINGS: &[(&str, &str)] = &[
    ("otel.endpoint", "the OpenTelemetry Collector's OTLP URL, e.g. `http://127.0.0.1:4318` (`/v1/traces` is added to a URL without a path) or, for gRPC, `http://127.0.0.1:4317`; plain `http://` only (a collector or agent beside the relay forwards over TLS); see [Tracing](../operating/tracing.md)"),
    ("otel.protocol", "`http/protobuf` or `grpc`"),
    ("otel.sample_ratio", "the share of records whose row has no sampled `traceparent` that get a span (of a new trace); a row's sampled `traceparent` is always followed, an unsampled one never"),
    ("otel.propagate", "write the relay's span into each traced record's `traceparent` header; breaks byte parity with a Debezium deployment that does not trace"),
    ("otel.service_name", "the spans' `service.name`"),
];
