//! Counters of the I/O that reached the storage under a side.
//!
//! * `/proc/<pid>/io`: `read_bytes` is what the process made the block
//!   layer fetch (page-cache misses, including faults on an mmap, which is
//!   how packfs reads its image); `syscr` counts read-like syscalls. For the
//!   raw side the process is the bench itself; for packfs's own mount it is
//!   the mount daemon. Interpreters run by `import` are children, counted
//!   through `getrusage(RUSAGE_CHILDREN).ru_inblock`.
//! * `/proc/diskstats`: reads completed and sectors read on the device that
//!   holds the raw tree or the image. Device-wide, so other processes' I/O
//!   lands there too; it is the only view of a kernel mount's reads.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

#[derive(Clone, Copy, Debug, Default)]
pub struct ProcIo {
    pub read_bytes: u64,
    pub syscr: u64,
}

/// `/proc/self/io` (pid None) or `/proc/PID/io`.
pub fn proc_io(pid: Option<u32>) -> Option<ProcIo> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/io"),
        None => "/proc/self/io".to_string(),
    };
    let text = std::fs::read_to_string(path).ok()?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
    };
    Some(ProcIo {
        read_bytes: field("read_bytes")?,
        syscr: field("syscr")?,
    })
}

/// Bytes read from block devices by waited-for children (512-byte units in the kernel).
pub fn children_read_bytes() -> u64 {
    // SAFETY: getrusage fills a zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) } != 0 {
        return 0;
    }
    ru.ru_inblock.max(0) as u64 * 512
}

/// Major and minor of the block device holding `path`, if it is one
/// (None for tmpfs, overlay, FUSE: major 0).
pub fn device_of(path: &Path) -> Option<(u32, u32)> {
    let dev = std::fs::metadata(path).ok()?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    (major != 0).then_some((major, minor))
}

#[derive(Clone, Copy, Debug, Default)]
pub struct DiskReads {
    pub reads: u64,
    pub bytes: u64,
}

pub fn diskstats(dev: (u32, u32)) -> Option<DiskReads> {
    let text = std::fs::read_to_string("/proc/diskstats").ok()?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 6 || f[0].parse::<u32>().ok()? != dev.0 || f[1].parse::<u32>().ok()? != dev.1 {
            return None;
        }
        Some(DiskReads {
            reads: f[3].parse().ok()?,
            bytes: f[5].parse::<u64>().ok()? * 512,
        })
    })
}
