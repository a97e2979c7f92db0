//! outbox-cdc and Debezium side by side on the same local services, with the
//! two raw baselines that bound what any relay can do on this machine.
//!
//!     scripts/bench.sh [--rows N] [--payload BYTES] [--rate MSG_PER_S] [--seconds S]
//!
//! Every figure of one run lands in `docs/benchmark.json` and the table in
//! `docs/benchmark.md`. Time in Kafka is the broker's: the bench topics use
//! `message.timestamp.type=LogAppendTime`, so "first to last record" and
//! "commit to Kafka" are read off the records by a consumer, the same way for
//! both relays. Not a test: it asserts nothing about time.

mod args;
mod baselines;
mod collect;
mod cpu;
mod curves;
mod engine;
mod engines;
mod markdown;
mod numbers;
mod profile;
mod replication;
mod report;
mod rows;
mod runs;
mod scenarios;
mod services;
mod steady;

use std::fs::File;
use std::io::Write as _;

use anyhow::Result;
use serde_json::{json, Value as Json};

use args::Args;
use baselines::{raw_produce, slot_read, Keep};
use engine::Engine;
use engines::debezium_tuning;
use markdown::markdown;
use outbox_cdc::replication::slot;
use report::{command_line, environment, ratios};
use runs::summary;
use scenarios::{backlog_once, instructions, one_big_transaction};
use services::Services;

// The relay's allocator, for the baselines' librdkafka and reader too.
outbox_cdc::use_jemalloc!();

/// The bench's slots: no snapshot, no failover copy.
pub(crate) const NO_SNAPSHOT: slot::NewSlot = slot::NewSlot {
    snapshot: slot::Snapshot::None,
    failover: slot::Failover::Off,
};

pub(crate) const READ_BASELINE: &str = "reader only (no Kafka)";
pub(crate) const PRODUCE_BASELINE: &str = "librdkafka only (no PostgreSQL)";
pub(crate) const RELAY_BIN: &str = env!("CARGO_BIN_EXE_outbox-cdc");
/// Every bench row goes to this destination, so each run has one topic.
/// The pace of the slower read, as a share of the unpaced rate: below the
/// rate the walsender reaches alone, so its socket fills, and about where
/// relay drains run.
pub(crate) const READ_PACE: f64 = 0.7;

/// The pace of the slower produce, as a share of the unpaced rate: about
/// where relay drains run.
pub(crate) const PRODUCE_PACE: f64 = 0.5;

pub(crate) const DESTINATION: &str = "orders";
pub(crate) const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Debezium tuned for throughput as its documentation describes: larger
/// batches and queue, a short poll interval, and the Connect producer given
/// the relay's own producer settings (batching with linger, idempotent,
/// acks=all, five requests in flight, no compression) through
/// `producer.override.*`. Extra or changed keys: BENCH_DEBEZIUM_PROPERTIES
/// as `key=value,key=value`.
pub(crate) const DEBEZIUM_TUNING: [(&str, &str); 8] = [
    ("max.batch.size", "8192"),
    ("max.queue.size", "32768"),
    ("poll.interval.ms", "50"),
    ("producer.override.batch.size", "1000000"),
    ("producer.override.compression.type", "none"),
    ("producer.override.acks", "all"),
    ("producer.override.enable.idempotence", "true"),
    (
        "producer.override.max.in.flight.requests.per.connection",
        "5",
    ),
];

/// As `outbox-cdc run` does, the bench runs as a task on the runtime's
/// workers: the future `block_on` drives sits on the main thread, and a read
/// baseline there paid a wake-up across cores for every batch from the
/// reader, which the relay does not (its session is a task beside the
/// reader), so the bound counted a costlier read than a relay's.
#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    tokio::spawn(bench()).await?
}

