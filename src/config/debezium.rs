//! `[debezium]`: what the generated Debezium configuration needs beyond the
//! relay's own settings (its slot, its names, where Debezium Server keeps
//! offsets, the Strimzi resources).

use serde::{Deserialize, Serialize};

use super::{invalid, non_empty, slot_name};
use crate::contract::context::{self, DebeziumVersion};
use crate::contract::outbox;
use crate::error::Error;

pub const DEFAULT_CONNECTOR_NAME: &str = "outbox-cdc-debezium";
pub const DEFAULT_SLOT: &str = "outbox_cdc_debezium";
pub const DEFAULT_TOPIC_PREFIX: &str = "outbox-cdc";
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: u64 = 10_000;
pub const DEFAULT_OFFSET_FILE: &str = "data/offsets.dat";
pub const DEFAULT_OFFSET_TOPIC: &str = "outbox-cdc-debezium-offsets";
pub const DEFAULT_OFFSET_FLUSH_INTERVAL_MS: u64 = 10_000;
pub const DEFAULT_CONNECT_CLUSTER: &str = "outbox-cdc-connect";
pub const DEFAULT_PASSWORD_SECRET_NAME: &str = "outbox-cdc-postgres";
pub const DEFAULT_PASSWORD_SECRET_KEY: &str = "password";

/// How the generated Debezium configuration refers to the database password:
/// a Kafka Connect config-provider reference, never the value.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum ProviderReference {
    /// `${env:NAME}` (Kafka's `EnvVarConfigProvider`)
    Env { env: String },
    /// `${file:PATH:KEY}` (Kafka's `FileConfigProvider`)
    File { file: String, key: String },
}

