//! The baselines each drain is weighed against: the slot read alone (the
//! reader, no Kafka) and the produce alone (librdkafka with the relay's
//! settings, no PostgreSQL), each as fast as it goes and paced.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, Result};
use rdkafka::producer::{Producer, ThreadedProducer};
use serde_json::{json, Value as Json};
use tokio_postgres::Client;

use outbox_cdc::config::{Config, Secret, SslMode};
use outbox_cdc::contract::definition::Contract;
use outbox_cdc::contract::outbox;
use outbox_cdc::kafka::enqueue::{Enqueuer, Outgoing};
use outbox_cdc::kafka::settings;
use outbox_cdc::lsn::Lsn;
use outbox_cdc::replication::{
    slot, ConnectOptions, Event, Feedback, ReplicationConnection, SourceOptions, Stream,
};
use outbox_cdc::router::{Plan, Record};

use crate::args::Args;
use crate::collect::Collector;
use crate::cpu::{
    jiffies_us, machine_cpu, machine_fields, machine_shares, processes, CpuTrace, WINDOW_COST,
};
use crate::engine::Engine;
use crate::engines::{create_topic, delete_topic, drop_bench, prepare, write_backlog};
use crate::numbers::{now_ms, round};
use crate::services::Services;
use crate::*;

/// Whether the read baseline also maps a slot's rows into records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keep {
    /// Its figures only.
    Figures,
    /// Its figures and the records the produce baseline sends.
    Records,
}

/// The raw slot-read cost of a backlog in transactions of `per_tx`: the
/// library's reader with no Kafka, read twice from two slots at one position.
/// Once as fast as it goes, once paced to [`READ_PACE`] of that rate,
/// because a reader that keeps up takes each message as the walsender sends
/// it, one segment and one wake-up each, while a relay busy producing lets
/// the socket fill and the walsender write large segments, which costs both
/// sides less per row. The bound takes the cheaper of the two: what reading
/// costs at least. With `records`, a third slot's rows mapped into the
/// records the produce baseline sends (not timed).
pub(crate) async fn slot_read(
    s: &Services,
    a: &Args,
    per_tx: i64,
    keep: Keep,
) -> Result<(Json, Vec<Record>)> {
    let records = keep == Keep::Records;
    eprintln!(
        "[bench] baseline: slot read of {} rows in transactions of {per_tx}",
        a.rows
    );
    let name = "bench_baseline";
    let b = prepare(s, a, name, Engine::Relay).await?;
    let opts = ConnectOptions {
        host: s.base.pg_host.clone(),
        port: s.base.pg_port,
        dbname: name.into(),
        user: s.base.pg_user.clone(),
        password: Some(Secret::new(s.base.pg_password.clone())),
        sslmode: SslMode::Disable,
        sslrootcert: None,
        application_name: "outbox-cdc-bench".into(),
        connect_timeout: Duration::from_secs(10),
        user_timeout: Duration::from_secs(30),
        more_hosts: Vec::new(),
    };
    let source = SourceOptions {
        connect: opts.clone(),
        slot: format!("{name}_read"),
        publication: b.config.postgres.publication.clone(),
        schema: "public".into(),
        table: "messaging_outbox".into(),
        create_slot: false,
        failover_slot: false,
        streamed_before: false,
        own_walsender: None,
        messages: false,
        routed: None,
        run: Default::default(),
        // As the relay reads it (`relay.pgoutput_binary`).
        binary: std::env::var("BENCH_RELAY_SETTINGS")
            .map_or(true, |s| !s.contains("pgoutput_binary = false")),
        tuning: Default::default(),
    };
    let paced_slot = format!("{name}_paced");
    let records_slot = format!("{name}_records");
    let mut conn = ReplicationConnection::connect(&opts).await?;
    slot::create(&mut conn, &source.slot, NO_SNAPSHOT).await?;
    slot::create(&mut conn, &paced_slot, NO_SNAPSHOT).await?;
    if records {
        slot::create(&mut conn, &records_slot, NO_SNAPSHOT).await?;
    }
    conn.close().await;
    write_backlog(&b, a.rows, a.payload, per_tx).await?;

    let free = timed_read(&b.client, &source, a.rows, None).await?;
    let pace = free["throughput_msg_s"].as_f64().unwrap_or(0.0) * READ_PACE;
    let source = SourceOptions {
        slot: paced_slot,
        ..source
    };
    let paced = timed_read(&b.client, &source, a.rows, Some(pace).filter(|p| *p > 0.0)).await?;
    let run = cheaper_of(free, paced, pace, "row");

    let mut out = Vec::new();
    if records {
        let source = SourceOptions {
            slot: records_slot,
            ..source
        };
        let (feedback, _) = Feedback::new(Lsn::ZERO);
        let mut stream = Stream::open(&b.client, &source, &feedback).await?;
        let plan = Plan::of_definition(&Contract::messaging(&b.config.outbox.topic_prefix))?;
        let mut commit_time = None;
        while (out.len() as i64) < a.rows {
            match stream.events.recv().await {
                Some(Event::Begin {
                    commit_time: at, ..
                }) => commit_time = Some(at),
                Some(Event::Rows(r)) => {
                    let at = commit_time.ok_or_else(|| anyhow!("a row outside a transaction"))?;
                    for row in r {
                        let id = row
                            .message_id()
                            .ok_or_else(|| anyhow!("a row without an id"))?;
                        let record = plan.record(&row, id, at.unix_millis());
                        out.push(record.map_err(|e| anyhow!("{e:?}"))?);
                    }
                }
                Some(Event::Commit { end_lsn, .. }) => feedback.settle(end_lsn),
                Some(Event::Changes(_)) => return Err(anyhow!("a routed table's changes")),
                Some(Event::CaughtUp) => {}
                None => break,
            }
        }
        let _ = stream.stop().await;
    }
    drop_bench(s, b).await?;
    Ok((run, out))
}

