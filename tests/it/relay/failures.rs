//! Failures the relay meets end to end: rows Kafka or the mapper refuses,
//! a bad configuration, a drifted schema, and a journal that cannot be
//! written.

use super::*;

#[tokio::test]
async fn rejected_and_refused_rows_become_failed_and_the_stream_goes_on() {
    let services = require_services!();
    let prefix = common::unique_prefix("fail");
    let db = common::cdc_db(&services, "failed", &prefix).await;
    // An old table whose reserved-name constraint is missing.
    db.client
        .batch_execute(
            "ALTER TABLE public.messaging_outbox DROP CONSTRAINT ck_outbox_headers_reserved",
        )
        .await
        .unwrap();
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    let relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;

    db.client
        .batch_execute(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload)
             VALUES ('00000000-0000-4000-8000-00000000f001', 'big', 'T', 1, 'x', convert_to(repeat('x', 2000000), 'UTF8'));
             INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, headers)
             VALUES ('00000000-0000-4000-8000-00000000f002', 'small', 'T', 1, 'x', '\\x01', '{\"msg.type\": \"spoofed\"}');",
        )
        .await
        .unwrap();
    let after_bad: Lsn = db
        .client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get::<_, String>(0)
        .parse()
        .unwrap();
    db.client
        .batch_execute(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload)
             VALUES ('00000000-0000-4000-8000-00000000f003', 'small', 'T', 1, 'x', '\\x02');",
        )
        .await
        .unwrap();
    let topic = format!("{prefix}small");
    let records = kafka::consume(
        &services.kafka_bootstrap,
        &[&topic],
        1,
        Duration::from_secs(60),
    );
    let ids: Vec<String> = records.iter().map(Consumed::id).collect();
    assert_eq!(ids, vec!["00000000-0000-4000-8000-00000000f003"]);

    let mut rows: Vec<(String, String, Option<String>)> = Vec::new();
    for _ in 0..100 {
        rows = db
            .client
            .query("SELECT message_id::text, status, last_failure_code FROM public.messaging_outbox ORDER BY message_id", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        if rows.iter().all(|r| r.1 != "PENDING") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        rows,
        vec![
            (
                "00000000-0000-4000-8000-00000000f001".into(),
                "FAILED".into(),
                Some("MESSAGE_TOO_LARGE".into())
            ),
            (
                "00000000-0000-4000-8000-00000000f002".into(),
                "FAILED".into(),
                Some("RESERVED_HEADER_NAME".into())
            ),
            (
                "00000000-0000-4000-8000-00000000f003".into(),
                "PUBLISHED".into(),
                None
            ),
        ]
    );
    let confirmed = rep::wait_confirmed(
        &db.client,
        &slot,
        |l| l >= after_bad,
        Duration::from_secs(15),
    )
    .await;
    assert!(
        confirmed >= after_bad,
        "the slot advanced past the failed rows"
    );
    let log = relay.log_text();
    assert!(
        log.contains("MESSAGE_TOO_LARGE") && log.contains("RESERVED_HEADER_NAME"),
        "{log}"
    );
    finish(&services, db, &slot, relay).await;
}

#[tokio::test]
async fn bad_configuration_ends_start_up_without_touching_the_slot() {
    let services = require_services!();
    let prefix = common::unique_prefix("bad");
    let db = common::cdc_db(&services, "badcfg", &prefix).await;
    let slot_exists = |slot: String| {
        let client = &db.client;
        async move {
            client
                .query_one(
                    "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1",
                    &[&slot],
                )
                .await
                .unwrap()
                .get::<_, i64>(0)
                == 1
        }
    };
    let run = |config: &std::path::Path, envs: &[(&str, &str)]| {
        let mut cmd = std::process::Command::new(crate::common::cli::bin());
        cmd.args(["run", "--config"]).arg(config);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };

    // Unreachable Kafka.
    let slot = format!("{}_a", db.name);
    let config = relay::config(&services, &db.name, &prefix, &slot, "");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace(&services.kafka_bootstrap, "127.0.0.1:1");
    std::fs::write(&config, text).unwrap();
    let out = run(&config, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("KAFKA_UNREACHABLE"), "{stderr}");
    assert!(!slot_exists(slot).await);

    // Wrong password.
    let slot = format!("{}_b", db.name);
    let config = relay::config(&services, &db.name, &prefix, &slot, "");
    let out = run(&config, &[("OUTBOX_TEST_PG_PASSWORD", "wrong")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("PG_AUTH_FAILED"), "{stderr}");
    assert!(!slot_exists(slot).await);

    // A user without the REPLICATION attribute.
    let role = format!("relay_norep_{}", std::process::id());
    db.client
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN PASSWORD 'pw';
             GRANT ALL ON ALL TABLES IN SCHEMA public TO {role};"
        ))
        .await
        .unwrap();
    let slot = format!("{}_c", db.name);
    let config = relay::config(&services, &db.name, &prefix, &slot, "");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        &format!("user = \"{}\"", services.pg_user),
        &format!("user = \"{role}\""),
    );
    std::fs::write(&config, text).unwrap();
    let out = run(&config, &[("OUTBOX_TEST_PG_PASSWORD", "pw")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("PG_PERMISSION_DENIED"), "{stderr}");
    assert!(!slot_exists(slot).await);
    db.client
        .batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role};"))
        .await
        .unwrap();
    db.drop(&services).await;
}

