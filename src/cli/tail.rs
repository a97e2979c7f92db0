//! `outbox-cdc tail`.

use std::time::Duration;

use super::ConfigArg;
use crate::error::Error;
use crate::ops::tail::{self, TailOptions};

#[derive(clap::Args)]
pub(super) struct Args {
    /// The topic, or a destination (the configured topic prefix is added).
    topic: String,
    /// Start at the beginning instead of the end.
    #[arg(long)]
    from_beginning: bool,
    /// Stop after this many records.
    #[arg(long)]
    max: Option<u64>,
    /// Stop after this long without a record.
    #[arg(long)]
    idle_timeout_secs: Option<u64>,
}

pub(super) fn run(args: Args, config: &ConfigArg) -> Result<(), Error> {
    let cfg = config.load()?;
    let opts = TailOptions {
        topic: args.topic,
        from_beginning: args.from_beginning,
        max: args.max,
        idle_timeout: args.idle_timeout_secs.map(Duration::from_secs),
    };
    let mut out = std::io::stdout().lock();
    tail::tail(&cfg, &super::env, &opts, &mut out)
}
