//! A corpus of corrupted images, and hand-built hostile ones: each must give
//! errors (EIO at the FUSE edge) or some content, never a panic, a hang or
//! unbounded memory.
//!
//! **Corpus.** Real images are built from `fixture_tree` (`packfs pack`,
//! `mksquashfs` compressed and with every metadata area stored raw, Info-ZIP
//! `zip`, Python `zipfile` with Zip64 end records added), then corrupted where
//! the format crate says each structure is: truncation at every table
//! boundary and inside each table, bit flips in every superblock field, in
//! the id, fragment, export and xattr index words and table blocks, in inode
//! and directory metadata blocks (a flipped stored byte of a compressed block
//! must be a codec error; in the raw images flips land in the records
//! themselves, field by field), in data blocks; for ZIP the end record, the
//! Zip64 locator and record, central and local headers field by field, data,
//! truncations and holes. Every case opens the image through the same core
//! the FUSE server uses (`PackFs` over `AnyImage` over an in-memory source),
//! preloads it, walks everything (getattr, xattrs, readdir resuming from
//! cookies as the kernel does, lookup, readlink, reads of every file).
//!
//! **Guards.** Each case runs on its own thread (2 MiB stack, as a FUSE
//! session thread) under a watchdog, and under a counting global allocator
//! that tracks the bytes each thread holds: a case fails when its peak
//! exceeds its cap, and an allocation past [`HARD_CAP`] is refused (the
//! process aborts naming the case) so that an unbounded allocation can never
//! take the machine down. Process RSS growth is checked too (C codecs
//! allocate outside Rust's allocator). Cases run one at a time.
//!
//! **Structural safety.** Hand-built images (a small SquashFS writer below,
//! every metadata block stored raw, and ZIPs written record by record):
//! directory cycles, self-referencing inodes, huge counts and sizes in every
//! table and record, streams that expand beyond the block size, ZIP bombs
//! (overlapping members, ratio > 1000) and trees 10,000 levels deep.
//!
//! **Its own test binary**, not a module of `tests/tests.rs`: the counting
//! allocator is the process's global allocator and the RSS check reads the
//! whole process, so no other test may run in the same process.

// This binary uses a few of the suite's helpers.
#[allow(dead_code)]
mod common;
use common::*;
use mountfs::fs::{FileKind, PackFs, ROOT};
use mountfs::open::AnyImage;
use mountfs::source::MemSource;
use packfs_format::bytes::{put_u32, put_u64, Input, SliceInput};
use packfs_format::codec::{decompress, Compressor, Encoder};
use packfs_format::squashfs::dir::{DirEntry as SqEntry, DirHeader};
use packfs_format::squashfs::inode::{
    BasicDir, BasicFile, DirIndex, ExtDir, ExtFile, InodeBody, InodeHeader, Symlink,
};
use packfs_format::squashfs::metadata::{block_count, make_ref, split_ref, MetaHeader};
use packfs_format::squashfs::superblock::Superblock;
use packfs_format::squashfs::tables::{index_len, FragmentEntry, XattrIdEntry, XattrTableHeader};
use packfs_format::squashfs::xattr::{encode_value, XattrKey};
use packfs_format::squashfs::*;
use packfs_format::zip::central::CentralHeader;
use packfs_format::zip::end::{find_eocd, EndRecord, Zip64EndRecord, Zip64Locator};
use packfs_format::zip::entry::parse_central;
use packfs_format::zip::local::LocalHeader;
use packfs_format::zip::{EOCD64_LOCATOR_LEN, METHOD_DEFLATE, METHOD_STORED};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::{BTreeMap, HashSet};
use std::process::Command;
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::{Duration, Instant};

// ===========================================================================
// Guards: a counting allocator, a watchdog, one case at a time
// ===========================================================================

/// An allocation that would take a guarded thread past this is refused.
const HARD_CAP: isize = 1 << 30;
/// Peak bytes a corpus case may hold (its image excluded).
const CASE_MEMORY: usize = 256 << 20;
/// Process RSS growth allowed during a case (C codecs' buffers included).
const CASE_RSS: u64 = 256 << 20;
const CASE_TIME: Duration = Duration::from_secs(20);
/// Stack of the thread a case runs on: what a FUSE session thread gets.
const CASE_STACK: usize = 2 << 20;

/// Bytes a thread holds (allocated minus freed on that thread), its peak,
/// and whether it runs a guarded case (named for the abort message).
struct Usage {
    live: Cell<isize>,
    peak: Cell<isize>,
    guarded: Cell<bool>,
    case: Cell<&'static str>,
}

thread_local! {
    static USAGE: Usage = const {
        Usage {
            live: Cell::new(0),
            peak: Cell::new(0),
            guarded: Cell::new(false),
            case: Cell::new(""),
        }
    };
}

/// Writes to stderr without allocating (we are inside the allocator).
fn raw_stderr(parts: &[&[u8]]) {
    for p in parts {
        // SAFETY: a valid buffer of the given length.
        unsafe { libc::write(2, p.as_ptr().cast(), p.len()) };
    }
}

fn charge(n: usize) -> bool {
    USAGE
        .try_with(|u| {
            let live = u.live.get().saturating_add(n as isize);
            if u.guarded.get() && live > HARD_CAP {
                let mut digits = [0u8; 20];
                let mut i = digits.len();
                let mut v = n;
                loop {
                    i -= 1;
                    digits[i] = b'0' + (v % 10) as u8;
                    v /= 10;
                    if v == 0 {
                        break;
                    }
                }
                raw_stderr(&[
                    b"\ncorrupt_corpus: case ",
                    u.case.get().as_bytes(),
                    b" asked for ",
                    &digits[i..],
                    b" bytes past the 1 GiB hard cap: refused (the process aborts)\n",
                ]);
                return false;
            }
            u.live.set(live);
            if live > u.peak.get() {
                u.peak.set(live);
            }
            true
        })
        .unwrap_or(true)
}

fn uncharge(n: usize) {
    let _ = USAGE.try_with(|u| u.live.set(u.live.get() - n as isize));
}

/// The system allocator, counting each thread's bytes (see [`Usage`]).
struct Counting;

