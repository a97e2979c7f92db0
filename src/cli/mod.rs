//! The command line: argument parsing, logging, the runtime, and one thin
//! module per command that calls the engine. Exit status: 0 on success, 2
//! for a configuration or an argument the operator must fix, 1 for anything
//! else an operator must act on, 3 and 4 for `audit`'s findings (lost rows;
//! other mismatches), 75 for a failure that may pass (restart it); every
//! error is printed once, starting with its code.

mod alert_rules;
mod audit;
mod check;
mod config_cmd;
mod connector_config;
mod cutover;
mod kafka_connect;
mod migrate;
mod purge;
mod redrive;
mod replay;
mod run;
mod shell;
mod status;
mod tail;
mod window;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::Config;
use crate::error::{Code, Error};

/// `--version`: what the binary is and what it was built with.
fn long_version() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        let (_, librdkafka) = rdkafka::util::get_rdkafka_version();
        format!(
            "{}\ncommit: {}\nrustc: {}\nlibrdkafka: {librdkafka}\nDebezium (generated configuration): {}",
            env!("CARGO_PKG_VERSION"),
            crate::metrics::BUILD_COMMIT,
            env!("OUTBOX_CDC_RUSTC"),
            crate::ops::connector_config::DEBEZIUM_VERSION,
        )
    })
}

#[derive(Parser)]
#[command(
    name = "outbox-cdc",
    version,
    long_version = long_version(),
    about = "Change-data-capture relay for a transactional outbox: PostgreSQL to Kafka"
)]
struct Cli {
    /// Log format on standard error.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Human, env = "OUTBOX_CDC_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(flatten)]
    config: ConfigArg,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Human,
    Json,
}

/// `--config FILE`, global: `outbox-cdc -c FILE run` and `outbox-cdc run -c FILE`.
#[derive(clap::Args)]
struct ConfigArg {
    /// The configuration file (before or after the command).
    #[arg(
        long = "config",
        short = 'c',
        global = true,
        env = "OUTBOX_CDC_CONFIG",
        default_value = "outbox-cdc.toml"
    )]
    path: PathBuf,
}

impl ConfigArg {
    fn load(&self) -> Result<Config, Error> {
        Config::load_from_process_env(&self.path)
    }
}

