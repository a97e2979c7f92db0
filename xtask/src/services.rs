//! `cargo xtask services COMMAND` (short form: `scripts/services.sh
//! COMMAND`): the local test services. A throwaway PostgreSQL cluster
//! (wal_level=logical; 15 from Debian's packages by default, or 14, 16, 17
//! or 18 with OUTBOX_TEST_PG_MAJOR), a single-node Apache Kafka broker
//! (KRaft) and a Kafka Connect worker with Debezium's PostgreSQL connector,
//! all on loopback and non-default ports; on demand Toxiproxy's proxies, a
//! three-broker Kafka cluster, Debezium Server and Strimzi's model.
//!
//! Every command is idempotent. Ports and paths move with the `OUTBOX_TEST_*`
//! variables (`config`); state lives outside the work tree so several
//! clones do not mix. Each PostgreSQL major has its own cluster and default
//! port (25400 + MAJOR; OUTBOX_TEST_PG_PORT moves it, so unset it when
//! switching majors); OUTBOX_TEST_PG_MAJOR picks the one that start,
//! start-postgres, stop-postgres and env act on, stop and reset stop every
//! major's cluster, and Kafka and Connect are shared.

use std::os::unix::process::CommandExt;

use anyhow::{anyhow, bail, Context, Result};

use crate::config::{Config, CLUSTER_BROKERS, DEFAULT_MAJOR};
use crate::process::{log, Pids};
use crate::tools::{self, Tool};
use crate::{cluster, connect, jvm, kafka, postgres, toxiproxy};

pub const USAGE: &str = "usage: services COMMAND [ARGS]
  install          install what is missing (apt, npm, Maven Central) and build the Go tools
  start            install what the services need, start PostgreSQL, Kafka and Kafka Connect
                   and wait until they accept work (builds no Go tool)
  start-core       only PostgreSQL 15 and Kafka: what the quickstart runs
  stop             stop everything and leave no process behind
  status           say what runs
  env              print the exports the tests and tools read
  reset            stop everything and remove the state
  stop-kafka|start-kafka|stop-postgres|start-postgres|stop-connect|start-connect
                   one service, for fault tests
  start-proxies    Toxiproxy (built if missing) with a proxy on each link
  start-cluster|stop-cluster
                   a three-broker Kafka cluster with a controller of its own
  cluster-broker start|stop|kill|freeze|thaw|pid N
                   one of its brokers, for fault tests
  cluster-tool CLASS ARGS...      a Kafka tool against the cluster
  kafka-acl ARGS...               Kafka's AclCommand as the super user
  kafka-configs ARGS...           Kafka's ConfigCommand as the super user
  debezium-server PROPERTIES [WORKDIR]
                   Debezium Server 3.6.1 on that file, in the foreground
  strimzi-model FILE...           read Strimzi resources with Strimzi's own model
  bytes-converters                Debezium 1.x's ByteBufferConverter and 3.6's BinaryDataConverter on the same values
  pg-bin MAJOR     install that major's server if missing and print its bin directory
  install-postgres install the server of OUTBOX_TEST_PG_MAJOR
  tools [NAME...]  build these Go tools into .cache/go (all when none is named):
                   promtool, prometheus, toxiproxy, otelcol, helm";

/// The Go tools a command builds before it runs (none for the services
/// themselves: starting PostgreSQL and Kafka builds no Go tool).
pub fn tools_needed(command: &str, args: &[String]) -> Result<Vec<Tool>> {
    Ok(match command {
        "install" => vec![
            Tool::Toxiproxy,
            Tool::Promtool,
            Tool::Prometheus,
            Tool::Otelcol,
        ],
        "start-proxies" => vec![Tool::Toxiproxy],
        "tools" if args.is_empty() => Tool::ALL.to_vec(),
        "tools" => args.iter().map(|a| Tool::parse(a)).collect::<Result<_>>()?,
        _ => Vec::new(),
    })
}

