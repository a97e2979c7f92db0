//! Failures name their cause after one code, and the code never depends on
//! the language of the server's messages: the same failure paths run against
//! the shared (English) PostgreSQL and against a second one whose
//! `lc_messages` is German give the same codes.

use crate::common;
use crate::common::cli::Cli;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use std::time::{Duration, Instant};

use common::replication as rep;
use common::{relay, Services};
use outbox_cdc::lsn::Lsn;
use outbox_cdc::replication::ReplicationConnection;

fn outbox_cdc(args: &[&str], config: &Path, envs: &[(&str, &str)]) -> Output {
    Cli::new(args).config(config).envs(envs).output()
}

/// A configuration for `db` on `(host, port, user)` of `s`, written to disk.
fn config_for(s: &Services, (port, user): (u16, &str), db: &str, label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("outbox-cdc-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{label}-{port}.toml"));
    let text = common::config_head(
        (&s.pg_host, port, user),
        db,
        Some(&format!("{db}_relay")),
        "errors.",
        &s.kafka_bootstrap,
    );
    std::fs::write(&path, format!("{text}\n[relay]\ncreate_slot = true\n")).unwrap();
    path
}

/// What one command printed about one failure: its code (the first word of
/// the error line) and the whole text.
#[derive(Debug)]
struct Failure {
    code: String,
    text: String,
}

fn failure_of(out: &Output) -> Failure {
    assert!(!out.status.success(), "the command succeeded");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("error: "))
        .unwrap_or_else(|| panic!("no error line: {stderr}"))
        .to_string();
    let code = line.split(':').next().unwrap_or_default().to_string();
    Failure { code, text: line }
}

/// The `check` finding for PostgreSQL: its code and detail, as printed.
fn check_finding(out: &Output, check: &str) -> Failure {
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let line = stdout
        .lines()
        .find(|l| l.starts_with("ERROR") && l.split_whitespace().nth(1) == Some(check))
        .unwrap_or_else(|| panic!("no {check} error in: {stdout}"))
        .to_string();
    let code = line.split_whitespace().nth(2).unwrap_or_default();
    Failure {
        code: code.trim_end_matches(':').to_string(),
        text: line,
    }
}

/// Runs the failure paths against the PostgreSQL of `s` and returns, per
/// case, what was reported.
async fn failure_paths(s: &Services) -> BTreeMap<&'static str, Failure> {
    let mut seen = BTreeMap::new();
    let db = common::migrated_db(s, "errs", "errors.").await;
    db.declare_cdc().await;
    let pid = std::process::id();
    let env_pw = [("OUTBOX_TEST_PG_PASSWORD", s.pg_password.as_str())];

    // Log-in failures, through all three commands that connect.
    let missing_db = config_for(
        s,
        (s.pg_port, &s.pg_user),
        &format!("t_no_such_db_{pid}"),
        "nodb",
    );
    let wrong_pw = config_for(s, (s.pg_port, &s.pg_user), &db.name, "pw");
    let missing_role = config_for(
        s,
        (s.pg_port, &format!("relay_trust_nobody_{pid}")),
        &db.name,
        "role",
    );
    let refused = config_for(s, (1, &s.pg_user), &db.name, "port");
    for (case, config, envs) in [
        ("missing database", &missing_db, &env_pw[..]),
        (
            "wrong password",
            &wrong_pw,
            &[("OUTBOX_TEST_PG_PASSWORD", "wrong")][..],
        ),
        ("missing role", &missing_role, &env_pw[..]),
        ("refused port", &refused, &env_pw[..]),
    ] {
        let run = failure_of(&outbox_cdc(&["run"], config, envs));
        let migrate = failure_of(&outbox_cdc(&["migrate"], config, envs));
        let check = check_finding(&outbox_cdc(&["check"], config, envs), "postgres");
        assert_eq!(run.code, migrate.code, "{case}: {run:?} {migrate:?}");
        assert_eq!(run.code, check.code, "{case}: {run:?} {check:?}");
        for f in [&run, &migrate, &check] {
            assert_eq!(
                f.text.matches(&run.code).count(),
                1,
                "{case}: the code once: {}",
                f.text
            );
        }
        seen.insert(case, run);
    }

    // A role that may log in but not stream.
    let role = format!("relay_norepl_{pid}");
    db.client
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN PASSWORD 'pw';
             GRANT ALL ON ALL TABLES IN SCHEMA public TO {role};"
        ))
        .await
        .unwrap();
    let norepl = config_for(s, (s.pg_port, &role), &db.name, "norepl");
    let out = outbox_cdc(&["run"], &norepl, &[("OUTBOX_TEST_PG_PASSWORD", "pw")]);
    seen.insert("no replication privilege", failure_of(&out));

    // A slot another session streams from.
    let slot = format!("{}_held", db.name);
    let holder = rep::start(
        &db.client,
        &rep::source(s, &db.name, &slot, rep::PUBLICATION),
    )
    .await
    .unwrap();
    let mut conn = ReplicationConnection::connect(&rep::options(s, &db.name))
        .await
        .unwrap();
    let err = conn
        .start_replication(&outbox_cdc::replication::StartReplication {
            slot: &slot,
            from: Lsn::ZERO,
            publication: rep::PUBLICATION,
            messages: outbox_cdc::replication::Messages::Left,
            values: outbox_cdc::replication::Values::Text,
        })
        .await
        .unwrap_err();
    seen.insert(
        "slot in use",
        Failure {
            code: err.code().to_string(),
            text: err.to_string(),
        },
    );
    holder.stop().await.unwrap();
    rep::drop_slot(&db.client, &slot).await;

    // The publication dropped under a streaming relay.
    let config = config_for(s, (s.pg_port, &s.pg_user), &db.name, "dropped");
    let mut relay = relay::RelayProcess::spawn(&config);
    let relay_slot = format!("{}_relay", db.name);
    let deadline = Instant::now() + Duration::from_secs(60);
    while rep::confirmed_flush(&db.client, &relay_slot).await == Lsn::ZERO {
        assert!(
            Instant::now() < deadline,
            "the relay never created its slot"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    db.client
        .batch_execute(
            "DROP PUBLICATION outbox_cdc_publication;
             INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload)
             VALUES (gen_random_uuid(), 'orders', 'T', 1, 'x', '\\x00');",
        )
        .await
        .unwrap();
    let status = tokio::task::spawn_blocking(move || {
        let status = relay.wait(Duration::from_secs(90));
        (status, relay.log_text())
    })
    .await
    .unwrap();
    assert!(status.0.is_some_and(|s| !s.success()), "{}", status.1);
    let line = status
        .1
        .lines()
        .find_map(|l| l.strip_prefix("error: "))
        .unwrap_or_else(|| panic!("no error line: {}", status.1))
        .to_string();
    seen.insert(
        "publication dropped while streaming",
        Failure {
            code: line.split(':').next().unwrap_or_default().to_string(),
            text: line,
        },
    );
    rep::drop_slot(&db.client, &relay_slot).await;
    db.client
        .batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role};"))
        .await
        .unwrap();
    db.drop(s).await;
    seen
}

