//! The SquashFS reader core without a mount: lazy open, readdir resume,
//! lookups through the directory index, preload.

use crate::common::*;
use mountfs::cache::BlockCache;
use mountfs::fs::{FileKind, Image, PackFs};
use mountfs::source::{CountingSource, ImageSource, MemSource};
use mountfs::squashfs::SquashFs;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Forwards to a shared counting source so the test can read the counters.
struct Shared(Arc<CountingSource<MemSource>>);
impl ImageSource for Shared {
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn read_at(&self, off: u64, buf: &mut [u8]) -> mountfs::Result<()> {
        self.0.read_at(off, buf)
    }
}

#[test]
fn open_reads_a_constant_amount_whatever_the_file_count() {
    let t = scratch();
    let mut read_at_open = Vec::new();
    for n in [10usize, 20_000] {
        let src = t.path().join(format!("src{n}"));
        std::fs::create_dir(&src).unwrap();
        for d in 0..10 {
            std::fs::create_dir(src.join(format!("d{d}"))).unwrap();
            for i in 0..n / 10 {
                std::fs::write(src.join(format!("d{d}/f{i}")), format!("{i}")).unwrap();
            }
        }
        let img = t.path().join(format!("{n}.sqfs"));
        mksquashfs(&src, &img, &[]);
        let counting = Arc::new(CountingSource::new(MemSource(std::fs::read(&img).unwrap())));
        let sq = SquashFs::open(
            Box::new(Shared(counting.clone())),
            Arc::new(BlockCache::new(1 << 20)),
        )
        .unwrap();
        read_at_open.push(counting.bytes.load(Ordering::Relaxed));
        // And the tree is all there, read lazily afterwards.
        let fs = PackFs::new(sq, 0, 0);
        let d0 = fs.resolve(b"d0").unwrap();
        assert_eq!(fs.list(d0.node).unwrap().len(), n / 10);
    }
    // A few KiB (superblock, id table, indexes, root inode's metadata block).
    assert!(
        read_at_open.iter().all(|&b| b < 32 << 10),
        "{read_at_open:?}"
    );
}

// Regression: preload walked the inode table record by record and read an
// extended directory's index entries as the next inode, so any image with a
// directory large enough to be indexed failed to mount with `--preload`
// ("uid/gid index … out of range"). Checked on both writers' images.
#[test]
fn preload_makes_every_later_read_a_cache_hit() {
    let t = scratch();
    let src = t.path().join("src");
    // `big` (10,000 entries, indexed) sorts before the data files in `d`.
    fixture_tree(&src, true);
    let ours = t.path().join("packfs.sqfs");
    pack(&src, &ours, &[]);
    assert_preload_serves_every_read(&ours);
    let theirs = t.path().join("mksquashfs.sqfs");
    mksquashfs(&src, &theirs, &[]);
    assert_preload_serves_every_read(&theirs);
}

/// Preloads `img`, then reads every file of it and asserts that no data
/// block had to be decoded again.
fn assert_preload_serves_every_read(img: &std::path::Path) {
    let sq = SquashFs::open(
        Box::new(MemSource(std::fs::read(img).unwrap())),
        Arc::new(BlockCache::new(256 << 20)),
    )
    .unwrap();
    let (blocks, bytes) = sq
        .preload()
        .unwrap_or_else(|e| panic!("{}: preload: {e}", img.display()));
    assert!(blocks > 0 && bytes > 0);
    let misses_before = sq.cache().stats().misses;
    let fs = PackFs::new(sq, 0, 0);
    assert!(read_every_file(&fs) > 20);
    let s = fs.image.cache().stats();
    // Metadata blocks may still be decoded on first use; data blocks may not.
    let data_misses = s.misses - misses_before;
    assert!(
        data_misses < 40,
        "{}: {data_misses} misses after preload: {s:?}",
        img.display()
    );
}

/// Reads every regular file of `fs` once; returns how many.
pub(super) fn read_every_file<I: Image>(fs: &PackFs<I>) -> usize {
    let mut stack = vec![fs.resolve(b"").unwrap()];
    let mut files = 0;
    while let Some(a) = stack.pop() {
        for e in fs.list(a.node).unwrap() {
            let at = fs.getattr(e.node).unwrap();
            match at.kind {
                FileKind::Dir => stack.push(at),
                FileKind::File => {
                    fs.read_all(at.node, |_| Ok(())).unwrap();
                    files += 1;
                }
                _ => {}
            }
        }
    }
    files
}

