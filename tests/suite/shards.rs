//! Shards: `packfs pack --shards N [--shard K]`, the manifest,
//! and the union mount. The union is checked entry by entry against the
//! source through a real FUSE mount, and every shard on its own through the
//! kernel's SquashFS driver (when root) and unsquashfs.

use crate::common::*;
use mountfs::fs::{DirEntry, PackFs, ROOT};
use mountfs::open::AnyImage;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn packfs() -> Command {
    Command::new(packfs_bin())
}

/// `packfs pack SRC --shards N -o DIR/t-{shard}.EXT -q EXTRA...`.
pub(super) fn pack_shards(src: &Path, dir: &Path, ext: &str, n: u32, extra: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    run(packfs()
        .arg("pack")
        .arg(src)
        .arg("--shards")
        .arg(n.to_string())
        .arg("-o")
        .arg(dir.join(format!("t-{{shard}}.{ext}")))
        .arg("-q")
        .args(extra));
    dir.join("t.manifest.json")
}

fn manifest_json(p: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

pub(super) fn shard_files(m: &Path) -> Vec<PathBuf> {
    manifest_json(m)["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| m.parent().unwrap().join(s["file"].as_str().unwrap()))
        .collect()
}

/// Runs a command expected to fail; returns its stderr.
fn fails(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(!out.status.success(), "{cmd:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Paths listed by `unsquashfs -l` (without the squashfs-root prefix).
fn unsquashfs_paths(img: &Path) -> BTreeSet<PathBuf> {
    let out = run(Command::new("unsquashfs")
        .arg("-l")
        .arg("-no-progress")
        .arg(img));
    out.lines()
        .filter_map(|l| l.strip_prefix("squashfs-root/"))
        .map(PathBuf::from)
        .collect()
}

#[test]
fn union_of_shards_equals_the_source_and_each_shard_is_a_standard_image() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, true);
    let want = manifest(&src, &ManifestOptions::default());
    for n in [1u32, 4, 9] {
        let m = pack_shards(&src, &t.path().join(format!("out{n}")), "sqfs", n, &[]);
        let shards = shard_files(&m);
        assert_eq!(shards.len(), n as usize);
        let mnt = PackfsMount::new(&m, &[]);
        assert_same(
            &format!("union of {n} shards vs source"),
            &manifest(mnt.path(), &ManifestOptions::default()),
            &want,
        );
        // Every shard alone: its entries are the source's (directories keep
        // the source's link count, see Tree::subset), and together they
        // cover every path.
        let mut covered = BTreeSet::new();
        for s in &shards {
            let listed = unsquashfs_paths(s);
            for p in &listed {
                assert!(
                    want.contains_key(p),
                    "{}: {} not in the source",
                    s.display(),
                    p.display()
                );
            }
            covered.extend(listed);
            if let Some(k) = KernelMount::new(s) {
                for (p, e) in manifest(k.path(), &ManifestOptions::default()) {
                    assert_eq!(Some(&e), want.get(&p), "{}: {}", s.display(), p.display());
                }
            }
        }
        assert_eq!(covered, want.keys().cloned().collect::<BTreeSet<_>>());
    }
}

#[test]
fn plain_images_mount_as_one_tree_without_a_manifest() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, true);
    let m = pack_shards(&src, &t.path().join("out"), "sqfs", 5, &[]);
    let mnt = t.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    run(packfs().arg("mount").args(shard_files(&m)).arg(&mnt));
    let got = std::panic::catch_unwind(|| manifest(&mnt, &ManifestOptions::default()));
    run(packfs().arg("umount").arg(&mnt));
    let got = got.unwrap();
    assert_same(
        "union of plain shards vs source",
        &got,
        &manifest(&src, &ManifestOptions::default()),
    );
}

