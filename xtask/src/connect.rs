//! A single Kafka Connect worker (distributed mode, so the REST API is the
//! one teams deploy against) with Debezium's PostgreSQL connector on its
//! plugin path.

use std::process::Command;

use anyhow::{bail, Result};

use crate::config::Config;
use crate::jvm::kafka_classpath;
use crate::kafka::log4j2;
use crate::process::{log, start_detached, tail, Pids};
use crate::wait::{wait, Patience, Probe, WaitError};

/// The worker's configuration: its REST API over HTTP and, for the
/// takeover's TLS tests, over HTTPS with a client certificate required
/// (the workers talk over HTTP); `exactly_once` is `CONNECT_EXACTLY_ONCE=1`:
/// Kafka Connect's exactly-once source support (KIP-618), for the
/// benchmark's Debezium exactly-once engine.
pub fn worker_properties(cfg: &Config, exactly_once: Option<&str>) -> String {
    let (k, c, h) = (cfg.kafka_port, cfg.connect_port, cfg.connect_https_port);
    let plugins = cfg.state.join("connect-plugins");
    let tls = |f: &str| cfg.tls(f).display().to_string();
    let (keystore, truststore) = (tls("connect-keystore.p12"), tls("connect-truststore.p12"));
    let password = crate::tls::STORE_PASSWORD;
    let mut text = format!(
        "bootstrap.servers=127.0.0.1:{k}
group.id=outbox-cdc-connect-{c}
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
config.storage.topic=__connect-configs-{c}
offset.storage.topic=__connect-offsets-{c}
status.storage.topic=__connect-status-{c}
config.storage.replication.factor=1
offset.storage.replication.factor=1
status.storage.replication.factor=1
offset.storage.partitions=1
status.storage.partitions=1
offset.flush.interval.ms=1000
listeners=http://127.0.0.1:{c},https://127.0.0.1:{h}
rest.advertised.listener=http
rest.advertised.host.name=127.0.0.1
listeners.https.ssl.keystore.type=PKCS12
listeners.https.ssl.keystore.location={keystore}
listeners.https.ssl.keystore.password={password}
listeners.https.ssl.truststore.type=PKCS12
listeners.https.ssl.truststore.location={truststore}
listeners.https.ssl.truststore.password={password}
listeners.https.ssl.client.auth=required
plugin.path={}
config.providers=env,file
config.providers.env.class=org.apache.kafka.common.config.provider.EnvVarConfigProvider
config.providers.file.class=org.apache.kafka.common.config.provider.FileConfigProvider
",
        plugins.display()
    );
    if exactly_once == Some("1") {
        text.push_str("exactly.once.source.support=enabled\n");
    }
    text
}

/// The broker's logging, to connect.log, with Connect's and Debezium's
/// messages.
pub fn worker_log4j2(cfg: &Config) -> String {
    let mut text = log4j2(&cfg.state.join("connect.log"));
    text.push_str(
        "logger.connect.name = org.apache.kafka.connect
logger.connect.level = info
logger.debezium.name = io.debezium
logger.debezium.level = info
",
    );
    text
}

