//! Serving a filesystem core ([`PackFs`]) at a mountpoint over FUSE: the
//! kernel mount options and the `fuser` session.

use crate::fs::{Image, PackFs};
use crate::fuse::adapter::FuseAdapter;
use crate::fuse::ops::Ops;
use crate::fuse::transport::{self, dev, uring, Served, Shared, Transport};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub threads: usize,
    pub allow_other: bool,
    /// Extra `-o` options passed to the kernel / fusermount3.
    pub options: Vec<String>,
    pub fsname: String,
    /// Bytes decoded ahead of a sequential reader.
    pub readahead: u64,
    /// How long the kernel caches "no such name" (`None`: not at all).
    pub negative_ttl: Option<std::time::Duration>,
    /// How requests reach the filesystem.
    pub transport: Transport,
    /// Where `/dev/fuse` serves: `None` for `fuser`'s threads, else
    /// packfs's own threads spinning this long before they sleep
    /// ([`transport::dev`]).
    pub dev_spin: Option<Duration>,
    /// Whether reads of the image go over the network (a remote image, or
    /// a file on NFS, Lustre, GPFS, another FUSE server...): see
    /// `queue_threads`.
    pub network: bool,
    /// Under io_uring: threads serving each CPU's queue. `None` picks: one
    /// for an image on a local disk (it answers its entries' requests in
    /// turn, which costs the least), [`uring::threads_per_queue`] of
    /// `threads` where reads go over the network, so that a request
    /// waiting there holds up no other (docs/ARCHITECTURE.md, "FUSE
    /// transports").
    pub queue_threads: Option<usize>,
}

/// What one `-o` option of `packfs mount` does.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Extra {
    /// A mount flag or option the kernel takes.
    Mount(fuser::MountOption),
    AllowOther,
    AllowRoot,
    /// Handled elsewhere or already the behaviour (`nonempty` by the CLI's
    /// mountpoint check, `auto_unmount` by its watcher process).
    Nothing,
}

/// Why `-o suid` and `-o dev` are refused. An image is a file anyone can
/// make, on any machine, with any owner and mode inside: honoured, a
/// setuid-root program or a device node in it would act with root's rights
/// for whoever can reach the mount. fusermount3 drops both from a user's
/// mount anyway; root's mount goes through mount(2) directly, which would
/// honour them.
pub const REFUSED_SUID_DEV: &str = "refused: a setuid file or a device node inside an image (which anyone can make) \
     would act with its owner's rights for every user of the mount; packfs mounts are always nosuid,nodev";

/// Parses one `-o` option. Known flags become the kernel flags they name
/// (passed through as a raw string, the kernel rejects `noexec` and friends
/// with EINVAL); `rw` and unknown options are refused with a message.
fn parse_option(o: &str) -> std::result::Result<Extra, String> {
    use fuser::MountOption as M;
    Ok(Extra::Mount(match o {
        "ro" => M::RO,
        "rw" => return Err("rw: packfs mounts are read-only".into()),
        "dev" | "suid" => return Err(format!("{o}: {REFUSED_SUID_DEV}")),
        "nodev" => M::NoDev,
        "nosuid" => M::NoSuid,
        "exec" => M::Exec,
        "noexec" => M::NoExec,
        "atime" => M::Atime,
        "noatime" => M::NoAtime,
        "sync" => M::Sync,
        "async" => M::Async,
        "dirsync" => M::DirSync,
        "default_permissions" => M::DefaultPermissions,
        "allow_other" => return Ok(Extra::AllowOther),
        "allow_root" => return Ok(Extra::AllowRoot),
        "nonempty" | "auto_unmount" => return Ok(Extra::Nothing),
        x if x.starts_with("fsname=") => M::FSName(x["fsname=".len()..].into()),
        x if x.starts_with("subtype=") => M::Subtype(x["subtype=".len()..].into()),
        x if x.starts_with("max_read=") && x["max_read=".len()..].parse::<u32>().is_ok() => {
            M::CUSTOM(x.into())
        }
        x => {
            return Err(format!(
                "unknown mount option {x:?} (known: ro, nodev, nosuid, exec, noexec, \
                 atime, noatime, sync, async, dirsync, default_permissions, allow_other, \
                 allow_root, nonempty, auto_unmount, fsname=, subtype=, max_read=N)"
            ))
        }
    }))
}

