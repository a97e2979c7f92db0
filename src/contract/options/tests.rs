use super::*;

fn options(pairs: &[(&str, &str)]) -> Result<RouterOptions, Error> {
    RouterOptions::from_options(
        &pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

#[test]
fn an_empty_configuration_has_the_routers_defaults() {
    let o = options(&[]).unwrap();
    assert_eq!(o.event_id, "id");
    assert_eq!(o.event_key.as_deref(), Some("aggregateid"));
    assert_eq!(o.payload, "payload");
    assert_eq!(o.route_by, "aggregatetype");
    assert_eq!(o.topic_regex, "(?<routedByValue>.*)");
    assert_eq!(o.topic_replacement, "outbox.event.${routedByValue}");
    assert_eq!(o.empty_payload, EmptyPayload::Value);
    assert_eq!(o.payload_form, PayloadForm::Verbatim);
    assert_eq!(o.invalid_op, InvalidOp::Warn);
    assert_eq!(o.missing, Missing::Error);
    assert_eq!(o.json_null, JsonNull::Ignore);
    let columns: Vec<(&str, Role)> = o
        .named_columns()
        .iter()
        .map(|n| (n.column, n.role))
        .collect();
    assert_eq!(
        columns,
        vec![
            ("id", Role::EventId),
            ("aggregateid", Role::Key),
            ("payload", Role::Payload),
            ("aggregatetype", Role::RouteBy)
        ]
    );
    assert!(!o.has_envelope());
}

#[test]
fn placements_split_and_trim_as_the_router_does() {
    let o = options(&[
        (
            "table.fields.additional.placement",
            " type:header:eventType , tenant:envelope,shard:PARTITION",
        ),
        ("table.field.additional.missing", "IGNORE"),
        ("route.tombstone.on.empty.payload", " True "),
        ("table.op.invalid.behavior", "fatal"),
    ])
    .unwrap();
    assert_eq!(
        o.additional,
        vec![
            Additional {
                column: "type".into(),
                placement: Placement::Header,
                alias: "eventType".into()
            },
            Additional {
                column: "tenant".into(),
                placement: Placement::Envelope,
                alias: "tenant".into()
            },
            Additional {
                column: "shard".into(),
                placement: Placement::Partition,
                alias: "shard".into()
            },
        ]
    );
    assert_eq!(o.missing, Missing::Ignore);
    assert_eq!(o.empty_payload, EmptyPayload::Tombstone);
    assert_eq!(o.invalid_op, InvalidOp::Fatal);
    assert!(o.has_envelope());
    let props = o.properties();
    let get = |k: &str| props.iter().find(|(p, _)| *p == k).map(|(_, v)| v.as_str());
    assert_eq!(
        get("table.fields.additional.placement"),
        Some("type:header:eventType,tenant:envelope:tenant,shard:partition:shard")
    );
    assert_eq!(get("table.field.additional.missing"), Some("ignore"));
    assert_eq!(get("table.op.invalid.behavior"), Some("fatal"));
    assert_eq!(get("route.tombstone.on.empty.payload"), Some("true"));
    // Written back, the options read as they were.
    let pairs: Vec<(&str, &str)> = props.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let again = options(&pairs).unwrap();
    assert_eq!(again, o);
}

#[test]
fn every_default_reads_as_its_option_and_shows_as_it_reads() {
    for o in OPTIONS {
        let mut options = RouterOptions::default();
        if let Some(default) = o.default {
            assert!((o.read)(&mut options, default).is_ok(), "{}", o.key);
            assert_eq!((o.show)(&options).as_deref(), Some(default), "{}", o.key);
        }
        assert!(!o.doc.is_empty(), "{}", o.key);
    }
    assert_eq!(
        option("route.by.field").map(|o| o.key),
        Some("route.by.field")
    );
    assert!(option("route.topic.partition.by").is_none());
}

#[test]
fn every_refusal_is_reported_at_once() {
    let error = options(&[
        ("table.op.invalid.behavior", "skip"),
        ("table.field.event.payloads", "body"),
        ("route.topic.replacement", "${nope}"),
    ])
    .unwrap_err();
    assert_eq!(error.code(), "CONTRACT_OPTION_INVALID");
    assert_eq!(
        error.detail(),
        "`table.field.event.payloads` is not an Outbox Event Router option that decides bytes (did you mean `table.field.event.payload`?); \
         `table.op.invalid.behavior`: \"skip\" is not one of warn, error, fatal; \
         `route.topic.replacement`: no group with name {nope} in `route.topic.regex`"
    );
}

#[test]
fn bad_values_and_unknown_options_are_refused_with_the_option_named() {
    for (pairs, expected) in [
        (
            vec![("table.op.invalid.behavior", "skip")],
            "`table.op.invalid.behavior`: \"skip\" is not one of warn, error, fatal",
        ),
        (
            vec![("table.fields.additional.placement", "a:body")],
            "`table.fields.additional.placement`: \"body\" is not one of header, envelope, partition",
        ),
        (
            vec![("table.fields.additional.placement", "a")],
            "`table.fields.additional.placement`: \"a\" is not column:placement or column:placement:alias",
        ),
        (
            vec![("table.expand.json.payload", "yes")],
            "`table.expand.json.payload`: \"yes\" is not one of true, false",
        ),
        (
            vec![("table.field.event.payloads", "body")],
            "`table.field.event.payloads` is not an Outbox Event Router option that decides bytes (did you mean `table.field.event.payload`?)",
        ),
        (
            vec![("table.field.event.id", " ")],
            "`table.field.event.id`: names no column",
        ),
    ] {
        let error = options(&pairs).unwrap_err();
        assert_eq!(error.code(), "CONTRACT_OPTION_INVALID");
        assert_eq!(error.detail(), expected);
    }
}
