//! What the migrated table refuses at INSERT time and what it keeps: the
//! named constraints with their edges, the routing-key trigger, the fence,
//! and a row with every nullable column NULL.

use super::*;

#[tokio::test]
async fn a_row_with_every_nullable_column_null_is_accepted() {
    let services = require_services!();
    let (db, _) = migrated(&services, "nulls").await;
    insert(&db.client, "00000000-0000-4000-8000-000000000b01", &[])
        .await
        .unwrap();
    let row = db
        .client
        .query_one(
            "SELECT status, attempts, lease_token, headers::text, routing_key, producer, occurred_at IS NULL, \
             correlation_id, causation_id, tenant, partition_key, ordering_key, traceparent, tracestate, baggage, \
             schema_subject, schema_uri FROM public.messaging_outbox",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "PENDING");
    assert_eq!(row.get::<_, i32>(1), 0);
    assert_eq!(row.get::<_, i64>(2), 0);
    assert_eq!(row.get::<_, String>(3), "{}");
    assert_eq!(
        row.get::<_, String>(4),
        "00000000-0000-4000-8000-000000000b01"
    );
    assert!(row.get::<_, bool>(6));
    for i in [5, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16] {
        assert_eq!(row.get::<_, Option<String>>(i), None, "column {i}");
    }
    // Good values in every constrained column are accepted too.
    insert(
        &db.client,
        "00000000-0000-4000-8000-000000000b02",
        &[
            (
                "headers",
                r#"'{"x-request-id": "r-1", "message": "ok", "": ""}'"#,
            ),
            (
                "traceparent",
                "'00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'",
            ),
            ("tenant", "'acme.eu-1_x'"),
            ("schema_subject", "'orders-value'"),
            ("schema_uri", "'https://schemas.example/orders/1'"),
            ("destination", "'orders.v1-created_x'"),
            ("payload", "''"),
        ],
    )
    .await
    .unwrap();
    db.drop(&services).await;
}

