//! The configuration's loading, overrides, secrets and validation.

use super::*;

const MINIMAL: &str = r#"
[postgres]
dbname = "app"
user = "relay"

[outbox]

[kafka]
bootstrap_servers = "127.0.0.1:9092"
"#;

fn parse_with(text: &str, vars: &[(&str, &str)]) -> Result<Config, Error> {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::parse(text, Path::new("test.toml"), &move |name| {
        vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    })
}

#[test]
fn defaults_fill_what_the_file_leaves_out() {
    let c = parse_with(MINIMAL, &[]).unwrap();
    assert_eq!(c.postgres.host, "localhost");
    assert_eq!(c.postgres.port, Ports(vec![5432]));
    assert_eq!(c.postgres.sslmode, SslMode::Prefer);
    assert_eq!(c.postgres.slot, "outbox_cdc_relay");
    assert_eq!(c.debezium.slot, "outbox_cdc_debezium");
    assert_eq!(c.outbox.table, "messaging_outbox");
    assert_eq!(c.outbox.schema, "public");
    assert_eq!(c.qualified_table(), "public.messaging_outbox");
}

#[test]
fn delivery_is_idempotent_unless_chosen_and_the_transactional_id_names_the_relay() {
    let c = parse_with(MINIMAL, &[]).unwrap();
    assert_eq!(c.relay.delivery, DeliveryMode::Idempotent);
    assert!(matches!(c.relay.delivery(), Delivery::Idempotent));
    assert_eq!(c.transactional_id(), "outbox-cdc.app.outbox_cdc_relay");
    assert_eq!(c.producer_transactional_id(), None);
    let text = format!(
        "{MINIMAL}\n[relay]\ndelivery = \"transactional\"\n[relay.transactional]\nid = \"orders-relay\"\nmax_ms = 50\n"
    );
    let c = parse_with(&text, &[]).unwrap();
    assert!(c.relay.transactional());
    assert_eq!(c.transactional_id(), "orders-relay");
    let Delivery::Transactional(t) = c.relay.delivery() else {
        panic!("transactional");
    };
    assert_eq!((t.max_ms, t.max_records), (50, 20_000));
    assert_eq!(t.progress_topic, "outbox-cdc.progress");
    let e = parse_with(
        &format!("{MINIMAL}\n[relay]\ndelivery = \"exactly-once\"\n"),
        &[],
    )
    .unwrap_err();
    assert_eq!(e.code(), "CONFIG_SYNTAX");
    let e = parse_with(
        &format!(
            "{MINIMAL}\n[relay]\ndelivery = \"transactional\"\n[relay.transactional]\nmax_ms = 0\n"
        ),
        &[],
    )
    .unwrap_err();
    assert_eq!(e.code(), "CONFIG_INVALID_VALUE");
    assert!(e.to_string().contains("relay.transactional.max_ms"), "{e}");
}

#[test]
fn transactional_settings_belong_to_transactional_delivery_and_old_names_say_where_they_went() {
    // Beside an idempotent delivery, the section cannot stand.
    let e = parse_with(
        &format!("{MINIMAL}\n[relay]\n[relay.transactional]\nmax_ms = 50\n"),
        &[],
    )
    .unwrap_err();
    assert_eq!(e.code(), "CONFIG_INVALID_VALUE");
    assert!(e.to_string().contains("relay.transactional"), "{e}");
    // A configuration written before the grouping names the new key.
    for (old, new) in [
        (
            "transactional_id = \"x\"",
            "`id` under `[relay.transactional]`",
        ),
        (
            "transaction_max_records = 5",
            "`max_records` under `[relay.transactional]`",
        ),
        (
            "transaction_max_bytes = 5",
            "`max_bytes` under `[relay.transactional]`",
        ),
        (
            "transaction_max_ms = 5",
            "`max_ms` under `[relay.transactional]`",
        ),
        (
            "progress_topic = \"p\"",
            "`progress_topic` under `[relay.transactional]`",
        ),
    ] {
        let text = format!("{MINIMAL}\n[relay]\ndelivery = \"transactional\"\n{old}\n");
        let e = parse_with(&text, &[]).unwrap_err();
        assert_eq!(e.code(), "CONFIG_UNKNOWN_KEY", "{old}");
        assert!(e.to_string().contains(new), "{old}: {e}");
    }
}