#[tokio::test]
async fn schema_drift_stops_the_relay_before_the_drifted_rows_and_compatible_changes_stream_on() {
    let services = require_services!();
    let prefix = common::unique_prefix("drift");
    let db = common::cdc_db(&services, "drift", &prefix).await;
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    let mut relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    let topic = format!("{prefix}orders");
    let insert = |id: &str| {
        format!(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, tenant)
             VALUES ('{id}', 'orders', 'T', 1, 'x', '\\x01', 'acme')"
        )
    };

    // Compatible changes: an added column, text to varchar(n).
    db.client
        .batch_execute(&format!(
            "{};
             ALTER TABLE public.messaging_outbox ADD COLUMN note text DEFAULT 'n';
             ALTER TABLE public.messaging_outbox ALTER COLUMN tenant TYPE varchar(64);
             {};",
            insert("00000000-0000-4000-8000-0000000000c1"),
            insert("00000000-0000-4000-8000-0000000000c2")
        ))
        .await
        .unwrap();
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        2,
        Duration::from_secs(60),
    );
    assert_eq!(kafka::by_id(&records).len(), 2, "both rows streamed");
    let after = records
        .iter()
        .find(|r| r.id() == "00000000-0000-4000-8000-0000000000c2")
        .unwrap();
    assert_eq!(after.header("msg.tenant"), Some(&b"acme"[..]));
    let settled = rep::current_lsn(&db.client).await;
    rep::wait_confirmed(&db.client, &slot, |l| l >= settled, Duration::from_secs(30)).await;

    // A contract column dropped: the relay stops, naming it, before the row.
    db.client
        .batch_execute(&format!(
            "ALTER TABLE public.messaging_outbox DROP COLUMN baggage; {};",
            insert("00000000-0000-4000-8000-0000000000c3")
        ))
        .await
        .unwrap();
    let committed = rep::current_lsn(&db.client).await;
    let status = tokio::task::spawn_blocking(move || {
        let status = relay.wait(Duration::from_secs(60));
        (status, relay)
    })
    .await
    .unwrap();
    relay = status.1;
    let log = relay.log_text();
    assert!(
        status.0.is_some_and(|s| !s.success()),
        "the relay stops: {log}"
    );
    let error = log
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_default();
    assert!(
        error.starts_with("error: OUTBOX_SCHEMA_DRIFT")
            && error.contains("column baggage is missing"),
        "{log}"
    );
    let confirmed = rep::confirmed_flush(&db.client, &slot).await;
    assert!(
        confirmed < committed,
        "the slot stays before the drifted row: {confirmed} vs {committed}"
    );
    let records = kafka::consume(
        &services.kafka_bootstrap,
        &[&topic],
        3,
        Duration::from_secs(3),
    );
    assert!(
        records
            .iter()
            .all(|r| r.id() != "00000000-0000-4000-8000-0000000000c3"),
        "nothing of the drifted row was published"
    );
    let pending: String = db
        .client
        .query_one(
            "SELECT status FROM public.messaging_outbox WHERE message_id = '00000000-0000-4000-8000-0000000000c3'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        pending, "PENDING",
        "the row waits for the operator, not FAILED"
    );

    // `check` says the same through the catalog comparison.
    let cfg = outbox_cdc::config::Config::load(&config, &common::env).unwrap();
    let report = outbox_cdc::ops::preflight::report(&cfg, &common::env).await;
    let drift = report
        .findings
        .iter()
        .find(|f| f.code.is_some_and(|c| c == "OUTBOX_SCHEMA_DRIFT"))
        .unwrap_or_else(|| panic!("{:?}", report.codes()));
    assert!(drift.detail.contains("baggage"), "{}", drift.detail);
    finish(&services, db, &slot, relay).await;
}

