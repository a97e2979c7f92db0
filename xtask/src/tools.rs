//! The Go tools, each built with Go's own installer into `.cache/go/bin`
//! (pinned; a few minutes the first time, then cached with a version stamp),
//! and only by the commands and test steps that use them: starting
//! PostgreSQL and Kafka builds none.
//!
//! - promtool and the Prometheus server: the tests lint the relay's
//!   /metrics, run its alerting rules' unit tests and let a real Prometheus
//!   scrape it;
//! - Toxiproxy: the network faults (`start-proxies`);
//! - an OpenTelemetry Collector with the OTLP receiver and the debug
//!   exporter (tests/otel/builder.yaml), made by the collector builder: the
//!   tracing test and the benchmark;
//! - Helm: the chart's checks (scripts/chart-check.sh).

use std::path::Path;
use std::process::Command;

use anyhow::{anyhow, bail, Result};

use crate::config::Config;
use crate::jvm::to_stderr;
use crate::process::{have, log, output, run, temp_dir, Lock};

pub const PROMETHEUS_VERSION: &str = "v0.316.0";
pub const OTELCOL_VERSION: &str = "v0.165.0";
/// Pinned: `@latest` resolves to an old release.
pub const TOXIPROXY_VERSION: &str = "v2.12.0";
pub const HELM_VERSION: &str = "v3.22.0";
/// The version Go's module proxy approves when the one asked for is refused.
pub const HELM_FALLBACK: &str = "v3.21.4";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tool {
    Promtool,
    Prometheus,
    Toxiproxy,
    Otelcol,
    Helm,
}

impl Tool {
    pub const ALL: [Tool; 5] = [
        Tool::Promtool,
        Tool::Prometheus,
        Tool::Toxiproxy,
        Tool::Otelcol,
        Tool::Helm,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Tool::Promtool => "promtool",
            Tool::Prometheus => "prometheus",
            Tool::Toxiproxy => "toxiproxy",
            Tool::Otelcol => "otelcol",
            Tool::Helm => "helm",
        }
    }

    pub fn parse(name: &str) -> Result<Tool> {
        Tool::ALL
            .into_iter()
            .find(|t| t.name() == name)
            .ok_or_else(|| {
                anyhow!("no Go tool {name}: promtool, prometheus, toxiproxy, otelcol or helm")
            })
    }

    /// The files it leaves in `.cache/go/bin`.
    pub fn binaries(self) -> &'static [&'static str] {
        match self {
            Tool::Promtool => &["promtool"],
            Tool::Prometheus => &["prometheus"],
            Tool::Toxiproxy => &["toxiproxy-server", "toxiproxy-cli"],
            Tool::Otelcol => &["otelcol"],
            Tool::Helm => &["helm"],
        }
    }
}

/// The names, comma-separated, for messages.
pub fn names(tools: &[Tool]) -> String {
    tools
        .iter()
        .map(|t| t.name())
        .collect::<Vec<_>>()
        .join(", ")
}

fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether `binaries` are in `bin` with `stamp` in `.{stamp_name}.version`.
pub fn cached(bin: &Path, binaries: &[&str], stamp: (&str, &str)) -> bool {
    let (name, expected) = stamp;
    binaries.iter().all(|b| executable(&bin.join(b)))
        && std::fs::read_to_string(bin.join(format!(".{name}.version")))
            .is_ok_and(|s| s.trim_end_matches('\n') == expected)
}

fn write_stamp(bin: &Path, name: &str, stamp: &str) -> Result<()> {
    std::fs::write(bin.join(format!(".{name}.version")), format!("{stamp}\n"))?;
    Ok(())
}

/// `go install PACKAGES` into `gobin`.
fn go_install(gobin: &Path, packages: &[String]) -> Result<()> {
    run(
        Command::new("go")
            .arg("install")
            .args(packages)
            .env("GOBIN", gobin)
            .stdout(to_stderr()?),
        &format!("go install of {} failed", packages.join(" ")),
    )
}

/// Builds `tool` unless its pinned version is cached.
pub fn install(cfg: &Config, tool: Tool) -> Result<()> {
    if !have("go") {
        bail!("Go is needed to build {} (go install)", tool.name());
    }
    let bin = cfg.go_cache.join("bin");
    std::fs::create_dir_all(&bin)?;
    match tool {
        Tool::Promtool | Tool::Prometheus => install_prometheus(cfg, tool.name()),
        Tool::Toxiproxy => install_toxiproxy(cfg),
        Tool::Otelcol => install_otelcol(cfg),
        Tool::Helm => install_helm(cfg),
    }
}

fn install_prometheus(cfg: &Config, name: &str) -> Result<()> {
    let bin = cfg.go_cache.join("bin");
    let _lock = Lock::take(&cfg.go_cache.join(".lock"))?;
    if cached(&bin, &[name], (name, PROMETHEUS_VERSION)) {
        return Ok(());
    }
    log(&format!(
        "building {name} {PROMETHEUS_VERSION} with go install (a few minutes the first time)"
    ));
    go_install(
        &bin,
        &[format!(
            "github.com/prometheus/prometheus/cmd/{name}@{PROMETHEUS_VERSION}"
        )],
    )?;
    write_stamp(&bin, name, PROMETHEUS_VERSION)
}

