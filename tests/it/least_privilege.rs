//! The relay's PostgreSQL role with exactly what `migrate --print-grants`
//! prints: `cutover`, the hand-over, `run` and `check` work under it, and
//! taking any one grant away gives a code that names it, before anything is
//! published or the slot moves.

use crate::common::cli::Cli;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::{self, kafka, relay, replication as rep};

fn outbox_cdc(args: &[&str], config: &Path) -> Output {
    Cli::new(args)
        .config(config)
        .env("OUTBOX_TEST_PG_PASSWORD", "lp-pw")
        .output()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn rows(from: i32, n: i32) -> String {
    format!(
        "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key)
         SELECT md5('lp' || g)::uuid, 'orders', 'T', g, 'x', '\\x01', 'k' || (g % 5)
         FROM generate_series({from}, {}) g",
        from + n - 1
    )
}

#[tokio::test]
async fn a_least_privilege_role_runs_everything_and_each_missing_grant_is_named() {
    let services = require_services!();
    let prefix = common::unique_prefix("lp");
    let db = common::migrated_db(&services, "leastpriv", &prefix).await;
    let role = format!("relay_lp_{}", std::process::id());
    let slot = format!("{}_lp", db.name);
    let config = relay::config(&services, &db.name, &prefix, &slot, "");
    let text_of_config = std::fs::read_to_string(&config).unwrap().replace(
        &format!("user = \"{}\"", services.pg_user),
        &format!("user = \"{role}\""),
    );
    std::fs::write(&config, text_of_config).unwrap();

    // The grants, exactly as printed, applied by an administrator.
    let printed = outbox_cdc(&["migrate", "--print-grants", &role], &config);
    assert!(printed.status.success(), "{}", text(&printed));
    let grants = String::from_utf8(printed.stdout).unwrap();
    db.client
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} PASSWORD 'lp-pw'; {grants}"
        ))
        .await
        .unwrap();

    // A backlog, the cutover, the hand-over and the stream, all as the role.
    db.client.batch_execute(&rows(1, 20)).await.unwrap();
    let cut = outbox_cdc(&["cutover", "--to", "cdc"], &config);
    assert!(cut.status.success(), "{}", text(&cut));
    let relay = Command::new(crate::common::cli::bin())
        .args(["run", "--config"])
        .arg(&config)
        .env("OUTBOX_TEST_PG_PASSWORD", "lp-pw")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    db.client.batch_execute(&rows(21, 10)).await.unwrap();
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&format!("{prefix}orders")],
        30,
        Duration::from_secs(60),
    );
    assert_eq!(kafka::by_id(&records).len(), 30);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while common::rows_with_status(&db.client, "PUBLISHED").await < 30 {
        assert!(std::time::Instant::now() < deadline, "rows were not marked");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let check = outbox_cdc(&["check"], &config);
    assert!(check.status.success(), "{}", text(&check));
    // `status` reads everything it shows with the same role.
    let status = outbox_cdc(&["status"], &config);
    let said = text(&status);
    assert!(status.status.success(), "{said}");
    assert!(
        said.contains("not yet published: 0") && said.contains("healthy"),
        "{said}"
    );
    Command::new("kill")
        .args(["-TERM", &relay.id().to_string()])
        .status()
        .unwrap();
    let stopped = tokio::task::spawn_blocking(move || relay.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(stopped.status.success(), "{}", text(&stopped));

    // Each grant taken away in turn: both commands name it; nothing moves.
    rep::wait_inactive(&db.client, &slot).await;
    db.client.batch_execute(&rows(31, 5)).await.unwrap();
    let confirmed = rep::confirmed_flush(&db.client, &slot).await;
    let statements: Vec<&str> = grants
        .lines()
        .filter(|l| l.starts_with("GRANT ") && l.contains(" ON public."))
        .collect();
    assert!(statements.len() >= 10, "{grants}");
    for grant in statements {
        let revoke = grant
            .replacen("GRANT ", "REVOKE ", 1)
            .replace(&format!(" TO {role};"), &format!(" FROM {role};"));
        db.client.batch_execute(&revoke).await.unwrap();
        // What the GRANT names: "SELECT ON public.messaging_outbox" and the like.
        let named = grant
            .trim_start_matches("GRANT ")
            .trim_end_matches(&format!(" TO {role};"))
            .to_string();
        let check = text(&outbox_cdc(&["check"], &config));
        assert!(
            check
                .lines()
                .any(|l| l.contains("PG_PRIVILEGE_MISSING") && l.contains(&named)),
            "{revoke}: {check}"
        );
        let run = outbox_cdc(&["run"], &config);
        let said = text(&run);
        assert!(!run.status.success(), "{revoke}: {said}");
        assert!(
            said.contains("error: PG_PRIVILEGE_MISSING") && said.contains(&named),
            "{revoke}: {said}"
        );
        assert!(said.contains(grant), "the fix is named: {said}");
        db.client.batch_execute(grant).await.unwrap();
    }
    // Without REPLICATION, the server refuses the walsender.
    db.client
        .batch_execute(&format!("ALTER ROLE {role} NOREPLICATION"))
        .await
        .unwrap();
    let run = outbox_cdc(&["run"], &config);
    assert!(
        text(&run).contains("error: PG_PERMISSION_DENIED"),
        "{}",
        text(&run)
    );
    assert_eq!(rep::confirmed_flush(&db.client, &slot).await, confirmed);
    assert_eq!(
        common::rows_with_status(&db.client, "PENDING").await,
        5,
        "nothing was published"
    );

    rep::drop_slot(&db.client, &slot).await;
    db.client
        .batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role};"))
        .await
        .unwrap();
    db.drop(&services).await;
}
