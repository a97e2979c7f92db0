//! Taking a live Debezium outbox over, and handing it back, under load: two
//! writers insert and delete one row per transaction into Debezium's
//! documented table (200 rows/s); Debezium 3.6.1 streams, is stopped, the
//! relay takes its slot over (`cutover --to cdc`), streams, stops, and hands
//! back (`cutover --to debezium`); Debezium resumes. A consumer reads the
//! topic end to end: nothing is lost, what arrives twice is inside the
//! window the cutover reported, and each key's first deliveries keep their
//! order. On Kafka Connect (offsets behind its REST API), with the
//! connector on pgoutput and on decoderbufs (Debezium's default plugin: the
//! relay reads a pgoutput copy of its slot, and hands back a decoderbufs
//! one), on Debezium Server (its offsets file), and with the relay
//! SIGKILLed while it streams. Debezium writes its context headers, as by
//! default.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::*;

mod one_relay;
mod positions;

const WRITERS: usize = 2;
/// Per writer: 2 × 100 = 200 rows/s.
const PERIOD: Duration = Duration::from_millis(10);
const KEYS_PER_WRITER: usize = 10;

/// Where Debezium runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Runtime {
    Connect,
    Server,
}

/// The connector's decoding plugin.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Plugin {
    Pgoutput,
    /// `plugin.name` left out: Debezium's default, decoderbufs.
    Default,
}

/// What happens to the relay while it streams.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Relay {
    Runs,
    Killed,
}

/// A row's id says its writer's key and its sequence number in that key.
fn id(key: usize, seq: u64) -> String {
    format!("00000000-{key:04x}-4000-8000-{seq:012x}")
}

fn key_and_seq(id: &str) -> (usize, u64) {
    let key = usize::from_str_radix(&id[9..13], 16).unwrap();
    let seq = u64::from_str_radix(&id[24..], 16).unwrap();
    (key, seq)
}

/// Writers committing one insert and its delete per transaction.
pub(super) struct Load {
    stop: Arc<AtomicBool>,
    writers: Vec<tokio::task::JoinHandle<Vec<String>>>,
}

impl Load {
    pub(super) async fn start(services: &common::Services, db: &str, aggregate: &str) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let mut writers = Vec::new();
        for w in 0..WRITERS {
            let client = services.connect(db).await;
            let (stop, aggregate) = (stop.clone(), aggregate.to_string());
            writers.push(tokio::spawn(async move {
                let mut committed = Vec::new();
                let mut seq = [0u64; KEYS_PER_WRITER];
                let mut tick = tokio::time::interval(PERIOD);
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    let k = n % KEYS_PER_WRITER;
                    n += 1;
                    let key = w * KEYS_PER_WRITER + k;
                    seq[k] += 1;
                    let id = id(key, seq[k]);
                    let sql = format!(
                        "BEGIN;
                         INSERT INTO public.outboxevent (id, aggregatetype, aggregateid, type, payload)
                           VALUES ('{id}', '{aggregate}', 'k{key}', 'Written', '{{\"seq\": {}}}');
                         DELETE FROM public.outboxevent WHERE id = '{id}';
                         COMMIT;",
                        seq[k]
                    );
                    client.batch_execute(&sql).await.unwrap();
                    committed.push(id);
                }
                committed
            }));
        }
        Load { stop, writers }
    }

    pub(super) async fn stop(self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for w in self.writers {
            all.extend(w.await.unwrap());
        }
        all
    }
}

async fn slot_inactive(client: &tokio_postgres::Client, slot: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let active: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active",
                &[&slot],
            )
            .await
            .unwrap()
            .get(0);
        if active == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "slot {slot} stays active");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn connect_call(method: &str, cfg: &Config, tail: &str) {
    let (status, text) = http(
        method,
        &format!("/connectors/{}/{tail}", cfg.debezium.connector_name),
        None,
    );
    assert!(
        (200..300).contains(&status),
        "{method} {tail}: {status} {text}"
    );
}