#[test]
fn an_unknown_key_is_named() {
    let text = MINIMAL.replace("user = \"relay\"", "user = \"relay\"\nhots = \"x\"");
    let e = parse_with(&text, &[]).unwrap_err();
    assert_eq!(e.code(), "CONFIG_UNKNOWN_KEY");
    assert!(e.to_string().contains("postgres.hots"), "{e}");
    let e = parse_with(&format!("{MINIMAL}\n[debezum]\nslot = \"x\"\n"), &[]).unwrap_err();
    assert_eq!(e.code(), "CONFIG_UNKNOWN_KEY");
    assert!(e.to_string().contains("debezum"), "{e}");
}

#[test]
fn a_missing_required_key_is_named() {
    let e = parse_with(&MINIMAL.replace("dbname = \"app\"", ""), &[]).unwrap_err();
    assert_eq!(e.code(), "CONFIG_MISSING_KEY");
    assert!(e.to_string().contains("dbname"), "{e}");
}

#[test]
fn a_wrongly_typed_value_is_a_syntax_error_naming_the_key() {
    let e = parse_with(
        &MINIMAL.replace("[outbox]", "[outbox]\ntopic_prefix = 7"),
        &[],
    )
    .unwrap_err();
    assert_eq!(e.code(), "CONFIG_SYNTAX");
    assert!(e.to_string().contains("topic_prefix"), "{e}");
}

#[test]
fn environment_overrides_file_values() {
    let c = parse_with(
        MINIMAL,
        &[
            ("OUTBOX_CDC_POSTGRES_PORT", "6543"),
            ("OUTBOX_CDC_POSTGRES_HOST", "db.internal"),
            ("OUTBOX_CDC_OUTBOX_TOPIC_PREFIX", "events."),
            ("OUTBOX_CDC_KAFKA_BOOTSTRAP_SERVERS", "k1:9092,k2:9092"),
        ],
    )
    .unwrap();
    assert_eq!(c.postgres.port, Ports(vec![6543]));
    assert_eq!(c.postgres.host, "db.internal");
    assert_eq!(c.outbox.topic_prefix, "events.");
    assert_eq!(c.kafka.bootstrap_servers, "k1:9092,k2:9092");
    let e = parse_with(MINIMAL, &[("OUTBOX_CDC_POSTGRES_PORT", "five")]).unwrap_err();
    assert_eq!(e.code(), "CONFIG_INVALID_VALUE");
    assert!(e.to_string().contains("OUTBOX_CDC_POSTGRES_PORT"), "{e}");
}

#[test]
fn several_hosts_take_one_port_or_one_each() {
    let c = parse_with(
        MINIMAL,
        &[
            ("OUTBOX_CDC_POSTGRES_HOST", "db1, db2"),
            ("OUTBOX_CDC_POSTGRES_PORT", "5433,5434"),
        ],
    )
    .unwrap();
    assert_eq!(
        c.postgres.endpoints(),
        vec![("db1".to_string(), 5433), ("db2".to_string(), 5434)]
    );
    let c = parse_with(MINIMAL, &[("OUTBOX_CDC_POSTGRES_HOST", "db1,db2,db3")]).unwrap();
    assert_eq!(c.postgres.address(), "db1:5432,db2:5432,db3:5432");
    let e = parse_with(
        MINIMAL,
        &[
            ("OUTBOX_CDC_POSTGRES_HOST", "db1,db2,db3"),
            ("OUTBOX_CDC_POSTGRES_PORT", "5433,5434"),
        ],
    )
    .unwrap_err();
    assert_eq!(e.code(), "CONFIG_INVALID_VALUE");
    assert!(e.to_string().contains("2 ports for 3 hosts"), "{e}");
    let e = parse_with(MINIMAL, &[("OUTBOX_CDC_POSTGRES_HOST", "db1,,db2")]).unwrap_err();
    assert_eq!(e.code(), "CONFIG_INVALID_VALUE");
}

