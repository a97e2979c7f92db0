//! The single Kafka broker (KRaft, its own controller) with three
//! listeners: PLAINTEXT, where the anonymous principal is a super user, so
//! the plain tests see an open broker; SASL_SSL (TLS with the test CA and
//! SCRAM-SHA-512) under ACLs, for the relay's principal; and PROXIED,
//! which advertises the Toxiproxy proxy in front of it, so a client that
//! bootstraps through the proxy keeps every broker connection on it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::config::Config;
use crate::jvm::kafka_classpath;
use crate::process::{log, output, run, start_detached, tail, Pids};
use crate::tls::make_test_certificates;
use crate::wait::{wait, Patience, Probe, WaitError};

/// The broker's configuration.
pub fn broker_properties(cfg: &Config) -> String {
    let (k, c, s, p, x) = (
        cfg.kafka_port,
        cfg.kafka_controller_port,
        cfg.kafka_secure_port,
        cfg.kafka_proxied_port,
        cfg.kafka_proxy_port,
    );
    let state = cfg.state.display();
    let auto_create = &cfg.kafka_auto_create;
    format!(
        "process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{c}
listeners=PLAINTEXT://127.0.0.1:{k},CONTROLLER://127.0.0.1:{c},SASL_SSL://127.0.0.1:{s},PROXIED://127.0.0.1:{p}
advertised.listeners=PLAINTEXT://127.0.0.1:{k},SASL_SSL://localhost:{s},PROXIED://127.0.0.1:{x}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,PROXIED:PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location={state}/tls/kafka-keystore.pem
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
log.dirs={state}/kafka-logs
num.partitions=6
auto.create.topics.enable={auto_create}
offsets.topic.replication.factor=1
offsets.topic.num.partitions=6
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.flush.interval.messages=9223372036854775807
# Tests publish records stamped years back (a timestamp column decides
# them): time retention would delete them at its next check, every five
# minutes, before a test reads them.
log.retention.ms=-1
"
    )
}

/// Log4j 2's configuration for a Kafka process logging to `log_file`.
pub fn log4j2(log_file: &Path) -> String {
    format!(
        "status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = warn
logger.kafka-server.name = kafka.server.KafkaRaftServer
logger.kafka-server.level = info
logger.apache.name = org.apache.kafka
logger.apache.level = warn
",
        log_file.display()
    )
}

pub fn log4j2_file(cfg: &Config) -> PathBuf {
    cfg.state.join("kafka-log4j2.properties")
}

/// A Kafka process (a broker or a controller) to start: its files and heap.
pub struct Node<'a> {
    pub cfg: &'a Config,
    /// The pid file's name.
    pub name: &'a str,
    pub label: &'a str,
    pub properties: &'a Path,
    pub log4j2: &'a Path,
    /// The log Kafka writes (where "Kafka Server started" appears).
    pub log: &'a Path,
    /// Its standard output and error.
    pub out: &'a Path,
    /// -Xms and -Xmx.
    pub heap: (&'a str, &'a str),
}

/// A new cluster id (`StorageTool random-uuid`).
pub fn random_cluster_id(cfg: &Config) -> Result<String> {
    let out = output(
        Command::new("java")
            .args([
                "-cp",
                &kafka_classpath(cfg),
                "kafka.tools.StorageTool",
                "random-uuid",
            ])
            .stderr(Stdio::null()),
        "kafka.tools.StorageTool random-uuid",
    )?;
    Ok(out.lines().last().unwrap_or_default().trim().to_string())
}

/// Formats a node's storage with `cluster_id`; `format_log` keeps the output.
pub fn format_storage(node: &Node, cluster_id: &str, format_log: &Path) -> Result<()> {
    crate::process::run_logged(
        Command::new("java")
            .arg(format!(
                "-Dlog4j2.configurationFile={}",
                node.log4j2.display()
            ))
            .args([
                "-cp",
                &kafka_classpath(node.cfg),
                "kafka.tools.StorageTool",
                "format",
            ])
            .args(["-t", cluster_id, "-c"])
            .arg(node.properties),
        format_log,
        &format!("formatting the storage of {} failed", node.label),
    )
}

