//! Network faults through Toxiproxy (`scripts/services.sh start-proxies`):
//! the `pg` proxy in front of PostgreSQL 15 and the `kafka` proxy in front
//! of the broker's listener that advertises it. A test adds toxics, switches
//! a proxy off and on, and [`Proxies::reset`] removes every fault.
//!
//! Toxiproxy's HTTP API is spoken over a plain socket (a request per
//! connection), so the harness needs no HTTP client.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::services::var;

/// The proxies' addresses and the API.
#[derive(Debug, Clone)]
pub struct Proxies {
    api: String,
    /// PostgreSQL 15 through the `pg` proxy (`host:port`).
    pub pg: String,
    /// The broker through the `kafka` proxy: the bootstrap address whose
    /// metadata names the proxy again.
    pub kafka: String,
    /// The broker listener behind the proxy (no client should ever reach
    /// it directly).
    pub kafka_behind: String,
}

/// Which link a toxic is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    Postgres,
    Kafka,
    /// One broker of the three-broker cluster (1, 2 or 3): its `kafka-N`
    /// proxy, which that broker's PROXIED listener advertises.
    ClusterBroker(u8),
}

impl Link {
    pub fn proxy(self) -> &'static str {
        match self {
            Link::Postgres => "pg",
            Link::Kafka => "kafka",
            Link::ClusterBroker(1) => "kafka-1",
            Link::ClusterBroker(2) => "kafka-2",
            Link::ClusterBroker(3) => "kafka-3",
            Link::ClusterBroker(n) => panic!("the cluster has brokers 1 to 3, not {n}"),
        }
    }
}

/// Which way the bytes go: downstream is server to client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Downstream,
    Upstream,
}

impl Stream {
    fn as_str(self) -> &'static str {
        match self {
            Stream::Downstream => "downstream",
            Stream::Upstream => "upstream",
        }
    }
}

/// A toxic as Toxiproxy names its types, with its attributes.
#[derive(Debug, Clone, PartialEq)]
pub enum Toxic {
    /// Data stops and nothing closes (`timeout` with 0).
    BlackHole,
    Latency {
        ms: u64,
        jitter_ms: u64,
    },
    /// Kilobytes per second.
    Bandwidth {
        kb_per_sec: u64,
    },
    /// A TCP reset after `after_ms` of the connection's data.
    ResetPeer {
        after_ms: u64,
    },
}

