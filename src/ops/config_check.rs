//! `config validate`'s checks past loading, all without a network: the
//! secrets the configuration names resolve (never printed), and librdkafka
//! accepts the Kafka properties as the producer and the consumer take them.

use crate::config::{Config, Env};
use crate::error::{Code, Error};
use crate::kafka::settings;

/// Resolves the secrets and has librdkafka check every Kafka property.
pub(crate) fn validate(cfg: &Config, env: &Env) -> Result<(), Error> {
    cfg.postgres_password(env)?;
    let cluster = cfg.kafka_cluster(env)?;
    // librdkafka checks every property's name and value as it is set,
    // before any client (and any connection) exists.
    let producer = settings::producer_config(&cluster, cfg.producer_transactional_id().as_deref());
    let consumer = settings::consumer_config(&cluster);
    for (role, cc) in [("producer", producer), ("consumer", consumer)] {
        cc.create_native_config().map_err(|e| {
            Error::new(
                Code::CONFIG_INVALID_VALUE,
                format!(
                    "`kafka.properties` as the {role} takes them: {}",
                    crate::error::chain(&e)
                ),
            )
        })?;
    }
    Ok(())
}
