//! One module per subcommand (or group of them); [`dispatch`] hands each
//! its own arguments and the remote flags, which are all it reads.

mod completions;
mod inspect;
mod interrupt;
mod man;
mod mount;
mod pack;
mod run;
mod shards;
mod stats;
mod stream_upload;
mod upload;
mod verify;

use crate::args::cli::{Cli, Command, RemoteArgs};
use crate::args::usage::usage;

/// Runs a command; returns the process exit code.
pub fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    let remote = cli.remote;
    remote.settings().validate().map_err(usage)?;
    if let Some(image) = one_image(&cli.cmd) {
        crate::logging::set_image(&image.display().to_string());
    }
    match cli.cmd {
        Command::Pack(args) => pack::run(args, &remote),
        Command::Info { image } => inspect::info(&image, &remote),
        Command::Ls {
            image,
            path,
            long,
            recursive,
        } => inspect::ls(&image, &path, long, recursive, &remote),
        Command::Cat { image, path } => inspect::cat(&image, &path, &remote),
        Command::Extract {
            image,
            output,
            path,
        } => inspect::extract(&image, &path, &output, &remote),
        Command::Mount(args) => mount::run(args, &remote),
        Command::Umount { mountpoint } => crate::mount::fusermount::umount(&mountpoint),
        Command::Shards { cmd } => shards::run(cmd),
        Command::Verify {
            image,
            threads,
            quiet,
        } => verify::run(&image, threads, quiet, &remote),
        Command::Bench(args) => Ok(packfs_bench::run(&args, &bench_mount_command(&remote))?),
        Command::UnmountWatcher {
            fd,
            mountpoint,
            fsname,
        } => crate::mount::daemon::unmount_watcher(fd, &mountpoint, &fsname),
        Command::Run(args) => run::run(&args, &remote),
        Command::Completions { shell } => completions::run(shell),
        Command::Man { out } => man::run(out.as_deref()),
    }
}

/// The one image a command reads, if it reads exactly one.
fn one_image(cmd: &Command) -> Option<&std::path::Path> {
    match cmd {
        Command::Info { image }
        | Command::Ls { image, .. }
        | Command::Cat { image, .. }
        | Command::Extract { image, .. }
        | Command::Verify { image, .. } => Some(image),
        Command::Mount(m) if m.paths.len() == 2 => Some(&m.paths[0]),
        _ => None,
    }
}

/// How `packfs bench` starts packfs's own mount: this very program, by
/// /proc/self/exe rather than its path so that a long run survives the
/// binary being rebuilt under it, with the remote flags of this invocation.
fn bench_mount_command(remote: &RemoteArgs) -> packfs_bench::MountCommand {
    packfs_bench::MountCommand {
        program: "/proc/self/exe".into(),
        remote_args: remote.to_args(),
    }
}
