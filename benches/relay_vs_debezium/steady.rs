//! The steady streams: 1-row transactions at a fixed offered rate, each
//! commit's wall-clock time matched with its record's append time. One
//! writer at 100 msg/s (a new user's first try), eight at 2 000 msg/s.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde_json::{json, Value as Json};
use tokio_postgres::Client;

use crate::args::Args;
use crate::collect::{wait_until_seen, Collector};
use crate::cpu::{machine_cpu, machine_fields, machine_shares, processes, usage};
use crate::engine::Engine;
use crate::engines::{drop_bench, prepare, Bench, Running};
use crate::numbers::{now_ms, round};
use crate::scenarios::{warm_up, Rows};
use crate::services::Services;

/// Writers for an offered rate: one per 250 msg/s, at most eight, so 100
/// msg/s is one writer's stream and 2 000 msg/s needs no writer faster
/// than a commit's round trip.
pub(crate) fn writers(rate: u32) -> u32 {
    rate.div_ceil(250).clamp(1, 8)
}

/// The broker stamps whole milliseconds (truncated): a record appended
/// during millisecond T is counted at T + 0.5, the middle of its
/// millisecond, so that latencies are not read low by half a millisecond
/// on average.
const APPEND_TIME_MIDPOINT_MS: f64 = 0.5;

/// One run of `rate` msg/s for `a.seconds` against `engine`.
pub(crate) async fn steady_once(s: &Services, a: &Args, engine: Engine, rate: u32) -> Result<Json> {
    let name = format!("bench_{}_steady", engine.db_tag());
    let writers = writers(rate);
    eprintln!(
        "[bench] {}: steady stream of {rate} msg/s from {writers} writer(s) for {} s",
        engine.tag(),
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
    let load = Load {
        rate,
        writers,
        seconds: a.seconds,
        payload: a.payload,
    };
    let (commits, clients) = generate(s, &b, load).await?;
    let cpu1 = machine_cpu();
    let shares = machine_shares(
        &procs0,
        &processes(),
        &fields0,
        &machine_fields(),
        commits.len(),
    );
    drop(clients);
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
        .filter_map(|(id, at)| {
            seen.first
                .get(&crate::collect::id_key(id.as_bytes()))
                .map(|k| *k as f64 + APPEND_TIME_MIDPOINT_MS - at)
        })
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

/// A steady load: `rate` msg/s shared by `writers` connections.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Load {
    pub(crate) rate: u32,
    pub(crate) writers: u32,
    pub(crate) seconds: u32,
    pub(crate) payload: i32,
}

pub(crate) async fn generate(
    s: &Services,
    b: &Bench,
    load: Load,
) -> Result<(Vec<(String, f64)>, Vec<Client>)> {
    let Load {
        rate,
        writers,
        seconds,
        payload,
    } = load;
    let total = i64::from(rate) * i64::from(seconds);
    let period = Duration::from_secs_f64(f64::from(writers) / f64::from(rate));
    let mut tasks = Vec::new();
    for w in 0..writers {
        let mut client = s.connect(&b.db).await?;
        let one = b.outbox.write_one("s", payload);
        let insert = client.prepare(&one.insert).await?;
        let delete = match &one.delete {
            Some(sql) => Some(client.prepare(sql).await?),
            None => None,
        };
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut g = i64::from(w) + 1;
            while g <= total {
                tick.tick().await;
                let row = match &delete {
                    None => client.query_one(&insert, &[&g]).await?,
                    // A table that keeps no status: the row is deleted in
                    // the transaction that inserts it.
                    Some(delete) => {
                        let tx = client.transaction().await?;
                        let row = tx.query_one(&insert, &[&g]).await?;
                        tx.execute(delete, &[&g]).await?;
                        tx.commit().await?;
                        row
                    }
                };
                out.push((row.get::<_, String>(0), now_ms()));
                g += i64::from(writers);
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

/// The repeated runs of one engine at one rate: the median of each
/// percentile with its lowest and highest, and every run.
pub(crate) fn latency_summary(engine: Engine, rate: u32, runs: Vec<Json>) -> Json {
    let mut out = serde_json::Map::new();
    out.insert("scenario".into(), json!("steady"));
    out.insert("engine".into(), json!(engine.tag()));
    out.insert("rate_msg_s".into(), json!(rate));
    out.insert("writers".into(), json!(writers(rate)));
    let median_of =
        |f: &dyn Fn(&Json) -> Option<f64>| crate::runs::spread(runs.iter().filter_map(f));
    let mut latency = serde_json::Map::new();
    for p in ["p50", "p99", "max"] {
        if let Some(s) = median_of(&|r| r["latency_ms"][p].as_f64()) {
            latency.insert(p.into(), json!(s.median));
            latency.insert(format!("{p}_min"), json!(s.min));
            latency.insert(format!("{p}_max"), json!(s.max));
        }
    }
    out.insert("latency_ms".into(), Json::Object(latency));
    for key in ["offered_msg_s", "cpu_s", "machine_cpu_busy_pct"] {
        if let Some(s) = median_of(&|r| r[key].as_f64()) {
            out.insert(key.into(), json!(s.median));
        }
    }
    if let Some(p) = runs
        .iter()
        .filter_map(|r| r["peak_rss_mib"].as_f64())
        .reduce(f64::max)
    {
        out.insert("peak_rss_mib".into(), json!(p));
    }
    // The by-process split of the run whose p99 is the median.
    let mut order: Vec<&Json> = runs.iter().collect();
    order.sort_by(|a, b| {
        let p = |r: &Json| r["latency_ms"]["p99"].as_f64().unwrap_or(0.0);
        p(a).total_cmp(&p(b))
    });
    if let Some(mid) = order.get(order.len() / 2) {
        out.insert(
            "machine_cpu_us_per_msg_by_process".into(),
            mid["machine_cpu_us_per_msg_by_process"].clone(),
        );
    }
    out.insert("runs".into(), Json::Array(runs));
    Json::Object(out)
}