#[derive(Subcommand)]
enum Command {
    /// Write the Debezium PostgreSQL connector configuration (Debezium 3.6.1.Final).
    #[command(
        after_help = "Examples:\n  outbox-cdc connector-config -c outbox-cdc.toml > connector.properties\n  outbox-cdc connector-config --target connect-json --out connector.json\n  outbox-cdc connector-config --target strimzi > kafkaconnector.yaml"
    )]
    ConnectorConfig(connector_config::Args),
    /// Stream outbox INSERTs from the slot to Kafka until SIGTERM or SIGINT.
    #[command(
        after_help = "Examples:\n  outbox-cdc run -c /etc/outbox-cdc/outbox-cdc.toml\n  OUTBOX_CDC_LOG=debug outbox-cdc --log-format json run"
    )]
    Run(run::Args),
    /// Switch the outbox between the polling relay and this one, handing the backlog over.
    #[command(
        after_help = "Examples:\n  outbox-cdc cutover --to cdc --dry-run\n  outbox-cdc cutover --to cdc\n  outbox-cdc cutover --to polling --reason 'back out'"
    )]
    Cutover(cutover::Args),
    /// Preflight and health report; exit 1 when anything is wrong.
    #[command(after_help = "Examples:\n  outbox-cdc check\n  outbox-cdc check --format json")]
    Check(check::Args),
    /// One screen from PostgreSQL alone: the slot, the relay mode, what waits and what failed; non-zero when unhealthy.
    #[command(
        after_help = "Examples:\n  outbox-cdc status\n  outbox-cdc status --format json --inactive-after 5m"
    )]
    Status(status::Args),
    /// Print the records of a topic with their key and headers (for people).
    #[command(
        after_help = "Examples:\n  outbox-cdc tail orders --from-beginning --max 10\n  outbox-cdc tail outbox.orders"
    )]
    Tail(tail::Args),
    /// Create the outbox table and the CDC objects; applies each migration once.
    #[command(
        after_help = "Examples:\n  outbox-cdc migrate --print > migrations.sql\n  outbox-cdc migrate\n  outbox-cdc migrate --print-grants relay"
    )]
    Migrate(migrate::Args),
    /// Delete old PUBLISHED (and FAILED) rows in short batches, never one the slot has not confirmed.
    #[command(
        after_help = "Examples:\n  outbox-cdc purge --older-than 7d --dry-run\n  outbox-cdc purge --older-than 7d --failed-older-than 30d"
    )]
    Purge(purge::Args),
    /// Publish FAILED rows again once their cause is fixed; they end PUBLISHED.
    #[command(
        after_help = "Examples:\n  outbox-cdc redrive --code TOPIC_UNKNOWN --dry-run\n  outbox-cdc redrive --destination orders --since 2h"
    )]
    Redrive(redrive::Args),
    /// Print the Prometheus alerting rules for the relay's metrics.
    #[command(
        after_help = "Examples:\n  outbox-cdc alert-rules --job outbox-cdc > outbox-cdc.rules.yml"
    )]
    AlertRules(alert_rules::Args),
    /// Compare a window of the outbox with its topics: lost, duplicated, different, out-of-order and orphaned records.
    #[command(
        after_help = "Examples:\n  outbox-cdc audit --since 2026-12-01T09:00:00Z --until 2026-12-01T11:00:00Z\n  outbox-cdc audit --since 2h --destination orders --format json"
    )]
    Audit(audit::Args),
    /// Publish the rows of a window again, to their topics or to a new prefix; no row's status changes.
    #[command(
        after_help = "Examples:\n  outbox-cdc replay --since 2026-12-01T09:00:00Z --until 2026-12-01T11:00:00Z --dry-run\n  outbox-cdc replay --since 3h --until 1h --to-topic-prefix rebuild."
    )]
    Replay(replay::Args),
    /// Check the configuration without connecting to anything.
    #[command(
        subcommand,
        after_help = "Examples:\n  outbox-cdc config validate -c outbox-cdc.toml"
    )]
    Config(config_cmd::ConfigCommand),
    /// Print the shell's completion script.
    #[command(
        after_help = "Examples:\n  outbox-cdc completions bash > /etc/bash_completion.d/outbox-cdc\n  outbox-cdc completions zsh > ~/.zfunc/_outbox-cdc"
    )]
    Completions(shell::CompletionArgs),
    /// Print the manual page (roff).
    #[command(after_help = "Examples:\n  outbox-cdc man > outbox-cdc.1 && man ./outbox-cdc.1")]
    Man,
}

/// The process environment: where secrets and overrides come from.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The default log filter: the relay at info, clients at warn (librdkafka
/// repeats broker outages; tokio-postgres logs the server's NOTICEs, such as
/// `migrate`'s "does not exist, skipping", at info). `OUTBOX_CDC_LOG` asks
/// for more, e.g. `info,tokio_postgres=info`.
// rustls-platform-verifier logs the refusal the error then carries.
const DEFAULT_LOG: &str = "info,rdkafka=warn,tokio_postgres=warn,rustls_platform_verifier=off";

/// Parses the command line, runs the command, prints an error once.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("OUTBOX_CDC_LOG")
        .unwrap_or_else(|_| DEFAULT_LOG.into());
    // Colours only for a person at a terminal, never in a log file, and
    // never when NO_COLOR is set to anything (no-color.org).
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    let log_format = cli.log_format;
    let result = match cli.command {
        Command::ConnectorConfig(args) => connector_config::run(args, &cli.config),
        Command::Run(args) => run::run(args, &cli.config),
        Command::Cutover(args) => cutover::run(args, &cli.config),
        Command::Check(args) => check::run(args, &cli.config),
        Command::Status(args) => status::run(args, &cli.config),
        Command::Tail(args) => tail::run(args, &cli.config),
        Command::Migrate(args) => migrate::run(args, &cli.config),
        Command::AlertRules(args) => alert_rules::run(args),
        Command::Purge(args) => purge::run(args, &cli.config),
        Command::Redrive(args) => redrive::run(args, &cli.config),
        Command::Audit(args) => audit::run(args, &cli.config),
        Command::Replay(args) => replay::run(args, &cli.config),
        Command::Config(command) => config_cmd::run(command, &cli.config),
        Command::Completions(args) => shell::completions(args),
        Command::Man => shell::man(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The fatal line in the format of the others.
            match log_format {
                LogFormat::Human => eprintln!("error: {e}"),
                LogFormat::Json => crate::log_error!(error, e, "{}", e.detail()),
            }
            ExitCode::from(exit_status(&e))
        }
    }
}

