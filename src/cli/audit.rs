//! `outbox-cdc audit`: compare a window of the outbox with its topics and
//! say what is lost, duplicated, different, out of order or orphaned.
//! Exit status 0 when clean (duplicates alone are at-least-once's own), 3
//! when a row is lost (`AUDIT_LOST`), 4 for any other finding
//! (`AUDIT_MISMATCH`).

use std::io::Write;
use std::sync::Arc;

use super::{window, ConfigArg};
use crate::error::{Code, Error};
use crate::ops::audit::{self, Finding, Report, Request};

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    Human,
    Json,
}

#[derive(clap::Args)]
#[command(after_help = "Examples:
  outbox-cdc audit --since 2h
  outbox-cdc audit --since 2026-12-01T00:00:00Z --until 2026-12-02T00:00:00Z --format json
  outbox-cdc audit --since 30m --destination orders
  outbox-cdc audit --since 1h --beside shadow.")]
pub(super) struct Args {
    /// Rows created since: a timestamp (`2026-11-30T08:00:00Z`) or an age
    /// (`2h`, `7d`).
    #[arg(long)]
    since: String,
    /// Rows created before: a timestamp or an age; now when not given.
    #[arg(long)]
    until: Option<String>,
    /// Only rows for this destination.
    #[arg(long)]
    destination: Option<String>,
    /// How long after a row its record may come (a long transaction's
    /// commit, a relay's backlog), and how far past the window the topics
    /// are read.
    #[arg(long, default_value = "10m")]
    margin: String,
    /// A row neither PUBLISHED nor FAILED created this recently is
    /// unsettled, not lost.
    #[arg(long, default_value = "5m")]
    grace: String,
    /// `human`: counts and one line per finding; `json`: one object, each
    /// kind of finding capped at 1 000 entries.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
    /// Compare a relay run beside Debezium instead of the table: each of
    /// the relay's topics `PREFIX<topic>` with Debezium's `<topic>`, record
    /// by record by event id (for a table that keeps no status, which has
    /// no rows left to compare with).
    #[arg(long, value_name = "PREFIX")]
    beside: Option<String>,
}

fn request(args: &Args, now_us: i64) -> Result<Request, Error> {
    let (since_us, until_us) = window::window(&args.since, args.until.as_deref(), now_us)?;
    Ok(Request {
        since_us,
        until_us,
        destination: args.destination.clone(),
        margin: window::duration("margin", &args.margin)?,
        grace: window::duration("grace", &args.grace)?,
    })
}

pub(super) fn run(args: Args, config: &ConfigArg) -> Result<(), Error> {
    // Arguments are checked before anything connects.
    let request = request(&args, crate::metrics::unix_micros())?;
    let cfg = config.load()?;
    let format = args.format;
    let cluster = cfg.kafka_cluster(&super::env)?;
    let report = if let Some(prefix) = &args.beside {
        audit::beside(&cluster, &request, prefix)?
    } else {
        super::run_on_workers(async move {
            let sources = audit::Sources {
                postgres: &cfg.postgres,
                outbox: &cfg.outbox,
                cluster,
            };
            audit::audit(sources, Arc::new(super::env), request).await
        })?
    };
    let mut out = std::io::stdout().lock();
    let written = match format {
        Format::Json => serde_json::to_writer_pretty(&mut out, &report)
            .map_err(std::io::Error::other)
            .and_then(|()| writeln!(out)),
        Format::Human => human(&mut out, &report),
    };
    written.map_err(|e| Error::new(Code::OUTPUT_UNWRITABLE, format!("standard output: {e}")))?;
    verdict(&report)
}

/// The exit status's error: loss first.
fn verdict(report: &Report) -> Result<(), Error> {
    if report.lost > 0 {
        let what = match &report.beside {
            None => "rows of the window are missing from Kafka",
            Some(_) => "of Debezium's records in the window are missing from the relay's topics",
        };
        return Err(Error::new(
            Code::AUDIT_LOST,
            format!("{} {what} (the report lists them)", report.lost),
        ));
    }
    if !report.clean() {
        return Err(Error::new(
            Code::AUDIT_MISMATCH,
            format!(
                "{} records differ, {} are out of per-key order, {} have no row",
                report.differing, report.out_of_order, report.orphans
            ),
        ));
    }
    Ok(())
}

fn human(out: &mut impl Write, r: &Report) -> std::io::Result<()> {
    match &r.beside {
        None => writeln!(out, "audit of rows created from {} to {}", r.since, r.until)?,
        Some(prefix) => writeln!(
            out,
            "the relay's topics under {prefix} beside Debezium's, records from {} to {} (rows: Debezium's records)",
            r.since, r.until
        )?,
    }
    for t in &r.topics {
        writeln!(
            out,
            "  {}: {} partitions, {} rows, {} records read",
            t.topic, t.partitions, t.rows, t.records
        )?;
    }
    writeln!(
        out,
        "rows {}, delivered {}, lost {}, unsettled {}, FAILED {}, duplicates {}, differing {}, out of order {}, orphans {}",
        r.rows, r.delivered, r.lost, r.unsettled, r.failed, r.duplicates, r.differing, r.out_of_order, r.orphans
    )?;
    let status = |s: &Option<String>| s.clone().unwrap_or_else(|| "no status".into());
    // Duplicates are at-least-once's own: a few show, the JSON lists more.
    let duplicates = r
        .findings
        .iter()
        .filter(|f| matches!(f, Finding::Duplicate { .. }));
    let hidden = duplicates.count().saturating_sub(SHOWN_DUPLICATES);
    let mut shown = 0;
    for f in &r.findings {
        if matches!(f, Finding::Duplicate { .. }) {
            shown += 1;
            if shown > SHOWN_DUPLICATES {
                continue;
            }
        }
        match f {
            Finding::Lost { id, topic, partition, status: s, created_at } => writeln!(
                out,
                "LOST        {id} {topic}[{partition}] created {created_at} ({})",
                status(s)
            )?,
            Finding::Unsettled { id, topic, partition, status: s, created_at } => writeln!(
                out,
                "UNSETTLED   {id} {topic}[{partition}] created {created_at} ({})",
                status(s)
            )?,
            Finding::Duplicate { id, topic, partition, first_offset, offset, status: s } => writeln!(
                out,
                "DUPLICATE   {id} {topic}[{partition}] at {offset}{} ({})",
                first_offset.map_or(String::new(), |o| format!(", first at {o}")),
                status(s)
            )?,
            Finding::Differs { id, topic, partition, offset, fields, status: s } => writeln!(
                out,
                "DIFFERS     {id} {topic}[{partition}]@{offset}: {} ({})",
                fields.join(", "),
                status(s)
            )?,
            Finding::OutOfOrder { id, key, topic, partition, offset, after, status: s } => writeln!(
                out,
                "OUT OF ORDER {id} key {key:?} {topic}[{partition}]@{offset}: first delivered after the later row {after} ({})",
                status(s)
            )?,
            Finding::Orphan { id, topic, partition, offset } => writeln!(
                out,
                "ORPHAN      {} {topic}[{partition}]@{offset}: no such row",
                id.as_deref().unwrap_or("(no id header)")
            )?,
        }
    }
    if hidden > 0 {
        writeln!(
            out,
            "... and {hidden} more duplicates (--format json lists up to {})",
            audit::LISTED
        )?;
    }
    Ok(())
}

/// Duplicates listed in the human report.
const SHOWN_DUPLICATES: usize = 10;