/// What `start` needs installed: the servers, every major the suite runs
/// (17 also for the failover test), Debezium's default decoding plugin for
/// 15, the jars and Debezium Server.
fn install_services(cfg: &Config) -> Result<()> {
    postgres::install(cfg)?;
    postgres::install_decoderbufs(cfg)?;
    let mut majors = cfg.install_majors.clone();
    majors.push(17);
    for major in majors.into_iter().filter(|&m| m != DEFAULT_MAJOR) {
        postgres::install_npm(cfg, major)?;
    }
    for profile in ["kafka", "debezium", "strimzi"] {
        jvm::install_profile(cfg, profile)?;
    }
    jvm::install_debezium_server(cfg)
}

fn stop_all(cfg: &Config) -> Result<()> {
    toxiproxy::stop(cfg);
    connect::stop(cfg);
    cluster::stop(cfg);
    kafka::stop(cfg);
    postgres::stop_every_major(cfg)
}

/// `status`'s lines.
pub fn status(cfg: &Config) -> String {
    let pids = Pids { state: &cfg.state };
    let line = |name: &str, running: bool, port: u16| {
        if running {
            format!("{name}: running on 127.0.0.1:{port}\n")
        } else {
            format!("{name}: stopped\n")
        }
    };
    let mut out = line("postgresql", postgres::running(cfg), cfg.pg_port);
    out += &line("kafka", pids.live("kafka").is_some(), cfg.kafka_port);
    out += &line("connect", pids.live("connect").is_some(), cfg.connect_port);
    out += &line(
        "toxiproxy",
        pids.live("toxiproxy").is_some(),
        cfg.toxiproxy_port,
    );
    for n in CLUSTER_BROKERS {
        out += &line(
            &format!("cluster broker {n}"),
            cluster::pid(cfg, n).is_some(),
            cfg.cluster_node_port(n, 1),
        );
    }
    out
}

/// Runs a Kafka tool as the plain listener's super user; this process
/// becomes the tool.
fn exec_kafka_tool(cfg: &Config, class: &str, args: &[String]) -> Result<()> {
    let err = kafka::tool(cfg, class).args(args).exec();
    Err(err).context("cannot run java")
}

/// Runs `command` with `args`.
pub fn run(cfg: &Config, command: &str, args: &[String]) -> Result<()> {
    for tool in tools_needed(command, args)? {
        tools::install(cfg, tool)?;
    }
    match command {
        "install" => install_services(cfg),
        "tools" => Ok(()),
        "start" => {
            install_services(cfg)?;
            postgres::start(cfg)?;
            kafka::start(cfg)?;
            connect::start(cfg)?;
            log(&format!(
                "services are up (state in {})",
                cfg.state.display()
            ));
            Ok(())
        }
        "start-core" => {
            postgres::install(cfg)?;
            jvm::install_profile(cfg, "kafka")?;
            postgres::start(cfg)?;
            kafka::start(cfg)?;
            log(&format!(
                "PostgreSQL and Kafka are up (state in {})",
                cfg.state.display()
            ));
            Ok(())
        }
        "stop" => stop_all(cfg),
        "status" => {
            print!("{}", status(cfg));
            Ok(())
        }
        "env" => {
            print!("{}", cfg.env_text());
            Ok(())
        }
        "reset" => {
            stop_all(cfg)?;
            if cfg.state.exists() {
                std::fs::remove_dir_all(&cfg.state)
                    .with_context(|| format!("cannot remove {}", cfg.state.display()))?;
            }
            log(&format!("removed {}", cfg.state.display()));
            Ok(())
        }
        "start-proxies" => toxiproxy::start(cfg),
        "stop-kafka" => {
            kafka::stop(cfg);
            Ok(())
        }
        "start-kafka" => {
            jvm::install_profile(cfg, "kafka")?;
            kafka::start(cfg)
        }
        "stop-connect" => {
            connect::stop(cfg);
            Ok(())
        }
        "start-connect" => {
            jvm::install_profile(cfg, "debezium")?;
            connect::start(cfg)
        }
        "stop-postgres" => {
            postgres::stop(cfg);
            Ok(())
        }
        "start-postgres" => {
            postgres::install(cfg)?;
            postgres::start(cfg)
        }
        "install-postgres" => postgres::install(cfg),
        "pg-bin" => {
            let major = args
                .first()
                .and_then(|m| m.parse().ok())
                .ok_or_else(|| anyhow!("usage: services pg-bin MAJOR"))?;
            let other = cfg.for_major(major)?;
            postgres::install(&other)?;
            println!("{}", other.pg_bin.display());
            Ok(())
        }
        "start-cluster" => {
            jvm::install_profile(cfg, "kafka")?;
            cluster::start(cfg)
        }
        "stop-cluster" => {
            cluster::stop(cfg);
            Ok(())
        }
        "cluster-broker" => cluster::broker(cfg, args),
        "cluster-tool" => cluster::tool(cfg, args),
        // For tests of ACLs: AclCommand's own arguments, e.g.
        //   kafka-acl --add --deny-principal User:relay --operation Write --topic sec.x
        "kafka-acl" => exec_kafka_tool(cfg, "org.apache.kafka.tools.AclCommand", args),
        // Topic and client settings, e.g. --alter --entity-type topics
        // --entity-name T --add-config K=V
        "kafka-configs" => exec_kafka_tool(cfg, "kafka.admin.ConfigCommand", args),
        "debezium-server" => jvm::run_debezium_server(cfg, args),
        "strimzi-model" => jvm::strimzi_model(cfg, args),
        "bytes-converters" => jvm::bytes_converters(cfg),
        "help" => {
            println!("{USAGE}");
            Ok(())
        }
        other => bail!("unknown command {other:?}\n{USAGE}"),
    }
}