/// Exit status: an operator must act (permissions, schema, ownership, a
/// fenced producer, `check` found errors).
pub const EXIT_OPERATOR: u8 = 1;
/// Exit status: the configuration must be fixed.
pub const EXIT_CONFIG: u8 = 2;
/// Exit status: `audit` found rows missing from Kafka.
pub const EXIT_LOST: u8 = 3;
/// Exit status: `audit` found records that differ, are out of order or
/// have no row.
pub const EXIT_MISMATCH: u8 = 4;
/// Exit status: a failure that may pass (the database or Kafka unreachable
/// at start, a relay that awaits an operator's grant): a supervisor such as
/// systemd starts it again (`EX_TEMPFAIL`).
pub const EXIT_TEMPORARY: u8 = 75;

/// The exit status for `e`, from what the retry policy says of it.
fn exit_status(e: &Error) -> u8 {
    use crate::error::policy::{directive, Directive};
    match (e.code(), directive(e)) {
        (
            Code::CONFIG_UNREADABLE
            | Code::CONFIG_SYNTAX
            | Code::CONFIG_UNKNOWN_KEY
            | Code::CONFIG_MISSING_KEY
            | Code::CONFIG_INVALID_VALUE
            | Code::CONFIG_SECRET_IN_FILE
            | Code::CONFIG_SECRET_UNAVAILABLE
            | Code::ARGUMENT_INVALID
            | Code::CONVERTER_NEEDS_REGISTRY,
            _,
        ) => EXIT_CONFIG,
        (Code::AUDIT_LOST, _) => EXIT_LOST,
        (Code::AUDIT_MISMATCH, _) => EXIT_MISMATCH,
        (_, Directive::Stop | Directive::Fatal) => EXIT_OPERATOR,
        (
            _,
            Directive::Retry
            | Directive::AwaitOperator
            | Directive::RecordFailed
            | Directive::Standby,
        ) => EXIT_TEMPORARY,
    }
}

/// Runs `work` as a task on the runtime's worker threads. The future given
/// to `block_on` runs on the calling thread, apart from the tasks it
/// spawns: the session would sit there and every event from the reader (a
/// task) would wake a parked thread across cores. As a task beside the
/// reader, a wake-up is mostly a turn on the same worker.
fn run_on_workers<T, F>(work: F) -> Result<T, Error>
where
    F: std::future::Future<Output = Result<T, Error>> + Send + 'static,
    T: Send + 'static,
{
    let rt = runtime()?;
    let result = rt.block_on(async move {
        match tokio::spawn(work).await {
            Ok(result) => result,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(Error::new(
                Code::INTERNAL,
                format!("the command's task was cancelled: {e}"),
            )),
        }
    });
    // A librdkafka call the relay gave up (`kafka::publisher`'s blocking
    // calls) may never return: the exit does not wait for it past this.
    rt.shutdown_timeout(EXIT_GRACE);
    result
}

