//! The suite's plan: its order, what runs beside what, and which Go tools
//! are built where.

use super::plan::{jobs, pairs, plan, prefetched, render, select, Action, Job, NEWEST};
use crate::tools::Tool;

fn position(p: &[Action], a: &Action) -> usize {
    p.iter()
        .position(|x| x == a)
        .unwrap_or_else(|| panic!("{a:?} is not in the plan"))
}

#[test]
fn majors_run_two_at_a_time() {
    assert_eq!(pairs(&[14, 16, 17, 18]), vec![vec![14, 16], vec![17, 18]]);
    assert_eq!(pairs(&[14, 16, 17]), vec![vec![14, 16], vec![17]]);
    assert_eq!(pairs(&[18]), vec![vec![18]]);
    assert!(pairs(&[]).is_empty());
}

#[test]
fn the_steps_come_in_the_order_of_the_suite() {
    use Action::{Join as J, Run as R, Spawn as S};
    let p: Vec<Action> = plan(&[14, 16, 17, 18])
        .into_iter()
        .filter(|a| !matches!(a, Action::Header(_)))
        .collect();
    let expected = vec![
        R(Job::Fmt),
        S(Job::Services),
        S(Job::Tools),
        R(Job::Build),
        J(Job::Services),
        S(Job::Artifacts),
        S(Job::Failover),
        R(Job::UnitTests),
        R(Job::XtaskTests),
        J(Job::Tools),
        R(Job::Integration),
        J(Job::Failover),
        R(Job::TransactionalRestarts),
        R(Job::Proxies),
        S(Job::Network),
        R(Job::StartPostgres(14)),
        R(Job::StartPostgres(16)),
        S(Job::Major(14)),
        S(Job::Major(16)),
        J(Job::Major(14)),
        J(Job::Major(16)),
        R(Job::StopPostgres(14)),
        R(Job::StopPostgres(16)),
        R(Job::StartPostgres(17)),
        R(Job::StartPostgres(18)),
        S(Job::Major(17)),
        S(Job::Major(18)),
        J(Job::Major(17)),
        J(Job::Major(18)),
        R(Job::StopPostgres(17)),
        J(Job::Network),
        R(Job::StartCluster),
        S(Job::Cluster),
        R(Job::Restarts(18)),
        R(Job::StopPostgres(18)),
        J(Job::Cluster),
        R(Job::StopCluster),
        R(Job::Soak),
        R(Job::Quickstart),
        J(Job::Artifacts),
        R(Job::ImageTests),
        R(Job::BookTests),
        R(Job::Deb),
    ];
    assert_eq!(p, expected);
}

#[test]
fn every_step_started_beside_is_joined_once_after() {
    for majors in [&[14, 16, 17, 18][..], &[], &[17], &[16, 18]] {
        let p = plan(majors);
        for (i, a) in p.iter().enumerate() {
            if let Action::Spawn(j) = a {
                let joins: Vec<usize> = p
                    .iter()
                    .enumerate()
                    .filter(|(_, x)| **x == Action::Join(*j))
                    .map(|(k, _)| k)
                    .collect();
                assert_eq!(joins.len(), 1, "{j:?} in {majors:?}");
                assert!(joins[0] > i, "{j:?} joined before it starts");
            }
            if let Action::Join(j) = a {
                assert!(p[..i].contains(&Action::Spawn(*j)), "{j:?} never started");
            }
        }
    }
}

#[test]
fn starting_the_services_builds_no_go_tool() {
    assert!(Job::Services.needs().is_empty());
    for j in [
        Job::StartPostgres(17),
        Job::Build,
        Job::Fmt,
        Job::StartCluster,
    ] {
        assert!(j.needs().is_empty(), "{j:?}");
    }
}

#[test]
fn the_go_tools_are_built_beside_the_compile_and_joined_before_their_first_user() {
    let p = plan(&[14, 16, 17, 18]);
    assert_eq!(
        prefetched(&p),
        vec![
            Tool::Promtool,
            Tool::Prometheus,
            Tool::Toxiproxy,
            Tool::Otelcol
        ]
    );
    let spawned = position(&p, &Action::Spawn(Job::Tools));
    assert!(spawned > position(&p, &Action::Spawn(Job::Services)));
    assert!(spawned < position(&p, &Action::Run(Job::Build)));
    let joined = position(&p, &Action::Join(Job::Tools));
    for (i, a) in p.iter().enumerate() {
        if let Action::Run(j) | Action::Spawn(j) = a {
            if !j.builds_its_tools() && !j.needs().is_empty() {
                assert!(i > joined, "{j:?} runs before its tools are built");
            }
        }
    }
    // Nothing that needs no tool waits for them: the unit tests run first.
    assert!(joined > position(&p, &Action::Run(Job::XtaskTests)));
    assert_eq!(joined + 1, position(&p, &Action::Run(Job::Integration)));
}