fn connector_state(cfg: &Config) -> String {
    let (_, text) = http(
        "GET",
        &format!("/connectors/{}/status", cfg.debezium.connector_name),
        None,
    );
    let status: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    status["connector"]["state"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// A cutover through the command line; its standard output.
fn cutover(path: &std::path::Path, args: &[&str]) -> String {
    let mut all = vec!["cutover"];
    all.extend_from_slice(args);
    let out = common::cli::Cli::new(&all).config(path).output();
    let text = common::cli::text(&out);
    assert!(out.status.success(), "cutover {args:?}: {text}");
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The number before `label` in the cutover's report, 0 without it.
fn figure(report: &str, label: &str) -> i64 {
    let Some(at) = report.find(label) else {
        return 0;
    };
    report[..at]
        .split_whitespace()
        .last()
        .and_then(|n| n.trim_start_matches('(').parse().ok())
        .unwrap_or_else(|| panic!("no figure before {label:?} in: {report}"))
}

/// Rows of transactions after `slot`'s confirmed position up to `upto`:
/// what a relay killed before confirming them sends again.
async fn unconfirmed_rows(client: &tokio_postgres::Client, slot: &str, upto: &str) -> i64 {
    client
        .query_one(
            "SELECT count(*) FILTER (WHERE get_byte(data, 0) = 73)
               FROM pg_logical_slot_peek_binary_changes($1, $2::text::pg_lsn, NULL,
                      'proto_version', '1', 'publication_names', 'outbox_cdc_publication')",
            &[&slot, &upto],
        )
        .await
        .unwrap()
        .get(0)
}

/// A database with Debezium's documented outbox table, the heartbeat
/// table and the publication of both.
pub(super) async fn documented_table(services: &common::Services, label: &str) -> common::TestDb {
    let db = services.fresh_db(label).await;
    db.client
        .batch_execute(
            "CREATE TABLE public.outboxevent (id uuid NOT NULL PRIMARY KEY, aggregatetype varchar(255) NOT NULL,
                aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb);
             CREATE TABLE public.outbox_cdc_heartbeat (id bigserial PRIMARY KEY, connector text NOT NULL,
                beat_at timestamptz NOT NULL DEFAULT now());
             CREATE PUBLICATION outbox_cdc_publication FOR TABLE public.outboxevent, public.outbox_cdc_heartbeat;",
        )
        .await
        .unwrap();
    db
}

/// The connector as Debezium's outbox documentation writes it for
/// PostgreSQL (the Event Router alone, pgoutput), with its converters
/// named; its context headers as by default.
pub(super) fn documented_connector(
    services: &common::Services,
    db: &str,
    name: &str,
) -> serde_json::Map<String, serde_json::Value> {
    let config = serde_json::json!({
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1",
        "database.hostname": services.pg_host,
        "database.port": services.pg_port.to_string(),
        "database.user": services.pg_user,
        "database.password": "${env:OUTBOX_TEST_PG_PASSWORD}",
        "database.dbname": db,
        "topic.prefix": name,
        "plugin.name": "pgoutput",
        "slot.name": format!("{db}_dbz"),
        "publication.name": "outbox_cdc_publication",
        "table.include.list": "public.outboxevent",
        "tombstones.on.delete": "false",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.storage.StringConverter",
        "header.converter": "org.apache.kafka.connect.storage.SimpleHeaderConverter",
        "transforms": "outbox",
        "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
    });
    config.as_object().unwrap().clone()
}

/// `connector-config import` of the running connector's configuration, as
/// Connect's REST API gives it; the relay's own slot named (slots are the
/// server's, shared by the suite's tests) and a shorter drain.
pub(super) fn imported(
    services: &common::Services,
    dir: &std::path::Path,
    path: &std::path::Path,
    name: &str,
    slot: &str,
) -> Config {
    let (status, text) = http("GET", &format!("/connectors/{name}/config"), None);
    assert_eq!(status, 200, "{text}");
    let from = dir.join("connector.json");
    std::fs::write(&from, text).unwrap();
    let out = common::cli::Cli::new(&[
        "connector-config",
        "import",
        from.to_str().unwrap(),
        "--bootstrap-servers",
        &services.kafka_bootstrap,
        "--connect",
        &std::env::var("OUTBOX_TEST_CONNECT_URL").unwrap(),
    ])
    .output();
    assert!(out.status.success(), "{}", common::cli::text(&out));
    let made = String::from_utf8(out.stdout).unwrap();
    // The release comes from the connector's status (Kafka 4.1+).
    assert!(
        made.contains(&format!(
            "# Debezium 3.6.1.Final, as connector {name}'s tasks run it, by Kafka Connect's status\nversion = \"3.6.1\"\n"
        )),
        "{made}"
    );
    let text = made.replacen(
        "[postgres]\n",
        &format!("[postgres]\nslot = \"{slot}\"\n"),
        1,
    );
    assert!(text.contains("contract = \"debezium\""), "{text}");
    std::fs::write(path, format!("{text}\n[relay]\ndrain_timeout_secs = 20\n")).unwrap();
    Config::load(path, &common::env).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

async fn takeover_and_hand_back(runtime: Runtime, relay_fate: Relay, plugin: Plugin) {
    let label = match (runtime, relay_fate, plugin) {
        (Runtime::Connect, Relay::Runs, Plugin::Pgoutput) => "tkc",
        (Runtime::Connect, Relay::Runs, Plugin::Default) => "tkd",
        (Runtime::Connect, Relay::Killed, _) => "tkk",
        (Runtime::Server, _, _) => "tks",
    };
    let services = require_services!();
    let p = common::unique_prefix(label);
    let db = documented_table(&services, label).await;
    let aggregate = format!("{p}Order");
    let topic = format!("outbox.event.{aggregate}");
    kafka::create_topic(&services.kafka_bootstrap, &topic, 3).await;
    kafka::serve_topics(&services.kafka_bootstrap, &[&topic]);
    let dir = std::env::temp_dir()
        .join("outbox-cdc-takeover")
        .join(format!("{}-{label}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("relay.toml");
    let connect_url = std::env::var("OUTBOX_TEST_CONNECT_URL").unwrap();

    // Debezium streams: on Connect, as Debezium's outbox documentation
    // configures it, and the relay's file is what `connector-config import`
    // makes of it; on Server, the configuration the relay generates.
    let mut server = None;
    let cfg = match runtime {
        Runtime::Connect => {
            let name = format!("{}-{label}", db.name);
            let mut connector = documented_connector(&services, &db.name, &name);
            if plugin == Plugin::Default {
                connector.remove("plugin.name");
            }
            start_connector(&name, connector, &format!("{}_dbz", db.name), &db.client).await;
            imported(&services, &dir, &path, &name, &format!("{}_relay", db.name))
        }
        Runtime::Server => {
            let text = config_text(&services, &db.name, &p, label).replace(
                "[outbox]\n",
                "[outbox]\ntable = \"outboxevent\"\ncontract = \"debezium\"\n",
            );
            std::fs::write(&path, format!("{text}\n[relay]\ndrain_timeout_secs = 20\n")).unwrap();
            let mut cfg =
                Config::parse(&text, std::path::Path::new("test.toml"), &common::env).unwrap();
            cfg.debezium.server.offset_flush_interval_ms = 1000;
            server = Some(start_debezium_server(&cfg, &db.client).await);
            cfg
        }
    };
    let out = common::cli::Cli::new(&["migrate"]).config(&path).output();
    assert!(out.status.success(), "{}", common::cli::text(&out));
    let offsets_file = server_dir(&cfg).join("data/offsets.dat");
    let offsets_file = offsets_file.to_string_lossy().to_string();
    // On Connect, the positions move over its HTTPS listener, which
    // requires the client's certificate.
    let var = |name: &str| std::env::var(name).unwrap();
    let (https, ca) = (
        var("OUTBOX_TEST_CONNECT_HTTPS_URL"),
        var("OUTBOX_TEST_PG_CA"),
    );
    let (cert, key) = (
        var("OUTBOX_TEST_CONNECT_CLIENT_CERT"),
        var("OUTBOX_TEST_CONNECT_CLIENT_KEY"),
    );
    let store: Vec<&str> = match runtime {
        Runtime::Connect => vec![
            "--connect",
            &https,
            "--connect-ca",
            &ca,
            "--connect-cert",
            &cert,
            "--connect-key",
            &key,
        ],
        Runtime::Server => vec!["--offset-file", &offsets_file],
    };

    // Under load, then stopped.
    let load = Load::start(&services, &db.name, &aggregate).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    match runtime {
        Runtime::Connect => {
            // The refusal while it runs names how to stop it.
            let out = common::cli::Cli::new(&["cutover", "--to", "cdc", "--connect", &connect_url])
                .config(&path)
                .output();
            let refusal = common::cli::text(&out);
            assert!(!out.status.success(), "{refusal}");
            assert!(refusal.contains("CONNECTOR_NOT_STOPPED"), "{refusal}");
            assert!(refusal.contains("/stop"), "{refusal}");
            connect_call("PUT", &cfg, "stop");
            let deadline = Instant::now() + Duration::from_secs(60);
            while connector_state(&cfg) != "STOPPED" {
                assert!(Instant::now() < deadline, "the connector did not stop");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Runtime::Server => drop(server.take()),
    }
    slot_inactive(&db.client, &cfg.debezium.slot).await;
    let stopped_at = Instant::now();

    // The relay takes over.
    let mut args = vec!["--to", "cdc"];
    args.extend(&store);
    let took = cutover(&path, &args);
    let skipped = figure(&took, "outbox rows) it published");
    let partial = i64::from(took.contains("sent again whole"));
    // Where Debezium's output ends, by partition: what comes after is the relay's.
    let debezium_ends = kafka::ends(&services.kafka_bootstrap, &topic);
    let before: i64 = debezium_ends.iter().sum();
    let taken_at = Instant::now();
    let mut relay = common::relay::RelayProcess::spawn(&path);
    // The first record the relay writes: how long the stream stood still.
    let first_record = loop {
        if kafka::written(&services.kafka_bootstrap, &topic) > before {
            break taken_at.elapsed();
        }
        assert!(
            taken_at.elapsed() < Duration::from_secs(60),
            "the relay wrote nothing:\n{}",
            relay.log_text()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let stood_still = stopped_at.elapsed() - taken_at.elapsed() + first_record;
    let mut resent_by_kill = 0;
    if relay_fate == Relay::Killed {
        tokio::time::sleep(Duration::from_secs(2)).await;
        relay.signal("KILL");
        relay.wait(Duration::from_secs(10));
        let upto: String = db
            .client
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .await
            .unwrap()
            .get(0);
        slot_inactive(&db.client, &cfg.postgres.slot).await;
        resent_by_kill = unconfirmed_rows(&db.client, &cfg.postgres.slot, &upto).await;
        relay = common::relay::RelayProcess::spawn(&path);
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    relay.signal("TERM");
    let status = relay.wait(Duration::from_secs(30));
    let log = common::relay::plain(&relay.log_text());
    assert!(
        status.is_some_and(|s| s.success()),
        "the relay did not stop cleanly:\n{log}"
    );

    // And hands back.
    let mut args = vec!["--to", "debezium"];
    args.extend(&store);
    let handed = cutover(&path, &args);
    let handed_ms = taken_at.elapsed().as_millis() as i64;
    assert!(handed.contains("handed back"), "{handed}");
    match runtime {
        Runtime::Connect => {
            connect_call("PUT", &cfg, "resume");
            let deadline = Instant::now() + Duration::from_secs(120);
            while !slot_streams(&db.client, &cfg.debezium.slot).await {
                assert!(
                    Instant::now() < deadline,
                    "Debezium did not resume: {:?}",
                    task_failure(&cfg)
                );
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
        Runtime::Server => server = Some(restart_debezium_server(&cfg, &db.client).await),
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    let committed = load.stop().await;

    // A consumer reads the topic end to end.
    let got = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        committed.len(),
        Duration::from_secs(30),
    );
    let failure = match runtime {
        Runtime::Connect => task_failure(&cfg).1,
        Runtime::Server => None,
    };
    match runtime {
        Runtime::Connect => stop_debezium(&cfg),
        Runtime::Server => drop(server.take()),
    }
    assert!(failure.is_none(), "the Debezium task failed: {failure:?}");
    let by_id = kafka::by_id(&got);
    let lost: Vec<&String> = committed
        .iter()
        .filter(|id| !by_id.contains_key(*id))
        .collect();
    let duplicates: usize = by_id.values().map(|r| r.len() - 1).sum();
    // Rows Debezium published and the relay sent again: each partition's
    // tail of Debezium's output, past the offset Debezium stored. Debezium
    // Server can store its offset without its last batch even when stopped
    // cleanly (a run wrote 44 rows after its stored offset), so on Server
    // the tail may be up to 2 s of the load; on Connect only the partial
    // transaction the cutover reported.
    let mut tails: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for copies in by_id.values().filter(|r| r.len() > 1) {
        let mut offsets: Vec<i64> = copies.iter().map(|c| c.offset).collect();
        offsets.sort_unstable();
        let partition = copies[0].partition;
        let end = debezium_ends[partition as usize];
        if offsets[0] < end && offsets[1..].iter().all(|o| *o >= end) {
            tails.entry(partition).or_default().push(offsets[0]);
        }
    }
    for (partition, offsets) in &mut tails {
        offsets.sort_unstable();
        let end = debezium_ends[*partition as usize];
        let tail: Vec<i64> = (end - offsets.len() as i64..end).collect();
        assert_eq!(
            *offsets, tail,
            "partition {partition}: the rows sent again are not the tail of Debezium's output"
        );
    }
    let debezium_tail: usize = tails.values().map(Vec::len).sum();
    let tail_allowed = match runtime {
        Runtime::Connect => partial as usize,
        Runtime::Server => 2 * WRITERS * (1000 / PERIOD.as_millis() as usize),
    };
    assert!(
        debezium_tail <= tail_allowed,
        "{debezium_tail} rows of Debezium's output sent again, {tail_allowed} allowed"
    );
    let allowed = debezium_tail.max(partial as usize) + resent_by_kill as usize;
    // Each key's first deliveries, in the order its partition holds them.
    let mut sorted: Vec<&Consumed> = got.iter().collect();
    sorted.sort_by_key(|r| (r.partition, r.offset));
    let mut seen = std::collections::HashSet::new();
    let mut last = std::collections::HashMap::new();
    let mut disorder = Vec::new();
    for r in sorted {
        let id = r.id();
        if !seen.insert(id.clone()) {
            continue;
        }
        let (key, seq) = key_and_seq(&id);
        if let Some(prev) = last.insert(key, seq) {
            if prev >= seq {
                disorder.push(format!("key {key}: {seq} after {prev}"));
            }
        }
    }
    let taken_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        - taken_at.elapsed().as_millis() as i64;
    eprintln!(
        "takeover on {runtime:?} ({relay_fate:?}): {} rows committed, {} lost, {duplicates} duplicates \
         (allowed: {partial} partial transaction + {resent_by_kill} unconfirmed at the kill; \
         {debezium_tail} rows Debezium published past its stored offset); skipped at takeover: {skipped} rows Debezium published but had not confirmed; \
         first record from the relay {} ms after it started, {} ms after Debezium stopped",
        committed.len(),
        lost.len(),
        first_record.as_millis(),
        stood_still.as_millis()
    );
    assert!(
        lost.is_empty(),
        "{} lost: {:?}\n{took}\n{handed}\n{log}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
    let twice: Vec<String> = by_id
        .iter()
        .filter(|(_, r)| r.len() > 1)
        .map(|(id, r)| {
            let copies: Vec<String> = r
                .iter()
                .map(|c| {
                    format!(
                        "p{}@{} t{:+}ms",
                        c.partition,
                        c.offset,
                        c.timestamp.unwrap_or(0) - taken_ms
                    )
                })
                .collect();
            format!("{id}: {}", copies.join(", "))
        })
        .collect();
    assert!(
        duplicates <= allowed,
        "{duplicates} duplicates, {allowed} allowed by the reported windows (times from the takeover; hand-back at {handed_ms:+}ms): {twice:?}\n{took}\n{handed}"
    );
    assert!(disorder.is_empty(), "per-key order: {disorder:?}");
    assert!(
        committed.len() > 1500,
        "the load wrote {} rows",
        committed.len()
    );
    rep::drop_slot(&db.client, &cfg.debezium.slot).await;
    std::fs::remove_dir_all(&dir).ok();
    std::fs::remove_dir_all(server_dir(&cfg)).ok();
    db.drop(&services).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_takes_over_from_debezium_on_connect_and_hands_back_without_loss() {
    takeover_and_hand_back(Runtime::Connect, Relay::Runs, Plugin::Pgoutput).await;
}

/// PostgreSQL 15 only: Debian packages decoderbufs for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decoderbufs_a_connector_on_debeziums_default_plugin_is_taken_over_and_handed_back_without_loss(
) {
    takeover_and_hand_back(Runtime::Connect, Relay::Runs, Plugin::Default).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_killed_after_the_takeover_resends_only_what_it_had_not_confirmed() {
    takeover_and_hand_back(Runtime::Connect, Relay::Killed, Plugin::Pgoutput).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_takes_over_from_debezium_server_and_hands_back_by_its_offsets_file() {
    takeover_and_hand_back(Runtime::Server, Relay::Runs, Plugin::Pgoutput).await;
}
