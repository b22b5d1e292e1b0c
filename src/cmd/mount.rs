//! `packfs mount`: the flags become a [`MountPlan`] (plain options: what to
//! open, how to serve it), the image is opened and served; the process
//! around it (fork, ready pipe, watcher) is `crate::mount`'s.

use crate::args::cli::{MountArgs, RemoteArgs};
use crate::args::location;
use crate::args::usage::usage;
use crate::mount::daemon::{self, Ready};
use crate::mount::{machine, mountinfo, mountlock};
use anyhow::Context;
use mountfs::fuse::serve::ServeOptions;
use mountfs::fuse::transport::Transport;
use mountfs::location::ImageLocation;
use mountfs::open::{OpenedImage, Opener};
use mountfs::source::IoMode;
use mountfs::union::OnConflict;
use std::path::{Path, PathBuf};

/// What `packfs mount` opens, from its image arguments.
enum Source {
    /// One path: a file, a shard manifest, an `s3://` or `http(s)://` URL.
    One(ImageLocation),
    /// Several local images merged into one tree.
    Union(Vec<PathBuf>, OnConflict),
}

/// How an image is opened for a mount.
struct OpenOptions {
    source: Source,
    cache_bytes: usize,
    io: IoMode,
    remote: mountfs::remote::RemoteOptions,
}

impl OpenOptions {
    /// Whether opening may start threads, which a fork would lose: a
    /// remote image, or a local shard manifest (its shards may be on S3 or
    /// HTTP, whose clients run threads).
    fn starts_threads(&self) -> bool {
        match &self.source {
            Source::One(ImageLocation::Local(p)) => mountfs::location::is_manifest(p),
            Source::One(_) => true,
            Source::Union(..) => false,
        }
    }

    /// Whether reads of the image go over the network: a remote image, or
    /// an image file on a network filesystem or behind another FUSE server.
    fn over_network(&self) -> bool {
        match &self.source {
            Source::One(ImageLocation::Local(p)) => mountinfo::on_network_fs(p),
            Source::One(_) => true,
            Source::Union(images, _) => images.iter().any(|p| mountinfo::on_network_fs(p)),
        }
    }

    /// The image as the user named it, for errors.
    fn describe(&self) -> String {
        match &self.source {
            Source::One(l) => l.to_string(),
            Source::Union(images, _) => format!("the union of {} images", images.len()),
        }
    }

    fn open(&self) -> anyhow::Result<OpenedImage> {
        let o = mountfs::open::OpenOptions {
            io: self.io,
            remote: self.remote.clone(),
            ..mountfs::open::OpenOptions::new(self.cache_bytes)
        };
        Ok(match &self.source {
            Source::One(l) => Opener::new(o).open(l)?,
            Source::Union(images, on_conflict) => Opener::new(mountfs::open::OpenOptions {
                on_conflict: *on_conflict,
                ..o
            })
            .open_union(images)?,
        })
    }
}

/// The transport when `--transport` is not given: `PACKFS_TRANSPORT`
/// (`auto`, `uring` or `dev`), so that a test run or a job script can pick
/// it for every mount it starts, `packfs run` and `packfs bench` included.
fn transport_from_env() -> anyhow::Result<Transport> {
    match env_setting("PACKFS_TRANSPORT") {
        None => Ok(Transport::Auto),
        Some(v) => <Transport as clap::ValueEnum>::from_str(&v, false).map_err(|_| {
            usage(format!(
                "PACKFS_TRANSPORT={v:?}: expected auto, uring or dev"
            ))
        }),
    }
}

