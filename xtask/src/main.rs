//! outbox-cdc's development tools, as a program of the workspace:
//!
//!   cargo xtask services COMMAND [ARGS]   the local test services
//!                                        (`scripts/services.sh COMMAND`)
//!   cargo xtask test [--plan]            the whole test suite
//!                                        (`scripts/test.sh`, what CI runs)
//!
//! The scripts run it from a target directory of its own (`target/xtask`),
//! so it never waits on the lock of a build of the relay.

mod cluster;
mod config;
mod connect;
mod http;
mod jvm;
mod kafka;
mod postgres;
mod process;
mod services;
mod test;
mod tls;
mod tools;
mod toxiproxy;
mod wait;

use std::io::Write;
use std::path::{Path, PathBuf};

use config::{Config, Vars};

const USAGE: &str = "usage: xtask services COMMAND [ARGS]   (xtask services help lists them)
       xtask test [--plan]";

/// The repository: where the scripts say it is, or where this was built.
pub fn repo() -> PathBuf {
    match std::env::var_os("OUTBOX_XTASK_REPO") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default(),
    }
}

fn services_main(args: &[String]) -> i32 {
    let Some((command, rest)) = args.split_first() else {
        eprintln!("{}", services::USAGE);
        return 2;
    };
    if !services::COMMANDS.contains(&command.as_str()) {
        eprintln!(
            "[services] error: unknown command {command:?}\n{}",
            services::USAGE
        );
        return 2;
    }
    let cfg = match Config::new(&Vars::from_process(), &repo(), process::uid()) {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("[services] error: {e:#}");
            return 2;
        }
    };
    match services::run(&cfg, command, rest) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("[services] error: {e:#}");
            1
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.split_first() {
        Some((c, rest)) if c == "services" => services_main(rest),
        Some((c, rest)) if c == "test" => test::main(rest),
        _ => {
            eprintln!("{USAGE}");
            2
        }
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}
