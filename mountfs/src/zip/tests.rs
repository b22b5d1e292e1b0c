//! Core tests: archives written by a minimal writer here (so that names,
//! flags and extras can be anything, including malicious), read through
//! [`ZipFs`] and [`PackFs`] without a mount.

use super::*;
use crate::fs::PackFs;
use crate::source::MemSource;
use packfs_format::zip::time::dos_to_unix;
use std::io::Write;

#[derive(Clone)]
struct E {
    name: Vec<u8>,
    data: Vec<u8>,
    method: u16,
    /// Unix mode incl. type (made-by host Unix) or None (host DOS).
    mode: Option<u32>,
    flags: u16,
    extra: Vec<u8>,
    bad_crc: bool,
    /// Compressed bytes to store instead of compressing `data` (e.g. a
    /// multi-frame zstd stream).
    raw: Option<Vec<u8>>,
}

fn e(name: &str, data: &[u8]) -> E {
    E {
        name: name.as_bytes().to_vec(),
        data: data.to_vec(),
        method: 8,
        mode: Some(libc::S_IFREG | 0o640),
        flags: 0,
        extra: Vec::new(),
        bad_crc: false,
        raw: None,
    }
}

fn compress(method: u16, d: &[u8]) -> Vec<u8> {
    match method {
        0 => d.to_vec(),
        8 => {
            let mut w = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
            w.write_all(d).unwrap();
            w.finish().unwrap()
        }
        12 => {
            let mut w = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
            w.write_all(d).unwrap();
            w.finish().unwrap()
        }
        93 => zstd::encode_all(d, 1).unwrap(),
        95 => {
            let mut w = xz2::write::XzEncoder::new(Vec::new(), 1);
            w.write_all(d).unwrap();
            w.finish().unwrap()
        }
        14 => {
            // .lzma "alone" (props + size + stream) into ZIP's LZMA framing.
            let opts = xz2::stream::LzmaOptions::new_preset(1).unwrap();
            let s = xz2::stream::Stream::new_lzma_encoder(&opts).unwrap();
            let mut w = xz2::write::XzEncoder::new_stream(Vec::new(), s);
            w.write_all(d).unwrap();
            let alone = w.finish().unwrap();
            let mut out = vec![9, 20, 5, 0];
            out.extend_from_slice(&alone[..5]);
            out.extend_from_slice(&alone[13..]);
            out
        }
        _ => unreachable!(),
    }
}

/// Writes a ZIP: local headers (with a different extra than the central
/// one, to prove the data offset comes from the local header), data, central
/// directory, EOCD.
fn zip(entries: &[E]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut cd = Vec::new();
    for en in entries {
        let comp = en
            .raw
            .clone()
            .unwrap_or_else(|| compress(en.method, &en.data));
        let mut crc = crc32fast::hash(&en.data);
        if en.bad_crc {
            crc ^= 1;
        }
        let flags = en.flags | if en.method == 14 { 2 } else { 0 };
        let local = out.len() as u32;
        let local_extra = vec![0xfe, 0xca, 3, 0, 1, 2, 3];
        out.extend_from_slice(&SIG_LOCAL.to_le_bytes());
        out.extend_from_slice(&20u16.to_le_bytes());
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&en.method.to_le_bytes());
        out.extend_from_slice(&[0, 0, 0x21, 0]); // 1980-01-01 00:00
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&(comp.len() as u32).to_le_bytes());
        out.extend_from_slice(&(en.data.len() as u32).to_le_bytes());
        out.extend_from_slice(&(en.name.len() as u16).to_le_bytes());
        out.extend_from_slice(&(local_extra.len() as u16).to_le_bytes());
        out.extend_from_slice(&en.name);
        out.extend_from_slice(&local_extra);
        out.extend_from_slice(&comp);

        let made_by: u16 = if en.mode.is_some() { (3 << 8) | 30 } else { 20 };
        cd.extend_from_slice(&SIG_CENTRAL.to_le_bytes());
        cd.extend_from_slice(&made_by.to_le_bytes());
        cd.extend_from_slice(&20u16.to_le_bytes());
        cd.extend_from_slice(&flags.to_le_bytes());
        cd.extend_from_slice(&en.method.to_le_bytes());
        cd.extend_from_slice(&[0, 0, 0x21, 0]);
        cd.extend_from_slice(&crc.to_le_bytes());
        cd.extend_from_slice(&(comp.len() as u32).to_le_bytes());
        cd.extend_from_slice(&(en.data.len() as u32).to_le_bytes());
        cd.extend_from_slice(&(en.name.len() as u16).to_le_bytes());
        cd.extend_from_slice(&(en.extra.len() as u16).to_le_bytes());
        cd.extend_from_slice(&[0; 4]); // comment len, disk
        cd.extend_from_slice(&[0; 2]); // internal attrs
        cd.extend_from_slice(&(en.mode.unwrap_or(0) << 16).to_le_bytes());
        cd.extend_from_slice(&local.to_le_bytes());
        cd.extend_from_slice(&en.name);
        cd.extend_from_slice(&en.extra);
    }
    let cd_off = out.len() as u32;
    out.extend_from_slice(&cd);
    out.extend_from_slice(&SIG_EOCD.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend_from_slice(&(cd.len() as u32).to_le_bytes());
    out.extend_from_slice(&cd_off.to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    out
}

fn open(img: Vec<u8>, budget: usize) -> Result<ZipFs> {
    ZipFs::open(Box::new(MemSource(img)), Arc::new(BlockCache::new(budget)))
}

fn fs(img: Vec<u8>) -> PackFs<ZipFs> {
    PackFs::new(open(img, 64 << 20).unwrap(), 0, 0)
}

fn data(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if i % 3 == 0 {
                x as u8
            } else {
                b"zip data "[i % 9]
            }
        })
        .collect()
}

