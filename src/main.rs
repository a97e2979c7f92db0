//! The `outbox-cdc` binary: everything is in the library's `cli` module.

use std::process::ExitCode;

fn main() -> ExitCode {
    outbox_cdc::cli::main()
}
