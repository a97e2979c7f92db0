use std::collections::BTreeMap;

use bytes::Bytes;

use super::*;
use crate::contract::convert::{ColumnType, Optionality};
use crate::contract::row::Text;
use crate::contract::schema::ColumnSchema;

fn settings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

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
            .map(|l| Converter::BinaryData(Box::new(l.clone()))),
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
            ("value.converter", Registry::NotNeeded),
            ("header.converter", Registry::NotNeeded),
        ]
    );
    let missing = Converters::from_settings(&settings(&[])).unwrap_err();
    assert_eq!(missing.len(), 2, "{missing:?}");
}

fn column(ty: ColumnType) -> ColumnSchema<'static> {
    ColumnSchema {
        ty,
        optionality: Optionality::Optional,
        default: None,
    }
}

#[test]
fn each_converter_writes_a_column_as_kafka_connect_does() {
    let text = Datum::String(Text::from("a\"b"));
    let bytes = Datum::Bytes(Bytes::from_static(&[0, 255]));
    let (t, b) = (column(ColumnType::Text), column(ColumnType::Bytea));
    let s = |c: &Converter, d: &Datum, schema: &ColumnSchema<'_>| {
        c.column(d, schema)
            .map(|v| String::from_utf8_lossy(&v).into_owned())
    };
    assert_eq!(s(&Converter::String, &text, &t), Some("a\"b".into()));
    assert_eq!(
        s(&Converter::String, &Datum::Integer(-3), &t),
        Some("-3".into())
    );
    assert_eq!(
        s(&Converter::Json(Schemas::Disabled), &text, &t),
        Some("\"a\\\"b\"".into())
    );
    assert_eq!(
        s(&Converter::Json(Schemas::Enabled), &text, &t),
        Some(r#"{"schema":{"type":"string","optional":true},"payload":"a\"b"}"#.into())
    );
    assert_eq!(Converter::ByteArray.column(&bytes, &b), Some(vec![0, 255]));
    let binary = Converter::BinaryData(Box::new(Converter::String));
    assert_eq!(binary.column(&bytes, &b), Some(vec![0, 255]));
    assert_eq!(binary.column(&Datum::Null, &b), None);
    assert_eq!(s(&binary, &Datum::Boolean(true), &t), Some("true".into()));
    // A null under JSON without schemas is the text null; as a header too.
    assert_eq!(
        s(&Converter::Json(Schemas::Disabled), &Datum::Null, &t),
        Some("null".into())
    );
    assert_eq!(
        HeaderConverter::Json(Schemas::Disabled).column(&Datum::Null, &t),
        Some(b"null".to_vec())
    );
    assert_eq!(HeaderConverter::Simple.column(&Datum::Null, &t), None);

    assert!(Converter::String.writes_column(BytesSchema::Bytes).is_err());
    assert!(Converter::ByteArray
        .writes_column(BytesSchema::Other)
        .is_err());
    assert!(Converter::ByteArray.writes_struct().is_err());
    assert!(binary.writes_column(BytesSchema::Bytes).is_ok());
    assert!(binary.writes_text());
}
