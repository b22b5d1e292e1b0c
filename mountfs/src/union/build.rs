//! Building a [`UnionImage`]: from a manifest (shards checked by size and
//! opened lazily) or from plain images (opened at once, ranges found by
//! descending each image, conflicts found by a merge pass).

use super::options::{OnConflict, ShardOpener, UnionOptions};
use super::tree::{child_path, Member, MergedDir, Route, Tables, UnionImage, MAX_SHARDS};
use crate::cache::BlockCache;
use crate::error::{FsError, Result};
use crate::image::{FileKind, Image, NodeId, ROOT};
use crate::location::ImageLocation;
use packfs_format::shards::{decode_path, tree_cmp, Manifest, MANIFEST_VERSION};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock, RwLock};

fn shards_err(msg: String) -> FsError {
    FsError::Shards(msg)
}

fn build<I: Image>(
    name: String,
    paths: Vec<(ImageLocation, u64)>,
    routes: Vec<Route>,
    exact: bool,
    o: UnionOptions<I>,
    totals: (u64, u64),
) -> Result<UnionImage<I>> {
    if paths.is_empty() || paths.len() > MAX_SHARDS {
        return Err(shards_err(format!(
            "{name}: a union takes 1 to {MAX_SHARDS} images, not {}",
            paths.len()
        )));
    }
    let sorted = routes
        .windows(2)
        .all(|w| tree_cmp(&w[0].last, &w[1].first) == std::cmp::Ordering::Less);
    let n = paths.len() as u32;
    Ok(UnionImage {
        members: paths
            .into_iter()
            .map(|(path, size)| Member {
                path,
                size,
                img: OnceLock::new(),
                root_ino: OnceLock::new(),
            })
            .collect(),
        routes,
        sorted,
        exact,
        rule: o.on_conflict,
        tables: RwLock::new(Tables::default()),
        root: Arc::new(MergedDir {
            path: Vec::new(),
            shards: (0..n).collect(),
            nodes: (0..n).map(|_| OnceLock::from(ROOT)).collect(),
            parent_ino: 0,
        }),
        opener: ShardOpener {
            cache: Arc::new(BlockCache::new(o.cache_bytes)),
            open: o.open,
            next_ns: Default::default(),
        },
        total_bytes: totals.0,
        total_entries: totals.1,
        name,
    })
}

/// A manifest to open: its bytes, where it is (shard names that are not
/// URLs or absolute paths are relative to it) and how to learn the
/// shards' lengths. The union is told, not left to look: it knows neither
/// files nor remote objects, and its caller can ask a server about many
/// objects at once.
/// The lengths of the images at these locations, in order; an error
/// says why one has none (missing, refused...).
pub type SizesFn<'a> = &'a dyn Fn(&[ImageLocation]) -> Vec<std::result::Result<u64, String>>;

pub struct ManifestSource<'a> {
    pub location: &'a ImageLocation,
    pub bytes: &'a [u8],
    pub sizes: SizesFn<'a>,
}

/// Opens the union a manifest describes. Every image named must exist with
/// the size recorded (a missing or truncated shard is an error naming it);
/// hashes are left to `packfs shards verify` (hashing GBs at mount is too
/// slow). Only the first shard is opened now; the others on first use.
pub fn open_manifest<I: Image>(src: ManifestSource, o: UnionOptions<I>) -> Result<UnionImage<I>> {
    let mname = src.location.to_string();
    let m: Manifest = serde_json::from_slice(src.bytes)
        .map_err(|e| shards_err(format!("{mname}: not a packfs shard manifest: {e}")))?;
    if m.packfs_shards != MANIFEST_VERSION {
        return Err(shards_err(format!(
            "{mname}: manifest version {} (this packfs reads {MANIFEST_VERSION})",
            m.packfs_shards
        )));
    }
    if m.shards.len() != m.split.shards as usize
        || m.shards
            .iter()
            .enumerate()
            .any(|(i, s)| s.index as usize != i)
    {
        return Err(shards_err(format!(
            "{mname}: lists {} shards for a split into {} (or out of order)",
            m.shards.len(),
            m.split.shards
        )));
    }
    if m.shards.is_empty() || m.shards.len() > MAX_SHARDS {
        return Err(shards_err(format!(
            "{mname}: a union takes 1 to {MAX_SHARDS} images, not {}",
            m.shards.len()
        )));
    }
    let paths = m
        .shards
        .iter()
        .map(|s| {
            src.location
                .resolve(&s.file)
                .map_err(|e| shards_err(format!("shard {} of {mname}: {e}", s.index)))
        })
        .collect::<Result<Vec<_>>>()?;
    let sizes = (src.sizes)(&paths);
    let mut routes = Vec::new();
    let mut total = 0;
    for ((s, p), size) in m.shards.iter().zip(&paths).zip(sizes) {
        let size = size.map_err(|e| {
            let e = match e.contains(&p.to_string()) {
                true => e,
                false => format!("{p}: {e}"),
            };
            shards_err(format!("shard {} of {mname}: {e}", s.index))
        })?;
        if size != s.size {
            return Err(shards_err(format!(
                "shard {} of {mname}: {p}: {size} bytes, the manifest says {} \
                 (replaced or truncated; `packfs shards verify` checks hashes)",
                s.index, s.size
            )));
        }
        total += size;
        if let Some(r) = &s.range {
            let dec = |x: &str| {
                decode_path(x).ok_or_else(|| {
                    shards_err(format!("{mname}: shard {}: bad path {x:?}", s.index))
                })
            };
            routes.push(Route {
                shard: s.index,
                first: dec(&r.first)?,
                last: dec(&r.last)?,
            });
        }
    }
    let sized = paths
        .into_iter()
        .zip(m.shards.iter().map(|s| s.size))
        .collect();
    let u = build(
        mname,
        sized,
        routes,
        true,
        o,
        (total, m.split.total_entries + 1),
    )?;
    u.member(0)?;
    Ok(u)
}

