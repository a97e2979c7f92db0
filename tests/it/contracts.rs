//! Contracts other than the platform's on a real table: `check` says which
//! contract fits and what does not, with codes; a relay refuses a contract
//! it does not stream in its delivery mode (a table that keeps no status
//! with transactional delivery), before it touches the database.

use crate::common;
use crate::common::cli::Cli;

use std::path::{Path, PathBuf};
use std::time::Duration;

use outbox_cdc::router::TableColumn;

/// The table of Debezium's outbox documentation, as the guide's page on
/// contracts shows it (its first `sql` block).
fn documented() -> String {
    let page = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/concepts/contracts.md"),
    )
    .unwrap();
    let (_, rest) = page
        .split_once("```sql\n")
        .expect("the page shows the table");
    let (sql, _) = rest.split_once("```").unwrap();
    sql.to_string()
}

/// The relay's test configuration with `outbox` keys added to `[outbox]`
/// and `router` as `[outbox.router]`.
fn with_outbox(base: &Path, name: &str, outbox: &str, router: &str) -> PathBuf {
    let text = std::fs::read_to_string(base).unwrap();
    let path = base.with_file_name(format!("{name}.toml"));
    let mut text = text.replace("[outbox]\n", &format!("[outbox]\n{outbox}\n"));
    if !router.is_empty() {
        text.push_str(&format!("\n[outbox.router]\n{router}\n"));
    }
    std::fs::write(&path, text).unwrap();
    path
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn check_says_which_contract_fits_the_table_and_a_relay_refuses_a_table_not_migrated() {
    let services = require_services!();
    let db = services.fresh_db("contracts").await;
    db.client.batch_execute(&documented()).await.unwrap();
    let prefix = common::unique_prefix("contracts");
    let base = common::relay::config(
        &services,
        &db.name,
        &prefix,
        &format!("{}_relay", db.name),
        "",
    );

    let debezium = with_outbox(
        &base,
        "debezium",
        "contract = \"debezium\"\ntable = \"outboxevent\"",
        "",
    );
    let out = Cli::new(&["check"]).config(&debezium).output();
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("public.outboxevent fits the debezium contract\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("a relay streams the debezium contract: rows routed"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "DEAD_LETTER_MISSING: public.outbox_cdc_dead_letter does not exist: `outbox-cdc migrate` makes it"
        ),
        "{stdout}"
    );
    let transactional_base = common::relay::config(
        &services,
        &db.name,
        &prefix,
        &format!("{}_relay", db.name),
        "delivery = \"transactional\"",
    );
    let transactional = with_outbox(
        &transactional_base,
        "debezium-transactional",
        "contract = \"debezium\"\ntable = \"outboxevent\"",
        "",
    );
    let out = Cli::new(&["check"]).config(&transactional).output();
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("a relay streams the debezium contract: rows routed as the Outbox Event Router routes them, each source transaction and the position it reaches committed in one Kafka transaction"),
        "{stdout}"
    );

    let messaging = with_outbox(&base, "messaging", "table = \"outboxevent\"", "");
    let out = Cli::new(&["check"]).config(&messaging).output();
    let stdout = text(&out.stdout);
    assert_ne!(out.status.code(), Some(0), "{stdout}");
    for expected in [
        "CONTRACT_COLUMN_MISSING: public.outboxevent does not fit the messaging contract: message_id (event id): the table has no such column",
        "CONTRACT_COLUMN_TYPE: public.outboxevent does not fit the messaging contract: payload (payload): is jsonb; the definition says bytea",
        "public.outboxevent fits the debezium contract too (`[outbox] contract`)",
    ] {
        assert!(stdout.contains(expected), "{expected}\n{stdout}");
    }

    // A custom mapping that names a column the table lacks, and a partition
    // column of the wrong type.
    db.client
        .batch_execute("ALTER TABLE public.outboxevent ADD COLUMN shard bigint")
        .await
        .unwrap();
    let custom = with_outbox(
        &base,
        "custom",
        "contract = \"debezium\"\ntable = \"outboxevent\"",
        "\"table.field.event.key\" = \"order_id\"\n\"table.fields.additional.placement\" = \"shard:partition\"",
    );
    let out = Cli::new(&["check"]).config(&custom).output();
    let stdout = text(&out.stdout);
    assert_ne!(out.status.code(), Some(0), "{stdout}");
    for expected in [
        "CONTRACT_COLUMN_MISSING: public.outboxevent does not fit the debezium contract: order_id (key): the table has no such column",
        "CONTRACT_COLUMN_TYPE: public.outboxevent does not fit the debezium contract: shard (partition): is bigint; the router reads the partition as an integer",
    ] {
        assert!(stdout.contains(expected), "{expected}\n{stdout}");
    }

    // What reads the rows' status says there is none, with a code, rather
    // than report an empty window as clean.
    for args in [
        &["audit", "--since", "1h"][..],
        &["replay", "--since", "1h", "--until", "0s"],
    ] {
        let out = Cli::new(args).config(&debezium).output();
        let stderr = text(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(
            stderr.contains("STATUS_NOT_KEPT") && stderr.contains("public.outboxevent keeps none"),
            "{args:?}: {stderr}"
        );
    }

    // `run` refuses a table whose objects are not made yet before it
    // streams anything: no slot is made.
    let out = Cli::new(&["run"]).config(&transactional).output();
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("DEAD_LETTER_MISSING"), "{stderr}");
    let slots: i64 = db
        .client
        .query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(slots, 0);
}

