use std::collections::BTreeMap;

use bytes::Bytes;

use super::*;
use crate::contract::converters::Converters;
use crate::contract::definition::Contract;
use crate::row::value::Uuid;

fn column(name: &str, oid: u32, type_name: &str) -> TableColumn {
    TableColumn {
        name: name.into(),
        type_oid: oid,
        typmod: -1,
        type_name: type_name.into(),
        optionality: crate::router::columns::Optionality::Optional,
        default: None,
    }
}

/// The table of Debezium's outbox documentation.
fn documented_table() -> Vec<TableColumn> {
    vec![
        column("id", 2950, "uuid"),
        column("aggregatetype", 1043, "character varying(255)"),
        column("aggregateid", 1043, "character varying(255)"),
        column("type", 1043, "character varying(255)"),
        column("payload", 3802, "jsonb"),
    ]
}

fn contract(options: &[(&str, &str)], converters: Converters) -> Contract {
    let options: BTreeMap<String, String> = options
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Contract::debezium(&options, converters).unwrap()
}

fn row(values: &[Option<&str>]) -> Vec<Option<Bytes>> {
    values
        .iter()
        .map(|v| v.map(|s| Bytes::copy_from_slice(s.as_bytes())))
        .collect()
}

const ID: &str = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11";

fn text(b: Option<&[u8]>) -> Option<&str> {
    b.map(|b| std::str::from_utf8(b).unwrap())
}

/// The record for `values`, timestamped `fallback_ms` unless a column says.
fn route(
    plan: &Plan,
    values: &[Option<Bytes>],
    fallback_ms: i64,
) -> Result<Record, crate::error::Error> {
    plan.record(values, Uuid([7; 16]), Some(fallback_ms))
}

#[test]
fn the_documented_table_routes_as_the_documented_connector_does() {
    let plan = Plan::new(&contract(&[], Converters::json()), &documented_table()).unwrap();
    let r = route(
        &plan,
        &row(&[
            Some(ID),
            Some("Order"),
            Some("123"),
            Some("OrderCreated"),
            Some("{\"id\": 7, \"note\": \"a\\\"b\"}"),
        ]),
        1_700_000_000_000,
    )
    .unwrap();
    assert_eq!(r.topic, "outbox.event.Order");
    assert_eq!(text(r.key_bytes()), Some("\"123\""));
    assert_eq!(
        text(r.value_bytes()),
        Some("\"{\\\"id\\\": 7, \\\"note\\\": \\\"a\\\\\\\"b\\\"}\"")
    );
    let headers: Vec<(&str, Option<&[u8]>)> = r.headers().collect();
    assert_eq!(headers, vec![("id", Some(ID.as_bytes()))]);
    assert_eq!(r.partition, None);
    assert_eq!(r.timestamp_ms, Some(1_700_000_000_000));
    assert_eq!(r.message_id, Uuid([7; 16]));
}

#[test]
fn nulls_are_written_as_the_converters_write_them() {
    let table = documented_table();
    let values = row(&[Some(ID), Some("Order"), None, Some("t"), None]);
    // JsonConverter: a null of an optional column is the text `null`.
    let json = Plan::new(&contract(&[], Converters::json()), &table).unwrap();
    let r = route(&json, &values, 0).unwrap();
    assert_eq!(
        (text(r.key_bytes()), text(r.value_bytes())),
        (Some("null"), Some("null"))
    );
    // StringConverter keys: null; a jsonb payload goes through the delegate.
    let platform = Plan::new(&contract(&[], Converters::platform()), &table).unwrap();
    let r = route(&platform, &values, 0).unwrap();
    assert_eq!(
        (text(r.key_bytes()), text(r.value_bytes())),
        (None, Some("null"))
    );
    // A tombstone when asked for, also for blank text.
    let tomb = Plan::new(
        &contract(
            &[("route.tombstone.on.empty.payload", "true")],
            Converters::json(),
        ),
        &table,
    )
    .unwrap();
    assert_eq!(route(&tomb, &values, 0).unwrap().value_bytes(), None);
    let blank = row(&[
        Some(ID),
        Some("Order"),
        Some("1"),
        Some("t"),
        Some("\"  \""),
    ]);
    // A jsonb string is never blank text: it has its quotes.
    assert!(route(&tomb, &blank, 0).unwrap().value_bytes().is_some());
}

