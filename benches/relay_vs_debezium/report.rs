//! The results: medians of repetitions, ratios, the environment, and the
//! Markdown table.

use std::process::Command;

use anyhow::Result;
use serde_json::{json, Value as Json};

use crate::args::Args;
use crate::cpu::WINDOW_COST;
use crate::engine::Engine;
use crate::numbers::round;
use crate::runs::{spread, spread_of, Spread};
use crate::services::Services;
use crate::*;

/// How far past the shared-CPU bound a drain may go before the run is
/// invalid: the bound is itself measured, to within a few per cent.
pub(crate) const BOUND_TOLERANCE: f64 = 0.05;

pub(crate) fn command_line(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .map(|o| {
            let text = if o.stdout.is_empty() {
                o.stderr
            } else {
                o.stdout
            };
            String::from_utf8_lossy(&text)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .unwrap_or_default()
}

pub(crate) async fn environment(s: &Services) -> Result<Json> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: f64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default();
    let pg = s.connect("postgres").await?;
    let pg_version: String = pg.query_one("SHOW server_version", &[]).await?.get(0);
    s.services("start-connect")?;
    let (_, root) = s.rest("GET", "/", None)?;
    let kafka: Json = serde_json::from_str(&root).unwrap_or_default();
    let (_, plugins) = s.rest("GET", "/connector-plugins", None)?;
    let plugins: Json = serde_json::from_str(&plugins).unwrap_or_default();
    let debezium = plugins
        .as_array()
        .and_then(|p| {
            p.iter().find(|p| {
                p["class"]
                    .as_str()
                    .is_some_and(|c| c.contains("PostgresConnector"))
            })
        })
        .and_then(|p| p["version"].as_str())
        .unwrap_or("?")
        .to_string();
    let worker = std::fs::read_to_string(s.state.join("connect.pid"))
        .ok()
        .and_then(|pid| std::fs::read(format!("/proc/{}/cmdline", pid.trim())).ok())
        .map(|c| {
            c.split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).to_string())
                .filter(|a| a.starts_with("-X"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    s.services("stop-connect")?;
    Ok(json!({
        "machine": {
            "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "memory_gib": round(mem_kib / 1024.0 / 1024.0, 1),
            "cpu": model,
            "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        },
        "versions": {
            "outbox-cdc": format!("{} ({})", env!("CARGO_PKG_VERSION"), command_line("git", &["describe", "--always", "--dirty"])),
            "rustc": command_line("rustc", &["--version"]),
            "postgresql": pg_version,
            "kafka": kafka["version"],
            "debezium": debezium,
            "java": command_line("java", &["-version"]),
        },
        "connect_worker_jvm": worker,
    }))
}

pub(crate) fn find<'a>(results: &'a [Json], scenario: &str, engine: &str) -> Option<&'a Json> {
    results
        .iter()
        .find(|r| r["scenario"] == scenario && r["engine"] == engine)
}

/// Puts `fresh`'s keys into `into`, object into object.
pub(crate) fn merge(into: &mut Json, fresh: Json) {
    match (into, fresh) {
        (Json::Object(into), Json::Object(fresh)) => {
            for (k, v) in fresh {
                merge(into.entry(k).or_insert(Json::Null), v);
            }
        }
        (into, fresh) => *into = fresh,
    }
}

pub(crate) fn ratios(a: &Args, results: &[Json]) -> Json {
    let num = |r: Option<&Json>, path: &[&str]| -> Option<f64> {
        let mut v = r?;
        for p in path {
            v = &v[*p];
        }
        v.as_f64()
    };
    let relay = Engine::Relay.tag();
    let dbz = Engine::Debezium.tag();
    let mut out = serde_json::Map::new();
    // Each ratio's range over the repeats: [lowest, highest].
    let mut spreads = serde_json::Map::new();
    for tx in &a.tx_sizes {
        let sc = format!("backlog_tx{tx}");
        let r = find(results, &sc, relay).and_then(|r| spread_of(r, "throughput_msg_s"));
        let d = find(results, &sc, dbz).and_then(|r| spread_of(r, "throughput_msg_s"));
        if let (Some(r), Some(d)) = (r, d) {
            let k = format!("throughput_vs_debezium_tx{tx}");
            out.insert(k.clone(), json!(round(r.median / d.median, 2)));
            spreads.insert(k, json!([round(r.min / d.max, 2), round(r.max / d.min, 2)]));
        }
    }
    // Transactional delivery against idempotent delivery and against
    // Debezium with exactly-once source support.
    let tx = Engine::RelayTransactional.tag();
    let eos = Engine::DebeziumExactlyOnce.tag();
    for size in &a.tx_sizes {
        let sc = format!("backlog_tx{size}");
        let t = num(find(results, &sc, tx), &["throughput_msg_s"]);
        for (name, other) in [("idempotent", relay), ("debezium_exactly_once", eos)] {
            let o = num(find(results, &sc, other), &["throughput_msg_s"]);
            if let (Some(t), Some(o)) = (t, o) {
                out.insert(
                    format!("transactional_vs_{name}_tx{size}"),
                    json!(round(t / o, 2)),
                );
            }
        }
    }
    // The streams: the relay's percentiles at each rate, and its p99
    // against Debezium's at the highest.
    let steady = |e: &str, rate: u32| {
        results
            .iter()
            .find(|r| r["scenario"] == "steady" && r["engine"] == e && r["rate_msg_s"] == rate)
    };
    for rate in &a.rates {
        for p in ["p50", "p99"] {
            if let Some(v) = num(steady(relay, *rate), &["latency_ms", p]) {
                out.insert(format!("relay_{p}_ms_at_{rate}"), json!(v));
            }
        }
    }
    if let Some(top) = a.rates.iter().max() {
        let p99 = |e: &str| num(steady(e, *top), &["latency_ms", "p99"]);
        if let (Some(r), Some(d)) = (p99(relay), p99(dbz)) {
            out.insert("p99_vs_debezium".into(), json!(round(r / d, 3)));
        }
    }
    let peak = |e: &str| {
        results
            .iter()
            .filter(|r| r["engine"] == e)
            .filter_map(|r| r["peak_rss_mib"].as_f64())
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
    };
    if let (Some(r), Some(d)) = (peak(relay), peak(dbz)) {
        out.insert("peak_memory_vs_debezium".into(), json!(round(r / d, 3)));
    }
    let read = num(
        find(results, "baseline_slot_read_tx100", READ_BASELINE),
        &["throughput_msg_s"],
    );
    let produce = num(
        find(results, "baseline_produce", PRODUCE_BASELINE),
        &["throughput_msg_s"],
    );
    let relay100 = num(find(results, "backlog_tx100", relay), &["throughput_msg_s"]);
    if let (Some(r), Some(p), Some(x)) = (read, produce, relay100) {
        out.insert(
            "throughput_vs_lower_baseline_tx100".into(),
            json!(round(x / r.min(p), 2)),
        );
    }
    // Each baseline leaves the other half of the work undone: a relay must
    // spend both their CPU per message on the same cores. This bound says
    // what the machine can do when both halves share it perfectly; reading
    // is costed on a backlog of the drain's own transaction size, since a
    // 1-row transaction costs the walsender a BEGIN and a COMMIT per row.
    // Each half at its cheapest repetition: a bound must not count the
    // background work some windows caught (the medians are in the results).
    let cpu = |scenario: &str, engine: &str| {
        num(
            find(results, scenario, engine),
            &[&format!("{WINDOW_COST}_min")],
        )
    };
    let cores = std::thread::available_parallelism()
        .map(|n| n.get() as f64)
        .unwrap_or(1.0);
    let mut over = Vec::new();
    let mut bounded = false;
    for tx in &a.tx_sizes {
        let (Some(r), Some(p)) = (
            cpu(&format!("baseline_slot_read_tx{tx}"), READ_BASELINE),
            cpu("baseline_produce", PRODUCE_BASELINE),
        ) else {
            continue;
        };
        bounded = true;
        let bound = cores * 1e6 / (r + p);
        out.insert(
            format!("shared_cpu_bound_msg_s_tx{tx}"),
            json!(round(bound, 0)),
        );
        let sc = format!("backlog_tx{tx}");
        if let Some(v) = find(results, &sc, relay).and_then(|r| spread_of(r, "throughput_msg_s")) {
            let k = format!("throughput_vs_shared_cpu_bound_tx{tx}");
            out.insert(k.clone(), json!(round(v.median / bound, 2)));
            spreads.insert(k, json!([round(v.min / bound, 2), round(v.max / bound, 2)]));
        }
        // The same ratio drain by drain, each against the bound of the
        // baselines measured just before and just after it: the machine's
        // speed moves about 2x from minute to minute, and the bound above
        // is its fastest minute, where a median drain is a typical one.
        if let Some(p) = bracketed(results, *tx, relay, cores) {
            let k = format!("throughput_vs_shared_cpu_bound_paired_tx{tx}");
            out.insert(k.clone(), json!(round(p.median, 2)));
            spreads.insert(k, json!([round(p.min, 2), round(p.max, 2)]));
        }
        // A bound a relay passes is no bound: the baselines were measured
        // on a slower machine than some drain, and the run is not valid.
        // Within the tolerance a drain is at the bound (one of twenty drains
        // at 1.0007 of it invalidated a full run).
        for r in results.iter().filter(|r| {
            r["scenario"] == sc.as_str()
                && r["engine"]
                    .as_str()
                    .is_some_and(|e| e.starts_with("outbox-cdc"))
        }) {
            let runs = r["runs"].as_array().cloned().unwrap_or_default();
            for (i, run) in runs.iter().enumerate() {
                if let Some(v) = run["throughput_msg_s"]
                    .as_f64()
                    .filter(|v| *v > bound * (1.0 + BOUND_TOLERANCE))
                {
                    over.push(format!(
                        "{} {sc} run {}: {v:.0} msg/s, bound {bound:.0}",
                        r["engine"].as_str().unwrap_or(""),
                        i + 1
                    ));
                }
            }
        }
    }
    if bounded {
        out.insert("valid".into(), json!(over.is_empty()));
        if !over.is_empty() {
            out.insert("over_the_bound".into(), json!(over));
        }
    }
    // The price of PUBLISHED bookkeeping, and the relay's own CPU.
    let unmarked = Engine::RelayUnmarked.tag();
    for tx in &a.tx_sizes {
        let sc = format!("backlog_tx{tx}");
        let on = num(find(results, &sc, relay), &["throughput_msg_s"]);
        let off = num(find(results, &sc, unmarked), &["throughput_msg_s"]);
        if let (Some(on), Some(off)) = (on, off) {
            out.insert(
                format!("bookkeeping_cost_tx{tx}"),
                json!(round(1.0 - on / off, 3)),
            );
        }
        // Each drain against the other engine's of the same repetition: a
        // pair shares its minute of the machine, where medians compare
        // different minutes.
        if let Some(p) = paired(results, &sc, relay, unmarked) {
            out.insert(
                format!("bookkeeping_cost_paired_tx{tx}"),
                json!(round(1.0 - p.median, 3)),
            );
        }
        for (name, other) in [
            ("fixed_linger", Engine::RelayFixedLinger),
            ("linger_0", Engine::RelayLinger0),
        ] {
            if let Some(p) = paired(results, &sc, relay, other.tag()) {
                let k = format!("throughput_vs_{name}_paired_tx{tx}");
                out.insert(k.clone(), json!(round(p.median, 3)));
                spreads.insert(k, json!([round(p.min, 3), round(p.max, 3)]));
            }
        }
        if let Some(cpu) = find(results, &sc, relay).and_then(|r| spread_of(r, "cpu_s")) {
            let per = |s: f64| round(s * 1e6 / a.rows as f64, 1);
            let k = format!("relay_cpu_us_per_msg_tx{tx}");
            out.insert(k.clone(), json!(per(cpu.median)));
            spreads.insert(k, json!([per(cpu.min), per(cpu.max)]));
        }
    }
    if let Some(peak) = results
        .iter()
        .filter(|r| {
            r["engine"] == relay
                && r["scenario"]
                    .as_str()
                    .is_some_and(|x| x.starts_with("backlog"))
        })
        .filter_map(|r| r["peak_rss_mib"].as_f64())
        .reduce(f64::max)
    {
        out.insert("relay_peak_rss_backlog_mib".into(), json!(peak));
    }
    let big = find(results, "one_transaction", relay);
    let big_peak = num(big, &["peak_rss_mib"]);
    let reference_peak = num(big, &["reference_tx100", "peak_rss_mib"]);
    if let (Some(big), Some(small)) = (big_peak, reference_peak) {
        out.insert(
            "one_transaction_peak_rss_vs_tx100".into(),
            json!(round(big / small, 2)),
        );
    }
    for rate in &a.rates {
        for p in ["p50", "p99"] {
            let l = &steady(relay, *rate)
                .map(|r| r["latency_ms"].clone())
                .unwrap_or_default();
            if let (Some(lo), Some(hi)) = (
                l[format!("{p}_min")].as_f64(),
                l[format!("{p}_max")].as_f64(),
            ) {
                spreads.insert(format!("relay_{p}_ms_at_{rate}"), json!([lo, hi]));
            }
        }
    }
    // A ratio whose two sides' ranges over the repeats overlap (for a
    // paired ratio: whose range holds 1) shows no difference this machine
    // can tell from its noise.
    let mut within = Vec::new();
    for tx in &a.tx_sizes {
        let sc = format!("backlog_tx{tx}");
        let of = |e: &str| find(results, &sc, e).and_then(|r| spread_of(r, "throughput_msg_s"));
        for (key, other) in [
            (format!("throughput_vs_debezium_tx{tx}"), dbz),
            (format!("bookkeeping_cost_tx{tx}"), unmarked),
        ] {
            if let (Some(x), Some(y)) = (of(relay), of(other)) {
                if out.contains_key(&key) && x.overlaps(&y) {
                    within.push(json!(key));
                }
            }
        }
        for (key, other) in [
            (format!("bookkeeping_cost_paired_tx{tx}"), unmarked),
            (
                format!("throughput_vs_fixed_linger_paired_tx{tx}"),
                Engine::RelayFixedLinger.tag(),
            ),
            (
                format!("throughput_vs_linger_0_paired_tx{tx}"),
                Engine::RelayLinger0.tag(),
            ),
        ] {
            if paired(results, &sc, relay, other).is_some_and(|p| p.min <= 1.0 && 1.0 <= p.max) {
                within.push(json!(key));
            }
        }
    }
    out.insert("within_spread".into(), Json::Array(within));
    out.insert("spreads".into(), Json::Object(spreads));
    Json::Object(out)
}

/// Each of `engine`'s drains of `tx`-row transactions against the
/// shared-CPU bound of the two baseline passes around it (repetition `i`
/// runs after pass `i` and before pass `i + 1`), over the repetitions.
fn bracketed(results: &[Json], tx: i64, engine: &str, cores: f64) -> Option<Spread> {
    let of = |scenario: &str, engine: &str, key: &str| -> Vec<f64> {
        find(results, scenario, engine)
            .and_then(|r| r["runs"].as_array())
            .map(|runs| runs.iter().filter_map(|r| r[key].as_f64()).collect())
            .unwrap_or_default()
    };
    let reads = of(
        &format!("baseline_slot_read_tx{tx}"),
        READ_BASELINE,
        WINDOW_COST,
    );
    let produces = of("baseline_produce", PRODUCE_BASELINE, WINDOW_COST);
    let drains = of(&format!("backlog_tx{tx}"), engine, "throughput_msg_s");
    let around = |costs: &[f64], i: usize| Some((costs.get(i)? + costs.get(i + 1)?) / 2.0);
    let ratios: Vec<f64> = drains
        .iter()
        .enumerate()
        .filter_map(|(i, rate)| {
            let cost = around(&reads, i)? + around(&produces, i)?;
            Some(rate * cost / (cores * 1e6))
        })
        .collect();
    match ratios.len() == drains.len() {
        true => spread(ratios.into_iter()),
        false => None,
    }
}

/// The ratio of `engine`'s drain to `other`'s in each repetition, over the
/// repetitions.
fn paired(results: &[Json], scenario: &str, engine: &str, other: &str) -> Option<Spread> {
    let rates = |e: &str| -> Vec<f64> {
        find(results, scenario, e)
            .and_then(|r| r["runs"].as_array())
            .map(|runs| {
                runs.iter()
                    .filter_map(|r| r["throughput_msg_s"].as_f64())
                    .collect()
            })
            .unwrap_or_default()
    };
    spread(rates(engine).iter().zip(rates(other)).map(|(a, b)| a / b))
}
