//! Carries a plan out: the commands of each step, the environment the
//! services export, the steps beside the others and their joins, the
//! totals and the timings.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};

use super::exec::{self, Cmd, Env, Finished};
use super::plan::{Action, Job, OnFailure};
use super::report::{self, Background, Outcome, Timing};
use crate::config::{Config, Vars};

/// The test crates run as executables, by their root files.
const EXECUTABLES: [&str; 5] = [
    "tests/it/main.rs",
    "tests/failover/main.rs",
    "tests/faults/main.rs",
    "tests/network/main.rs",
    "tests/cluster/main.rs",
];

/// Whether this run started the services (and so stops them at the end).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Started {
    No,
    Yes,
}

pub struct Runner {
    repo: PathBuf,
    xtask: PathBuf,
    process: Vars,
    env: Env,
    began: Instant,
    started: Started,
    /// Where the steps beside the others write.
    logs: PathBuf,
    build_output: String,
    /// The counted output: libtest's results.
    results: String,
    failed: Vec<String>,
    running: Vec<(Job, JoinHandle<Finished>)>,
    outcomes: Vec<(Job, Outcome)>,
    timings: Vec<Timing>,
    cluster_began: Option<Instant>,
    /// The Go tools the `Tools` step builds.
    tools: Vec<crate::tools::Tool>,
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Ctrl-C or SIGTERM ends the run after the step under way (whose
/// processes get the signal themselves), so the services it started are
/// still stopped. Children run with the default handling again.
pub fn catch_interrupts() {
    let handler = on_interrupt as extern "C" fn(libc::c_int);
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, handler as libc::sighandler_t);
        libc::signal(libc::SIGTERM, handler as libc::sighandler_t);
    }
}

/// The time of day for the step lines.
fn now() -> String {
    report::utc_time_of_day(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default(),
    )
}

fn step_line(text: &str) {
    eprintln!("\n==> [{}] {text}", now());
}

impl Runner {
    pub fn new(repo: PathBuf) -> Result<Runner> {
        let xtask = std::env::current_exe().context("this program's path")?;
        let mut env = Env::default();
        // Snapshots are compared, never written, by this command.
        env.set("INSTA_UPDATE", "no");
        // The services command the tests call runs this very program.
        env.set("OUTBOX_XTASK_BIN", &xtask.display().to_string());
        env.set("OUTBOX_XTASK_REPO", &repo.display().to_string());
        Ok(Runner {
            logs: crate::process::temp_dir("suite")?,
            repo,
            xtask,
            process: Vars::from_process(),
            env,
            began: Instant::now(),
            started: Started::No,
            build_output: String::new(),
            results: String::new(),
            failed: Vec::new(),
            running: Vec::new(),
            outcomes: Vec::new(),
            timings: Vec::new(),
            cluster_began: None,
            tools: Vec::new(),
        })
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.current_dir(&self.repo);
        self.env.apply(&mut c);
        c
    }

    fn cargo(&self, args: &[&str]) -> Command {
        let mut c = self.command("cargo");
        c.args(args);
        c
    }

    /// This program's `services COMMAND`, with `env`.
    fn services(&self, env: &Env, command: &str) -> Command {
        let mut c = Command::new(&self.xtask);
        c.current_dir(&self.repo).args(["services", command]);
        env.apply(&mut c);
        c
    }

    /// The environment for PostgreSQL `major`: its own cluster and default
    /// port.
    fn major_env(&self, major: u8) -> Env {
        self.env
            .with("OUTBOX_TEST_PG_MAJOR", &major.to_string())
            .without("OUTBOX_TEST_PG_PORT")
    }

    /// `eval "$(services env)"` in `env`: the services' exports.
    fn exports(&self, env: &Env) -> Result<Env> {
        let cfg = Config::new(&env.vars(&self.process), &self.repo, crate::process::uid())?;
        let mut out = env.clone();
        for (name, value) in cfg.exports() {
            out.set(name, &value);
        }
        Ok(out)
    }

    fn exe(&self, root: &str) -> Result<Command> {
        let path = report::executable(&self.build_output, root)
            .ok_or_else(|| anyhow!("cannot find the executable of {root}"))?;
        let mut c = Command::new(path);
        c.current_dir(&self.repo);
        self.env.apply(&mut c);
        Ok(c)
    }

    fn outcome(&self, job: Job) -> Option<Outcome> {
        self.outcomes
            .iter()
            .rev()
            .find(|(j, _)| *j == job)
            .map(|(_, o)| *o)
    }

