//! `outbox-cdc.toml`: loading, environment overrides, secrets and validation.
//!
//! Loading is strict: an unknown key is an error naming the key, because a
//! misspelt setting that is silently ignored is a production incident waiting
//! for its trigger. Secrets never sit in the file: they come from an
//! environment variable or a file the configuration names.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::contract::outbox;
use crate::error::{Code, Error};
use crate::kafka::settings;

/// Environment variable that holds the PostgreSQL password when the
/// configuration names no other source.
pub const DEFAULT_PASSWORD_ENV: &str = "OUTBOX_CDC_POSTGRES_PASSWORD";

/// Prefix of the environment variables that override file values.
pub const ENV_PREFIX: &str = "OUTBOX_CDC_";

/// Where configuration values and secrets are looked up by name: the
/// process environment in production, a table in tests.
pub type Env = dyn Fn(&str) -> Option<String> + Send + Sync;

fn invalid(key: &str, reason: impl fmt::Display) -> Error {
    Error::new(Code::CONFIG_INVALID_VALUE, format!("`{key}`: {reason}"))
}

fn secret_in_file(key: &str) -> Error {
    Error::new(
        Code::CONFIG_SECRET_IN_FILE,
        format!("`{key}` is a secret; name an environment variable (`{{ env = \"NAME\" }}`) or a file (`{{ file = \"/path\" }}`) instead of writing it in the configuration"),
    )
}

pub use crate::secret::Secret;

/// Where a secret comes from. Only references are ever written in the
/// configuration file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum SecretSource {
    /// `{ env = "NAME" }`
    Env { env: String },
    /// `{ file = "/path" }`: the whole file, less one trailing newline; with
    /// `key`, a Java properties file and the value of that key (the shape
    /// Kafka's `FileConfigProvider` reads).
    File { file: PathBuf, key: Option<String> },
}

impl SecretSource {
    fn resolve(&self, key: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Secret, Error> {
        let unavailable = |reason: String| {
            Error::new(
                Code::CONFIG_SECRET_UNAVAILABLE,
                format!("`{key}`: {reason}"),
            )
        };
        match self {
            SecretSource::Env { env: name } => env(name)
                .map(Secret::new)
                .ok_or_else(|| unavailable(format!("environment variable {name} is not set"))),
            SecretSource::File { file, key: None } => std::fs::read_to_string(file)
                .map(|s| Secret::new(s.strip_suffix('\n').unwrap_or(&s).trim_end_matches('\r')))
                .map_err(|e| unavailable(format!("cannot read {}: {e}", file.display()))),
            SecretSource::File {
                file,
                key: Some(prop),
            } => {
                let text = std::fs::read_to_string(file)
                    .map_err(|e| unavailable(format!("cannot read {}: {e}", file.display())))?;
                let pairs = crate::contract::properties::parse(&text);
                crate::contract::properties::get(&pairs, prop)
                    .map(Secret::new)
                    .ok_or_else(|| unavailable(format!("{} has no key {prop}", file.display())))
            }
        }
    }
}

/// `sslmode`, as libpq spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SslMode {
    Disable,
    #[default]
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// `postgres.port`: one port for every host, or libpq's comma-separated
/// list with one port per host (`"5432,5433"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ports(pub Vec<u16>);

impl<'de> Deserialize<'de> for Ports {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Ports, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            One(i64),
            List(String),
        }
        let port = |n: i64| {
            u16::try_from(n).ok().filter(|p| *p > 0).ok_or_else(|| {
                serde::de::Error::custom(format!("port {n} is not between 1 and 65535"))
            })
        };
        match Raw::deserialize(d)? {
            Raw::One(n) => Ok(Ports(vec![port(n)?])),
            Raw::List(s) => s
                .split(',')
                .map(|p| {
                    p.trim()
                        .parse::<i64>()
                        .map_err(|_| {
                            serde::de::Error::custom(format!("port {p:?} is not a number"))
                        })
                        .and_then(port)
                })
                .collect::<Result<Vec<u16>, _>>()
                .map(Ports),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct PostgresConfig {
    /// One host, or libpq's multi-host form (`"db1,db2"`): the relay then
    /// connects to the one that accepts writes.
    #[serde(default = "default_host")]
    pub host: String,
    #[serde(default = "default_pg_port")]
    pub port: Ports,
    pub dbname: String,
    pub user: String,
    /// Defaults to the environment variable [`DEFAULT_PASSWORD_ENV`].
    pub password: Option<SecretSource>,
    #[serde(default)]
    pub sslmode: SslMode,
    pub sslrootcert: Option<PathBuf>,
    #[serde(default = "default_application_name")]
    pub application_name: String,
    /// The relay's own replication slot.
    #[serde(default = "default_relay_slot")]
    pub slot: String,
    /// The publication the CDC migration creates and both relays read.
    #[serde(default = "default_publication")]
    pub publication: String,
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_secs: u64,
    /// Create the relay's slot with `FAILOVER` (PostgreSQL 17+), so that
    /// standbys with `sync_replication_slots` keep a copy a promoted
    /// standby can be streamed from.
    #[serde(default)]
    pub failover_slot: bool,
}

impl PostgresConfig {
    /// Every (host, port) to try, in order.
    pub fn endpoints(&self) -> Vec<(String, u16)> {
        let hosts: Vec<String> = self.host.split(',').map(|h| h.trim().to_string()).collect();
        hosts
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let port = self
                    .port
                    .0
                    .get(i)
                    .or(self.port.0.first())
                    .copied()
                    .unwrap_or(5432);
                (h.clone(), port)
            })
            .collect()
    }

