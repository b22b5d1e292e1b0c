//! The namespace of a stream too large for memory: sorted runs on disk,
//! merged in directory order for the metadata.
//!
//! # Design note
//!
//! Everything the metadata needs of an entry (its path, its inode, the
//! number its data was written under) is known once its member is read,
//! and nothing of it is needed again until the data pass is over. So it
//! can wait on disk. The reader stages members as ever ([`Stage`]); when
//! the stage's memory passes its share of [`PackOptions::memory`] it is
//! written out as a run, a file of records in SquashFS directory order
//! (paths compared component by component, by name bytes, so that a
//! directory comes before its entries and each directory's entries are
//! contiguous and sorted), and a fresh stage takes the members that follow.
//! Within a run the stage applied extraction's rules (a later member
//! replaces an earlier one, hard links share an inode); across runs the
//! merge applies them: records of one path from several runs are folded in
//! run order, which is stream order, with the stage's rules for
//! directories over directories and for sources in conflict. What only a
//! later run can show is checked as the merge goes: an entry under a path
//! whose final entry is not a directory is refused as extraction refuses
//! it.
//!
//! The runs are merged k-way into one stream of entries in depth-first
//! pre-order, directories implied by a path made where missing, and the
//! inode and directory tables are written from it in one pass with a stack
//! of the open directories, each holding only its own listing: a
//! directory's listing and inode are written when the stream leaves it,
//! after its entries (`squashfs::spilled`). Memory then grows with the
//! depth and the widest directory, not with the entry count.
//!
//! What else grows with the entry count goes to the same directory once
//! the namespace spills. The data writer is told so with the batches that
//! follow, and from then on writes each file's location (where its data
//! went, by data number) to a file there as soon as it is final, keeping
//! only those of the files whose blocks may still move (behind fragment
//! blocks being compressed); the metadata pass reads them back by data
//! number through a small cache of pages (`squashfs::data::LocLookup`). The
//! pass writes the inode and directory tables' finished blocks and the
//! export table's references to files there too, and they are copied into
//! the image at the end a bounded buffer at a time.
//!
//! What stays in memory per entry is then only the run being filled, and
//! for hard-linked inodes their identity. Per file with whole blocks the
//! data writer keeps the block sizes and the key of its blocks for dedup;
//! the dedup index of tails stops growing at its share of the budget (see
//! `squashfs::data`); per piece of the image its hash, for the hash record.
//!
//! A hard link names its target's inode, which the stage finds by path.
//! A target that went to disk with an earlier run is found there (each
//! run keeps every 1024th path with its offset, so a lookup reads at most
//! that many records): its record is given, in place, an identity that the
//! link's record shares, and the inode's names are counted by identity in
//! a map that holds hard-linked inodes only. A name of such an inode that a
//! later member replaces is still counted in its link count.
//!
//! The image of a stream that spills differs from the one packed in
//! memory only in its numbering: inodes are numbered in pre-order (a
//! directory before its entries, so that its number is known when its
//! subdirectories are written), the uid/gid and xattr tables in the order
//! inodes are written. A stream that never passes its budget is laid out
//! in memory as before, byte for byte.
//!
//! The runs live in a temporary directory beside the output (so in its
//! filesystem, whose free space the image needs anyway), removed when the
//! pack ends whichever way, an interrupt included (it stops the pack with
//! an error, which drops the directory).

use super::stage::{stage_error, OnConflict, Stage, StageError};
use crate::record::{Entries, Rec, Spilled, NO_LINK, SEP};
use crate::tree::Kind;
use crate::xattrs::XattrSets;
use crate::{PackError, PackOptions};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

/// The part of [`PackOptions::memory`] the stage may take before it spills:
/// the rest is for the data writer's file locations (until they go to disk
/// with the namespace) and dedup index, the encoded tables of a stream
/// that never spills and the merge's buffers.
pub(crate) fn stage_share(opts: &PackOptions) -> u64 {
    opts.memory / 4
}

/// Records of a run between two entries of its index.
const INDEX_EVERY: u64 = 1024;

/// First of the identities [`Runs::link_target`] gives inodes linked
/// across runs; a run's own are `run << 32 | stage inode`, below it.
const CROSS_LINKS: u64 = 1 << 63;

