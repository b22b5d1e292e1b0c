//! The union image itself: routing, merged directories, node ids (see the
//! module doc of `crate::union`).

use super::options::{OnConflict, ShardOpener};
use crate::error::{FsError, Result};
use crate::image::{Attr, DirEntry, Extent, FileKind, Image, NodeId, StatFs, ROOT};
use crate::location::ImageLocation;
use packfs_format::shards::{holds, tree_cmp};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

/// Shards of one union at most (cookies keep 12 bits for the shard).
pub const MAX_SHARDS: usize = 4096;
const COOKIE_SHIFT: u32 = 52;
/// Shared units of a shard at most, and where the shard number starts in a
/// union's unit number (see `shared_unit`).
const UNIT_SHIFT: u32 = 48;

/// One shard: its image, opened on first use.
pub(super) struct Member<I> {
    /// Where its image is: a file or a remote object.
    pub(super) path: ImageLocation,
    /// Its length as checked at open (0 when not known).
    pub(super) size: u64,
    /// Set on the first *successful* open only: a failed open (a shard not
    /// yet copied, a storage error) is tried again on the next access,
    /// never remembered as a broken shard.
    pub(super) img: OnceLock<I>,
    /// Inode number of the shard's root, once opened.
    pub(super) root_ino: OnceLock<u64>,
}

/// A shard's path range, decoded.
pub(super) struct Route {
    pub(super) shard: u32,
    pub(super) first: Vec<u8>,
    pub(super) last: Vec<u8>,
}

/// A directory held by several shards (see the module doc).
#[derive(Debug)]
pub(super) struct MergedDir {
    /// '/'-separated, relative, "" for the root.
    pub(super) path: Vec<u8>,
    /// The shards holding it, in shard order; the first is the canonical one.
    pub(super) shards: Vec<u32>,
    /// Its node in each of them, found on first use (`node_in`); the first
    /// is always known.
    pub(super) nodes: Vec<OnceLock<NodeId>>,
    pub(super) parent_ino: u64,
}

#[derive(Default)]
pub(super) struct Tables {
    dirs: HashMap<NodeId, Arc<MergedDir>>,
    by_path: HashMap<Vec<u8>, NodeId>,
    /// (shard, inode number there) of a merged directory -> its union inode
    /// number, so ".." of a directory below it shows the canonical one.
    aliases: HashMap<(u32, u64), u64>,
}

/// The union image. Invariant: `routes` holds the shards with entries, in
/// shard order; `sorted` says their ranges are disjoint and increasing.
pub struct UnionImage<I: Image> {
    pub(super) members: Vec<Member<I>>,
    pub(super) routes: Vec<Route>,
    pub(super) sorted: bool,
    /// Ranges from a manifest: a shard holds a path exactly when its range
    /// meets the path's subtree (plain images' ranges only bound them).
    pub(super) exact: bool,
    pub(super) rule: OnConflict,
    pub(super) tables: RwLock<Tables>,
    pub(super) root: Arc<MergedDir>,
    pub(super) opener: ShardOpener<I>,
    /// For statfs: total image bytes and entries, when known.
    pub(super) total_bytes: u64,
    pub(super) total_entries: u64,
    /// Where the union came from (manifest or first image), for messages.
    pub name: String,
}