impl Toxic {
    fn kind(&self) -> &'static str {
        match self {
            Toxic::BlackHole => "timeout",
            Toxic::Latency { .. } => "latency",
            Toxic::Bandwidth { .. } => "bandwidth",
            Toxic::ResetPeer { .. } => "reset_peer",
        }
    }

    fn attributes(&self) -> String {
        match self {
            Toxic::BlackHole => r#"{"timeout":0}"#.into(),
            Toxic::Latency { ms, jitter_ms } => {
                format!(r#"{{"latency":{ms},"jitter":{jitter_ms}}}"#)
            }
            Toxic::Bandwidth { kb_per_sec } => format!(r#"{{"rate":{kb_per_sec}}}"#),
            Toxic::ResetPeer { after_ms } => format!(r#"{{"timeout":{after_ms}}}"#),
        }
    }
}

impl Proxies {
    /// The proxies `scripts/services.sh env` names; a missing variable fails
    /// the test (the network tests never skip).
    pub fn from_env() -> Proxies {
        let get = |name: &str| {
            var(name).unwrap_or_else(|| {
                panic!(
                    "{name} is not set: run `scripts/services.sh start-proxies` and eval its `env`"
                )
            })
        };
        Proxies {
            api: get("OUTBOX_TEST_TOXIPROXY_API"),
            pg: get("OUTBOX_TEST_PG_PROXY"),
            kafka: get("OUTBOX_TEST_KAFKA_PROXY"),
            kafka_behind: get("OUTBOX_TEST_KAFKA_PROXIED"),
        }
    }

    /// Adds `toxic` to `link` under `name`, in one direction.
    pub fn add(&self, link: Link, name: &str, stream: Stream, toxic: &Toxic) {
        let body = format!(
            r#"{{"name":"{name}","type":"{}","stream":"{}","toxicity":1.0,"attributes":{}}}"#,
            toxic.kind(),
            stream.as_str(),
            toxic.attributes()
        );
        self.call(
            "POST",
            &format!("/proxies/{}/toxics", link.proxy()),
            Some(&body),
        );
    }

    /// Adds `toxic` in both directions (names `<name>_up` and `<name>_down`).
    pub fn add_both(&self, link: Link, name: &str, toxic: &Toxic) {
        self.add(link, &format!("{name}_down"), Stream::Downstream, toxic);
        self.add(link, &format!("{name}_up"), Stream::Upstream, toxic);
    }

    pub fn remove(&self, link: Link, name: &str) {
        self.call(
            "DELETE",
            &format!("/proxies/{}/toxics/{name}", link.proxy()),
            None,
        );
    }

    pub fn remove_both(&self, link: Link, name: &str) {
        self.remove(link, &format!("{name}_down"));
        self.remove(link, &format!("{name}_up"));
    }

    /// `link`'s proxy without toxics, the others left as they are (a test
    /// beside another's proxies).
    pub fn clear(&self, link: Link) {
        let answer = self.call("GET", &format!("/proxies/{}/toxics", link.proxy()), None);
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or("[]");
        let toxics: Vec<serde_json::Value> = serde_json::from_str(body).unwrap_or_default();
        for name in toxics.iter().filter_map(|t| t["name"].as_str()) {
            self.remove(link, name);
        }
    }

    /// Every proxy on and without toxics.
    pub fn reset(&self) {
        self.call("POST", "/reset", None);
    }

    fn call(&self, method: &str, path: &str, body: Option<&str>) -> String {
        let address = self.api.trim_start_matches("http://");
        let mut socket = TcpStream::connect(address)
            .unwrap_or_else(|e| panic!("Toxiproxy's API at {address}: {e}"));
        socket.set_read_timeout(Some(Duration::from_secs(10))).ok();
        let body = body.unwrap_or("");
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        socket
            .write_all(request.as_bytes())
            .expect("a request to Toxiproxy");
        let mut answer = String::new();
        socket
            .read_to_string(&mut answer)
            .expect("Toxiproxy's answer");
        let status = answer
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
            .unwrap_or(0);
        assert!(
            (200..300).contains(&status),
            "Toxiproxy refused {method} {path} {body}: {answer}"
        );
        answer
    }
}

/// The port of a `host:port` address.
pub fn port(address: &str) -> u16 {
    address
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {address}"))
}

/// The remote ports of a process's established TCP connections on
/// loopback, read from `/proc`: which servers it talks to, whatever its
/// libraries do.
pub fn remote_ports(pid: u32) -> Vec<u16> {
    let mut inodes = std::collections::HashSet::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
    {
        if let Ok(target) = std::fs::read_link(fd.path()) {
            let target = target.to_string_lossy().into_owned();
            if let Some(inode) = target
                .strip_prefix("socket:[")
                .and_then(|t| t.strip_suffix(']'))
            {
                inodes.insert(inode.to_string());
            }
        }
    }
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    let mut ports = Vec::new();
    for line in table.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // local, remote, state (01: established), ..., inode at 9.
        let (Some(remote), Some(state), Some(inode)) =
            (fields.get(2), fields.get(3), fields.get(9))
        else {
            continue;
        };
        if *state != "01" || !inodes.contains(*inode) {
            continue;
        }
        if let Some(port) = remote
            .split(':')
            .nth(1)
            .and_then(|p| u16::from_str_radix(p, 16).ok())
        {
            ports.push(port);
        }
    }
    ports.sort_unstable();
    ports
}
