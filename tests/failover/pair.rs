//! Two PostgreSQL 17 clusters of the test's own: a primary and a
//! streaming physical standby made by copying the stopped primary's data
//! directory, stopped when dropped.

use super::*;

const MAJOR: &str = "17";

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false)
}

/// PostgreSQL 17's server binaries, installed by `scripts/services.sh`.
fn pg_bin() -> PathBuf {
    let script = std::env::var("OUTBOX_TEST_SERVICES").expect("OUTBOX_TEST_SERVICES");
    let out = Command::new("bash")
        .args([script.as_str(), "pg-bin", MAJOR])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "services.sh pg-bin {MAJOR}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// `exe` as the user PostgreSQL runs as (it refuses root).
fn as_postgres(exe: &std::path::Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(exe);
        c
    } else {
        Command::new(exe)
    }
}

/// One cluster of the pair, on its own port.
pub(crate) struct Cluster {
    pub(crate) bin: PathBuf,
    pub(crate) data: PathBuf,
    pub(crate) port: u16,
}

impl Cluster {
    pub(crate) fn run(&self, tool: &str, args: &[&str]) {
        let out = as_postgres(&self.bin.join(tool))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let log = std::fs::read_to_string(self.data.join("server.log")).unwrap_or_default();
        assert!(
            out.status.success(),
            "{tool} {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            log.lines().rev().take(20).collect::<Vec<_>>().join("\n")
        );
    }

    pub(crate) fn pg_ctl(&self, args: &[&str]) {
        let data = self.data.display().to_string();
        let log = self.data.join("server.log").display().to_string();
        let mut all = vec!["-D", data.as_str(), "-l", log.as_str(), "-w", "-t", "120"];
        all.extend_from_slice(args);
        self.run("pg_ctl", &all);
    }

    pub(crate) fn append_conf(&self, text: &str) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.data.join("postgresql.conf"))
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    pub(crate) async fn connect(&self, db: &str) -> Client {
        let (client, conn) = tokio_postgres::Config::new()
            .host("127.0.0.1")
            .port(self.port)
            .user("postgres")
            .dbname(db)
            .connect(NoTls)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL on {}: {e}", self.port));
        tokio::spawn(async move {
            let _ = conn.await;
        });
        client
    }
}

/// A primary and a standby streaming from it through physical slot
/// `standby1`, with slot synchronisation on and the primary waiting for the
/// standby before it sends logical changes.
pub(crate) struct Pair {
    pub(crate) root: PathBuf,
    pub(crate) primary: Cluster,
    pub(crate) standby: Cluster,
}

impl Pair {
    pub(crate) async fn start(label: &str, base_port: u16) -> Pair {
        let bin = pg_bin();
        let root = std::env::temp_dir().join(format!(
            "outbox-cdc-failover-{label}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        if is_root() {
            let status = Command::new("chown")
                .args(["postgres:"])
                .arg(&root)
                .status()
                .unwrap();
            assert!(status.success());
        }
        let primary = Cluster {
            bin: bin.clone(),
            data: root.join("primary"),
            port: base_port,
        };
        let standby = Cluster {
            bin,
            data: root.join("standby"),
            port: base_port + 1,
        };
        let data = primary.data.display().to_string();
        primary.run(
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
            ],
        );
        let socket = root.display().to_string();
        primary.append_conf(&format!(
            "listen_addresses = '127.0.0.1'\nport = {}\nunix_socket_directories = '{socket}'\n\
             wal_level = logical\nmax_wal_senders = 20\nmax_replication_slots = 20\nhot_standby = on\n\
             wal_sender_timeout = 10s\nwal_receiver_status_interval = 1s\nfsync = off\n\
             synchronized_standby_slots = 'standby1'\n",
            primary.port
        ));
        std::fs::write(
            primary.data.join("pg_hba.conf"),
            "local all all trust\nlocal replication all trust\nhost all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n",
        )
        .unwrap();
        primary.pg_ctl(&["start"]);
        let admin = primary.connect("postgres").await;
        admin
            .batch_execute("SELECT pg_create_physical_replication_slot('standby1')")
            .await
            .unwrap();
        drop(admin);
        // No pg_basebackup in the package: a cleanly stopped primary's
        // directory is a valid base for a standby.
        primary.pg_ctl(&["-m", "fast", "stop"]);
        let mut cmd = as_postgres(std::path::Path::new("cp"));
        cmd.arg("-a");
        assert!(cmd
            .arg(&primary.data)
            .arg(&standby.data)
            .status()
            .unwrap()
            .success());
        let _ = std::fs::remove_file(standby.data.join("server.log"));
        standby.append_conf(&format!(
            "port = {}\nprimary_conninfo = 'host=127.0.0.1 port={} user=postgres dbname=postgres application_name=standby1'\n\
             primary_slot_name = 'standby1'\nhot_standby_feedback = on\nsync_replication_slots = on\n\
             synchronized_standby_slots = ''\n",
            standby.port, primary.port
        ));
        let signal = standby.data.join("standby.signal");
        std::fs::write(&signal, "").unwrap();
        if is_root() {
            let status = Command::new("chown")
                .args(["postgres:"])
                .arg(&signal)
                .status()
                .unwrap();
            assert!(status.success());
        }
        primary.pg_ctl(&["start"]);
        standby.pg_ctl(&["start"]);
        Pair {
            root,
            primary,
            standby,
        }
    }

    pub(crate) fn services(&self, kafka: &str) -> common::Services {
        common::Services {
            pg_host: "127.0.0.1".into(),
            pg_port: self.primary.port,
            pg_user: "postgres".into(),
            pg_password: "unused-under-trust".into(),
            kafka_bootstrap: kafka.into(),
        }
    }

    /// The relay's configuration: both hosts, libpq's multi-host form.
    pub(crate) fn relay_config(
        &self,
        db: &str,
        prefix: &str,
        slot_kind: SlotKind,
    ) -> (String, PathBuf) {
        let failover = slot_kind == SlotKind::Failover;
        let slot = format!("{db}_relay");
        let services = self.services(&common::services().unwrap().kafka_bootstrap);
        let path = relay::config(&services, db, prefix, &slot, "");
        let text = std::fs::read_to_string(&path).unwrap().replacen(
            &format!("host = \"127.0.0.1\"\nport = {}\n", self.primary.port),
            &format!(
                "host = \"127.0.0.1,127.0.0.1\"\nport = \"{},{}\"\nfailover_slot = {failover}\nconnect_timeout_secs = 3\n",
                self.primary.port, self.standby.port
            ),
            1,
        );
        assert!(text.contains("failover_slot"), "{text}");
        std::fs::write(&path, text).unwrap();
        (slot, path)
    }
}

/// Whether the relay's slot is made with `FAILOVER` (`postgres.failover_slot`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotKind {
    Failover,
    PrimaryOnly,
}

impl Drop for Pair {
    fn drop(&mut self) {
        for c in [&self.primary, &self.standby] {
            if c.data.join("postmaster.pid").exists() {
                let data = c.data.display().to_string();
                let _ = as_postgres(&c.bin.join("pg_ctl"))
                    .args(["-D", &data, "-m", "immediate", "stop"])
                    .stdin(Stdio::null())
                    .output();
            }
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
