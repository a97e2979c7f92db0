//! `connector-config import` through the command: each committed
//! deployment read back, and one the relay cannot reproduce refused.

use outbox_cdc::config::Config;

use crate::connector_config::{example, outbox_cdc, temp_dir};

/// `connector-config import` of each committed deployment gives back the
/// example's contract and table, in a file the relay reads; a deployment
/// the relay cannot reproduce is refused setting by setting, and nothing
/// is written.
#[test]
fn import_reads_each_committed_deployment_back_and_refuses_what_it_cannot_honour() {
    let dir = temp_dir("import");
    let ex = example();
    for file in [
        "outbox-cdc.properties",
        "outbox-cdc.json",
        "outbox-cdc.debezium-server.properties",
        "outbox-cdc.kafkaconnector.yaml",
    ] {
        let made = dir.join(format!("{file}.toml"));
        let out = outbox_cdc(
            &[
                "connector-config",
                "import",
                &format!("connector-config/{file}"),
                "--bootstrap-servers",
                "kafka-1:9092",
                "--out",
                made.to_str().unwrap(),
            ],
            &[],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{file}: {stderr}");
        assert!(
            stderr
                .contains("the messaging contract on public.messaging_outbox, converters platform"),
            "{file}: {stderr}"
        );
        let back = Config::load(&made, &|_| None).unwrap();
        assert_eq!(
            back.outbox.contract().unwrap(),
            ex.outbox.contract().unwrap(),
            "{file}"
        );
        assert_eq!(back.outbox.topic_prefix, "outbox.");
        assert_eq!(back.debezium.slot, "outbox_cdc_debezium");
        assert_eq!(back.postgres.publication, "outbox_cdc_publication");
        // Validation resolves the password the file refers to.
        let out = outbox_cdc(
            &["config", "validate", "--config", made.to_str().unwrap()],
            &[("OUTBOX_CDC_POSTGRES_PASSWORD", "x")],
        );
        assert!(
            out.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let refused = dir.join("refused.properties");
    std::fs::write(
        &refused,
        "connector.class=io.debezium.connector.postgresql.PostgresConnector\n\
         table.include.list=public.outboxevent\n\
         plugin.name=wal2json\n\
         database.password=hunter2\n\
         key.converter=io.confluent.connect.avro.AvroConverter\n\
         value.converter=io.confluent.connect.avro.AvroConverter\n\
         transforms=outbox\n\
         transforms.outbox.type=io.debezium.transforms.outbox.EventRouter\n",
    )
    .unwrap();
    let out = outbox_cdc(
        &[
            "connector-config",
            "import",
            refused.to_str().unwrap(),
            "--bootstrap-servers",
            "k:9092",
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing written");
    for line in [
        "IMPORT_PLUGIN_UNSUPPORTED: plugin.name: \"wal2json\"",
        "CONVERTER_NEEDS_REGISTRY: key.converter: io.confluent.connect.avro.AvroConverter",
        "CONVERTER_NEEDS_REGISTRY: value.converter: io.confluent.connect.avro.AvroConverter",
        "IMPORT_SECRET_LITERAL: database.password",
    ] {
        assert!(stderr.contains(line), "{line}\n{stderr}");
    }
    assert!(!stderr.contains("hunter2"), "{stderr}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// What a real deployment may be refused for: what no relay can do in
/// Debezium's place (docs/coming-from-debezium.md lists them).
const GENUINE: &[&str] = &[
    // The file is no configuration Kafka Connect or Server reads either.
    "IMPORT_UNREADABLE",
    "IMPORT_SEVERAL_CONNECTORS",
    "IMPORT_NOT_POSTGRES",
    // Debezium Server writing to another system than Kafka.
    "IMPORT_NOT_KAFKA",
    // A transform chain or a predicate.
    "IMPORT_TRANSFORM_CHAIN",
    "IMPORT_PREDICATE",
    "CONVERTER_NEEDS_REGISTRY",
    // A value known only where the connector is deployed, or not in the
    // file at all (which of the tables it captures is the outbox).
    "IMPORT_VALUE_AT_DEPLOY",
    "IMPORT_TABLE_UNNAMED",
    // A router option Debezium refuses too.
    "CONTRACT_OPTION_INVALID",
];

/// The corpus of real deployments (tests/fixtures/debezium-outbox, with
/// their sources): each is imported into a file the relay reads, or refused
/// only for a genuine reason; the count accepted is the one the guide
/// gives.
#[test]
fn real_deployments_import_or_are_refused_for_a_genuine_reason() {
    use outbox_cdc::connector::import::{import, Given};
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/debezium-outbox");
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().is_some_and(|n| n != "SOURCES.md"))
        .collect();
    files.sort();
    let given = Given {
        bootstrap: Some("kafka:9092".into()),
        ..Given::default()
    };
    let (mut accepted, mut lines, mut not_genuine) = (0, Vec::new(), Vec::new());
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(path).unwrap();
        let codes: Vec<String> = match import(&text, &name, None, &given) {
            Ok(Ok(outcome)) => {
                // What was made reads back as the relay reads it.
                let stands = |n: &str| (!n.starts_with("OUTBOX_CDC_")).then(|| "1".to_string());
                Config::parse(&outcome.text, path, &stands)
                    .unwrap_or_else(|e| panic!("{name}: {e}\n{}", outcome.text));
                accepted += 1;
                Vec::new()
            }
            Ok(Err(refused)) => refused
                .iter()
                .map(|r| format!("{} {}", r.code, r.setting))
                .collect(),
            Err(e) => vec![format!("{} (the file)", e.code())],
        };
        for c in &codes {
            if !GENUINE.iter().any(|g| c.starts_with(&format!("{g} "))) {
                not_genuine.push(format!("{name}: {c}"));
            }
        }
        lines.push(format!(
            "{name}: {}",
            match codes.is_empty() {
                true => "accepted".to_string(),
                false => codes.join(", "),
            }
        ));
    }
    eprintln!("{}", lines.join("\n"));
    assert!(
        not_genuine.is_empty(),
        "refused for a reason that is not a genuine impossibility:\n{}",
        not_genuine.join("\n")
    );
    let guide = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/coming-from-debezium.md"),
    )
    .unwrap();
    let said = format!("imports {accepted} of the {} ", files.len());
    assert!(
        guide.contains(&said),
        "the guide does not say `{said}`:\n{}",
        lines.join("\n")
    );
}

/// Import reads Debezium 1.x's `ByteBufferConverter` as `BinaryDataConverter`
/// (its 2.0 name). Both releases' converters, loaded from Maven Central,
/// write the same bytes for each value a column gives them, and the relay's
/// `BinaryDataConverter` writes those bytes too.
#[test]
fn bytebufferconverter_and_binarydataconverter_write_the_same_bytes_as_the_relay() {
    use outbox_cdc::contract::converters::{Converter, Schemas};
    use outbox_cdc::router::columns::{ColumnType, Optionality};
    use outbox_cdc::router::schema::ColumnSchema;
    use outbox_cdc::row::Datum;

    let services_sh = std::env::var("OUTBOX_TEST_SERVICES")
        .expect("OUTBOX_TEST_SERVICES from scripts/services.sh env");
    let out = std::process::Command::new("bash")
        .arg(services_sh)
        .arg("bytes-converters")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    let java: std::collections::BTreeMap<&str, (&str, &str)> = printed
        .lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            Some((f.next()?, (f.next()?, f.next()?)))
        })
        .collect();

    let all: Vec<u8> = (0..=255).collect();
    let text = "{\"a\":1} é".as_bytes().to_vec();
    let cases: [(&str, ColumnType, Optionality, Datum); 7] = [
        (
            "bytes-empty",
            ColumnType::Bytea,
            Optionality::Required,
            Datum::Bytes(Vec::new().into()),
        ),
        (
            "bytes-all",
            ColumnType::Bytea,
            Optionality::Required,
            Datum::Bytes(all.into()),
        ),
        (
            "bytes-text",
            ColumnType::Bytea,
            Optionality::Optional,
            Datum::Bytes(text.into()),
        ),
        (
            "bytes-null",
            ColumnType::Bytea,
            Optionality::Optional,
            Datum::Null,
        ),
        (
            "string",
            ColumnType::Text,
            Optionality::Required,
            Datum::String("a \"q\" \\".into()),
        ),
        (
            "int",
            ColumnType::Int32,
            Optionality::Required,
            Datum::Integer(42),
        ),
        (
            "string-null",
            ColumnType::Text,
            Optionality::Optional,
            Datum::Null,
        ),
    ];
    assert_eq!(java.len(), cases.len(), "{printed}");
    let relay = Converter::BinaryData(Some(Box::new(Converter::Json(Schemas::Disabled))));
    for (name, ty, optionality, datum) in cases {
        let (old, new) = java[name];
        assert_eq!(
            old, new,
            "{name}: ByteBufferConverter and BinaryDataConverter differ"
        );
        let schema = ColumnSchema {
            ty,
            optionality,
            default: None,
        };
        let ours = match relay.column(&datum, &schema) {
            None => "null".to_string(),
            Some(b) if b.is_empty() => "-".to_string(),
            Some(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
        };
        assert_eq!(
            ours, new,
            "{name}: the relay's bytes differ from Debezium's"
        );
    }
}