/// Starts the node detached and waits up to 120 s until it serves.
pub fn launch(node: &Node) -> Result<()> {
    let pids = Pids {
        state: &node.cfg.state,
    };
    std::fs::write(node.log, "")?;
    // The broker outlives the command (and test process) that started it.
    start_detached(
        Command::new("java")
            .args([
                &format!("-Xms{}", node.heap.0),
                &format!("-Xmx{}", node.heap.1),
            ])
            .args(["-XX:+UseG1GC", "-Djava.awt.headless=true"])
            .arg(format!(
                "-Dlog4j2.configurationFile={}",
                node.log4j2.display()
            ))
            .args(["-cp", &kafka_classpath(node.cfg), "kafka.Kafka"])
            .arg(node.properties),
        node.out,
        &pids,
        node.name,
    )?;
    let ready = wait(Patience::secs(120, 500), || {
        if crate::process::file_contains(node.log, "Kafka Server started") {
            Probe::Ready
        } else if pids.live(node.name).is_none() {
            Probe::Dead(format!("{} exited during start-up", node.label))
        } else {
            Probe::NotYet
        }
    });
    match ready {
        Ok(()) => Ok(()),
        Err(WaitError::Dead(why)) => {
            tail(node.out, 40);
            tail(node.log, 40);
            bail!("{why}")
        }
        Err(WaitError::TimedOut(_)) => {
            tail(node.log, 40);
            bail!("{} did not start within 120 s", node.label)
        }
    }
}

pub fn start(cfg: &Config) -> Result<()> {
    let pids = Pids { state: &cfg.state };
    if pids.live("kafka").is_some() {
        log(&format!(
            "Kafka already running on 127.0.0.1:{}",
            cfg.kafka_port
        ));
        return Ok(());
    }
    std::fs::create_dir_all(&cfg.state)?;
    make_test_certificates(cfg)?;
    let conf = cfg.state.join("kafka.properties");
    std::fs::write(&conf, broker_properties(cfg))?;
    let log_file = cfg.state.join("kafka.log");
    std::fs::write(log4j2_file(cfg), log4j2(&log_file))?;
    let node = Node {
        cfg,
        name: "kafka",
        label: "Kafka",
        properties: &conf,
        log4j2: &log4j2_file(cfg),
        log: &log_file,
        out: &cfg.state.join("kafka.out"),
        heap: ("256m", "1g"),
    };
    if !cfg.state.join("kafka-logs/meta.properties").is_file() {
        log(&format!(
            "formatting the Kafka storage in {}",
            cfg.state.join("kafka-logs").display()
        ));
        let id = random_cluster_id(cfg)?;
        format_storage(&node, &id, &cfg.state.join("kafka-format.log"))?;
    }
    log(&format!("starting Kafka on 127.0.0.1:{}", cfg.kafka_port));
    launch(&node)?;
    secure(cfg)
}

pub fn stop(cfg: &Config) {
    Pids { state: &cfg.state }.stop("kafka", "Kafka");
}

/// A Kafka command-line tool `class` against `bootstrap`.
pub fn tool_at(cfg: &Config, bootstrap: &str, class: &str) -> Command {
    let mut c = Command::new("java");
    c.arg(format!(
        "-Dlog4j2.configurationFile={}",
        log4j2_file(cfg).display()
    ))
    .args([
        "-cp",
        &kafka_classpath(cfg),
        class,
        "--bootstrap-server",
        bootstrap,
    ]);
    c
}

/// A Kafka command-line tool as the super user of the plain listener.
pub fn tool(cfg: &Config, class: &str) -> Command {
    tool_at(cfg, &format!("127.0.0.1:{}", cfg.kafka_port), class)
}

fn run_appending(cmd: &mut Command, secure_log: &Path, what: &str) -> Result<()> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(secure_log)?;
    cmd.stdout(out.try_clone()?).stderr(out);
    run(cmd, what).inspect_err(|_| {
        let _ = std::fs::read_to_string(secure_log).map(|t| eprint!("{t}"));
    })
}

