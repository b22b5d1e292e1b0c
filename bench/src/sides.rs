//! The sides of the comparison: the raw tree, packfs's own mount of the
//! image and existing mounts named with --mountpoint. How each is set up,
//! where its workloads read, and how a cold run makes it cold.

use super::args::Latency;
use super::cold;
use super::error::{BenchError, Context};
use super::mounts::{MountCommand, OwnMount};
use super::passthrough::{CounterSnapshot, EmulatedMount};
use super::plan::{Ctx, SideSpec};
use std::path::{Path, PathBuf};

pub enum SideKind {
    Raw {
        emu: Option<EmulatedMount>,
    },
    Packfs {
        mount: OwnMount,
        /// The passthrough of the image's directory (with --emulate-latency);
        /// declared after `mount` so that it is unmounted after it.
        emu: Option<EmulatedMount>,
    },
    External {
        path: PathBuf,
    },
}

pub struct Side {
    pub label: String,
    pub kind: SideKind,
}

impl Side {
    /// Where this side's workloads read.
    pub fn root<'a>(&'a self, raw: &'a Path) -> &'a Path {
        match &self.kind {
            SideKind::Raw { emu: Some(e) } => e.path(),
            SideKind::Raw { emu: None } => raw,
            SideKind::Packfs { mount, .. } => mount.path(),
            SideKind::External { path } => path,
        }
    }

    /// The passthrough's counters now, for a side read through one.
    pub fn passthrough(&self) -> Option<CounterSnapshot> {
        match &self.kind {
            SideKind::Raw { emu: Some(e) } | SideKind::Packfs { emu: Some(e), .. } => {
                Some(e.counters.snapshot())
            }
            _ => None,
        }
    }
}

/// Phase 2: sets up the sides `specs` lists, in that order: mounts the
/// latency-emulating passthroughs and packfs's own mount, resolves the
/// external mounts. Hands the sides over mounted; dropping them unmounts
/// (as does an error here, for those already mounted).
pub fn open(
    specs: Vec<SideSpec>,
    ctx: &Ctx,
    latency: Option<&Latency>,
    cmd: &MountCommand,
    mount_args: &[String],
) -> Result<Vec<Side>, BenchError> {
    let mut sides: Vec<Side> = Vec::new();
    for spec in specs {
        let side = match spec {
            SideSpec::Raw => Side {
                label: "raw".into(),
                kind: SideKind::Raw {
                    emu: latency
                        .map(|l| EmulatedMount::mount(&ctx.raw, l))
                        .transpose()?,
                },
            },
            SideSpec::Packfs => {
                let img = ctx
                    .image
                    .as_ref()
                    .ok_or_else(|| BenchError::Refused("--image is required".into()))?;
                if ctx.image_remote {
                    let mut args = mount_args.to_vec();
                    args.extend(cmd.remote_args.iter().cloned());
                    Side {
                        label: "packfs".into(),
                        kind: SideKind::Packfs {
                            mount: OwnMount::new(img, &cmd.program, &args)?,
                            emu: None,
                        },
                    }
                } else {
                    own_mount(img, latency, &cmd.program, mount_args)?
                }
            }
            SideSpec::External { spec, label, path } => {
                let path = std::fs::canonicalize(&path)
                    .with_context(|| format!("--mountpoint {}", path.display()))?;
                if sides.iter().any(|s| s.label == label) {
                    return Err(BenchError::Refused(format!(
                        "--mountpoint {spec}: label {label:?} is used twice"
                    )));
                }
                Side {
                    label,
                    kind: SideKind::External { path },
                }
            }
        };
        sides.push(side);
    }
    Ok(sides)
}

/// packfs's own mount of `img`. With a latency to emulate, the image is
/// mounted as seen through a passthrough of its directory, so that every
/// read of the image that misses the page cache pays the read latency, as
/// an image on a network filesystem would.
fn own_mount(
    img: &Path,
    latency: Option<&Latency>,
    program: &Path,
    mount_args: &[String],
) -> Result<Side, BenchError> {
    let (emu, path) = match latency {
        Some(l) => {
            let dir = img.parent().unwrap_or(Path::new("/"));
            let e = EmulatedMount::mount(dir, l)?;
            let p = e.path().join(img.file_name().unwrap_or_default());
            (Some(e), p)
        }
        None => (None, img.to_path_buf()),
    };
    let mount = OwnMount::new(&path, program, mount_args)?;
    Ok(Side {
        label: "packfs".into(),
        kind: SideKind::Packfs { mount, emu },
    })
}

