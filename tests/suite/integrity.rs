//! Integrity: images with packfs's hash record read unchanged in every
//! standard reader (kernel, unsquashfs, squashfuse); `packfs verify` finds
//! damage anywhere and names the file, and packfs's mount answers EIO for a
//! block that fails its hash, damage a codec decodes silently included.

use crate::common::*;
use mountfs::cache::BlockCache;
use mountfs::source::FileSource;
use mountfs::squashfs::inode::FileInode;
use mountfs::squashfs::SquashFs;
use packfs_format::codec::{decompress, Compressor};
use packfs_format::squashfs::hashes::{self as record, HashEntry, Trailer};
use packfs_format::squashfs::metadata::{data_is_raw, data_stored_len};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

/// A tree with a compressible multi-block file, an incompressible one
/// (stored raw), and small files whose tails share fragment blocks.
fn tree(root: &Path) {
    std::fs::create_dir_all(root.join("d")).unwrap();
    std::fs::write(root.join("text"), text()).unwrap();
    std::fs::write(root.join("d/noise.jpg"), bytes(2, 200_000, false)).unwrap();
    for i in 0..20u64 {
        std::fs::write(root.join(format!("d/small-{i}")), bytes(10 + i, 3000, true)).unwrap();
    }
}

/// Words from a small vocabulary: every codec compresses it (lz4 finds
/// repeats), and zstd codes its literals, where a flipped bit can still
/// decode.
fn text() -> Vec<u8> {
    const WORDS: [&str; 12] = [
        "alpha ", "beta ", "gamma\n", "delta ", "epsilon ", "zeta ", "eta\n", "theta ", "iota ",
        "kappa ", "lambda\n", "mu ",
    ];
    let noise = bytes(1, 300_000, false);
    let mut out = Vec::with_capacity(300_000);
    let mut i = 0;
    while out.len() < 300_000 {
        out.extend_from_slice(WORDS[noise[i] as usize % WORDS.len()].as_bytes());
        i += 1;
    }
    out.truncate(300_000);
    out
}

/// The file inode at `path` in the image file `img`.
fn file_inode(img: &Path, path: &str) -> FileInode {
    let fs = SquashFs::open(
        Box::new(FileSource::open(img).unwrap()),
        Arc::new(BlockCache::new(1 << 20)),
    )
    .unwrap();
    crate::common::file_inode(&fs, path)
}

/// A scratch directory with [`tree`] in `src` packed into `name` (its
/// format from the extension) with `args`; returns it and the image.
fn packed(name: &str, args: &[&str]) -> (tempfile::TempDir, std::path::PathBuf) {
    let t = scratch();
    let src = t.path().join("src");
    tree(&src);
    let img = t.path().join(name);
    pack(&src, &img, args);
    (t, img)
}

/// Flips bit `bit` of the byte at `pos` in `img`.
fn flip(img: &Path, pos: u64, bit: u8) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .read(true)
        .open(img)
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, pos).unwrap();
    b[0] ^= 1 << bit;
    f.write_all_at(&b, pos).unwrap();
}

/// Unmounts a FUSE mount on drop.
struct FuseMount(tempfile::TempDir);

impl Drop for FuseMount {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .arg("-u")
            .arg(self.0.path())
            .status();
    }
}

fn squashfuse(img: &Path) -> FuseMount {
    let dir = scratch();
    run(Command::new("squashfuse_ll").arg(img).arg(dir.path()));
    FuseMount(dir)
}

/// Asserts that unsquashfs, the kernel, squashfuse_ll and packfs's mount
/// all show `img` as the tree `want` describes.
fn standard_readers_show(img: &Path, want: &std::collections::BTreeMap<std::path::PathBuf, Entry>) {
    let opts = ManifestOptions::default();
    let what = img.display();
    if require_tool("unsquashfs") {
        let t = scratch();
        let out = t.path().join("x");
        run(Command::new("unsquashfs").arg("-d").arg(&out).arg(img));
        assert_same(&format!("unsquashfs, {what}"), &manifest(&out, &opts), want);
    }
    if let Some(k) = KernelMount::new(img) {
        assert_same(&format!("kernel, {what}"), &manifest(k.path(), &opts), want);
    }
    if require_tool("squashfuse_ll") {
        // squashfuse 0.1.105 lists a `trusted.` xattr under `security.`:
        // its own quirk, the same for mksquashfs's images.
        let o = ManifestOptions {
            xattrs: false,
            ..ManifestOptions::default()
        };
        let m = squashfuse(img);
        let want: std::collections::BTreeMap<_, _> = want
            .iter()
            .map(|(p, e)| {
                let mut e = e.clone();
                e.xattrs.clear();
                (p.clone(), e)
            })
            .collect();
        assert_same(
            &format!("squashfuse_ll, {what}"),
            &manifest(m.0.path(), &o),
            &want,
        );
    }
    let ours = PackfsMount::new(img, &[]);
    assert_same(
        &format!("packfs, {what}"),
        &manifest(ours.path(), &opts),
        want,
    );
}