    fn skipped(&self, job: Job) -> bool {
        job.requires()
            .is_some_and(|dep| self.outcome(dep) != Some(Outcome::Passed))
    }

    fn record(&mut self, job: Job, finished: &Finished, background: Background) -> Result<()> {
        let outcome = if finished.passed {
            Outcome::Passed
        } else {
            Outcome::Failed
        };
        self.outcomes.push((job, outcome));
        self.timings.push(Timing {
            step: job.name(),
            background,
            start: finished.start,
            took: finished.took,
            outcome,
        });
        if finished.passed {
            return Ok(());
        }
        match job.on_failure() {
            OnFailure::Abort => bail!("{} failed", job.name()),
            OnFailure::Record => {
                self.failed.push(job.name());
                Ok(())
            }
        }
    }

    /// Runs the plan; Err when a step that everything after it needs
    /// failed.
    /// `tools` are what the `Tools` step builds (the whole suite's, when
    /// the plan is cut to a few steps).
    pub fn execute(&mut self, plan: &[Action], tools: Vec<crate::tools::Tool>) -> Result<()> {
        self.tools = tools;
        for (i, action) in plan.iter().enumerate() {
            if INTERRUPTED.load(Ordering::SeqCst) {
                bail!("interrupted");
            }
            match action {
                Action::Header(text) => {
                    let next_skipped =
                        matches!(plan.get(i + 1), Some(Action::Run(j)) if self.skipped(*j));
                    if !next_skipped {
                        step_line(text);
                    }
                }
                Action::Run(job) if self.skipped(*job) => {
                    self.outcomes.push((*job, Outcome::Skipped));
                }
                Action::Run(job) => {
                    let start = self.began.elapsed();
                    let at = Instant::now();
                    let passed = self.run(*job)?;
                    let finished = Finished {
                        passed,
                        start,
                        took: at.elapsed(),
                        log: PathBuf::new(),
                    };
                    self.record(*job, &finished, Background::No)?;
                }
                Action::Spawn(job) => self.spawn(*job)?,
                Action::Join(job) => self.join(*job)?,
            }
        }
        Ok(())
    }

    fn spawn(&mut self, job: Job) -> Result<()> {
        let (cmds, preface) = self.background_commands(job)?;
        let log = self
            .logs
            .join(format!("{job:?}.log").replace(['(', ')'], ""));
        let handle = exec::spawn(cmds, log, preface, self.began);
        self.running.push((job, handle));
        Ok(())
    }

    fn background_commands(&mut self, job: Job) -> Result<(Vec<Cmd>, String)> {
        let one = |c: Command| vec![Cmd::new(c)];
        Ok(match job {
            Job::Services => {
                // A fresh set in CI; locally, reuse running ones and leave
                // them running.
                if self.process.get("CI").is_some() {
                    exec::inherit(&mut self.services(&self.env, "reset"))?;
                }
                let status = exec::inherit_output(&mut self.services(&self.env, "status"))?;
                let up =
                    status.contains("postgresql: running") && status.contains("kafka: running");
                if !up {
                    self.started = Started::Yes;
                }
                (one(self.services(&self.env, "start")), String::new())
            }
            Job::Tools => {
                let mut c = self.services(&self.env, "tools");
                c.args(self.tools.iter().map(|t| t.name()));
                (one(c), String::new())
            }
            Job::Artifacts => (self.artifacts(), String::new()),
            Job::Failover => (one(self.exe(EXECUTABLES[1])?), String::new()),
            Job::Network => {
                let mut c = self.exe(EXECUTABLES[3])?;
                c.args(["--skip", "soak::"]);
                (one(c), String::new())
            }
            Job::Cluster => (one(self.exe(EXECUTABLES[4])?), String::new()),
            Job::Major(m) => {
                let env = self.exports(&self.major_env(m))?;
                let tests = Job::major_tests(m);
                let mut c = self.exe(EXECUTABLES[0])?;
                env.apply(&mut c);
                c.args(&tests);
                (one(c), format!("PostgreSQL {m}: {}", tests.join(" ")))
            }
            other => bail!("{} does not run in the background", other.name()),
        })
    }