/// The codes every case must give, in any language.
const CODES: [(&str, &str); 7] = [
    ("missing database", "PG_CONNECT_FAILED"),
    ("missing role", "PG_AUTH_FAILED"),
    ("no replication privilege", "PG_PERMISSION_DENIED"),
    ("publication dropped while streaming", "PUBLICATION_MISSING"),
    ("refused port", "PG_CONNECT_FAILED"),
    ("slot in use", "SLOT_IN_USE"),
    ("wrong password", "PG_AUTH_FAILED"),
];

fn codes<'a>(seen: &'a BTreeMap<&'static str, Failure>) -> Vec<(&'static str, &'a str)> {
    seen.iter().map(|(k, f)| (*k, f.code.as_str())).collect()
}

#[tokio::test]
async fn every_failure_shows_its_cause_once_after_one_code() {
    let services = require_services!();
    let seen = failure_paths(&services).await;
    assert_eq!(codes(&seen), CODES.to_vec());
    let pid = std::process::id();
    let causes = [
        (
            "missing database",
            format!("database \"t_no_such_db_{pid}\" does not exist (SQLSTATE 3D000)"),
        ),
        // Under password authentication the server does not say whether the
        // role exists; it names the user and the SQLSTATE class 28.
        (
            "missing role",
            format!("\"relay_trust_nobody_{pid}\" (SQLSTATE 28"),
        ),
        (
            "wrong password",
            "password authentication failed for user \"postgres\" (SQLSTATE 28P01)".to_string(),
        ),
        ("refused port", "Connection refused".to_string()),
        ("no replication privilege", "(SQLSTATE 42501)".to_string()),
        (
            "publication dropped while streaming",
            "(SQLSTATE 42704)".to_string(),
        ),
    ];
    for (case, cause) in causes {
        let text = &seen[case].text;
        assert!(text.contains(&cause), "{case}: {text}");
    }
}

/// Where the second, German-speaking PostgreSQL listens.
const GERMAN_PORT: u16 = 25349;

#[tokio::test]
async fn a_server_speaking_german_gives_the_same_codes() {
    let services = require_services!();
    let german = tokio::task::spawn_blocking(|| {
        common::ExtraServices::start(
            "translated",
            &[
                ("OUTBOX_TEST_PG_PORT", GERMAN_PORT.to_string()),
                ("OUTBOX_TEST_PG_LC_MESSAGES", "de_DE.UTF-8".to_string()),
            ],
            &["start-postgres"],
        )
    })
    .await
    .unwrap();
    let other = Services {
        pg_port: GERMAN_PORT,
        ..services
    };
    let seen = failure_paths(&other).await;
    // The server really spoke German: the old text matching would have failed.
    let missing_db = &seen["missing database"].text;
    assert!(missing_db.contains("existiert nicht"), "{missing_db}");
    let dropped = &seen["publication dropped while streaming"].text;
    assert!(dropped.contains("Publikation"), "{dropped}");
    assert_eq!(codes(&seen), CODES.to_vec());
    tokio::task::spawn_blocking(move || drop(german))
        .await
        .unwrap();
}
