//! A `replication=database` session: TCP or TLS, start-up, authentication
//! (trust, cleartext, MD5, SCRAM-SHA-256 with channel binding over TLS),
//! simple queries and the switch into CopyBoth streaming.

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use postgres_protocol::authentication::{self, sasl};
use postgres_protocol::message::backend::{ErrorResponseBody, Message};
use postgres_protocol::message::frontend;
use tokio_util::codec::Framed;

use super::codec::{Backend, PgCodec};
pub(crate) use super::transport::lost;
pub use super::transport::ConnectOptions;
use super::transport::{open_transport, protocol, Transport};
use crate::error::{Cause, Code, Error};
use crate::lsn::Lsn;
use crate::pg::sqlstate::{self, Phase, ServerError};

/// What `START_REPLICATION` asks pgoutput for.
#[derive(Debug, Clone, Copy)]
pub struct StartReplication<'a> {
    pub slot: &'a str,
    /// The position to stream from.
    pub from: Lsn,
    pub publication: &'a str,
    pub messages: Messages,
    pub values: Values,
}

/// Whether logical decoding messages (the relay's heartbeats) come with
/// the changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Messages {
    Included,
    Left,
}

/// How pgoutput sends column values: text, or binary where the server
/// offers it (PostgreSQL 14+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Values {
    Text,
    Binary,
}

/// An authenticated replication session, ready for commands.
pub struct ReplicationConnection {
    pub(crate) framed: Framed<Transport, PgCodec>,
    pub server_version: String,
    pub tls: bool,
    /// The server process serving this connection (from BackendKeyData).
    pub backend_pid: i32,
}

/// What a command is, for naming the failures the server reports on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Command {
    /// Start-up and authentication.
    LogIn,
    /// SQL or a replication command that names no slot.
    Query,
    CreateSlot,
    StartReplication,
    /// After START_REPLICATION succeeded.
    Streaming,
}

/// The typed fields of an ErrorResponse.
pub(crate) fn server_error(body: &ErrorResponseBody) -> ServerError {
    use fallible_iterator::FallibleIterator;
    let mut e = ServerError::default();
    let mut fields = body.fields();
    while let Ok(Some(f)) = fields.next() {
        let text = || String::from_utf8_lossy(f.value_bytes()).into_owned();
        match f.type_() {
            b'C' => e.sqlstate = text(),
            b'M' => e.message = text(),
            b'D' => e.detail = Some(text()),
            b'H' => e.hint = Some(text()),
            _ => {}
        }
    }
    e
}

/// The code for a server's refusal, decided by its SQLSTATE and by the
/// command it refused. Slot conditions the SQLSTATE cannot tell apart (a
/// dropped publication, an invalidated slot) stay `PG_SERVER_ERROR` with the
/// server's words; the relay's preflight then names them from the catalog.
pub(crate) fn refusal(e: ServerError, command: Command) -> Error {
    let phase = if command == Command::LogIn {
        Phase::Connecting
    } else {
        Phase::Connected
    };
    let code = match (command, e.sqlstate.as_str()) {
        // configuration_limit_exceeded: all replication slots are in use.
        (Command::CreateSlot, "53400") => Code::SLOTS_EXHAUSTED,
        (Command::StartReplication, "55006") => Code::SLOT_IN_USE,
        (Command::StartReplication, "42704") => Code::SLOT_MISSING,
        (_, state) => sqlstate::code_for(state, phase).unwrap_or(Code::PG_SERVER_ERROR),
    };
    let sqlstate = Cause::Sqlstate(e.sqlstate.clone());
    Error::new(code, e.to_string()).caused_by(sqlstate)
}

fn encode(f: impl FnOnce(&mut BytesMut) -> std::io::Result<()>) -> Result<Bytes, Error> {
    let mut buf = BytesMut::new();
    f(&mut buf).map_err(protocol)?;
    Ok(buf.freeze())
}

