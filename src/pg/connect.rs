//! Ordinary SQL connections (migrations, preflight, bookkeeping, cutover).
//! Replication has its own client in [`crate::replication`].

use std::future::Future;
use std::time::Duration;

use tokio_postgres::config::{SslMode as PgSslMode, TargetSessionAttrs};
use tokio_postgres::{Client, NoTls};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::sqlstate::{sql_error, Phase};
use super::tls;
use crate::config::{Env, PostgresConfig, SslMode};
use crate::error::{Cause, Code, Error};

/// TCP keepalives on every connection to PostgreSQL: a peer that vanished
/// (a dropped NAT entry, a host gone) is noticed by the kernel within
/// about 10 + 3 × 5 s even while the connection is idle.
pub(crate) const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
pub(crate) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
pub(crate) const KEEPALIVE_RETRIES: u32 = 3;

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
        .connect_timeout(Duration::from_secs(pg.connect_timeout_secs))
        .keepalives(true)
        .keepalives_idle(KEEPALIVE_IDLE)
        .keepalives_interval(KEEPALIVE_INTERVAL)
        .keepalives_retries(KEEPALIVE_RETRIES)
        // Data the server never acknowledges fails the connection too.
        .tcp_user_timeout(pg.query_timeout());
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
        let e = sql_error(&e, Phase::Connecting, Code::PG_CONNECT_FAILED).context(context());
        match e.refused() {
            true => e.hint("nothing accepts connections there: is PostgreSQL running, listening on that address (listen_addresses), and are postgres.host and postgres.port right?"),
            false => e,
        }
    };
    let tls = tls::client_config(pg.sslmode, pg.sslrootcert.as_deref())?;
    let client = match tls {
        None => {
            pc.ssl_mode(PgSslMode::Disable);
            let (client, connection) = within_connect(pg, pc.connect(NoTls))
                .await
                .map_err(|e| e.context(context()))?
                .map_err(failed)?;
            spawn_connection(connection);
            client
        }
        Some(config) => {
            pc.ssl_mode(if pg.sslmode == SslMode::Prefer {
                PgSslMode::Prefer
            } else {
                PgSslMode::Require
            });
            let (client, connection) =
                within_connect(pg, pc.connect(MakeRustlsConnect::new((*config).clone())))
                    .await
                    .map_err(|e| e.context(context()))?
                    .map_err(failed)?;
            spawn_connection(connection);
            client
        }
    };
    Ok(client)
}

/// tokio-postgres bounds the TCP connect only; a link that goes silent in
/// the TLS handshake or the log-in would hold the caller for ever.
async fn within_connect<T>(
    pg: &PostgresConfig,
    connecting: impl Future<Output = T>,
) -> Result<T, Error> {
    let hosts = pg.endpoints().len().max(1) as u32;
    let limit = Duration::from_secs(pg.connect_timeout_secs) * hosts;
    tokio::time::timeout(limit, connecting).await.map_err(|_| {
        Error::new(
            Code::PG_CONNECT_FAILED,
            format!("no answer within {limit:?} (postgres.connect_timeout_secs per host)"),
        )
        .caused_by(Cause::Io(std::io::ErrorKind::TimedOut))
    })
}

/// Waits at most `within` for `work` on a SQL connection. A statement that
/// never reached the server (a silent link) is never ended by the server's
/// own `statement_timeout`; the caller gives the connection up on this
/// error (`PG_CONNECTION_LOST`, caused by a timeout) and opens another.
pub(crate) async fn answered<T>(
    within: Duration,
    what: &str,
    work: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    match tokio::time::timeout(within, work).await {
        Ok(result) => result,
        Err(_) => Err(silent(within, what)),
    }
}

/// The error of a connection that stopped answering.
pub(crate) fn silent(within: Duration, what: &str) -> Error {
    Error::new(
        Code::PG_CONNECTION_LOST,
        format!(
            "PostgreSQL did not answer {what} within {} s (postgres.query_timeout_secs); the connection is given up",
            within.as_secs()
        ),
    )
    .caused_by(Cause::Io(std::io::ErrorKind::TimedOut))
}

/// Whether an error says the connection itself is gone or silent (a new
/// one is needed), as opposed to a statement the server refused.
pub(crate) fn connection_gone(e: &Error) -> bool {
    e.code() == Code::PG_CONNECTION_LOST
}

/// Whether `client` still answers, within `within`: a closed connection
/// or a silent one is replaced before a session uses it.
pub(crate) async fn answers(client: &Client, within: Duration) -> bool {
    !client.is_closed()
        && matches!(
            tokio::time::timeout(within, client.simple_query("")).await,
            Ok(Ok(_))
        )
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
