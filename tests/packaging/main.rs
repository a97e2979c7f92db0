//! What ships holds to the code it ships (no services): the chart's rules
//! are the generated ones, its version is the binary's, the grace periods
//! cover the drain, the systemd unit restarts exactly when a restart can
//! help, and the image runs as a user with its labels. The artifacts
//! themselves are built and run by `scripts/image.sh` (with
//! `tests/it/image.rs`), `scripts/chart-check.sh` and `scripts/deb.sh`,
//! which `scripts/test.sh` runs.

use std::path::Path;
use std::process::Command;

use outbox_cdc::cli::{EXIT_CONFIG, EXIT_OPERATOR, EXIT_TEMPORARY};
use outbox_cdc::config::relay::DEFAULT_DRAIN_TIMEOUT_SECS;
use outbox_cdc_testkit::cli::bin;

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The value of `key: value` on its own line of a YAML file.
fn yaml_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .map(|v| v.trim().trim_matches('"'))
}

/// The value of `Key=value` in a systemd unit.
fn unit_value<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")))
        .collect()
}

#[test]
fn the_charts_alerting_rules_are_the_generated_ones() {
    let out = Command::new(bin()).arg("alert-rules").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        read("deploy/helm/outbox-cdc/files/outbox-cdc.rules.yml"),
        "the chart's rules are stale: scripts/regenerate.sh copies them"
    );
}

#[test]
fn the_chart_and_the_image_name_the_binarys_version() {
    let chart = read("deploy/helm/outbox-cdc/Chart.yaml");
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(yaml_value(&chart, "appVersion"), Some(version));
    assert_eq!(yaml_value(&chart, "version"), Some(version));
    // The image's tag defaults to the appVersion.
    let values = read("deploy/helm/outbox-cdc/values.yaml");
    assert!(values.contains("  tag: \"\"\n"), "{values}");
    let deployment = read("deploy/helm/outbox-cdc/templates/deployment.yaml");
    assert!(deployment.contains(".Values.image.tag | default .Chart.AppVersion"));
    // The image is built with the same version (scripts/image.sh reads it
    // from Cargo.toml) and its labels carry it.
    let containerfile = read("deploy/image/Containerfile");
    for label in [
        "org.opencontainers.image.version=\"${VERSION}\"",
        "org.opencontainers.image.revision=\"${REVISION}\"",
        "org.opencontainers.image.source=\"${SOURCE}\"",
    ] {
        assert!(containerfile.contains(label), "{label}");
    }
    assert!(containerfile.contains("\nUSER 65532:65532\n"));
    assert!(containerfile.starts_with('#') && containerfile.contains("\nFROM scratch\n"));
}

#[test]
fn the_grace_periods_cover_a_drain_and_its_marks() {
    // A stop drains for up to drain_timeout_secs and may take as long again
    // to record what it published.
    let values = read("deploy/helm/outbox-cdc/values.yaml");
    let drain: u64 = yaml_value(&values, "drainTimeoutSecs")
        .and_then(|v| v.parse().ok())
        .expect("drainTimeoutSecs");
    assert_eq!(drain, DEFAULT_DRAIN_TIMEOUT_SECS);
    assert!(values.contains(&format!("drain_timeout_secs = {drain}")));
    let deployment = read("deploy/helm/outbox-cdc/templates/deployment.yaml");
    assert!(deployment
        .contains("terminationGracePeriodSeconds: {{ add (mul .Values.drainTimeoutSecs 2) 15 }}"));

    let unit = read("deploy/debian/outbox-cdc.service");
    let stop: u64 = unit_value(&unit, "TimeoutStopSec")[0].parse().unwrap();
    assert!(stop > 2 * DEFAULT_DRAIN_TIMEOUT_SECS, "{stop}");
}

#[test]
fn the_unit_restarts_only_when_a_restart_can_help() {
    let unit = read("deploy/debian/outbox-cdc.service");
    assert_eq!(unit_value(&unit, "Restart"), ["on-failure"]);
    let mut prevented: Vec<u8> = unit_value(&unit, "RestartPreventExitStatus")
        .iter()
        .flat_map(|v| v.split_whitespace())
        .map(|v| v.parse().unwrap())
        .collect();
    prevented.sort_unstable();
    assert_eq!(prevented, vec![EXIT_OPERATOR, EXIT_CONFIG]);
    assert!(!prevented.contains(&EXIT_TEMPORARY));
    for (key, value) in [
        ("User", "outbox-cdc"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        (
            "ExecStart",
            "/usr/bin/outbox-cdc run --config /etc/outbox-cdc/outbox-cdc.toml",
        ),
    ] {
        assert_eq!(unit_value(&unit, key), [value], "{key}");
    }
    // The package installs the binary where the unit runs it.
    let manifest = read("Cargo.toml");
    assert!(manifest.contains(r#"["target/release/outbox-cdc", "usr/bin/", "755"]"#));
}
