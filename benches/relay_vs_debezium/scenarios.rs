//! The scenarios: backlogs, instructions per message, one big
//! transaction, a steady stream, and the two baselines that bound them.

use std::fs::File;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value as Json};

use crate::args::Args;
use crate::collect::{wait_until_seen, Collector};
use crate::cpu::{
    jiffies_us, machine_cpu, machine_fields, machine_shares, processes, usage, CpuTrace,
    WINDOW_COST,
};
use crate::engine::Engine;
use crate::engines::{
    drop_bench, prepare, start_collector, terminate, write_backlog, write_spread_backlog, Bench,
    Running, Scraper,
};
use crate::numbers::{now_ms, round};
use crate::services::Services;

pub(crate) async fn backlog_once(
    s: &Services,
    a: &Args,
    engine: Engine,
    per_tx: i64,
) -> Result<Json> {
    let name = format!("bench_{}_tx{per_tx}", engine.db_tag());
    let b = prepare(s, a, &name, engine).await?;
    let load_s = write_spread_backlog(&b, a.rows, a.payload, per_tx, a.destinations).await?;
    let collector = Collector::start_topics(&s.kafka, &b.topics, a.partitions, engine)?;
    let started = now_ms();
    let trace = CpuTrace::start();
    let (mut run, before) = Running::start(s, engine, &b).await?;
    let procs0 = processes();
    let fields0 = machine_fields();
    let cpu0 = machine_cpu();
    wait_until_seen(
        &collector,
        a.rows as usize,
        &mut run,
        s,
        Duration::from_secs(1800),
    )
    .await?;
    let cpu1 = machine_cpu();
    let procs1 = processes();
    let fields1 = machine_fields();
    let after = usage(run.pid())?;
    run.stop(s)?;
    let seen = collector.finish()?;
    drop_bench(s, b).await?;
    let shares = machine_shares(&procs0, &procs1, &fields0, &fields1, seen.first.len());
    let first = seen.first.values().min().copied().unwrap_or(0);
    let last = seen.first.values().max().copied().unwrap_or(0);
    let span_s = (last - first).max(1) as f64 / 1000.0;
    let rate = (seen.first.len() - 1) as f64 / span_s;
    let in_window = trace.busy_us(first as f64, last as f64) / (seen.first.len() - 1) as f64;
    eprintln!(
        "[bench]   {rate:.0} msg/s over {span_s:.2} s; peak RSS {:.0} MiB",
        after.peak_rss_mib
    );
    Ok(json!({
        "backlog_write_s": round(load_s, 2),
        WINDOW_COST: round(in_window, 1),
        "first_record_after_start_s": round((first as f64 - started) / 1000.0, 2),
        "first_to_last_s": round(span_s, 3),
        "throughput_msg_s": round(rate, 0),
        "records": seen.records,
        "duplicates": seen.records - seen.first.len(),
        "cpu_s": round(after.cpu_s - before.cpu_s, 2),
        "machine_cpu_us_per_msg": round(jiffies_us(cpu0, cpu1) / seen.first.len() as f64, 1),
        "machine_cpu_us_per_msg_by_process": shares,
        "peak_rss_mib": round(after.peak_rss_mib, 1),
    }))
}

/// The relay's instructions per message, from Valgrind's callgrind (this
/// machine's perf has no instruction counter): two backlogs of 100-row
/// transactions, `rows` and twice that; the difference divided by `rows`
/// leaves start-up and shutdown out. Repeatable where times are not.
/// Each relay engine of `--engines` (by default the relay alone), e.g.
/// `outbox-cdc,outbox-cdc-baseline` to compare two builds.
/// Whether `perf stat` can count instructions here (many virtual machines
/// expose no hardware counters; callgrind counts them in software then).
pub(crate) fn perf_counts_instructions() -> bool {
    Command::new("perf")
        .args(["stat", "-x,", "-e", "instructions", "true"])
        .output()
        .map(|o| {
            let text = String::from_utf8_lossy(&o.stderr);
            o.status.success()
                && text.lines().any(|l| {
                    l.split(',')
                        .next()
                        .is_some_and(|n| n.trim().parse::<u64>().is_ok())
                })
        })
        .unwrap_or(false)
}

pub(crate) async fn instructions(s: &Services, a: &Args) -> Result<Vec<Json>> {
    if !perf_counts_instructions() && Command::new("valgrind").arg("--version").output().is_err() {
        bail!("--only instructions needs perf with an instruction counter, or Valgrind (Debian's packages linux-perf, valgrind)");
    }
    let mut out = Vec::new();
    for engine in &a.engines {
        if matches!(
            engine,
            Engine::Relay
                | Engine::RelayBaseline
                | Engine::RelayMetrics
                | Engine::RelayOtel
                | Engine::RelayOtelDefault
        ) {
            out.push(instructions_of(s, a, *engine).await?);
        }
    }
    Ok(out)
}

