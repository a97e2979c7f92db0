//! The Outbox Event Router on tables other than the platform's: real
//! Debezium 3.6.1 on Kafka Connect runs the configuration `connector-config`
//! generates for a contract, and the relay's router
//! (`outbox_cdc::router`) must give the same records, byte for
//! byte, for the same rows. The cases run side by side on the one Connect
//! worker, one database, connector and slot each.
//!
//! What is compared: topic, key, value, headers and tombstones for every
//! case; partition and timestamp where a column decides them (otherwise
//! Kafka's partitioner and Debezium's clock do). The table keeps no status:
//! rows inserted and deleted in one transaction are published once, their
//! deletes dropped, their updates dropped as `table.op.invalid.behavior`
//! says. Then the relay itself (`outbox-cdc run`, its own slot made before
//! the first row) streams the same changes into the same topics: every
//! record must then be there twice, Debezium's and the relay's.

use super::*;

use bytes::Bytes;
use outbox_cdc::router::{Plan, Record};
use outbox_cdc::row::value::Uuid;

/// One contract on one table.
struct Case {
    label: &'static str,
    /// `CREATE TABLE {table} (...)` column list.
    columns: &'static str,
    /// `[outbox]` keys besides the table.
    outbox: &'static str,
    /// `[outbox.router]`, with `{p}` for the case's unique topic prefix.
    router: &'static str,
    /// `INSERT INTO corpus` rows, with `{p}` for the unique prefix.
    rows: &'static str,
    /// Topics, with their partition count.
    topics: &'static [(&'static str, i32)],
    /// Who makes the topics.
    made: Made,
    /// Whether a column decides partition and timestamp.
    placed: Placed,
    /// `[debezium]` keys besides the harness's (the connector's plugin).
    debezium: &'static str,
    /// Tables added to the configuration (`[kafka.topic_creation]`).
    tables: &'static str,
}

/// Who makes a case's topics.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Made {
    /// The test, before anything runs.
    Beforehand,
    /// The connector's worker, by `topic.creation.*` (and so the relay's
    /// `[kafka.topic_creation]`), with the partitions `topics` says.
    ByTheConnector,
}

/// What a column decides besides topic, key, value and headers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Placed {
    /// Nothing: Kafka's partitioner and Debezium's clock decide.
    No,
    /// The partition (or the key's place in a one-partition topic) and the
    /// record's timestamp.
    Yes,
    /// The partition only.
    Partition,
}

impl Placed {
    fn partition(self) -> bool {
        self != Placed::No
    }

    fn timestamp(self) -> bool {
        self == Placed::Yes
    }
}

mod cases;
mod converters;
use cases::{
    ALONE, CUSTOM, DECODERBUFS, DEFAULTS, DOCUMENTED, EXPANDED, EXPANDED_ENVELOPE, TOPIC_CREATION,
};

/// Runs `cases` together and asserts 0 differences; prints the counts.
async fn parity(what: &str, cases: &[Case]) {
    let runs = futures_util::future::join_all(cases.iter().map(run)).await;
    let mut differences = Vec::new();
    let mut counts = Vec::new();
    for (case, (records, found)) in cases.iter().zip(runs) {
        counts.push(format!("{} {records}", case.label));
        differences.extend(found);
    }
    assert!(
        differences.is_empty(),
        "{} differences:\n{}",
        differences.len(),
        differences.join("\n")
    );
    eprintln!(
        "{what} parity, records per case (Debezium, the router and the relay each): {}; 0 differences",
        counts.join(", ")
    );
}

#[tokio::test]
async fn each_option_alone_gives_debeziums_records() {
    parity("router, each option alone,", ALONE).await;
}

#[tokio::test]
async fn topics_the_connector_creates_are_made_alike_and_keys_land_on_the_same_partitions() {
    parity("topic creation", &[TOPIC_CREATION]).await;
}

/// PostgreSQL 15 only: Debian packages decoderbufs for it.
#[tokio::test]
async fn decoderbufs_feeds_the_router_the_same_records_as_pgoutput() {
    parity("decoderbufs", &[DECODERBUFS]).await;
}

/// What a consumer sees of a record, made comparable.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    topic: String,
    partition: Option<i32>,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
    timestamp: Option<i64>,
}