/// The runs written so far, in a temporary directory beside the output.
pub(crate) struct Runs {
    dir: tempfile::TempDir,
    count: u32,
    /// Each run's every [`INDEX_EVERY`]th record: its path and offset, for
    /// finding a hard link's target.
    index: Vec<Vec<(Vec<u8>, u64)>>,
    /// Names of each inode linked across runs, by identity: they are in
    /// several runs, so no one record knows them all.
    link_names: std::collections::HashMap<u64, u32>,
    next_link: u64,
    /// Xattr sets of every run's records.
    pub xattrs: XattrSets,
    on_conflict: OnConflict,
    /// The sources' names, for messages.
    names: Vec<PathBuf>,
}

impl Runs {
    /// A directory for runs beside `output`.
    pub(crate) fn create(
        output: &Path,
        on_conflict: OnConflict,
        names: Vec<PathBuf>,
    ) -> Result<Runs, PackError> {
        let parent = match output.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let dir = tempfile::Builder::new()
            .prefix(".packfs-spill-")
            .tempdir_in(parent)
            .map_err(|e| {
                PackError::output(output, "making a directory for the spilled namespace")(e)
            })?;
        Ok(Runs {
            dir,
            count: 0,
            index: Vec::new(),
            link_names: Default::default(),
            next_link: CROSS_LINKS,
            xattrs: XattrSets::default(),
            on_conflict,
            names,
        })
    }

    /// The directory the runs are in: what else of the pack goes to disk
    /// goes there too.
    pub(crate) fn dir(&self) -> std::sync::Arc<Path> {
        std::sync::Arc::from(self.dir.path())
    }

    /// Runs written so far.
    pub(crate) fn count(&self) -> u32 {
        self.count
    }

    fn run_path(&self, k: u32) -> PathBuf {
        self.dir.path().join(format!("run-{k}"))
    }

    /// Writes the entries of `stage` as the next run.
    pub(crate) fn spill(&mut self, stage: &Stage) -> Result<(), PackError> {
        let path = self.run_path(self.count);
        let err = |e| PackError::output(&path, "writing the spilled namespace")(e);
        let file = File::create(&path).map_err(err)?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let mut buf = Vec::new();
        let run = self.count;
        let mut failed = None;
        let (mut at, mut n) = (0u64, 0u64);
        let mut index = Vec::new();
        stage.sorted_records(run, &mut self.xattrs, |rec| {
            if failed.is_some() {
                return;
            }
            if n.is_multiple_of(INDEX_EVERY) {
                index.push((rec.path.clone(), at));
            }
            n += 1;
            buf.clear();
            rec.encode(&mut buf);
            at += buf.len() as u64;
            if let Err(e) = out.write_all(&buf) {
                failed = Some(e);
            }
        });
        if let Some(e) = failed {
            return Err(err(e));
        }
        out.flush().map_err(err)?;
        for (id, names) in stage.cross_links() {
            *self.link_names.entry(id).or_insert(0) += names;
        }
        self.index.push(index);
        self.count += 1;
        Ok(())
    }

    /// The entry at `path` (components joined by [`SEP`]) in the latest
    /// run holding it, for a hard link to it: with the identity its
    /// inode's names share, which its record is given if it had none, and
    /// one more name counted. `None` when no run holds the path.
    pub(crate) fn link_target(&mut self, path: &[u8]) -> Result<Option<(Rec, u64)>, PackError> {
        for k in (0..self.count).rev() {
            let Some((rec, at)) = self.find(k, path)? else {
                continue;
            };
            if rec.kind == Kind::Dir {
                return Ok(Some((rec, NO_LINK)));
            }
            let id = match rec.link {
                NO_LINK => {
                    let id = self.next_link;
                    self.next_link += 1;
                    let run = self.run_path(k);
                    let patch = |e| PackError::output(&run, "writing the spilled namespace")(e);
                    let f = std::fs::OpenOptions::new()
                        .write(true)
                        .open(&run)
                        .map_err(patch)?;
                    let link_at = at + rec.encoded_len() - 12;
                    std::os::unix::fs::FileExt::write_all_at(&f, &id.to_le_bytes(), link_at)
                        .map_err(patch)?;
                    id
                }
                id => id,
            };
            self.link_names.entry(id).or_insert(rec.nlink);
            return Ok(Some((rec, id)));
        }
        Ok(None)
    }

