//! A whole image checked: every directory listed, every entry's attributes,
//! link target and xattrs decoded, every regular file read to its end
//! through the same readers a mount uses, so that every table is parsed,
//! every block decoded and every check the image carries is made (zstd and
//! xz checksums, a SquashFS image's hash record, each ZIP member's CRC-32).
//! Then the pieces of the hash record that no file led to (the export
//! table, blocks only a damaged inode pointed at) are read and checked.
//!
//! Files are read in image order (by [`Extent`]), split among `threads`
//! threads in contiguous runs, so each thread reads forward through its
//! part of the image and a fragment block shared by neighbours is decoded
//! once. Every problem is reported with the path it was found at; nothing
//! stops at the first.
//!
//! [`Extent`]: crate::image::Extent

use crate::error::FsError;
use crate::fs::PackFs;
use crate::image::{FileKind, Image, NodeId, ROOT};
use crate::open::AnyImage;
use crate::squashfs::SquashFs;
use rayon::prelude::*;
use std::sync::Mutex;

/// One problem: where it was found and what it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// The path in the image ("/" for the root), or `(image)` for a piece
    /// of the image no path leads to.
    pub path: String,
    pub error: String,
}

/// What [`verify`] found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Entries walked (the root included).
    pub entries: u64,
    /// Regular files read to their end.
    pub files: u64,
    /// Bytes of file data read.
    pub bytes: u64,
    /// Pieces of a hash record checked after the files (0 without one).
    pub pieces: u64,
    /// Whether the image (or every shard) has a hash record.
    pub hash_record: bool,
    pub damaged: Vec<Damage>,
}

/// Told how far [`verify`] is: the bytes it will read, once known, then
/// the bytes read so far, as they are.
pub trait Progress: Sync {
    fn total(&self, bytes: u64);
    fn advance(&self, bytes: u64);
}

/// No progress reported.
pub struct Quiet;

impl Progress for Quiet {
    fn total(&self, _: u64) {}
    fn advance(&self, _: u64) {}
}

/// Records a problem found at a path.
type Note<'a> = dyn Fn(&str, FsError) + Sync + 'a;

struct File {
    path: String,
    node: NodeId,
    size: u64,
    at: (u32, u64),
}

/// Checks all of `fs`'s image on `threads` threads (0: as many as cores).
pub fn verify(fs: &PackFs<AnyImage>, threads: usize, progress: &dyn Progress) -> Report {
    let mut report = Report {
        hash_record: has_records(&fs.image),
        ..Report::default()
    };
    track_checks(&fs.image);
    let damaged = Mutex::new(Vec::new());
    let note = |path: &str, e: FsError| {
        if let Ok(mut d) = damaged.lock() {
            d.push(Damage {
                path: path.to_string(),
                error: e.to_string(),
            });
        }
    };
    let mut files = walk(fs, &mut report, &note);
    files.sort_by_key(|f| f.at);
    progress.total(files.iter().map(|f| f.size).sum());

    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("verify-{i}"))
        .build();
    let read = || {
        files
            .par_iter()
            .with_min_len(files.len().div_ceil(256).max(1))
            .map(|f| {
                let r = fs.read_all(f.node, |b| {
                    progress.advance(b.len() as u64);
                    Ok(())
                });
                match r {
                    Ok(n) if n == f.size => n,
                    Ok(n) => {
                        let msg = format!("{n} bytes read, its size is {}", f.size);
                        note(&f.path, FsError::corrupt(msg));
                        n
                    }
                    Err(e) => {
                        note(&f.path, e);
                        0
                    }
                }
            })
            .sum::<u64>()
    };
    report.bytes = match &pool {
        Ok(p) => p.install(read),
        Err(_) => read(),
    };
    report.files = files.len() as u64;
    report.pieces = rest_of_records(&fs.image, &note);
    report.damaged = damaged.into_inner().unwrap_or_default();
    report
}