/// Every file and the manifest, by name.
fn contents(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

#[test]
fn same_bytes_whatever_the_order_and_thread_count_of_the_tasks() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    let env = ("SOURCE_DATE_EPOCH", "1700000000");
    let all = t.path().join("all");
    std::fs::create_dir(&all).unwrap();
    run(packfs()
        .env(env.0, env.1)
        .arg("pack")
        .arg(&src)
        .args(["--shards", "4", "-q", "-j", "2", "-o"])
        .arg(all.join("t-{shard}.sqfs")));
    let tasks = t.path().join("tasks");
    std::fs::create_dir(&tasks).unwrap();
    for (i, k) in [3, 1, 0, 2].into_iter().enumerate() {
        assert!(
            !tasks.join("t.manifest.json").exists(),
            "manifest before the last task"
        );
        run(packfs()
            .env(env.0, env.1)
            .arg("pack")
            .arg(&src)
            .args([
                "--shards",
                "4",
                "--shard",
                &k.to_string(),
                "-q",
                "-j",
                &(1 + i % 2).to_string(),
                "-o",
            ])
            .arg(tasks.join("t-{shard}.sqfs")));
    }
    let (a, b) = (contents(&all), contents(&tasks));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    assert_eq!(a.len(), 4 + 4 + 1, "{:?}", a.keys());
    for (name, bytes) in &a {
        assert!(
            bytes == &b[name],
            "{name} differs between one process and four tasks"
        );
    }
    // Explicit finalize rewrites the same manifest.
    let before = std::fs::read(tasks.join("t.manifest.json")).unwrap();
    std::fs::remove_file(tasks.join("t.manifest.json")).unwrap();
    run(packfs()
        .args(["shards", "finalize"])
        .arg(tasks.join("t-{shard}.sqfs")));
    assert_eq!(
        std::fs::read(tasks.join("t.manifest.json")).unwrap(),
        before
    );
    run(packfs()
        .args(["shards", "verify"])
        .arg(tasks.join("t.manifest.json")));
}

#[test]
fn finalize_names_the_missing_shards() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    let out = t.path().join("out");
    std::fs::create_dir(&out).unwrap();
    for k in [0, 2] {
        run(packfs()
            .arg("pack")
            .arg(&src)
            .args(["--shards", "3", "--shard", &k.to_string(), "-q", "-o"])
            .arg(out.join("t-{shard}.sqfs")));
    }
    assert!(!out.join("t.manifest.json").exists());
    let e = fails(
        packfs()
            .args(["shards", "finalize"])
            .arg(out.join("t.manifest.json")),
    );
    assert!(
        e.contains("shard(s) 1") && e.contains("t.manifest.json"),
        "{e}"
    );
}

#[test]
fn a_missing_or_altered_shard_is_a_clear_error() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    let m = pack_shards(&src, &t.path().join("out"), "sqfs", 4, &[]);
    let shards = shard_files(&m);
    let mnt = scratch();
    // Same size, one byte changed: mounts (size check), verify catches it.
    let mut bytes = std::fs::read(&shards[1]).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    let saved = std::fs::read(&shards[1]).unwrap();
    std::fs::write(&shards[1], &bytes).unwrap();
    let out = packfs()
        .args(["shards", "verify"])
        .arg(&m)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("t-1.sqfs: BAD: blake3"), "{said}");
    std::fs::write(&shards[1], &saved).unwrap();
    // Truncated: refused at mount, naming the file and both sizes.
    std::fs::write(&shards[2], &saved[..4096]).unwrap();
    let e = fails(packfs().arg("mount").arg(&m).arg(mnt.path()));
    assert!(e.contains("t-2.sqfs") && e.contains("4096 bytes"), "{e}");
    // Missing.
    std::fs::remove_file(&shards[2]).unwrap();
    let e = fails(packfs().arg("mount").arg(&m).arg(mnt.path()));
    assert!(e.contains("t-2.sqfs") && e.contains("shard 2"), "{e}");
    let e = fails(packfs().arg("ls").arg(&m));
    assert!(e.contains("t-2.sqfs"), "{e}");
}

