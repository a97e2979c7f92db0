//! The medians of a scenario's repeated runs, with their spread.

use serde_json::{json, Value as Json};

use crate::cpu::WINDOW_COST;

/// A figure over repeated runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Spread {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

impl Spread {
    /// Whether two figures' ranges over their repeats overlap: a
    /// difference between their medians is then within the noise of this
    /// machine and is not reported as a gain or a loss.
    pub(crate) fn overlaps(&self, other: &Spread) -> bool {
        self.min.max(other.min) <= self.max.min(other.max)
    }
}

/// The median (the upper one of an even count), lowest and highest.
pub(crate) fn spread(values: impl Iterator<Item = f64>) -> Option<Spread> {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    Some(Spread {
        median: *v.get(v.len() / 2)?,
        min: *v.first()?,
        max: *v.last()?,
    })
}

/// The spread of `key` over the runs of a summary.
pub(crate) fn spread_of(summary: &Json, key: &str) -> Option<Spread> {
    spread(
        summary["runs"]
            .as_array()?
            .iter()
            .filter_map(|r| r[key].as_f64()),
    )
}

/// The medians of repeated runs, each with its lowest (`_min`) and highest
/// (`_max`); peak memory: the highest; and every run.
pub(crate) fn summary(head: Json, runs: Vec<Json>) -> Json {
    let mut out = head.as_object().cloned().unwrap_or_default();
    for key in [
        "throughput_msg_s",
        "first_to_last_s",
        "first_record_after_start_s",
        "cpu_s",
        "machine_cpu_us_per_msg",
        WINDOW_COST,
    ] {
        // Background work only ever adds to a window's CPU time, so the
        // cheapest repetition (`_min`) is the nearest to what the work
        // itself costs.
        if let Some(s) = spread(runs.iter().filter_map(|r| r[key].as_f64())) {
            out.insert(key.into(), json!(s.median));
            out.insert(format!("{key}_min"), json!(s.min));
            out.insert(format!("{key}_max"), json!(s.max));
        }
    }
    if let Some(p) = runs
        .iter()
        .filter_map(|r| r["peak_rss_mib"].as_f64())
        .reduce(f64::max)
    {
        out.insert("peak_rss_mib".into(), json!(p));
    }
    let dups: u64 = runs.iter().filter_map(|r| r["duplicates"].as_u64()).sum();
    if runs.iter().any(|r| !r["duplicates"].is_null()) {
        out.insert("duplicates".into(), json!(dups));
    }
    out.insert("runs".into(), Json::Array(runs));
    Json::Object(out)
}
