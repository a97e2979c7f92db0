//! `audit`: did every row of a window reach Kafka, once, byte for byte and
//! in per-key order? Each row created in the window goes through the
//! relay's own mapper into the record it must be, and is compared with what
//! its topic holds, read `read_committed` from the window's start (found by
//! time) to `margin` past its end. Debezium with the generated
//! configuration writes the same bytes, so an outbox it relays is audited
//! the same way.
//!
//! Memory stays flat whatever the window holds. A topic is read one
//! partition at a time, and the rows of its destination alongside, a page
//! at a time in creation order. A row is loaded once the scan reaches its
//! creation time (a record's timestamp is its transaction's commit time, or
//! Debezium's later processing time, never before the row was created) and
//! dropped once the scan is `margin` past it and its record was found. Only
//! rows not found yet, the keys of the last `margin` and the findings (each
//! kind capped at [`LISTED`]) stay longer.
//!
//! A record whose id is no row of the scan is looked up by id: a row
//! outside the window is none of the audit's business, a row of the window
//! means a duplicate found after its row was dropped, or a record in the
//! wrong partition, and no row at all is an orphan, which is what a second
//! writer leaves.

mod beside;
mod expected;
mod pass;
mod report;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_postgres::Client;

use crate::config::{Env, OutboxConfig, PostgresConfig};
use crate::contract::definition::Contract;
use crate::contract::outbox::Status;
use crate::error::{Code, Error};
use crate::kafka::settings::Cluster;
use crate::kafka::window::{Found, Window};
use crate::pg::connect;
use crate::pg::window::{self as rows, show_time, Bounds, WindowRow};
use crate::router::Plan;
use crate::row::value::{Timestamp, Uuid};
pub use beside::beside;
use expected::Expected;
use pass::{Pass, Rows};
pub use report::{Finding, Report, TopicReport};

/// Findings of each kind listed in a report; the counts go on.
pub const LISTED: usize = 1000;
/// Rows read from PostgreSQL per query.
const PAGE: usize = 2000;
/// Unknown records looked up per query, at most.
const LOOKUP: usize = 500;
/// ... and at most this many bytes of their values held meanwhile.
const LOOKUP_BYTES: usize = 16 << 20;
/// How far past the latest record's timestamp rows are read: a record's
/// timestamp has milliseconds, a row's creation time microseconds.
const SLACK_US: i64 = 1_000_000;
/// The audit's consumer group (it commits nothing).
const GROUP: &str = "outbox-cdc-audit";

/// What to audit.
#[derive(Debug, Clone)]
pub struct Request {
    /// Microseconds since the Unix epoch; rows created in `[since, until)`.
    pub since_us: i64,
    pub until_us: i64,
    pub destination: Option<String>,
    /// How far past a row the scan goes before it is missed, and past the
    /// window's end the topics are read.
    pub margin: Duration,
    /// A row neither PUBLISHED nor FAILED created within this of the audit
    /// is unsettled, not lost: the relay may still be publishing it.
    pub grace: Duration,
}

/// A row of the scan.
#[derive(Debug)]
pub(super) struct Live {
    created_us: i64,
    status: Option<String>,
    /// `None` when the mapper refuses the row (the relay records it FAILED).
    expected: Option<Expected>,
    first: Option<i64>,
}

fn show_key(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

/// What an audit reads: the outbox in PostgreSQL and its topics in Kafka.
pub struct Sources<'a> {
    pub postgres: &'a PostgresConfig,
    pub outbox: &'a OutboxConfig,
    pub cluster: Cluster,
}

/// Reads the window of the outbox and of its topics and compares them.
pub async fn audit(sources: Sources<'_>, env: Arc<Env>, request: Request) -> Result<Report, Error> {
    let Sources {
        postgres,
        outbox,
        cluster,
    } = sources;
    super::require_kept_status(outbox, "audit")?;
    let started_us = crate::metrics::unix_micros();
    let sql = connect::connect(postgres, &*env).await?;
    let table = outbox.qualified_table();
    let bounds = Bounds::from_unix_micros(request.since_us, request.until_us);
    let mut report = Report {
        since: bounds.since.clone(),
        until: bounds.until.clone(),
        margin_secs: request.margin.as_secs(),
        ..Report::default()
    };
    let destinations =
        rows::destinations(&sql, &table, &bounds, request.destination.as_deref()).await?;
    let metadata = Window::new(&cluster, GROUP)?;
    let plan = Plan::of_definition(&Contract::messaging(&outbox.topic_prefix))?;
    for destination in destinations {
        let topic = plan.topic_for(&destination);
        let partitions = metadata.partitions(&topic)?;
        let scan = Scan {
            sql: &sql,
            postgres,
            env: &*env,
            cluster: &cluster,
            table: &table,
            destination: &destination,
            topic: &topic,
            partitions: partitions.unwrap_or(1),
            bounds: &bounds,
            request: &request,
            plan: &plan,
            unsettled_after: started_us.saturating_sub(request.grace.as_micros() as i64),
        };
        let mut topic_report = TopicReport {
            topic: topic.clone(),
            partitions: partitions.unwrap_or(0),
            ..TopicReport::default()
        };
        match partitions {
            Some(n) => {
                for partition in 0..n {
                    let (rows, records) = scan.partition(partition, &mut report).await?;
                    topic_report.rows += rows;
                    topic_report.records += records;
                }
            }
            // No topic: every row of the destination is missing.
            None => topic_report.rows = scan.missing_topic(&mut report).await?,
        }
        report.rows += topic_report.rows;
        report.records += topic_report.records;
        report.topics.push(topic_report);
    }
    Ok(report)
}

