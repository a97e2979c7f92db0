//! Is Kafka there, may we write, and do the topics of pending rows exist?
//! Used by `run` before it touches the slot and by `check`.

use std::time::Duration;

use std::sync::Mutex;

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::ClientContext;

use super::settings;
use crate::config::{Config, Env};
use crate::error::{Code, Error};
use crate::preflight::Finding;

const TIMEOUT: Duration = Duration::from_secs(10);

/// Keeps the first client-level error librdkafka reports (a failed SASL
/// handshake arrives here, not as the metadata request's error).
#[derive(Default)]
struct ProbeContext {
    first_error: Mutex<Option<(RDKafkaErrorCode, String)>>,
}

impl ClientContext for ProbeContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if let (Some(code), Ok(mut first)) = (error.rdkafka_error_code(), self.first_error.lock()) {
            first.get_or_insert((code, reason.to_string()));
        }
    }
}

fn is_auth(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::Authentication
            | RDKafkaErrorCode::SaslAuthenticationFailed
            | RDKafkaErrorCode::ClusterAuthorizationFailed
    )
}

/// A metadata failure's code, by librdkafka's error codes: authentication
/// is the operator's to fix, anything else may pass.
fn metadata_error(admin: &AdminClient<ProbeContext>, servers: &str, e: &KafkaError) -> Error {
    let seen = admin
        .inner()
        .context()
        .first_error
        .lock()
        .ok()
        .and_then(|f| f.clone());
    let (code, cause) = match (e.rdkafka_error_code(), seen) {
        (Some(c), _) if is_auth(c) => (Code::KAFKA_AUTH_FAILED, crate::error::chain(e)),
        (_, Some((c, reason))) if is_auth(c) => (Code::KAFKA_AUTH_FAILED, reason),
        (_, Some((_, reason))) => (
            Code::KAFKA_UNREACHABLE,
            format!("{}: {reason}", crate::error::chain(e)),
        ),
        (_, None) => (Code::KAFKA_UNREACHABLE, crate::error::chain(e)),
    };
    Error::new(code, format!("the Kafka cluster at {servers}: {cause}"))
}

fn admin(cfg: &Config, env: &Env) -> Result<AdminClient<ProbeContext>, Error> {
    settings::producer_config(cfg, env)?
        .create_with_context(ProbeContext::default())
        .map_err(|e| Error::new(Code::KAFKA_CONFIG_INVALID, crate::error::chain(&e)))
}

/// Fails unless the cluster answers a metadata request.
pub(crate) async fn reachable(cfg: &Config, env: &Env) -> Result<(), Error> {
    let admin = admin(cfg, env)?;
    let servers = cfg.kafka.bootstrap_servers.clone();
    tokio::task::spawn_blocking(move || match admin.inner().fetch_metadata(None, TIMEOUT) {
        Ok(md) if !md.brokers().is_empty() => Ok(()),
        Ok(_) => Err(Error::new(
            Code::KAFKA_UNREACHABLE,
            format!("the Kafka cluster at {servers}: no broker in metadata"),
        )),
        Err(e) => Err(metadata_error(&admin, &servers, &e)),
    })
    .await
    .map_err(|e| Error::new(Code::INTERNAL, format!("the Kafka probe task: {e}")))?
}

/// Reachability, then whether the topics of `destinations` exist or will be
/// auto-created.
pub(crate) async fn findings(cfg: &Config, env: &Env, destinations: &[String]) -> Vec<Finding> {
    let admin = match admin(cfg, env) {
        Ok(a) => a,
        Err(e) => return vec![Finding::failed("kafka", &e)],
    };
    let servers = cfg.kafka.bootstrap_servers.clone();
    let fetched = tokio::task::spawn_blocking(move || {
        let md = admin.inner().fetch_metadata(None, TIMEOUT);
        (admin, md)
    })
    .await;
    let (admin, md) = match fetched {
        Ok((admin, Ok(md))) => (admin, md),
        Ok((admin, Err(e))) => {
            return vec![Finding::failed(
                "kafka",
                &metadata_error(&admin, &servers, &e),
            )]
        }
        Err(e) => {
            return vec![Finding::error(
                "kafka",
                Code::INTERNAL,
                format!("the Kafka probe task: {e}"),
            )]
        }
    };
    let mut out = vec![Finding::ok(
        "kafka",
        format!("{} brokers reachable at {servers}", md.brokers().len()),
    )];
    let prefix = &cfg.outbox.topic_prefix;
    let existing: Vec<&str> = md.topics().iter().map(|t| t.name()).collect();
    let missing: Vec<String> = destinations
        .iter()
        .map(|d| format!("{prefix}{d}"))
        .filter(|t| !existing.contains(&t.as_str()))
        .collect();
    if missing.is_empty() {
        out.push(Finding::ok(
            "topics",
            format!("{} target topics present", destinations.len()),
        ));
        return out;
    }
    let broker = md.brokers().first().map(|b| b.id()).unwrap_or(0);
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
            "topics",
            format!(
                "{} target topics will be auto-created: {}",
                missing.len(),
                missing.join(", ")
            ),
        )
    } else {
        Finding::error(
            "topics",
            Code::TOPIC_MISSING,
            format!("missing and not auto-creatable: {}", missing.join(", ")),
        )
    });
    out
}