fn cat(f: &PackFs<ZipFs>, path: &str) -> Result<Vec<u8>> {
    let a = f.resolve(path.as_bytes())?;
    let mut out = Vec::new();
    f.read_all(a.node, |b| {
        out.extend_from_slice(b);
        Ok(())
    })?;
    Ok(out)
}

#[test]
fn tree_lookup_attrs_and_synthesised_dirs() {
    let mut link = e("a/link", b"../top.txt");
    link.mode = Some(libc::S_IFLNK | 0o777);
    let mut dos = e("dos/file.txt", b"dos");
    dos.mode = None;
    let mut dir = e("a/b/", b"");
    dir.method = 0;
    dir.mode = Some(libc::S_IFDIR | 0o750);
    let f = fs(zip(&[
        e("top.txt", b"top"),
        e("a/b/c/deep.txt", b"deep"),
        dir,
        link,
        dos,
    ]));
    let root = f.getattr(ROOT).unwrap();
    assert_eq!(
        (root.kind, root.perm, root.nlink),
        (FileKind::Dir, 0o755, 4)
    );
    let top = f.resolve(b"top.txt").unwrap();
    assert_eq!(
        (top.kind, top.perm, top.size, top.nlink),
        (FileKind::File, 0o640, 3, 1)
    );
    assert_eq!(top.mtime, dos_to_unix(0x21, 0));
    let b = f.resolve(b"a/b").unwrap();
    assert_eq!((b.kind, b.perm), (FileKind::Dir, 0o750));
    let a = f.resolve(b"a").unwrap();
    assert_eq!(
        (a.kind, a.perm, a.mtime),
        (FileKind::Dir, 0o755, dos_to_unix(0x21, 0))
    );
    assert_eq!(f.resolve(b"dos/file.txt").unwrap().perm, 0o644);
    let l = f.resolve(b"a/link").unwrap();
    assert_eq!((l.kind, l.size), (FileKind::Symlink, 10));
    assert_eq!(f.readlink(l.node).unwrap(), b"../top.txt");
    assert_eq!(cat(&f, "a/b/c/deep.txt").unwrap(), b"deep");
    assert!(matches!(f.resolve(b"a/nope"), Err(FsError::NotFound)));
    assert!(matches!(f.resolve(b"top.txt/x"), Err(FsError::NotDir)));
    assert!(matches!(f.open(a.node), Err(FsError::IsDir)));
    let names: Vec<_> = f.list(ROOT).unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, [b"a".to_vec(), b"dos".to_vec(), b"top.txt".to_vec()]);
    assert_eq!(f.image.parent_ino(b.node).unwrap(), a.ino);
    assert_eq!(f.image.parent_ino(ROOT).unwrap(), ROOT);
    for bad in [0, 999] {
        assert!(f.getattr(bad).is_err());
    }
    let info = f.image.info();
    assert_eq!(
        (info.entries, info.files, info.dirs, info.symlinks),
        (5, 3, 4, 1)
    );
    assert_eq!(info.synthesised_dirs, 3);
}

#[test]
fn readdir_resumes_from_any_cookie() {
    let entries: Vec<E> = (0..50).map(|i| e(&format!("d/f{i:03}"), b"x")).collect();
    let f = fs(zip(&entries));
    let d = f.resolve(b"d").unwrap();
    let mut all = Vec::new();
    f.readdir(d.node, 0, &mut |e| {
        all.push(e);
        true
    })
    .unwrap();
    assert_eq!(all.len(), 52);
    assert_eq!(all[0].name, b".");
    assert_eq!(all[1].name, b"..");
    assert!(all[2..].iter().all(|e| e.cookie >= 3));
    // Resume after every entry, taking 3 at a time, must give the same list.
    let mut got = Vec::new();
    let mut cookie = 0;
    loop {
        let mut batch = Vec::new();
        f.readdir(d.node, cookie, &mut |e| {
            batch.push(e);
            batch.len() < 3
        })
        .unwrap();
        if batch.is_empty() {
            break;
        }
        cookie = batch.last().unwrap().cookie;
        got.extend(batch);
    }
    assert_eq!(got, all);
}