/// Checks `-o` options before anything is mounted, so that a typo is an
/// error at the command line rather than an EINVAL from mount(2).
pub fn check_options(options: &[String]) -> std::result::Result<(), String> {
    options.iter().try_for_each(|o| parse_option(o).map(|_| ()))
}

/// The kernel options for `opts`: packfs's defaults, with any default the
/// user's `-o` contradicts (`atime` against `noatime`, `fsname=`...)
/// replaced by the user's choice.
fn mount_options(
    opts: &ServeOptions,
) -> std::io::Result<(Vec<fuser::MountOption>, fuser::SessionACL)> {
    use fuser::MountOption as M;
    use std::mem::discriminant as kind;
    let mut mo = vec![
        M::RO,
        M::FSName(opts.fsname.clone()),
        M::Subtype("packfs".into()),
        M::DefaultPermissions,
        M::NoAtime,
        // What fusermount3 forces on a user's mount, stated for root's
        // mount(2) call too rather than left to its defaults.
        M::NoSuid,
        M::NoDev,
    ];
    let mut acl = if opts.allow_other {
        fuser::SessionACL::All
    } else {
        fuser::SessionACL::Owner
    };
    let opposite = |m: &M| -> Option<M> {
        Some(match m {
            M::Atime => M::NoAtime,
            M::NoAtime => M::Atime,
            M::Dev => M::NoDev,
            M::NoDev => M::Dev,
            M::Suid => M::NoSuid,
            M::NoSuid => M::Suid,
            M::Exec => M::NoExec,
            M::NoExec => M::Exec,
            M::Sync => M::Async,
            M::Async => M::Sync,
            _ => return None,
        })
    };
    for o in &opts.options {
        match parse_option(o).map_err(std::io::Error::other)? {
            Extra::Mount(m) => {
                let other = opposite(&m);
                mo.retain(|x| {
                    Some(x) != other.as_ref()
                        && !(matches!(m, M::FSName(_) | M::Subtype(_)) && kind(x) == kind(&m))
                });
                if !mo.contains(&m) {
                    mo.push(m);
                }
            }
            Extra::AllowOther => acl = fuser::SessionACL::All,
            Extra::AllowRoot if !opts.allow_other => acl = fuser::SessionACL::RootAndOwner,
            Extra::AllowRoot | Extra::Nothing => {}
        }
    }
    Ok((mo, acl))
}

/// Serves `image` at `mountpoint` until it is unmounted. `on_ready` runs once
/// the kernel has initialised the connection. Whether blocks served in full
/// leave the image's cache is the cache's setting
/// ([`crate::cache::BlockCache::release_served`], which `packfs mount` turns
/// on): the `Image` here may be any reader, with or without such a cache.
pub fn serve<I: Image>(
    image: I,
    mountpoint: &Path,
    opts: &ServeOptions,
    on_ready: Option<Box<dyn FnOnce() + Send>>,
) -> std::io::Result<Arc<PackFs<I>>> {
    let fs = Arc::new(PackFs::new(image, opts.readahead, opts.threads.clamp(1, 4)));
    serve_fs(fs.clone(), mountpoint, opts, on_ready, &Arc::default())?;
    Ok(fs)
}