pub(crate) async fn instructions_of(s: &Services, a: &Args, engine: Engine) -> Result<Json> {
    let rows = a.instr_rows;
    let perf = perf_counts_instructions();
    let counter = if perf { "perf stat" } else { "callgrind" };
    let mut totals = Vec::new();
    for n in [rows, 2 * rows] {
        eprintln!(
            "[bench] {} under {counter}: backlog of {n} rows in transactions of 100",
            engine.tag()
        );
        let name = format!("bench_{}_instr_{n}", engine.db_tag());
        let b = prepare(s, a, &name, engine).await?;
        write_backlog(&b, n, a.payload, 100).await?;
        let collector = Collector::start(&s.kafka, &b.topic, a.partitions, engine)?;
        let otel = match engine {
            Engine::RelayOtel | Engine::RelayOtelDefault => Some(start_collector(&b)?),
            _ => None,
        };
        let out = b.config_path.with_extension("callgrind");
        let log = File::create(b.config_path.with_extension("log"))?;
        let mut command = if perf {
            let mut c = Command::new("perf");
            c.args(["stat", "-x,", "-e", "instructions", "-o"])
                .arg(&out)
                .arg("--");
            c
        } else {
            let mut c = Command::new("valgrind");
            c.arg("--tool=callgrind")
                .arg(format!("--callgrind-out-file={}", out.display()));
            c
        };
        let mut child = command
            .arg(engine.relay_bin())
            .args(["run", "--config"])
            .arg(&b.config_path)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        // Scraped every second of a run callgrind slows about fiftyfold: an
        // upper bound of what scraping costs per message.
        let scraper = (engine == Engine::RelayMetrics).then(Scraper::start);
        collector
            .wait_for(n as usize, Duration::from_secs(3600))
            .await?;
        if let Some(s) = scraper {
            s.stop();
        }
        let pid = child.id();
        terminate(
            &mut child,
            pid,
            Duration::from_secs(600),
            "the relay under callgrind",
        )
        .await?;
        collector.finish()?;
        if let Some(mut c) = otel {
            let _ = c.kill();
            let _ = c.wait();
        }
        drop_bench(s, b).await?;
        let text = std::fs::read_to_string(&out)?;
        let total: u64 = text
            .lines()
            .find_map(|l| match perf {
                // perf's CSV: count,unit,event,...
                true => l.split(',').next().filter(|_| l.contains("instructions")),
                false => l.strip_prefix("summary: "),
            })
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| anyhow!("no instruction count in {}", out.display()))?;
        eprintln!("[bench]   {total} instructions");
        totals.push(total);
    }
    let per_msg = totals[1].saturating_sub(totals[0]) as f64 / rows as f64;
    eprintln!("[bench]   {per_msg:.0} instructions per message");
    Ok(json!({
        "scenario": "instructions",
        "engine": engine.tag(),
        "rows": [rows, 2 * rows],
        "rows_per_transaction": 100,
        "instructions": totals,
        "instructions_per_msg": round(per_msg, 0),
        "counter": counter,
    }))
}

/// Writes `rows` rows and waits until they are in Kafka: the engine streams
/// before a measured load begins.
/// Rows of one size, to write.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rows {
    pub(crate) n: i64,
    /// Payload bytes of each.
    pub(crate) payload: i32,
}

pub(crate) async fn warm_up(
    s: &Services,
    b: &Bench,
    collector: &Collector,
    run: &mut Running,
    rows: Rows,
) -> Result<()> {
    let Rows { n: rows, payload } = rows;
    b.client
        .batch_execute(
            &b.outbox
                .write(&format!("generate_series(1, {rows}) g"), "w", payload, 1),
        )
        .await?;
    wait_until_seen(collector, rows as usize, run, s, Duration::from_secs(300)).await
}

/// One source transaction of `big_rows` rows committed while the relay
/// streams: whether memory depends on a transaction's size, and how long
/// its last record takes after the commit.
pub(crate) async fn one_big_transaction(s: &Services, a: &Args, engine: Engine) -> Result<Json> {
    let name = format!("bench_{}_bigtx", engine.db_tag());
    eprintln!(
        "[bench] {}: one transaction of {} rows of {} bytes",
        engine.tag(),
        a.big_rows,
        a.big_payload
    );
    let b = prepare(s, a, &name, engine).await?;
    let collector = Collector::start(&s.kafka, &b.topic, a.partitions, engine)?;
    let (mut run, before) = Running::start(s, engine, &b).await?;
    // Streaming, idle, before the transaction begins.
    warm_up(
        s,
        &b,
        &collector,
        &mut run,
        Rows {
            n: 10,
            payload: a.big_payload,
        },
    )
    .await?;
    let rss_idle = usage(run.pid())?.peak_rss_mib;
    let t = Instant::now();
    b.client
        .batch_execute(&b.outbox.write(
            &format!("generate_series(1, {}) g", a.big_rows),
            "big",
            a.big_payload,
            1,
        ))
        .await?;
    let committed_ms = now_ms();
    let write_s = t.elapsed().as_secs_f64();
    let total = 10 + a.big_rows as usize;
    wait_until_seen(&collector, total, &mut run, s, Duration::from_secs(3600)).await?;
    let after = usage(run.pid())?;
    run.stop(s)?;
    let seen = collector.finish()?;
    drop_bench(s, b).await?;
    let last = seen.first.values().max().copied().unwrap_or(0) as f64;
    let commit_to_last_s = (last - committed_ms) / 1000.0;
    eprintln!(
        "[bench]   commit to last record {commit_to_last_s:.1} s; peak RSS {:.0} MiB (idle {rss_idle:.0} MiB)",
        after.peak_rss_mib
    );
    Ok(json!({
        "scenario": "one_transaction",
        "engine": engine.tag(),
        "rows": a.big_rows,
        "payload_bytes": a.big_payload,
        "write_s": round(write_s, 1),
        "commit_to_last_record_s": round(commit_to_last_s, 1),
        "throughput_msg_s": round(a.big_rows as f64 / commit_to_last_s.max(0.001), 0),
        "cpu_s": round(after.cpu_s - before.cpu_s, 2),
        "peak_rss_mib": round(after.peak_rss_mib, 1),
        "peak_rss_before_mib": round(rss_idle, 1),
        "duplicates": seen.records - seen.first.len(),
    }))
}
