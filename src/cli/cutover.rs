//! `outbox-cdc cutover`.

use std::time::Duration;

use super::ConfigArg;
use crate::error::Error;
use crate::ops::cutover::{self, CutoverOptions, Target};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum To {
    /// This relay: `outbox-cdc run` publishes the backlog, then streams.
    Cdc,
    /// Debezium with the generated configuration: the slot created is
    /// `debezium.slot`; `outbox-cdc run --handover-only` publishes the
    /// backlog (the same records), then the connector streams from the slot.
    Debezium,
    /// The polling relay (the CDC relay must be stopped).
    Polling,
}

#[derive(clap::Args)]
pub(super) struct Args {
    /// `cdc`: fence polling claims, create the slot, hand the backlog to `run`;
    /// `polling`: give the outbox back (the CDC relay must be stopped).
    #[arg(long, value_enum)]
    to: To,
    /// Show what would happen and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// How long to wait for live polling leases to end.
    #[arg(long, default_value_t = 120)]
    lease_wait_secs: u64,
    /// Recorded with the declaration.
    #[arg(long, default_value = "outbox-cdc cutover")]
    reason: String,
    /// With `--to cdc`, after the slot was invalidated or lost: drop it,
    /// create a new one and hand over every row not yet PUBLISHED or FAILED.
    #[arg(long)]
    recover: bool,
}

pub(super) fn run(args: Args, config: &ConfigArg) -> Result<(), Error> {
    let cfg = config.load()?;
    let opts = CutoverOptions {
        target: match args.to {
            To::Cdc => Target::Cdc,
            To::Debezium => Target::Debezium,
            To::Polling => Target::Polling,
        },
        dry_run: args.dry_run,
        lease_wait: Duration::from_secs(args.lease_wait_secs),
        reason: args.reason,
        recover: args.recover,
    };
    let objects = cfg.objects();
    let site = cutover::Site {
        postgres: &cfg.postgres,
        objects: &objects,
    };
    super::runtime()?.block_on(async {
        let mut out = std::io::stdout();
        cutover::cutover(site, &super::env, &opts, &mut out).await
    })
}
