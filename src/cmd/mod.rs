//! One module per group of subcommands.

mod inspect;
mod mount;
mod pack;
mod shards;

use crate::cli::{Cli, Command};

/// Default number of FUSE session threads: twice the cores, 4 to 16.
///
/// A session thread decodes on the request path, so more threads than cores
/// only help to overlap page faults on the image; too many cost wakeups and
/// cache misses. Measured with 4 readers on 2 cores (`packfs bench
/// --mount-threads`, two alternating runs each, docs/BENCHMARKS.md): 4 threads
/// beat 2 and 8 on the Linux tree (cold sequential 4.35 / 4.35 s against
/// 4.70 / 5.02 and 5.35 / 4.52; shuffled 3.99 / 4.08 against 4.17 / 4.35 and
/// 4.97 / 4.24) and 2 or 4 beat 8 on the JPEG set by ~8%.
pub fn default_session_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    (2 * cores).clamp(4, 16)
}

/// Default cache budget: an eighth of physical memory, between 64 MiB and 1 GiB.
pub fn default_cache_size() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let ram = if pages > 0 && page > 0 {
        pages as u64 * page as u64
    } else {
        8 << 30
    };
    (ram / 8).clamp(64 << 20, 1 << 30)
}

/// Runs a command; returns the process exit code.
pub fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    match cli.cmd {
        c @ Command::Pack { .. } => pack::run(c),
        Command::Info { image } => inspect::info(&image),
        Command::Ls {
            image,
            path,
            long,
            recursive,
        } => inspect::ls(&image, &path, long, recursive),
        Command::Cat { image, path } => inspect::cat(&image, &path),
        Command::Extract {
            image,
            output,
            path,
        } => inspect::extract(&image, &path, &output),
        c @ Command::Mount { .. } => mount::mount(c),
        Command::Umount { mountpoint } => mount::umount(&mountpoint),
        Command::Shards { cmd } => shards::run(cmd),
        Command::Bench(args) => crate::bench::run(*args),
        Command::UnmountWatcher {
            fd,
            mountpoint,
            fsname,
        } => mount::unmount_watcher(fd, &mountpoint, &fsname),
        Command::Run {
            mounts,
            cache_size,
            io,
            command,
        } => mount::run(&mounts, cache_size, io, &command),
    }
}