#[test]
fn options_place_columns_route_by_regex_and_take_the_event_time() {
    let mut table = documented_table();
    table.push(column("shard", 23, "integer"));
    table.push(column("tenant", 25, "text"));
    table.push(TableColumn {
        typmod: 3,
        ..column("occurred", 1114, "timestamp(3) without time zone")
    });
    let plan = Plan::new(
        &contract(
            &[
                (
                    "table.fields.additional.placement",
                    "type:header:eventType,tenant:envelope,shard:partition,aggregateid:envelope:ref",
                ),
                ("route.topic.regex", "(?<kind>[a-z]+)-(?<v>v[0-9]+)"),
                ("route.topic.replacement", "events.${kind}.${v}"),
                ("table.field.event.timestamp", "occurred"),
            ],
            Converters::json(),
        ),
        &table,
    )
    .unwrap();
    let r = route(
        &plan,
        &row(&[
            Some(ID),
            Some("orders-v2"),
            Some("9"),
            Some("Created"),
            Some("[1, 2]"),
            Some("3"),
            None,
            Some("2024-05-06 07:08:09.123"),
        ]),
        0,
    )
    .unwrap();
    assert_eq!(r.topic, "events.orders.v2");
    assert_eq!(r.partition, Some(3));
    assert_eq!(r.timestamp_ms, Some(1_714_979_289_123));
    let names: Vec<&str> = r.headers().map(|(n, _)| n).collect();
    assert_eq!(names, vec!["id", "eventType"]);
    assert_eq!(
        text(r.value_bytes()),
        Some("{\"payload\":\"[1, 2]\",\"tenant\":null,\"ref\":\"9\"}")
    );
}

#[test]
fn a_table_that_does_not_fit_is_told_what_and_why() {
    let mut table = documented_table();
    table.retain(|c| c.name != "aggregateid");
    table.push(column("shard", 20, "bigint"));
    table.push(column("at", 1184, "timestamp with time zone"));
    table.push(column("amount", 1700, "numeric"));
    let misfits = Plan::new(
        &contract(
            &[
                (
                    "table.fields.additional.placement",
                    "shard:partition,amount:header,gone:header",
                ),
                ("table.field.event.timestamp", "at"),
            ],
            Converters::json(),
        ),
        &table,
    )
    .unwrap_err();
    let lines: Vec<String> = misfits.iter().map(|m| format!("{}: {m}", m.code)).collect();
    assert_eq!(
        lines,
        vec![
            "CONTRACT_COLUMN_MISSING: aggregateid (key): the table has no such column",
            "CONTRACT_COLUMN_TYPE: at (event timestamp): is timestamp with time zone; the router reads a timestamp without time zone (Debezium's Timestamp or MicroTimestamp)",
            "CONTRACT_COLUMN_TYPE: shard (partition): is bigint; the router reads the partition as an integer",
            "CONTRACT_COLUMN_TYPE: amount (header): is numeric, whose Debezium form the relay does not reproduce (uuid, text, varchar, char, smallint, integer, bigint, boolean, jsonb, json, bytea, timestamp, timestamptz)",
            "CONTRACT_COLUMN_MISSING: gone (header): the table has no such column",
        ]
    );
    // `ignore` drops a missing additional column, as the router does.
    let plan = Plan::new(
        &contract(
            &[
                ("table.fields.additional.placement", "gone:header"),
                ("table.field.additional.missing", "ignore"),
            ],
            Converters::json(),
        ),
        &documented_table(),
    );
    assert!(plan.is_ok());
}

#[test]
fn a_row_without_a_legal_topic_is_refused_with_a_row_code() {
    let plan = Plan::new(&contract(&[], Converters::json()), &documented_table()).unwrap();
    for (routing, detail) in [
        (None, "the routing column is NULL: the record has no topic"),
        (
            Some("a/b"),
            "\"outbox.event.a/b\" is not a legal Kafka topic name",
        ),
    ] {
        let e = route(
            &plan,
            &row(&[Some(ID), routing, Some("1"), Some("t"), Some("{}")]),
            0,
        )
        .unwrap_err();
        assert_eq!(
            (e.code().as_str(), e.detail()),
            ("ILLEGAL_TOPIC_NAME", detail)
        );
    }
    let mut table = documented_table();
    table.push(column("shard", 23, "integer"));
    let plan = Plan::new(
        &contract(
            &[("table.fields.additional.placement", "shard:partition")],
            Converters::json(),
        ),
        &table,
    )
    .unwrap();
    let e = route(
        &plan,
        &row(&[
            Some(ID),
            Some("x"),
            Some("1"),
            Some("t"),
            Some("{}"),
            Some("seven"),
        ]),
        0,
    )
    .unwrap_err();
    assert_eq!(
        (e.code().as_str(), e.detail()),
        ("ROW_UNDECODABLE", "shard: \"seven\" is not an integer")
    );
}
