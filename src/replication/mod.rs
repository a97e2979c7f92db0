//! The relay's source: our own walsender client.
//!
//! Layers, bottom up: [`codec`] frames backend messages (cancel-safe, so a
//! read can sit in `select!`); [`connection`] opens a `replication=database`
//! session over TCP or TLS and authenticates; [`setup`] checks the server,
//! the publication and the slot; [`pgoutput`] decodes the stream;
//! [`rows`] turns tuples into the outbox definition's typed values;
//! [`reader`] streams committed transactions and sends feedback.

pub mod codec;
pub mod connection;
pub mod pgoutput;
pub mod reader;
pub mod rows;
pub mod setup;
pub mod supervisor;
pub mod tls;

use crate::lsn::Lsn;

/// A replication failure with its stable code.
#[derive(Debug, thiserror::Error)]
pub enum ReplicationError {
    #[error("PG_CONNECT_FAILED: {0}")]
    Connect(String),
    #[error("PG_CONNECTION_LOST: {0}")]
    ConnectionLost(String),
    #[error("PG_TLS_REFUSED: the server does not offer TLS but sslmode is {0}")]
    TlsRefused(&'static str),
    #[error("PG_TLS_FAILED: {0}")]
    Tls(String),
    #[error("PG_AUTH_FAILED: {0}")]
    Auth(String),
    #[error("PG_AUTH_UNSUPPORTED: {0}")]
    AuthUnsupported(String),
    #[error("PG_PERMISSION_DENIED: {0}")]
    PermissionDenied(String),
    #[error("PG_WAL_LEVEL_NOT_LOGICAL: wal_level is {0}; logical replication needs wal_level=logical (restart required)")]
    WalLevel(String),
    #[error("PG_ENCODING_UNSUPPORTED: database encoding is {0}; the relay needs UTF8")]
    Encoding(String),
    #[error("PUBLICATION_MISSING: publication {0} does not exist; run `outbox-cdc migrate`")]
    PublicationMissing(String),
    #[error("PUBLICATION_MISSING_TABLE: publication {publication} does not cover {table}")]
    PublicationMissingTable { publication: String, table: String },
    #[error("PUBLICATION_NOT_INSERTS: publication {0} does not publish inserts")]
    PublicationNotInserts(String),
    #[error("SLOT_MISSING: replication slot {0} does not exist")]
    SlotMissing(String),
    #[error("SLOT_WRONG_PLUGIN: replication slot {slot} uses plugin {plugin}, not pgoutput")]
    SlotWrongPlugin { slot: String, plugin: String },
    #[error("SLOT_WRONG_DATABASE: replication slot {slot} belongs to database {database}")]
    SlotWrongDatabase { slot: String, database: String },
    #[error("SLOT_NOT_LOGICAL: replication slot {0} is a physical slot")]
    SlotNotLogical(String),
    #[error("SLOT_INVALIDATED: replication slot {0} has lost required WAL and must be recreated (messages in the gap need a cutover re-run)")]
    SlotInvalidated(String),
    #[error("SLOT_IN_USE: replication slot {slot} is active for process {pid}")]
    SlotInUse { slot: String, pid: String },
    #[error("PGOUTPUT_MALFORMED: {0}")]
    Malformed(String),
    #[error("PG_PROTOCOL: {0}")]
    Protocol(String),
    #[error("PG_SERVER_ERROR: {sqlstate}: {message}")]
    Server { sqlstate: String, message: String },
    #[error("READER_STOPPED: the consumer went away at {0}")]
    ConsumerGone(Lsn),
}

impl ReplicationError {
    pub fn code(&self) -> &'static str {
        use ReplicationError::*;
        match self {
            Connect(_) => "PG_CONNECT_FAILED",
            ConnectionLost(_) => "PG_CONNECTION_LOST",
            TlsRefused(_) => "PG_TLS_REFUSED",
            Tls(_) => "PG_TLS_FAILED",
            Auth(_) => "PG_AUTH_FAILED",
            AuthUnsupported(_) => "PG_AUTH_UNSUPPORTED",
            PermissionDenied(_) => "PG_PERMISSION_DENIED",
            WalLevel(_) => "PG_WAL_LEVEL_NOT_LOGICAL",
            Encoding(_) => "PG_ENCODING_UNSUPPORTED",
            PublicationMissing(_) => "PUBLICATION_MISSING",
            PublicationMissingTable { .. } => "PUBLICATION_MISSING_TABLE",
            PublicationNotInserts(_) => "PUBLICATION_NOT_INSERTS",
            SlotMissing(_) => "SLOT_MISSING",
            SlotWrongPlugin { .. } => "SLOT_WRONG_PLUGIN",
            SlotWrongDatabase { .. } => "SLOT_WRONG_DATABASE",
            SlotNotLogical(_) => "SLOT_NOT_LOGICAL",
            SlotInvalidated(_) => "SLOT_INVALIDATED",
            SlotInUse { .. } => "SLOT_IN_USE",
            Malformed(_) => "PGOUTPUT_MALFORMED",
            Protocol(_) => "PG_PROTOCOL",
            Server { .. } => "PG_SERVER_ERROR",
            ConsumerGone(_) => "READER_STOPPED",
        }
    }

    /// Worth a reconnect with backoff; everything else needs an operator.
    pub fn is_transient(&self) -> bool {
        use ReplicationError::*;
        match self {
            Connect(_) | ConnectionLost(_) | Protocol(_) => true,
            // Connection exceptions, operator intervention (shutdown,
            // restart), insufficient resources.
            Server { sqlstate, .. } => {
                sqlstate.starts_with("08")
                    || sqlstate.starts_with("57P")
                    || sqlstate.starts_with("53")
            }
            _ => false,
        }
    }

    /// Built from an ErrorResponse: permission and slot errors get their own
    /// codes so that callers can act on them.
    pub(crate) fn from_server(
        sqlstate: &str,
        message: String,
        slot: Option<&str>,
    ) -> ReplicationError {
        let slot_name = || slot.unwrap_or_default().to_string();
        match sqlstate {
            "28P01" => ReplicationError::Auth(message),
            "28000" if message.contains("pg_hba.conf") => ReplicationError::Auth(message),
            "28000" | "42501" => ReplicationError::PermissionDenied(message),
            "55006" if slot.is_some() => ReplicationError::SlotInUse {
                slot: slot_name(),
                pid: message
                    .rsplit(' ')
                    .next()
                    .unwrap_or_default()
                    .trim_end_matches('.')
                    .to_string(),
            },
            "42704" if message.contains("publication") => {
                ReplicationError::PublicationMissing(message)
            }
            "42704" if slot.is_some() && message.contains("replication slot") => {
                ReplicationError::SlotMissing(slot_name())
            }
            "55000"
                if slot.is_some()
                    && (message.contains("invalidated")
                        || message.contains("no longer get changes")) =>
            {
                ReplicationError::SlotInvalidated(slot_name())
            }
            _ => ReplicationError::Server {
                sqlstate: sqlstate.to_string(),
                message,
            },
        }
    }
}
