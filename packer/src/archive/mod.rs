//! Packing sources other than one directory: tar archives (compressed or
//! not, from a file or stdin) and several sources merged into one image.
//!
//! # Design note
//!
//! A directory can be walked first and its files read in any order; an
//! archive on a pipe can be read once, forward. So sources are read in one
//! pass, by one thread ([`Reader`]), in the order given and each in its own
//! order: each member's metadata joins the namespace ([`stage`]) as
//! extraction would, and its data is cut into pieces that go, in batches,
//! to the same data writer a directory's files go to
//! (`squashfs::data::write_batches`), which compresses them on the pool
//! while the reader decompresses and parses what follows. A file's data is
//! written in stream order under a number; the inodes, directories and
//! tables are written at the end from the namespace, whose tree finds each
//! file's data by that number. A later member that replaces an earlier one
//! leaves the earlier data unreferenced in the image: extraction's
//! semantics, at the price of the bytes (rare in practice).
//!
//! A directory among several sources is walked as `pack DIR` walks it and
//! its files are read by path on the pool, as they are for `pack DIR`.
//!
//! Memory: the namespace (names and inodes) plus at most four batches of
//! data in flight ([`STREAM_BATCH_BYTES`] each: the one being filled, the
//! one waiting in the channel, the two being compressed), whatever a
//! member's size or a header's claims (see [`tar`]).
//!
//! The image depends only on the sources and options: batches are cut by
//! the stream alone, so the same archives give the same bytes whatever the
//! thread count, and whether read from a file or from stdin.

pub mod decompress;
pub mod remote;
pub mod stage;
pub mod tar;
pub mod zip;

use crate::exclude::Excludes;
use crate::squashfs::data::{piece_spans, Batch, FileLoc, Piece, PieceData, BATCH_PIECES};
use crate::walk::{self, Kind, Tree};
use crate::xattrs::Xattr;
use crate::{output, PackError, PackOptions, PackSummary};
use decompress::{Compression, Counted};
use packfs_format::squashfs::xattr::split_name;
use packfs_format::squashfs::MAX_NAME_LEN;
pub use stage::OnConflict;
use stage::{Added, Entry, Stage, StageError};
use std::ffi::OsStr;
use std::io::{Cursor, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::time::Instant;
use tar::{MemberKind, TarError, TarErrorKind, TarStream};

/// One thing to pack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A directory: its contents join the image's root.
    Dir(PathBuf),
    /// A file holding an archive, told by its content.
    Archive(PathBuf),
    /// An archive on standard input (`-`).
    Stdin,
    /// An archive in object storage or on a web server (`s3://`,
    /// `http(s)://`), read where it is.
    Remote(String),
}

impl Source {
    /// What `arg` names: `-` is stdin, a directory (following symlinks) a
    /// directory, anything else an archive (whose content is checked when
    /// it is read).
    pub fn from_arg(arg: &Path) -> Source {
        let s = arg.to_string_lossy();
        if arg.as_os_str() == "-" {
            Source::Stdin
        } else if ["s3://", "http://", "https://"]
            .iter()
            .any(|p| s.starts_with(p))
        {
            Source::Remote(s.into_owned())
        } else if arg.is_dir() {
            Source::Dir(arg.to_path_buf())
        } else {
            Source::Archive(arg.to_path_buf())
        }
    }

    /// As messages name it.
    pub fn display(&self) -> PathBuf {
        match self {
            Source::Dir(p) | Source::Archive(p) => p.clone(),
            Source::Stdin => PathBuf::from("<stdin>"),
            Source::Remote(url) => PathBuf::from(url),
        }
    }
}

/// How sources other than one directory are read.
#[derive(Clone, Debug, Default)]
pub struct SourceOptions {
    /// Leading path components dropped from each archive member, as
    /// `tar -x --strip-components`; members with no more are left out.
    pub strip_components: usize,
    /// A path given by two sources.
    pub on_conflict: OnConflict,
    /// Member archives whose path (or name) matches one of these globs are
    /// read as directories of their name without the archive extension
    /// (`n01440764.tar` -> `n01440764/`), from the stream itself.
    pub expand_nested: Vec<String>,
    /// How `s3://` and `http(s)://` sources are reached.
    pub client: packfs_objstore::ClientOptions,
}

/// A source opened before the pack starts.
enum Input {
    File(std::fs::File),
    Remote(Box<remote::RemoteArchive>),
}

/// Packs `sources`, merged at the root, into the SquashFS image `out`
/// (atomically, as [`crate::pack_squashfs`]).
pub fn pack_sources(
    sources: &[Source],
    out: &Path,
    opts: &PackOptions,
    so: &SourceOptions,
) -> Result<PackSummary, PackError> {
    pack_sources_recorded(sources, out, opts, so).map(|(summary, _)| summary)
}

