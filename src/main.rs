//! The `outbox-cdc` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use outbox_cdc::config::{Config, ConfigError};
use outbox_cdc::connector_config::{self, Format};
use outbox_cdc::db::{self, DbError};
use outbox_cdc::migrate::{self, MigrateError, Scope};
use outbox_cdc::relay::{Relay, RelayError};
use outbox_cdc::tail;

/// About a quarter of the relay's own CPU went to glibc malloc and free (one
/// record is a score of small allocations), measured with `perf` under
/// `scripts/bench.sh`.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "outbox-cdc",
    version,
    about = "Change-data-capture relay for a transactional outbox: PostgreSQL to Kafka"
)]
struct Cli {
    /// Log format on standard error.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Human, env = "OUTBOX_CDC_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Human,
    Json,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ReportFormat {
    Human,
    Json,
}

/// `--config FILE`, shared by every command.
#[derive(clap::Args)]
struct ConfigArg {
    /// The configuration file.
    #[arg(
        long = "config",
        short = 'c',
        env = "OUTBOX_CDC_CONFIG",
        default_value = "outbox-cdc.toml"
    )]
    path: PathBuf,
}

impl ConfigArg {
    fn load(&self) -> Result<Config, ConfigError> {
        Config::load(&self.path, &env)
    }
}

#[derive(Subcommand)]
enum Command {
    /// Write the Debezium PostgreSQL connector configuration (Debezium 3.6.1.Final).
    ConnectorConfig {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long, value_enum, default_value_t = Format::Properties)]
        format: Format,
        /// Write here instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Stream outbox INSERTs from the slot to Kafka until SIGTERM or SIGINT.
    Run {
        #[command(flatten)]
        config: ConfigArg,
        /// Only publish the backlog a cutover handed over, then exit (for a
        /// cutover to Debezium).
        #[arg(long)]
        handover_only: bool,
    },
    /// Switch the outbox between the polling relay and this one, handing the backlog over.
    Cutover {
        #[command(flatten)]
        config: ConfigArg,
        /// `cdc`: fence polling claims, create the slot, hand the backlog to `run`;
        /// `polling`: give the outbox back (the CDC relay must be stopped).
        #[arg(long, value_enum)]
        to: outbox_cdc::cutover::Target,
        /// Show what would happen and change nothing.
        #[arg(long)]
        dry_run: bool,
        /// How long to wait for live polling leases to end.
        #[arg(long, default_value_t = 120)]
        lease_wait_secs: u64,
        /// Recorded with the declaration.
        #[arg(long, default_value = "outbox-cdc cutover")]
        reason: String,
    },
    /// Preflight and health report; exit 1 when anything is wrong.
    Check {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long, value_enum, default_value_t = ReportFormat::Human)]
        format: ReportFormat,
    },
    /// Print the records of a topic with their key and headers (for people).
    Tail {
        #[command(flatten)]
        config: ConfigArg,
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
    },
    /// Create the outbox table and the CDC objects; applies each migration once.
    Migrate {
        #[command(flatten)]
        config: ConfigArg,
        /// Only the CDC objects, for an outbox table an application already created.
        #[arg(long)]
        cdc_only: bool,
        /// Print the SQL instead of applying it.
        #[arg(long)]
        print: bool,
    },
}