// SAFETY: forwards to `System`, only adding bookkeeping that never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if !charge(l.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: same layout contract as ours.
        let p = unsafe { System.alloc(l) };
        if p.is_null() {
            uncharge(l.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if !charge(l.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: same layout contract as ours.
        let p = unsafe { System.alloc_zeroed(l) };
        if p.is_null() {
            uncharge(l.size());
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` was allocated by `System` with `l`.
        unsafe { System.dealloc(p, l) };
        uncharge(l.size());
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let old = l.size();
        if new > old && !charge(new - old) {
            return std::ptr::null_mut();
        }
        // SAFETY: `p` was allocated by `System` with `l`.
        let q = unsafe { System.realloc(p, l, new) };
        if q.is_null() {
            if new > old {
                uncharge(new - old);
            }
        } else if new < old {
            uncharge(old - new);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Cases run one at a time, so that RSS and the watchdog measure one case.
static SERIAL: Mutex<()> = Mutex::new(());

fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // SAFETY: no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}

/// Runs `f` as the case `name` on its own thread: fails (with the name) when
/// it panics, runs longer than `time`, holds more than `memory` bytes at
/// any point, or grows the process RSS by more than [`CASE_RSS`].
/// Returns `f`'s value and the case's peak bytes.
fn guarded<T: Send + 'static>(
    name: &str,
    memory: usize,
    time: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<(T, usize), String> {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let rss0 = rss();
    let label: &'static str = Box::leak(name.to_string().into_boxed_str());
    let (tx, rx) = mpsc::channel();
    let t0 = Instant::now();
    std::thread::Builder::new()
        .name("case".into())
        .stack_size(CASE_STACK)
        .spawn(move || {
            USAGE.with(|u| {
                u.case.set(label);
                u.live.set(0);
                u.peak.set(0);
                u.guarded.set(true);
            });
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            let peak = USAGE.with(|u| {
                u.guarded.set(false);
                u.peak.get().max(0) as usize
            });
            let r = r.map_err(|p| {
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            });
            let _ = tx.send((r, peak));
        })
        .expect("spawn a case thread");
    let (r, peak) = match rx.recv_timeout(time) {
        Ok(x) => x,
        Err(_) => return Err(format!("{name}: still running after {time:?} (hang?)")),
    };
    let v = r.map_err(|m| format!("{name}: panicked: {m}"))?;
    if peak > memory {
        return Err(format!(
            "{name}: held {} MiB at its peak (cap {} MiB)",
            peak >> 20,
            memory >> 20
        ));
    }
    let grown = rss().saturating_sub(rss0);
    if grown > CASE_RSS {
        return Err(format!(
            "{name}: process RSS grew by {} MiB in {:?}",
            grown >> 20,
            t0.elapsed()
        ));
    }
    Ok((v, peak))
}

// ===========================================================================
// Opening and walking an image through the filesystem core
// ===========================================================================

/// Cache budget of a corpus case.
const CACHE: usize = 4 << 20;
/// Nodes a walk visits at most (a cyclic tree is infinite).
const NODE_BUDGET: usize = 5_000;
/// Bytes read of one file at most (then its last bytes are read too).
const FILE_READ_CAP: u64 = 8 << 20;
/// Bytes read by one walk at most.
const WALK_READ_BUDGET: u64 = 64 << 20;

/// Opens an image held in memory as `AnyImage::open` opens a file.
fn open_any(img: Vec<u8>, cache: usize) -> mountfs::Result<AnyImage> {
    AnyImage::from_source(Box::new(MemSource(img)), "case", cache)
}

#[derive(Clone, Debug, Default)]
struct Walked {
    opened: bool,
    open_error: String,
    nodes: usize,
    errors: usize,
    bytes: u64,
    hit_budget: bool,
}

impl Walked {
    fn count<T>(&mut self, r: mountfs::Result<T>) -> Option<T> {
        r.map_err(|_| self.errors += 1).ok()
    }
}

/// Lists `dir` as the kernel does: small buffers, each call resuming from
/// the cookie of the last entry taken.
fn readdir_by_cookies(fs: &PackFs<AnyImage>, dir: u64, w: &mut Walked) {
    let mut cookie = 0;
    for _ in 0..2_000 {
        let mut last = None;
        let mut taken = 0;
        let r = fs.readdir(dir, cookie, &mut |e| {
            if taken == 5 {
                return false;
            }
            taken += 1;
            last = Some(e.cookie);
            true
        });
        if w.count(r).is_none() {
            return;
        }
        match last {
            Some(c) if c > cookie => cookie = c,
            _ => return,
        }
    }
}

fn read_file(fs: &PackFs<AnyImage>, node: u64, size: u64, w: &mut Walked) {
    let cap = size.min(FILE_READ_CAP);
    let mut off = 0;
    while off < cap && w.bytes < WALK_READ_BUDGET {
        match fs.read(node, off, 1 << 20) {
            Ok(d) if d.is_empty() => break,
            Ok(d) => {
                off += d.len() as u64;
                w.bytes += d.len() as u64;
            }
            Err(_) => {
                w.errors += 1;
                return;
            }
        }
    }
    if size > cap && w.bytes < WALK_READ_BUDGET {
        if let Some(d) = w.count(fs.read(node, size - 4096.min(size), 4096)) {
            w.bytes += d.len() as u64;
        }
    }
}

/// Everything a user could do to the mounted image, bounded by `budget`
/// nodes and [`WALK_READ_BUDGET`] bytes.
fn walk(fs: &PackFs<AnyImage>, w: &mut Walked, budget: usize) {
    let _ = fs.statfs();
    let mut stack = vec![ROOT];
    while let Some(n) = stack.pop() {
        if w.nodes == budget {
            w.hit_budget = true;
            break;
        }
        w.nodes += 1;
        let Some(a) = w.count(fs.getattr(n)) else {
            continue;
        };
        if let Some(list) = w.count(fs.listxattr(n)) {
            for name in list.split(|&b| b == 0).filter(|s| !s.is_empty()) {
                w.count(fs.getxattr(n, name));
            }
        }
        match a.kind {
            FileKind::Dir => {
                readdir_by_cookies(fs, n, w);
                if let Some(es) = w.count(fs.list(n)) {
                    for e in es {
                        w.count(fs.lookup(n, &e.name));
                        stack.push(e.node);
                    }
                }
            }
            FileKind::File => read_file(fs, n, a.size, w),
            FileKind::Symlink => {
                w.count(fs.readlink(n));
            }
            _ => {}
        }
    }
}

/// One corpus case: open, preload, walk.
fn exercise(img: Vec<u8>) -> Walked {
    let mut w = Walked::default();
    match open_any(img, CACHE) {
        Err(e) => w.open_error = e.to_string(),
        Ok(image) => {
            w.opened = true;
            let _ = image.preload();
            walk(&PackFs::new(image, 0, 0), &mut w, NODE_BUDGET);
        }
    }
    w
}

/// Runs corrupted images one by one, each image once.
struct Corpus {
    what: &'static str,
    seen: HashSet<blake3::Hash>,
    families: BTreeMap<String, (usize, usize)>,
    ran: usize,
    opened: usize,
    failures: Vec<String>,
}

impl Corpus {
    fn new(what: &'static str) -> Self {
        Corpus {
            what,
            seen: HashSet::new(),
            families: BTreeMap::new(),
            ran: 0,
            opened: 0,
            failures: Vec::new(),
        }
    }

    /// Marks an intact image, so that a "corruption" equal to it is not counted.
    fn intact(&mut self, img: &[u8]) {
        self.seen.insert(blake3::hash(img));
    }

    /// Runs `img` as case `family/name` unless an identical image already ran.
    fn case(&mut self, family: &str, name: &str, img: Vec<u8>) {
        if !self.seen.insert(blake3::hash(&img)) {
            return;
        }
        let label = format!("{}/{family}/{name}", self.what);
        match guarded(&label, CASE_MEMORY, CASE_TIME, move || exercise(img)) {
            Ok((w, _)) => {
                self.ran += 1;
                let f = self.families.entry(family.to_string()).or_default();
                f.0 += 1;
                if w.opened {
                    self.opened += 1;
                    f.1 += 1;
                }
            }
            Err(e) => self.failures.push(e),
        }
    }

    fn finish(self, at_least: usize) {
        println!(
            "{}: {} distinct corrupted images, {} opened and walked",
            self.what, self.ran, self.opened
        );
        for (f, (n, o)) in &self.families {
            println!("  {f:<28} {n:>4} images, {o:>4} opened");
        }
        assert!(
            self.failures.is_empty(),
            "{} of {} cases failed:\n{}",
            self.failures.len(),
            self.ran + self.failures.len(),
            self.failures.join("\n")
        );
        assert!(
            self.ran >= at_least,
            "{}: only {} distinct corrupted images",
            self.what,
            self.ran
        );
    }
}

/// Asserts that an intact image walks with no error at all.
fn assert_clean(what: &str, img: &[u8]) {
    let img = img.to_vec();
    let (w, _) = guarded(what, CASE_MEMORY, CASE_TIME, move || exercise(img)).unwrap();
    assert!(
        w.opened && w.errors == 0 && !w.hit_budget,
        "{what}: the intact image does not walk cleanly: {w:?}"
    );
}

// ===========================================================================
// Fixture images
// ===========================================================================

struct Fixtures {
    squashfs: Vec<(&'static str, Vec<u8>)>,
    zip: Vec<(&'static str, Vec<u8>)>,
}

const PY_ZIP: &str = r#"
import os, sys, zipfile
src, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(out, "w", strict_timestamps=False) as z:
    for root, dirs, files in os.walk(src):
        dirs.sort()
        rel = os.path.relpath(root, src)
        if rel != ".":
            z.write(root, rel)
        for f in sorted(files):
            p = os.path.join(root, f)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            t = zipfile.ZIP_STORED if "rand" in f else zipfile.ZIP_DEFLATED
            z.write(p, os.path.relpath(p, src), compress_type=t)
    with z.open(zipfile.ZipInfo("forced-zip64"), "w", force_zip64=True) as f:
        f.write(b"zip64 local extra " * 100)
"#;

fn fixtures() -> &'static Fixtures {
    static F: OnceLock<Fixtures> = OnceLock::new();
    F.get_or_init(|| {
        let t = scratch();
        let src = t.path().join("src");
        fixture_tree(&src, false);
        let out = |n: &str| t.path().join(n);
        pack(&src, &out("packfs.sqfs"), &[]);
        mksquashfs(&src, &out("gzip4k.sqfs"), &["-comp", "gzip", "-b", "4K"]);
        let raw = ["-comp", "gzip", "-b", "4K", "-noI", "-noD", "-noF", "-noX"];
        mksquashfs(&src, &out("raw.sqfs"), &raw);
        // A listing longer than a metadata block: an extended directory
        // inode with directory index entries.
        let many = out("many");
        std::fs::create_dir_all(many.join("dir")).unwrap();
        for i in 0..700 {
            std::fs::write(many.join(format!("dir/an-entry-name-{i:06}")), b"x").unwrap();
        }
        mksquashfs(&many, &out("indexed.sqfs"), &raw);

        pack(&src, &out("packfs.zip"), &[]);
        // Info-ZIP refuses special files: name everything else.
        let mut names = Vec::new();
        let mut todo = vec![src.clone()];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                let ft = std::fs::symlink_metadata(&p).unwrap().file_type();
                if ft.is_dir() {
                    todo.push(p.clone());
                } else if !ft.is_file() && !ft.is_symlink() {
                    continue;
                }
                names.push(p.strip_prefix(&src).unwrap().to_path_buf());
            }
        }
        names.sort();
        run(Command::new("zip")
            .current_dir(&src)
            .args(["-y", "-q"])
            .arg(out("infozip.zip"))
            .args(&names));
        run(Command::new("python3")
            .arg("-c")
            .arg(PY_ZIP)
            .arg(&src)
            .arg(out("python.zip")));
        let read = |n: &str| std::fs::read(out(n)).unwrap();
        Fixtures {
            squashfs: vec![
                ("packfs-zstd", read("packfs.sqfs")),
                ("mksquashfs-gzip-4k", read("gzip4k.sqfs")),
                ("mksquashfs-raw-4k", read("raw.sqfs")),
                ("mksquashfs-raw-indexed", read("indexed.sqfs")),
            ],
            zip: vec![
                ("packfs-deflate", read("packfs.zip")),
                ("infozip", read("infozip.zip")),
                ("python-zip64", with_zip64_end(&read("python.zip"))),
            ],
        }
    })
}

/// `zip` with its end record replaced by a Zip64 end record, a locator and
/// an end record whose fields send readers to them.
fn with_zip64_end(zip: &[u8]) -> Vec<u8> {
    let (eocd, _) = find_eocd(zip, 0).unwrap();
    let e = EndRecord::decode(&zip[eocd as usize..]).unwrap();
    let cd_end = e.cd_offset as u64 + e.cd_size as u64;
    let mut out = zip[..cd_end as usize].to_vec();
    Zip64EndRecord {
        record_size: 44,
        made_by: 45,
        version_needed: 45,
        disk: 0,
        cd_disk: 0,
        entries_here: e.entries as u64,
        entries: e.entries as u64,
        cd_size: e.cd_size as u64,
        cd_offset: e.cd_offset as u64,
    }
    .encode(&mut out);
    Zip64Locator {
        record_disk: 0,
        record_offset: cd_end,
        total_disks: 1,
    }
    .encode(&mut out);
    EndRecord {
        disk: 0,
        cd_disk: 0,
        entries_here: 0xFFFF,
        entries: 0xFFFF,
        cd_size: 0xFFFF_FFFF,
        cd_offset: 0xFFFF_FFFF,
        comment_len: 0,
    }
    .encode(&mut out);
    out
}

// ===========================================================================
// Mutations
// ===========================================================================

/// A field of `width` bytes at `at`, flipped three ways: its lowest bit, its
/// highest bit, and every bit set (the largest value the field can hold).
fn field_flips(img: &[u8], at: usize, width: usize) -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    if at + width > img.len() {
        return out;
    }
    let mut a = img.to_vec();
    a[at] ^= 0x01;
    out.push(("bit0", a));
    let mut b = img.to_vec();
    b[at + width - 1] ^= 0x80;
    out.push(("top-bit", b));
    let mut c = img.to_vec();
    c[at..at + width].fill(0xFF);
    out.push(("all-ones", c));
    out
}

/// [`field_flips`] plus a flip in the middle byte, for the few records
/// whose every bit matters (superblock, end records).
fn field_flips4(img: &[u8], at: usize, width: usize) -> Vec<(&'static str, Vec<u8>)> {
    let mut out = field_flips(img, at, width);
    if at + width <= img.len() {
        let mut d = img.to_vec();
        d[at + width / 2] ^= 0x10;
        out.push(("mid-bit", d));
    }
    out
}

fn flip(img: &[u8], at: u64, mask: u8) -> Vec<u8> {
    let mut v = img.to_vec();
    v[at as usize] ^= mask;
    v
}

fn le16(b: &[u8], at: u64) -> u16 {
    u16::from_le_bytes([b[at as usize], b[at as usize + 1]])
}

fn le64(b: &[u8], at: u64) -> u64 {
    u64::from_le_bytes(b[at as usize..at as usize + 8].try_into().unwrap())
}

// ===========================================================================
// Where a SquashFS image keeps what, found with the format crate
// ===========================================================================

#[derive(Clone, Copy, Debug)]
struct MetaBlock {
    pos: u64,
    stored: usize,
    compressed: bool,
}

/// A metadata area decoded: its blocks and their concatenated payloads.
struct Area {
    start: u64,
    blocks: Vec<MetaBlock>,
    payload: Vec<u8>,
    /// Payload offset of each block's first byte.
    starts: Vec<usize>,
}

impl Area {
    fn read(img: &[u8], start: u64, end: u64, comp: Compressor) -> Area {
        let mut a = Area {
            start,
            blocks: Vec::new(),
            payload: Vec::new(),
            starts: Vec::new(),
        };
        let mut pos = start;
        while pos + 2 <= end {
            let h = MetaHeader::decode([img[pos as usize], img[pos as usize + 1]]);
            let stored = h.stored_len as usize;
            let raw = &img[pos as usize + 2..pos as usize + 2 + stored];
            a.starts.push(a.payload.len());
            if h.compressed {
                let mut out = Vec::new();
                decompress(comp, raw, &mut out, METADATA_SIZE).unwrap();
                a.payload.extend_from_slice(&out);
            } else {
                a.payload.extend_from_slice(raw);
            }
            a.blocks.push(MetaBlock {
                pos,
                stored,
                compressed: h.compressed,
            });
            pos += 2 + stored as u64;
        }
        a
    }

    /// Payload offset of a metadata reference into this area.
    fn offset_of(&self, r: u64) -> Option<usize> {
        let (block, off) = split_ref(r);
        let i = self
            .blocks
            .iter()
            .position(|b| b.pos == self.start + block)?;
        Some(self.starts[i] + off)
    }

    /// Image position of payload byte `o`, when its block is stored raw.
    fn file_pos(&self, o: usize) -> Option<u64> {
        let i = self.starts.partition_point(|&s| s <= o).checked_sub(1)?;
        let b = self.blocks[i];
        (!b.compressed && o - self.starts[i] < b.stored)
            .then(|| b.pos + 2 + (o - self.starts[i]) as u64)
    }
}

struct InodeRec {
    /// Payload offset in the inode area.
    off: usize,
    header: InodeHeader,
    body: InodeBody,
    /// A file's block size words.
    words: Vec<u32>,
}

/// One lookup table: its index position and the blocks the index lists.
struct Table {
    name: &'static str,
    index: u64,
    blocks: Vec<u64>,
}

struct SqMap {
    sb: Superblock,
    inodes: Area,
    dirs: Area,
    recs: Vec<InodeRec>,
    tables: Vec<Table>,
    /// Xattr key/value area start and the id table header position.
    xattr: Option<(u64, u64)>,
    frags: Vec<FragmentEntry>,
}

impl SqMap {
    fn new(img: &[u8]) -> SqMap {
        let sb = Superblock::decode(img[..SUPERBLOCK_SIZE].try_into().unwrap());
        let comp = Compressor::from_id(sb.compression_id).unwrap();
        let words = |at: u64, n: u64| (0..n).map(|i| le64(img, at + 8 * i)).collect::<Vec<_>>();
        let mut tables = Vec::new();
        if sb.fragment_count > 0 {
            let n = index_len(sb.fragment_count as u64, 16);
            tables.push(Table {
                name: "fragment",
                index: sb.fragment_table_start,
                blocks: words(sb.fragment_table_start, n),
            });
        }
        if sb.export_table_start != INVALID_TABLE {
            let n = index_len(sb.inode_count as u64, 8);
            tables.push(Table {
                name: "export",
                index: sb.export_table_start,
                blocks: words(sb.export_table_start, n),
            });
        }
        tables.push(Table {
            name: "id",
            index: sb.id_table_start,
            blocks: words(sb.id_table_start, index_len(sb.id_count as u64, 4)),
        });
        let mut xattr = None;
        if sb.xattr_id_table_start != INVALID_TABLE {
            let at = sb.xattr_id_table_start;
            let h = XattrTableHeader::decode(&mut SliceInput::new(
                &img[at as usize..at as usize + 16],
                "xattr header",
            ))
            .unwrap();
            tables.push(Table {
                name: "xattr-id",
                index: at + 16,
                blocks: words(at + 16, index_len(h.count as u64, 16)),
            });
            xattr = Some((h.kv_start, at));
        }
        // The directory table ends where the next table starts.
        let mut after: Vec<u64> = tables
            .iter()
            .flat_map(|t| t.blocks.iter().copied().chain([t.index]))
            .chain(xattr.map(|x| x.0))
            .chain([sb.bytes_used])
            .filter(|&p| p > sb.directory_table_start)
            .collect();
        after.sort_unstable();
        let inodes = Area::read(img, sb.inode_table_start, sb.directory_table_start, comp);
        let dirs = Area::read(img, sb.directory_table_start, after[0], comp);
        let recs = decode_inodes(&inodes.payload, sb.block_size);
        let mut frags = Vec::new();
        if let Some(t) = tables.iter().find(|t| t.name == "fragment") {
            for &b in &t.blocks {
                let a = Area::read(img, b, b + 2, comp);
                let mut c = SliceInput::new(&a.payload, "fragment table");
                while let Ok(f) = FragmentEntry::decode(&mut c) {
                    frags.push(f);
                }
            }
            frags.truncate(sb.fragment_count as usize);
        }
        SqMap {
            sb,
            inodes,
            dirs,
            recs,
            tables,
            xattr,
            frags,
        }
    }

    /// Every table and area start, named, sorted by position.
    fn boundaries(&self) -> Vec<(String, u64)> {
        let sb = &self.sb;
        let mut b = vec![
            ("superblock-end".to_string(), SUPERBLOCK_SIZE as u64),
            ("inode-table".into(), sb.inode_table_start),
            ("directory-table".into(), sb.directory_table_start),
            ("bytes-used".into(), sb.bytes_used),
        ];
        if let Some(&(pos, _)) = self.data_blocks().first() {
            b.push(("first-data-block".into(), pos));
        }
        for t in &self.tables {
            if let Some(&first) = t.blocks.first() {
                b.push((format!("{}-table", t.name), first));
            }
            b.push((format!("{}-index", t.name), t.index));
        }
        if let Some((kv, header)) = self.xattr {
            b.push(("xattr-kv".into(), kv));
            b.push(("xattr-header".into(), header));
        }
        b.sort_by_key(|x| x.1);
        b.dedup_by_key(|x| x.1);
        b
    }

    /// (position, size word) of every stored data and fragment block.
    fn data_blocks(&self) -> Vec<(u64, u32)> {
        let mut out = Vec::new();
        for r in &self.recs {
            let start = match &r.body {
                InodeBody::BasicFile(f) => f.blocks_start as u64,
                InodeBody::ExtFile(f) => f.blocks_start,
                _ => continue,
            };
            let mut pos = start;
            for &w in &r.words {
                if w & DATA_SIZE_MASK != 0 {
                    out.push((pos, w));
                }
                pos += (w & DATA_SIZE_MASK) as u64;
            }
        }
        out.extend(self.frags.iter().map(|f| (f.start, f.size)));
        out.sort_unstable();
        out.dedup();
        out
    }
}

fn decode_inodes(payload: &[u8], block_size: u32) -> Vec<InodeRec> {
    let mut c = SliceInput::new(payload, "inode table");
    let mut out = Vec::new();
    while c.pos() < payload.len() {
        let off = c.pos();
        let header = InodeHeader::decode(&mut c).unwrap();
        let body = InodeBody::decode(&mut c, header.inode_type, header.inode_number).unwrap();
        let n = match &body {
            InodeBody::BasicFile(f) => {
                block_count(f.size as u64, block_size, f.fragment != INVALID_FRAG)
            }
            InodeBody::ExtFile(f) => block_count(f.size, block_size, f.fragment != INVALID_FRAG),
            InodeBody::ExtDir(d) => {
                for _ in 0..d.index_count {
                    let e = DirIndex::decode(&mut c).unwrap();
                    c.bytes(e.name_len).unwrap();
                }
                0
            }
            _ => 0,
        };
        let words = (0..n).map(|_| c.u32().unwrap()).collect();
        out.push(InodeRec {
            off,
            header,
            body,
            words,
        });
    }
    out
}

/// Named fields of an inode record: (name, offset in the record, width).
fn inode_fields(r: &InodeRec) -> Vec<(String, usize, usize)> {
    let mut f: Vec<(&str, usize, usize)> = vec![
        ("type", 0, 2),
        ("permissions", 2, 2),
        ("uid-index", 4, 2),
        ("gid-index", 6, 2),
        ("mtime", 8, 4),
        ("inode-number", 12, 4),
    ];
    match &r.body {
        InodeBody::BasicDir(_) => f.extend([
            ("block", 16, 4),
            ("nlink", 20, 4),
            ("size", 24, 2),
            ("offset", 26, 2),
            ("parent", 28, 4),
        ]),
        InodeBody::ExtDir(d) => {
            f.extend([
                ("nlink", 16, 4),
                ("size", 20, 4),
                ("block", 24, 4),
                ("parent", 28, 4),
                ("index-count", 32, 2),
                ("offset", 34, 2),
                ("xattr", 36, 4),
            ]);
            if d.index_count > 0 {
                f.extend([
                    ("index.index", 40, 4),
                    ("index.start-block", 44, 4),
                    ("index.name-len", 48, 4),
                    ("index.name", 52, 1),
                ]);
            }
        }
        InodeBody::BasicFile(_) => f.extend([
            ("blocks-start", 16, 4),
            ("fragment", 20, 4),
            ("fragment-offset", 24, 4),
            ("size", 28, 4),
        ]),
        InodeBody::ExtFile(_) => f.extend([
            ("blocks-start", 16, 8),
            ("size", 24, 8),
            ("sparse", 32, 8),
            ("nlink", 40, 4),
            ("fragment", 44, 4),
            ("fragment-offset", 48, 4),
            ("xattr", 52, 4),
        ]),
        InodeBody::Symlink(s) => {
            f.extend([("nlink", 16, 4), ("target-size", 20, 4), ("target", 24, 1)]);
            if s.xattr.is_some() {
                return named(f, Some(("xattr".into(), 24 + s.target.len(), 4)));
            }
        }
        InodeBody::Device(d) => {
            f.extend([("nlink", 16, 4), ("rdev", 20, 4)]);
            if d.xattr.is_some() {
                f.push(("xattr", 24, 4));
            }
        }
        InodeBody::Ipc(i) => {
            f.push(("nlink", 16, 4));
            if i.xattr.is_some() {
                f.push(("xattr", 20, 4));
            }
        }
    }
    let word = match &r.body {
        InodeBody::BasicFile(_) if !r.words.is_empty() => Some(("block-word".into(), 32, 4)),
        InodeBody::ExtFile(_) if !r.words.is_empty() => Some(("block-word".into(), 56, 4)),
        _ => None,
    };
    named(f, word)
}

fn named(
    f: Vec<(&str, usize, usize)>,
    extra: Option<(String, usize, usize)>,
) -> Vec<(String, usize, usize)> {
    f.into_iter()
        .map(|(n, o, w)| (n.to_string(), o, w))
        .chain(extra)
        .collect()
}

/// A short name for an inode's kind, to pick one of each.
fn inode_kind(r: &InodeRec) -> String {
    let base = match &r.body {
        InodeBody::BasicDir(_) => "basic-dir".to_string(),
        InodeBody::ExtDir(d) if d.index_count > 0 => "ext-dir-indexed".into(),
        InodeBody::ExtDir(_) => "ext-dir".into(),
        InodeBody::BasicFile(_) => "basic-file".into(),
        InodeBody::ExtFile(_) => "ext-file".into(),
        InodeBody::Symlink(s) if s.xattr.is_some() => "ext-symlink".into(),
        InodeBody::Symlink(_) => "symlink".into(),
        InodeBody::Device(_) => format!("dev-type{}", r.header.inode_type),
        InodeBody::Ipc(_) => format!("ipc-type{}", r.header.inode_type),
    };
    match &r.body {
        InodeBody::BasicFile(f) if f.fragment != INVALID_FRAG => format!("{base}-fragment"),
        InodeBody::ExtFile(f) if f.fragment != INVALID_FRAG => format!("{base}-fragment"),
        _ if !r.words.is_empty() => format!("{base}-blocks"),
        _ => base,
    }
}

// ===========================================================================
// The SquashFS corpus
// ===========================================================================

fn squashfs_truncations(c: &mut Corpus, name: &str, img: &[u8], m: &SqMap) {
    let bounds = m.boundaries();
    let fam = "truncation";
    for (i, (what, at)) in bounds.iter().enumerate() {
        let next = bounds.get(i + 1).map_or(img.len() as u64, |b| b.1);
        let mut cuts = vec![
            (format!("at-{what}"), *at),
            (format!("at-{what}+1"), at + 1),
        ];
        if next > at + 2 {
            cuts.push((format!("inside-{what}"), at + (next - at) / 2));
        }
        for (cut_name, cut) in cuts {
            if cut >= img.len() as u64 {
                continue;
            }
            let cut_img = img[..cut as usize].to_vec();
            // The superblock patched to agree, so the reader trusts the
            // tables up to the cut and finds them missing.
            if cut >= SUPERBLOCK_SIZE as u64 {
                let mut p = cut_img.clone();
                let mut sb = m.sb.clone();
                sb.bytes_used = cut;
                p[..SUPERBLOCK_SIZE].copy_from_slice(&sb.encode());
                c.case(fam, &format!("{name}/{cut_name}/bytes-used-patched"), p);
            }
            c.case(fam, &format!("{name}/{cut_name}"), cut_img);
        }
    }
}

const SB_FIELDS: [(&str, usize, usize); 19] = [
    ("magic", 0, 4),
    ("inode-count", 4, 4),
    ("mod-time", 8, 4),
    ("block-size", 12, 4),
    ("fragment-count", 16, 4),
    ("compression-id", 20, 2),
    ("block-log", 22, 2),
    ("flags", 24, 2),
    ("id-count", 26, 2),
    ("version-major", 28, 2),
    ("version-minor", 30, 2),
    ("root-inode", 32, 8),
    ("bytes-used", 40, 8),
    ("id-table-start", 48, 8),
    ("xattr-id-table-start", 56, 8),
    ("inode-table-start", 64, 8),
    ("directory-table-start", 72, 8),
    ("fragment-table-start", 80, 8),
    ("export-table-start", 88, 8),
];

fn squashfs_superblock(c: &mut Corpus, name: &str, img: &[u8]) {
    for (field, at, width) in SB_FIELDS {
        for (how, v) in field_flips4(img, at, width) {
            c.case("superblock", &format!("{name}/{field}/{how}"), v);
        }
    }
}

/// Header and payload flips of one metadata block.
fn block_flips(img: &[u8], b: MetaBlock) -> Vec<(&'static str, Vec<u8>)> {
    let mut out = vec![
        ("header-compressed-bit", flip(img, b.pos + 1, 0x80)),
        ("header-length-bit0", flip(img, b.pos, 0x01)),
        ("header-length-bit12", flip(img, b.pos + 1, 0x10)),
    ];
    if b.stored > 0 {
        let p = b.pos + 2;
        out.push(("payload-first-byte", flip(img, p, 0x01)));
        out.push((
            "payload-middle-byte",
            flip(img, p + b.stored as u64 / 2, 0x10),
        ));
        out.push((
            "payload-last-byte",
            flip(img, p + b.stored as u64 - 1, 0x80),
        ));
    }
    out
}

fn squashfs_tables(c: &mut Corpus, name: &str, img: &[u8], m: &SqMap) {
    for t in &m.tables {
        let fam = format!("table-{}", t.name);
        for (i, &w) in t.blocks.iter().enumerate().take(2) {
            let at = t.index + 8 * i as u64;
            for (how, mask, byte) in [
                ("bit0", 0x01, 0),
                ("bit13", 0x20, 1),
                ("bit40", 0x01, 5),
                ("bit63", 0x80, 7),
            ] {
                c.case(
                    &fam,
                    &format!("{name}/index-word{i}/{how}"),
                    flip(img, at + byte, mask),
                );
            }
            let mut z = img.to_vec();
            z[at as usize..at as usize + 8].fill(0);
            c.case(&fam, &format!("{name}/index-word{i}/zero"), z);
            let stored = (le16(img, w) & 0x7FFF) as usize;
            let b = MetaBlock {
                pos: w,
                stored,
                compressed: le16(img, w) & 0x8000 == 0,
            };
            for (how, v) in block_flips(img, b) {
                c.case(&fam, &format!("{name}/block{i}/{how}"), v);
            }
        }
    }
    if let Some((kv, header)) = m.xattr {
        let fam = "table-xattr-header";
        for (field, at, width) in [("kv-start", 0, 8), ("count", 8, 4)] {
            for (how, v) in field_flips4(img, header as usize + at, width) {
                c.case(fam, &format!("{name}/{field}/{how}"), v);
            }
        }
        let stored = (le16(img, kv) & 0x7FFF) as usize;
        let b = MetaBlock {
            pos: kv,
            stored,
            compressed: le16(img, kv) & 0x8000 == 0,
        };
        for (how, v) in block_flips(img, b) {
            c.case("table-xattr-kv", &format!("{name}/block0/{how}"), v);
        }
    }
}

fn squashfs_metadata(c: &mut Corpus, name: &str, img: &[u8], m: &SqMap) {
    for (area, what) in [(&m.inodes, "inode-table"), (&m.dirs, "directory-table")] {
        let n = area.blocks.len();
        let mut picks = vec![(0, "first")];
        if n > 1 {
            picks.push((n - 1, "last"));
        }
        for (i, which) in picks {
            for (how, v) in block_flips(img, area.blocks[i]) {
                c.case(
                    &format!("metadata-{what}"),
                    &format!("{name}/{which}-block/{how}"),
                    v,
                );
            }
        }
    }
}

fn squashfs_data(c: &mut Corpus, name: &str, img: &[u8], m: &SqMap) {
    let blocks = m.data_blocks();
    let frag_starts: HashSet<u64> = m.frags.iter().map(|f| f.start).collect();
    let pick = |frag: bool, raw: bool| {
        blocks
            .iter()
            .find(|(p, w)| frag_starts.contains(p) == frag && (w & DATA_UNCOMPRESSED != 0) == raw)
    };
    for (what, frag, raw) in [
        ("compressed-block", false, false),
        ("raw-block", false, true),
        ("compressed-fragment", true, false),
        ("raw-fragment", true, true),
    ] {
        if let Some(&(pos, w)) = pick(frag, raw) {
            let len = (w & DATA_SIZE_MASK) as u64;
            c.case(
                "data",
                &format!("{name}/{what}/first-byte"),
                flip(img, pos, 0x01),
            );
            c.case(
                "data",
                &format!("{name}/{what}/middle-byte"),
                flip(img, pos + len / 2, 0x10),
            );
        }
    }
    // A compressed block replaced by a valid stream of more than a block of
    // zeros, in the same stored length: decompression must stop at the
    // block size.
    let comp = Compressor::from_id(m.sb.compression_id).unwrap();
    let mut big = Vec::new();
    let zeros = vec![0u8; 16 * m.sb.block_size as usize];
    if let Ok(true) =
        Encoder::new(comp, None, m.sb.block_size).map(|e| e.compress(&zeros, &mut big).unwrap())
    {
        if let Some(&(pos, _)) = blocks
            .iter()
            .find(|(_, w)| w & DATA_UNCOMPRESSED == 0 && (w & DATA_SIZE_MASK) as usize >= big.len())
        {
            let mut v = img.to_vec();
            v[pos as usize..pos as usize + big.len()].copy_from_slice(&big);
            c.case("data", &format!("{name}/block-expands-16x"), v);
        }
    }
}

/// Record-level flips: possible where the metadata is stored raw.
fn squashfs_records(c: &mut Corpus, name: &str, img: &[u8], m: &SqMap) {
    // One inode of each kind, every field.
    let mut kinds = HashSet::new();
    for r in &m.recs {
        if !kinds.insert(inode_kind(r)) {
            continue;
        }
        for (field, at, width) in inode_fields(r) {
            let Some(pos) = m.inodes.file_pos(r.off + at) else {
                continue;
            };
            // A field straddling two blocks: flip the part in the first.
            let width = width.min(
                (0..width)
                    .take_while(|k| m.inodes.file_pos(r.off + at + k) == Some(pos + *k as u64))
                    .count(),
            );
            for (how, v) in field_flips(img, pos as usize, width) {
                c.case(
                    "inode-record",
                    &format!("{name}/{}/{field}/{how}", inode_kind(r)),
                    v,
                );
            }
        }
    }
    // The root listing and the first listing of another directory: the
    // header and first entry, field by field.
    let listings: Vec<(u64, u16)> = m
        .recs
        .iter()
        .filter_map(|r| match &r.body {
            InodeBody::BasicDir(d) if d.size > 3 => Some((d.block as u64, d.offset)),
            InodeBody::ExtDir(d) if d.size > 3 => Some((d.block as u64, d.offset)),
            _ => None,
        })
        .take(2)
        .collect();
    for (i, (block, offset)) in listings.into_iter().enumerate() {
        let Some(o) = m.dirs.offset_of(make_ref(block, offset as usize)) else {
            continue;
        };
        for (field, at, width) in [
            ("header.count", 0, 4),
            ("header.start-block", 4, 4),
            ("header.inode-number", 8, 4),
            ("entry.offset", 12, 2),
            ("entry.inode-delta", 14, 2),
            ("entry.type", 16, 2),
            ("entry.name-len", 18, 2),
            ("entry.name", 20, 1),
        ] {
            let Some(pos) = m.dirs.file_pos(o + at) else {
                continue;
            };
            for (how, v) in field_flips(img, pos as usize, width) {
                c.case(
                    "directory-record",
                    &format!("{name}/listing{i}/{field}/{how}"),
                    v,
                );
            }
        }
    }
    // Table entries: the first of each table stored raw.
    for t in &m.tables {
        let Some(&b) = t.blocks.first() else { continue };
        if le16(img, b) & 0x8000 == 0 {
            continue;
        }
        let fields: &[(&str, usize, usize)] = match t.name {
            "fragment" => &[("start", 0, 8), ("size-word", 8, 4), ("unused", 12, 4)],
            "xattr-id" => &[("kv-ref", 0, 8), ("count", 8, 4), ("size", 12, 4)],
            "id" => &[("id", 0, 4)],
            _ => &[("inode-ref", 0, 8)],
        };
        for &(field, at, width) in fields {
            for (how, v) in field_flips(img, b as usize + 2 + at, width) {
                c.case(
                    &format!("{}-entry", t.name),
                    &format!("{name}/entry0/{field}/{how}"),
                    v,
                );
            }
        }
    }
    // The first xattr key and value, when the key/value area is stored raw.
    if let Some((kv, _)) = m.xattr {
        if le16(img, kv) & 0x8000 != 0 {
            let p = kv as usize + 2;
            let name_len = le16(img, p as u64 + 2) as usize;
            for (field, at, width) in [
                ("key.type", 0, 2),
                ("key.name-len", 2, 2),
                ("key.name", 4, 1),
                ("value.len", 4 + name_len, 4),
                ("value", 8 + name_len, 1),
            ] {
                for (how, v) in field_flips(img, p + at, width) {
                    c.case("xattr-record", &format!("{name}/first/{field}/{how}"), v);
                }
            }
        }
    }
}

#[test]
fn squashfs_corpus_gives_errors_never_panics_hangs_or_unbounded_memory() {
    let f = fixtures();
    let mut c = Corpus::new("squashfs");
    for (name, img) in &f.squashfs {
        assert_clean(&format!("squashfs/{name}/intact"), img);
        c.intact(img);
    }
    for (name, img) in &f.squashfs {
        let m = SqMap::new(img);
        let raw = m.inodes.blocks.iter().all(|b| !b.compressed);
        assert_eq!(raw, name.contains("raw"), "{name}: inode table compression");
        if !name.contains("indexed") {
            squashfs_truncations(&mut c, name, img, &m);
            squashfs_superblock(&mut c, name, img);
            squashfs_tables(&mut c, name, img, &m);
            squashfs_metadata(&mut c, name, img, &m);
            squashfs_data(&mut c, name, img, &m);
        } else {
            assert!(
                m.recs.iter().any(|r| inode_kind(r) == "ext-dir-indexed"),
                "{name}: no directory index"
            );
        }
        if raw {
            squashfs_records(&mut c, name, img, &m);
        }
    }
    c.finish(50);
}

// ===========================================================================
// The ZIP corpus
// ===========================================================================

struct ZipEntry {
    cd_pos: u64,
    h: CentralHeader,
    local: u64,
    data: u64,
    csize: u64,
    size: u64,
}

struct ZipMap {
    eocd: u64,
    /// Zip64 end record and locator positions.
    z64: Option<(u64, u64)>,
    cd_offset: u64,
    cd_end: u64,
    entries: Vec<ZipEntry>,
}

impl ZipMap {
    fn new(img: &[u8]) -> ZipMap {
        let (eocd, _) = find_eocd(img, 0).unwrap();
        let e = EndRecord::decode(&img[eocd as usize..]).unwrap();
        let mut cd_offset = e.cd_offset as u64;
        let mut cd_size = e.cd_size as u64;
        let mut z64 = None;
        let loc_at = eocd - EOCD64_LOCATOR_LEN as u64;
        if let Ok(l) = Zip64Locator::decode(&img[loc_at as usize..]) {
            let r = Zip64EndRecord::decode(&img[l.record_offset as usize..]).unwrap();
            cd_offset = r.cd_offset;
            cd_size = r.cd_size;
            z64 = Some((l.record_offset, loc_at));
        }
        let mut entries = Vec::new();
        let mut at = cd_offset;
        while at < cd_offset + cd_size {
            let (ce, n) = parse_central(&img[at as usize..]).unwrap();
            let h = CentralHeader::decode(&img[at as usize..]).unwrap();
            let lh = LocalHeader::decode(&img[ce.local_offset as usize..]).unwrap();
            entries.push(ZipEntry {
                cd_pos: at,
                h,
                local: ce.local_offset,
                data: ce.local_offset + lh.data_offset(),
                csize: ce.csize,
                size: ce.size,
            });
            at += n as u64;
        }
        ZipMap {
            eocd,
            z64,
            cd_offset,
            cd_end: cd_offset + cd_size,
            entries,
        }
    }

    /// The largest deflated member and the first stored member with data.
    fn picks(&self) -> Vec<(&'static str, &ZipEntry)> {
        let mut out = Vec::new();
        if let Some(e) = self
            .entries
            .iter()
            .filter(|e| e.h.method == METHOD_DEFLATE)
            .max_by_key(|e| e.size)
        {
            out.push(("largest-deflated", e));
        }
        if let Some(e) = self
            .entries
            .iter()
            .find(|e| e.h.method == METHOD_STORED && e.size > 0)
        {
            out.push(("stored", e));
        }
        out
    }
}

const EOCD_FIELDS: [(&str, usize, usize); 8] = [
    ("signature", 0, 4),
    ("disk", 4, 2),
    ("cd-disk", 6, 2),
    ("entries-here", 8, 2),
    ("entries", 10, 2),
    ("cd-size", 12, 4),
    ("cd-offset", 16, 4),
    ("comment-len", 20, 2),
];

const CENTRAL_FIELDS: [(&str, usize, usize); 17] = [
    ("signature", 0, 4),
    ("made-by", 4, 2),
    ("version-needed", 6, 2),
    ("flags", 8, 2),
    ("method", 10, 2),
    ("dos-time", 12, 2),
    ("dos-date", 14, 2),
    ("crc", 16, 4),
    ("csize", 20, 4),
    ("size", 24, 4),
    ("name-len", 28, 2),
    ("extra-len", 30, 2),
    ("comment-len", 32, 2),
    ("disk-start", 34, 2),
    ("internal-attrs", 36, 2),
    ("external-attrs", 38, 4),
    ("local-offset", 42, 4),
];

const LOCAL_FIELDS: [(&str, usize, usize); 11] = [
    ("signature", 0, 4),
    ("version-needed", 4, 2),
    ("flags", 6, 2),
    ("method", 8, 2),
    ("dos-time", 10, 2),
    ("dos-date", 12, 2),
    ("crc", 14, 4),
    ("csize", 18, 4),
    ("size", 22, 4),
    ("name-len", 26, 2),
    ("extra-len", 28, 2),
];

fn zip_cases(c: &mut Corpus, name: &str, img: &[u8], m: &ZipMap) {
    for (field, at, width) in EOCD_FIELDS {
        for (how, v) in field_flips4(img, m.eocd as usize + at, width) {
            c.case("end-record", &format!("{name}/{field}/{how}"), v);
        }
    }
    if let Some((rec, loc)) = m.z64 {
        for (field, at, width) in [
            ("signature", 0, 4),
            ("record-disk", 4, 4),
            ("record-offset", 8, 8),
            ("total-disks", 16, 4),
        ] {
            for (how, v) in field_flips4(img, loc as usize + at, width) {
                c.case("zip64-locator", &format!("{name}/{field}/{how}"), v);
            }
        }
        for (field, at, width) in [
            ("signature", 0, 4),
            ("record-size", 4, 8),
            ("made-by", 12, 2),
            ("version-needed", 14, 2),
            ("disk", 16, 4),
            ("cd-disk", 20, 4),
            ("entries-here", 24, 8),
            ("entries", 32, 8),
            ("cd-size", 40, 8),
            ("cd-offset", 48, 8),
        ] {
            for (how, v) in field_flips4(img, rec as usize + at, width) {
                c.case("zip64-record", &format!("{name}/{field}/{how}"), v);
            }
        }
    }
    for (which, e) in m.picks() {
        let mut fields: Vec<(&str, usize, usize)> = CENTRAL_FIELDS.to_vec();
        let nl = e.h.name_len as usize;
        fields.push(("name", 46, 1));
        if e.h.extra_len >= 4 {
            fields.push(("extra.id", 46 + nl, 2));
            fields.push(("extra.len", 48 + nl, 2));
        }
        for (field, at, width) in fields {
            for (how, v) in field_flips(img, e.cd_pos as usize + at, width) {
                c.case(
                    "central-header",
                    &format!("{name}/{which}/{field}/{how}"),
                    v,
                );
            }
        }
        for (field, at, width) in LOCAL_FIELDS {
            for (how, v) in field_flips(img, e.local as usize + at, width) {
                c.case("local-header", &format!("{name}/{which}/{field}/{how}"), v);
            }
        }
        if e.csize > 0 {
            for (at_name, at) in [
                ("first", e.data),
                ("middle", e.data + e.csize / 2),
                ("last", e.data + e.csize - 1),
            ] {
                c.case(
                    "data",
                    &format!("{name}/{which}/{at_name}-byte"),
                    flip(img, at, 0x10),
                );
            }
        }
    }
    // Truncation at every structure boundary, and holes: the data lost
    // from a boundary up to the central directory, which survives.
    let mut bounds: Vec<(String, u64)> = vec![
        ("end-record".into(), m.eocd),
        ("end-record+1".into(), m.eocd + 1),
        ("inside-end-record".into(), m.eocd + 12),
        ("central-directory".into(), m.cd_offset),
        ("central-directory+1".into(), m.cd_offset + 1),
        (
            "inside-central-directory".into(),
            m.cd_offset + (m.cd_end - m.cd_offset) / 2,
        ),
        ("last-byte".into(), img.len() as u64 - 1),
    ];
    if let Some((rec, loc)) = m.z64 {
        bounds.push(("zip64-record".into(), rec));
        bounds.push(("zip64-locator".into(), loc));
        bounds.push(("inside-zip64-record".into(), rec + 30));
    }
    for (which, e) in m.picks() {
        bounds.push((format!("{which}-local-header"), e.local));
        bounds.push((format!("inside-{which}-data"), e.data + e.csize / 2));
    }
    if let Some(e) = m.entries.get(1) {
        bounds.push(("second-central-record".into(), e.cd_pos));
    }
    for (what, at) in bounds {
        c.case(
            "truncation",
            &format!("{name}/at-{what}"),
            img[..at as usize].to_vec(),
        );
        if at < m.cd_offset {
            let mut v = img.to_vec();
            v[at as usize..m.cd_offset as usize].fill(0);
            c.case("hole", &format!("{name}/from-{what}"), v);
        }
    }
}

#[test]
fn zip_corpus_gives_errors_never_panics_hangs_or_unbounded_memory() {
    let f = fixtures();
    let mut c = Corpus::new("zip");
    for (name, img) in &f.zip {
        assert_clean(&format!("zip/{name}/intact"), img);
        c.intact(img);
    }
    for (name, img) in &f.zip {
        let m = ZipMap::new(img);
        assert!(m.entries.len() > 20, "{name}: {} entries", m.entries.len());
        assert_eq!(m.z64.is_some(), name.contains("zip64"), "{name}");
        assert_eq!(m.picks().len(), 2, "{name}: a deflated and a stored member");
        zip_cases(&mut c, name, img, &m);
    }
    c.finish(50);
}

// ===========================================================================
// A SquashFS writer for hand-built images
// ===========================================================================

/// The reference of payload byte `o` of a metadata area whose blocks are
/// all stored raw (8192 bytes of payload after each 2-byte header).
fn meta_ref(o: usize) -> u64 {
    make_ref(
        (o / METADATA_SIZE * (METADATA_SIZE + 2)) as u64,
        o % METADATA_SIZE,
    )
}

/// Writes `payload` as raw metadata blocks; returns their positions.
fn write_meta(img: &mut Vec<u8>, payload: &[u8]) -> Vec<u64> {
    let mut at = Vec::new();
    for chunk in payload.chunks(METADATA_SIZE) {
        at.push(img.len() as u64);
        img.extend_from_slice(
            &MetaHeader {
                stored_len: chunk.len() as u16,
                compressed: false,
            }
            .encode(),
        );
        img.extend_from_slice(chunk);
    }
    at
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    /// Payload offset of the inode in the inode table.
    off: usize,
    r: u64,
    number: u32,
}

/// An image under construction: data blocks, then every metadata area
/// (inodes, listings, fragment, id and xattr tables) stored raw, so that a
/// test can place any record anywhere and patch it afterwards.
struct Sq {
    comp: Compressor,
    block_log: u16,
    data: Vec<u8>,
    inodes: Vec<u8>,
    dirs: Vec<u8>,
    ids: Vec<u32>,
    frags: Vec<FragmentEntry>,
    kv: Vec<u8>,
    xids: Vec<XattrIdEntry>,
    inode_count: u32,
    /// Written in place of the directory table (a crafted metadata block).
    raw_dir_table: Option<Vec<u8>>,
    /// A compressor options block leads the data (LZ4 needs one).
    options: bool,
}

/// Where [`Sq::finish`] put things.
struct Built {
    img: Vec<u8>,
    inode_start: u64,
    dir_start: u64,
    frag_blocks: Vec<u64>,
    kv_start: u64,
    xattr_header: u64,
}

impl Built {
    fn sb(&self) -> Superblock {
        Superblock::decode(self.img[..SUPERBLOCK_SIZE].try_into().unwrap())
    }
    fn set_sb(&mut self, sb: &Superblock) {
        self.img[..SUPERBLOCK_SIZE].copy_from_slice(&sb.encode());
    }
    /// Image position of inode-table payload byte `o`.
    fn inode_pos(&self, o: usize) -> usize {
        self.inode_start as usize + o / METADATA_SIZE * (METADATA_SIZE + 2) + 2 + o % METADATA_SIZE
    }
    fn patch(&mut self, at: usize, bytes: &[u8]) {
        self.img[at..at + bytes.len()].copy_from_slice(bytes);
    }
}

impl Sq {
    fn new(comp: Compressor, block_log: u16) -> Sq {
        let mut data = Vec::new();
        let options = Encoder::new(comp, None, 1 << block_log)
            .ok()
            .and_then(|e| e.options_payload());
        if let Some(o) = &options {
            write_meta(&mut data, o);
        }
        Sq {
            comp,
            block_log,
            options: options.is_some(),
            data,
            inodes: Vec::new(),
            dirs: Vec::new(),
            ids: vec![0],
            frags: Vec::new(),
            kv: Vec::new(),
            xids: Vec::new(),
            inode_count: 0,
            raw_dir_table: None,
        }
    }

    fn block_size(&self) -> usize {
        1 << self.block_log
    }

    /// Absolute position of the next data byte.
    fn data_end(&self) -> u64 {
        (SUPERBLOCK_SIZE + self.data.len()) as u64
    }

    /// Appends an inode (header, `body`, then `tail`: block words, index entries).
    fn inode(&mut self, number: u32, body: &InodeBody, tail: &[u8]) -> Slot {
        let off = self.inodes.len();
        InodeHeader {
            inode_type: body.inode_type(),
            permissions: 0o755,
            uid_idx: 0,
            gid_idx: 0,
            mtime: 1_700_000_000,
            inode_number: number,
        }
        .encode(&mut self.inodes);
        body.encode(&mut self.inodes);
        self.inodes.extend_from_slice(tail);
        self.inode_count = self.inode_count.max(number);
        Slot {
            off,
            r: meta_ref(off),
            number,
        }
    }

    /// A basic directory inode to be pointed at its listing by [`Sq::set_dir`].
    fn dir(&mut self, number: u32) -> Slot {
        self.inode(
            number,
            &InodeBody::BasicDir(BasicDir {
                block: 0,
                nlink: 2,
                size: 3,
                offset: 0,
                parent: 0,
            }),
            &[],
        )
    }

    /// Writes a listing of `entries` (name, target, basic type), sorted by name.
    fn listing(&mut self, entries: &[(&[u8], Slot, u16)]) -> (u32, u16, u32) {
        let mut es = entries.to_vec();
        es.sort_by(|a, b| a.0.cmp(b.0));
        let start = self.dirs.len();
        let mut i = 0;
        while i < es.len() {
            let block = es[i].1.r >> 16;
            let base = es[i].1.number;
            let mut j = i;
            while j < es.len()
                && j - i < DIR_HEADER_MAX_ENTRIES
                && es[j].1.r >> 16 == block
                && (es[j].1.number as i64 - base as i64).abs() <= i16::MAX as i64
            {
                j += 1;
            }
            DirHeader {
                count: (j - i) as u32,
                start_block: block as u32,
                inode_number: base,
            }
            .encode(&mut self.dirs);
            for (name, slot, ty) in &es[i..j] {
                SqEntry::encode(
                    (slot.r & 0xFFFF) as u16,
                    (slot.number as i64 - base as i64) as i16,
                    *ty,
                    name,
                    &mut self.dirs,
                );
            }
            i = j;
        }
        let (block, offset) = split_ref(meta_ref(start));
        (
            block as u32,
            offset as u16,
            (self.dirs.len() - start + 3) as u32,
        )
    }

    /// Points basic directory `d` at a listing of `entries`.
    fn set_dir(&mut self, d: Slot, parent: u32, entries: &[(&[u8], Slot, u16)]) {
        let (block, offset, size) = self.listing(entries);
        let subdirs = entries.iter().filter(|e| e.2 == INODE_BASIC_DIR).count() as u32;
        let mut body = Vec::new();
        InodeBody::BasicDir(BasicDir {
            block,
            nlink: 2 + subdirs,
            size: u16::try_from(size).expect("listing under 64 KiB"),
            offset,
            parent,
        })
        .encode(&mut body);
        let at = d.off + InodeHeader::SIZE;
        self.inodes[at..at + body.len()].copy_from_slice(&body);
    }

    /// A regular file of `content`, in blocks (compressed when that helps;
    /// all-zero blocks sparse), no fragment.
    fn file(&mut self, number: u32, content: &[u8]) -> Slot {
        let start = self.data_end();
        let enc = Encoder::new(self.comp, None, self.block_size() as u32).ok();
        let mut words = Vec::new();
        for chunk in content.chunks(self.block_size()) {
            if chunk.iter().all(|&b| b == 0) {
                put_u32(&mut words, 0);
                continue;
            }
            let mut out = Vec::new();
            match &enc {
                Some(e) if e.compress(chunk, &mut out).unwrap() => {
                    self.data.extend_from_slice(&out);
                    put_u32(&mut words, out.len() as u32);
                }
                _ => {
                    self.data.extend_from_slice(chunk);
                    put_u32(&mut words, chunk.len() as u32 | DATA_UNCOMPRESSED);
                }
            }
        }
        self.inode(
            number,
            &InodeBody::BasicFile(BasicFile {
                blocks_start: start as u32,
                fragment: INVALID_FRAG,
                fragment_offset: 0,
                size: content.len() as u32,
            }),
            &words,
        )
    }

    fn symlink(&mut self, number: u32, target: &[u8]) -> Slot {
        self.inode(
            number,
            &InodeBody::Symlink(Symlink {
                nlink: 1,
                target: target.to_vec(),
                xattr: None,
            }),
            &[],
        )
    }

    /// Key/value records of one inode's xattrs; returns its xattr index.
    fn xattrs(&mut self, pairs: &[(u16, &[u8], &[u8])]) -> u32 {
        let start = self.kv.len();
        let mut size = 0;
        for (kind, name, value) in pairs {
            XattrKey::encode(*kind, name, &mut self.kv);
            encode_value(value, &mut self.kv);
            size += name.len() + value.len() + 16;
        }
        self.xids.push(XattrIdEntry {
            xattr_ref: meta_ref(start),
            count: pairs.len() as u32,
            size: size as u32,
        });
        self.xids.len() as u32 - 1
    }

    fn finish(&self, root: Slot) -> Built {
        let mut img = vec![0u8; SUPERBLOCK_SIZE];
        img.extend_from_slice(&self.data);
        let inode_start = img.len() as u64;
        write_meta(&mut img, &self.inodes);
        let dir_start = img.len() as u64;
        match &self.raw_dir_table {
            Some(raw) => img.extend_from_slice(raw),
            None => {
                write_meta(&mut img, &self.dirs);
            }
        }
        let mut frag_blocks = Vec::new();
        let frag_start = if self.frags.is_empty() {
            img.len() as u64
        } else {
            let mut p = Vec::new();
            for f in &self.frags {
                f.encode(&mut p);
            }
            frag_blocks = write_meta(&mut img, &p);
            let at = img.len() as u64;
            for &b in &frag_blocks {
                put_u64(&mut img, b);
            }
            at
        };
        let mut p = Vec::new();
        for &id in &self.ids {
            put_u32(&mut p, id);
        }
        let id_blocks = write_meta(&mut img, &p);
        let id_start = img.len() as u64;
        for b in id_blocks {
            put_u64(&mut img, b);
        }
        let (kv_start, xattr_header) = if self.xids.is_empty() {
            (0, INVALID_TABLE)
        } else {
            let kv_start = img.len() as u64;
            write_meta(&mut img, &self.kv);
            let mut p = Vec::new();
            for x in &self.xids {
                x.encode(&mut p);
            }
            let blocks = write_meta(&mut img, &p);
            let at = img.len() as u64;
            XattrTableHeader {
                kv_start,
                count: self.xids.len() as u32,
                unused: 0,
            }
            .encode(&mut img);
            for b in blocks {
                put_u64(&mut img, b);
            }
            (kv_start, at)
        };
        let bytes_used = img.len() as u64;
        img.resize(bytes_used.next_multiple_of(DEVICE_BLOCK) as usize, 0);
        let mut flags = FLAG_UNCOMPRESSED_INODES
            | FLAG_UNCOMPRESSED_FRAGMENTS
            | FLAG_UNCOMPRESSED_IDS
            | FLAG_UNCOMPRESSED_XATTRS;
        if self.xids.is_empty() {
            flags |= FLAG_NO_XATTRS;
        }
        if self.options {
            flags |= FLAG_COMPRESSOR_OPTIONS;
        }
        let sb = Superblock {
            magic: MAGIC,
            inode_count: self.inode_count,
            mod_time: 1_700_000_000,
            block_size: 1 << self.block_log,
            fragment_count: self.frags.len() as u32,
            compression_id: self.comp.id(),
            block_log: self.block_log,
            flags,
            id_count: self.ids.len() as u16,
            version_major: 4,
            version_minor: 0,
            root_inode: root.r,
            bytes_used,
            id_table_start: id_start,
            xattr_id_table_start: xattr_header,
            inode_table_start: inode_start,
            directory_table_start: dir_start,
            fragment_table_start: frag_start,
            export_table_start: INVALID_TABLE,
        };
        img[..SUPERBLOCK_SIZE].copy_from_slice(&sb.encode());
        Built {
            img,
            inode_start,
            dir_start,
            frag_blocks,
            kv_start,
            xattr_header,
        }
    }
}

/// A small well-formed tree: root { with-xattr (empty, one xattr), data
/// (3 blocks: compressed, sparse, raw), sub/ { inner }, link }. Returns
/// the writer, the root and "data".
fn small_tree(comp: Compressor) -> (Sq, Slot, Slot) {
    let mut s = Sq::new(comp, 12);
    let root = s.dir(1);
    let sub = s.dir(2);
    let mut content = bytes(1, 4096, true);
    content.extend(vec![0u8; 4096]);
    content.extend(bytes(2, 3000, false));
    let x = s.xattrs(&[(XATTR_USER, b"note", b"hand-built")]);
    let file = s.inode(
        3,
        &InodeBody::ExtFile(ExtFile {
            blocks_start: 0,
            size: 0,
            sparse: 0,
            nlink: 1,
            fragment: INVALID_FRAG,
            fragment_offset: 0,
            xattr: x,
        }),
        &[],
    );
    let data = s.file(4, &content);
    let inner = s.file(5, b"inner\n");
    let link = s.symlink(6, b"data");
    s.set_dir(
        root,
        7,
        &[
            (b"with-xattr", file, INODE_BASIC_FILE),
            (b"data", data, INODE_BASIC_FILE),
            (b"sub", sub, INODE_BASIC_DIR),
            (b"link", link, INODE_BASIC_SYMLINK),
        ],
    );
    s.set_dir(sub, 1, &[(b"inner", inner, INODE_BASIC_FILE)]);
    s.inode_count = 6;
    (s, root, data)
}

/// Runs one structural case (open, preload, walk) under `memory`.
fn structural(failures: &mut Vec<String>, name: &str, memory: usize, img: Vec<u8>) {
    if let Err(e) = guarded(name, memory, CASE_TIME, move || exercise(img)) {
        failures.push(e);
    }
}

fn assert_no_failures(what: &str, failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{what}: {} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn hand_built_images_are_sound_to_start_with() {
    for comp in [
        Compressor::Gzip,
        Compressor::Zstd,
        Compressor::Lz4,
        Compressor::Xz,
    ] {
        let (s, root, _) = small_tree(comp);
        let b = s.finish(root);
        let img = b.img.clone();
        let (w, _) = guarded("hand-built/intact", CASE_MEMORY, CASE_TIME, move || {
            exercise(img)
        })
        .unwrap();
        assert!(w.opened && w.errors == 0, "{comp:?}: {w:?}");
        assert_eq!(w.nodes, 6, "{comp:?}");
        // Somebody else's reader agrees.
        let t = scratch();
        std::fs::write(t.path().join("i.sqfs"), &b.img).unwrap();
        run(Command::new("unsquashfs")
            .arg("-d")
            .arg(t.path().join("out"))
            .arg(t.path().join("i.sqfs")));
        let data = std::fs::read(t.path().join("out/data")).unwrap();
        assert_eq!(data.len(), 4096 * 2 + 3000);
        assert_eq!(&data[..4096], &bytes(1, 4096, true)[..]);
        assert_eq!(
            std::fs::read(t.path().join("out/sub/inner")).unwrap(),
            b"inner\n"
        );
    }
}

// ===========================================================================
// Structural safety
// ===========================================================================

/// A directory tree with cycles through its entries: "self" in the root
/// is the root, "a/loop" is "a", "a/up" is the root.
fn cyclic() -> Built {
    let mut s = Sq::new(Compressor::Gzip, 12);
    let root = s.dir(1);
    let a = s.dir(2);
    let f = s.file(3, b"at the bottom of every cycle\n");
    s.set_dir(
        root,
        4,
        &[
            (b"a", a, INODE_BASIC_DIR),
            (b"file", f, INODE_BASIC_FILE),
            (b"self", root, INODE_BASIC_DIR),
        ],
    );
    s.set_dir(
        a,
        1,
        &[
            (b"loop", a, INODE_BASIC_DIR),
            (b"up", root, INODE_BASIC_DIR),
            (b"x", f, INODE_BASIC_FILE),
        ],
    );
    s.finish(root)
}

#[test]
fn directory_cycles_and_self_references_stay_bounded() {
    let mut failures = Vec::new();
    // Cycles: an infinite tree served lazily, walked up to its budget.
    let img = cyclic().img;
    match guarded(
        "cycles/walk-and-resolve",
        CASE_MEMORY,
        CASE_TIME,
        move || {
            let fs = PackFs::new(open_any(img, CACHE).unwrap(), 0, 0);
            let mut w = Walked::default();
            walk(&fs, &mut w, NODE_BUDGET);
            // 10,000 trips round each cycle, then down to the file.
            let mut path = b"self/".repeat(10_000);
            path.extend(b"a/loop/up/".repeat(3_000));
            path.extend(b"a/x");
            let a = fs.resolve(&path).unwrap();
            let content = fs.read(a.node, 0, 100).unwrap();
            (w, a.kind, content)
        },
    ) {
        Ok(((w, kind, content), _)) => {
            assert!(w.hit_budget && w.errors == 0, "{w:?}");
            assert_eq!(kind, FileKind::File);
            assert_eq!(content, b"at the bottom of every cycle\n");
        }
        Err(e) => failures.push(e),
    }

    // Self-references of every kind, each a case.
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    {
        // A directory whose parent is itself and whose only entry is itself.
        let mut s = Sq::new(Compressor::Gzip, 12);
        let root = s.dir(1);
        let me = s.dir(2);
        s.set_dir(root, 3, &[(b"me", me, INODE_BASIC_DIR)]);
        s.set_dir(me, 2, &[(b"me", me, INODE_BASIC_DIR)]);
        cases.push(("directory-is-its-own-parent-and-child", s.finish(root).img));
    }
    {
        // An entry named "..": the parent by another name.
        let mut s = Sq::new(Compressor::Gzip, 12);
        let root = s.dir(1);
        let a = s.dir(2);
        s.set_dir(root, 3, &[(b"a", a, INODE_BASIC_DIR)]);
        s.set_dir(
            a,
            1,
            &[(b"..", root, INODE_BASIC_DIR), (b".", a, INODE_BASIC_DIR)],
        );
        cases.push(("entries-named-dot-and-dotdot", s.finish(root).img));
    }
    {
        // Two directories, each the other's child.
        let mut s = Sq::new(Compressor::Gzip, 12);
        let root = s.dir(1);
        let a = s.dir(2);
        let b = s.dir(3);
        s.set_dir(root, 4, &[(b"a", a, INODE_BASIC_DIR)]);
        s.set_dir(a, 3, &[(b"b", b, INODE_BASIC_DIR)]);
        s.set_dir(b, 2, &[(b"a", a, INODE_BASIC_DIR)]);
        cases.push(("mutual-directories", s.finish(root).img));
    }
    {
        // A file whose data blocks are its own inode table, and one whose
        // entry points 4 bytes into another inode.
        let (mut s, root, data) = small_tree(Compressor::Gzip);
        let start = s.data_end();
        let own = s.inode(
            7,
            &InodeBody::BasicFile(BasicFile {
                blocks_start: start as u32,
                fragment: INVALID_FRAG,
                fragment_offset: 0,
                size: 100,
            }),
            &(100 | DATA_UNCOMPRESSED).to_le_bytes(),
        );
        let inside = Slot {
            off: data.off + 4,
            r: data.r + 4,
            number: 4,
        };
        s.set_dir(
            root,
            8,
            &[
                (b"data", data, INODE_BASIC_FILE),
                (b"inside", inside, INODE_BASIC_FILE),
                (b"own", own, INODE_BASIC_FILE),
            ],
        );
        cases.push((
            "data-is-the-inode-table-and-ref-inside-an-inode",
            s.finish(root).img,
        ));
    }
    {
        // A fragment entry whose block is the fragment table itself.
        let (mut s, root, _) = small_tree(Compressor::Gzip);
        s.frags.push(FragmentEntry {
            start: 0,
            size: 16 | DATA_UNCOMPRESSED,
            unused: 0,
        });
        let f = s.inode(
            7,
            &InodeBody::BasicFile(BasicFile {
                blocks_start: 0,
                fragment: 0,
                fragment_offset: 0,
                size: 16,
            }),
            &[],
        );
        s.set_dir(root, 8, &[(b"frag", f, INODE_BASIC_FILE)]);
        let mut b = s.finish(root);
        let at = b.frag_blocks[0];
        b.patch(at as usize + 2, &at.to_le_bytes());
        cases.push(("fragment-block-is-the-fragment-table", b.img));
    }
    {
        // The root inode reference points at a file; the root's listing
        // start points into the inode table's own region (relative block
        // far past the directory table).
        let (s, _, data) = small_tree(Compressor::Gzip);
        cases.push(("root-is-a-file", s.finish(data).img));
        let (s, root, _) = small_tree(Compressor::Gzip);
        let mut b = s.finish(root);
        let at = b.inode_pos(root.off + 16);
        b.patch(at, &u32::MAX.to_le_bytes());
        cases.push(("root-listing-block-u32-max", b.img));
    }
    {
        // A symlink whose target is itself.
        let mut s = Sq::new(Compressor::Gzip, 12);
        let root = s.dir(1);
        let l = s.symlink(2, b"loop");
        s.set_dir(root, 3, &[(b"loop", l, INODE_BASIC_SYMLINK)]);
        cases.push(("symlink-to-itself", s.finish(root).img));
    }
    for (name, img) in cases {
        structural(
            &mut failures,
            &format!("self-reference/{name}"),
            64 << 20,
            img,
        );
    }
    assert_no_failures("cycles and self-references", failures);
}

/// Every count and size field a reader sizes something by, set huge.
#[test]
fn huge_counts_and_sizes_are_bounded_before_allocation() {
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    let base = || small_tree(Compressor::Gzip);
    // Superblock counts.
    for field in [
        "id-count-65535",
        "fragment-count-u32-max",
        "inode-count-u32-max",
    ] {
        let (s, root, _) = base();
        let mut b = s.finish(root);
        let mut sb = b.sb();
        match field {
            "id-count-65535" => sb.id_count = u16::MAX,
            "fragment-count-u32-max" => sb.fragment_count = u32::MAX,
            _ => sb.inode_count = u32::MAX,
        }
        b.set_sb(&sb);
        cases.push((format!("superblock/{field}"), b.img));
    }
    {
        let (s, root, _) = base();
        let mut b = s.finish(root);
        let at = b.xattr_header as usize + 8;
        b.patch(at, &u32::MAX.to_le_bytes());
        cases.push(("xattr-header/count-u32-max".into(), b.img));
        let (s, root, _) = base();
        let mut b = s.finish(root);
        let at = b.xattr_header as usize;
        b.patch(at, &u64::MAX.to_le_bytes());
        cases.push(("xattr-header/kv-start-u64-max".into(), b.img));
        let (s, root, _) = base();
        let mut b = s.finish(root);
        let at = b.xattr_header as usize;
        b.patch(at, &(u64::MAX - (1 << 40)).to_le_bytes());
        cases.push(("xattr-header/kv-start-near-u64-max".into(), b.img));
        // The key/value area at the end of the address space with a
        // reference into its second block; and one that wraps round to
        // the real area (as a release build computes it), with an
        // out-of-line value whose reference wraps too.
        for (name, wrap) in [
            ("xattr-header/kv-start-u64-max-ref-block-1", false),
            ("xattr-header/kv-start-wraps-round-to-the-area", true),
        ] {
            let mut s = Sq::new(Compressor::Gzip, 12);
            let root = s.dir(1);
            let x = if wrap {
                s.xattrs(&[(XATTR_USER | XATTR_VALUE_OOL, b"v", &[0; 8])])
            } else {
                s.xattrs(&[(XATTR_USER, b"v", b"w")])
            };
            let f = s.inode(
                2,
                &InodeBody::ExtFile(ExtFile {
                    blocks_start: 0,
                    size: 0,
                    sparse: 0,
                    nlink: 1,
                    fragment: INVALID_FRAG,
                    fragment_offset: 0,
                    xattr: x,
                }),
                &[],
            );
            s.set_dir(root, 3, &[(b"f", f, INODE_BASIC_FILE)]);
            let mut b = s.finish(root);
            let (kv_start, block) = if wrap {
                (0u64.wrapping_sub(1 << 40), (1 << 40) + b.kv_start)
            } else {
                (u64::MAX, 1)
            };
            let header = b.xattr_header as usize;
            b.patch(header, &kv_start.to_le_bytes());
            b.patch(header - 16, &make_ref(block, 0).to_le_bytes());
            if wrap {
                // The value reference, after the key (4 + 1) and its length.
                let at = b.kv_start as usize + 2 + 9;
                b.patch(at, &make_ref(block, 0).to_le_bytes());
            }
            cases.push((name.into(), b.img));
        }
    }
    // File sizes: 2^60, u64::MAX, the largest the block-count bound admits,
    // with and without a fragment; a basic file of u32::MAX.
    for (name, size, fragment) in [
        ("ext-file/size-2^60", 1u64 << 60, INVALID_FRAG),
        ("ext-file/size-2^60-with-fragment", 1 << 60, 0),
        ("ext-file/size-u64-max", u64::MAX, INVALID_FRAG),
        ("ext-file/size-at-the-block-count-bound", 0, INVALID_FRAG),
    ] {
        let (mut s, root, data) = base();
        s.frags.push(FragmentEntry {
            start: SUPERBLOCK_SIZE as u64,
            size: 100 | DATA_UNCOMPRESSED,
            unused: 0,
        });
        let f = s.inode(
            7,
            &InodeBody::ExtFile(ExtFile {
                blocks_start: SUPERBLOCK_SIZE as u64,
                size,
                sparse: 0,
                nlink: 1,
                fragment,
                fragment_offset: 0,
                xattr: INVALID_XATTR,
            }),
            &[0; 8],
        );
        s.set_dir(
            root,
            8,
            &[
                (b"data", data, INODE_BASIC_FILE),
                (b"huge", f, INODE_BASIC_FILE),
            ],
        );
        let mut b = s.finish(root);
        if size == 0 {
            // As many blocks as the image length allows (4 bytes each).
            let n = b.img.len() as u64 / 4;
            let at = b.inode_pos(f.off + 24);
            b.patch(at, &(n << 12).to_le_bytes());
        }
        cases.push((name.into(), b.img));
    }
    {
        let (mut s, root, _) = base();
        let f = s.inode(
            7,
            &InodeBody::BasicFile(BasicFile {
                blocks_start: SUPERBLOCK_SIZE as u32,
                fragment: INVALID_FRAG,
                fragment_offset: 0,
                size: u32::MAX,
            }),
            &[],
        );
        s.set_dir(root, 8, &[(b"huge", f, INODE_BASIC_FILE)]);
        cases.push(("basic-file/size-u32-max".into(), s.finish(root).img));
    }
    // Block size words: a 16 MiB stored length, compressed and raw.
    for (name, word) in [
        ("block-word/16MiB-compressed", DATA_SIZE_MASK),
        ("block-word/16MiB-raw", DATA_SIZE_MASK | DATA_UNCOMPRESSED),
    ] {
        let (s, root, data) = base();
        let mut b = s.finish(root);
        let at = b.inode_pos(data.off + 32);
        b.patch(at, &word.to_le_bytes());
        cases.push((name.into(), b.img));
    }
    // Fragment entries: a huge size word, a start past the end, an offset of u32::MAX.
    for (name, entry, offset) in [
        (
            "fragment/size-16MiB",
            FragmentEntry {
                start: SUPERBLOCK_SIZE as u64,
                size: DATA_SIZE_MASK,
                unused: 0,
            },
            0,
        ),
        (
            "fragment/start-u64-max",
            FragmentEntry {
                start: u64::MAX,
                size: 100,
                unused: 0,
            },
            0,
        ),
        (
            "fragment/offset-u32-max",
            FragmentEntry {
                start: SUPERBLOCK_SIZE as u64,
                size: 100 | DATA_UNCOMPRESSED,
                unused: 0,
            },
            u32::MAX,
        ),
    ] {
        let (mut s, root, _) = base();
        s.frags.push(entry);
        let f = s.inode(
            7,
            &InodeBody::BasicFile(BasicFile {
                blocks_start: 0,
                fragment: 0,
                fragment_offset: offset,
                size: 50,
            }),
            &[],
        );
        s.set_dir(root, 8, &[(b"tail", f, INODE_BASIC_FILE)]);
        cases.push((name.into(), s.finish(root).img));
    }
    // Directory sizes and index counts.
    for (name, at, value) in [
        (
            "basic-dir/size-65535",
            24usize,
            &0xFFFFu16.to_le_bytes()[..],
        ),
        ("basic-dir/offset-65535", 26, &0xFFFFu16.to_le_bytes()[..]),
    ] {
        let (s, root, _) = base();
        let mut b = s.finish(root);
        let p = b.inode_pos(root.off + at);
        b.patch(p, value);
        cases.push((name.into(), b.img));
    }
    for (name, size, index_count) in [
        ("ext-dir/size-u32-max", u32::MAX, 0u16),
        ("ext-dir/index-count-65535", 40, u16::MAX),
    ] {
        let (mut s, _, data) = base();
        let (block, offset, _) = s.listing(&[(b"data", data, INODE_BASIC_FILE)]);
        let root = s.inode(
            9,
            &InodeBody::ExtDir(ExtDir {
                nlink: 2,
                size,
                block,
                parent: 10,
                index_count,
                offset,
                xattr: INVALID_XATTR,
            }),
            &[],
        );
        cases.push((name.into(), s.finish(root).img));
    }
    // Listing records: a header count of 0 (stored u32::MAX), 2^32 - 1
    // entries claimed, an entry name length of 65536, a start block of u32::MAX.
    for (name, at, value) in [
        ("listing/header-count-stored-u32-max", 0usize, u32::MAX),
        ("listing/header-count-stored-65535", 0, 0xFFFF),
        ("listing/header-start-block-u32-max", 4, u32::MAX),
        ("listing/entry-name-len-65535", 18, 0xFFFF),
    ] {
        let (s, root, _) = base();
        let mut b = s.finish(root);
        let p = b.dir_start as usize + 2 + at;
        let width = if at == 18 { 2 } else { 4 };
        b.patch(p, &value.to_le_bytes()[..width]);
        cases.push((name.into(), b.img));
    }
    // Xattrs: pair count, value sizes, name length, a reference far away.
    for (name, at, value) in [
        (
            "xattr-id/count-u32-max",
            8usize,
            &u32::MAX.to_le_bytes()[..],
        ),
        ("xattr-id/ref-u64-max", 0, &u64::MAX.to_le_bytes()[..]),
    ] {
        let (s, root, _) = base();
        let mut b = s.finish(root);
        // The xattr id table's first block precedes the header.
        let p = b.xattr_header as usize - 16 + at;
        b.patch(p, value);
        cases.push((name.into(), b.img));
    }
    for (name, at, value) in [
        (
            "xattr-key/name-len-65535",
            2usize,
            &0xFFFFu16.to_le_bytes()[..],
        ),
        ("xattr-value/len-u32-max", 8, &u32::MAX.to_le_bytes()[..]),
        ("xattr-value/len-16MiB", 8, &(16u32 << 20).to_le_bytes()[..]),
        (
            "xattr-value/len-16MiB+1",
            8,
            &((16u32 << 20) + 1).to_le_bytes()[..],
        ),
        (
            "xattr-key/type-out-of-line",
            0,
            &0x0100u16.to_le_bytes()[..],
        ),
    ] {
        let (s, root, _) = base();
        let mut b = s.finish(root);
        let p = b.kv_start as usize + 2 + at;
        b.patch(p, value);
        cases.push((name.into(), b.img));
    }
    // Symlink target lengths.
    for (name, len) in [
        ("symlink/len-u32-max", u32::MAX),
        ("symlink/len-65536", 65536),
        ("symlink/len-65537", 65537),
    ] {
        let (s, root, _) = base();
        let mut b = s.finish(root);
        // The symlink is inode 6, the last one small_tree writes.
        let link_off = s_link_off(&b);
        let p = b.inode_pos(link_off + 20);
        b.patch(p, &len.to_le_bytes());
        cases.push((name.into(), b.img));
    }
    let mut failures = Vec::new();
    let n = cases.len();
    for (name, img) in cases {
        // 16 MiB for an xattr value the format allows, plus the cache.
        structural(&mut failures, &format!("huge/{name}"), 40 << 20, img);
    }
    println!("huge counts and sizes: {n} cases");
    assert_no_failures("huge counts and sizes", failures);
}

/// Payload offset of the last inode of a [`small_tree`] image (the symlink).
fn s_link_off(b: &Built) -> usize {
    let sb = b.sb();
    let a = Area::read(
        &b.img,
        sb.inode_table_start,
        sb.directory_table_start,
        Compressor::Gzip,
    );
    let recs = decode_inodes(&a.payload, sb.block_size);
    recs.iter()
        .find(|r| matches!(r.body, InodeBody::Symlink(_)))
        .unwrap()
        .off
}

/// A file whose size claims 64 Mi blocks (a 256 MiB block list), which the
/// reader's bound admits because its inode table is 80 KiB (a list of zero
/// words compresses to almost nothing, so the bound is loose): the list is
/// read as it is found, not allocated from the claim.
#[test]
fn block_list_of_a_huge_claimed_size_is_not_allocated_up_front() {
    let (mut s, root, data) = small_tree(Compressor::Gzip);
    let f = s.inode(
        7,
        &InodeBody::ExtFile(ExtFile {
            blocks_start: SUPERBLOCK_SIZE as u64,
            size: 0,
            sparse: 0,
            nlink: 1,
            fragment: INVALID_FRAG,
            fragment_offset: 0,
            xattr: INVALID_XATTR,
        }),
        &vec![0; 80 << 10],
    );
    s.set_dir(
        root,
        8,
        &[
            (b"data", data, INODE_BASIC_FILE),
            (b"huge", f, INODE_BASIC_FILE),
        ],
    );
    let mut b = s.finish(root);
    const CLAIM: u64 = (64 << 20) << 12;
    let at = b.inode_pos(f.off + 24);
    b.patch(at, &CLAIM.to_le_bytes());
    let t = scratch();
    let path = t.path().join("huge-list.sqfs");
    std::fs::write(&path, &b.img).unwrap();
    let r = guarded(
        "huge/block-list-of-256MiB",
        64 << 20,
        CASE_TIME,
        move || {
            let fs = PackFs::new(AnyImage::open(&path, CACHE).unwrap(), 0, 0);
            let huge = fs.lookup(ROOT, b"huge").unwrap();
            assert_eq!(huge.size, CLAIM);
            (
                fs.read(huge.node, 0, 4096).is_err(),
                fs.open(huge.node).is_err(),
            )
        },
    );
    let ((read_failed, open_failed), peak) = r.unwrap();
    assert!(read_failed && open_failed);
    assert!(peak < 16 << 20, "peak {peak}");
}

/// A stream that expands beyond what its block may hold: `payload` bytes
/// of zeros compressed with `comp`, or the largest power-of-two size whose
/// stream fits `max_stored`.
fn oversized_stream(comp: Compressor, payload: usize, max_stored: usize) -> (usize, Vec<u8>) {
    let mut n = payload;
    loop {
        let mut out = Vec::new();
        let enc = Encoder::new(comp, Some(1), 4096).unwrap();
        assert!(enc.compress(&vec![0u8; n], &mut out).unwrap());
        if out.len() <= max_stored {
            return (n, out);
        }
        n /= 2;
    }
}

#[test]
fn decompression_is_capped_at_the_block_size() {
    let mut failures = Vec::new();
    for comp in [
        Compressor::Gzip,
        Compressor::Zstd,
        Compressor::Lz4,
        Compressor::Xz,
    ] {
        // Data block and fragment block: 16 MiB of zeros in a 4 KiB-block
        // image (stored length fits the 24-bit size word).
        let (n, stream) = oversized_stream(comp, 16 << 20, DATA_SIZE_MASK as usize);
        assert!(n > 16 * 4096, "{comp:?}");
        for fragment in [false, true] {
            let mut s = Sq::new(comp, 12);
            let root = s.dir(1);
            let pos = s.data_end();
            s.data.extend_from_slice(&stream);
            let f = if fragment {
                s.frags.push(FragmentEntry {
                    start: pos,
                    size: stream.len() as u32,
                    unused: 0,
                });
                s.inode(
                    2,
                    &InodeBody::BasicFile(BasicFile {
                        blocks_start: 0,
                        fragment: 0,
                        fragment_offset: 0,
                        size: 1000,
                    }),
                    &[],
                )
            } else {
                s.inode(
                    2,
                    &InodeBody::BasicFile(BasicFile {
                        blocks_start: pos as u32,
                        fragment: INVALID_FRAG,
                        fragment_offset: 0,
                        size: 4096,
                    }),
                    &(stream.len() as u32).to_le_bytes(),
                )
            };
            s.set_dir(root, 3, &[(b"f", f, INODE_BASIC_FILE)]);
            let img = s.finish(root).img;
            let what = if fragment { "fragment" } else { "data" };
            let name = format!("expands/{comp:?}-{what}-block-of-{}-KiB", n >> 10);
            let r = guarded(&name, 4 << 20, CASE_TIME, move || {
                let fs = PackFs::new(open_any(img, CACHE).unwrap(), 0, 0);
                let f = fs.lookup(ROOT, b"f").unwrap();
                fs.read(f.node, 0, 4096).map_err(|e| e.to_string())
            });
            match r {
                Ok((Err(e), _)) => assert!(
                    e.contains("expands beyond") || e.contains("corrupt"),
                    "{name}: {e}"
                ),
                Ok((Ok(d), _)) => failures.push(format!("{name}: read {} bytes", d.len())),
                Err(e) => failures.push(e),
            }
        }
        // A metadata block (the directory table) whose stream expands
        // beyond 8 KiB; its stored length is 15 bits.
        let (n, stream) = oversized_stream(comp, 16 << 20, 0x7FFF);
        assert!(n > 4 * METADATA_SIZE, "{comp:?}");
        let mut s = Sq::new(comp, 12);
        let root = s.dir(1);
        let mut raw = MetaHeader {
            stored_len: stream.len() as u16,
            compressed: true,
        }
        .encode()
        .to_vec();
        raw.extend_from_slice(&stream);
        s.raw_dir_table = Some(raw);
        let body_at = root.off + InodeHeader::SIZE;
        let mut body = Vec::new();
        InodeBody::BasicDir(BasicDir {
            block: 0,
            nlink: 2,
            size: 100,
            offset: 0,
            parent: 2,
        })
        .encode(&mut body);
        s.inodes[body_at..body_at + body.len()].copy_from_slice(&body);
        let img = s.finish(root).img;
        let name = format!("expands/{comp:?}-metadata-block-of-{}-KiB", n >> 10);
        let r = guarded(&name, 4 << 20, CASE_TIME, move || {
            let fs = PackFs::new(open_any(img, CACHE).unwrap(), 0, 0);
            fs.list(ROOT).map(|l| l.len()).map_err(|e| e.to_string())
        });
        match r {
            Ok((Err(e), _)) => assert!(
                e.contains("expands beyond") || e.contains("corrupt"),
                "{name}: {e}"
            ),
            Ok((Ok(n), _)) => failures.push(format!("{name}: listed {n} entries")),
            Err(e) => failures.push(e),
        }
    }
    // ZIP: a member whose stream holds far more than its recorded size
    // (small: decoded whole; large: decoded in chunks) is cut at that size.
    let (_, stream) = deflated_zeros(64);
    for size in [1000u64, 3 << 20] {
        let mut z = ZipW::default();
        let off = z.local(b"m", METHOD_DEFLATE, 0, &stream, size);
        z.central(b"m", METHOD_DEFLATE, 0, stream.len() as u64, size, off);
        let img = z.finish();
        let name = format!("expands/zip-member-of-64-MiB-recorded-as-{size}");
        let r = guarded(&name, 32 << 20, CASE_TIME, move || {
            let fs = PackFs::new(open_any(img, CACHE).unwrap(), 0, 0);
            let m = fs.lookup(ROOT, b"m").unwrap();
            let r = fs.read_all(m.node, |_| Ok(()));
            let decoded = match &*fs.image {
                AnyImage::Zip(z) => z.decoded_bytes(),
                _ => unreachable!(),
            };
            (r.is_err(), decoded)
        });
        match r {
            Ok(((failed, decoded), _)) => {
                assert!(failed, "{name}: CRC-32 of the cut data accepted");
                assert!(decoded <= size, "{name}: decoded {decoded}");
            }
            Err(e) => failures.push(e),
        }
    }
    assert_no_failures("decompression caps", failures);
}

// ===========================================================================
// ZIPs written record by record
// ===========================================================================

/// CRC-32 (IEEE), bitwise: for the few small members written here.
fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// A raw deflate stream of `mib` MiB of zeros, and its CRC-32, from
/// Python's zlib: one MiB compressed and fully flushed is a byte-aligned
/// run of blocks that can be repeated, then an empty final block.
fn deflated_zeros(mib: usize) -> (u32, Vec<u8>) {
    static PY: &str = r#"
import sys, zlib
n = int(sys.argv[2])
unit = bytes(1 << 20)
c = zlib.compressobj(9, zlib.DEFLATED, -15)
block = c.compress(unit) + c.flush(zlib.Z_FULL_FLUSH)
crc = 0
for _ in range(n):
    crc = zlib.crc32(unit, crc)
open(sys.argv[1], "wb").write(block * n + b"\x03\x00")
print(crc)
"#;
    let t = scratch();
    let p = t.path().join("z.deflate");
    let out = run(Command::new("python3")
        .arg("-c")
        .arg(PY)
        .arg(&p)
        .arg(mib.to_string()));
    (out.trim().parse().unwrap(), std::fs::read(&p).unwrap())
}

#[derive(Default)]
struct ZipW {
    out: Vec<u8>,
    central: Vec<u8>,
    count: u16,
}

impl ZipW {
    /// A local header and data; returns its offset.
    fn local(&mut self, name: &[u8], method: u16, crc: u32, data: &[u8], size: u64) -> u64 {
        let at = self.out.len() as u64;
        LocalHeader {
            version_needed: 20,
            flags: 0,
            method,
            dos_time: 0,
            dos_date: 0x21,
            crc,
            csize: data.len() as u32,
            size: size as u32,
            name_len: name.len() as u16,
            extra_len: 0,
        }
        .encode(&mut self.out);
        self.out.extend_from_slice(name);
        self.out.extend_from_slice(data);
        at
    }

    fn central(&mut self, name: &[u8], method: u16, crc: u32, csize: u64, size: u64, local: u64) {
        CentralHeader {
            made_by: 3 << 8 | 30,
            version_needed: 20,
            flags: 0,
            method,
            dos_time: 0,
            dos_date: 0x21,
            crc,
            csize: csize as u32,
            size: size as u32,
            name_len: name.len() as u16,
            extra_len: 0,
            comment_len: 0,
            disk_start: 0,
            internal: 0,
            external: 0o100644 << 16,
            local_offset: local as u32,
        }
        .encode(&mut self.central);
        self.central.extend_from_slice(name);
        self.count += 1;
    }

    fn finish(mut self) -> Vec<u8> {
        let cd_offset = self.out.len() as u32;
        let cd_size = self.central.len() as u32;
        self.out.extend_from_slice(&self.central);
        EndRecord {
            disk: 0,
            cd_disk: 0,
            entries_here: self.count,
            entries: self.count,
            cd_size,
            cd_offset,
            comment_len: 0,
        }
        .encode(&mut self.out);
        self.out
    }
}

#[test]
fn zip_bombs_are_read_in_bounded_memory_and_time() {
    const BOMB_MEMORY: usize = 48 << 20;
    const BOMB_TIME: Duration = Duration::from_secs(30);
    let mut failures = Vec::new();
    // Ratio above 1000: one member of 1 GiB of zeros.
    let (crc, stream) = deflated_zeros(1024);
    let mut z = ZipW::default();
    let off = z.local(b"zeros", METHOD_DEFLATE, crc, &stream, 1 << 30);
    z.central(
        b"zeros",
        METHOD_DEFLATE,
        crc,
        stream.len() as u64,
        1 << 30,
        off,
    );
    let img = z.finish();
    let ratio = (1u64 << 30) / img.len() as u64;
    assert!(ratio > 1000, "ratio {ratio}");
    let r = guarded("bomb/ratio-1000-1GiB", BOMB_MEMORY, BOMB_TIME, move || {
        let fs = PackFs::new(open_any(img, 8 << 20).unwrap(), 0, 0);
        let a = fs.lookup(ROOT, b"zeros").unwrap();
        let mut nonzero = 0usize;
        let n = fs
            .read_all(a.node, |d| {
                nonzero += d.iter().filter(|&&b| b != 0).count();
                Ok(())
            })
            .unwrap();
        (n, nonzero)
    });
    match r {
        Ok(((n, nonzero), peak)) => {
            assert_eq!((n, nonzero), (1 << 30, 0));
            println!("ratio bomb: {ratio}:1, peak {} MiB", peak >> 20);
        }
        Err(e) => failures.push(e),
    }

    // Overlapping members: many central records sharing one local header
    // and its data, below and above the whole-member threshold.
    let mut z = ZipW::default();
    let (_, small) = deflated_zeros(1);
    // 1 MiB is decoded in chunks; 1 MiB - 1 is decoded whole: record the
    // small one as 1 MiB - 1 of its zeros with that prefix's CRC.
    let small_size = (1 << 20) - 1;
    let small_crc_cut = crc32(&vec![0u8; small_size]);
    let (big_crc, big) = deflated_zeros(16);
    let small_at = z.local(
        b"s",
        METHOD_DEFLATE,
        small_crc_cut,
        &small,
        small_size as u64,
    );
    let big_at = z.local(b"b", METHOD_DEFLATE, big_crc, &big, 16 << 20);
    for i in 0..200 {
        z.central(
            format!("small-{i:03}").as_bytes(),
            METHOD_DEFLATE,
            small_crc_cut,
            small.len() as u64,
            small_size as u64,
            small_at,
        );
    }
    for i in 0..8 {
        z.central(
            format!("big-{i}").as_bytes(),
            METHOD_DEFLATE,
            big_crc,
            big.len() as u64,
            16 << 20,
            big_at,
        );
    }
    let img = z.finish();
    let total = 200 * small_size as u64 + 8 * (16 << 20);
    println!(
        "overlap bomb: {} bytes expand to {} MiB",
        img.len(),
        total >> 20
    );
    let r = guarded(
        "bomb/overlapping-members",
        BOMB_MEMORY,
        BOMB_TIME,
        move || {
            let fs = PackFs::new(open_any(img, 8 << 20).unwrap(), 0, 0);
            let mut read = 0u64;
            for e in fs.list(ROOT).unwrap() {
                read += fs.read_all(e.node, |_| Ok(())).unwrap();
            }
            read
        },
    );
    match r {
        Ok((read, peak)) => {
            assert_eq!(read, total);
            println!("overlap bomb: peak {} MiB", peak >> 20);
        }
        Err(e) => failures.push(e),
    }
    assert_no_failures("zip bombs", failures);
}

// ===========================================================================
// Depth
// ===========================================================================

const DEPTH: usize = 10_000;

#[test]
fn ten_thousand_levels_deep_without_recursion() {
    // SquashFS: a chain of 10,000 directories, hand-built.
    let mut s = Sq::new(Compressor::Gzip, 12);
    let dirs: Vec<Slot> = (0..=DEPTH).map(|i| s.dir(i as u32 + 1)).collect();
    let bottom = s.file(DEPTH as u32 + 2, b"deep");
    for i in 0..=DEPTH {
        let parent = if i == 0 { DEPTH as u32 + 3 } else { i as u32 };
        if i < DEPTH {
            s.set_dir(dirs[i], parent, &[(b"d", dirs[i + 1], INODE_BASIC_DIR)]);
        } else {
            s.set_dir(dirs[i], parent, &[(b"bottom", bottom, INODE_BASIC_FILE)]);
        }
    }
    let sq = s.finish(dirs[0]).img;

    // ZIP: one member 10,000 directories down (the directories synthesised).
    let mut name = b"d/".repeat(DEPTH);
    name.extend_from_slice(b"bottom");
    let mut z = ZipW::default();
    let off = z.local(&name, METHOD_STORED, crc32(b"deep"), b"deep", 4);
    z.central(&name, METHOD_STORED, crc32(b"deep"), 4, 4, off);
    let zip = z.finish();

    let mut failures = Vec::new();
    for (what, img) in [("squashfs", sq), ("zip", zip)] {
        let r = guarded(&format!("depth/{what}"), 64 << 20, CASE_TIME, move || {
            let fs = PackFs::new(open_any(img, CACHE).unwrap(), 0, 0);
            // Down by lookups, listing every level.
            let mut at = fs.getattr(ROOT).unwrap();
            for _ in 0..DEPTH {
                assert_eq!(fs.list(at.node).unwrap().len(), 1);
                at = fs.lookup(at.node, b"d").unwrap();
            }
            let bottom = fs.lookup(at.node, b"bottom").unwrap();
            // By path, and by the walk every case does.
            let mut path = b"d/".repeat(DEPTH);
            path.extend_from_slice(b"bottom");
            let resolved = fs.resolve(&path).unwrap();
            let mut w = Walked::default();
            walk(&fs, &mut w, 4 * DEPTH);
            (
                fs.read(bottom.node, 0, 10).unwrap(),
                resolved.node == bottom.node,
                w,
            )
        });
        match r {
            Ok(((content, same, w), _)) => {
                assert_eq!(content, b"deep", "{what}");
                assert!(same, "{what}");
                assert!(w.errors == 0 && w.nodes == DEPTH + 2, "{what}: {w:?}");
            }
            Err(e) => failures.push(e),
        }
    }
    assert_no_failures("depth", failures);
}