pub struct UnionHandle<H> {
    shard: u32,
    h: H,
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

pub(super) fn child_path(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(dir.len() + 1 + name.len());
    p.extend_from_slice(dir);
    if !dir.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

impl<I: Image> UnionImage<I> {
    /// The cache all shards share.
    pub fn cache(&self) -> &Arc<crate::cache::BlockCache> {
        &self.opener.cache
    }

    /// The shards' images and their lengths, in shard order.
    pub fn shards(&self) -> impl Iterator<Item = (&ImageLocation, u64)> {
        self.members.iter().map(|m| (&m.path, m.size))
    }

    /// Whether any shard is a remote object.
    pub fn has_remote(&self) -> bool {
        self.members.iter().any(|m| m.path.is_remote())
    }

    /// Shards opened so far (they open on first use).
    pub fn opened(&self) -> usize {
        self.members
            .iter()
            .filter(|m| m.img.get().is_some())
            .count()
    }

    fn n(&self) -> u64 {
        self.members.len() as u64
    }

    /// The shard's image, opening it on first use.
    pub(super) fn member(&self, s: u32) -> Result<&I> {
        let m = &self.members[s as usize];
        let img = match m.img.get() {
            Some(img) => img,
            None => {
                let opened = self.opener.open(&m.path).map_err(FsError::Shards)?;
                // Two threads may race to open it; either copy serves.
                let _ = m.img.set(opened);
                m.img.get().expect("set above or by the winner of the race")
            }
        };
        if m.root_ino.get().is_none() {
            let ino = img.getattr(ROOT)?.ino;
            let _ = m.root_ino.set(ino);
        }
        Ok(img)
    }

    /// Calls `f` on each shard's image in shard order, opening it first,
    /// while `f` returns true (for `--preload`, which opens every shard).
    pub fn each_shard(&self, mut f: impl FnMut(&I) -> Result<bool>) -> Result<()> {
        for s in 0..self.members.len() as u32 {
            if !f(self.member(s)?)? {
                break;
            }
        }
        Ok(())
    }

    /// The union node of shard `s`'s node `n`.
    fn node(&self, s: u32, n: NodeId) -> Result<NodeId> {
        if n == ROOT {
            return Ok(ROOT);
        }
        n.checked_sub(2)
            .and_then(|x| x.checked_mul(self.n()))
            .and_then(|x| x.checked_add(s as u64 + 2))
            .ok_or_else(|| FsError::corrupt(format!("node {n} of shard {s} out of range")))
    }

    /// Shard and shard node of a union node other than the root.
    fn split_node(&self, n: NodeId) -> Result<(u32, NodeId)> {
        let x = n.checked_sub(2).ok_or(FsError::NotFound)?;
        Ok(((x % self.n()) as u32, x / self.n() + 2))
    }

    fn ino(&self, s: u32, ino: u64) -> Result<u64> {
        ino.checked_mul(self.n())
            .and_then(|x| x.checked_add(s as u64))
            .ok_or_else(|| FsError::corrupt(format!("inode {ino} of shard {s} out of range")))
    }

    fn outer(&self, s: u32, mut a: Attr) -> Result<Attr> {
        a.node = self.node(s, a.node)?;
        a.ino = self.ino(s, a.ino)?;
        Ok(a)
    }

    fn merged(&self, n: NodeId) -> Option<Arc<MergedDir>> {
        if n == ROOT {
            return Some(self.root.clone());
        }
        read(&self.tables).dirs.get(&n).cloned()
    }

    /// Positions in `among` (shard numbers, increasing) of the shards whose
    /// range meets `p`'s subtree.
    fn candidates(&self, p: &[u8], among: &[u32]) -> Vec<usize> {
        let pick = |r: &Route| among.binary_search(&r.shard).ok();
        if self.sorted {
            let lo = self
                .routes
                .partition_point(|r| tree_cmp(&r.last, p) == std::cmp::Ordering::Less);
            self.routes[lo..]
                .iter()
                .take_while(|r| holds(&r.first, &r.last, p))
                .filter_map(pick)
                .collect()
        } else {
            self.routes
                .iter()
                .filter(|r| holds(&r.first, &r.last, p))
                .filter_map(pick)
                .collect()
        }
    }

    /// The node of merged directory `md` in its `i`-th shard, found on
    /// first use by walking its path from that shard's root (so a merged
    /// directory does not open every shard holding it when it is looked
    /// up). `None` if the shard does not hold it after all (plain images'
    /// ranges only bound their contents).
    fn node_in(&self, md: &MergedDir, i: usize) -> Result<Option<NodeId>> {
        if let Some(&n) = md.nodes[i].get() {
            return Ok(Some(n));
        }
        let s = md.shards[i];
        let img = self.member(s)?;
        let mut a = img.getattr(ROOT)?;
        for comp in md.path.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
            a = match img.lookup(a.node, comp) {
                Ok(a) => a,
                Err(FsError::NotFound) => return Ok(None),
                Err(e) => return Err(e),
            };
        }
        if a.kind != FileKind::Dir {
            return Ok(None);
        }
        let canonical = self.dir_ino(md)?;
        self.tables
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .aliases
            .insert((s, a.ino), canonical);
        let _ = md.nodes[i].set(a.node);
        Ok(Some(a.node))
    }

    /// Looks `name` up in merged directory `md` (see the module doc for
    /// which shard wins); records the result if it is a merged directory.
    ///
    /// With a manifest's exact ranges the shards holding the path are
    /// known without asking them, and one split has no conflicts: only the
    /// first is asked. Otherwise every candidate is.
    fn merged_lookup(&self, md: &MergedDir, name: &[u8]) -> Result<Attr> {
        let p = child_path(&md.path, name);
        let cands = self.candidates(&p, &md.shards);
        let mut found: Vec<(usize, Attr)> = Vec::new();
        for &i in &cands {
            let Some(dir) = self.node_in(md, i)? else {
                continue;
            };
            match self.member(md.shards[i])?.lookup(dir, name) {
                Ok(a) => found.push((i, a)),
                Err(FsError::NotFound) => {}
                Err(e) => return Err(e),
            }
            if self.exact {
                break;
            }
        }
        let winner = match self.rule {
            OnConflict::Last => found.last(),
            OnConflict::Error | OnConflict::First => found.first(),
        };
        let Some((wi, wa)) = winner else {
            return Err(FsError::NotFound);
        };
        if wa.kind != FileKind::Dir {
            return self.outer(md.shards[*wi], wa.clone());
        }
        // The directories holding the path: with exact ranges every
        // candidate from the first found on (nodes resolved later).
        let dirs: Vec<(u32, Option<&Attr>)> = if self.exact {
            cands
                .iter()
                .skip_while(|&&i| i != *wi)
                .map(|&i| (md.shards[i], (i == *wi).then_some(wa)))
                .collect()
        } else {
            found
                .iter()
                .filter(|(_, a)| a.kind == FileKind::Dir)
                .map(|(i, a)| (md.shards[*i], Some(a)))
                .collect()
        };
        let (s0, a0) = dirs[0];
        let attr = self.outer(s0, a0.expect("first is found").clone())?;
        if dirs.len() > 1 {
            self.record(&p, &attr, md, &dirs)?;
        }
        Ok(attr)
    }

    fn record(
        &self,
        p: &[u8],
        attr: &Attr,
        parent: &MergedDir,
        dirs: &[(u32, Option<&Attr>)],
    ) -> Result<()> {
        let parent_ino = self.dir_ino(parent)?;
        let mut t = self.tables.write().unwrap_or_else(|e| e.into_inner());
        if t.dirs.contains_key(&attr.node) {
            return Ok(());
        }
        for (s, a) in dirs {
            if let Some(a) = a {
                t.aliases.insert((*s, a.ino), attr.ino);
            }
        }
        t.by_path.insert(p.to_vec(), attr.node);
        t.dirs.insert(
            attr.node,
            Arc::new(MergedDir {
                path: p.to_vec(),
                shards: dirs.iter().map(|(s, _)| *s).collect(),
                nodes: dirs
                    .iter()
                    .map(|(_, a)| {
                        let l = OnceLock::new();
                        if let Some(a) = a {
                            let _ = l.set(a.node);
                        }
                        l
                    })
                    .collect(),
                parent_ino,
            }),
        );
        Ok(())
    }

    /// The union inode number of a merged directory (its first shard's
    /// node is always known).
    fn dir_ino(&self, md: &MergedDir) -> Result<u64> {
        let s = md.shards[0];
        let n = *md.nodes[0].get().expect("first node known");
        let a = self.member(s)?.getattr(n)?;
        self.ino(s, a.ino)
    }

    /// Whether entry `e` of shard `s`'s listing of `md` is the one the
    /// union shows for its path.
    fn shows(&self, md: &MergedDir, s: u32, e: &DirEntry) -> Result<bool> {
        let p = child_path(&md.path, &e.name);
        let c = self.candidates(&p, &md.shards);
        if c.len() <= 1 {
            return Ok(true);
        }
        if e.kind == FileKind::Dir {
            if let Some(&canon) = read(&self.tables).by_path.get(&p) {
                return Ok(canon == self.node(s, e.node)?);
            }
        }
        let a = self.merged_lookup(md, &e.name)?;
        Ok(a.node == self.node(s, e.node)?)
    }

    /// Whether shard `s`'s listing of `md` can be skipped without opening
    /// the shard: it has no entries, or they all lie under one child that
    /// an earlier shard shows (the common case for the shards of one split
    /// under a directory spanning many of them, such as the root).
    fn skip_listing(&self, md: &MergedDir, s: u32) -> Result<bool> {
        let Some(r) = self.routes.iter().find(|r| r.shard == s) else {
            return Ok(true);
        };
        if !self.exact {
            return Ok(false);
        }
        let child = |p: &[u8]| -> Option<Vec<u8>> {
            if !packfs_format::shards::in_subtree(p, &md.path) || p == md.path.as_slice() {
                return None;
            }
            let rest = if md.path.is_empty() {
                p
            } else {
                &p[md.path.len() + 1..]
            };
            Some(rest.split(|&b| b == b'/').next().unwrap_or(rest).to_vec())
        };
        match (child(&r.first), child(&r.last)) {
            (Some(a), Some(b)) if a == b => {
                let c = self.candidates(&child_path(&md.path, &a), &md.shards);
                Ok(c.first().is_some_and(|&first| md.shards[first] != s))
            }
            _ => Ok(false),
        }
    }

    fn merged_readdir(
        &self,
        md: &MergedDir,
        cookie: u64,
        sink: &mut dyn FnMut(DirEntry) -> bool,
    ) -> Result<()> {
        let (mut i, mut inner) = if cookie <= 2 {
            (0usize, 2u64)
        } else {
            (
                (cookie >> COOKIE_SHIFT) as usize,
                cookie & ((1 << COOKIE_SHIFT) - 1),
            )
        };
        while i < md.shards.len() {
            let s = md.shards[i];
            let dir = match self.skip_listing(md, s)? {
                false => self.node_in(md, i)?,
                true => None,
            };
            let Some(dir) = dir else {
                i += 1;
                inner = 2;
                continue;
            };
            let mut full = false;
            let mut err = None;
            self.member(s)?.readdir(dir, inner, &mut |e| {
                match self.shows(md, s, &e) {
                    Ok(false) => return true,
                    Ok(true) => {}
                    Err(x) => {
                        err = Some(x);
                        return false;
                    }
                }
                if e.cookie >> COOKIE_SHIFT != 0 {
                    err = Some(FsError::corrupt(format!(
                        "cookie {} of shard {s} too large",
                        e.cookie
                    )));
                    return false;
                }
                let out = (|| {
                    Ok::<_, FsError>(DirEntry {
                        node: self.node(s, e.node)?,
                        ino: self.ino(s, e.ino)?,
                        cookie: ((i as u64) << COOKIE_SHIFT) | e.cookie,
                        name: e.name,
                        kind: e.kind,
                    })
                })();
                match out {
                    Ok(o) => {
                        if !sink(o) {
                            full = true;
                            return false;
                        }
                        true
                    }
                    Err(x) => {
                        err = Some(x);
                        false
                    }
                }
            })?;
            if let Some(e) = err {
                return Err(e);
            }
            if full {
                return Ok(());
            }
            i += 1;
            inner = 2;
        }
        Ok(())
    }
}

impl<I: Image> Image for UnionImage<I> {
    type Handle = UnionHandle<I::Handle>;

