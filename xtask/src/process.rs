//! Processes: the services' pid files, detached starts, stops that escalate,
//! commands run as PostgreSQL's user, file locks and the log lines.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader};
use std::os::unix::io::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::wait::{self, Patience, Probe};

pub fn log(message: &str) {
    eprintln!("[services] {message}");
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

pub fn uid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Whether `program` is on the PATH.
pub fn have(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| {
            let p = dir.join(program);
            p.is_file()
                && std::fs::metadata(&p).is_ok_and(|m| {
                    use std::os::unix::fs::PermissionsExt;
                    m.permissions().mode() & 0o111 != 0
                })
        })
    })
}

/// `program` as PostgreSQL's user: PostgreSQL refuses to run as root, so as
/// root it runs as the packaged user.
pub fn as_pg(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// Runs `cmd` with no input; Err with `what` when it fails to start or
/// exits unsuccessfully.
pub fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let status = cmd
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("{what}: cannot run {:?}", cmd.get_program()))?;
    if !status.success() {
        bail!("{what} ({status})");
    }
    Ok(())
}

/// Runs `cmd` with its output (both streams) in `log_file`; on failure the
/// file's last lines go to stderr and the error says `what`.
pub fn run_logged(cmd: &mut Command, log_file: &Path, what: &str) -> Result<()> {
    let out = File::create(log_file).with_context(|| format!("{}", log_file.display()))?;
    cmd.stdout(out.try_clone()?).stderr(out);
    if let Err(e) = run(cmd, what) {
        tail(log_file, 30);
        return Err(e);
    }
    Ok(())
}

/// Runs `cmd` and returns its standard output, trimmed.
pub fn output(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("{what}: cannot run {:?}", cmd.get_program()))?;
    if !out.status.success() {
        bail!("{what} ({})", out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The last `n` lines of `file` on stderr (what a failed start left).
pub fn tail(file: &Path, n: usize) {
    let Ok(f) = File::open(file) else { return };
    let lines: Vec<String> = BufReader::new(f).lines().map_while(Result::ok).collect();
    eprintln!("==> {} <==", file.display());
    for line in &lines[lines.len().saturating_sub(n)..] {
        eprintln!("{line}");
    }
}

/// Whether `file` has a line containing `needle`.
pub fn file_contains(file: &Path, needle: &str) -> bool {
    std::fs::read_to_string(file).is_ok_and(|t| t.contains(needle))
}

/// Whether `pid` runs (a zombie, exited but not yet reaped, does not).
pub fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    pid > 0 && unsafe { libc::kill(pid, 0) == 0 } && !zombie(pid)
}

fn zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // pid (comm) STATE ...: comm may hold spaces and parentheses.
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

pub fn signal(pid: i32, sig: libc::c_int) -> bool {
    // SAFETY: sending a signal to a pid we recorded.
    pid > 0 && unsafe { libc::kill(pid, sig) == 0 }
}

/// The services' pid files: `<state>/<name>.pid`.
pub struct Pids<'a> {
    pub state: &'a Path,
}

impl Pids<'_> {
    fn file(&self, name: &str) -> PathBuf {
        self.state.join(format!("{name}.pid"))
    }

    /// The live pid recorded for `name`.
    pub fn live(&self, name: &str) -> Option<i32> {
        let text = std::fs::read_to_string(self.file(name)).ok()?;
        let pid = text.trim().parse().ok()?;
        alive(pid).then_some(pid)
    }

    pub fn record(&self, name: &str, pid: u32) -> Result<()> {
        std::fs::write(self.file(name), format!("{pid}\n"))
            .with_context(|| format!("cannot write {}", self.file(name).display()))
    }

    pub fn forget(&self, name: &str) {
        let _ = std::fs::remove_file(self.file(name));
    }

    /// SIGTERM, up to 30 s to exit, then SIGKILL; the pid file goes.
    pub fn stop(&self, name: &str, label: &str) {
        if let Some(pid) = self.live(name) {
            log(&format!("stopping {label}"));
            signal(pid, libc::SIGTERM);
            let gone = wait::wait(Patience::secs(30, 500), || {
                if alive(pid) {
                    Probe::NotYet
                } else {
                    Probe::Ready
                }
            });
            if gone.is_err() {
                log(&format!("{label} ignored SIGTERM; killing it"));
                signal(pid, libc::SIGKILL);
            }
        }
        self.forget(name);
    }
}