    /// `host:port[,host:port]`, for messages.
    pub fn address(&self) -> String {
        self.endpoints()
            .iter()
            .map(|(h, p)| format!("{h}:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct OutboxConfig {
    #[serde(default = "default_schema")]
    pub schema: String,
    #[serde(default = "default_table")]
    pub table: String,
    /// Records go to `topic_prefix + destination`.
    #[serde(default = "default_topic_prefix")]
    pub topic_prefix: String,
}

/// A librdkafka property: a plain value, or a secret reference.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum PropertyValue {
    Plain(String),
    Secret(SecretSource),
}

#[derive(Debug, Clone, Deserialize)]
pub struct KafkaConfig {
    pub bootstrap_servers: String,
    /// Passed to librdkafka as they are, after the checks in [`validate`].
    #[serde(default)]
    pub properties: BTreeMap<String, PropertyValue>,
}

/// How the generated Debezium configuration refers to the database password:
/// a Kafka Connect config-provider reference, never the value.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
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

#[derive(Debug, Clone, Deserialize)]
pub struct DebeziumConfig {
    #[serde(default = "default_connector_name")]
    pub connector_name: String,
    /// Debezium's slot: never the relay's.
    #[serde(default = "default_debezium_slot")]
    pub slot: String,
    /// Debezium's `topic.prefix` (its logical server name; heartbeats go to
    /// `__debezium-heartbeat.<topic_prefix>`). Outbox records are routed by
    /// `outbox.topic_prefix`, not by this.
    #[serde(default = "default_debezium_topic_prefix")]
    pub topic_prefix: String,
    /// The database host as Kafka Connect reaches it; defaults to `postgres.host`.
    pub database_hostname: Option<String>,
    pub database_port: Option<u16>,
    /// Defaults to `${env:<the relay's password variable>}`.
    pub password: Option<ProviderReference>,
    #[serde(default = "default_heartbeat_interval_ms")]
    pub heartbeat_interval_ms: u64,
    /// Debezium Server's own settings (`--target debezium-server`).
    #[serde(default)]
    pub server: DebeziumServerConfig,
    /// The Strimzi resources (`--target strimzi`, `--target strimzi-connect`).
    #[serde(default)]
    pub strimzi: StrimziConfig,
}

/// Where Debezium Server keeps its source offsets (Kafka Connect keeps them
/// in the worker's offset topic; Server has no worker).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OffsetStorage {
    /// A local file: one server with a persistent volume.
    File,
    /// A compacted Kafka topic, as Kafka Connect keeps them.
    Kafka,
}

#[derive(Debug, Clone, Deserialize)]
pub struct DebeziumServerConfig {
    #[serde(default = "default_offset_storage")]
    pub offset_storage: OffsetStorage,
    /// With `offset_storage = "file"`, relative to the server's directory.
    #[serde(default = "default_offset_file")]
    pub offset_file: String,
    /// With `offset_storage = "kafka"`: a compacted topic of one partition.
    #[serde(default = "default_offset_topic")]
    pub offset_topic: String,
    /// How often offsets are stored; the slot is confirmed up to them, so
    /// this bounds the replay after a crash and the WAL the slot pins.
    #[serde(default = "default_offset_flush_interval_ms")]
    pub offset_flush_interval_ms: u64,
    /// The brokers as the server reaches them; defaults to `kafka.bootstrap_servers`.
    pub bootstrap_servers: Option<String>,
}

impl Default for DebeziumServerConfig {
    fn default() -> Self {
        DebeziumServerConfig {
            offset_storage: default_offset_storage(),
            offset_file: default_offset_file(),
            offset_topic: default_offset_topic(),
            offset_flush_interval_ms: default_offset_flush_interval_ms(),
            bootstrap_servers: None,
        }
    }
}

/// A Kubernetes Secret key, for the Connect pods' environment.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SecretKeyRef {
    pub name: String,
    pub key: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct StrimziConfig {
    /// The `KafkaConnect` resource the connector belongs to (`strimzi.io/cluster`).
    #[serde(default = "default_connect_cluster")]
    pub connect_cluster: String,
    pub namespace: Option<String>,
    /// The Secret holding the database password; the Connect pods get it as
    /// the environment variable `debezium.password` names.
    #[serde(default = "default_password_secret")]
    pub password_secret: SecretKeyRef,
    /// Where Strimzi pushes the Connect image it builds with Debezium in it.
    /// Required for `--target strimzi-connect`.
    pub image: Option<String>,
}

impl Default for StrimziConfig {
    fn default() -> Self {
        StrimziConfig {
            connect_cluster: default_connect_cluster(),
            namespace: None,
            password_secret: default_password_secret(),
            image: None,
        }
    }
}

impl Default for DebeziumConfig {
    fn default() -> Self {
        DebeziumConfig {
            connector_name: default_connector_name(),
            slot: default_debezium_slot(),
            topic_prefix: default_debezium_topic_prefix(),
            database_hostname: None,
            database_port: None,
            password: None,
            heartbeat_interval_ms: default_heartbeat_interval_ms(),
            server: DebeziumServerConfig::default(),
            strimzi: StrimziConfig::default(),
        }
    }
}

/// How `outbox-cdc run` behaves.
#[derive(Debug, Clone, Deserialize)]
pub struct RelayConfig {
    /// Record published rows in the journal, folded into `PUBLISHED` with
    /// `published_at` when the relay keeps up.
    #[serde(default = "yes")]
    pub mark_published: bool,
    /// On SIGTERM/SIGINT, how long in-flight messages may take to settle.
    #[serde(default = "default_drain_timeout")]
    pub drain_timeout_secs: u64,
    /// Backpressure: at most this many messages unacknowledged by Kafka.
    #[serde(default = "default_max_in_flight_messages")]
    pub max_in_flight_messages: usize,
    /// Backpressure: at most this many bytes unacknowledged by Kafka.
    #[serde(default = "default_max_in_flight_bytes")]
    pub max_in_flight_bytes: usize,
    /// Create the relay's slot when it is missing. Off by default: the slot
    /// comes from `outbox-cdc cutover`, which hands the backlog over.
    #[serde(default)]
    pub create_slot: bool,
    /// Records the broker refuses for an operator's reason (authorization,
    /// a missing topic, a policy) in one session before it ends; the relay
    /// then retries with backoff. No row is marked FAILED for them.
    #[serde(default = "default_operator_error_threshold")]
    pub operator_error_threshold: usize,
    /// `idempotent` (at least once, the default) or `transactional` (whole
    /// source transactions per Kafka transaction, progress kept in Kafka).
    #[serde(default)]
    pub delivery: DeliveryMode,
    /// The producer's `transactional.id`; defaults to
    /// `outbox-cdc.<dbname>.<slot>`. One per relay: another relay that
    /// starts with the same id fences this one.
    pub transactional_id: Option<String>,
    /// Group commit: a Kafka transaction closes at the first source
    /// transaction boundary past any of these bounds.
    #[serde(default = "default_transaction_max_records")]
    pub transaction_max_records: usize,
    #[serde(default = "default_transaction_max_bytes")]
    pub transaction_max_bytes: usize,
    #[serde(default = "default_transaction_max_ms")]
    pub transaction_max_ms: u64,
    /// The topic whose committed offset (under the transactional id as the
    /// group) holds the last source commit published, written in the same
    /// Kafka transaction as the records.
    #[serde(default = "default_progress_topic")]
    pub progress_topic: String,
    /// Seconds between `pg_logical_emit_message` heartbeats in the outbox's
    /// database; 0 (the default) sends none. For servers whose WAL is
    /// written by activity the relay never sees.
    #[serde(default)]
    pub heartbeat_interval_secs: u64,
    /// Ask pgoutput for values in binary form (PostgreSQL 14+; ignored
    /// before): the walsender skips the text output of bytea, uuid and
    /// timestamptz, and the relay their parsing.
    #[serde(default = "yes")]
    pub pgoutput_binary: bool,
    /// How often the slot guard reads the slot (and probes Kafka for
    /// readiness).
    #[serde(default = "default_slot_check_interval_secs")]
    pub slot_check_interval_secs: u64,
    /// The slot guard warns (`SLOT_WAL_AT_RISK`) when the slot's
    /// `safe_wal_size` falls under this many bytes.
    #[serde(default = "default_slot_wal_margin_bytes")]
    pub slot_wal_margin_bytes: u64,
}

/// How records reach Kafka.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryMode {
    /// Idempotent producer, at least once; a relay crash replays what the
    /// slot had not confirmed.
    #[default]
    Idempotent,
    /// Transactional producer: read_committed consumers see each source
    /// transaction whole, once.
    Transactional,
}