/// A bit of the zstd block `block` (as stored) that, flipped, still
/// decodes, to other bytes: damage no codec notices (packfs writes zstd
/// frames without the content checksum, see `codec::ZSTD_FRAME_CHECKSUM`).
/// Returns (byte index, bit).
fn silent_flip(block: &[u8]) -> (usize, u8) {
    assert_eq!(block[4] & 0b100, 0, "the frame has a content checksum");
    let mut good = Vec::new();
    decompress(Compressor::Zstd, block, &mut good, 1 << 20).unwrap();
    let mut out = Vec::new();
    for i in 6..block.len() {
        for bit in 0..8u8 {
            let mut bad = block.to_vec();
            bad[i] ^= 1 << bit;
            if decompress(Compressor::Zstd, &bad, &mut out, 1 << 20).is_ok() && out != good {
                return (i, bit);
            }
        }
    }
    panic!("no bit of the block decodes silently");
}

#[test]
fn a_flip_zstd_decodes_silently_is_caught_by_the_hash_record() {
    let t = scratch();
    let src = t.path().join("src");
    tree(&src);
    let want = manifest(&src, &ManifestOptions::default());
    let img = t.path().join("z.sqfs");
    pack(&src, &img, &["-c", "zstd"]);
    standard_readers_show(&img, &want);

    let f = file_inode(&img, "text");
    let word = f.block_sizes[0];
    assert!(!data_is_raw(word), "the text's first block is compressed");
    let mut block = vec![0u8; data_stored_len(word) as usize];
    std::fs::File::open(&img)
        .unwrap()
        .read_exact_at(&mut block, f.blocks_start)
        .unwrap();
    let (i, bit) = silent_flip(&block);
    flip(&img, f.blocks_start + i as u64, bit);

    // packfs: verify names the file, the mount answers EIO.
    let (code, out) = verify(&img);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("/text: DAMAGED"), "{out}");
    let ours = PackfsMount::new(&img, &[]);
    let e = std::fs::read(ours.path().join("text")).expect_err("packfs served a damaged block");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    assert_eq!(
        std::fs::read(ours.path().join("d/small-3")).unwrap(),
        bytes(13, 3000, true)
    );
    drop(ours);
    // The kernel has no check that could notice: it serves other bytes.
    if let Some(k) = KernelMount::new(&img) {
        let got = std::fs::read(k.path().join("text")).unwrap();
        assert_ne!(got, text(), "the flip changed nothing");
    }
}

/// `packfs verify IMG`: (exit code, stdout + stderr).
fn verify(img: &Path) -> (Option<i32>, String) {
    let o = Command::new(packfs_bin())
        .args(["verify", "-q"])
        .arg(img)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.code(), text)
}

/// Where `path`'s data lies in `img`: (first block's offset, stored bytes
/// of its blocks, or of its fragment block when it has no blocks).
fn stored_range(img: &Path, path: &str) -> (u64, u64) {
    use mountfs::image::Image;
    let f = file_inode(img, path);
    if !f.block_sizes.is_empty() {
        let len: u64 = f
            .block_sizes
            .iter()
            .map(|&w| data_stored_len(w) as u64)
            .sum();
        return (f.blocks_start, len);
    }
    let fs = SquashFs::open(
        Box::new(FileSource::open(img).unwrap()),
        Arc::new(BlockCache::new(1 << 20)),
    )
    .unwrap();
    let pfs = mountfs::fs::PackFs::new(fs, 0, 0);
    let a = pfs.resolve(path.as_bytes()).unwrap();
    let x = pfs.image.extent(a.node).unwrap();
    // The fragment block's stored size is not in the extent; its first
    // bytes are enough for a start, and the block ends before the next.
    (x.offset, 1)
}

