//! The README and the user guide (docs/): generated references that cannot
//! drift, and links that resolve. `examples` runs and checks their examples.

use crate::common;

#[test]
fn the_readme_points_at_the_configuration_reference() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    assert!(readme.contains("(docs/reference/configuration.md)"));
    assert!(outbox_cdc::config::env_overrides().len() >= 50);
}

/// The error-code reference is the definitions' own output (code, class,
/// what follows, meaning); with `OUTBOX_CDC_REGENERATE=1` the test writes it.
#[test]
fn the_error_code_reference_is_up_to_date() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("docs/reference/error-codes.md");
    let committed = committed_page(&path, outbox_cdc::error::reference_markdown());
    for code in outbox_cdc::error::Code::ALL {
        let class = match code.class() {
            outbox_cdc::error::Class::Transient => "transient",
            outbox_cdc::error::Class::Operator => "operator",
            outbox_cdc::error::Class::Row => "row",
        };
        let directive = outbox_cdc::error::policy::for_code(*code).as_str();
        let row = format!("| `{code}` | {class} | {directive}");
        let Some(line) = committed.lines().find(|l| l.starts_with(&row)) else {
            panic!("the reference lacks {row}");
        };
        // Where a refused record's fate differs by delivery mode, the row
        // names both modes.
        use outbox_cdc::error::policy::{next, Failure, Mode};
        let differs = next(Failure::Refused(*code), Mode::Idempotent)
            != next(Failure::Refused(*code), Mode::Transactional);
        assert_eq!(
            line.contains("idempotent,") && line.contains("transactional,"),
            differs,
            "{line}"
        );
        assert!(!code.meaning().is_empty(), "{code} says nothing");
    }
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(readme.contains("(docs/reference/error-codes.md)"));
}

/// The preflight rule table is the rule list's own output (each rule with
/// its codes and who obeys it); `OUTBOX_CDC_REGENERATE=1` writes it.
#[test]
fn the_preflight_rule_table_is_up_to_date() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("docs/reference/preflight-rules.md");
    let committed = committed_page(&path, outbox_cdc::rules::reference_markdown());
    for rule in outbox_cdc::rules::Rule::ALL {
        let row = format!("| `{rule}` |");
        assert!(committed.contains(&row), "the table lacks {row}");
        for (code, _) in rule.codes() {
            assert!(
                committed
                    .lines()
                    .any(|l| l.starts_with(&row) && l.contains(&format!("`{code}`"))),
                "{rule}'s row lacks {code}"
            );
        }
    }
    // A rule the session obeys and one it does not, as a reader checks them.
    let slot = committed
        .lines()
        .find(|l| l.starts_with("| `slot` |"))
        .unwrap();
    assert!(slot.contains("| yes |  | yes |"), "{slot}");
    let topics = committed
        .lines()
        .find(|l| l.starts_with("| `topics` |"))
        .unwrap();
    assert!(topics.contains("| yes |  |  |"), "{topics}");
    let commands = std::fs::read_to_string(root.join("docs/operating/commands.md")).unwrap();
    assert!(commands.contains("(../reference/preflight-rules.md)"));
}

/// The monitoring page's table, which adds the label values, has a row per metric.
#[test]
fn the_monitoring_page_lists_every_metric() {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/operating/monitoring.md"
    ))
    .unwrap();
    for def in outbox_cdc::metrics::names::ALL {
        let row = format!("| `{}` |", def.name);
        assert!(
            page.contains(&row),
            "the monitoring page's table lacks {row}"
        );
    }
}

/// Every alert links its runbook, and every runbook is an alert's.
#[test]
fn every_alert_has_its_runbook_and_every_runbook_its_alert() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let runbooks = std::fs::read_to_string(root.join("docs/runbooks.md")).unwrap();
    let rules = std::fs::read_to_string(root.join("monitoring/outbox-cdc.rules.yml")).unwrap();
    let alerts = outbox_cdc::metrics::rules::alert_names();
    assert!(alerts.len() >= 7);
    for alert in &alerts {
        assert!(
            runbooks.lines().any(|l| l == format!("## {alert}")),
            "docs/runbooks.md has no section for {alert}"
        );
        let url = format!("runbook_url: 'docs/runbooks.md#{}'", alert.to_lowercase());
        assert!(rules.contains(&url), "the rules lack {url}");
    }
    for heading in runbooks.lines().filter_map(|l| l.strip_prefix("## ")) {
        assert!(
            alerts.contains(&heading),
            "a runbook for no alert: {heading}"
        );
    }
}

