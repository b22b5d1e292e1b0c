//! Storage faults on the read path: a failing or shrinking image gives EIO
//! for what it affects, everything else keeps reading correctly, and once
//! the storage answers again so do the reads (a transient failure is never
//! remembered as corruption). First through the filesystem core with a
//! fault-injecting source, for both formats; then under a live mount whose
//! image file is truncated and restored in place, which killed the daemon
//! with SIGBUS when the image was memory-mapped.

use crate::common::*;
use mountfs::fs::{FileKind, NodeId, PackFs, ROOT};
use mountfs::open::AnyImage;
use mountfs::source::{ImageSource, MemSource};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Returns EIO for reads overlapping any of its ranges while `failing`.
struct Faulty {
    inner: MemSource,
    ranges: Mutex<Vec<(u64, u64)>>,
    failing: AtomicBool,
    failed: AtomicU64,
}

impl ImageSource for Faulty {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, off: u64, buf: &mut [u8]) -> mountfs::Result<()> {
        let end = off + buf.len() as u64;
        if self.failing.load(Ordering::SeqCst)
            && self
                .ranges
                .lock()
                .unwrap()
                .iter()
                .any(|&(a, b)| off < b && a < end)
        {
            self.failed.fetch_add(1, Ordering::SeqCst);
            return Err(mountfs::FsError::io(
                "test image",
                std::io::Error::from_raw_os_error(libc::EIO),
            ));
        }
        self.inner.read_at(off, buf)
    }
}

/// Every regular file's path and content, read through the core.
fn read_tree(fs: &PackFs<AnyImage>) -> BTreeMap<String, Result<Vec<u8>, i32>> {
    let mut out = BTreeMap::new();
    let mut stack: Vec<(NodeId, String)> = vec![(ROOT, String::new())];
    while let Some((n, path)) = stack.pop() {
        let Ok(entries) = fs.list(n) else {
            out.insert(format!("{path}/"), Err(libc::EIO));
            continue;
        };
        for e in entries {
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            match e.kind {
                FileKind::Dir => stack.push((e.node, p)),
                FileKind::File => {
                    let mut data = Vec::new();
                    let r = fs.read_all(e.node, |b| {
                        data.extend_from_slice(b);
                        Ok(())
                    });
                    out.insert(p, r.map(|_| data).map_err(|e| e.errno()));
                }
                _ => {}
            }
        }
    }
    out
}

/// Injects faults over `ranges` of an image and checks the three phases.
fn faults_are_local_and_transient(image: &[u8], ranges: Vec<(u64, u64)>, what: &str) {
    let src = Arc::new(Faulty {
        inner: MemSource(image.to_vec()),
        ranges: Mutex::new(ranges),
        failing: AtomicBool::new(false),
        failed: AtomicU64::new(0),
    });
    // A small cache, so that the good pass does not leave everything decoded.
    let img = AnyImage::from_source(Box::new(src.clone()), what, 64 << 10).unwrap();
    let fs = PackFs::new(img, 0, 0);
    let good = read_tree(&fs);
    assert!(
        good.values().all(|r| r.is_ok()),
        "{what}: clean pass failed"
    );
    assert!(good.len() > 10, "{what}: too few files");

    src.failing.store(true, Ordering::SeqCst);
    let bad = read_tree(&fs);
    assert!(
        src.failed.load(Ordering::SeqCst) > 0,
        "{what}: no fault hit"
    );
    let mut eio = 0;
    for (p, r) in &bad {
        match r {
            // What reads must be right: never other bytes.
            Ok(d) => assert_eq!(Ok(d), good.get(p).unwrap().as_ref(), "{what}: {p}"),
            Err(e) => {
                assert_eq!(*e, libc::EIO, "{what}: {p}");
                eio += 1;
            }
        }
    }
    assert!(eio > 0, "{what}: the faults failed no read");
    let ok = bad.values().filter(|r| r.is_ok()).count();
    assert!(ok > eio, "{what}: {ok} files read, {eio} failed: not local");

    src.failing.store(false, Ordering::SeqCst);
    assert_eq!(read_tree(&fs), good, "{what}: did not recover");
}

fn fixture_images(big_dir: bool) -> (tempfile::TempDir, std::path::PathBuf) {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, big_dir);
    for special in ["fifo", "socket", "chardev", "blockdev"] {
        let _ = std::fs::remove_file(src.join(special));
    }
    (t, src)
}

#[test]
fn squashfs_faults_are_eio_for_the_files_hit_and_forgotten_when_storage_recovers() {
    let (t, src) = fixture_images(true);
    let img = t.path().join("i.sqfs");
    pack(&src, &img, &["-b", "4K"]);
    let bytes = std::fs::read(&img).unwrap();
    let sb =
        packfs_format::squashfs::superblock::Superblock::decode(bytes[..96].try_into().unwrap());
    // The middle third of the data area: some files' blocks and fragments.
    let data_end = sb.inode_table_start;
    let third = data_end / 3;
    faults_are_local_and_transient(&bytes, vec![(third, 2 * third)], "squashfs data");
    // The middle of the directory table, inside the 10,000-entry
    // directory's listing: that directory fails, the rest of the tree reads
    // (the cache is too small to hide the fault).
    let dir_len = sb.fragment_table_start.min(sb.export_table_start) - sb.directory_table_start;
    let mid = sb.directory_table_start + dir_len / 2;
    faults_are_local_and_transient(&bytes, vec![(mid, mid + 1)], "squashfs directory table");
}

