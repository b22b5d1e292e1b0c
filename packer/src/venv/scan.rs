//! Finding what ties a venv to its build path or host: one pass over the
//! tree, reading only small files (scripts, configuration, metadata).

use super::finding::{Finding, Kind};
use super::rewrite::{path_occurrences, shebang, Shebang};
use crate::PackError;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Files larger than this are not read for the report: scripts,
/// configuration and pip's metadata are far smaller, and the large files
/// (shared libraries, data) are not text.
const MAX_TEXT: u64 = 1 << 20;

/// The paths the venv may name itself by: what `bin/activate` says
/// (`VIRTUAL_ENV=`), what `pyvenv.cfg`'s `command` key says it was created
/// as, and SRC itself (as given and resolved). Longest first.
pub fn build_paths(src: &Path) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    if let Ok(text) = fs::read(src.join("bin/activate")) {
        for line in text.split(|&b| b == b'\n') {
            if let Some(v) = line.trim_ascii().strip_prefix(b"VIRTUAL_ENV=") {
                let v = v.trim_ascii();
                let v = v
                    .strip_prefix(b"\"")
                    .and_then(|v| v.strip_suffix(b"\""))
                    .or_else(|| v.strip_prefix(b"'").and_then(|v| v.strip_suffix(b"'")))
                    .unwrap_or(v);
                if v.starts_with(b"/") {
                    out.push(v.to_vec());
                    break;
                }
            }
        }
    }
    if let Some(cmd) = cfg_value(src, "command") {
        // "/usr/bin/python3 -m venv /tmp/x": the last word is the venv.
        if let Some(last) = cmd.split_ascii_whitespace().last() {
            if last.starts_with('/') {
                out.push(last.as_bytes().to_vec());
            }
        }
    }
    if let Ok(abs) = std::path::absolute(src) {
        out.push(abs.as_os_str().as_bytes().to_vec());
    }
    if let Ok(real) = fs::canonicalize(src) {
        out.push(real.as_os_str().as_bytes().to_vec());
    }
    for p in &mut out {
        while p.len() > 1 && p.ends_with(b"/") {
            p.pop();
        }
    }
    out.retain(|p| p.len() > 1);
    out.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
    out.dedup();
    out
}

/// A `key = value` of `pyvenv.cfg`.
pub fn cfg_value(src: &Path, key: &str) -> Option<String> {
    let text = fs::read_to_string(src.join("pyvenv.cfg")).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == key).then(|| v.trim().to_string())
    })
}

/// Lexically resolves `target` of a symlink at `link` (relative to the
/// venv root); `None` if it climbs out of the root.
fn resolve_inside(link: &Path, target: &Path) -> Option<PathBuf> {
    let mut parts: Vec<&OsStr> = link
        .parent()
        .map(|p| p.iter().collect())
        .unwrap_or_default();
    for c in target.components() {
        match c {
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::Normal(n) => parts.push(n),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.iter().collect())
}

/// The path of `rel` relative to the directory holding `link` (both
/// relative to the venv root): what a relative symlink at `link` must say.
pub fn relative_target(link: &Path, rel: &Path) -> PathBuf {
    let from: Vec<_> = link
        .parent()
        .map(|p| p.iter().collect())
        .unwrap_or_default();
    let to: Vec<_> = rel.iter().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..from.len() {
        out.push("..");
    }
    for p in &to[common..] {
        out.push(p);
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}

fn strip_build<'a>(target: &'a [u8], build: &[Vec<u8>]) -> Option<&'a [u8]> {
    build.iter().find_map(|b| {
        let rest = target.strip_prefix(b.as_slice())?;
        (rest.is_empty() || rest.starts_with(b"/")).then(|| rest.trim_ascii_start())
    })
}

fn names_build(text: &[u8], build: &[Vec<u8>]) -> bool {
    build.iter().any(|b| !path_occurrences(text, b).is_empty())
}