/// [`serve`] for a filesystem the caller built, so that it can keep a
/// handle on it while it is served (e.g. to report its counters on a
/// signal). `served` says which transport serves it and counts the
/// requests answered. Returns when the mount goes away.
pub fn serve_fs<I: Image>(
    fs: Arc<PackFs<I>>,
    mountpoint: &Path,
    opts: &ServeOptions,
    on_ready: Option<Box<dyn FnOnce() + Send>>,
    served: &Arc<Shared>,
) -> std::io::Result<()> {
    let want = match opts.transport {
        Transport::Dev => false,
        Transport::Auto => transport::probe().is_ok(),
        Transport::Uring => {
            transport::probe().map_err(std::io::Error::other)?;
            true
        }
    };
    let ops = Arc::new(Ops {
        fs,
        negative_ttl: opts.negative_ttl,
        requests: served.requests.clone(),
    });
    let (session, serving) = match mount(&ops, mountpoint, opts, want, served) {
        Ok(s) => s,
        // Queues that fail to register leave the mount holding every
        // request, so `auto` mounts again without offering them. A mount
        // that failed before any queue (a mountpoint the user may not
        // mount on) would fail the same way again.
        Err(Failed::Queues(e)) if opts.transport == Transport::Auto => {
            log::warn!("{e}; serving through /dev/fuse");
            mount(&ops, mountpoint, opts, false, served).map_err(Failed::into_io)?
        }
        Err(e) => return Err(e.into_io()),
    };
    log::info!("FUSE transport: {}", served.served().name());
    if let Some(f) = on_ready {
        f();
    }
    if let Serving::Dev(threads) = serving {
        // Never dropped, like the background session below: dropping it
        // would unmount.
        let _session = std::mem::ManuallyDrop::new(session);
        threads.wait();
        return Ok(());
    }
    // fuser unmounts the mountpoint *path* when a session ends, even when
    // our mount is gone already (`packfs umount`, the kernel): its check
    // that the mount still exists reports a closed connection as mounted.
    // That unmount then removes whatever is mounted there now, such as the
    // next `packfs mount` of the same image at the same place. So the
    // session runs in the background and its handle is never dropped: when
    // it ends there is nothing of ours left to unmount, and a mount whose
    // server died is the CLI's unmount watcher's to remove.
    let bg = std::mem::ManuallyDrop::new(session.spawn()?);
    // SAFETY: `guard` is moved out of `bg` exactly once, and `bg` is never
    // used or dropped after that (ManuallyDrop), so nothing is freed twice.
    let guard = unsafe { std::ptr::read(&bg.guard) };
    let r = guard
        .join()
        .map_err(|_| std::io::Error::other("the FUSE session thread panicked"))?;
    // The kernel ends the queues' entries when the connection goes; their
    // last answers count in the stats written after this returns.
    if let Serving::Uring(q) = serving {
        q.wait(Duration::from_secs(2));
    }
    r
}

/// Mounts, answers INIT and, when INIT negotiated FUSE over io_uring,
/// starts the queues (before any request can be served: the kernel holds
/// them until every queue has registered).
#[allow(clippy::type_complexity)]
fn mount<I: Image>(
    ops: &Arc<Ops<I>>,
    mountpoint: &Path,
    opts: &ServeOptions,
    want_uring: bool,
    served: &Arc<Shared>,
) -> Result<(fuser::Session<FuseAdapter<I>>, Serving), Failed> {
    // Auto-unmount is not fusermount3's `auto_unmount` (with fuser that
    // forces allow_other, which unprivileged users cannot get without
    // user_allow_other in /etc/fuse.conf); the CLI runs its own watcher
    // process that unmounts when the daemon dies.
    let (mo, acl) = mount_options(opts)?;
    served.set_want_uring(want_uring);
    served.set_negotiated(false);
    served.set_served(Served::Dev);
    let adapter = FuseAdapter::new(ops.clone(), served.clone());
    let mut config = fuser::Config::default();
    config.mount_options = mo;
    config.acl = acl;
    config.n_threads = Some(opts.threads.max(1));
    config.clone_fd = true;
    let session = fuser::Session::new(adapter, mountpoint, &config)?;
    // SAFETY: geteuid cannot fail.
    let owner = unsafe { libc::geteuid() };
    let access = match acl {
        fuser::SessionACL::All => None,
        fuser::SessionACL::RootAndOwner => Some(uring::Access {
            owner,
            root_too: true,
        }),
        fuser::SessionACL::Owner => Some(uring::Access {
            owner,
            root_too: false,
        }),
    };
    if !served.negotiated() {
        if opts.transport == Transport::Uring {
            return Err(Failed::Mount(std::io::Error::other(
                "--transport uring: the kernel did not offer FUSE over io_uring at INIT",
            )));
        }
        if want_uring {
            log::warn!("the kernel did not offer FUSE over io_uring; serving through /dev/fuse");
        }
        let Some(spin) = opts.dev_spin else {
            return Ok((session, Serving::Fuser));
        };
        // On an error the session is dropped, which unmounts.
        let threads = dev::start(
            session.as_fd(),
            opts.threads,
            spin,
            ops.clone(),
            served.clone(),
            access,
        )?;
        return Ok((session, Serving::Dev(threads)));
    }
    // On an error the session is dropped, which unmounts.
    let queues = (|| {
        let dev = session.as_fd().try_clone_to_owned()?;
        let cpus = transport::possible_cpus().map_err(std::io::Error::other)?;
        let per_queue = match (opts.queue_threads, opts.network) {
            (Some(n), _) => n,
            (None, false) => 1,
            (None, true) => uring::threads_per_queue(opts.threads, cpus.len()),
        };
        uring::start(&dev, &cpus, ops.clone(), served.clone(), access, per_queue)
    })()
    .map_err(Failed::Queues)?;
    Ok((session, Serving::Uring(queues)))
}

