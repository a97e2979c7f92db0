//! The parity cases: each contract and option on a table of its own, with
//! rows that give it something to decide.

use super::{Case, Made, Placed};

/// The table of Debezium's outbox documentation and its defaults, with the
/// payloads that break JSON round trips.
pub(super) const DOCUMENTED: Case = Case {
    label: "rdoc",
    columns: "id uuid NOT NULL PRIMARY KEY, aggregatetype varchar(255) NOT NULL, \
              aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb",
    outbox: "contract = \"debezium\"",
    router: "",
    rows: r#"
INSERT INTO corpus VALUES
 ('00000000-0000-4000-8000-000000000001', '{p}Order', 'o-1', 'OrderCreated', '{"id": 1, "lines": [{"sku": "a", "qty": 2}]}'),
 ('00000000-0000-4000-8000-000000000002', '{p}Order', 'o-1', 'OrderPaid', '{"big": 123456789012345678901234567890, "neg": -42, "dec": 1.10, "exp": 1e-7, "zero": -0, "small": -1.5E+300}'),
 ('00000000-0000-4000-8000-000000000003', '{p}Customer', 'c-é', 'Unicode', '{"s": "\u00e9 \ud83d\ude00 𝄞 \"q\" back\\slash \u0001 tab\t"}'),
 ('00000000-0000-4000-8000-000000000004', '{p}Customer', 'c-2', 'Deep', '[[[[[[[[[[[[[[[[[[[[{"d": [[[]]]}]]]]]]]]]]]]]]]]]]]]'),
 ('00000000-0000-4000-8000-000000000005', '{p}Order', 'o-3', 'Empty', '{}'),
 ('00000000-0000-4000-8000-000000000006', '{p}Order', 'o-3', 'EmptyArray', '[]'),
 ('00000000-0000-4000-8000-000000000007', '{p}Order', 'o-3', 'Mixed', '[1, "a", null, true, {"x": null}, [], 2.50]'),
 ('00000000-0000-4000-8000-000000000008', '{p}Order', 'o-4', 'NullMembers', '{"a": null, "b": {"c": null}}'),
 ('00000000-0000-4000-8000-000000000009', '{p}Order', 'o-4', 'Scalar', '"just a string that {looks} like [json]"'),
 ('00000000-0000-4000-8000-00000000000a', '{p}Order', 'o-4', 'Number', '-0.000'),
 ('00000000-0000-4000-8000-00000000000b', '{p}Order', 'o-4', 'JsonNull', 'null'),
 ('00000000-0000-4000-8000-00000000000c', '{p}Order', 'o-5', 'SqlNull', NULL),
 ('00000000-0000-4000-8000-00000000000d', '{p}Order', 'o-5', 'Whitespace', '   {"lead": true}   ');
"#,
    topics: &[
        ("outbox.event.{p}Order", 1),
        ("outbox.event.{p}Customer", 1),
    ],
    made: Made::Beforehand,
    placed: Placed::No,
    debezium: "",
    tables: "",
};

/// The user's own columns, every option that decides bytes at once, and
/// the platform's converters.
pub(super) const CUSTOM: Case = Case {
    label: "rcus",
    columns: "event_id text NOT NULL PRIMARY KEY, kind varchar(64), ref text, body text, \
              kind_of text, tenant text, shard integer, occurred timestamp(3), version integer",
    outbox: "contract = \"debezium\"\nconverters = \"platform\"",
    router: r#"
"table.field.event.id" = "event_id"
"table.field.event.key" = "ref"
"table.field.event.payload" = "body"
"table.field.event.timestamp" = "occurred"
"table.field.event.schema.version" = "version"
"route.by.field" = "kind"
"route.topic.regex" = "(?<kind>[a-z]+)-(?<v>v[0-9]+)"
"route.topic.replacement" = "{p}${kind}.${v}"
"route.tombstone.on.empty.payload" = "true"
"table.fields.additional.placement" = "kind_of:header:eventType,tenant:envelope,shard:partition,ref:header"
"table.op.invalid.behavior" = "warn"
"#,
    rows: r#"
INSERT INTO corpus VALUES
 ('e1', 'orders-v1', 'k1', '{"a":1}', 'Created', 'acme', 0, '2024-05-06 07:08:09.123', 1),
 ('e2', 'orders-v1', 'k1', '   ', 'Blank', 'acme', 1, '2024-05-06 07:08:09.124', 1),
 ('e3', 'orders-v1', NULL, NULL, 'NullBody', NULL, 2, '2000-01-01 00:00:00', 1),
 ('e4', 'orders-v1', 'k2', '{"a":', 'NotJson', 'ümlaut "q"', NULL, '1970-01-01 00:00:00.001', 2),
 ('e5', 'orders-v1', 'k3', E'\t\n', 'Control', E'tab\there', 2, '2000-02-29 12:00:00.5', 2),
 ('e6', 'orders-v2', 'k4', '😀', 'Emoji', '𝄞', 1, '2025-12-31 23:59:59.999', 2);
"#,
    topics: &[("{p}orders.v1", 3), ("{p}orders.v2", 3)],
    made: Made::Beforehand,
    placed: Placed::Yes,
    debezium: "",
    tables: "",
};

