//! The shard manifest (`*.manifest.json`) and the path order shards are cut
//! in. Both sides use it: `packer` writes manifests and sidecars, `mountfs`
//! routes union lookups by the path ranges recorded here.
//!
//! # Tree order
//! Paths are '/'-separated, relative to the image root, without a leading
//! '/' (the root itself is ""). They are ordered component by component,
//! each component by its bytes ([`tree_cmp`]): the depth-first pre-order in
//! which the packer writes entries (every directory right before its
//! contents, siblings by name bytes). Plain byte order would differ (`a/b`
//! sorts after `a-c` by bytes, before it in tree order). In this order the
//! entries under a directory `d` (its subtree) form one contiguous interval
//! starting at `d`, which is what makes range routing work
//! ([`holds`]).
//!
//! # Paths in JSON
//! A JSON string must be UTF-8; file names need not be. A path is stored as
//! its bytes with `%` and every byte of an invalid UTF-8 sequence written as
//! `%XX` (two upper-case hex digits): UTF-8 names read as themselves and
//! every name round-trips ([`encode_path`], [`decode_path`]).

use serde::{Deserialize, Serialize};
use std::cmp::Ordering;

/// Version of the manifest schema written by this code (`packfs_shards`).
pub const MANIFEST_VERSION: u32 = 1;

/// What every shard of one split shares: the parameters that decide which
/// entry goes to which shard and how each image is written. Two sidecars
/// belong to the same split only if these are equal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Split {
    /// Number of shards, N.
    pub shards: u32,
    /// How entries are weighed: `"bytes+entry_cost"` for a directory (a
    /// regular file weighs its size plus `entry_cost`, any other entry
    /// `entry_cost`); `"inputs"` for shards of archives, which take whole
    /// sources in contiguous groups.
    pub weighting: String,
    pub entry_cost: u64,
    /// `--exclude` patterns, in the order given.
    pub excludes: Vec<String>,
    /// `"squashfs"` or `"zip"`.
    pub format: String,
    pub compression: String,
    pub level: Option<i32>,
    pub block_size: u32,
    /// The fixed mtime (`--mtime`/`SOURCE_DATE_EPOCH`), if any.
    pub mtime: Option<u32>,
    pub all_root: bool,
    pub no_fragments: bool,
    /// `--fragment-incompressible` (where incompressible tails go, so the
    /// image bytes). Absent from manifests written before it was recorded,
    /// which cannot say: read as `false`.
    #[serde(default)]
    pub fragment_incompressible: bool,
    /// `--order`: where file data goes, so the image bytes. `path`,
    /// `similarity`, or for a profile `profile:blake3:HEX` (the rest by path)
    /// or `profile+similarity:blake3:HEX`, HEX the hash of the profile's
    /// paths as parsed (see `packer::order::Profile::digest`). The content,
    /// not the file name: tasks on different nodes may read the profile from
    /// different paths, and the same path may hold different profiles, while
    /// only the listed paths decide the order. Absent from manifests written
    /// before it was recorded, which were all packed in path order (the only
    /// order there was): read as `path`.
    #[serde(default = "path_order")]
    pub order: String,
    /// xz's extreme variant (`--level Ne`). Absent from older manifests:
    /// `false` (the level alone was recorded).
    #[serde(default)]
    pub extreme: bool,
    /// `--xz-lzma2` settings beyond the level, as `key=N` pairs in a fixed
    /// order (`lc`, `lp`, `pb`, `nice`, `depth`), only those set; `None` for
    /// none. Absent from older manifests: `None`.
    #[serde(default)]
    pub xz_lzma2: Option<String>,
    /// SRC's final component (for people reading the manifest; not checked
    /// against anything).
    pub source: String,
    /// Entries (root excluded) and regular-file bytes of the whole source
    /// tree: shards of two different walks of a changing tree do not match.
    pub total_entries: u64,
    pub total_bytes: u64,
    /// Shards of archives (`weighting` `"inputs"`): how members were read
    /// (`--strip-components`, `--expand-nested`, `--on-conflict`). Then
    /// `total_entries` and `total_bytes` count the sources and their
    /// bytes. Absent for shards of a directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sources: Option<String>,
}