/// Bug: `shards verify` stopped at the first bad shard and printed nothing
/// before it, so a set with several bad shards took a rerun per shard (a
/// missing one stopped it before any hashing). Every shard gets its line,
/// as it is checked, and the error counts the bad ones.
#[test]
fn shards_verify_reports_every_bad_shard() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    let m = pack_shards(&src, &t.path().join("out"), "sqfs", 4, &[]);
    let shards = shard_files(&m);
    let mut bytes = std::fs::read(&shards[1]).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&shards[1], &bytes).unwrap();
    std::fs::write(&shards[2], &bytes[..4096]).unwrap();
    std::fs::remove_file(&shards[3]).unwrap();
    let out = packfs()
        .args(["shards", "verify"])
        .arg(&m)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(lines[0].contains("t-0.sqfs: ok"), "{stdout}");
    assert!(lines[1].contains("t-1.sqfs: BAD: blake3"), "{stdout}");
    assert!(lines[2].contains("t-2.sqfs: BAD: 4096 bytes"), "{stdout}");
    assert!(lines[3].contains("t-3.sqfs: BAD: no such file"), "{stdout}");
    assert!(stderr.contains("3 of 4 shards do not match"), "{stderr}");
    // A manifest on object storage is refused as such, not as a missing file.
    let e = fails(packfs().args(["shards", "verify", "s3://bucket/t.manifest.json"]));
    assert!(e.contains("object storage"), "{e}");
    // Regression: a shard given for its manifest was "expected value at
    // line 1 column 1".
    let e = fails(packfs().args(["shards", "verify"]).arg(&shards[0]));
    assert!(e.contains("a SquashFS image, not a manifest"), "{e}");
    // Told from its first bytes (found by review: the whole image was read
    // first): a sparse 100 GiB "image" is refused at once, not read.
    let huge = t.path().join("huge.sqfs");
    let f = std::fs::File::create(&huge).unwrap();
    std::io::Write::write_all(&mut &f, b"hsqs").unwrap();
    f.set_len(100 << 30).unwrap();
    let e = fails(packfs().args(["shards", "verify"]).arg(&huge));
    assert!(e.contains("a SquashFS image, not a manifest"), "{e}");
}

/// Two images where `a/x` is a file in one and a directory in the other,
/// and `b` a file in both.
fn conflicting_images(t: &Path) -> (PathBuf, PathBuf) {
    let (s1, s2) = (t.join("s1"), t.join("s2"));
    std::fs::create_dir_all(s1.join("a")).unwrap();
    std::fs::create_dir_all(s2.join("a/x")).unwrap();
    std::fs::write(s1.join("a/x"), b"file in one").unwrap();
    std::fs::write(s2.join("a/x/inner"), b"inner").unwrap();
    std::fs::write(s1.join("a/only1"), b"1").unwrap();
    std::fs::write(s2.join("a/only2"), b"2").unwrap();
    let (i1, i2) = (t.join("one.sqfs"), t.join("two.zip"));
    pack(&s1, &i1, &[]);
    pack(&s2, &i2, &[]);
    (i1, i2)
}

#[test]
fn a_conflicting_path_is_an_error_naming_both_images_unless_a_rule_is_picked() {
    let t = scratch();
    let (i1, i2) = conflicting_images(t.path());
    let mnt = scratch();
    let e = fails(packfs().arg("mount").arg(&i1).arg(&i2).arg(mnt.path()));
    assert!(
        e.contains("a/x")
            && e.contains("one.sqfs")
            && e.contains("two.zip")
            && e.contains("--on-conflict"),
        "{e}"
    );
    // Unmounts even when an assertion below fails.
    struct Umount<'a>(&'a Path);
    impl Drop for Umount<'_> {
        fn drop(&mut self) {
            let _ = packfs().arg("umount").arg(self.0).status();
        }
    }
    // first: the file wins, the other image's directory is hidden.
    run(packfs()
        .arg("mount")
        .arg(&i1)
        .arg(&i2)
        .arg(mnt.path())
        .args(["--on-conflict", "first"]));
    let guard = Umount(mnt.path());
    let names = |p: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        std::fs::read(mnt.path().join("a/x")).unwrap(),
        b"file in one"
    );
    assert_eq!(names(&mnt.path().join("a")), ["only1", "only2", "x"]);
    drop(guard);
    // last: the directory wins.
    run(packfs()
        .arg("mount")
        .arg(&i1)
        .arg(&i2)
        .arg(mnt.path())
        .args(["--on-conflict", "last"]));
    let _guard = Umount(mnt.path());
    assert_eq!(
        std::fs::read(mnt.path().join("a/x/inner")).unwrap(),
        b"inner"
    );
    assert_eq!(names(&mnt.path().join("a")), ["only1", "only2", "x"]);
}

