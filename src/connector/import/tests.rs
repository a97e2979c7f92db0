use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;

use super::*;
use crate::config::Config;
use crate::connector::{self, Target};

const BASE: &str = r#"
[postgres]
host = "db.internal"
port = 5433
dbname = "shop"
user = "relay"
publication = "outbox_pub"
[kafka]
bootstrap_servers = "kafka:9092"
[debezium]
connector_name = "shop-outbox"
slot = "shop_debezium"
topic_prefix = "shop"
"#;

fn config(outbox: &str) -> Config {
    let text = format!("{BASE}\n[outbox]\n{outbox}\n");
    match Config::parse(&text, Path::new("t.toml"), &|_| None) {
        Ok(c) => c,
        Err(e) => panic!("{e}\n{text}"),
    }
}

fn toml_router(options: &BTreeMap<String, String>) -> String {
    let mut s = String::from("[outbox.router]\n");
    for (k, v) in options {
        s.push_str(&format!(
            "{} = {}\n",
            toml::Value::String(k.clone()),
            toml::Value::String(v.clone())
        ));
    }
    s
}

/// Every deployment `connector-config` writes for `cfg`, imported, gives
/// back its contract, table, slot and publication.
fn round_trips(cfg: &Config) {
    let expected = cfg.outbox.contract().unwrap();
    for target in [
        Target::Connect,
        Target::ConnectJson,
        Target::DebeziumServer,
        Target::Strimzi,
    ] {
        let written = connector::render(cfg, target).unwrap();
        let outcome = match import(&written, "generated", None, &given("kafka:9092")).unwrap() {
            Ok(o) => o,
            Err(refused) => panic!("{target:?} refused: {refused:?}\n{written}"),
        };
        let back = Config::parse(&outcome.text, Path::new("back.toml"), &|_| None).unwrap();
        assert_eq!(
            back.outbox.contract().unwrap(),
            expected,
            "{target:?}\n{}",
            outcome.text
        );
        assert_eq!(back.outbox.qualified_table(), cfg.outbox.qualified_table());
        assert_eq!(
            back.outbox.topic_prefix, cfg.outbox.topic_prefix,
            "{target:?}"
        );
        assert_eq!(back.postgres.publication, cfg.postgres.publication);
        assert_eq!(back.postgres.dbname, "shop");
        assert_eq!(back.debezium.slot, cfg.debezium.slot);
        assert_eq!(back.debezium.topic_prefix, "shop");
        assert_eq!(
            back.debezium_password_reference(),
            cfg.debezium_password_reference(),
            "{target:?}"
        );
        // Debezium Server names its engine after the sink: no name to keep.
        let name = (target != Target::DebeziumServer).then_some("shop-outbox");
        assert_eq!(
            outcome.imported.connector_name.as_deref(),
            name,
            "{target:?}"
        );
    }
}

#[test]
fn every_built_in_contract_round_trips_through_every_deployment() {
    round_trips(&config(""));
    round_trips(&config("topic_prefix = \"events.\""));
    round_trips(&config("contract = \"debezium\"\ntable = \"outboxevent\""));
    round_trips(&config(
        "contract = \"debezium\"\ntable = \"outboxevent\"\nconverters = \"platform\"",
    ));
}

