//! `--compile`: byte-code for the `.py` files that lack a valid `.pyc`,
//! written into the staging tree by the venv's own interpreter.
//!
//! Why the venv's interpreter: the `.pyc` magic number and cache tag
//! (`cpython-311`) belong to one Python version, and the venv's `bin/python`
//! is the one that will import them. Why our own script rather than
//! `compileall`: it must never write into the source tree, must judge a
//! `.pyc` valid against the mtime the *image* will show (`--mtime` and
//! `SOURCE_DATE_EPOCH` replace every mtime, which invalidates every
//! timestamp `.pyc` pip wrote), and must write timestamp-based headers even
//! when `SOURCE_DATE_EPOCH` is set (where `py_compile` switches to
//! checked-hash `.pyc`s, which Python re-hashes at every import).

use crate::PackError;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const SCRIPT: &str = include_str!("compile.py");

/// What the compile pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompileSummary {
    /// `.py` files looked at.
    pub checked: u64,
    /// Of those, already with a valid `.pyc` in the tree.
    pub valid: u64,
    /// Newly compiled into the image.
    pub compiled: u64,
    /// Could not be compiled (syntax errors): Python fails on them the
    /// same way at import; pip skips them too.
    pub failed: u64,
    /// The first few failures: (path relative to the venv, message).
    pub failures: Vec<(String, String)>,
    /// The interpreter's version and cache tag.
    pub version: String,
    pub cache_tag: String,
}

/// The venv's interpreter: `bin/python3`, else `bin/python`.
fn interpreter(src: &Path) -> Option<std::path::PathBuf> {
    ["bin/python3", "bin/python"]
        .iter()
        .map(|p| src.join(p))
        .find(|p| p.exists())
}

/// Runs the compile script; `display_root` prefixes the file names
/// recorded in the code objects, `mtime` is the image's mtime override.
pub fn compile(
    src: &Path,
    stage: &Path,
    display_root: &Path,
    mtime: Option<u32>,
    cancel: Option<&AtomicBool>,
) -> Result<CompileSummary, PackError> {
    let fail = |message: String| PackError::Venv {
        path: src.to_path_buf(),
        message,
    };
    let python = interpreter(src).ok_or_else(|| {
        fail("--compile needs the environment's interpreter, but it has no bin/python3 or bin/python that runs here".into())
    })?;
    // -I: ignore PYTHON* variables and the user's site; -S: no site
    // import (faster, and nothing of the venv's own packages runs); -B:
    // nothing is written for the script itself.
    let mut child = Command::new(&python)
        .args(["-I", "-S", "-B", "-c", SCRIPT])
        .arg(src)
        .arg(stage)
        .arg(display_root)
        .arg(mtime.map(|m| m.to_string()).unwrap_or_default())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            fail(format!(
                "cannot run {} for --compile: {e}",
                python.display()
            ))
        })?;
    // Poll so that Ctrl-C during a long compile stops it.
    loop {
        if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(PackError::Interrupted);
        }
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(fail(format!("waiting for {}: {e}", python.display()))),
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| fail(format!("reading {}'s output: {e}", python.display())))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(fail(format!(
            "{} failed while compiling ({}): {}",
            python.display(),
            out.status,
            stderr.trim()
        )));
    }
    parse_summary(&out.stdout).ok_or_else(|| {
        fail(format!(
            "unexpected output from the compile script: {}",
            stderr.trim()
        ))
    })
}

fn parse_summary(stdout: &[u8]) -> Option<CompileSummary> {
    let v: serde_json::Value = serde_json::from_slice(stdout).ok()?;
    let n = |k: &str| v.get(k).and_then(|x| x.as_u64());
    let failures = v
        .get("failed")?
        .as_array()?
        .iter()
        .filter_map(|f| {
            let f = f.as_array()?;
            Some((
                f.first()?.as_str()?.to_string(),
                f.get(1)?.as_str()?.to_string(),
            ))
        })
        .collect();
    Some(CompileSummary {
        checked: n("checked")?,
        valid: n("valid")?,
        compiled: n("compiled")?,
        failed: n("failed_count")?,
        failures,
        version: v.get("version")?.as_str()?.to_string(),
        cache_tag: v.get("cache_tag")?.as_str()?.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_is_parsed() {
        let s = br#"{"checked": 3, "valid": 1, "compiled": 1, "failed_count": 1, "failed": [["a/b.py", "SyntaxError: x"]], "cache_tag": "cpython-311", "version": "3.11.7"}"#;
        let s = parse_summary(s).unwrap();
        assert_eq!((s.checked, s.valid, s.compiled, s.failed), (3, 1, 1, 1));
        assert_eq!(s.failures, vec![("a/b.py".into(), "SyntaxError: x".into())]);
        assert!(parse_summary(b"Traceback").is_none());
    }
}