/// A table's columns as the router's plan takes them, from the catalog.
pub(crate) async fn columns(client: &tokio_postgres::Client, table: &str) -> Vec<TableColumn> {
    outbox_cdc::pg::catalog::table_columns(client, "public", table)
        .await
        .unwrap()
}

/// As a new user would try it with Debezium's outbox documentation: the
/// documented table, rows inserted and deleted in one transaction, the
/// relay on `contract = "debezium"`; an oversized row lands in the
/// dead-letter table, and `redrive` publishes it once the topic's limit is
/// raised.
#[tokio::test]
async fn an_oversized_row_waits_in_the_dead_letter_table_until_redrive_publishes_it() {
    use crate::common::kafka;
    let services = require_services!();
    let db = services.fresh_db("deadletter").await;
    db.client.batch_execute(&documented()).await.unwrap();
    db.client
        .batch_execute("CREATE PUBLICATION outbox_cdc_publication FOR TABLE public.outboxevent")
        .await
        .unwrap();
    let p = common::unique_prefix("dl");
    let slot = format!("{}_relay", db.name);
    let base = common::relay::config(&services, &db.name, &p, &slot, "");
    let config = with_outbox(
        &base,
        "debezium",
        "contract = \"debezium\"\ntable = \"outboxevent\"",
        "",
    );
    let out = Cli::new(&["migrate"]).config(&config).output();
    assert!(out.status.success(), "{}", common::cli::text(&out));
    let topic = format!("outbox.event.{p}Order");
    kafka::create_topic_with(
        &services.kafka_bootstrap,
        &topic,
        1,
        &[("max.message.bytes", "20000")],
    )
    .await;

    let mut relay = common::relay::RelayProcess::spawn(&config);
    crate::common::replication::wait_streaming(&db.client, &slot).await;
    for (n, size) in [(1, 10), (2, 50_000), (3, 10)] {
        db.client
            .batch_execute(&format!(
                "BEGIN;
                 INSERT INTO public.outboxevent VALUES ('00000000-0000-4000-8000-00000000000{n}', '{p}Order', 'o-{n}', 'T', jsonb_build_object('s', repeat('x', {size})));
                 DELETE FROM public.outboxevent;
                 COMMIT;"
            ))
            .await
            .unwrap();
    }
    let first = kafka::consume(
        &services.kafka_bootstrap,
        &[&topic],
        2,
        Duration::from_secs(20),
    );
    let keys: Vec<&[u8]> = first.iter().filter_map(|c| c.key.as_deref()).collect();
    assert_eq!(
        keys,
        [&b"\"o-1\""[..], b"\"o-3\""],
        "the rows either side are published"
    );
    let letters = async || {
        db.client
            .query(
                "SELECT event_id, topic, code, kafka_key, length(value) FROM public.outbox_cdc_dead_letter",
                &[],
            )
            .await
            .unwrap()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while letters().await.is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let held = letters().await;
    assert_eq!(held.len(), 1, "{}", relay.log_text());
    assert_eq!(
        held[0].get::<_, String>(0),
        "00000000-0000-4000-8000-000000000002"
    );
    assert_eq!(held[0].get::<_, String>(1), topic);
    assert_eq!(held[0].get::<_, String>(2), "MESSAGE_TOO_LARGE");
    assert_eq!(held[0].get::<_, Vec<u8>>(3), b"\"o-2\"");
    assert!(held[0].get::<_, i32>(4) > 50_000);

    // Only one relay streams a slot: `check` names the process.
    let pid: i32 = db
        .client
        .query_one(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()
        .get(0);
    let out = Cli::new(&["check"]).config(&config).output();
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!("{slot} exists, active for process {pid}")),
        "{}",
        common::cli::text(&out)
    );
    relay.signal("TERM");
    assert!(relay
        .wait(Duration::from_secs(30))
        .is_some_and(|s| s.success()));

    // Still too large: refused again, and kept.
    let out = Cli::new(&["redrive"]).config(&config).output();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", common::cli::text(&out));
    assert!(stdout.contains("1 dead letters for"), "{stdout}");
    assert_eq!(letters().await.len(), 1);

    // `purge` trims the dead letters by age: a copy written two days ago
    // goes, the one refused just now stays.
    db.client
        .batch_execute(
            "INSERT INTO public.outbox_cdc_dead_letter (outbox_table, event_id, topic, kafka_key, header_names, header_values, value, code, message, failed_at)
             SELECT outbox_table, 'aged', topic, kafka_key, header_names, header_values, value, code, message, now() - interval '2 days'
               FROM public.outbox_cdc_dead_letter",
        )
        .await
        .unwrap();
    let out = Cli::new(&["purge", "--older-than", "1d", "--dry-run"])
        .config(&config)
        .output();
    assert!(out.status.success(), "{}", common::cli::text(&out));
    assert!(
        text(&out.stdout).contains("dry run: would delete 1 dead letters written before"),
        "{}",
        common::cli::text(&out)
    );
    assert_eq!(letters().await.len(), 2);
    let out = Cli::new(&["purge", "--older-than", "1d", "--failed-older-than", "1d"])
        .config(&config)
        .output();
    assert_eq!(out.status.code(), Some(2), "{}", common::cli::text(&out));
    assert!(text(&out.stderr).contains("ARGUMENT_INVALID"));
    let out = Cli::new(&["purge", "--older-than", "1d", "--batch", "1"])
        .config(&config)
        .output();
    assert!(out.status.success(), "{}", common::cli::text(&out));
    assert!(
        text(&out.stdout).contains("deleted 1 dead letters written before"),
        "{}",
        common::cli::text(&out)
    );
    let kept = letters().await;
    assert_eq!(kept.len(), 1);
    assert_eq!(
        kept[0].get::<_, String>(0),
        "00000000-0000-4000-8000-000000000002"
    );

    let raised = std::process::Command::new("bash")
        .arg(std::env::var("OUTBOX_TEST_SERVICES").unwrap())
        .arg("kafka-configs")
        .args([
            "--alter",
            "--entity-type",
            "topics",
            "--entity-name",
            &topic,
            "--add-config",
            "max.message.bytes=1048588",
        ])
        .output()
        .unwrap();
    assert!(raised.status.success(), "{raised:?}");
    let out = Cli::new(&["redrive"]).config(&config).output();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", common::cli::text(&out));
    assert!(
        stdout.contains("redrove 1 dead letters: 1 published and removed"),
        "{stdout}"
    );
    assert!(letters().await.is_empty());
    let all = kafka::consume(
        &services.kafka_bootstrap,
        &[&topic],
        3,
        Duration::from_secs(20),
    );
    let keys: Vec<&[u8]> = all.iter().filter_map(|c| c.key.as_deref()).collect();
    assert_eq!(keys, [&b"\"o-1\""[..], b"\"o-3\"", b"\"o-2\""]);
    let redriven = all.last().unwrap();
    // The debezium contract writes Debezium's context headers before the id.
    let names: Vec<&str> = redriven.headers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "__debezium.context.connectorLogicalName",
            "__debezium.context.taskId",
            "__debezium.context.connectorName",
            "__debezium.context.runId",
            "id"
        ]
    );
    assert_eq!(
        redriven.headers.last().unwrap().1.as_deref(),
        Some(&b"00000000-0000-4000-8000-000000000002"[..])
    );
    crate::common::replication::drop_slot(&db.client, &slot).await;
}

