//! Every converter a PostgreSQL outbox deployment uses, for keys, values
//! and headers, against real Debezium 3.6.1 on the same rows: on the
//! documented table with expansion off and on (StringConverter's
//! `Struct.toString()` of expanded payloads and envelopes), on a bytea
//! table (ByteArrayConverter), and BinaryDataConverter with a delegate.
//! PostgreSQL 15 only: the converters decide bytes after the database.

use super::{Case, Made, Placed};

/// The documented table's columns.
const DOCUMENTED_COLUMNS: &str =
    "id uuid NOT NULL PRIMARY KEY, aggregatetype varchar(255) NOT NULL, \
              aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb";

/// Payloads for `Struct.toString()`: nesting, lists with nulls, doubles as
/// Java writes them, and the ones whose expansion fails in Debezium's
/// JsonConverter but not in `toString()`.
const PAYLOADS: &str = r#"
INSERT INTO corpus VALUES
 ('00000000-0000-4000-8000-000000000601', '{p}Order', 'o-1', 'Lines', '{"id": 1, "lines": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 3}]}'),
 ('00000000-0000-4000-8000-000000000602', '{p}Order', 'o-1', 'Numbers', '{"neg": -42, "dec": 1.10, "exp": 1e-7, "l": 3000000000, "e7": 12345678.5, "z": -0.0}'),
 ('00000000-0000-4000-8000-000000000603', '{p}Order', 'o-2', 'Lists', '{"a": [null, 1], "s": ["x", "y z"], "d": [[1, 2], [3]], "b": [true]}'),
 ('00000000-0000-4000-8000-000000000604', '{p}Order', 'o-2', 'Nulls', '{"n": null, "o": {"p": null, "q": "r"}, "e": {}}'),
 ('00000000-0000-4000-8000-000000000605', '{p}Order', 'o-3', 'TopArray', '[1, 2]'),
 ('00000000-0000-4000-8000-000000000606', '{p}Order', 'o-3', 'Big', '{"big": 123456789012345678901234567890}'),
 ('00000000-0000-4000-8000-000000000607', '{p}Order', 'o-3', 'Text', '"a string"'),
 ('00000000-0000-4000-8000-000000000608', '{p}Order', 'o-4', 'Unicode', '{"s": "é 😀 \"q\" back\\slash, =}"}'),
 ('00000000-0000-4000-8000-000000000609', '{p}Order', 'o-4', 'SqlNull', NULL),
 ('00000000-0000-4000-8000-00000000060a', '{p}Order', 'o-4', 'Empty', '{}');
"#;

const STRING_SET: &str = r#"contract = "debezium"
converters = { "key.converter" = "org.apache.kafka.connect.storage.StringConverter", "value.converter" = "org.apache.kafka.connect.storage.StringConverter", "header.converter" = "org.apache.kafka.connect.json.JsonConverter", "header.converter.schemas.enable" = "false" }"#;

const TOPICS: &[(&str, i32)] = &[("outbox.event.{p}Order", 1)];

