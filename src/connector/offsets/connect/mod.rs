//! Kafka Connect's REST API, as far as moving a connector's position needs
//! it: its state, and its offsets (KIP-875, Kafka 3.6+), which Connect
//! alters only while the connector is STOPPED. Over HTTP or HTTPS
//! ([`endpoint`]: the TLS and the credentials).

mod endpoint;

use std::time::Duration;

use serde_json::Value;

use crate::error::{Cause, Code, Error};
use crate::secret::Secret;

pub use endpoint::{Auth, ClientCert, Endpoint};

const TIMEOUT: Duration = Duration::from_secs(30);

/// One Connect cluster, by the URL of any of its workers.
pub struct Connect {
    /// The address without `user:password@`.
    base: reqwest::Url,
    /// The credentials, from the options or the URL's user and password.
    auth: Auth,
    http: reqwest::Client,
}

fn failed(what: impl std::fmt::Display) -> Error {
    Error::new(Code::CONNECT_REST_FAILED, what.to_string())
}

impl Connect {
    /// A client for `endpoint`: HTTP, or HTTPS verified against the
    /// system's trust store or `endpoint.ca`, with a client certificate
    /// when given. User and password in the URL go as basic
    /// authentication; no credential ever goes into a message.
    pub fn new(endpoint: &Endpoint) -> Result<Connect, Error> {
        let mut base = reqwest::Url::parse(&endpoint.url).map_err(|e| {
            failed(format!(
                "`--connect {}`: {e}",
                endpoint::redact_text(&endpoint.url)
            ))
        })?;
        let https = match base.scheme() {
            "https" => true,
            "http" => false,
            other => {
                return Err(failed(format!(
                    "`--connect {}`: the {other} scheme is not supported; give the worker's http:// or https:// address",
                    endpoint.shown()
                )))
            }
        };
        if !https && (endpoint.ca.is_some() || endpoint.client.is_some()) {
            return Err(Error::new(
                Code::ARGUMENT_INVALID,
                format!(
                    "`--connect-ca`, `--connect-cert` and `--connect-key` are for an https:// address, not {}",
                    endpoint.shown()
                ),
            ));
        }
        let auth = auth_of(&base, &endpoint.auth)?;
        let _ = base.set_username("");
        let _ = base.set_password(None);
        // reqwest's rustls takes the process's provider, and builds its
        // configuration for every client: the relay's TLS is ring's
        // everywhere. Already installed is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder().timeout(TIMEOUT);
        if https {
            if let Some(ca) = &endpoint.ca {
                builder = builder.tls_certs_only(endpoint::ca_certificates(ca)?);
            }
            if let Some(client) = &endpoint.client {
                builder = builder.identity(endpoint::identity(client)?);
            }
        }
        let http = builder.build().map_err(|e| {
            endpoint::tls_failed(format!(
                "an HTTPS client for {}: {}",
                endpoint.shown(),
                crate::error::chain(&e)
            ))
        })?;
        Ok(Connect { base, auth, http })
    }

    /// The worker's address without user or password, for messages.
    pub fn shown(&self) -> String {
        self.base.to_string().trim_end_matches('/').to_string()
    }

    /// A request that was not answered: `CONNECT_TLS_FAILED` with rustls's
    /// refusal when the handshake failed, else `CONNECT_REST_FAILED`.
    fn unanswered(&self, what: &str, e: reqwest::Error) -> Error {
        let e = e.without_url();
        let detail = format!("{what} at {}: {}", self.shown(), crate::error::chain(&e));
        match crate::pg::tls::refusal(&e) {
            Some(r) => endpoint::tls_failed(detail)
                .caused_by(Cause::Tls(format!("{r:?}")))
                .hint(endpoint::hint_for(r)),
            None => failed(detail),
        }
    }

    fn url(&self, connector: &str, tail: &str) -> Result<reqwest::Url, Error> {
        let mut u = self.base.clone();
        u.path_segments_mut()
            .map_err(|()| failed("`--connect` is not a base URL"))?
            .pop_if_empty()
            .extend(["connectors", connector, tail]);
        Ok(u)
    }

    async fn send(&self, request: reqwest::RequestBuilder, what: &str) -> Result<Value, Error> {
        self.send_unless_missing(request, what)
            .await?
            .ok_or_else(|| {
                failed(format!(
                    "{what} at {}: HTTP 404: no such resource",
                    self.shown()
                ))
            })
    }

