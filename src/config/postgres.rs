//! `[postgres]`: where the outbox's database is and how the relay logs in.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::secrets::SecretSource;
use super::{identifier, invalid, non_empty, slot_name};
use crate::error::Error;
use crate::secret::Secret;

/// Environment variable that holds the PostgreSQL password when the
/// configuration names no other source.
pub const DEFAULT_PASSWORD_ENV: &str = "OUTBOX_CDC_POSTGRES_PASSWORD";

pub const DEFAULT_HOST: &str = "localhost";
pub const DEFAULT_PORT: u16 = 5432;
pub const DEFAULT_APPLICATION_NAME: &str = "outbox-cdc";
pub const DEFAULT_SLOT: &str = "outbox_cdc_relay";
pub const DEFAULT_PUBLICATION: &str = "outbox_cdc_publication";
pub const DEFAULT_CONNECT_TIMEOUT_SECS: u64 = 10;
/// Twice the replication stream's ping interval; PostgreSQL's own
/// `wal_receiver_timeout` is 60 s, which a silent link (a dropped NAT
/// entry) costs in full before a standby notices.
pub const DEFAULT_WAL_RECEIVER_TIMEOUT_SECS: u64 = 30;
pub const DEFAULT_QUERY_TIMEOUT_SECS: u64 = 30;
/// The longest either timeout may be set to.
const MAX_TIMEOUT_SECS: u64 = 3600;

/// `sslmode`, as libpq spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
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

impl Serialize for Ports {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.as_slice() {
            [one] => s.serialize_u16(*one),
            many => s.serialize_str(
                &many
                    .iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        }
    }
}

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

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct PostgresConfig {
    /// One host, or libpq's multi-host form (`"db1,db2"`): the relay then
    /// connects to the one that accepts writes.
    pub host: String,
    pub port: Ports,
    /// Required.
    pub dbname: String,
    /// Required.
    pub user: String,
    /// Defaults to the environment variable [`DEFAULT_PASSWORD_ENV`].
    pub password: Option<SecretSource>,
    pub sslmode: SslMode,
    pub sslrootcert: Option<PathBuf>,
    pub application_name: String,
    /// The relay's own replication slot.
    pub slot: String,
    /// The publication the CDC migration creates and both relays read.
    pub publication: String,
    pub connect_timeout_secs: u64,
    /// How long the replication stream may stay silent before the relay
    /// gives its connection up and opens another. The relay asks the server
    /// for a reply halfway through, so an idle stream never reaches it.
    pub wal_receiver_timeout_secs: u64,
    /// How long the relay waits for the answer to one of its own
    /// statements (bookkeeping, the slot guard) before it gives that
    /// connection up: a server-side `statement_timeout` never fires when
    /// the statement never arrived.
    pub query_timeout_secs: u64,
    /// Create the relay's slot with `FAILOVER` (PostgreSQL 17+), so that
    /// standbys with `sync_replication_slots` keep a copy a promoted
    /// standby can be streamed from.
    pub failover_slot: bool,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        PostgresConfig {
            host: DEFAULT_HOST.into(),
            port: Ports(vec![DEFAULT_PORT]),
            dbname: String::new(),
            user: String::new(),
            password: None,
            sslmode: SslMode::default(),
            sslrootcert: None,
            application_name: DEFAULT_APPLICATION_NAME.into(),
            slot: DEFAULT_SLOT.into(),
            publication: DEFAULT_PUBLICATION.into(),
            connect_timeout_secs: DEFAULT_CONNECT_TIMEOUT_SECS,
            wal_receiver_timeout_secs: DEFAULT_WAL_RECEIVER_TIMEOUT_SECS,
            query_timeout_secs: DEFAULT_QUERY_TIMEOUT_SECS,
            failover_slot: false,
        }
    }
}

impl PostgresConfig {
    pub fn query_timeout(&self) -> Duration {
        Duration::from_secs(self.query_timeout_secs)
    }

    pub fn wal_receiver_timeout(&self) -> Duration {
        Duration::from_secs(self.wal_receiver_timeout_secs)
    }

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
                    .unwrap_or(DEFAULT_PORT);
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