const CASES: &[Case] = &[
    // StringConverter keys and values, JsonConverter headers (no schemas).
    Case {
        label: "cstr",
        columns: DOCUMENTED_COLUMNS,
        outbox: STRING_SET,
        router: r#""table.fields.additional.placement" = "type:header:eventType""#,
        rows: PAYLOADS,
        topics: TOPICS,
        made: Made::Beforehand,
        placed: Placed::No,
        debezium: "",
        tables: "",
    },
    // The same with expansion: `Struct.toString()` of the payload, and the
    // text where Debezium's expansion leaves the string.
    Case {
        label: "cstrx",
        columns: DOCUMENTED_COLUMNS,
        outbox: STRING_SET,
        router: r#""table.expand.json.payload" = "true""#,
        rows: PAYLOADS,
        topics: TOPICS,
        made: Made::Beforehand,
        placed: Placed::No,
        debezium: "",
        tables: "",
    },
    // An envelope under StringConverter: `Struct{payload=...,eventType=...}`.
    Case {
        label: "cstre",
        columns: DOCUMENTED_COLUMNS,
        outbox: STRING_SET,
        router: "\"table.expand.json.payload\" = \"true\"\n\"table.fields.additional.placement\" = \"type:envelope:eventType,aggregateid:envelope\"",
        rows: r#"
INSERT INTO corpus VALUES
 ('00000000-0000-4000-8000-000000000611', '{p}Order', 'o-1', 'Lines', '{"id": 1, "lines": [{"sku": "a"}]}'),
 ('00000000-0000-4000-8000-000000000612', '{p}Order', 'o-2', 'Text', '"a string"'),
 ('00000000-0000-4000-8000-000000000613', '{p}Order', 'o-3', 'SqlNull', NULL);
"#,
        topics: TOPICS,
        made: Made::Beforehand,
        placed: Placed::No,
        debezium: "",
        tables: "",
    },
    // ByteArrayConverter keys and values on bytes columns, JSON headers of
    // bytes (base64) and integers.
    Case {
        label: "cbytes",
        columns: "id uuid NOT NULL PRIMARY KEY, aggregatetype varchar(255) NOT NULL, \
                  aggregateid bytea, type varchar(255), payload bytea, n integer",
        outbox: r#"contract = "debezium"
converters = { "key.converter" = "org.apache.kafka.connect.converters.ByteArrayConverter", "value.converter" = "org.apache.kafka.connect.converters.ByteArrayConverter", "header.converter" = "org.apache.kafka.connect.json.JsonConverter", "header.converter.schemas.enable" = "false" }"#,
        router: r#""table.fields.additional.placement" = "aggregateid:header:raw,n:header,type:header""#,
        rows: r#"
INSERT INTO corpus VALUES
 ('00000000-0000-4000-8000-000000000621', '{p}Order', '\x6b31', 'T', '\x00ff7b7d', 7),
 ('00000000-0000-4000-8000-000000000622', '{p}Order', NULL, NULL, NULL, NULL),
 ('00000000-0000-4000-8000-000000000623', '{p}Order', '\x', 'T', '\x', -1);
"#,
        topics: TOPICS,
        made: Made::Beforehand,
        placed: Placed::No,
        debezium: "",
        tables: "",
    },
    // BinaryDataConverter delegating to StringConverter for values and to
    // JsonConverter for keys: bytes as they are, the rest delegated.
    Case {
        label: "cdeleg",
        columns: "id uuid NOT NULL PRIMARY KEY, aggregatetype varchar(255) NOT NULL, \
                  aggregateid varchar(255), type varchar(255), payload jsonb, raw bytea",
        outbox: r#"contract = "debezium"
converters = { "key.converter" = "io.debezium.converters.BinaryDataConverter", "key.converter.delegate.converter.type" = "org.apache.kafka.connect.json.JsonConverter", "key.converter.delegate.converter.type.schemas.enable" = "false", "value.converter" = "io.debezium.converters.BinaryDataConverter", "value.converter.delegate.converter.type" = "org.apache.kafka.connect.storage.StringConverter" }"#,
        router: "\"table.expand.json.payload\" = \"true\"\n\"table.fields.additional.placement\" = \"raw:header\"",
        rows: r#"
INSERT INTO corpus VALUES
 ('00000000-0000-4000-8000-000000000631', '{p}Order', 'o-1', 'T', '{"a": [1, 2], "b": {"c": 1.5}}', '\x0102'),
 ('00000000-0000-4000-8000-000000000632', '{p}Order', NULL, 'T', '[1, 2]', NULL),
 ('00000000-0000-4000-8000-000000000633', '{p}Order', 'o-3', NULL, NULL, '\x');
"#,
        topics: TOPICS,
        made: Made::Beforehand,
        placed: Placed::No,
        debezium: "",
        tables: "",
    },
    // JsonConverter with schemas for keys, values and headers: Debezium's
    // column schemas (logical names, NOT NULL, defaults).
    Case {
        label: "cjs",
        columns: SCHEMA_COLUMNS,
        outbox: JSON_SCHEMAS,
        router: r#""table.fields.additional.placement" = "type:header:eventType,n:header,at:header""#,
        rows: SCHEMA_ROWS,
        topics: TOPICS,
        made: Made::Beforehand,
        placed: Placed::No,
        debezium: "",
        tables: "",
    },
    // With expansion: the inferred schema, its structs named by their path.
    Case {
        label: "cjsx",
        columns: DOCUMENTED_COLUMNS,
        outbox: JSON_SCHEMAS,
        router: r#""table.expand.json.payload" = "true""#,
        rows: PAYLOADS_JSON,
        topics: TOPICS,
        made: Made::Beforehand,
        placed: Placed::No,
        debezium: "",
        tables: "",
    },
    // An envelope with a schema version: the struct named after the first
    // routed value of each version, the version in the schema.
    Case {
        label: "cjse",
        columns: "id uuid NOT NULL PRIMARY KEY, aggregatetype varchar(255) NOT NULL, \
                  aggregateid varchar(255) NOT NULL, type varchar(255), payload jsonb, ver integer",
        outbox: JSON_SCHEMAS,
        router: "\"table.expand.json.payload\" = \"true\"\n\"table.field.event.schema.version\" = \"ver\"\n\"table.fields.additional.placement\" = \"type:envelope:eventType\"",
        rows: r#"
INSERT INTO corpus VALUES
 ('00000000-0000-4000-8000-000000000641', '{p}Order', 'o-1', 'Created', '{"id": 1, "l": [{"s": "a"}]}', 1),
 ('00000000-0000-4000-8000-000000000642', '{p}Customer', 'c-1', 'Created', '{"id": 2, "l": [{"s": "b"}]}', 1),
 ('00000000-0000-4000-8000-000000000643', '{p}Customer', 'c-2', NULL, '{"name": "x"}', 2),
 ('00000000-0000-4000-8000-000000000644', '{p}Order', 'o-2', 'Paid', '{"name": "y"}', 2),
 ('00000000-0000-4000-8000-000000000645', '{p}Order', 'o-3', 'Text', '"a string"', NULL);
"#,
        topics: &[("outbox.event.{p}Order", 1), ("outbox.event.{p}Customer", 1)],
        made: Made::Beforehand,
        placed: Placed::No,
        debezium: "",
        tables: "",
    },
];