/// Lists every directory from the root; returns the regular files.
fn walk(fs: &PackFs<AnyImage>, report: &mut Report, note: &Note<'_>) -> Vec<File> {
    let mut files = Vec::new();
    let mut dirs = vec![(String::new(), ROOT)];
    report.entries = 1;
    check_entry(fs, "/", ROOT, FileKind::Dir, note);
    while let Some((dir, node)) = dirs.pop() {
        let entries = match fs.list(node) {
            Ok(e) => e,
            Err(e) => {
                note(if dir.is_empty() { "/" } else { &dir }, e);
                continue;
            }
        };
        for e in entries {
            let path = format!("{dir}/{}", String::from_utf8_lossy(&e.name));
            report.entries += 1;
            if !check_entry(fs, &path, e.node, e.kind, note) {
                continue;
            }
            match e.kind {
                FileKind::Dir => dirs.push((path, e.node)),
                FileKind::File => match fs.getattr(e.node) {
                    Ok(a) => {
                        let at = fs.extent(e.node).map(|x| (x.part, x.offset));
                        files.push(File {
                            path,
                            node: e.node,
                            size: a.size,
                            at: at.unwrap_or((u32::MAX, u64::MAX)),
                        });
                    }
                    Err(err) => note(&path, err),
                },
                _ => {}
            }
        }
    }
    files
}

/// Decodes an entry's attributes, xattrs and link target; false (noted)
/// when one of them fails.
fn check_entry(
    fs: &PackFs<AnyImage>,
    path: &str,
    node: NodeId,
    kind: FileKind,
    note: &Note<'_>,
) -> bool {
    let r = (|| {
        fs.getattr(node)?;
        fs.image.xattrs(node)?;
        if kind == FileKind::Symlink {
            fs.readlink(node)?;
        }
        Ok(())
    })();
    match r {
        Ok(()) => true,
        Err(e) => {
            note(path, e);
            false
        }
    }
}

/// Whether every SquashFS image in `img` has a hash record (false for ZIP,
/// whose members carry CRC-32s instead).
fn has_records(img: &AnyImage) -> bool {
    match img {
        AnyImage::SquashFs(s) => s.hash_record().is_some(),
        AnyImage::Zip(_) => false,
        AnyImage::Union(u) => {
            let mut all = true;
            let _ = u.each_shard(|s| {
                all &= has_records(s);
                Ok(all)
            });
            all
        }
    }
}

/// Has each hash record note the pieces checked from now on, so that
/// [`rest_of_records`] can leave them out.
fn track_checks(img: &AnyImage) {
    match img {
        AnyImage::SquashFs(s) => s.track_checks(),
        AnyImage::Zip(_) => {}
        AnyImage::Union(u) => {
            let _ = u.each_shard(|s| {
                track_checks(s);
                Ok(true)
            });
        }
    }
}

/// Checks the pieces of each hash record that the file reads did not
/// (returns how many), and each ZIP member's local header.
fn rest_of_records(img: &AnyImage, note: &Note<'_>) -> u64 {
    match img {
        AnyImage::SquashFs(s) => rest_of_record(s, note),
        AnyImage::Zip(z) => {
            for (path, e) in z.check_local_headers() {
                note(&format!("/{path}"), e);
            }
            0
        }
        AnyImage::Union(u) => {
            let mut n = 0;
            if let Err(e) = u.each_shard(|s| {
                n += rest_of_records(s, note);
                Ok(true)
            }) {
                note("(image)", e);
            }
            n
        }
    }
}

fn rest_of_record(s: &SquashFs, note: &Note<'_>) -> u64 {
    if let Err(e) = s.check_padding() {
        note("(image)", e);
    }
    let Some(r) = s.hash_record() else {
        return 0;
    };
    // A page at a time, so that what is held stays a page's worth whatever
    // the record's size. A damaged page is damage of the record; its
    // pieces cannot be checked.
    let mut n = 0;
    for p in 0..r.pages() {
        let left = match s.unchecked_pieces(p) {
            Ok(left) => left,
            Err(e) => {
                note("(image)", e);
                continue;
            }
        };
        left.par_iter().for_each(|&(pos, len)| {
            if let Err(e) = s.check_piece(pos, len) {
                note("(image)", e);
            }
        });
        n += left.len() as u64;
    }
    n
}