#[test]
fn zip_shards_mount_like_one_zip_of_the_tree() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, true);
    let one = t.path().join("one.zip");
    pack(&src, &one, &[]);
    let whole = PackfsMount::new(&one, &[]);
    let want = manifest(whole.path(), &ManifestOptions::default());
    for n in [1u32, 6] {
        let m = pack_shards(&src, &t.path().join(format!("z{n}")), "zip", n, &[]);
        let u = PackfsMount::new(&m, &[]);
        assert_same(
            &format!("{n} zip shards vs one zip"),
            &manifest(u.path(), &ManifestOptions::default()),
            &want,
        );
    }
}

/// Which shard images list `rel` (via `packfs ls` of its parent).
fn holders(shards: &[PathBuf], rel: &str) -> Vec<usize> {
    let (dir, name) = rel.rsplit_once('/').unwrap_or(("/", rel));
    (0..shards.len())
        .filter(|&k| {
            let out = packfs()
                .arg("ls")
                .arg(&shards[k])
                .arg(dir)
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .any(|l| l.rsplit('/').next() == Some(name))
        })
        .collect()
}

#[test]
fn hard_links_stay_in_one_shard() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    for n in [2u32, 3, 8] {
        let m = pack_shards(&src, &t.path().join(format!("o{n}")), "sqfs", n, &[]);
        let shards = shard_files(&m);
        for group in [
            &["hard1", "d/hard2"][..],
            &["tri1", "d/e/tri2", "d/e/f/tri3"],
        ] {
            let h: Vec<Vec<usize>> = group.iter().map(|p| holders(&shards, p)).collect();
            assert_eq!(h[0].len(), 1, "{n} shards: {} in {:?}", group[0], h[0]);
            assert!(
                h.iter().all(|x| x == &h[0]),
                "{n} shards: {group:?} split over {h:?}"
            );
        }
    }
}

/// A tree with one directory large enough to span many shards and
/// subdirectories cut across shard boundaries.
pub(super) fn wide_tree(root: &Path) {
    let big = root.join("data/big");
    std::fs::create_dir_all(&big).unwrap();
    for i in 0..1500 {
        std::fs::write(
            big.join(format!("f{i:05}")),
            bytes(i, (i % 7) as usize * 300, false),
        )
        .unwrap();
    }
    for d in 0..12 {
        let sub = big.join(format!("sub{d:02}"));
        std::fs::create_dir(&sub).unwrap();
        for i in 0..150 {
            std::fs::write(sub.join(format!("g{i:03}")), bytes(d * 1000 + i, 200, true)).unwrap();
        }
    }
    std::fs::write(root.join("zz-last"), b"last").unwrap();
}

pub(super) fn open_fs(m: &Path) -> PackFs<AnyImage> {
    PackFs::new(AnyImage::open(m, 16 << 20).unwrap(), 0, 0)
}