/// The router's record as a consumer would see it: without a partition
/// column, a keyed record lands where Kafka's partitioner puts it.
fn routed(r: &Record, placed: Placed, partitions: i32) -> Seen {
    let by_key = r
        .key_bytes()
        .map(|k| outbox_cdc::kafka::placement::partition(k, partitions));
    Seen {
        topic: r.topic.clone(),
        partition: r.partition.or(by_key).filter(|_| placed.partition()),
        key: r.key_bytes().map(|k| k.to_vec()),
        value: r.value_bytes().map(|v| v.to_vec()),
        headers: {
            let mut headers: Vec<(String, Option<Vec<u8>>)> = r
                .headers()
                .map(|(n, v)| (n.to_string(), v.map(<[u8]>::to_vec)))
                .collect();
            run_id_by_form(&mut headers);
            headers
        },
        timestamp: r.timestamp_ms.filter(|_| placed.timestamp()),
    }
}

/// A consumed record made comparable, and its run id (one per process:
/// the caller checks it is the same for every record of a run).
fn consumed(c: &Consumed, placed: Placed) -> (Seen, Option<Vec<u8>>) {
    let mut headers = c.headers.clone();
    let run = run_id_by_form(&mut headers);
    let seen = Seen {
        topic: c.topic.clone(),
        partition: placed.partition().then_some(c.partition),
        key: c.key.clone(),
        value: c.value.clone(),
        headers,
        timestamp: c.timestamp.filter(|_| placed.timestamp()),
    };
    (seen, run)
}

/// The records, and a difference for each run id beyond one.
fn one_run(
    label: &str,
    who: &str,
    found: Vec<(Seen, Option<Vec<u8>>)>,
) -> (Vec<Seen>, Vec<String>) {
    let runs: BTreeSet<Vec<u8>> = found.iter().filter_map(|(_, r)| r.clone()).collect();
    let differences = match runs.len() {
        0 | 1 => Vec::new(),
        n => vec![format!(
            "{label}: {who}'s records carry {n} run ids, not one"
        )],
    };
    (found.into_iter().map(|(s, _)| s).collect(), differences)
}

/// A case's database, table, topics and running connector.
struct Deployed {
    services: common::Services,
    db: common::TestDb,
    cfg: Config,
    /// The configuration's text, which the relay runs too.
    text: String,
    /// The case's unique topic prefix.
    p: String,
}

/// Makes the case's database, table, publication and topics, and starts
/// its connector on the generated configuration.
async fn deploy(case: &Case) -> Deployed {
    let services = common::services().expect("services");
    let p = common::unique_prefix(case.label);
    let db = services.fresh_db(case.label).await;
    let table = "outboxevent";
    db.client
        .batch_execute(&format!(
            "CREATE TABLE public.{table} ({cols});
             CREATE TABLE public.corpus ({cols});
             CREATE TABLE public.outbox_cdc_heartbeat (id bigserial PRIMARY KEY, connector text NOT NULL, beat_at timestamptz NOT NULL DEFAULT now());
             CREATE PUBLICATION outbox_cdc_publication FOR TABLE public.{table}, public.outbox_cdc_heartbeat;",
            cols = case.columns
        ))
        .await
        .unwrap();
    let mut text = config_text(&services, &db.name, &p, case.label);
    text = text.replace(
        "[outbox]\n",
        &format!("[outbox]\ntable = \"{table}\"\n{}\n", case.outbox),
    );
    text = text.replace("[debezium]\n", &format!("[debezium]\n{}\n", case.debezium));
    if !case.router.is_empty() {
        text.push_str(&format!(
            "\n[outbox.router]\n{}",
            case.router.replace("{p}", &p)
        ));
    }
    text.push_str(&format!("\n{}\n", case.tables));
    let cfg = Config::parse(&text, std::path::Path::new("test.toml"), &common::env)
        .unwrap_or_else(|e| panic!("{}: {e}\n{text}", case.label));
    for (topic, partitions) in case.topics.iter().filter(|_| case.made == Made::Beforehand) {
        let topic = topic.replace("{p}", &p);
        kafka::create_topic(&services.kafka_bootstrap, &topic, *partitions).await;
        kafka::serve_topics(&services.kafka_bootstrap, &[&topic]);
    }
    // The relay's slot, before any row: it streams the same changes once
    // Debezium's records are in.
    db.client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&cfg.postgres.slot],
        )
        .await
        .unwrap();
    start_debezium(&cfg, &db.client).await;
    Deployed {
        services,
        db,
        cfg,
        text,
        p,
    }
}

