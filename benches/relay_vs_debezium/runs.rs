//! The medians of a scenario's repeated runs.

use serde_json::{json, Value as Json};

use crate::cpu::WINDOW_COST;

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