/// The metrics reference is the definitions' own output; with
/// `OUTBOX_CDC_REGENERATE=1` the test writes it instead.
#[test]
fn the_metrics_reference_is_up_to_date() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference/metrics.md");
    let committed = committed_page(&path, outbox_cdc::metrics::names::reference_markdown());
    for def in outbox_cdc::metrics::names::ALL {
        assert!(
            committed.contains(&format!("| `{}` |", def.name)),
            "{}",
            def.name
        );
    }
}

/// The Grafana dashboard is the definitions' own output, and the chart
/// ships the same file; `OUTBOX_CDC_REGENERATE=1` writes both.
#[test]
fn the_dashboard_is_up_to_date_and_the_chart_ships_it() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let generated = outbox_cdc::metrics::dashboard::render();
    committed_page(
        &root.join("monitoring/grafana/outbox-cdc.json"),
        generated.clone(),
    );
    committed_page(
        &root.join("deploy/helm/outbox-cdc/files/outbox-cdc.dashboard.json"),
        generated,
    );
}

/// The configuration reference is the definitions' own output, and the
/// example says so wherever it departs from a default.
#[test]
fn the_configuration_reference_is_up_to_date_and_the_example_agrees_with_it() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("docs/reference/configuration.md");
    let committed = committed_page(&path, outbox_cdc::config::reference::reference_markdown());
    for (var, _) in outbox_cdc::config::env_overrides() {
        assert!(committed.contains(&format!("`{var}`")), "{var}");
    }
    // Each value the example sets is the default, or its line says it is not.
    let example = std::fs::read_to_string(root.join("outbox-cdc.example.toml")).unwrap();
    let mut section = String::new();
    let mut departures = Vec::new();
    for line in example.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
            continue;
        }
        let Some((key, rest)) = line.split_once(" = ") else {
            continue;
        };
        if line.starts_with('#') || section == "kafka.properties" || rest.starts_with('{') {
            continue;
        }
        let value = rest.split("  #").next().unwrap_or(rest).trim();
        let key = format!("{section}.{}", key.trim());
        let Some(default) = outbox_cdc::config::reference::default_of(&key) else {
            continue;
        };
        if !default.is_empty() && value != default && !rest.contains("default") {
            departures.push(format!("{key} = {value} (default {default})"));
        }
    }
    assert!(
        departures.is_empty(),
        "the example departs from defaults without saying so: {departures:?}"
    );
}

/// GitHub's anchor for a heading: lower case, punctuation dropped but `-`
/// and `_`, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every file under `dir` whose name ends in `.ext`.
pub(crate) fn files_under(dir: &std::path::Path, ext: &str, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_under(&path, ext, out);
        } else if path.extension().is_some_and(|e| e == ext) {
            out.push(path);
        }
    }
}

/// The README and every page under `docs/`.
pub(crate) fn guide_files() -> Vec<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    files_under(&root.join("docs"), "md", &mut files);
    files
}

/// The file a relative link of `page` points at, and its fragment.
pub(crate) fn link_target<'a>(
    page: &std::path::Path,
    link: &'a str,
) -> (std::path::PathBuf, &'a str, &'a str) {
    let (path, fragment) = link.split_once('#').unwrap_or((link, ""));
    let target = if path.is_empty() {
        page.to_path_buf()
    } else {
        page.parent().unwrap().join(path)
    };
    (target, path, fragment)
}