impl RelayConfig {
    pub fn transactional(&self) -> bool {
        self.delivery == DeliveryMode::Transactional
    }
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            mark_published: true,
            drain_timeout_secs: default_drain_timeout(),
            max_in_flight_messages: default_max_in_flight_messages(),
            max_in_flight_bytes: default_max_in_flight_bytes(),
            create_slot: false,
            operator_error_threshold: default_operator_error_threshold(),
            delivery: DeliveryMode::default(),
            transactional_id: None,
            transaction_max_records: default_transaction_max_records(),
            transaction_max_bytes: default_transaction_max_bytes(),
            transaction_max_ms: default_transaction_max_ms(),
            progress_topic: default_progress_topic(),
            heartbeat_interval_secs: 0,
            pgoutput_binary: true,
            slot_check_interval_secs: default_slot_check_interval_secs(),
            slot_wal_margin_bytes: default_slot_wal_margin_bytes(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    pub postgres: PostgresConfig,
    pub outbox: OutboxConfig,
    pub kafka: KafkaConfig,
    #[serde(default)]
    pub debezium: DebeziumConfig,
    #[serde(default)]
    pub relay: RelayConfig,
    /// The metrics and health endpoint; off when absent.
    pub http: Option<HttpConfig>,
}

/// `[http]`: `/metrics`, `/healthz` and `/readyz`.
#[derive(Debug, Clone, Deserialize)]
pub struct HttpConfig {
    /// Address and port to listen on, e.g. `127.0.0.1:9187`.
    pub listen: String,
}

fn yes() -> bool {
    true
}
fn default_drain_timeout() -> u64 {
    30
}
/// Each in-flight message holds about 3 KiB in librdkafka (the payload, the
/// 16 headers it copies one by one, the encoded batch): 5 000 keep a drain's
/// peak near 50 MiB, and cover 50 000 msg/s at 100 ms acknowledgement latency.
fn default_max_in_flight_messages() -> usize {
    5_000
}
fn default_operator_error_threshold() -> usize {
    1
}
fn default_max_in_flight_bytes() -> usize {
    64 << 20
}
fn default_transaction_max_records() -> usize {
    20_000
}
fn default_transaction_max_bytes() -> usize {
    32 << 20
}
fn default_transaction_max_ms() -> u64 {
    100
}
fn default_slot_check_interval_secs() -> u64 {
    15
}
fn default_slot_wal_margin_bytes() -> u64 {
    1 << 30
}
fn default_progress_topic() -> String {
    "outbox-cdc.progress".into()
}
fn default_host() -> String {
    "localhost".into()
}
fn default_pg_port() -> Ports {
    Ports(vec![5432])
}
fn default_application_name() -> String {
    "outbox-cdc".into()
}
fn default_relay_slot() -> String {
    "outbox_cdc_relay".into()
}
fn default_publication() -> String {
    "outbox_cdc_publication".into()
}
fn default_connect_timeout() -> u64 {
    10
}
fn default_schema() -> String {
    outbox::DEFAULT_SCHEMA.into()
}
fn default_table() -> String {
    outbox::DEFAULT_TABLE.into()
}
fn default_topic_prefix() -> String {
    "outbox.".into()
}
fn default_connector_name() -> String {
    "outbox-cdc-debezium".into()
}
fn default_debezium_slot() -> String {
    "outbox_cdc_debezium".into()
}
fn default_debezium_topic_prefix() -> String {
    "outbox-cdc".into()
}
fn default_heartbeat_interval_ms() -> u64 {
    10_000
}
fn default_offset_storage() -> OffsetStorage {
    OffsetStorage::File
}
fn default_offset_file() -> String {
    "data/offsets.dat".into()
}
fn default_offset_topic() -> String {
    "outbox-cdc-debezium-offsets".into()
}
fn default_offset_flush_interval_ms() -> u64 {
    10_000
}
fn default_connect_cluster() -> String {
    "outbox-cdc-connect".into()
}
fn default_password_secret() -> SecretKeyRef {
    SecretKeyRef {
        name: "outbox-cdc-postgres".into(),
        key: "password".into(),
    }
}

/// The kind of value an environment override carries.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Str,
    Int,
    /// An integer, or a comma-separated list kept as a string.
    IntOrList,
}

