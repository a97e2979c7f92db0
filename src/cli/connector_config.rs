//! `outbox-cdc connector-config`.

use std::path::PathBuf;

use super::ConfigArg;
use crate::contract::debezium;
use crate::error::{Code, Error};

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// A `.properties` file for Kafka Connect standalone.
    Properties,
    /// The Kafka Connect REST body `{"name": ..., "config": {...}}`.
    Json,
}

#[derive(clap::Args)]
pub(super) struct Args {
    #[command(flatten)]
    config: ConfigArg,
    #[arg(long, value_enum, default_value_t = Format::Properties)]
    format: Format,
    /// Write here instead of standard output.
    #[arg(long)]
    out: Option<PathBuf>,
}

pub(super) fn run(args: Args) -> Result<(), Error> {
    let cfg = args.config.load()?;
    let text = debezium::render(
        &cfg,
        match args.format {
            Format::Properties => debezium::Format::Properties,
            Format::Json => debezium::Format::Json,
        },
    );
    match args.out {
        Some(path) => std::fs::write(&path, text).map_err(|e| {
            Error::new(
                Code::OUTPUT_UNWRITABLE,
                format!("cannot write {}: {e}", path.display()),
            )
        }),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}