#[test]
fn readdir_of_a_merged_directory_resumes_from_every_cookie() {
    let t = scratch();
    let src = t.path().join("src");
    wide_tree(&src);
    let m = pack_shards(&src, &t.path().join("out"), "sqfs", 16, &[]);
    let fs = open_fs(&m);
    let big = fs.resolve(b"data/big").unwrap();
    let mut full: Vec<DirEntry> = Vec::new();
    fs.readdir(big.node, 0, &mut |e| {
        full.push(e);
        true
    })
    .unwrap();
    let names: Vec<Vec<u8>> = full.iter().map(|e| e.name.clone()).collect();
    let mut want: Vec<Vec<u8>> = std::fs::read_dir(src.join("data/big"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_encoded_bytes())
        .collect();
    want.sort();
    want.insert(0, b"..".to_vec());
    want.insert(0, b".".to_vec());
    assert_eq!(
        names, want,
        "merged listing is the source's, in name order, each name once"
    );
    let cookies: BTreeSet<u64> = full.iter().map(|e| e.cookie).collect();
    assert_eq!(cookies.len(), full.len(), "cookies are unique");
    for (i, e) in full.iter().enumerate() {
        let mut rest = Vec::new();
        fs.readdir(big.node, e.cookie, &mut |x| {
            rest.push(x.name);
            true
        })
        .unwrap();
        assert_eq!(
            rest,
            names[i + 1..],
            "resume after {:?}",
            String::from_utf8_lossy(&e.name)
        );
        // A one-entry buffer resumes too.
        let mut one = Vec::new();
        fs.readdir(big.node, e.cookie, &mut |x| {
            one.push(x.name);
            false
        })
        .unwrap();
        assert!(
            one.len() <= 1 && one.first() == names.get(i + 1),
            "after {i}"
        );
    }
    // Directories spanning shards show once, with one node and inode number
    // however they are reached.
    for e in full.iter().filter(|e| e.name.starts_with(b"sub")) {
        let a = fs.lookup(big.node, &e.name).unwrap();
        assert_eq!(
            (a.node, a.ino),
            (e.node, e.ino),
            "{}",
            String::from_utf8_lossy(&e.name)
        );
        assert_eq!(fs.list(a.node).unwrap().len(), 150);
    }
}

#[test]
fn a_lookup_opens_only_the_shards_on_its_path() {
    let t = scratch();
    let src = t.path().join("src");
    wide_tree(&src);
    let m = pack_shards(&src, &t.path().join("out"), "sqfs", 16, &[]);
    let fs = open_fs(&m);
    let AnyImage::Union(u) = &*fs.image else {
        panic!("a manifest opens a union")
    };
    assert_eq!(u.opened(), 1, "only shard 0 at open");
    let a = fs.resolve(b"zz-last").unwrap();
    let mut data = Vec::new();
    fs.read_all(a.node, |b| {
        data.extend_from_slice(b);
        Ok(())
    })
    .unwrap();
    assert_eq!(data, b"last");
    assert_eq!(u.opened(), 2, "shard 0 and the last shard");
    let a = fs.resolve(b"data/big/sub05/g077").unwrap();
    assert_eq!(a.size, 200);
    assert!(
        u.opened() <= 4,
        "{} shards opened for two lookups",
        u.opened()
    );
    assert_eq!(
        fs.resolve(b"data/big/nope").unwrap_err().errno(),
        libc::ENOENT
    );
    assert_eq!(fs.getattr(ROOT).unwrap().node, ROOT);
}

// `--preload` of a union used to do nothing (a documented limit); it now
// opens every shard and decodes them into the cache they share, up to the
// same 90% of its budget as one image.
#[test]
fn preload_of_a_union_decodes_every_shard_within_the_shared_budget() {
    let t = scratch();
    let src = t.path().join("src");
    wide_tree(&src);
    let m = pack_shards(&src, &t.path().join("out"), "sqfs", 4, &[]);
    let fs = open_fs(&m);
    let AnyImage::Union(u) = &*fs.image else {
        panic!("a manifest opens a union")
    };
    let (blocks, decoded) = fs.image.preload().unwrap();
    assert_eq!(u.opened(), 4, "every shard opened");
    assert!(
        blocks >= 4 && decoded > 0,
        "{blocks} blocks, {decoded} bytes"
    );
    let before = fs.image.cache().stats();
    assert_eq!(
        super::reader_core::read_every_file(&fs),
        1500 + 12 * 150 + 1
    );
    let after = fs.image.cache().stats();
    // Metadata blocks may still be decoded on first use; data blocks may not.
    assert!(
        after.misses - before.misses < 40,
        "{} misses after preload: {after:?}",
        after.misses - before.misses
    );

    // A budget smaller than the shards (10 MiB of text in four shards, an
    // 8 MiB cache): preload stops near 90% of the budget for all shards
    // together, not for each. 4 KiB blocks: with 128 KiB ones, the cache's
    // 16 LRU shards of 512 KiB each fill unevenly enough to evict.
    let src = t.path().join("rand");
    std::fs::create_dir(&src).unwrap();
    for i in 0..40 {
        std::fs::write(src.join(format!("r{i:02}")), bytes(i, 256 << 10, true)).unwrap();
    }
    let m = pack_shards(&src, &t.path().join("out-rand"), "sqfs", 4, &["-b", "4K"]);
    let small = PackFs::new(AnyImage::open(&m, 8 << 20).unwrap(), 0, 0);
    let (_, decoded) = small.image.preload().unwrap();
    let s = small.image.cache().stats();
    // At most the 90% once, give or take the blocks decoded in parallel.
    let full = s.budget * 9 / 10;
    assert!(
        decoded <= full + (64 << 10),
        "preload decoded {decoded} bytes: {s:?}"
    );
    assert!(s.bytes <= s.budget, "{s:?}");
    assert!(s.bytes > s.budget / 2, "preload left room: {s:?}");
}

#[test]
fn run_mounts_a_manifest() {
    let t = scratch();
    let src = t.path().join("src");
    wide_tree(&src);
    let m = pack_shards(&src, &t.path().join("out"), "sqfs", 4, &[]);
    let mnt = t.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let out = run(packfs()
        .arg("run")
        .arg(format!("{}:{}", m.display(), mnt.display()))
        .args(["--", "cat"])
        .arg(mnt.join("data/big/sub11/g149")));
    assert_eq!(out.as_bytes(), bytes(11 * 1000 + 149, 200, true));
    let cat = run(packfs().arg("cat").arg(&m).arg("zz-last"));
    assert_eq!(cat, "last");
    let info = run(packfs().arg("info").arg(&m));
    assert!(info.contains("union of 4 shards"), "{info}");
}

/// `--fragment-incompressible` changes the image bytes, so it is part of
/// the split like the other pack flags: the manifest records it, and a task
/// packed with it is not counted with tasks packed without it.
#[test]
fn fragment_incompressible_is_recorded_in_the_split() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    for (dir, extra, want) in [
        ("on", &["--fragment-incompressible"][..], true),
        ("off", &[][..], false),
    ] {
        let m = pack_shards(&src, &t.path().join(dir), "sqfs", 2, extra);
        assert_eq!(
            manifest_json(&m)["split"]["fragment_incompressible"],
            want,
            "{dir}"
        );
    }
    let mixed = t.path().join("mixed");
    std::fs::create_dir(&mixed).unwrap();
    run(packfs()
        .arg("pack")
        .arg(&src)
        .args(["--shards", "2", "--shard", "0", "-q", "-o"])
        .arg(mixed.join("t-{shard}.sqfs"))
        .arg("--fragment-incompressible"));
    let e = fails(
        packfs()
            .arg("pack")
            .arg(&src)
            .args(["--shards", "2", "--shard", "1", "-q", "-o"])
            .arg(mixed.join("t-{shard}.sqfs")),
    );
    assert!(
        e.contains("--fragment-incompressible false in this task"),
        "{e}"
    );
    assert!(
        !mixed.join("t.manifest.json").exists(),
        "a manifest over shards packed with and without --fragment-incompressible"
    );
}

