//! One relay per outbox, beside a takeover: a second relay on another slot
//! refused, and a connector resumed beside the relay reported.

use super::*;

/// One relay per outbox after a takeover: the connector, resumed by
/// mistake beside the relay, makes a slot of its own again (the takeover
/// dropped Debezium's). `check` and `status` name it with
/// `SECOND_OUTBOX_READER`, the relay's gauge counts it, and the alert rule
/// fires on the series the relay exported (promtool).
#[tokio::test]
async fn a_connector_resumed_beside_the_relay_after_a_takeover_is_reported_and_alerted() {
    let services = require_services!();
    let label = "tk2";
    let db = documented_table(&services, label).await;
    let dir = std::env::temp_dir()
        .join("outbox-cdc-takeover")
        .join(format!("{}-{label}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("relay.toml");
    let connect_url = std::env::var("OUTBOX_TEST_CONNECT_URL").unwrap();
    let name = format!("{}-{label}", db.name);
    let dbz_slot = format!("{}_dbz", db.name);
    start_connector(
        &name,
        documented_connector(&services, &db.name, &name),
        &dbz_slot,
        &db.client,
    )
    .await;
    let cfg = imported(&services, &dir, &path, &name, &format!("{}_relay", db.name));
    let port = common::free_port();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        format!("{text}slot_check_interval_secs = 1\n\n[http]\nlisten = \"127.0.0.1:{port}\"\n"),
    )
    .unwrap();
    let out = common::cli::Cli::new(&["migrate"]).config(&path).output();
    assert!(out.status.success(), "{}", common::cli::text(&out));
    connect_call("PUT", &cfg, "stop");
    let deadline = Instant::now() + Duration::from_secs(60);
    while connector_state(&cfg) != "STOPPED" {
        assert!(Instant::now() < deadline, "the connector did not stop");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    slot_inactive(&db.client, &dbz_slot).await;
    cutover(&path, &["--to", "cdc", "--connect", &connect_url]);
    let declared: String = db
        .client
        .query_one(
            "SELECT slot || ' ' || role FROM public.outbox_cdc_relay WHERE outbox_table = 'public.outboxevent' AND role <> 'COPY'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(declared, format!("{} OUTBOX_CDC", cfg.postgres.slot));
    let mut relay = common::relay::RelayProcess::spawn(&path);
    crate::common::replication::wait_streaming(&db.client, &cfg.postgres.slot).await;
    let check = || common::cli::Cli::new(&["check"]).config(&path).output();
    let clean = check();
    assert!(
        !common::cli::text(&clean).contains("SECOND_OUTBOX_READER"),
        "{}",
        common::cli::text(&clean)
    );

    // The mistake: the connector resumed beside the relay.
    connect_call("PUT", &cfg, "resume");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !slot_streams(&db.client, &dbz_slot).await {
        assert!(
            Instant::now() < deadline,
            "Debezium did not stream: {:?}",
            task_failure(&cfg)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let found = check();
    let report = common::cli::text(&found);
    assert!(!found.status.success(), "{report}");
    let line = report
        .lines()
        .find(|l| l.contains("SECOND_OUTBOX_READER"))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(line.contains(&format!("slot {dbz_slot} (pid ")), "{line}");
    assert!(line.contains("outbox_cdc_publication"), "{line}");
    assert!(line.contains(&cfg.postgres.slot), "{line}");
    let status = common::cli::Cli::new(&["status"]).config(&path).output();
    let said = common::cli::text(&status);
    assert!(!status.status.success(), "{said}");
    assert!(
        said.contains(&format!("also streamed by: slot {dbz_slot}")),
        "{said}"
    );
    assert!(said.contains("SECOND_OUTBOX_READER"), "{said}");

    // The relay's gauge, as Prometheus would scrape it, every second.
    let started = Instant::now();
    let mut samples = Vec::new();
    while samples.len() < 4 || samples.last() != Some(&1.0) {
        let text = scrape(port);
        let value = text
            .lines()
            .find_map(|l| l.strip_prefix("outbox_cdc_other_readers "))
            .and_then(|v| v.trim().parse::<f64>().ok());
        samples.push(value.unwrap_or(0.0));
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the gauge never counted the connector: {samples:?}\n{}",
            relay.log_text()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let detected = started.elapsed();
    // The rule fires on the recorded series held for its `for` (1m):
    // the last sample repeated, one a minute, as Prometheus would see it.
    let series: Vec<String> = samples
        .iter()
        .chain(std::iter::repeat_n(samples.last().unwrap(), 3))
        .map(|v| v.to_string())
        .collect();
    let rules =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("monitoring/outbox-cdc.rules.yml");
    let fired_at = series.len() - 1;
    // The rule's annotations as the rules file writes them (YAML scalars),
    // its instance filled in.
    let rules_text = std::fs::read_to_string(&rules).unwrap();
    let rule = rules_text
        .split("- alert: ")
        .find(|r| r.starts_with("OutboxCdcSecondReader\n"))
        .unwrap();
    let annotation = |key: &str| {
        rule.lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{key}: ")))
            .unwrap()
            .replace("{{ $labels.instance }}", "relay")
    };
    let test = format!(
        "rule_files:\n  - {}\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n      - series: 'outbox_cdc_other_readers{{instance=\"relay\",job=\"outbox-cdc\"}}'\n        values: '{}'\n    alert_rule_test:\n      - eval_time: {fired_at}m\n        alertname: OutboxCdcSecondReader\n        exp_alerts:\n          - exp_labels:\n              severity: critical\n              instance: relay\n              job: outbox-cdc\n            exp_annotations:\n              summary: {}\n              description: {}\n              runbook_url: {}\n",
        rules.display(),
        series.join(" "),
        annotation("summary"),
        annotation("description"),
        annotation("runbook_url"),
    );
    let test_file = dir.join("second-reader.test.yml");
    std::fs::write(&test_file, test).unwrap();
    let promtool = common::prometheus::tool("OUTBOX_TEST_PROMTOOL");
    let ran = std::process::Command::new(promtool)
        .args(["test", "rules"])
        .arg(&test_file)
        .output()
        .unwrap();
    assert!(
        ran.status.success(),
        "promtool test rules: {}{}",
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr)
    );
    eprintln!(
        "second reader: check and status name it; the gauge counted it {} ms after Debezium streamed",
        detected.as_millis()
    );

    stop_debezium(&cfg);
    relay.signal("TERM");
    relay.wait(Duration::from_secs(30));
    slot_inactive(&db.client, &dbz_slot).await;
    crate::common::replication::drop_slot(&db.client, &dbz_slot).await;
    crate::common::replication::drop_slot(&db.client, &cfg.postgres.slot).await;
}

/// `/metrics` over plain HTTP/1.0.
fn scrape(port: u16) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = write!(s, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text
}

/// One relay per outbox, for a table that keeps no status too: a second
/// relay started by mistake on another slot (a second deployment) is
/// refused before it writes anything, with the slot that holds the outbox
/// and how `cutover` moves it, while the first streams with 0 lost.
#[tokio::test]
async fn a_second_relay_on_another_slot_is_refused_while_the_first_streams_without_loss() {
    let services = require_services!();
    let label = "one";
    let p = common::unique_prefix(label);
    let db = documented_table(&services, label).await;
    let aggregate = format!("{p}Order");
    let topic = format!("outbox.event.{aggregate}");
    kafka::create_topic(&services.kafka_bootstrap, &topic, 3).await;
    let first_slot = format!("{}_relay", db.name);
    let second_slot = format!("{}_second", db.name);
    let config = |slot: &str| {
        let path = common::relay::config(&services, &db.name, &p, slot, "");
        let text = std::fs::read_to_string(&path).unwrap().replacen(
            "[outbox]\n",
            "[outbox]\ntable = \"outboxevent\"\ncontract = \"debezium\"\n",
            1,
        );
        std::fs::write(&path, text).unwrap();
        path
    };
    let (first, second) = (config(&first_slot), config(&second_slot));
    let out = common::cli::Cli::new(&["migrate"]).config(&first).output();
    assert!(out.status.success(), "{}", common::cli::text(&out));
    let mut relay = common::relay::RelayProcess::spawn(&first);
    crate::common::replication::wait_streaming(&db.client, &first_slot).await;
    let load = Load::start(&services, &db.name, &aggregate).await;
    let held = async || -> String {
        db.client
            .query_one(
                "SELECT slot || ' ' || role || ' ' || system_identifier FROM public.outbox_cdc_relay WHERE role <> 'COPY'",
                &[],
            )
            .await
            .unwrap()
            .get(0)
    };
    let system: String = db
        .client
        .query_one(
            "SELECT system_identifier::text FROM pg_control_system()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // The first start claimed the undeclared outbox for its slot.
    assert_eq!(held().await, format!("{first_slot} OUTBOX_CDC {system}"));
    tokio::time::sleep(Duration::from_secs(2)).await;

    let out = common::cli::Cli::new(&["run"]).config(&second).output();
    let refusal = common::cli::text(&out);
    assert!(!out.status.success(), "{refusal}");
    assert!(refusal.contains("OUTBOX_HELD_BY_ANOTHER_SLOT"), "{refusal}");
    assert!(
        refusal.contains(&format!(
            "held by slot {first_slot} (outbox-cdc, declared by"
        )),
        "{refusal}"
    );
    assert!(
        refusal.contains(&format!("not by this relay's slot {second_slot}")),
        "{refusal}"
    );
    assert!(
        refusal.contains("`outbox-cdc cutover --to cdc`"),
        "{refusal}"
    );
    assert!(refusal.contains("relay.role = \"copy\""), "{refusal}");
    // Nothing was written: no slot, the declaration as it was.
    let made: i64 = db
        .client
        .query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1",
            &[&second_slot],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(made, 0);
    assert_eq!(held().await, format!("{first_slot} OUTBOX_CDC {system}"));
    let check = common::cli::Cli::new(&["check"]).config(&second).output();
    assert!(
        common::cli::text(&check).contains("OUTBOX_HELD_BY_ANOTHER_SLOT"),
        "{}",
        common::cli::text(&check)
    );

    tokio::time::sleep(Duration::from_secs(2)).await;
    let committed = load.stop().await;
    let got = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        committed.len(),
        Duration::from_secs(60),
    );
    let by_id = kafka::by_id(&got);
    let lost = committed
        .iter()
        .filter(|id| !by_id.contains_key(*id))
        .count();
    assert_eq!(
        lost,
        0,
        "{} of {} lost\n{}",
        lost,
        committed.len(),
        relay.log_text()
    );
    eprintln!(
        "second relay refused; the first published {} of {} committed rows, 0 lost",
        by_id.len(),
        committed.len()
    );
    relay.signal("TERM");
    assert!(relay
        .wait(Duration::from_secs(30))
        .is_some_and(|s| s.success()));
    crate::common::replication::drop_slot(&db.client, &first_slot).await;
}