#[test]
fn zip_faults_are_eio_for_the_files_hit_and_forgotten_when_storage_recovers() {
    let (t, src) = fixture_images(false);
    for (name, args) in [("deflate", vec![]), ("stored", vec!["-l", "0"])] {
        let img = t.path().join(format!("i-{name}.zip"));
        pack(&src, &img, &args);
        let bytes = std::fs::read(&img).unwrap();
        let (eocd, _) = packfs_format::zip::end::find_eocd(&bytes, 0).unwrap();
        // A tenth of the members' area, in its middle.
        let tenth = eocd / 10;
        faults_are_local_and_transient(&bytes, vec![(5 * tenth, 6 * tenth)], name);
    }
}

/// Reads every file under `root` through the kernel: content or errno.
fn read_mounted(root: &Path, names: &[String]) -> BTreeMap<String, Result<Vec<u8>, i32>> {
    names
        .iter()
        .map(|n| {
            let r = std::fs::read(root.join(n)).map_err(|e| e.raw_os_error().unwrap_or(0));
            (n.clone(), r)
        })
        .collect()
}

fn drop_caches() {
    std::fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
}

/// `dir/src` of 40 incompressible files and its image `dir/i.sqfs`, with
/// the files' names. Stored in tree order, so truncating the image's data
/// area cuts the later files and leaves the earlier ones whole; whole
/// blocks only, since a fragment's location is in the fragment table, at
/// the end of the image, which the cut removes.
fn cuttable_image(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, Vec<String>) {
    let src = dir.join("src");
    std::fs::create_dir(&src).unwrap();
    let names: Vec<String> = (0..40).map(|i| format!("f{i:02}")).collect();
    for (i, n) in names.iter().enumerate() {
        std::fs::write(src.join(n), bytes(i as u64, 256 << 10, false)).unwrap();
    }
    let img = dir.join("i.sqfs");
    pack(&src, &img, &[]);
    (src, img, names)
}

#[test]
fn a_live_mount_survives_its_image_shrinking_and_recovers_when_it_is_restored() {
    if !require_root("dropping the page cache") {
        return;
    }
    let t = scratch();
    let (src, img, names) = cuttable_image(t.path());
    let original = std::fs::read(&img).unwrap();
    let want: BTreeMap<String, Result<Vec<u8>, i32>> = names
        .iter()
        .map(|n| (n.clone(), Ok(std::fs::read(src.join(n)).unwrap())))
        .collect();

    let m = PackfsMount::new(&img, &["--cache-size", "64M"]);
    // Metadata is decoded at the first stat and stays in the block cache.
    for n in &names {
        std::fs::metadata(m.path().join(n)).unwrap();
    }
    // Cut the image in the middle of its data, in place (what `cp` onto a
    // mounted image does first).
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.set_len(original.len() as u64 / 2).unwrap();
    drop_caches();
    let got = read_mounted(m.path(), &names);
    let failed: Vec<&String> = got.keys().filter(|k| got[*k].is_err()).collect();
    for (n, r) in &got {
        match r {
            Ok(d) => assert_eq!(Ok(d), want[n].as_ref(), "{n}: wrong bytes"),
            Err(e) => assert_eq!(*e, libc::EIO, "{n}"),
        }
    }
    assert!(!failed.is_empty(), "truncation failed no read");
    assert!(failed.len() < names.len() / 2 + 5, "{failed:?}: not local");
    // The daemon is alive: the mount answers.
    assert!(std::fs::read_dir(m.path()).unwrap().count() == names.len());

    // Restore the bytes in place: the same files read again.
    std::fs::write(&img, &original).unwrap();
    drop_caches();
    assert_eq!(read_mounted(m.path(), &names), want, "no recovery");
}

/// Regression: with `--io mmap` a page of the image that cannot be read
/// ends the daemon (SIGBUS, documented), and its log said nothing of why.
/// The daemon now writes one line naming the image before it dies.
#[test]
fn a_mapped_image_cut_under_a_mount_ends_it_with_a_line_in_its_log() {
    if !require_root("dropping the page cache") {
        return;
    }
    let t = scratch();
    let (_, img, names) = cuttable_image(t.path());
    let log = t.path().join("mount.log");
    let m = PackfsMount::new(&img, &["--io", "mmap", "--log", log.to_str().unwrap()]);
    for n in &names {
        std::fs::metadata(m.path().join(n)).unwrap();
    }
    let len = std::fs::metadata(&img).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.set_len(len / 2).unwrap();
    drop_caches();
    let got = read_mounted(m.path(), &names);
    assert!(got.values().any(|r| r.is_err()), "the cut failed no read");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let said = loop {
        let said = std::fs::read_to_string(&log).unwrap_or_default();
        if said.contains("SIGBUS") || std::time::Instant::now() > deadline {
            break said;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(
        said.contains(&format!(
            "packfs: {}: a page of the memory-mapped image",
            img.display()
        )) && said.contains("--io pread"),
        "{said:?}"
    );
}
