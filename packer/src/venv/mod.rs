//! Python environments: what ties a venv to the path it was built at, and
//! the rewrites that make its image work at another path.
//!
//! # Design
//! A venv names its own location in a few places: every console script's
//! shebang (`#!/build/path/bin/python3`, or pip's `/bin/sh` + `exec` form
//! for long paths), the `activate` scripts (`VIRTUAL_ENV=`), `pyvenv.cfg`'s
//! `command`, sometimes `.pth` files and absolute symlinks (`lib64`). Mounted
//! elsewhere, the scripts run the *source* venv while it exists and fail
//! with "bad interpreter" where it does not. The base interpreter
//! (`bin/python3 -> /usr/bin/python3.11`, `pyvenv.cfg`'s `home`) lives outside
//! the venv and cannot be packed: it must exist wherever the image is used.
//!
//! [`prepare`] scans the tree (`scan`), and with a mount path writes the
//! rewritten files into a *staging tree* (mode, owner and mtime of the
//! original, new content and size), plus, with `--compile`, the `.pyc` files
//! that are missing or stale (`compile`). The packer lays the staging tree
//! over the source (see [`crate::PackOptions::overlay`]): the source itself
//! is never written. `.py` files are never rewritten, so their mtimes and
//! sizes, which `.pyc` headers are checked against, stay as they are.
//!
//! What is reported but not rewritten: pip's `RECORD`/`direct_url.json`
//! (bookkeeping no import reads; its hashes of rewritten scripts go stale,
//! which only matters to `pip uninstall`, impossible on a read-only mount),
//! other text files naming the build path (listed, so the user can judge),
//! `.pth` paths and symlinks that leave the tree, and the base interpreter.

mod compile;
mod finding;
pub mod rewrite;
mod scan;

pub use compile::CompileSummary;
pub use finding::{Finding, Kind};

use crate::PackError;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

/// What `packfs pack` was asked to do with a Python environment.
#[derive(Clone, Debug, Default)]
pub struct VenvOptions {
    /// Where the image will be mounted; `None` reports only.
    pub mount_at: Option<PathBuf>,
    /// Byte-compile `.py` files lacking a valid `.pyc` into the image.
    pub compile: bool,
}

/// What [`prepare`] found and did.
#[derive(Debug)]
pub struct Report {
    /// The path the venv names itself by (from `bin/activate`, else SRC).
    pub build_path: PathBuf,
    pub mount_at: Option<PathBuf>,
    /// `pyvenv.cfg`'s `version` (or `version_info`).
    pub python: Option<String>,
    /// `pyvenv.cfg`'s `home`: the base interpreter's directory.
    pub home: Option<String>,
    pub findings: Vec<Finding>,
    /// Files and symlinks written into the staging tree.
    pub rewritten: u64,
    pub compiled: Option<CompileSummary>,
}

impl Report {
    fn count(&self, pred: impl Fn(&Finding) -> bool) -> usize {
        self.findings.iter().filter(|f| pred(f)).count()
    }

    /// Does the image still name the build path where it matters (it works
    /// only when mounted there)?
    pub fn tied_to_build_path(&self) -> bool {
        self.mount_at.is_none() && self.count(|f| f.kind.rewritable()) > 0
    }

    /// The report, one line each: what was rewritten, then warnings (`!`
    /// lines: the image will not work somewhere unless the user acts),
    /// then notes.
    pub fn lines(&self) -> Vec<String> {
        let mut header = format!("Python environment built at {}", self.build_path.display());
        if let Some(v) = &self.python {
            header.push_str(&format!(" (Python {v})"));
        }
        let mut out = vec![header];
        out.extend(self.rewritable_line());
        out.extend(self.outside_lines());
        out.extend(self.kept_lines());
        out.extend(self.compiled_line());
        out
    }

    fn of_kind(&self, k: Kind) -> Vec<&Finding> {
        self.findings.iter().filter(|f| f.kind == k).collect()
    }

