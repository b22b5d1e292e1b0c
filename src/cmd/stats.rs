//! `packfs mount --stats FILE`: the mount's counters as JSON, written when
//! the mount ends and at once on SIGUSR1.

use anyhow::Context;
use mountfs::fs::PackFs;
use mountfs::fuse::stats::MountStats;
use mountfs::fuse::transport::{Served, Shared};
use mountfs::open::AnyImage;
use packfs_objstore::{RemoteCounters, RemoteStats};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Blocks SIGUSR1 in this thread and every thread it starts from now on.
pub fn block_sigusr1() {
    // SAFETY: sigset_t initialised by sigemptyset before use; the mask
    // change affects only this thread (and threads created after it).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Waits for a SIGUSR1 sent to the process (blocked by [`block_sigusr1`]);
/// false if waiting failed.
fn wait_sigusr1() -> bool {
    // SAFETY: as above; sigwait stores the signal number in `sig`.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        let mut sig = 0;
        libc::sigwait(&set, &mut sig) == 0
    }
}

/// Starts the thread that writes the counters to `path` on each SIGUSR1.
pub fn spawn_writer(
    path: &Path,
    fs: Arc<PackFs<AnyImage>>,
    remote: Option<Arc<RemoteCounters>>,
    served: Arc<Shared>,
) -> anyhow::Result<()> {
    let path = path.to_path_buf();
    std::thread::Builder::new()
        .name("stats".into())
        .spawn(move || loop {
            if !wait_sigusr1() {
                return;
            }
            let r = remote.as_ref().map(|r| r.snapshot());
            if let Err(e) = write(&path, &fs, r.as_ref(), &served) {
                log::error!("{e:#}");
            }
        })
        .context("starting the stats thread")?;
    Ok(())
}

/// Writes the mount's counters as JSON, atomically (temp + rename), so a
/// reader polling for the file never sees half of it.
/// A remote image adds `"remote"`: its requests, bytes and first-byte times.
/// `"transport"` names how requests arrived (`uring` or `dev`) and
/// `"uring_requests"` counts those answered through the io_uring queues,
/// `"uring_queue_threads"` the threads serving each of them and
/// `"uring_stay_submissions"` the answers submitted so as to keep their
/// callers on their CPU;
/// under `dev`, `"dev_spin_us"` says how long packfs's own threads spin
/// for the next request (0: `fuser`'s threads served, which never spin).
/// `"cache"` is the block cache's: hits, misses, evictions, blocks
/// `released` once served in full, readahead loads skipped because the
/// block had just been released (`ahead_skipped`), bytes held and the
/// budget.
/// Refuses, before anything is mounted, a `--stats` path the daemon could
/// not write when it ends (written then, the error would reach no one): a
/// directory, or a file in a directory that is missing or not writable.
pub fn check_path(path: &Path) -> anyhow::Result<()> {
    if path.is_dir() {
        anyhow::bail!("--stats {}: is a directory", path.display());
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        let e = std::io::Error::last_os_error();
        anyhow::bail!(
            "--stats {}: cannot write in {}: {}",
            path.display(),
            dir.display(),
            crate::oserror::plain(&e)
        );
    }
    Ok(())
}

pub fn write(
    path: &Path,
    fs: &PackFs<AnyImage>,
    remote: Option<&RemoteStats>,
    served: &Shared,
) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp~");
    let stats = MountStats::new(&served.requests, &fs.counters.snapshot());
    let mut value = serde_json::to_value(stats)?;
    if let Some(obj) = value.as_object_mut() {
        let c = fs.image.cache().stats();
        obj.insert(
            "cache".into(),
            serde_json::json!({
                "hits": c.hits,
                "misses": c.misses,
                "evictions": c.evictions,
                "released": c.released,
                "ahead_skipped": c.ahead_skipped,
                "bytes": c.bytes,
                "budget": c.budget,
            }),
        );
        obj.insert("transport".into(), served.served().name().into());
        obj.insert(
            "uring_requests".into(),
            served.uring_requests.load(Ordering::Relaxed).into(),
        );
        if served.served() == Served::Uring {
            obj.insert(
                "uring_queue_threads".into(),
                served.queue_threads.load(Ordering::Relaxed).into(),
            );
            obj.insert(
                "uring_stay_submissions".into(),
                served.stay_submissions.load(Ordering::Relaxed).into(),
            );
        }
        if served.served() == Served::Dev {
            obj.insert(
                "dev_spin_us".into(),
                served.dev_spin_us.load(Ordering::Relaxed).into(),
            );
        }
        if let Some(r) = remote {
            obj.insert("remote".into(), serde_json::to_value(r)?);
        }
    }
    let json = serde_json::to_string_pretty(&value)?;
    std::fs::write(&tmp, json + "\n")
        .and_then(|_| std::fs::rename(&tmp, path))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
        .with_context(|| format!("--stats {}", path.display()))
}