    /// The shipped artifacts, in a target directory of their own, without
    /// clippy's driver, at the lowest priority.
    fn artifacts(&self) -> Vec<Cmd> {
        let env = self
            .env
            .without("RUSTC_WORKSPACE_WRAPPER")
            .without("CLIPPY_ARGS")
            .with(
                "CARGO_TARGET_DIR",
                &self.repo.join("target/ship").display().to_string(),
            );
        let nice = |script: &str, arg: Option<&str>| {
            let mut c = Command::new("nice");
            c.current_dir(&self.repo)
                .args(["-n", "19", script])
                .args(arg);
            env.apply(&mut c);
            Cmd::new(c)
        };
        let mut image = nice("scripts/image.sh", None);
        image.stdout = Some(self.logs.join("image"));
        vec![
            nice("scripts/book.sh", Some("install")),
            image,
            nice("scripts/chart-check.sh", None),
            nice("scripts/deb.sh", Some("tools")),
        ]
    }

    fn join(&mut self, job: Job) -> Result<()> {
        let at = self
            .running
            .iter()
            .position(|(j, _)| *j == job)
            .ok_or_else(|| anyhow!("{} was not started", job.name()))?;
        let (_, handle) = self.running.remove(at);
        let finished = handle
            .join()
            .map_err(|_| anyhow!("{} panicked", job.name()))?;
        let output = std::fs::read_to_string(&finished.log).unwrap_or_default();
        if job.counts() {
            print!("{output}");
            self.results.push_str(&output);
        } else {
            eprint!("{output}");
        }
        if job == Job::Cluster {
            if let Some(began) = self.cluster_began {
                eprintln!(
                    "the Kafka cluster's faults took {} s",
                    began.elapsed().as_secs()
                );
            }
        }
        if job == Job::Artifacts && !finished.passed {
            eprintln!("building or checking the shipped artifacts failed");
        }
        self.record(job, &finished, Background::Yes)?;
        match job {
            Job::Services => self.env = self.exports(&self.env)?,
            Job::Artifacts if finished.passed => self.image_env()?,
            _ => {}
        }
        Ok(())
    }

    /// The image the artifacts built, and podman's API for testcontainers.
    fn image_env(&mut self) -> Result<()> {
        let image = std::fs::read_to_string(self.logs.join("image")).unwrap_or_default();
        let image = image.lines().next().unwrap_or_default().to_string();
        self.env.set("OUTBOX_TEST_IMAGE", &image);
        let mut socket = self.command("scripts/podman.sh");
        let docker_host = exec::inherit_output(socket.arg("socket"))?;
        self.env.set("DOCKER_HOST", docker_host.trim());
        Ok(())
    }

    /// Runs a foreground step; whether it passed.
    fn run(&mut self, job: Job) -> Result<bool> {
        let teed = |runner: &mut Runner, mut c: Command| -> Result<bool> {
            let (status, output) = exec::tee(&mut c)?;
            if job.counts() {
                runner.results.push_str(&output);
            }
            Ok(status.success())
        };
        let plain = |mut c: Command| -> Result<bool> { Ok(exec::inherit(&mut c)?.success()) };
        match job {
            Job::Fmt => plain(self.cargo(&["fmt", "--all", "--", "--check"])),
            Job::Build => self.build(),
            Job::UnitTests => {
                let c = self.cargo(&[
                    "test",
                    "--lib",
                    "--bins",
                    "--test",
                    "architecture",
                    "--test",
                    "packaging",
                ]);
                teed(self, c)
            }
            Job::XtaskTests => {
                let c = self.cargo(&["test", "-p", "xtask"]);
                teed(self, c)
            }
            Job::Integration => {
                let mut c = self.exe(EXECUTABLES[0])?;
                c.args(["--skip", "image::", "--skip", "book::"]);
                teed(self, c)
            }
            Job::TransactionalRestarts => {
                let mut c = self.exe(EXECUTABLES[2])?;
                c.arg("transactional_delivery");
                teed(self, c)
            }
            Job::Restarts(m) => {
                let env = self.exports(&self.major_env(m))?;
                let mut c = self.exe(EXECUTABLES[2])?;
                env.apply(&mut c);
                c.args(["--skip", "transactional_delivery"]);
                teed(self, c)
            }
            Job::Soak => {
                self.env = self.exports(&self.major_env(15))?;
                let mut c = self.exe(EXECUTABLES[3])?;
                c.arg("soak::");
                teed(self, c)
            }
            Job::Proxies => plain(self.services(&self.env, "start-proxies")),
            Job::StartPostgres(m) => plain(self.services(&self.major_env(m), "start-postgres")),
            Job::StopPostgres(m) => plain(self.services(&self.major_env(m), "stop-postgres")),
            Job::StartCluster => {
                self.cluster_began = Some(Instant::now());
                plain(self.services(&self.env, "start-cluster"))
            }
            Job::StopCluster => plain(self.services(&self.env, "stop-cluster")),
            Job::Quickstart => self.quickstart(),
            Job::ImageTests => {
                let c = self.cargo(&["test", "--test", "it", "--no-fail-fast", "--", "image::"]);
                teed(self, c)
            }
            Job::BookTests => {
                let c = self.cargo(&["test", "--test", "it", "--no-fail-fast", "--", "book::"]);
                teed(self, c)
            }
            Job::Deb => {
                // The release build the image's step made, without clippy's
                // driver (a build with it would be another build).
                let mut c = self.command("scripts/deb.sh");
                c.env_remove("RUSTC_WORKSPACE_WRAPPER")
                    .env_remove("CLIPPY_ARGS")
                    .env("CARGO_TARGET_DIR", self.repo.join("target/ship"));
                plain(c)
            }
            other => bail!("{} does not run in the foreground", other.name()),
        }
    }

