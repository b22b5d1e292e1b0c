//! The reader of a pack from sources: one thread reading the sources in
//! order (directories walked, tar streams parsed, ZIPs by their central
//! directory) into the namespace ([`super::stage`]) and the data batches
//! the writer compresses (see the module doc of `super`).

use super::decompress::{self, Compression, Counted};
use super::source::{Input, Source, SourceOptions};
use super::spill::{stage_share, Runs};
use super::stage::{self, stage_error, Added, Entry, Stage, StageError};
use super::tar::{self, MemberKind, TarError, TarErrorKind, TarStream};
use super::zip;
use crate::exclude::Excludes;
use crate::squashfs::data::{file_pieces, piece_spans, Batch, Piece, PieceData, BATCH_PIECES};
use crate::tree::{Kind, Tree};
use crate::walk;
use crate::xattrs::Xattr;
use crate::{PackError, PackOptions};
use packfs_format::squashfs::xattr::split_name;
use packfs_format::squashfs::MAX_NAME_LEN;
use packfs_format::zip::entry::CentralEntry;
use packfs_format::zip::unzip::{decode_name, entry_mtime, kind_and_perm};
use std::ffi::OsStr;
use std::io::{Cursor, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;

use super::dir_walk::{self, Namespace};

/// Reads the sources in order into the namespace and the data batches.
pub(super) struct Reader<'a> {
    opts: &'a PackOptions,
    so: &'a SourceOptions,
    pub(super) stage: Stage,
    excludes: Excludes,
    tx: SyncSender<Result<Batch, PackError>>,
    batch: Vec<Piece>,
    batch_bytes: u64,
    /// Input bytes read and not yet reported with a batch.
    unreported: u64,
    next_data: u32,
    bs: u64,
    /// Bytes of the archives (as stored) and of the files read.
    pub(super) input_bytes: u64,
    pub(super) file_bytes: u64,
    /// (dev, ino) of the image being written, left out of directories.
    skip: Option<(u64, u64)>,
    /// The sources' names, for conflicts.
    names: Vec<PathBuf>,
    /// `--expand-nested`.
    expand: Option<globset::GlobSet>,
    /// The image's final name: the spilled namespace goes beside it.
    output: PathBuf,
    /// The runs spilled so far, once the stage has passed its share of
    /// [`PackOptions::memory`].
    runs: Option<Runs>,
    /// How directories are walked.
    pub(super) dir_walk: DirWalk,
    /// What a shard's run held (with [`DirWalk::Run`]).
    pub(super) run: Option<packfs_format::shards::Shard>,
}

/// How a reader walks a directory.
pub(crate) enum DirWalk {
    /// Into a tree first, or when that is too large, again straight into
    /// the stage.
    Tree,
    /// Straight into the stage (see [`dir_walk`]): the caller's own walk
    /// already found the tree too large.
    Streamed,
    /// Shard `k` of a split measured on disk: its run of the tree, with
    /// the directories leading to it.
    Run(std::sync::Arc<crate::cut::Cut>, usize),
}

/// What the reader read: the namespace, and the bytes it took in.
pub(super) struct SourcesRead {
    pub stage: Stage,
    /// The namespace, when it spilled: `stage` is then empty.
    pub runs: Option<Runs>,
    /// Bytes of the archives, as stored.
    pub input_bytes: u64,
    /// Bytes of the files read.
    pub file_bytes: u64,
    /// A shard's run, as its manifest records it (with [`DirWalk::Run`]).
    pub run: Option<packfs_format::shards::Shard>,
}

/// Bytes of a batch read from a stream. A directory's batches hold paths
/// and are read on the pool; a stream's hold the bytes, and up to four are
/// alive at once (being filled, queued, two being compressed), so they are
/// smaller: the pack's memory stays below a directory pack's. A constant,
/// as the image's layout follows the batches.
const STREAM_BATCH_BYTES: u64 = 4 << 20;

/// How deep `--expand-nested` follows archives within archives.
const MAX_NESTING: u32 = 4;

/// What a member archive's name loses to become a directory's.
const ARCHIVE_EXTENSIONS: [&str; 12] = [
    ".tar.gz", ".tar.zst", ".tar.xz", ".tar.bz2", ".tar.lz4", ".tgz", ".tzst", ".txz", ".tbz2",
    ".tbz", ".tar", ".tlz4",
];

/// The stream an archive's members come from: where in the image they go
/// and, for messages, what it is.
struct StreamCx {
    /// The archive (`OUTER:MEMBER` for a nested one).
    name: PathBuf,
    /// The directory its members go under (a nested archive's, with
    /// `--expand-nested`; empty for a source).
    prefix: Vec<Vec<u8>>,
    /// How deep it is nested in the source.
    depth: u32,
    /// The source's number, `k` of [`Reader::source`].
    source: u16,
    compression: Compression,
    /// Whether a read of the file (not the decoder) failed.
    failed: Arc<std::sync::atomic::AtomicBool>,
    /// Bytes read from the file (top-level archives), for progress.
    read: Option<Arc<std::sync::atomic::AtomicU64>>,
}