/// Runs one case: Debezium's records and the router's for the same rows.
async fn run(case: &Case) -> (usize, Vec<String>) {
    let Deployed {
        services,
        db,
        cfg,
        text,
        p,
    } = deploy(case).await;
    let table = "outboxevent";

    // The corpus: each row inserted on its own, then again inserted and
    // deleted in one transaction (the table keeps no status), and updated
    // (the router drops the update with a warning).
    db.client
        .batch_execute(&case.rows.replace("{p}", &p))
        .await
        .unwrap();
    let count: i64 = db
        .client
        .query_one("SELECT count(*) FROM public.corpus", &[])
        .await
        .unwrap()
        .get(0);
    let key_column: String = db
        .client
        .query_one(
            "SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = 'public.corpus'::regclass AND a.attnum = 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    db.client
        .batch_execute(&format!(
            "INSERT INTO public.{table} SELECT * FROM public.corpus ORDER BY 1;
             UPDATE public.{table} SET {key_column} = {key_column};
             DELETE FROM public.{table};
             BEGIN;
             INSERT INTO public.{table} SELECT * FROM public.corpus ORDER BY 1;
             DELETE FROM public.{table};
             COMMIT;"
        ))
        .await
        .unwrap();
    let expected_count = 2 * count as usize;

    // The router's records for the same rows, twice over.
    let columns = crate::contracts::columns(&db.client, "corpus").await;
    let contract = cfg.outbox.contract().unwrap();
    let plan = Plan::new(&contract, &columns).unwrap_or_else(|m| panic!("{m:?}"));
    let select: Vec<String> = columns
        .iter()
        // pgoutput's text forms: a boolean's output function writes t/f,
        // where a cast to text writes true/false; a char(n)'s keeps its
        // padding, which a cast to text strips.
        .map(|c| match c.type_oid {
            16 => format!("CASE WHEN {0} THEN 't' WHEN NOT {0} THEN 'f' END", c.name),
            1042 => format!(
                "CASE WHEN {0} IS NOT NULL THEN format('%s', {0}) END",
                c.name
            ),
            _ => format!("{}::text", c.name),
        })
        .collect();
    let rows = db
        .client
        .query(
            &format!("SELECT {} FROM public.corpus ORDER BY 1", select.join(", ")),
            &[],
        )
        .await
        .unwrap();
    let mut expected: Vec<Seen> = Vec::new();
    for _ in 0..2 {
        for row in &rows {
            let values: Vec<Option<Bytes>> = (0..columns.len())
                .map(|i| row.get::<_, Option<String>>(i).map(Bytes::from))
                .collect();
            let r = plan.record(&values[..], Uuid([0; 16]), Some(0)).unwrap();
            let partitions = case
                .topics
                .iter()
                .find(|(t, _)| t.replace("{p}", &p) == r.topic)
                .map_or(1, |(_, n)| *n);
            expected.push(routed(&r, case.placed, partitions));
        }
    }

    let topics: Vec<String> = case
        .topics
        .iter()
        .map(|(t, _)| t.replace("{p}", &p))
        .collect();
    let topic_refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    let got = kafka::consume(
        &services.kafka_bootstrap,
        &topic_refs,
        expected_count,
        Duration::from_secs(30),
    );
    let failure = task_failure(&cfg).1;
    stop_debezium(&cfg);
    // Slots are few and the suite's tests share the server.
    rep::drop_slot(&db.client, &cfg.debezium.slot).await;
    assert!(
        failure.is_none(),
        "{}: the Debezium task failed: {failure:?}",
        case.label
    );
    let (mut got, mut differences) = one_run(
        case.label,
        "Debezium",
        got.iter().map(|c| consumed(c, case.placed)).collect(),
    );
    let order = |s: &Seen| format!("{s:?}");
    got.sort_by_key(order);
    expected.sort_by_key(order);
    if got.len() != expected.len() {
        differences.push(format!(
            "{}: Debezium emitted {} records, the router {}",
            case.label,
            got.len(),
            expected.len()
        ));
    }
    for e in &expected {
        if !got.contains(e) {
            differences.push(format!(
                "{}: the router's {e:?} is not Debezium's",
                case.label
            ));
        }
    }
    for g in &got {
        if !expected.contains(g) {
            differences.push(format!(
                "{}: Debezium's {g:?} is not the router's",
                case.label
            ));
        }
    }
    differences.extend(relay_phase(case, &text, &topic_refs, &expected, got).await);
    rep::drop_slot(&db.client, &cfg.postgres.slot).await;
    (expected.len(), differences)
}

/// The relay streams the same changes from its own slot into the same
/// topics: what it adds to Debezium's records must be Debezium's records
/// again (with Debezium's already shown to be the router's, every record
/// twice over).
async fn relay_phase(
    case: &Case,
    text: &str,
    topics: &[&str],
    expected: &[Seen],
    debeziums: Vec<Seen>,
) -> Vec<String> {
    let services = common::services().expect("services");
    let dir = std::env::temp_dir()
        .join("outbox-cdc-router")
        .join(std::process::id().to_string());
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.toml", case.label));
    std::fs::write(&path, format!("{text}\n[relay]\ndrain_timeout_secs = 20\n")).unwrap();
    // The dead-letter table, which the relay needs before it streams.
    let out = common::cli::Cli::new(&["migrate"]).config(&path).output();
    assert!(out.status.success(), "{}", common::cli::text(&out));
    let mut relay = common::relay::RelayProcess::spawn(&path);
    let both = kafka::consume(
        &services.kafka_bootstrap,
        topics,
        2 * expected.len(),
        Duration::from_secs(30),
    );
    relay.signal("TERM");
    let status = relay.wait(Duration::from_secs(30));
    let log = common::relay::plain(&relay.log_text());
    let mut differences = Vec::new();
    if status.is_none_or(|s| !s.success()) {
        differences.push(format!(
            "{}: the relay did not stop cleanly ({status:?}):\n{log}",
            case.label
        ));
    }
    let (mut all, _) = one_run(
        case.label,
        "the topics",
        both.iter().map(|c| consumed(c, case.placed)).collect(),
    );
    // Debezium's run and the relay's: two run ids.
    let runs: BTreeSet<Vec<u8>> = both
        .iter()
        .filter_map(|c| run_id_by_form(&mut c.headers.clone()))
        .collect();
    if runs.len() > 2 {
        differences.push(format!(
            "{}: {} run ids among Debezium's and the relay's records, not two",
            case.label,
            runs.len()
        ));
    }
    let mut twice: Vec<Seen> = debeziums
        .into_iter()
        .chain(expected.iter().cloned())
        .collect();
    let order = |s: &Seen| format!("{s:?}");
    all.sort_by_key(order);
    twice.sort_by_key(order);
    if all != twice {
        let extra: Vec<&Seen> = all.iter().filter(|s| !expected.contains(s)).collect();
        differences.push(format!(
            "{}: {} records after the relay ran, {} expected; not Debezium's: {extra:?}\n{log}",
            case.label,
            all.len(),
            twice.len()
        ));
    }
    differences
}

#[tokio::test]
async fn debezium_and_the_router_emit_the_same_records_for_each_contract_and_option() {
    let (documented, custom, expanded, envelope, defaults) = tokio::join!(
        run(&DOCUMENTED),
        run(&CUSTOM),
        run(&EXPANDED),
        run(&EXPANDED_ENVELOPE),
        run(&DEFAULTS)
    );
    let differences: Vec<String> = [&documented, &custom, &expanded, &envelope, &defaults]
        .into_iter()
        .flat_map(|(_, d)| d.iter().cloned())
        .collect();
    assert!(
        differences.is_empty(),
        "{} differences:\n{}",
        differences.len(),
        differences.join("\n")
    );
    eprintln!(
        "router parity, records per case (Debezium, the router and the relay each): documented table {}, custom options {}, expanded payloads {}, expansion with envelope, tombstones and optional_bytes {}, column defaults {}; 0 differences",
        documented.0, custom.0, expanded.0, envelope.0, defaults.0
    );
}

/// A payload whose schema Debezium infers but whose value it cannot
/// convert fails its task; the router refuses the row instead
/// (`PAYLOAD_NOT_REPRODUCED`), so it is recorded and the rest go on.
const FAILING: Case = Case {
    label: "rfail",
    columns: "id uuid NOT NULL PRIMARY KEY, aggregatetype varchar(255) NOT NULL, \
              aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb",
    outbox: "contract = \"debezium\"",
    router: r#""table.expand.json.payload" = "true""#,
    rows: "",
    topics: &[("outbox.event.{p}Order", 1)],
    made: Made::Beforehand,
    placed: Placed::No,
    debezium: "",
    tables: "",
};

#[tokio::test]
async fn where_debeziums_task_fails_on_an_expanded_payload_the_router_refuses_the_row() {
    let Deployed {
        services,
        db,
        cfg,
        text,
        p,
    } = deploy(&FAILING).await;
    let payload = r#"{"big": 123456789012345678901234567890}"#;
    db.client
        .execute(
            "INSERT INTO public.outboxevent VALUES ('00000000-0000-4000-8000-000000000201', $1, 'o-1', 'Big', $2::text::jsonb)",
            &[&format!("{p}Order"), &payload],
        )
        .await
        .unwrap();
    let topic = format!("outbox.event.{p}Order");
    let failed = outcome(&cfg, &services.kafka_bootstrap, &topic).await;
    stop_debezium(&cfg);
    rep::drop_slot(&db.client, &cfg.debezium.slot).await;
    let trace = failed.expect_err("Debezium published the payload");
    assert!(
        trace.contains("DataException: Invalid type for STRUCT: class java.lang.String"),
        "{trace}"
    );

    let columns = crate::contracts::columns(&db.client, "outboxevent").await;
    let plan = Plan::new(&cfg.outbox.contract().unwrap(), &columns).unwrap();
    let values: Vec<Option<Bytes>> = [
        "00000000-0000-4000-8000-000000000201",
        &format!("{p}Order"),
        "o-1",
        "Big",
        r#"{"big": 123456789012345678901234567890}"#,
    ]
    .iter()
    .map(|v| Some(Bytes::copy_from_slice(v.as_bytes())))
    .collect();
    let refused = plan
        .record(&values[..], Uuid([0; 16]), Some(0))
        .unwrap_err();
    assert_eq!(refused.code(), "PAYLOAD_NOT_REPRODUCED");

    // The relay, on the same change: the row goes to the dead-letter table
    // that `migrate` made, whole, and the stream goes on to the next row.
    let path = std::env::temp_dir().join(format!("outbox-cdc-{}-failing.toml", db.name));
    std::fs::write(&path, format!("{text}\n[relay]\ndrain_timeout_secs = 20\n")).unwrap();
    let out = common::cli::Cli::new(&["migrate"]).config(&path).output();
    assert!(out.status.success(), "{}", common::cli::text(&out));
    let mut relay = common::relay::RelayProcess::spawn(&path);
    db.client
        .execute(
            "INSERT INTO public.outboxevent VALUES ('00000000-0000-4000-8000-000000000202', $1, 'o-2', 'Fine', '{\"a\": 1}')",
            &[&format!("{p}Order")],
        )
        .await
        .unwrap();
    let published = kafka::consume(
        &services.kafka_bootstrap,
        &[&topic],
        1,
        Duration::from_secs(30),
    );
    relay.signal("TERM");
    let status = relay.wait(Duration::from_secs(30));
    let log = common::relay::plain(&relay.log_text());
    rep::drop_slot(&db.client, &cfg.postgres.slot).await;
    assert!(status.is_some_and(|s| s.success()), "{status:?}\n{log}");
    let values: Vec<&[u8]> = published
        .iter()
        .filter_map(|c| c.value.as_deref())
        .collect();
    // Expanded, as this case's contract says.
    assert_eq!(values, [&br#"{"a":1}"#[..]], "{log}");
    let letters = db
        .client
        .query(
            "SELECT outbox_table, event_id, topic, code, message, source_row->>'type', source_row->>'payload'
             FROM public.outbox_cdc_dead_letter",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(letters.len(), 1, "{log}");
    let l = &letters[0];
    assert_eq!(l.get::<_, String>(0), "public.outboxevent");
    assert_eq!(
        l.get::<_, Option<String>>(1).as_deref(),
        Some("00000000-0000-4000-8000-000000000201")
    );
    assert_eq!(l.get::<_, Option<String>>(2), None, "it was never routed");
    assert_eq!(l.get::<_, String>(3), "PAYLOAD_NOT_REPRODUCED");
    assert!(l.get::<_, String>(4).contains("Debezium's task fails"));
    assert_eq!(l.get::<_, Option<String>>(5).as_deref(), Some("Big"));
    assert_eq!(
        l.get::<_, Option<String>>(6).as_deref(),
        Some(r#"{"big": 123456789012345678901234567890}"#)
    );
    assert!(log.contains("written to the dead-letter table"), "{log}");
}
