//! The real services `scripts/services.sh` starts, found through the
//! variables it exports, and second sets of them for tests that need their
//! own.
//!
//! A missing service fails the test. Only for local work, and never when `CI`
//! is set, `OUTBOX_TEST_ALLOW_MISSING_SERVICES=1` turns that into a skip.

pub struct Services {
    pub pg_host: String,
    pub pg_port: u16,
    pub pg_user: String,
    pub pg_password: String,
    pub kafka_bootstrap: String,
}

pub(crate) fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The services, or `None` when a local run opted out of them.
pub fn services() -> Option<Services> {
    let found = (|| {
        Some(Services {
            pg_host: var("OUTBOX_TEST_PG_HOST")?,
            pg_port: var("OUTBOX_TEST_PG_PORT")?.parse().ok()?,
            pg_user: var("OUTBOX_TEST_PG_USER")?,
            pg_password: var("OUTBOX_TEST_PG_PASSWORD")?,
            kafka_bootstrap: var("OUTBOX_TEST_KAFKA_BOOTSTRAP")?,
        })
    })();
    if found.is_some() {
        return found;
    }
    let in_ci = var("CI").is_some_and(|v| v != "false" && v != "0");
    let opted_out = var("OUTBOX_TEST_ALLOW_MISSING_SERVICES").as_deref() == Some("1");
    if opted_out && !in_ci {
        eprintln!("SKIPPED: OUTBOX_TEST_* service variables are not set (OUTBOX_TEST_ALLOW_MISSING_SERVICES=1)");
        return None;
    }
    panic!(
        "the integration tests need PostgreSQL and Kafka: run `scripts/test.sh`, or \
         `scripts/services.sh start && eval \"$(scripts/services.sh env)\"` before `cargo test`"
    );
}

/// Skips the calling test when services are absent and skipping is allowed.
#[macro_export]
macro_rules! require_services {
    () => {
        match $crate::services() {
            Some(s) => s,
            None => return,
        }
    };
}

/// A second set of services (PostgreSQL, and Kafka when asked) on their
/// own ports and state directory, configured through `scripts/services.sh`'s
/// variables; stopped and removed on drop.
pub struct ExtraServices {
    envs: Vec<(&'static str, String)>,
    state: std::path::PathBuf,
}

impl ExtraServices {
    /// Starts what `starts` names (`start-postgres`, `start-kafka`) with
    /// these variables.
    pub fn start(label: &str, envs: &[(&'static str, String)], starts: &[&str]) -> ExtraServices {
        let state = std::env::temp_dir().join(format!("outbox-cdc-{label}-{}", std::process::id()));
        let mut all = vec![("OUTBOX_TEST_STATE_DIR", state.display().to_string())];
        all.extend(envs.iter().cloned());
        let s = ExtraServices { envs: all, state };
        for arg in starts {
            s.script(arg);
        }
        s
    }

    fn script(&self, arg: &str) {
        let script = std::env::var("OUTBOX_TEST_SERVICES")
            .expect("OUTBOX_TEST_SERVICES from scripts/services.sh env");
        let mut cmd = std::process::Command::new("bash");
        cmd.arg(script).arg(arg);
        for (k, v) in &self.envs {
            cmd.env(k, v);
        }
        let out = cmd.stdin(std::process::Stdio::null()).output().unwrap();
        assert!(
            out.status.success(),
            "services.sh {arg}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for ExtraServices {
    fn drop(&mut self) {
        self.script("stop");
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// The secured listener `scripts/services.sh` starts beside the plain one:
/// TLS with the test CA, SASL/SCRAM-SHA-512, ACLs for the relay's principal
/// on topics under `prefix`.
pub struct Secured {
    pub bootstrap: String,
    pub user: String,
    pub password_file: String,
    pub prefix: String,
    pub ca: String,
}

impl Secured {
    pub fn from_env() -> Secured {
        let v = |n: &str| {
            var(n).unwrap_or_else(|| {
                panic!("{n} from scripts/services.sh env (the secured Kafka listener)")
            })
        };
        Secured {
            bootstrap: v("OUTBOX_TEST_KAFKA_SECURE_BOOTSTRAP"),
            user: v("OUTBOX_TEST_KAFKA_RELAY_USER"),
            password_file: v("OUTBOX_TEST_KAFKA_RELAY_PASSWORD_FILE"),
            prefix: v("OUTBOX_TEST_KAFKA_SECURE_PREFIX"),
            ca: v("OUTBOX_TEST_PG_CA"),
        }
    }

    /// `[kafka]` and `[kafka.properties]` for the relay over SASL_SSL, the
    /// password as a secret reference to `password_file`.
    pub fn kafka_tables(&self, password_file: &str, ca: &str) -> String {
        format!(
            r#"[kafka]
bootstrap_servers = "{}"

[kafka.properties]
"security.protocol" = "SASL_SSL"
"sasl.mechanisms" = "SCRAM-SHA-512"
"sasl.username" = "{}"
"sasl.password" = {{ file = "{password_file}" }}
"ssl.ca.location" = "{ca}"
"message.timeout.ms" = "120000"
"#,
            self.bootstrap, self.user
        )
    }
}

/// A port nothing listens on now (the kernel's choice), for a process the
/// test starts next.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Restarts the test PostgreSQL (fast shutdown). The server gets its own log
/// file and no inherited stdio, so it cannot hold the test runner's pipes.
pub fn restart_postgres() {
    use std::process::{Command, Stdio};
    let bin = std::env::var("OUTBOX_TEST_PG_BIN").expect("OUTBOX_TEST_PG_BIN");
    let data = std::env::var("OUTBOX_TEST_PG_DATA").expect("OUTBOX_TEST_PG_DATA");
    let log = format!("{data}/server.log");
    let pg_ctl = format!("{bin}/pg_ctl");
    let args = [
        "-D",
        data.as_str(),
        "-l",
        log.as_str(),
        "-m",
        "fast",
        "-w",
        "-t",
        "120",
        "restart",
    ];
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false);
    let mut cmd = if is_root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", pg_ctl.as_str()]);
        c
    } else {
        Command::new(&pg_ctl)
    };
    let status = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("pg_ctl");
    assert!(status.success(), "pg_ctl restart failed");
}
