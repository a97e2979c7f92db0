//! The `outbox-cdc` binary: everything is in the library's `cli` module.

use std::process::ExitCode;

/// jemalloc for Rust and, unprefixed, for librdkafka's C allocations too.
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's compiled-in options; `MALLOC_CONF` in the environment still
/// overrides them. One arena, because per-thread arenas held freed memory
/// as glibc's did; freed pages go back to the system after a second.
#[cfg(target_os = "linux")]
#[export_name = "malloc_conf"]
#[used]
static MALLOC_CONF: ConfPtr = ConfPtr(c"narenas:1,dirty_decay_ms:1000".as_ptr());

/// A pointer to a static C string, which jemalloc reads before `main`.
#[cfg(target_os = "linux")]
#[repr(transparent)]
struct ConfPtr(*const std::ffi::c_char);

// SAFETY: the pointer is to an immutable static string.
#[cfg(target_os = "linux")]
unsafe impl Sync for ConfPtr {}

fn main() -> ExitCode {
    outbox_cdc::cli::main()
}