/// Starts `cmd` in a session of its own (it outlives the command and the
/// test process that started it), output to `out`, no input, SIGHUP
/// ignored; records its pid as `name`.
pub fn start_detached(cmd: &mut Command, out: &Path, pids: &Pids, name: &str) -> Result<u32> {
    let file = File::create(out).with_context(|| format!("{}", out.display()))?;
    cmd.stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file);
    // SAFETY: setsid and signal are async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot start {:?}", cmd.get_program()))?;
    pids.record(name, child.id())?;
    Ok(child.id())
}

/// An exclusive lock on `path` for as long as the value lives (several
/// tests may install the same thing at once: one does, the others wait).
pub struct Lock(#[allow(dead_code)] File);

impl Lock {
    pub fn take(path: &Path) -> Result<Lock> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .with_context(|| format!("cannot open the lock {}", path.display()))?;
        loop {
            // SAFETY: flock on a file descriptor we own.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(Lock(file));
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(err).with_context(|| format!("cannot lock {}", path.display()));
            }
        }
    }
}

/// A fresh temporary directory under the system's.
pub fn temp_dir(label: &str) -> Result<PathBuf> {
    let base = std::env::temp_dir();
    for n in 0..1000u32 {
        let dir = base.join(format!("xtask-{label}-{}-{n}", std::process::id()));
        if std::fs::create_dir(&dir).is_ok() {
            return Ok(dir);
        }
    }
    bail!("cannot make a temporary directory in {}", base.display())
}

/// Installs Debian packages (as root), quietly.
pub fn apt_install(packages: &[&str]) -> Result<()> {
    run(
        Command::new("apt-get").args(["update", "-qq"]),
        "apt-get update",
    )?;
    run(
        Command::new("apt-get")
            .args(["install", "-y", "-qq"])
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null()),
        &format!("apt-get install {}", packages.join(" ")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_pid_file_counts_only_while_its_process_lives() {
        let dir = temp_dir("pids").unwrap();
        let pids = Pids { state: &dir };
        assert_eq!(pids.live("kafka"), None);
        pids.record("kafka", std::process::id()).unwrap();
        assert_eq!(pids.live("kafka"), Some(std::process::id() as i32));
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pids.record("gone", pid).unwrap();
        assert_eq!(pids.live("gone"), None);
        std::fs::write(dir.join("junk.pid"), "not a pid").unwrap();
        assert_eq!(pids.live("junk"), None);
        pids.forget("kafka");
        assert!(!dir.join("kafka.pid").exists());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn stop_ends_a_detached_process_and_removes_its_pid_file() {
        let dir = temp_dir("stop").unwrap();
        let pids = Pids { state: &dir };
        let pid = start_detached(
            Command::new("sleep").arg("30"),
            &dir.join("sleep.out"),
            &pids,
            "sleeper",
        )
        .unwrap();
        assert_eq!(pids.live("sleeper"), Some(pid as i32));
        let began = std::time::Instant::now();
        pids.stop("sleeper", "the sleeper");
        // It is our child, a zombie until reaped: that counts as gone.
        assert!(!alive(pid as i32));
        assert!(began.elapsed() < Duration::from_secs(5));
        assert!(!dir.join("sleeper.pid").exists());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_lock_excludes_a_second_holder_until_dropped() {
        let dir = temp_dir("lock").unwrap();
        let path = dir.join(".lock");
        let first = Lock::take(&path).unwrap();
        let other = File::open(&path).unwrap();
        // SAFETY: a non-blocking try on our own descriptor.
        let busy = unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_eq!(busy, -1);
        drop(first);
        // SAFETY: as above.
        let free = unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_eq!(free, 0);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