impl ProviderReference {
    pub fn placeholder(&self) -> String {
        match self {
            ProviderReference::Env { env } => format!("${{env:{env}}}"),
            ProviderReference::File { file, key } => format!("${{file:{file}:{key}}}"),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct DebeziumConfig {
    /// The Debezium release the deployment runs: it decides the context
    /// headers its records carry and the settings its files name.
    pub version: String,
    /// `extended.headers.enabled`; unset: Debezium's default (`true`) for
    /// the debezium contract, `false` for the messaging contract (its
    /// records carry `id` and the 15 canonical headers).
    pub extended_headers: Option<bool>,
    /// The connector's decoding plugin (`plugin.name`): its slot's. The
    /// relay reads its own slot with pgoutput, and takes a connector's slot
    /// of either over.
    pub plugin_name: Plugin,
    pub connector_name: String,
    /// Debezium's slot: never the relay's.
    pub slot: String,
    /// Debezium's `topic.prefix` (its logical server name; heartbeats go to
    /// `__debezium-heartbeat.<topic_prefix>`). Outbox records are routed by
    /// `outbox.topic_prefix`, not by this.
    pub topic_prefix: String,
    /// The database host as Kafka Connect reaches it; defaults to `postgres.host`.
    pub database_hostname: Option<String>,
    pub database_port: Option<u16>,
    /// Defaults to `${env:<the relay's password variable>}`.
    pub password: Option<ProviderReference>,
    pub heartbeat_interval_ms: u64,
    /// Debezium Server's own settings (`--target debezium-server`).
    pub server: DebeziumServerConfig,
    /// The Strimzi resources (`--target strimzi`, `--target strimzi-connect`).
    pub strimzi: StrimziConfig,
}

impl Default for DebeziumConfig {
    fn default() -> Self {
        DebeziumConfig {
            version: DebeziumVersion::TESTED.to_string(),
            extended_headers: None,
            plugin_name: Plugin::default(),
            connector_name: DEFAULT_CONNECTOR_NAME.into(),
            slot: DEFAULT_SLOT.into(),
            topic_prefix: DEFAULT_TOPIC_PREFIX.into(),
            database_hostname: None,
            database_port: None,
            password: None,
            heartbeat_interval_ms: DEFAULT_HEARTBEAT_INTERVAL_MS,
            server: DebeziumServerConfig::default(),
            strimzi: StrimziConfig::default(),
        }
    }
}

/// A logical decoding plugin Debezium's PostgreSQL connector reads with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Plugin {
    /// PostgreSQL's own, over a publication.
    #[default]
    Pgoutput,
    /// Debezium's default; a server extension (`postgresql-NN-decoderbufs`).
    Decoderbufs,
}

impl Plugin {
    pub const fn as_str(self) -> &'static str {
        match self {
            Plugin::Pgoutput => "pgoutput",
            Plugin::Decoderbufs => "decoderbufs",
        }
    }
}

/// Where Debezium Server keeps its source offsets (Kafka Connect keeps them
/// in the worker's offset topic; Server has no worker).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OffsetStorage {
    /// A local file: one server with a persistent volume.
    #[default]
    File,
    /// A compacted Kafka topic, as Kafka Connect keeps them.
    Kafka,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct DebeziumServerConfig {
    pub offset_storage: OffsetStorage,
    /// With `offset_storage = "file"`, relative to the server's directory.
    pub offset_file: String,
    /// With `offset_storage = "kafka"`: a compacted topic of one partition.
    pub offset_topic: String,
    /// How often offsets are stored; the slot is confirmed up to them, so
    /// this bounds the replay after a crash and the WAL the slot pins.
    pub offset_flush_interval_ms: u64,
    /// The brokers as the server reaches them; defaults to `kafka.bootstrap_servers`.
    pub bootstrap_servers: Option<String>,
}

impl Default for DebeziumServerConfig {
    fn default() -> Self {
        DebeziumServerConfig {
            offset_storage: OffsetStorage::default(),
            offset_file: DEFAULT_OFFSET_FILE.into(),
            offset_topic: DEFAULT_OFFSET_TOPIC.into(),
            offset_flush_interval_ms: DEFAULT_OFFSET_FLUSH_INTERVAL_MS,
            bootstrap_servers: None,
        }
    }
}

/// A Kubernetes Secret key, for the Connect pods' environment.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct SecretKeyRef {
    pub name: String,
    pub key: String,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct StrimziConfig {
    /// The `KafkaConnect` resource the connector belongs to (`strimzi.io/cluster`).
    pub connect_cluster: String,
    pub namespace: Option<String>,
    /// The Secret holding the database password; the Connect pods get it as
    /// the environment variable `debezium.password` names.
    pub password_secret: SecretKeyRef,
    /// Where Strimzi pushes the Connect image it builds with Debezium in it.
    /// Required for `--target strimzi-connect`.
    pub image: Option<String>,
}

impl Default for StrimziConfig {
    fn default() -> Self {
        StrimziConfig {
            connect_cluster: DEFAULT_CONNECT_CLUSTER.into(),
            namespace: None,
            password_secret: SecretKeyRef {
                name: DEFAULT_PASSWORD_SECRET_NAME.into(),
                key: DEFAULT_PASSWORD_SECRET_KEY.into(),
            },
            image: None,
        }
    }
}

fn topic_name(key: &str, value: &str) -> Result<(), Error> {
    if !outbox::is_legal_topic_name(value) {
        return Err(invalid(
            key,
            "may only hold ASCII letters, digits, '.', '_' and '-'",
        ));
    }
    Ok(())
}

impl DebeziumConfig {
    /// `relay_slot`: the relay's, which Debezium's must not be.
    pub(super) fn validate(&self, relay_slot: &str) -> Result<(), Error> {
        self.release()?;
        slot_name("debezium.slot", &self.slot)?;
        if self.slot == relay_slot {
            return Err(invalid(
                "debezium.slot",
                format!(
                    "must differ from postgres.slot ({relay_slot}): the relay and Debezium each need their own slot"
                ),
            ));
        }
        non_empty("debezium.connector_name", &self.connector_name)?;
        topic_name("debezium.topic_prefix", &self.topic_prefix)?;
        if self.heartbeat_interval_ms == 0 {
            return Err(invalid(
                "debezium.heartbeat_interval_ms",
                "must be positive: without heartbeats an idle outbox makes PostgreSQL retain WAL",
            ));
        }
        if let Some(ProviderReference::Env { env }) = &self.password {
            if env.is_empty() || env.contains(['{', '}', ':']) {
                return Err(invalid("debezium.password.env", "must be a variable name"));
            }
        }
        self.server.validate()?;
        let strimzi = &self.strimzi;
        for (key, value) in [
            ("debezium.strimzi.connect_cluster", &strimzi.connect_cluster),
            (
                "debezium.strimzi.password_secret.name",
                &strimzi.password_secret.name,
            ),
            (
                "debezium.strimzi.password_secret.key",
                &strimzi.password_secret.key,
            ),
        ] {
            non_empty(key, value)?;
        }
        Ok(())
    }
}

impl DebeziumConfig {
    /// `version`, read.
    pub fn release(&self) -> Result<DebeziumVersion, Error> {
        context::version("debezium.version", &self.version)
    }
}

impl DebeziumServerConfig {
    fn validate(&self) -> Result<(), Error> {
        if self.offset_flush_interval_ms == 0 {
            return Err(invalid(
                "debezium.server.offset_flush_interval_ms",
                "must be positive",
            ));
        }
        match self.offset_storage {
            OffsetStorage::File => non_empty("debezium.server.offset_file", &self.offset_file),
            OffsetStorage::Kafka => topic_name("debezium.server.offset_topic", &self.offset_topic),
        }
    }
}

/// What each key of `[debezium]` means, written beside the keys: the
/// configuration reference is generated from it, and a test fails when a
/// key has none.
pub(crate) const MEANINGS: &[(&str, &str)] = &[
    ("debezium.version", "the Debezium release the deployment runs (`3.6.1`, `2.7.4.Final`): from 3.2 its records carry `__debezium.context.*` headers before `id` (`runId` from 3.4), and from 3.2.1 the generated file writes `extended.headers.enabled`; `connector-config import` fills it in from the names the deployment uses"),
    ("debezium.extended_headers", "Debezium's `extended.headers.enabled` (3.2.1+): the context headers on every record, which the relay writes too; unset, `true` (Debezium's default) for the debezium contract and `false` for the messaging contract"),
    ("debezium.plugin_name", "the connector's decoding plugin (`plugin.name`): `pgoutput` or `decoderbufs` (Debezium's default, a server extension); the relay reads its own slot with pgoutput and takes the connector's slot of either over, and a hand-back creates the connector's slot with it"),
    ("debezium.connector_name", "the connector's name in Kafka Connect"),
    ("debezium.slot", "Debezium's slot; must differ from `postgres.slot`"),
    ("debezium.topic_prefix", "Debezium's `topic.prefix` (its logical name; the heartbeat topic is `__debezium-heartbeat.<prefix>`)"),
    ("debezium.database_hostname", "the database as Kafka Connect reaches it"),
    ("debezium.database_port", "the database port as Kafka Connect reaches it; default the first `postgres.port`"),
    ("debezium.password", "a Kafka Connect config-provider reference: `{ env = \"NAME\" }` gives `${env:NAME}`, `{ file = \"/path\", key = \"k\" }` gives `${file:/path:k}`"),
    ("debezium.heartbeat_interval_ms", "heartbeat period"),
    ("debezium.server.offset_storage", "where Debezium Server keeps its position: `file` or `kafka` (a topic, as Kafka Connect keeps it)"),
    ("debezium.server.offset_file", "with `file`, relative to the server's directory; create the directory (the store does not)"),
    ("debezium.server.offset_topic", "with `kafka`: one partition, the broker's default replication factor"),
    ("debezium.server.offset_flush_interval_ms", "how often Server stores its position (and so confirms the slot)"),
    ("debezium.server.bootstrap_servers", "the brokers as Debezium Server reaches them"),
    ("debezium.strimzi.connect_cluster", "the `KafkaConnect` resource: the connector's `strimzi.io/cluster` label, and the name `--target strimzi-connect` writes"),
    ("debezium.strimzi.namespace", "`metadata.namespace` of both resources"),
    ("debezium.strimzi.password_secret", "the Secret key the Connect pods get as `debezium.password`'s variable"),
    ("debezium.strimzi.image", "the registry image Strimzi pushes its Connect build to"),
];
