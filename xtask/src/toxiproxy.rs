//! Toxiproxy (built by `tools`, see there) puts a proxy on each link for the
//! network fault tests: `pg` in front of PostgreSQL 15, `kafka` in front of
//! the single broker's PROXIED listener, which advertises the proxy's
//! address, and `kafka-1` to `kafka-3` in front of the cluster's brokers.
//! The plain listeners and ports stay as they are.

use std::process::Command;

use anyhow::{bail, Result};

use crate::config::{Config, CLUSTER_BROKERS};
use crate::http::{self, Request};
use crate::process::{log, start_detached, tail, Pids};
use crate::tools::{self, Tool};
use crate::wait::{wait, Patience, Probe, WaitError};

/// A proxy: its name, where it listens and where it forwards.
#[derive(Debug, PartialEq, Eq)]
pub struct Proxy {
    pub name: String,
    pub listen: String,
    pub upstream: String,
}

/// The proxies, made afresh (no toxics, enabled) each start: `pg` listens
/// on `OUTBOX_TEST_PG_PROXY_PORT` in front of PostgreSQL 15's port, `kafka`
/// on the PROXIED listener's advertised port, and one per broker of the
/// cluster, whether or not it runs.
pub fn proxies(cfg: &Config) -> Vec<Proxy> {
    let at = |port: u16| format!("127.0.0.1:{port}");
    let mut all = vec![
        Proxy {
            name: "pg".into(),
            listen: at(cfg.pg_proxy_port),
            upstream: at(cfg.pg15_port),
        },
        Proxy {
            name: "kafka".into(),
            listen: at(cfg.kafka_proxy_port),
            upstream: at(cfg.kafka_proxied_port),
        },
    ];
    for n in CLUSTER_BROKERS {
        all.push(Proxy {
            name: format!("kafka-{n}"),
            listen: at(cfg.cluster_node_port(n, 3)),
            upstream: at(cfg.cluster_node_port(n, 2)),
        });
    }
    all
}

impl Proxy {
    pub fn json(&self) -> String {
        format!(
            r#"{{"name":"{}","listen":"{}","upstream":"{}","enabled":true}}"#,
            self.name, self.listen, self.upstream
        )
    }
}

fn start_server(cfg: &Config, api: &str) -> Result<()> {
    let pids = Pids { state: &cfg.state };
    std::fs::create_dir_all(&cfg.state)?;
    log(&format!("starting Toxiproxy on {api}"));
    let out = cfg.state.join("toxiproxy.log");
    start_detached(
        Command::new(cfg.go_bin("toxiproxy-server")).args([
            "-host",
            "127.0.0.1",
            "-port",
            &cfg.toxiproxy_port.to_string(),
        ]),
        &out,
        &pids,
        "toxiproxy",
    )?;
    let ready = wait(Patience::secs(30, 200), || {
        if http::get(api, "/version").is_ok_and(|r| r.ok()) {
            Probe::Ready
        } else if pids.live("toxiproxy").is_none() {
            Probe::Dead("Toxiproxy exited during start-up".into())
        } else {
            Probe::NotYet
        }
    });
    match ready {
        Ok(()) => Ok(()),
        Err(WaitError::Dead(why)) => {
            tail(&out, 20);
            bail!("{why}")
        }
        Err(WaitError::TimedOut(_)) => bail!("Toxiproxy did not start within 30 s"),
    }
}

/// Builds Toxiproxy if it is not cached, starts it if it does not run,
/// and makes every proxy afresh.
pub fn start(cfg: &Config) -> Result<()> {
    tools::install(cfg, Tool::Toxiproxy)?;
    let api = format!("127.0.0.1:{}", cfg.toxiproxy_port);
    let pids = Pids { state: &cfg.state };
    if pids.live("toxiproxy").is_none() {
        start_server(cfg, &api)?;
    }
    let call = |method: &str, path: &str, json: Option<&str>| {
        http::send(&Request {
            method,
            addr: &api,
            path,
            json,
        })
    };
    if !call("POST", "/reset", None).is_ok_and(|r| r.ok()) {
        bail!("Toxiproxy refused a reset");
    }
    for proxy in proxies(cfg) {
        let _ = call("DELETE", &format!("/proxies/{}", proxy.name), None);
        if !call("POST", "/proxies", Some(&proxy.json())).is_ok_and(|r| r.ok()) {
            bail!(
                "Toxiproxy could not create the {} proxy on {}",
                proxy.name,
                proxy.listen
            );
        }
    }
    Ok(())
}

pub fn stop(cfg: &Config) {
    Pids { state: &cfg.state }.stop("toxiproxy", "Toxiproxy");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Vars;
    use std::path::Path;

    #[test]
    fn a_proxy_per_link_on_the_configured_ports() {
        let vars = Vars::from_pairs(&[
            ("OUTBOX_TEST_KAFKA_PORT", "39092"),
            ("OUTBOX_TEST_PG_PROXY_PORT", "36329"),
            ("OUTBOX_TEST_PG15_PORT", "35329"),
            ("OUTBOX_TEST_KAFKA_CLUSTER_PORT", "39300"),
            // The pg proxy fronts 15 whatever the major asked for.
            ("OUTBOX_TEST_PG_MAJOR", "17"),
        ]);
        let cfg = Config::new(&vars, Path::new("/repo"), 0).unwrap();
        let all = proxies(&cfg);
        let names: Vec<_> = all.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["pg", "kafka", "kafka-1", "kafka-2", "kafka-3"]);
        assert_eq!(
            (all[0].listen.as_str(), all[0].upstream.as_str()),
            ("127.0.0.1:36329", "127.0.0.1:35329")
        );
        assert_eq!(
            (all[1].listen.as_str(), all[1].upstream.as_str()),
            ("127.0.0.1:39097", "127.0.0.1:39096")
        );
        assert_eq!(
            (all[4].listen.as_str(), all[4].upstream.as_str()),
            ("127.0.0.1:39333", "127.0.0.1:39332")
        );
        assert_eq!(
            all[0].json(),
            r#"{"name":"pg","listen":"127.0.0.1:36329","upstream":"127.0.0.1:35329","enabled":true}"#
        );
    }
}