/// Go names the binaries `server` and `cli`, kept as toxiproxy-server and
/// toxiproxy-cli.
fn install_toxiproxy(cfg: &Config) -> Result<()> {
    let bin = cfg.go_cache.join("bin");
    let _lock = Lock::take(&cfg.go_cache.join(".lock-toxiproxy"))?;
    if cached(
        &bin,
        Tool::Toxiproxy.binaries(),
        ("toxiproxy", TOXIPROXY_VERSION),
    ) {
        return Ok(());
    }
    log(&format!(
        "building Toxiproxy {TOXIPROXY_VERSION} with go install"
    ));
    let tmp = temp_dir("toxiproxy")?;
    let built = go_install(
        &tmp,
        &[
            format!("github.com/Shopify/toxiproxy/v2/cmd/server@{TOXIPROXY_VERSION}"),
            format!("github.com/Shopify/toxiproxy/v2/cmd/cli@{TOXIPROXY_VERSION}"),
        ],
    )
    .and_then(|()| {
        move_file(&tmp.join("server"), &bin.join("toxiproxy-server"))?;
        move_file(&tmp.join("cli"), &bin.join("toxiproxy-cli"))
    });
    let _ = std::fs::remove_dir_all(&tmp);
    built?;
    write_stamp(&bin, "toxiproxy", TOXIPROXY_VERSION)
}

/// A rename, or a copy where the two lie on different file systems.
fn move_file(from: &Path, to: &Path) -> Result<()> {
    if std::fs::rename(from, to).is_err() {
        std::fs::copy(from, to)?;
        std::fs::remove_file(from)?;
    }
    Ok(())
}

/// The collector's stamp: its version and the builder configuration's
/// digest, so a change of the configuration rebuilds it.
fn otelcol_stamp(cfg: &Config) -> Result<String> {
    let sum = output(
        Command::new("sha256sum").arg(cfg.repo.join("tests/otel/builder.yaml")),
        "sha256sum tests/otel/builder.yaml",
    )?;
    Ok(format!(
        "{OTELCOL_VERSION} {}",
        sum.get(..16).unwrap_or(&sum)
    ))
}

fn install_otelcol(cfg: &Config) -> Result<()> {
    let bin = cfg.go_cache.join("bin");
    let _lock = Lock::take(&cfg.go_cache.join(".lock-otelcol"))?;
    let stamp = otelcol_stamp(cfg)?;
    if cached(&bin, &["otelcol"], ("otelcol", &stamp)) {
        return Ok(());
    }
    if !cached(&bin, &["ocb"], ("ocb", OTELCOL_VERSION)) {
        log(&format!(
            "installing the collector builder {OTELCOL_VERSION} with go install"
        ));
        let tmp = temp_dir("ocb")?;
        let built = go_install(
            &tmp,
            &[format!(
                "go.opentelemetry.io/collector/cmd/builder@{OTELCOL_VERSION}"
            )],
        )
        .and_then(|()| move_file(&tmp.join("builder"), &bin.join("ocb")));
        let _ = std::fs::remove_dir_all(&tmp);
        built?;
        write_stamp(&bin, "ocb", OTELCOL_VERSION)?;
    }
    log(&format!(
        "building the OpenTelemetry Collector {OTELCOL_VERSION} (a few minutes the first time)"
    ));
    let out = temp_dir("otelcol")?;
    let built = crate::process::run_logged(
        Command::new(bin.join("ocb"))
            .arg("--config")
            .arg(cfg.repo.join("tests/otel/builder.yaml"))
            .arg("--output-path")
            .arg(&out),
        &out.with_extension("log"),
        "building the OpenTelemetry Collector failed",
    )
    .and_then(|()| move_file(&out.join("otelcol-outbox-cdc"), &bin.join("otelcol")));
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_file(out.with_extension("log"));
    built?;
    write_stamp(&bin, "otelcol", &stamp)
}

/// Helm, pinned (`OUTBOX_HELM_VERSION` picks another), with a fallback the
/// module proxy approves; a helm already built is kept.
fn install_helm(cfg: &Config) -> Result<()> {
    let bin = cfg.go_cache.join("bin");
    let _lock = Lock::take(&cfg.go_cache.join(".lock-helm"))?;
    if executable(&bin.join("helm")) {
        return Ok(());
    }
    let wanted = cfg.vars.or("OUTBOX_HELM_VERSION", HELM_VERSION);
    for version in [wanted, HELM_FALLBACK] {
        log(&format!(
            "building helm {version} with go install (a few minutes the first time)"
        ));
        if go_install(&bin, &[format!("helm.sh/helm/v3/cmd/helm@{version}")]).is_ok() {
            return write_stamp(&bin, "helm", version);
        }
        log(&format!("helm {version} did not build"));
    }
    bail!("no helm")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_are_refused() {
        for tool in Tool::ALL {
            assert_eq!(Tool::parse(tool.name()).unwrap(), tool);
        }
        assert!(Tool::parse("kubectl").is_err());
        assert_eq!(
            names(&[Tool::Promtool, Tool::Toxiproxy]),
            "promtool, toxiproxy"
        );
    }

    #[test]
    fn a_cached_tool_needs_every_binary_and_the_pinned_stamp() {
        use std::os::unix::fs::PermissionsExt;
        let bin = temp_dir("gobin").unwrap();
        let binaries = Tool::Toxiproxy.binaries();
        let stamp = ("toxiproxy", TOXIPROXY_VERSION);
        assert!(!cached(&bin, binaries, stamp));
        for b in binaries {
            std::fs::write(bin.join(b), "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(bin.join(b), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        // No stamp yet: an older build, or one cut short.
        assert!(!cached(&bin, binaries, stamp));
        write_stamp(&bin, "toxiproxy", "v2.11.0").unwrap();
        assert!(!cached(&bin, binaries, stamp));
        write_stamp(&bin, "toxiproxy", TOXIPROXY_VERSION).unwrap();
        assert!(cached(&bin, binaries, stamp));
        std::fs::set_permissions(
            bin.join("toxiproxy-cli"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        assert!(!cached(&bin, binaries, stamp));
        std::fs::remove_dir_all(bin).unwrap();
    }
}