/// Packs `src` into `img` with `args` and checks that a bit flipped at
/// each of `spots` (name, offset) makes `verify` exit 1 naming `name`.
fn assert_found(img: &Path, spots: &[(&str, u64)]) {
    let good = std::fs::read(img).unwrap();
    let (code, out) = verify(img);
    assert_eq!(code, Some(0), "{out}");
    let bad = img.with_extension("bad");
    for &(name, at) in spots {
        for bit in [0u8, 7] {
            std::fs::write(&bad, &good).unwrap();
            flip(&bad, at, bit);
            let (code, out) = verify(&bad);
            assert_eq!(code, Some(1), "bit {bit} at {at} ({name}) not found: {out}");
            assert!(
                out.contains(name),
                "bit {bit} at {at}: {name} not named: {out}"
            );
        }
    }
}

#[test]
fn verify_finds_damage_at_the_start_middle_and_end_of_raw_compressed_and_fragment_blocks() {
    let t = scratch();
    let src = t.path().join("src");
    tree(&src);
    for codec in ["zstd", "gzip", "xz", "lz4"] {
        let img = t.path().join(format!("{codec}.sqfs"));
        pack(&src, &img, &["-c", codec]);
        let raw = file_inode(&img, "d/noise.jpg");
        assert!(raw.block_sizes.iter().all(|&w| data_is_raw(w)), "{codec}");
        let text = file_inode(&img, "text");
        assert!(!data_is_raw(text.block_sizes[1]), "{codec}");
        let mut spots = Vec::new();
        for (name, path) in [("/d/noise.jpg", "d/noise.jpg"), ("/text", "text")] {
            let (at, len) = stored_range(&img, path);
            spots.extend([(name, at), (name, at + len / 2), (name, at + len - 1)]);
        }
        // A fragment block holds the small files' tails: its first bytes
        // belong to the first of them; damage anywhere in it is found by
        // every file in it.
        let (frag, _) = stored_range(&img, "d/small-0");
        spots.push(("/d/small-0", frag));
        spots.push(("/d/small-0", frag + 40));
        assert_found(&img, &spots);
    }
}

#[test]
fn verify_finds_a_flipped_bit_anywhere_in_the_file() {
    let t = scratch();
    let src = t.path().join("src");
    tree(&src);
    for (codec, stride) in [("zstd", 211u64), ("gzip", 1999)] {
        let img = t.path().join(format!("{codec}.sqfs"));
        pack(&src, &img, &["-c", codec]);
        let good = std::fs::read(&img).unwrap();
        let bad = t.path().join("bad.sqfs");
        let mut at = 0;
        while at < good.len() as u64 {
            std::fs::write(&bad, &good).unwrap();
            flip(&bad, at, (at % 8) as u8);
            let (code, out) = verify(&bad);
            assert_eq!(code, Some(1), "{codec}: flip at {at} not found: {out}");
            at += stride;
        }
    }
}

#[test]
fn a_damaged_hash_record_is_reported_not_trusted() {
    let (_t, img) = packed("a.sqfs", &[]);
    let len = std::fs::metadata(&img).unwrap().len();
    let sb = {
        let b = std::fs::read(&img).unwrap();
        u64::from_le_bytes(b[40..48].try_into().unwrap())
    };
    let record = sb.div_ceil(4096) * 4096;
    let good = std::fs::read(&img).unwrap();
    // An entry's hash, its offset (in the first page, which the
    // superblock's check reads at open), the trailer's magic, its index's
    // hash.
    for at in [record + 12, record + 20, len - 48, len - 16] {
        std::fs::write(&img, &good).unwrap();
        flip(&img, at, 3);
        let (code, out) = verify(&img);
        assert_eq!(code, Some(1), "flip at {at}: {out}");
        assert!(out.contains("(image)"), "flip at {at}: {out}");
        // The mount does not serve an image whose record it cannot trust
        // (without the trailer's magic it is an image without a record).
        if at != len - 48 {
            let (_, e) = refused_mount(&img, &[], &[]);
            assert!(e.contains("hash record"), "{e}");
        }
    }
}