/// One task of a two-shard split into `dir`: `pack --shards 2 --shard K`.
fn shard_task(src: &Path, dir: &Path, k: u32, extra: &[&str]) -> Command {
    let mut c = packfs();
    c.arg("pack")
        .arg(src)
        .args(["--shards", "2", "--shard", &k.to_string(), "-q", "-o"])
        .arg(dir.join("t-{shard}.sqfs"))
        .args(extra);
    c
}

/// `--order`, xz's extreme levels and `--xz-lzma2` change the image bytes,
/// so the manifest records them, and a task that packs with other values
/// than a sibling's sidecar fails naming the option instead of leaving the
/// manifest unwritten. A profile is recorded by its content: the same
/// profile at two paths agrees, two profiles at one path do not.
#[test]
fn order_and_xz_settings_are_recorded_in_the_split() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    let split = |dir: &str, extra: &[&str]| {
        let m = pack_shards(&src, &t.path().join(dir), "sqfs", 2, extra);
        manifest_json(&m)["split"].clone()
    };
    let s = split("plain", &[]);
    assert_eq!(
        (&s["order"], &s["extreme"], &s["xz_lzma2"]),
        (
            &serde_json::json!("path"),
            &serde_json::json!(false),
            &serde_json::Value::Null
        )
    );
    assert_eq!(
        split("sim", &["--order", "similarity"])["order"],
        "similarity"
    );
    let s = split(
        "xz",
        &["-c", "xz", "--level", "9e", "--xz-lzma2", "pb=0,lp=0,lc=4"],
    );
    assert_eq!(s["extreme"], true);
    assert_eq!(s["xz_lzma2"], "lc=4,lp=0,pb=0");
    let (p1, p2) = (t.path().join("p1"), t.path().join("p2"));
    std::fs::write(&p1, "a/b\nc\n").unwrap();
    std::fs::write(&p2, "# recorded\n/a/b\nc\n").unwrap();
    let order = |p: &Path| format!("profile:{}", p.display());
    let s = split("prof", &["--order", &order(&p1)]);
    let recorded = s["order"].as_str().unwrap().to_string();
    assert!(recorded.starts_with("profile:blake3:"), "{recorded}");
    // The same profile read from another path: the tasks agree.
    let same = t.path().join("same");
    std::fs::create_dir(&same).unwrap();
    run(&mut shard_task(&src, &same, 0, &["--order", &order(&p1)]));
    run(&mut shard_task(&src, &same, 1, &["--order", &order(&p2)]));
    assert_eq!(
        manifest_json(&same.join("t.manifest.json"))["split"]["order"],
        recorded.as_str()
    );

    let p3 = t.path().join("p3");
    for (name, (first, second), option) in [
        (
            "order",
            (&["--order", "similarity"][..], &[][..]),
            "--order path in this task, similarity in that sidecar",
        ),
        (
            "extreme",
            (
                &["-c", "xz", "--level", "9e"][..],
                &["-c", "xz", "--level", "9"][..],
            ),
            "xz extreme (--level Ne) false in this task, true",
        ),
        (
            "lzma2",
            (
                &["-c", "xz", "--xz-lzma2", "lc=4,lp=0"][..],
                &["-c", "xz"][..],
            ),
            "--xz-lzma2 unset in this task, \"lc=4,lp=0\"",
        ),
        (
            "profile",
            (&["--order", "profile:P"][..], &["--order", "profile:P"][..]),
            "--order profile:blake3:",
        ),
    ] {
        let dir = t.path().join(format!("mixed-{name}"));
        std::fs::create_dir(&dir).unwrap();
        let with_profile = |extra: &[&str]| -> Vec<String> {
            extra
                .iter()
                .map(|a| a.replace("profile:P", &order(&p3)))
                .collect()
        };
        // The profile's path stays, its content changes between the tasks.
        std::fs::write(&p3, "a/b\n").unwrap();
        let a = with_profile(first);
        run(&mut shard_task(
            &src,
            &dir,
            0,
            &a.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        ));
        std::fs::write(&p3, "c\n").unwrap();
        let b = with_profile(second);
        let e = fails(&mut shard_task(
            &src,
            &dir,
            1,
            &b.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        ));
        assert!(e.contains(option) && e.contains("shard 0"), "{name}: {e}");
        assert!(!dir.join("t.manifest.json").exists(), "{name}");
        // Refused before packing: a rerun with the right options needs no
        // --force (the task's image was left behind, under its final name).
        assert!(!dir.join("t-1.sqfs").exists(), "{name}: {e}");
        // With --force a sidecar older than the task is taken for one left
        // by an earlier run: the task succeeds and the manifest waits.
        run(&mut shard_task(
            &src,
            &dir,
            1,
            &[
                b.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
                vec!["--force"],
            ]
            .concat(),
        ));
        assert!(!dir.join("t.manifest.json").exists(), "{name}");
        // `shards finalize` of the two disagreeing sidecars names the option.
        let e = fails(
            packfs()
                .args(["shards", "finalize"])
                .arg(dir.join("t.manifest.json")),
        );
        assert!(e.contains(option.split(' ').next().unwrap()), "{name}: {e}");
    }
}

