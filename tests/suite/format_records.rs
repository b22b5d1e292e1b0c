//! The format crate's records against bytes written by writers nobody here
//! wrote (mksquashfs, Info-ZIP `zip`, Python's `zipfile`) and by packfs:
//! every record found in those images decodes, and encoding what was
//! decoded gives back exactly the bytes on disk. This pins each layout to
//! what real readers and writers use, field by field, not only to itself.

use crate::common::{fixture_tree, is_root, mksquashfs, pack, run, scratch};
use packfs_format::bytes::{Input, SliceInput};
use packfs_format::codec::{decompress, Compressor};
use packfs_format::squashfs::dir::{DirEntry, DirHeader};
use packfs_format::squashfs::inode::{DirIndex, InodeBody, InodeHeader};
use packfs_format::squashfs::metadata::{block_count, split_ref, MetaHeader};
use packfs_format::squashfs::superblock::Superblock;
use packfs_format::squashfs::tables::{index_len, FragmentEntry, XattrIdEntry, XattrTableHeader};
use packfs_format::squashfs::xattr::{encode_value, XattrKey};
use packfs_format::squashfs::*;
use packfs_format::zip::central::CentralHeader;
use packfs_format::zip::end::{find_eocd, EndRecord, Zip64EndRecord, Zip64Locator};
use packfs_format::zip::entry::parse_central;
use packfs_format::zip::local::LocalHeader;
use packfs_format::zip::*;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::Command;

/// A metadata area decompressed: its bytes, and where each block (by its
/// header's position relative to the area start) begins in them.
struct Area {
    data: Vec<u8>,
    block_at: HashMap<u64, usize>,
}

fn le64(b: &[u8], at: u64) -> u64 {
    u64::from_le_bytes(b[at as usize..at as usize + 8].try_into().unwrap())
}

/// Decompresses the metadata blocks from `start` up to `end`.
fn read_area(img: &[u8], start: u64, end: u64, codec: Compressor) -> Area {
    let mut area = Area {
        data: Vec::new(),
        block_at: HashMap::new(),
    };
    let mut pos = start;
    while pos < end {
        let h = MetaHeader::decode([img[pos as usize], img[pos as usize + 1]]);
        // The header word round-trips too.
        assert_eq!(
            h.encode(),
            [img[pos as usize], img[pos as usize + 1]],
            "metadata header at {pos}"
        );
        let raw = &img[pos as usize + 2..pos as usize + 2 + h.stored_len as usize];
        area.block_at.insert(pos - start, area.data.len());
        if h.compressed {
            let mut out = Vec::new();
            decompress(codec, raw, &mut out, METADATA_SIZE).unwrap();
            area.data.extend_from_slice(&out);
        } else {
            area.data.extend_from_slice(raw);
        }
        pos += 2 + h.stored_len as u64;
    }
    area
}

/// The absolute positions listed by a table's u64 index.
fn index(img: &[u8], at: u64, entries: u64, entry_size: u64) -> Vec<u64> {
    (0..index_len(entries, entry_size))
        .map(|i| le64(img, at + 8 * i))
        .collect()
}

/// Inode kinds seen, by type id.
type Kinds = BTreeSet<u16>;