#[test]
fn every_method_reads_back_including_random_offsets() {
    for method in [0u16, 8, 12, 14, 93, 95] {
        let big = data(method as u64, 3 * (1 << 20) + 12345);
        let small = data(100 + method as u64, 70_000);
        let mut eb = e("big", &big);
        eb.method = method;
        let mut es = e("small", &small);
        es.method = method;
        let mut ee = e("empty", b"");
        ee.method = method;
        // A tiny cache forces evictions and decoder restarts.
        for budget in [64 << 20, 1 << 16] {
            let f = PackFs::new(
                open(zip(&[eb.clone(), es.clone(), ee.clone()]), budget).unwrap(),
                0,
                0,
            );
            assert_eq!(cat(&f, "big").unwrap(), big, "method {method}");
            assert_eq!(cat(&f, "small").unwrap(), small, "method {method}");
            assert_eq!(cat(&f, "empty").unwrap(), b"", "method {method}");
            let node = f.resolve(b"big").unwrap().node;
            f.open(node).unwrap();
            let mut x = 12345u64;
            for _ in 0..40 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let off = (x >> 20) % (big.len() as u64 + 100);
                let len = ((x >> 8) % 600_000) as u32;
                let got = f.read(node, off, len).unwrap();
                let s = (off as usize).min(big.len());
                let e = (s + len as usize).min(big.len());
                assert_eq!(got, &big[s..e], "method {method} off {off} len {len}");
            }
        }
    }
}

#[test]
fn prefetch_fills_the_cache_ahead() {
    let big = data(9, 2 << 20);
    let f = open(zip(&[e("big", &big)]), 64 << 20).unwrap();
    let h = Image::open(&f, 2).unwrap();
    f.prefetch(&h, 0, 1 << 20);
    let before = f.cache().stats().misses;
    assert_eq!(Image::read(&f, &h, 5, 100).unwrap(), &big[5..105]);
    assert_eq!(
        Image::read(&f, &h, CHUNK * 3 + 1, 10).unwrap(),
        &big[CHUNK as usize * 3 + 1..][..10]
    );
    assert_eq!(
        f.cache().stats().misses,
        before,
        "prefetched chunks are hits"
    );
}

#[test]
fn malicious_names_cannot_escape_and_dups_and_clashes_resolve() {
    let f = fs(zip(&[
        e("../evil", b"1"),
        e("/abs", b"2"),
        e("a/../../b", b"3"),
        e("./x/./y", b"4"),
        e("dup", b"first"),
        e("dup", b"second"),
        e("clash", b"file"),
        e("clash/inner", b"inner"),
        e("", b"empty name"),
        e(&"n".repeat(256), b"long"),
        e("back\\slash", b"5"),
    ]));
    let mut names: Vec<_> = f.list(ROOT).unwrap().into_iter().map(|e| e.name).collect();
    names.sort();
    let want: Vec<Vec<u8>> = ["abs", "back\\slash", "clash", "dup", "x"]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
    assert_eq!(names, want);
    assert_eq!(cat(&f, "abs").unwrap(), b"2");
    assert_eq!(cat(&f, "x/y").unwrap(), b"4");
    assert_eq!(cat(&f, "dup").unwrap(), b"second");
    assert_eq!(f.resolve(b"clash").unwrap().kind, FileKind::Dir);
    assert_eq!(cat(&f, "clash/inner").unwrap(), b"inner");
    assert!(f.resolve(b"b").is_err());
    assert!(f.resolve(b"evil").is_err());
}

#[test]
fn crc_mismatch_encryption_and_unknown_method_are_errors() {
    let mut bad = e("bad", &data(1, 5000));
    bad.bad_crc = true;
    let mut bad_stored = e("bad_stored", b"stored");
    bad_stored.method = 0;
    bad_stored.bad_crc = true;
    let mut bad_big = e("bad_big", &data(2, 1 << 21));
    bad_big.bad_crc = true;
    let mut enc = e("enc", b"secret");
    enc.flags = 1;
    // An empty member whose CRC-32 is not that of no bytes (0): no read
    // of it decodes anything, so nothing else would notice.
    let mut bad_empty = e("bad_empty", b"");
    bad_empty.bad_crc = true;
    let f = fs(zip(&[
        bad,
        bad_stored,
        bad_big,
        enc,
        bad_empty,
        e("ok", b"fine"),
    ]));
    assert!(matches!(cat(&f, "bad_empty"), Err(FsError::Corrupt(_))));
    assert!(matches!(cat(&f, "bad"), Err(FsError::Corrupt(_))));
    assert!(matches!(cat(&f, "bad_stored"), Err(FsError::Corrupt(_))));
    assert!(matches!(cat(&f, "bad_big"), Err(FsError::Corrupt(_))));
    let enc = f.resolve(b"enc").unwrap();
    assert_eq!(enc.size, 6);
    let err = f.open(enc.node).unwrap_err();
    assert_eq!(err.errno(), libc::EACCES);
    assert_eq!(cat(&f, "ok").unwrap(), b"fine");
    // An unsupported method: patch the method of "ok" in both headers to 6 (implode).
    let mut img = zip(&[e("imploded", b"x")]);
    img[8] = 6;
    let cd = img.len() - 22 - 46 - 8;
    img[cd + 10] = 6;
    let f = fs(img);
    let n = f.resolve(b"imploded").unwrap();
    assert_eq!(f.open(n.node).unwrap_err().errno(), libc::EIO);
}