impl StreamCx {
    /// The path of a member whose own path is `own`: under [`Self::prefix`].
    fn joined(&self, own: Vec<&[u8]>) -> Vec<Vec<u8>> {
        self.prefix
            .iter()
            .cloned()
            .chain(own.into_iter().map(<[u8]>::to_vec))
            .collect()
    }

    fn error(&self, e: TarError) -> PackError {
        let archive = |offset, member: Option<Vec<u8>>, message| PackError::Archive {
            path: self.name.clone(),
            member: member.map(|m| String::from_utf8_lossy(&m).into_owned()),
            offset,
            message,
        };
        match e.kind {
            TarErrorKind::Io(io) if self.failed.load(Ordering::Relaxed) => {
                PackError::io(&self.name)(io)
            }
            TarErrorKind::Io(io) => archive(
                Some(e.offset),
                e.member,
                format!("{} stream: {io}", self.compression.name()),
            ),
            TarErrorKind::Bad(m) | TarErrorKind::Truncated(m) => {
                archive(Some(e.offset), e.member, m)
            }
        }
    }
}

/// The data of the member a tar stream is at, as a stream of its own.
struct MemberData<'s, R: Read>(&'s mut TarStream<R>);

impl<R: Read> Read for MemberData<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read_data(buf).map_err(|e| match e.kind {
            TarErrorKind::Io(io) => io,
            _ => std::io::Error::new(std::io::ErrorKind::UnexpectedEof, e.to_string()),
        })
    }
}

/// Sniffs `input`'s compression and checks that it holds a tar archive.
fn open_tar<'a>(
    name: &Path,
    mut input: Box<dyn Read + Send + 'a>,
    failed: &std::sync::atomic::AtomicBool,
    nested: bool,
    threads: usize,
) -> Result<(Compression, TarStream<Box<dyn Read + Send + 'a>>), PackError> {
    let head = decompress::peek(&mut input, 6).map_err(PackError::io(name))?;
    let c = Compression::sniff(&head);
    let mut dec = decompress::decoder(c, Cursor::new(head).chain(input), nested, threads)
        .map_err(PackError::io(name))?;
    let archive_err = |offset: Option<u64>, message: String| PackError::Archive {
        path: name.to_path_buf(),
        member: None,
        offset,
        message,
    };
    let first = match decompress::peek(&mut dec, 1024) {
        Ok(b) => b,
        Err(e) if failed.load(Ordering::Relaxed) => return Err(PackError::io(name)(e)),
        Err(e) => return Err(archive_err(Some(0), format!("{} stream: {e}", c.name()))),
    };
    if !tar::looks_like_tar(&first) {
        return Err(archive_err(
            None,
            if first.is_empty() && c == Compression::None {
                "empty: neither a directory nor an archive".into()
            } else if zip::looks_like_zip(&first) {
                "a ZIP archive in a stream: a ZIP's directory is at its end, so packfs reads a \
                 ZIP from a file or an object (not from stdin, a compressed stream or another \
                 archive)"
                    .into()
            } else if c == Compression::None {
                "neither a directory, a ZIP nor a tar archive (plain, or compressed with gzip, zstd, xz, \
                 bzip2 or lz4)"
                    .into()
            } else {
                format!("{} stream that does not hold a tar archive", c.name())
            },
        ));
    }
    let inner: Box<dyn Read + Send + 'a> = Box::new(Cursor::new(first).chain(dec));
    Ok((c, TarStream::new(inner)))
}

/// The writer stopped taking batches: its own error is the one to report.
fn writer_gone() -> PackError {
    PackError::Interrupted
}

impl<'a> Reader<'a> {
    pub(super) fn new(
        opts: &'a PackOptions,
        so: &'a SourceOptions,
        tx: SyncSender<Result<Batch, PackError>>,
        bs: u64,
        skip: Option<(u64, u64)>,
        names: Vec<PathBuf>,
        output: &Path,
    ) -> Result<Self, PackError> {
        Ok(Reader {
            opts,
            so,
            stage: Stage::new(so.on_conflict),
            excludes: Excludes::new(&opts.excludes)?,
            tx,
            batch: Vec::new(),
            batch_bytes: 0,
            unreported: 0,
            next_data: 0,
            bs,
            input_bytes: 0,
            file_bytes: 0,
            skip,
            names,
            output: output.to_path_buf(),
            runs: None,
            dir_walk: DirWalk::Tree,
            run: None,
            expand: match so.expand_nested.is_empty() {
                true => None,
                false => {
                    let mut b = globset::GlobSetBuilder::new();
                    for g in &so.expand_nested {
                        b.add(globset::Glob::new(g).map_err(|e| {
                            PackError::InvalidOption(format!("--expand-nested {g:?}: {e}"))
                        })?);
                    }
                    Some(
                        b.build().map_err(|e| {
                            PackError::InvalidOption(format!("--expand-nested: {e}"))
                        })?,
                    )
                }
            },
        })
    }

