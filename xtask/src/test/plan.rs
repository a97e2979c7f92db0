//! The suite's steps, in order, as data: what runs in the foreground, what
//! runs beside it and where it is joined, which Go tools each step needs,
//! and what a failure does. `run` carries a plan out; `--plan` prints it.

use crate::tools::Tool;

/// The newest major: the Debezium parity test and the restarts run on it.
pub const NEWEST: u8 = 18;
/// The majors of the matrix when `OUTBOX_TEST_PG_MAJORS` is unset.
pub const MATRIX: [u8; 4] = [14, 16, 17, 18];
/// The core of the suite, run on every other major: migrations, the
/// replication reader, the relay end to end, the exclusivity rules and
/// `check`.
pub const CORE_TESTS: [&str; 5] = [
    "migrations::",
    "replication::",
    "relay::",
    "exclusivity::",
    "commands::",
];

/// One step of the suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Job {
    Fmt,
    /// `services start` (after `reset` in CI).
    Services,
    /// The Go tools the later steps use, built beside the compile.
    Tools,
    /// Every target, linted by clippy's driver as it compiles.
    Build,
    /// The release build, the image, the chart's checks, the package's
    /// tools and mdBook, at the lowest priority.
    Artifacts,
    Failover,
    UnitTests,
    XtaskTests,
    Integration,
    TransactionalRestarts,
    Proxies,
    Network,
    StartPostgres(u8),
    Major(u8),
    StopPostgres(u8),
    StartCluster,
    Cluster,
    Restarts(u8),
    StopCluster,
    Soak,
    Quickstart,
    ImageTests,
    BookTests,
    Deb,
}

/// What a failed step does to the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnFailure {
    /// Nothing after it can run: the suite stops.
    Abort,
    /// The suite goes on and fails at the end.
    Record,
}

impl Job {
    pub fn name(&self) -> String {
        match self {
            Job::Fmt => "cargo fmt --check".into(),
            Job::Services => "services start".into(),
            Job::Tools => "Go tools".into(),
            Job::Build => "build, linted by clippy".into(),
            Job::Artifacts => "shipped artifacts (image, chart, package tools, mdBook)".into(),
            Job::Failover => "failover (PostgreSQL 17 pair)".into(),
            Job::UnitTests => "unit, architecture, packaging".into(),
            Job::XtaskTests => "xtask's unit tests".into(),
            Job::Integration => "integration, PostgreSQL 15".into(),
            Job::TransactionalRestarts => "restarts, transactional delivery".into(),
            Job::Proxies => "services start-proxies".into(),
            Job::Network => "network faults".into(),
            Job::StartPostgres(m) => format!("start PostgreSQL {m}"),
            Job::Major(m) => format!("core of the suite, PostgreSQL {m}"),
            Job::StopPostgres(m) => format!("stop PostgreSQL {m}"),
            Job::StartCluster => "services start-cluster".into(),
            Job::Cluster => "Kafka cluster's faults".into(),
            Job::Restarts(m) => format!("restarts, PostgreSQL {m}"),
            Job::StopCluster => "services stop-cluster".into(),
            Job::Soak => "short nemesis soak".into(),
            Job::Quickstart => "quickstart".into(),
            Job::ImageTests => "image's tests".into(),
            Job::BookTests => "user guide (mdBook, links)".into(),
            Job::Deb => "Debian package".into(),
        }
    }

