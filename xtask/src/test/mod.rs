//! `cargo xtask test` (`scripts/test.sh`, what CI runs): the whole suite
//! from a fresh clone on a fresh machine. Formatting, one build of every
//! target linted by clippy's driver, unit and integration tests against the
//! real services (which it installs, starts and stops; locally it reuses
//! running ones and leaves them running), the failover, network, restart
//! and cluster faults, the soak, the quickstart, the shipped artifacts (the
//! container image and its tests under podman, the Helm chart, the Debian
//! package, the user guide), and the version matrix: the core of the suite
//! again on PostgreSQL 14, 16, 17 and 18, two at a time, and the Debezium
//! parity test on 18, the newest major Debezium 3.6.1 is tested against.
//!
//! `OUTBOX_TEST_PG_MAJORS="14 16 17 18"` picks the matrix's majors (all of
//! them unless set; an empty value runs PostgreSQL 15 only, for quick local
//! runs). `--plan` prints the steps and runs nothing; `--only` runs the
//! steps named that need no build of the relay (`fmt`, `services`, `tools`,
//! `xtask`, `proxies`). At the end: a table of every step's start and
//! duration, then `tests: N passed, N failed`.

mod exec;
mod plan;
mod report;
mod run;

#[cfg(test)]
mod tests;

use crate::config::{parse_majors, Vars};

const USAGE: &str = "usage: xtask test [--plan] [--only fmt,services,tools,xtask,proxies]";

pub fn main(args: &[String]) -> i32 {
    let majors = match parse_majors(
        Vars::from_process().raw("OUTBOX_TEST_PG_MAJORS"),
        &plan::MATRIX,
    ) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("{e:#}");
            return 2;
        }
    };
    let full = plan::plan(&majors);
    let mut steps = full.clone();
    let mut print_only = false;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match (arg.as_str(), rest.as_slice().first()) {
            ("--plan", _) => print_only = true,
            ("--only", Some(keys)) => {
                let keys: Vec<&str> = keys.split(',').collect();
                steps = match plan::select(&steps, &keys) {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("{e}");
                        return 2;
                    }
                };
                rest.next();
            }
            _ => {
                eprintln!("{USAGE}");
                return 2;
            }
        }
    }
    if print_only {
        print!("{}", plan::render(&steps));
        return 0;
    }
    let mut runner = match run::Runner::new(crate::repo()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e:#}");
            return 1;
        }
    };
    run::catch_interrupts();
    let result = runner.execute(&steps, plan::prefetched(&full));
    runner.cleanup();
    match result {
        Ok(()) => runner.finish(),
        Err(e) => runner.abort(&e),
    }
}