    /// Reads `sources` in order, each from its input (see [`Self::source`]),
    /// and sends the last batch. Dropping the reader then closes the
    /// channel: the writer sees the end of the batches.
    pub(super) fn read_all(
        mut self,
        sources: &[Source],
        inputs: Vec<Option<Input>>,
    ) -> Result<SourcesRead, PackError> {
        for (k, (src, input)) in sources.iter().zip(inputs).enumerate() {
            self.source(k as u16, src, input)?;
        }
        self.flush()?;
        if let Some(runs) = &mut self.runs {
            runs.spill(&self.stage)?;
            self.stage = Stage::new(self.so.on_conflict);
        }
        Ok(SourcesRead {
            stage: self.stage,
            runs: self.runs,
            input_bytes: self.input_bytes,
            file_bytes: self.file_bytes,
            run: self.run,
        })
    }

    pub(super) fn flush(&mut self) -> Result<(), PackError> {
        if self.batch.is_empty() && self.unreported == 0 {
            return Ok(());
        }
        let b = Batch {
            pieces: std::mem::take(&mut self.batch),
            progress: std::mem::take(&mut self.unreported),
            spill_dir: self.runs.as_ref().map(Runs::dir),
        };
        self.batch_bytes = 0;
        self.tx.send(Ok(b)).map_err(|_| writer_gone())
    }