/// A stored member of 1 MiB or more is too large to check at open; a read
/// of it in order from its start checks its CRC-32, and the read that
/// reaches the end fails on a mismatch (it served damaged bytes silently:
/// `packfs extract` wrote them and exited 0).
#[test]
fn a_large_stored_member_read_in_order_is_crc_checked() {
    let d = data(3, 3 << 20);
    let mut bad = e("bad", &d);
    bad.method = 0;
    bad.bad_crc = true;
    let mut good = e("good", &d);
    good.method = 0;
    let f = fs(zip(&[bad, good]));
    let err = cat(&f, "bad").unwrap_err();
    assert!(matches!(err, FsError::Corrupt(_)), "{err}");
    assert!(err.to_string().contains("bad: CRC-32 mismatch"), "{err}");
    assert_eq!(cat(&f, "good").unwrap(), d);
    // Found wrong, the member fails every later read: the kernel retries a
    // failed readahead READ page by page, out of order.
    let n = f.resolve(b"bad").unwrap().node;
    assert!(matches!(f.read(n, 1 << 20, 4096), Err(FsError::Corrupt(_))));
    // Out of order before its end was reached: served unchecked, as the
    // data of a SquashFS image is.
    let f = fs(zip(&[{
        let mut bad = e("bad", &d);
        bad.method = 0;
        bad.bad_crc = true;
        bad
    }]));
    let n = f.resolve(b"bad").unwrap().node;
    assert_eq!(f.read(n, 1 << 20, 4096).unwrap(), d[1 << 20..][..4096]);
    assert_eq!(f.read(n, (3 << 20) - 10, 10).unwrap(), d[(3 << 20) - 10..]);
    assert!(matches!(cat(&f, "bad"), Err(FsError::Corrupt(_))));
}

#[test]
fn truncated_and_corrupted_archives_never_panic() {
    let img = zip(&[
        e("a/one", &data(3, 3000)),
        e("b/two", &data(4, 300)),
        e("three", b""),
    ]);
    // Every truncation fails to open (the EOCD is at the very end).
    for cut in 0..img.len() {
        let r = open(img[..cut].to_vec(), 1 << 20);
        assert!(r.is_err(), "cut at {cut} opened");
    }
    // Every single-byte corruption either fails cleanly or reads something.
    for pos in 0..img.len() {
        for v in [0x00u8, 0xFF, 0x80] {
            let mut bad = img.clone();
            bad[pos] = v;
            if let Ok(z) = open(bad, 1 << 20) {
                let f = PackFs::new(z, 0, 0);
                walk(&f, ROOT, 0);
            }
        }
    }
}

fn walk(f: &PackFs<ZipFs>, dir: NodeId, depth: usize) {
    assert!(depth < 10);
    for en in f.list(dir).unwrap() {
        let a = f.getattr(en.node).unwrap();
        match a.kind {
            FileKind::Dir => walk(f, a.node, depth + 1),
            FileKind::Symlink => {
                let _ = f.readlink(a.node);
            }
            _ => {
                let _ = f.read_all(a.node, |_| Ok(()));
            }
        }
    }
}

#[test]
fn data_offset_comes_from_the_local_header_and_prefix_is_tolerated() {
    let mut img = b"#!/bin/sh\nexit 0\n".to_vec();
    let z = zip(&[e("f", b"payload")]);
    img.extend_from_slice(&z);
    let f = fs(img);
    assert_eq!(cat(&f, "f").unwrap(), b"payload");
    assert_eq!(f.image.info().prefix_bytes, 17);
}

#[test]
fn zip64_extra_sizes_are_used() {
    // Saturate the 32-bit fields in the central record and give the real
    // values in a Zip64 extra.
    let payload = data(5, 10_000);
    let mut en = e("z64", &payload);
    en.method = 0;
    let mut extra = vec![1, 0, 24, 0];
    extra.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    extra.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    extra.extend_from_slice(&0u64.to_le_bytes());
    en.extra = extra;
    let mut img = zip(&[en]);
    let cd = img.len() - 22 - 46 - 3 - 28;
    assert_eq!(&img[cd..cd + 4], &SIG_CENTRAL.to_le_bytes());
    img[cd + 20..cd + 28].copy_from_slice(&[0xFF; 8]);
    img[cd + 42..cd + 46].copy_from_slice(&[0xFF; 4]);
    let f = fs(img);
    assert_eq!(cat(&f, "z64").unwrap(), payload);
    assert!(f.image.info().zip64);
}

#[test]
fn index_is_compact_and_fast() {
    let n = 200_000usize;
    let mut entries = Vec::with_capacity(n);
    for i in 0..n {
        let mut en = e(
            &format!("dir{:03}/sub{}/file-{i:07}.dat", i % 500, i % 7),
            b"",
        );
        en.method = 0;
        entries.push(en);
    }
    let img = zip(&entries);
    let t = std::time::Instant::now();
    let z = open(img, 1 << 20).unwrap();
    let took = t.elapsed();
    let info = z.info();
    assert_eq!(info.files, n as u64);
    let per = info.index_bytes as f64 / (info.files + info.dirs) as f64;
    eprintln!("index of {n} entries: {:?}, {per:.1} bytes/node", took);
    assert!(per <= 100.0, "{per} bytes per entry");
    assert!(took.as_secs_f64() < 5.0, "{took:?}");
    let f = PackFs::new(z, 0, 0);
    assert_eq!(
        f.resolve(b"dir007/sub0/file-0017507.dat").unwrap().kind,
        FileKind::File
    );
}

