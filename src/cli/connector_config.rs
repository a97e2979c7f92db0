//! `outbox-cdc connector-config`.

use std::path::PathBuf;

use super::ConfigArg;
use crate::connector::{self, Target};
use crate::error::{Code, Error};

/// The deployment to write for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum TargetArg {
    /// A `.properties` file for Kafka Connect standalone.
    Connect,
    /// The Kafka Connect REST body `{"name": ..., "config": {...}}`.
    ConnectJson,
    /// Debezium Server's `application.properties`.
    DebeziumServer,
    /// A Strimzi `KafkaConnector` resource.
    Strimzi,
    /// A Strimzi `KafkaConnect` resource that builds Debezium in.
    StrimziConnect,
}

/// The former `--format`, kept so existing scripts keep working.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    Properties,
    Json,
}

#[derive(clap::Args)]
pub(super) struct Args {
    /// Which deployment to write for.
    #[arg(long, value_enum, default_value_t = TargetArg::Connect)]
    target: TargetArg,
    /// Same as `--target connect` (properties) or `--target connect-json` (json).
    #[arg(long, value_enum, hide = true, conflicts_with = "target")]
    format: Option<Format>,
    /// Write here instead of standard output.
    #[arg(long)]
    out: Option<PathBuf>,
}

pub(super) fn run(args: Args, config: &ConfigArg) -> Result<(), Error> {
    let cfg = config.load()?;
    let target = match (args.format, args.target) {
        (Some(Format::Properties), _) => Target::Connect,
        (Some(Format::Json), _) => Target::ConnectJson,
        (None, TargetArg::Connect) => Target::Connect,
        (None, TargetArg::ConnectJson) => Target::ConnectJson,
        (None, TargetArg::DebeziumServer) => Target::DebeziumServer,
        (None, TargetArg::Strimzi) => Target::Strimzi,
        (None, TargetArg::StrimziConnect) => Target::StrimziConnect,
    };
    let text = connector::render(&cfg, target)?;
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