/// Every relative link of the README and the docs reaches a file, and
/// every `#anchor` a heading of its page.
#[test]
fn every_internal_link_and_anchor_resolves() {
    let files = guide_files();
    let anchors_of = |path: &std::path::Path| -> Vec<String> {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let mut fenced = false;
        text.lines()
            .filter(|l| {
                if l.starts_with("```") {
                    fenced = !fenced;
                }
                !fenced
            })
            .filter_map(|l| {
                l.trim_start_matches('#')
                    .strip_prefix(' ')
                    .filter(|_| l.starts_with('#'))
            })
            .map(anchor)
            .collect()
    };
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for part in text.split("](").skip(1) {
            let Some(target) = part.split(')').next() else {
                continue;
            };
            if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
                continue;
            }
            checked += 1;
            let (page, _, fragment) = link_target(file, target);
            if !page.exists() {
                broken.push(format!("{}: {target} (no such file)", file.display()));
                continue;
            }
            if !fragment.is_empty()
                && page.extension().is_some_and(|e| e == "md")
                && !anchors_of(&page).iter().any(|a| a == fragment)
            {
                broken.push(format!("{}: {target} (no such heading)", file.display()));
            }
        }
    }
    assert!(checked > 20, "only {checked} links checked");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The committed generated page at `path`, asserted equal to `generated`;
/// with `OUTBOX_CDC_REGENERATE=1` it is written first.
fn committed_page(path: &std::path::Path, generated: String) -> String {
    if std::env::var_os("OUTBOX_CDC_REGENERATE").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale: scripts/regenerate.sh writes it",
        path.display()
    );
    committed
}

/// The committed charts are drawn from the committed results (the
/// benchmark's latest run and the soak's report), by the code the benchmark
/// and the soak draw them with; `OUTBOX_CDC_REGENERATE=1` redraws them.
/// (`docs/delivery-modes/` and `docs/metrics-cost/` are earlier runs'
/// reports, kept as they were written.)
#[test]
fn the_charts_are_drawn_from_the_committed_results() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut drawn = 0;
    for dir in ["docs"] {
        let text = std::fs::read_to_string(root.join(dir).join("benchmark.json")).unwrap();
        let report: serde_json::Value = serde_json::from_str(&text).unwrap();
        let page = std::fs::read_to_string(root.join(dir).join("benchmark.md")).unwrap();
        for (name, svg) in common::chart::benchmark(&report) {
            assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
            committed_page(&root.join(dir).join(name), svg);
            assert!(
                page.contains(&format!("]({name})")),
                "{dir}/benchmark.md does not show {name}"
            );
            drawn += 1;
        }
    }
    // The full run has all three: throughput, latency, memory.
    assert!(drawn >= 3, "only {drawn} charts");
    let soak: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("docs/soak-idempotent-2026.json")).unwrap(),
    )
    .unwrap();
    let per_10s: Vec<usize> = soak["throughput_per_10s"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap() as usize)
        .collect();
    let faults: Vec<(String, f64, f64)> = soak["faults"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["kind"].as_str().unwrap().to_string(),
                f["at_secs"].as_f64().unwrap(),
                f["hold_secs"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(faults.len(), 91);
    let svg = common::soak::throughput_chart(
        soak["delivery"].as_str().unwrap(),
        soak["seed"].as_u64().unwrap(),
        &per_10s,
        &faults,
    );
    // Every fault is marked.
    assert_eq!(svg.matches("class=\"span\"").count(), 91);
    committed_page(&root.join("docs/soak-idempotent-2026-throughput.svg"), svg);
}

/// A bar is as long as its value on the chart's axis, and prints it.
#[test]
fn a_chart_draws_each_bar_to_scale_and_prints_its_value() {
    use common::chart::{Bar, Bars, Group, Scale};
    let bar = |series: &str, value: f64| Bar {
        series: series.into(),
        value,
    };
    let svg = Bars {
        title: "t".into(),
        unit: "msg/s".into(),
        scale: Scale::Linear,
        groups: vec![Group {
            label: "g".into(),
            bars: vec![bar("a", 100_000.0), bar("b", 25_000.0), bar("c", 12.6)],
        }],
    }
    .svg();
    // The plot is 420 px wide and its axis ends at 100 000.
    assert!(svg.contains("width=\"420.0\""), "{svg}");
    assert!(svg.contains("width=\"105.0\""), "{svg}");
    assert!(svg.contains(">100\u{202f}000<"), "{svg}");
    assert!(svg.contains(">12.6<"), "{svg}");
}