fn options() -> impl Strategy<Value = BTreeMap<String, String>> {
    let column = || prop::sample::select(vec!["id", "ev", "kind", "tenant", "body", "ref"]);
    let additional = prop::collection::vec(
        (
            prop::sample::select(vec!["tenant", "kind", "shard", "type"]),
            prop::sample::select(vec!["header", "envelope", "partition"]),
            prop::option::of(prop::sample::select(vec!["a", "b", "eventType"])),
        ),
        0..3,
    );
    (
        prop::option::of(column()),
        prop::option::of(prop::sample::select(vec!["", "ref", "aggregateid"])),
        prop::option::of(column()),
        prop::option::of(prop::sample::select(vec!["occurred"])),
        prop::option::of(prop::sample::select(vec!["ver"])),
        additional,
        prop::option::of(prop::sample::select(vec!["error", "ignore"])),
        prop::option::of(column()),
        prop::option::of(prop::sample::select(vec![
            ("(?<kind>[a-z]+)-(?<v>v[0-9]+)", "p.${kind}.${v}"),
            ("(?<routedByValue>.*)", "events.${routedByValue}"),
        ])),
        (
            prop::option::of(any::<bool>()),
            prop::option::of(any::<bool>()),
            prop::option::of(prop::sample::select(vec!["ignore", "optional_bytes"])),
            prop::option::of(prop::sample::select(vec!["warn", "error", "fatal"])),
        ),
    )
        .prop_map(
            |(
                id,
                key,
                payload,
                ts,
                ver,
                additional,
                missing,
                route,
                topic,
                (tomb, expand, nulls, op),
            )| {
                let mut o = BTreeMap::new();
                let mut put = |k: &str, v: Option<String>| {
                    if let Some(v) = v {
                        o.insert(k.to_string(), v);
                    }
                };
                put("table.field.event.id", id.map(str::to_string));
                put("table.field.event.key", key.map(str::to_string));
                put("table.field.event.payload", payload.map(str::to_string));
                put("table.field.event.timestamp", ts.map(str::to_string));
                put("table.field.event.schema.version", ver.map(str::to_string));
                if !additional.is_empty() {
                    let list: Vec<String> = additional
                        .iter()
                        .map(|(c, p, a)| match a {
                            Some(a) => format!("{c}:{p}:{a}"),
                            None => format!("{c}:{p}"),
                        })
                        .collect();
                    put("table.fields.additional.placement", Some(list.join(",")));
                }
                put(
                    "table.field.additional.missing",
                    missing.map(str::to_string),
                );
                put("route.by.field", route.map(str::to_string));
                if let Some((regex, replacement)) = topic {
                    put("route.topic.regex", Some(regex.to_string()));
                    put("route.topic.replacement", Some(replacement.to_string()));
                }
                put(
                    "route.tombstone.on.empty.payload",
                    tomb.map(|b| b.to_string()),
                );
                put("table.expand.json.payload", expand.map(|b| b.to_string()));
                put(
                    "table.json.payload.null.behavior",
                    nulls.map(str::to_string),
                );
                put("table.op.invalid.behavior", op.map(str::to_string));
                o
            },
        )
}