/// A topic that takes records up to an hour old
/// (`message.timestamp.before.max.ms`) refuses a row whose event
/// timestamp column is older: that row alone lands in the dead-letter
/// table with `INVALID_TIMESTAMP`; the rows of its batch (librdkafka
/// reports them as refused for another record) are published.
#[tokio::test]
async fn a_record_older_than_its_topic_allows_is_dead_lettered_alone() {
    use crate::common::kafka;
    let services = require_services!();
    let db = services.fresh_db("oldstamp").await;
    db.client
        .batch_execute(
            "CREATE TABLE public.outboxevent (
                 id uuid NOT NULL PRIMARY KEY,
                 aggregatetype varchar(255) NOT NULL,
                 aggregateid varchar(255) NOT NULL,
                 type varchar(255) NOT NULL,
                 payload jsonb,
                 occurred timestamp(3) NOT NULL DEFAULT now());
             CREATE PUBLICATION outbox_cdc_publication FOR TABLE public.outboxevent",
        )
        .await
        .unwrap();
    let p = common::unique_prefix("ts");
    let slot = format!("{}_relay", db.name);
    let base = common::relay::config(&services, &db.name, &p, &slot, "");
    let config = with_outbox(
        &base,
        "oldstamp",
        "contract = \"debezium\"\ntable = \"outboxevent\"",
        "\"table.field.event.timestamp\" = \"occurred\"",
    );
    let out = Cli::new(&["migrate"]).config(&config).output();
    assert!(out.status.success(), "{}", common::cli::text(&out));
    let topic = format!("outbox.event.{p}Order");
    kafka::create_topic_with(
        &services.kafka_bootstrap,
        &topic,
        1,
        &[("message.timestamp.before.max.ms", "3600000")],
    )
    .await;

    let mut relay = common::relay::RelayProcess::spawn(&config);
    crate::common::replication::wait_streaming(&db.client, &slot).await;
    // One transaction: the three records share a batch.
    db.client
        .batch_execute(&format!(
            "BEGIN;
             INSERT INTO public.outboxevent VALUES
               ('00000000-0000-4000-8000-000000000001', '{p}Order', 'o-1', 'T', '{{}}', now()),
               ('00000000-0000-4000-8000-000000000002', '{p}Order', 'o-2', 'T', '{{}}', '2001-02-03 04:05:06'),
               ('00000000-0000-4000-8000-000000000003', '{p}Order', 'o-3', 'T', '{{}}', now());
             DELETE FROM public.outboxevent;
             COMMIT;"
        ))
        .await
        .unwrap();
    let published = kafka::consume(
        &services.kafka_bootstrap,
        &[&topic],
        2,
        Duration::from_secs(30),
    );
    let keys: Vec<&[u8]> = published.iter().filter_map(|c| c.key.as_deref()).collect();
    let letters = async || {
        db.client
            .query(
                "SELECT event_id, code, message FROM public.outbox_cdc_dead_letter",
                &[],
            )
            .await
            .unwrap()
    };
    let shown = |rows: &[tokio_postgres::Row]| {
        rows.iter()
            .map(|r| {
                let column = |i| r.get::<_, String>(i);
                format!("{} {} {}\n", column(0), column(1), column(2))
            })
            .collect::<String>()
    };
    assert_eq!(
        keys,
        [&b"\"o-1\""[..], b"\"o-3\""],
        "{}\n{}",
        shown(&letters().await),
        relay.log_text()
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while letters().await.is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let held = letters().await;
    assert_eq!(held.len(), 1, "{}", relay.log_text());
    assert_eq!(
        held[0].get::<_, String>(0),
        "00000000-0000-4000-8000-000000000002"
    );
    assert_eq!(held[0].get::<_, String>(1), "INVALID_TIMESTAMP");
    relay.signal("TERM");
    assert!(relay
        .wait(Duration::from_secs(30))
        .is_some_and(|s| s.success()));
    // Nothing else was refused, and nothing published twice.
    let all = kafka::consume(
        &services.kafka_bootstrap,
        &[&topic],
        2,
        Duration::from_secs(5),
    );
    assert_eq!(all.len(), 2);
    crate::common::replication::drop_slot(&db.client, &slot).await;
}

