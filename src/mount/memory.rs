//! What the mount's daemon sets up about memory before its threads start.
//! (The memory limit the caches' defaults come from is
//! [`mountfs::memory_limit::limit`].)

/// Caps glibc's malloc arenas for a mount's daemon at one per CPU (2 to 8),
/// before any thread starts. glibc gives each thread that meets a locked
/// arena a new one, up to 8 per core; in a daemon whose threads all
/// allocate decoded blocks and answers, each arena keeps its own freed
/// space, and RSS grew past the cache budget by that much per arena (with
/// ZIP members' decoders, with the number of reader threads). Fewer arenas
/// bound that; docs/benchmarks/memory.md has the measurements.
/// Only glibc has arenas to cap (a static musl build has one allocator
/// lock, no arenas).
pub fn limit_malloc_arenas() {
    #[cfg(target_env = "gnu")]
    {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let arenas = cpus.clamp(2, 8) as libc::c_int;
        // SAFETY: mallopt only sets an allocator parameter; called before
        // any thread exists, so no arena is being chosen meanwhile.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) };
    }
}