impl ReplicationConnection {
    /// Connects to the first of the configured hosts that takes the log-in
    /// and, when several are listed, is not in recovery.
    pub async fn connect(opts: &ConnectOptions) -> Result<ReplicationConnection, Error> {
        if opts.more_hosts.is_empty() {
            return Self::connect_one(opts).await;
        }
        let mut failures: Vec<Error> = Vec::new();
        let endpoints =
            std::iter::once((opts.host.clone(), opts.port)).chain(opts.more_hosts.iter().cloned());
        for (host, port) in endpoints {
            let one = ConnectOptions {
                host: host.clone(),
                port,
                more_hosts: Vec::new(),
                ..opts.clone()
            };
            match Self::connect_one(&one).await {
                Ok(mut conn) => match conn.in_recovery().await {
                    Ok(false) => return Ok(conn),
                    Ok(true) => {
                        conn.close().await;
                        failures.push(Error::new(
                            Code::PG_CONNECT_FAILED,
                            format!("{host}:{port} is a standby (in recovery)"),
                        ));
                    }
                    Err(e) => failures.push(e.context(format!("{host}:{port}"))),
                },
                Err(e) => failures.push(e),
            }
        }
        // One code when every host failed the same way (bad credentials
        // stop the relay); otherwise a passing failure, retried.
        let code = match failures.first() {
            Some(first) if failures.iter().all(|e| e.code() == first.code()) => first.code(),
            _ => Code::PG_CONNECT_FAILED,
        };
        let detail: Vec<&str> = failures.iter().map(Error::detail).collect();
        Err(Error::new(
            code,
            format!("no listed host accepts writes: {}", detail.join("; ")),
        ))
    }

    /// Whether the server is a standby: SQL is allowed on a
    /// `replication=database` session.
    async fn in_recovery(&mut self) -> Result<bool, Error> {
        let rows = self
            .simple_query("SELECT pg_is_in_recovery()", Command::Query)
            .await?;
        match rows
            .first()
            .and_then(|r| r.first())
            .cloned()
            .flatten()
            .as_deref()
        {
            Some("t") => Ok(true),
            Some("f") => Ok(false),
            other => Err(protocol(format!("pg_is_in_recovery() gave {other:?}"))),
        }
    }

    /// Opens, authenticates and waits until the server is ready.
    async fn connect_one(opts: &ConnectOptions) -> Result<ReplicationConnection, Error> {
        // The TCP connect, the TLS handshake and the log-in together: a link
        // that goes silent in any of them is a failed attempt, retried.
        tokio::time::timeout(opts.connect_timeout, Self::log_in(opts))
            .await
            .map_err(|_| {
                Error::new(
                    Code::PG_CONNECT_FAILED,
                    format!(
                        "replication connection to {}:{}: no answer within {:?} (postgres.connect_timeout_secs)",
                        opts.host, opts.port, opts.connect_timeout
                    ),
                )
                .caused_by(Cause::Io(std::io::ErrorKind::TimedOut))
            })?
    }