/// Compressible "text": words from a small vocabulary picked by a xorshift
/// generator (deflate gets it to about a third).
fn text(seed: u64, n: usize) -> Vec<u8> {
    const WORDS: [&str; 16] = [
        "packfs ",
        "zip ",
        "member ",
        "chunk ",
        "inflate ",
        "window ",
        "the ",
        "of ",
        "checkpoint ",
        "a ",
        "random ",
        "read ",
        "cache ",
        "budget ",
        "42 ",
        "\n",
    ];
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(n + 16);
    while out.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(WORDS[(x >> 60) as usize].as_bytes());
        if x & 0xF00 == 0 {
            out.extend_from_slice(format!("{} ", x >> 40).as_bytes());
        }
    }
    out.truncate(n);
    out
}

/// Empties the block cache, so that the next read must decode.
fn drop_cache(z: &mut ZipFs) {
    z.cache = Arc::new(BlockCache::new(z.cache.budget()));
}

/// Opens the member `name` at the archive's root.
fn open_member(z: &ZipFs, name: &str) -> ZipFile {
    let a = Image::lookup(z, ROOT, name.as_bytes()).unwrap();
    Image::open(z, a.node).unwrap()
}

/// Reads `off..off+len` through the `Image` API (no `PackFs` prefetch).
fn pread(z: &ZipFs, h: &ZipFile, off: u64, len: u32) -> Vec<u8> {
    Image::read(z, h, off, len).unwrap_or_else(|e| panic!("read {len} at {off}: {e}"))
}

/// Readahead of a chunk the reader's decoder has passed (a late job)
/// decoded it again, from a checkpoint or the member's start, and left the
/// reader's decoder behind, so the reader's next chunk was decoded again too.
#[test]
fn readahead_does_not_take_the_readers_decoder_back() {
    const MIB: u64 = 1 << 20;
    let big = text(11, (8 * MIB) as usize);
    let z = open(zip(&[e("big", &big)]), 64 << 20).unwrap();
    let h = open_member(&z, "big");
    for off in (0..4 * MIB).step_by(CHUNK as usize) {
        assert_eq!(
            pread(&z, &h, off, CHUNK as u32),
            &big[off as usize..][..CHUNK as usize]
        );
    }
    let mut z = z;
    drop_cache(&mut z);
    let before = z.decoded_bytes();
    Image::prefetch(&z, &h, MIB, 2 * MIB);
    assert_eq!(
        z.decoded_bytes(),
        before,
        "a passed chunk was decoded again"
    );
    // The reader goes on from where its decoder is: one chunk decoded.
    assert_eq!(
        pread(&z, &h, 4 * MIB, 100),
        &big[(4 * MIB) as usize..][..100]
    );
    assert_eq!(z.decoded_bytes(), before + CHUNK);
}

#[test]
fn deflate_checkpoints_make_backward_and_random_reads_cheap() {
    const MIB: u64 = 1 << 20;
    let size = 40 * MIB;
    let big = text(7, size as usize);
    let img = zip(&[e("big", &big)]);
    assert!(img.len() < big.len() / 2, "text should compress");
    // A 1 MiB cache (at most one 256 KiB chunk per shard), emptied before
    // every backward read so that each one has to decode.
    let mut z = open(img.clone(), 1 << 20).unwrap();
    let h = Image::open(&z, 2).unwrap();

    // Backward, 1 MiB at a time. The first read decodes the whole member
    // from its start (no checkpoint exists yet) and records one per MiB;
    // every later one resumes at the checkpoint at its offset.
    let mut from_start = 0u64; // what a restart at the member start costs
    let mut off = size - MIB;
    loop {
        drop_cache(&mut z);
        assert_eq!(
            pread(&z, &h, off, MIB as u32),
            &big[off as usize..][..MIB as usize],
            "backward read at {off}"
        );
        from_start += off + MIB;
        if off == 0 {
            break;
        }
        off -= MIB;
    }
    let backward = z.decoded_bytes();
    let st = z.checkpoint_stats();
    eprintln!("backward: decoded {backward} bytes, restarts would decode {from_start}; {st:?}");
    // The read at 0 has no checkpoint before it: a fresh decoder.
    assert_eq!((st.recorded, st.resumed, st.evicted), (39, 38, 0), "{st:?}");
    // The first pass, then exactly the 1 MiB each later read asked for.
    assert_eq!(backward, size + 39 * MIB);
    assert!(backward * 10 < from_start, "{backward} vs {from_start}");

    // Random reads anywhere: each decodes at most an interval plus the read.
    let mut x = 99u64;
    let reads = 200u64;
    for _ in 0..reads {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let off = (x >> 16) % size;
        let len = ((x >> 8) % MIB) as u32 + 1;
        let end = (off + len as u64).min(size) as usize;
        assert_eq!(
            pread(&z, &h, off, len),
            &big[off as usize..end],
            "random read at {off}"
        );
    }
    let random = z.decoded_bytes() - backward;
    eprintln!("{reads} random reads decoded {random} bytes");
    assert!(
        random <= reads * (checkpoint::INTERVAL + MIB + CHUNK),
        "{random}"
    );

    // The same backward reads without checkpoints restart at the member's
    // start every time (the counter measures what the bound above claims).
    let mut z = open(img, 1 << 20).unwrap().with_checkpoint_budget(0);
    let h = Image::open(&z, 2).unwrap();
    let mut want = 0;
    for off in [30 * MIB, 20 * MIB, 10 * MIB] {
        drop_cache(&mut z);
        assert_eq!(
            pread(&z, &h, off, MIB as u32),
            &big[off as usize..][..MIB as usize]
        );
        want += off + MIB;
    }
    assert_eq!(z.decoded_bytes(), want);
    assert_eq!(z.checkpoint_stats().count, 0);
}