#[tokio::test]
async fn failed_journal_writes_are_retried_a_stop_reports_what_it_could_not_write_and_a_refusal_stops_the_relay(
) {
    let services = require_services!();
    let prefix = common::unique_prefix("marks");
    let db = common::cdc_db(&services, "marks", &prefix).await;
    // A gate that makes every write to the published journal fail while it
    // is closed, with the SQLSTATE it holds: a serialization failure
    // (40001) passes and is tried again; a plain exception (P0001) would
    // not pass, and stops the relay.
    db.client
        .batch_execute(
            "CREATE TABLE public.mark_gate (closed text);
             INSERT INTO public.mark_gate VALUES ('40001');
             CREATE FUNCTION public.refuse_marks() RETURNS trigger LANGUAGE plpgsql AS $$
             DECLARE state text := (SELECT closed FROM public.mark_gate);
             BEGIN
               IF state IS NOT NULL THEN
                 RAISE EXCEPTION USING ERRCODE = state, MESSAGE = 'the journal is closed for this test';
               END IF;
               RETURN NEW;
             END $$;
             CREATE TRIGGER refuse_marks BEFORE INSERT ON public.outbox_cdc_published
               FOR EACH ROW EXECUTE FUNCTION public.refuse_marks();",
        )
        .await
        .unwrap();
    let slot = format!("{}_relay", db.name);
    let config = relay::config(&services, &db.name, &prefix, &slot, "");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("drain_timeout_secs = 20", "drain_timeout_secs = 3");
    std::fs::write(&config, text).unwrap();
    let relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    let write = |n: i64, from: i64| {
        format!(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload)
             SELECT md5('mark' || g)::uuid, 'orders', 'T', 1, 'x', '\\x01' FROM generate_series({from}, {}) g",
            from + n - 1
        )
    };
    db.client.batch_execute(&write(50, 1)).await.unwrap();
    let topic = format!("{prefix}orders");
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        50,
        Duration::from_secs(60),
    );
    assert_eq!(kafka::by_id(&records).len(), 50);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !relay
        .log_text()
        .contains("could not record published rows; retrying")
    {
        assert!(std::time::Instant::now() < deadline, "{}", relay.log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(common::rows_with_status(&db.client, "PUBLISHED").await, 0);

    // The gate opens: the retried marks land, nothing was dropped.
    db.client
        .batch_execute("UPDATE public.mark_gate SET closed = NULL")
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while common::rows_with_status(&db.client, "PUBLISHED").await < 50 {
        assert!(std::time::Instant::now() < deadline, "{}", relay.log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Closed again, then a stop: what cannot be written is counted in the log.
    db.client
        .batch_execute("UPDATE public.mark_gate SET closed = '40001'")
        .await
        .unwrap();
    db.client.batch_execute(&write(10, 51)).await.unwrap();
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        60,
        Duration::from_secs(60),
    );
    assert_eq!(kafka::by_id(&records).len(), 60);
    relay.signal("TERM");
    let (status, relay) = tokio::task::spawn_blocking(move || {
        let mut relay = relay;
        (relay.wait(Duration::from_secs(60)), relay)
    })
    .await
    .unwrap();
    assert!(status.is_some_and(|s| s.success()), "{}", relay.log_text());
    let log = relay.log_text();
    let gave_up = log
        .lines()
        .find(|l| l.contains("stopped with published rows not recorded"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(gave_up.contains("rows=10"), "{gave_up}");
    assert_eq!(common::rows_with_status(&db.client, "PENDING").await, 10);
    drop(relay);

    // The slot stayed before their transaction: once the database takes
    // marks again, the next start publishes those 10 rows again (and only
    // them) and marks them.
    db.client
        .batch_execute("UPDATE public.mark_gate SET closed = NULL")
        .await
        .unwrap();
    let relay = RelayProcess::spawn(&config);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while common::rows_with_status(&db.client, "PENDING").await > 0 {
        assert!(std::time::Instant::now() < deadline, "{}", relay.log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(common::rows_with_status(&db.client, "PUBLISHED").await, 60);
    let records = kafka::consume(
        &services.kafka_bootstrap,
        &[&topic],
        70,
        Duration::from_secs(30),
    );
    let again: std::collections::BTreeSet<String> = kafka::by_id(&records)
        .into_iter()
        .filter(|(_, copies)| copies.len() > 1)
        .map(|(id, _)| id)
        .collect();
    let last_ten: std::collections::BTreeSet<String> = common::texts(
        &db.client,
        "SELECT md5('mark' || g)::uuid::text FROM generate_series(51, 60) g",
    )
    .await
    .into_iter()
    .collect();
    assert_eq!(records.len(), 70);
    assert_eq!(again, last_ten);

    // A write the server refuses for a reason that does not pass: the
    // relay does not try again but stops with the code (exit status 1),
    // the slot before the row, which stays PENDING.
    db.client
        .batch_execute("UPDATE public.mark_gate SET closed = 'P0001'")
        .await
        .unwrap();
    db.client.batch_execute(&write(1, 61)).await.unwrap();
    let (status, relay) = tokio::task::spawn_blocking(move || {
        let mut relay = relay;
        (relay.wait(Duration::from_secs(60)), relay)
    })
    .await
    .unwrap();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(1),
        "{}",
        relay.log_text()
    );
    let log = relay.log_text();
    assert!(
        log.contains("cannot record published rows, and trying again would not help"),
        "{log}"
    );
    assert!(log.contains("ROW_MARKING_FAILED"), "{log}");
    assert_eq!(
        log.matches("could not record published rows; retrying")
            .count(),
        0,
        "the refusal was not tried again: {log}"
    );
    assert_eq!(common::rows_with_status(&db.client, "PENDING").await, 1);
    finish(&services, db, &slot, relay).await;
}