#[test]
fn readdir_resumes_from_any_cookie() {
    // The kernel lists big directories in many calls, each resuming from the
    // cookie of the last entry it kept; every resume point must give the rest.
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, true);
    let img = t.path().join("i.sqfs");
    mksquashfs(&src, &img, &[]);
    let sq = SquashFs::open(
        Box::new(MemSource(std::fs::read(&img).unwrap())),
        Arc::new(BlockCache::new(8 << 20)),
    )
    .unwrap();
    let fs = PackFs::new(sq, 0, 0);
    let big = fs.resolve(b"big").unwrap();
    let all = fs.list(big.node).unwrap();
    assert_eq!(all.len(), 10_000);
    let names: Vec<_> = all.iter().map(|e| e.name.clone()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "listing is not in name order");
    for k in [0usize, 1, 255, 256, 257, 4999, 9998] {
        let mut rest = Vec::new();
        fs.image
            .readdir(big.node, all[k].cookie, &mut |e| {
                rest.push(e.name);
                true
            })
            .unwrap();
        assert_eq!(rest, names[k + 1..].to_vec(), "resume after entry {k}");
    }
    // Every entry can be looked up by name (exercises the directory index).
    for e in all.iter().step_by(97) {
        assert_eq!(fs.lookup(big.node, &e.name).unwrap().node, e.node);
    }
    assert!(matches!(
        fs.lookup(big.node, b"entry-99999"),
        Err(mountfs::FsError::NotFound)
    ));
    assert!(matches!(
        fs.lookup(big.node, b"0"),
        Err(mountfs::FsError::NotFound)
    ));
}

/// 400 files of 8 KiB packed by packfs: 16 tails per 128 KiB fragment
/// block, in name order.
pub(super) struct Fragments {
    _t: tempfile::TempDir,
    img: std::path::PathBuf,
}

impl Fragments {
    pub(super) fn new() -> Fragments {
        let t = scratch();
        let src = t.path().join("src");
        std::fs::create_dir(&src).unwrap();
        for i in 0..400u64 {
            std::fs::write(src.join(format!("f{i:03}")), bytes(i, 8192, true)).unwrap();
        }
        let img = t.path().join("i.sqfs");
        pack(&src, &img, &[]);
        Fragments { _t: t, img }
    }

    /// The image opened afresh (a cold cache) with 1 MiB of readahead, a
    /// window of 8 blocks, and its files' nodes resolved up front, so that
    /// from then on the only cache misses are data blocks (metadata blocks
    /// share the cache).
    pub(super) fn open(&self) -> (PackFs<SquashFs>, Vec<u64>) {
        let sq = SquashFs::open(
            Box::new(MemSource(std::fs::read(&self.img).unwrap())),
            Arc::new(BlockCache::new(64 << 20)),
        )
        .unwrap();
        let fs = PackFs::new(sq, 1 << 20, 1);
        let nodes = (0..400u64)
            .map(|i| fs.resolve(format!("f{i:03}").as_bytes()).unwrap().node)
            .collect();
        (fs, nodes)
    }
}

/// Reads file `i` whole and checks its bytes.
pub(super) fn read_fragment_file(fs: &PackFs<SquashFs>, nodes: &[u64], i: u64) {
    let d = fs.read(nodes[i as usize], 0, 1 << 20).unwrap();
    assert!(d == bytes(i, 8192, true), "f{i:03}");
}

pub(super) fn misses(fs: &PackFs<SquashFs>) -> u64 {
    fs.image.cache().stats().misses
}

/// Waits until `want` misses or `secs`, then a little longer so that
/// decodes beyond `want` would show too.
pub(super) fn settle(fs: &PackFs<SquashFs>, want: u64, secs: f64) -> u64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs_f64(secs);
    while misses(fs) < want && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
    misses(fs)
}

/// Image-order readahead (`mountfs::readahead`): a reader stepping from
/// one fragment block to the next gets the following ones decoded in the
/// background; a reader jumping around does not.
#[test]
fn stepping_to_the_next_fragment_decodes_the_following_ones() {
    let files = Fragments::new();
    let read = read_fragment_file;

    // In order: fragment 0, then the first file of fragment 1.
    let (fs, n) = files.open();
    read(&fs, &n, 0);
    // Fragment 0 and the fragment table's metadata block.
    let base = misses(&fs);
    read(&fs, &n, 15);
    assert_eq!(misses(&fs), base);
    read(&fs, &n, 16);
    // Fragment 1 on demand, 2..=9 in the background.
    assert_eq!(settle(&fs, base + 9, 10.0), base + 9);
    for i in 17..16 * 10 {
        read(&fs, &n, i);
    }
    // Stepping on through 2..=9 moved the window to 10..=17, and the reader
    // never decoded a block itself: every miss was a prefetch.
    assert_eq!(settle(&fs, base + 17, 10.0), base + 17);

    // Jumping around: fragment 5, then 2, then 9 — nothing beyond them.
    let (fs, n) = files.open();
    read(&fs, &n, 16 * 5);
    let base = misses(&fs);
    for i in [16 * 2, 16 * 9, 16 * 3] {
        read(&fs, &n, i);
    }
    assert_eq!(settle(&fs, base + 4, 0.3), base + 3);
}