/// Sidecars of an earlier split into more shards (other file names, so no
/// `--force` needed) do not stop a process that packs every shard itself:
/// it writes the manifest from its own, as before.
#[test]
fn stale_sidecars_of_another_split_do_not_stop_a_whole_pack() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    let out = t.path().join("out");
    let m = pack_shards(&src, &out, "sqfs", 11, &[]);
    assert_eq!(manifest_json(&m)["shards"].as_array().unwrap().len(), 11);
    let m = pack_shards(&src, &out, "sqfs", 2, &["--order", "similarity"]);
    let j = manifest_json(&m);
    assert_eq!(j["shards"].as_array().unwrap().len(), 2);
    assert_eq!(j["split"]["order"], "similarity");
}

/// Bug: with `--manifest` in another directory than the shards, every pack
/// failed with "sidecars missing after packing every shard": the sidecars
/// are written beside their images, and were looked for beside the
/// manifest only. SHARDS.md says the manifest names the shards by absolute
/// path then.
#[test]
fn a_manifest_put_elsewhere_is_written_and_mounts() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    let elsewhere = t.path().join("manifests");
    std::fs::create_dir(&elsewhere).unwrap();
    let m = elsewhere.join("d.manifest.json");
    pack_shards(
        &src,
        &t.path().join("out"),
        "sqfs",
        3,
        &["--manifest", m.to_str().unwrap()],
    );
    let files: Vec<String> = manifest_json(&m)["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["file"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(files.len(), 3);
    assert!(files.iter().all(|f| f.starts_with('/')), "{files:?}");
    let mnt = PackfsMount::new(&m, &[]);
    let o = ManifestOptions::default();
    assert_same(
        "manifest elsewhere",
        &manifest(mnt.path(), &o),
        &manifest(&src, &o),
    );
}

/// Found by a new user's review: shard sidecars and the manifest were
/// always 0644 while the images beside them followed the umask, so under
/// `umask 077` the JSON files listing the dataset's paths were
/// world-readable. Every file follows the umask now.
#[test]
fn sidecars_and_manifest_follow_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    let out = t.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let mut cmd = packfs();
    cmd.arg("pack")
        .arg(&src)
        .args(["--shards", "2", "-q", "-o"])
        .arg(out.join("t-{shard}.sqfs"));
    // SAFETY: umask is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0o077);
            Ok(())
        });
    }
    run(&mut cmd);
    let mut seen = 0;
    for e in std::fs::read_dir(&out).unwrap() {
        let e = e.unwrap();
        let mode = e.metadata().unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", e.path().display());
        seen += 1;
    }
    assert_eq!(seen, 5, "two images, two sidecars, a manifest");
}