#[test]
fn the_mount_answers_eio_for_a_block_that_fails_its_hash() {
    let (_t, img) = packed("a.sqfs", &[]);
    let (_u, bare) = packed("a.sqfs", &["--no-checksums"]);
    // The middle of a raw block: no codec checks it.
    let (at, len) = stored_range(&img, "d/noise.jpg");
    let (at2, _) = stored_range(&bare, "d/noise.jpg");
    flip(&img, at + len / 2, 1);
    flip(&bare, at2 + len / 2, 1);
    let log = img.with_extension("log");
    let m = PackfsMount::new(&img, &["--log", log.to_str().unwrap()]);
    let e = std::fs::read(m.path().join("d/noise.jpg")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    // The log names the image, the file's path, its inode number (as the
    // kernel's mount shows it) and the block.
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains(img.to_str().unwrap())
            && said.contains(&format!("/d/noise.jpg: inode 1: data block at offset {at}"))
            && said.contains("hash record"),
        "log: {said}"
    );
    assert_eq!(std::fs::read(m.path().join("text")).unwrap(), text());
    // Without the record the damage is served as data.
    let m2 = PackfsMount::new(&bare, &[]);
    let got = std::fs::read(m2.path().join("d/noise.jpg")).unwrap();
    assert_ne!(got, bytes(2, 200_000, false));
}

#[test]
fn images_with_and_without_the_record_read_identically_in_every_standard_reader() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    tree(&src.join("more"));
    let want = manifest(&src, &ManifestOptions::default());
    let with = t.path().join("with.sqfs");
    let without = t.path().join("without.sqfs");
    pack(&src, &with, &[]);
    pack(&src, &without, &["--no-checksums"]);
    // The filesystem's bytes are the same (but the superblock's time, the
    // clock's when packing a directory); the record only follows them.
    let (mut a, mut b) = (
        std::fs::read(&with).unwrap(),
        std::fs::read(&without).unwrap(),
    );
    a[8..12].fill(0);
    b[8..12].fill(0);
    assert!(a.len() > b.len());
    assert!(a[..b.len()] == b[..], "the filesystems differ");
    for img in [&with, &without] {
        standard_readers_show(img, &want);
    }
}

#[test]
fn verify_checks_every_shard_of_a_manifest() {
    let t = scratch();
    let src = t.path().join("src");
    tree(&src);
    let out = t.path().join("train-{shard}.sqfs");
    run(Command::new(packfs_bin())
        .arg("pack")
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .args(["-q", "--shards", "2"]));
    let manifest = std::fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".manifest.json"))
        .expect("a manifest");
    let (code, text) = verify(&manifest);
    assert_eq!(code, Some(0), "{text}");
    let shard = t.path().join("train-1.sqfs");
    let (at, len) = stored_range(&shard, "text");
    flip(&shard, at + len / 2, 5);
    let (code, text) = verify(&manifest);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("/text: DAMAGED"), "{text}");
}

/// Where regular file `path`'s data lies in image `img` (any format):
/// (offset, stored length).
fn extent_of(img: &Path, path: &str) -> (u64, u64) {
    let loc = mountfs::location::ImageLocation::Local(img.to_path_buf());
    let o = mountfs::open::Opener::new(mountfs::open::OpenOptions::new(1 << 20))
        .open(&loc)
        .unwrap();
    let fs = mountfs::fs::PackFs::new(o.image, 0, 0);
    let a = fs.resolve(path.as_bytes()).unwrap();
    let x = fs.extent(a.node).unwrap();
    (x.offset, x.len)
}

#[test]
fn verify_finds_damage_in_zip_members_and_local_headers() {
    let (_t, img) = packed("a.zip", &[]);
    if require_tool("unzip") {
        run(Command::new("unzip").arg("-tq").arg(&img));
    }
    let mut spots = Vec::new();
    for (name, path) in [("/text", "text"), ("/d/noise.jpg", "d/noise.jpg")] {
        let (at, len) = extent_of(&img, path);
        spots.extend([(name, at), (name, at + len / 2), (name, at + len - 1)]);
    }
    // The first member's local header signature: no read of data needs it.
    let first = {
        let z = std::fs::read(&img).unwrap();
        let name_len = u16::from_le_bytes([z[26], z[27]]) as usize;
        String::from_utf8_lossy(&z[30..30 + name_len])
            .trim_end_matches('/')
            .to_string()
    };
    let first = format!("/{first}");
    spots.push((&first, 1));
    assert_found(&img, &spots);
}