fn path_order() -> String {
    "path".into()
}

/// First and last path (tree order) of the entries assigned to a shard.
/// Directories leading to those entries are in the shard too, though they
/// sort before `first`; nothing else is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    pub first: String,
    pub last: String,
}

/// One shard image as recorded in the manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// 0..N.
    pub index: u32,
    /// File name, relative to the manifest's directory.
    pub file: String,
    /// Image size in bytes (checked at mount).
    pub size: u64,
    /// blake3 of the whole image, hex (checked by `packfs shards verify`).
    pub blake3: String,
    /// Entries assigned to this shard (not counting the directories added
    /// to lead to them), regular files among them (hard links once), and
    /// their bytes.
    pub entries: u64,
    pub files: u64,
    pub bytes: u64,
    /// `None` for a shard that got no entries (more shards than entries).
    pub range: Option<Range>,
}

/// A manifest, or (with exactly one shard) a per-shard sidecar.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub packfs_shards: u32,
    pub split: Split,
    pub shards: Vec<Shard>,
}

/// Compares two paths in tree order (see the module doc).
pub fn tree_cmp(a: &[u8], b: &[u8]) -> Ordering {
    fn comps(p: &[u8]) -> impl Iterator<Item = &[u8]> {
        p.split(|&c| c == b'/').filter(|c| !c.is_empty())
    }
    comps(a).cmp(comps(b))
}

/// Whether `p` is `dir` or lies under it.
pub fn in_subtree(p: &[u8], dir: &[u8]) -> bool {
    dir.is_empty() || p == dir || (p.starts_with(dir) && p.get(dir.len()) == Some(&b'/'))
}

/// Whether a shard whose assigned entries run from `first` to `last` (tree
/// order, decoded) can hold path `p`: some entry assigned to it is `p` or
/// lies under `p` (then `p` is that entry or one of the directories leading
/// to it). The subtree of `p` is the interval from `p` to its last
/// descendant, so this is an interval intersection: `last >= p`, and
/// `first` is not past the subtree (`first <= p` or `first` under `p`).
pub fn holds(first: &[u8], last: &[u8], p: &[u8]) -> bool {
    tree_cmp(last, p) != Ordering::Less
        && (tree_cmp(first, p) != Ordering::Greater || in_subtree(first, p))
}

/// Writes path bytes as a JSON-safe string (see the module doc).
pub fn encode_path(p: &[u8]) -> String {
    let mut out = String::with_capacity(p.len());
    let mut rest = p;
    while !rest.is_empty() {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                push_escaped(&mut out, s);
                break;
            }
            Err(e) => {
                let (good, bad) = rest.split_at(e.valid_up_to());
                push_escaped(&mut out, std::str::from_utf8(good).expect("valid prefix"));
                let n = e.error_len().unwrap_or(bad.len());
                for b in &bad[..n] {
                    out.push_str(&format!("%{b:02X}"));
                }
                rest = &bad[n..];
            }
        }
    }
    out
}

fn push_escaped(out: &mut String, s: &str) {
    for c in s.chars() {
        if c == '%' {
            out.push_str("%25");
        } else {
            out.push(c);
        }
    }
}

