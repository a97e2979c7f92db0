use std::collections::BTreeMap;

use super::*;

use crate::test_support::settings;

#[test]
fn the_presets_are_written_as_kafka_connect_names_them() {
    assert_eq!(
        Converters::platform().settings(),
        vec![
            (
                "key.converter".to_string(),
                "org.apache.kafka.connect.storage.StringConverter".to_string()
            ),
            (
                "value.converter".into(),
                "io.debezium.converters.BinaryDataConverter".into()
            ),
            (
                "value.converter.delegate.converter.type".into(),
                "org.apache.kafka.connect.json.JsonConverter".into()
            ),
            (
                "value.converter.delegate.converter.type.schemas.enable".into(),
                "false".into()
            ),
            (
                "header.converter".into(),
                "org.apache.kafka.connect.storage.SimpleHeaderConverter".into()
            ),
        ]
    );
    assert_eq!(Converters::json().preset_name(), Some("json"));
    assert_eq!(Converters::platform().preset_name(), Some("platform"));
}

#[test]
fn every_set_reads_back_from_its_settings() {
    let leaves = [
        Converter::String,
        Converter::Json(Schemas::Enabled),
        Converter::Json(Schemas::Disabled),
        Converter::ByteArray,
    ];
    let mut all: Vec<Converter> = leaves.to_vec();
    all.extend(
        leaves
            .iter()
            .map(|l| Converter::BinaryData(Some(Box::new(l.clone())))),
    );
    for key in &all {
        for value in &all {
            for header in [
                HeaderConverter::Simple,
                HeaderConverter::Json(Schemas::Enabled),
                HeaderConverter::Json(Schemas::Disabled),
            ] {
                let set = Converters {
                    key: key.clone(),
                    value: value.clone(),
                    header,
                };
                let map: BTreeMap<String, String> = set.settings().into_iter().collect();
                assert_eq!(Converters::from_settings(&map), Ok(set.clone()), "{map:?}");
            }
        }
    }
}

#[test]
fn defaults_and_what_the_relay_does_not_write() {
    // JsonConverter's schemas.enable is on unless set; headers default to
    // the worker's SimpleHeaderConverter.
    let c = Converters::from_settings(&settings(&[
        (
            "key.converter",
            "org.apache.kafka.connect.json.JsonConverter",
        ),
        (
            "value.converter",
            "org.apache.kafka.connect.storage.StringConverter",
        ),
    ]))
    .unwrap();
    assert_eq!(c.key, Converter::Json(Schemas::Enabled));
    assert_eq!(c.header, HeaderConverter::Simple);

    let problems = Converters::from_settings(&settings(&[
        ("key.converter", "io.confluent.connect.avro.AvroConverter"),
        (
            "value.converter",
            "io.debezium.converters.BinaryDataConverter",
        ),
        (
            "header.converter",
            "org.apache.kafka.connect.storage.StringConverter",
        ),
    ]))
    .unwrap_err();
    let named: Vec<(&str, Registry)> = problems
        .iter()
        .map(|p| (p.setting.as_str(), p.registry))
        .collect();
    assert_eq!(
        named,
        [
            ("key.converter", Registry::Needed),
            ("header.converter", Registry::NotNeeded),
        ]
    );
    // Without a delegate, BinaryDataConverter takes bytes only: the plan
    // refuses any other column for it.
    let bytes_only = Converters::from_settings(&settings(&[
        (
            "key.converter",
            "org.apache.kafka.connect.storage.StringConverter",
        ),
        (
            "value.converter",
            "io.debezium.converters.BinaryDataConverter",
        ),
    ]))
    .unwrap();
    assert_eq!(bytes_only.value, Converter::BinaryData(None));
    assert!(bytes_only.value.writes_column(BytesSchema::Bytes).is_ok());
    assert!(bytes_only.value.writes_column(BytesSchema::Other).is_err());
    assert!(bytes_only.value.writes_struct().is_err());
    let missing = Converters::from_settings(&settings(&[])).unwrap_err();
    assert_eq!(missing.len(), 2, "{missing:?}");
}
