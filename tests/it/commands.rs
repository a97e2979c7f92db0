//! What people see from `tail` and `migrate`.

use crate::common;
use crate::common::cli::Cli;

use std::time::Duration;

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;

fn outbox_cdc(args: &[&str], config: &std::path::Path, log: Option<&str>) -> std::process::Output {
    Cli::new(args).config(config).log(log).output()
}

#[tokio::test]
async fn tail_shows_the_record_time_in_rfc3339_utc_with_its_type() {
    let services = require_services!();
    let prefix = common::unique_prefix("tail");
    let topic = format!("{prefix}orders");
    // The record's time is in 2024: with the broker's default retention its
    // segment may be deleted at the next retention check, before `tail`
    // reads it. This topic keeps what it is given.
    common::kafka::create_topic_with(
        &services.kafka_bootstrap,
        &topic,
        1,
        &[("retention.ms", "-1")],
    )
    .await;
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &services.kafka_bootstrap)
        .create()
        .unwrap();
    producer
        .send(
            BaseRecord::to(&topic)
                .key("k")
                .payload("v")
                .timestamp(1_714_979_290_500),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    producer.flush(Duration::from_secs(30)).unwrap();
    let db = services.fresh_db("tail").await;
    let (_, config) = common::relay::default_config(&services, &db.name, &prefix);
    let out = outbox_cdc(
        &["tail", "orders", "--from-beginning", "--max", "1"],
        &config,
        None,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("ts=2024-05-06T07:08:10.500Z (create time) key=\"k\""),
        "{stdout}"
    );
    db.drop(&services).await;
}

#[tokio::test]
async fn migrate_is_quiet_about_the_servers_notices_unless_asked() {
    let services = require_services!();
    let quiet = services.fresh_db("quiet").await;
    let (_, config) = common::relay::default_config(&services, &quiet.name, "quiet.");
    let out = outbox_cdc(&["migrate"], &config, None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("applied"), "{stderr}");
    assert!(!stderr.contains("does not exist, skipping"), "{stderr}");
    quiet.drop(&services).await;

    let asked = services.fresh_db("notices").await;
    let (_, config) = common::relay::default_config(&services, &asked.name, "notices.");
    let out = outbox_cdc(&["migrate"], &config, Some("info,tokio_postgres=info"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("does not exist, skipping"), "{stderr}");
    asked.drop(&services).await;
}

fn example() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("outbox-cdc.example.toml")
}

/// The command line's conventions, none of which needs a service: `-c`
/// before or after the command, values checked before anything connects,
/// a role folded as PostgreSQL folds it, and the fatal line in the log's
/// format.
#[test]
fn the_command_line_follows_its_conventions() {
    let config = example();
    let config = config.to_str().unwrap();
    let before = Cli::new(&["-c", config, "connector-config"]).output();
    let after = Cli::new(&["connector-config", "-c", config]).output();
    assert!(before.status.success(), "{}", common::cli::text(&before));
    assert_eq!(before.stdout, after.stdout);

    // The example's database is not running here: the value is refused
    // first, with the argument's code.
    let since = Cli::new(&["redrive", "-c", config, "--since", "yesterday"]).output();
    assert_eq!(
        since.status.code(),
        Some(2),
        "{}",
        common::cli::text(&since)
    );
    let stderr = String::from_utf8_lossy(&since.stderr);
    assert!(
        stderr.starts_with("error: ARGUMENT_INVALID: --since: \"yesterday\""),
        "{stderr}"
    );

    let grants = Cli::new(&["migrate", "-c", config, "--print-grants", "SomeRole"]).output();
    assert!(grants.status.success(), "{}", common::cli::text(&grants));
    assert!(String::from_utf8_lossy(&grants.stdout)
        .contains("ALTER ROLE somerole WITH LOGIN REPLICATION;"));

    let fatal = Cli::new(&[
        "--log-format",
        "json",
        "check",
        "-c",
        "/nonexistent/outbox-cdc.toml",
    ])
    .output();
    assert_eq!(fatal.status.code(), Some(2));
    let line = String::from_utf8_lossy(&fatal.stderr);
    let json: serde_json::Value = serde_json::from_str(line.trim())
        .unwrap_or_else(|e| panic!("{e}: the fatal line is not JSON: {line}"));
    assert_eq!(json["level"], "ERROR");
    assert_eq!(json["fields"]["code"], "CONFIG_UNREADABLE");
}

