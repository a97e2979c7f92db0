//! The allocator the binary runs with, in one place so that the benchmark's
//! raw baselines run with it too: a bound measured with a slower malloc than
//! the relay's is no bound.
//!
//! jemalloc for Rust and, unprefixed, for librdkafka's C allocations too.
//! One arena, because per-thread arenas held freed memory as glibc's did;
//! freed pages go back to the system after a second. `MALLOC_CONF` in the
//! environment still overrides the compiled-in options.

#[cfg(target_os = "linux")]
#[doc(hidden)]
pub use tikv_jemallocator::Jemalloc;

/// jemalloc's compiled-in options, read before `main`.
#[cfg(target_os = "linux")]
pub const CONF: ConfPtr = ConfPtr(c"narenas:1,dirty_decay_ms:1000".as_ptr());

/// A pointer to a static C string, the type jemalloc's `malloc_conf` has.
#[cfg(target_os = "linux")]
#[repr(transparent)]
pub struct ConfPtr(*const std::ffi::c_char);

// SAFETY: the pointer is to an immutable static string.
#[cfg(target_os = "linux")]
unsafe impl Sync for ConfPtr {}

/// Installs jemalloc with its options in the crate that invokes it (a
/// binary: the global allocator and `malloc_conf` must be defined where they
/// are linked for certain); elsewhere than Linux, the system's allocator.
#[macro_export]
macro_rules! use_jemalloc {
    () => {
        #[cfg(target_os = "linux")]
        #[global_allocator]
        static ALLOCATOR: $crate::allocator::Jemalloc = $crate::allocator::Jemalloc;

        #[cfg(target_os = "linux")]
        #[export_name = "malloc_conf"]
        #[used]
        static MALLOC_CONF: $crate::allocator::ConfPtr = $crate::allocator::CONF;
    };
}
