//! `check` names each misconfiguration with its code, from the database's
//! side and Kafka's.

use super::*;

async fn codes(cfg: &Config) -> (bool, Vec<&'static str>) {
    let report = outbox_cdc::ops::preflight::report(cfg, &common::env).await;
    (report.ok, report.codes())
}

#[tokio::test]
async fn check_reports_each_misconfiguration_with_its_code() {
    let services = require_services!();
    let prefix = common::unique_prefix("chk");
    let db = common::migrated_db(&services, "check", &prefix).await;
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    let cfg = Config::load(&config, &common::env).unwrap();

    // Undeclared, no slot.
    let (ok, c) = codes(&cfg).await;
    assert!(!ok);
    assert!(
        c.contains(&"NO_OUTBOX_RELAY") && c.contains(&"SLOT_MISSING"),
        "{c:?}"
    );
    // The test cluster keeps unlimited slot WAL: a warning, not an error.
    assert!(c.contains(&"UNLIMITED_SLOT_WAL"), "{c:?}");

    // Healthy: declared CDC and the relay streaming.
    db.declare_cdc().await;
    let relay = RelayProcess::spawn(&config);
    for _ in 0..100 {
        if slot_state(&db.client, &slot)
            .await
            .is_some_and(|s| s.ends_with("true"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let out = outbox_cdc(&["check"], &config);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = outbox_cdc(&["check", "--format", "json"], &config);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["ok"], true);
    assert!(json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["check"] == "relay_mode" && f["level"] == "ok"));
    drop(relay);
    tokio::time::sleep(Duration::from_millis(500)).await;

    // CDC but nothing streams.
    let (_, c) = codes(&cfg).await;
    assert!(c.contains(&"NO_OUTBOX_RELAY"), "{c:?}");
    let out = outbox_cdc(&["check"], &config);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("NO_OUTBOX_RELAY"));

    let each = [
        ("ALTER PUBLICATION outbox_cdc_publication SET (publish = 'insert, update')", "PUBLICATION_NOT_INSERT_ONLY", "ALTER PUBLICATION outbox_cdc_publication SET (publish = 'insert')"),
        ("ALTER PUBLICATION outbox_cdc_publication DROP TABLE public.messaging_outbox", "PUBLICATION_MISSING_TABLE", "ALTER PUBLICATION outbox_cdc_publication ADD TABLE public.messaging_outbox"),
        ("ALTER PUBLICATION outbox_cdc_publication RENAME TO elsewhere", "PUBLICATION_MISSING", "ALTER PUBLICATION elsewhere RENAME TO outbox_cdc_publication"),
        ("ALTER TABLE public.messaging_outbox DISABLE TRIGGER outbox_cdc_routing_key", "ROUTING_KEY_TRIGGER_MISSING", "ALTER TABLE public.messaging_outbox ENABLE TRIGGER outbox_cdc_routing_key"),
        ("ALTER TABLE public.messaging_outbox RENAME CONSTRAINT ck_outbox_tenant TO other_name", "CONSTRAINT_MISSING", "ALTER TABLE public.messaging_outbox RENAME CONSTRAINT other_name TO ck_outbox_tenant"),
        ("UPDATE public.outbox_relay_mode SET mode = 'POLLING'", "DUPLICATE_OUTBOX_RELAY", "UPDATE public.outbox_relay_mode SET mode = 'CHANGE_DATA_CAPTURE'"),
        (
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, status, lease_expires_at)
             VALUES (gen_random_uuid(), 'x', 'T', 1, 'x', '', 'IN_FLIGHT', now() + interval '1 hour')",
            "DUPLICATE_OUTBOX_RELAY",
            "DELETE FROM public.messaging_outbox",
        ),
    ];
    for (break_it, code, mend_it) in each {
        db.client.batch_execute(break_it).await.unwrap();
        let (ok, c) = codes(&cfg).await;
        assert!(!ok && c.contains(&code), "{code}: {c:?}");
        db.client.batch_execute(mend_it).await.unwrap();
    }
    // A constraint left NOT VALID is a warning.
    db.client
        .batch_execute(
            "ALTER TABLE public.messaging_outbox DROP CONSTRAINT ck_outbox_tenant;
             ALTER TABLE public.messaging_outbox ADD CONSTRAINT ck_outbox_tenant CHECK (tenant IS NULL OR tenant ~ '^[a-z0-9][a-z0-9._-]{0,63}$') NOT VALID;",
        )
        .await
        .unwrap();
    let (_, c) = codes(&cfg).await;
    assert!(c.contains(&"CONSTRAINT_NOT_VALIDATED"), "{c:?}");

    // A generated routing_key (the platform's old column).
    db.client
        .batch_execute(
            "ALTER TABLE public.messaging_outbox DISABLE TRIGGER outbox_cdc_routing_key;
             ALTER TABLE public.messaging_outbox DROP CONSTRAINT ck_outbox_routing_key;
             ALTER TABLE public.messaging_outbox DROP COLUMN routing_key;
             ALTER TABLE public.messaging_outbox ADD COLUMN routing_key text GENERATED ALWAYS AS (COALESCE(partition_key, message_id::text)) STORED;",
        )
        .await
        .unwrap();
    let (_, c) = codes(&cfg).await;
    assert!(c.contains(&"ROUTING_KEY_GENERATED"), "{c:?}");

    // Kafka unreachable.
    let mut unreachable = cfg.clone();
    unreachable.kafka.bootstrap_servers = "127.0.0.1:1".into();
    let (_, c) = codes(&unreachable).await;
    assert!(c.contains(&"KAFKA_UNREACHABLE"), "{c:?}");

    // A user without the REPLICATION attribute.
    let role = format!("relay_chk_{}", std::process::id());
    db.client
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN PASSWORD 'pw';
             GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role};"
        ))
        .await
        .unwrap();
    let mut unprivileged = cfg.clone();
    unprivileged.postgres.user = role.clone();
    let env = |name: &str| (name == "OUTBOX_TEST_PG_PASSWORD").then(|| "pw".to_string());
    let report = outbox_cdc::ops::preflight::report(&unprivileged, &env).await;
    // `check` logs in for replication as `run` does, so it reports what the
    // server says: the same code as `run`, with the fix.
    let refused = report
        .findings
        .iter()
        .find(|f| f.check == "replication_log_in")
        .unwrap();
    assert_eq!(
        refused.code.map(|c| c.as_str()),
        Some("PG_PERMISSION_DENIED")
    );
    assert!(
        refused
            .detail
            .contains(&format!("ALTER ROLE {role} REPLICATION")),
        "{}",
        refused.detail
    );
    // Managed services grant streaming through a role instead: both ways named.
    assert!(
        refused
            .detail
            .contains(&format!("GRANT rds_replication TO {role}")),
        "{}",
        refused.detail
    );
    // The server's version, and the features the relay can use on it.
    let version = report
        .findings
        .iter()
        .find(|f| f.check == "server_version")
        .unwrap();
    let major: u32 = std::env::var("OUTBOX_TEST_PG_MAJOR")
        .unwrap_or_else(|_| "15".into())
        .parse()
        .unwrap();
    let yes = |since: u32| if major >= since { "yes" } else { "no" };
    assert!(
        version.detail.starts_with(&format!("{major}.")),
        "{}",
        version.detail
    );
    assert!(
        version.detail.ends_with(&format!(
            "(failover slots: {}; stored generated columns published: {})",
            yes(17),
            yes(18)
        )),
        "{}",
        version.detail
    );
    db.client
        .batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role};"))
        .await
        .unwrap();

    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