    fn emit(&mut self, p: Piece) -> Result<(), PackError> {
        self.batch_bytes += p.nblocks * self.bs;
        self.batch.push(p);
        if self.batch_bytes >= STREAM_BATCH_BYTES || self.batch.len() >= BATCH_PIECES {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the stage out as a run (see [`super::spill`]) once it holds
    /// more than its share of the budget, and starts a fresh one. Called
    /// between members of a tar stream only: a directory's walk and a
    /// ZIP's members refer to inodes of the stage until they are done.
    fn spill_if_full(&mut self) -> Result<(), PackError> {
        if self.stage.memory() <= stage_share(self.opts) {
            return Ok(());
        }
        let runs = match &mut self.runs {
            Some(r) => r,
            None => self.runs.insert(Runs::create(
                &self.output,
                self.so.on_conflict,
                self.names.clone(),
            )?),
        };
        runs.spill(&self.stage)?;
        log::debug!("namespace spilled: run {}", runs.count());
        self.stage = Stage::new(self.so.on_conflict);
        Ok(())
    }

    fn cancelled(&self) -> Result<(), PackError> {
        match crate::cancelled(self.opts) {
            true => Err(PackError::Interrupted),
            false => Ok(()),
        }
    }

    pub(super) fn source(
        &mut self,
        k: u16,
        src: &Source,
        input: Option<Input>,
    ) -> Result<(), PackError> {
        let name = src.display();
        match (src, input) {
            (Source::Dir(d), _) => self.directory(k, d),
            (_, Some(Input::Remote(r))) if zip::looks_like_zip(r.head()) => {
                self.zip(k, &name, &r.into_zip())
            }
            (_, Some(Input::Remote(r))) => self.archive(k, &name, r.into_stream()?),
            (_, Some(Input::File(file))) => {
                let mut head = [0u8; 4];
                let n = std::os::unix::fs::FileExt::read_at(&file, &mut head, 0)
                    .map_err(PackError::io(&name))?;
                if zip::looks_like_zip(&head[..n]) {
                    let z = zip::ZipFile::new(file).map_err(PackError::io(&name))?;
                    self.zip(k, &name, &z)
                } else {
                    self.archive(k, &name, file)
                }
            }
            (_, None) => self.archive(k, &name, std::io::stdin()),
        }
    }

    /// A directory among several sources: walked as `pack DIR` walks it,
    /// its files read by path on the pool; a tree too large for memory
    /// walked again straight into the stage (see [`dir_walk`]).
    fn directory(&mut self, k: u16, dir: &Path) -> Result<(), PackError> {
        match &self.dir_walk {
            DirWalk::Tree => {}
            DirWalk::Streamed => return dir_walk::stream(self, self.opts, self.skip, k, dir),
            DirWalk::Run(cut, shard) => {
                let (cut, shard) = (cut.clone(), *shard);
                let run = dir_walk::stream_run(self, self.opts, k, dir, &cut, shard)?;
                self.run = Some(run);
                return Ok(());
            }
        }
        let Some(tree) = walk::walk_within(dir, self.opts, self.skip, walk::tree_share(self.opts))?
        else {
            log::info!(
                "{}: a tree larger than an eighth of --memory: walked again into \
                 the namespace that spills to disk",
                dir.display()
            );
            return dir_walk::stream(self, self.opts, self.skip, k, dir);
        };
        let mut stage_of = vec![u32::MAX; tree.inodes.len()];
        // The root's metadata is the directory's.
        let root = tree.nodes[0].inode;
        stage_of[root as usize] = match self.stage.add(&[], entry_of(&tree, root, k)) {
            Ok(Added::Inode(i)) => i,
            _ => unreachable!("a directory over the root always merges"),
        };
        for node in tree.pre_order() {
            self.cancelled()?;
            let rel = tree.rel_path(node);
            let comps: Vec<&[u8]> = rel.iter().map(|c| c.as_bytes()).collect();
            let ino = tree.nodes[node as usize].inode;
            let staged = stage_of[ino as usize];
            let added = if staged != u32::MAX {
                // A further name of a hard-linked file.
                let first = tree.rel_path(tree.inodes[ino as usize].node);
                let target: Vec<&[u8]> = first.iter().map(|c| c.as_bytes()).collect();
                self.stage.link(&comps, &target, k)
            } else {
                self.stage.add(&comps, entry_of(&tree, ino, k))
            }
            .map_err(|e| stage_error(&dir.join(&rel), None, e, &self.names))?;
            let Added::Inode(si) = added else { continue };
            stage_of[ino as usize] = si;
            if staged != u32::MAX || tree.inodes[ino as usize].kind != Kind::File {
                continue;
            }
            let i = &tree.inodes[ino as usize];
            let id = self.next_id()?;
            self.stage.set_data(si, id);
            let path = Arc::from(tree.data_path(ino).as_path());
            self.emit_file(id, path, i.size, i.maybe_sparse, i.src_ino)?;
        }
        Ok(())
    }

    /// Sends the pieces of the file at `path`, read there on the pool
    /// under the number `id` (`maybe_sparse` and `src_ino` as in
    /// [`PieceData::File`]).
    fn emit_file(
        &mut self,
        id: u32,
        path: Arc<Path>,
        size: u64,
        maybe_sparse: bool,
        src_ino: u64,
    ) -> Result<(), PackError> {
        for piece in file_pieces(id, path, size, self.bs, (maybe_sparse, src_ino)) {
            self.emit(piece)?;
        }
        self.file_bytes += size;
        self.unreported += size;
        Ok(())
    }

    fn next_id(&mut self) -> Result<u32, PackError> {
        let id = self.next_data;
        self.next_data = self
            .next_data
            .checked_add(1)
            .filter(|&n| n != stage::NO_DATA)
            .ok_or_else(|| PackError::InvalidOption("more than 2^32 - 2 files".into()))?;
        Ok(id)
    }

    /// An archive: its compression told by its first bytes, then read as
    /// a tar stream.
    fn archive(&mut self, k: u16, name: &Path, input: impl Read + Send) -> Result<(), PackError> {
        let input = Counted::new(input);
        let (read, failed) = (input.read.clone(), input.failed.clone());
        let (c, mut stream) = open_tar(name, Box::new(input), &failed, false, self.opts.threads)?;
        let cx = StreamCx {
            name: name.to_path_buf(),
            prefix: Vec::new(),
            depth: 0,
            source: k,
            compression: c,
            failed,
            read: Some(read),
        };
        self.members(&mut stream, &cx)?;
        let now = cx.read.as_ref().map_or(0, |r| r.load(Ordering::Relaxed));
        self.input_bytes += now;
        Ok(())
    }

    /// Adds the members of `stream` under the directory `cx.prefix`.
    fn members<R: Read + Send>(
        &mut self,
        stream: &mut TarStream<R>,
        cx: &StreamCx,
    ) -> Result<(), PackError> {
        let (name, k) = (cx.name.as_path(), cx.source);
        let top = cx.depth == 0;
        let mut notes = Notes::default();
        let mut reported = 0u64;
        loop {
            self.cancelled()?;
            self.spill_if_full()?;
            self.progress(cx, &mut reported);
            let Some(m) = stream.next_member().map_err(|e| cx.error(e))? else {
                break;
            };
            let member = |e: StageError| stage_error(name, Some(&m.path), e, &self.names);
            let Some(own) = self.member_path(&m.path, name, &mut notes, top)? else {
                continue;
            };
            let full = cx.joined(own);
            let comps: Vec<&[u8]> = full.iter().map(Vec::as_slice).collect();
            if let Some(t) = m.unknown_type {
                notes.unknown_type(t, name, &m.path);
            }
            if self.excluded(&comps, m.kind == MemberKind::Dir) {
                continue;
            }
            if m.kind == MemberKind::HardLink {
                let Some(target) = self.member_path(&m.link, name, &mut notes, top)? else {
                    continue;
                };
                let target = cx.joined(target);
                let target: Vec<&[u8]> = target.iter().map(Vec::as_slice).collect();
                if self.excluded(&target, false) {
                    // Its target was left out: so is the link (tar -x would
                    // fail to make it and go on).
                    notes.excluded_link(name, &m.path);
                    continue;
                }
                let linked = Namespace::link(self, &comps, &target, k);
                linked.map_err(|e| stage_error(name, Some(&m.path), e, &self.names))?;
                continue;
            }
            if m.kind == MemberKind::File && m.sparse.is_none() {
                if let Some(dir) = self.expands(&comps) {
                    self.nested(stream, cx, &m, &comps, dir, &mut notes)?;
                    continue;
                }
            }
            let entry = self.entry(&m, k, name, &mut notes)?;
            let added = self.stage.add(&comps, entry).map_err(member)?;
            let (Added::Inode(si), MemberKind::File) = (added, m.kind) else {
                continue;
            };
            self.member_data(stream, cx, &m, si, &mut reported)?;
        }
        // To the stream's end: a compressed stream's checks (CRC-32,
        // checksum) run there.
        stream.finish().map_err(|e| cx.error(e))?;
        self.progress(cx, &mut reported);
        Ok(())
    }

    /// Moves the progress bar by the bytes of `cx`'s archive file read
    /// since `reported` (a top-level archive's; a nested one counts in its
    /// outer's).
    fn progress(&mut self, cx: &StreamCx, reported: &mut u64) {
        if let Some(read) = &cx.read {
            let now = read.load(Ordering::Relaxed);
            self.unreported += now - *reported;
            *reported = now;
        }
    }

    /// Adds the member archive `m` at `comps`, which `--expand-nested`
    /// expands, as the directory `dir` holding its members.
    fn nested<R: Read + Send>(
        &mut self,
        stream: &mut TarStream<R>,
        cx: &StreamCx,
        m: &tar::Member,
        comps: &[&[u8]],
        dir: Vec<u8>,
        notes: &mut Notes,
    ) -> Result<(), PackError> {
        let name = cx.name.as_path();
        if cx.depth >= MAX_NESTING {
            return Err(cx.error(TarError {
                offset: m.offset,
                member: Some(m.path.clone()),
                kind: TarErrorKind::Bad(format!("archives nested more than {MAX_NESTING} deep")),
            }));
        }
        let mut d = self.entry(m, cx.source, name, notes)?;
        d.kind = Kind::Dir;
        d.mode = 0o755;
        d.size = 0;
        let mut dir_comps = comps.to_vec();
        *dir_comps.last_mut().expect("a member has a name") = &dir;
        self.stage
            .add(&dir_comps, d)
            .map_err(|e| stage_error(name, Some(&m.path), e, &self.names))?;
        let inner_name = PathBuf::from(format!(
            "{}:{}",
            name.display(),
            String::from_utf8_lossy(&m.path)
        ));
        let failed = cx.failed.clone();
        let (c, mut inner) = open_tar(
            &inner_name,
            Box::new(MemberData(stream)),
            &failed,
            true,
            self.opts.threads,
        )?;
        let inner_cx = StreamCx {
            name: inner_name,
            prefix: dir_comps.iter().map(|c| c.to_vec()).collect(),
            depth: cx.depth + 1,
            source: cx.source,
            compression: c,
            failed,
            read: None,
        };
        self.members(&mut inner, &inner_cx)
    }

    /// Reads the data of file member `m`, staged as `si`, into pieces.
    fn member_data<R: Read + Send>(
        &mut self,
        stream: &mut TarStream<R>,
        cx: &StreamCx,
        m: &tar::Member,
        si: u32,
        reported: &mut u64,
    ) -> Result<(), PackError> {
        let id = self.next_id()?;
        self.stage.set_data(si, id);
        let path: Arc<Path> = Arc::from(
            PathBuf::from(format!(
                "{}:{}",
                cx.name.display(),
                String::from_utf8_lossy(&m.path)
            ))
            .as_path(),
        );
        self.file_bytes += m.size;
        let mut segs = SegmentCursor::new(m.sparse.as_deref());
        for (first_block, nblocks, last) in piece_spans(m.size, self.bs) {
            self.cancelled()?;
            let mut data = Vec::with_capacity(nblocks as usize);
            for b in first_block..first_block + nblocks {
                let start = b * self.bs;
                let end = m.size.min(start + self.bs);
                data.push(segs.read(stream, start, end).map_err(|e| cx.error(e))?);
            }
            self.emit(Piece {
                ino: id,
                path: path.clone(),
                size: m.size,
                first_block,
                nblocks,
                last,
                data: PieceData::Blocks(data),
            })?;
            self.progress(cx, reported);
        }
        Ok(())
    }

    /// With `--expand-nested`: the directory name a member archive at
    /// `comps` becomes (its name without the archive extension), if its
    /// path matches.
    fn expands(&self, comps: &[&[u8]]) -> Option<Vec<u8>> {
        let set = self.expand.as_ref()?;
        let rel: PathBuf = comps.iter().map(|c| OsStr::from_bytes(c)).collect();
        let name = comps.last()?;
        if !set.is_match(&rel) && !set.is_match(OsStr::from_bytes(name)) {
            return None;
        }
        let stem = ARCHIVE_EXTENSIONS
            .iter()
            .find_map(|ext| name.strip_suffix(ext.as_bytes()).filter(|s| !s.is_empty()))
            .unwrap_or(name);
        Some(stem.to_vec())
    }

    /// A member's path as components: a leading `/` dropped (with a note),
    /// `.` and empty components dropped, `--strip-components` applied;
    /// `None` when nothing is left of it. `..` is an error.
    fn member_path<'p>(
        &self,
        raw: &'p [u8],
        name: &Path,
        notes: &mut Notes,
        strip: bool,
    ) -> Result<Option<Vec<&'p [u8]>>, PackError> {
        if raw.starts_with(b"/") {
            notes.absolute(name);
        }
        // As GNU tar counts for --strip-components: every component between
        // slashes, `.` included (`./top/f` stripped of 1 is `top/f`).
        let all: Vec<&[u8]> = raw
            .split(|&c| c == b'/')
            .filter(|c| !c.is_empty())
            .collect();
        let n = if strip { self.so.strip_components } else { 0 };
        if n > 0 && all.len() <= n {
            return Ok(None);
        }
        let comps: Vec<&[u8]> = all[n..].iter().copied().filter(|c| *c != b".").collect();
        let err = |message: String| PackError::Archive {
            path: name.to_path_buf(),
            member: Some(String::from_utf8_lossy(raw).into_owned()),
            offset: None,
            message,
        };
        if comps.iter().any(|c| *c == b"..") {
            return Err(err(
                "the path has a '..' component: it would lie outside the image".into(),
            ));
        }
        if let Some(c) = comps.iter().find(|c| c.len() > MAX_NAME_LEN) {
            return Err(err(format!(
                "a name of {} bytes (SquashFS allows {MAX_NAME_LEN})",
                c.len()
            )));
        }
        if comps.iter().any(|c| c.contains(&0)) {
            return Err(err("the path holds a NUL byte".into()));
        }
        Ok(Some(comps))
    }

