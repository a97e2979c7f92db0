//! The replication connection's socket: TCP with keepalives and a user
//! timeout, or TLS over it after PostgreSQL's SSLRequest.

use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use postgres_protocol::message::frontend;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use crate::config::{Env, PostgresConfig, Secret, SslMode};
use crate::error::{Cause, Code, Error};
use crate::pg::tls;

/// What a replication connection needs to know.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    pub host: String,
    pub port: u16,
    pub dbname: String,
    pub user: String,
    pub password: Option<Secret>,
    pub sslmode: SslMode,
    pub sslrootcert: Option<PathBuf>,
    pub application_name: String,
    pub connect_timeout: Duration,
    /// Data the server does not acknowledge for this long fails the
    /// connection in the kernel (`TCP_USER_TIMEOUT`).
    pub user_timeout: Duration,
    /// Further (host, port) pairs of libpq's multi-host form, tried in
    /// order after `host`; with any, only a server that accepts writes (not
    /// in recovery) is used.
    pub more_hosts: Vec<(String, u16)>,
}

impl ConnectOptions {
    pub fn from_postgres(pg: &PostgresConfig, env: &Env) -> Result<ConnectOptions, Error> {
        let mut endpoints = pg.endpoints().into_iter();
        let (host, port) = endpoints.next().unwrap_or_else(|| (pg.host.clone(), 5432));
        Ok(ConnectOptions {
            host,
            port,
            more_hosts: endpoints.collect(),
            dbname: pg.dbname.clone(),
            user: pg.user.clone(),
            password: pg.password(env)?,
            sslmode: pg.sslmode,
            sslrootcert: pg.sslrootcert.clone(),
            application_name: pg.application_name.clone(),
            connect_timeout: Duration::from_secs(pg.connect_timeout_secs),
            user_timeout: pg.wal_receiver_timeout(),
        })
    }
}

pub(crate) fn lost(e: std::io::Error) -> Error {
    Error::new(Code::PG_CONNECTION_LOST, e.to_string()).caused_by(Cause::Io(e.kind()))
}

pub(super) fn protocol(what: impl std::fmt::Display) -> Error {
    Error::new(Code::PG_PROTOCOL, what.to_string())
}

/// TCP, or TLS over TCP.
pub(crate) enum Transport {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Transport::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Transport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Transport::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_flush(cx),
            Transport::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Transport::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Keepalives and a user timeout, as libpq's `keepalives_*` and
/// `tcp_user_timeout`: the kernel notices a vanished peer even while the
/// stream is idle. Best effort: a platform without them keeps the
/// reader's own receive timeout.
fn keep_alive(tcp: &TcpStream, user_timeout: Duration) {
    use crate::pg::connect::{KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_RETRIES};
    let socket = socket2::SockRef::from(tcp);
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL)
        .with_retries(KEEPALIVE_RETRIES);
    if let Err(e) = socket.set_tcp_keepalive(&keepalive) {
        tracing::debug!(error = %e, "TCP keepalives not set on the replication connection");
    }
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Err(e) = socket.set_tcp_user_timeout(Some(user_timeout)) {
        tracing::debug!(error = %e, "TCP_USER_TIMEOUT not set on the replication connection");
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = user_timeout;
}

pub(super) async fn open_transport(
    opts: &ConnectOptions,
) -> Result<(Transport, Option<Vec<u8>>), Error> {
    let addr = format!("{}:{}", opts.host, opts.port);
    let connect_failed = |what: String| {
        Error::new(
            Code::PG_CONNECT_FAILED,
            format!("replication connection to {addr}: {what}"),
        )
    };
    let mut tcp = tokio::time::timeout(opts.connect_timeout, TcpStream::connect(&addr))
        .await
        .map_err(|_| connect_failed(format!("timed out after {:?}", opts.connect_timeout)))?
        .map_err(|e| connect_failed(e.to_string()).caused_by(Cause::Io(e.kind())))?;
    tcp.set_nodelay(true).ok();
    keep_alive(&tcp, opts.user_timeout);
    let Some(tls_config) = tls::client_config(opts.sslmode, opts.sslrootcert.as_deref())? else {
        return Ok((Transport::Plain(tcp), None));
    };
    let mut req = BytesMut::new();
    frontend::ssl_request(&mut req);
    tcp.write_all(&req).await.map_err(lost)?;
    let answer = tcp.read_u8().await.map_err(lost)?;
    match answer {
        b'S' => {}
        b'N' if opts.sslmode == SslMode::Prefer => return Ok((Transport::Plain(tcp), None)),
        b'N' => {
            return Err(Error::new(
                Code::PG_TLS_REFUSED,
                format!(
                    "the server does not offer TLS but sslmode is {}",
                    opts.sslmode.as_str()
                ),
            ))
        }
        other => {
            return Err(protocol(format!(
                "unexpected answer {other:#04x} to SSLRequest"
            )))
        }
    }
    let name = ServerName::try_from(opts.host.clone())
        .map_err(|e| Error::new(Code::PG_TLS_FAILED, format!("{}: {e}", opts.host)))?;
    let stream = tokio_rustls::TlsConnector::from(tls_config)
        .connect(name, tcp)
        .await
        .map_err(|e| tls::handshake_failed(&e, &addr))?;
    let end_point = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| tls::server_end_point(c.as_ref()));
    Ok((Transport::Tls(Box::new(stream)), end_point))
}
