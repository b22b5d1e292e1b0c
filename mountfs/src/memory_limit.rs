//! How much memory this process may use, for the caches' default budgets:
//! physical memory, or less when a cgroup limits it (a Slurm job's
//! `--mem`, a container's limit). A default sized from the machine's RAM
//! alone would let the daemon of a 4 GB job on a 256 GB node take 32 GB and
//! be killed with the job. The mount's defaults and the Python package's
//! (divided among DataLoader workers) both come from here.

use std::path::Path;

/// The smallest of physical memory and every memory limit of the cgroups
/// this process is in (v2 `memory.max` of its cgroup and each ancestor, v1
/// `memory.limit_in_bytes`). 8 GiB if nothing can be read.
pub fn limit() -> u64 {
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
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    cgroup_limit(&cgroups, Path::new("/sys/fs/cgroup"), &|p| {
        std::fs::read_to_string(p).ok()
    })
    .map_or(ram, |l| l.min(ram))
}

/// The tightest limit named by `/proc/self/cgroup` (`cgroups`) under the
/// cgroup filesystem at `root`, reading files with `read`; None if none.
fn cgroup_limit(cgroups: &str, root: &Path, read: &dyn Fn(&Path) -> Option<String>) -> Option<u64> {
    let mut best: Option<u64> = None;
    let mut take = |text: Option<String>| {
        // "max" (v2) and the v1 "no limit" value (near u64::MAX) parse
        // as no limit or as a number above RAM, which the caller ignores.
        if let Some(v) = text.and_then(|t| t.trim().parse::<u64>().ok()) {
            best = Some(best.map_or(v, |b| b.min(v)));
        }
    };
    for line in cgroups.lines() {
        let mut f = line.splitn(3, ':');
        let (_, controllers, path) = (f.next(), f.next(), f.next());
        let (Some(controllers), Some(path)) = (controllers, path) else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        if controllers.is_empty() {
            // v2: the cgroup and each ancestor up to the root.
            let mut at = Some(Path::new(rel));
            while let Some(p) = at {
                take(read(&root.join(p).join("memory.max")));
                at = p.parent();
            }
        } else if controllers.split(',').any(|c| c == "memory") {
            take(read(
                &root.join("memory").join(rel).join("memory.limit_in_bytes"),
            ));
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn files(pairs: &[(&str, &str)]) -> impl Fn(&Path) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |p: &Path| m.get(p.to_str().unwrap()).cloned()
    }

    #[test]
    fn the_tightest_v2_limit_of_the_cgroup_and_its_ancestors() {
        let read = files(&[
            (
                "/cg/system.slice/slurmstepd.scope/job_7/memory.max",
                "max\n",
            ),
            (
                "/cg/system.slice/slurmstepd.scope/memory.max",
                "8589934592\n",
            ),
            ("/cg/system.slice/memory.max", "max\n"),
        ]);
        let lim = cgroup_limit(
            "0::/system.slice/slurmstepd.scope/job_7\n",
            Path::new("/cg"),
            &read,
        );
        assert_eq!(lim, Some(8 << 30));
        // The job's own limit, tighter than its parent's.
        let read = files(&[
            ("/cg/a/b/memory.max", "4294967296"),
            ("/cg/a/memory.max", "8589934592"),
        ]);
        assert_eq!(
            cgroup_limit("0::/a/b\n", Path::new("/cg"), &read),
            Some(4 << 30)
        );
    }

    #[test]
    fn v1_memory_controller_and_no_limit_at_all() {
        let read = files(&[(
            "/cg/memory/slurm/uid_0/job_3/memory.limit_in_bytes",
            "2147483648",
        )]);
        let cg = "12:cpuset:/slurm/uid_0/job_3\n4:memory:/slurm/uid_0/job_3\n";
        assert_eq!(cgroup_limit(cg, Path::new("/cg"), &read), Some(2 << 30));
        // Unlimited everywhere, or nothing readable: no limit.
        let read = files(&[("/cg/memory.max", "max")]);
        assert_eq!(cgroup_limit("0::/\n", Path::new("/cg"), &read), None);
        assert_eq!(cgroup_limit("", Path::new("/cg"), &read), None);
    }

    #[test]
    fn the_limit_is_at_most_physical_memory() {
        let l = limit();
        assert!(l >= 64 << 20, "{l}");
    }
}