/// A readahead job that runs after its reader has been served the whole
/// block decodes nothing. Behind busy CPUs a job can run late: its reader
/// has read the block, the mount's cache has let it go as served in full
/// (the kernel answers those pages now), and the job decoded it again into
/// a block no one read. A sorted four-thread pass of the Linux tree decoded
/// about 200-900 blocks twice that way and ended holding 2-3x the cache bytes.
#[test]
fn readahead_after_the_reader_was_served_decodes_nothing() {
    // Shared units (fragment blocks): fragment 3 holds files 48..64.
    let files = Fragments::new();
    let (fs, n) = files.open();
    fs.image.cache().release_served(true);
    for i in 48..64 {
        read_fragment_file(&fs, &n, i);
    }
    let base = misses(&fs);
    assert_eq!(fs.image.cache().stats().released, 1);
    fs.image.prefetch_unit(3);
    assert_eq!(misses(&fs), base, "a served fragment block decoded again");
    assert_eq!(fs.image.cache().stats().ahead_skipped, 1);
    // The reader itself is always served.
    read_fragment_file(&fs, &n, 50);
    assert_eq!(misses(&fs), base + 1);

    // A file's own blocks (file-window readahead).
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let data = bytes(2, 8 << 17, true); // 8 blocks
    std::fs::write(src.join("big"), &data).unwrap();
    let img = t.path().join("i.sqfs");
    pack(&src, &img, &[]);
    let sq = SquashFs::open(
        Box::new(MemSource(std::fs::read(&img).unwrap())),
        Arc::new(BlockCache::new(64 << 20)),
    )
    .unwrap();
    let fs = PackFs::new(sq, 0, 0);
    fs.image.cache().release_served(true);
    let node = fs.resolve(b"big").unwrap().node;
    assert_eq!(fs.read(node, 0, 8 << 17).unwrap(), data);
    let base = fs.image.cache().stats().misses;
    let h = fs.image.open(node).unwrap();
    fs.image.prefetch(&h, 0, 8 << 17);
    let s = fs.image.cache().stats();
    assert_eq!((s.misses, s.ahead_skipped), (base, 8), "{s:?}");
}

/// A file's first read schedules its next blocks in the background (a whole
/// file is what datasets and imports read); a read that is not the start
/// and does not continue the last one does not.
#[test]
fn first_read_of_a_file_decodes_its_next_blocks_ahead() {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("big"), bytes(1, 16 << 17, true)).unwrap(); // 16 blocks
    let img = t.path().join("i.sqfs");
    pack(&src, &img, &[]);
    let open = || {
        let sq = SquashFs::open(
            Box::new(MemSource(std::fs::read(&img).unwrap())),
            Arc::new(BlockCache::new(64 << 20)),
        )
        .unwrap();
        PackFs::new(sq, 512 << 10, 1) // 4 blocks of readahead
    };
    let wait_for = |fs: &PackFs<SquashFs>, want: u64, secs: f64| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs_f64(secs);
        while fs.image.cache().stats().misses < want && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        fs.image.cache().stats().misses
    };
    let data = bytes(1, 16 << 17, true);

    let fs = open();
    let node = fs.resolve(b"big").unwrap().node;
    let base = fs.image.cache().stats().misses;
    assert_eq!(fs.read(node, 0, 128 << 10).unwrap(), data[..128 << 10]);
    // Block 0 on demand, blocks 1..=4 in the background.
    assert_eq!(wait_for(&fs, base + 5, 10.0), base + 5);

    let fs = open();
    let node = fs.resolve(b"big").unwrap().node;
    let base = fs.image.cache().stats().misses;
    let at = 8u64 << 17;
    assert_eq!(
        fs.read(node, at, 128 << 10).unwrap(),
        data[at as usize..(at as usize) + (128 << 10)]
    );
    assert_eq!(wait_for(&fs, base + 2, 0.3), base + 1);
}

/// A file's name and bytes as read back.
type NamedBytes = (Vec<u8>, Vec<u8>);

