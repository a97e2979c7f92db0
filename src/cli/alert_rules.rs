//! `outbox-cdc alert-rules`: the Prometheus alerting rules for the relay's
//! metrics (`monitoring/outbox-cdc.rules.yml` is this output, committed).

use std::io::Write;

use crate::error::{Code, Error};
use crate::metrics::rules::{self, RuleOptions};

#[derive(clap::Args)]
pub(super) struct Args {
    /// The scrape job's name (for the `up` series of `OutboxCdcDown`).
    #[arg(long, default_value = "outbox-cdc")]
    job: String,
    /// `OutboxCdcBehindSource` fires past this many seconds behind source.
    #[arg(long, default_value_t = 60)]
    behind_secs: u64,
    /// `OutboxCdcRestarting` fires past this many restarts in 15 minutes.
    #[arg(long, default_value_t = 3)]
    restarts: u64,
    /// `OutboxCdcPartitionHeld` fires once a partition has acknowledged none of its records for this many seconds.
    #[arg(long, default_value_t = rules::DEFAULT_HELD_SECS)]
    held_secs: u64,
    /// Where docs/runbooks.md is served (each alert's runbook_url is this and its section).
    #[arg(long, default_value = rules::DEFAULT_RUNBOOK_BASE)]
    runbook_base: String,
}

pub(super) fn run(args: Args) -> Result<(), Error> {
    let text = rules::render(&RuleOptions {
        job: args.job,
        behind_secs: args.behind_secs,
        restarts: args.restarts,
        held_secs: args.held_secs,
        runbook_base: args.runbook_base,
    });
    std::io::stdout()
        .write_all(text.as_bytes())
        .map_err(|e| Error::new(Code::OUTPUT_UNWRITABLE, format!("standard output: {e}")))
}
