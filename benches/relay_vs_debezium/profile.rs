//! Where the relay's time goes (`--only profile`): the relay drains a
//! backlog of 100-row transactions under `perf record -e cpu-clock` (this
//! machine's perf has no hardware counters), and inferno folds the samples
//! into a flame graph beside the tables. The folded stacks give the
//! largest costs by function, itself and with what it calls.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use serde_json::{json, Value as Json};

use crate::args::Args;
use crate::collect::Collector;
use crate::engine::Engine;
use crate::engines::{drop_bench, prepare, terminate, write_backlog};
use crate::numbers::round;
use crate::services::Services;

/// The flame graph's file, beside the charts.
pub(crate) const FLAME_GRAPH: &str = "benchmark-flamegraph.svg";

/// Samples per second: a prime, so the sampling does not beat with the
/// relay's own timers.
const FREQUENCY: &str = "997";

/// Frames listed per table.
const TOP: usize = 12;

pub(crate) async fn profile(s: &Services, a: &Args) -> Result<Json> {
    let tools = inferno_dir()?;
    let engine = Engine::Relay;
    let rows = a.profile_rows;
    let per_tx = a.profile_tx;
    eprintln!(
        "[bench] outbox-cdc under perf record: backlog of {rows} rows in transactions of {per_tx}"
    );
    let b = prepare(s, a, "bench_relay_profile", engine).await?;
    write_backlog(&b, rows, a.payload, per_tx).await?;
    let collector = Collector::start(&s.kafka, &b.topic, a.partitions, engine)?;
    let data = b.config_path.with_extension("perf.data");
    let log = File::create(b.config_path.with_extension("log"))?;
    let mut perf = Command::new("perf")
        .args(["record", "-e", "cpu-clock", "-F", FREQUENCY])
        // Release builds keep no frame pointers: DWARF unwinding.
        .args(["--call-graph", "dwarf,16384", "-q", "-o"])
        .arg(&data)
        .arg("--")
        .arg(engine.relay_bin())
        .args(["run", "--config"])
        .arg(&b.config_path)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()?;
    collector
        .wait_for(rows as usize, Duration::from_secs(1800))
        .await?;
    // perf's child is the relay: stopping it ends the recording.
    let relay = child_of(perf.id())?;
    terminate(
        &mut perf,
        relay,
        Duration::from_secs(120),
        "perf record (after the relay)",
    )
    .await?;
    collector.finish()?;
    drop_bench(s, b).await?;
    let folded = fold(&data, &tools)?;
    let svg = flame_graph(&folded, &tools, rows, per_tx)?;
    std::fs::create_dir_all(&a.out)?;
    std::fs::write(a.out.join(FLAME_GRAPH), svg)?;
    let _ = std::fs::remove_file(&data);
    // For a closer look (inferno-flamegraph, inferno-diff-folded).
    std::fs::write(data.with_extension("folded"), &folded)?;
    let Costs {
        samples,
        own,
        ours,
        threads,
    } = costs(&folded);
    eprintln!("[bench]   {samples} samples");
    Ok(json!({
        "scenario": "profile",
        "engine": engine.tag(),
        "rows": rows,
        "rows_per_transaction": per_tx,
        "samples": samples,
        "sample_hz": FREQUENCY.parse::<u32>().unwrap_or_default(),
        "flame_graph": FLAME_GRAPH,
        "threads_pct": top(threads, samples),
        "self_pct": top(own, samples),
        "relay_functions_total_pct": top(ours, samples),
    }))
}

/// Where inferno's binaries are: `BENCH_INFERNO_DIR` (scripts/bench.sh
/// installs them), or on the PATH.
fn inferno_dir() -> Result<PathBuf> {
    let dir = std::env::var_os("BENCH_INFERNO_DIR").map(PathBuf::from);
    let probe = dir.as_ref().map_or_else(
        || PathBuf::from("inferno-flamegraph"),
        |d| d.join("inferno-flamegraph"),
    );
    match Command::new(&probe).arg("--help").output() {
        Ok(o) if o.status.success() => Ok(dir.unwrap_or_default()),
        _ => bail!("--only profile needs inferno (scripts/bench.sh installs it) and perf (Debian's linux-perf)"),
    }
}