/// With nothing listening, the first line is the coded error naming the
/// address, with the likely fix; librdkafka's own lines stay at debug.
#[test]
fn an_unreachable_service_is_one_coded_line_with_a_hint() {
    let dir = std::env::temp_dir().join(format!("outbox-cdc-unreach-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let example = std::fs::read_to_string(example()).unwrap();
    let text = example
        .replace(
            "bootstrap_servers = \"127.0.0.1:9092\"",
            "bootstrap_servers = \"127.0.0.1:1\"",
        )
        .replace("port = 5432", "port = 1");
    assert!(
        text.contains("\"127.0.0.1:1\"") && text.contains("port = 1\n"),
        "the example changed shape"
    );
    let config = dir.join("outbox-cdc.toml");
    std::fs::write(&config, text).unwrap();
    for args in [&["run"][..], &["tail", "orders"][..]] {
        let out = Cli::new(args)
            .config(&config)
            .log(None)
            .env("OUTBOX_CDC_POSTGRES_PASSWORD", "x")
            .output();
        let stderr = String::from_utf8_lossy(&out.stderr);
        // `run` says once what it is and what it works on; then the error.
        let mut lines: Vec<&str> = stderr.lines().collect();
        if args[0] == "run" {
            let start = lines.remove(0);
            for said in [
                "outbox-cdc starting",
                "version=",
                "commit=",
                "slot=outbox_cdc_relay",
                "publication=",
                "brokers=127.0.0.1:1",
            ] {
                assert!(start.contains(said), "{said}: {start}");
            }
        }
        let first = lines.first().copied().unwrap_or_default();
        assert!(
            first.starts_with("error: KAFKA_UNREACHABLE: the Kafka cluster at 127.0.0.1:1:"),
            "{args:?}: {stderr}"
        );
        assert!(first.contains("Hint: is Kafka running there"), "{first}");
        assert_eq!(lines.len(), 1, "{args:?}: {stderr}");
        assert_eq!(out.status.code(), Some(75), "{args:?}: {stderr}");
    }
    let check = Cli::new(&["check"])
        .config(&config)
        .env("OUTBOX_CDC_POSTGRES_PASSWORD", "x")
        .output();
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert!(
        stdout.contains("Connection refused")
            && stdout.contains("Hint: nothing accepts connections there"),
        "{}",
        common::cli::text(&check)
    );
    // No configuration where the default looks for it.
    std::fs::remove_file(&config).unwrap();
    let mut missing = Cli::new(&["check"]).current_dir(&dir).command();
    missing.env_remove("OUTBOX_CDC_CONFIG");
    let missing = missing.output().unwrap();
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(missing.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("CONFIG_UNREADABLE: cannot read outbox-cdc.toml")
            && stderr.contains("Hint: name the configuration with -c FILE"),
        "{stderr}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// The shell's completion scripts and the manual page come from the
/// command line's own definition: every command is in them.
#[test]
fn completions_and_the_manual_page_know_every_command() {
    let bash = Cli::new(&["completions", "bash"]).output();
    assert!(bash.status.success(), "{}", common::cli::text(&bash));
    let bash = String::from_utf8_lossy(&bash.stdout);
    assert!(
        bash.contains("complete -F _outbox-cdc") || bash.contains("complete -F _outbox__cdc"),
        "{bash}"
    );
    let man = Cli::new(&["man"]).output();
    assert!(man.status.success(), "{}", common::cli::text(&man));
    let man = String::from_utf8_lossy(&man.stdout);
    assert!(
        man.starts_with(".ie") || man.contains(".TH outbox-cdc"),
        "{man}"
    );
    for command in [
        "run",
        "cutover",
        "check",
        "audit",
        "replay",
        "purge",
        "redrive",
        "connector-config",
        "completions",
    ] {
        assert!(bash.contains(command), "bash completion lacks {command}");
        assert!(
            man.contains(&format!(".SH \"OUTBOX-CDC {}\"", command.to_uppercase())),
            "the manual lacks {command}"
        );
    }
    let refused = Cli::new(&["completions", "tcsh"]).output();
    assert_eq!(refused.status.code(), Some(2));
}

/// `config validate` checks what it can without a network: a good file
/// passes, a secret it cannot resolve and a property librdkafka refuses
/// fail with their codes and the configuration's exit status.
#[test]
fn config_validate_checks_offline() {
    let config = example();
    let ok = Cli::new(&["config", "validate"])
        .config(&config)
        .env("OUTBOX_CDC_POSTGRES_PASSWORD", "x")
        .output();
    assert!(ok.status.success(), "{}", common::cli::text(&ok));
    assert!(String::from_utf8_lossy(&ok.stdout).ends_with(": valid\n"));

    let mut unset = Cli::new(&["config", "validate"]).config(&config).command();
    unset.env_remove("OUTBOX_CDC_POSTGRES_PASSWORD");
    let unset = unset.output().unwrap();
    assert_eq!(unset.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unset.stderr).contains("CONFIG_SECRET_UNAVAILABLE"));

    let dir = std::env::temp_dir().join(format!("outbox-cdc-validate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "[kafka.properties]\n",
        "[kafka.properties]\n\"linger.msss\" = \"5\"\n",
    );
    assert!(text.contains("linger.msss"), "the example changed shape");
    let bad = dir.join("outbox-cdc.toml");
    std::fs::write(&bad, text).unwrap();
    let refused = Cli::new(&["config", "validate"])
        .config(&bad)
        .env("OUTBOX_CDC_POSTGRES_PASSWORD", "x")
        .output();
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("CONFIG_INVALID_VALUE")
            && stderr.contains("No such configuration property: \"linger.msss\""),
        "{stderr}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// `config show` prints every effective value with its source, and no
/// secret: a password appears only as the reference that names it.
#[test]
fn config_show_marks_each_value_with_its_source() {
    let config = example();
    let out = Cli::new(&["config", "show"])
        .config(&config)
        .envs(&[
            ("OUTBOX_CDC_RELAY_MAX_IN_FLIGHT_MESSAGES", "20000"),
            ("OUTBOX_CDC_POSTGRES_PASSWORD", "hunter2-must-not-show"),
        ])
        .output();
    assert!(out.status.success(), "{}", common::cli::text(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        "max_in_flight_messages = 20000  # env OUTBOX_CDC_RELAY_MAX_IN_FLIGHT_MESSAGES",
        "dbname = \"app\"  # file",
        "sslrootcert = (not set)  # default",
        "# postgres.password = { env = \"OUTBOX_CDC_POSTGRES_PASSWORD\" }  # a reference",
    ] {
        assert!(text.lines().any(|l| l == line), "{line}:\n{text}");
    }
    assert!(!text.contains("hunter2"), "{text}");
    // Every section the file has is shown; transactional settings only
    // with transactional delivery.
    assert!(text.contains("[debezium.server]") && !text.contains("[relay.transactional]"));
}
