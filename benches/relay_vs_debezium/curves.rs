//! How the relay's cost grows (`--only curves`): with the number of
//! destinations, with the payload's size, and with the backlog's length.
//! Each point is a drain of 100-row transactions on a fresh database, so
//! the curves compare with the backlog drains above.

use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use serde_json::{json, Value as Json};

use crate::args::Args;
use crate::baselines::{raw_produce, slot_read, Keep};
use crate::collect::{wait_until_seen, Collector};
use crate::cpu::usage;
use crate::engine::Engine;
use crate::engines::{drop_bench, prepare, Running};
use crate::numbers::{now_ms, round};
use crate::runs::summary;
use crate::scenarios::backlog_once;
use crate::services::Services;

/// The destinations of curve (a).
pub(crate) const DESTINATIONS: [i64; 3] = [1, 100, 1000];
/// The payload sizes of curve (b), in bytes.
pub(crate) const PAYLOADS: [i32; 4] = [100, 1024, 16 << 10, 256 << 10];
/// Curve (b) writes at most this many payload bytes per drain, so a
/// 256 KiB point drains 4 096 rows, not 200 000 (52 GB).
const PAYLOAD_BYTES_PER_DRAIN: i64 = 1 << 30;

/// (a) The same backlog spread evenly over 1, 100 and 1 000 destinations
/// (topics of one partition each): throughput and peak RSS.
///
/// The relay's builds among `--engines` (`outbox-cdc-baseline` pairs the
/// points with another build, run for run), else the relay alone.
pub(crate) async fn destinations(s: &Services, a: &Args) -> Result<Vec<Json>> {
    let mut engines: Vec<Engine> = a
        .engines
        .iter()
        .copied()
        .filter(|e| matches!(e, Engine::Relay | Engine::RelayBaseline))
        .collect();
    if engines.is_empty() {
        engines.push(Engine::Relay);
    }
    let mut out = Vec::new();
    for n in DESTINATIONS {
        let mut runs = vec![Vec::new(); engines.len()];
        for i in 0..a.curve_repeat {
            for (engine, runs) in engines.iter().zip(runs.iter_mut()) {
                eprintln!(
                    "[bench] curve: {} rows over {n} destinations, {} ({}/{})",
                    a.rows,
                    engine.tag(),
                    i + 1,
                    a.curve_repeat
                );
                let spread = Args {
                    destinations: n,
                    partitions: 1,
                    ..a.clone()
                };
                runs.push(backlog_once(s, &spread, *engine, 100).await?);
            }
        }
        for (engine, runs) in engines.iter().zip(runs) {
            out.push(summary(
                json!({"scenario": "curve_destinations", "engine": engine.tag(),
                       "destinations": n, "partitions_per_topic": 1, "rows": a.rows, "rows_per_transaction": 100}),
                runs,
            ));
        }
    }
    Ok(out)
}

/// (b) Payloads of 100 B to 256 KiB: the relay's MB/s against a produce
/// baseline of the same records (librdkafka alone, the relay's settings).
pub(crate) async fn payloads(s: &Services, a: &Args) -> Result<Vec<Json>> {
    let mut out = Vec::new();
    for payload in PAYLOADS {
        let rows = a.rows.min(PAYLOAD_BYTES_PER_DRAIN / i64::from(payload));
        let sized = Args {
            rows,
            payload,
            ..a.clone()
        };
        let (_, records) = slot_read(s, &sized, 100, Keep::Records).await?;
        let mut drains = Vec::new();
        let mut produces = Vec::new();
        for i in 0..a.curve_repeat {
            eprintln!(
                "[bench] curve: {rows} rows of {payload} bytes ({}/{})",
                i + 1,
                a.curve_repeat
            );
            produces.push(raw_produce(s, &sized, &records).await?);
            drains.push(backlog_once(s, &sized, Engine::Relay, 100).await?);
        }
        let mb_s = |runs: &[Json]| -> Vec<Json> {
            runs.iter()
                .map(|r| {
                    let mut r = r.clone();
                    let rate = r["throughput_msg_s"].as_f64().unwrap_or(0.0);
                    if let Some(o) = r.as_object_mut() {
                        o.insert(
                            "payload_mb_s".into(),
                            json!(round(rate * f64::from(payload) / 1e6, 1)),
                        );
                    }
                    r
                })
                .collect()
        };
        let head = |engine: &str| {
            json!({"scenario": "curve_payload", "engine": engine, "payload_bytes": payload,
                   "rows": rows, "rows_per_transaction": 100})
        };
        let mut relay = summary(head(Engine::Relay.tag()), mb_s(&drains));
        let mut baseline = summary(head(crate::PRODUCE_BASELINE), mb_s(&produces));
        for r in [&mut relay, &mut baseline] {
            let runs = r["runs"].clone();
            if let (Some(o), Some(s)) = (
                r.as_object_mut(),
                crate::runs::spread(
                    runs.as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|x| x["payload_mb_s"].as_f64()),
                ),
            ) {
                o.insert("payload_mb_s".into(), json!(s.median));
                o.insert("payload_mb_s_min".into(), json!(s.min));
                o.insert("payload_mb_s_max".into(), json!(s.max));
            }
        }
        out.push(relay);
        out.push(baseline);
    }
    Ok(out)
}

