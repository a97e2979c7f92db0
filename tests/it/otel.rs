//! `[otel]` against a real OpenTelemetry Collector (OTLP receiver, debug
//! exporter; built by `scripts/services.sh`): the relay's spans arrive with
//! the row's trace id and its span as their parent, a row whose trace is
//! not sampled gets none, and the records keep their bytes unless
//! `propagate` is set, which writes the relay's span into `traceparent`.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::common::kafka;
use crate::common::relay::{self, RelayProcess};
use crate::common::{self, replication as rep};

/// A collector on free ports, printing every span it receives.
struct Collector {
    child: Child,
    log: PathBuf,
    http: u16,
    grpc: u16,
}

impl Collector {
    fn start(name: &str) -> Collector {
        let bin = std::env::var("OUTBOX_TEST_OTELCOL")
            .unwrap_or_else(|_| panic!("OUTBOX_TEST_OTELCOL from scripts/services.sh env"));
        assert!(
            std::path::Path::new(&bin).exists(),
            "{bin} is missing: scripts/services.sh install builds it"
        );
        let (http, grpc) = (common::free_port(), common::free_port());
        let dir =
            std::env::temp_dir().join(format!("outbox-cdc-otel-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("collector.yaml");
        std::fs::write(
            &config,
            format!(
                "receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{http}
      grpc:
        endpoint: 127.0.0.1:{grpc}
exporters:
  debug:
    verbosity: detailed
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [debug]
"
            ),
        )
        .unwrap();
        let log = dir.join("collector.log");
        let child = Command::new(bin)
            .arg(format!("--config={}", config.display()))
            .stdout(std::fs::File::create(dir.join("collector.out")).unwrap())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", http)).is_err()
            || std::net::TcpStream::connect(("127.0.0.1", grpc)).is_err()
        {
            assert!(
                Instant::now() < deadline,
                "the collector did not listen: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Collector {
            child,
            log,
            http,
            grpc,
        }
    }

    /// The spans printed so far.
    fn spans(&self) -> Vec<Span> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default()
            + &std::fs::read_to_string(self.log.with_file_name("collector.out"))
                .unwrap_or_default();
        parse_spans(&text)
    }

    /// Waits until a span carries `message_id`.
    fn span_of(&self, message_id: &str) -> Span {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(s) = self
                .spans()
                .into_iter()
                .find(|s| s.message_id == message_id)
            {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "no span for {message_id}: {}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One span as the debug exporter prints it.
#[derive(Debug, Clone, Default)]
struct Span {
    trace_id: String,
    parent_id: String,
    id: String,
    name: String,
    message_id: String,
    attributes: Vec<String>,
}

fn parse_spans(text: &str) -> Vec<Span> {
    let mut spans = Vec::new();
    let mut current: Option<Span> = None;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with("Span #") {
            spans.extend(current.take());
            current = Some(Span::default());
            continue;
        }
        let Some(span) = current.as_mut() else {
            continue;
        };
        let value = |l: &str| {
            l.split_once(':')
                .map(|(_, v)| v.trim().to_string())
                .unwrap_or_default()
        };
        if line.starts_with("Trace ID") {
            span.trace_id = value(line);
        } else if line.starts_with("Parent ID") {
            span.parent_id = value(line);
        } else if line.starts_with("ID ") || line.starts_with("ID:") {
            span.id = value(line);
        } else if line.starts_with("Name ") {
            span.name = value(line);
        } else if let Some(attr) = line.strip_prefix("-> ") {
            if let Some(id) = attr.strip_prefix("messaging.message.id: Str(") {
                span.message_id = id.trim_end_matches(')').to_string();
            }
            span.attributes.push(attr.to_string());
        } else if line.starts_with("ScopeSpans") || line.starts_with("ResourceSpans") {
            spans.extend(current.take());
        }
    }
    spans.extend(current);
    spans
}

const PARENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";

async fn insert(client: &tokio_postgres::Client, key: &str, traceparent: Option<&str>) -> String {
    client
        .query_one(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key, traceparent)
             VALUES (gen_random_uuid(), 'traced', 'T', 1, 'text/plain', convert_to('traced', 'UTF8'), $1, $2) RETURNING message_id::text",
            &[&key, &traceparent],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn spans_arrive_with_the_rows_trace_and_parent_and_records_keep_their_bytes() {
    let services = require_services!();
    let collector = Collector::start("http");
    let prefix = common::unique_prefix("otel");
    let db = common::cdc_db(&services, "otel", &prefix).await;
    let topic = format!("{prefix}traced");
    kafka::create_topic(&services.kafka_bootstrap, &topic, 1).await;
    let slot = format!("{}_relay", db.name);
    let config = relay::config(
        &services,
        &db.name,
        &prefix,
        &slot,
        &format!(
            "\n[otel]\nendpoint = \"http://127.0.0.1:{}\"\nsample_ratio = 1.0\n",
            collector.http
        ),
    );
    let mut relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    let sampled = format!("00-{PARENT_TRACE}-{PARENT_SPAN}-01");
    let unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
    let child = insert(&db.client, "a", Some(&sampled)).await;
    let not_sampled = insert(&db.client, "b", Some(unsampled)).await;
    let root = insert(&db.client, "c", None).await;
    common::wait_until_marked(&db.client).await;
    relay.signal("TERM");
    assert!(
        relay
            .wait(Duration::from_secs(30))
            .is_some_and(|s| s.success()),
        "{}",
        relay.log_text()
    );

    let span = collector.span_of(&child);
    assert_eq!(span.trace_id, PARENT_TRACE, "{span:?}");
    assert_eq!(span.parent_id, PARENT_SPAN, "{span:?}");
    assert_eq!(span.name, "outbox publish");
    for expected in [
        format!("messaging.destination.name: Str({topic})"),
        "outbox.destination: Str(traced)".to_string(),
        "messaging.destination.partition.id: Str(0)".to_string(),
        "outbox.outcome: Str(published)".to_string(),
    ] {
        assert!(span.attributes.contains(&expected), "{expected}: {span:?}");
    }
    assert!(
        span.attributes
            .iter()
            .any(|a| a.starts_with("messaging.kafka.offset: Int(")),
        "{span:?}"
    );
    assert!(
        span.attributes
            .iter()
            .any(|a| a.starts_with("outbox.seconds_behind_source: Double(")),
        "{span:?}"
    );
    let own = collector.span_of(&root);
    assert_eq!(
        own.parent_id, "",
        "a row without a trace starts one: {own:?}"
    );
    assert_ne!(own.trace_id, PARENT_TRACE);
    assert!(
        collector
            .spans()
            .iter()
            .all(|s| s.message_id != not_sampled),
        "a row whose trace is not sampled gets no span"
    );

    // Without `propagate`, every record's traceparent is the row's.
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        3,
        Duration::from_secs(10),
    );
    let header = |id: &str| {
        records
            .iter()
            .find(|r| r.id() == id)
            .and_then(|r| r.header("traceparent").map(<[u8]>::to_vec))
    };
    assert_eq!(header(&child), Some(sampled.into_bytes()));
    assert_eq!(header(&not_sampled), Some(unsampled.as_bytes().to_vec()));
    assert_eq!(header(&root), None);
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

#[tokio::test]
async fn over_grpc_propagate_writes_the_relays_span_into_the_record() {
    let services = require_services!();
    let collector = Collector::start("grpc");
    let prefix = common::unique_prefix("otelprop");
    let db = common::cdc_db(&services, "otelprop", &prefix).await;
    let topic = format!("{prefix}traced");
    kafka::create_topic(&services.kafka_bootstrap, &topic, 1).await;
    let slot = format!("{}_relay", db.name);
    let config = relay::config(
        &services,
        &db.name,
        &prefix,
        &slot,
        &format!(
            "\n[otel]\nendpoint = \"http://127.0.0.1:{}\"\nprotocol = \"grpc\"\npropagate = true\nsample_ratio = 0.0\n",
            collector.grpc
        ),
    );
    let mut relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    let sampled = format!("00-{PARENT_TRACE}-{PARENT_SPAN}-01");
    let child = insert(&db.client, "a", Some(&sampled)).await;
    // sample_ratio 0: a row without a trace is neither traced nor changed.
    let plain = insert(&db.client, "b", None).await;
    common::wait_until_marked(&db.client).await;
    relay.signal("TERM");
    assert!(
        relay
            .wait(Duration::from_secs(30))
            .is_some_and(|s| s.success()),
        "{}",
        relay.log_text()
    );

    let span = collector.span_of(&child);
    assert_eq!(span.trace_id, PARENT_TRACE);
    assert_eq!(span.parent_id, PARENT_SPAN);
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        2,
        Duration::from_secs(10),
    );
    let header = |id: &str| {
        records.iter().find(|r| r.id() == id).and_then(|r| {
            r.header("traceparent")
                .map(|h| String::from_utf8_lossy(h).into_owned())
        })
    };
    assert_eq!(
        header(&child),
        Some(format!("00-{PARENT_TRACE}-{}-01", span.id)),
        "the record names the relay's span as its consumer's parent"
    );
    assert_eq!(header(&plain), None);
    assert!(collector.spans().iter().all(|s| s.message_id != plain));
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

/// A collector that is not there costs spans, not records: the relay
/// publishes every row and stops within its usual budget, the exporter's
/// last attempt bounded by the shutdown's.
#[tokio::test]
async fn a_collector_that_is_down_stalls_nothing() {
    let services = require_services!();
    let prefix = common::unique_prefix("oteldown");
    let db = common::cdc_db(&services, "oteldown", &prefix).await;
    let topic = format!("{prefix}traced");
    kafka::create_topic(&services.kafka_bootstrap, &topic, 1).await;
    let slot = format!("{}_relay", db.name);
    let http = common::free_port();
    // Nothing listens on a port just freed.
    let config = relay::config(
        &services,
        &db.name,
        &prefix,
        &slot,
        &format!(
            "\n[http]\nlisten = \"127.0.0.1:{http}\"\n\n[otel]\nendpoint = \"http://127.0.0.1:{}\"\nsample_ratio = 1.0\n",
            common::free_port()
        ),
    );
    let mut relay = RelayProcess::spawn(&config);
    rep::wait_streaming(&db.client, &slot).await;
    let ids: Vec<String> = db
        .client
        .query(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key)
             SELECT gen_random_uuid(), 'traced', 'T', 1, 'text/plain', convert_to('traced', 'UTF8'), 'k' || (i % 50)
             FROM generate_series(1, 5000) i RETURNING message_id::text",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        ids.len(),
        Duration::from_secs(60),
    );
    let got: std::collections::HashSet<String> = records.iter().map(|r| r.id()).collect();
    assert!(
        ids.iter().all(|id| got.contains(id)),
        "{} of {} records:\n{}",
        got.len(),
        ids.len(),
        relay.log_text()
    );
    // The lost spans are counted, where an alert can see them.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let dropped = relay::metric(http, "outbox_cdc_spans_total{outcome=\"dropped\"}");
        if dropped.is_some_and(|n| n > 0.0) {
            break;
        }
        assert!(Instant::now() < deadline, "dropped spans: {dropped:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        relay::metric(http, "outbox_cdc_spans_total{outcome=\"exported\"}"),
        Some(0.0)
    );
    common::wait_until_marked(&db.client).await;
    // Marked means acknowledged: every record's span has ended.
    let recorded = relay::metric(http, "outbox_cdc_spans_total{outcome=\"recorded\"}");
    assert_eq!(recorded, Some(5000.0), "one span per record");
    let stopping = Instant::now();
    relay.signal("TERM");
    assert!(
        relay
            .wait(Duration::from_secs(30))
            .is_some_and(|s| s.success()),
        "{}",
        relay.log_text()
    );
    eprintln!("stopped in {:?}", stopping.elapsed());
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}