/// The commands `run` knows.
pub const COMMANDS: [&str; 27] = [
    "install",
    "start",
    "start-core",
    "stop",
    "status",
    "env",
    "reset",
    "stop-kafka",
    "start-kafka",
    "stop-postgres",
    "start-postgres",
    "stop-connect",
    "start-connect",
    "start-proxies",
    "start-cluster",
    "stop-cluster",
    "cluster-broker",
    "cluster-tool",
    "kafka-acl",
    "kafka-configs",
    "debezium-server",
    "strimzi-model",
    "bytes-converters",
    "pg-bin",
    "install-postgres",
    "tools",
    "help",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Vars;
    use std::path::Path;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn starting_the_services_builds_no_go_tool() {
        for command in [
            "start",
            "start-core",
            "start-postgres",
            "start-kafka",
            "start-connect",
            "start-cluster",
            "status",
            "env",
            "stop",
            "reset",
            "pg-bin",
        ] {
            assert!(tools_needed(command, &[]).unwrap().is_empty(), "{command}");
        }
    }

    #[test]
    fn the_commands_that_use_a_tool_build_it() {
        assert_eq!(
            tools_needed("start-proxies", &[]).unwrap(),
            [Tool::Toxiproxy]
        );
        assert_eq!(
            tools_needed("tools", &strings(&["otelcol", "helm"])).unwrap(),
            [Tool::Otelcol, Tool::Helm]
        );
        assert_eq!(tools_needed("tools", &[]).unwrap(), Tool::ALL);
        assert!(tools_needed("tools", &strings(&["go"])).is_err());
        // install keeps building what the tests use (Helm stays with the
        // chart's check).
        let all = tools_needed("install", &[]).unwrap();
        assert_eq!(all.len(), 4);
        assert!(!all.contains(&Tool::Helm));
    }

    #[test]
    fn status_says_stopped_for_what_does_not_run() {
        let vars = Vars::from_pairs(&[
            ("OUTBOX_TEST_STATE_DIR", "/nonexistent/xtask-state"),
            ("OUTBOX_TEST_PG_PORT", "35329"),
        ]);
        let cfg = Config::new(&vars, Path::new("/repo"), 0).unwrap();
        assert_eq!(
            status(&cfg),
            "postgresql: stopped\nkafka: stopped\nconnect: stopped\ntoxiproxy: stopped\n\
             cluster broker 1: stopped\ncluster broker 2: stopped\ncluster broker 3: stopped\n"
        );
    }

    #[test]
    fn every_command_is_in_the_usage() {
        for command in COMMANDS.iter().filter(|c| **c != "help") {
            let listed = USAGE
                .split(|c: char| c.is_whitespace() || c == '|')
                .any(|word| word == *command);
            assert!(listed, "{command}");
        }
        let vars = Vars::from_pairs(&[("OUTBOX_TEST_STATE_DIR", "/nonexistent/xtask-state")]);
        let cfg = Config::new(&vars, Path::new("/repo"), 0).unwrap();
        assert!(run(&cfg, "restart", &[]).is_err());
    }
}