/// [`pack_sources`], with the image's record for a shard manifest.
pub(crate) fn pack_sources_recorded(
    sources: &[Source],
    out: &Path,
    opts: &PackOptions,
    so: &SourceOptions,
) -> Result<(PackSummary, packfs_format::shards::Shard), PackError> {
    let started = Instant::now();
    crate::validate(opts)?;
    if opts.order != crate::order::DataOrder::Path {
        return Err(PackError::InvalidOption(
            "--order: an archive's data is written in the order it is read (orders need a \
             directory as the only source)"
                .into(),
        ));
    }
    if opts.overlay.is_some() {
        return Err(PackError::InvalidOption(
            "a Python environment is packed from its directory alone".into(),
        ));
    }
    if sources.iter().filter(|s| **s == Source::Stdin).count() > 1 {
        return Err(PackError::InvalidOption(
            "stdin (-) can be given once".into(),
        ));
    }
    let dirs: Vec<&Path> = sources
        .iter()
        .filter_map(|s| match s {
            Source::Dir(p) => Some(p.as_path()),
            _ => None,
        })
        .collect();
    let target = output::prepare_output(out, opts.force, &dirs)?;
    let tmp = target.create_temp()?;
    let pool = crate::worker_pool(opts)?;
    // Opened now: a missing archive fails before anything is written.
    let mut inputs = Vec::with_capacity(sources.len());
    let mut known_total = 0u64;
    for s in sources {
        inputs.push(match s {
            Source::Archive(p) => {
                let f = std::fs::File::open(p).map_err(PackError::io(p))?;
                known_total += f.metadata().map(|m| m.len()).unwrap_or(0);
                Some(Input::File(f))
            }
            Source::Remote(url) => {
                let r = remote::RemoteArchive::open(url, &so.client)?;
                known_total += r.size();
                Some(Input::Remote(Box::new(r)))
            }
            _ => None,
        });
    }
    // The archives' sizes: what the progress bar counts, and the image's
    // size for the striping rule. A directory among the sources adds its
    // files' bytes, unknown until it is walked: the bar then shows only
    // what was read.
    let any_dir = !dirs.is_empty();
    if let Some(p) = &opts.progress {
        p.start(if any_dir { 0 } else { known_total }, 0);
    }
    target.stripe(&tmp, opts.stripe, known_total);
    let skip = output::identity(&tmp);
    let mut bytes_read = 0u64;
    let (w, tree) =
        crate::squashfs::write_image_with(tmp.as_file(), target.path(), opts, |img, enc| {
            let bs = opts.block_size as u64;
            let (tx, rx) = sync_channel::<Result<Batch, PackError>>(1);
            std::thread::scope(|s| {
                let reader = std::thread::Builder::new()
                    .name("packfs-read".into())
                    .spawn_scoped(s, || {
                        let names = sources.iter().map(Source::display).collect();
                        let mut r = Reader::new(opts, so, tx, bs, skip, names)?;
                        for (k, (src, file)) in sources.iter().zip(inputs).enumerate() {
                            r.source(k as u16, src, file)?;
                        }
                        r.flush()?;
                        // Dropping the reader closes the channel: the writer
                        // sees the end of the batches.
                        let Reader {
                            stage,
                            input_bytes,
                            file_bytes,
                            ..
                        } = r;
                        Ok::<_, PackError>((stage, input_bytes, file_bytes))
                    })
                    .map_err(|e| PackError::Threads(format!("the archive reader: {e}")))?;
                let next = move |_| match rx.recv() {
                    Ok(Ok(b)) => Ok(Some(b)),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Ok(None),
                };
                let written =
                    crate::squashfs::data::write_batches(img, enc, opts, &pool, 0, 0, next);
                // The reader ends on its own once the writer has stopped
                // taking batches (its sends fail).
                let read = reader
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p));
                let mut data = written?;
                let (stage, input_bytes, files_bytes) = read?;
                bytes_read = input_bytes;
                let root = sources.first().map(Source::display).unwrap_or_default();
                let (tree, data_of) = stage
                    .into_tree(root.clone(), opts.all_root, opts.mtime)
                    .map_err(|_| PackError::TooManyIds { path: root })?;
                // The writer numbered files as they came; the tree numbers inodes.
                let locs = data_of
                    .iter()
                    .map(|&d| match d {
                        stage::NO_DATA => FileLoc::default(),
                        d => data.locs.get(d as usize).cloned().unwrap_or_default(),
                    })
                    .collect();
                data.locs = locs;
                data.bytes_in = files_bytes;
                Ok((tree, data))
            })
        })?;
    let record = crate::shards::tree_record(&tree);
    let summary = crate::commit_squashfs(target, tmp, opts, &w, &tree, bytes_read, started)?;
    Ok((summary, record))
}

