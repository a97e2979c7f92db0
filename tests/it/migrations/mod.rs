//! The migrations against a real PostgreSQL 15 (wal_level=logical): the table
//! matches the definition, routing_key is in the replication stream, bad rows
//! are refused by named constraints, and the fence refuses claims in CDC mode.

mod constraints;

use crate::common;

use outbox_cdc::config::Config;
use outbox_cdc::connector;
use outbox_cdc::ops::migrate::{self, Scope};
use outbox_cdc::pg::catalog::{self, Drift};
use tokio_postgres::Client;

const PUBLICATION: &str = "outbox_cdc_publication";

async fn migrated(services: &common::Services, label: &str) -> (common::TestDb, Config) {
    let db = common::migrated_db(services, label, "outbox.").await;
    let cfg = db.config("outbox.");
    (db, cfg)
}

/// Inserts a row with the required columns and `extra` (column, SQL literal) pairs.
async fn insert(
    client: &Client,
    id: &str,
    extra: &[(&str, &str)],
) -> Result<u64, tokio_postgres::Error> {
    let mut cols = vec![
        "message_id",
        "destination",
        "message_type",
        "message_version",
        "content_type",
        "payload",
    ];
    let id_lit = format!("'{id}'");
    let mut vals = vec![
        id_lit.as_str(),
        "'orders'",
        "'OrderPlaced'",
        "1",
        "'application/json'",
        "'\\x7b7d'",
    ];
    for (c, v) in extra {
        if let Some(i) = cols.iter().position(|x| x == c) {
            vals[i] = v;
        } else {
            cols.push(c);
            vals.push(v);
        }
    }
    client
        .execute(
            &format!(
                "INSERT INTO public.messaging_outbox ({}) VALUES ({})",
                cols.join(", "),
                vals.join(", ")
            ),
            &[],
        )
        .await
}

fn constraint_of(result: Result<u64, tokio_postgres::Error>) -> String {
    match result {
        Ok(n) => panic!("the row was accepted ({n} inserted)"),
        Err(e) => {
            let db = e
                .as_db_error()
                .unwrap_or_else(|| panic!("not a database error: {e}"));
            assert_eq!(db.code().code(), "23514", "{db:?}");
            db.constraint().unwrap_or_default().to_string()
        }
    }
}

/// What pgoutput (protocol 1) said for one peeked change set: the relation's
/// column names and each inserted row's text values.
#[derive(Debug, Default)]
struct Peeked {
    relation_columns: Vec<Vec<String>>,
    inserts: Vec<Vec<Option<String>>>,
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        head
    }
    fn u8(&mut self) -> u8 {
        self.take(1)[0]
    }
    fn i16(&mut self) -> i16 {
        i16::from_be_bytes(self.take(2).try_into().unwrap())
    }
    fn i32(&mut self) -> i32 {
        i32::from_be_bytes(self.take(4).try_into().unwrap())
    }
    fn cstr(&mut self) -> String {
        let end = self.0.iter().position(|&b| b == 0).unwrap();
        let s = String::from_utf8(self.0[..end].to_vec()).unwrap();
        self.take(end + 1);
        s
    }
}

async fn peek(client: &Client, slot: &str, publication: &str) -> Peeked {
    let rows = client
        .query(
            "SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, \
             'proto_version', '1', 'publication_names', $2)",
            &[&slot, &publication],
        )
        .await
        .unwrap();
    let mut out = Peeked::default();
    for row in rows {
        let data: Vec<u8> = row.get(0);
        let mut r = Reader(&data);
        match r.u8() {
            b'R' => {
                r.i32();
                r.cstr();
                r.cstr();
                r.u8();
                let n = r.i16();
                let mut names = Vec::new();
                for _ in 0..n {
                    r.u8();
                    names.push(r.cstr());
                    r.i32();
                    r.i32();
                }
                out.relation_columns.push(names);
            }
            b'I' => {
                r.i32();
                assert_eq!(r.u8(), b'N');
                let n = r.i16();
                let mut values = Vec::new();
                for _ in 0..n {
                    match r.u8() {
                        b'n' => values.push(None),
                        b't' => {
                            let len = r.i32() as usize;
                            values.push(Some(String::from_utf8(r.take(len).to_vec()).unwrap()));
                        }
                        other => panic!("unexpected tuple kind {other}"),
                    }
                }
                out.inserts.push(values);
            }
            _ => {}
        }
    }
    out
}