    /// What names the build path and a mount path fixes: rewritten for
    /// `--mount-at`, left as it is when that is the build path, else a
    /// warning that the image works only there.
    fn rewritable_line(&self) -> Option<String> {
        let mut fixable: Vec<Kind> = self
            .findings
            .iter()
            .map(|f| f.kind)
            .filter(|k| k.rewritable())
            .collect();
        fixable.sort();
        fixable.dedup();
        if fixable.is_empty() {
            return None;
        }
        let list: Vec<String> = fixable
            .iter()
            .map(|&k| match k {
                Kind::PyvenvCfg => k.describe().to_string(),
                _ => format!("{} {}", self.of_kind(k).len(), k.describe()),
            })
            .collect();
        Some(match &self.mount_at {
            Some(m) if self.build_path.as_path() != m.as_path() => format!(
                "rewritten in the image for {}: {}",
                m.display(),
                list.join(", ")
            ),
            Some(_) => format!(
                "mounted at its build path: {} left as they are",
                list.join(", ")
            ),
            None => format!(
                "! {} name the build path: the image works only when mounted at {}; pass --mount-at PATH to rewrite them for another path",
                list.join(", "),
                self.build_path.display()
            ),
        })
    }

    /// Warnings for what the venv needs from outside the tree: the base
    /// interpreter, symlinks and `.pth` paths that leave it.
    fn outside_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for k in [Kind::BaseInterpreter, Kind::SymlinkOut, Kind::PthOut] {
            let fs = self.of_kind(k);
            if fs.is_empty() {
                continue;
            }
            match k {
                Kind::BaseInterpreter => {
                    let f = fs[0];
                    let home = self
                        .home
                        .as_deref()
                        .map(|h| format!(" (pyvenv.cfg home = {h})"))
                        .unwrap_or_default();
                    out.push(format!(
                        "! {} {}: the base interpreter is not in the image; it must exist at that path wherever the image is used{home}, e.g. the same Python in the container",
                        f.path.display(),
                        f.detail
                    ));
                }
                Kind::SymlinkOut => out.push(format!(
                    "! {} symlinks leave the tree and must resolve where the image is used: {}",
                    fs.len(),
                    fs.iter()
                        .take(3)
                        .map(|f| format!("{} {}", f.path.display(), f.detail))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
                _ => out.push(format!(
                    "! {} {}",
                    fs.iter()
                        .take(3)
                        .map(|f| format!("{} {}", f.path.display(), f.detail))
                        .collect::<Vec<_>>()
                        .join("; "),
                    "(outside the venv: must exist wherever the image is used)"
                )),
            }
        }
        out
    }

    /// Notes on the files that name the build path and are kept as they
    /// are (pip's records, other text).
    fn kept_lines(&self) -> Vec<String> {
        let examples = |fs: &[&Finding]| -> String {
            let mut s: Vec<String> = fs
                .iter()
                .take(3)
                .map(|f| f.path.display().to_string())
                .collect();
            if fs.len() > 3 {
                s.push(format!("and {} more", fs.len() - 3));
            }
            s.join(", ")
        };
        let mut out = Vec::new();
        for k in [Kind::PipRecord, Kind::OtherText] {
            let fs = self.of_kind(k);
            if !fs.is_empty() {
                out.push(format!(
                    "note: {} {} name the build path and are kept as they are: {}",
                    fs.len(),
                    k.describe(),
                    examples(&fs)
                ));
            }
        }
        out
    }

    /// What `--compile` did, and the first files it could not compile.
    fn compiled_line(&self) -> Option<String> {
        let c = self.compiled.as_ref()?;
        let mut line = format!(
            "compiled {} of {} .py files for Python {} ({} had a valid .pyc)",
            c.compiled, c.checked, c.version, c.valid
        );
        if c.failed > 0 {
            let first: Vec<String> = c
                .failures
                .iter()
                .take(2)
                .map(|(p, m)| format!("{p}: {m}"))
                .collect();
            line.push_str(&format!(
                "; {} could not be compiled (Python cannot import them either): {}",
                c.failed,
                first.join("; ")
            ));
        }
        Some(line)
    }
}

/// Is `src` a venv (a `pyvenv.cfg` at its root)?
pub fn is_venv(src: &Path) -> bool {
    src.join("pyvenv.cfg").is_file()
}

/// A staging tree to lay over the source; removed on drop.
pub type Stage = tempfile::TempDir;

/// Scans the venv at `src`; with a mount path, stages the rewrites; with
/// `compile`, stages the missing `.pyc` files. `mtime` is the image's mtime
/// override (`--mtime`, `SOURCE_DATE_EPOCH`). Returns the report and the
/// staging tree (`None` when nothing was staged).
pub fn prepare(
    src: &Path,
    opts: &VenvOptions,
    mtime: Option<u32>,
    cancel: Option<&AtomicBool>,
) -> Result<(Report, Option<Stage>), PackError> {
    let build = scan::build_paths(src);
    let build_path = build
        .iter()
        .find(|b| b.as_slice() != src.as_os_str().as_bytes())
        .or(build.first())
        .map(|b| PathBuf::from(OsStr::from_bytes(b)))
        .unwrap_or_else(|| src.to_path_buf());
    if let Some(m) = &opts.mount_at {
        rewrite::check_mount_path(m.as_os_str().as_bytes())
            .map_err(|e| PackError::InvalidOption(format!("--mount-at {}: {e}", m.display())))?;
    }
    let findings = scan::scan(src, &build)?;
    let mut report = Report {
        build_path,
        mount_at: opts.mount_at.clone(),
        python: scan::cfg_value(src, "version").or_else(|| scan::cfg_value(src, "version_info")),
        home: scan::cfg_value(src, "home"),
        findings,
        rewritten: 0,
        compiled: None,
    };
    let mut stage: Option<Stage> = None;
    let mut stage_dir = || -> Result<PathBuf, PackError> {
        if stage.is_none() {
            stage = Some(
                tempfile::Builder::new()
                    .prefix("packfs-venv-")
                    .tempdir()
                    .map_err(PackError::io(std::env::temp_dir()))?,
            );
        }
        Ok(stage.as_ref().expect("just created").path().to_path_buf())
    };
    let target = opts
        .mount_at
        .as_ref()
        .filter(|m| **m != report.build_path)
        .cloned();
    if let Some(to) = &target {
        let dir = stage_dir()?;
        for f in report.findings.iter().filter(|f| f.kind.rewritable()) {
            stage_rewrite(src, &dir, f, &build, to.as_os_str().as_bytes())?;
            report.rewritten += 1;
        }
    }
    if opts.compile {
        let dir = stage_dir()?;
        let display = opts.mount_at.as_deref().unwrap_or(&report.build_path);
        report.compiled = Some(compile::compile(src, &dir, display, mtime, cancel)?);
        copy_dir_metadata(src, &dir, Path::new(""))?;
    }
    let stage = stage.filter(|s| fs::read_dir(s.path()).is_ok_and(|mut d| d.next().is_some()));
    Ok((report, stage))
}

/// Writes the rewritten form of `f` into the staging tree at the same
/// relative path, with the original's mode, owner and mtime.
fn stage_rewrite(
    src: &Path,
    stage: &Path,
    f: &Finding,
    build: &[Vec<u8>],
    to: &[u8],
) -> Result<(), PackError> {
    let from = src.join(&f.path);
    let dest = stage.join(&f.path);
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent).map_err(PackError::io(parent))?;
    }
    let meta = fs::symlink_metadata(&from).map_err(PackError::io(&from))?;
    if let Some(t) = &f.new_target {
        std::os::unix::fs::symlink(t, &dest).map_err(PackError::io(&dest))?;
    } else {
        let text = fs::read(&from).map_err(PackError::io(&from))?;
        let new = match f.kind {
            Kind::Shebang => rewrite::rewrite_script(&text, build, to),
            _ => None,
        }
        .unwrap_or_else(|| rewrite::replace_paths(&text, build, to).0);
        fs::write(&dest, new).map_err(PackError::io(&dest))?;
        fs::set_permissions(&dest, meta.permissions()).map_err(PackError::io(&dest))?;
    }
    set_owner_and_mtime(&dest, &meta)
}

