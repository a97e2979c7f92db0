//! Is Kafka there, may we write, and do the topics of pending rows exist?
//! Used by `run` before it touches the slot and by `check`.

use std::sync::Mutex;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::metadata::Metadata;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::ClientContext;

use super::access::{self, Access};
use super::{limits, settings};
use crate::error::{Code, Error};
use crate::finding::Finding;
use crate::rules::Rule;

const TIMEOUT: Duration = Duration::from_secs(10);

/// Collects the client-level errors librdkafka reports: a failed SASL
/// exchange or TLS handshake arrives here, while the metadata request only
/// learns that no broker answered.
#[derive(Default)]
struct ProbeContext {
    errors: Mutex<Vec<(RDKafkaErrorCode, String)>>,
}

impl rdkafka::producer::ProducerContext for ProbeContext {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &rdkafka::producer::DeliveryResult<'_>, _: ()) {}
}

impl ClientContext for ProbeContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        quiet_log(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if let (Some(code), Ok(mut errors)) = (error.rdkafka_error_code(), self.errors.lock()) {
            errors.push((code, reason.to_string()));
        }
    }
}

/// librdkafka's own lines from a short-lived client (a probe, `tail`):
/// debug, so the coded error that sums them up is the first line people see.
fn quiet_log(level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
    tracing::debug!(target: "librdkafka", ?level, "{fac}: {message}");
}

/// A context for a short-lived client whose failures the caller reports
/// with a code: librdkafka's lines and errors at debug.
#[derive(Default)]
pub(crate) struct Quiet;

impl ClientContext for Quiet {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        quiet_log(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(target: "librdkafka", %error, "{reason}");
    }
}

impl rdkafka::consumer::ConsumerContext for Quiet {}

/// Fails unless the cluster answers a metadata request (blocking).
pub(crate) fn reachable_now(cluster: &settings::Cluster) -> Result<(), Error> {
    let cc = settings::producer_config(cluster, None);
    fetch_metadata(&cc, &cluster.bootstrap_servers).map(|_| ())
}

/// The operator's failure among librdkafka's codes, if one is there.
fn operator_code(code: RDKafkaErrorCode) -> Option<Code> {
    match code {
        RDKafkaErrorCode::Authentication
        | RDKafkaErrorCode::SaslAuthenticationFailed
        | RDKafkaErrorCode::ClusterAuthorizationFailed
        | RDKafkaErrorCode::UnsupportedSASLMechanism
        | RDKafkaErrorCode::IllegalSASLState => Some(Code::KAFKA_AUTH_FAILED),
        RDKafkaErrorCode::SSL => Some(Code::KAFKA_TLS_FAILED),
        _ => None,
    }
}

/// Asks the cluster for its metadata with the relay's own settings (TLS,
/// SASL), and names a failure by librdkafka's error codes: authentication
/// and TLS are the operator's to fix, anything else may pass. Blocking.
fn fetch_metadata(cc: &rdkafka::ClientConfig, servers: &str) -> Result<Metadata, Error> {
    let producer: BaseProducer<ProbeContext> = cc
        .create_with_context(ProbeContext::default())
        .map_err(|e| Error::new(Code::KAFKA_CONFIG_INVALID, crate::error::chain(&e)))?;
    let failed = match producer.client().fetch_metadata(None, TIMEOUT) {
        Ok(md) if !md.brokers().is_empty() => return Ok(md),
        Ok(_) => "no broker in metadata".to_string(),
        Err(e) => crate::error::chain(&e),
    };
    // Serve the error callbacks the failure left queued.
    producer.poll(Duration::from_millis(100));
    let errors = producer
        .context()
        .errors
        .lock()
        .map(|e| e.clone())
        .unwrap_or_default();
    let operator = errors
        .iter()
        .find_map(|(code, reason)| operator_code(*code).map(|c| (c, reason)));
    Err(match operator {
        Some((code, reason)) => {
            Error::new(code, format!("the Kafka cluster at {servers}: {reason}"))
        }
        None => {
            let cause = match errors.first() {
                Some((_, reason)) => format!("{failed}: {reason}"),
                None => failed,
            };
            let e = Error::new(
                Code::KAFKA_UNREACHABLE,
                format!("the Kafka cluster at {servers}: {cause}"),
            );
            // No broker answered the transport at all: the usual slips.
            match errors
                .iter()
                .any(|(code, _)| *code == RDKafkaErrorCode::BrokerTransportFailure)
            {
                true => e.hint("is Kafka running there, and is kafka.bootstrap_servers an address this host reaches (a listener the broker advertises, not only one it binds)?"),
                false => e,
            }
        }
    })
}