/// Decodes every inode of the inode table and re-encodes it. Returns the
/// kinds seen and each directory's (listing block, offset, size).
fn check_inodes(img: &[u8], sb: &Superblock, codec: Compressor) -> (Kinds, Vec<(u32, u16, u32)>) {
    let area = read_area(img, sb.inode_table_start, sb.directory_table_start, codec);
    let mut c = SliceInput::new(&area.data, "inode table");
    let mut kinds = Kinds::new();
    let mut dirs = Vec::new();
    while c.pos() < area.data.len() {
        let start = c.pos();
        let h = InodeHeader::decode(&mut c).unwrap();
        let body = InodeBody::decode(&mut c, h.inode_type, h.inode_number).unwrap();
        kinds.insert(h.inode_type);
        let mut again = Vec::new();
        h.encode(&mut again);
        body.encode(&mut again);
        match &body {
            InodeBody::BasicFile(_) | InodeBody::ExtFile(_) => {
                let (size, fragment) = match &body {
                    InodeBody::BasicFile(f) => (f.size as u64, f.fragment),
                    InodeBody::ExtFile(f) => (f.size, f.fragment),
                    _ => unreachable!(),
                };
                let n = block_count(size, sb.block_size, fragment != INVALID_FRAG);
                again.extend_from_slice(&c.bytes(4 * n as usize).unwrap());
            }
            InodeBody::ExtDir(d) => {
                for _ in 0..d.index_count {
                    let e = DirIndex::decode(&mut c).unwrap();
                    let name = c.bytes(e.name_len).unwrap();
                    DirIndex::encode(e.index, e.start_block, &name, &mut again);
                }
                dirs.push((d.block, d.offset, d.size));
            }
            InodeBody::BasicDir(d) => dirs.push((d.block, d.offset, d.size as u32)),
            _ => {}
        }
        assert_eq!(
            &area.data[start..c.pos()],
            &again[..],
            "inode {} (type {}) does not re-encode to its bytes",
            h.inode_number,
            h.inode_type
        );
    }
    (kinds, dirs)
}

/// Decodes every directory listing and re-encodes it; returns the number of
/// entries seen.
fn check_listings(area: &Area, dirs: &[(u32, u16, u32)]) -> usize {
    let mut entries = 0;
    for &(block, offset, size) in dirs {
        let start = area.block_at[&(block as u64)] + offset as usize;
        let listing = &area.data[start..start + size as usize - 3];
        let mut c = SliceInput::new(listing, "listing");
        let mut again = Vec::new();
        while c.pos() < listing.len() {
            let h = DirHeader::decode(&mut c).unwrap();
            h.encode(&mut again);
            for _ in 0..h.count {
                let e = DirEntry::decode(&mut c).unwrap();
                let name = c.bytes(e.name_len).unwrap();
                DirEntry::encode(e.offset, e.inode_delta, e.inode_type, &name, &mut again);
                entries += 1;
            }
        }
        assert_eq!(listing, &again[..], "listing at {block}:{offset}");
    }
    entries
}

