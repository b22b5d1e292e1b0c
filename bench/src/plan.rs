//! From the command line to what will be measured, before anything is
//! mounted or timed.
//!
//! Every refusal that needs no mount happens here, so a bad invocation
//! costs a directory scan at most and leaves nothing mounted behind.

use super::args::{self, BenchArgs, ColdMode, Latency, Workload};
use super::cold;
use super::error::{BenchError, Context};
use super::iostat;
use super::tree::{Kind, Tree};
use super::workload::{Plan, PlanOptions};
use std::path::{Path, PathBuf};

/// The facts of this invocation that every later phase reads.
pub struct Ctx {
    /// The raw tree, canonical.
    pub raw: PathBuf,
    /// The image, canonical (a URL as given when `image_remote`); None when
    /// only --mountpoint sides are measured.
    pub image: Option<PathBuf>,
    /// The image is an `s3://` or `http(s)://` object: nothing local to
    /// evict or count on a device; its requests are counted instead.
    pub image_remote: bool,
    /// The raw tree's listing, which every workload and check is planned from.
    pub tree: Tree,
    pub method: cold::Method,
    /// Block devices under the raw tree and the image, for /proc/diskstats.
    pub raw_dev: Option<(u32, u32)>,
    pub image_dev: Option<(u32, u32)>,
}

#[cfg(test)]
impl Ctx {
    /// A context for the phases' unit tests: the raw tree /raw holds the
    /// file `a` (100 bytes) and the symlink `l`; no block device is counted.
    pub fn for_test(image: Option<&str>) -> Ctx {
        use super::tree::Entry;
        let e = |rel: &str, kind, size| Entry {
            rel: rel.into(),
            kind,
            size,
        };
        Ctx {
            raw: "/raw".into(),
            image: image.map(PathBuf::from),
            image_remote: false,
            tree: Tree {
                entries: vec![
                    e("", Kind::Dir, 0),
                    e("a", Kind::File, 100),
                    e("l", Kind::Symlink, 0),
                ],
            },
            method: cold::Method::Fadvise,
            raw_dev: None,
            image_dev: None,
        }
    }
}

/// What [`prepare`] hands to the rest of the run.
pub struct Prepared {
    pub ctx: Ctx,
    /// Each workload once, in the order first named on the command line.
    pub plans: Vec<(Workload, Plan)>,
    pub latency: Option<Latency>,
}

/// A side to set up, decided from the arguments alone.
#[derive(Debug, PartialEq, Eq)]
pub enum SideSpec {
    /// The raw tree (read through the passthrough with --emulate-latency).
    Raw,
    /// packfs's own mount of --image.
    Packfs,
    /// An existing mount named with --mountpoint, not resolved yet.
    External {
        /// As given, for error messages.
        spec: String,
        label: String,
        path: PathBuf,
    },
}

/// Phase 1: checks the arguments, resolves the raw tree and the image,
/// scans the tree, plans every workload from it and picks how runs are made
/// cold. Hands the context, the plans and the latency to emulate to the
/// side set-up; nothing is mounted yet.
pub fn prepare(a: &BenchArgs) -> Result<Prepared, BenchError> {
    args::validate(a)?;
    let latency = a
        .emulate_latency
        .as_deref()
        .map(Latency::parse)
        .transpose()?
        .map(|l| Latency {
            client_cache: a.client_cache.unwrap_or_default(),
            ..l
        });
    let (raw, image, image_remote) = resolve_paths(a)?;
    if image_remote && latency.is_some() {
        return Err(BenchError::Usage(
            "--emulate-latency cannot be combined with a remote --image: its latency is the network's"
                .into(),
        ));
    }
    let tree = Tree::scan(&raw).context("scanning the raw tree")?;
    check_tree(&a.workload, &tree, &raw, &a.python)?;
    let plans = plan_workloads(a, &tree)?;
    let method = cold::choose(a.cold)?;
    if a.cold == ColdMode::Auto && method == cold::Method::DropCaches {
        // Root's default reaches beyond this benchmark: every process on the
        // machine loses its cached files. Said before the first drop.
        eprintln!(
            "packfs: as root, --cold auto drops the whole machine's page cache, dentries and \
             inodes before each cold run (echo 3 > /proc/sys/vm/drop_caches); \
             --cold fadvise evicts only the benchmark's own files"
        );
    }
    let ctx = Ctx {
        raw_dev: iostat::device_of(&raw),
        image_dev: image
            .as_deref()
            .filter(|_| !image_remote)
            .and_then(iostat::device_of),
        image_remote,
        raw,
        image,
        tree,
        method,
    };
    Ok(Prepared {
        ctx,
        plans,
        latency,
    })
}