#[test]
fn checkpoints_stay_within_their_budget() {
    const MIB: u64 = 1 << 20;
    let per = Checkpoint::inflate_bytes() + 128;
    let budget = 10 * per;
    let members: Vec<Vec<u8>> = (0..3).map(|i| text(20 + i, 12 << 20)).collect();
    let entries: Vec<E> = members
        .iter()
        .enumerate()
        .map(|(i, d)| e(&format!("m{i}"), d))
        .collect();
    let z = open(zip(&entries), 1 << 20)
        .unwrap()
        .with_checkpoint_budget(budget);
    // Ten fit: a 12 MiB member gets one every 2 MiB (six would fit alone).
    assert_eq!(z.cps.interval(12 * MIB), 2 * MIB);
    let handles: Vec<ZipFile> = (0..3).map(|i| open_member(&z, &format!("m{i}"))).collect();
    for (h, d) in handles.iter().zip(&members) {
        let mut off = 0;
        while off < d.len() {
            let got = pread(&z, h, off as u64, 1 << 20);
            assert_eq!(got, &d[off..off + got.len()]);
            off += got.len();
        }
        let st = z.checkpoint_stats();
        assert!(st.bytes <= st.budget && st.count <= 10, "{st:?}");
    }
    let st = z.checkpoint_stats();
    assert_eq!(st.recorded, 15, "5 per member (2..10 MiB): {st:?}");
    assert_eq!((st.count, st.evicted), (10, 5), "{st:?}");
    // Reads everywhere, backward included, stay correct and within budget
    // while checkpoints are evicted and re-recorded.
    let mut x = 5u64;
    for _ in 0..60 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let m = (x >> 60) as usize % 3;
        let off = (x >> 8) % (12 * MIB);
        let got = pread(&z, &handles[m], off, 300_000);
        assert_eq!(got, &members[m][off as usize..][..got.len()]);
        let st = z.checkpoint_stats();
        assert!(st.bytes <= st.budget && st.count <= 10, "{st:?}");
    }
    assert!(z.checkpoint_stats().resumed > 0);
    // The interval grows with the member so that its whole set fits the
    // budget, and no further: a 50 GB member under the 64 MiB maximum.
    let max = default_checkpoint_budget(usize::MAX) as u64;
    assert_eq!(max, 64 * MIB);
    let cps = Checkpoints::new(max as usize);
    let big = 50_000_000_000u64;
    let iv = cps.interval(big);
    eprintln!("50 GB member: a checkpoint every {} MiB", iv >> 20);
    assert!(big / iv * per as u64 <= max, "{iv}");
    assert!(big / (iv / 2) * per as u64 > max, "{iv}");
    assert_eq!(cps.interval(100 * MIB), checkpoint::INTERVAL);
    // A budget smaller than one checkpoint stores none.
    let z = open(zip(&entries[..1]), 1 << 20)
        .unwrap()
        .with_checkpoint_budget(per - 1);
    let h = Image::open(&z, 2).unwrap();
    assert_eq!(pread(&z, &h, 11 * MIB, 100), &members[0][11 << 20..][..100]);
    assert_eq!(pread(&z, &h, 3 * MIB, 100), &members[0][3 << 20..][..100]);
    assert_eq!(z.checkpoint_stats().count, 0);
}

#[test]
fn resumed_decoders_still_check_the_crc_and_corruption_is_an_error() {
    const MIB: u64 = 1 << 20;
    // A wrong CRC in the central directory: the decoder that reaches the
    // end after resuming from a checkpoint must catch it.
    let d = text(3, 8 << 20);
    let mut bad = e("bad", &d);
    bad.bad_crc = true;
    let z = open(zip(&[bad]), 1 << 20).unwrap();
    let h = Image::open(&z, 2).unwrap();
    for off in (0..6 * MIB).step_by(MIB as usize) {
        assert_eq!(
            pread(&z, &h, off, MIB as u32),
            &d[off as usize..][..MIB as usize]
        );
    }
    // A new handle has no live decoder: it resumes at the 6 MiB checkpoint.
    let h2 = Image::open(&z, 2).unwrap();
    let err = Image::read(&z, &h2, 8 * MIB - 10, 10).unwrap_err();
    assert!(err.to_string().contains("CRC-32 mismatch"), "{err}");
    assert_eq!(z.checkpoint_stats().resumed, 1);
    // Again: the failed decoder was dropped, so one resumes at 7 MiB.
    let err = Image::read(&z, &h2, 8 * MIB - 10, 10).unwrap_err();
    assert!(err.to_string().contains("CRC-32 mismatch"), "{err}");
    assert_eq!(z.checkpoint_stats().resumed, 2);
    assert_eq!(pread(&z, &h, 2 * MIB, 10), &d[2 << 20..][..10]);

    // Damaged compressed data: reads that reach the damage fail; nothing
    // panics, whether the decoder started at 0 or at a checkpoint.
    let img = zip(&[e("big", &d)]);
    let data_start = 30 + 3 + 7; // local header, name "big", local extra
    let csize = img.len() - data_start - (46 + 3) - 22;
    for frac in [0.2, 0.5, 0.8, 0.95] {
        let mut img = img.clone();
        let at = data_start + (csize as f64 * frac) as usize;
        for b in &mut img[at..at + 16] {
            *b ^= 0xA5;
        }
        let z = open(img, 1 << 20).unwrap();
        let h = Image::open(&z, 2).unwrap();
        let mut failed = false;
        let mut off = 0;
        while off < d.len() as u64 {
            match Image::read(&z, &h, off, MIB as u32) {
                Ok(got) => assert!(!got.is_empty()),
                Err(e) => {
                    assert!(matches!(e, FsError::Corrupt(_)), "{e}");
                    failed = true;
                }
            }
            off += MIB;
        }
        assert!(failed, "damage at {frac} went unnoticed");
        // Random and backward reads over the damaged member, through
        // whatever checkpoints the first pass left.
        let mut x = 17u64;
        for _ in 0..30 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let _ = Image::read(&z, &h, (x >> 8) % (9 * MIB), 200_000);
        }
        assert!(Image::read(&z, &h, d.len() as u64 - 1, 1).is_err());
    }
}