/// Any set of the converters the relay writes.
fn converters() -> impl Strategy<Value = crate::contract::converters::Converters> {
    use crate::contract::converters::{Converter, Converters, HeaderConverter, Schemas};
    let leaf = prop::sample::select(vec![
        Converter::String,
        Converter::Json(Schemas::Enabled),
        Converter::Json(Schemas::Disabled),
        Converter::ByteArray,
    ]);
    let converter = (leaf, any::<bool>()).prop_map(|(c, wrapped)| match wrapped {
        true => Converter::BinaryData(Some(Box::new(c))),
        false => c,
    });
    let header = prop::sample::select(vec![
        HeaderConverter::Simple,
        HeaderConverter::Json(Schemas::Enabled),
        HeaderConverter::Json(Schemas::Disabled),
    ]);
    (converter.clone(), converter, header).prop_map(|(key, value, header)| Converters {
        key,
        value,
        header,
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_custom_contract_round_trips_through_every_deployment(
        options in options(),
        converters in converters(),
    ) {
        let table: Vec<String> = converters
            .settings()
            .into_iter()
            .map(|(k, v)| format!("{} = {}", toml::Value::String(k), toml::Value::String(v)))
            .collect();
        let cfg = config(&format!(
            "contract = \"debezium\"\ntable = \"outboxevent\"\nconverters = {{ {} }}\n{}",
            table.join(", "),
            toml_router(&options)
        ));
        round_trips(&cfg);
    }
}

fn given(bootstrap: &str) -> Given {
    Given {
        bootstrap: Some(bootstrap.into()),
        ..Given::default()
    }
}

fn refused(text: &str) -> Vec<String> {
    match import(text, "t", None, &given("k:9092")).unwrap() {
        Ok(o) => panic!("imported:\n{}", o.text),
        Err(r) => r
            .iter()
            .map(|r| format!("{} {}", r.code, r.setting))
            .collect(),
    }
}

const DOCUMENTED: &str = "connector.class=io.debezium.connector.postgresql.PostgresConnector
plugin.name=pgoutput
database.hostname=db
database.user=app
database.password=${env:DB_PASSWORD}
database.dbname=shop
topic.prefix=shop
table.include.list=public.outboxevent
extended.headers.enabled=false
key.converter=org.apache.kafka.connect.json.JsonConverter
key.converter.schemas.enable=false
value.converter=org.apache.kafka.connect.json.JsonConverter
value.converter.schemas.enable=false
transforms=outbox
transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
";

#[test]
fn what_cannot_be_honoured_is_refused_with_a_code_and_the_setting_every_one_at_once() {
    let mut text = DOCUMENTED
        .replace("plugin.name=pgoutput", "plugin.name=wal2json")
        .replace("transforms=outbox", "transforms=outbox,filter")
        .replace(
            "value.converter=org.apache.kafka.connect.json.JsonConverter",
            "value.converter=io.confluent.connect.avro.AvroConverter",
        )
        .replace("${env:DB_PASSWORD}", "hunter2")
        .replace("extended.headers.enabled=false\n", "");
    text.push_str(
        "transforms.filter.type=io.debezium.transforms.Filter
transforms.outbox.predicate=isOutbox
field.name.adjustment.mode=avro
column.mask.with.5.chars=public.outboxevent.payload
",
    );
    let r = refused(&text);
    for expected in [
        "IMPORT_PLUGIN_UNSUPPORTED plugin.name",
        "IMPORT_TRANSFORM_CHAIN transforms.filter.type",
        "IMPORT_PREDICATE transforms.outbox.predicate",
        "CONVERTER_NEEDS_REGISTRY value.converter",
        "IMPORT_SECRET_LITERAL database.password",
        "IMPORT_NAMES_ADJUSTED field.name.adjustment.mode",
        "IMPORT_OPTION_UNSUPPORTED column.mask.with.5.chars",
    ] {
        assert!(r.contains(&expected.to_string()), "{expected}: {r:?}");
    }
    let all = match import(&text, "t", None, &given("k:9092")).unwrap() {
        Ok(_) => unreachable!(),
        Err(r) => r
            .iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join("\n"),
    };
    assert!(
        !all.contains("hunter2"),
        "the password is never repeated: {all}"
    );

    // Converters: a header converter the relay does not write.
    let r = refused(&format!(
        "{DOCUMENTED}header.converter=org.apache.kafka.connect.storage.StringConverter\n"
    ));
    assert_eq!(r, vec!["IMPORT_CONVERTER_UNSUPPORTED header.converter"]);
    let r = refused(&DOCUMENTED.replace(
        "table.include.list=public.outboxevent",
        "table.include.list=public.outbox.*",
    ));
    assert_eq!(r, vec!["IMPORT_TABLE_UNNAMED table.include.list"]);
    let r = refused(&DOCUMENTED.replace(
        "io.debezium.connector.postgresql.PostgresConnector",
        "io.debezium.connector.mysql.MySqlConnector",
    ));
    assert_eq!(r, vec!["IMPORT_NOT_POSTGRES connector.class"]);
    // A key Debezium's router does not read is left behind, as Debezium
    // leaves it, with the option it may have meant.
    let text = format!("{DOCUMENTED}transforms.outbox.route.topic.replacment=x\n");
    let outcome = import(&text, "t", None, &given("k:9092")).unwrap().unwrap();
    let i = &outcome.imported;
    assert!(i
        .left_behind
        .iter()
        .any(|(k, _)| k == "transforms.outbox.route.topic.replacment"));
    assert!(
        i.notes
            .iter()
            .any(|n| n.ends_with("did the deployment mean route.topic.replacement?")),
        "{:?}",
        i.notes
    );
}

#[test]
fn debeziums_documented_connector_imports_as_the_debezium_contract() {
    let outcome = import(
        &format!("name=orders\n{DOCUMENTED}tasks.max=1\nsnapshot.mode=never\n"),
        "c.properties",
        None,
        &given("kafka:9092"),
    )
    .unwrap()
    .unwrap();
    let cfg = Config::parse(&outcome.text, Path::new("c.toml"), &|_| None).unwrap();
    let contract = cfg.outbox.contract().unwrap();
    assert_eq!(contract.name.as_str(), "debezium");
    assert_eq!(contract.converters.preset_name(), Some("json"));
    assert_eq!(cfg.outbox.qualified_table(), "public.outboxevent");
    assert_eq!(cfg.debezium.slot, "debezium");
    assert_eq!(cfg.postgres.publication, "dbz_publication");
    assert_eq!(cfg.debezium.connector_name, "orders");
    assert!(
        outcome
            .text
            .contains("password = { env = \"DB_PASSWORD\" }"),
        "{}",
        outcome.text
    );
    let left: Vec<&str> = outcome
        .imported
        .left_behind
        .iter()
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(left, ["snapshot.mode", "tasks.max"]);

    // Without brokers named anywhere: said, not guessed.
    let e = import(DOCUMENTED, "c", None, &Given::default()).unwrap_err();
    assert_eq!(e.code().as_str(), "ARGUMENT_INVALID");
}

#[test]
fn each_deployment_kind_is_recognised_by_its_look() {
    let kind = |text: &str| read(text, None).map(|d| d.source);
    assert_eq!(kind(DOCUMENTED), Ok(Source::Connect));
    assert_eq!(
        kind("{\"name\": \"x\", \"config\": {}}"),
        Ok(Source::ConnectJson)
    );
    assert_eq!(
        kind("apiVersion: kafka.strimzi.io/v1beta2\nkind: KafkaConnector\nspec: {}\n"),
        Ok(Source::Strimzi)
    );
    assert_eq!(
        kind("debezium.source.plugin.name=pgoutput\n"),
        Ok(Source::DebeziumServer)
    );
    assert_eq!(
        kind("apiVersion: v1\nkind: ConfigMap\n")
            .unwrap_err()
            .code()
            .as_str(),
        "IMPORT_UNREADABLE"
    );
    // Debezium Server's default formats are JsonConverter with schemas.
    let d = read(
        "debezium.source.plugin.name=pgoutput\ndebezium.format.schemas.enable=false\n",
        None,
    )
    .unwrap();
    assert_eq!(
        d.settings.get("value.converter").map(String::as_str),
        Some("org.apache.kafka.connect.json.JsonConverter")
    );
    assert_eq!(
        d.settings
            .get("key.converter.schemas.enable")
            .map(String::as_str),
        Some("false")
    );
    assert_eq!(
        d.settings
            .get("header.converter.schemas.enable")
            .map(String::as_str),
        Some("false")
    );
}

#[test]
fn a_kafka_connector_is_found_inside_a_template_a_list_or_among_documents() {
    let connector = |name: &str, db: &str| {
        format!(
            "  - apiVersion: kafka.strimzi.io/v1beta2\n    kind: KafkaConnector\n    metadata:\n      name: {name}\n    spec:\n      class: io.debezium.connector.postgresql.PostgresConnector\n      config:\n        database.dbname: {db}\n"
        )
    };
    let template = format!(
        "apiVersion: template.openshift.io/v1\nkind: Template\nparameters:\n  - name: DB_NAME\n    value: orders\n  - name: DB_HOST\nobjects:\n  - apiVersion: v1\n    kind: Secret\n{}",
        connector("outbox", "${DB_NAME}").replace("database.dbname: ${DB_NAME}", "database.dbname: ${DB_NAME}\n        database.hostname: ${DB_HOST}")
    );
    let d = read(&template, None).unwrap();
    assert_eq!(d.source, Source::Strimzi);
    assert_eq!(d.name.as_deref(), Some("outbox"));
    // A parameter with a default takes it; one without stays, for the judge.
    assert_eq!(
        d.settings.get("database.dbname").map(String::as_str),
        Some("orders")
    );
    assert_eq!(
        d.settings.get("database.hostname").map(String::as_str),
        Some("${DB_HOST}")
    );
    assert_eq!(
        d.notes,
        vec!["the template's parameter DB_NAME taken at its default, \"orders\""]
    );

    let list = format!(
        "apiVersion: v1\nkind: List\nitems:\n{}",
        connector("listed", "d")
    );
    assert_eq!(read(&list, None).unwrap().name.as_deref(), Some("listed"));

    let documents =
        format!(
        "apiVersion: kafka.strimzi.io/v1beta2\nkind: KafkaConnect\nmetadata:\n  name: c\n---\n{}",
        connector("second", "d").replace("\n    ", "\n").trim_start_matches("  - ")
    );
    assert_eq!(
        read(&documents, None).unwrap().name.as_deref(),
        Some("second")
    );

    let several = format!(
        "apiVersion: v1\nkind: List\nitems:\n{}{}",
        connector("a", "d"),
        connector("b", "d")
    );
    let e = read(&several, None).unwrap_err();
    assert_eq!(e.code(), "IMPORT_SEVERAL_CONNECTORS");
    assert_eq!(
        e.detail(),
        "the file holds 2 KafkaConnectors: a, b; import one at a time"
    );

    let none = read(
        "apiVersion: v1\nkind: List\nitems:\n  - kind: Secret\n",
        None,
    )
    .unwrap_err();
    assert_eq!(
        none.detail(),
        "no KafkaConnector in the file (it holds Secret)"
    );
}
