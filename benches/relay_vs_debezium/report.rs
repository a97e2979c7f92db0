//! The results: medians of repetitions, ratios, the environment, and the
//! Markdown table.

use std::fmt::Write as _;
use std::process::Command;

use anyhow::Result;
use serde_json::{json, Value as Json};

use outbox_cdc::kafka::settings;

use crate::args::*;
use crate::cpu::*;
use crate::engines::*;
use crate::scenarios::*;
use crate::services::*;
use crate::*;

/// The medians of repeated runs (peak memory: the highest), with every run.
pub(crate) fn summary(head: Json, runs: Vec<Json>) -> Json {
    let mut out = head.as_object().cloned().unwrap_or_default();
    let median = |key: &str| {
        let mut v: Vec<f64> = runs.iter().filter_map(|r| r[key].as_f64()).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    for key in [
        "throughput_msg_s",
        "first_to_last_s",
        "first_record_after_start_s",
        "cpu_s",
        "machine_cpu_us_per_msg",
        WINDOW_COST,
    ] {
        if let Some(v) = median(key) {
            out.insert(key.into(), json!(v));
        }
    }
    let extreme = |key: &str, pick: fn(f64, f64) -> f64| {
        runs.iter().filter_map(|r| r[key].as_f64()).reduce(pick)
    };
    // Background work only ever adds to a window's CPU time, so the
    // cheapest repetition is the nearest to what the work itself costs.
    if let Some(c) = extreme("machine_cpu_us_per_msg", f64::min) {
        out.insert("machine_cpu_us_per_msg_min".into(), json!(c));
    }
    if let Some(c) = extreme(WINDOW_COST, f64::min) {
        out.insert(format!("{WINDOW_COST}_min"), json!(c));
    }
    if let Some(p) = extreme("peak_rss_mib", f64::max) {
        out.insert("peak_rss_mib".into(), json!(p));
    }
    let dups: u64 = runs.iter().filter_map(|r| r["duplicates"].as_u64()).sum();
    if runs.iter().any(|r| !r["duplicates"].is_null()) {
        out.insert("duplicates".into(), json!(dups));
    }
    out.insert("runs".into(), Json::Array(runs));
    Json::Object(out)
}

pub(crate) fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

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
    for tx in &a.tx_sizes {
        let sc = format!("backlog_tx{tx}");
        let r = num(find(results, &sc, relay), &["throughput_msg_s"]);
        let d = num(find(results, &sc, dbz), &["throughput_msg_s"]);
        if let (Some(r), Some(d)) = (r, d) {
            out.insert(
                format!("throughput_vs_debezium_tx{tx}"),
                json!(round(r / d, 2)),
            );
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
    let p99 = |e: &str| num(find(results, "steady", e), &["latency_ms", "p99"]);
    if let (Some(r), Some(d)) = (p99(relay), p99(dbz)) {
        out.insert("p99_vs_debezium".into(), json!(round(r / d, 3)));
    }
    if let Some(r) = p99(relay) {
        out.insert("relay_p99_ms".into(), json!(r));
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
        if let Some(v) = num(find(results, &sc, relay), &["throughput_msg_s"]) {
            out.insert(
                format!("throughput_vs_shared_cpu_bound_tx{tx}"),
                json!(round(v / bound, 2)),
            );
        }
        // A bound a relay passes is no bound: the baselines were measured
        // on a slower machine than some drain, and the run is not valid.
        for r in results.iter().filter(|r| {
            r["scenario"] == sc.as_str()
                && r["engine"]
                    .as_str()
                    .is_some_and(|e| e.starts_with("outbox-cdc"))
        }) {
            let runs = r["runs"].as_array().cloned().unwrap_or_default();
            for (i, run) in runs.iter().enumerate() {
                if let Some(v) = run["throughput_msg_s"].as_f64().filter(|v| *v > bound) {
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
        // Each marked drain against the unmarked one that ran right after
        // it: a pair shares its minute of the machine, where medians of
        // three drains each compare different minutes.
        let rates = |e: &str| -> Vec<f64> {
            find(results, &sc, e)
                .and_then(|r| r["runs"].as_array())
                .map(|runs| {
                    runs.iter()
                        .filter_map(|r| r["throughput_msg_s"].as_f64())
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut pairs: Vec<f64> = rates(relay)
            .iter()
            .zip(rates(unmarked))
            .map(|(on, off)| 1.0 - on / off)
            .collect();
        pairs.sort_by(f64::total_cmp);
        if let Some(m) = pairs.get(pairs.len() / 2) {
            out.insert(
                format!("bookkeeping_cost_paired_tx{tx}"),
                json!(round(*m, 3)),
            );
        }
        let cpu = num(find(results, &sc, relay), &["cpu_s"]);
        if let Some(cpu) = cpu {
            out.insert(
                format!("relay_cpu_us_per_msg_tx{tx}"),
                json!(round(cpu * 1e6 / a.rows as f64, 1)),
            );
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
    Json::Object(out)
}

/// A figure as the tables show it: whole numbers without a fraction.
pub(crate) fn number(v: &Json) -> String {
    match v.as_f64() {
        None => "–".to_string(),
        Some(f) if f.fract() == 0.0 => format!("{}", f as i64),
        Some(f) => format!("{f}"),
    }
}

pub(crate) fn markdown(report: &Json) -> String {
    let mut md = String::new();
    let env = &report["environment"];
    let m = &env["machine"];
    let v = &env["versions"];
    let s = &report["settings"];
    let _ = writeln!(md, "# Benchmark: outbox-cdc and Debezium on one machine\n");
    if report["ratios"]["valid"] == false {
        let over: Vec<String> = report["ratios"]["over_the_bound"]
            .as_array()
            .map(|v| {
                v.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let _ = writeln!(
            md,
            "**This run is invalid**: a relay drain passed the shared-CPU bound of its \
            transaction size ({}), so the baselines do not bound what this machine did. Run it again.\n",
            over.join("; ")
        );
    }
    let _ = writeln!(md, "Generated by `{}` on {}; every figure below comes from that one run \
        (`docs/benchmark.json` holds them all). Reproduce with the same command on a fresh clone.\n",
        report["command"].as_str().unwrap_or(""), report["date"].as_str().unwrap_or(""));
    let _ = writeln!(
        md,
        "- Machine: {} cores, {} GiB, {}; Linux {}",
        m["cores"],
        m["memory_gib"],
        m["cpu"].as_str().unwrap_or("?"),
        m["kernel"].as_str().unwrap_or("?")
    );
    let _ = writeln!(
        md,
        "- Versions: outbox-cdc {}, {}, PostgreSQL {}, Kafka {}, Debezium {}, {}",
        v["outbox-cdc"].as_str().unwrap_or("?"),
        v["rustc"].as_str().unwrap_or("?"),
        v["postgresql"].as_str().unwrap_or("?"),
        v["kafka"].as_str().unwrap_or("?"),
        v["debezium"].as_str().unwrap_or("?"),
        v["java"].as_str().unwrap_or("?")
    );
    let _ = writeln!(md, "- Services: all on this machine (PostgreSQL, one Kafka broker, one Kafka Connect worker with JVM flags `{}`), \
        started by `scripts/services.sh`. The Connect worker is restarted before each Debezium run and stopped otherwise.",
        env["connect_worker_jvm"].as_str().unwrap_or(""));
    let _ = writeln!(md, "- Load: {} rows of about {} bytes of payload per backlog; steady stream of {} msg/s for {} s in 1-row transactions; topic with {} partitions and `LogAppendTime`.",
        s["rows"], s["payload_bytes"], s["rate_msg_s"], s["seconds"], s["partitions"]);
    let tuning: Vec<String> = s["debezium_tuning"]
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| format!("`{k}={}`", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    let _ = writeln!(
        md,
        "- Debezium tuning (on top of the generated configuration): {}.",
        tuning.join(", ")
    );
    let defaults: Vec<String> = settings::DEFAULTS
        .iter()
        .map(|(k, v)| format!("`{k}={v}`"))
        .collect();
    let _ = writeln!(
        md,
        "- outbox-cdc: defaults ({}, idempotent, `acks=all`), PUBLISHED marks on.\n",
        defaults.join(", ")
    );

    let _ = writeln!(
        md,
        "## Throughput: backlog drained, first to last record in Kafka\n"
    );
    let _ = writeln!(md, "Median of {} drains per row (each on a fresh database; every run is in the JSON). \
        CPU is the relay process's (for Debezium, the Connect worker's) from its start to the last record; \
        machine CPU is the busy time of the whole machine (database, broker, relay, bench consumer) per message, \
        over the whole run and, as the throughput is, from the first record to the last.\n",
        s["repeat"]);
    let charts: Vec<&str> = outbox_cdc_testkit::chart::benchmark(report)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let image = |md: &mut String, name: &str, alt: &str| {
        if charts.contains(&name) {
            let _ = writeln!(md, "![{alt}]({name})\n");
        }
    };
    image(
        &mut md,
        "benchmark-throughput.svg",
        "Backlog throughput of each relay beside the shared-CPU bound",
    );
    let _ = writeln!(md, "| scenario | relay | msg/s | first to last (s) | first record after start (s) | CPU (s) | machine CPU (µs/msg) | first to last (µs/msg) | peak RSS (MiB) |");
    let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|---:|---:|");
    let results = report["results"].as_array().cloned().unwrap_or_default();
    for r in results.iter().filter(|r| {
        r["scenario"]
            .as_str()
            .is_some_and(|x| x.starts_with("backlog") || x.starts_with("baseline"))
    }) {
        let cell = |k: &str| number(&r[k]);
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r["scenario"].as_str().unwrap_or(""),
            r["engine"].as_str().unwrap_or(""),
            cell("throughput_msg_s"),
            cell("first_to_last_s"),
            cell("first_record_after_start_s"),
            cell("cpu_s"),
            cell("machine_cpu_us_per_msg"),
            cell(WINDOW_COST),
            cell("peak_rss_mib")
        );
    }
    let bounds: Vec<String> = report["ratios"]
        .as_object()
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| {
                    let tx = k.strip_prefix("shared_cpu_bound_msg_s_tx")?;
                    Some(format!("{} msg/s for {tx}-row transactions", number(v)))
                })
                .collect()
        })
        .unwrap_or_default();
    if !bounds.is_empty() {
        let _ = writeln!(md, "\nThe baselines bound what any relay can do here. The slot-read baseline reads a backlog \
            of each transaction size twice, as fast as it goes and paced at {READ_PACE} of that rate, and its machine CPU is \
            the cheaper of the two: a reader that keeps up takes every message as the walsender sends it, one segment \
            and one wake-up each, while a busy relay lets the socket fill. The produce baseline sends the same records \
            with the relay's producer settings and allocator, also twice, as fast as it goes and paced at {PRODUCE_PACE} of \
            that rate, and keeps the cheaper: a producer that outruns librdkafka's broker thread contends with it for \
            every partition queue. The shared-CPU bound is cores × 10⁶ / (read + produce \
            µs/msg), each counted from its first message to its last, as throughputs are (start-up and the tail cost \
            the same CPU whatever the backlog, and a drain's throughput leaves them out), and each at its cheapest \
            repetition (background work only adds to a window; the baselines run before every repetition of the drains \
            and once after the last): {}. A run in which a relay drain passes it is marked \
            invalid.", bounds.join(", "));
    }
    let _ = writeln!(
        md,
        "\n## Latency: commit to Kafka at a fixed offered load\n"
    );
    image(
        &mut md,
        "benchmark-latency.svg",
        "Commit-to-Kafka latency percentiles of each relay",
    );
    let _ = writeln!(
        md,
        "| relay | offered msg/s | p50 (ms) | p99 (ms) | max (ms) | CPU (s) | machine busy | peak RSS (MiB) |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in results.iter().filter(|r| r["scenario"] == "steady") {
        let l = &r["latency_ms"];
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} % | {} |",
            r["engine"].as_str().unwrap_or(""),
            number(&r["offered_msg_s"]),
            number(&l["p50"]),
            number(&l["p99"]),
            number(&l["max"]),
            number(&r["cpu_s"]),
            number(&r["machine_cpu_busy_pct"]),
            number(&r["peak_rss_mib"])
        );
    }
    let _ = writeln!(md, "\nLatency is the broker's append time of the record minus the time the writer's COMMIT returned \
        (1 ms resolution: the broker stamps milliseconds). CPU is for the measured window of each scenario.\n");
    let _ = writeln!(md, "Engines that publish in Kafka transactions (`delivery = transactional`, Debezium with \
        `exactly.once.support = required`) are read by a `read_committed` consumer, and their times are when that \
        consumer received a record: a record is not visible before its transaction commits, so its append time \
        would flatter them.\n");
    let _ = writeln!(md, "## Where the machine's time went\n");
    let _ = writeln!(md, "Busy time of the whole machine per message, split by process from `/proc` over the same \
        window as the machine CPU above (for drains, the run whose throughput is the median). `bench` is the bench's own \
        process: the reader in the slot-read baseline, the producer in the produce baseline, and in every scenario its \
        consumer (and, for the steady stream, its writers' client side); `other` is time of processes that exited \
        within the window. The split shows why costs measured apart do not simply add up: the walsender spends less per row when \
        its reader applies back-pressure (hence the paced read), and the broker's share moves with the size of produce \
        requests and with its own background work.\n");
    let _ = writeln!(md, "| scenario | relay | machine µs/msg by process |");
    let _ = writeln!(md, "|---|---|---|");
    for r in results.iter().filter(|r| {
        r["scenario"]
            .as_str()
            .is_some_and(|x| x.starts_with("backlog") || x.starts_with("baseline") || x == "steady")
    }) {
        let runs = r["runs"].as_array().cloned().unwrap_or_default();
        let typical = runs
            .iter()
            .find(|x| x["throughput_msg_s"] == r["throughput_msg_s"])
            .unwrap_or(r);
        let Some(split) = typical["machine_cpu_us_per_msg_by_process"].as_object() else {
            continue;
        };
        let mut parts: Vec<(&String, f64)> = split
            .iter()
            .filter_map(|(k, v)| v.as_f64().map(|v| (k, v)))
            .collect();
        parts.sort_by(|a, b| b.1.total_cmp(&a.1));
        let cells: Vec<String> = parts.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(
            md,
            "| {} | {} | {} |",
            r["scenario"].as_str().unwrap_or(""),
            r["engine"].as_str().unwrap_or(""),
            cells.join(" · ")
        );
    }
    let _ = writeln!(md);
    let counted: Vec<&Json> = results
        .iter()
        .filter(|r| r["scenario"] == "instructions")
        .collect();
    if let Some(r) = counted.first() {
        let _ = writeln!(md, "## Instructions per message\n");
        let how = match r["counter"].as_str() {
            Some("perf stat") => "counted by `perf stat -e instructions`",
            _ => "under Valgrind's callgrind (this machine's perf has no instruction counter)",
        };
        let _ = writeln!(md, "The relay process {how} (all its threads, librdkafka's included), \
            draining backlogs of {} and {} rows in 100-row transactions; the difference of the two totals divided by \
            the smaller backlog leaves start-up and shutdown out. Unlike times, this figure repeats within a few per cent from run to run.\n",
            number(&r["rows"][0]), number(&r["rows"][1]));
        let _ = writeln!(md, "| relay | instructions per message |");
        let _ = writeln!(md, "|---|---:|");
        for r in &counted {
            let _ = writeln!(
                md,
                "| {} | {} |",
                r["engine"].as_str().unwrap_or(""),
                number(&r["instructions_per_msg"])
            );
        }
        let _ = writeln!(md);
    }
    let big: Vec<&Json> = results
        .iter()
        .filter(|r| r["scenario"] == "one_transaction")
        .collect();
    if !big.is_empty() {
        let _ = writeln!(md, "## One large source transaction\n");
        let _ = writeln!(md, "Peak RSS is compared with a reference drain of as many rows of the same payloads \
            in 100-row transactions: memory should depend on what is in flight, not on how large a transaction is.\n");
        let _ = writeln!(md, "| relay | rows | payload (bytes) | commit to last record (s) | msg/s | CPU (s) | peak RSS (MiB) | peak RSS before it (MiB) | reference peak RSS, 100-row transactions (MiB) |");
        let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for r in big {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r["engine"].as_str().unwrap_or(""),
                number(&r["rows"]),
                number(&r["payload_bytes"]),
                number(&r["commit_to_last_record_s"]),
                number(&r["throughput_msg_s"]),
                number(&r["cpu_s"]),
                number(&r["peak_rss_mib"]),
                number(&r["peak_rss_before_mib"]),
                number(&r["reference_tx100"]["peak_rss_mib"])
            );
        }
        let _ = writeln!(md);
    }
    if charts.contains(&"benchmark-memory.svg") {
        let _ = writeln!(md, "## Peak memory\n");
        image(
            &mut md,
            "benchmark-memory.svg",
            "Peak resident memory of each relay in each scenario",
        );
    }
    let _ = writeln!(md, "## Against the goals\n");
    let _ = writeln!(md, "| ratio | value | goal |");
    let _ = writeln!(md, "|---|---:|---|");
    if let Some(o) = report["ratios"].as_object() {
        for (k, v) in o {
            if k == "valid" || k == "over_the_bound" {
                continue;
            }
            let goal = if k.starts_with("transactional_vs_idempotent_tx100") {
                "≥ 0.8"
            } else if k == "throughput_vs_debezium_tx1" {
                "≥ 3"
            } else if k.starts_with("transactional_vs_debezium_exactly_once")
                || k.starts_with("throughput_vs_debezium")
            {
                "≥ 2"
            } else if k.starts_with("p99_vs") {
                "≤ 0.2"
            } else if k == "relay_p99_ms" {
                "≤ 20"
            } else if k.starts_with("peak_memory") {
                "≤ 0.1"
            } else if k.starts_with("throughput_vs_lower_baseline")
                || k == "throughput_vs_shared_cpu_bound_tx100"
            {
                "≥ 0.8"
            } else if k == "throughput_vs_shared_cpu_bound_tx1" {
                "≥ 0.6"
            } else if k.starts_with("bookkeeping_cost") {
                "≤ 0.1"
            } else if k == "relay_cpu_us_per_msg_tx100" {
                "≤ 8"
            } else if k == "one_transaction_peak_rss_vs_tx100" {
                "≤ 1.1"
            } else if k == "relay_peak_rss_backlog_mib" {
                "≤ 48"
            } else {
                "(context)"
            };
            let _ = writeln!(md, "| {k} | {} | {goal} |", number(v));
        }
    }
    md
}