/// A zstd stream of independent frames of `frame` bytes of input each.
fn zstd_frames(d: &[u8], frame: usize) -> Vec<u8> {
    d.chunks(frame)
        .flat_map(|c| zstd::encode_all(c, 1).unwrap())
        .collect()
}

#[test]
fn multi_frame_zstd_restarts_at_frame_starts() {
    const MIB: u64 = 1 << 20;
    let size = 12 * MIB;
    let d = text(11, size as usize);
    // 1 MiB frames (what packfs writes) and frames that do not fall on
    // chunk boundaries; a single-frame member has no restart point.
    for (frame, restarts) in [(1 << 20, true), ((1 << 20) + 12345, true), (1 << 30, false)] {
        let mut en = e("z", &d);
        en.method = 93;
        en.raw = Some(zstd_frames(&d, frame));
        let mut bad = en.clone();
        bad.name = b"bad".to_vec();
        bad.bad_crc = true;
        let mut z = open(zip(&[en, bad]), 1 << 20).unwrap();
        let h = open_member(&z, "z");
        let mut from_start = 0;
        for i in (0..12).rev() {
            drop_cache(&mut z);
            let off = i * MIB + 777;
            assert_eq!(
                pread(&z, &h, off, 300_000),
                &d[off as usize..][..300_000],
                "frame {frame} off {off}"
            );
            from_start += off + 300_000;
        }
        let st = z.checkpoint_stats();
        eprintln!(
            "zstd frames of {frame}: decoded {}, {st:?}",
            z.decoded_bytes()
        );
        if restarts {
            // One per frame start (11); every read but the first and the
            // last one or two resumed at the frame start before it.
            assert!(st.count == 11 && st.resumed >= 9, "{st:?}");
            assert!(z.decoded_bytes() * 2 < from_start);
            // Checkpoints of a zstd member are a few hundred bytes each.
            assert!(st.bytes < st.count * 512, "{st:?}");
        } else {
            assert_eq!(st.count, 0, "{st:?}");
        }
        // The CRC is still checked by a decoder restarted at a frame. The
        // first failing read is the live decoder's (from offset 0); it is
        // then dropped, so the second resumes at the last frame start.
        let hb = open_member(&z, "bad");
        assert_eq!(pread(&z, &hb, 5 * MIB, 100), &d[5 << 20..][..100]);
        for second in [false, true] {
            let before = z.checkpoint_stats().resumed;
            let err = Image::read(&z, &hb, size - 100, 100).unwrap_err();
            assert!(err.to_string().contains("CRC-32 mismatch"), "{err}");
            let resumed = z.checkpoint_stats().resumed - before;
            assert_eq!(resumed, u64::from(second && restarts));
        }
    }
}

/// Random 1 MiB reads in a 256 MiB deflate member with a 64 MiB cache,
/// with and without checkpoints (docs/benchmarks/reads.md, "ZIP images"). Run:
/// `cargo test --release -p mountfs --lib random_reads_in_a_large_deflate_member -- --ignored --nocapture`
#[test]
#[ignore]
fn random_reads_in_a_large_deflate_member() {
    const MIB: u64 = 1 << 20;
    let size = 256 * MIB;
    let big = text(1, size as usize);
    let img = zip(&[e("big", &big)]);
    eprintln!("member: {size} bytes, {} compressed", img.len());
    // Sequential: the core inflater here against flate2's streaming
    // decoder, which served deflate members before checkpoints.
    let z = open(img.clone(), 64 << 20).unwrap();
    let h = Image::open(&z, 2).unwrap();
    let t = std::time::Instant::now();
    let mut off = 0;
    while off < size {
        off += pread(&z, &h, off, MIB as u32).len() as u64;
    }
    let ours = t.elapsed();
    let raw = &img[30 + 3 + 7..img.len() - 22 - 49];
    let t = std::time::Instant::now();
    let mut sink = Vec::with_capacity(size as usize);
    std::io::Read::read_to_end(&mut flate2::read::DeflateDecoder::new(raw), &mut sink).unwrap();
    let flate2 = t.elapsed();
    assert_eq!(sink.len() as u64, size);
    eprintln!(
        "sequential: {ours:.2?} ({:.0} MiB/s) through ZipFs, flate2 alone {flate2:.2?} ({:.0} MiB/s)",
        256.0 / ours.as_secs_f64(),
        256.0 / flate2.as_secs_f64()
    );
    for (label, budget, reads) in [
        ("checkpoints (default budget)", None, 200u64),
        ("no checkpoints (restart at member start)", Some(0), 50),
    ] {
        let mut z = open(img.clone(), 64 << 20).unwrap();
        if let Some(b) = budget {
            z = z.with_checkpoint_budget(b);
        }
        let h = Image::open(&z, 2).unwrap();
        let mut x = 2024u64;
        let mut times = Vec::new();
        let t = std::time::Instant::now();
        for _ in 0..reads {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let off = (x >> 16) % (size - MIB);
            let r = std::time::Instant::now();
            let got = pread(&z, &h, off, MIB as u32);
            times.push(r.elapsed());
            assert_eq!(got, &big[off as usize..][..MIB as usize]);
        }
        let took = t.elapsed();
        let first = times[0];
        times.sort();
        let pct = |p: usize| times[(times.len() - 1) * p / 100];
        eprintln!(
            "{label}: {reads} random 1 MiB reads in {took:.2?}: first {first:.1?}, median {:.1?}, \
             p90 {:.1?}, max {:.1?}; {:.1} MiB decoded per read; {:?}",
            pct(50),
            pct(90),
            pct(100),
            z.decoded_bytes() as f64 / reads as f64 / MIB as f64,
            z.checkpoint_stats()
        );
    }
}

