//! Ordinary SQL connections (migrations, catalog checks, row marking).
//! Replication has its own client.

use std::time::Duration;

use thiserror::Error;
use tokio_postgres::config::SslMode;
use tokio_postgres::{Client, NoTls};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::config::{Config, ConfigError};
use crate::replication::tls;

#[derive(Debug, Error)]
pub enum DbError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("PG_TLS_FAILED: {0}")]
    Tls(String),
    #[error(
        "PG_AUTH_FAILED: PostgreSQL at {host}:{port} refused the credentials of {user}: {source}"
    )]
    Auth {
        host: String,
        port: u16,
        user: String,
        source: tokio_postgres::Error,
    },
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
            DbError::Tls(_) => "PG_TLS_FAILED",
            DbError::Auth { .. } => "PG_AUTH_FAILED",
            DbError::Connect { .. } => "PG_CONNECT_FAILED",
        }
    }
}

/// Connects with the configuration's credentials and drives the connection
/// on its own task.
pub async fn connect(
    cfg: &Config,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<Client, DbError> {
    let pg = &cfg.postgres;
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
    let connect_err = |source: tokio_postgres::Error| {
        let (host, port, user) = (pg.host.clone(), pg.port, pg.user.clone());
        match source.code().map(|c| c.code()) {
            Some("28P01") | Some("28000") => DbError::Auth {
                host,
                port,
                user,
                source,
            },
            _ => DbError::Connect {
                host,
                port,
                user,
                source,
            },
        }
    };
    let tls = tls::client_config(pg.sslmode, pg.sslrootcert.as_deref())
        .map_err(|e| DbError::Tls(e.to_string()))?;
    let client = match tls {
        None => {
            pc.ssl_mode(SslMode::Disable);
            let (client, connection) = pc.connect(NoTls).await.map_err(connect_err)?;
            spawn_connection(connection);
            client
        }
        Some(config) => {
            pc.ssl_mode(if cfg.postgres.sslmode == crate::config::SslMode::Prefer {
                SslMode::Prefer
            } else {
                SslMode::Require
            });
            let (client, connection) = pc
                .connect(MakeRustlsConnect::new((*config).clone()))
                .await
                .map_err(connect_err)?;
            spawn_connection(connection);
            client
        }
    };
    Ok(client)
}

fn spawn_connection<S, T>(connection: tokio_postgres::Connection<S, T>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "PostgreSQL connection closed with an error");
        }
    });
}
