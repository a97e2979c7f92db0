//! A `replication=database` session: TCP or TLS, start-up, authentication
//! (trust, cleartext, MD5, SCRAM-SHA-256 with channel binding over TLS),
//! simple queries and the switch into CopyBoth streaming.

use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use postgres_protocol::authentication::{self, sasl};
use postgres_protocol::message::backend::{ErrorResponseBody, Message};
use postgres_protocol::message::frontend;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

use super::codec::{Backend, PgCodec};
use super::tls;
use super::ReplicationError;
use crate::config::{Config, ConfigError, Secret, SslMode};

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
}

impl ConnectOptions {
    pub fn from_config(
        cfg: &Config,
        env: &(dyn Fn(&str) -> Option<String> + Sync),
    ) -> Result<ConnectOptions, ConfigError> {
        let pg = &cfg.postgres;
        Ok(ConnectOptions {
            host: pg.host.clone(),
            port: pg.port,
            dbname: pg.dbname.clone(),
            user: pg.user.clone(),
            password: cfg.postgres_password(env)?,
            sslmode: pg.sslmode,
            sslrootcert: pg.sslrootcert.clone(),
            application_name: pg.application_name.clone(),
            connect_timeout: Duration::from_secs(pg.connect_timeout_secs),
        })
    }
}

/// TCP, or TLS over TCP.
pub enum Transport {
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

/// An authenticated replication session, ready for commands.
pub struct ReplicationConnection {
    pub(crate) framed: Framed<Transport, PgCodec>,
    pub server_version: String,
    pub tls: bool,
}

pub(crate) fn lost(e: std::io::Error) -> ReplicationError {
    ReplicationError::ConnectionLost(e.to_string())
}

pub(crate) fn error_fields(body: &ErrorResponseBody) -> (String, String) {
    use fallible_iterator::FallibleIterator;
    let mut code = String::new();
    let mut message = String::new();
    let mut fields = body.fields();
    while let Ok(Some(f)) = fields.next() {
        match f.type_() {
            b'C' => code = String::from_utf8_lossy(f.value_bytes()).into_owned(),
            b'M' => message = String::from_utf8_lossy(f.value_bytes()).into_owned(),
            _ => {}
        }
    }
    (code, message)
}

fn encode(f: impl FnOnce(&mut BytesMut) -> std::io::Result<()>) -> Result<Bytes, ReplicationError> {
    let mut buf = BytesMut::new();
    f(&mut buf).map_err(|e| ReplicationError::Protocol(e.to_string()))?;
    Ok(buf.freeze())
}

async fn open_transport(
    opts: &ConnectOptions,
) -> Result<(Transport, Option<Vec<u8>>), ReplicationError> {
    let addr = format!("{}:{}", opts.host, opts.port);
    let mut tcp = tokio::time::timeout(opts.connect_timeout, TcpStream::connect(&addr))
        .await
        .map_err(|_| {
            ReplicationError::Connect(format!(
                "{addr}: timed out after {:?}",
                opts.connect_timeout
            ))
        })?
        .map_err(|e| ReplicationError::Connect(format!("{addr}: {e}")))?;
    tcp.set_nodelay(true).ok();
    let Some(tls_config) = tls::client_config(opts.sslmode, opts.sslrootcert.as_deref())
        .map_err(|e| ReplicationError::Tls(e.to_string()))?
    else {
        return Ok((Transport::Plain(tcp), None));
    };
    let mut req = BytesMut::new();
    frontend::ssl_request(&mut req);
    tcp.write_all(&req).await.map_err(lost)?;
    let answer = tcp.read_u8().await.map_err(lost)?;
    match answer {
        b'S' => {}
        b'N' if opts.sslmode == SslMode::Prefer => return Ok((Transport::Plain(tcp), None)),
        b'N' => return Err(ReplicationError::TlsRefused(opts.sslmode.as_str())),
        other => {
            return Err(ReplicationError::Protocol(format!(
                "unexpected answer {other:#04x} to SSLRequest"
            )))
        }
    }
    let name = ServerName::try_from(opts.host.clone())
        .map_err(|e| ReplicationError::Tls(format!("{}: {e}", opts.host)))?;
    let stream = tokio_rustls::TlsConnector::from(tls_config)
        .connect(name, tcp)
        .await
        .map_err(|e| ReplicationError::Tls(e.to_string()))?;
    let end_point = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| tls::server_end_point(c.as_ref()));
    Ok((Transport::Tls(Box::new(stream)), end_point))
}

