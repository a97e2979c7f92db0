//! Kafka Connect's REST API, as far as moving a connector's position needs
//! it: its state, and its offsets (KIP-875, Kafka 3.6+), which Connect
//! alters only while the connector is STOPPED.

use std::time::Duration;

use serde_json::Value;

use crate::error::{Code, Error};

const TIMEOUT: Duration = Duration::from_secs(30);

/// One Connect cluster, by the URL of any of its workers.
pub struct Connect {
    base: reqwest::Url,
    http: reqwest::Client,
}

fn failed(what: impl std::fmt::Display) -> Error {
    Error::new(Code::CONNECT_REST_FAILED, what.to_string())
}

impl Connect {
    /// `http://host:8083`; user and password in the URL go as basic
    /// authentication and never into a message.
    pub fn new(url: &str) -> Result<Connect, Error> {
        let base = reqwest::Url::parse(url)
            .map_err(|e| failed(format!("`--connect {}`: {e}", redact_text(url))))?;
        if base.scheme() != "http" {
            return Err(failed(format!(
                "`--connect`: the {} scheme is not supported; give the worker's http:// address \
                 (through a port-forward or a proxy for a TLS-only listener)",
                base.scheme()
            )));
        }
        let http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .build()
            .map_err(|e| failed(format!("an HTTP client: {e}")))?;
        Ok(Connect { base, http })
    }

    /// The worker's address without user or password, for messages.
    pub fn shown(&self) -> String {
        let mut u = self.base.clone();
        let _ = u.set_username("");
        let _ = u.set_password(None);
        u.to_string().trim_end_matches('/').to_string()
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
        let mut request = request.header("Accept", "application/json");
        if !self.base.username().is_empty() {
            request = request.basic_auth(self.base.username(), self.base.password());
        }
        let response = request
            .send()
            .await
            .map_err(|e| failed(format!("{what} at {}: {}", self.shown(), e.without_url())))?;
        let status = response.status();
        let body = response
            .text()
            .await
            .map_err(|e| failed(format!("{what}: {}", e.without_url())))?;
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

/// A URL as text with any `user:password@` removed.
fn redact_text(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}{}", &url[..s + 3], &url[at + 1..]),
        _ => url.to_string(),
    }
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
        let c = Connect::new("http://ops:s3cret@connect:8083/").unwrap();
        assert_eq!(c.shown(), "http://connect:8083");
        assert_eq!(
            c.url("outbox connector", "offsets").unwrap().as_str(),
            "http://ops:s3cret@connect:8083/connectors/outbox%20connector/offsets"
        );
        let e = Connect::new("https://ops:s3cret@connect:8443")
            .err()
            .unwrap();
        assert_eq!(e.code(), Code::CONNECT_REST_FAILED);
        assert!(!e.to_string().contains("s3cret"), "{e}");
        let e = Connect::new("ops:s3cret@connect:8083").err().unwrap();
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }
}
