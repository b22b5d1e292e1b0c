//! Defaults that depend on the machine (cores, memory), shared by the
//! commands that mount.

/// Default number of FUSE session threads: twice the cores, 4 to 16.
///
/// A session thread decodes on the request path, so more threads than cores
/// only help to overlap page faults on the image; too many cost wakeups and
/// cache misses (`packfs bench --mount-threads` compares counts;
/// docs/BENCHMARKS.md has the figures behind this choice).
pub fn default_session_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    (2 * cores).clamp(4, 16)
}

/// Default cache budget: an eighth of physical memory, between 64 MiB and 1 GiB.
pub fn default_cache_size() -> u64 {
    (mountfs::memory_limit::limit() / 8).clamp(64 << 20, 1 << 30)
}

/// `statfs` magic numbers of filesystems whose reads go over the network
/// or through another FUSE server: NFS, SMB (three), Lustre, GPFS, BeeGFS,
/// CephFS, 9P, AFS (two), OrangeFS, FUSE.
const NETWORK_FS: [i64; 13] = [
    0x6969,
    0x517B,
    0xFE53_4D42,
    0xFF53_4D42,
    0x0BD0_0BD0,
    0x4750_4653,
    0x1983_0326,
    0x00C3_6400,
    0x0102_1997,
    0x6B41_4653,
    0x5346_414F,
    0x2003_0528,
    0x6573_5546,
];

/// Whether `path` is on a filesystem reached over the network or through
/// another FUSE server (list above), where a read of the image may wait
/// for milliseconds. Unknown (statfs fails) counts as local.
pub fn on_network_fs(path: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a valid NUL-terminated path and a zeroed statfs to fill.
    let st = unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        if libc::statfs(c.as_ptr(), &mut st) != 0 {
            return false;
        }
        st
    };
    // f_type is signed on some targets: compare its low 32 bits.
    NETWORK_FS.contains(&(i64::from(st.f_type as u32)))
}

#[cfg(test)]
mod tests {
    use super::on_network_fs;

    #[test]
    fn procfs_and_missing_paths_are_not_network_storage() {
        // A FUSE mount is, checked by the io_uring transport tests with a
        // packfs mount; here the answers that need no mount.
        assert!(!on_network_fs(std::path::Path::new("/proc/self")));
        assert!(!on_network_fs(std::path::Path::new(
            "/nonexistent/packfs/image.sqfs"
        )));
        assert!(!on_network_fs(std::path::Path::new("bad\0path")));
    }
}