/// `table.expand.json.payload` on the documented table: what Java expands,
/// and what it keeps as text.
pub(super) const EXPANDED: Case = Case {
    label: "rexp",
    columns: "id uuid NOT NULL PRIMARY KEY, aggregatetype varchar(255) NOT NULL, \
              aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb",
    outbox: "contract = \"debezium\"",
    router: r#""table.expand.json.payload" = "true""#,
    rows: r#"
INSERT INTO corpus VALUES
 ('00000000-0000-4000-8000-000000000101', '{p}Order', 'o-1', 'Lines', '{"id": 1, "lines": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 3}]}'),
 ('00000000-0000-4000-8000-000000000102', '{p}Order', 'o-1', 'Numbers', '{"neg": -42, "dec": 1.10, "exp": 1e-7, "tiny": 2.5e-5, "zero": -0, "l": 3000000000, "half": 0.5, "price": 19.99, "e7": 12345678.5}'),
 ('00000000-0000-4000-8000-000000000104', '{p}Order', 'o-2', 'Unicode', '{"s": "\u00e9 \ud83d\ude00 𝄞 \"q\" back\\slash \u0001 tab\t", "k\u00e9y": true}'),
 ('00000000-0000-4000-8000-000000000105', '{p}Order', 'o-3', 'Deep', '{"a": {"b": {"c": {"d": [[1, 2], [3]], "e": {"f": [true, false]}}}}}'),
 ('00000000-0000-4000-8000-000000000106', '{p}Order', 'o-3', 'Empty', '{}'),
 ('00000000-0000-4000-8000-000000000108', '{p}Order', 'o-4', 'Emptiness', '{"e": [], "o": {}, "n": null, "a": [null, 1], "z": "last"}'),
 ('00000000-0000-4000-8000-000000000109', '{p}Order', 'o-4', 'Scalar', '"a string"'),
 ('00000000-0000-4000-8000-00000000010a', '{p}Order', 'o-4', 'Number', '123'),
 ('00000000-0000-4000-8000-00000000010b', '{p}Order', 'o-5', 'JsonNull', 'null'),
 ('00000000-0000-4000-8000-00000000010c', '{p}Order', 'o-5', 'SqlNull', NULL),
 ('00000000-0000-4000-8000-00000000010d', '{p}Order', 'o-5', 'Mixed', '{"m": [1, "a"]}'),
 ('00000000-0000-4000-8000-00000000010e', '{p}Order', 'o-6', 'MixedNumbers', '{"m": [1, 2.5]}'),
 ('00000000-0000-4000-8000-00000000010f', '{p}Order', 'o-6', 'NestedEmpty', '{"m": [[]]}'),
 ('00000000-0000-4000-8000-000000000110', '{p}Order', 'o-6', 'AllNull', '{"m": [null, null], "ok": 1}'),
 ('00000000-0000-4000-8000-000000000111', '{p}Order', 'o-7', 'Longs', '{"m": [3000000000, 4000000000], "i": [1, 2]}');
"#,
    topics: &[("outbox.event.{p}Order", 1)],
    made: Made::Beforehand,
    placed: Placed::No,
    debezium: "",
    tables: "",
};

