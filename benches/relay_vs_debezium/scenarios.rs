//! The scenarios: backlogs, instructions per message, one big
//! transaction, a steady stream, and the two baselines that bound them.

use std::fmt::Write as _;
use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Result};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use serde_json::{json, Value as Json};
use tokio_postgres::Client;

use outbox_cdc::config::{Config, Secret, SslMode};
use outbox_cdc::contract::mapper::{self, Record};
use outbox_cdc::contract::outbox;
use outbox_cdc::kafka::settings;
use outbox_cdc::lsn::Lsn;
use outbox_cdc::replication::{
    slot, ConnectOptions, Event, Feedback, ReplicationConnection, SourceOptions, Stream,
};

use crate::args::*;
use crate::collect::*;
use crate::cpu::*;
use crate::engines::*;
use crate::report::*;
use crate::services::*;
use crate::*;

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
pub(crate) async fn warm_up(
    s: &Services,
    b: &Bench,
    collector: &Collector,
    run: &mut Running,
    rows: i64,
    payload: i32,
) -> Result<()> {
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
    warm_up(s, &b, &collector, &mut run, 10, a.big_payload).await?;
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
    warm_up(s, &b, &collector, &mut run, warm, a.payload).await?;
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

/// The raw slot-read cost of a backlog in transactions of `per_tx`: the
/// library's reader with no Kafka, read twice from two slots at one position.
/// Once as fast as it goes, once paced to [`READ_PACE`] of that rate,
/// because a reader that keeps up takes each message as the walsender sends
/// it, one segment and one wake-up each, while a relay busy producing lets
/// the socket fill and the walsender write large segments, which costs both
/// sides less per row. The bound takes the cheaper of the two: what reading
/// costs at least. With `records`, a third slot's rows mapped into the
/// records the produce baseline sends (not timed).
pub(crate) async fn slot_read(
    s: &Services,
    a: &Args,
    per_tx: i64,
    records: bool,
) -> Result<(Json, Vec<Record>)> {
    eprintln!(
        "[bench] baseline: slot read of {} rows in transactions of {per_tx}",
        a.rows
    );
    let name = "bench_baseline";
    let b = prepare(s, a, name, Engine::Relay).await?;
    let opts = ConnectOptions {
        host: s.base.pg_host.clone(),
        port: s.base.pg_port,
        dbname: name.into(),
        user: s.base.pg_user.clone(),
        password: Some(Secret::new(s.base.pg_password.clone())),
        sslmode: SslMode::Disable,
        sslrootcert: None,
        application_name: "outbox-cdc-bench".into(),
        connect_timeout: Duration::from_secs(10),
        user_timeout: Duration::from_secs(30),
        more_hosts: Vec::new(),
    };
    let source = SourceOptions {
        connect: opts.clone(),
        slot: format!("{name}_read"),
        publication: b.config.postgres.publication.clone(),
        schema: "public".into(),
        table: "messaging_outbox".into(),
        create_slot: false,
        failover_slot: false,
        streamed_before: false,
        own_walsender: None,
        messages: false,
        // As the relay reads it (`relay.pgoutput_binary`).
        binary: std::env::var("BENCH_RELAY_SETTINGS")
            .map_or(true, |s| !s.contains("pgoutput_binary = false")),
        tuning: Default::default(),
    };
    let paced_slot = format!("{name}_paced");
    let records_slot = format!("{name}_records");
    let mut conn = ReplicationConnection::connect(&opts).await?;
    slot::create(&mut conn, &source.slot, NO_SNAPSHOT).await?;
    slot::create(&mut conn, &paced_slot, NO_SNAPSHOT).await?;
    if records {
        slot::create(&mut conn, &records_slot, NO_SNAPSHOT).await?;
    }
    conn.close().await;
    write_backlog(&b.client, a.rows, a.payload, per_tx).await?;

    let free = timed_read(&b.client, &source, a.rows, None).await?;
    let pace = free["throughput_msg_s"].as_f64().unwrap_or(0.0) * READ_PACE;
    let source = SourceOptions {
        slot: paced_slot,
        ..source
    };
    let paced = timed_read(&b.client, &source, a.rows, Some(pace).filter(|p| *p > 0.0)).await?;
    let run = cheaper_of(free, paced, pace, "row");

    let mut out = Vec::new();
    if records {
        let source = SourceOptions {
            slot: records_slot,
            ..source
        };
        let (feedback, _) = Feedback::new(Lsn::ZERO);
        let mut stream = Stream::open(&b.client, &source, &feedback).await?;
        let prefix = &b.config.outbox.topic_prefix;
        let mut commit_time = None;
        while (out.len() as i64) < a.rows {
            match stream.events.recv().await {
                Some(Event::Begin {
                    commit_time: at, ..
                }) => commit_time = Some(at),
                Some(Event::Rows(r)) => {
                    let at = commit_time.ok_or_else(|| anyhow!("a row outside a transaction"))?;
                    for row in r {
                        out.push(mapper::map(row, prefix, at).map_err(|e| anyhow!("{e:?}"))?);
                    }
                }
                Some(Event::Commit { end_lsn, .. }) => feedback.settle(end_lsn),
                None => break,
            }
        }
        let _ = stream.stop().await;
    }
    drop_bench(s, b).await?;
    Ok((run, out))
}

/// The pace of the slower read, as a share of the unpaced rate: below the
/// rate the walsender reaches alone, so its socket fills, and about where
/// relay drains run.
pub(crate) const READ_PACE: f64 = 0.7;

/// One timed read of `rows` rows from `source`'s slot, keeping none of them
/// (the relay holds a row only until Kafka has it, and 200 000 rows held
/// would time the bench's own allocations); with `pace`, no faster than that
/// many rows per second.
pub(crate) async fn timed_read(
    client: &Client,
    source: &SourceOptions,
    rows: i64,
    pace: Option<f64>,
) -> Result<Json> {
    let (feedback, _) = Feedback::new(Lsn::ZERO);
    let procs0 = processes();
    let fields0 = machine_fields();
    let trace = CpuTrace::start();
    let start = Instant::now();
    let cpu0 = machine_cpu();
    let mut stream = Stream::open(client, source, &feedback).await?;
    let mut read = 0usize;
    let mut next_check = 1000;
    let (mut first, mut last, mut first_chunk) = (0.0, 0.0, 0);
    while (read as i64) < rows {
        match stream.events.recv().await {
            Some(Event::Rows(r)) => {
                if read == 0 {
                    first = now_ms();
                    first_chunk = r.len();
                }
                read += r.len();
                last = now_ms();
                if let Some(pace) = pace.filter(|_| read >= next_check) {
                    next_check += 1000;
                    let due = Duration::from_secs_f64(read as f64 / pace);
                    if let Some(wait) = due.checked_sub(start.elapsed()) {
                        tokio::time::sleep(wait).await;
                    }
                }
            }
            Some(Event::Commit { end_lsn, .. }) => feedback.settle(end_lsn),
            Some(_) => {}
            None => break,
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu1 = machine_cpu();
    let procs1 = processes();
    let fields1 = machine_fields();
    let _ = stream.stop().await;
    let shares = machine_shares(&procs0, &procs1, &fields0, &fields1, read);
    // Rows come in chunks: the first chunk's rows are not in the window.
    let in_window = trace.busy_us(first, last) / read.saturating_sub(first_chunk).max(1) as f64;
    Ok(json!({"first_to_last_s": round(secs, 3),
              WINDOW_COST: round(in_window, 1),
              "throughput_msg_s": round(read as f64 / secs, 0),
              "machine_cpu_us_per_msg": round(jiffies_us(cpu0, cpu1) / read.max(1) as f64, 1),
              "machine_cpu_us_per_msg_by_process": shares}))
}

/// How many distinct records the produce baseline cycles through: about the
/// relay's in-flight window.
pub(crate) const HOT_RECORDS: usize = 5000;

/// The raw produce cost: the same records produced by librdkafka with the
/// relay's producer settings and no PostgreSQL, timed in Kafka like the
/// rest. Once as fast as it goes, once paced to [`PRODUCE_PACE`] of that
/// rate, because a producer that outruns its broker thread contends with it
/// for every partition queue, where a relay drain hands over records at
/// about half that rate. The bound takes the cheaper of the two.
pub(crate) async fn raw_produce(s: &Services, a: &Args, records: &[Record]) -> Result<Json> {
    eprintln!(
        "[bench] baseline: producing {} records with no PostgreSQL",
        records.len()
    );
    let free = produce_once(s, a, records, None).await?;
    let pace = free["throughput_msg_s"].as_f64().unwrap_or(0.0) * PRODUCE_PACE;
    let paced = produce_once(s, a, records, Some(pace).filter(|p| *p > 0.0)).await?;
    Ok(cheaper_of(free, paced, pace, "msg"))
}

/// A baseline's result from its free and paced runs: the free run's rate,
/// the cheaper run's machine time (a bound counts what the work costs at
/// least), both runs kept.
pub(crate) fn cheaper_of(free: Json, paced: Json, pace: f64, unit: &str) -> Json {
    let cost = |r: &Json| r[WINDOW_COST].as_f64().unwrap_or(f64::MAX);
    let cheaper = if cost(&paced) < cost(&free) {
        &paced
    } else {
        &free
    };
    eprintln!(
        "[bench]   {} {unit}/s at {} µs/{unit}; paced at {pace:.0}: {} µs/{unit}",
        free["throughput_msg_s"], free[WINDOW_COST], paced[WINDOW_COST]
    );
    json!({
        "first_to_last_s": free["first_to_last_s"],
        "throughput_msg_s": free["throughput_msg_s"],
        "machine_cpu_us_per_msg": cheaper["machine_cpu_us_per_msg"],
        WINDOW_COST: cheaper[WINDOW_COST],
        "machine_cpu_us_per_msg_by_process": cheaper["machine_cpu_us_per_msg_by_process"],
        "unpaced": free,
        "paced": paced,
    })
}

/// The pace of the slower produce, as a share of the unpaced rate: about
/// where relay drains run.
pub(crate) const PRODUCE_PACE: f64 = 0.5;

/// One timed produce of `records` to a topic of its own; with `pace`, no
/// faster than that many records per second.
pub(crate) async fn produce_once(
    s: &Services,
    a: &Args,
    records: &[Record],
    pace: Option<f64>,
) -> Result<Json> {
    let prefix = format!(
        "bench_produce-{}.",
        SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs()
    );
    let topic = format!("{prefix}{DESTINATION}");
    create_topic(&s.kafka, &topic, a.partitions).await?;
    let collector = Collector::start(&s.kafka, &topic, a.partitions, Engine::Relay)?;
    let text = format!("[postgres]\nhost = \"h\"\ndbname = \"d\"\nuser = \"u\"\n[outbox]\n[kafka]\nbootstrap_servers = \"{}\"\n", s.kafka);
    let cfg =
        Config::parse(&text, Path::new("bench.toml"), &|_| None).map_err(|e| anyhow!("{e}"))?;
    let cluster = cfg.kafka_cluster(&|_| None).map_err(|e| anyhow!("{e}"))?;
    let cc = settings::producer_config(&cluster, None);
    // As the relay produces: a polling thread serves delivery reports.
    let producer: ThreadedProducer<rdkafka::producer::DefaultProducerContext> = cc.create()?;
    let n = records.len();
    let procs0 = processes();
    let fields0 = machine_fields();
    let trace = CpuTrace::start();
    let start = Instant::now();
    let cpu0 = machine_cpu();
    // Records from a working set of the size the relay has in hand, each
    // with an id of its own: read from an array of 200 000 records, every
    // one missed the cache (the relay produces records it has just decoded),
    // and the baseline cost more per message than a relay drain's producing.
    let hot = &records[..records.len().min(HOT_RECORDS)];
    let mut id = String::with_capacity(36);
    for (n, r) in (0..n).zip(hot.iter().cycle()) {
        if let Some(pace) = pace.filter(|_| n % 1000 == 0) {
            let due = Duration::from_secs_f64(n as f64 / pace);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        id.clear();
        write!(id, "00000000-0000-4000-8000-{n:012}")?;
        let mut headers = OwnedHeaders::new_with_capacity(r.headers().len());
        for (name, value) in r.headers() {
            let value = match name == outbox::ID_HEADER.name {
                true => Some(id.as_bytes()),
                false => value,
            };
            headers = headers.insert(Header { key: name, value });
        }
        let mut rec = BaseRecord::<[u8], [u8]>::to(&topic)
            .key(&r.key)
            .payload(&r.value)
            .headers(headers);
        if let Some(ts) = r.timestamp_ms {
            rec = rec.timestamp(ts);
        }
        loop {
            match producer.send(rec) {
                Ok(()) => break,
                Err((_, back)) => {
                    rec = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(120))?;
    let wall = start.elapsed().as_secs_f64();
    collector.wait_for(n, Duration::from_secs(300)).await?;
    let cpu1 = machine_cpu();
    let shares = machine_shares(&procs0, &processes(), &fields0, &machine_fields(), n);
    let seen = collector.finish()?;
    delete_topic(&s.kafka, &topic).await?;
    let first = seen.first.values().min().copied().unwrap_or(0);
    let last = seen.first.values().max().copied().unwrap_or(0);
    let span_s = (last - first).max(1) as f64 / 1000.0;
    let rate = (n - 1) as f64 / span_s;
    let in_window = trace.busy_us(first as f64, last as f64) / (n - 1) as f64;
    Ok(json!({"first_to_last_s": round(span_s, 3),
               WINDOW_COST: round(in_window, 1), "producer_wall_s": round(wall, 3), "throughput_msg_s": round(rate, 0),
               "machine_cpu_us_per_msg": round(jiffies_us(cpu0, cpu1) / n as f64, 1),
               "machine_cpu_us_per_msg_by_process": shares}))
}
