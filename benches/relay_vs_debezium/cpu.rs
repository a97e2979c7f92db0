//! CPU accounting from /proc: each process's time and memory, the
//! machine's busy time split by process group, sampled over the window a
//! throughput is measured in.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::numbers::{now_ms, round};
use anyhow::Result;
use serde_json::{json, Value as Json};

/// CPU seconds and peak resident memory of a process, from /proc.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Usage {
    pub(crate) cpu_s: f64,
    pub(crate) peak_rss_mib: f64,
}

pub(crate) fn usage(pid: u32) -> Result<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat (utime, stime) in USER_HZ (100 on Linux).
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let hwm_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    Ok(Usage {
        cpu_s: (ticks(11) + ticks(12)) / 100.0,
        peak_rss_mib: hwm_kib / 1024.0,
    })
}

/// Busy and total jiffies of the whole machine, from /proc/stat.
pub(crate) fn machine_cpu() -> (u64, u64) {
    let v = machine_fields();
    let total: u64 = v.iter().sum();
    // idle and iowait
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

/// CPU ticks of every live process, named by what it is (a walsender, a
/// PostgreSQL backend, the broker, ...), so the machine's time in a window
/// can be split among them.
pub(crate) fn processes() -> HashMap<u32, (String, u64)> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let (head, rest) = stat.rsplit_once(") ").unwrap_or(("", ""));
        let comm = head.split_once(" (").map_or("", |(_, c)| c);
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        out.insert(pid, (process_group(comm, &cmdline), ticks(11) + ticks(12)));
    }
    out
}

pub(crate) fn process_group(comm: &str, cmdline: &str) -> String {
    if let Some(rest) = cmdline.strip_prefix("postgres: ") {
        for role in [
            "walsender",
            "autovacuum",
            "checkpointer",
            "walwriter",
            "background writer",
        ] {
            if rest.contains(role) {
                return format!("postgres {role}");
            }
        }
        return "postgres backend".into();
    }
    if comm == "postgres" {
        // A backend that has exited but is not yet reaped has no cmdline.
        return if cmdline.contains(" -D ") {
            "postgres postmaster".into()
        } else {
            "postgres backend".into()
        };
    }
    if cmdline.contains("relay_vs_debezium") {
        return "bench".into();
    }
    if cmdline.contains("ConnectDistributed") {
        return "kafka connect".into();
    }
    if cmdline.contains("kafka.Kafka") {
        return "kafka broker".into();
    }
    if cmdline.contains("debezium-server") || cmdline.contains("io.debezium.server") {
        return "debezium server".into();
    }
    if comm.starts_with("kworker") {
        return "kernel workers".into();
    }
    comm.to_string()
}

/// Where the machine's busy time went between two readings, in µs per
/// message: each group of live processes, the kernel's interrupt handling
/// (loopback TCP is received there) and time the hypervisor took (steal);
/// what is left (processes that came and went) is "other".
pub(crate) fn machine_shares(
    p0: &HashMap<u32, (String, u64)>,
    p1: &HashMap<u32, (String, u64)>,
    m0: &[u64],
    m1: &[u64],
    messages: usize,
) -> Json {
    let jiffy = |i: usize| {
        m1.get(i)
            .copied()
            .unwrap_or(0)
            .saturating_sub(m0.get(i).copied().unwrap_or(0)) as f64
            * 10_000.0
    };
    // /proc/stat: user nice system idle iowait irq softirq steal
    let busy = jiffy(0) + jiffy(1) + jiffy(2) + jiffy(5) + jiffy(6) + jiffy(7);
    let mut by: HashMap<String, f64> = HashMap::new();
    for (pid, (group, t1)) in p1 {
        let t0 = p0.get(pid).map_or(0, |(_, t)| *t);
        *by.entry(group.clone()).or_default() += t1.saturating_sub(t0) as f64 * 10_000.0;
    }
    let irq = jiffy(5) + jiffy(6);
    let steal = jiffy(7);
    let attributed: f64 = by.values().sum::<f64>() + irq + steal;
    by.insert("kernel interrupts".into(), irq);
    by.insert("steal".into(), steal);
    by.insert("other".into(), (busy - attributed).max(0.0));
    let mut v: Vec<(String, f64)> = by.into_iter().filter(|(_, us)| *us > 0.0).collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    let per = messages.max(1) as f64;
    Json::Object(
        v.into_iter()
            .take(10)
            .map(|(g, us)| (g, json!(round(us / per, 1))))
            .collect(),
    )
}

/// The cpu line of /proc/stat, in jiffies.
pub(crate) fn machine_fields() -> Vec<u64> {
    std::fs::read_to_string("/proc/stat")
        .unwrap_or_default()
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect()
}

/// A scenario's machine CPU per message counted from its first record to
/// its last: what its throughput is measured over.
pub(crate) const WINDOW_COST: &str = "machine_cpu_us_per_msg_first_to_last";

/// The machine's busy jiffies every few milliseconds, so its CPU time can
/// be counted over the window a throughput is measured in (first to last
/// record) rather than over the whole run around it: start-up and the
/// tail would otherwise count against some scenarios and not others.
pub(crate) struct CpuTrace {
    pub(crate) samples: Arc<Mutex<Vec<(f64, u64)>>>,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) thread: std::thread::JoinHandle<()>,
}

impl CpuTrace {
    pub(crate) fn start() -> CpuTrace {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (samples, stop) = (samples.clone(), stop.clone());
            move || {
                while !stop.load(Ordering::Relaxed) {
                    let busy = machine_cpu().0;
                    if let Ok(mut v) = samples.lock() {
                        v.push((now_ms(), busy));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        });
        CpuTrace {
            samples,
            stop,
            thread,
        }
    }

    /// Busy CPU time between two wall-clock instants (ms since the epoch),
    /// in µs, each end interpolated between the samples around it.
    pub(crate) fn busy_us(self, from_ms: f64, to_ms: f64) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        let samples = self.samples.lock().map(|v| v.clone()).unwrap_or_default();
        let at = |t: f64| -> f64 {
            let i = samples.partition_point(|(ms, _)| *ms <= t);
            match (
                i.checked_sub(1).and_then(|j| samples.get(j)),
                samples.get(i),
            ) {
                (Some(&(t0, b0)), Some(&(t1, b1))) if t1 > t0 => {
                    b0 as f64 + (b1 as f64 - b0 as f64) * (t - t0) / (t1 - t0)
                }
                (Some(&(_, b)), _) | (None, Some(&(_, b))) => b as f64,
                (None, None) => 0.0,
            }
        };
        (at(to_ms) - at(from_ms)).max(0.0) * 10_000.0
    }
}

/// Busy CPU time of the whole machine between two readings, in µs.
pub(crate) fn jiffies_us(from: (u64, u64), to: (u64, u64)) -> f64 {
    to.0.saturating_sub(from.0) as f64 * 10_000.0
}