    fn getattr(&self, node: NodeId) -> Result<Attr> {
        if node == ROOT {
            let mut a = self.member(0)?.getattr(ROOT)?;
            a.ino = self.ino(0, a.ino)?;
            return Ok(a);
        }
        let (s, n) = self.split_node(node)?;
        let a = self.member(s)?.getattr(n)?;
        self.outer(s, a)
    }

    fn lookup(&self, parent: NodeId, name: &[u8]) -> Result<Attr> {
        if let Some(md) = self.merged(parent) {
            return self.merged_lookup(&md, name);
        }
        let (s, n) = self.split_node(parent)?;
        let a = self.member(s)?.lookup(n, name)?;
        self.outer(s, a)
    }

    fn readdir(
        &self,
        dir: NodeId,
        cookie: u64,
        sink: &mut dyn FnMut(DirEntry) -> bool,
    ) -> Result<()> {
        if let Some(md) = self.merged(dir) {
            return self.merged_readdir(&md, cookie, sink);
        }
        let (s, n) = self.split_node(dir)?;
        let mut err = None;
        self.member(s)?.readdir(n, cookie, &mut |e| {
            let out = (|| {
                Ok::<_, FsError>(DirEntry {
                    node: self.node(s, e.node)?,
                    ino: self.ino(s, e.ino)?,
                    cookie: e.cookie,
                    name: e.name,
                    kind: e.kind,
                })
            })();
            match out {
                Ok(o) => sink(o),
                Err(x) => {
                    err = Some(x);
                    false
                }
            }
        })?;
        err.map_or(Ok(()), Err)
    }

