//! `--exclude` patterns, as `packfs pack --help` documents them:
//!
//! * a pattern with no `/` but a trailing one is matched against each
//!   entry's name, at any depth (`*.tmp`, `__pycache__`);
//! * a pattern with a `/` is matched against the entry's path relative to
//!   the source root, so it is anchored there; a leading `/` or `./` only
//!   says so explicitly (`/build`, `./data/cache`, `logs/*.gz`). In such a
//!   pattern `*` and `?` stay within one name; `**` crosses directories;
//! * a trailing `/` matches directories only (`cache/`).
//!
//! An excluded directory is never read, so its contents go with it. Each
//! pattern records whether it matched anything, so that the walk can warn
//! about one that did not: a typo there silently packs what the user meant
//! to leave out.

use crate::PackError;
use globset::{Glob, GlobBuilder, GlobMatcher};
use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// One compiled pattern.
struct Pattern {
    /// As the user wrote it, for messages.
    text: String,
    matcher: GlobMatcher,
    /// Matched against the path from the root rather than the name.
    anchored: bool,
    /// A trailing `/`: directories only.
    dir_only: bool,
    /// Whether any entry matched it so far (set from the walk's I/O threads).
    hit: AtomicBool,
}

/// The compiled `--exclude` patterns of one walk.
pub(crate) struct Excludes {
    patterns: Vec<Pattern>,
}

/// Checks one pattern as the command line gives it: the error names what is
/// wrong with it, in words.
pub fn check(pattern: &str) -> Result<(), String> {
    compile(pattern).map(|_| ())
}

fn compile(text: &str) -> Result<Pattern, String> {
    let mut p = text;
    let dir_only = p.ends_with('/');
    p = p.trim_end_matches('/');
    let explicit = p.starts_with('/') || p.starts_with("./");
    p = p.trim_start_matches("./").trim_start_matches('/');
    if p.is_empty() || p == "." {
        return Err(format!(
            "{text:?} names the source root itself; name what to leave out inside it"
        ));
    }
    let anchored = explicit || p.contains('/');
    let glob = if anchored {
        GlobBuilder::new(p).literal_separator(true).build()
    } else {
        Glob::new(p)
    }
    .map_err(|e| format!("{text:?} is not a valid glob: {}", e.kind()))?;
    Ok(Pattern {
        text: text.to_string(),
        matcher: glob.compile_matcher(),
        anchored,
        dir_only,
        hit: AtomicBool::new(false),
    })
}

impl Excludes {
    pub(crate) fn new(patterns: &[String]) -> Result<Excludes, PackError> {
        let patterns = patterns
            .iter()
            .map(|p| compile(p).map_err(|e| PackError::InvalidOption(format!("--exclude {e}"))))
            .collect::<Result<_, _>>()?;
        Ok(Excludes { patterns })
    }

    /// Whether the entry at `rel` (relative to the root; its last component
    /// is `name`) is left out. Every matching pattern is marked as used.
    pub(crate) fn excludes(&self, rel: &Path, name: &OsStr, is_dir: bool) -> bool {
        let mut out = false;
        for p in &self.patterns {
            if p.dir_only && !is_dir {
                continue;
            }
            let m = if p.anchored {
                p.matcher.is_match(rel)
            } else {
                p.matcher.is_match(name)
            };
            if m {
                p.hit.store(true, Ordering::Relaxed);
                out = true;
            }
        }
        out
    }

    /// The patterns that matched nothing, as given.
    pub(crate) fn unmatched(&self) -> Vec<&str> {
        self.patterns
            .iter()
            .filter(|p| !p.hit.load(Ordering::Relaxed))
            .map(|p| p.text.as_str())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(patterns: &[&str]) -> Excludes {
        Excludes::new(&patterns.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    fn hit(e: &Excludes, rel: &str, is_dir: bool) -> bool {
        let rel = Path::new(rel);
        e.excludes(rel, rel.file_name().unwrap(), is_dir)
    }

    #[test]
    fn leading_slash_and_dot_slash_anchor_to_the_root() {
        for p in ["/d0", "./d0", "/d0/", "./d0/"] {
            let e = ex(&[p]);
            assert!(hit(&e, "d0", true), "{p}");
            assert!(!hit(&e, "sub/d0", true), "{p} matched below the root");
        }
        // Without a slash (a trailing one aside): a name at any depth.
        let e = ex(&["d0"]);
        assert!(hit(&e, "d0", false) && hit(&e, "a/b/d0", true));
        let e = ex(&["d0/"]);
        assert!(hit(&e, "d0", true) && hit(&e, "a/b/d0", true));
    }

    #[test]
    fn a_trailing_slash_matches_directories_only() {
        let e = ex(&["cache/"]);
        assert!(hit(&e, "cache", true));
        assert!(!hit(&e, "cache", false));
        assert_eq!(e.unmatched(), Vec::<&str>::new());
    }

    #[test]
    fn anchored_stars_stay_within_a_name() {
        let e = ex(&["logs/*.gz"]);
        assert!(hit(&e, "logs/a.gz", false));
        assert!(!hit(&e, "logs/old/a.gz", false));
        let e = ex(&["logs/**/*.gz"]);
        assert!(hit(&e, "logs/old/a.gz", false));
        assert!(
            hit(&e, "logs/a.gz", false),
            "`/**/` is zero or more directories"
        );
        // A name pattern's star matches any name.
        let e = ex(&["*.o"]);
        assert!(hit(&e, "a/b/c.o", false));
    }

    #[test]
    fn unmatched_patterns_are_reported_as_given() {
        let e = ex(&["*.o", "/nothing/"]);
        assert!(hit(&e, "x.o", false));
        assert_eq!(e.unmatched(), vec!["/nothing/"]);
    }

    #[test]
    fn bad_patterns_say_why() {
        let err = check("[").unwrap_err();
        assert!(
            err.contains("not a valid glob") && err.contains("unclosed"),
            "{err}"
        );
        assert!(check("/").unwrap_err().contains("source root"));
        assert!(check("./").unwrap_err().contains("source root"));
    }
}
