//! Making a run cold, and saying how.
//!
//! The honest cold start drops every cache between the application and the
//! disk: the page cache of the raw files and of the image, the kernel's
//! dentry and inode caches, and packfs's own decoded-block cache (which
//! lives in the mount daemon, so only a remount clears it). As root,
//! `drop_caches` does the kernel part; otherwise `posix_fadvise(DONTNEED)`
//! evicts the file pages but leaves dentries and inodes cached, which the
//! report says. A mount the bench did not make cannot be refreshed; that is
//! said too. Nothing is labelled cold unless an eviction actually ran.

use super::args::ColdMode;
use super::error::{BenchError, Context};
use std::os::fd::AsRawFd;
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    DropCaches,
    Fadvise,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::DropCaches => "drop_caches",
            Method::Fadvise => "fadvise",
        }
    }

    /// What a cold run under this method has had evicted.
    pub fn describe(self) -> &'static str {
        match self {
            Method::DropCaches => {
                "page cache, dentries and inodes dropped (sync; echo 3 > /proc/sys/vm/drop_caches)"
            }
            Method::Fadvise => {
                "file pages evicted with posix_fadvise(DONTNEED); dentry and inode caches stay warm"
            }
        }
    }
}

fn drop_caches_allowed() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    root && std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/sys/vm/drop_caches")
        .is_ok()
}

pub fn choose(mode: ColdMode) -> Result<Method, BenchError> {
    match mode {
        ColdMode::Auto if drop_caches_allowed() => Ok(Method::DropCaches),
        ColdMode::Auto | ColdMode::Fadvise => Ok(Method::Fadvise),
        ColdMode::DropCaches if drop_caches_allowed() => Ok(Method::DropCaches),
        ColdMode::DropCaches => Err(BenchError::Refused(
            "--cold drop-caches: /proc/sys/vm/drop_caches is not writable (needs root)".into(),
        )),
    }
}

/// Evicts the caches `method` can reach: for fadvise, the pages of every
/// file in `files` (the raw tree's files, the image, files seen through an
/// external mount).
pub fn evict<'a>(method: Method, files: impl Iterator<Item = &'a Path>) -> Result<(), BenchError> {
    // Dirty pages cannot be dropped; write them back first.
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    match method {
        Method::DropCaches => {
            std::fs::write("/proc/sys/vm/drop_caches", "3\n")
                .context("writing /proc/sys/vm/drop_caches")?;
        }
        Method::Fadvise => {
            for p in files {
                fadvise_dontneed(p).with_context(|| format!("evicting {}", p.display()))?;
            }
        }
    }
    Ok(())
}

fn fadvise_dontneed(p: &Path) -> std::io::Result<()> {
    let f = std::fs::File::open(p)?;
    // SAFETY: valid descriptor; offset 0, len 0 = the whole file.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if r != 0 {
        return Err(std::io::Error::from_raw_os_error(r));
    }
    Ok(())
}