/// Files whose pages a fadvise-based cold start evicts: the raw tree's, the
/// image, and the raw tree's paths under every external mount (the only
/// handle the bench has on a cache it does not own).
fn evict_list(ctx: &Ctx, sides: &[Side]) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = ctx.tree.files().map(|e| ctx.raw.join(&e.rel)).collect();
    // A remote image has no local pages; a cold start empties the daemon's
    // range cache by restarting it.
    v.extend(ctx.image.iter().filter(|_| !ctx.image_remote).cloned());
    // A shard manifest's images are what a cold start must evict.
    if let Some(m) = ctx
        .image
        .as_ref()
        .filter(|m| mountfs::location::is_manifest(m))
    {
        if let Ok(man) = packer::shards::read_manifest(m) {
            v.extend(
                man.shards
                    .iter()
                    .map(|s| packer::shards::resolve(m, &s.file)),
            );
        }
    }
    for s in sides {
        if let SideKind::External { path } = &s.kind {
            v.extend(ctx.tree.files().map(|e| path.join(&e.rel)));
        }
    }
    v
}

/// Makes side `i` cold: remounts what the bench owns (emptying the packfs
/// daemon's block cache and the kernel's caches of the passthrough) and
/// evicts the page cache. Every side's files are evicted, not only side
/// `i`'s, so that with fadvise a cold run starts from about what
/// drop_caches would leave, whichever sides ran before it.
pub fn make_cold(ctx: &Ctx, sides: &mut [Side], i: usize) -> Result<(), BenchError> {
    let files = evict_list(ctx, sides);
    let evict = || cold::evict(ctx.method, files.iter().map(PathBuf::as_path));
    match &mut sides[i].kind {
        SideKind::Raw { emu } => {
            if let Some(e) = emu {
                e.stop();
            }
            evict()?;
            if let Some(e) = emu {
                e.start()?;
            }
        }
        // Unmounted top-down and remounted bottom-up: the daemon reads the
        // image through the passthrough.
        SideKind::Packfs { mount, emu } => {
            mount.stop()?;
            if let Some(e) = emu {
                e.stop();
            }
            evict()?;
            if let Some(e) = emu {
                e.start()?;
            }
            mount.start()?;
        }
        SideKind::External { .. } => evict()?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn external(label: &str, path: &str) -> Side {
        Side {
            label: label.into(),
            kind: SideKind::External { path: path.into() },
        }
    }

    #[test]
    fn cold_start_evicts_raw_files_image_and_files_under_external_mounts() {
        let raw = Side {
            label: "raw".into(),
            kind: SideKind::Raw { emu: None },
        };
        let sides = [raw, external("k", "/k"), external("f", "/f")];
        let paths: Vec<PathBuf> = ["/raw/a", "/img.sqfs", "/k/a", "/f/a"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(evict_list(&Ctx::for_test(Some("/img.sqfs")), &sides), paths);
        assert_eq!(evict_list(&Ctx::for_test(None), &sides[..1]), paths[..1]);
    }

    #[test]
    fn sides_read_under_their_own_root() {
        let raw = Side {
            label: "raw".into(),
            kind: SideKind::Raw { emu: None },
        };
        assert_eq!(raw.root(Path::new("/raw")), Path::new("/raw"));
        assert_eq!(external("k", "/k").root(Path::new("/raw")), Path::new("/k"));
        assert!(raw.passthrough().is_none());
    }

    #[test]
    fn external_labels_must_differ() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().to_path_buf();
        let spec = |label: &str| SideSpec::External {
            spec: format!("{label}={}", p.display()),
            label: label.into(),
            path: p.clone(),
        };
        let ctx = Ctx::for_test(None);
        let cmd = MountCommand {
            program: "/nonexistent/packfs".into(),
            remote_args: Vec::new(),
        };
        let open_all = |specs| open(specs, &ctx, None, &cmd, &[]);
        let sides = open_all(vec![spec("a"), spec("b")]).unwrap();
        let labels: Vec<&str> = sides.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["a", "b"]);
        let Err(e) = open_all(vec![spec("a"), spec("a")]) else {
            panic!("a label used twice was accepted");
        };
        assert!(e.to_string().ends_with("label \"a\" is used twice"), "{e}");
    }
}