/// Expansion with an envelope field, tombstones on empty payloads and
/// `optional_bytes` nulls, over a text column: text that only looks like
/// JSON, leading whitespace, trailing text, blank text.
pub(super) const EXPANDED_ENVELOPE: Case = Case {
    label: "renv",
    columns: "id text NOT NULL PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text, \
              type text, payload text",
    outbox: "contract = \"debezium\"",
    router: r#"
"table.expand.json.payload" = "true"
"table.json.payload.null.behavior" = "optional_bytes"
"route.tombstone.on.empty.payload" = "true"
"table.fields.additional.placement" = "type:envelope:eventType,aggregateid:header:ref"
"#,
    rows: r#"
INSERT INTO corpus VALUES
 ('x1', '{p}Order', 'k1', 'Created', '{"a":1,"n":null,"l":[null,"x"]}'),
 ('x2', '{p}Order', 'k1', 'Trailing', '{"a":2} and then some'),
 ('x3', '{p}Order', 'k2', 'Leading', '  {"a":3}'),
 ('x4', '{p}Order', 'k2', 'Broken', '{"a":'),
 ('x5', '{p}Order', 'k3', 'Blank', '   '),
 ('x6', '{p}Order', 'k3', 'Null', NULL),
 ('x7', '{p}Order', NULL, NULL, E'{"raw":"tab	here"}'),
 ('x8', '{p}Order', 'k4', 'LeadingZero', '{"a":01}'),
 ('x9', '{p}Order', 'k4', 'Dup', '{"a":1,"b":2,"a":3}'),
 ('xa', '{p}Order', 'k5', 'EmptyMember', '{"e":[],"o":{}}');
"#,
    topics: &[("outbox.event.{p}Order", 1)],
    made: Made::Beforehand,
    placed: Placed::No,
    debezium: "",
    tables: "",
};

/// A table with a column for each option to name, and rows that give
/// each option something to decide.
const WIDE_COLUMNS: &str = "id uuid NOT NULL PRIMARY KEY, aggregatetype varchar(255) NOT NULL, \
    aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb, ev text, \
    tenant text, note text, shard integer, occurred timestamp(3), ver integer";

const WIDE_ROWS: &str = r#"
INSERT INTO corpus VALUES
 ('00000000-0000-4000-8000-000000000301', '{p}Order', 'o-1', '{p}Created', '{"a": [1, 2], "n": null}', 'ev-1', 'acme', 'first', 0, '2024-05-06 07:08:09.123', 1),
 ('00000000-0000-4000-8000-000000000302', '{p}Order', 'o-1', '{p}Paid', NULL, 'ev-2', NULL, '  ', 1, '2024-05-06 07:08:09.124', 2),
 ('00000000-0000-4000-8000-000000000303', '{p}Customer', 'c-1', '{p}Created', '{"s": "é😀\"q\""}', 'ev-3', 'ümlaut', NULL, 2, '2000-01-01 00:00:00', NULL),
 ('00000000-0000-4000-8000-000000000304', '{p}Customer', 'c-2', '{p}Paid', '[]', 'ev-4', '', E'tab\t', NULL, '2020-02-29 12:00:00.5', 3);
"#;

