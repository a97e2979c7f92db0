//! The relay through the secured listener: TLS with the test CA,
//! SASL/SCRAM-SHA-512, and ACLs that grant its principal only what the
//! README lists.

use std::path::PathBuf;
use std::time::Duration;

use crate::common::{self, kafka, relay::RelayProcess, replication as rep, Secured, Services};
use crate::debezium::Comparable;

/// What the relay presents on the secured listener: the file its password
/// is read from, and the CA it trusts.
#[derive(Clone, Copy)]
struct Credentials<'a> {
    password_file: &'a str,
    ca: &'a str,
}

impl<'a> Credentials<'a> {
    /// The listener's own.
    fn of(sec: &'a Secured) -> Credentials<'a> {
        Credentials {
            password_file: &sec.password_file,
            ca: &sec.ca,
        }
    }
}

/// A relay configuration for `db` over the secured listener.
fn secured_config(
    s: &Services,
    sec: &Secured,
    db: &str,
    prefix: &str,
    credentials: Credentials<'_>,
) -> PathBuf {
    let head = common::config_head(
        (&s.pg_host, s.pg_port, &s.pg_user),
        db,
        Some(&format!("{db}_relay")),
        prefix,
        "unused",
    );
    let head = &head[..head.find("[kafka]").unwrap()];
    let text = format!(
        "{head}{}\n[relay]\ndrain_timeout_secs = 20\ncreate_slot = true\n",
        sec.kafka_tables(credentials.password_file, credentials.ca)
    );
    let dir = std::env::temp_dir().join(format!("outbox-cdc-secured-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{db}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// The same rows in any database: fixed ids, keys, times and headers.
const ROWS: &str = "
INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload,
    created_at, partition_key, tenant, correlation_id, traceparent)
SELECT md5('secured' || g)::uuid, 'orders', 'OrderPlaced', g, 'application/json',
       convert_to('{\"n\":' || g || '}', 'UTF8'), timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second',
       CASE WHEN g % 3 = 0 THEN NULL ELSE 'customer-' || (g % 17) END, 'acme', 'corr-' || g,
       '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'
FROM generate_series(1, 300) g";

/// Topic without prefix, partition, key, value, headers, by message id.
fn comparable(
    records: &[kafka::Consumed],
    prefix: &str,
) -> std::collections::BTreeMap<String, Comparable> {
    records
        .iter()
        .map(|r| (r.id(), crate::debezium::comparable(r, prefix)))
        .collect()
}

#[tokio::test]
async fn over_sasl_ssl_the_relay_publishes_the_records_it_publishes_in_plain() {
    let services = require_services!();
    let sec = Secured::from_env();
    let plain_prefix = common::unique_prefix("plain");
    let secure_prefix = format!("{}{}", sec.prefix, common::unique_prefix("r"));
    let plain = common::migrated_db(&services, "secplain", &plain_prefix).await;
    let secure = common::migrated_db(&services, "secured", &secure_prefix).await;
    for (db, prefix) in [(&plain, &plain_prefix), (&secure, &secure_prefix)] {
        db.declare_cdc().await;
        kafka::create_topic(&services.kafka_bootstrap, &format!("{prefix}orders"), 6).await;
    }
    let (_, plain_config) = common::relay::default_config(&services, &plain.name, &plain_prefix);
    let secure_config = secured_config(
        &services,
        &sec,
        &secure.name,
        &secure_prefix,
        Credentials::of(&sec),
    );
    let plain_relay = RelayProcess::spawn(&plain_config);
    let secure_relay = RelayProcess::spawn(&secure_config);
    rep::wait_streaming(&plain.client, &format!("{}_relay", plain.name)).await;
    rep::wait_streaming(&secure.client, &format!("{}_relay", secure.name)).await;
    plain.client.batch_execute(ROWS).await.unwrap();
    secure.client.batch_execute(ROWS).await.unwrap();

    let topics = [
        format!("{plain_prefix}orders"),
        format!("{secure_prefix}orders"),
    ];
    let read = |topic: &str| {
        kafka::consume_ids(
            &services.kafka_bootstrap,
            &[topic],
            300,
            Duration::from_secs(60),
        )
    };
    let over_plain = comparable(&read(&topics[0]), &plain_prefix);
    let over_tls = comparable(&read(&topics[1]), &secure_prefix);
    assert_eq!(over_plain.len(), 300, "{}", plain_relay.log_text());
    assert_eq!(over_tls.len(), 300, "{}", secure_relay.log_text());
    assert!(
        over_plain == over_tls,
        "the records differ between the listeners"
    );

    for (db, relay) in [(plain, plain_relay), (secure, secure_relay)] {
        drop(relay);
        rep::drop_slot(&db.client, &format!("{}_relay", db.name)).await;
        db.drop(&services).await;
    }
}

#[tokio::test]
async fn a_wrong_password_or_ca_ends_start_up_with_its_code_before_the_slot() {
    let services = require_services!();
    let sec = Secured::from_env();
    let prefix = format!("{}{}", sec.prefix, common::unique_prefix("bad"));
    let db = common::migrated_db(&services, "secbad", &prefix).await;
    db.declare_cdc().await;
    let dir = std::env::temp_dir().join(format!("outbox-cdc-secured-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let wrong_password = dir.join("wrong-password");
    std::fs::write(&wrong_password, "not-the-password\n").unwrap();
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let other_ca = dir.join("other-ca.pem");
    std::fs::write(&other_ca, other.cert.pem()).unwrap();

    for (password, ca, code) in [
        (
            wrong_password.display().to_string(),
            sec.ca.clone(),
            "KAFKA_AUTH_FAILED",
        ),
        (
            sec.password_file.clone(),
            other_ca.display().to_string(),
            "KAFKA_TLS_FAILED",
        ),
    ] {
        let config = secured_config(
            &services,
            &sec,
            &db.name,
            &prefix,
            Credentials {
                password_file: &password,
                ca: &ca,
            },
        );
        let out = std::process::Command::new(crate::common::cli::bin())
            .args(["run", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!("error: {code}: ")),
            "{code}: {stderr}"
        );
        let slots: i64 = db
            .client
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1",
                &[&format!("{}_relay", db.name)],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(slots, 0, "{code}: the slot was not touched");
    }
    db.drop(&services).await;
}

/// Kafka's AclCommand as the harness's super user.
fn acl(args: &[&str]) {
    let script = std::env::var("OUTBOX_TEST_SERVICES").expect("OUTBOX_TEST_SERVICES");
    let out = std::process::Command::new("bash")
        .arg(script)
        .arg("kafka-acl")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kafka-acl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn a_missing_write_acl_holds_the_stream_and_fails_no_row_until_it_is_granted() {
    let services = require_services!();
    let sec = Secured::from_env();
    let prefix = format!("{}{}", sec.prefix, common::unique_prefix("acl"));
    let db = common::migrated_db(&services, "secacl", &prefix).await;
    db.declare_cdc().await;
    let (allowed, forbidden) = (format!("{prefix}orders"), format!("{prefix}forbidden"));
    kafka::create_topic(&services.kafka_bootstrap, &allowed, 3).await;
    kafka::create_topic(&services.kafka_bootstrap, &forbidden, 3).await;
    let deny = [
        "--deny-principal",
        &format!("User:{}", sec.user),
        "--operation",
        "Write",
        "--topic",
        &forbidden,
    ];
    acl(&[&["--add"][..], &deny[..]].concat());

    let config = secured_config(&services, &sec, &db.name, &prefix, Credentials::of(&sec));
    let relay = RelayProcess::spawn(&config);
    let slot = format!("{}_relay", db.name);
    rep::wait_streaming(&db.client, &slot).await;
    let insert = |destination: &str, from: i32, n: i32| {
        format!(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key)
             SELECT md5('acl' || g)::uuid, '{destination}', 'T', g, 'x', '\\x01', 'k' || (g % 3)
             FROM generate_series({from}, {}) g",
            from + n - 1
        )
    };
    db.client
        .batch_execute(&insert("orders", 1, 5))
        .await
        .unwrap();
    db.client
        .batch_execute(&insert("forbidden", 6, 1))
        .await
        .unwrap();
    let held_from = rep::current_lsn(&db.client).await;
    db.client
        .batch_execute(&insert("orders", 7, 5))
        .await
        .unwrap();

    // The relay stops at the refusal, says which topic, and fails no row.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let log = relay.log_text();
        if log.lines().any(|l| {
            l.contains("not ready: an operator must act")
                && l.contains("TOPIC_AUTHORIZATION_FAILED")
                && l.contains(&forbidden)
        }) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{log}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(common::rows_with_status(&db.client, "FAILED").await, 0);
    // `check`, as the relay's principal, names the missing permission.
    let check = std::process::Command::new(crate::common::cli::bin())
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&check.stdout);
    assert!(
        report
            .lines()
            .any(|l| l.contains("TOPIC_AUTHORIZATION_FAILED")
                && l.contains(&format!("may not WRITE topic {forbidden}"))),
        "{report}"
    );
    assert!(
        !report.contains(&format!("may not WRITE topic {allowed}")),
        "{report}"
    );
    let confirmed = rep::confirmed_flush(&db.client, &slot).await;
    assert!(
        confirmed <= held_from,
        "the slot waits before the held row: {confirmed} vs {held_from}"
    );

    // Granted: every held row goes out, still none FAILED.
    acl(&[&["--remove", "--force"][..], &deny[..]].concat());
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while common::rows_with_status(&db.client, "PUBLISHED").await < 11 {
        assert!(std::time::Instant::now() < deadline, "{}", relay.log_text());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(common::rows_with_status(&db.client, "FAILED").await, 0);
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&allowed, &forbidden],
        11,
        Duration::from_secs(30),
    );
    assert_eq!(kafka::by_id(&records).len(), 11);
    drop(relay);
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

#[tokio::test]
async fn no_password_or_scram_material_escapes_at_the_most_verbose_log_level() {
    let services = require_services!();
    let sec = Secured::from_env();
    let prefix = format!("{}{}", sec.prefix, common::unique_prefix("leak"));
    let db = common::migrated_db(&services, "secleak", &prefix).await;
    db.declare_cdc().await;
    kafka::create_topic(&services.kafka_bootstrap, &format!("{prefix}orders"), 3).await;
    let config = secured_config(&services, &sec, &db.name, &prefix, Credentials::of(&sec));
    // librdkafka's every debug context on top of the relay's trace level.
    let mut text = std::fs::read_to_string(&config).unwrap();
    text = text.replace(
        "\"message.timeout.ms\" = \"120000\"",
        "\"message.timeout.ms\" = \"120000\"\n\"debug\" = \"all\"",
    );
    std::fs::write(&config, &text).unwrap();
    let kafka_password = std::fs::read_to_string(&sec.password_file).unwrap();
    let secrets = [
        kafka_password.trim().to_string(),
        services.pg_password.clone(),
    ];
    let dir = config.with_extension("out");
    std::fs::create_dir_all(&dir).unwrap();
    let run = |args: &[&str], name: &str| {
        let out = std::process::Command::new(crate::common::cli::bin())
            .args(args)
            .arg("--config")
            .arg(&config)
            .env("OUTBOX_CDC_LOG", "trace")
            .output()
            .unwrap();
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(dir.join(name), &all).unwrap();
        all
    };

    let log_path = dir.join("run.log");
    let mut relay = std::process::Command::new(crate::common::cli::bin())
        .args(["run", "--config"])
        .arg(&config)
        .env("OUTBOX_CDC_LOG", "trace")
        .stdout(std::fs::File::create(dir.join("run.out")).unwrap())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let slot = format!("{}_relay", db.name);
    rep::wait_streaming(&db.client, &slot).await;
    db.client.batch_execute(ROWS).await.unwrap();
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&format!("{prefix}orders")],
        300,
        Duration::from_secs(60),
    );
    assert_eq!(kafka::by_id(&records).len(), 300);
    std::process::Command::new("kill")
        .args(["-TERM", &relay.id().to_string()])
        .status()
        .unwrap();
    let status = tokio::task::spawn_blocking(move || relay.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());

    let mut outputs = vec![
        (
            "run",
            std::fs::read_to_string(&log_path).unwrap()
                + &std::fs::read_to_string(dir.join("run.out")).unwrap(),
        ),
        (
            "check --format json",
            run(&["check", "--format", "json"], "check.json"),
        ),
        (
            "connector-config",
            run(&["connector-config"], "connector.properties"),
        ),
        (
            "connector-config --format json",
            run(&["connector-config", "--format", "json"], "connector.json"),
        ),
    ];
    outputs.push((
        "migrate --print",
        run(&["migrate", "--print"], "migrate.sql"),
    ));
    assert!(
        outputs[0].1.contains(" TRACE "),
        "the relay logged at its most verbose"
    );
    for (what, out) in &outputs {
        for secret in &secrets {
            assert!(!out.contains(secret.as_str()), "{what} shows a password");
        }
        // SCRAM's client messages: the GS2 header, base64 of "n,," and "y,,".
        for scram in ["n,,n=", "c=biws", "c=eSws"] {
            assert!(
                !out.contains(scram),
                "{what} shows SCRAM material ({scram})"
            );
        }
    }
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}