#[test]
fn helm_is_built_by_the_chart_check_at_the_artifacts_priority() {
    let p = plan(&[]);
    assert!(jobs(&p).any(|j| j == Job::Artifacts && j.needs() == [Tool::Helm]));
    assert!(!prefetched(&p).contains(&Tool::Helm));
}

#[test]
fn each_tool_is_used_by_the_steps_that_need_it() {
    assert_eq!(
        Job::Integration.needs(),
        [Tool::Promtool, Tool::Prometheus, Tool::Otelcol]
    );
    for j in [Job::Proxies, Job::Network, Job::Cluster, Job::Soak] {
        assert_eq!(j.needs(), [Tool::Toxiproxy], "{j:?}");
    }
    for j in [
        Job::Major(14),
        Job::Restarts(NEWEST),
        Job::Failover,
        Job::Quickstart,
    ] {
        assert!(j.needs().is_empty(), "{j:?}");
    }
}

#[test]
fn without_the_newest_major_there_are_no_restarts_and_every_major_stops() {
    let p = plan(&[14, 16, 17]);
    assert!(!jobs(&p).any(|j| matches!(j, Job::Restarts(_))));
    for m in [14, 16, 17] {
        assert!(p.contains(&Action::Run(Job::StopPostgres(m))), "{m}");
    }
    let p = plan(&[]);
    assert!(!jobs(&p).any(|j| matches!(j, Job::StartPostgres(_) | Job::Major(_))));
    assert!(
        position(&p, &Action::Join(Job::Network)) < position(&p, &Action::Run(Job::StartCluster))
    );
}

#[test]
fn the_newest_major_runs_the_debezium_tests_and_stops_after_the_restarts() {
    let p = plan(&[18]);
    let restarts = position(&p, &Action::Run(Job::Restarts(NEWEST)));
    assert_eq!(p[restarts + 1], Action::Run(Job::StopPostgres(NEWEST)));
    assert!(restarts > position(&p, &Action::Spawn(Job::Cluster)));
    assert!(restarts < position(&p, &Action::Join(Job::Cluster)));
    let tests = Job::major_tests(NEWEST);
    assert_eq!(
        tests[5..],
        [
            "debezium::",
            "--skip",
            "debezium::router::converters::",
            "--skip",
            "decoderbufs"
        ]
    );
    assert_eq!(Job::major_tests(14).len(), 5);
}

#[test]
fn the_image_book_and_package_need_the_artifacts() {
    for j in [Job::ImageTests, Job::BookTests, Job::Deb] {
        assert_eq!(j.requires(), Some(Job::Artifacts));
    }
    assert_eq!(Job::Integration.requires(), None);
}

#[test]
fn only_test_steps_count_towards_the_totals() {
    assert!(Job::Integration.counts() && Job::Major(17).counts() && Job::Soak.counts());
    assert!(!Job::Build.counts() && !Job::Quickstart.counts() && !Job::Deb.counts());
}

#[test]
fn the_printed_plan_says_what_runs_beside_and_what_uses_which_tool() {
    let text = render(&plan(&[16, 18]));
    assert!(text.contains("==> cargo fmt --check\n"), "{text}");
    assert!(text.contains("    start  services start (beside what follows)\n"));
    assert!(
        text.contains("    run    network faults")
            || text.contains("    start  network faults [uses toxiproxy]")
    );
    assert!(text
        .contains("    run    integration, PostgreSQL 15 [uses promtool, prometheus, otelcol]\n"));
    assert!(text.contains(
        "==> building the Go tools the tests use in the background (promtool, prometheus, toxiproxy, otelcol)\n"
    ));
    assert!(text.contains("==> PostgreSQL 16 18: the core of the suite, side by side\n"));
}

#[test]
fn only_keeps_the_steps_named_with_their_joins_and_headers() {
    let p = plan(&[14, 16, 17, 18]);
    let cut = select(&p, &["fmt", "xtask"]).unwrap();
    assert_eq!(
        cut,
        vec![
            Action::Header("cargo fmt --check".into()),
            Action::Run(Job::Fmt),
            Action::Header("the tests on PostgreSQL 15 (unit, integration, failover beside them, then transactional delivery's restarts; packaging, drift of connector-config/ and snapshots/)".into()),
            Action::Run(Job::XtaskTests),
        ]
    );
    let cut = select(&p, &["services", "tools", "proxies"]).unwrap();
    let kept: Vec<&Action> = cut
        .iter()
        .filter(|a| !matches!(a, Action::Header(_)))
        .collect();
    assert_eq!(
        kept,
        [
            &Action::Spawn(Job::Services),
            &Action::Spawn(Job::Tools),
            &Action::Join(Job::Services),
            &Action::Join(Job::Tools),
            &Action::Run(Job::Proxies),
        ]
    );
    assert!(select(&p, &["proxies"]).is_err());
    assert!(select(&p, &["integration"])
        .unwrap_err()
        .contains("not integration"));
}