/// The relay creates each topic it routes to as the connector's
/// `topic.creation.*` says (`[kafka.topic_creation]`), before its first
/// record: 3 partitions where the broker makes 1, a group's own count for
/// the topics it includes, and every key on the partition Kafka's
/// partitioner gives it among them.
#[tokio::test]
async fn the_relay_creates_topics_as_the_connectors_topic_creation_says() {
    use crate::common::kafka;
    let services = require_services!();
    let db = services.fresh_db("topiccreation").await;
    db.client.batch_execute(&documented()).await.unwrap();
    db.client
        .batch_execute("CREATE PUBLICATION outbox_cdc_publication FOR TABLE public.outboxevent")
        .await
        .unwrap();
    let p = common::unique_prefix("tc");
    let slot = format!("{}_relay", db.name);
    let base = common::relay::config(&services, &db.name, &p, &slot, "");
    let config = with_outbox(
        &base,
        "topiccreation",
        "contract = \"debezium\"\ntable = \"outboxevent\"",
        "",
    );
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(
        "\n[kafka.topic_creation]\n\"default.partitions\" = \"3\"\n\"default.replication.factor\" = \"-1\"\n\
         \"groups\" = \"audit\"\n\"audit.include\" = \"outbox\\\\.event\\\\..*Audit\"\n\"audit.partitions\" = \"2\"\n",
    );
    std::fs::write(&config, text).unwrap();
    let out = Cli::new(&["migrate"]).config(&config).output();
    assert!(out.status.success(), "{}", common::cli::text(&out));
    let (orders, audit) = (
        format!("outbox.event.{p}Order"),
        format!("outbox.event.{p}Audit"),
    );
    assert!(!kafka::topic_exists(&services.kafka_bootstrap, &orders));

    let mut relay = common::relay::RelayProcess::spawn(&config);
    crate::common::replication::wait_streaming(&db.client, &slot).await;
    db.client
        .batch_execute(&format!(
            "BEGIN;
             INSERT INTO public.outboxevent
               SELECT ('00000000-0000-4000-8000-' || lpad(n::text, 12, '0'))::uuid,
                      CASE WHEN n % 2 = 0 THEN '{p}Order' ELSE '{p}Audit' END, 'k-' || n, 'T', '{{}}'
                 FROM generate_series(1, 40) n;
             DELETE FROM public.outboxevent;
             COMMIT;"
        ))
        .await
        .unwrap();
    let got = kafka::consume(
        &services.kafka_bootstrap,
        &[&orders, &audit],
        40,
        Duration::from_secs(20),
    );
    relay.signal("TERM");
    assert!(relay
        .wait(Duration::from_secs(30))
        .is_some_and(|s| s.success()));
    assert_eq!(got.len(), 40, "{}", relay.log_text());
    for (topic, partitions) in [(&orders, 3), (&audit, 2)] {
        assert_eq!(
            kafka::partitions(&services.kafka_bootstrap, topic),
            partitions,
            "{topic}"
        );
        for record in got.iter().filter(|c| &c.topic == topic) {
            let key = record.key.as_deref().unwrap();
            assert_eq!(
                record.partition,
                kafka::java_partition(key, partitions),
                "{topic}: key {}",
                String::from_utf8_lossy(key)
            );
        }
    }
    db.drop(&services).await;
}
