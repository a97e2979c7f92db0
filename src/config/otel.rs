//! `[otel]`: OpenTelemetry spans for published records; off when absent.

use serde::{Deserialize, Serialize};

use super::invalid;
use crate::error::Error;

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
    pub(super) fn validate(&self) -> Result<(), Error> {
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
