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
//! its files are read by path on the pool, as they are for `pack DIR`; a
//! directory too large for its tree in memory is walked straight into the
//! namespace ([`dir_walk`]), which then spills as an archive's does.
//!
//! Memory: the namespace (names and inodes) plus at most four batches of
//! data in flight ([`STREAM_BATCH_BYTES`] each: the one being filled, the
//! one waiting in the channel, the two being compressed), whatever a
//! member's size or a header's claims (see [`tar`]). The namespace grows
//! with the entry count, and is the part that matters at millions of
//! entries: what each entry holds in each phase (the stage's node, inode
//! and name; the data writer's location and dedup key; the tree the
//! metadata is written from) is measured in docs/benchmarks/scale.md.
//! The stage and the tree are compact for that reason, and
//! [`Stage::into_tree`](stage::Stage::into_tree) frees the stage's nodes
//! before the tree's inodes are made.
//!
//! The image depends only on the sources and options: batches are cut by
//! the stream alone, so the same archives give the same bytes whatever the
//! thread count, and whether read from a file or from stdin.

pub mod decompress;
mod dir_walk;
mod parallel;
mod reader;
pub mod remote;
mod source;
pub(crate) mod spill;
pub mod stage;
pub mod tar;
pub mod zip;

use crate::squashfs::data::{Batch, DataOutput};
use crate::squashfs::Laid;
use crate::tree::Tree;
use crate::{output, PackError, PackOptions, PackSummary};
use reader::{DirWalk, Reader};
use source::Input;
pub use source::{Source, SourceOptions};
pub use stage::OnConflict;
use std::path::Path;
use std::sync::mpsc::sync_channel;
use std::time::Instant;

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
    packed(sources, out, opts, so, DirWalk::Tree, Instant::now())
}

/// Packs the directory `src`, whose tree a walk found too large to hold
/// in memory, through the namespace that spills to disk (as
/// [`crate::pack_squashfs`] otherwise).
/// The summary's time counts from `started` (the walk given up included).
pub(crate) fn pack_large_dir(
    src: &Path,
    out: &Path,
    opts: &PackOptions,
    started: Instant,
) -> Result<PackSummary, PackError> {
    let sources = [Source::Dir(src.to_path_buf())];
    let so = SourceOptions::default();
    packed(&sources, out, opts, &so, DirWalk::Streamed, started).map(|(summary, _)| summary)
}

/// Packs shard `k` of the split `cut` of the directory `src` (a tree too
/// large to hold in memory) into `out`; returns its manifest record.
pub(crate) fn pack_large_shard(
    src: &Path,
    out: &Path,
    opts: &PackOptions,
    cut: std::sync::Arc<crate::cut::Cut>,
    k: usize,
) -> Result<(PackSummary, packfs_format::shards::Shard), PackError> {
    let sources = [Source::Dir(src.to_path_buf())];
    let so = SourceOptions::default();
    packed(
        &sources,
        out,
        opts,
        &so,
        DirWalk::Run(cut, k),
        Instant::now(),
    )
}

/// [`pack_sources_recorded`], with directories walked as `dir_walk` says.
fn packed(
    sources: &[Source],
    out: &Path,
    opts: &PackOptions,
    so: &SourceOptions,
    dir_walk: DirWalk,
    started: Instant,
) -> Result<(PackSummary, packfs_format::shards::Shard), PackError> {
    check(sources, opts)?;
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
    let (inputs, known_total) = open_inputs(sources, so)?;
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
    let mut run = None;
    let (w, laid) =
        crate::squashfs::write_image_with(tmp.as_file(), target.path(), opts, |img, enc| {
            let bs = opts.block_size as u64;
            let (tx, rx) = sync_channel::<Result<Batch, PackError>>(1);
            std::thread::scope(|s| {
                let reader = std::thread::Builder::new()
                    .name("packfs-read".into())
                    .spawn_scoped(s, || {
                        let names = sources.iter().map(Source::display).collect();
                        let mut r = Reader::new(opts, so, tx, bs, skip, names, target.path())?;
                        r.dir_walk = dir_walk;
                        r.read_all(sources, inputs)
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
                let data = written?;
                let mut read = read?;
                bytes_read = read.input_bytes;
                run = read.run.take();
                let root = sources.first().map(Source::display).unwrap_or_default();
                laid_out(read, data, root, opts)
            })
        })?;
    let record = match (run, &laid, &w.record) {
        (Some(run), _, _) => run,
        (None, Laid::Tree(tree), _) => tree.whole_record(),
        (None, Laid::Spilled(_), Some(r)) => r.clone(),
        (None, Laid::Spilled(_), None) => {
            unreachable!("a spilled namespace's pass makes its record")
        }
    };
    // The runs go before the commit: nothing of the pack is left but the image.
    drop(laid);
    let summary = crate::commit_squashfs(target, tmp, opts, &w, bytes_read, started)?;
    Ok((summary, record))
}

/// Refuses options that a pack from sources cannot follow.
fn check(sources: &[Source], opts: &PackOptions) -> Result<(), PackError> {
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
    Ok(())
}

/// Opens the archives among `sources` (`None` for a directory or stdin),
/// so that a missing one fails before anything is written. Returns them
/// with the sum of their sizes.
fn open_inputs(
    sources: &[Source],
    so: &SourceOptions,
) -> Result<(Vec<Option<Input>>, u64), PackError> {
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
    Ok((inputs, known_total))
}

/// The tree of what was read, and the data written for it: the writer
/// numbered files as they came, the tree numbers inodes. `root` names the
/// image's root in messages.
fn laid_out(
    read: reader::SourcesRead,
    mut data: DataOutput,
    root: std::path::PathBuf,
    opts: &PackOptions,
) -> Result<(Laid<Tree>, DataOutput), PackError> {
    data.bytes_in = read.file_bytes;
    if let Some(runs) = read.runs {
        // The metadata pass finds each file's location by its data number.
        return Ok((Laid::Spilled(Box::new(runs)), data));
    }
    let (tree, data_of) = read
        .stage
        .into_tree(root.clone(), opts.all_root, opts.mtime)
        .map_err(|_| PackError::TooManyIds { path: root })?;
    // The locations stay by data number, found through the tree's map:
    // a copy by inode would be a second one of every file's at the peak.
    data.data_of = Some(data_of);
    Ok((Laid::Tree(tree), data))
}
