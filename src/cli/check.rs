//! `outbox-cdc check`.

use super::ConfigArg;
use crate::error::{Code, Error};
use crate::ops::preflight;

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ReportFormat {
    Human,
    Json,
}

#[derive(clap::Args)]
pub(super) struct Args {
    /// `human`: one line per check; `json`: one object with every finding.
    #[arg(long, value_enum, default_value_t = ReportFormat::Human)]
    format: ReportFormat,
}

pub(super) fn run(args: Args, config: &ConfigArg) -> Result<(), Error> {
    let cfg = config.load()?;
    let report = super::runtime()?.block_on(preflight::report(&cfg, &super::env));
    match args.format {
        ReportFormat::Human => print!("{}", report.render_human()),
        ReportFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        ),
    }
    if report.ok {
        Ok(())
    } else {
        Err(Error::new(Code::UNHEALTHY, report.error_summary()))
    }
}