    /// [`Connect::send`], with `None` for a 404 (a connector this worker
    /// does not run).
    async fn send_unless_missing(
        &self,
        request: reqwest::RequestBuilder,
        what: &str,
    ) -> Result<Option<Value>, Error> {
        let request = request.header("Accept", "application/json");
        let request = match &self.auth {
            Auth::None => request,
            Auth::Basic { user, password } => {
                request.basic_auth(user, password.as_ref().map(Secret::expose))
            }
            Auth::Bearer(token) => request.bearer_auth(token.expose()),
        };
        let response = request.send().await.map_err(|e| self.unanswered(what, e))?;
        let status = response.status();
        let body = response
            .text()
            .await
            .map_err(|e| self.unanswered(what, e))?;
        let json: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        if status == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            // Connect's own error body: {"error_code": 404, "message": "..."}.
            let message = json["message"].as_str().unwrap_or(body.trim());
            return Err(failed(format!(
                "{what} at {}: HTTP {}: {message}",
                self.shown(),
                status.as_u16()
            )));
        }
        Ok(Some(json))
    }

    /// The connector's state: RUNNING, PAUSED, STOPPED, FAILED, ...
    pub async fn state(&self, connector: &str) -> Result<String, Error> {
        let what = format!("reading connector {connector}'s status");
        let status = self
            .send(self.http.get(self.url(connector, "status")?), &what)
            .await?;
        status["connector"]["state"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| failed(format!("{what}: no state in {status}")))
    }

    /// The version a running connector's tasks run (`GET
    /// /connectors/<name>/status`, whose states carry it from Kafka 4.1,
    /// KIP-891); `None` when the worker does not say it or does not run
    /// the connector.
    pub async fn running_version(&self, connector: &str) -> Result<Option<String>, Error> {
        let what = format!("reading connector {connector}'s status");
        let Some(status) = self
            .send_unless_missing(self.http.get(self.url(connector, "status")?), &what)
            .await?
        else {
            return Ok(None);
        };
        Ok(status_version(&status))
    }

    /// The version of the connector plugin `class` as the worker runs it
    /// (`GET /connector-plugins`: Debezium's release, e.g. `3.6.1.Final`).
    pub async fn plugin_version(&self, class: &str) -> Result<Option<String>, Error> {
        let mut u = self.base.clone();
        u.path_segments_mut()
            .map_err(|()| failed("`--connect` is not a base URL"))?
            .pop_if_empty()
            .push("connector-plugins");
        let plugins = self
            .send(self.http.get(u), "reading the worker's connector plugins")
            .await?;
        Ok(plugins
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["class"].as_str() == Some(class))
            .and_then(|p| p["version"].as_str())
            .map(str::to_string))
    }

    /// The offset stored for `partition`, if any.
    pub async fn offset(&self, connector: &str, partition: &Value) -> Result<Option<Value>, Error> {
        let what = format!("reading connector {connector}'s offsets");
        let all = self
            .send(self.http.get(self.url(connector, "offsets")?), &what)
            .await?;
        Ok(all["offsets"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|o| &o["partition"] == partition)
            .map(|o| o["offset"].clone()))
    }

    /// Stores `offset` for `partition`; Connect refuses unless the
    /// connector is STOPPED.
    pub async fn alter_offset(
        &self,
        connector: &str,
        partition: &Value,
        offset: &Value,
    ) -> Result<(), Error> {
        let body = serde_json::json!({"offsets": [{"partition": partition, "offset": offset}]});
        let request = self
            .http
            .patch(self.url(connector, "offsets")?)
            .header("Content-Type", "application/json")
            .body(body.to_string());
        self.send(request, &format!("altering connector {connector}'s offset"))
            .await
            .map(|_| ())
    }
}

/// The credentials: the options', or the URL's user and password (not
/// both).
fn auth_of(url: &reqwest::Url, given: &Auth) -> Result<Auth, Error> {
    if url.username().is_empty() {
        return Ok(given.clone());
    }
    if !matches!(given, Auth::None) {
        return Err(Error::new(
            Code::ARGUMENT_INVALID,
            "`--connect` names a user in its URL and `--connect-user` or `--connect-token` is given too; keep one",
        ));
    }
    Ok(Auth::Basic {
        user: url.username().to_string(),
        password: url.password().map(Secret::new),
    })
}

