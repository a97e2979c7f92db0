//! The `outbox-cdc` binary: everything is in the library's `cli` module.

use std::process::ExitCode;

outbox_cdc::use_jemalloc!();

fn main() -> ExitCode {
    outbox_cdc::cli::main()
}
