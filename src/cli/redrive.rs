//! `outbox-cdc redrive`: publish FAILED rows again once the cause is fixed.

use std::sync::Arc;

use super::ConfigArg;
use crate::error::Error;
use crate::ops::redrive::{self, Run, Selection};
use crate::ops::times;

#[derive(clap::Args)]
pub(super) struct Args {
    /// Only rows that failed with this code (e.g. MESSAGE_TOO_LARGE).
    #[arg(long)]
    code: Option<String>,
    /// Only rows for this destination.
    #[arg(long)]
    destination: Option<String>,
    /// Only rows created since: a timestamp (`2026-11-30T08:00:00Z`) or an
    /// age (`2h`, `7d`).
    #[arg(long)]
    since: Option<String>,
    /// Count the matching rows by code and destination; publish nothing.
    #[arg(long)]
    dry_run: bool,
}

pub(super) fn run(args: Args, config: &ConfigArg) -> Result<(), Error> {
    // Checked before the configuration is read or anything connects.
    let since = match &args.since {
        Some(text) => {
            let us = super::window::instant("since", text, crate::metrics::unix_micros())?;
            let at = times::rfc3339_millis(us).ok_or_else(|| {
                super::window::invalid("since", format!("{text:?} is out of range"))
            })?;
            Some(at)
        }
        None => None,
    };
    let cfg = config.load()?;
    let selection = Selection {
        code: args.code,
        destination: args.destination,
        since,
    };
    let run = match args.dry_run {
        true => Run::DryRun,
        false => Run::Publish,
    };
    super::run_on_workers(async move {
        let outcome = redrive::redrive(cfg, Arc::new(super::env), selection, run).await?;
        let total: i64 = outcome.counts.iter().map(|c| c.2).sum();
        for (code, destination, n) in &outcome.counts {
            println!(
                "{n} {} for {destination} with {}",
                outcome.source.noun(),
                code.as_deref().unwrap_or("no code")
            );
        }
        let Some(done) = outcome.done else {
            let dry = if run == Run::DryRun { "dry run: " } else { "" };
            println!("{dry}{total} rows match");
            return Ok(());
        };
        let source = outcome.source;
        println!(
            "redrove {} {}: {} {}{}",
            done.selected,
            source.noun(),
            done.published,
            source.published(),
            match done.selected - done.published.min(done.selected) {
                0 => String::new(),
                n => format!(", {n} refused again (the log names their codes)"),
            }
        );
        outcome.incomplete().map_or(Ok(()), Err)
    })
}
