//! Ordinary SQL connections (migrations, preflight, bookkeeping, cutover).
//! Replication has its own client in [`crate::replication`].

use std::time::Duration;

use tokio_postgres::config::{SslMode as PgSslMode, TargetSessionAttrs};
use tokio_postgres::{Client, NoTls};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::sqlstate::{sql_error, Phase};
use super::tls;
use crate::config::{Env, PostgresConfig, SslMode};
use crate::error::{Code, Error};

/// Connects with the configuration's credentials and drives the connection
/// on its own task. The error names the server and user, then what the
/// server (or the operating system) said.
pub async fn connect(pg: &PostgresConfig, env: &Env) -> Result<Client, Error> {
    connect_to(pg, env, &pg.endpoints()).await
}

/// As [`connect`], to the given (host, port) pairs of the configuration's
/// list: `check` reads each standby's settings this way.
pub async fn connect_to(
    pg: &PostgresConfig,
    env: &Env,
    endpoints: &[(String, u16)],
) -> Result<Client, Error> {
    let mut pc = tokio_postgres::Config::new();
    for (host, port) in endpoints {
        pc.host(host).port(*port);
    }
    // Several hosts: the one that accepts writes (the primary after a
    // failover), as libpq's target_session_attrs=read-write.
    if endpoints.len() > 1 {
        pc.target_session_attrs(TargetSessionAttrs::ReadWrite);
    }
    pc.dbname(&pg.dbname)
        .user(&pg.user)
        .application_name(&pg.application_name)
        .connect_timeout(Duration::from_secs(pg.connect_timeout_secs));
    if let Some(password) = pg.password(env)? {
        pc.password(password.expose());
    }
    let context = || {
        format!(
            "PostgreSQL at {} as {}, database {}",
            endpoints
                .iter()
                .map(|(h, p)| format!("{h}:{p}"))
                .collect::<Vec<_>>()
                .join(","),
            pg.user,
            pg.dbname
        )
    };
    let failed = |e: tokio_postgres::Error| {
        sql_error(&e, Phase::Connecting, Code::PG_CONNECT_FAILED).context(context())
    };
    let tls = tls::client_config(pg.sslmode, pg.sslrootcert.as_deref())?;
    let client = match tls {
        None => {
            pc.ssl_mode(PgSslMode::Disable);
            let (client, connection) = pc.connect(NoTls).await.map_err(failed)?;
            spawn_connection(connection);
            client
        }
        Some(config) => {
            pc.ssl_mode(if pg.sslmode == SslMode::Prefer {
                PgSslMode::Prefer
            } else {
                PgSslMode::Require
            });
            let (client, connection) = pc
                .connect(MakeRustlsConnect::new((*config).clone()))
                .await
                .map_err(failed)?;
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
            tracing::warn!(error = %crate::error::chain(&e), "PostgreSQL connection closed with an error");
        }
    });
}