/// Environment overrides: `OUTBOX_CDC_<SECTION>_<KEY>` for these keys. The
/// README's configuration reference lists the same table.
const ENV_OVERRIDES: &[(&str, &str, Kind)] = &[
    ("postgres", "host", Kind::Str),
    ("postgres", "port", Kind::IntOrList),
    ("postgres", "dbname", Kind::Str),
    ("postgres", "user", Kind::Str),
    ("postgres", "sslmode", Kind::Str),
    ("postgres", "sslrootcert", Kind::Str),
    ("postgres", "application_name", Kind::Str),
    ("postgres", "slot", Kind::Str),
    ("postgres", "publication", Kind::Str),
    ("outbox", "schema", Kind::Str),
    ("outbox", "table", Kind::Str),
    ("outbox", "topic_prefix", Kind::Str),
    ("kafka", "bootstrap_servers", Kind::Str),
    ("debezium", "connector_name", Kind::Str),
    ("debezium", "slot", Kind::Str),
    ("debezium", "topic_prefix", Kind::Str),
    ("debezium", "database_hostname", Kind::Str),
    ("debezium", "database_port", Kind::Int),
];

/// The environment variable that overrides `section.key`.
pub fn env_override_name(section: &str, key: &str) -> String {
    format!(
        "{ENV_PREFIX}{}_{}",
        section.to_ascii_uppercase(),
        key.to_ascii_uppercase()
    )
}

/// Every override variable with the key it sets, for documentation.
pub fn env_overrides() -> Vec<(String, String)> {
    ENV_OVERRIDES
        .iter()
        .map(|(s, k, _)| (env_override_name(s, k), format!("{s}.{k}")))
        .collect()
}

fn is_sensitive_property(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.contains("password") || n.contains("secret") || n == "sasl.jaas.config" || n == "ssl.key.pem"
}