/// Fails unless the cluster answers a metadata request.
pub(crate) async fn reachable(cluster: &settings::Cluster) -> Result<(), Error> {
    let cc = settings::producer_config(cluster, None);
    let servers = cluster.bootstrap_servers.clone();
    tokio::task::spawn_blocking(move || fetch_metadata(&cc, &servers).map(|_| ()))
        .await
        .map_err(|e| Error::new(Code::INTERNAL, format!("the Kafka probe task: {e}")))?
}

/// Whether the relay's principal may WRITE and DESCRIBE `topics`, as the
/// brokers report it for the principal itself.
async fn access_findings(cc: &rdkafka::ClientConfig, topics: Vec<String>) -> Vec<Finding> {
    if topics.is_empty() {
        return Vec::new();
    }
    let cc = cc.clone();
    let asked = tokio::task::spawn_blocking(move || {
        let producer: BaseProducer = cc.create().ok()?;
        access::topic_access(producer.client(), &topics, TIMEOUT)
    })
    .await
    .ok()
    .flatten();
    let Some(answers) = asked else {
        return vec![Finding::ok(
            Rule::TopicPermissions,
            "the cluster did not report the principal's operations",
        )];
    };
    let mut out = Vec::new();
    for (topic, access) in &answers {
        let lacks = match access {
            Access::Granted {
                write: true,
                describe: true,
            }
            | Access::Unknown => continue,
            // A missing topic is reported above.
            Access::Refused(RDKafkaErrorCode::UnknownTopicOrPartition) => continue,
            Access::Refused(RDKafkaErrorCode::TopicAuthorizationFailed) => "DESCRIBE",
            Access::Refused(_) => continue,
            Access::Granted { write: false, .. } => "WRITE",
            Access::Granted {
                describe: false, ..
            } => "DESCRIBE",
        };
        out.push(Finding::error(
            Rule::TopicPermissions,
            Code::TOPIC_AUTHORIZATION_FAILED,
            format!("the relay's principal may not {lacks} topic {topic}; grant it WRITE and DESCRIBE on the topic prefix"),
        ));
    }
    if out.is_empty() {
        out.push(Finding::ok(
            Rule::TopicPermissions,
            format!("WRITE and DESCRIBE on {} target topics", answers.len()),
        ));
    }
    out
}

/// Each present topic's `max.message.bytes`: a warning when the principal
/// may not describe it, the limits below the producer's batch size.
async fn limit_findings(cluster: &settings::Cluster, topics: Vec<String>) -> Vec<Finding> {
    if topics.is_empty() {
        return Vec::new();
    }
    let (admin, batch_size) = match (
        limits::admin(cluster),
        limits::configured_batch_size(cluster),
    ) {
        (Ok(admin), Ok(batch_size)) => (admin, batch_size),
        (Err(e), _) | (_, Err(e)) => return vec![Finding::failed(Rule::TopicLimits, &e)],
    };
    let mut below = Vec::new();
    let mut unknown = Vec::new();
    for topic in &topics {
        match limits::describe(&admin, topic).await {
            Ok(d) if limits::batch_size_under(d.max_message_bytes) < batch_size => {
                below.push(format!("{topic} ({})", d.max_message_bytes));
            }
            Ok(_) => {}
            Err(e) => unknown.push(format!("{topic} ({})", e.detail())),
        }
    }
    let mut out = Vec::new();
    if !unknown.is_empty() {
        out.push(Finding::warn(
            Rule::TopicLimits,
            Code::TOPIC_LIMIT_UNKNOWN,
            format!(
                "cannot describe the configuration of {}: grant DESCRIBE_CONFIGS on the topic prefix, or the relay learns max.message.bytes from the batches the broker refuses",
                unknown.join(", ")
            ),
        ));
    }
    if below.is_empty() {
        if unknown.is_empty() {
            out.push(Finding::ok(
                Rule::TopicLimits,
                format!(
                    "{} target topics take batches of batch.size ({batch_size} bytes)",
                    topics.len()
                ),
            ));
        }
    } else {
        out.push(Finding::ok(
            Rule::TopicLimits,
            format!(
                "max.message.bytes below batch.size ({batch_size}): {}; the relay batches under it and refuses larger records before sending",
                below.join(", ")
            ),
        ));
    }
    out
}