async fn bench() -> Result<()> {
    let a = Args::parse()?;
    let _ = rows::ROW_TRACE.set(a.row_trace);
    if std::env::args().any(|x| x == "--render-only") {
        // Rewrites the table from the results file, measuring nothing.
        let text = std::fs::read_to_string(a.out.join("benchmark.json"))?;
        let mut report: Json = serde_json::from_str(&text)?;
        // The ratios again, from the run's own results and settings: a
        // ratio added since the run is shown for it too.
        if let Some(results) = report["results"].as_array() {
            let fresh = ratios(&a.with_settings(&report["settings"]), results);
            report::merge(&mut report["ratios"], fresh);
            std::fs::write(
                a.out.join("benchmark.json"),
                serde_json::to_string_pretty(&report)? + "\n",
            )?;
        }
        write_charts(&a.out, &report)?;
        std::fs::write(a.out.join("benchmark.md"), markdown(&report))?;
        return Ok(());
    }
    let s = Services::from_env()?;
    let environment = environment(&s).await?;
    let mut results = Vec::new();
    let runs = |group: &str| a.only.iter().any(|g| g == group);
    // Baselines and drains take turns within each repetition, so the bound
    // the baselines give is measured on the machine the drains ran on.
    let (mut reads, mut produces, mut records) =
        (vec![Vec::new(); a.tx_sizes.len()], Vec::new(), Vec::new());
    let mut drains: Vec<Vec<Vec<Json>>> = vec![vec![Vec::new(); a.engines.len()]; a.tx_sizes.len()];
    // The baselines run before every repetition of the drains and once
    // after the last, so every drain has a baseline window on either side.
    let baseline_passes = a.repeat + usize::from(runs("backlog"));
    for i in 0..baseline_passes {
        if runs("baselines") {
            eprintln!("[bench] baselines ({}/{baseline_passes})", i + 1);
            for (tx, reads) in a.tx_sizes.iter().zip(reads.iter_mut()) {
                let keep = match records.is_empty() {
                    true => Keep::Records,
                    false => Keep::Figures,
                };
                let (read, r) = slot_read(&s, &a, *tx, keep).await?;
                reads.push(read);
                if records.is_empty() {
                    records = r;
                }
            }
            produces.push(raw_produce(&s, &a, &records).await?);
        }
        if runs("backlog") && i < a.repeat {
            for (tx, per_engine) in a.tx_sizes.iter().zip(drains.iter_mut()) {
                // Each repetition starts one engine later: no engine always
                // runs right after the same one. (When the default always
                // ran right after Debezium's worker stopped, it drained 100-row
                // backlogs at 0.85 of its pair, slower in 4 of 5 pairs, on
                // one code path; taking turns, the pairs' range holds 1.)
                let n = a.engines.len();
                for k in 0..n {
                    let e = (k + i) % n;
                    let (engine, runs) = (&a.engines[e], &mut per_engine[e]);
                    eprintln!(
                        "[bench] {}: backlog of {} rows in transactions of {tx} ({}/{})",
                        engine.tag(),
                        a.rows,
                        i + 1,
                        a.repeat
                    );
                    runs.push(backlog_once(&s, &a, *engine, *tx).await?);
                }
            }
        }
    }
    if runs("baselines") {
        let head = |scenario: &str, engine: &str, tx: i64| json!({"scenario": scenario, "engine": engine, "rows": records.len(), "rows_per_transaction": tx});
        for (tx, reads) in a.tx_sizes.iter().zip(reads) {
            let scenario = format!("baseline_slot_read_tx{tx}");
            results.push(summary(head(&scenario, READ_BASELINE, *tx), reads));
        }
        // The records of the first size's backlog; Kafka sees no transactions.
        let first = a.tx_sizes.first().copied().unwrap_or(100);
        results.push(summary(
            head("baseline_produce", PRODUCE_BASELINE, first),
            produces,
        ));
    }
    for (tx, per_engine) in a.tx_sizes.iter().zip(drains) {
        for (engine, runs) in a.engines.iter().zip(per_engine) {
            if !runs.is_empty() {
                results.push(summary(
                    json!({
                        "scenario": format!("backlog_tx{tx}"),
                        "engine": engine.tag(),
                        "rows": a.rows,
                        "rows_per_transaction": tx,
                    }),
                    runs,
                ));
            }
        }
    }
    if runs("steady") {
        // Repeats take turns, so a slow minute of the machine falls on
        // every engine alike.
        let engines: Vec<Engine> = a.engines.clone();
        let mut by: Vec<Vec<Vec<Json>>> = vec![vec![Vec::new(); a.rates.len()]; engines.len()];
        for i in 0..a.repeat {
            eprintln!("[bench] steady streams ({}/{})", i + 1, a.repeat);
            for (engine, per_rate) in engines.iter().zip(by.iter_mut()) {
                for (rate, runs) in a.rates.iter().zip(per_rate.iter_mut()) {
                    runs.push(steady::steady_once(&s, &a, *engine, *rate).await?);
                }
            }
        }
        for (engine, per_rate) in engines.iter().zip(by) {
            for (rate, runs) in a.rates.iter().zip(per_rate) {
                results.push(steady::latency_summary(*engine, *rate, runs));
            }
        }
    }
    if runs("replication") {
        results.extend(replication::replication_cost(&s, &a).await?);
    }
    if runs("instructions") {
        results.extend(instructions(&s, &a).await?);
    }
    // `curves` is all three; each also runs alone.
    let curve = |name: &str| runs("curves") || runs(&format!("curve-{name}"));
    if curve("destinations") {
        results.extend(curves::destinations(&s, &a).await?);
    }
    if curve("payload") {
        results.extend(curves::payloads(&s, &a).await?);
    }
    if curve("backlog") {
        results.push(curves::long_backlog(&s, &a).await?);
    }
    if runs("profile") {
        results.push(profile::profile(&s, &a).await?);
    }
    if runs("bigtx") {
        // Memory does not depend on linger: those engines are for the
        // drains and the streams.
        for engine in a
            .engines
            .iter()
            .copied()
            .filter(|e| !matches!(e, Engine::RelayFixedLinger | Engine::RelayLinger0))
        {
            let mut big = one_big_transaction(&s, &a, engine).await?;
            // The same rows in 100-row transactions: what memory is when the
            // transaction size is not the question. As many rows, because the
            // peak grows with a drain's length until the in-flight window is
            // reached (one 1 000 000-row drain: 33 MiB at 200 000 rows, 43
            // MiB from 600 000 on), and a shorter reference would charge that
            // to the transaction.
            let reference = Args {
                rows: a.big_rows,
                payload: a.big_payload,
                ..a.clone()
            };
            eprintln!(
                "[bench] {}: reference, {} rows of {} bytes in transactions of 100",
                engine.tag(),
                reference.rows,
                reference.payload
            );
            let r = backlog_once(&s, &reference, engine, 100).await?;
            if let Some(o) = big.as_object_mut() {
                o.insert(
                    "reference_tx100".into(),
                    json!({"rows": reference.rows, "payload_bytes": reference.payload,
                           "peak_rss_mib": r["peak_rss_mib"], "throughput_msg_s": r["throughput_msg_s"]}),
                );
            }
            results.push(big);
        }
    }
    let tuning: serde_json::Map<String, Json> = debezium_tuning()
        .into_iter()
        .map(|(k, v)| (k, Json::String(v)))
        .collect();
    let command = std::env::var("BENCH_COMMAND").unwrap_or_else(|_| "scripts/bench.sh".into());
    let date = command_line("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]);
    let report = json!({
        "date": date,
        "command": command,
        "environment": environment,
        "settings": {
            "rows": a.rows, "payload_bytes": a.payload, "tx_sizes": a.tx_sizes, "rates_msg_s": a.rates,
            "seconds": a.seconds, "partitions": a.partitions, "repeat": a.repeat, "curve_repeat": a.curve_repeat, "debezium_tuning": tuning,
            "relay_settings": std::env::var("BENCH_RELAY_SETTINGS").unwrap_or_default(),
            "relay_kafka_properties": std::env::var("BENCH_KAFKA_PROPERTIES").unwrap_or_default(),
            "baseline_relay_settings": std::env::var("BENCH_BASELINE_SETTINGS").unwrap_or_default(),
            "row_traceparent": match a.row_trace { rows::RowTrace::Sampled => "sampled", rows::RowTrace::Absent => "none" },
            "contract": a.contract.name(),
        },
        "results": results,
        "ratios": ratios(&a, &results),
    });
    std::fs::create_dir_all(&a.out)?;
    let mut f = File::create(a.out.join("benchmark.json"))?;
    writeln!(f, "{}", serde_json::to_string_pretty(&report)?)?;
    write_charts(&a.out, &report)?;
    std::fs::write(a.out.join("benchmark.md"), markdown(&report))?;
    println!("{}", serde_json::to_string_pretty(&report["ratios"])?);
    Ok(())
}

/// The SVG charts beside the table (`chart::benchmark`, which a test holds
/// the committed ones to).
fn write_charts(dir: &std::path::Path, report: &Json) -> Result<()> {
    for (name, svg) in outbox_cdc_testkit::chart::benchmark(report) {
        std::fs::write(dir.join(name), svg)?;
    }
    Ok(())
}