impl Config {
    /// Reads `path`, applies environment overrides and validates.
    pub fn load(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::new(
                Code::CONFIG_UNREADABLE,
                format!("cannot read {}: {e}", path.display()),
            )
        })?;
        Config::parse(&text, path, env)
    }

    /// Loads with the process environment.
    pub fn load_from_process_env(path: &Path) -> Result<Config, Error> {
        Config::load(path, &|name| std::env::var(name).ok())
    }

    pub fn parse(
        text: &str,
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, Error> {
        let syntax = |message: String| {
            Error::new(
                Code::CONFIG_SYNTAX,
                format!("{}: {message}", path.display()),
            )
        };
        let mut table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| syntax(e.to_string()))?;
        reject_literal_secret(&table, "postgres", "password")?;
        apply_env_overrides(&mut table, env)?;
        require_keys(&table)?;

        let mut unknown = Vec::new();
        let config: Config =
            serde_ignored::deserialize(toml::Value::Table(table), |p| unknown.push(p.to_string()))
                .map_err(|e: toml::de::Error| syntax(e.to_string()))?;
        if let Some(key) = unknown.into_iter().next() {
            return Err(Error::new(
                Code::CONFIG_UNKNOWN_KEY,
                format!("unknown key `{key}` in {}", path.display()),
            ));
        }
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), Error> {
        let pg = &self.postgres;
        non_empty("postgres.host", &pg.host)?;
        if pg.host.split(',').any(|h| h.trim().is_empty()) {
            return Err(invalid("postgres.host", "lists an empty host"));
        }
        non_empty("postgres.dbname", &pg.dbname)?;
        non_empty("postgres.user", &pg.user)?;
        let hosts = pg.host.split(',').count();
        if pg.port.0.len() != 1 && pg.port.0.len() != hosts {
            return Err(invalid(
                "postgres.port",
                format!(
                    "lists {} ports for {hosts} hosts; give one port, or one per host",
                    pg.port.0.len()
                ),
            ));
        }
        slot_name("postgres.slot", &pg.slot)?;
        slot_name("debezium.slot", &self.debezium.slot)?;
        if pg.slot == self.debezium.slot {
            return Err(invalid(
                "debezium.slot",
                format!(
                    "must differ from postgres.slot ({}): the relay and Debezium each need their own slot",
                    pg.slot
                ),
            ));
        }
        identifier("postgres.publication", &pg.publication)?;
        identifier("outbox.schema", &self.outbox.schema)?;
        identifier("outbox.table", &self.outbox.table)?;
        if pg.application_name.is_empty() || !pg.application_name.is_ascii() {
            return Err(invalid(
                "postgres.application_name",
                "must be non-empty ASCII",
            ));
        }
        if matches!(pg.sslmode, SslMode::VerifyCa | SslMode::VerifyFull) && pg.sslrootcert.is_none()
        {
            return Err(invalid(
                "postgres.sslrootcert",
                format!(
                    "sslmode {} needs the CA certificate to verify against",
                    pg.sslmode.as_str()
                ),
            ));
        }
        let prefix = &self.outbox.topic_prefix;
        if !prefix.is_empty() && !outbox::is_legal_topic_name(prefix) {
            return Err(invalid(
                "outbox.topic_prefix",
                "may only hold ASCII letters, digits, '.', '_' and '-', at most 249 characters",
            ));
        }
        if prefix.len() >= outbox::MAX_TOPIC_NAME_LEN {
            return Err(invalid(
                "outbox.topic_prefix",
                "leaves no room for a destination",
            ));
        }
        non_empty("kafka.bootstrap_servers", &self.kafka.bootstrap_servers)?;
        for (name, value) in &self.kafka.properties {
            let key = format!("kafka.properties.{name}");
            if let Some(owned) = settings::owned(name) {
                return Err(invalid(
                    &key,
                    format!("is set by outbox-cdc: {}", owned.why),
                ));
            }
            if is_sensitive_property(name) && matches!(value, PropertyValue::Plain(_)) {
                return Err(secret_in_file(&key));
            }
        }
        let relay = &self.relay;
        if relay.operator_error_threshold == 0 {
            return Err(invalid(
                "relay.operator_error_threshold",
                "must be positive",
            ));
        }
        if relay.max_in_flight_messages == 0 {
            return Err(invalid("relay.max_in_flight_messages", "must be positive"));
        }
        if relay.max_in_flight_bytes < 1 << 20 {
            return Err(invalid(
                "relay.max_in_flight_bytes",
                "must be at least 1 MiB",
            ));
        }
        if relay.transaction_max_records == 0 {
            return Err(invalid("relay.transaction_max_records", "must be positive"));
        }
        if relay.transaction_max_bytes == 0 {
            return Err(invalid("relay.transaction_max_bytes", "must be positive"));
        }
        if relay.slot_check_interval_secs == 0 {
            return Err(invalid(
                "relay.slot_check_interval_secs",
                "must be positive",
            ));
        }
        if let Some(http) = &self.http {
            if http.listen.parse::<std::net::SocketAddr>().is_err() {
                return Err(invalid(
                    "http.listen",
                    "must be an address and port, e.g. 127.0.0.1:9187",
                ));
            }
        }
        if relay.transaction_max_ms == 0 {
            return Err(invalid("relay.transaction_max_ms", "must be positive"));
        }
        if let Some(id) = &relay.transactional_id {
            non_empty("relay.transactional_id", id)?;
        }
        if !outbox::is_legal_topic_name(&relay.progress_topic) {
            return Err(invalid(
                "relay.progress_topic",
                "may only hold ASCII letters, digits, '.', '_' and '-'",
            ));
        }
        let dbz = &self.debezium;
        non_empty("debezium.connector_name", &dbz.connector_name)?;
        if !outbox::is_legal_topic_name(&dbz.topic_prefix) {
            return Err(invalid(
                "debezium.topic_prefix",
                "may only hold ASCII letters, digits, '.', '_' and '-'",
            ));
        }
        if dbz.heartbeat_interval_ms == 0 {
            return Err(invalid(
                "debezium.heartbeat_interval_ms",
                "must be positive: without heartbeats an idle outbox makes PostgreSQL retain WAL",
            ));
        }
        if let Some(ProviderReference::Env { env }) = &dbz.password {
            if env.is_empty() || env.contains(['{', '}', ':']) {
                return Err(invalid("debezium.password.env", "must be a variable name"));
            }
        }
        let server = &dbz.server;
        if server.offset_flush_interval_ms == 0 {
            return Err(invalid(
                "debezium.server.offset_flush_interval_ms",
                "must be positive",
            ));
        }
        match server.offset_storage {
            OffsetStorage::File => non_empty("debezium.server.offset_file", &server.offset_file)?,
            OffsetStorage::Kafka => {
                if !outbox::is_legal_topic_name(&server.offset_topic) {
                    return Err(invalid(
                        "debezium.server.offset_topic",
                        "may only hold ASCII letters, digits, '.', '_' and '-'",
                    ));
                }
            }
        }
        let strimzi = &dbz.strimzi;
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

    /// The PostgreSQL password, from the configured source or the default
    /// environment variable; `None` when neither is set (trust or peer auth).
    pub fn postgres_password(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Secret>, Error> {
        match &self.postgres.password {
            Some(source) => source.resolve("postgres.password", env).map(Some),
            None => Ok(env(DEFAULT_PASSWORD_ENV).map(Secret::new)),
        }
    }

    /// The cluster and its librdkafka properties with secrets resolved.
    pub fn kafka_cluster(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<settings::Cluster, Error> {
        let properties = self
            .kafka
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
            bootstrap_servers: self.kafka.bootstrap_servers.clone(),
            properties,
        })
    }

    /// The producer's `transactional.id` when delivery is transactional.
    pub fn producer_transactional_id(&self) -> Option<String> {
        self.relay.transactional().then(|| self.transactional_id())
    }

    /// How the Debezium connector refers to the password.
    pub fn debezium_password_reference(&self) -> ProviderReference {
        if let Some(reference) = &self.debezium.password {
            return reference.clone();
        }
        let env = match &self.postgres.password {
            Some(SecretSource::Env { env }) => env.clone(),
            _ => DEFAULT_PASSWORD_ENV.to_string(),
        };
        ProviderReference::Env { env }
    }

    /// `schema.table`, as Debezium's include lists and our catalog queries name it.
    /// The producer's `transactional.id` in transactional delivery.
    pub fn transactional_id(&self) -> String {
        self.relay.transactional_id.clone().unwrap_or_else(|| {
            format!("outbox-cdc.{}.{}", self.postgres.dbname, self.postgres.slot)
        })
    }

    pub fn qualified_table(&self) -> String {
        format!("{}.{}", self.outbox.schema, self.outbox.table)
    }
}