/// One timed read of `rows` rows from `source`'s slot, keeping none of them
/// (the relay holds a row only until Kafka has it, and 200 000 rows held
/// would time the bench's own allocations); with `pace`, no faster than that
/// many rows per second.
pub(crate) async fn timed_read(
    client: &Client,
    source: &SourceOptions,
    rows: i64,
    pace: Option<f64>,
) -> Result<Json> {
    let (feedback, _) = Feedback::new(Lsn::ZERO);
    let procs0 = processes();
    let fields0 = machine_fields();
    let trace = CpuTrace::start();
    let start = Instant::now();
    let cpu0 = machine_cpu();
    let mut stream = Stream::open(client, source, &feedback).await?;
    let mut read = 0usize;
    let mut next_check = 1000;
    let (mut first, mut last, mut first_chunk) = (0.0, 0.0, 0);
    while (read as i64) < rows {
        match stream.events.recv().await {
            Some(Event::Rows(r)) => {
                if read == 0 {
                    first = now_ms();
                    first_chunk = r.len();
                }
                read += r.len();
                last = now_ms();
                if let Some(pace) = pace.filter(|_| read >= next_check) {
                    next_check += 1000;
                    let due = Duration::from_secs_f64(read as f64 / pace);
                    if let Some(wait) = due.checked_sub(start.elapsed()) {
                        tokio::time::sleep(wait).await;
                    }
                }
            }
            Some(Event::Commit { end_lsn, .. }) => feedback.settle(end_lsn),
            Some(_) => {}
            None => break,
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu1 = machine_cpu();
    let procs1 = processes();
    let fields1 = machine_fields();
    let _ = stream.stop().await;
    let shares = machine_shares(&procs0, &procs1, &fields0, &fields1, read);
    // Rows come in chunks: the first chunk's rows are not in the window.
    let in_window = trace.busy_us(first, last) / read.saturating_sub(first_chunk).max(1) as f64;
    Ok(json!({"first_to_last_s": round(secs, 3),
              WINDOW_COST: round(in_window, 1),
              "throughput_msg_s": round(read as f64 / secs, 0),
              "machine_cpu_us_per_msg": round(jiffies_us(cpu0, cpu1) / read.max(1) as f64, 1),
              "machine_cpu_us_per_msg_by_process": shares}))
}

/// How many distinct records the produce baseline cycles through: about the
/// relay's in-flight window.
pub(crate) const HOT_RECORDS: usize = 5000;

/// The raw produce cost: the same records produced by librdkafka with the
/// relay's producer settings and no PostgreSQL, timed in Kafka like the
/// rest. Once as fast as it goes, once paced to [`PRODUCE_PACE`] of that
/// rate, because a producer that outruns its broker thread contends with it
/// for every partition queue, where a relay drain hands over records at
/// about half that rate. The bound takes the cheaper of the two.
pub(crate) async fn raw_produce(s: &Services, a: &Args, records: &[Record]) -> Result<Json> {
    eprintln!(
        "[bench] baseline: producing {} records with no PostgreSQL",
        records.len()
    );
    let free = produce_once(s, a, records, None).await?;
    let pace = free["throughput_msg_s"].as_f64().unwrap_or(0.0) * PRODUCE_PACE;
    let paced = produce_once(s, a, records, Some(pace).filter(|p| *p > 0.0)).await?;
    Ok(cheaper_of(free, paced, pace, "msg"))
}

/// A baseline's result from its free and paced runs: the free run's rate,
/// the cheaper run's machine time (a bound counts what the work costs at
/// least), both runs kept.
pub(crate) fn cheaper_of(free: Json, paced: Json, pace: f64, unit: &str) -> Json {
    let cost = |r: &Json| r[WINDOW_COST].as_f64().unwrap_or(f64::MAX);
    let cheaper = if cost(&paced) < cost(&free) {
        &paced
    } else {
        &free
    };
    eprintln!(
        "[bench]   {} {unit}/s at {} µs/{unit}; paced at {pace:.0}: {} µs/{unit}",
        free["throughput_msg_s"], free[WINDOW_COST], paced[WINDOW_COST]
    );
    json!({
        "first_to_last_s": free["first_to_last_s"],
        "throughput_msg_s": free["throughput_msg_s"],
        "machine_cpu_us_per_msg": cheaper["machine_cpu_us_per_msg"],
        WINDOW_COST: cheaper[WINDOW_COST],
        "machine_cpu_us_per_msg_by_process": cheaper["machine_cpu_us_per_msg_by_process"],
        "unpaced": free,
        "paced": paced,
    })
}

/// One timed produce of `records` to a topic of its own; with `pace`, no
/// faster than that many records per second.
pub(crate) async fn produce_once(
    s: &Services,
    a: &Args,
    records: &[Record],
    pace: Option<f64>,
) -> Result<Json> {
    let prefix = format!(
        "bench_produce-{}.",
        SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs()
    );
    let topic = format!("{prefix}{DESTINATION}");
    create_topic(&s.kafka, &topic, a.partitions).await?;
    let collector = Collector::start(&s.kafka, &topic, a.partitions, Engine::Relay)?;
    let text = format!("[postgres]\nhost = \"h\"\ndbname = \"d\"\nuser = \"u\"\n[outbox]\n[kafka]\nbootstrap_servers = \"{}\"\n", s.kafka);
    let cfg =
        Config::parse(&text, Path::new("bench.toml"), &|_| None).map_err(|e| anyhow!("{e}"))?;
    let cluster = cfg.kafka_cluster(&|_| None).map_err(|e| anyhow!("{e}"))?;
    let cc = settings::producer_config(&cluster, None);
    // As the relay produces: a polling thread serves delivery reports, and
    // records go in through the relay's own topic handles.
    let producer: ThreadedProducer<rdkafka::producer::DefaultProducerContext> = cc.create()?;
    let out = Enqueuer::new(std::sync::Arc::new(producer));
    let n = records.len();
    let procs0 = processes();
    let fields0 = machine_fields();
    let trace = CpuTrace::start();
    let start = Instant::now();
    let cpu0 = machine_cpu();
    // Records from a working set of the size the relay has in hand, each
    // with an id of its own: read from an array of 200 000 records, every
    // one missed the cache (the relay produces records it has just decoded),
    // and the baseline cost more per message than a relay drain's producing.
    let hot = &records[..records.len().min(HOT_RECORDS)];
    let mut id = String::with_capacity(36);
    for (n, r) in (0..n).zip(hot.iter().cycle()) {
        if let Some(pace) = pace.filter(|_| n % 1000 == 0) {
            let due = Duration::from_secs_f64(n as f64 / pace);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        id.clear();
        write!(id, "00000000-0000-4000-8000-{n:012}")?;
        loop {
            let headers = r
                .headers()
                .map(|(name, value)| match name == outbox::ID_HEADER.name {
                    true => (name, Some(id.as_bytes())),
                    false => (name, value),
                });
            let parts = Outgoing {
                topic: &topic,
                key: r.key_bytes(),
                value: r.value_bytes(),
                headers,
                partition: None,
                timestamp_ms: r.timestamp_ms,
            };
            match out.enqueue(parts, ()) {
                Ok(()) => break,
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }
    out.producer().flush(Duration::from_secs(120))?;
    let wall = start.elapsed().as_secs_f64();
    collector.wait_for(n, Duration::from_secs(300)).await?;
    let cpu1 = machine_cpu();
    let shares = machine_shares(&procs0, &processes(), &fields0, &machine_fields(), n);
    let seen = collector.finish()?;
    delete_topic(&s.kafka, &topic).await?;
    let first = seen.first.values().min().copied().unwrap_or(0);
    let last = seen.first.values().max().copied().unwrap_or(0);
    let span_s = (last - first).max(1) as f64 / 1000.0;
    let rate = (n - 1) as f64 / span_s;
    let in_window = trace.busy_us(first as f64, last as f64) / (n - 1) as f64;
    Ok(json!({"first_to_last_s": round(span_s, 3),
               WINDOW_COST: round(in_window, 1), "producer_wall_s": round(wall, 3), "throughput_msg_s": round(rate, 0),
               "machine_cpu_us_per_msg": round(jiffies_us(cpu0, cpu1) / n as f64, 1),
               "machine_cpu_us_per_msg_by_process": shares}))
}
