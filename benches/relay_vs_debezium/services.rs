//! The local services, from `scripts/services.sh env`: the test harness's
//! PostgreSQL and Kafka, and the bench's own use of Kafka Connect and the
//! services script.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};
use tokio_postgres::Client;

/// The test harness's services, with what only the bench uses.
pub(crate) struct Services {
    /// PostgreSQL and Kafka, as the integration tests find them.
    pub(crate) base: outbox_cdc_testkit::Services,
    /// Kafka Connect's REST API.
    pub(crate) connect_url: String,
    /// `scripts/services.sh`, for Connect and the services' state.
    pub(crate) script: PathBuf,
    pub(crate) state: PathBuf,
    /// The broker's bootstrap address.
    pub(crate) kafka: String,
    /// The replication factor of the topics the bench creates: 1 on the
    /// single broker, 3 on the cluster (whose brokers default to
    /// `min.insync.replicas=2`).
    pub(crate) replication: i32,
}

impl Services {
    pub(crate) fn from_env() -> Result<Services> {
        let var = |n: &str| {
            std::env::var(n)
                .with_context(|| format!("{n} is not set: eval \"$(scripts/services.sh env)\""))
        };
        let base = outbox_cdc_testkit::services()
            .context("the services: eval \"$(scripts/services.sh env)\"")?;
        Ok(Services {
            kafka: base.kafka_bootstrap.clone(),
            base,
            connect_url: var("OUTBOX_TEST_CONNECT_URL")?,
            script: var("OUTBOX_TEST_SERVICES")?.into(),
            state: var("OUTBOX_TEST_STATE_DIR")?.into(),
            replication: 1,
        })
    }

    /// The same services with the three-broker cluster as Kafka
    /// (`scripts/services.sh start-cluster`).
    pub(crate) fn on_cluster(&self) -> Result<Services> {
        let bootstrap = std::env::var("OUTBOX_TEST_KAFKA_CLUSTER_BOOTSTRAP").context(
            "OUTBOX_TEST_KAFKA_CLUSTER_BOOTSTRAP is not set: eval \"$(scripts/services.sh env)\"",
        )?;
        let mut base = outbox_cdc_testkit::services()
            .context("the services: eval \"$(scripts/services.sh env)\"")?;
        base.kafka_bootstrap = bootstrap.clone();
        Ok(Services {
            base,
            connect_url: self.connect_url.clone(),
            script: self.script.clone(),
            state: self.state.clone(),
            kafka: bootstrap,
            replication: 3,
        })
    }

    pub(crate) async fn connect(&self, db: &str) -> Result<Client> {
        Ok(self.base.connect(db).await)
    }

    pub(crate) fn services(&self, command: &str) -> Result<()> {
        self.services_with(command, &[])
    }

    pub(crate) fn services_with(&self, command: &str, env: &[(&str, &str)]) -> Result<()> {
        let out = Command::new(&self.script)
            .arg(command)
            .envs(env.iter().copied())
            .output()?;
        if !out.status.success() {
            bail!(
                "services.sh {command}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    pub(crate) fn connect_pid(&self) -> Result<u32> {
        let text = std::fs::read_to_string(self.state.join("connect.pid"))?;
        Ok(text.trim().parse()?)
    }

    /// Kafka Connect's REST API through curl: (status, body).
    pub(crate) fn rest(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Result<(u16, String)> {
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "-X", method, "-H", "Content-Type: application/json"]);
        cmd.args([
            "-w",
            "\n%{http_code}",
            &format!("{}{path}", self.connect_url),
        ]);
        if let Some(b) = body {
            cmd.args(["--data-binary", b]);
        }
        let out = cmd.output()?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        Ok((code.trim().parse().unwrap_or(0), body.to_string()))
    }
}
