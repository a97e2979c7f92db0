//! `outbox-cdc connector-config`.

use std::path::PathBuf;

use super::kafka_connect::ConnectArgs;
use super::ConfigArg;
use crate::error::{Code, Error};
use crate::ops::connector_config::{self, Beside, Source, Target};

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
#[command(args_conflicts_with_subcommands = true)]
pub(super) struct Args {
    #[command(subcommand)]
    action: Option<Action>,
    /// Which deployment to write for.
    #[arg(long, value_enum, default_value_t = TargetArg::Connect)]
    target: TargetArg,
    /// Same as `--target connect` (properties) or `--target connect-json` (json).
    #[arg(long, value_enum, hide = true, conflicts_with = "target")]
    format: Option<Format>,
    /// Write here instead of standard output.
    #[arg(long)]
    out: Option<PathBuf>,
    // Last: its options have a heading of their own.
    // Kafka Connect's REST API: the release the connector's tasks run
    // (its status, Kafka 4.1+), else the worker's Debezium plugin's,
    // decides, unless `--debezium-version` names one.
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Make the relay's configuration of a Debezium deployment's: what it
    /// writes byte for byte is carried over, the rest refused with a code.
    #[command(
        after_help = "Examples:\n  outbox-cdc connector-config import connector.properties --bootstrap-servers kafka:9092 > outbox-cdc.toml\n  outbox-cdc connector-config import application.properties --out outbox-cdc.toml\n  outbox-cdc connector-config import kafkaconnector.yaml --bootstrap-servers kafka:9092"
    )]
    Import(Box<ImportArgs>),
}

/// The kind of deployment a file describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum FromArg {
    Connect,
    ConnectJson,
    DebeziumServer,
    Strimzi,
}

#[derive(clap::Args)]
struct ImportArgs {
    /// The deployment's configuration file.
    file: PathBuf,
    /// What the file is; by default, what it looks like.
    #[arg(long, value_enum)]
    from: Option<FromArg>,
    /// The brokers the connector writes to, when the file does not name them.
    #[arg(long)]
    bootstrap_servers: Option<String>,
    /// The Kafka Connect worker's configuration (`connect-distributed.properties`
    /// or a Strimzi `KafkaConnect`): the converters the connector leaves to
    /// the worker are its (otherwise JsonConverter with schemas, the
    /// Debezium images' default, is assumed).
    #[arg(long, value_name = "FILE")]
    worker_config: Option<PathBuf>,
    /// A worker setting, over the worker's file (`value.converter=...`); repeatable.
    #[arg(long = "worker-setting", value_name = "KEY=VALUE")]
    worker_settings: Vec<String>,
    /// The Debezium release the deployment runs (`3.6.1`): it decides the
    /// context headers; by default what the file's names tell.
    #[arg(long, value_name = "VERSION")]
    debezium_version: Option<String>,
    /// The outbox table, when the connector's `table.include.list` names
    /// several tables, a pattern or none.
    #[arg(long, value_name = "SCHEMA.TABLE")]
    table: Option<String>,
    /// Write here instead of standard output.
    #[arg(long)]
    out: Option<PathBuf>,
    // Last: its options have a heading of their own.
    // Kafka Connect's REST API: the release the connector's tasks run
    // (its status, Kafka 4.1+), else the worker's Debezium plugin's,
    // decides, unless `--debezium-version` names one.
    #[command(flatten)]
    connect: ConnectArgs,
}

fn import(args: ImportArgs) -> Result<(), Error> {
    let source = args.from.map(|f| match f {
        FromArg::Connect => Source::Connect,
        FromArg::ConnectJson => Source::ConnectJson,
        FromArg::DebeziumServer => Source::DebeziumServer,
        FromArg::Strimzi => Source::Strimzi,
    });
    let endpoint = args.connect.endpoint(&super::env)?;
    let beside = Beside {
        source,
        bootstrap: args.bootstrap_servers.as_deref(),
        worker_config: args.worker_config.as_deref(),
        worker_settings: &args.worker_settings,
        debezium_version: args.debezium_version.as_deref(),
        table: args.table.as_deref(),
        connect: endpoint.as_ref(),
    };
    let imported = connector_config::import(&args.file, &beside)?;
    let from = imported.from;
    match imported.made {
        Err(refused) => {
            for r in &refused {
                eprintln!("{r}");
            }
            let first = refused.first().map_or(Code::IMPORT_UNREADABLE, |r| r.code);
            Err(Error::new(
                first,
                format!(
                    "{} setting(s) of {from} cannot be honoured byte for byte (above); nothing was written",
                    refused.len()
                ),
            ))
        }
        Ok(outcome) => {
            let i = &outcome.imported;
            eprintln!(
                "imported {from} ({}): the {} contract on {}.{}, converters {}, {} router option(s), slot {}, publication {}",
                i.source.as_str(),
                i.contract.as_str(),
                i.schema,
                i.table,
                i.converters.preset_name().map_or_else(|| i.converters.describe(), str::to_string),
                i.router.len(),
                i.slot,
                i.publication
            );
            eprintln!("Debezium {}: {}", i.release.version, i.release.why);
            for note in &i.notes {
                eprintln!("read: {note}");
            }
            for (k, why) in &i.left_behind {
                eprintln!("left behind: {k}: {why}");
            }
            write(args.out, &outcome.text)
        }
    }
}

fn write(out: Option<PathBuf>, text: &str) -> Result<(), Error> {
    match out {
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

pub(super) fn run(args: Args, config: &ConfigArg) -> Result<(), Error> {
    if let Some(Action::Import(a)) = args.action {
        return import(*a);
    }
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
    let text = connector_config::render(&cfg, target)?;
    write(args.out, &text)
}