/// One destination's scan.
pub(super) struct Scan<'a> {
    sql: &'a Client,
    /// For each pass's own connection.
    postgres: &'a PostgresConfig,
    env: &'a Env,
    cluster: &'a Cluster,
    table: &'a str,
    destination: &'a str,
    topic: &'a str,
    partitions: i32,
    bounds: &'a Bounds,
    request: &'a Request,
    /// The records the relay makes of the rows.
    plan: &'a Plan,
    unsettled_after: i64,
}

impl Scan<'_> {
    fn live(&self, r: WindowRow) -> Option<(Uuid, Live)> {
        let id = r.row.message_id()?;
        let expected = self
            .plan
            .record(&r.row, id, Timestamp::from_pg_micros(0).unix_millis())
            .ok()
            .map(|record| Expected::of(&record));
        Some((
            id,
            Live {
                created_us: r.created_us,
                status: r.status,
                expected,
                first: None,
            },
        ))
    }

    /// Reads one partition and its rows.
    async fn partition(&self, partition: i32, report: &mut Report) -> Result<(u64, u64), Error> {
        let margin_ms = self.request.margin.as_millis() as i64;
        let from_ms = self.request.since_us / 1000 - margin_ms;
        let to_ms = self.request.until_us / 1000 + margin_ms;
        let (tx, mut rx) = mpsc::channel::<Found>(1024);
        let topic = self.topic.to_string();
        let cluster = self.cluster.clone();
        let reader = tokio::task::spawn_blocking(move || {
            let window = Window::new(&cluster, GROUP)?;
            let span = window.span(&topic, partition, from_ms, to_ms)?;
            window.read(&topic, partition, span, |found| {
                tx.blocking_send(found)
                    .map_err(|_| Error::new(Code::INTERNAL, "the audit stopped reading"))
            })
        });
        let mut pass = Pass::new(self, partition, report);
        let mut compared = Ok(());
        while let Some(found) = rx.recv().await {
            if let Err(e) = pass.one(found).await {
                compared = Err(e);
                break;
            }
        }
        drop(rx);
        let read = reader.await.unwrap_or_else(|e| {
            Err(Error::new(
                Code::INTERNAL,
                format!("the Kafka reader failed: {e}"),
            ))
        });
        compared?;
        read?;
        pass.finish().await?;
        Ok((pass.state.rows, pass.state.records))
    }

    fn missing(&self, id: Uuid, live: &Live, partition: i32, report: &mut Report) {
        let status = live.status.as_deref();
        let (id, topic, created_at) = (
            id.to_string(),
            self.topic.to_string(),
            show_time(live.created_us),
        );
        let status_text = live.status.clone();
        if status == Some(Status::Failed.as_str()) {
            report.failed += 1;
        } else if status != Some(Status::Published.as_str())
            && live.created_us >= self.unsettled_after
        {
            report.note(Finding::Unsettled {
                id,
                topic,
                partition,
                status: status_text,
                created_at,
            });
        } else {
            report.note(Finding::Lost {
                id,
                topic,
                partition,
                status: status_text,
                created_at,
            });
        }
    }

    /// A destination whose topic does not exist: each of its rows is missing.
    async fn missing_topic(&self, report: &mut Report) -> Result<u64, Error> {
        let mut rows = Rows::new(self, 1, 0);
        let mut n = 0;
        while let Some(r) = rows.next_until(i64::MAX).await? {
            n += 1;
            if let Some((id, live)) = self.live(r) {
                self.missing(id, &live, -1, report);
            }
        }
        Ok(n)
    }
}