/// --raw and --image, canonical: the report names where the data really is,
/// and the passthrough of the image's directory (--emulate-latency) mounts
/// the directory that holds the file, not the one a symlink sits in. An
/// `s3://` or `http(s)://` image stays as given (third value: remote).
fn resolve_paths(a: &BenchArgs) -> Result<(PathBuf, Option<PathBuf>, bool), BenchError> {
    let raw =
        std::fs::canonicalize(&a.raw).with_context(|| format!("--raw {}", a.raw.display()))?;
    let image = match &a.image {
        Some(given) => {
            // The file a local location names (`file:///PATH` is PATH).
            let p = match mountfs::location::ImageLocation::from_path(given)
                .map_err(|e| BenchError::Refused(format!("--image {e}")))?
            {
                mountfs::location::ImageLocation::Local(p) => p,
                _ => return Ok((raw, Some(given.clone()), true)),
            };
            let p =
                std::fs::canonicalize(&p).with_context(|| format!("--image {}", p.display()))?;
            if !p.is_file() {
                return Err(BenchError::Refused(format!(
                    "--image {}: not a regular file",
                    p.display()
                )));
            }
            Some(p)
        }
        None => None,
    };
    Ok((raw, image, false))
}

/// Whether `w` reads the contents of regular files.
fn reads_files(w: Workload) -> bool {
    matches!(
        w,
        Workload::Sequential | Workload::Shuffle | Workload::Grouped | Workload::Sample
    )
}

/// Refuses workloads the raw tree cannot serve, which would otherwise be
/// found out only after mounting and measuring: the reading workloads need
/// a regular file, `import` needs the interpreter.
fn check_tree(
    workloads: &[Workload],
    tree: &Tree,
    raw: &Path,
    python: &Path,
) -> Result<(), BenchError> {
    if workloads.iter().any(|&w| reads_files(w)) && tree.count(Kind::File) == 0 {
        return Err(BenchError::Refused(format!(
            "{}: no regular file to read",
            raw.display()
        )));
    }
    if workloads.contains(&Workload::Import) && !raw.join(python).exists() {
        return Err(BenchError::Refused(format!(
            "--workload import: {} does not exist (is --raw a venv? see --python)",
            raw.join(python).display()
        )));
    }
    Ok(())
}

/// Plans each workload once, from the raw tree, in the order first named;
/// a workload named twice is measured once.
fn plan_workloads(a: &BenchArgs, tree: &Tree) -> Result<Vec<(Workload, Plan)>, BenchError> {
    let popts = PlanOptions {
        seed: a.seed,
        samples: a.samples,
        sample_size: a.sample_size,
        sample_min_size: a.sample_min_size,
        python: &a.python,
        modules: &a.import,
        image: a.image.as_deref(),
        group_bytes: a.group_bytes,
        window: a.window,
    };
    let mut plans: Vec<(Workload, Plan)> = Vec::new();
    for &w in &a.workload {
        if !plans.iter().any(|(x, _)| *x == w) {
            plans.push((w, Plan::new(w, tree, &popts)?));
        }
    }
    Ok(plans)
}

/// The arguments of packfs's own `packfs mount --foreground`: what the
/// bench's `--mount-threads`, `--cache-size` and `--mount-io` ask for.
pub fn own_mount_args(a: &BenchArgs) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(t) = a.mount_threads {
        args.extend(["-j".to_string(), t.to_string()]);
    }
    if let Some(c) = a.cache_size {
        args.extend(["--cache-size".to_string(), c.to_string()]);
    }
    if let Some(io) = a.mount_io {
        let name = clap::ValueEnum::to_possible_value(&io).expect("no I/O mode is hidden");
        args.extend(["--io".to_string(), name.get_name().to_string()]);
    }
    args
}

/// The sides in the order they are set up, measured and reported: raw
/// first (every ratio is against it), then packfs's own mount of the image
/// unless --mountpoint names the mounts to measure without --self-mount,
/// then each --mountpoint as given. No raw side with --no-raw.
pub fn side_specs(a: &BenchArgs) -> Vec<SideSpec> {
    let mut specs = Vec::new();
    if !a.no_raw {
        specs.push(SideSpec::Raw);
    }
    if a.mountpoints.is_empty() || a.self_mount {
        specs.push(SideSpec::Packfs);
    }
    for (i, spec) in a.mountpoints.iter().enumerate() {
        let e = args::parse_mountpoint(spec, i);
        specs.push(SideSpec::External {
            spec: spec.clone(),
            label: e.label,
            path: e.path,
        });
    }
    specs
}

#[cfg(test)]
mod tests {
    use super::super::tree::Entry;
    use super::*;

    fn entry(rel: &str, kind: Kind, size: u64) -> Entry {
        Entry {
            rel: PathBuf::from(rel),
            kind,
            size,
        }
    }

    /// A root directory holding `d/` and, unless `empty`, two files.
    fn tree(empty: bool) -> Tree {
        let mut entries = vec![entry("", Kind::Dir, 0), entry("d", Kind::Dir, 0)];
        if !empty {
            entries.push(entry("d/a", Kind::File, 3 << 20));
            entries.push(entry("d/b", Kind::File, 10));
        }
        Tree { entries }
    }

    fn external(spec: &str, label: &str, path: &str) -> SideSpec {
        SideSpec::External {
            spec: spec.into(),
            label: label.into(),
            path: path.into(),
        }
    }