    /// Whether `--exclude` leaves the member out (it, or a directory above it).
    fn excluded(&self, comps: &[&[u8]], is_dir: bool) -> bool {
        if self.opts.excludes.is_empty() {
            return false;
        }
        let mut rel = PathBuf::new();
        for (i, c) in comps.iter().enumerate() {
            let name = OsStr::from_bytes(c);
            rel.push(name);
            let dir = i + 1 < comps.len() || is_dir;
            if self.excludes.excludes(&rel, name, dir) {
                return true;
            }
        }
        false
    }

    fn entry(
        &self,
        m: &tar::Member,
        k: u16,
        name: &Path,
        notes: &mut Notes,
    ) -> Result<Entry, PackError> {
        let kind = match m.kind {
            MemberKind::File => Kind::File,
            MemberKind::Dir => Kind::Dir,
            MemberKind::Symlink => Kind::Symlink,
            MemberKind::CharDev => Kind::CharDev,
            MemberKind::BlockDev => Kind::BlockDev,
            MemberKind::Fifo => Kind::Fifo,
            MemberKind::HardLink => unreachable!("links are added by Stage::link"),
        };
        let err = |message: String| PackError::Archive {
            path: name.to_path_buf(),
            member: Some(String::from_utf8_lossy(&m.path).into_owned()),
            offset: Some(m.offset),
            message,
        };
        let id = |v: u64, what: &str| {
            u32::try_from(v).map_err(|_| {
                err(format!(
                    "{what} {v} is larger than an image stores (2^32 - 1)"
                ))
            })
        };
        let mut e = Entry::new(kind, k);
        e.mode = (m.mode & 0o7777) as u16;
        e.uid = id(m.uid, "uid")?;
        e.gid = id(m.gid, "gid")?;
        e.mtime = m.mtime;
        // A directory's size would be its link count (see `Entry::size`).
        e.size = if kind == Kind::Dir { 0 } else { m.size };
        e.dev = (m.dev_major, m.dev_minor);
        if kind == Kind::Symlink {
            if m.link.is_empty() {
                return Err(err("a symlink with an empty target".into()));
            }
            if m.link.contains(&0) {
                return Err(err("a symlink target holding a NUL byte".into()));
            }
            e.target = m.link.clone();
        }
        for (n, v) in &m.xattrs {
            match split_name(n) {
                Some((kind, rest)) => e.xattrs.push(Xattr {
                    kind,
                    name: rest.to_vec(),
                    value: v.clone(),
                }),
                None => notes.xattr(name, n),
            }
        }
        e.xattrs.sort();
        Ok(e)
    }
}

