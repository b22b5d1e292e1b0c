//! Core tests: archives written by a minimal writer here (so that names,
//! flags and extras can be anything, including malicious), read through
//! [`ZipFs`] and [`PackFs`] without a mount.

use super::*;
use crate::fs::PackFs;
use crate::source::MemSource;
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
        let comp = compress(en.method, &en.data);
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
    let f = fs(zip(&[bad, bad_stored, bad_big, enc, e("ok", b"fine")]));
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