    /// The record of `path` in run `k` and its offset, if there.
    fn find(&self, k: u32, path: &[u8]) -> Result<Option<(Rec, u64)>, PackError> {
        let index = &self.index[k as usize];
        let after = index.partition_point(|(p, _)| p.as_slice() <= path);
        if after == 0 {
            return Ok(None);
        }
        let mut at = index[after - 1].1;
        let run = self.run_path(k);
        let err = |e| PackError::output(&run, "reading the spilled namespace")(e);
        let mut f = File::open(&run).map_err(err)?;
        std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(at)).map_err(err)?;
        let mut r = BufReader::with_capacity(64 << 10, f);
        while let Some(rec) = Rec::decode(&mut r).map_err(err)? {
            match rec.path.as_slice().cmp(path) {
                std::cmp::Ordering::Less => at += rec.encoded_len(),
                std::cmp::Ordering::Equal => return Ok(Some((rec, at))),
                std::cmp::Ordering::Greater => break,
            }
        }
        Ok(None)
    }

    /// The names of the inode a record of identity `link` belongs to, when
    /// it is linked across runs.
    pub(crate) fn link_names(&self, link: u64) -> Option<u32> {
        self.link_names.get(&link).copied()
    }

    /// `comps` as a record's path.
    pub(crate) fn path_of(comps: &[&[u8]]) -> Vec<u8> {
        comps.join(&SEP)
    }

    /// The runs merged: every entry once, in depth-first pre-order.
    pub(crate) fn merged(&self) -> Result<Merged<'_>, PackError> {
        let mut runs = Vec::with_capacity(self.count as usize);
        let mut heap = BinaryHeap::new();
        let mut heads = Vec::with_capacity(self.count as usize);
        for k in 0..self.count {
            let path = self.run_path(k);
            let file = File::open(&path)
                .map_err(|e| PackError::output(&path, "reading the spilled namespace")(e))?;
            let mut r = RunReader {
                path,
                input: BufReader::with_capacity(256 << 10, file),
            };
            let mut head = r.next()?;
            if let Some(rec) = &mut head {
                heap.push(Reverse((std::mem::take(&mut rec.path), k as usize)));
            }
            heads.push(head);
            runs.push(r);
        }
        Ok(Merged {
            runs: self,
            readers: runs,
            heads,
            heap,
            started: false,
            stack: Vec::new(),
            last_leaf: None,
            pending: None,
        })
    }
}

struct RunReader {
    path: PathBuf,
    input: BufReader<File>,
}

impl RunReader {
    fn next(&mut self) -> Result<Option<Rec>, PackError> {
        Rec::decode(&mut self.input)
            .map_err(|e| PackError::output(&self.path, "reading the spilled namespace")(e))
    }
}

/// The path of each run's head record, smallest first, ties in run order.
type Heads = BinaryHeap<Reverse<(Vec<u8>, usize)>>;

/// The runs' entries merged, in depth-first pre-order with each
/// directory's entries sorted, directories implied by paths made: what
/// `squashfs::spilled` writes the metadata from.
pub(crate) struct Merged<'r> {
    runs: &'r Runs,
    readers: Vec<RunReader>,
    /// Each run's next record, its path in [`Merged::heap`].
    heads: Vec<Option<Rec>>,
    heap: Heads,
    started: bool,
    /// The path of each open directory below the root, outermost first.
    stack: Vec<Vec<u8>>,
    /// The last entry given that is not a directory, and its kind.
    last_leaf: Option<(Vec<u8>, Kind)>,
    /// An entry to give after the implied directories being given.
    pending: Option<std::collections::VecDeque<Rec>>,
}