/// How long the exit waits for blocking calls still running.
const EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| {
            Error::new(
                Code::INTERNAL,
                format!("cannot start the async runtime: {e}"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Code;

    #[test]
    fn the_exit_status_says_whether_a_restart_can_help() {
        for (code, status) in [
            (Code::CONFIG_SYNTAX, EXIT_CONFIG),
            (Code::CONFIG_SECRET_UNAVAILABLE, EXIT_CONFIG),
            (Code::DUPLICATE_OUTBOX_RELAY, EXIT_OPERATOR),
            (Code::KAFKA_PRODUCER_FENCED, EXIT_OPERATOR),
            (Code::UNHEALTHY, EXIT_OPERATOR),
            (Code::KAFKA_UNREACHABLE, EXIT_TEMPORARY),
            (Code::PG_CONNECT_FAILED, EXIT_TEMPORARY),
            (Code::TOPIC_AUTHORIZATION_FAILED, EXIT_TEMPORARY),
        ] {
            assert_eq!(exit_status(&Error::new(code, "x")), status, "{code}");
        }
    }

    /// A help example as the shell would split it: a leading `VAR=value`
    /// and a trailing redirection dropped, single quotes kept together.
    fn words(example: &str) -> Vec<String> {
        let line = example.split(" > ").next().unwrap_or(example);
        let mut words = Vec::new();
        let mut word = String::new();
        let mut quoted = false;
        for c in line.chars() {
            match c {
                '\'' => quoted = !quoted,
                ' ' if !quoted => words.push(std::mem::take(&mut word)),
                c => word.push(c),
            }
        }
        words.push(word);
        words.retain(|w| !w.is_empty());
        while words
            .first()
            .is_some_and(|w| w.contains('=') && !w.starts_with('-'))
        {
            words.remove(0);
        }
        words
    }

    #[test]
    fn every_command_has_examples_that_parse_and_every_option_says_what_it_is() {
        use clap::CommandFactory;
        let cli = Cli::command();
        let mut undescribed = Vec::new();
        for sub in cli.get_subcommands() {
            let name = sub.get_name();
            let after = sub
                .get_after_help()
                .map(|h| h.to_string())
                .unwrap_or_default();
            let examples: Vec<&str> = after
                .lines()
                .filter_map(|l| l.trim().strip_prefix("outbox-cdc ").map(|_| l.trim()))
                .chain(
                    after
                        .lines()
                        .filter(|l| {
                            l.contains(" outbox-cdc ") && !l.trim().starts_with("outbox-cdc")
                        })
                        .map(str::trim),
                )
                .collect();
            assert!(after.starts_with("Examples:"), "{name} has no examples");
            assert!(!examples.is_empty(), "{name}: {after}");
            for example in examples {
                let words = words(example);
                assert_eq!(
                    words.first().map(String::as_str),
                    Some("outbox-cdc"),
                    "{example}"
                );
                if let Err(e) = Cli::try_parse_from(&words) {
                    panic!("{name}: `{example}` does not parse: {e}");
                }
            }
            for arg in sub.get_arguments() {
                if arg.is_hide_set() || ["help", "version"].contains(&arg.get_id().as_str()) {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    undescribed.push(format!("{name} {}", arg.get_id()));
                }
            }
        }
        assert!(undescribed.is_empty(), "no description: {undescribed:?}");
    }

    /// Markdown files of the README and the user guide.
    fn guide_pages() -> Vec<(String, String)> {
        fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, out);
                } else if path.extension().is_some_and(|e| e == "md") {
                    out.push(path);
                }
            }
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut paths = vec![root.join("README.md")];
        walk(&root.join("docs"), &mut paths);
        paths
            .into_iter()
            .map(|p| {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                (
                    p.strip_prefix(root).unwrap_or(&p).display().to_string(),
                    text,
                )
            })
            .collect()
    }

    /// Every `outbox-cdc ...` command the README and the guide show, in a
    /// shell block or in running text, parses with today's arguments: a
    /// renamed flag or command fails here. Usage summaries (`[--x]`,
    /// `a|b`, `<...>`) are not commands and are left out.
    #[test]
    fn every_command_the_guide_shows_parses() {
        let mut commands = Vec::new();
        for (page, text) in guide_pages() {
            let mut fenced = false;
            // Running text joined, since a code span may wrap.
            let mut prose = String::new();
            // A fenced command continued with `\` on the next lines.
            let mut continued = String::new();
            for line in text.lines() {
                if line.trim_start().starts_with("```") {
                    fenced = !fenced;
                    continue;
                }
                if fenced {
                    let line = line.split(" #").next().unwrap_or(line).trim();
                    if let Some(head) = line.strip_suffix('\\') {
                        continued.push_str(head);
                        continue;
                    }
                    let line = std::mem::take(&mut continued) + line;
                    if line.starts_with("outbox-cdc ") {
                        commands.push((page.clone(), line));
                    }
                } else {
                    prose.push_str(line.trim());
                    prose.push(' ');
                }
            }
            for span in prose.split('`').skip(1).step_by(2) {
                if span.starts_with("outbox-cdc ") {
                    commands.push((page.clone(), span.to_string()));
                }
            }
        }
        let mut parsed = 0;
        let mut stale = Vec::new();
        for (page, command) in &commands {
            if ["[", "|", "<", "...", "…"]
                .iter()
                .any(|m| command.contains(m))
            {
                continue;
            }
            let mut words = words(command);
            // `--help` prints and exits: parse the command without it.
            words.retain(|w| w != "--help");
            parsed += 1;
            if let Err(e) = Cli::try_parse_from(&words) {
                // `outbox-cdc tail` in a sentence names the command.
                if words.len() == 2 && e.kind() == clap::error::ErrorKind::MissingRequiredArgument {
                    continue;
                }
                let e = e.to_string();
                stale.push(format!(
                    "{page}: `{command}`: {}",
                    e.lines().next().unwrap_or("")
                ));
            }
        }
        assert!(parsed >= 40, "only {parsed} commands found");
        assert!(
            stale.is_empty(),
            "commands that no longer parse:\n{}",
            stale.join("\n")
        );
    }
}
