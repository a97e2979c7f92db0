use bytes::Bytes;

use super::*;
use crate::contract::converters::{BytesSchema, Converter, HeaderConverter, Schemas};
use crate::router::columns::{ColumnType, Optionality};
use crate::router::json::write_json;
use crate::router::schema::ColumnSchema;
use crate::row::{Datum, Text};

fn json(d: &Datum) -> String {
    let mut out = Vec::new();
    write_json(&mut out, d);
    String::from_utf8(out).unwrap()
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
    let binary = Converter::BinaryData(Some(Box::new(Converter::String)));
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

#[test]
fn strings_are_escaped_as_jackson_escapes_them() {
    // Written by Kafka Connect 4.3's JsonConverter (schemas.enable=false)
    // for the same string.
    let s = "a\"b\\c\n\t\r\u{8}\u{c}\u{1}\u{1f}\u{7f}/é😀\u{2028}";
    assert_eq!(
        json(&Datum::String(Text::from(s))),
        "\"a\\\"b\\\\c\\n\\t\\r\\b\\f\\u0001\\u001F\u{7f}/é\\uD83D\\uDE00\u{2028}\""
    );
    assert_eq!(
        json(&Datum::Bytes(Bytes::from_static(&[0, 1, 2, 255]))),
        "\"AAEC/w==\""
    );
    assert_eq!(json(&Datum::Integer(-5)), "-5");
    assert_eq!(json(&Datum::Null), "null");
}

#[test]
fn headers_are_written_as_simple_header_converter_writes_them() {
    assert_eq!(
        header_bytes(&Datum::Bytes(Bytes::from_static(&[0, 1, 2, 255]))),
        Some(b"AAEC/w==".to_vec())
    );
    assert_eq!(
        header_bytes(&Datum::Integer(12345)),
        Some(b"12345".to_vec())
    );
    assert_eq!(header_bytes(&Datum::Boolean(true)), Some(b"true".to_vec()));
    assert_eq!(header_bytes(&Datum::Null), None);
    assert_eq!(string_bytes(&Datum::Bytes(Bytes::from_static(b"x"))), None);
}

#[test]
fn blank_is_javas_trim_then_empty() {
    assert!(Datum::String(Text::from(" \t\n\r\u{1}")).is_blank());
    assert!(!Datum::String(Text::from(" x ")).is_blank());
    assert!(Datum::Null.is_blank());
    assert!(!Datum::Bytes(Bytes::new()).is_blank());
}