impl ReplicationConnection {
    /// Opens, authenticates and waits until the server is ready.
    pub async fn connect(opts: &ConnectOptions) -> Result<ReplicationConnection, ReplicationError> {
        let (transport, end_point) = open_transport(opts).await?;
        let tls = matches!(transport, Transport::Tls(_));
        let mut framed = Framed::new(transport, PgCodec);
        // The session's output settings decide the text pgoutput sends:
        // ISO timestamps in UTC and hex bytea, whatever the server defaults.
        let params = [
            ("user", opts.user.as_str()),
            ("database", opts.dbname.as_str()),
            ("replication", "database"),
            ("application_name", opts.application_name.as_str()),
            ("client_encoding", "UTF8"),
            ("DateStyle", "ISO"),
            ("TimeZone", "UTC"),
            ("bytea_output", "hex"),
            ("extra_float_digits", "3"),
        ];
        let startup = encode(|b| frontend::startup_message(params.iter().copied(), b))?;
        framed.send(startup).await.map_err(lost)?;

        let mut conn = ReplicationConnection {
            framed,
            server_version: String::new(),
            tls,
        };
        conn.authenticate(opts, end_point).await?;
        loop {
            match conn.next().await? {
                Message::ParameterStatus(p) => {
                    if p.name().ok() == Some("server_version") {
                        conn.server_version = p.value().unwrap_or_default().to_string();
                    }
                }
                Message::ReadyForQuery(_) => return Ok(conn),
                Message::BackendKeyData(_) | Message::NoticeResponse(_) => {}
                Message::ErrorResponse(body) => {
                    let (code, message) = error_fields(&body);
                    return Err(ReplicationError::from_server(&code, message, None));
                }
                _ => {
                    return Err(ReplicationError::Protocol(
                        "unexpected message during start-up".into(),
                    ))
                }
            }
        }
    }

    /// The next regular backend message.
    pub(crate) async fn next(&mut self) -> Result<Message, ReplicationError> {
        match self.framed.next().await {
            Some(Ok(Backend::Message(m))) => Ok(m),
            Some(Ok(Backend::CopyBothResponse)) => Err(ReplicationError::Protocol(
                "unexpected CopyBothResponse".into(),
            )),
            Some(Err(e)) => Err(lost(e)),
            None => Err(ReplicationError::ConnectionLost(
                "server closed the connection".into(),
            )),
        }
    }

    async fn send(&mut self, bytes: Bytes) -> Result<(), ReplicationError> {
        self.framed.send(bytes).await.map_err(lost)
    }

    async fn authenticate(
        &mut self,
        opts: &ConnectOptions,
        end_point: Option<Vec<u8>>,
    ) -> Result<(), ReplicationError> {
        let password = || {
            opts.password
                .as_ref()
                .map(|p| p.expose().as_bytes().to_vec())
                .ok_or_else(|| {
                    ReplicationError::Auth(format!(
                        "the server asks a password for {} and none is configured",
                        opts.user
                    ))
                })
        };
        let mut scram: Option<sasl::ScramSha256> = None;
        loop {
            match self.next().await? {
                Message::AuthenticationOk => return Ok(()),
                Message::AuthenticationCleartextPassword => {
                    let pw = password()?;
                    let msg = encode(|b| frontend::password_message(&pw, b))?;
                    self.send(msg).await?;
                }
                Message::AuthenticationMd5Password(body) => {
                    let hash = authentication::md5_hash(opts.user.as_bytes(), &password()?, body.salt());
                    let msg = encode(|b| frontend::password_message(hash.as_bytes(), b))?;
                    self.send(msg).await?;
                }
                Message::AuthenticationSasl(body) => {
                    use fallible_iterator::FallibleIterator;
                    let mut plus = false;
                    let mut plain = false;
                    let mut mechanisms = body.mechanisms();
                    while let Ok(Some(m)) = mechanisms.next() {
                        plus |= m == sasl::SCRAM_SHA_256_PLUS;
                        plain |= m == sasl::SCRAM_SHA_256;
                    }
                    let (mechanism, binding) = match (&end_point, plus, plain) {
                        (Some(ep), true, _) => (sasl::SCRAM_SHA_256_PLUS, sasl::ChannelBinding::tls_server_end_point(ep.clone())),
                        (Some(_), false, true) => (sasl::SCRAM_SHA_256, sasl::ChannelBinding::unrequested()),
                        (None, _, true) => (sasl::SCRAM_SHA_256, sasl::ChannelBinding::unsupported()),
                        _ => return Err(ReplicationError::AuthUnsupported("no supported SASL mechanism".into())),
                    };
                    let state = sasl::ScramSha256::new(&password()?, binding);
                    let msg = encode(|b| frontend::sasl_initial_response(mechanism, state.message(), b))?;
                    scram = Some(state);
                    self.send(msg).await?;
                }
                Message::AuthenticationSaslContinue(body) => {
                    let state = scram
                        .as_mut()
                        .ok_or_else(|| ReplicationError::Protocol("SASL continue before start".into()))?;
                    state
                        .update(body.data())
                        .map_err(|e| ReplicationError::Auth(format!("SCRAM: {e}")))?;
                    let msg = encode(|b| frontend::sasl_response(state.message(), b))?;
                    self.send(msg).await?;
                }
                Message::AuthenticationSaslFinal(body) => {
                    let state = scram
                        .as_mut()
                        .ok_or_else(|| ReplicationError::Protocol("SASL final before start".into()))?;
                    state
                        .finish(body.data())
                        .map_err(|e| ReplicationError::Auth(format!("SCRAM server signature: {e}")))?;
                }
                Message::ErrorResponse(body) => {
                    let (code, message) = error_fields(&body);
                    return Err(ReplicationError::from_server(&code, message, None));
                }
                Message::NoticeResponse(_) => {}
                _ => {
                    return Err(ReplicationError::AuthUnsupported(
                        "the server asks for an authentication method the relay does not offer (GSS, SSPI, Kerberos)".into(),
                    ))
                }
            }
        }
    }

