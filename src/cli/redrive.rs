//! `outbox-cdc redrive`: publish FAILED rows again once the cause is fixed.

use std::sync::Arc;

use super::ConfigArg;
use crate::contract::value::Timestamp;
use crate::error::{Code, Error};
use crate::pg::handover::{self, FailedFilter};
use crate::pg::{connect, purge};
use crate::pipeline::Relay;

#[derive(clap::Args)]
pub(super) struct Args {
    #[command(flatten)]
    config: ConfigArg,
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

pub(super) fn run(args: Args) -> Result<(), Error> {
    let mut cfg = args.config.load()?;
    let since = args
        .since
        .as_ref()
        .map(|text| match purge::parse_duration(text) {
            Ok(age) => {
                let now_ms = crate::metrics::unix_micros() / 1000;
                let at = now_ms.saturating_sub(age.as_millis() as i64);
                Timestamp::from_unix_millis(at)
                    .map(|t| t.to_rfc3339_millis())
                    .unwrap_or_else(|| text.clone())
            }
            Err(_) => text.clone(),
        });
    let filter = FailedFilter {
        code: args.code,
        destination: args.destination,
        since,
    };
    super::run_on_workers(async move {
        let sql = connect::connect(&cfg, &super::env).await?;
        let counts = handover::failed_counts(&sql, &cfg, &filter)
            .await
            .map_err(|e| e.context("--since must be a timestamp or an age such as 2h"))?;
        let total: i64 = counts.iter().map(|c| c.2).sum();
        for (code, destination, n) in &counts {
            println!(
                "{n} FAILED rows for {destination} with {}",
                code.as_deref().unwrap_or("no code")
            );
        }
        if args.dry_run || total == 0 {
            println!(
                "{}{total} rows match",
                if args.dry_run { "dry run: " } else { "" }
            );
            return Ok(());
        }
        // A refusal of the operator's kind (a topic still missing) ends it
        // at once, and its transactional id is its own, so it never fences
        // the running relay.
        cfg.relay.operator_error_threshold = 1;
        cfg.relay.transactional_id = Some(format!("{}.redrive", cfg.transactional_id()));
        let relay = Relay::prepare(cfg, Arc::new(super::env)).await?;
        let done = relay
            .redrive(&filter, tokio_util::sync::CancellationToken::new())
            .await?;
        println!(
            "redrove {} FAILED rows: {} now PUBLISHED{}",
            done.selected,
            done.published,
            match done.selected - done.published.min(done.selected) {
                0 => String::new(),
                n => format!(", {n} FAILED again (the log names their codes)"),
            }
        );
        if done.published < done.selected {
            return Err(Error::new(
                Code::REDRIVE_INCOMPLETE,
                format!(
                    "{} of {} rows failed again",
                    done.selected - done.published,
                    done.selected
                ),
            ));
        }
        Ok(())
    })
}
