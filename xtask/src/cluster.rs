//! A Kafka cluster as production runs it, beside the single broker: KRaft
//! with a controller of its own (so a broker's fault never takes the quorum
//! with it) and three brokers; topics get replication factor 3 and
//! min.insync.replicas=2 by default.
//!
//! Ports, from `OUTBOX_TEST_KAFKA_CLUSTER_PORT` (B, 29300 by default; the
//! misconfigured brokers of `check`'s tests take 29192 to 29237):
//!   B          the controller
//!   B+10i+1    broker i's plain listener (clients and replication), i = 1..3
//!   B+10i+2    broker i's PROXIED listener, behind Toxiproxy's kafka-i proxy
//!   B+10i+3    that proxy, which the PROXIED listener advertises: a client
//!              that bootstraps through the proxies reaches broker i only
//!              through kafka-i, so one broker's link can be cut alone.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};

use crate::config::{Config, CLUSTER_BROKERS, CLUSTER_CONTROLLER};
use crate::kafka::{self, Node};
use crate::process::{log, signal, Pids};

fn dir(cfg: &Config) -> PathBuf {
    cfg.state.join("cluster")
}

fn pid_name(node: u16) -> String {
    format!("cluster-{node}")
}

/// Node `node`'s configuration (the controller or a broker).
pub fn node_properties(cfg: &Config, node: u16) -> String {
    let common = format!(
        "controller.quorum.voters={CLUSTER_CONTROLLER}@127.0.0.1:{}
controller.listener.names=CONTROLLER
log.dirs={}/node-{node}",
        cfg.cluster_port,
        dir(cfg).display()
    );
    if node == CLUSTER_CONTROLLER {
        return format!(
            "process.roles=controller
node.id={node}
{common}
listeners=CONTROLLER://127.0.0.1:{}
listener.security.protocol.map=CONTROLLER:PLAINTEXT
# The controller creates topics, with these defaults.
num.partitions=6
default.replication.factor=3
min.insync.replicas=2
log.retention.ms=-1
",
            cfg.cluster_port
        );
    }
    let (plain, proxied, proxy) = (
        cfg.cluster_node_port(node, 1),
        cfg.cluster_node_port(node, 2),
        cfg.cluster_node_port(node, 3),
    );
    format!(
        "process.roles=broker
node.id={node}
{common}
listeners=PLAINTEXT://127.0.0.1:{plain},PROXIED://127.0.0.1:{proxied}
advertised.listeners=PLAINTEXT://127.0.0.1:{plain},PROXIED://127.0.0.1:{proxy}
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,PROXIED:PLAINTEXT
min.insync.replicas=2
offsets.topic.replication.factor=3
offsets.topic.num.partitions=6
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
# As the single broker: tests publish records stamped years back.
log.retention.ms=-1
"
    )
}

pub fn pid(cfg: &Config, node: u16) -> Option<i32> {
    Pids { state: &cfg.state }.live(&pid_name(node))
}

/// Starts node `node` (the controller or a broker) if it is not running,
/// and waits until it serves.
fn start_node(cfg: &Config, node: u16) -> Result<()> {
    if pid(cfg, node).is_some() {
        return Ok(());
    }
    let dir = dir(cfg);
    std::fs::create_dir_all(&dir)?;
    let file = |suffix: &str| dir.join(format!("node-{node}{suffix}"));
    std::fs::write(file(".properties"), node_properties(cfg, node))?;
    std::fs::write(file("-log4j2.properties"), kafka::log4j2(&file(".log")))?;
    let label = format!("cluster node {node}");
    let heap = if node == CLUSTER_CONTROLLER {
        "256m"
    } else {
        "512m"
    };
    let n = Node {
        cfg,
        name: &pid_name(node),
        label: &label,
        properties: &file(".properties"),
        log4j2: &file("-log4j2.properties"),
        log: &file(".log"),
        out: &file(".out"),
        heap: (heap, heap),
    };
    if !file("/meta.properties").is_file() {
        let id_file = dir.join("cluster-id");
        let known = std::fs::read_to_string(&id_file).unwrap_or_default();
        let id = if known.trim().is_empty() {
            let id = kafka::random_cluster_id(cfg)?;
            std::fs::write(&id_file, format!("{id}\n"))?;
            id
        } else {
            known.trim().to_string()
        };
        kafka::format_storage(&n, &id, &file("-format.log"))?;
    }
    kafka::launch(&n)
}

pub fn start(cfg: &Config) -> Result<()> {
    log(&format!(
        "starting the Kafka cluster: controller on 127.0.0.1:{}, brokers on {}",
        cfg.cluster_port,
        cfg.cluster_bootstrap(1)
    ));
    start_node(cfg, CLUSTER_CONTROLLER)?;
    for node in CLUSTER_BROKERS {
        start_node(cfg, node)?;
    }
    Ok(())
}