impl Merged<'_> {
    /// [`Entries::next_entry`].
    fn step(&mut self) -> Result<Option<Rec>, PackError> {
        if let Some(q) = &mut self.pending {
            if let Some(r) = q.pop_front() {
                return Ok(Some(r));
            }
            self.pending = None;
        }
        let group = self.next_group()?;
        if !self.started {
            self.started = true;
            let root_given = group.as_ref().is_some_and(|g| g[0].path.is_empty());
            if !root_given {
                // The root is implied; the group comes after it.
                let root = Rec::implied_dir(Vec::new(), 0);
                if let Some(g) = group {
                    self.pending = Some(self.place(g)?.into());
                }
                return Ok(Some(root));
            }
        }
        let Some(g) = group else {
            return Ok(None);
        };
        let mut out: std::collections::VecDeque<Rec> = self.place(g)?.into();
        let first = out.pop_front();
        if !out.is_empty() {
            self.pending = Some(out);
        }
        Ok(first)
    }

    /// The records of the next path, in run order.
    fn next_group(&mut self) -> Result<Option<Vec<Rec>>, PackError> {
        let Some(Reverse((path, k))) = self.heap.pop() else {
            return Ok(None);
        };
        let mut group = vec![self.advance(k, path.clone())?];
        while let Some(Reverse((p, _))) = self.heap.peek() {
            if *p != path {
                break;
            }
            let Some(Reverse((p, k))) = self.heap.pop() else {
                break;
            };
            group.push(self.advance(k, p)?);
        }
        Ok(Some(group))
    }

    /// Run `k`'s head record, whose path the heap gave back, replaced by
    /// the run's next.
    fn advance(&mut self, k: usize, path: Vec<u8>) -> Result<Rec, PackError> {
        let mut next = self.readers[k].next()?;
        if let Some(rec) = &mut next {
            self.heap.push(Reverse((std::mem::take(&mut rec.path), k)));
        }
        let mut rec = std::mem::replace(&mut self.heads[k], next).expect("a run's head");
        rec.path = path;
        Ok(rec)
    }

    /// The entry a path's records leave, after the directories its path
    /// implies that are not open yet; or the error extraction would give.
    fn place(&mut self, group: Vec<Rec>) -> Result<Vec<Rec>, PackError> {
        let rec = self.fold(group)?;
        if rec.path.is_empty() {
            return match rec.kind {
                Kind::Dir => Ok(vec![rec]),
                _ => Err(self.error(&rec, StageError::RootNotDir)),
            };
        }
        let comps: Vec<&[u8]> = rec.path.split(|&b| b == SEP).collect();
        // Open directories that are not on this path are done.
        let mut open = 0;
        while open < self.stack.len()
            && open + 1 < comps.len()
            && self.stack[open].len() <= rec.path.len()
            && is_prefix(&self.stack[open], &rec.path)
        {
            open += 1;
        }
        self.stack.truncate(open);
        let mut out = Vec::new();
        let mut at = self.stack.last().cloned().unwrap_or_default();
        for c in &comps[open..comps.len() - 1] {
            if !at.is_empty() {
                at.push(SEP);
            }
            at.extend_from_slice(c);
            if let Some((leaf, kind)) = &self.last_leaf {
                if *leaf == at {
                    let shown = String::from_utf8_lossy(&Rec::implied_dir(at.clone(), 0).display())
                        .into_owned();
                    let e = match kind {
                        Kind::Symlink => StageError::UnderSymlink { link: shown },
                        _ => StageError::ParentNotDir { parent: shown },
                    };
                    return Err(self.error(&rec, e));
                }
            }
            out.push(Rec::implied_dir(at.clone(), rec.source));
            self.stack.push(at.clone());
        }
        if rec.kind == Kind::Dir {
            self.stack.push(rec.path.clone());
        } else {
            self.last_leaf = Some((rec.path.clone(), rec.kind));
        }
        out.push(rec);
        Ok(out)
    }

    /// One path's records, in stream order, folded by the stage's rules.
    fn fold(&self, group: Vec<Rec>) -> Result<Rec, PackError> {
        let mut it = group.into_iter();
        let mut cur = it.next().expect("a group holds a record");
        for r in it {
            let take = if cur.kind == Kind::Dir && r.kind == Kind::Dir {
                !cur.explicit || cur.source == r.source || self.runs.on_conflict == OnConflict::Last
            } else if cur.source != r.source && cur.explicit {
                match self.runs.on_conflict {
                    OnConflict::Error => {
                        return Err(self.error(&r, StageError::Conflict { first: cur.source }))
                    }
                    OnConflict::First => false,
                    OnConflict::Last => true,
                }
            } else {
                true
            };
            if take {
                cur = r;
            }
        }
        Ok(cur)
    }

    fn error(&self, rec: &Rec, e: StageError) -> PackError {
        let names = &self.runs.names;
        let source = names.get(rec.source as usize).cloned().unwrap_or_default();
        stage_error(&source, Some(&rec.display()), e, names)
    }
}

impl Entries for Merged<'_> {
    fn next_entry(&mut self) -> Result<Option<Rec>, PackError> {
        self.step()
    }
}