fn reject_literal_secret(table: &toml::Table, section: &str, key: &str) -> Result<(), Error> {
    if let Some(v) = table.get(section).and_then(|s| s.get(key)) {
        if v.is_str() {
            return Err(secret_in_file(&format!("{section}.{key}")));
        }
    }
    Ok(())
}

fn apply_env_overrides(
    table: &mut toml::Table,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), Error> {
    for (section, key, kind) in ENV_OVERRIDES {
        let name = env_override_name(section, key);
        let Some(raw) = env(&name) else { continue };
        let value = match kind {
            Kind::Str => toml::Value::String(raw),
            Kind::IntOrList => match raw.trim().parse() {
                Ok(n) => toml::Value::Integer(n),
                Err(_) if raw.split(',').all(|p| p.trim().parse::<u16>().is_ok()) => {
                    toml::Value::String(raw)
                }
                Err(_) => {
                    return Err(invalid(
                        &format!("{section}.{key}"),
                        format!(
                            "{name}={raw:?} is not an integer or a comma-separated list of them"
                        ),
                    ))
                }
            },
            Kind::Int => toml::Value::Integer(raw.trim().parse().map_err(|_| {
                invalid(
                    &format!("{section}.{key}"),
                    format!("{name}={raw:?} is not an integer"),
                )
            })?),
        };
        let entry = table
            .entry(section.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        match entry {
            toml::Value::Table(t) => {
                t.insert(key.to_string(), value);
            }
            _ => return Err(invalid(section, "must be a table")),
        }
    }
    Ok(())
}

/// Keys without a default, as `(section, key)`; `None` is the section
/// itself. Checked before deserializing, so a missing key is named without
/// reading serde's message.
const REQUIRED_KEYS: &[(&str, Option<&str>)] = &[
    ("postgres", None),
    ("postgres", Some("dbname")),
    ("postgres", Some("user")),
    ("outbox", None),
    ("kafka", None),
    ("kafka", Some("bootstrap_servers")),
];

fn require_keys(table: &toml::Table) -> Result<(), Error> {
    for (section, key) in REQUIRED_KEYS {
        let present = match (table.get(*section), key) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(s), Some(k)) => s.get(k).is_some(),
        };
        if !present {
            let name = match key {
                Some(k) => format!("{section}.{k}"),
                None => format!("[{section}]"),
            };
            return Err(Error::new(
                Code::CONFIG_MISSING_KEY,
                format!("`{name}` is required"),
            ));
        }
    }
    Ok(())
}

fn non_empty(key: &str, value: &str) -> Result<(), Error> {
    if value.trim().is_empty() {
        return Err(invalid(key, "must not be empty"));
    }
    Ok(())
}

/// PostgreSQL's rule for slot names.
fn slot_name(key: &str, value: &str) -> Result<(), Error> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !ok {
        return Err(invalid(
            key,
            format!("{value:?} is not a slot name: use 1 to 63 lowercase letters, digits or '_'"),
        ));
    }
    Ok(())
}

