//! The Grafana dashboard (`monitoring/grafana/outbox-cdc.json`), written
//! from the metrics' definitions so that a renamed metric changes the
//! dashboard (and fails the test that compares it with the committed file)
//! instead of leaving a panel empty. Every alert rule is an annotation.

use serde_json::{json, Value};

use super::names::{self, Def};

/// Grafana's dashboard schema version this file is written in (Grafana 11).
const SCHEMA_VERSION: u32 = 39;
const DATASOURCE: &str = "${datasource}";
/// A counter whose series appear with their first event (a code, a
/// reason) reads 0 before it, rather than nothing.
pub const NONE: &str = " or on() vector(0)";

/// One query of a panel.
pub struct Query {
    pub expr: String,
    pub legend: &'static str,
}

/// One panel: what it shows and when to look at it (its description).
pub struct Panel {
    pub title: &'static str,
    pub description: &'static str,
    pub unit: &'static str,
    pub queries: Vec<Query>,
}

/// `{instance=~"$instance"}` and more.
fn sel(def: &Def, more: &str) -> String {
    format!("{}{{instance=~\"$instance\"{more}}}", def.name)
}

fn q(expr: String, legend: &'static str) -> Query {
    Query { expr, legend }
}

/// The panels, in the order they are laid out.
pub fn panels() -> Vec<Panel> {
    use names::*;
    let rate = |def: &Def, more: &str, by: &str| {
        format!("sum by ({by}) (rate({}[$__rate_interval]))", sel(def, more))
    };
    let destination = ", destination=~\"$destination\"";
    vec![
        Panel {
            title: "Throughput per destination",
            description: "Records Kafka confirmed per second, by topic. A drop to 0 while the application writes means the relay is stuck: look at readiness and restarts.",
            unit: "ops",
            queries: vec![q(rate(&RECORDS_PUBLISHED, destination, "destination"), "{{destination}}")],
        },
        Panel {
            title: "Commit to Kafka lag",
            description: "How far the oldest unsettled row is behind its commit (seconds_behind_source), and the 99th percentile from commit to Kafka's acknowledgement. Rising lag with steady throughput is a backlog; alert OutboxCdcBehindSource.",
            unit: "s",
            queries: vec![
                q(format!("max by (instance) ({})", sel(&SECONDS_BEHIND_SOURCE, "")), "behind source {{instance}}"),
                q(
                    format!(
                        "histogram_quantile(0.99, sum by (le) (rate({}_bucket{{instance=~\"$instance\"}}[$__rate_interval])))",
                        COMMIT_TO_ACK.name
                    ),
                    "p99 commit to ack",
                ),
            ],
        },
        Panel {
            title: "Slot retained WAL",
            description: "WAL the slot keeps from being recycled, and how far its confirmed position is behind the server. Growth without end fills the disk; alert OutboxCdcSlotWalAtRisk.",
            unit: "bytes",
            queries: vec![
                q(sel(&SLOT_RETAINED_WAL, ""), "retained {{instance}}"),
                q(sel(&SLOT_CONFIRMED_LAG, ""), "confirmed lag {{instance}}"),
            ],
        },
        Panel {
            title: "Slot WAL status",
            description: "The slot's wal_status as PostgreSQL says it (reserved, extended, unreserved, lost) and whether a relay streams it. lost means the server removed WAL the slot needed: `cutover --to cdc --recover`; alert OutboxCdcSlotLost.",
            unit: "none",
            queries: vec![
                q(format!("max by (status) ({}) == 1", sel(&SLOT_WAL_STATUS, "")), "{{status}}"),
                q(sel(&SLOT_ACTIVE, ""), "active {{instance}}"),
            ],
        },
        Panel {
            title: "Rows not yet published",
            description: "Rows of the platform's table PENDING and not in the journal, counted at each slot check. A steady number under load is normal; growth means the relay does not keep up, or is stopped.",
            unit: "none",
            queries: vec![q(format!("max by (instance) ({})", sel(&ROWS_PENDING, "")), "pending {{instance}}")],
        },
        Panel {
            title: "Rows FAILED or dead-lettered, by code",
            description: "Rows recorded FAILED (or written to the dead-letter table, for a table that keeps no status) in the range, by error code. Any is a page: fix the cause and `outbox-cdc redrive`; alerts OutboxCdcRowsFailed, OutboxCdcDeadLetters.",
            unit: "none",
            queries: vec![
                q(format!("sum by (code) (increase({}[$__range])){NONE}", sel(&ROWS_FAILED, "")), "FAILED {{code}}"),
                q(format!("sum by (code) (increase({}[$__range])){NONE}", sel(&DEAD_LETTERS, "")), "dead-lettered {{code}}"),
            ],
        },
        Panel {
            title: "Delivery outcomes",
            description: "Kafka's delivery reports per second: confirmed, rejected (refused for good), ambiguous (possibly stored, sent again) and retry. Anything but confirmed deserves a look at the relay's log.",
            unit: "ops",
            queries: vec![q(rate(&DELIVERIES, "", "outcome"), "{{outcome}}")],
        },
        Panel {
            title: "Session restarts, by code",
            description: "Pipeline sessions restarted after a failure in the range, by the code that ended them (docs/reference/error-codes.md). A few around a broker restart are expected; a steady stream is not; alert OutboxCdcRestarting.",
            unit: "none",
            queries: vec![q(
                format!("sum by (reason) (increase({}[$__range])){NONE}", sel(&SESSION_RESTARTS, "")),
                "{{reason}}",
            )],
        },
        Panel {
            title: "Readiness",
            description: "1 when the relay streams and Kafka answers (/readyz), and whether it waits as a standby. 0 for long is alert OutboxCdcNotReady; a missing series is OutboxCdcDown.",
            unit: "none",
            queries: vec![
                q(sel(&READY, ""), "ready {{instance}}"),
                q(sel(&STANDBY, ""), "standby {{instance}}"),
            ],
        },
        Panel {
            title: "Process memory and CPU",
            description: "The relay's resident memory and CPU (cores used). Memory stays flat under backlog by design; growth is a bug worth a report.",
            unit: "bytes",
            queries: vec![
                q(sel(&PROCESS_RESIDENT_MEMORY, ""), "resident {{instance}}"),
                q(format!("rate({}[$__rate_interval])", sel(&PROCESS_CPU_SECONDS, "")), "cpu cores {{instance}}"),
            ],
        },
    ]
}