/// Reads a path written by [`encode_path`]; `None` for a malformed escape.
pub fn decode_path(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

/// The file name of shard `k` of `n` for an output template: `{shard}`
/// becomes `k` zero-padded to the number of digits of `n - 1`, so that the
/// names sort in shard order (`train-00.sqfs` .. `train-15.sqfs`).
/// `None` if the template has no `{shard}`.
pub fn shard_name(template: &str, k: u32, n: u32) -> Option<String> {
    if !template.contains("{shard}") {
        return None;
    }
    let width = n.saturating_sub(1).max(1).to_string().len();
    Some(template.replace("{shard}", &format!("{k:0width$}")))
}

/// The default manifest name for an output template: the template's file
/// name with `{shard}` and one separator before it (`-`, `_` or `.`)
/// removed and its extension replaced by `.manifest.json`
/// (`out/train-{shard}.sqfs` -> `out/train.manifest.json`; a name left
/// empty becomes `shards`).
pub fn manifest_name(template: &str) -> String {
    let (dir, file) = match template.rfind('/') {
        Some(i) => template.split_at(i + 1),
        None => ("", template),
    };
    let stem = match file.rfind('.') {
        Some(i) if !file[i..].contains("{shard}") && i > 0 => &file[..i],
        _ => file,
    };
    let mut name = stem.to_string();
    for pat in ["-{shard}", "_{shard}", ".{shard}", "{shard}"] {
        if name.contains(pat) {
            name = name.replacen(pat, "", 1);
            break;
        }
    }
    let name = name.trim_matches(|c| c == '-' || c == '_' || c == '.');
    let name = if name.is_empty() { "shards" } else { name };
    format!("{dir}{name}.manifest.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_order_is_component_wise() {
        assert_eq!(tree_cmp(b"a/b", b"a-c"), Ordering::Less);
        assert!(b"a/b".as_slice() > b"a-c".as_slice());
        assert_eq!(tree_cmp(b"a", b"a/b"), Ordering::Less);
        assert_eq!(tree_cmp(b"", b"a"), Ordering::Less);
        assert_eq!(tree_cmp(b"a/b", b"a/b"), Ordering::Equal);
        assert_eq!(tree_cmp(b"b", b"a/z/z"), Ordering::Greater);
    }

    #[test]
    fn range_holds_exactly_the_subtrees_it_meets() {
        let (f, l) = (b"d/b/x".as_slice(), b"d/c/y".as_slice());
        for (p, want) in [
            ("", true),
            ("d", true),
            ("d/b", true),
            ("d/b/x", true),
            ("d/b/w", false),
            ("d/b/y", true),
            ("d/c", true),
            ("d/c/y", true),
            ("d/c/z", false),
            ("d/a", false),
            ("d/d", false),
            ("e", false),
            ("c", false),
            // After d/b and its subtree, before d/c: inside the range.
            ("d/b-", true),
            ("d/c-", false),
        ] {
            assert_eq!(holds(f, l, p.as_bytes()), want, "{p}");
        }
    }

    #[test]
    fn paths_round_trip_through_json_strings() {
        for p in [
            b"plain/name.jpg".as_slice(),
            b"100%/x",
            b"caf\xc3\xa9",
            b"bad\xff\xfe/\xc3",
            b"",
        ] {
            let s = encode_path(p);
            assert_eq!(decode_path(&s).as_deref(), Some(p), "{s}");
        }
        assert_eq!(encode_path(b"a%b\xff"), "a%25b%FF");
        assert_eq!(decode_path("a%2"), None);
    }

    #[test]
    fn names_of_shards_and_manifests() {
        assert_eq!(shard_name("t-{shard}.sqfs", 3, 4).unwrap(), "t-3.sqfs");
        assert_eq!(shard_name("t-{shard}.sqfs", 3, 16).unwrap(), "t-03.sqfs");
        assert_eq!(shard_name("t-{shard}.sqfs", 7, 101).unwrap(), "t-007.sqfs");
        assert_eq!(shard_name("t.sqfs", 0, 1), None);
        assert_eq!(
            manifest_name("out/train-{shard}.sqfs"),
            "out/train.manifest.json"
        );
        assert_eq!(manifest_name("x_{shard}.zip"), "x.manifest.json");
        assert_eq!(manifest_name("{shard}.sqfs"), "shards.manifest.json");
        assert_eq!(manifest_name("a/{shard}-part.sqfs"), "a/part.manifest.json");
    }
}