/// Gives `dest` the owner (where allowed) and mtime of `meta`, without
/// following a symlink.
fn set_owner_and_mtime(dest: &Path, meta: &fs::Metadata) -> Result<(), PackError> {
    let c = std::ffi::CString::new(dest.as_os_str().as_bytes())
        .map_err(|_| PackError::InvalidOption(format!("{}: NUL in path", dest.display())))?;
    // SAFETY: a valid C string; lchown and utimensat have no other
    // preconditions. Owner changes fail without privilege: the file then
    // keeps the packing user, who owns the venv in the usual case.
    unsafe {
        libc::lchown(c.as_ptr(), meta.uid(), meta.gid());
        let t = libc::timespec {
            tv_sec: meta.mtime() as _,
            tv_nsec: meta.mtime_nsec() as libc::c_long,
        };
        let times = [t, t];
        if libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        ) != 0
        {
            return Err(PackError::io(dest)(std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// Entries that exist only in the staging tree (new `__pycache__`
/// directories and `.pyc` files) get the owner and mtime of what they stand
/// beside in the source: a `.pyc` those of its `.py` (and its read bits), a
/// directory those of its parent. The image then does not depend on when it
/// was packed. Staged entries that replace a source entry already carry
/// the original's metadata ([`stage_rewrite`]); for a directory in both,
/// the walk takes the source's.
fn copy_dir_metadata(src: &Path, stage: &Path, rel: &Path) -> Result<(), PackError> {
    use std::os::unix::fs::PermissionsExt;
    let dir = stage.join(rel);
    let entries: Vec<_> = fs::read_dir(&dir)
        .map_err(PackError::io(&dir))?
        .collect::<Result<_, _>>()
        .map_err(PackError::io(&dir))?;
    for e in entries {
        let child = rel.join(e.file_name());
        let staged = stage.join(&child);
        let smeta = fs::symlink_metadata(&staged).map_err(PackError::io(&staged))?;
        if smeta.is_dir() {
            copy_dir_metadata(src, stage, &child)?;
        }
        if src.join(&child).symlink_metadata().is_ok() {
            continue;
        }
        let like = match pyc_source(src, &child) {
            Some(py) if smeta.is_file() => py,
            _ => src.join(rel),
        };
        let like = if like.symlink_metadata().is_ok() {
            like
        } else {
            src.to_path_buf()
        };
        let meta = fs::symlink_metadata(&like).map_err(PackError::io(&like))?;
        if smeta.is_file() {
            let mode = (meta.mode() & 0o666) | 0o444;
            fs::set_permissions(&staged, fs::Permissions::from_mode(mode))
                .map_err(PackError::io(&staged))?;
        }
        set_owner_and_mtime(&staged, &meta)?;
    }
    Ok(())
}

/// `a/__pycache__/x.cpython-311.pyc` → `SRC/a/x.py`, if it exists.
fn pyc_source(src: &Path, pyc: &Path) -> Option<PathBuf> {
    let name = pyc.file_name()?.to_str()?;
    let stem = name.strip_suffix(".pyc")?;
    let module = stem.rsplit_once('.').map(|(m, _tag)| m)?;
    let dir = pyc.parent()?.parent()?;
    let p = src.join(dir).join(format!("{module}.py"));
    p.is_file().then_some(p)
}
