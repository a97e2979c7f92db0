//! `outbox-cdc replay`: publish the rows of a window again, to their topics
//! or under another prefix; no row's status changes.

use std::sync::Arc;

use super::{window, ConfigArg};
use crate::error::Error;
use crate::ops::replay::{self, Request, Run};

#[derive(clap::Args)]
#[command(after_help = "Examples:
  outbox-cdc replay --since 2026-12-01T08:00:00Z --until 2026-12-01T09:00:00Z --dry-run
  outbox-cdc replay --since 3h --until 2h --destination orders
  outbox-cdc replay --since 2026-12-01T00:00:00Z --until 2026-12-02T00:00:00Z --to-topic-prefix rebuild.")]
pub(super) struct Args {
    /// Rows created since: a timestamp (`2026-11-30T08:00:00Z`) or an age
    /// (`2h`, `7d`).
    #[arg(long)]
    since: String,
    /// Rows created before: a timestamp or an age.
    #[arg(long)]
    until: String,
    /// Only rows for this destination.
    #[arg(long)]
    destination: Option<String>,
    /// Publish to this prefix + destination instead of the configured
    /// `outbox.topic_prefix` (a rebuild); the topics must exist.
    #[arg(long)]
    to_topic_prefix: Option<String>,
    /// Count the window's rows by destination; publish nothing.
    #[arg(long)]
    dry_run: bool,
}

/// A topic prefix that can begin a legal topic name.
fn prefix(text: &str) -> Result<String, Error> {
    let legal = text
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if legal && text.len() < 249 {
        Ok(text.to_string())
    } else {
        Err(window::invalid(
            "to-topic-prefix",
            format!("{text:?}: a topic name holds only ASCII letters, digits, '.', '_' and '-'"),
        ))
    }
}

pub(super) fn run(args: Args, config: &ConfigArg) -> Result<(), Error> {
    // Arguments are checked before anything connects.
    let (since_us, until_us) = window::window(
        &args.since,
        Some(&args.until),
        crate::metrics::unix_micros(),
    )?;
    let request = Request {
        since_us,
        until_us,
        destination: args.destination,
        to_topic_prefix: args.to_topic_prefix.as_deref().map(prefix).transpose()?,
        run: match args.dry_run {
            true => Run::DryRun,
            false => Run::Publish,
        },
    };
    let dry = request.run == Run::DryRun;
    let cfg = config.load()?;
    super::run_on_workers(async move {
        let outcome = replay::replay(cfg, Arc::new(super::env), request).await?;
        let total: i64 = outcome.counts.iter().map(|c| c.2).sum();
        println!(
            "rows created from {} to {}:",
            outcome.bounds.since, outcome.bounds.until
        );
        for (topic, destination, n) in &outcome.counts {
            println!("  {n} rows of {destination} -> {topic}");
        }
        let Some(done) = &outcome.done else {
            match dry {
                true => println!("dry run: {total} rows would be published again"),
                false => println!("no rows in the window: nothing published"),
            }
            return Ok(());
        };
        println!(
            "replayed {} rows: {} published{}",
            done.selected,
            done.published,
            match done.refused.len() {
                0 => String::new(),
                n => format!(", {n} refused (their status is unchanged)"),
            }
        );
        for (id, code) in &done.refused {
            println!("  refused {id}: {code}");
        }
        outcome.incomplete().map_or(Ok(()), Err)
    })
}