#[test]
fn verify_reads_a_remote_image_and_names_the_damaged_file() {
    let (t, img) = packed("a.sqfs", &[]);
    let server = crate::common::servers::RangeServer::start(t.path(), &[]);
    let url = std::path::PathBuf::from(server.url("a.sqfs"));
    let (code, out) = verify(&url);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("hash record"), "{out}");
    let (at, len) = stored_range(&img, "d/noise.jpg");
    flip(&img, at + len / 2, 2);
    let (code, out) = verify(&url);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("/d/noise.jpg: DAMAGED"), "{out}");
}

/// The filesystem's end and the entries of the (version 2) hash record of
/// the image `img` holds.
fn record_entries(img: &[u8]) -> (u64, Vec<HashEntry>) {
    let used = u64::from_le_bytes(img[40..48].try_into().unwrap());
    let t = Trailer::decode(img[img.len() - Trailer::SIZE..].try_into().unwrap()).unwrap();
    assert_eq!(t.version, record::RECORD_VERSION);
    let at = t.record_start as usize;
    let bytes = &img[at..at + t.record_len as usize];
    (used, record::decode_entries(bytes, None, used).unwrap())
}

/// Rewrites `img`'s hash record in pages of `2^page_log` entries (the
/// writer's pages are larger than a test image's record), or with `None`
/// as a version 1 record, as the earlier writer wrote it.
fn rewrite_record(img: &Path, page_log: Option<u16>) {
    let mut b = std::fs::read(img).unwrap();
    let (used, entries) = record_entries(&b);
    let start = record::record_start(used);
    b.truncate(start as usize);
    let (bytes, index, trailer) = match page_log {
        Some(log) => {
            let r = record::encode_record(&entries, start, log);
            (r.entries, r.index, r.trailer)
        }
        None => {
            let mut v = Vec::new();
            for e in &entries {
                e.encode(&mut v);
            }
            let t = Trailer::v1(start, v.len() as u64, record::hash(&v));
            (v, Vec::new(), t)
        }
    };
    let len = record::image_len(used, bytes.len() as u64, index.len() as u64);
    b.extend_from_slice(&bytes);
    b.resize(len as usize - Trailer::SIZE - index.len(), 0);
    b.extend_from_slice(&index);
    b.extend_from_slice(&trailer.encode());
    std::fs::write(img, b).unwrap();
}

/// Reads `path` of `img` through packfs's reader (no mount).
fn read_file(img: &Path, path: &str) -> mountfs::Result<Vec<u8>> {
    let fs = SquashFs::open(
        Box::new(FileSource::open(img).unwrap()),
        Arc::new(BlockCache::new(1 << 20)),
    )?;
    let pfs = mountfs::fs::PackFs::new(fs, 0, 0);
    let a = pfs.resolve(path.as_bytes())?;
    let mut out = Vec::new();
    pfs.read_all(a.node, |b| {
        out.extend_from_slice(b);
        Ok(())
    })?;
    Ok(out)
}

#[test]
fn damage_in_one_page_of_the_record_is_found_only_by_reads_of_that_page() {
    let (_t, img) = packed("a.sqfs", &[]);
    // A page an entry: each piece's page is its own.
    rewrite_record(&img, Some(0));
    let (code, out) = verify(&img);
    assert_eq!(code, Some(0), "{out}");
    let (used, entries) = record_of(&img);
    let (at, _) = stored_range(&img, "d/noise.jpg");
    let p = entries.iter().position(|e| e.offset == at).unwrap();
    // The page's entry's hash.
    flip(&img, record::record_start(used) + p as u64 * 20 + 15, 2);

    // The image opens (its index is intact); only the damaged page's
    // piece fails, as record damage.
    assert_eq!(read_file(&img, "text").unwrap(), text());
    assert_eq!(read_file(&img, "d/small-3").unwrap(), bytes(13, 3000, true));
    match read_file(&img, "d/noise.jpg") {
        Err(mountfs::FsError::Damaged(m)) => {
            assert!(
                m.contains("hash record") && m.contains(&format!("page {p} ")),
                "{m}"
            )
        }
        r => panic!("a damaged page was trusted: {:?}", r.map(|v| v.len())),
    }
    let (code, out) = verify(&img);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("/d/noise.jpg: DAMAGED"), "{out}");
    assert!(out.contains("(image): DAMAGED"), "{out}");
    assert!(!out.contains("/text: DAMAGED"), "{out}");
    let m = PackfsMount::new(&img, &[]);
    assert_eq!(std::fs::read(m.path().join("text")).unwrap(), text());
    let e = std::fs::read(m.path().join("d/noise.jpg")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
}