#[test]
fn a_literal_password_is_refused() {
    let text = MINIMAL.replace(
        "user = \"relay\"",
        "user = \"relay\"\npassword = \"hunter2\"",
    );
    let e = parse_with(&text, &[]).unwrap_err();
    assert_eq!(e.code(), "CONFIG_SECRET_IN_FILE");
    assert!(!e.to_string().contains("hunter2"));
    let text = MINIMAL.replace(
        "bootstrap_servers = \"127.0.0.1:9092\"",
        "bootstrap_servers = \"127.0.0.1:9092\"\nproperties = { \"sasl.password\" = \"hunter2\" }",
    );
    let e = parse_with(&text, &[]).unwrap_err();
    assert_eq!(e.code(), "CONFIG_SECRET_IN_FILE");
    assert!(
        e.to_string().contains("kafka.properties.sasl.password"),
        "{e}"
    );
}

#[test]
fn secrets_come_from_the_environment_or_a_file() {
    let text = MINIMAL.replace(
        "user = \"relay\"",
        "user = \"relay\"\npassword = { env = \"PGPW\" }",
    );
    let c = parse_with(&text, &[("PGPW", "s3cret")]).unwrap();
    let pw = c
        .postgres_password(&|n| (n == "PGPW").then(|| "s3cret".to_string()))
        .unwrap();
    assert_eq!(pw.as_ref().map(Secret::expose), Some("s3cret"));
    assert_eq!(format!("{pw:?}"), "Some(Secret(****))");
    let e = c.postgres_password(&|_| None).unwrap_err();
    assert_eq!(e.code(), "CONFIG_SECRET_UNAVAILABLE");
    assert_eq!(c.debezium_password_reference().placeholder(), "${env:PGPW}");

    let dir = std::env::temp_dir().join(format!("outbox-cdc-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("pw");
    std::fs::write(&file, "from-file\n").unwrap();
    let text = MINIMAL.replace(
        "user = \"relay\"",
        &format!(
            "user = \"relay\"\npassword = {{ file = {:?} }}",
            file.display().to_string()
        ),
    );
    let c = parse_with(&text, &[]).unwrap();
    let pw = c.postgres_password(&|_| None).unwrap();
    assert_eq!(pw.as_ref().map(Secret::expose), Some("from-file"));
    let props = dir.join("pg.properties");
    std::fs::write(&props, "user=x\npassword = pa\\\\ss\n").unwrap();
    let text = MINIMAL.replace(
        "user = \"relay\"",
        &format!(
            "user = \"relay\"\npassword = {{ file = {:?}, key = \"password\" }}",
            props.display().to_string()
        ),
    );
    let c = parse_with(&text, &[]).unwrap();
    let pw = c.postgres_password(&|_| None).unwrap();
    assert_eq!(pw.as_ref().map(Secret::expose), Some("pa\\ss"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_default_password_variable_applies_when_nothing_is_named() {
    let c = parse_with(MINIMAL, &[]).unwrap();
    let pw = c
        .postgres_password(&|n| (n == "OUTBOX_CDC_POSTGRES_PASSWORD").then(|| "pw".to_string()))
        .unwrap();
    assert_eq!(pw.as_ref().map(Secret::expose), Some("pw"));
    assert_eq!(
        c.debezium_password_reference().placeholder(),
        "${env:OUTBOX_CDC_POSTGRES_PASSWORD}"
    );
}

#[test]
fn invalid_values_are_named() {
    let cases = [
        (
            MINIMAL.replace("[outbox]", "[outbox]\ntopic_prefix = \"bad/prefix\""),
            "outbox.topic_prefix",
        ),
        (
            MINIMAL.replace("[outbox]", "[outbox]\ntable = \"Bad Table\""),
            "outbox.table",
        ),
        (
            MINIMAL.replace(
                "user = \"relay\"",
                "user = \"relay\"\nslot = \"Relay-Slot\"",
            ),
            "postgres.slot",
        ),
        (
            MINIMAL.replace(
                "user = \"relay\"",
                "user = \"relay\"\nslot = \"outbox_cdc_debezium\"",
            ),
            "debezium.slot",
        ),
        (
            MINIMAL.replace(
                "user = \"relay\"",
                "user = \"relay\"\nsslmode = \"verify-full\"",
            ),
            "postgres.sslrootcert",
        ),
        (
            MINIMAL.replace(
                "bootstrap_servers = \"127.0.0.1:9092\"",
                "bootstrap_servers = \"127.0.0.1:9092\"\nproperties = { acks = \"1\" }",
            ),
            "kafka.properties.acks",
        ),
    ];
    for (text, key) in cases {
        let e = parse_with(&text, &[]).unwrap_err();
        assert_eq!(e.code(), "CONFIG_INVALID_VALUE", "{key}: {e}");
        assert!(e.to_string().contains(key), "{key}: {e}");
    }
    let e = parse_with(
        &MINIMAL.replace(
            "user = \"relay\"",
            "user = \"relay\"\nsslmode = \"sometimes\"",
        ),
        &[],
    )
    .unwrap_err();
    assert_eq!(e.code(), "CONFIG_SYNTAX");
    assert!(e.to_string().contains("sslmode"), "{e}");
}

#[test]
fn otel_is_off_unless_configured_and_its_values_are_checked() {
    assert!(parse_with(MINIMAL, &[]).unwrap().otel.is_none());
    let c = parse_with(
        &format!("{MINIMAL}\n[otel]\nendpoint = \"http://collector:4318\"\n"),
        &[],
    )
    .unwrap();
    let o = c.otel.unwrap();
    assert_eq!(o.protocol, OtlpProtocol::HttpProtobuf);
    assert_eq!(o.sample_ratio, 0.01);
    assert!(!o.propagate);
    assert_eq!(o.service_name, "outbox-cdc");
    let grpc = parse_with(
        &format!("{MINIMAL}\n[otel]\nendpoint = \"http://c:4317\"\nprotocol = \"grpc\"\n"),
        &[],
    )
    .unwrap();
    assert_eq!(grpc.otel.unwrap().protocol, OtlpProtocol::Grpc);
    for (extra, key) in [
        ("endpoint = \"collector:4318\"", "otel.endpoint"),
        ("endpoint = \"https://collector:4318\"", "TLS"),
        (
            "endpoint = \"http://c:4318\"\nsample_ratio = 1.5",
            "otel.sample_ratio",
        ),
        (
            "endpoint = \"http://c:4318\"\nservice_name = \"\"",
            "otel.service_name",
        ),
    ] {
        let e = parse_with(&format!("{MINIMAL}\n[otel]\n{extra}\n"), &[]).unwrap_err();
        assert_eq!(e.code(), Code::CONFIG_INVALID_VALUE, "{e}");
        assert!(e.to_string().contains(key), "{key}: {e}");
    }
    let e = parse_with(
        &format!("{MINIMAL}\n[otel]\nendpoint = \"http://c:4318\"\nprotocol = \"thrift\"\n"),
        &[],
    )
    .unwrap_err();
    assert!(e.to_string().contains("otel"), "{e}");
}

#[test]
fn a_misspelt_key_or_section_is_named_before_what_it_leaves_missing() {
    let e = parse_with(&MINIMAL.replace("dbname", "dbnme"), &[]).unwrap_err();
    assert_eq!(e.code(), "CONFIG_UNKNOWN_KEY");
    assert!(
        e.to_string()
            .contains("unknown key `postgres.dbnme`: did you mean `postgres.dbname`?"),
        "{e}"
    );
    let e = parse_with(&MINIMAL.replace("[kafka]", "[kafak]"), &[]).unwrap_err();
    assert_eq!(e.code(), "CONFIG_UNKNOWN_KEY");
    assert!(
        e.to_string()
            .contains("unknown section `[kafak]`: did you mean `[kafka]`?"),
        "{e}"
    );
    let e = parse_with(
        &format!("{MINIMAL}\n[relay]\ndelivery = \"transactional\"\n[relay.transactional]\nmax_recods = 5\n"),
        &[],
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("did you mean `relay.transactional.max_records`?"),
        "{e}"
    );
    // Nothing near: no guess.
    let e = parse_with(&MINIMAL.replace("[outbox]", "[outbox]\nzzzzzz = 1"), &[]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "CONFIG_UNKNOWN_KEY: unknown key `outbox.zzzzzz`"
    );
}

#[test]
fn the_outbox_section_may_be_left_out() {
    let c = parse_with(&MINIMAL.replace("[outbox]", ""), &[]).unwrap();
    assert_eq!(c.outbox.table, "messaging_outbox");
    assert_eq!(c.outbox.topic_prefix, "outbox.");
}

#[test]
fn a_bad_override_names_its_variable_and_no_rust_type() {
    let e = parse_with(MINIMAL, &[("OUTBOX_CDC_DEBEZIUM_DATABASE_PORT", "70000")]).unwrap_err();
    assert_eq!(e.code(), "CONFIG_INVALID_VALUE");
    let text = e.to_string();
    assert!(
        text.contains("`debezium.database_port`: OUTBOX_CDC_DEBEZIUM_DATABASE_PORT=\"70000\""),
        "{text}"
    );
    assert!(
        text.contains("from 0 to 65535") && !text.contains("u16"),
        "{text}"
    );
    assert!(
        !text.contains("test.toml"),
        "the file is not to blame: {text}"
    );
}

#[test]
fn a_wrong_secret_form_says_what_the_forms_are() {
    let e = parse_with(
        &MINIMAL.replace(
            "user = \"relay\"",
            "user = \"relay\"\npassword = { envv = \"X\" }",
        ),
        &[],
    )
    .unwrap_err();
    let text = e.to_string();
    assert!(text.contains("`postgres.password`"), "{text}");
    assert!(
        text.contains("{ env = \\\"NAME\\\" }") || text.contains("{ env = \"NAME\" }"),
        "{text}"
    );
    assert!(
        !text.contains("SecretSource") && !text.contains("untagged"),
        "{text}"
    );
    let e = parse_with(
        &MINIMAL.replace(
            "bootstrap_servers = \"127.0.0.1:9092\"",
            "bootstrap_servers = \"127.0.0.1:9092\"\n[kafka.properties]\n\"sasl.password\" = { fiel = \"/x\" }",
        ),
        &[],
    )
    .unwrap_err();
    let text = e.to_string();
    assert!(text.contains("`kafka.properties.sasl.password`"), "{text}");
    assert!(
        !text.contains("PropertyValue") && !text.contains("untagged"),
        "{text}"
    );
}

#[test]
fn a_variable_that_sets_nothing_is_warned_of() {
    let vars = [
        "OUTBOX_CDC_KAFKA_PROPERTIES",
        "OUTBOX_CDC_RELAY_MAX_IN_FLIGHT_MESSAGES",
        "OUTBOX_CDC_POSTGRES_HOTS",
        "OUTBOX_CDC_POSTGRES_HOST",
        "OUTBOX_CDC_LOG",
        "OUTBOX_CDC_KAFKA_SECRET",
        "PATH",
    ]
    .map(String::from);
    let warnings = unused_variables(vars, &["OUTBOX_CDC_KAFKA_SECRET"]);
    assert_eq!(
        warnings,
        [
            "OUTBOX_CDC_KAFKA_PROPERTIES is ignored: `kafka.properties` has no environment override; set it in the configuration file",
            "OUTBOX_CDC_POSTGRES_HOTS is ignored: no such setting; did you mean OUTBOX_CDC_POSTGRES_HOST?",
        ]
    );
}

#[test]
fn every_key_that_takes_one_value_has_its_variable() {
    let c = parse_with(
        MINIMAL,
        &[
            ("OUTBOX_CDC_RELAY_MAX_IN_FLIGHT_MESSAGES", "500"),
            ("OUTBOX_CDC_RELAY_CREATE_SLOT", "true"),
            ("OUTBOX_CDC_RELAY_DELIVERY", "transactional"),
            ("OUTBOX_CDC_RELAY_TRANSACTIONAL_MAX_MS", "250"),
            ("OUTBOX_CDC_DEBEZIUM_SERVER_OFFSET_TOPIC", "offsets"),
            // Text that reads as a number stays text where the key takes text.
            ("OUTBOX_CDC_POSTGRES_APPLICATION_NAME", "42"),
            ("OUTBOX_CDC_HTTP_LISTEN", "127.0.0.1:9999"),
        ],
    )
    .unwrap();
    assert_eq!(c.relay.max_in_flight_messages, 500);
    assert!(c.relay.create_slot);
    assert!(c.relay.transactional());
    assert_eq!(c.debezium.server.offset_topic, "offsets");
    assert_eq!(c.postgres.application_name, "42");
    assert_eq!(c.http.map(|h| h.listen).as_deref(), Some("127.0.0.1:9999"));
    let names: Vec<String> = env_overrides().into_iter().map(|(v, _)| v).collect();
    assert!(names.contains(&"OUTBOX_CDC_RELAY_TRANSACTIONAL_MAX_MS".to_string()));
    assert!(names.contains(&"OUTBOX_CDC_OTEL_SAMPLE_RATIO".to_string()));
    assert!(!names.iter().any(|n| n == "OUTBOX_CDC_KAFKA_PROPERTIES"
        || n == "OUTBOX_CDC_POSTGRES_PASSWORD"
        || n == "OUTBOX_CDC_RELAY_TRANSACTIONAL"));
    // A value the key refuses after decoding also names its variable.
    let e = parse_with(MINIMAL, &[("OUTBOX_CDC_RELAY_MAX_IN_FLIGHT_MESSAGES", "0")]).unwrap_err();
    assert_eq!(e.code(), "CONFIG_INVALID_VALUE");
    assert!(
        e.to_string()
            .contains("OUTBOX_CDC_RELAY_MAX_IN_FLIGHT_MESSAGES=\"0\""),
        "{e}"
    );
}

#[test]
fn the_contract_is_messaging_unless_named_and_the_router_options_are_the_debezium_contracts() {
    use crate::contract::definition::{ContractName, Converters, Status};
    let c = parse_with(MINIMAL, &[]).unwrap().outbox.contract().unwrap();
    assert_eq!(
        (c.name, c.status, c.converters),
        (
            ContractName::Messaging,
            Status::Kept,
            Converters::platform()
        )
    );

    let text = MINIMAL.replace(
        "[outbox]",
        "[outbox]\ncontract = \"debezium\"\ntable = \"outboxevent\"\n\n[outbox.router]\n\"table.field.event.key\" = \"order_id\"\n\"table.op.invalid.behavior\" = \"error\"",
    );
    let c = parse_with(&text, &[]).unwrap().outbox.contract().unwrap();
    assert_eq!(c.name, ContractName::Debezium);
    assert_eq!(c.status, Status::NotKept);
    assert_eq!(c.converters, Converters::json());
    assert_eq!(c.router.event_key.as_deref(), Some("order_id"));
    assert_eq!(c.router.route_by, "aggregatetype");

    // The variable sets the contract as any key.
    let c = parse_with(MINIMAL, &[("OUTBOX_CDC_OUTBOX_CONTRACT", "debezium")])
        .unwrap()
        .outbox
        .contract()
        .unwrap();
    assert_eq!(c.name, ContractName::Debezium);

    for (text, code, detail) in [
        (
            MINIMAL.replace("[outbox]", "[outbox]\ncontract = \"kafka\""),
            "CONFIG_INVALID_VALUE",
            "`outbox.contract`: \"kafka\" is not one of messaging, debezium",
        ),
        (
            MINIMAL.replace("[outbox]", "[outbox]\nconverters = \"avro\""),
            "CONFIG_INVALID_VALUE",
            "`outbox.converters`: \"avro\" is not one of platform, json, nor a table of Kafka Connect's converter settings",
        ),
        (
            MINIMAL.replace(
                "[outbox]",
                "[outbox]\ncontract = \"debezium\"\n[outbox.converters]\n\"key.converter\" = \"io.confluent.connect.avro.AvroConverter\"\n\"value.converter\" = \"org.apache.kafka.connect.storage.StringConverter\"",
            ),
            "CONVERTER_NEEDS_REGISTRY",
            "`outbox.converters`: key.converter: io.confluent.connect.avro.AvroConverter writes through a schema registry, which the relay does not use",
        ),
        (
            MINIMAL.replace("[outbox]", "[outbox.router]\n\"route.by.field\" = \"kind\""),
            "CONFIG_INVALID_VALUE",
            "`outbox.router`: the messaging contract's options are the platform's; name `contract = \"debezium\"` to set the router's",
        ),
        (
            MINIMAL.replace(
                "[outbox]",
                "[outbox]\ncontract = \"debezium\"\n[outbox.router]\n\"route.topic.regex\" = \"(?<v>.*)\"",
            ),
            "CONTRACT_OPTION_INVALID",
            "`route.topic.replacement`: no group with name {routedByValue} in `route.topic.regex`",
        ),
    ] {
        let error = parse_with(&text, &[]).unwrap_err();
        assert_eq!((error.code().as_str(), error.detail()), (code, detail), "{text}");
    }
}