#[tokio::test]
async fn the_trigger_keeps_routing_key_to_the_rule() {
    let services = require_services!();
    let (db, _) = migrated(&services, "rkey").await;
    insert(
        &db.client,
        "00000000-0000-4000-8000-000000000c01",
        &[("routing_key", "'forged'")],
    )
    .await
    .unwrap();
    insert(
        &db.client,
        "00000000-0000-4000-8000-000000000c02",
        &[("partition_key", "'p'"), ("routing_key", "'forged'")],
    )
    .await
    .unwrap();
    db.client
        .execute(
            "UPDATE public.messaging_outbox SET partition_key = 'moved' WHERE message_id = '00000000-0000-4000-8000-000000000c01'",
            &[],
        )
        .await
        .unwrap();
    let keys: Vec<String> = db
        .client
        .query(
            "SELECT routing_key FROM public.messaging_outbox ORDER BY message_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(keys, vec!["moved", "p"]);
    // Without the trigger, the CHECK still states the rule.
    db.client
        .batch_execute("ALTER TABLE public.messaging_outbox DISABLE TRIGGER outbox_cdc_routing_key")
        .await
        .unwrap();
    let refused = insert(
        &db.client,
        "00000000-0000-4000-8000-000000000c03",
        &[("routing_key", "'forged'")],
    )
    .await;
    assert_eq!(constraint_of(refused), "ck_outbox_routing_key");
    db.drop(&services).await;
}

/// Per CHECK constraint: the column it guards, values it refuses, and the
/// edge value it still accepts.
fn constraint_cases() -> Vec<(&'static str, &'static str, Vec<String>, String)> {
    let quoted = |v: &str| format!("'{v}'");
    let all = |vs: &[&str]| vs.iter().map(|v| v.to_string()).collect::<Vec<_>>();
    vec![
        // "outbox." is 7 characters; Kafka allows 249 in all.
        (
            "destination",
            "ck_outbox_destination_topic",
            vec![
                quoted("orders/v1"),
                quoted("orders v1"),
                quoted(""),
                quoted("ordérs"),
                quoted(&"d".repeat(243)),
            ],
            quoted(&"d".repeat(242)),
        ),
        (
            "headers",
            "ck_outbox_headers_reserved",
            all(&[
                r#"'{"msg.type": "x"}'"#,
                r#"'{"msg.anything-new": "x"}'"#,
                r#"'{"MSG.Tenant": "x"}'"#,
                r#"'{"id": "x"}'"#,
                r#"'{"traceparent": "x"}'"#,
                r#"'{"tracestate": "x"}'"#,
                r#"'{"Baggage": "x"}'"#,
                r#"'{"ok": "1", "msg.version": "2"}'"#,
            ]),
            r#"'{"x-request-id": "r-1", "message": "ok", "": ""}'"#.to_string(),
        ),
        (
            "headers",
            "ck_outbox_headers_flat",
            all(&[
                r#"'{"a": 1}'"#,
                r#"'{"a": null}'"#,
                r#"'["a"]'"#,
                r#"'{"a": {"b": "c"}}'"#,
            ]),
            r#"'{"a": "1"}'"#.to_string(),
        ),
        (
            "traceparent",
            "ck_outbox_traceparent",
            all(&[
                "'garbage'",
                "''",
                "'00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01'",
                "'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'",
                "'00-00000000000000000000000000000000-00f067aa0ba902b7-01'",
                "'00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01'",
                "'00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra'",
                "'00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01'",
            ]),
            // A future version may append fields.
            "'01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future'".to_string(),
        ),
        (
            "tenant",
            "ck_outbox_tenant",
            vec![
                quoted("Acme"),
                quoted("-acme"),
                quoted("acme corp"),
                quoted(""),
                quoted(".x"),
                quoted(&format!("a{}", "b".repeat(64))),
            ],
            quoted(&format!("a{}", "b".repeat(63))),
        ),
        (
            "schema_uri",
            "ck_outbox_schema_uri_subject",
            vec![quoted("https://s/1")],
            // With its subject it is fine (added below for this case).
            quoted("https://s/1"),
        ),
    ]
}

#[tokio::test]
async fn every_constraint_refuses_its_bad_values_and_accepts_its_edge() {
    let services = require_services!();
    let (db, _) = migrated(&services, "constraints").await;
    for (case, (column, constraint, refused, accepted)) in
        constraint_cases().into_iter().enumerate()
    {
        for (i, bad) in refused.iter().enumerate() {
            let id = format!("00000000-0000-4000-8000-000000{case:02}{i:04}");
            let result = insert(&db.client, &id, &[(column, bad)]).await;
            assert_eq!(constraint_of(result), constraint, "{column} = {bad}");
        }
        let id = format!("00000000-0000-4000-8000-000000{case:02}9999");
        let mut extra = vec![(column, accepted.as_str())];
        if column == "schema_uri" {
            extra.push(("schema_subject", "'orders-value'"));
        }
        insert(&db.client, &id, &extra)
            .await
            .unwrap_or_else(|e| panic!("{column} = {accepted}: {e}"));
    }
    db.drop(&services).await;
}

#[tokio::test]
async fn the_fence_refuses_claims_once_the_outbox_is_declared_cdc() {
    let services = require_services!();
    let (db, _) = migrated(&services, "fence").await;
    insert(&db.client, "00000000-0000-4000-8000-000000000701", &[])
        .await
        .unwrap();
    insert(&db.client, "00000000-0000-4000-8000-000000000702", &[])
        .await
        .unwrap();
    db.client
        .execute(
            "INSERT INTO public.outbox_relay_mode (outbox_table, mode) VALUES ('public.messaging_outbox', 'POLLING')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        db.client
            .execute(&common::claim_sql("polling-relay-1", 30, 10), &[])
            .await
            .unwrap(),
        2
    );
    db.client
        .batch_execute(
            "UPDATE public.messaging_outbox SET status = 'PENDING', lease_expires_at = NULL, lease_owner = NULL;
             UPDATE public.outbox_relay_mode SET mode = 'CHANGE_DATA_CAPTURE' WHERE outbox_table = 'public.messaging_outbox'",
        )
        .await
        .unwrap();
    let err = db
        .client
        .execute(&common::claim_sql("polling-relay-1", 30, 10), &[])
        .await
        .expect_err("a claim in CDC mode must fail");
    let dberr = err.as_db_error().expect("a database error");
    assert_eq!(dberr.code().code(), "OX001");
    assert!(
        dberr.message().contains("OUTBOX_CLAIM_FENCED"),
        "{}",
        dberr.message()
    );
    assert!(
        dberr.message().contains("CHANGE_DATA_CAPTURE"),
        "{}",
        dberr.message()
    );
    // The CDC relay's own marks are unaffected.
    let marked = db
        .client
        .execute(
            "UPDATE public.messaging_outbox SET status = 'PUBLISHED', published_at = now() WHERE message_id = '00000000-0000-4000-8000-000000000701'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(marked, 1);
    let failed = db
        .client
        .execute(
            "UPDATE public.messaging_outbox SET status = 'FAILED', last_failure_code = 'MESSAGE_TOO_LARGE' WHERE message_id = '00000000-0000-4000-8000-000000000702'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(failed, 1);
    db.drop(&services).await;
}