/// First entry of a listing, or its last when `last`.
fn edge_entry<I: Image>(
    img: &I,
    dir: NodeId,
    last: bool,
) -> Result<Option<(Vec<u8>, FileKind, NodeId)>> {
    let mut out = None;
    img.readdir(dir, 2, &mut |e| {
        out = Some((e.name, e.kind, e.node));
        last
    })?;
    Ok(out)
}

/// The image's range: its first leaf (every entry before it is one of its
/// ancestors) and its last entry, by descending the first and the last
/// entries. `None` for an image with no entries.
fn range_of<I: Image>(img: &I) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
    let descend = |last: bool| -> Result<Vec<u8>> {
        let (mut node, mut path) = (ROOT, Vec::new());
        while let Some((name, kind, n)) = edge_entry(img, node, last)? {
            path = child_path(&path, &name);
            if kind != FileKind::Dir {
                break;
            }
            node = n;
        }
        Ok(path)
    };
    let first = descend(false)?;
    if first.is_empty() {
        return Ok(None);
    }
    Ok(Some((first, descend(true)?)))
}

/// Opens plain images as one union, in the order given (which decides the
/// canonical metadata of merged directories and, with `first`/`last`, which
/// entry a conflicting path shows). All images are opened now, and with
/// [`OnConflict::Error`] the directories present in several images are
/// merged once to find conflicts (cost: reading those directories'
/// listings; only they are descended).
pub fn open_images<I: Image>(images: &[PathBuf], o: UnionOptions<I>) -> Result<UnionImage<I>> {
    let name = images
        .first()
        .map_or(String::new(), |p| p.display().to_string());
    let mut routes = Vec::new();
    let mut sized = Vec::new();
    for p in images {
        let len = crate::source::image_len(p).map_err(|e| FsError::io(p.display(), e))?;
        sized.push((ImageLocation::Local(p.clone()), len));
    }
    let total = sized.iter().map(|s| s.1).sum();
    let u = build(name, sized, Vec::new(), false, o, (0, 0))?;
    for s in 0..images.len() {
        if let Some((first, last)) = range_of(u.member(s as u32)?)? {
            routes.push(Route {
                shard: s as u32,
                first,
                last,
            });
        }
    }
    let sorted = routes
        .windows(2)
        .all(|w| tree_cmp(&w[0].last, &w[1].first) == std::cmp::Ordering::Less);
    let u = UnionImage {
        routes,
        sorted,
        total_bytes: total,
        ..u
    };
    if u.rule == OnConflict::Error {
        let root: Vec<(u32, NodeId)> = u.root.shards.iter().map(|&s| (s, ROOT)).collect();
        u.check_conflicts(&[], &root)?;
    }
    Ok(u)
}

impl<I: Image> UnionImage<I> {
    fn shard_name(&self, s: u32) -> String {
        self.members[s as usize].path.to_string()
    }

    /// The merge pass: lists directory `path` in every shard holding it and
    /// descends only into names held by several; a name that is not a
    /// directory in all of them is a conflict.
    fn check_conflicts(&self, path: &[u8], members: &[(u32, NodeId)]) -> Result<()> {
        let mut names: BTreeMap<Vec<u8>, Vec<(u32, FileKind, NodeId)>> = BTreeMap::new();
        for &(s, dir) in members {
            self.member(s)?.readdir(dir, 2, &mut |e| {
                names.entry(e.name).or_default().push((s, e.kind, e.node));
                true
            })?;
        }
        for (name, holders) in names {
            if holders.len() < 2 {
                continue;
            }
            let p = child_path(path, &name);
            if let Some(i) = holders.iter().position(|h| h.1 != FileKind::Dir) {
                let j = if i == 0 { 1 } else { 0 };
                let what = |k: FileKind| {
                    if k == FileKind::Dir {
                        "a directory"
                    } else {
                        "a non-directory"
                    }
                };
                return Err(FsError::Shards(format!(
                    "{:?} is {} in {} and {} in {}; pass --on-conflict first or last to pick one",
                    String::from_utf8_lossy(&p),
                    what(holders[j].1),
                    self.shard_name(holders[j].0),
                    what(holders[i].1),
                    self.shard_name(holders[i].0),
                )));
            }
            let sub: Vec<(u32, NodeId)> = holders.iter().map(|h| (h.0, h.2)).collect();
            self.check_conflicts(&p, &sub)?;
        }
        Ok(())
    }
}
