//! Ordinary SQL connections (migrations, catalog checks, row marking).
//! Replication has its own client.

use std::time::Duration;

use thiserror::Error;
use tokio_postgres::{Client, NoTls};

use crate::config::{Config, ConfigError, SslMode};

#[derive(Debug, Error)]
pub enum DbError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("PG_TLS_UNAVAILABLE: postgres.sslmode = {mode} needs TLS, which SQL connections of this build do not offer yet; use disable or prefer")]
    TlsUnavailable { mode: &'static str },
    #[error(
        "PG_CONNECT_FAILED: cannot connect to PostgreSQL at {host}:{port} as {user}: {source}"
    )]
    Connect {
        host: String,
        port: u16,
        user: String,
        source: tokio_postgres::Error,
    },
}

impl DbError {
    pub fn code(&self) -> &'static str {
        match self {
            DbError::Config(e) => e.code(),
            DbError::TlsUnavailable { .. } => "PG_TLS_UNAVAILABLE",
            DbError::Connect { .. } => "PG_CONNECT_FAILED",
        }
    }
}

/// Connects with the configuration's credentials and drives the connection
/// on its own task.
pub async fn connect(
    cfg: &Config,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Client, DbError> {
    let pg = &cfg.postgres;
    if matches!(
        pg.sslmode,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull
    ) {
        return Err(DbError::TlsUnavailable {
            mode: pg.sslmode.as_str(),
        });
    }
    let mut pc = tokio_postgres::Config::new();
    pc.host(&pg.host)
        .port(pg.port)
        .dbname(&pg.dbname)
        .user(&pg.user)
        .application_name(&pg.application_name)
        .connect_timeout(Duration::from_secs(pg.connect_timeout_secs));
    if let Some(password) = cfg.postgres_password(env)? {
        pc.password(password.expose());
    }
    let (client, connection) = pc.connect(NoTls).await.map_err(|source| DbError::Connect {
        host: pg.host.clone(),
        port: pg.port,
        user: pg.user.clone(),
        source,
    })?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "PostgreSQL connection closed with an error");
        }
    });
    Ok(client)
}