impl Spilled for Runs {
    fn entries(&self) -> Result<Box<dyn Entries + '_>, PackError> {
        Ok(Box::new(self.merged()?))
    }

    fn xattr_sets(&self) -> &XattrSets {
        &self.xattrs
    }

    fn link_names(&self, link: u64) -> Option<u32> {
        Runs::link_names(self, link)
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// Whether directory path `dir` holds `path`.
fn is_prefix(dir: &[u8], path: &[u8]) -> bool {
    path.len() > dir.len() && path.starts_with(dir) && path[dir.len()] == SEP
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::stage::{Added, Entry};

    fn p(s: &str) -> Vec<&[u8]> {
        s.split('/').map(str::as_bytes).collect()
    }

    fn file(data: u32) -> Entry {
        let mut e = Entry::new(Kind::File, 0);
        e.data = data;
        e
    }

    fn merged_paths(runs: &Runs) -> Result<Vec<(String, Kind, bool)>, PackError> {
        let mut m = runs.merged()?;
        let mut out = Vec::new();
        while let Some(r) = m.step()? {
            out.push((String::from_utf8(r.display()).unwrap(), r.kind, r.explicit));
        }
        Ok(out)
    }

    #[test]
    fn records_round_trip() {
        let mut r = Rec::implied_dir(b"a\0b".to_vec(), 3);
        r.kind = Kind::Symlink;
        r.target = b"../x".to_vec();
        r.mtime = -5;
        r.link = 7 << 32 | 9;
        let mut buf = Vec::new();
        r.encode(&mut buf);
        r.encode(&mut buf);
        let mut input = &buf[..];
        assert_eq!(Rec::decode(&mut input).unwrap(), Some(r.clone()));
        assert_eq!(Rec::decode(&mut input).unwrap(), Some(r));
        assert_eq!(Rec::decode(&mut input).unwrap(), None);
        assert_eq!(Rec::implied_dir(b"a\0bc".to_vec(), 0).name(), b"bc");
    }

    #[test]
    fn runs_merge_in_directory_order_with_later_members_winning() {
        let dir = tempfile::tempdir().unwrap();
        let mut runs =
            Runs::create(&dir.path().join("out.sqfs"), OnConflict::Error, vec![]).unwrap();
        let mut s = Stage::new(OnConflict::Error);
        s.add(&p("d/b"), file(0)).unwrap();
        s.add(&p("d.x"), file(1)).unwrap();
        s.add(&p("d/a/z"), file(2)).unwrap();
        runs.spill(&s).unwrap();
        let mut s = Stage::new(OnConflict::Error);
        s.add(&p("d/b"), Entry::new(Kind::Dir, 0)).unwrap();
        s.add(&p("d/a/y"), file(3)).unwrap();
        s.add(&p("c"), file(4)).unwrap();
        runs.spill(&s).unwrap();
        let got = merged_paths(&runs).unwrap();
        let want = [
            ("", Kind::Dir, false),
            ("c", Kind::File, true),
            ("d", Kind::Dir, false),
            ("d/a", Kind::Dir, false),
            ("d/a/y", Kind::File, true),
            ("d/a/z", Kind::File, true),
            ("d/b", Kind::Dir, true),
            ("d.x", Kind::File, true),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|(p, k, e)| (p.to_string(), *k, *e))
            .collect();
        assert_eq!(got, want);
        // Nothing is left behind.
        let spill_dir = runs.dir.path().to_path_buf();
        drop(runs);
        assert!(!spill_dir.exists());
    }

    #[test]
    fn an_entry_under_a_later_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut runs =
            Runs::create(&dir.path().join("out.sqfs"), OnConflict::Error, vec![]).unwrap();
        let mut s = Stage::new(OnConflict::Error);
        s.add(&p("d/x"), file(0)).unwrap();
        runs.spill(&s).unwrap();
        let mut s = Stage::new(OnConflict::Error);
        assert!(matches!(s.add(&p("d"), file(1)), Ok(Added::Inode(_))));
        runs.spill(&s).unwrap();
        let e = merged_paths(&runs).unwrap_err().to_string();
        assert!(e.contains("d is not a directory"), "{e}");
    }

    #[test]
    fn sources_in_conflict_across_runs_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let names = vec![PathBuf::from("one.tar"), PathBuf::from("two.tar")];
        let mut runs =
            Runs::create(&dir.path().join("out.sqfs"), OnConflict::Error, names).unwrap();
        let mut s = Stage::new(OnConflict::Error);
        s.add(&p("a"), file(0)).unwrap();
        runs.spill(&s).unwrap();
        let mut s = Stage::new(OnConflict::Error);
        let mut e = file(1);
        e.source = 1;
        s.add(&p("a"), e).unwrap();
        runs.spill(&s).unwrap();
        assert!(matches!(
            merged_paths(&runs),
            Err(PackError::SourceConflict { .. })
        ));
    }
}