    async fn log_in(opts: &ConnectOptions) -> Result<ReplicationConnection, Error> {
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
            backend_pid: 0,
        };
        let context = || {
            format!(
                "replication log-in to {}:{} as {}, database {}",
                opts.host, opts.port, opts.user, opts.dbname
            )
        };
        conn.authenticate(opts, end_point)
            .await
            .map_err(|e| e.context(context()))?;
        loop {
            match conn.next().await? {
                Message::ParameterStatus(p) => {
                    if p.name().ok() == Some("server_version") {
                        conn.server_version = p.value().unwrap_or_default().to_string();
                    }
                }
                Message::ReadyForQuery(_) => return Ok(conn),
                Message::BackendKeyData(key) => conn.backend_pid = key.process_id(),
                Message::NoticeResponse(_) => {}
                Message::ErrorResponse(body) => {
                    return Err(refusal(server_error(&body), Command::LogIn).context(context()));
                }
                _ => return Err(protocol("unexpected message during start-up")),
            }
        }
    }

    /// The next regular backend message.
    pub(crate) async fn next(&mut self) -> Result<Message, Error> {
        match self.framed.next().await {
            Some(Ok(Backend::Message(m))) => Ok(m),
            Some(Ok(Backend::CopyBothResponse)) => Err(protocol("unexpected CopyBothResponse")),
            Some(Err(e)) => Err(lost(e)),
            None => Err(Error::new(
                Code::PG_CONNECTION_LOST,
                "the server closed the connection",
            )),
        }
    }

    async fn send(&mut self, bytes: Bytes) -> Result<(), Error> {
        self.framed.send(bytes).await.map_err(lost)
    }

    async fn authenticate(
        &mut self,
        opts: &ConnectOptions,
        end_point: Option<Vec<u8>>,
    ) -> Result<(), Error> {
        let auth = |what: String| Error::new(Code::PG_AUTH_FAILED, what);
        let password = || {
            opts.password
                .as_ref()
                .map(|p| p.expose().as_bytes().to_vec())
                .ok_or_else(|| {
                    auth(format!(
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
                        _ => return Err(Error::new(Code::PG_AUTH_UNSUPPORTED, "no supported SASL mechanism")),
                    };
                    let state = sasl::ScramSha256::new(&password()?, binding);
                    let msg = encode(|b| frontend::sasl_initial_response(mechanism, state.message(), b))?;
                    scram = Some(state);
                    self.send(msg).await?;
                }
                Message::AuthenticationSaslContinue(body) => {
                    let state = scram
                        .as_mut()
                        .ok_or_else(|| protocol("SASL continue before start"))?;
                    state
                        .update(body.data())
                        .map_err(|e| auth(format!("SCRAM: {e}")))?;
                    let msg = encode(|b| frontend::sasl_response(state.message(), b))?;
                    self.send(msg).await?;
                }
                Message::AuthenticationSaslFinal(body) => {
                    let state = scram
                        .as_mut()
                        .ok_or_else(|| protocol("SASL final before start"))?;
                    state
                        .finish(body.data())
                        .map_err(|e| auth(format!("SCRAM server signature: {e}")))?;
                }
                Message::ErrorResponse(body) => {
                    return Err(refusal(server_error(&body), Command::LogIn));
                }
                Message::NoticeResponse(_) => {}
                _ => {
                    return Err(Error::new(
                        Code::PG_AUTH_UNSUPPORTED,
                        "the server asks for an authentication method the relay does not offer (GSS, SSPI, Kerberos)",
                    ))
                }
            }
        }
    }

    /// Runs one simple-protocol statement (a replication command or SQL) and
    /// returns its rows as text, reading up to ReadyForQuery even after an
    /// error so the session stays usable.
    pub(crate) async fn simple_query(
        &mut self,
        sql: &str,
        command: Command,
    ) -> Result<Vec<Vec<Option<String>>>, Error> {
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
                    while let Some(range) = ranges.next().map_err(protocol)? {
                        values.push(range.map(|r| {
                            String::from_utf8_lossy(buf.get(r).unwrap_or_default()).into_owned()
                        }));
                    }
                    rows.push(values);
                }
                Message::ErrorResponse(body) => {
                    error.get_or_insert(refusal(server_error(&body), command));
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

    /// `IDENTIFY_SYSTEM`: the server's system id, timeline and WAL position.
    pub async fn identify_system(&mut self) -> Result<Vec<Option<String>>, Error> {
        let mut rows = self.simple_query("IDENTIFY_SYSTEM", Command::Query).await?;
        rows.pop()
            .ok_or_else(|| protocol("no answer to IDENTIFY_SYSTEM"))
    }

    /// `START_REPLICATION` of a logical slot with pgoutput v1, waiting for
    /// CopyBoth. A refusal ends the session (the server sends the error
    /// instead of CopyBoth), so nothing is left to read.
    pub async fn start_replication(&mut self, start: &StartReplication<'_>) -> Result<(), Error> {
        let slot = start.slot;
        let command = format!(
            "START_REPLICATION SLOT {} LOGICAL {} (\"proto_version\" '1', \"publication_names\" {}{}{})",
            crate::quote::ident(slot),
            start.from,
            crate::quote::literal(&crate::quote::ident(start.publication)),
            match start.messages {
                Messages::Included => ", \"messages\" 'true'",
                Messages::Left => "",
            },
            match start.values {
                Values::Binary => ", \"binary\" 'true'",
                Values::Text => "",
            }
        );
        let msg = encode(|b| frontend::query(&command, b))?;
        self.send(msg).await?;
        loop {
            match self.framed.next().await {
                Some(Ok(Backend::CopyBothResponse)) => return Ok(()),
                Some(Ok(Backend::Message(Message::ErrorResponse(body)))) => {
                    return Err(refusal(server_error(&body), Command::StartReplication)
                        .context(format!("START_REPLICATION of slot {slot}")));
                }
                Some(Ok(Backend::Message(
                    Message::NoticeResponse(_) | Message::ParameterStatus(_),
                ))) => {}
                Some(Ok(Backend::Message(_))) => {
                    return Err(protocol("unexpected reply to START_REPLICATION"))
                }
                Some(Err(e)) => return Err(lost(e)),
                None => {
                    return Err(Error::new(
                        Code::PG_CONNECTION_LOST,
                        "the server closed the connection",
                    ))
                }
            }
        }
    }

    /// Sends a CopyData message (standby status update).
    pub(crate) async fn send_copy_data(&mut self, payload: &[u8]) -> Result<(), Error> {
        let mut buf = BytesMut::with_capacity(payload.len() + 5);
        buf.extend_from_slice(b"d");
        buf.extend_from_slice(&((payload.len() + 4) as u32).to_be_bytes());
        buf.extend_from_slice(payload);
        self.send(buf.freeze()).await
    }

    /// Ends the session politely (CopyDone, Terminate).
    pub async fn close(mut self) {
        let mut buf = BytesMut::new();
        frontend::copy_done(&mut buf);
        frontend::terminate(&mut buf);
        let _ = self.framed.send(buf.freeze()).await;
        let _ = self.framed.close().await;
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;
    use std::time::Duration;

    use crate::config::SslMode;
    use tokio::net::TcpStream;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::error::policy::{self, Directive};

    fn options(port: u16, sslmode: SslMode, sslrootcert: Option<PathBuf>) -> ConnectOptions {
        ConnectOptions {
            host: "localhost".into(),
            port,
            dbname: "d".into(),
            user: "u".into(),
            password: None,
            sslmode,
            sslrootcert,
            application_name: "t".into(),
            connect_timeout: Duration::from_secs(5),
            user_timeout: Duration::from_secs(30),
            more_hosts: Vec::new(),
        }
    }

    /// A server that accepts TLS (answers the SSLRequest with `S`), then
    /// does `then` with the socket.
    async fn server<F, Fut>(then: F) -> u16
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 8];
            socket.read_exact(&mut request).await.unwrap();
            socket.write_all(b"S").await.unwrap();
            then(socket).await;
        });
        port
    }

    #[tokio::test]
    async fn a_socket_reset_in_the_tls_handshake_is_transient() {
        // A server restarting: the socket closes after `S`, mid-handshake.
        let port = server(|mut socket| async move {
            let mut hello = [0u8; 16];
            let _ = socket.read(&mut hello).await;
            drop(socket);
        })
        .await;
        let Err(e) = ReplicationConnection::connect(&options(port, SslMode::Require, None)).await
        else {
            panic!("the handshake cannot succeed");
        };
        assert_eq!(e.code(), Code::PG_CONNECT_FAILED, "{e}");
        assert!(matches!(e.cause(), Some(Cause::Io(_))), "{e:?}");
        assert_eq!(policy::directive(&e), Directive::Retry);
    }

    #[tokio::test]
    async fn a_certificate_rustls_refuses_needs_an_operator() {
        let server_cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let other_ca = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let dir = std::env::temp_dir().join(format!("outbox-cdc-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("other-ca.pem");
        std::fs::write(&ca, other_ca.cert.pem()).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![server_cert.cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(server_cert.key_pair.serialize_der().into()),
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let port = server(move |socket| async move {
            let _ = acceptor.accept(socket).await;
        })
        .await;
        let opts = options(port, SslMode::VerifyFull, Some(ca));
        let Err(e) = ReplicationConnection::connect(&opts).await else {
            panic!("a certificate from another CA must be refused");
        };
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(e.code(), Code::PG_TLS_FAILED, "{e}");
        assert!(
            matches!(e.cause(), Some(Cause::Tls(r)) if r.starts_with("InvalidCertificate")),
            "{e:?}"
        );
        assert_eq!(policy::directive(&e), Directive::Stop);
    }
}