/// The dashboard's variables: the datasource, the relay instance and the
/// destination, each with the query that lists its values.
pub fn variables() -> Vec<(&'static str, String)> {
    vec![
        (
            "instance",
            format!("label_values({}, instance)", names::BUILD_INFO.name),
        ),
        (
            "destination",
            format!(
                "label_values({}{{instance=~\"$instance\"}}, destination)",
                names::RECORDS_PUBLISHED.name
            ),
        ),
    ]
}

fn datasource() -> Value {
    json!({"type": "prometheus", "uid": DATASOURCE})
}

/// The dashboard, as the JSON Grafana imports.
pub fn render() -> String {
    let mut laid_out = Vec::new();
    for (i, p) in panels().iter().enumerate() {
        let targets: Vec<Value> = p
            .queries
            .iter()
            .enumerate()
            .map(|(j, query)| {
                json!({
                    "datasource": datasource(),
                    "expr": query.expr,
                    "legendFormat": query.legend,
                    "refId": char::from(b'A' + j as u8).to_string(),
                })
            })
            .collect();
        laid_out.push(json!({
            "id": i + 1,
            "type": "timeseries",
            "title": p.title,
            "description": p.description,
            "datasource": datasource(),
            "gridPos": {"h": 8, "w": 12, "x": (i % 2) * 12, "y": (i / 2) * 8},
            "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
            "targets": targets,
        }));
    }
    let mut templating = vec![json!({
        "name": "datasource",
        "label": "Prometheus",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
    })];
    for (name, query) in variables() {
        templating.push(json!({
            "name": name,
            "type": "query",
            "datasource": datasource(),
            "definition": query,
            "query": {"query": query, "refId": name},
            "refresh": 2,
            "includeAll": true,
            "multi": true,
            "allValue": ".*",
            "current": {"text": "All", "value": "$__all"},
            "hide": 0,
            "sort": 1,
        }));
    }
    let mut annotations = vec![json!({
        "builtIn": 1,
        "datasource": {"type": "grafana", "uid": "-- Grafana --"},
        "enable": true,
        "hide": true,
        "iconColor": "rgba(0, 211, 255, 1)",
        "name": "Annotations & Alerts",
        "type": "dashboard",
    })];
    for alert in super::rules::alert_names() {
        annotations.push(json!({
            "datasource": datasource(),
            "enable": true,
            "expr": format!("ALERTS{{alertname=\"{alert}\", alertstate=\"firing\"}}"),
            "iconColor": "red",
            "name": alert,
            "titleFormat": alert,
            "textFormat": "{{instance}}",
            "step": "60s",
        }));
    }
    let dashboard = json!({
        "uid": "outbox-cdc",
        "title": "outbox-cdc",
        "description": "The relay's throughput, lag, slot, failures, deliveries, restarts, readiness and resources. Generated from the metrics' definitions (src/metrics/dashboard.rs).",
        "tags": ["outbox-cdc", "cdc", "kafka", "postgresql"],
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": true,
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "",
        "annotations": {"list": annotations},
        "templating": {"list": templating},
        "panels": laid_out,
    });
    let mut text = serde_json::to_string_pretty(&dashboard).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every metric a query names is one the relay exports (a histogram's
    /// by its `_bucket` series).
    #[test]
    fn every_query_names_only_metrics_the_relay_exports() {
        let known: Vec<String> = names::ALL
            .iter()
            .chain(names::STANDARD)
            .flat_map(|d| [d.name.to_string(), format!("{}_bucket", d.name)])
            .collect();
        let word = regex::Regex::new(r"\b(outbox_cdc_[a-z_]+|process_[a-z_]+)").unwrap();
        let mut exprs: Vec<(String, String)> = panels()
            .into_iter()
            .flat_map(|p| {
                p.queries
                    .into_iter()
                    .map(move |q| (p.title.to_string(), q.expr))
            })
            .collect();
        exprs.extend(variables().into_iter().map(|(n, q)| (n.to_string(), q)));
        for (panel, expr) in &exprs {
            let names: Vec<&str> = word.find_iter(expr).map(|m| m.as_str()).collect();
            assert!(!names.is_empty(), "{panel}: {expr}");
            for n in names {
                assert!(
                    known.iter().any(|k| k == n),
                    "{panel}: unknown metric {n} in {expr}"
                );
            }
        }
        // And the check fails on a name that is not exported.
        assert!(!known
            .iter()
            .any(|k| k == "outbox_cdc_records_publish_total"));
    }

    #[test]
    fn every_alert_is_an_annotation_and_the_variables_are_there() {
        let d: Value = serde_json::from_str(&render()).unwrap();
        let names: Vec<&str> = d["annotations"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|a| a["expr"].as_str().and(a["name"].as_str()))
            .collect();
        assert_eq!(names, super::super::rules::alert_names());
        let vars: Vec<&str> = d["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        assert_eq!(vars, ["datasource", "instance", "destination"]);
        assert_eq!(d["panels"].as_array().unwrap().len(), 10);
        assert_eq!(d["schemaVersion"], 39);
    }
}