/// Every record of a SquashFS image round-trips; returns the inode kinds seen.
fn check_squashfs(path: &Path) -> Kinds {
    let img = std::fs::read(path).unwrap();
    let raw: &[u8; SUPERBLOCK_SIZE] = img[..SUPERBLOCK_SIZE].try_into().unwrap();
    let sb = Superblock::decode(raw);
    assert_eq!(&sb.encode(), raw, "superblock");
    assert_eq!(sb.magic, MAGIC);
    let codec = Compressor::from_id(sb.compression_id).unwrap();

    let (kinds, dirs) = check_inodes(&img, &sb, codec);

    // Where the directory table ends: at the first block of whichever table
    // comes next (mksquashfs puts fragment entries first, packfs too).
    let frag_blocks = if sb.fragment_count > 0 {
        index(&img, sb.fragment_table_start, sb.fragment_count as u64, 16)
    } else {
        Vec::new()
    };
    let export_blocks = index(&img, sb.export_table_start, sb.inode_count as u64, 8);
    let id_blocks = index(&img, sb.id_table_start, sb.id_count as u64, 4);
    let dir_end = frag_blocks
        .iter()
        .chain(&export_blocks)
        .chain(&id_blocks)
        .copied()
        .chain([sb.fragment_table_start, sb.id_table_start])
        .filter(|&p| p > sb.directory_table_start)
        .min()
        .unwrap();
    let dir_area = read_area(&img, sb.directory_table_start, dir_end, codec);
    assert!(check_listings(&dir_area, &dirs) > 0);

    // Fragment entries.
    let mut n = 0;
    for &b in &frag_blocks {
        let area = read_area(&img, b, b + 1, codec);
        let mut c = SliceInput::new(&area.data, "fragment table");
        while c.pos() < area.data.len() && n < sb.fragment_count {
            let at = c.pos();
            let e = FragmentEntry::decode(&mut c).unwrap();
            let mut again = Vec::new();
            e.encode(&mut again);
            assert_eq!(&area.data[at..c.pos()], &again[..], "fragment {n}");
            assert!(e.start < sb.bytes_used);
            n += 1;
        }
    }
    assert_eq!(n, sb.fragment_count);

    // Xattrs: header, id entries, keys and values.
    if sb.xattr_id_table_start != INVALID_TABLE {
        let hb = &img[sb.xattr_id_table_start as usize..][..XattrTableHeader::SIZE];
        let h = XattrTableHeader::decode(&mut SliceInput::new(hb, "xattr header")).unwrap();
        let mut again = Vec::new();
        h.encode(&mut again);
        assert_eq!(hb, &again[..]);
        let id_blocks = index(
            &img,
            sb.xattr_id_table_start + XattrTableHeader::SIZE as u64,
            h.count as u64,
            XattrIdEntry::SIZE as u64,
        );
        let kv = read_area(&img, h.kv_start, id_blocks[0], codec);
        let mut ids = Vec::new();
        for &b in &id_blocks {
            ids.extend(read_area(&img, b, b + 1, codec).data);
        }
        let mut c = SliceInput::new(&ids, "xattr ids");
        for i in 0..h.count {
            let at = c.pos();
            let e = XattrIdEntry::decode(&mut c).unwrap();
            let mut again = Vec::new();
            e.encode(&mut again);
            assert_eq!(&ids[at..c.pos()], &again[..], "xattr id {i}");
            let (block, off) = split_ref(e.xattr_ref);
            let start = kv.block_at[&block] + off;
            let mut k = SliceInput::new(&kv.data[start..], "xattr kv");
            let mut again = Vec::new();
            for _ in 0..e.count {
                let key = XattrKey::decode(&mut k).unwrap();
                let name = k.bytes(key.name_len as usize).unwrap();
                XattrKey::encode(key.kind, &name, &mut again);
                let vlen = k.u32().unwrap() as usize;
                encode_value(&k.bytes(vlen).unwrap(), &mut again);
            }
            assert_eq!(&kv.data[start..start + k.pos()], &again[..], "xattrs {i}");
        }
    }
    kinds
}

#[test]
fn squashfs_records_round_trip_over_mksquashfs_and_packfs_images() {
    let dir = scratch();
    let src = dir.path().join("src");
    fixture_tree(&src, true);
    let mut all = Kinds::new();
    for (name, args) in [
        ("gzip", vec!["-comp", "gzip"]),
        (
            "xz-4k-frag",
            vec!["-comp", "xz", "-b", "4K", "-always-use-fragments"],
        ),
        ("lz4-nofrag", vec!["-comp", "lz4", "-no-fragments"]),
        ("zstd-1m", vec!["-comp", "zstd", "-b", "1M"]),
    ] {
        let img = dir.path().join(format!("mk-{name}.sqfs"));
        mksquashfs(&src, &img, &args);
        all.extend(check_squashfs(&img));
    }
    for (name, args) in [
        ("zstd", vec![]),
        ("gzip-4k", vec!["-c", "gzip", "-b", "4K"]),
    ] {
        let img = dir.path().join(format!("packfs-{name}.sqfs"));
        pack(&src, &img, &args);
        all.extend(check_squashfs(&img));
    }
    // The fixture holds every kind: directories with and without an index,
    // files with and without hard links or holes, symlinks, fifos, sockets
    // and (as root) devices.
    let mut want: Kinds = [1, 2, 3, 6, 7, 8, 9].into();
    if is_root() {
        want.extend([4, 5]);
    }
    assert!(all.is_superset(&want), "kinds seen: {all:?}");
}