/// [`record_entries`] of an image whose record was rewritten in pages.
fn record_of(img: &Path) -> (u64, Vec<HashEntry>) {
    record_entries(&std::fs::read(img).unwrap())
}

#[test]
fn a_damaged_page_index_page_or_trailer_is_reported_not_trusted() {
    let (_t, img) = packed("a.sqfs", &[]);
    rewrite_record(&img, Some(1));
    let good = std::fs::read(&img).unwrap();
    let len = good.len() as u64;
    let t = Trailer::decode(good[good.len() - Trailer::SIZE..].try_into().unwrap()).unwrap();
    assert!(t.pages() > 4, "{} pages", t.pages());
    let index = len - Trailer::SIZE as u64 - t.index_len();
    // A page's first offset and a page's hash in the index, the first
    // page (the superblock's), the trailer's page size and its index hash.
    for at in [
        index + 16 * 2 + 1,
        index + 16 * 3 + 9,
        t.record_start + 30,
        len - 34,
        len - 16,
    ] {
        std::fs::write(&img, &good).unwrap();
        flip(&img, at, 0);
        let (code, out) = verify(&img);
        assert_eq!(code, Some(1), "flip at {at}: {out}");
        assert!(
            out.contains("(image): DAMAGED") && out.contains("hash record"),
            "flip at {at}: {out}"
        );
        let (_, e) = refused_mount(&img, &[], &[]);
        assert!(e.contains("hash record"), "flip at {at}: {e}");
    }
}

#[test]
fn opening_reads_the_record_index_not_the_record() {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    // 4096 raw 4 KiB blocks: a record of five pages.
    std::fs::write(src.join("noise"), bytes(9, 16 << 20, false)).unwrap();
    std::fs::write(src.join("small"), b"small").unwrap();
    let read_at_open = |img: &Path| {
        let counting = Arc::new(mountfs::source::CountingSource::new(
            mountfs::source::MemSource(std::fs::read(img).unwrap()),
        ));
        SquashFs::open(
            Box::new(counting.clone()),
            Arc::new(BlockCache::new(1 << 20)),
        )
        .unwrap();
        counting.bytes.load(std::sync::atomic::Ordering::Relaxed)
    };
    let v2 = t.path().join("v2.sqfs");
    let bare = t.path().join("bare.sqfs");
    pack(&src, &v2, &["-b", "4K"]);
    pack(&src, &bare, &["-b", "4K", "--no-checksums"]);
    let v1 = t.path().join("v1.sqfs");
    std::fs::copy(&v2, &v1).unwrap();
    rewrite_record(&v1, None);
    let (_, entries) = record_of(&v2);
    let record_len = entries.len() as u64 * 20;
    assert!(entries.len() > 4 * 1024, "{} entries", entries.len());
    let (none, two, one) = (read_at_open(&bare), read_at_open(&v2), read_at_open(&v1));
    // The last 4 KiB (trailer and index) and the pages of the pieces the
    // open reads itself (the superblock's, the tables' at the end).
    assert!(two <= none + 4096 + 2 * 20 * 1024, "{none} {two} {one}");
    assert!(one >= none + record_len, "{none} {two} {one}");
    assert_eq!(read_file(&v2, "small").unwrap(), b"small");
}

#[test]
fn images_with_a_version_1_record_still_read_and_verify() {
    let (_t, img) = packed("a.sqfs", &[]);
    rewrite_record(&img, None);
    let good = std::fs::read(&img).unwrap();
    let (code, out) = verify(&img);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("hash record"), "{out}");
    assert_eq!(read_file(&img, "text").unwrap(), text());
    // A block's damage names its file; an entry's, the record.
    let (at, len) = stored_range(&img, "d/noise.jpg");
    flip(&img, at + len / 2, 6);
    let (code, out) = verify(&img);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("/d/noise.jpg: DAMAGED"), "{out}");
    std::fs::write(&img, &good).unwrap();
    let sb_used = u64::from_le_bytes(good[40..48].try_into().unwrap());
    flip(&img, record::record_start(sb_used) + 20 * 3 + 14, 1);
    let (code, out) = verify(&img);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("(image): DAMAGED") && out.contains("hash record"),
        "{out}"
    );
}