/// An error at the edge: its stable code decides the exit status.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Migrate(#[from] MigrateError),
    #[error(transparent)]
    Relay(#[from] RelayError),
    #[error(transparent)]
    Tail(#[from] tail::TailError),
    #[error(transparent)]
    Cutover(#[from] outbox_cdc::cutover::CutoverError),
    #[error("UNHEALTHY: {0}")]
    Unhealthy(String),
    #[error("OUTPUT_UNWRITABLE: cannot write {path}: {source}")]
    Output {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl CliError {
    /// 2 for a configuration the operator must fix, 1 for everything else.
    fn exit_code(&self) -> u8 {
        match self {
            CliError::Config(_)
            | CliError::Db(DbError::Config(_))
            | CliError::Relay(RelayError::Config(_)) => 2,
            _ => 1,
        }
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("OUTBOX_CDC_LOG")
        .unwrap_or_else(|_| "info,rdkafka=warn".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|source| CliError::Output {
            path: PathBuf::from("<tokio runtime>"),
            source,
        })
}

/// The first SIGTERM or SIGINT asks for a drain; a second one exits at once.
fn shutdown_on_signals() -> tokio_util::sync::CancellationToken {
    use tokio::signal::unix::{signal, SignalKind};
    let token = tokio_util::sync::CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            tracing::error!("cannot install signal handlers");
            return;
        };
        for n in 0.. {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            if n == 0 {
                tracing::info!("signal received: draining (send it again to exit at once)");
                t.cancel();
            } else {
                tracing::warn!("second signal: exiting without draining");
                std::process::exit(130);
            }
        }
    });
    token
}

fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Cutover {
            config,
            to,
            dry_run,
            lease_wait_secs,
            reason,
        } => {
            let cfg = config.load()?;
            let opts = outbox_cdc::cutover::CutoverOptions {
                target: to,
                dry_run,
                lease_wait: std::time::Duration::from_secs(lease_wait_secs),
                reason,
            };
            runtime()?.block_on(async {
                let mut out = std::io::stdout();
                outbox_cdc::cutover::cutover(&cfg, &env, &opts, &mut out).await?;
                Ok(())
            })
        }
        Command::Check { config, format } => {
            let cfg = config.load()?;
            let report = runtime()?.block_on(outbox_cdc::check::run(&cfg, &env));
            match format {
                ReportFormat::Human => print!("{}", report.render_human()),
                ReportFormat::Json => println!(
                    "{}",
                    serde_json::to_string_pretty(&report).unwrap_or_default()
                ),
            }
            if report.ok {
                Ok(())
            } else {
                Err(CliError::Unhealthy(report.codes().join(", ")))
            }
        }
        Command::Run {
            config,
            handover_only,
        } => {
            let cfg = config.load()?;
            runtime()?.block_on(async {
                let shutdown = shutdown_on_signals();
                let mut relay = Relay::prepare(cfg, std::sync::Arc::new(env)).await?;
                if handover_only {
                    relay.handover_only(shutdown).await?;
                } else {
                    relay.run(shutdown).await?;
                }
                Ok(())
            })
        }
        Command::Tail {
            config,
            topic,
            from_beginning,
            max,
            idle_timeout_secs,
        } => {
            let cfg = config.load()?;
            let opts = tail::TailOptions {
                topic,
                from_beginning,
                max,
                idle_timeout: idle_timeout_secs.map(std::time::Duration::from_secs),
            };
            let mut out = std::io::stdout().lock();
            tail::tail(&cfg, &env, &opts, &mut out)?;
            Ok(())
        }
        Command::ConnectorConfig {
            config,
            format,
            out,
        } => {
            let cfg = config.load()?;
            let text = connector_config::render(&cfg, format);
            match out {
                Some(path) => std::fs::write(&path, text)
                    .map_err(|source| CliError::Output { path, source })?,
                None => print!("{text}"),
            }
            Ok(())
        }
        Command::Migrate {
            config,
            cdc_only,
            print,
        } => {
            let cfg = config.load()?;
            let scope = if cdc_only { Scope::CdcOnly } else { Scope::All };
            if print {
                print!("{}", migrate::print(&cfg, scope)?);
                return Ok(());
            }
            runtime()?.block_on(async {
                let mut client = db::connect(&cfg, &env).await?;
                let applied = migrate::migrate(&mut client, &cfg, scope).await?;
                for a in applied {
                    let what = if a.newly {
                        "applied"
                    } else {
                        "already applied"
                    };
                    tracing::info!(version = a.version, name = a.name, "{what}");
                }
                Ok(())
            })
        }
    }
}