/// An unquoted-safe SQL identifier; the tool quotes identifiers anyway, but
/// Debezium's include lists are regular expressions and must match literally.
fn identifier(key: &str, value: &str) -> Result<(), Error> {
    let mut bytes = value.bytes();
    let ok = value.len() <= 63
        && matches!(bytes.next(), Some(b) if b.is_ascii_lowercase() || b == b'_')
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !ok {
        return Err(invalid(
            key,
            format!(
                "{value:?} must be a lowercase SQL identifier (letters, digits, '_', at most 63)"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
[postgres]
dbname = "app"
user = "relay"

[outbox]

[kafka]
bootstrap_servers = "127.0.0.1:9092"
"#;

    fn parse_with(text: &str, vars: &[(&str, &str)]) -> Result<Config, Error> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::parse(text, Path::new("test.toml"), &move |name| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn defaults_fill_what_the_file_leaves_out() {
        let c = parse_with(MINIMAL, &[]).unwrap();
        assert_eq!(c.postgres.host, "localhost");
        assert_eq!(c.postgres.port, Ports(vec![5432]));
        assert_eq!(c.postgres.sslmode, SslMode::Prefer);
        assert_eq!(c.postgres.slot, "outbox_cdc_relay");
        assert_eq!(c.debezium.slot, "outbox_cdc_debezium");
        assert_eq!(c.outbox.table, "messaging_outbox");
        assert_eq!(c.outbox.schema, "public");
        assert_eq!(c.qualified_table(), "public.messaging_outbox");
    }

    #[test]
    fn delivery_is_idempotent_unless_chosen_and_the_transactional_id_names_the_relay() {
        let c = parse_with(MINIMAL, &[]).unwrap();
        assert_eq!(c.relay.delivery, DeliveryMode::Idempotent);
        assert_eq!(c.transactional_id(), "outbox-cdc.app.outbox_cdc_relay");
        let text = format!(
            "{MINIMAL}\n[relay]\ndelivery = \"transactional\"\ntransactional_id = \"orders-relay\"\n"
        );
        let c = parse_with(&text, &[]).unwrap();
        assert!(c.relay.transactional());
        assert_eq!(c.transactional_id(), "orders-relay");
        let e = parse_with(
            &format!("{MINIMAL}\n[relay]\ndelivery = \"exactly-once\"\n"),
            &[],
        )
        .unwrap_err();
        assert_eq!(e.code(), "CONFIG_SYNTAX");
        let e = parse_with(
            &format!("{MINIMAL}\n[relay]\ntransaction_max_ms = 0\n"),
            &[],
        )
        .unwrap_err();
        assert_eq!(e.code(), "CONFIG_INVALID_VALUE");
    }

    #[test]
    fn an_unknown_key_is_named() {
        let text = MINIMAL.replace("user = \"relay\"", "user = \"relay\"\nhots = \"x\"");
        let e = parse_with(&text, &[]).unwrap_err();
        assert_eq!(e.code(), "CONFIG_UNKNOWN_KEY");
        assert!(e.to_string().contains("postgres.hots"), "{e}");
        let e = parse_with(&format!("{MINIMAL}\n[debezum]\nslot = \"x\"\n"), &[]).unwrap_err();
        assert_eq!(e.code(), "CONFIG_UNKNOWN_KEY");
        assert!(e.to_string().contains("debezum"), "{e}");
    }

    #[test]
    fn a_missing_required_key_is_named() {
        let e = parse_with(&MINIMAL.replace("dbname = \"app\"", ""), &[]).unwrap_err();
        assert_eq!(e.code(), "CONFIG_MISSING_KEY");
        assert!(e.to_string().contains("dbname"), "{e}");
    }

    #[test]
    fn a_wrongly_typed_value_is_a_syntax_error_naming_the_key() {
        let e = parse_with(
            &MINIMAL.replace("[outbox]", "[outbox]\ntopic_prefix = 7"),
            &[],
        )
        .unwrap_err();
        assert_eq!(e.code(), "CONFIG_SYNTAX");
        assert!(e.to_string().contains("topic_prefix"), "{e}");
    }

    #[test]
    fn environment_overrides_file_values() {
        let c = parse_with(
            MINIMAL,
            &[
                ("OUTBOX_CDC_POSTGRES_PORT", "6543"),
                ("OUTBOX_CDC_POSTGRES_HOST", "db.internal"),
                ("OUTBOX_CDC_OUTBOX_TOPIC_PREFIX", "events."),
                ("OUTBOX_CDC_KAFKA_BOOTSTRAP_SERVERS", "k1:9092,k2:9092"),
            ],
        )
        .unwrap();
        assert_eq!(c.postgres.port, Ports(vec![6543]));
        assert_eq!(c.postgres.host, "db.internal");
        assert_eq!(c.outbox.topic_prefix, "events.");
        assert_eq!(c.kafka.bootstrap_servers, "k1:9092,k2:9092");
        let e = parse_with(MINIMAL, &[("OUTBOX_CDC_POSTGRES_PORT", "five")]).unwrap_err();
        assert_eq!(e.code(), "CONFIG_INVALID_VALUE");
        assert!(e.to_string().contains("OUTBOX_CDC_POSTGRES_PORT"), "{e}");
    }

    #[test]
    fn several_hosts_take_one_port_or_one_each() {
        let c = parse_with(
            MINIMAL,
            &[
                ("OUTBOX_CDC_POSTGRES_HOST", "db1, db2"),
                ("OUTBOX_CDC_POSTGRES_PORT", "5433,5434"),
            ],
        )
        .unwrap();
        assert_eq!(
            c.postgres.endpoints(),
            vec![("db1".to_string(), 5433), ("db2".to_string(), 5434)]
        );
        let c = parse_with(MINIMAL, &[("OUTBOX_CDC_POSTGRES_HOST", "db1,db2,db3")]).unwrap();
        assert_eq!(c.postgres.address(), "db1:5432,db2:5432,db3:5432");
        let e = parse_with(
            MINIMAL,
            &[
                ("OUTBOX_CDC_POSTGRES_HOST", "db1,db2,db3"),
                ("OUTBOX_CDC_POSTGRES_PORT", "5433,5434"),
            ],
        )
        .unwrap_err();
        assert_eq!(e.code(), "CONFIG_INVALID_VALUE");
        assert!(e.to_string().contains("2 ports for 3 hosts"), "{e}");
        let e = parse_with(MINIMAL, &[("OUTBOX_CDC_POSTGRES_HOST", "db1,,db2")]).unwrap_err();
        assert_eq!(e.code(), "CONFIG_INVALID_VALUE");
    }

    #[test]
    fn a_literal_password_is_refused() {
        let text = MINIMAL.replace(
            "user = \"relay\"",
            "user = \"relay\"\npassword = \"hunter2\"",
        );
        let e = parse_with(&text, &[]).unwrap_err();
        assert_eq!(e.code(), "CONFIG_SECRET_IN_FILE");
        assert!(!e.to_string().contains("hunter2"));
        let text = MINIMAL.replace(
            "bootstrap_servers = \"127.0.0.1:9092\"",
            "bootstrap_servers = \"127.0.0.1:9092\"\nproperties = { \"sasl.password\" = \"hunter2\" }",
        );
        let e = parse_with(&text, &[]).unwrap_err();
        assert_eq!(e.code(), "CONFIG_SECRET_IN_FILE");
        assert!(
            e.to_string().contains("kafka.properties.sasl.password"),
            "{e}"
        );
    }

    #[test]
    fn secrets_come_from_the_environment_or_a_file() {
        let text = MINIMAL.replace(
            "user = \"relay\"",
            "user = \"relay\"\npassword = { env = \"PGPW\" }",
        );
        let c = parse_with(&text, &[("PGPW", "s3cret")]).unwrap();
        let pw = c
            .postgres_password(&|n| (n == "PGPW").then(|| "s3cret".to_string()))
            .unwrap();
        assert_eq!(pw.as_ref().map(Secret::expose), Some("s3cret"));
        assert_eq!(format!("{pw:?}"), "Some(Secret(****))");
        let e = c.postgres_password(&|_| None).unwrap_err();
        assert_eq!(e.code(), "CONFIG_SECRET_UNAVAILABLE");
        assert_eq!(c.debezium_password_reference().placeholder(), "${env:PGPW}");

        let dir =
            std::env::temp_dir().join(format!("outbox-cdc-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pw");
        std::fs::write(&file, "from-file\n").unwrap();
        let text = MINIMAL.replace(
            "user = \"relay\"",
            &format!(
                "user = \"relay\"\npassword = {{ file = {:?} }}",
                file.display().to_string()
            ),
        );
        let c = parse_with(&text, &[]).unwrap();
        let pw = c.postgres_password(&|_| None).unwrap();
        assert_eq!(pw.as_ref().map(Secret::expose), Some("from-file"));
        let props = dir.join("pg.properties");
        std::fs::write(&props, "user=x\npassword = pa\\\\ss\n").unwrap();
        let text = MINIMAL.replace(
            "user = \"relay\"",
            &format!(
                "user = \"relay\"\npassword = {{ file = {:?}, key = \"password\" }}",
                props.display().to_string()
            ),
        );
        let c = parse_with(&text, &[]).unwrap();
        let pw = c.postgres_password(&|_| None).unwrap();
        assert_eq!(pw.as_ref().map(Secret::expose), Some("pa\\ss"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_default_password_variable_applies_when_nothing_is_named() {
        let c = parse_with(MINIMAL, &[]).unwrap();
        let pw = c
            .postgres_password(&|n| (n == "OUTBOX_CDC_POSTGRES_PASSWORD").then(|| "pw".to_string()))
            .unwrap();
        assert_eq!(pw.as_ref().map(Secret::expose), Some("pw"));
        assert_eq!(
            c.debezium_password_reference().placeholder(),
            "${env:OUTBOX_CDC_POSTGRES_PASSWORD}"
        );
    }

    #[test]
    fn invalid_values_are_named() {
        let cases = [
            (
                MINIMAL.replace("[outbox]", "[outbox]\ntopic_prefix = \"bad/prefix\""),
                "outbox.topic_prefix",
            ),
            (
                MINIMAL.replace("[outbox]", "[outbox]\ntable = \"Bad Table\""),
                "outbox.table",
            ),
            (
                MINIMAL.replace(
                    "user = \"relay\"",
                    "user = \"relay\"\nslot = \"Relay-Slot\"",
                ),
                "postgres.slot",
            ),
            (
                MINIMAL.replace(
                    "user = \"relay\"",
                    "user = \"relay\"\nslot = \"outbox_cdc_debezium\"",
                ),
                "debezium.slot",
            ),
            (
                MINIMAL.replace(
                    "user = \"relay\"",
                    "user = \"relay\"\nsslmode = \"verify-full\"",
                ),
                "postgres.sslrootcert",
            ),
            (
                MINIMAL.replace(
                    "bootstrap_servers = \"127.0.0.1:9092\"",
                    "bootstrap_servers = \"127.0.0.1:9092\"\nproperties = { acks = \"1\" }",
                ),
                "kafka.properties.acks",
            ),
        ];
        for (text, key) in cases {
            let e = parse_with(&text, &[]).unwrap_err();
            assert_eq!(e.code(), "CONFIG_INVALID_VALUE", "{key}: {e}");
            assert!(e.to_string().contains(key), "{key}: {e}");
        }
        let e = parse_with(
            &MINIMAL.replace(
                "user = \"relay\"",
                "user = \"relay\"\nsslmode = \"sometimes\"",
            ),
            &[],
        )
        .unwrap_err();
        assert_eq!(e.code(), "CONFIG_SYNTAX");
        assert!(e.to_string().contains("sslmode"), "{e}");
    }
}