/// Walks the end records, central records and local headers of a ZIP and
/// re-encodes each. Returns (entries, zip64 end records seen).
fn check_zip(path: &Path) -> (u64, bool) {
    let z = std::fs::read(path).unwrap();
    let (pos, clen) = find_eocd(&z, 0).expect("end record");
    let e = EndRecord::decode(&z[pos as usize..]).unwrap();
    assert_eq!(e.comment_len, clen);
    let mut again = Vec::new();
    e.encode(&mut again);
    assert_eq!(
        &z[pos as usize..pos as usize + EOCD_LEN],
        &again[..],
        "end record"
    );
    let (mut entries, mut cd_offset) = (e.entries as u64, e.cd_offset as u64);
    let mut zip64 = false;
    if let Ok(l) = Zip64Locator::decode(&z[pos as usize - EOCD64_LOCATOR_LEN..]) {
        let mut again = Vec::new();
        l.encode(&mut again);
        assert_eq!(
            &z[pos as usize - EOCD64_LOCATOR_LEN..pos as usize],
            &again[..]
        );
        let r = Zip64EndRecord::decode(&z[l.record_offset as usize..]).unwrap();
        let mut again = Vec::new();
        r.encode(&mut again);
        let at = l.record_offset as usize;
        assert_eq!(&z[at..at + EOCD64_LEN], &again[..], "Zip64 end record");
        (entries, cd_offset) = (r.entries, r.cd_offset);
        zip64 = true;
    }
    let mut at = cd_offset as usize;
    for i in 0..entries {
        let h = CentralHeader::decode(&z[at..]).unwrap();
        let mut again = Vec::new();
        h.encode(&mut again);
        assert_eq!(&z[at..at + CENTRAL_LEN], &again[..], "central record {i}");
        let (ce, n) = parse_central(&z[at..]).unwrap();
        assert_eq!(n, h.total_len());
        let lo = ce.local_offset as usize;
        let l = LocalHeader::decode(&z[lo..]).unwrap();
        let mut again = Vec::new();
        l.encode(&mut again);
        assert_eq!(&z[lo..lo + LOCAL_LEN], &again[..], "local header {i}");
        assert_eq!(
            &z[lo + LOCAL_LEN..][..l.name_len as usize],
            &ce.raw_name[..]
        );
        assert_eq!(l.method, ce.method);
        at += n;
    }
    (entries, zip64)
}

#[test]
fn zip_records_round_trip_over_info_zip_python_and_packfs_archives() {
    let dir = scratch();
    let src = dir.path().join("src");
    fixture_tree(&src, false);
    // ZIP stores files, directories and symlinks; Info-ZIP refuses the rest.
    for special in ["fifo", "socket", "chardev", "blockdev"] {
        let _ = std::fs::remove_file(src.join(special));
    }
    // Info-ZIP: UT and ux extras, symlinks stored as links.
    let a = dir.path().join("infozip.zip");
    run(Command::new("zip")
        .current_dir(&src)
        .args(["-q", "-r", "-y"])
        .arg(&a)
        .arg("."));
    let (n, _) = check_zip(&a);
    assert!(n > 30);
    // Python: data descriptors, and a Zip64 end record once past 65,535 entries.
    let p = dir.path().join("python.zip");
    let script = "import sys, zipfile\n\
        with zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED) as z:\n\
        \x20   with z.open('big', 'w', force_zip64=True) as f: f.write(b'x' * 100000)\n\
        \x20   for i in range(65536): z.writestr(f'd/{i}', b'')\n";
    run(Command::new("python3").args(["-c", script]).arg(&p));
    assert_eq!(check_zip(&p), (65537, true));
    // packfs, deflate and zstd.
    for (name, args) in [("deflate", vec![]), ("zstd", vec!["-c", "zstd"])] {
        let img = dir.path().join(format!("packfs-{name}.zip"));
        pack(&src, &img, &args);
        let (n, zip64) = check_zip(&img);
        assert!(n > 30 && !zip64);
    }
}