/// Reads every regular file directly below the root of `img` through the
/// core; returns (name, bytes) and the image's cache statistics after.
fn read_top_files(img: &std::path::Path) -> (Vec<NamedBytes>, mountfs::cache::CacheStats) {
    let sq = SquashFs::open(
        Box::new(MemSource(std::fs::read(img).unwrap())),
        Arc::new(BlockCache::new(64 << 20)),
    )
    .unwrap();
    let fs = PackFs::new(sq, 0, 0);
    let root = fs.resolve(b"").unwrap();
    let mut out = Vec::new();
    for e in fs.list(root.node).unwrap() {
        let at = fs.getattr(e.node).unwrap();
        if at.kind == FileKind::File {
            let mut data = Vec::new();
            fs.read_all(at.node, |chunk| {
                data.extend_from_slice(chunk);
                Ok(())
            })
            .unwrap();
            out.push((e.name, data));
        }
    }
    (out, fs.image.cache().stats())
}

fn assert_reads_back(src: &std::path::Path, got: &[NamedBytes], what: &str) {
    assert!(!got.is_empty());
    for (name, data) in got {
        let name = String::from_utf8_lossy(name);
        let want = std::fs::read(src.join(&*name)).unwrap();
        assert!(*data == want, "{what}: {name} differs from its source");
    }
}

#[test]
fn incompressible_tails_are_read_without_decoding_a_shared_block() {
    // Random tails of 4 KiB and more get a raw block of their own, so
    // reading them puts nothing but metadata in the cache; with
    // --fragment-incompressible they share compressed fragment blocks that
    // must be decoded and cached to read any one of them.
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    // JPEG-like files: the same 2 KB header (as JPEGs share tables and
    // colour profiles), then noise. Alone each is incompressible; packed
    // together the repeated headers make a fragment block compress a little,
    // so mksquashfs-style packing stores it compressed.
    for (i, n) in [17_000usize, 30_000, 60_000, 131_071, 2 * 131_072 + 9000]
        .into_iter()
        .enumerate()
    {
        let mut data = bytes(90, 2000, false);
        data.extend(bytes(i as u64, n - 2000, false));
        std::fs::write(src.join(format!("j{i}")), data).unwrap();
    }
    let raw_img = t.path().join("raw.sqfs");
    let frag_img = t.path().join("frag.sqfs");
    pack(&src, &raw_img, &[]);
    pack(&src, &frag_img, &["--fragment-incompressible"]);
    let (got, raw_stats) = read_top_files(&raw_img);
    assert_reads_back(&src, &got, "raw tails");
    let (got, frag_stats) = read_top_files(&frag_img);
    assert_reads_back(&src, &got, "fragmented tails");
    // Metadata blocks are at most 8 KiB each and there are a few.
    assert!(
        raw_stats.bytes < 64 << 10,
        "raw tails cached data: {raw_stats:?}"
    );
    assert!(
        frag_stats.bytes >= 128 << 10,
        "fragments were not cached: {frag_stats:?}"
    );
    // Same contents, about the same size: the raw tails cost a few bytes of
    // block index, the fragments could not compress noise either.
    let (a, b) = (
        std::fs::metadata(&raw_img).unwrap().len(),
        std::fs::metadata(&frag_img).unwrap().len(),
    );
    assert!(
        a <= b + 8192,
        "raw-tail image {a} bytes, fragment image {b}"
    );

    // Text tails still share fragments: a tree of text files packs into
    // fragment blocks and reading one decodes its block.
    let text_src = t.path().join("text");
    std::fs::create_dir(&text_src).unwrap();
    for i in 0..20 {
        std::fs::write(text_src.join(format!("t{i}")), bytes(i, 6000, true)).unwrap();
    }
    let text_img = t.path().join("text.sqfs");
    pack(&text_src, &text_img, &[]);
    let (got, text_stats) = read_top_files(&text_img);
    assert_reads_back(&text_src, &got, "text tails");
    assert!(text_stats.bytes >= 20 * 6000, "text tails: {text_stats:?}");
}

#[test]
fn raw_fragment_blocks_of_mksquashfs_are_read_in_place() {
    // mksquashfs stores a fragment block raw when it does not compress; the
    // reader copies a tail out of it without caching the block.
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    for i in 0..12u64 {
        std::fs::write(
            src.join(format!("n{i}")),
            bytes(100 + i, 9000 + i as usize * 100, false),
        )
        .unwrap();
    }
    let img = t.path().join("m.sqfs");
    mksquashfs(&src, &img, &["-comp", "zstd"]);
    let (got, stats) = read_top_files(&img);
    assert_reads_back(&src, &got, "mksquashfs raw fragments");
    assert_eq!(got.len(), 12);
    assert!(
        stats.bytes < 64 << 10,
        "raw fragments were cached: {stats:?}"
    );
}
