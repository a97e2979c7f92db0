//! The `outbox-cdc` binary as a command: one builder for every test that
//! runs it, instead of a copy per file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The binary cargo built beside the test (or the bench) that runs this:
/// test executables live in `target/<profile>/deps`, binaries one up.
/// `OUTBOX_CDC_BIN` points elsewhere.
pub fn bin() -> PathBuf {
    if let Ok(path) = std::env::var("OUTBOX_CDC_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("the test's executable: {e}"));
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("{} is not in target/<profile>/deps", exe.display()));
    let bin = profile.join("outbox-cdc");
    assert!(
        bin.exists(),
        "{} is missing: cargo builds it with the tests",
        bin.display()
    );
    bin
}

/// A run of `outbox-cdc` with arguments, a configuration and variables.
pub struct Cli {
    cmd: Command,
}

impl Cli {
    pub fn new(args: &[&str]) -> Cli {
        let mut cmd = Command::new(bin());
        cmd.args(args);
        Cli { cmd }
    }

    /// `--config FILE`.
    pub fn config(mut self, path: &Path) -> Cli {
        self.cmd.arg("--config").arg(path);
        self
    }

    pub fn env(mut self, name: &str, value: &str) -> Cli {
        self.cmd.env(name, value);
        self
    }

    pub fn envs(mut self, vars: &[(&str, &str)]) -> Cli {
        for (k, v) in vars {
            self.cmd.env(k, v);
        }
        self
    }

    /// `OUTBOX_CDC_LOG` as given, or unset (the binary's default filter).
    pub fn log(mut self, filter: Option<&str>) -> Cli {
        match filter {
            Some(f) => self.cmd.env("OUTBOX_CDC_LOG", f),
            None => self.cmd.env_remove("OUTBOX_CDC_LOG"),
        };
        self
    }

    pub fn current_dir(mut self, dir: &Path) -> Cli {
        self.cmd.current_dir(dir);
        self
    }

    /// The command itself, for a test that spawns it.
    pub fn command(self) -> Command {
        self.cmd
    }

    /// Runs it to the end.
    pub fn output(mut self) -> Output {
        self.cmd
            .output()
            .unwrap_or_else(|e| panic!("running outbox-cdc: {e}"))
    }
}

/// Standard output and error as text, for messages.
pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