const JSON_SCHEMAS: &str = r#"contract = "debezium"
converters = { "key.converter" = "org.apache.kafka.connect.json.JsonConverter", "key.converter.schemas.enable" = "true", "value.converter" = "org.apache.kafka.connect.json.JsonConverter", "value.converter.schemas.enable" = "true", "header.converter" = "org.apache.kafka.connect.json.JsonConverter", "header.converter.schemas.enable" = "true" }"#;

/// Every column type with its schema, NOT NULL and nullable, with defaults.
const SCHEMA_COLUMNS: &str = "id uuid NOT NULL PRIMARY KEY, aggregatetype varchar(255) NOT NULL, \
                  aggregateid varchar(255) NOT NULL DEFAULT 'k', type text, payload jsonb DEFAULT '{}', \
                  n bigint DEFAULT 5, at timestamptz";

const SCHEMA_ROWS: &str = r#"
INSERT INTO corpus VALUES
 ('00000000-0000-4000-8000-000000000651', '{p}Order', 'o-1', 'T', '{"a": 1}', 7, '2024-05-06 07:08:09.5+02'),
 ('00000000-0000-4000-8000-000000000652', '{p}Order', 'o-2', NULL, NULL, NULL, NULL);
"#;

/// The expansion payloads JsonConverter writes (no top-level array, no
/// integer beyond long: they fail Debezium's task).
const PAYLOADS_JSON: &str = r#"
INSERT INTO corpus VALUES
 ('00000000-0000-4000-8000-000000000661', '{p}Order', 'o-1', 'Lines', '{"id": 1, "lines": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 3}]}'),
 ('00000000-0000-4000-8000-000000000662', '{p}Order', 'o-1', 'Numbers', '{"neg": -42, "dec": 1.10, "l": 3000000000, "t": true}'),
 ('00000000-0000-4000-8000-000000000663', '{p}Order', 'o-2', 'Nested', '{"o": {"p": {"q": "r"}}, "d": [[1, 2], [3]], "dd": [[{"x": 1}]]}'),
 ('00000000-0000-4000-8000-000000000664', '{p}Order', 'o-2', 'Text', '"a string"'),
 ('00000000-0000-4000-8000-000000000665', '{p}Order', 'o-3', 'SqlNull', NULL),
 ('00000000-0000-4000-8000-000000000666', '{p}Order', 'o-3', 'Empty', '{}');
"#;

#[tokio::test]
async fn every_converter_writes_debeziums_bytes() {
    super::parity("converter", CASES).await;
}