/// A status's version: a task's, else the connector's.
fn status_version(status: &Value) -> Option<String> {
    let tasks = status["tasks"].as_array().into_iter().flatten();
    tasks
        .chain(std::iter::once(&status["connector"]))
        .find_map(|state| state["version"].as_str().filter(|v| !v.is_empty()))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_says_the_version_its_tasks_run() {
        let status = serde_json::json!({
            "name": "outbox",
            "connector": {"state": "RUNNING", "worker_id": "w:8083", "version": "3.6.0.Final"},
            "tasks": [{"id": 0, "state": "RUNNING", "worker_id": "w:8083", "version": "3.6.1.Final"}],
            "type": "source"
        });
        assert_eq!(status_version(&status).as_deref(), Some("3.6.1.Final"));
        let before_kip_891 = serde_json::json!({
            "name": "outbox",
            "connector": {"state": "RUNNING", "worker_id": "w:8083"},
            "tasks": [{"id": 0, "state": "RUNNING", "worker_id": "w:8083"}]
        });
        assert_eq!(status_version(&before_kip_891), None);
        let no_task = serde_json::json!({
            "connector": {"state": "RUNNING", "worker_id": "w:8083", "version": "3.6.1.Final"},
            "tasks": []
        });
        assert_eq!(status_version(&no_task).as_deref(), Some("3.6.1.Final"));
    }

    #[test]
    fn urls_name_the_connector_s_resource_and_never_show_a_password() {
        let c = Connect::new(&Endpoint::new("http://ops:s3cret@connect:8083/")).unwrap();
        assert_eq!(c.shown(), "http://connect:8083");
        assert_eq!(
            c.url("outbox connector", "offsets").unwrap().as_str(),
            "http://connect:8083/connectors/outbox%20connector/offsets"
        );
        assert!(
            matches!(&c.auth, Auth::Basic { user, password: Some(p) } if user == "ops" && p.expose() == "s3cret")
        );
        let c = Connect::new(&Endpoint::new("https://ops:s3cret@connect:8443")).unwrap();
        assert_eq!(c.shown(), "https://connect:8443");
        for url in [
            "ftp://ops:s3cret@connect:8083",
            "ops:s3cret@connect:8083",
            "http://ops:s3cret@connect:port",
        ] {
            let endpoint = Endpoint::new(url);
            assert!(!endpoint.shown().contains("s3cret"), "{url}");
            let e = Connect::new(&endpoint).err().unwrap();
            assert_eq!(e.code(), Code::CONNECT_REST_FAILED, "{url}");
            assert!(!e.to_string().contains("s3cret"), "{e}");
        }
    }

    #[test]
    fn tls_options_need_https_and_one_source_of_credentials() {
        let mut endpoint = Endpoint::new("http://connect:8083");
        endpoint.ca = Some("/ca.crt".into());
        let e = Connect::new(&endpoint).err().unwrap();
        assert_eq!(e.code(), Code::ARGUMENT_INVALID);
        let mut endpoint = Endpoint::new("https://ops:s3cret@connect:8443");
        endpoint.auth = Auth::Bearer(Secret::new("t0ken"));
        let e = Connect::new(&endpoint).err().unwrap();
        assert_eq!(e.code(), Code::ARGUMENT_INVALID);
        assert!(
            !e.to_string().contains("s3cret") && !e.to_string().contains("t0ken"),
            "{e}"
        );
    }

    #[test]
    fn unreadable_tls_files_are_named_with_their_code() {
        let dir = std::env::temp_dir().join(format!("connect-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("empty.pem"), "not a certificate\n").unwrap();
        let mut endpoint = Endpoint::new("https://connect:8443");
        endpoint.ca = Some(dir.join("empty.pem"));
        let e = Connect::new(&endpoint).err().unwrap();
        assert_eq!(e.code(), Code::CONNECT_TLS_FAILED);
        assert!(e.to_string().contains("no PEM certificate"), "{e}");
        let mut endpoint = Endpoint::new("https://connect:8443");
        endpoint.client = Some(ClientCert {
            cert: dir.join("missing.crt"),
            key: dir.join("missing.key"),
        });
        let e = Connect::new(&endpoint).err().unwrap();
        assert_eq!(e.code(), Code::CONNECT_TLS_FAILED);
        assert!(e.to_string().contains("missing.crt"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A one-request HTTP server: the request's head, and Connect's answer.
    async fn answer_once(
        status: &'static str,
        body: &'static str,
    ) -> (String, tokio::task::JoinHandle<String>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let served = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = socket.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                head.extend_from_slice(&buf[..n]);
            }
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            socket.write_all(response.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&head).to_lowercase()
        });
        (url, served)
    }

    #[tokio::test]
    async fn basic_and_bearer_credentials_are_sent_and_never_shown() {
        let status = r#"{"connector": {"state": "STOPPED"}, "tasks": []}"#;
        let (url, served) = answer_once("200 OK", status).await;
        let mut endpoint = Endpoint::new(url);
        endpoint.auth = Auth::Basic {
            user: "ops".into(),
            password: Some(Secret::new("s3cret")),
        };
        let c = Connect::new(&endpoint).unwrap();
        assert_eq!(c.state("outbox").await.unwrap(), "STOPPED");
        // base64("ops:s3cret")
        assert!(served
            .await
            .unwrap()
            .contains("authorization: basic b3bzonmzy3jlda==\r\n"));

        let refused = r#"{"error_code": 401, "message": "Unauthorized: bad token"}"#;
        let (url, served) = answer_once("401 Unauthorized", refused).await;
        let mut endpoint = Endpoint::new(url);
        endpoint.auth = Auth::Bearer(Secret::new("t0ken"));
        let e = Connect::new(&endpoint)
            .unwrap()
            .state("outbox")
            .await
            .unwrap_err();
        assert!(served
            .await
            .unwrap()
            .contains("authorization: bearer t0ken\r\n"));
        assert_eq!(e.code(), Code::CONNECT_REST_FAILED);
        assert!(
            e.to_string().contains("HTTP 401: Unauthorized: bad token"),
            "{e}"
        );
        assert!(!e.to_string().contains("t0ken"), "{e}");
    }
}