    /// The Go tools the step uses.
    pub fn needs(&self) -> &'static [Tool] {
        match self {
            // /metrics through promtool, a real Prometheus's scrape, spans
            // into a real collector.
            Job::Integration => &[Tool::Promtool, Tool::Prometheus, Tool::Otelcol],
            // The proxies, and the steps that go through them.
            Job::Proxies | Job::Network | Job::Cluster | Job::Soak => &[Tool::Toxiproxy],
            // scripts/chart-check.sh builds it, at the artifacts' priority.
            Job::Artifacts => &[Tool::Helm],
            _ => &[],
        }
    }

    /// Whether the step builds its tools itself (the artifacts, at the
    /// lowest priority), rather than the `Tools` step beside the compile.
    pub fn builds_its_tools(&self) -> bool {
        matches!(self, Job::Artifacts)
    }

    pub fn on_failure(&self) -> OnFailure {
        match self {
            Job::Fmt
            | Job::Services
            | Job::Tools
            | Job::Build
            | Job::Proxies
            | Job::StartPostgres(_)
            | Job::StopPostgres(_)
            | Job::StartCluster
            | Job::StopCluster => OnFailure::Abort,
            _ => OnFailure::Record,
        }
    }

    /// Whether its output holds test results (libtest's `test result:`
    /// lines) for the totals.
    pub fn counts(&self) -> bool {
        matches!(
            self,
            Job::UnitTests
                | Job::XtaskTests
                | Job::Integration
                | Job::Failover
                | Job::TransactionalRestarts
                | Job::Network
                | Job::Major(_)
                | Job::Restarts(_)
                | Job::Cluster
                | Job::Soak
                | Job::ImageTests
                | Job::BookTests
        )
    }

    /// The step whose success it needs (skipped otherwise).
    pub fn requires(&self) -> Option<Job> {
        match self {
            Job::ImageTests | Job::BookTests | Job::Deb => Some(Job::Artifacts),
            _ => None,
        }
    }

    /// The test names a major's run takes.
    pub fn major_tests(major: u8) -> Vec<String> {
        let mut tests: Vec<String> = CORE_TESTS.iter().map(|t| t.to_string()).collect();
        // The converter cases decide bytes after the database: 15 runs
        // them; decoderbufs is packaged for 15 alone.
        if major == NEWEST {
            tests.extend(
                [
                    "debezium::",
                    "--skip",
                    "debezium::router::converters::",
                    "--skip",
                    "decoderbufs",
                ]
                .map(String::from),
            );
        }
        tests
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// A line saying what comes next.
    Header(String),
    Run(Job),
    /// Started beside what follows, until its `Join`.
    Spawn(Job),
    Join(Job),
}

/// The matrix's majors two at a time, each pair side by side.
pub fn pairs(majors: &[u8]) -> Vec<Vec<u8>> {
    majors.chunks(2).map(<[u8]>::to_vec).collect()
}

/// The suite on these matrix majors (PostgreSQL 15 always runs).
pub fn plan(majors: &[u8]) -> Vec<Action> {
    use Action::{Header, Join, Run, Spawn};
    let h = |s: &str| Header(s.to_string());
    let mut p = vec![
        h("cargo fmt --check"),
        Run(Job::Fmt),
        h("starting PostgreSQL and Kafka in the background"),
        Spawn(Job::Services),
        h("building every target with clippy's lints (-D warnings): one compilation for both"),
        Run(Job::Build),
        Join(Job::Services),
        h("building the shipped artifacts in the background (image, chart, package tools, the guide's mdBook)"),
        Spawn(Job::Artifacts),
        h("the tests on PostgreSQL 15 (unit, integration, failover beside them, then transactional delivery's restarts; packaging, drift of connector-config/ and snapshots/)"),
        Spawn(Job::Failover),
        Run(Job::UnitTests),
        Run(Job::XtaskTests),
        Run(Job::Integration),
        Join(Job::Failover),
        Run(Job::TransactionalRestarts),
        h("network faults (PostgreSQL 15 through Toxiproxy), beside the matrix"),
        Run(Job::Proxies),
        Spawn(Job::Network),
    ];
    for pair in pairs(majors) {
        let names: Vec<String> = pair.iter().map(u8::to_string).collect();
        p.push(Header(format!(
            "PostgreSQL {}: the core of the suite, side by side",
            names.join(" ")
        )));
        p.extend(pair.iter().map(|&m| Run(Job::StartPostgres(m))));
        p.extend(pair.iter().map(|&m| Spawn(Job::Major(m))));
        p.extend(pair.iter().map(|&m| Join(Job::Major(m))));
        p.extend(
            pair.iter()
                .filter(|&&m| m != NEWEST)
                .map(|&m| Run(Job::StopPostgres(m))),
        );
    }
    // The restarts (on the newest major) restart Kafka: everything beside
    // them must be done, but the cluster's faults, which touch only the
    // cluster and its own proxies.
    p.push(Join(Job::Network));
    p.push(h("the Kafka cluster's faults, each in both delivery modes (tests/cluster), beside the restarts"));
    p.push(Run(Job::StartCluster));
    p.push(Spawn(Job::Cluster));
    if majors.contains(&NEWEST) {
        p.push(Header(format!(
            "PostgreSQL {NEWEST}: the restarts of PostgreSQL and Kafka"
        )));
        p.push(Run(Job::Restarts(NEWEST)));
        p.push(Run(Job::StopPostgres(NEWEST)));
    }
    p.extend([
        Join(Job::Cluster),
        Run(Job::StopCluster),
        h("the short nemesis soak, both delivery modes (PostgreSQL 15 through Toxiproxy)"),
        Run(Job::Soak),
        h("the quickstart (scripts/quickstart.sh, the README's first command)"),
        Run(Job::Quickstart),
        h("the shipped artifacts: image (scripts/image.sh), chart (scripts/chart-check.sh)"),
        Join(Job::Artifacts),
        h("the image's tests (PostgreSQL 15; testcontainers through podman's API socket)"),
        Run(Job::ImageTests),
        h("the user guide: mdBook build and link check (tests/it/book.rs)"),
        Run(Job::BookTests),
        h("Debian package (scripts/deb.sh)"),
        Run(Job::Deb),
    ]);
    with_tools(p)
}

