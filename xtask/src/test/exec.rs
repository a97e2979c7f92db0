//! How the suite runs a command: its environment (the process's, plus what
//! the suite exports as it goes), in the foreground with its output shown
//! and kept (`tee`), or beside the rest with its output in a file.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::config::Vars;

/// The variables the suite sets or removes for the commands it runs.
#[derive(Clone, Debug, Default)]
pub struct Env {
    set: BTreeMap<String, String>,
    unset: BTreeSet<String>,
}

impl Env {
    pub fn set(&mut self, name: &str, value: &str) {
        self.unset.remove(name);
        self.set.insert(name.to_string(), value.to_string());
    }

    pub fn unset(&mut self, name: &str) {
        self.set.remove(name);
        self.unset.insert(name.to_string());
    }

    /// A copy with `name` set.
    pub fn with(&self, name: &str, value: &str) -> Env {
        let mut e = self.clone();
        e.set(name, value);
        e
    }

    /// A copy without `name`.
    pub fn without(&self, name: &str) -> Env {
        let mut e = self.clone();
        e.unset(name);
        e
    }

    pub fn apply(&self, cmd: &mut Command) {
        for name in &self.unset {
            cmd.env_remove(name);
        }
        cmd.envs(&self.set);
    }

    /// The environment a command would see, as the services read it.
    pub fn vars(&self, process: &Vars) -> Vars {
        let mut v = process.clone();
        for name in &self.unset {
            v.remove(name);
        }
        for (name, value) in &self.set {
            v.set(name, value);
        }
        v
    }
}

/// One command of a step, and where its standard output goes when not
/// to the step's log.
pub struct Cmd {
    pub command: Command,
    pub stdout: Option<PathBuf>,
}

impl Cmd {
    pub fn new(command: Command) -> Cmd {
        Cmd {
            command,
            stdout: None,
        }
    }
}

/// A step that ran: whether it passed, when and for how long.
pub struct Finished {
    pub passed: bool,
    pub start: Duration,
    pub took: Duration,
    pub log: PathBuf,
}

/// Runs `cmds` one after the other in a thread, all output in `log` (a
/// first line `preface` when not empty), until one fails.
pub fn spawn(
    cmds: Vec<Cmd>,
    log: PathBuf,
    preface: String,
    began: Instant,
) -> JoinHandle<Finished> {
    std::thread::spawn(move || {
        let start = began.elapsed();
        let at = Instant::now();
        let passed = run_all(cmds, &log, &preface).unwrap_or_else(|e| {
            let _ = std::fs::OpenOptions::new()
                .append(true)
                .open(&log)
                .map(|mut f| writeln!(f, "{e:#}"));
            false
        });
        Finished {
            passed,
            start,
            took: at.elapsed(),
            log,
        }
    })
}

fn run_all(cmds: Vec<Cmd>, log: &Path, preface: &str) -> Result<bool> {
    let mut file = File::create(log).with_context(|| format!("{}", log.display()))?;
    if !preface.is_empty() {
        writeln!(file, "{preface}")?;
    }
    for mut cmd in cmds {
        let out = match &cmd.stdout {
            Some(path) => File::create(path)?,
            None => file.try_clone()?,
        };
        let status = cmd
            .command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(file.try_clone()?)
            .status()
            .with_context(|| format!("cannot run {:?}", cmd.command.get_program()))?;
        if !status.success() {
            writeln!(file, "{:?} failed ({status})", cmd.command.get_program())?;
            return Ok(false);
        }
    }
    Ok(true)
}

/// Runs `cmd` in the foreground, its output (both streams) shown on our
/// standard output and returned, as `2>&1 | tee` would.
pub fn tee(cmd: &mut Command) -> Result<(ExitStatus, String)> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {:?}", cmd.get_program()))?;
    let kept = Arc::new(Mutex::new(String::new()));
    let readers: Vec<JoinHandle<()>> = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|stream| {
        let kept = Arc::clone(&kept);
        std::thread::spawn(move || copy_lines(stream, &kept))
    })
    .collect();
    let status = child.wait()?;
    for r in readers {
        let _ = r.join();
    }
    let text = std::mem::take(&mut *kept.lock().unwrap_or_else(|e| e.into_inner()));
    Ok((status, text))
}

fn copy_lines(stream: Box<dyn Read + Send>, kept: &Mutex<String>) {
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
        let text = String::from_utf8_lossy(&line);
        let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
        kept.push_str(&text);
        line.clear();
    }
}

/// Runs `cmd` in the foreground with our standard streams.
pub fn inherit(cmd: &mut Command) -> Result<ExitStatus> {
    cmd.stdin(Stdio::null())
        .status()
        .with_context(|| format!("cannot run {:?}", cmd.get_program()))
}

/// Runs `cmd` in the foreground and returns its standard output (its
/// errors go to ours); Err when it fails.
pub fn inherit_output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {:?}", cmd.get_program()))?;
    if !out.status.success() {
        anyhow::bail!("{:?} failed ({})", cmd.get_program(), out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn tee_keeps_both_streams_and_the_status() {
        let (status, text) = tee(&mut sh("echo out; echo err >&2; exit 3")).unwrap();
        assert_eq!(status.code(), Some(3));
        assert!(text.contains("out\n") && text.contains("err\n"), "{text:?}");
    }

    #[test]
    fn a_background_step_stops_at_its_first_failure() {
        let dir = crate::process::temp_dir("spawn").unwrap();
        let log = dir.join("log");
        let side = dir.join("side");
        let cmds = vec![
            Cmd {
                command: sh("echo image-name; echo building >&2"),
                stdout: Some(side.clone()),
            },
            Cmd::new(sh("echo second; exit 1")),
            Cmd::new(sh("echo never")),
        ];
        let done = spawn(cmds, log.clone(), "preface".into(), Instant::now())
            .join()
            .unwrap();
        assert!(!done.passed);
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.starts_with("preface\nbuilding\nsecond\n"), "{text:?}");
        assert!(!text.contains("never"));
        assert_eq!(std::fs::read_to_string(&side).unwrap(), "image-name\n");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_environment_layers_over_the_process() {
        let process = Vars::from_pairs(&[("A", "1"), ("B", "2")]);
        let mut env = Env::default();
        env.set("C", "3");
        env.unset("B");
        let v = env
            .with("OUTBOX_TEST_PG_MAJOR", "17")
            .without("C")
            .vars(&process);
        assert_eq!(
            (
                v.get("A"),
                v.get("B"),
                v.get("C"),
                v.get("OUTBOX_TEST_PG_MAJOR")
            ),
            (Some("1"), None, None, Some("17"))
        );
        let mut cmd = Command::new("env");
        env.apply(&mut cmd);
        let out = cmd.env("B", "outer").output().unwrap();
        // apply runs first: a later env() still wins, as with any Command.
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.lines().any(|l| l == "C=3"));
    }
}