/// Reachability, then whether the topics (`prefix` + each of
/// `destinations`) exist or will be auto-created.
pub(crate) async fn findings(
    cluster: &settings::Cluster,
    prefix: &str,
    destinations: &[String],
) -> Vec<Finding> {
    let cc = settings::producer_config(cluster, None);
    let servers = cluster.bootstrap_servers.clone();
    let probe = {
        let (cc, servers) = (cc.clone(), servers.clone());
        tokio::task::spawn_blocking(move || fetch_metadata(&cc, &servers)).await
    };
    let md = match probe {
        Ok(Ok(md)) => md,
        Ok(Err(e)) => return vec![Finding::failed(Rule::Kafka, &e)],
        Err(e) => {
            return vec![Finding::error(
                Rule::Kafka,
                Code::INTERNAL,
                format!("the Kafka probe task: {e}"),
            )]
        }
    };
    let mut out = vec![Finding::ok(
        Rule::Kafka,
        format!("{} brokers reachable at {servers}", md.brokers().len()),
    )];
    let existing: Vec<&str> = md.topics().iter().map(|t| t.name()).collect();
    let missing: Vec<String> = destinations
        .iter()
        .map(|d| format!("{prefix}{d}"))
        .filter(|t| !existing.contains(&t.as_str()))
        .collect();
    if missing.is_empty() {
        out.push(Finding::ok(
            Rule::Topics,
            format!("{} target topics present", destinations.len()),
        ));
        let present: Vec<String> = destinations
            .iter()
            .map(|d| format!("{prefix}{d}"))
            .collect();
        out.extend(access_findings(&cc, present.clone()).await);
        out.extend(limit_findings(cluster, present).await);
        return out;
    }
    let present: Vec<String> = destinations
        .iter()
        .map(|d| format!("{prefix}{d}"))
        .filter(|t| existing.contains(&t.as_str()))
        .collect();
    out.extend(access_findings(&cc, present.clone()).await);
    out.extend(limit_findings(cluster, present).await);
    let broker = md.brokers().first().map(|b| b.id()).unwrap_or(0);
    let admin: Option<AdminClient<DefaultClientContext>> = cc.create().ok();
    let Some(admin) = admin else {
        return out;
    };
    let auto_create = admin
        .describe_configs(
            &[ResourceSpecifier::Broker(broker)],
            &AdminOptions::new().request_timeout(Some(TIMEOUT)),
        )
        .await
        .ok()
        .and_then(|mut rs| rs.pop())
        .and_then(|res| res.ok())
        .and_then(|res| {
            res.get("auto.create.topics.enable")
                .and_then(|e| e.value.clone())
        })
        .is_some_and(|v| v == "true");
    out.push(if auto_create {
        Finding::ok(
            Rule::Topics,
            format!(
                "{} target topics will be auto-created: {}",
                missing.len(),
                missing.join(", ")
            ),
        )
    } else {
        Finding::error(
            Rule::Topics,
            Code::TOPIC_MISSING,
            format!("missing and not auto-creatable: {}", missing.join(", ")),
        )
    });
    out
}