/// Reads the sources in order into the namespace and the data batches.
struct Reader<'a> {
    opts: &'a PackOptions,
    so: &'a SourceOptions,
    stage: Stage,
    excludes: Excludes,
    tx: SyncSender<Result<Batch, PackError>>,
    batch: Vec<Piece>,
    batch_bytes: u64,
    /// Input bytes read and not yet reported with a batch.
    unreported: u64,
    next_data: u32,
    bs: u64,
    /// Bytes of the archives (as stored) and of the files read.
    input_bytes: u64,
    file_bytes: u64,
    /// (dev, ino) of the image being written, left out of directories.
    skip: Option<(u64, u64)>,
    /// The sources' names, for conflicts.
    names: Vec<PathBuf>,
    /// `--expand-nested`.
    expand: Option<globset::GlobSet>,
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

/// The stream an archive's members come from, for messages.
struct StreamCx {
    /// The archive (`OUTER:MEMBER` for a nested one).
    name: PathBuf,
    compression: Compression,
    /// Whether a read of the file (not the decoder) failed.
    failed: Arc<std::sync::atomic::AtomicBool>,
    /// Bytes read from the file (top-level archives), for progress.
    read: Option<Arc<std::sync::atomic::AtomicU64>>,
}

impl StreamCx {
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
) -> Result<(Compression, TarStream<Box<dyn Read + Send + 'a>>), PackError> {
    let head = decompress::peek(&mut input, 6).map_err(PackError::io(name))?;
    let c = Compression::sniff(&head);
    let mut dec = decompress::decoder(c, Cursor::new(head).chain(input), nested)
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
    fn new(
        opts: &'a PackOptions,
        so: &'a SourceOptions,
        tx: SyncSender<Result<Batch, PackError>>,
        bs: u64,
        skip: Option<(u64, u64)>,
        names: Vec<PathBuf>,
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

    fn flush(&mut self) -> Result<(), PackError> {
        if self.batch.is_empty() && self.unreported == 0 {
            return Ok(());
        }
        let b = Batch {
            pieces: std::mem::take(&mut self.batch),
            progress: std::mem::take(&mut self.unreported),
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

    fn cancelled(&self) -> Result<(), PackError> {
        match walk::cancelled(self.opts) {
            true => Err(PackError::Interrupted),
            false => Ok(()),
        }
    }

    fn source(&mut self, k: u16, src: &Source, input: Option<Input>) -> Result<(), PackError> {
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
    /// its files read by path on the pool.
    fn directory(&mut self, k: u16, dir: &Path) -> Result<(), PackError> {
        let tree = walk::walk_skipping(dir, self.opts, self.skip)?;
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
            self.stage.entry_mut(si).data = id;
            let path: Arc<Path> = Arc::from(tree.data_path(ino).as_path());
            for (first_block, nblocks, last) in piece_spans(i.size, self.bs) {
                self.emit(Piece {
                    ino: id,
                    path: path.clone(),
                    size: i.size,
                    first_block,
                    nblocks,
                    last,
                    data: PieceData::File {
                        maybe_sparse: i.maybe_sparse,
                        src_ino: i.src_ino,
                    },
                })?;
            }
            self.file_bytes += i.size;
            self.unreported += i.size;
        }
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
        let (c, mut stream) = open_tar(name, Box::new(input), &failed, false)?;
        let cx = StreamCx {
            name: name.to_path_buf(),
            compression: c,
            failed,
            read: Some(read),
        };
        self.members(k, &mut stream, &cx, &[], 0)?;
        let now = cx.read.as_ref().map_or(0, |r| r.load(Ordering::Relaxed));
        self.input_bytes += now;
        Ok(())
    }

    /// Adds the members of `stream` under the directory `prefix` (nested
    /// archives, `--expand-nested`, are `depth` deep).
    fn members<R: Read + Send>(
        &mut self,
        k: u16,
        stream: &mut TarStream<R>,
        cx: &StreamCx,
        prefix: &[Vec<u8>],
        depth: u32,
    ) -> Result<(), PackError> {
        let name = cx.name.as_path();
        let tar_err = |e: TarError| cx.error(e);
        let mut notes = Notes::default();
        let mut reported = 0u64;
        let progress = |r: &mut Reader, reported: &mut u64| {
            if let Some(read) = &cx.read {
                let now = read.load(Ordering::Relaxed);
                r.unreported += now - *reported;
                *reported = now;
            }
        };
        loop {
            self.cancelled()?;
            progress(self, &mut reported);
            let Some(m) = stream.next_member().map_err(tar_err)? else {
                break;
            };
            let member = |e: StageError| stage_error(name, Some(&m.path), e, &self.names);
            let Some(own) = self.member_path(&m.path, name, &mut notes, depth == 0)? else {
                continue;
            };
            let joined = |own: Vec<&[u8]>| -> Vec<Vec<u8>> {
                prefix
                    .iter()
                    .cloned()
                    .chain(own.into_iter().map(<[u8]>::to_vec))
                    .collect()
            };
            let full = joined(own);
            let comps: Vec<&[u8]> = full.iter().map(Vec::as_slice).collect();
            if let Some(t) = m.unknown_type {
                notes.unknown_type(t, name, &m.path);
            }
            if self.excluded(&comps, m.kind == MemberKind::Dir) {
                continue;
            }
            if m.kind == MemberKind::HardLink {
                let Some(target) = self.member_path(&m.link, name, &mut notes, depth == 0)? else {
                    continue;
                };
                let target = joined(target);
                let target: Vec<&[u8]> = target.iter().map(Vec::as_slice).collect();
                if self.excluded(&target, false) {
                    // Its target was left out: so is the link (tar -x would
                    // fail to make it and go on).
                    notes.excluded_link(name, &m.path);
                    continue;
                }
                self.stage.link(&comps, &target, k).map_err(member)?;
                continue;
            }
            if m.kind == MemberKind::File && m.sparse.is_none() {
                if let Some(dir) = self.expands(&comps) {
                    if depth >= MAX_NESTING {
                        return Err(cx.error(TarError {
                            offset: m.offset,
                            member: Some(m.path.clone()),
                            kind: TarErrorKind::Bad(format!(
                                "archives nested more than {MAX_NESTING} deep"
                            )),
                        }));
                    }
                    let mut d = self.entry(&m, k, name, &mut notes)?;
                    d.kind = Kind::Dir;
                    d.mode = 0o755;
                    d.size = 0;
                    let mut dir_comps = comps.clone();
                    *dir_comps.last_mut().expect("a member has a name") = &dir;
                    self.stage.add(&dir_comps, d).map_err(member)?;
                    let inner_name = PathBuf::from(format!(
                        "{}:{}",
                        name.display(),
                        String::from_utf8_lossy(&m.path)
                    ));
                    let inner_prefix: Vec<Vec<u8>> = dir_comps.iter().map(|c| c.to_vec()).collect();
                    let failed = cx.failed.clone();
                    let (c, mut inner) =
                        open_tar(&inner_name, Box::new(MemberData(stream)), &failed, true)?;
                    let inner_cx = StreamCx {
                        name: inner_name,
                        compression: c,
                        failed,
                        read: None,
                    };
                    self.members(k, &mut inner, &inner_cx, &inner_prefix, depth + 1)?;
                    continue;
                }
            }
            let entry = self.entry(&m, k, name, &mut notes)?;
            let added = self.stage.add(&comps, entry).map_err(member)?;
            let (Added::Inode(si), MemberKind::File) = (added, m.kind) else {
                continue;
            };
            let id = self.next_id()?;
            self.stage.entry_mut(si).data = id;
            let path: Arc<Path> = Arc::from(
                PathBuf::from(format!(
                    "{}:{}",
                    name.display(),
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
                    data.push(segs.read(stream, start, end).map_err(tar_err)?);
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
                progress(self, &mut reported);
            }
        }
        // To the stream's end: a compressed stream's checks (CRC-32,
        // checksum) run there.
        stream.finish().map_err(tar_err)?;
        progress(self, &mut reported);
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
        e.size = m.size;
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

/// A namespace refusal as the user reads it (`names`: the sources').
fn stage_error(
    archive: &Path,
    member: Option<&[u8]>,
    e: StageError,
    names: &[PathBuf],
) -> PackError {
    let message = match e {
        StageError::UnderSymlink { link } => {
            format!(
                "lies under {link}, a symlink of the archive (extraction would write through it)"
            )
        }
        StageError::ParentNotDir { parent } => format!("{parent} is not a directory"),
        StageError::ReplacesDir => "would replace a directory that holds entries".into(),
        StageError::LinkTargetMissing { target } => {
            format!("a hard link to {target}, which the archive does not hold before it")
        }
        StageError::LinkToDir { target } => format!("a hard link to the directory {target}"),
        StageError::RootNotDir => "names the root, and is not a directory".into(),
        StageError::Conflict { first } => {
            return PackError::SourceConflict {
                path: archive.to_path_buf(),
                member: member.map(|m| String::from_utf8_lossy(m).into_owned()),
                first: names.get(first as usize).cloned().unwrap_or_default(),
            }
        }
    };
    PackError::Archive {
        path: archive.to_path_buf(),
        member: member.map(|m| String::from_utf8_lossy(m).into_owned()),
        offset: None,
        message,
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