/// The entry of a walked tree's inode `ino`, for the namespace.
fn entry_of(tree: &Tree, ino: u32, k: u16) -> Entry {
    let i = &tree.inodes[ino as usize];
    let mut e = Entry::new(i.kind, k);
    e.mode = i.mode;
    e.uid = tree.ids[i.uid_idx as usize];
    e.gid = tree.ids[i.gid_idx as usize];
    e.mtime = i.mtime as i64;
    e.size = i.size;
    e.dev = packfs_format::squashfs::inode::decode_dev(i.rdev);
    if i.kind == Kind::Symlink {
        e.target = tree.symlink_target(ino).to_vec();
    }
    if i.xattr != packfs_format::squashfs::INVALID_XATTR {
        e.xattrs = tree.xattrs.sets[i.xattr as usize].clone();
    }
    e
}

/// A hard link at `comps` to `target`, which went to disk with a run:
/// staged as a further name of the target's inode, which all its names'
/// records then share (see [`Runs::link_target`]).
fn cross_link(
    stage: &mut Stage,
    runs: &mut Option<Runs>,
    comps: &[&[u8]],
    target: &[&[u8]],
    source: u16,
) -> Result<Added, StageError> {
    let shown = || String::from_utf8_lossy(&target.join(&b'/')).into_owned();
    let missing = || StageError::LinkTargetMissing { target: shown() };
    let runs = runs.as_mut().expect("runs were spilled");
    let found = runs
        .link_target(&Runs::path_of(target))
        .map_err(|e| StageError::Spill(e.to_string()))?;
    let Some((rec, id)) = found else {
        return Err(missing());
    };
    if rec.kind == Kind::Dir {
        return Err(StageError::LinkToDir { target: shown() });
    }
    if rec.source != source {
        return Err(missing());
    }
    let mut e = Entry::new(rec.kind, source);
    e.mode = rec.mode;
    (e.uid, e.gid, e.mtime) = (rec.uid, rec.gid, rec.mtime);
    (e.size, e.dev, e.data) = (rec.size, rec.dev, rec.data);
    e.target = rec.target;
    if rec.xattrs != crate::record::NO_XATTRS {
        e.xattrs = runs.xattrs.sets[rec.xattrs as usize].clone();
    }
    let added = stage.add(comps, e)?;
    if let Added::Inode(si) = added {
        stage.set_cross_link(si, id);
    }
    Ok(added)
}