pub fn start(cfg: &Config) -> Result<()> {
    let pids = Pids { state: &cfg.state };
    if pids.live("connect").is_some() {
        log(&format!(
            "Kafka Connect already running on 127.0.0.1:{}",
            cfg.connect_port
        ));
        return Ok(());
    }
    crate::tls::make_connect_certificates(cfg)?;
    let plugins = cfg.state.join("connect-plugins");
    std::fs::create_dir_all(&plugins)?;
    let link = plugins.join("debezium-connector-postgres");
    let _ = std::fs::remove_file(&link).or_else(|_| std::fs::remove_dir_all(&link));
    std::os::unix::fs::symlink(cfg.jvm_cache.join("debezium"), &link)?;
    let conf = cfg.state.join("connect.properties");
    std::fs::write(
        &conf,
        worker_properties(cfg, cfg.vars.get("CONNECT_EXACTLY_ONCE")),
    )?;
    let log_conf = cfg.state.join("connect-log4j2.properties");
    std::fs::write(&log_conf, worker_log4j2(cfg))?;
    log(&format!(
        "starting Kafka Connect on 127.0.0.1:{} (HTTPS on {})",
        cfg.connect_port, cfg.connect_https_port
    ));
    let log_file = cfg.state.join("connect.log");
    let out = cfg.state.join("connect.out");
    std::fs::write(&log_file, "")?;
    start_detached(
        Command::new("java")
            // The worker resolves ${env:...} from its own environment: the
            // test password.
            .env("OUTBOX_TEST_PG_PASSWORD", &cfg.pg_password)
            .env("OUTBOX_CDC_POSTGRES_PASSWORD", &cfg.pg_password)
            .args([
                "-Xms256m",
                "-Xmx1g",
                "-XX:+UseG1GC",
                "-Djava.awt.headless=true",
            ])
            .arg(format!("-Dlog4j2.configurationFile={}", log_conf.display()))
            .args(["-cp", &kafka_classpath(cfg)])
            .arg("org.apache.kafka.connect.cli.ConnectDistributed")
            .arg(&conf),
        &out,
        &pids,
        "connect",
    )?;
    let addr = format!("127.0.0.1:{}", cfg.connect_port);
    let ready = wait(Patience::secs(180, 1000), || {
        let plugins = crate::http::get(&addr, "/connector-plugins");
        if plugins.is_ok_and(|r| r.ok() && r.body.contains("PostgresConnector")) {
            Probe::Ready
        } else if pids.live("connect").is_none() {
            Probe::Dead("Kafka Connect exited during start-up".into())
        } else {
            Probe::NotYet
        }
    });
    match ready {
        Ok(()) => Ok(()),
        Err(WaitError::Dead(why)) => {
            tail(&out, 40);
            tail(&log_file, 40);
            bail!("{why}")
        }
        Err(WaitError::TimedOut(_)) => {
            tail(&log_file, 40);
            bail!("Kafka Connect did not start within 180 s")
        }
    }
}

pub fn stop(cfg: &Config) {
    Pids { state: &cfg.state }.stop("connect", "Kafka Connect");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Vars;
    use std::path::Path;

    fn cfg() -> Config {
        let vars = Vars::from_pairs(&[
            ("OUTBOX_TEST_KAFKA_PORT", "39092"),
            ("OUTBOX_TEST_CONNECT_PORT", "38083"),
            ("OUTBOX_TEST_STATE_DIR", "/s"),
        ]);
        Config::new(&vars, Path::new("/repo"), 0).unwrap()
    }

    #[test]
    fn the_worker_names_its_topics_and_group_after_its_port() {
        let p = worker_properties(&cfg(), None);
        assert!(p.starts_with("bootstrap.servers=127.0.0.1:39092\n"), "{p}");
        assert!(p.contains("\ngroup.id=outbox-cdc-connect-38083\n"));
        assert!(p.contains("\noffset.storage.topic=__connect-offsets-38083\n"));
        assert!(p.contains("\nlisteners=http://127.0.0.1:38083,https://127.0.0.1:38443\n"));
        assert!(p.contains("\nrest.advertised.listener=http\n"));
        assert!(p.contains("\nlisteners.https.ssl.keystore.location=/s/tls/connect-keystore.p12\n"));
        assert!(p.contains("\nlisteners.https.ssl.client.auth=required\n"));
        assert!(p.contains("\nplugin.path=/s/connect-plugins\n"));
        assert!(!p.contains("exactly.once"));
    }

    #[test]
    fn exactly_once_support_only_when_asked_for() {
        let p = worker_properties(&cfg(), Some("1"));
        assert!(p.ends_with("exactly.once.source.support=enabled\n"));
        assert!(!worker_properties(&cfg(), Some("0")).contains("exactly.once"));
    }

    #[test]
    fn the_worker_logs_to_its_own_file() {
        let text = worker_log4j2(&cfg());
        assert!(text.contains("fileName = /s/connect.log\n"));
        assert!(text.ends_with("logger.debezium.level = info\n"));
    }
}