    /// One compilation, linted as it compiles: clippy's driver is the
    /// compiler of the workspace's own crates (what `cargo clippy` does, but
    /// building instead of only checking), so the lints and the test build
    /// do not compile the tree twice. Every cargo after it keeps these
    /// variables, so nothing is built again; the shipped artifacts' release
    /// build drops them.
    fn build(&mut self) -> Result<bool> {
        let driver = clippy_driver()?;
        self.env.set("RUSTC_WORKSPACE_WRAPPER", &driver);
        self.env.set(
            "CLIPPY_ARGS",
            "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__",
        );
        let (status, output) =
            exec::tee(&mut self.cargo(&["test", "--workspace", "--all-targets", "--no-run"]))?;
        self.build_output = output;
        if !status.success() {
            return Ok(false);
        }
        for root in EXECUTABLES {
            self.exe(root)?;
        }
        Ok(true)
    }

    /// The README's first command, end to end, with the binary the tests
    /// ran (its own build, the quickstart profile, is a plain cargo build).
    fn quickstart(&mut self) -> Result<bool> {
        let log = self.logs.join("quickstart.log");
        let mut c = self.command("scripts/quickstart.sh");
        c.env("OUTBOX_CDC_BIN", self.repo.join("target/debug/outbox-cdc"));
        let done = exec::spawn(vec![Cmd::new(c)], log.clone(), String::new(), self.began)
            .join()
            .map_err(|_| anyhow!("the quickstart panicked"))?;
        let output = std::fs::read_to_string(&log).unwrap_or_default();
        if done.passed {
            let lines: Vec<&str> = output.lines().collect();
            for line in &lines[lines.len().saturating_sub(5)..] {
                println!("{line}");
            }
        } else {
            eprint!("{output}");
            eprintln!("the quickstart failed");
        }
        Ok(done.passed)
    }

    /// Stops the services if this run started them.
    pub fn cleanup(&mut self) {
        if self.started == Started::Yes {
            let _ = exec::inherit(&mut self.services(&self.env, "stop"));
            self.started = Started::No;
        }
        let _ = std::fs::remove_dir_all(&self.logs);
    }

    /// The timings table, the totals line, and the exit code.
    pub fn finish(&self) -> i32 {
        eprintln!(
            "\nper-step timings:\n{}",
            report::timing_table(&self.timings, self.began.elapsed())
        );
        let totals = report::totals(&self.results);
        step_line("done");
        for name in &self.failed {
            eprintln!("failed: {name}");
        }
        println!("tests: {} passed, {} failed", totals.passed, totals.failed);
        i32::from(!self.failed.is_empty())
    }

    /// The timings so far, after a step stopped the run.
    pub fn abort(&self, err: &anyhow::Error) -> i32 {
        eprintln!(
            "\nper-step timings:\n{}",
            report::timing_table(&self.timings, self.began.elapsed())
        );
        eprintln!("the suite stopped: {err:#}");
        1
    }
}

/// clippy's driver: rustup's, or the one on the PATH.
fn clippy_driver() -> Result<String> {
    let rustup = Command::new("rustup")
        .args(["which", "clippy-driver"])
        .output();
    if let Ok(out) = rustup {
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !path.is_empty() {
            return Ok(path);
        }
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("clippy-driver"))
                .find(|p| p.is_file())
        })
        .map(|p| p.display().to_string())
        .ok_or_else(|| anyhow!("clippy-driver is missing (rustup component add clippy)"))
}
