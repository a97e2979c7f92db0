//! The scenarios: backlogs, instructions per message, one big
//! transaction, a steady stream, and the two baselines that bound them.

use std::fs::File;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value as Json};
use tokio_postgres::Client;

use crate::args::Args;
use crate::collect::{wait_until_seen, Collector};
use crate::cpu::{
    jiffies_us, machine_cpu, machine_fields, machine_shares, processes, usage, CpuTrace,
    WINDOW_COST,
};
use crate::engine::Engine;
use crate::engines::{
    drop_bench, insert_values, prepare, start_collector, write_backlog, Bench, Running, Scraper,
    INSERT_COLUMNS,
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
    let load_s = write_backlog(&b.client, a.rows, a.payload, per_tx).await?;
    let collector = Collector::start(&s.kafka, &b.topic, a.partitions, engine)?;
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
        write_backlog(&b.client, n, a.payload, 100).await?;
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
        Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()?;
        let deadline = Instant::now() + Duration::from_secs(600);
        while child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                child.kill()?;
                bail!("the relay under callgrind did not stop");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
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
        .batch_execute(&format!(
            "INSERT INTO messaging_outbox ({INSERT_COLUMNS}) SELECT {} FROM generate_series(1, {rows}) g",
            insert_values("g", "w", payload)
        ))
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
        .batch_execute(&format!(
            "INSERT INTO messaging_outbox ({INSERT_COLUMNS}) SELECT {} FROM generate_series(1, {}) g",
            insert_values("g", "big", a.big_payload),
            a.big_rows
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

/// 1-row transactions at a fixed offered rate from several connections; each
/// commit's wall-clock time is matched with its record's append time.
pub(crate) async fn steady(s: &Services, a: &Args, engine: Engine) -> Result<Json> {
    let name = format!("bench_{}_steady", engine.db_tag());
    eprintln!(
        "[bench] {}: steady stream of {} msg/s for {} s",
        engine.tag(),
        a.rate,
        a.seconds
    );
    let b = prepare(s, a, &name, engine).await?;
    let collector = Collector::start(&s.kafka, &b.topic, a.partitions, engine)?;
    let (mut run, _) = Running::start(s, engine, &b).await?;
    // Warm-up: the relay streams before the measured load begins.
    let warm = 100i64;
    warm_up(
        s,
        &b,
        &collector,
        &mut run,
        Rows {
            n: warm,
            payload: a.payload,
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = usage(run.pid())?;
    let t = Instant::now();
    let procs0 = processes();
    let fields0 = machine_fields();
    let cpu0 = machine_cpu();
    // The writers' connections stay open until their backends are counted.
    let (commits, writers) = generate(s, &b.db, a.rate, a.seconds, a.payload).await?;
    let cpu1 = machine_cpu();
    let shares = machine_shares(
        &procs0,
        &processes(),
        &fields0,
        &machine_fields(),
        commits.len(),
    );
    drop(writers);
    let offered_s = t.elapsed().as_secs_f64();
    let busy = (cpu1.0 - cpu0.0) as f64 / (cpu1.1 - cpu0.1).max(1) as f64;
    wait_until_seen(
        &collector,
        warm as usize + commits.len(),
        &mut run,
        s,
        Duration::from_secs(300),
    )
    .await?;
    let after = usage(run.pid())?;
    run.stop(s)?;
    let seen = collector.finish()?;
    drop_bench(s, b).await?;
    let mut lat: Vec<f64> = commits
        .iter()
        .filter_map(|(id, at)| seen.first.get(id).map(|k| *k as f64 - at))
        .collect();
    if lat.len() != commits.len() {
        bail!(
            "{} of {} committed messages were not seen",
            commits.len() - lat.len(),
            commits.len()
        );
    }
    // The worst latency of each 5-second window: whether a p99 comes from
    // one stall or from the whole stream.
    let start_ms = commits.iter().map(|(_, at)| *at).fold(f64::MAX, f64::min);
    let mut windows: Vec<f64> = Vec::new();
    for ((_, at), l) in commits.iter().zip(&lat) {
        let w = ((at - start_ms) / 5000.0) as usize;
        if windows.len() <= w {
            windows.resize(w + 1, 0.0);
        }
        windows[w] = windows[w].max(round(*l, 1));
    }
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| lat[((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1];
    let (p50, p99, max) = (pct(0.50), pct(0.99), pct(1.0));
    eprintln!(
        "[bench]   p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms; machine CPU busy {:.0} %",
        busy * 100.0
    );
    Ok(json!({
        "scenario": "steady",
        "engine": engine.tag(),
        "messages": commits.len(),
        "offered_msg_s": round(commits.len() as f64 / offered_s, 0),
        "latency_ms": {"p50": round(p50, 1), "p99": round(p99, 1), "max": round(max, 1)},
        "max_latency_ms_by_5s": windows,
        "machine_cpu_busy_pct": round(busy * 100.0, 0),
        "machine_cpu_us_per_msg_by_process": shares,
        "cpu_s": round(after.cpu_s - before.cpu_s, 2),
        "peak_rss_mib": round(after.peak_rss_mib, 1),
    }))
}

pub(crate) async fn generate(
    s: &Services,
    db: &str,
    rate: u32,
    seconds: u32,
    payload: i32,
) -> Result<(Vec<(String, f64)>, Vec<Client>)> {
    let workers = 8u32;
    let total = i64::from(rate) * i64::from(seconds);
    let period = Duration::from_secs_f64(f64::from(workers) / f64::from(rate));
    let mut tasks = Vec::new();
    for w in 0..workers {
        let client = s.connect(db).await?;
        let sql = format!(
            "INSERT INTO messaging_outbox ({INSERT_COLUMNS}) VALUES ({}) RETURNING message_id::text",
            insert_values("$1::bigint", "s", payload)
        );
        let stmt = client.prepare(&sql).await?;
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut g = i64::from(w) + 1;
            while g <= total {
                tick.tick().await;
                let row = client.query_one(&stmt, &[&g]).await?;
                out.push((row.get::<_, String>(0), now_ms()));
                g += i64::from(workers);
            }
            Ok::<_, tokio_postgres::Error>((out, client))
        }));
    }
    let mut all = Vec::new();
    let mut clients = Vec::new();
    for t in tasks {
        let (out, client) = t.await??;
        all.extend(out);
        clients.push(client);
    }
    Ok((all, clients))
}
