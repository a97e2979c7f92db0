//! What replication costs the relay: one backlog drain and the steady
//! 2 000 msg/s stream on the single broker and on the three-broker cluster
//! (replication factor 3, `min.insync.replicas=2`, so every record waits for
//! a follower before Kafka acknowledges it), taking turns in the same run.

use anyhow::Result;
use serde_json::{json, Value as Json};

use std::fmt::Write as _;

use crate::args::Args;
use crate::engine::Engine;
use crate::markdown::{number, with_spread};
use crate::runs::summary;
use crate::scenarios::backlog_once;
use crate::services::Services;
use crate::steady::{latency_summary, steady_once};

/// The steady stream's offered rate.
pub(crate) const RATE: u32 = 2_000;

/// Where Kafka ran, as the results name it.
pub(crate) const SINGLE: &str = "single broker";
pub(crate) const CLUSTER: &str = "three brokers, RF 3, min.insync.replicas=2";

pub(crate) async fn replication_cost(s: &Services, a: &Args) -> Result<Vec<Json>> {
    let cluster = s.on_cluster()?;
    let tx = a.tx_sizes.first().copied().unwrap_or(100);
    let kafkas = [(SINGLE, s), (CLUSTER, &cluster)];
    let mut drains = [Vec::new(), Vec::new()];
    let mut streams = [Vec::new(), Vec::new()];
    for i in 0..a.repeat {
        // Each repetition starts on the other Kafka.
        for k in [i % 2, (i + 1) % 2] {
            let (label, on) = kafkas[k];
            eprintln!(
                "[bench] replication ({}/{}): {label}: backlog of {} rows in transactions of {tx}",
                i + 1,
                a.repeat,
                a.rows
            );
            drains[k].push(backlog_once(on, a, Engine::Relay, tx).await?);
            streams[k].push(steady_once(on, a, Engine::Relay, RATE).await?);
        }
    }
    let mut results = Vec::new();
    for ((label, _), (drains, streams)) in kafkas.iter().zip(drains.into_iter().zip(streams)) {
        results.push(summary(
            json!({
                "scenario": format!("replication_backlog_tx{tx}"),
                "engine": Engine::Relay.tag(),
                "kafka": label,
                "rows": a.rows,
                "rows_per_transaction": tx,
            }),
            drains,
        ));
        let mut steady = latency_summary(Engine::Relay, RATE, streams);
        if let Some(o) = steady.as_object_mut() {
            o.insert("scenario".into(), json!("replication_steady"));
            o.insert("kafka".into(), json!(label));
        }
        results.push(steady);
    }
    Ok(results)
}

/// The single broker against the three-broker cluster, run for run.
pub(crate) fn section(md: &mut String, report: &Json) {
    let results = report["results"].as_array().cloned().unwrap_or_default();
    let find = |prefix: &str, kafka: &str| {
        results.iter().find(|r| {
            r["kafka"] == kafka
                && r["scenario"]
                    .as_str()
                    .is_some_and(|s| s.starts_with(prefix))
        })
    };
    let (Some(drain), Some(stream)) = (
        find("replication_backlog", CLUSTER),
        find("replication_steady", CLUSTER),
    ) else {
        return;
    };
    let _ = writeln!(md, "\n## Replication: a three-broker cluster\n");
    let _ = writeln!(
        md,
        "The relay with its defaults on the single broker and on a KRaft cluster of three brokers and a separate controller on this same machine, whose topics have replication factor 3 and `min.insync.replicas=2`: Kafka acknowledges a record once a follower has it too. On each, one backlog of {} rows in transactions of {} and one steady stream of {RATE} msg/s, taking turns, {} times; medians, with the range. The cluster's four JVMs run beside the relay and PostgreSQL on this machine's cores (and stay up during the single broker's runs), so when the machine is busy the ratios below hold its contention as well as replication.\n",
        number(&drain["rows"]),
        number(&drain["rows_per_transaction"]),
        number(&report["settings"]["repeat"]),
    );
    let _ = writeln!(
        md,
        "| Kafka | backlog msg/s | backlog peak RSS (MiB) | steady p50 (ms) | steady p99 (ms) | steady CPU (s) | steady machine busy |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|");
    for kafka in [SINGLE, CLUSTER] {
        let (Some(d), Some(st)) = (
            find("replication_backlog", kafka),
            find("replication_steady", kafka),
        ) else {
            continue;
        };
        let l = &st["latency_ms"];
        let _ = writeln!(
            md,
            "| {kafka} | {} | {} | {} | {} | {} | {} % |",
            with_spread(d, "throughput_msg_s"),
            number(&d["peak_rss_mib"]),
            with_spread(l, "p50"),
            with_spread(l, "p99"),
            number(&st["cpu_s"]),
            number(&st["machine_cpu_busy_pct"]),
        );
    }
    let ratio = |a: &Json, b: &Json| match (a.as_f64(), b.as_f64()) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "–".to_string(),
    };
    if let (Some(d1), Some(s1)) = (
        find("replication_backlog", SINGLE),
        find("replication_steady", SINGLE),
    ) {
        let _ = writeln!(
            md,
            "\nReplication's cost, as ratios of the medians: the cluster drains at {}× the single broker's throughput; at {RATE} msg/s its p50 is {}× and its p99 {}× the single broker's, and the relay's CPU per message {}×.\n",
            ratio(&drain["throughput_msg_s"], &d1["throughput_msg_s"]),
            ratio(&stream["latency_ms"]["p50"], &s1["latency_ms"]["p50"]),
            ratio(&stream["latency_ms"]["p99"], &s1["latency_ms"]["p99"]),
            ratio(&stream["cpu_s"], &s1["cpu_s"]),
        );
    }
}