/// The jobs a plan starts, in order.
pub fn jobs(plan: &[Action]) -> impl Iterator<Item = Job> + '_ {
    plan.iter().filter_map(|a| match a {
        Action::Run(j) | Action::Spawn(j) => Some(*j),
        _ => None,
    })
}

/// The Go tools the `Tools` step builds beside the compile: every tool a
/// later step needs, but those a step builds itself.
pub fn prefetched(plan: &[Action]) -> Vec<Tool> {
    let mut tools: Vec<Tool> = jobs(plan)
        .filter(|j| !j.builds_its_tools())
        .flat_map(|j| j.needs().iter().copied())
        .collect();
    tools.sort();
    tools.dedup();
    tools
}

/// Builds the Go tools beside the compile (after the services start) and
/// joins them before the first step that uses one.
fn with_tools(mut plan: Vec<Action>) -> Vec<Action> {
    let tools = prefetched(&plan);
    if tools.is_empty() {
        return plan;
    }
    let first_user = plan.iter().position(|a| match a {
        Action::Run(j) | Action::Spawn(j) => {
            !j.builds_its_tools() && j.needs().iter().any(|t| tools.contains(t))
        }
        _ => false,
    });
    if let Some(at) = first_user {
        plan.insert(at, Action::Join(Job::Tools));
    }
    let after_services = plan
        .iter()
        .position(|a| *a == Action::Spawn(Job::Services))
        .map_or(0, |i| i + 1);
    plan.insert(after_services, Action::Spawn(Job::Tools));
    plan.insert(
        after_services,
        Action::Header(format!(
            "building the Go tools the tests use in the background ({})",
            crate::tools::names(&tools)
        )),
    );
    plan
}

/// The steps `--only` can pick: those that need no build of the relay.
pub const SELECTABLE: [(&str, Job); 5] = [
    ("fmt", Job::Fmt),
    ("services", Job::Services),
    ("tools", Job::Tools),
    ("xtask", Job::XtaskTests),
    ("proxies", Job::Proxies),
];

/// The plan cut to the steps `keys` name (with their joins and headers).
pub fn select(plan: &[Action], keys: &[&str]) -> Result<Vec<Action>, String> {
    let picked = keys
        .iter()
        .map(|k| {
            SELECTABLE
                .iter()
                .find(|(name, _)| name == k)
                .map(|(_, j)| *j)
                .ok_or_else(|| {
                    let names: Vec<&str> = SELECTABLE.iter().map(|(n, _)| *n).collect();
                    format!("--only takes {}, not {k}", names.join(", "))
                })
        })
        .collect::<Result<Vec<Job>, String>>()?;
    if picked.contains(&Job::Proxies) && !picked.contains(&Job::Services) {
        return Err("--only proxies needs services (their state directory)".into());
    }
    let kept = |a: &Action| match a {
        Action::Run(j) | Action::Spawn(j) | Action::Join(j) => picked.contains(j),
        Action::Header(_) => false,
    };
    let mut out = Vec::new();
    for (i, a) in plan.iter().enumerate() {
        let keep = match a {
            Action::Header(_) => plan[i + 1..]
                .iter()
                .take_while(|x| !matches!(x, Action::Header(_)))
                .any(kept),
            other => kept(other),
        };
        if keep {
            out.push(a.clone());
        }
    }
    Ok(out)
}

/// The plan as `--plan` prints it.
pub fn render(plan: &[Action]) -> String {
    let mut out = String::new();
    for a in plan {
        let line = match a {
            Action::Header(h) => format!("==> {h}"),
            Action::Run(j) => format!("    run    {}", job_line(j)),
            Action::Spawn(j) => format!("    start  {} (beside what follows)", job_line(j)),
            Action::Join(j) => format!("    join   {}", j.name()),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

fn job_line(j: &Job) -> String {
    match j.needs() {
        [] => j.name(),
        tools => format!("{} [uses {}]", j.name(), crate::tools::names(tools)),
    }
}