/// Ports of a second, deliberately misconfigured PostgreSQL
/// (wal_level=replica) and Kafka (no topic auto-creation), one pair per
/// PostgreSQL major: the suite runs two majors side by side. Kafka takes
/// the port after it (its controller) and a few more (its other listeners).
fn misconfigured_ports() -> (u16, u16) {
    let major: u16 = std::env::var("OUTBOX_TEST_PG_MAJOR")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(15);
    let k = major.saturating_sub(14);
    (25339 + k, 29192 + 10 * k)
}

#[tokio::test]
async fn check_reports_wal_level_and_topics_that_cannot_be_created() {
    let services = require_services!();
    let (pg_port, kafka_port) = misconfigured_ports();
    let bad = tokio::task::spawn_blocking(move || {
        common::ExtraServices::start(
            "misconfigured",
            &[
                ("OUTBOX_TEST_PG_PORT", pg_port.to_string()),
                ("OUTBOX_TEST_KAFKA_PORT", kafka_port.to_string()),
                (
                    "OUTBOX_TEST_KAFKA_CONTROLLER_PORT",
                    (kafka_port + 1).to_string(),
                ),
                ("OUTBOX_TEST_PG_WAL_LEVEL", "replica".to_string()),
                ("OUTBOX_TEST_KAFKA_AUTO_CREATE", "false".to_string()),
            ],
            &["start-postgres", "start-kafka"],
        )
    })
    .await
    .unwrap();
    let other = common::Services {
        pg_port,
        kafka_bootstrap: format!("127.0.0.1:{kafka_port}"),
        ..services
    };
    let db = common::migrated_db(&other, "misconf", "bad.").await;
    db.declare_cdc().await;
    db.client
        .batch_execute(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload)
             VALUES (gen_random_uuid(), 'nowhere', 'T', 1, 'x', '')",
        )
        .await
        .unwrap();
    let slot = format!("{}_relay", db.name);
    let config = relay::config(&other, &db.name, "bad.", &slot, "");
    let cfg = Config::load(&config, &common::env).unwrap();
    let report = outbox_cdc::ops::preflight::report(&cfg, &common::env).await;
    let c = report.codes();
    assert!(!report.ok);
    assert!(c.contains(&"PG_WAL_LEVEL_NOT_LOGICAL"), "{c:?}");
    assert!(c.contains(&"TOPIC_MISSING"), "{c:?}");
    let missing = report
        .findings
        .iter()
        .find(|f| f.code.is_some_and(|c| c == "TOPIC_MISSING"))
        .unwrap();
    assert!(missing.detail.contains("bad.nowhere"), "{}", missing.detail);
    drop(db);
    tokio::task::spawn_blocking(move || drop(bad))
        .await
        .unwrap();
}