/// A reader over another's index (what a forked DataLoader worker gets
/// from its parent) shares the index, reads every member as a reader of
/// its own would, and keeps what its reads find out to itself: a member
/// found damaged in one is checked again, and found damaged, in the other.
#[test]
fn a_reader_over_a_shared_index_reads_alone() {
    let d = data(5, 3 << 20);
    let mut bad = e("bad", &d);
    bad.method = 0;
    bad.bad_crc = true;
    let img = zip(&[bad, e("dir/deflated", &d[..5000]), e("small", b"hi")]);
    let first = open(img.clone(), 64 << 20).unwrap();
    let src: Arc<dyn ImageSource> = Arc::new(MemSource(img));
    let second = ZipFs::with_index(src, Arc::new(BlockCache::new(64 << 20)), first.index());
    assert!(Arc::ptr_eq(&first.index(), &second.index()));
    let (first, second) = (PackFs::new(first, 0, 0), PackFs::new(second, 0, 0));
    assert!(matches!(cat(&first, "bad"), Err(FsError::Corrupt(_))));
    assert_eq!(cat(&second, "dir/deflated").unwrap(), d[..5000]);
    assert_eq!(cat(&second, "small").unwrap(), b"hi");
    // Served unchecked out of order in the second, though the first knows.
    let n = second.resolve(b"bad").unwrap().node;
    assert_eq!(second.read(n, 1 << 20, 4096).unwrap(), d[1 << 20..][..4096]);
    assert!(matches!(cat(&second, "bad"), Err(FsError::Corrupt(_))));
}

/// Fails every read that touches `bad` (a local header), with EIO.
struct FailsAt {
    img: MemSource,
    bad: std::ops::Range<u64>,
}

impl ImageSource for FailsAt {
    fn len(&self) -> u64 {
        self.img.len()
    }
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        if off < self.bad.end && off + buf.len() as u64 > self.bad.start {
            return Err(FsError::io(
                "img.zip",
                std::io::Error::from_raw_os_error(libc::EIO),
            ));
        }
        self.img.read_at(off, buf)
    }
}

/// Regression: a member whose local header did not decode said "corrupt
/// image: NAME: corrupt image: no local header ...", and a failed read of
/// the header was called damage too ("corrupt image: NAME: img.zip: I/O
/// error"), where the cause is the storage.
#[test]
fn a_bad_local_header_is_said_once_and_a_failed_read_is_an_io_error() {
    let z = zip(&[e("a", b"payload"), e("b", b"more")]);
    let mut broken = z.clone();
    broken[0] ^= 0xff; // "a"'s local header signature
    let said = cat(&fs(broken), "a").unwrap_err().to_string();
    assert_eq!(said.matches("corrupt image").count(), 1, "{said}");
    assert!(said.contains("a: no local header signature at 0"), "{said}");

    // "b"'s local header, between two large members: ZipFs::open reads
    // the image's first bytes and its last 64 KiB.
    let big = data(7, 200_000);
    let z = zip(&[
        e("a", b"payload"),
        e("x", &big),
        e("b", b"more"),
        e("y", &big),
    ]);
    let b = (0..z.len() - 31)
        .find(|&i| z[i..].starts_with(b"PK\x03\x04") && z[i + 30] == b'b')
        .unwrap() as u64;
    let src = FailsAt {
        img: MemSource(z),
        bad: b..b + 4,
    };
    let f = PackFs::new(
        ZipFs::open(Box::new(src), Arc::new(BlockCache::new(1 << 20))).unwrap(),
        0,
        0,
    );
    let failed = cat(&f, "b").unwrap_err();
    assert!(matches!(failed, FsError::Io { .. }), "{failed:?}");
    assert_eq!(failed.errno(), libc::EIO);
    assert_eq!(cat(&f, "a").unwrap(), b"payload");
}