/// The relay's principal on the secured listener gets exactly what the user
/// guide lists: WRITE and DESCRIBE on the topic prefix, IDEMPOTENT_WRITE on
/// the cluster. Its SCRAM password is made per state directory.
fn secure(cfg: &Config) -> Result<()> {
    let pwfile = cfg.state.join("kafka-relay-password");
    if std::fs::metadata(&pwfile).map_or(true, |m| m.len() == 0) {
        let password = output(
            Command::new("openssl").args(["rand", "-hex", "16"]),
            "openssl rand",
        )?;
        std::fs::write(&pwfile, format!("{password}\n"))?;
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&pwfile, std::fs::Permissions::from_mode(0o600))?;
    let password = std::fs::read_to_string(&pwfile).context("the relay's password")?;
    let secure_log = cfg.state.join("kafka-secure.log");
    std::fs::write(&secure_log, "")?;
    let user = &cfg.kafka_relay_user;
    run_appending(
        tool(cfg, "kafka.admin.ConfigCommand")
            .args(["--alter", "--entity-type", "users", "--entity-name", user])
            .arg("--add-config")
            .arg(format!(
                "SCRAM-SHA-512=[iterations=4096,password={}]",
                password.trim_end_matches('\n')
            )),
        &secure_log,
        &format!("cannot create the SCRAM credential of {user}"),
    )?;
    let principal = format!("User:{user}");
    run_appending(
        tool(cfg, "org.apache.kafka.tools.AclCommand")
            .args(["--add", "--allow-principal", &principal])
            .args(["--operation", "Write", "--operation", "Describe"])
            .args([
                "--topic",
                &cfg.kafka_secure_prefix,
                "--resource-pattern-type",
                "prefixed",
            ]),
        &secure_log,
        "cannot grant the relay's topic ACLs",
    )?;
    run_appending(
        tool(cfg, "org.apache.kafka.tools.AclCommand")
            .args(["--add", "--allow-principal", &principal])
            .args(["--operation", "IdempotentWrite", "--cluster"]),
        &secure_log,
        "cannot grant the relay's cluster ACL",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Vars;

    fn cfg(pairs: &[(&str, &str)]) -> Config {
        Config::new(&Vars::from_pairs(pairs), Path::new("/repo"), 0).unwrap()
    }

    #[test]
    fn the_broker_listens_and_advertises_on_the_configured_ports() {
        let c = cfg(&[
            ("OUTBOX_TEST_KAFKA_PORT", "39092"),
            ("OUTBOX_TEST_KAFKA_CONTROLLER_PORT", "39093"),
            ("OUTBOX_TEST_STATE_DIR", "/s"),
            ("OUTBOX_TEST_KAFKA_AUTO_CREATE", "false"),
        ]);
        let p = broker_properties(&c);
        assert!(p.contains(
            "\nlisteners=PLAINTEXT://127.0.0.1:39092,CONTROLLER://127.0.0.1:39093,SASL_SSL://127.0.0.1:39094,PROXIED://127.0.0.1:39096\n"
        ), "{p}");
        assert!(p.contains(
            "\nadvertised.listeners=PLAINTEXT://127.0.0.1:39092,SASL_SSL://localhost:39094,PROXIED://127.0.0.1:39097\n"
        ));
        assert!(p.contains("\ncontroller.quorum.voters=1@127.0.0.1:39093\n"));
        assert!(p.contains("\nlog.dirs=/s/kafka-logs\n"));
        assert!(p.contains("keystore.location=/s/tls/kafka-keystore.pem\n"));
        assert!(p.contains("\nauto.create.topics.enable=false\n"));
        assert!(p.ends_with("log.retention.ms=-1\n"));
    }

    #[test]
    fn logging_goes_to_the_file_named() {
        let text = log4j2(Path::new("/s/connect.log"));
        assert!(text.contains("appender.file.fileName = /s/connect.log\n"));
        assert!(text.starts_with("status = warn\n"));
    }

    #[test]
    fn tools_reach_the_plain_listener() {
        let c = cfg(&[
            ("OUTBOX_TEST_KAFKA_PORT", "39092"),
            ("OUTBOX_TEST_STATE_DIR", "/s"),
        ]);
        let cmd = tool(&c, "org.apache.kafka.tools.AclCommand");
        let args: Vec<_> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "-Dlog4j2.configurationFile=/s/kafka-log4j2.properties",
                "-cp",
                "/repo/.cache/jvm/kafka/*",
                "org.apache.kafka.tools.AclCommand",
                "--bootstrap-server",
                "127.0.0.1:39092",
            ]
        );
    }
}
