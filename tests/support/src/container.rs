//! The relay's container image under podman (`scripts/podman.sh`: rootful,
//! runc, the host network), for the image tests: the image
//! `scripts/image.sh` built, named by `OUTBOX_TEST_IMAGE`.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::Services;

/// The image under test; a missing variable fails the test (the suite's
/// script builds the image first).
pub fn image() -> String {
    std::env::var("OUTBOX_TEST_IMAGE").unwrap_or_else(|_| {
        panic!("OUTBOX_TEST_IMAGE: scripts/test.sh builds the image with scripts/image.sh")
    })
}

fn podman_script() -> String {
    std::env::var("OUTBOX_TEST_PODMAN").unwrap_or_else(|_| {
        let services = std::env::var("OUTBOX_TEST_SERVICES")
            .unwrap_or_else(|_| panic!("OUTBOX_TEST_SERVICES from scripts/services.sh env"));
        Path::new(&services)
            .with_file_name("podman.sh")
            .display()
            .to_string()
    })
}

/// `podman ARGS` as the project runs it.
pub fn podman(args: &[&str]) -> Output {
    Command::new("bash")
        .arg(podman_script())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("podman {args:?}: {e}"))
}

/// Standard output of a podman command that must succeed.
pub fn podman_ok(args: &[&str]) -> String {
    let out = podman(args);
    assert!(
        out.status.success(),
        "podman {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// How a container is run.
pub struct Run<'a> {
    pub name: &'a str,
    /// The configuration file on the host, mounted read-only at the image's
    /// default path.
    pub config: &'a Path,
    /// Extra `podman run` options (e.g. `--memory 64m`).
    pub options: &'a [&'a str],
    /// The relay's arguments (`run` when empty: the image's default).
    pub args: &'a [&'a str],
}

/// A relay container; removed on drop.
pub struct Container {
    pub name: String,
}

impl Container {
    /// Starts a detached container of the image with a read-only root file
    /// system, on the host network, as the image's non-root user.
    pub fn start(s: &Services, run: &Run<'_>) -> Container {
        let _ = podman(&["rm", "-f", run.name]);
        let mount = format!(
            "{}:/etc/outbox-cdc/outbox-cdc.toml:ro",
            run.config.display()
        );
        let password = format!("OUTBOX_TEST_PG_PASSWORD={}", s.pg_password);
        let image = image();
        let mut args = vec![
            "run",
            "--detach",
            // A container a failed run left behind under this name goes.
            "--replace",
            "--name",
            run.name,
            "--network",
            "host",
            "--read-only",
            "--env",
            &password,
            "--env",
            "OUTBOX_CDC_LOG_FORMAT=human",
            "--volume",
            &mount,
        ];
        args.extend_from_slice(run.options);
        args.push(&image);
        args.extend_from_slice(run.args);
        podman_ok(&args);
        Container {
            name: run.name.to_string(),
        }
    }

    /// Everything the container wrote so far.
    pub fn logs(&self) -> String {
        let out = podman(&["logs", &self.name]);
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// A field of `podman inspect` (a Go template, e.g. `{{.State.Running}}`).
    pub fn inspect(&self, format: &str) -> String {
        podman_ok(&["inspect", "--format", format, &self.name])
            .trim()
            .to_string()
    }

    pub fn running(&self) -> bool {
        self.inspect("{{.State.Running}}") == "true"
    }

    /// Waits (up to `within`) for the container to exit; its exit code.
    pub fn wait_exit(&self, within: Duration) -> i32 {
        let deadline = Instant::now() + within;
        while self.running() {
            assert!(
                Instant::now() < deadline,
                "{} still running after {within:?}:\n{}",
                self.name,
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        self.inspect("{{.State.ExitCode}}")
            .parse()
            .unwrap_or_else(|e| panic!("exit code of {}: {e}", self.name))
    }

    /// SIGKILL, as a crashed node.
    pub fn kill(&self) {
        podman_ok(&["kill", "--signal", "KILL", &self.name]);
    }

    /// SIGTERM, then SIGKILL after `grace` (`podman stop`).
    pub fn stop(&self, grace: Duration) {
        let secs = grace.as_secs().to_string();
        podman_ok(&["stop", "--time", &secs, &self.name]);
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman(&["rm", "-f", "--time", "0", &self.name]);
    }
}
