//! The three-broker cluster `scripts/services.sh start-cluster` runs: where
//! its leaders are, and the faults done to it (its brokers through that
//! script, the relay's link to one through its proxy), for the cluster's
//! tests and the soak's nemesis.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::toxiproxy::{Link, Proxies, Toxic};

/// A fault of the cluster, as the issue lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// The leader of the busiest partition SIGKILLed, restarted after 20 s.
    LeaderKilled,
    /// Each broker in turn shut down (SIGTERM: a controlled shutdown) and
    /// started again once the others hold every partition in sync.
    RollingRestart,
    /// Every partition's replicas reordered and the preferred leaders
    /// elected: every leader moves while the relay publishes.
    Reassignment,
    /// The leader of the busiest partition SIGSTOPped for 40 s, then
    /// SIGCONTed.
    Frozen,
    /// Two brokers SIGKILLed for 20 s: no partition has two replicas in
    /// sync, so `acks=all` cannot be met.
    QuorumLost,
    /// The link from the relay to the leader of the busiest partition
    /// black-holed for 20 s; the brokers still see each other.
    LinkCut,
}

impl Fault {
    pub const ALL: [Fault; 6] = [
        Fault::LeaderKilled,
        Fault::RollingRestart,
        Fault::Reassignment,
        Fault::Frozen,
        Fault::QuorumLost,
        Fault::LinkCut,
    ];

    /// How long the fault stays before the heal (a rolling restart and a
    /// reassignment take what they take).
    pub fn hold(self) -> Duration {
        match self {
            Fault::LeaderKilled | Fault::QuorumLost | Fault::LinkCut => Duration::from_secs(20),
            Fault::Frozen => Duration::from_secs(40),
            Fault::RollingRestart | Fault::Reassignment => Duration::ZERO,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Fault::LeaderKilled => "leader SIGKILLed",
            Fault::RollingRestart => "rolling restart",
            Fault::Reassignment => "reassignment of every leader",
            Fault::Frozen => "leader frozen (SIGSTOP)",
            Fault::QuorumLost => "two brokers down",
            Fault::LinkCut => "relay's link to the leader cut",
        }
    }
}

pub struct Cluster {
    /// The brokers' plain listeners.
    pub bootstrap: String,
    /// The brokers through their proxies, as the relay reaches them.
    pub proxied: String,
    script: String,
}

/// A partition's leader and in-sync replicas, as the metadata says.
struct Placement {
    partition: i32,
    leader: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
}

impl Cluster {
    pub const BROKERS: [u8; 3] = [1, 2, 3];