pub fn stop(cfg: &Config) {
    let pids = Pids { state: &cfg.state };
    for node in CLUSTER_BROKERS {
        // A frozen broker cannot act on SIGTERM.
        if let Some(p) = pid(cfg, node) {
            signal(p, libc::SIGCONT);
        }
        pids.stop(&pid_name(node), &format!("cluster broker {node}"));
    }
    pids.stop(&pid_name(CLUSTER_CONTROLLER), "the cluster's controller");
}

const BROKER_USAGE: &str = "usage: cluster-broker start|stop|kill|freeze|thaw|pid 1|2|3";

/// `cluster-broker ACTION N`, for the fault tests: start (and wait until it
/// serves), stop (SIGTERM: a controlled shutdown, its leaders move first,
/// waited for), kill (SIGKILL), freeze (SIGSTOP), thaw (SIGCONT), pid.
pub fn broker(cfg: &Config, args: &[String]) -> Result<()> {
    let node = args
        .get(1)
        .and_then(|n| n.parse::<u16>().ok())
        .filter(|n| CLUSTER_BROKERS.contains(n))
        .ok_or_else(|| anyhow!(BROKER_USAGE))?;
    let action = args.first().map(String::as_str).unwrap_or_default();
    let running = || pid(cfg, node).ok_or_else(|| anyhow!("cluster broker {node} is not running"));
    match action {
        "start" => start_node(cfg, node),
        "stop" => {
            Pids { state: &cfg.state }.stop(&pid_name(node), &format!("cluster broker {node}"));
            Ok(())
        }
        "kill" => {
            signal(running()?, libc::SIGKILL);
            Pids { state: &cfg.state }.forget(&pid_name(node));
            Ok(())
        }
        "freeze" => send(running()?, libc::SIGSTOP),
        "thaw" => send(running()?, libc::SIGCONT),
        "pid" => {
            println!("{}", running()?);
            Ok(())
        }
        _ => bail!(BROKER_USAGE),
    }
}

fn send(pid: i32, sig: libc::c_int) -> Result<()> {
    if !signal(pid, sig) {
        bail!("cannot signal {pid}");
    }
    Ok(())
}

/// A Kafka command-line tool against the cluster, e.g.
/// `cluster-tool org.apache.kafka.tools.reassign.ReassignPartitionsCommand
/// --execute ...`; this process becomes the tool.
pub fn tool(cfg: &Config, args: &[String]) -> Result<()> {
    let (class, rest) = args
        .split_first()
        .ok_or_else(|| anyhow!("usage: cluster-tool CLASS ARGS..."))?;
    let err = kafka::tool_at(cfg, &cfg.cluster_bootstrap(1), class)
        .args(rest)
        .exec();
    Err(err).context("cannot run java")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Vars;
    use std::path::Path;

    fn cfg() -> Config {
        let vars = Vars::from_pairs(&[
            ("OUTBOX_TEST_KAFKA_CLUSTER_PORT", "39300"),
            ("OUTBOX_TEST_STATE_DIR", "/s"),
        ]);
        Config::new(&vars, Path::new("/repo"), 0).unwrap()
    }

    #[test]
    fn brokers_listen_on_their_ports_and_advertise_their_proxies() {
        let p = node_properties(&cfg(), 2);
        assert!(p.starts_with("process.roles=broker\nnode.id=2\n"), "{p}");
        assert!(p.contains("\ncontroller.quorum.voters=100@127.0.0.1:39300\n"));
        assert!(p.contains("\nlog.dirs=/s/cluster/node-2\n"));
        assert!(p.contains("\nlisteners=PLAINTEXT://127.0.0.1:39321,PROXIED://127.0.0.1:39322\n"));
        assert!(p.contains(
            "\nadvertised.listeners=PLAINTEXT://127.0.0.1:39321,PROXIED://127.0.0.1:39323\n"
        ));
        assert!(p.contains("\nmin.insync.replicas=2\n"));
    }

    #[test]
    fn the_controller_only_controls() {
        let p = node_properties(&cfg(), CLUSTER_CONTROLLER);
        assert!(
            p.starts_with("process.roles=controller\nnode.id=100\n"),
            "{p}"
        );
        assert!(p.contains("\nlisteners=CONTROLLER://127.0.0.1:39300\n"));
        assert!(p.contains("\ndefault.replication.factor=3\n"));
        assert!(!p.contains("PLAINTEXT://"));
    }

    #[test]
    fn broker_actions_need_a_broker_of_the_cluster() {
        let c = cfg();
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let err = broker(&c, &args(&["stop", "4"])).unwrap_err();
        assert_eq!(err.to_string(), BROKER_USAGE);
        assert!(broker(&c, &args(&["start"])).is_err());
        assert!(broker(&c, &args(&["reboot", "1"])).is_err());
        // Not running: there is nothing to freeze.
        let err = broker(&c, &args(&["freeze", "1"])).unwrap_err();
        assert!(err.to_string().contains("not running"), "{err}");
    }
}
