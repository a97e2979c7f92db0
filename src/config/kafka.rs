//! `[kafka]`: the cluster and the librdkafka properties the operator may
//! set (the ones the record contract depends on are the relay's own).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::secrets::PropertyValue;
use super::{invalid, non_empty, secret_in_file};
use crate::error::Error;
use crate::kafka::settings;
use crate::kafka::topic_creation::TopicCreation;
use crate::secret::Secret;

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct KafkaConfig {
    /// Required.
    pub bootstrap_servers: String,
    /// Passed to librdkafka as they are, after the checks in `validate`.
    pub properties: BTreeMap<String, PropertyValue>,
    /// Kafka Connect's `topic.creation.*` (without the prefix): the relay
    /// creates each topic it routes to before its first record, as the
    /// connector's worker would.
    pub topic_creation: BTreeMap<String, String>,
}

/// Whether a Kafka property carries a credential: its value must be a
/// secret reference (a plain one is refused when the file is loaded), and
/// `config show` never prints one. The one rule for both.
pub(crate) fn is_secret_property(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.contains("password") || n.contains("secret") || n == "sasl.jaas.config" || n == "ssl.key.pem"
}

impl KafkaConfig {
    /// `topic_creation`, read; `None` when the connector creates no topic.
    pub fn topic_creation(&self) -> Result<Option<TopicCreation>, Error> {
        TopicCreation::parse(&self.topic_creation)
            .map_err(|why| invalid("kafka.topic_creation", why))
    }

    /// The cluster and its properties with secrets resolved.
    pub fn cluster(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<settings::Cluster, Error> {
        let properties = self
            .properties
            .iter()
            .map(|(k, v)| {
                let value = match v {
                    PropertyValue::Plain(s) => Secret::new(s.clone()),
                    PropertyValue::Secret(src) => {
                        src.resolve(&format!("kafka.properties.{k}"), env)?
                    }
                };
                Ok((k.clone(), value))
            })
            .collect::<Result<_, Error>>()?;
        Ok(settings::Cluster {
            bootstrap_servers: self.bootstrap_servers.clone(),
            properties,
        })
    }

    pub(super) fn validate(&self) -> Result<(), Error> {
        non_empty("kafka.bootstrap_servers", &self.bootstrap_servers)?;
        self.topic_creation()?;
        for (name, value) in &self.properties {
            let key = format!("kafka.properties.{name}");
            if let Some(owned) = settings::owned(name) {
                return Err(invalid(
                    &key,
                    format!("is set by outbox-cdc: {}", owned.why),
                ));
            }
            if is_secret_property(name) && matches!(value, PropertyValue::Plain(_)) {
                return Err(secret_in_file(&key));
            }
        }
        Ok(())
    }
}

/// What each key of `[kafka]` means, written beside the keys: the
/// configuration reference is generated from it, and a test fails when a
/// key has none.
pub(crate) const MEANINGS: &[(&str, &str)] = &[
    ("kafka.bootstrap_servers", "the brokers, `host:port,...`"),
    ("kafka.topic_creation", "the connector's topic creation (KIP-158), by Kafka Connect's names without `topic.creation.`: `\"default.partitions\" = \"3\"`, `\"default.replication.factor\" = \"-1\"`, `groups` and each group's `include`, `exclude`, counts and topic configs; the relay creates each topic it routes to before its first record as the worker would, so every key lands on the partition it lands on under Debezium; the generated configuration writes it back"),
    ("kafka.properties", "librdkafka properties passed through (TLS, SASL, compression, batching); `acks`, `enable.idempotence`, `enable.gapless.guarantee`, `max.in.flight.requests.per.connection`, `partitioner`, `transactional.id` and `bootstrap.servers` belong to the relay and are refused (`transaction.timeout.ms`, default 120 000 in transactional delivery, may be set); properties whose names carry a password or secret must be secret references"),
];

#[cfg(test)]
mod tests {
    use super::is_secret_property;

    #[test]
    fn one_rule_says_which_properties_carry_credentials() {
        for (name, secret) in [
            ("sasl.password", true),
            ("ssl.key.password", true),
            ("ssl.keystore.password", true),
            ("SASL.PASSWORD", true),
            ("sasl.oauthbearer.client.secret", true),
            ("ssl.key.pem", true),
            ("sasl.jaas.config", true),
            ("sasl.username", false),
            ("sasl.mechanism", false),
            ("ssl.ca.location", false),
            ("ssl.certificate.pem", false),
            ("sasl.oauthbearer.token.endpoint.url", false),
            ("compression.type", false),
        ] {
            assert_eq!(is_secret_property(name), secret, "{name}");
        }
    }
}