/// The value of `column` in an inserted tuple, by the relation's column order.
fn value_of(p: &Peeked, row: usize, column: &str) -> Option<String> {
    let cols = p.relation_columns.last().expect("a Relation message");
    let i = cols.iter().position(|c| c == column)?;
    p.inserts[row][i].clone()
}

#[tokio::test]
async fn a_fresh_database_matches_the_definition_and_migrating_again_changes_nothing() {
    let services = require_services!();
    let (mut db, cfg) = migrated(&services, "fresh").await;
    let drift = catalog::compare(&db.client, "public", "messaging_outbox")
        .await
        .unwrap();
    assert_eq!(drift, vec![], "{drift:?}");

    let again = migrate::migrate(&mut db.client, &cfg.objects(), Scope::All)
        .await
        .unwrap();
    assert_eq!(
        again
            .iter()
            .map(|a| (a.version, a.newly))
            .collect::<Vec<_>>(),
        vec![
            (1, false),
            (2, false),
            (3, false),
            (4, false),
            (5, false),
            (6, false),
            (7, false),
            (9, false)
        ]
    );
    let history: i64 = db
        .client
        .query_one("SELECT count(*) FROM public.outbox_cdc_schema_history", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(history, 8);

    // The row checks' functions are PL/pgSQL: PostgreSQL would inline a SQL
    // function into its constraint and parse its body for every INSERT.
    let languages: Vec<(String, String)> = db
        .client
        .query(
            "SELECT p.proname::text, l.lanname::text FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang \
              WHERE p.proname IN ('outbox_cdc_headers_flat', 'outbox_cdc_headers_unreserved', 'outbox_cdc_traceparent_ok') \
              ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        languages,
        vec![
            ("outbox_cdc_headers_flat".to_string(), "plpgsql".to_string()),
            (
                "outbox_cdc_headers_unreserved".to_string(),
                "plpgsql".to_string()
            ),
            (
                "outbox_cdc_traceparent_ok".to_string(),
                "plpgsql".to_string()
            ),
        ]
    );

    // The publication publishes inserts only, over the outbox (and heartbeats).
    let row = db
        .client
        .query_one(
            "SELECT pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication WHERE pubname = $1",
            &[&PUBLICATION],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            row.get::<_, bool>(0),
            row.get::<_, bool>(1),
            row.get::<_, bool>(2),
            row.get::<_, bool>(3)
        ),
        (true, false, false, false)
    );
    let tables: Vec<String> = db
        .client
        .query(
            "SELECT tablename::text FROM pg_publication_tables WHERE pubname = $1 ORDER BY 1",
            &[&PUBLICATION],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(tables, vec!["messaging_outbox", "outbox_cdc_heartbeat"]);
    db.drop(&services).await;
}

#[tokio::test]
async fn the_catalog_check_reports_every_kind_of_drift() {
    let services = require_services!();
    let (db, _) = migrated(&services, "drift").await;
    db.client
        .batch_execute(
            "ALTER TABLE public.messaging_outbox ADD COLUMN surprise integer;
             ALTER TABLE public.messaging_outbox ALTER COLUMN tenant SET NOT NULL;
             ALTER TABLE public.messaging_outbox ALTER COLUMN attempts TYPE bigint;
             ALTER TABLE public.messaging_outbox DROP COLUMN baggage;",
        )
        .await
        .unwrap();
    let drift = catalog::compare(&db.client, "public", "messaging_outbox")
        .await
        .unwrap();
    assert!(
        drift.contains(&Drift::MissingColumn { column: "baggage" }),
        "{drift:?}"
    );
    assert!(
        drift.contains(&Drift::WrongNullability {
            column: "tenant",
            expected_nullable: true
        }),
        "{drift:?}"
    );
    assert!(
        drift.contains(&Drift::WrongType {
            column: "attempts",
            expected: "integer",
            actual: "bigint".into()
        }),
        "{drift:?}"
    );
    assert!(
        drift.contains(&Drift::UnknownColumn {
            column: "surprise".into(),
            data_type: "integer".into()
        }),
        "{drift:?}"
    );
    assert_eq!(drift.len(), 4, "{drift:?}");
    db.drop(&services).await;
}

#[tokio::test]
async fn routing_key_is_in_the_replication_stream_of_a_fresh_table() {
    let services = require_services!();
    let (db, _) = migrated(&services, "stream").await;
    let slot = format!("{}_slot", db.name);
    db.client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await
        .unwrap();
    insert(
        &db.client,
        "00000000-0000-4000-8000-000000000001",
        &[("partition_key", "'customer-7'")],
    )
    .await
    .unwrap();
    insert(&db.client, "00000000-0000-4000-8000-000000000002", &[])
        .await
        .unwrap();
    let peeked = peek(&db.client, &slot, PUBLICATION).await;
    assert_eq!(peeked.inserts.len(), 2, "{peeked:?}");
    assert!(
        peeked.relation_columns[0]
            .iter()
            .any(|c| c == "routing_key"),
        "{peeked:?}"
    );
    assert_eq!(
        value_of(&peeked, 0, "routing_key").as_deref(),
        Some("customer-7")
    );
    assert_eq!(
        value_of(&peeked, 1, "routing_key").as_deref(),
        Some("00000000-0000-4000-8000-000000000002")
    );
    db.client
        .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await
        .unwrap();
    db.drop(&services).await;
}

/// The polling platform's table: its own constraint names, and routing_key as
/// a generated column, which pgoutput on PostgreSQL 15 does not replicate.
const LEGACY_TABLE: &str = "
CREATE TABLE public.messaging_outbox (
    message_id uuid PRIMARY KEY,
    destination text NOT NULL,
    message_type text NOT NULL,
    message_version integer NOT NULL,
    content_type text NOT NULL,
    payload bytea NOT NULL,
    headers jsonb NOT NULL DEFAULT '{}',
    status text NOT NULL DEFAULT 'PENDING',
    attempts integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz,
    lease_expires_at timestamptz,
    lease_owner text,
    lease_token bigint NOT NULL DEFAULT 0,
    next_attempt_at timestamptz,
    last_failure_code text,
    producer text, occurred_at timestamptz, correlation_id text, causation_id text,
    tenant text, partition_key text, ordering_key text, traceparent text, tracestate text,
    baggage text, schema_subject text, schema_uri text
);
ALTER TABLE public.messaging_outbox ADD CONSTRAINT ck_messaging_outbox_tenant
    CHECK (tenant IS NULL OR tenant ~ '^[a-z0-9][a-z0-9._-]{0,63}$');
ALTER TABLE public.messaging_outbox
    ADD COLUMN routing_key TEXT GENERATED ALWAYS AS (COALESCE(partition_key, message_id::TEXT)) STORED;
";

/// `outbox-cdc check`'s report on database `db` of the test PostgreSQL.
fn outbox_cdc_check(db: &str) -> String {
    let s = common::services().unwrap();
    let path = std::env::temp_dir().join(format!("outbox-cdc-check-{db}.toml"));
    let text = common::config_head(
        (&s.pg_host, s.pg_port, &s.pg_user),
        db,
        None,
        "outbox.",
        &s.kafka_bootstrap,
    );
    std::fs::write(&path, text).unwrap();
    let out = std::process::Command::new(crate::common::cli::bin())
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn a_generated_routing_key_is_not_replicated_until_the_migration_converts_it() {
    let services = require_services!();
    let mut db = services.fresh_db("legacy").await;
    let cfg = db.config("outbox.");
    db.client.batch_execute(LEGACY_TABLE).await.unwrap();
    db.client
        .batch_execute("CREATE PUBLICATION legacy_pub FOR TABLE public.messaging_outbox")
        .await
        .unwrap();
    insert(
        &db.client,
        "00000000-0000-4000-8000-0000000000a1",
        &[("partition_key", "'old-key'")],
    )
    .await
    .unwrap();
    let drift = catalog::compare(&db.client, "public", "messaging_outbox")
        .await
        .unwrap();
    assert_eq!(
        drift,
        vec![
            Drift::WrongNullability {
                column: "routing_key",
                expected_nullable: false
            },
            Drift::Generated {
                column: "routing_key"
            },
        ]
    );

    // The trap: the stream of the generated column's table has no routing_key.
    let slot = format!("{}_before", db.name);
    db.client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await
        .unwrap();
    insert(
        &db.client,
        "00000000-0000-4000-8000-0000000000a2",
        &[("partition_key", "'k-before'")],
    )
    .await
    .unwrap();
    let before = peek(&db.client, &slot, "legacy_pub").await;
    assert_eq!(before.inserts.len(), 1, "{before:?}");
    assert!(
        !before.relation_columns[0]
            .iter()
            .any(|c| c == "routing_key"),
        "{before:?}"
    );
    assert!(
        before.relation_columns[0]
            .iter()
            .any(|c| c == "partition_key"),
        "{before:?}"
    );
    db.client
        .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await
        .unwrap();

    // Only the CDC objects, applied to the table the application created.
    let applied = migrate::migrate(&mut db.client, &cfg.objects(), Scope::CdcOnly)
        .await
        .unwrap();
    assert_eq!(
        applied
            .iter()
            .map(|a| (a.version, a.newly))
            .collect::<Vec<_>>(),
        vec![
            (2, true),
            (3, true),
            (4, true),
            (5, true),
            (6, true),
            (7, true),
            (9, true)
        ]
    );
    let drift = catalog::compare(&db.client, "public", "messaging_outbox")
        .await
        .unwrap();
    // PostgreSQL 18 publishes stored generated columns: the platform's column
    // stays generated, the publication carries it and no trigger is made.
    let major: u32 = std::env::var("OUTBOX_TEST_PG_MAJOR")
        .unwrap_or_else(|_| "15".into())
        .parse()
        .unwrap();
    let facts = db
        .client
        .query_one(
            "SELECT (SELECT attgenerated::text FROM pg_attribute
                      WHERE attrelid = 'public.messaging_outbox'::regclass AND attname = 'routing_key'),
                    (SELECT count(*) FROM pg_trigger
                      WHERE tgrelid = 'public.messaging_outbox'::regclass AND tgname = 'outbox_cdc_routing_key'),
                    (SELECT to_jsonb(p) ->> 'pubgencols' FROM pg_publication p WHERE pubname = 'outbox_cdc_publication')",
            &[],
        )
        .await
        .unwrap();
    let (generated, triggers, pubgencols): (String, i64, Option<String>) =
        (facts.get(0), facts.get(1), facts.get(2));
    if major >= 18 {
        assert_eq!(
            drift,
            vec![Drift::Generated {
                column: "routing_key"
            }],
            "{drift:?}"
        );
        assert_eq!(
            (generated.as_str(), triggers, pubgencols.as_deref()),
            ("s", 0, Some("s"))
        );
        let out = outbox_cdc_check(&db.name);
        assert!(
            out.contains("stored generated column, published by outbox_cdc_publication"),
            "{out}"
        );
    } else {
        assert_eq!(drift, vec![], "{drift:?}");
        assert_eq!((generated.as_str(), triggers), ("", 1));
    }
    let kept = common::texts(
        &db.client,
        "SELECT routing_key FROM public.messaging_outbox ORDER BY message_id",
    )
    .await;
    assert_eq!(kept, vec!["old-key", "k-before"]);

    let slot = format!("{}_after", db.name);
    db.client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await
        .unwrap();
    insert(
        &db.client,
        "00000000-0000-4000-8000-0000000000a3",
        &[("partition_key", "'k-after'")],
    )
    .await
    .unwrap();
    insert(&db.client, "00000000-0000-4000-8000-0000000000a4", &[])
        .await
        .unwrap();
    let after = peek(&db.client, &slot, PUBLICATION).await;
    assert_eq!(after.inserts.len(), 2, "{after:?}");
    assert_eq!(
        value_of(&after, 0, "routing_key").as_deref(),
        Some("k-after")
    );
    assert_eq!(
        value_of(&after, 1, "routing_key").as_deref(),
        Some("00000000-0000-4000-8000-0000000000a4")
    );
    db.client
        .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await
        .unwrap();
    db.drop(&services).await;
}

#[tokio::test]
async fn the_generated_heartbeat_query_runs_against_the_migrated_schema() {
    let services = require_services!();
    let (db, cfg) = migrated(&services, "heartbeat").await;
    let props = connector::connector_properties(&cfg).unwrap();
    let query = props
        .iter()
        .find(|(k, _)| k == "heartbeat.action.query")
        .map(|(_, v)| v.clone())
        .expect("heartbeat.action.query");
    db.client.batch_execute(&query).await.unwrap();
    db.client
        .batch_execute(
            "UPDATE public.outbox_cdc_heartbeat SET beat_at = now() - interval '2 hours'",
        )
        .await
        .unwrap();
    db.client.batch_execute(&query).await.unwrap();
    let rows: i64 = db
        .client
        .query_one("SELECT count(*) FROM public.outbox_cdc_heartbeat", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        rows, 1,
        "the query deletes expired heartbeats as it inserts"
    );
    db.drop(&services).await;
}

#[tokio::test]
async fn an_edited_migration_is_detected() {
    let services = require_services!();
    let (mut db, cfg) = migrated(&services, "checksum").await;
    db.client
        .execute(
            "UPDATE public.outbox_cdc_schema_history SET checksum = 'edited' WHERE version = 2",
            &[],
        )
        .await
        .unwrap();
    let err = migrate::migrate(&mut db.client, &cfg.objects(), Scope::All)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "MIGRATION_CHECKSUM_MISMATCH");
    db.drop(&services).await;
}