    #[test]
    fn own_mount_args_follow_the_bench_options() {
        let a = args::parse(&["--raw", "r", "--image", "i"]);
        assert!(own_mount_args(&a).is_empty());
        let a = args::parse(&[
            "--raw",
            "r",
            "--image",
            "i",
            "--mount-threads",
            "3",
            "--cache-size",
            "1M",
            "--mount-io",
            "mmap",
        ]);
        assert_eq!(
            own_mount_args(&a),
            ["-j", "3", "--cache-size", "1048576", "--io", "mmap"]
        );
    }

    #[test]
    fn own_mount_unless_mountpoints_name_the_sides() {
        let a = args::parse(&["--raw", "r", "--image", "i"]);
        assert_eq!(side_specs(&a), [SideSpec::Raw, SideSpec::Packfs]);
        let a = args::parse(&["--raw", "r", "--image", "i", "--no-raw"]);
        assert_eq!(side_specs(&a), [SideSpec::Packfs]);

        let a = args::parse(&["--raw", "r", "--mountpoint", "/m", "--mountpoint", "k=/k"]);
        assert_eq!(
            side_specs(&a),
            [
                SideSpec::Raw,
                external("/m", "mount", "/m"),
                external("k=/k", "k", "/k")
            ]
        );

        let a = args::parse(&[
            "--raw",
            "r",
            "--image",
            "i",
            "--self-mount",
            "--mountpoint",
            "/a",
            "--mountpoint",
            "/b",
        ]);
        assert_eq!(
            side_specs(&a),
            [
                SideSpec::Raw,
                SideSpec::Packfs,
                external("/a", "mount", "/a"),
                external("/b", "mount2", "/b")
            ]
        );
    }

    #[test]
    fn each_workload_is_planned_once_in_first_named_order() {
        let a = args::parse(&["--raw", "r", "--workload", "shuffle,walk,shuffle,sample"]);
        let plans = plan_workloads(&a, &tree(false)).unwrap();
        let names: Vec<&str> = plans.iter().map(|(w, _)| w.name()).collect();
        assert_eq!(names, ["shuffle", "walk", "sample"]);
        // Plans come from the raw listing: both files shuffled, both dirs walked.
        assert_eq!(plans[0].1.items(1), 2);
        assert_eq!(plans[1].1.items(1), 2);
        assert_eq!(plans[2].1.items(1), 1000);
    }

    #[test]
    fn reading_workloads_need_a_file_and_import_its_interpreter() {
        let dir = tempfile::tempdir().unwrap();
        let (raw, py) = (dir.path(), Path::new("bin/python"));
        assert!(check_tree(&[Workload::Walk], &tree(true), raw, py).is_ok());
        for w in [Workload::Sequential, Workload::Shuffle, Workload::Sample] {
            let e = check_tree(&[Workload::Walk, w], &tree(true), raw, py).unwrap_err();
            assert!(e.to_string().ends_with(": no regular file to read"), "{e}");
            assert!(check_tree(&[w], &tree(false), raw, py).is_ok());
        }
        let e = check_tree(&[Workload::Import], &tree(false), raw, py).unwrap_err();
        assert!(e.to_string().contains("bin/python does not exist"), "{e}");
        std::fs::create_dir(raw.join("bin")).unwrap();
        std::fs::write(raw.join("bin/python"), "").unwrap();
        assert!(check_tree(&[Workload::Import], &tree(true), raw, py).is_ok());
    }

    #[test]
    fn image_must_be_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        let a = args::parse(&["--raw", d, "--image", d]);
        let e = resolve_paths(&a).unwrap_err();
        assert!(e.to_string().ends_with(": not a regular file"), "{e}");

        let img = dir.path().join("x.sqfs");
        std::fs::write(&img, "").unwrap();
        let a = args::parse(&["--raw", d, "--image", img.to_str().unwrap()]);
        let (raw, image, remote) = resolve_paths(&a).unwrap();
        assert!(!remote);
        assert_eq!(raw, std::fs::canonicalize(d).unwrap());
        assert_eq!(image, Some(std::fs::canonicalize(&img).unwrap()));
    }

    #[test]
    fn a_remote_image_is_kept_as_given_and_refuses_emulated_latency() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        for url in ["s3://bucket/img.sqfs", "https://host/data/img.sqfs"] {
            let a = args::parse(&["--raw", d, "--image", url]);
            let (_, image, remote) = resolve_paths(&a).unwrap();
            assert!(remote);
            assert_eq!(image, Some(PathBuf::from(url)));
        }
        let a = args::parse(&["--raw", d, "--image", "s3://bucket"]);
        let e = resolve_paths(&a).unwrap_err().to_string();
        assert!(e.starts_with("--image s3://bucket: an S3 object is"), "{e}");
        let a = args::parse(&[
            "--raw",
            d,
            "--image",
            "s3://b/k",
            "--emulate-latency",
            "100",
        ]);
        let e = prepare(&a).err().unwrap().to_string();
        assert!(e.contains("its latency is the network's"), "{e}");
    }
}