impl Namespace for Reader<'_> {
    fn stage(&mut self) -> &mut Stage {
        &mut self.stage
    }

    fn link(
        &mut self,
        comps: &[&[u8]],
        target: &[&[u8]],
        source: u16,
    ) -> Result<Added, StageError> {
        match self.stage.link(comps, target, source) {
            Err(StageError::LinkTargetMissing { .. }) if self.runs.is_some() => {
                cross_link(&mut self.stage, &mut self.runs, comps, target, source)
            }
            other => other,
        }
    }

    fn file(
        &mut self,
        si: u32,
        path: Arc<Path>,
        size: u64,
        maybe_sparse: bool,
        src_ino: u64,
    ) -> Result<(), PackError> {
        let id = self.next_id()?;
        self.stage.set_data(si, id);
        self.emit_file(id, path, size, maybe_sparse, src_ino)
    }

    fn between(&mut self) -> Result<(), PackError> {
        self.cancelled()?;
        self.spill_if_full()
    }

    fn error(&self, path: &Path, e: StageError) -> PackError {
        stage_error(path, None, e, &self.names)
    }
}

/// Things said once per archive.
#[derive(Default)]
struct Notes {
    absolute: bool,
    unknown: bool,
    xattr: bool,
    excluded_link: bool,
}

impl Notes {
    fn absolute(&mut self, name: &Path) {
        if !std::mem::replace(&mut self.absolute, true) {
            log::warn!("{}: removing leading '/' from member names", name.display());
        }
    }
    fn unknown_type(&mut self, t: u8, name: &Path, member: &[u8]) {
        if !std::mem::replace(&mut self.unknown, true) {
            log::warn!(
                "{}: {}: unknown member type {:?}, packed as a regular file (as tar extracts it)",
                name.display(),
                String::from_utf8_lossy(member),
                t as char
            );
        }
    }
    fn excluded_link(&mut self, name: &Path, member: &[u8]) {
        if !std::mem::replace(&mut self.excluded_link, true) {
            log::warn!(
                "{}: {}: a hard link to a member --exclude left out: left out too",
                name.display(),
                String::from_utf8_lossy(member)
            );
        }
    }
    fn xattr(&mut self, name: &Path, x: &[u8]) {
        if !std::mem::replace(&mut self.xattr, true) {
            log::warn!(
                "{}: extended attribute {} is in a namespace SquashFS does not store: left out",
                name.display(),
                String::from_utf8_lossy(x)
            );
        }
    }
}

/// Walks a sparse member's segments alongside its pieces: the bytes of
/// `start..end` of the file, zeros in the holes, read from the stream
/// (which holds the segments' bytes back to back).
struct SegmentCursor<'s> {
    segments: Option<&'s [(u64, u64)]>,
    /// The first segment not wholly consumed.
    at: usize,
}

impl<'s> SegmentCursor<'s> {
    fn new(segments: Option<&'s [(u64, u64)]>) -> Self {
        SegmentCursor { segments, at: 0 }
    }

    /// `None` when `start..end` is all hole.
    fn read<R: Read>(
        &mut self,
        stream: &mut TarStream<R>,
        start: u64,
        end: u64,
    ) -> Result<Option<Vec<u8>>, TarError> {
        let Some(segs) = self.segments else {
            let mut buf = vec![0u8; (end - start) as usize];
            stream.read_data_exact(&mut buf)?;
            return Ok(Some(buf));
        };
        let mut buf: Option<Vec<u8>> = None;
        while let Some(&(off, len)) = segs.get(self.at) {
            if off >= end {
                break;
            }
            let s = off.max(start);
            let e = (off + len).min(end);
            if s < e {
                let b = buf.get_or_insert_with(|| vec![0u8; (end - start) as usize]);
                stream.read_data_exact(&mut b[(s - start) as usize..(e - start) as usize])?;
            }
            if off + len <= end {
                self.at += 1;
            } else {
                break;
            }
        }
        Ok(buf)
    }
}

