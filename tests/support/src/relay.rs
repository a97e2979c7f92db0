//! The relay binary as a child process.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Services;

/// The usual set-up: slot `<db>_relay`, no extra settings; returns the
/// slot's name and the configuration's path.
pub fn default_config(s: &Services, db: &str, topic_prefix: &str) -> (String, PathBuf) {
    let slot = format!("{db}_relay");
    let path = config(s, db, topic_prefix, &slot, "");
    (slot, path)
}

/// Writes a relay configuration for `db` and returns its path.
pub fn config(s: &Services, db: &str, topic_prefix: &str, slot: &str, extra: &str) -> PathBuf {
    // Per process, so a failed run's logs stay for a look; the first call
    // removes those of processes that have ended, so no more pile up.
    static SWEPT: std::sync::Once = std::sync::Once::new();
    let root = std::env::temp_dir().join("outbox-cdc-relay");
    SWEPT.call_once(|| {
        for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            let pid = entry.file_name().to_string_lossy().parse::<u32>().ok();
            if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    });
    let dir = root.join(std::process::id().to_string()).join(db);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{slot}.toml"));
    let head = crate::config::config_head(
        (&s.pg_host, s.pg_port, &s.pg_user),
        db,
        Some(slot),
        topic_prefix,
        &s.kafka_bootstrap,
    );
    let text = format!(
        r#"{head}
[kafka.properties]
"message.timeout.ms" = "120000"

[relay]
drain_timeout_secs = 20
create_slot = true
{extra}
"#
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// A relay's log without terminal colour codes.
pub fn plain(log: &str) -> String {
    let mut plain = String::with_capacity(log.len());
    let mut chars = log.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d == 'm' {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

/// The WARN and ERROR lines of each log, for a failure message to carry.
pub fn warnings_in(logs: &[String]) -> String {
    let mut out = String::new();
    for (i, log) in logs.iter().enumerate() {
        out.push_str(&format!("--- session {i}\n"));
        for line in plain(log)
            .lines()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The settled positions from which a relay's log says it replayed.
pub fn replays_in(log: &str) -> Vec<outbox_cdc::lsn::Lsn> {
    plain(log)
        .lines()
        .filter(|l| l.contains("restarting the pipeline"))
        .filter_map(|l| l.split("settled=").nth(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .filter_map(|lsn| lsn.parse().ok())
        .collect()
}

/// One sample (`name` or `name{labels}`) of the relay's `/metrics`.
pub fn metric(port: u16, series: &str) -> Option<f64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
}

pub struct RelayProcess {
    pub child: Child,
    pub log: PathBuf,
}

impl RelayProcess {
    pub fn spawn(config: &Path) -> RelayProcess {
        let log = config.with_file_name(format!(
            "{}-{}.log",
            config.file_stem().unwrap().to_string_lossy(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(crate::cli::bin())
            .args(["run", "--config"])
            .arg(config)
            // OUTBOX_TEST_RELAY_LOG: another filter, e.g. with
            // librdkafka=debug to read its debug contexts.
            .env(
                "OUTBOX_CDC_LOG",
                std::env::var("OUTBOX_TEST_RELAY_LOG").unwrap_or("info,rdkafka=warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .unwrap();
        RelayProcess { child, log }
    }

    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the exit status (None after `timeout`).
    pub fn wait(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