    fn open(&self, node: NodeId) -> Result<Self::Handle> {
        if node == ROOT {
            return Err(FsError::IsDir);
        }
        let (s, n) = self.split_node(node)?;
        Ok(UnionHandle {
            shard: s,
            h: self.member(s)?.open(n)?,
        })
    }

    fn extent(&self, node: NodeId) -> Result<Extent> {
        if node == ROOT {
            return Err(FsError::IsDir);
        }
        let (s, n) = self.split_node(node)?;
        let e = self.member(s)?.extent(n)?;
        Ok(Extent { part: s, ..e })
    }

    /// The part is the shard; a shard not opened yet is opened, as the
    /// read that follows would.
    fn will_read(&self, span: Extent) {
        if span.part as usize >= self.members.len() {
            return;
        }
        if let Ok(m) = self.member(span.part) {
            m.will_read(Extent { part: 0, ..span });
        }
    }

    fn read(&self, h: &Self::Handle, offset: u64, size: u32) -> Result<Vec<u8>> {
        self.member(h.shard)?.read(&h.h, offset, size)
    }

    fn prefetch(&self, h: &Self::Handle, offset: u64, len: u64) {
        if let Ok(m) = self.member(h.shard) {
            m.prefetch(&h.h, offset, len)
        }
    }

