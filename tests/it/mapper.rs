//! The messaging contract's records of fixture rows, decoded through the
//! same path as streamed rows and routed by the contract's plan, as the
//! relay routes them. Snapshots in `snapshots/` pin the whole mapping; a few
//! literals are checked directly as well.

use outbox_cdc::contract::definition::Contract;
use outbox_cdc::error::Error;
use outbox_cdc::router::{Plan, Record};
use outbox_cdc::row::value::parse_timestamptz;
use outbox_cdc::row::OutboxRow;

type Overrides<'a> = Vec<(&'a str, Option<&'a str>)>;

/// A row as text values, decoded as streamed rows are; `overrides` replace
/// the base values by column name.
fn row(overrides: &[(&str, Option<&str>)]) -> OutboxRow {
    let base: [(&str, Option<&str>); 29] = [
        ("message_id", Some("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")),
        ("destination", Some("orders")),
        ("message_type", Some("OrderPlaced")),
        ("message_version", Some("3")),
        ("content_type", Some("application/json")),
        ("payload", Some("\\x7b2261223a317d")),
        ("headers", Some("{\"x-app\": \"v\"}")),
        ("status", Some("PENDING")),
        ("attempts", Some("0")),
        ("created_at", Some("2024-05-06 07:08:09.1+00")),
        ("published_at", None),
        ("lease_expires_at", None),
        ("lease_owner", None),
        ("lease_token", Some("0")),
        ("next_attempt_at", None),
        ("last_failure_code", None),
        ("producer", Some("shop")),
        ("occurred_at", Some("2024-05-06 09:08:09.123456+02")),
        ("correlation_id", Some("c-1")),
        ("causation_id", None),
        ("tenant", Some("acme")),
        ("partition_key", Some("customer-42")),
        ("ordering_key", Some("o-1")),
        (
            "traceparent",
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        ),
        ("tracestate", Some("a=b")),
        ("baggage", Some("k=v")),
        ("schema_subject", Some("orders-value")),
        ("schema_uri", Some("https://s/1")),
        ("routing_key", Some("customer-42")),
    ];
    OutboxRow::from_text(base.iter().map(|(name, value)| {
        let value = overrides
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
            .unwrap_or(*value);
        (*name, value)
    }))
}

pub(crate) fn map(overrides: &[(&str, Option<&str>)]) -> Result<Record, Error> {
    let commit = parse_timestamptz("2024-05-06 07:08:10.5+00").unwrap();
    let plan = Plan::of_definition(&Contract::messaging("outbox.")).unwrap();
    let row = row(overrides);
    let id = row
        .message_id()
        .unwrap_or(outbox_cdc::row::value::Uuid([0; 16]));
    plan.record(&row, id, commit.unix_millis())
}

fn render(result: &Result<Record, Error>) -> String {
    match result {
        Err(refusal) => format!("REFUSED {refusal}\n"),
        Ok(r) => {
            let mut out = format!(
                "topic: {}\nkey: {:?}\nvalue: {:?}\ntimestamp_ms: {:?}\nheaders:\n",
                r.topic,
                String::from_utf8_lossy(&r.key),
                String::from_utf8_lossy(&r.value),
                r.timestamp_ms
            );
            for (name, value) in r.headers() {
                match value {
                    None => out.push_str(&format!("  {name}: null\n")),
                    Some(v) => {
                        out.push_str(&format!("  {name}: {:?}\n", String::from_utf8_lossy(v)))
                    }
                }
            }
            out
        }
    }
}

#[test]
fn fixture_rows_map_as_pinned() {
    let long_destination = "d".repeat(243);
    let cases: Vec<(&str, Overrides)> = vec![
        ("full_row", vec![]),
        (
            "nulls_everywhere_allowed",
            vec![
                ("headers", Some("{}")),
                ("payload", Some("\\x")),
                ("producer", None),
                ("occurred_at", None),
                ("correlation_id", None),
                ("tenant", None),
                ("partition_key", None),
                ("ordering_key", None),
                ("traceparent", None),
                ("tracestate", None),
                ("baggage", None),
                ("schema_subject", None),
                ("schema_uri", None),
                ("routing_key", Some("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")),
            ],
        ),
        (
            "extreme_values",
            vec![
                ("message_version", Some("-2147483648")),
                ("created_at", Some("0001-01-01 00:00:00+00 BC")),
                ("correlation_id", Some("😀 \"q\" \\")),
            ],
        ),
        (
            "reserved_header_name",
            vec![("headers", Some("{\"msg.type\": \"spoof\"}"))],
        ),
        (
            "reserved_id_header",
            vec![("headers", Some("{\"ID\": \"x\"}"))],
        ),
        ("headers_not_flat", vec![("headers", Some("{\"a\": 1}"))]),
        ("illegal_topic", vec![("destination", Some("orders/v1"))]),
        (
            "topic_too_long",
            vec![("destination", Some(long_destination.as_str()))],
        ),
        (
            "undecodable_timestamp",
            vec![("created_at", Some("yesterday"))],
        ),
        (
            "infinite_timestamp",
            vec![
                ("created_at", Some("infinity")),
                ("occurred_at", Some("-infinity")),
            ],
        ),
        ("missing_routing_key", vec![("routing_key", None)]),
    ];
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(concat!(env!("CARGO_MANIFEST_DIR"), "/snapshots"));
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| {
        for (name, overrides) in cases {
            insta::assert_snapshot!(format!("mapper_{name}"), render(&map(&overrides)));
        }
    });
}