/// A mount setting from the environment: `None` when unset or empty, so
/// that `VAR=` in a job script means the default, as leaving it out does.
fn env_setting(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// `--dev-spin`, else `PACKFS_DEV_SPIN_US` (so that `packfs run`, `packfs
/// bench` and test runs can set it for every mount they start), else 0:
/// `None`, `/dev/fuse` served by `fuser`'s threads.
fn dev_spin_of(flag: Option<u64>) -> anyhow::Result<Option<std::time::Duration>> {
    let us = match (flag, env_setting("PACKFS_DEV_SPIN_US")) {
        (Some(us), _) => us,
        (None, Some(v)) => v
            .parse()
            .map_err(|_| usage(format!("PACKFS_DEV_SPIN_US={v:?}: expected microseconds")))?,
        (None, None) => 0,
    };
    Ok((us > 0).then(|| std::time::Duration::from_micros(us)))
}

/// `PACKFS_URING_THREADS`: threads per io_uring queue, for a benchmark to
/// compare (`benches/transport.sh`); unset or empty, packfs picks
/// (`mountfs::fuse::transport::uring::threads_per_queue`).
fn queue_threads_of() -> anyhow::Result<Option<usize>> {
    match env_setting("PACKFS_URING_THREADS") {
        None => Ok(None),
        Some(v) => match v.parse::<usize>() {
            Ok(n) if (1..=64).contains(&n) => Ok(Some(n)),
            _ => Err(usage(format!(
                "PACKFS_URING_THREADS={v:?}: expected threads per queue, 1 to 64"
            ))),
        },
    }
}

/// Whether blocks served in full leave the cache (`mountfs::cache`): yes,
/// unless `--preload` asks the daemon to hold the image or
/// `PACKFS_RELEASE_SERVED=0` keeps them for a benchmark to compare.
fn release_served_of(preload: bool) -> anyhow::Result<bool> {
    let env = match env_setting("PACKFS_RELEASE_SERVED") {
        None => true,
        Some(v) => match v.as_str() {
            "1" => true,
            "0" => false,
            _ => {
                return Err(usage(format!(
                    "PACKFS_RELEASE_SERVED={v:?}: expected 0 or 1"
                )))
            }
        },
    };
    Ok(env && !preload)
}

/// Everything a mount needs, checked: built by [`MountPlan::from_args`].
struct MountPlan {
    mountpoint: PathBuf,
    open: OpenOptions,
    serve: ServeOptions,
    foreground: bool,
    preload: bool,
    /// See [`release_served_of`].
    release_served: bool,
    /// `--stats FILE`, absolute.
    stats: Option<PathBuf>,
    /// `--record-access FILE`, absolute.
    record_access: Option<PathBuf>,
    /// `--log FILE`, absolute (opened once here, so that a path the daemon
    /// could not write is refused before anything is mounted).
    log: Option<PathBuf>,
    /// The contents of `--preload-profile FILE`, read before daemonising.
    preload_profile: Option<Vec<u8>>,
    /// Held from the mountpoint's check until the mount is usable or has
    /// failed (see `crate::mount::mountlock`).
    _lock: Option<mountlock::MountpointLock>,
    /// `--exit-with-fd`: see [`crate::mount::daemon::end_with`].
    exit_with_fd: Option<i32>,
}

impl MountPlan {
    /// Checks the mountpoint, the options and the image arguments; opens
    /// nothing.
    fn from_args(args: MountArgs, remote: &RemoteArgs) -> anyhow::Result<MountPlan> {
        let MountArgs {
            mut paths,
            on_conflict,
            cache_size,
            threads,
            foreground,
            preload,
            allow_other,
            options,
            io,
            negative_ttl,
            transport,
            dev_spin,
            stats,
            record_access,
            log,
            preload_profile,
            nonempty,
            exit_with_fd,
        } = args;
        let log = log.map(log_file).transpose()?;
        let preload_profile = preload_profile.map(read_profile).transpose()?;
        let transport = match transport {
            Some(t) => t,
            None => transport_from_env()?,
        };
        if transport == Transport::Uring {
            mountfs::fuse::transport::probe()
                .map_err(|e| anyhow::anyhow!("--transport uring: {e}"))?;
        }
        let mountpoint = paths.pop().expect("clap requires two paths");
        let images = paths;
        let mut options = split_options(options);
        mountfs::fuse::serve::check_options(&options).map_err(|e| usage(format!("-o {e}")))?;
        // SAFETY: geteuid has no preconditions.
        if (allow_other || options.iter().any(|o| o == "allow_other"))
            && unsafe { libc::geteuid() } == 0
        {
            // A user needs user_allow_other in /etc/fuse.conf for this;
            // root gets it without any site's consent, so it is said.
            say!(
                "packfs: warning: --allow-other as root: every user of this machine can read the \
                 image's files through {} (access is checked against the owners and modes \
                 stored in the image)",
                mountpoint.display()
            );
        }
        // `-o nonempty`, libfuse 2's spelling, is taken too.
        let nonempty = nonempty || options.iter().any(|o| o == "nonempty");
        let lock = claim(&mountpoint, nonempty)?;
        let fsname = take_fsname(&mut options);
        let cache_bytes = cache_size.unwrap_or_else(machine::default_cache_size) as usize;
        let first = images[0].clone();
        let source = source(images, on_conflict)?;
        let open = OpenOptions {
            source,
            cache_bytes,
            io,
            remote: remote.options(),
        };
        let fsname =
            fsname.unwrap_or_else(|| format!("packfs:{}", source_name(&first, &open.source)));
        Ok(MountPlan {
            _lock: lock,
            exit_with_fd,
            mountpoint,
            serve: ServeOptions {
                threads: threads.unwrap_or_else(machine::default_session_threads),
                allow_other,
                options,
                fsname,
                readahead: 4 << 20,
                negative_ttl: (negative_ttl > 0)
                    .then(|| std::time::Duration::from_secs(negative_ttl)),
                transport,
                dev_spin: dev_spin_of(dev_spin)?,
                network: open.over_network(),
                queue_threads: queue_threads_of()?,
            },
            open,
            foreground,
            release_served: release_served_of(preload)?,
            preload,
            stats: stats
                .map(absolute)
                .map(|p| super::stats::check_path(&p).map(|()| p))
                .transpose()?,
            record_access: record_access.map(absolute),
            log,
            preload_profile,
        })
    }
}

/// A path given to `packfs mount`, made absolute: relative to where it
/// was started, not to the daemon's working directory (`/`).
fn absolute(p: PathBuf) -> PathBuf {
    std::path::absolute(&p).unwrap_or(p)
}

/// `--log FILE`, absolute, once opened for appending here, so that a path
/// the daemon could not write is refused before anything is mounted.
fn log_file(p: PathBuf) -> anyhow::Result<PathBuf> {
    let p = absolute(p);
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&p)
        .with_context(|| format!("--log {}", p.display()))?;
    Ok(p)
}

