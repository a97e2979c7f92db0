//! The tools `scripts/services.sh` builds for monitoring, and a real
//! Prometheus server scraping one target every second.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A tool `scripts/services.sh` builds; missing is a failure, never a skip.
pub fn tool(var: &str) -> PathBuf {
    let path = std::env::var(var)
        .unwrap_or_else(|_| panic!("{var} from scripts/services.sh env (built by go install)"));
    assert!(Path::new(&path).exists(), "{var}={path} does not exist");
    PathBuf::from(path)
}

/// Prometheus on a free port, scraping `127.0.0.1:<target>` as job
/// `outbox-cdc`; killed and its directory removed on drop.
pub struct Prometheus {
    pub port: u16,
    child: Child,
    dir: PathBuf,
}

impl Prometheus {
    pub fn start(label: &str, target: u16) -> Prometheus {
        let port = crate::free_port();
        let dir =
            std::env::temp_dir().join(format!("outbox-cdc-prom-{}-{label}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("prometheus.yml"),
            format!(
                "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: outbox-cdc\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
            ),
        )
        .unwrap();
        let child = Command::new(tool("OUTBOX_TEST_PROMETHEUS"))
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .unwrap();
        Prometheus { port, child, dir }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