/// Columns with defaults: where the router calls `Struct.get` (the id, the
/// key, the payload, headers and envelope fields) a NULL reads as the
/// default Debezium parsed from the catalog; a function's default is
/// Debezium's placeholder, a quoted one what stands before the first
/// closing quote.
pub(super) const DEFAULTS: Case = Case {
    label: "rdef",
    columns: "id uuid NOT NULL PRIMARY KEY, aggregatetype varchar(255) NOT NULL, \
              aggregateid varchar(255) DEFAULT 'k-default', type varchar(255), \
              payload jsonb DEFAULT '{\"d\": 1}', tenant text DEFAULT 'it''s', ver integer DEFAULT 7, \
              flag boolean DEFAULT true, big bigint DEFAULT -5, made timestamptz DEFAULT now(), \
              fixed timestamptz DEFAULT '2020-02-02 02:02:02+00', ts3 timestamp(3) DEFAULT '2021-03-04 05:06:07.891', \
              ts6 timestamp DEFAULT now(), u uuid DEFAULT gen_random_uuid(), nothing text DEFAULT NULL, \
              small smallint DEFAULT '3'::smallint, ch char(3) DEFAULT 'ab'",
    outbox: "contract = \"debezium\"",
    router: r#"
"route.tombstone.on.empty.payload" = "true"
"table.fields.additional.placement" = "tenant:header,ver:header,flag:header,big:header,made:header,fixed:header,ts3:header,ts6:header,u:header,nothing:header,small:header,ch:header,tenant:envelope:t"
"#,
    rows: r#"
INSERT INTO corpus (id, aggregatetype) VALUES ('00000000-0000-4000-8000-000000000501', '{p}Order');
INSERT INTO corpus VALUES
 ('00000000-0000-4000-8000-000000000502', '{p}Order', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 ('00000000-0000-4000-8000-000000000503', '{p}Order', 'o-3', 'T', '{"x": 2}', 'acme', 9, false, 12, '2024-05-06 07:08:09+02', '2024-05-06 07:08:09.5+00', '2024-05-06 07:08:09.123', '2024-05-06 07:08:09.123456', '00000000-0000-4000-8000-0000000000ff', 'n', 4, 'xyz');
"#,
    topics: &[("outbox.event.{p}Order", 1)],
    made: Made::Beforehand,
    placed: Placed::No,
    debezium: "",
    tables: "",
};

/// Every option that decides bytes, alone, on the wide table.
macro_rules! alone {
    ($label:literal, $router:literal, $topics:expr, $placed:expr) => {
        Case {
            label: $label,
            columns: WIDE_COLUMNS,
            outbox: "contract = \"debezium\"",
            router: $router,
            rows: WIDE_ROWS,
            topics: $topics,
            made: Made::Beforehand,
            placed: $placed,
            debezium: "",
            tables: "",
        }
    };
}

const BY_AGGREGATE: &[(&str, i32)] = &[
    ("outbox.event.{p}Order", 1),
    ("outbox.event.{p}Customer", 1),
];

pub(super) const ALONE: &[Case] = &[
    alone!("oid", r#""table.field.event.id" = "ev""#, BY_AGGREGATE, Placed::No),
    alone!("okey", r#""table.field.event.key" = "tenant""#, BY_AGGREGATE, Placed::No),
    alone!("opay", r#""table.field.event.payload" = "note""#, BY_AGGREGATE, Placed::No),
    alone!("ots", r#""table.field.event.timestamp" = "occurred""#, BY_AGGREGATE, Placed::Yes),
    alone!("over", r#""table.field.event.schema.version" = "ver""#, BY_AGGREGATE, Placed::No),
    alone!("ohdr", r#""table.fields.additional.placement" = "type:header:eventType,tenant:header""#, BY_AGGREGATE, Placed::No),
    alone!("oenv", r#""table.fields.additional.placement" = "tenant:envelope,type:envelope:kind""#, BY_AGGREGATE, Placed::No),
    alone!("opart", r#""table.fields.additional.placement" = "shard:partition""#, &[("outbox.event.{p}Order", 3), ("outbox.event.{p}Customer", 3)], Placed::Partition),
    alone!("omiss", "\"table.fields.additional.placement\" = \"gone:header,type:header\"\n\"table.field.additional.missing\" = \"ignore\"", BY_AGGREGATE, Placed::No),
    alone!("oroute", r#""route.by.field" = "type""#, &[("outbox.event.{p}Created", 1), ("outbox.event.{p}Paid", 1)], Placed::No),
    alone!("oregex", "\"route.topic.regex\" = \"(?<pre>.*\\\\.)(?<kind>[A-Za-z]+)\"\n\"route.topic.replacement\" = \"${pre}events.${kind}\"", &[("{p}events.Order", 1), ("{p}events.Customer", 1)], Placed::No),
    alone!("otomb", r#""route.tombstone.on.empty.payload" = "true""#, BY_AGGREGATE, Placed::No),
    alone!("oexp", r#""table.expand.json.payload" = "true""#, BY_AGGREGATE, Placed::No),
    alone!("onull", "\"table.expand.json.payload\" = \"true\"\n\"table.json.payload.null.behavior\" = \"optional_bytes\"", BY_AGGREGATE, Placed::No),
    alone!("oop", r#""table.op.invalid.behavior" = "error""#, BY_AGGREGATE, Placed::No),
];

/// The documented configuration with the connector on decoderbufs,
/// Debezium's default plugin: the router's records are the same whichever
/// plugin fed it (PostgreSQL 15 only: Debian packages decoderbufs for it).
pub(super) const DECODERBUFS: Case = Case {
    label: "odbufs",
    debezium: r#"plugin_name = "decoderbufs""#,
    ..DEFAULTS_ON_WIDE
};

/// Topics the connector's worker creates with 3 partitions where the
/// broker's default is 1: every key lands on the partition Kafka's
/// partitioner gives it among 3, for Debezium and for the relay.
pub(super) const TOPIC_CREATION: Case = Case {
    label: "otopic",
    topics: &[("outbox.event.{p}Order", 3), ("outbox.event.{p}Customer", 3)],
    made: Made::ByTheConnector,
    placed: Placed::Partition,
    tables: "[kafka.topic_creation]\n\"default.partitions\" = \"3\"\n\"default.replication.factor\" = \"-1\"",
    ..DEFAULTS_ON_WIDE
};

/// The router's defaults on the wide table: what the two cases above vary.
const DEFAULTS_ON_WIDE: Case = alone!("owide", "", BY_AGGREGATE, Placed::No);
