//! `outbox-cdc purge`: bounded retention of PUBLISHED (and FAILED) rows.

use std::time::Duration;

use super::ConfigArg;
use crate::error::Error;
use crate::ops::purge::{self, PurgeOptions};

#[derive(clap::Args)]
pub(super) struct Args {
    /// Delete PUBLISHED rows published longer ago than this (`30d`, `12h`, `15m`, `90s`).
    #[arg(long, value_parser = purge::parse_duration)]
    older_than: Duration,
    /// Also delete FAILED rows created longer ago than this (kept by default).
    #[arg(long, value_parser = purge::parse_duration)]
    failed_older_than: Option<Duration>,
    /// Rows per DELETE; each batch is its own short transaction.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(i64).range(1..=100_000))]
    batch: i64,
    /// Stop after deleting this many rows.
    #[arg(long)]
    max_rows: Option<u64>,
    /// Count what would be deleted and delete nothing.
    #[arg(long)]
    dry_run: bool,
    /// How long to wait for the slots to confirm the purge's horizon.
    #[arg(long, default_value_t = 60)]
    wait_secs: u64,
}

pub(super) fn run(args: Args, config: &ConfigArg) -> Result<(), Error> {
    let cfg = config.load()?;
    let opts = PurgeOptions {
        older_than: args.older_than,
        failed_older_than: args.failed_older_than,
        batch: args.batch,
        max_rows: args.max_rows,
        dry_run: args.dry_run,
        wait: Duration::from_secs(args.wait_secs),
    };
    opts.fit(&cfg.outbox)?;
    super::runtime()?.block_on(async {
        purge::purge(&cfg, &super::env, &opts, &mut std::io::stdout()).await?;
        Ok(())
    })
}
