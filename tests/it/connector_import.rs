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
        "IMPORT_PLUGIN_UNSUPPORTED: plugin.name: not set (Debezium's default is decoderbufs)",
        "CONVERTER_NEEDS_REGISTRY: key.converter: io.confluent.connect.avro.AvroConverter",
        "CONVERTER_NEEDS_REGISTRY: value.converter: io.confluent.connect.avro.AvroConverter",
        "IMPORT_SECRET_LITERAL: database.password",
        "IMPORT_OPTION_UNSUPPORTED: extended.headers.enabled: not set (true by default)",
    ] {
        assert!(stderr.contains(line), "{line}\n{stderr}");
    }
    assert!(!stderr.contains("hunter2"), "{stderr}");
    std::fs::remove_dir_all(dir).unwrap();
}