/// The contents of `--preload-profile FILE`, read before daemonising.
fn read_profile(p: PathBuf) -> anyhow::Result<Vec<u8>> {
    std::fs::read(&p).with_context(|| format!("--preload-profile {}", p.display()))
}

/// Locks the mountpoint, then checks it (`crate::mount::mountpoint`).
/// The lock comes first: a mount of the same place starting now waits
/// for this one, then finds it.
fn claim(mountpoint: &Path, nonempty: bool) -> anyhow::Result<Option<mountlock::MountpointLock>> {
    let lock = mountlock::lock(&mountinfo::resolve(mountpoint));
    crate::mount::mountpoint::check(mountpoint, nonempty)?;
    Ok(lock)
}

/// The source name given with `-o fsname=`, taken out of `options`: the
/// watcher recognises the mount by its source name, so a name given there
/// becomes that name rather than a second option.
fn take_fsname(options: &mut Vec<String>) -> Option<String> {
    let fsname = options
        .iter()
        .rev()
        .find_map(|o| o.strip_prefix("fsname="))
        .map(str::to_string);
    options.retain(|o| !o.starts_with("fsname="));
    fsname
}

/// `packfs mount IMAGE... MOUNTPOINT`.
pub fn run(args: MountArgs, remote: &RemoteArgs) -> anyhow::Result<i32> {
    let plan = MountPlan::from_args(args, remote)?;
    // A file is opened before the fork, so its errors come straight back. A
    // remote image or a manifest is opened after it: a remote client runs
    // threads, which a fork would lose. Their errors (403, 404, timeout, a
    // missing shard) come through the pipe.
    let pre = match plan.open.starts_threads() {
        false => Some(plan.open.open()?),
        true => None,
    };
    if plan.stats.is_some() {
        // Before any thread exists (a remote image's client starts some), so
        // that every thread inherits the mask and SIGUSR1 reaches only the
        // thread that waits for it (see `serve`), never its default action
        // (terminate) in a thread that does not.
        super::stats::block_sigusr1();
    } else {
        // SIGUSR1's default action ends a process: a `kill -USR1` meant to
        // ask a mount for its stats must not end one that writes none.
        // SAFETY: setting a signal's disposition, before any thread starts.
        unsafe { libc::signal(libc::SIGUSR1, libc::SIG_IGN) };
    }
    crate::mount::memory::limit_malloc_arenas();
    let target = daemon::Target {
        mountpoint: &plan.mountpoint,
        fsname: &plan.serve.fsname,
        log: plan.log.as_deref(),
    };
    daemon::run(
        &target,
        plan.foreground,
        || pre.map_or_else(|| plan.open.open(), Ok),
        |img, ready| serve(img, &plan, ready),
    )
}