fn child_of(pid: u32) -> Result<u32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        if let Some(child) = text.split_whitespace().next() {
            return Ok(child.parse()?);
        }
        if Instant::now() > deadline {
            bail!("perf record ({pid}) started no relay");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `perf script` folded by inferno: one line per distinct stack, its frames
/// separated by `;` from the thread's name down, then its sample count.
fn fold(data: &Path, tools: &Path) -> Result<String> {
    let script = Command::new("perf")
        .args([
            "script",
            "--no-inline",
            "-F",
            "comm,tid,time,event,ip,sym,dso",
            "-i",
        ])
        .arg(data)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = script
        .stdout
        .ok_or_else(|| anyhow!("perf script: no output"))?;
    let out = Command::new(tools.join("inferno-collapse-perf"))
        .stdin(stdout)
        .output()
        .context("inferno-collapse-perf")?;
    if !out.status.success() {
        bail!(
            "inferno-collapse-perf: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

fn flame_graph(folded: &str, tools: &Path, rows: i64, per_tx: i64) -> Result<Vec<u8>> {
    use std::io::Write as _;
    let mut child = Command::new(tools.join("inferno-flamegraph"))
        .args([
            "--title",
            &format!(
                "outbox-cdc draining {rows} rows in {per_tx}-row transactions (perf cpu-clock)"
            ),
            "--hash",
            "--minwidth",
            "0.2",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .ok_or_else(|| anyhow!("inferno-flamegraph: no input"))?
        .write_all(folded.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("inferno-flamegraph failed");
    }
    Ok(out.stdout)
}

/// Samples in all; by the function where each was taken (self); by each
/// of the relay's own functions on its stack, once per sample (total); and
/// by thread.
fn costs(folded: &str) -> Costs {
    let mut c = Costs::default();
    for line in folded.lines() {
        let Some((stack, n)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(n) = n.parse::<u64>() else { continue };
        c.samples += n;
        let frames: Vec<String> = stack.split(';').map(short).collect();
        // The first frame is the thread's name.
        if let Some(thread) = frames.first() {
            *c.threads.entry(thread.clone()).or_default() += n;
        }
        if let Some(leaf) = frames.last() {
            *c.own.entry(leaf.clone()).or_default() += n;
        }
        let mut seen: Vec<&String> = Vec::new();
        for f in frames.iter().filter(|f| is_ours(f)) {
            if !seen.contains(&f) {
                *c.ours.entry(f.clone()).or_default() += n;
                seen.push(f);
            }
        }
    }
    c
}

#[derive(Default)]
struct Costs {
    samples: u64,
    own: HashMap<String, u64>,
    ours: HashMap<String, u64>,
    threads: HashMap<String, u64>,
}

/// A function of the relay's crate (not a closure of its tasks' plumbing).
fn is_ours(frame: &str) -> bool {
    (frame.starts_with("outbox_cdc::") || frame.starts_with("<outbox_cdc::"))
        && !frame.ends_with("{{closure}}")
}

/// A frame without its hash and its generic arguments' paths.
fn short(frame: &str) -> String {
    let f = frame.trim_end_matches("_[k]");
    let f = match f.rfind("::h") {
        Some(i) if f[i + 3..].chars().all(|c| c.is_ascii_hexdigit()) => &f[..i],
        _ => f,
    };
    f.to_string()
}

fn top(by: HashMap<String, u64>, samples: u64) -> Vec<Json> {
    let mut v: Vec<(String, u64)> = by.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.into_iter()
        .take(TOP)
        .map(
            |(f, n)| json!({"frame": f, "pct": round(100.0 * n as f64 / samples.max(1) as f64, 1)}),
        )
        .collect()
}
