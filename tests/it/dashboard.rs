//! The Grafana dashboard against a live relay: a real Prometheus scrapes
//! it while the test makes each panel's event happen (rows published, a
//! row FAILED, a session restart, delivery reports), then every panel's
//! and variable's query goes through Prometheus's HTTP API and must return
//! at least one series. A query that reads `or vector(0)` for want of its
//! event is named; a metric the relay does not export fails, naming the
//! panel.

use std::io::{Read, Write};

use std::time::{Duration, Instant};

use outbox_cdc::metrics::dashboard;
use serde_json::Value;

use crate::common::prometheus::Prometheus;
use crate::common::relay::{self, RelayProcess};
use crate::common::{self, replication as rep};

/// A GET to Prometheus's API: the decoded answer.
fn api(port: u16, path_and_query: &str) -> Option<Value> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path_and_query} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    serde_json::from_str(&body).ok()
}

fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Grafana's variables and ranges, as the dashboard's defaults fill them.
fn grafana(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$__range", "10m")
        .replace("$instance", ".*")
        .replace("$destination", ".*")
}

fn query(port: u16, expr: &str) -> Vec<Value> {
    let answer = api(
        port,
        &format!("/api/v1/query?query={}", encode(&grafana(expr))),
    )
    .unwrap_or_else(|| panic!("Prometheus did not answer {expr}"));
    assert_eq!(answer["status"], "success", "{expr}: {answer}");
    answer["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn every_panel_and_variable_of_the_dashboard_returns_series_from_a_live_relay() {
    let services = require_services!();
    let prefix = common::unique_prefix("dash");
    let db = common::cdc_db(&services, "dash", &prefix).await;
    let port = common::free_port();
    let slot = format!("{}_relay", db.name);
    let config = relay::config(
        &services,
        &db.name,
        &prefix,
        &slot,
        &format!("slot_check_interval_secs = 1\n\n[http]\nlisten = \"127.0.0.1:{port}\"\n"),
    );
    let mut running = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;

    let prometheus = Prometheus::start(&db.name, port);
    let prom_port = prometheus.port;

    // Rows published, and one FAILED (a 2 MB record: refused, recorded).
    db.client
        .batch_execute(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload)
             SELECT md5('dash' || g)::uuid, 'orders', 'T', 1, 'application/json', '\\x7b7d'::bytea FROM generate_series(1, 20) g;
             INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload)
             VALUES (md5('dash-big')::uuid, 'big', 'T', 1, 'x', convert_to(repeat('x', 2000000), 'UTF8'));",
        )
        .await
        .unwrap();
    common::wait_until_marked(&db.client).await;
    // A session restart: the relay's walsender ended under it.
    db.client
        .execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap();

    // Every panel's query, once Prometheus has what the events left.
    let wanted = [
        "outbox_cdc_records_published_total",
        "outbox_cdc_rows_failed_total",
        "outbox_cdc_session_restarts_total",
        "outbox_cdc_rows_pending",
        "process_resident_memory_bytes",
    ];
    let deadline = Instant::now() + Duration::from_secs(90);
    for metric in wanted {
        while query(prom_port, &format!("{metric}{{job=\"outbox-cdc\"}}")).is_empty() {
            assert!(
                Instant::now() < deadline,
                "{metric} never scraped: {}\n{}",
                prometheus.log(),
                relay::plain(&running.log_text())
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    std::thread::sleep(Duration::from_secs(3));
    // A broker's refusal of one record is not caused here: the delivery
    // outcomes are exported at 0 from the start, so the panel reads 0.
    let rejected = query(
        prom_port,
        "outbox_cdc_deliveries_total{job=\"outbox-cdc\", outcome=\"rejected\"}",
    );
    assert_eq!(
        rejected.len(),
        1,
        "the rejected outcome's series: {rejected:?}"
    );
    eprintln!(
        "dashboard: Delivery outcomes reads rejected as 0 (no refusal caused here): {rejected:?}"
    );
    let exported: Vec<String> = api(prom_port, "/api/v1/label/__name__/values")
        .and_then(|v| v["data"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    let name = regex::Regex::new(r"\b(outbox_cdc_[a-z_]+|process_[a-z_]+)").unwrap();
    let mut empty = Vec::new();
    let mut by_zero = Vec::new();
    let mut counts = Vec::new();
    for panel in dashboard::panels() {
        let mut series = 0;
        for q in &panel.queries {
            for m in name.find_iter(&q.expr) {
                // A labelled counter has no series before its first event:
                // defined, and read through the fallback, it may be absent.
                let waits_for_event = q.expr.ends_with(dashboard::NONE)
                    && outbox_cdc::metrics::names::ALL
                        .iter()
                        .any(|d| d.name == m.as_str());
                assert!(
                    exported.iter().any(|e| e == m.as_str()) || waits_for_event,
                    "panel {:?}: the relay exports no {}",
                    panel.title,
                    m.as_str()
                );
            }
            let result = query(prom_port, &q.expr);
            if result.is_empty() {
                empty.push(format!("{}: {}", panel.title, q.expr));
            }
            let fallback_only = q.expr.ends_with(dashboard::NONE)
                && result
                    .iter()
                    .all(|r| r["metric"].as_object().is_none_or(|m| m.is_empty()));
            if fallback_only {
                by_zero.push(format!("{}: {}", panel.title, q.legend));
            }
            series += result.len();
        }
        counts.push(format!("{} {series}", panel.title));
    }
    for (variable, definition) in dashboard::variables() {
        let inner = definition
            .strip_prefix("label_values(")
            .and_then(|d| d.strip_suffix(')'))
            .unwrap();
        let (selector, label) = inner.rsplit_once(", ").unwrap();
        let values: Vec<String> = query(prom_port, selector)
            .iter()
            .filter_map(|r| r["metric"][label].as_str().map(str::to_string))
            .collect();
        if values.is_empty() {
            empty.push(format!("variable {variable}: {definition}"));
        }
        counts.push(format!("${variable} {}", values.len()));
    }
    drop(prometheus);
    running.signal("TERM");
    running.wait(Duration::from_secs(30));
    eprintln!(
        "dashboard: series per panel and values per variable: {}; read as 0 for want of their event: {by_zero:?}",
        counts.join(", ")
    );
    assert!(
        empty.is_empty(),
        "queries that returned nothing: {empty:#?}"
    );
    // The events the test made are there: only the dead letters (a table
    // that keeps no status) read as 0.
    assert_eq!(
        by_zero,
        ["Rows FAILED or dead-lettered, by code: dead-lettered {{code}}"],
        "{counts:?}"
    );
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}