/// One path is opened by location; several must be local images.
fn source(images: Vec<PathBuf>, on_conflict: OnConflict) -> anyhow::Result<Source> {
    if let [one] = images.as_slice() {
        return Ok(Source::One(location(one)?));
    }
    // `file:///PATH` is the file PATH here too.
    let images = images
        .into_iter()
        .map(|i| match location(&i)? {
            mountfs::location::ImageLocation::Local(p) => Ok(p),
            _ => Ok(i),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    for i in &images {
        if mountfs::location::is_manifest(i) {
            return Err(usage(format!(
                "{}: a manifest mounts alone, not with other images",
                i.display()
            )));
        }
        if location(i)?.is_remote() {
            return Err(usage(format!(
                "{}: several images merge as local files only; mount a remote image alone",
                i.display()
            )));
        }
    }
    Ok(Source::Union(images, on_conflict))
}

/// The mount's source in the mount table: the URL of a remote image, else
/// the first image's canonical path.
fn source_name(first: &Path, source: &Source) -> String {
    let name = match source {
        // No query (a presigned URL's signature) in the mount table.
        Source::One(l) if l.is_remote() => l
            .to_string()
            .split('?')
            .next()
            .unwrap_or_default()
            .to_string(),
        _ => std::fs::canonicalize(first)
            .unwrap_or(first.to_path_buf())
            .display()
            .to_string(),
    };
    // No comma, which would split the mount options (an image named
    // `a,b.sqfs` failed to mount: "unknown option 'b.sqfs'").
    name.replace(',', "%2C")
}

fn split_options(options: Vec<String>) -> Vec<String> {
    options
        .iter()
        .flat_map(|o| o.split(','))
        .filter(|o| !o.is_empty())
        .map(str::to_string)
        .collect()
}

/// Serves `opened` at the plan's mountpoint until it is unmounted:
/// preloads if asked, answers SIGUSR1 with `--stats`, writes them at the end.
fn serve(opened: OpenedImage, plan: &MountPlan, ready: Option<Ready>) -> anyhow::Result<i32> {
    let OpenedImage {
        image: img, remote, ..
    } = opened;
    if plan.open.io == IoMode::Mmap {
        crate::mount::sigbus::say_why_before_dying(&plan.open.describe());
    }
    if let Some(fd) = plan.exit_with_fd {
        daemon::end_with(fd, &plan.mountpoint)
            .context("starting the thread that follows packfs run")?;
    }
    if plan.preload {
        let t = std::time::Instant::now();
        let (blocks, bytes) = img
            .preload()
            .with_context(|| format!("--preload of {}", plan.open.describe()))?;
        log::info!(
            "preloaded {blocks} blocks ({}) in {:.2} s",
            packfs_bench::size::human(bytes),
            t.elapsed().as_secs_f64()
        );
    }
    // Every answer lands in the kernel's page cache, so a block served in
    // full is a second copy there (cache.rs: served blocks leave early).
    img.cache().release_served(plan.release_served);
    let opts = &plan.serve;
    let mut fs = mountfs::fs::PackFs::new(img, opts.readahead, opts.threads.clamp(1, 4));
    let recorder = plan
        .record_access
        .as_ref()
        .map(|p| std::sync::Arc::new(mountfs::access_profile::AccessRecorder::new(p)));
    if let Some(r) = &recorder {
        r.flush()
            .with_context(|| format!("--record-access {}", r.path().display()))?;
        fs.record_access(r.clone());
    }
    let fs = std::sync::Arc::new(fs);
    if let Some(text) = plan.preload_profile.clone() {
        let image = fs.image.clone();
        std::thread::Builder::new()
            .name("packfs-preload".into())
            .spawn(move || {
                let t = std::time::Instant::now();
                let (files, bytes) = mountfs::access_profile::preload_profile(&*image, &text);
                log::info!(
                    "preloaded the profile's {files} files ({}) in {:.2} s",
                    packfs_bench::size::human(bytes),
                    t.elapsed().as_secs_f64()
                );
            })
            .context("starting the profile preload")?;
    }
    // Memory freed when blocks leave the cache goes back to the kernel.
    mountfs::buffers::spawn_trimmer(std::time::Duration::from_secs(2))
        .context("starting the memory trimmer")?;
    let served = std::sync::Arc::new(mountfs::fuse::transport::Shared::default());
    if let Some(path) = &plan.stats {
        super::stats::spawn_writer(path, fs.clone(), remote.clone(), served.clone())?;
    }
    mountfs::fuse::serve::serve_fs(fs.clone(), &plan.mountpoint, opts, ready, &served)
        .with_context(|| format!("mounting at {}", plan.mountpoint.display()))?;
    if let Some(r) = &recorder {
        r.flush()
            .with_context(|| format!("--record-access {}", r.path().display()))?;
    }
    if let Some(path) = &plan.stats {
        let remote = remote.map(|r| r.snapshot());
        super::stats::write(path, &fs, remote.as_ref(), &served)?;
    }
    Ok(0)
}
