//! The generated Debezium configuration: equal to the committed files, pinned
//! by snapshots, and saying what the contract says (checked against literals
//! here, not against the definition that produced it).

use crate::common::cli::Cli;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use outbox_cdc::config::Config;
use outbox_cdc::connector::{render, Target};
use outbox_cdc::format::properties;

const REGENERATE: &str = "scripts/regenerate.sh";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub(crate) fn example() -> Config {
    // The example names its password variable; nothing is resolved here.
    Config::load(&root().join("outbox-cdc.example.toml"), &|_| None).unwrap()
}

fn committed(name: &str) -> String {
    std::fs::read_to_string(root().join("connector-config").join(name)).unwrap_or_default()
}

fn first_difference(a: &str, b: &str) -> String {
    for (i, (x, y)) in a.lines().zip(b.lines()).enumerate() {
        if x != y {
            return format!("line {}:\n  committed: {x}\n  generated: {y}", i + 1);
        }
    }
    format!(
        "committed has {} lines, generated has {}",
        a.lines().count(),
        b.lines().count()
    )
}

#[test]
fn the_committed_connector_configuration_is_up_to_date() {
    let cfg = example();
    for target in Target::ALL {
        let file = target.file_name();
        let generated = render(&cfg, target).unwrap();
        let on_disk = committed(file);
        assert!(
            generated == on_disk,
            "connector-config/{file} does not match the outbox definition; regenerate it with `{REGENERATE}` \
             and review the diff.\nFirst difference at {}",
            first_difference(&on_disk, &generated)
        );
    }
}

#[test]
fn snapshots_pin_the_generated_configuration() {
    let cfg = example();
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(root().join("snapshots"));
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| {
        insta::assert_snapshot!(
            "debezium_connector_properties",
            render(&cfg, Target::Connect).unwrap()
        );
        insta::assert_snapshot!(
            "debezium_connector_json",
            render(&cfg, Target::ConnectJson).unwrap()
        );
        insta::assert_snapshot!(
            "debezium_server_properties",
            render(&cfg, Target::DebeziumServer).unwrap()
        );
        insta::assert_snapshot!(
            "strimzi_kafkaconnector",
            render(&cfg, Target::Strimzi).unwrap()
        );
        insta::assert_snapshot!(
            "strimzi_kafkaconnect",
            render(&cfg, Target::StrimziConnect).unwrap()
        );
        // The debezium contract: Debezium's documented table and options.
        let mut dbz = cfg.clone();
        dbz.outbox.contract = "debezium".into();
        dbz.outbox.table = "outboxevent".into();
        insta::assert_snapshot!(
            "debezium_contract_connector_properties",
            render(&dbz, Target::Connect).unwrap()
        );
        insta::assert_snapshot!(
            "debezium_contract_server_properties",
            render(&dbz, Target::DebeziumServer).unwrap()
        );
        insta::assert_snapshot!(
            "debezium_contract_kafkaconnector",
            render(&dbz, Target::Strimzi).unwrap()
        );
    });
}