    /// Runs one simple-protocol statement (a replication command or SQL) and
    /// returns its rows as text. `slot` names the slot a failure is about.
    pub async fn simple_query(
        &mut self,
        sql: &str,
        slot: Option<&str>,
    ) -> Result<Vec<Vec<Option<String>>>, ReplicationError> {
        let msg = encode(|b| frontend::query(sql, b))?;
        self.send(msg).await?;
        let mut rows = Vec::new();
        let mut error = None;
        loop {
            match self.next().await? {
                Message::DataRow(row) => {
                    use fallible_iterator::FallibleIterator;
                    let buf = row.buffer();
                    let mut values = Vec::new();
                    let mut ranges = row.ranges();
                    while let Some(range) = ranges
                        .next()
                        .map_err(|e| ReplicationError::Protocol(e.to_string()))?
                    {
                        values.push(range.map(|r| {
                            String::from_utf8_lossy(buf.get(r).unwrap_or_default()).into_owned()
                        }));
                    }
                    rows.push(values);
                }
                Message::ErrorResponse(body) => {
                    let (code, message) = error_fields(&body);
                    error = Some(ReplicationError::from_server(&code, message, slot));
                }
                Message::ReadyForQuery(_) => {
                    return match error {
                        Some(e) => Err(e),
                        None => Ok(rows),
                    }
                }
                _ => {}
            }
        }
    }

    /// Sends START_REPLICATION and waits for CopyBoth.
    pub async fn start_replication(
        &mut self,
        command: &str,
        slot: &str,
    ) -> Result<(), ReplicationError> {
        let msg = encode(|b| frontend::query(command, b))?;
        self.send(msg).await?;
        loop {
            match self.framed.next().await {
                Some(Ok(Backend::CopyBothResponse)) => return Ok(()),
                Some(Ok(Backend::Message(Message::ErrorResponse(body)))) => {
                    let (code, message) = error_fields(&body);
                    // Drain to ReadyForQuery so the error is the whole story.
                    return Err(ReplicationError::from_server(&code, message, Some(slot)));
                }
                Some(Ok(Backend::Message(
                    Message::NoticeResponse(_) | Message::ParameterStatus(_),
                ))) => {}
                Some(Ok(Backend::Message(_))) => {
                    return Err(ReplicationError::Protocol(
                        "unexpected reply to START_REPLICATION".into(),
                    ))
                }
                Some(Err(e)) => return Err(lost(e)),
                None => {
                    return Err(ReplicationError::ConnectionLost(
                        "server closed the connection".into(),
                    ))
                }
            }
        }
    }

    /// Sends a CopyData message (standby status update).
    pub(crate) async fn send_copy_data(&mut self, payload: &[u8]) -> Result<(), ReplicationError> {
        let mut buf = BytesMut::with_capacity(payload.len() + 5);
        buf.extend_from_slice(b"d");
        buf.extend_from_slice(&((payload.len() + 4) as u32).to_be_bytes());
        buf.extend_from_slice(payload);
        self.send(buf.freeze()).await
    }

    /// Ends streaming politely (CopyDone, Terminate).
    pub(crate) async fn close(mut self) {
        let mut buf = BytesMut::new();
        frontend::copy_done(&mut buf);
        frontend::terminate(&mut buf);
        let _ = self.framed.send(buf.freeze()).await;
        let _ = self.framed.close().await;
    }
}