/// (c) One long backlog: the drain's pace, the relay's memory and the
/// slot's retained WAL, sampled every second while it drains.
pub(crate) async fn long_backlog(s: &Services, a: &Args) -> Result<Json> {
    let rows = a.long_rows;
    let engine = Engine::Relay;
    eprintln!("[bench] curve: a backlog of {rows} rows in transactions of 100");
    let b = prepare(s, a, "bench_relay_long", engine).await?;
    let write_s = crate::engines::write_backlog(&b, rows, a.payload, 100).await?;
    eprintln!("[bench]   written in {write_s:.0} s");
    let collector = Collector::start(&s.kafka, &b.topic, a.partitions, engine)?;
    let slot = b.config.postgres.slot.clone();
    let before = retained(&b.client, &slot).await?;
    let started = now_ms();
    let t = Instant::now();
    let (mut run, _) = Running::start(s, engine, &b).await?;
    let mut samples = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(7200);
    loop {
        let seen = collector.distinct();
        let rss = rss_mib(run.pid()).unwrap_or(0.0);
        let (wal, unconfirmed) = retained(&b.client, &slot).await.unwrap_or((0.0, 0.0));
        samples.push(json!([
            round(t.elapsed().as_secs_f64(), 1),
            seen,
            round(rss, 1),
            round(mib(wal), 1),
            round(mib(unconfirmed), 1)
        ]));
        if seen as i64 >= rows {
            break;
        }
        if Instant::now() > deadline {
            return Err(anyhow!("{seen} of {rows} rows in Kafka after two hours"));
        }
        if let Some(why) = run.failed(s) {
            return Err(anyhow!("{why}"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    wait_until_seen(
        &collector,
        rows as usize,
        &mut run,
        s,
        Duration::from_secs(60),
    )
    .await?;
    // The slot's confirmation follows the marks: a few seconds more.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after_wal = retained(&b.client, &slot).await?;
    let after = usage(run.pid())?;
    run.stop(s)?;
    let seen = collector.finish()?;
    drop_bench(s, b).await?;
    let first = seen.first.values().min().copied().unwrap_or(0);
    let last = seen.first.values().max().copied().unwrap_or(0);
    let span_s = (last - first).max(1) as f64 / 1000.0;
    // The pace in each tenth of the drain, by append time: linear growth
    // keeps it flat.
    let mut times: Vec<i64> = seen.first.values().copied().collect();
    times.sort_unstable();
    let tenths: Vec<Json> = (0..10)
        .map(|i| {
            let lo = times[times.len() * i / 10];
            let hi = times[(times.len() * (i + 1) / 10).min(times.len()) - 1];
            let n = times.len() / 10;
            json!(round(n as f64 / ((hi - lo).max(1) as f64 / 1000.0), 0))
        })
        .collect();
    eprintln!(
        "[bench]   {:.0} msg/s over {span_s:.0} s; peak RSS {:.0} MiB",
        (seen.first.len() - 1) as f64 / span_s,
        after.peak_rss_mib
    );
    Ok(json!({
        "scenario": "curve_long_backlog",
        "engine": engine.tag(),
        "rows": rows,
        "rows_per_transaction": 100,
        "payload_bytes": a.payload,
        "backlog_write_s": round(write_s, 0),
        "first_record_after_start_s": round((first as f64 - started) / 1000.0, 2),
        "first_to_last_s": round(span_s, 1),
        "throughput_msg_s": round((seen.first.len() - 1) as f64 / span_s, 0),
        "throughput_msg_s_by_tenth": tenths,
        "duplicates": seen.records - seen.first.len(),
        "cpu_s": round(after.cpu_s, 1),
        "peak_rss_mib": round(after.peak_rss_mib, 1),
        "retained_wal_mib_before": round(mib(before.0), 0),
        "retained_wal_mib_after": round(mib(after_wal.0), 1),
        "unconfirmed_wal_mib_before": round(mib(before.1), 0),
        "unconfirmed_wal_mib_after": round(mib(after_wal.1), 1),
        "samples": {"columns": ["seconds", "records_in_kafka", "rss_mib", "retained_wal_mib", "unconfirmed_wal_mib"], "rows": samples},
    }))
}

/// The WAL `slot` holds back (from its `restart_lsn`, which PostgreSQL
/// moves at its own pace behind what is confirmed), and the WAL past what
/// the relay confirmed (`confirmed_flush_lsn`), in bytes.
async fn retained(c: &tokio_postgres::Client, slot: &str) -> Result<(f64, f64)> {
    let row = c
        .query_one(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::float8, \
                    pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::float8 \
             FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}

fn mib(bytes: f64) -> f64 {
    bytes / f64::from(1u32 << 20)
}

/// A process's resident memory now.
fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}
