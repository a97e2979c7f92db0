//! The `outbox-cdc` binary: everything is in the library's `cli` module.

use std::process::ExitCode;

/// About a quarter of the relay's own CPU went to glibc malloc and free (one
/// record is a score of small allocations), measured with `perf` under
/// `scripts/bench.sh`.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    outbox_cdc::cli::main()
}
