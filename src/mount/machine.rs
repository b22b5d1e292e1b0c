//! A mount's defaults that depend on the machine: session threads from
//! its cores, the block cache's budget from its memory.

/// Default number of FUSE session threads: twice the cores, 4 to 16.
///
/// A session thread decodes on the request path, so more threads than cores
/// only help to overlap page faults on the image; too many cost wakeups and
/// cache misses (`packfs bench --mount-threads` compares counts;
/// docs/benchmarks/reads.md, "What made the difference", has the figures behind this choice).
pub fn default_session_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    (2 * cores).clamp(4, 16)
}

/// Default cache budget: an eighth of physical memory, between 64 MiB and 1 GiB.
pub fn default_cache_size() -> u64 {
    (mountfs::memory_limit::limit() / 8).clamp(64 << 20, 1 << 30)
}