#[test]
fn the_debezium_contract_writes_the_routers_defaults_its_options_and_json_converters() {
    let mut cfg = example();
    cfg.outbox.contract = "debezium".into();
    let props = as_map(&render(&cfg, Target::Connect).unwrap());
    let get = |k: &str| props.get(k).map(String::as_str);
    assert_eq!(get("transforms.outbox.table.field.event.id"), Some("id"));
    assert_eq!(
        get("transforms.outbox.table.field.event.key"),
        Some("aggregateid")
    );
    assert_eq!(
        get("transforms.outbox.table.field.event.payload"),
        Some("payload")
    );
    assert_eq!(
        get("transforms.outbox.route.by.field"),
        Some("aggregatetype")
    );
    assert_eq!(
        get("transforms.outbox.route.topic.replacement"),
        Some("outbox.event.${routedByValue}")
    );
    assert_eq!(
        get("transforms.outbox.table.fields.additional.placement"),
        None
    );
    assert_eq!(
        get("key.converter"),
        Some("org.apache.kafka.connect.json.JsonConverter")
    );
    assert_eq!(get("key.converter.schemas.enable"), Some("false"));
    assert_eq!(
        get("value.converter"),
        Some("org.apache.kafka.connect.json.JsonConverter")
    );
    assert_eq!(get("value.converter.schemas.enable"), Some("false"));
    // The router sees updates and deletes, as it does by default.
    assert_eq!(get("skipped.operations"), Some("t"));

    cfg.outbox.router = [
        ("table.field.event.key", "order_id"),
        ("route.topic.regex", "(?<kind>[a-z]+)-(?<version>v[0-9]+)"),
        ("route.topic.replacement", "events.${kind}.${version}"),
        (
            "table.fields.additional.placement",
            "type:header:eventType,shard:partition",
        ),
        ("table.op.invalid.behavior", "fatal"),
        ("route.tombstone.on.empty.payload", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let props = as_map(&render(&cfg, Target::Connect).unwrap());
    let get = |k: &str| props.get(k).map(String::as_str);
    assert_eq!(
        get("transforms.outbox.table.field.event.key"),
        Some("order_id")
    );
    assert_eq!(
        get("transforms.outbox.route.topic.regex"),
        Some("(?<kind>[a-z]+)-(?<version>v[0-9]+)")
    );
    assert_eq!(
        get("transforms.outbox.route.topic.replacement"),
        Some("events.${kind}.${version}")
    );
    assert_eq!(
        get("transforms.outbox.table.fields.additional.placement"),
        Some("type:header:eventType,shard:partition:shard")
    );
    assert_eq!(
        get("transforms.outbox.table.op.invalid.behavior"),
        Some("fatal")
    );
    assert_eq!(
        get("transforms.outbox.route.tombstone.on.empty.payload"),
        Some("true")
    );

    // An option the router does not have is refused by name.
    cfg.outbox
        .router
        .insert("route.topic.replacment".into(), "x".into());
    let error = render(&cfg, Target::Connect).unwrap_err();
    assert_eq!(error.code(), "CONTRACT_OPTION_INVALID");
    assert!(
        error
            .detail()
            .contains("did you mean `route.topic.replacement`"),
        "{error}"
    );
}

fn as_map(text: &str) -> BTreeMap<String, String> {
    properties::parse(text).into_iter().collect()
}

#[test]
fn the_configuration_says_what_the_contract_says() {
    let props = as_map(&committed("outbox-cdc.properties"));
    let expect = [
        ("name", "outbox-cdc-debezium"),
        (
            "connector.class",
            "io.debezium.connector.postgresql.PostgresConnector",
        ),
        ("plugin.name", "pgoutput"),
        ("database.hostname", "127.0.0.1"),
        ("database.port", "5432"),
        ("database.user", "outbox_cdc"),
        ("database.dbname", "app"),
        ("database.password", "${env:OUTBOX_CDC_POSTGRES_PASSWORD}"),
        ("topic.prefix", "outbox-cdc"),
        ("slot.name", "outbox_cdc_debezium"),
        ("publication.name", "outbox_cdc_publication"),
        ("publication.autocreate.mode", "disabled"),
        ("table.include.list", "public.messaging_outbox"),
        ("snapshot.mode", "no_data"),
        ("tombstones.on.delete", "false"),
        ("extended.headers.enabled", "false"),
        ("binary.handling.mode", "bytes"),
        (
            "key.converter",
            "org.apache.kafka.connect.storage.StringConverter",
        ),
        (
            "value.converter",
            "io.debezium.converters.BinaryDataConverter",
        ),
        (
            "value.converter.delegate.converter.type",
            "org.apache.kafka.connect.json.JsonConverter",
        ),
        (
            "header.converter",
            "org.apache.kafka.connect.storage.SimpleHeaderConverter",
        ),
        ("transforms", "outbox"),
        (
            "transforms.outbox.type",
            "io.debezium.transforms.outbox.EventRouter",
        ),
        ("transforms.outbox.table.field.event.id", "message_id"),
        ("transforms.outbox.table.field.event.key", "routing_key"),
        ("transforms.outbox.table.field.event.payload", "payload"),
        ("transforms.outbox.route.by.field", "destination"),
        (
            "transforms.outbox.route.topic.replacement",
            "outbox.${routedByValue}",
        ),
        (
            "transforms.outbox.route.tombstone.on.empty.payload",
            "false",
        ),
        (
            "transforms.outbox.table.fields.additional.placement",
            "message_type:header:msg.type,message_version:header:msg.version,\
             content_type:header:msg.content-type,created_at:header:msg.created-at,\
             destination:header:msg.destination,producer:header:msg.producer,\
             occurred_at:header:msg.occurred-at,correlation_id:header:msg.correlation-id,\
             causation_id:header:msg.causation-id,tenant:header:msg.tenant,\
             partition_key:header:msg.partition-key,ordering_key:header:msg.ordering-key,\
             traceparent:header:traceparent,tracestate:header:tracestate,baggage:header:baggage",
        ),
    ];
    for (key, value) in expect {
        assert_eq!(props.get(key).map(String::as_str), Some(value), "{key}");
    }
    // Heartbeats keep an idle outbox from pinning WAL; the relay's slot is not Debezium's.
    let interval: u64 = props["heartbeat.interval.ms"].parse().unwrap();
    assert!(interval > 0 && interval <= 60_000, "{interval}");
    assert!(props["heartbeat.action.query"].contains("INSERT INTO public.outbox_cdc_heartbeat"));
    assert_ne!(props["slot.name"], "outbox_cdc_relay");
    assert!(!props
        .keys()
        .any(|k| k.contains("routing.key") || k.starts_with("transforms.router")));
}

#[test]
fn the_json_body_carries_the_same_configuration() {
    let json: serde_json::Value = serde_json::from_str(&committed("outbox-cdc.json")).unwrap();
    let mut props = as_map(&committed("outbox-cdc.properties"));
    assert_eq!(json["name"], "outbox-cdc-debezium");
    assert_eq!(props.remove("name").as_deref(), Some("outbox-cdc-debezium"));
    let config: BTreeMap<String, String> = json["config"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect();
    assert_eq!(config, props);
}

pub(crate) fn outbox_cdc(args: &[&str], envs: &[(&str, &str)]) -> std::process::Output {
    Cli::new(args).current_dir(&root()).envs(envs).output()
}

pub(crate) fn temp_dir(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("outbox-cdc-{label}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_command_writes_properties_by_default_and_json_on_request_without_the_secret() {
    let secret = "hunter2-must-not-leak";
    let envs = [("OUTBOX_CDC_POSTGRES_PASSWORD", secret)];
    let out = outbox_cdc(
        &["connector-config", "--config", "outbox-cdc.example.toml"],
        &envs,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout, committed("outbox-cdc.properties"));
    assert!(!stdout.contains(secret));

    let dir = temp_dir("cc");
    let file = dir.join("c.json");
    let out = outbox_cdc(
        &[
            "connector-config",
            "--config",
            "outbox-cdc.example.toml",
            "--format",
            "json",
            "--out",
            file.to_str().unwrap(),
        ],
        &envs,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written = std::fs::read_to_string(&file).unwrap();
    assert_eq!(written, committed("outbox-cdc.json"));
    assert!(!written.contains(secret));
    std::fs::remove_dir_all(dir).unwrap();
}

/// `connector-config --target debezium-server` for `config`, read back.
fn debezium_server_file(config: &Path) -> BTreeMap<String, String> {
    let out = outbox_cdc(
        &[
            "connector-config",
            "--config",
            config.to_str().unwrap(),
            "--target",
            "debezium-server",
        ],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    as_map(&String::from_utf8(out.stdout).unwrap())
}

fn write_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("outbox-cdc.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_file_provider_reference_is_written_for_a_password_file() {
    let dir = temp_dir("fileref");
    let example = std::fs::read_to_string(root().join("outbox-cdc.example.toml")).unwrap();
    let text = example.replace(
        "password = { env = \"OUTBOX_CDC_POSTGRES_PASSWORD\" }\nheartbeat_interval_ms",
        "password = { file = \"/etc/kafka/secrets/pg.properties\", key = \"password\" }\nheartbeat_interval_ms",
    );
    assert_ne!(text, example, "the example changed shape; update this test");
    let path = write_config(&dir, &text);
    let out = outbox_cdc(
        &["connector-config", "--config", path.to_str().unwrap()],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let props = as_map(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(
        props["database.password"],
        "${file:/etc/kafka/secrets/pg.properties:password}"
    );
    // Debezium Server names the file provider itself.
    let server = debezium_server_file(&path);
    assert_eq!(
        server["debezium.source.database.password"],
        "$${file:/etc/kafka/secrets/pg.properties:password}"
    );
    assert_eq!(server["debezium.source.config.providers"], "file");
    assert_eq!(
        server["debezium.source.config.providers.file.class"],
        "org.apache.kafka.common.config.provider.FileConfigProvider"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bad_configuration_fails_with_a_stable_code_and_names_the_key() {
    let dir = temp_dir("badcfg");
    let example = std::fs::read_to_string(root().join("outbox-cdc.example.toml")).unwrap();
    let cases = [
        (
            example.replace("schema = \"public\"", "schema = \"public\"\ntabel = \"x\""),
            "CONFIG_UNKNOWN_KEY",
            "outbox.tabel",
        ),
        (
            example.replace(
                "slot = \"outbox_cdc_debezium\"",
                "slot = \"outbox_cdc_relay\"",
            ),
            "CONFIG_INVALID_VALUE",
            "debezium.slot",
        ),
        (
            example.replace(
                "password = { env = \"OUTBOX_CDC_POSTGRES_PASSWORD\" }\n# disable",
                "password = \"literal\"\n# disable",
            ),
            "CONFIG_SECRET_IN_FILE",
            "postgres.password",
        ),
        (
            "[postgres\n".to_string(),
            "CONFIG_SYNTAX",
            "outbox-cdc.toml",
        ),
    ];
    for (text, code, key) in cases {
        assert_ne!(
            text, example,
            "{code}: the example changed shape; update this test"
        );
        let path = write_config(&dir, &text);
        let out = outbox_cdc(
            &["connector-config", "--config", path.to_str().unwrap()],
            &[],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{code}: {stderr}");
        assert!(stderr.contains(code), "{code}: {stderr}");
        assert!(stderr.contains(key), "{key}: {stderr}");
        assert!(out.stdout.is_empty());
    }
    let out = outbox_cdc(
        &[
            "connector-config",
            "--config",
            "/nonexistent/outbox-cdc.toml",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("CONFIG_UNREADABLE"));
    std::fs::remove_dir_all(dir).unwrap();
}

/// Debezium Server's file is Kafka Connect's configuration, moved under
/// Server's prefixes: nothing added to the connector, nothing lost.
#[test]
fn the_debezium_server_file_is_the_connect_configuration_under_servers_prefixes() {
    let server_text = committed("outbox-cdc.debezium-server.properties");
    let server = as_map(&server_text);
    let connect = as_map(&committed("outbox-cdc.properties"));
    // MicroProfile Config would expand ${...}; the file escapes it as $${...}.
    let unescape = |v: &str| v.replace("$${", "${");
    assert_eq!(
        server["debezium.source.database.password"],
        "$${env:OUTBOX_CDC_POSTGRES_PASSWORD}"
    );
    assert_eq!(
        server["debezium.transforms.outbox.route.topic.replacement"],
        "outbox.$${routedByValue}"
    );
    let converters = [
        ("key", "org.apache.kafka.connect.storage.StringConverter"),
        ("value", "io.debezium.converters.BinaryDataConverter"),
        (
            "header",
            "org.apache.kafka.connect.storage.SimpleHeaderConverter",
        ),
    ];
    for (role, class) in converters {
        assert_eq!(server[&format!("debezium.format.{role}")], "clientprovided");
        assert_eq!(server[&format!("debezium.format.{role}.class")], class);
    }
    for (k, v) in &connect {
        let moved = if k == "name" || k == "tasks.max" {
            continue;
        } else if let Some(setting) = k.strip_prefix("value.converter.") {
            format!("debezium.format.value.{setting}")
        } else if k.ends_with(".converter") {
            assert_eq!(
                server[&format!("debezium.format.{}.class", k.trim_end_matches(".converter"))],
                *v
            );
            continue;
        } else if k.starts_with("transforms") {
            format!("debezium.{k}")
        } else {
            format!("debezium.source.{k}")
        };
        assert_eq!(
            server.get(&moved).map(|s| unescape(s)).as_deref(),
            Some(v.as_str()),
            "{k} as {moved}"
        );
    }
    for (k, v) in [
        ("debezium.sink.type", "kafka"),
        (
            "debezium.sink.kafka.producer.key.serializer",
            "org.apache.kafka.common.serialization.ByteArraySerializer",
        ),
        (
            "debezium.sink.kafka.producer.value.serializer",
            "org.apache.kafka.common.serialization.ByteArraySerializer",
        ),
        ("debezium.sink.kafka.producer.enable.idempotence", "true"),
        ("debezium.sink.kafka.producer.acks", "all"),
        ("debezium.source.config.providers", "env"),
        (
            "debezium.source.config.providers.env.class",
            "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
        ),
        (
            "debezium.source.offset.storage",
            "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        ),
        (
            "debezium.source.offset.storage.file.filename",
            "data/offsets.dat",
        ),
    ] {
        assert_eq!(server.get(k).map(String::as_str), Some(v), "{k}");
    }
    // Server names the engine after the sink and runs one task.
    assert!(!server.contains_key("debezium.source.name"));
    assert!(!server.contains_key("debezium.source.tasks.max"));
    // Every key is Server's; no value has an unescaped expression.
    for (k, v) in &server {
        assert!(k.starts_with("debezium."), "{k}");
        assert!(!v.replace("$${", "").contains("${"), "{k}={v}");
    }
}

#[test]
fn debezium_server_offsets_can_live_in_a_kafka_topic() {
    let dir = temp_dir("server-kafka");
    let example = std::fs::read_to_string(root().join("outbox-cdc.example.toml")).unwrap();
    let text = example.replace(
        "offset_storage = \"file\"",
        "offset_storage = \"kafka\"\nbootstrap_servers = \"kafka-0.internal:9092\"",
    );
    assert_ne!(text, example, "the example changed shape; update this test");
    let path = write_config(&dir, &text);
    let props = debezium_server_file(&path);
    for (k, v) in [
        (
            "debezium.source.offset.storage",
            "org.apache.kafka.connect.storage.KafkaOffsetBackingStore",
        ),
        ("debezium.source.bootstrap.servers", "kafka-0.internal:9092"),
        (
            "debezium.source.offset.storage.topic",
            "outbox-cdc-debezium-offsets",
        ),
        ("debezium.source.offset.storage.partitions", "1"),
        ("debezium.source.offset.storage.replication.factor", "-1"),
        (
            "debezium.sink.kafka.producer.bootstrap.servers",
            "kafka-0.internal:9092",
        ),
    ] {
        assert_eq!(props.get(k).map(String::as_str), Some(v), "{k}");
    }
    assert!(!props.contains_key("debezium.source.offset.storage.file.filename"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn every_target_is_written_without_the_secret_and_strimzi_connect_needs_an_image() {
    let secret = "hunter2-must-not-leak";
    let envs = [("OUTBOX_CDC_POSTGRES_PASSWORD", secret)];
    for (target, file) in [
        ("connect", "outbox-cdc.properties"),
        ("connect-json", "outbox-cdc.json"),
        ("debezium-server", "outbox-cdc.debezium-server.properties"),
        ("strimzi", "outbox-cdc.kafkaconnector.yaml"),
        ("strimzi-connect", "outbox-cdc.kafkaconnect.yaml"),
    ] {
        let out = outbox_cdc(
            &[
                "connector-config",
                "--config",
                "outbox-cdc.example.toml",
                "--target",
                target,
            ],
            &envs,
        );
        assert!(
            out.status.success(),
            "{target}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert_eq!(stdout, committed(file), "{target}");
        assert!(!stdout.contains(secret), "{target}");
    }

    let dir = temp_dir("noimage");
    let example = std::fs::read_to_string(root().join("outbox-cdc.example.toml")).unwrap();
    let text = example.replace("\nimage = ", "\n# image = ");
    assert_ne!(text, example, "the example changed shape; update this test");
    let path = write_config(&dir, &text);
    let out = outbox_cdc(
        &[
            "connector-config",
            "--config",
            path.to_str().unwrap(),
            "--target",
            "strimzi-connect",
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("CONFIG_MISSING_KEY"), "{stderr}");
    assert!(stderr.contains("debezium.strimzi.image"), "{stderr}");
    assert!(out.stdout.is_empty());
    std::fs::remove_dir_all(dir).unwrap();
}

/// The binary's side of the configuration's errors: a misspelt key is named
/// with the nearest one before anything else, and a variable that sets
/// nothing is a warning, not silence.
#[test]
fn a_misspelt_key_and_an_idle_variable_are_named() {
    let dir = temp_dir("typos");
    let example = std::fs::read_to_string(root().join("outbox-cdc.example.toml")).unwrap();
    let text = example.replace("dbname = ", "dbnme = ");
    assert_ne!(text, example, "the example changed shape; update this test");
    let path = write_config(&dir, &text);
    let out = outbox_cdc(
        &["connector-config", "--config", path.to_str().unwrap()],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "CONFIG_UNKNOWN_KEY: unknown key `postgres.dbnme`: did you mean `postgres.dbname`?"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("CONFIG_MISSING_KEY"), "{stderr}");

    let path = write_config(&dir, &example);
    let out = outbox_cdc(
        &["connector-config", "--config", path.to_str().unwrap()],
        &[("OUTBOX_CDC_POSTGRES_HOTS", "db.internal")],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("OUTBOX_CDC_POSTGRES_HOTS is ignored: no such setting; did you mean OUTBOX_CDC_POSTGRES_HOST?"),
        "{stderr}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}
