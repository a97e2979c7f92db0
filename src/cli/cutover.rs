//! `outbox-cdc cutover`.

use std::time::Duration;

use super::kafka_connect::ConnectArgs;
use super::ConfigArg;
use crate::config::Config;
use crate::error::{Code, Error};
use crate::ops::cutover::{self, CutoverOptions, Target};
use crate::ops::takeover::{self, Run, Store};

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
    /// For a table that keeps no status, `cdc` takes the stopped Debezium
    /// connector's slot over and `debezium` hands it back with its offset.
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
    /// For a table that keeps no status: Debezium Server's offsets file
    /// (`debezium.source.offset.storage.file.filename`).
    #[arg(long, value_name = "PATH", conflicts_with = "connect")]
    offset_file: Option<std::path::PathBuf>,
    // Last: its options have a heading of their own.
    // For a table that keeps no status: a Kafka Connect worker's REST
    // API, where the connector's offset is read (to skip what it
    // published) and set (to hand back).
    #[command(flatten)]
    connect: ConnectArgs,
}

pub(super) fn run(args: Args, config: &ConfigArg) -> Result<(), Error> {
    let cfg = config.load()?;
    if takeover::applies_to(&cfg.outbox)? {
        return by_position(&args, &cfg);
    }
    if args.connect.connect.is_some() || args.offset_file.is_some() {
        return Err(Error::new(
            Code::ARGUMENT_INVALID,
            "--connect and --offset-file move a Debezium connector's position, for a table that keeps no status; \
             this outbox keeps its rows' status, which the cutover goes by",
        ));
    }
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

/// A table that keeps no status moves by positions (`ops::takeover`).
fn by_position(args: &Args, cfg: &Config) -> Result<(), Error> {
    let refuse = |why: &str| Err(Error::new(Code::ARGUMENT_INVALID, why.to_string()));
    if args.recover {
        return refuse("--recover hands over rows by their status; a table that keeps no status has none (a lost slot's rows are gone from the table)");
    }
    let endpoint = args.connect.endpoint(&super::env)?;
    let store = match (&endpoint, &args.offset_file) {
        (Some(endpoint), _) => Store::Connect(endpoint),
        (None, Some(path)) => Store::File(path),
        (None, None) => Store::Unknown,
    };
    let run = if args.dry_run {
        Run::DryRun
    } else {
        Run::Apply
    };
    let objects = cfg.objects();
    let site = takeover::Site {
        postgres: &cfg.postgres,
        objects: &objects,
        debezium: &cfg.debezium,
    };
    super::runtime()?.block_on(async {
        let mut out = std::io::stdout();
        match args.to {
            To::Cdc => takeover::take_over(site, &super::env, store, run, &mut out).await,
            To::Debezium => takeover::hand_back(site, &super::env, store, run, &mut out).await,
            To::Polling => refuse("a table that keeps no status has no polling relay to return to; `--to debezium` hands it back to the connector"),
        }
    })
}