impl Reader<'_> {
    /// The ZIP archive `src` (source number `k`, named `name`): see
    /// [`super::zip`].
    fn zip(&mut self, k: u16, name: &Path, src: &dyn zip::RandomAccess) -> Result<(), PackError> {
        let len = src.size();
        let mut central = zip::Central::open(name, src)?;
        let mut notes = Notes::default();
        let mut pending = Vec::new();
        while let Some((e, record)) = central.next_record()? {
            self.cancelled()?;
            if let Some(p) = self.zip_record(k, name, &central, &e, record, &mut notes)? {
                pending.push(p);
            }
        }
        // In archive order: reads move forward through the file. A member a
        // later record of its path replaced is not read: it is not in the
        // image (and damage in it is no reason to fail).
        pending.sort_by_key(|(_, m)| m.local_offset);
        let mut reported = 0u64;
        for (si, m) in pending {
            self.cancelled()?;
            if !self.stage.is_named(si) {
                continue;
            }
            // Progress: the archive's bytes up to the end of this member's data.
            let upto = m.local_offset.saturating_add(m.csize).min(len);
            if self.stage.kind(si) == Kind::Symlink {
                let target = zip::read_target(name, src, &m)?;
                if target.contains(&0) {
                    let message = "a symlink target holding a NUL byte".into();
                    return Err(PackError::archive(name, Some(&m.name), message));
                }
                self.stage.set_target(si, &target);
            } else {
                self.zip_data(name, src, (si, m))?;
            }
            if upto > reported {
                self.unreported += upto - reported;
                reported = upto;
            }
        }
        self.unreported += len - reported.min(len);
        self.input_bytes += len;
        Ok(())
    }

    /// One central record into the namespace; a regular file or a symlink
    /// comes back, with its inode, to have its data (the symlink's target)
    /// read once the walk is over, in archive order.
    #[allow(clippy::too_many_arguments)]
    fn zip_record(
        &mut self,
        k: u16,
        name: &Path,
        central: &zip::Central,
        e: &CentralEntry,
        record: u64,
        notes: &mut Notes,
    ) -> Result<Option<(u32, zip::Member)>, PackError> {
        let raw = decode_name(e);
        let is_dir_name = raw.ends_with(b"/");
        let Some(comps) = self.member_path(&raw, name, notes, true)? else {
            return Ok(None);
        };
        if comps.is_empty() {
            // `/` or `./`: the root itself, whose metadata a ZIP does not carry.
            return Ok(None);
        }
        let (kind, perm) = kind_and_perm(e, is_dir_name);
        let kind = match kind {
            k if k == libc::S_IFDIR => Kind::Dir,
            k if k == libc::S_IFLNK => Kind::Symlink,
            _ => Kind::File,
        };
        if self.excluded(&comps, kind == Kind::Dir) {
            return Ok(None);
        }
        let mut entry = Entry::new(kind, k);
        entry.mode = perm as u16;
        (entry.uid, entry.gid) = e.uid_gid.unwrap_or((0, 0));
        entry.mtime = entry_mtime(e);
        let member = match kind {
            Kind::Dir => None,
            _ => Some(central.member(e, &raw, record)?),
        };
        if let Some(m) = member.as_ref().filter(|_| kind == Kind::Symlink) {
            if m.size > zip::MAX_TARGET {
                let message = format!(
                    "a symlink whose target is {} bytes (at most {})",
                    m.size,
                    zip::MAX_TARGET
                );
                return Err(PackError::archive(name, Some(&raw), message));
            }
        }
        entry.size = if kind == Kind::File { e.size } else { 0 };
        let added = self
            .stage
            .add(&comps, entry)
            .map_err(|err| stage_error(name, Some(&raw), err, &self.names))?;
        match (added, member) {
            (Added::Inode(si), Some(m)) => Ok(Some((si, m))),
            _ => Ok(None),
        }
    }

    /// A regular file's data, decoded and checked, to the writer.
    fn zip_data(
        &mut self,
        name: &Path,
        src: &dyn zip::RandomAccess,
        (inode, p): (u32, zip::Member),
    ) -> Result<(), PackError> {
        let id = self.next_id()?;
        self.stage.set_data(inode, id);
        let path: Arc<Path> = Arc::from(
            PathBuf::from(format!(
                "{}:{}",
                name.display(),
                String::from_utf8_lossy(&p.name)
            ))
            .as_path(),
        );
        self.file_bytes += p.size;
        let failed = AtomicBool::new(false);
        let mut m = zip::MemberData::open(name, src, &p, &failed)?;
        for (first_block, nblocks, last) in piece_spans(p.size, self.bs) {
            self.cancelled()?;
            let mut data = Vec::with_capacity(nblocks as usize);
            for b in first_block..first_block + nblocks {
                let start = b * self.bs;
                let mut buf = vec![0u8; (p.size.min(start + self.bs) - start) as usize];
                m.read_exact(&mut buf)?;
                data.push(Some(buf));
            }
            self.emit(Piece {
                ino: id,
                path: path.clone(),
                size: p.size,
                first_block,
                nblocks,
                last,
                data: PieceData::Blocks(data),
            })?;
        }
        m.finish()
    }
}