    /// The password, from the configured source or the default environment
    /// variable; `None` when neither is set (trust or peer auth).
    pub fn password(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Secret>, Error> {
        match &self.password {
            Some(source) => source.resolve("postgres.password", env).map(Some),
            None => Ok(env(DEFAULT_PASSWORD_ENV).map(Secret::new)),
        }
    }

    pub(super) fn validate(&self) -> Result<(), Error> {
        non_empty("postgres.host", &self.host)?;
        if self.host.split(',').any(|h| h.trim().is_empty()) {
            return Err(invalid("postgres.host", "lists an empty host"));
        }
        non_empty("postgres.dbname", &self.dbname)?;
        non_empty("postgres.user", &self.user)?;
        let hosts = self.host.split(',').count();
        if self.port.0.len() != 1 && self.port.0.len() != hosts {
            return Err(invalid(
                "postgres.port",
                format!(
                    "lists {} ports for {hosts} hosts; give one port, or one per host",
                    self.port.0.len()
                ),
            ));
        }
        for (key, secs) in [
            ("postgres.connect_timeout_secs", self.connect_timeout_secs),
            (
                "postgres.wal_receiver_timeout_secs",
                self.wal_receiver_timeout_secs,
            ),
            ("postgres.query_timeout_secs", self.query_timeout_secs),
        ] {
            if !(1..=MAX_TIMEOUT_SECS).contains(&secs) {
                return Err(invalid(
                    key,
                    format!("is {secs}; give between 1 and {MAX_TIMEOUT_SECS} seconds"),
                ));
            }
        }
        slot_name("postgres.slot", &self.slot)?;
        identifier("postgres.publication", &self.publication)?;
        if self.application_name.is_empty() || !self.application_name.is_ascii() {
            return Err(invalid(
                "postgres.application_name",
                "must be non-empty ASCII",
            ));
        }
        if matches!(self.sslmode, SslMode::VerifyCa | SslMode::VerifyFull)
            && self.sslrootcert.is_none()
        {
            return Err(invalid(
                "postgres.sslrootcert",
                format!(
                    "sslmode {} needs the CA certificate to verify against",
                    self.sslmode.as_str()
                ),
            ));
        }
        Ok(())
    }
}

/// What each key of `[postgres]` means, written beside the keys: the
/// configuration reference is generated from it, and a test fails when a
/// key has none.
pub(crate) const MEANINGS: &[(&str, &str)] = &[
    ("postgres.host", "database host, or several in libpq's multi-host form (`\"db1,db2\"`): the SQL and the replication connection then both go to the first listed host that accepts writes (not in recovery), and a restart after a failover finds the promoted one"),
    ("postgres.port", "one port for every host, or one per host (`\"5432,5433\"`)"),
    ("postgres.dbname", "the database that holds the outbox"),
    ("postgres.user", "needs the `REPLICATION` attribute to stream"),
    ("postgres.password", "a secret reference: `{ env = \"NAME\" }`, `{ file = \"/path\" }` or `{ file = \"/path.properties\", key = \"name\" }`; a literal string is refused (`CONFIG_SECRET_IN_FILE`)"),
    ("postgres.sslmode", "`disable`, `prefer`, `require`, `verify-ca`, `verify-full`"),
    ("postgres.sslrootcert", "CA file; required by `verify-ca` and `verify-full`"),
    ("postgres.application_name", "as `pg_stat_replication` shows the relay"),
    ("postgres.slot", "the relay's own replication slot"),
    ("postgres.publication", "created by `migrate`; read by the relay and by Debezium"),
    ("postgres.connect_timeout_secs", "per host tried: the TCP connect, the TLS handshake and the log-in together"),
    ("postgres.wal_receiver_timeout_secs", "how long the replication stream may stay silent before the relay gives the connection up and opens another; halfway, it asks the server for a reply, so an idle stream never reaches it. See [Network faults](../operating/network-faults.md)"),
    ("postgres.query_timeout_secs", "how long the relay waits for the answer to one of its own statements (bookkeeping, the slot guard) before it gives that connection up; also the connections' `TCP_USER_TIMEOUT`; the slot guard's statements end on the server at three quarters of it (`statement_timeout`)"),
    ("postgres.failover_slot", "create the relay's slot with `FAILOVER` (PostgreSQL 17+), and turn it on for an existing slot at start-up; see [PostgreSQL versions and failover](../operating/postgresql.md)"),
];