    /// A shard's unit `u` is `shard << UNIT_SHIFT | u`: shards hold
    /// consecutive runs of the tree, so this keeps image order within a
    /// shard, and a step by one never crosses into another shard's units.
    fn shared_unit(&self, h: &Self::Handle) -> Option<u64> {
        let u = self.member(h.shard).ok()?.shared_unit(&h.h)?;
        (u < 1 << UNIT_SHIFT).then_some(((h.shard as u64) << UNIT_SHIFT) | u)
    }

    /// Only in a shard that is open already: a reader has been there, and
    /// readahead never opens a shard on its own.
    fn prefetch_unit(&self, unit: u64) {
        let shard = (unit >> UNIT_SHIFT) as usize;
        if let Some(img) = self.members.get(shard).and_then(|m| m.img.get()) {
            img.prefetch_unit(unit & ((1 << UNIT_SHIFT) - 1));
        }
    }

    fn readlink(&self, node: NodeId) -> Result<Vec<u8>> {
        if node == ROOT {
            return Err(FsError::NotSymlink);
        }
        let (s, n) = self.split_node(node)?;
        self.member(s)?.readlink(n)
    }

    fn xattrs(&self, node: NodeId) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let (s, n) = if node == ROOT {
            (0, ROOT)
        } else {
            self.split_node(node)?
        };
        self.member(s)?.xattrs(n)
    }

    fn statfs(&self) -> StatFs {
        let bs = self.block_size().max(512);
        StatFs {
            blocks: self.total_bytes.div_ceil(bs as u64),
            files: self.total_entries,
            block_size: bs,
            name_max: 256,
        }
    }

    fn block_size(&self) -> u32 {
        self.member(0).map_or(131072, |m| m.block_size())
    }

    fn parent_ino(&self, dir: NodeId) -> Result<u64> {
        if dir == ROOT {
            return self.getattr(ROOT).map(|a| a.ino);
        }
        if let Some(md) = self.merged(dir) {
            return Ok(md.parent_ino);
        }
        let (s, n) = self.split_node(dir)?;
        let m = self.member(s)?;
        let pi = m.parent_ino(n)?;
        if Some(&pi) == self.members[s as usize].root_ino.get() {
            return self.getattr(ROOT).map(|a| a.ino);
        }
        if let Some(&a) = read(&self.tables).aliases.get(&(s, pi)) {
            return Ok(a);
        }
        self.ino(s, pi)
    }
}