/// Walks `src` and classifies everything that names a build path or
/// reaches outside the tree.
pub fn scan(src: &Path, build: &[Vec<u8>]) -> Result<Vec<Finding>, PackError> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel_dir) = stack.pop() {
        let dir = src.join(&rel_dir);
        let mut entries: Vec<_> = fs::read_dir(&dir)
            .map_err(PackError::io(&dir))?
            .collect::<Result<_, _>>()
            .map_err(PackError::io(&dir))?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries.into_iter().rev() {
            let rel = rel_dir.join(e.file_name());
            let path = src.join(&rel);
            let meta = fs::symlink_metadata(&path).map_err(PackError::io(&path))?;
            if meta.is_dir() {
                stack.push(rel);
            } else if meta.file_type().is_symlink() {
                let target = fs::read_link(&path).map_err(PackError::io(&path))?;
                if let Some(f) = classify_symlink(&rel, &target, build) {
                    out.push(f);
                }
            } else if meta.is_file() && meta.len() <= MAX_TEXT {
                let text = fs::read(&path).map_err(PackError::io(&path))?;
                if let Some(f) = classify_file(&rel, &text, build) {
                    out.push(f);
                }
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

fn classify_symlink(rel: &Path, target: &Path, build: &[Vec<u8>]) -> Option<Finding> {
    let t = target.as_os_str().as_bytes();
    let in_bin = rel.parent() == Some(Path::new("bin"));
    let python = in_bin
        && rel.file_name().is_some_and(|n| {
            n.as_bytes().starts_with(b"python") || n.as_bytes().starts_with(b"pypy")
        });
    if t.starts_with(b"/") {
        if let Some(rest) = strip_build(t, build) {
            let inside = PathBuf::from(OsStr::from_bytes(rest.trim_ascii_start()))
                .components()
                .filter(|c| matches!(c, Component::Normal(_)))
                .collect::<PathBuf>();
            return Some(Finding {
                kind: Kind::SymlinkIntoBuild,
                path: rel.to_path_buf(),
                detail: format!("-> {}", target.display()),
                new_target: Some(relative_target(rel, &inside)),
            });
        }
    }
    // Absolute anywhere else, or relative and climbing out of the root.
    let leaves = t.starts_with(b"/") || resolve_inside(rel, target).is_none();
    leaves.then(|| Finding {
        kind: if python {
            Kind::BaseInterpreter
        } else {
            Kind::SymlinkOut
        },
        path: rel.to_path_buf(),
        detail: format!("-> {}", target.display()),
        new_target: None,
    })
}

fn classify_file(rel: &Path, text: &[u8], build: &[Vec<u8>]) -> Option<Finding> {
    let name = rel.file_name()?.as_bytes();
    let in_bin = rel.parent() == Some(Path::new("bin"));
    let finding = |kind, detail: String| {
        Some(Finding {
            kind,
            path: rel.to_path_buf(),
            detail,
            new_target: None,
        })
    };
    if rel == Path::new("pyvenv.cfg") {
        return names_build(text, build).then(|| Finding {
            kind: Kind::PyvenvCfg,
            path: rel.to_path_buf(),
            detail: "names the build path".into(),
            new_target: None,
        });
    }
    if in_bin {
        if let Some(sb) = shebang(text) {
            let interp = match sb {
                Shebang::Direct { interp, .. } | Shebang::ShExec { interp } => Some(interp),
                Shebang::Other => None,
            };
            if let Some(i) = interp {
                if names_build(i, build) {
                    return finding(Kind::Shebang, format!("#!{}", String::from_utf8_lossy(i)));
                }
            }
        }
        if name.starts_with(b"activate") || name.starts_with(b"Activate") {
            return names_build(text, build)
                .then(|| finding(Kind::Activate, "sets VIRTUAL_ENV to the build path".into()))
                .flatten();
        }
    }
    if name.ends_with(b".pth") {
        return classify_pth(rel, text, build);
    }
    if text[..text.len().min(8192)].contains(&0) || !names_build(text, build) {
        return None;
    }
    let in_dist_info = rel.parent().and_then(|p| p.file_name()).is_some_and(|d| {
        d.as_bytes().ends_with(b".dist-info") || d.as_bytes().ends_with(b".egg-info")
    });
    if in_dist_info {
        return finding(Kind::PipRecord, "pip's record of the install".into());
    }
    if in_bin {
        return finding(Kind::BinText, "names the build path".into());
    }
    finding(Kind::OtherText, "names the build path".into())
}

/// A `.pth` line is a path added to `sys.path`, or code if it starts with
/// `import`. Paths inside the build path can be rewritten; absolute paths
/// elsewhere must exist wherever the image is used.
fn classify_pth(rel: &Path, text: &[u8], build: &[Vec<u8>]) -> Option<Finding> {
    if names_build(text, build) {
        return Some(Finding {
            kind: Kind::Pth,
            path: rel.to_path_buf(),
            detail: "adds the build path to sys.path".into(),
            new_target: None,
        });
    }
    let outside: Vec<String> = text
        .split(|&b| b == b'\n')
        .map(|l| l.trim_ascii())
        .filter(|l| l.starts_with(b"/"))
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .collect();
    (!outside.is_empty()).then(|| Finding {
        kind: Kind::PthOut,
        path: rel.to_path_buf(),
        detail: format!("adds {} to sys.path", outside.join(", ")),
        new_target: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_targets() {
        assert_eq!(
            relative_target(Path::new("bin/python"), Path::new("bin/python3")),
            PathBuf::from("python3")
        );
        assert_eq!(
            relative_target(Path::new("lib64"), Path::new("lib")),
            PathBuf::from("lib")
        );
        assert_eq!(
            relative_target(Path::new("a/b/link"), Path::new("c/d")),
            PathBuf::from("../../c/d")
        );
    }

    #[test]
    fn symlinks_are_classified() {
        let build = vec![b"/tmp/v".to_vec()];
        let f = classify_symlink(
            Path::new("bin/python3"),
            Path::new("/usr/bin/python3.11"),
            &build,
        )
        .unwrap();
        assert_eq!(f.kind, Kind::BaseInterpreter);
        let f = classify_symlink(Path::new("lib64"), Path::new("/tmp/v/lib"), &build).unwrap();
        assert_eq!(f.kind, Kind::SymlinkIntoBuild);
        assert_eq!(f.new_target, Some(PathBuf::from("lib")));
        let f =
            classify_symlink(Path::new("share/x"), Path::new("../../../etc/x"), &build).unwrap();
        assert_eq!(f.kind, Kind::SymlinkOut);
        assert!(classify_symlink(Path::new("bin/python"), Path::new("python3"), &build).is_none());
    }

    #[test]
    fn pth_lines_inside_and_outside() {
        let build = vec![b"/tmp/v".to_vec()];
        let f = classify_pth(Path::new("a.pth"), b"/tmp/v/src\n", &build).unwrap();
        assert_eq!(f.kind, Kind::Pth);
        let f = classify_pth(Path::new("a.pth"), b"/home/u/proj/src\n", &build).unwrap();
        assert_eq!(f.kind, Kind::PthOut);
        assert!(classify_pth(Path::new("a.pth"), b"import _virtualenv\n", &build).is_none());
    }
}
