//! `outbox-cdc config validate`: the configuration checked offline, as far
//! as it can be without a network: its syntax, keys and values, the secrets
//! it names (resolvable, never printed), and the Kafka properties as
//! librdkafka itself accepts them.

use super::ConfigArg;
use crate::error::{Code, Error};
use crate::kafka::settings;

#[derive(clap::Subcommand)]
pub(super) enum ConfigCommand {
    /// Check the configuration offline: syntax, keys, values, secrets resolvable, Kafka properties accepted by librdkafka; nothing connects.
    #[command(
        after_help = "Examples:\n  outbox-cdc config validate -c /etc/outbox-cdc/outbox-cdc.toml\n  OUTBOX_CDC_RELAY_DELIVERY=transactional outbox-cdc config validate"
    )]
    Validate,
}

pub(super) fn run(command: ConfigCommand, config: &ConfigArg) -> Result<(), Error> {
    match command {
        ConfigCommand::Validate => validate(config),
    }
}

fn validate(config: &ConfigArg) -> Result<(), Error> {
    let cfg = config.load()?;
    cfg.postgres_password(&super::env)?;
    let cluster = cfg.kafka_cluster(&super::env)?;
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
    println!("{}: valid", config.path.display());
    Ok(())
}