#[test]
fn the_full_row_has_the_contract_bytes() {
    let r = map(&[]).unwrap();
    assert_eq!(r.topic, "outbox.orders");
    assert_eq!(&r.key[..], b"customer-42");
    assert_eq!(&r.value[..], b"{\"a\":1}");
    assert_eq!(r.timestamp_ms, Some(1_714_979_290_500));
    let names: Vec<&str> = r.headers().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "id",
            "msg.type",
            "msg.version",
            "msg.content-type",
            "msg.created-at",
            "msg.destination",
            "msg.producer",
            "msg.occurred-at",
            "msg.correlation-id",
            "msg.causation-id",
            "msg.tenant",
            "msg.partition-key",
            "msg.ordering-key",
            "traceparent",
            "tracestate",
            "baggage",
        ]
    );
    let get = |n: &str| {
        r.headers()
            .find(|(h, _)| *h == n)
            .unwrap()
            .1
            .map(<[u8]>::to_vec)
    };
    assert_eq!(
        get("msg.created-at").as_deref(),
        Some(&b"2024-05-06T07:08:09.100000Z"[..])
    );
    assert_eq!(
        get("msg.occurred-at").as_deref(),
        Some(&b"2024-05-06T07:08:09.123456Z"[..])
    );
    assert_eq!(get("msg.causation-id"), None);
    // Infinite timestamps are published as Debezium 3.6.1 publishes them.
    let inf = map(&[
        ("created_at", Some("infinity")),
        ("occurred_at", Some("-infinity")),
    ])
    .unwrap();
    let get_inf = |n: &str| {
        inf.headers()
            .find(|(h, _)| *h == n)
            .unwrap()
            .1
            .map(<[u8]>::to_vec)
    };
    assert_eq!(get_inf("msg.created-at").as_deref(), Some(&b"infinity"[..]));
    assert_eq!(
        get_inf("msg.occurred-at").as_deref(),
        Some(&b"-infinity"[..])
    );
    assert_eq!(
        map(&[("headers", Some("{\"msg.type\": \"x\"}"))])
            .unwrap_err()
            .code(),
        "RESERVED_HEADER_NAME"
    );
    assert_eq!(
        map(&[("destination", Some("a b"))]).unwrap_err().code(),
        "ILLEGAL_TOPIC_NAME"
    );
}

/// `otel.propagate`'s rewrite: only `traceparent` changes, in its place,
/// whether the row had one or not.
#[test]
fn a_header_rewrite_changes_that_header_alone() {
    let relay_span = b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000abc-01";
    let all = |r: &Record| -> Vec<(String, Option<Vec<u8>>)> {
        r.headers()
            .map(|(n, v)| (n.to_string(), v.map(<[u8]>::to_vec)))
            .collect()
    };
    for traceparent in [
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        None,
    ] {
        let r = map(&[("traceparent", traceparent)]).unwrap();
        assert_eq!(
            r.header("traceparent"),
            traceparent.map(str::as_bytes),
            "{traceparent:?}"
        );
        let rewritten = r.with_header("traceparent", relay_span);
        assert_eq!(rewritten.header("traceparent"), Some(&relay_span[..]));
        let (before, after) = (all(&r), all(&rewritten));
        assert_eq!(before.len(), after.len());
        for (b, a) in before.iter().zip(&after) {
            assert_eq!(b.0, a.0);
            if b.0 != "traceparent" {
                assert_eq!(b, a);
            }
        }
        assert_eq!(
            (r.key, r.value, r.topic),
            (
                rewritten.key.clone(),
                rewritten.value.clone(),
                rewritten.topic.clone()
            )
        );
    }
}
