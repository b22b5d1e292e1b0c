//! One module per group of subcommands.

mod inspect;
mod mount;
mod pack;
mod shards;
mod upload;

use crate::cli::{Cli, Command, RemoteArgs};
use std::sync::OnceLock;

/// The remote flags of this invocation (set once by [`dispatch`]).
static REMOTE: OnceLock<RemoteArgs> = OnceLock::new();

/// The remote flags given on the command line: how `s3://` and `http(s)://`
/// images are read (every command that opens an image asks here).
pub fn remote_args() -> &'static RemoteArgs {
    REMOTE.get().expect("dispatch sets the remote flags first")
}

/// What an image argument names (a file, `s3://`, `http(s)://`).
pub fn location(image: &std::path::Path) -> anyhow::Result<mountfs::location::ImageLocation> {
    mountfs::location::ImageLocation::from_path(image).map_err(anyhow::Error::msg)
}

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
    (crate::memory::limit() / 8).clamp(64 << 20, 1 << 30)
}

/// Runs a command; returns the process exit code.
pub fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    cli.remote
        .options()
        .validate()
        .map_err(anyhow::Error::msg)?;
    let _ = REMOTE.set(cli.remote);
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