    /// The cluster `services.sh env` names; a missing variable fails the
    /// test (these tests never skip).
    pub fn from_env() -> Cluster {
        let get = |name: &str| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| {
                    panic!("{name} is not set: run `scripts/services.sh start-cluster` and eval its `env`")
                })
        };
        Cluster {
            bootstrap: get("OUTBOX_TEST_KAFKA_CLUSTER_BOOTSTRAP"),
            proxied: get("OUTBOX_TEST_KAFKA_CLUSTER_PROXIED_BOOTSTRAP"),
            script: get("OUTBOX_TEST_SERVICES"),
        }
    }

    /// `services.sh cluster-broker ACTION N`: start, stop, kill, freeze, thaw.
    pub fn broker(&self, action: &str, n: u8) {
        let out = self.script(&["cluster-broker", action, &n.to_string()]);
        assert!(
            out.status.success(),
            "cluster-broker {action} {n}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Every broker running and thawed (a failed test may have left one
    /// down or frozen).
    pub fn all_up(&self) {
        for n in Self::BROKERS {
            let _ = self.script(&["cluster-broker", "thaw", &n.to_string()]);
            self.broker("start", n);
        }
    }

    fn script(&self, args: &[&str]) -> std::process::Output {
        Command::new("bash")
            .arg(&self.script)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("services.sh {args:?}: {e}"))
    }

    fn consumer(&self) -> BaseConsumer {
        ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .unwrap()
    }

    fn placements(&self, topic: &str) -> Vec<Placement> {
        let md = match self
            .consumer()
            .fetch_metadata(Some(topic), Duration::from_secs(10))
        {
            Ok(md) => md,
            Err(_) => return Vec::new(),
        };
        md.topics()
            .iter()
            .filter(|t| t.name() == topic)
            .flat_map(|t| t.partitions())
            .map(|p| Placement {
                partition: p.id(),
                leader: p.leader(),
                replicas: p.replicas().to_vec(),
                isr: p.isr().to_vec(),
            })
            .collect()
    }

    /// Waits until every partition of `topic` has a leader and all three
    /// replicas in sync.
    pub fn wait_in_sync(&self, topic: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let placements = self.placements(topic);
            if !placements.is_empty()
                && placements
                    .iter()
                    .all(|p| p.leader >= 0 && p.isr.len() == Self::BROKERS.len())
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{topic}'s partitions were not all in sync within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The broker that leads the partition of `topic` holding the most
    /// records.
    pub fn leader_of_busiest(&self, topic: &str) -> u8 {
        let consumer = self.consumer();
        let placements = self.placements(topic);
        let busiest = placements
            .iter()
            .max_by_key(|p| {
                consumer
                    .fetch_watermarks(topic, p.partition, Duration::from_secs(10))
                    .map_or(0, |(_, high)| high)
            })
            .expect("the topic has partitions");
        u8::try_from(busiest.leader).expect("a partition with a leader")
    }

    /// Reorders every partition's replicas so that another broker comes
    /// first, waits for the reassignment, then elects the preferred
    /// leaders: every leader moves.
    pub fn move_every_leader(&self, topic: &str) {
        let partitions: Vec<String> = self
            .placements(topic)
            .iter()
            .map(|p| {
                let mut replicas = p.replicas.clone();
                let at = replicas.iter().position(|r| *r == p.leader).unwrap_or(0);
                let by = (at + 1) % replicas.len().max(1);
                replicas.rotate_left(by);
                format!(
                    r#"{{"topic":"{topic}","partition":{},"replicas":[{}]}}"#,
                    p.partition,
                    replicas
                        .iter()
                        .map(i32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                )
            })
            .collect();
        let file = std::env::temp_dir().join(format!("{topic}-reassignment.json"));
        std::fs::write(
            &file,
            format!(r#"{{"version":1,"partitions":[{}]}}"#, partitions.join(",")),
        )
        .unwrap();
        let file = file.to_string_lossy().into_owned();
        let tool = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand";
        let out = self.script(&[
            "cluster-tool",
            tool,
            "--reassignment-json-file",
            &file,
            "--execute",
        ]);
        assert!(
            out.status.success(),
            "reassignment: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = self.script(&[
                "cluster-tool",
                tool,
                "--reassignment-json-file",
                &file,
                "--verify",
            ]);
            let text = String::from_utf8_lossy(&out.stdout);
            if out.status.success() && !text.contains("still in progress") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the reassignment did not complete within 60 s: {text}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        // The tool fails for partitions their preferred replica leads
        // already (of other topics too); what counts is checked below.
        let _ = self.script(&[
            "cluster-tool",
            "org.apache.kafka.tools.LeaderElectionCommand",
            "--election-type",
            "PREFERRED",
            "--all-topic-partitions",
        ]);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self
            .placements(topic)
            .iter()
            .all(|p| p.replicas.first() == Some(&p.leader))
        {
            assert!(
                Instant::now() < deadline,
                "30 s after the election some partition of {topic} is not led by its preferred replica"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Injects `fault` and returns once it is healed.
    pub async fn inject(&self, fault: Fault, proxies: &Proxies, topic: &str) {
        match fault {
            Fault::LeaderKilled => {
                let leader = self.leader_of_busiest(topic);
                self.broker("kill", leader);
                tokio::time::sleep(fault.hold()).await;
                self.broker("start", leader);
            }
            Fault::RollingRestart => {
                for broker in Cluster::BROKERS {
                    self.broker("stop", broker);
                    self.broker("start", broker);
                    self.wait_in_sync(topic, Duration::from_secs(60));
                }
            }
            Fault::Reassignment => self.move_every_leader(topic),
            Fault::Frozen => {
                let leader = self.leader_of_busiest(topic);
                self.broker("freeze", leader);
                tokio::time::sleep(fault.hold()).await;
                self.broker("thaw", leader);
            }
            Fault::QuorumLost => {
                let leader = self.leader_of_busiest(topic);
                let other = Cluster::BROKERS
                    .into_iter()
                    .find(|b| *b != leader)
                    .unwrap_or(1);
                self.broker("kill", leader);
                self.broker("kill", other);
                tokio::time::sleep(fault.hold()).await;
                self.broker("start", leader);
                self.broker("start", other);
            }
            Fault::LinkCut => {
                let leader = self.leader_of_busiest(topic);
                let link = Link::ClusterBroker(leader);
                proxies.add_both(link, "cut", &Toxic::BlackHole);
                tokio::time::sleep(fault.hold()).await;
                proxies.remove_both(link, "cut");
            }
        }
        self.wait_in_sync(topic, Duration::from_secs(90));
    }
}