/// Why [`mount`] failed: before the mount was usable, or in starting the
/// io_uring queues of a mount made (which `auto` retries without them).
enum Failed {
    Mount(std::io::Error),
    Queues(std::io::Error),
}

impl Failed {
    fn into_io(self) -> std::io::Error {
        match self {
            Failed::Mount(e) | Failed::Queues(e) => e,
        }
    }
}

impl From<std::io::Error> for Failed {
    fn from(e: std::io::Error) -> Self {
        Failed::Mount(e)
    }
}

/// Who serves a mount besides (or instead of) `fuser`'s session threads.
enum Serving {
    /// `fuser`'s threads alone.
    Fuser,
    /// packfs's own `/dev/fuse` threads; `fuser`'s never run.
    Dev(dev::Threads),
    /// The io_uring queues; `fuser`'s threads read FORGET and INTERRUPT.
    Uring(uring::Queues),
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuser::MountOption as M;

    fn opts(o: &[&str]) -> ServeOptions {
        ServeOptions {
            threads: 1,
            allow_other: false,
            options: o.iter().map(|s| s.to_string()).collect(),
            fsname: "packfs:x".into(),
            readahead: 0,
            negative_ttl: None,
            transport: Transport::Dev,
            dev_spin: None,
            network: false,
            queue_threads: None,
        }
    }

    #[test]
    fn user_options_replace_the_defaults_they_contradict() {
        let (mo, acl) =
            mount_options(&opts(&["atime", "noexec", "fsname=data", "nonempty"])).unwrap();
        assert!(
            mo.contains(&M::Atime) && !mo.contains(&M::NoAtime),
            "{mo:?}"
        );
        assert!(mo.contains(&M::NoExec));
        assert!(mo.contains(&M::FSName("data".into())));
        assert!(!mo.contains(&M::FSName("packfs:x".into())));
        assert!(mo.contains(&M::RO) && mo.contains(&M::DefaultPermissions));
        assert_eq!(acl, fuser::SessionACL::Owner);
        let (_, acl) = mount_options(&opts(&["allow_other"])).unwrap();
        assert_eq!(acl, fuser::SessionACL::All);
        let (_, acl) = mount_options(&opts(&["allow_root"])).unwrap();
        assert_eq!(acl, fuser::SessionACL::RootAndOwner);
    }

    #[test]
    fn rw_and_unknown_options_are_refused_with_a_message() {
        assert!(check_options(&["rw".into()])
            .unwrap_err()
            .contains("read-only"));
        let e = check_options(&["noexec".into(), "colour=blue".into()]).unwrap_err();
        assert!(e.contains("colour=blue") && e.contains("known:"), "{e}");
        assert!(check_options(&["max_read=abc".into()]).is_err());
        assert!(check_options(&["max_read=131072".into(), "nosuid".into()]).is_ok());
    }

    #[test]
    fn every_mount_is_nosuid_and_nodev_and_suid_or_dev_are_refused() {
        let (mo, _) = mount_options(&opts(&[])).unwrap();
        assert!(mo.contains(&M::NoSuid) && mo.contains(&M::NoDev), "{mo:?}");
        for o in ["suid", "dev"] {
            let e = check_options(&["ro".into(), o.into()]).unwrap_err();
            assert!(e.starts_with(o) && e.contains("setuid"), "{e}");
            assert!(mount_options(&opts(&[o])).is_err());
        }
    }
}
