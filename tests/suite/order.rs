//! Data order (`pack --order`): every order gives the same tree to the
//! kernel, unsquashfs and packfs; packing stays reproducible; the
//! similarity order makes alike tails share fragment blocks; a profile's
//! files come first, contiguous, in its order.

use crate::common::*;
use mountfs::cache::BlockCache;
use mountfs::source::FileSource;
use mountfs::squashfs::inode::FileInode;
use mountfs::squashfs::SquashFs;
use packfs_format::squashfs::superblock::Superblock;
use packfs_format::squashfs::{DATA_SIZE_MASK, INVALID_FRAG, SUPERBLOCK_SIZE};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// Files of a profile, in the order a workload "read" them (not path order).
const PROFILED: [&str; 5] = ["d/e/f/deep", "small.txt", "z/late-1", "d/mid", "d/text4097"];

fn tree(root: &Path) {
    fixture_tree(root, false);
    std::fs::create_dir_all(root.join("z")).unwrap();
    std::fs::create_dir_all(root.join("d/e/f")).unwrap();
    for (i, p) in ["z/late-1", "z/late-2", "d/mid", "d/e/f/deep"]
        .iter()
        .enumerate()
    {
        std::fs::write(
            root.join(p),
            bytes(100 + i as u64, 3 * 4096 + 1000 * i, true),
        )
        .unwrap();
    }
}

fn profile_file(dir: &Path) -> PathBuf {
    let p = dir.join("profile.txt");
    let mut text = String::from("# first reads\n");
    for f in PROFILED {
        text.push('/');
        text.push_str(f);
        text.push('\n');
    }
    text.push_str("not/in/the/tree\n");
    std::fs::write(&p, text).unwrap();
    p
}

fn orders(profile: &Path) -> Vec<String> {
    vec![
        "path".into(),
        "similarity".into(),
        format!("profile:{}", profile.display()),
        format!("profile+similarity:{}", profile.display()),
    ]
}

#[test]
fn every_order_shows_the_same_tree_to_the_kernel_unsquashfs_and_packfs() {
    if !require_tool("unsquashfs") {
        return;
    }
    let t = scratch();
    let src = t.path().join("src");
    tree(&src);
    let profile = profile_file(t.path());
    let want = manifest(&src, &ManifestOptions::default());
    for (k, order) in orders(&profile).iter().enumerate() {
        for extra in [&["-b", "4K"][..], &["-c", "xz", "-b", "1M"][..]] {
            let img = t.path().join(format!("{k}.sqfs"));
            let mut args = vec!["-f", "--order", order];
            args.extend_from_slice(extra);
            pack(&src, &img, &args);
            let what = format!("--order {order} {extra:?}");
            let out = t.path().join(format!("unsq-{k}"));
            run(Command::new("unsquashfs").arg("-d").arg(&out).arg(&img));
            assert_same(
                &format!("unsquashfs, {what}"),
                &manifest(&out, &ManifestOptions::default()),
                &want,
            );
            std::fs::remove_dir_all(&out).unwrap();
            let ours = PackfsMount::new(&img, &[]);
            assert_same(
                &format!("packfs, {what}"),
                &manifest(ours.path(), &ManifestOptions::default()),
                &want,
            );
            if let Some(kern) = KernelMount::new(&img) {
                assert_same(
                    &format!("kernel, {what}"),
                    &manifest(kern.path(), &ManifestOptions::default()),
                    &want,
                );
            }
        }
    }
}

#[test]
fn every_order_packs_the_same_bytes_again_on_any_thread_count() {
    let t = scratch();
    let src = t.path().join("src");
    tree(&src);
    let profile = profile_file(t.path());
    let mut images = Vec::new();
    for (k, order) in orders(&profile).iter().enumerate() {
        let mut first: Option<Vec<u8>> = None;
        for j in ["1", "2", "3"] {
            let img = t.path().join(format!("{k}-{j}.sqfs"));
            pack(
                &src,
                &img,
                &["--order", order, "-b", "4K", "--mtime", "0", "-j", j],
            );
            let b = std::fs::read(&img).unwrap();
            match &first {
                None => first = Some(b),
                Some(f) => assert!(*f == b, "--order {order}: -j {j} gave other bytes"),
            }
        }
        images.push(first.unwrap());
    }
    // The orders do move data: no two give the same image.
    for a in 0..images.len() {
        for b in a + 1..images.len() {
            assert!(
                images[a] != images[b],
                "orders {a} and {b} gave the same image"
            );
        }
    }
}

/// Lines of text from a vocabulary of its own (`family` picks it), so that
/// files of one family share many shingles and files of two share none.
fn family_text(family: usize, seed: u64, n: usize) -> Vec<u8> {
    let words: Vec<String> = (0..40).map(|w| format!("f{family}word{w}x")).collect();
    let mut s = seed;
    let mut out = Vec::new();
    while out.len() < n {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        out.extend_from_slice(words[(s >> 33) as usize % words.len()].as_bytes());
        out.push(if (s >> 20).is_multiple_of(9) {
            b'\n'
        } else {
            b' '
        });
    }
    out.truncate(n);
    out
}

#[test]
fn the_similarity_order_packs_alike_tails_together_and_smaller() {
    let t = scratch();
    let src = t.path().join("src");
    // Path order interleaves two families. 900-byte files, 4 KiB fragment
    // blocks: each block holds four files, and order alone decides which
    // compress together. Each file shares most of its text with the files
    // of its family (one base text, each with a line of its own).
    std::fs::create_dir_all(&src).unwrap();
    for f in 0..2 {
        let base = family_text(f, 1, 700);
        for i in 0..60 {
            let mut d = base.clone();
            d.extend(family_text(f, 100 + i, 200));
            std::fs::write(src.join(format!("{i:03}-{f}.txt")), d).unwrap();
        }
    }
    let size = |order: &str| {
        let img = t.path().join(format!("{order}.sqfs"));
        pack(&src, &img, &["--order", order, "-b", "4K", "--mtime", "0"]);
        // Bytes used, not the file's size: that is padded to 4 KiB.
        let head = std::fs::read(&img).unwrap();
        Superblock::decode(&head[..SUPERBLOCK_SIZE].try_into().unwrap()).bytes_used
    };
    let (by_path, by_similarity) = (size("path"), size("similarity"));
    assert!(
        by_similarity < by_path,
        "similarity {by_similarity} B, path {by_path} B"
    );
}

fn stored_len(f: &FileInode) -> u64 {
    f.block_sizes
        .iter()
        .map(|w| (w & DATA_SIZE_MASK) as u64)
        .sum()
}

/// Asserts that `first`'s data opens `img` (packed with `--no-fragments`
/// and 4 KiB blocks), contiguous and in that order, and that `others` lie
/// after it.
fn assert_first_and_contiguous(img: &Path, first: &[&str], others: &[&str]) {
    let fs = SquashFs::open(
        Box::new(FileSource::open(img).unwrap()),
        Arc::new(BlockCache::new(1 << 20)),
    )
    .unwrap();
    let mut end = SUPERBLOCK_SIZE as u64;
    for p in first {
        let f = file_inode(&fs, p);
        assert!(!f.block_sizes.is_empty(), "{p} has no blocks");
        assert_eq!(
            f.blocks_start, end,
            "{p} does not follow the file before it"
        );
        end += stored_len(&f);
    }
    assert!(!others.is_empty());
    for p in others {
        assert!(
            file_inode(&fs, p).blocks_start >= end,
            "{p}, outside the profile, sits inside its region"
        );
    }
}

#[test]
fn a_profile_puts_its_files_first_contiguous_and_in_its_order() {
    let t = scratch();
    let src = t.path().join("src");
    tree(&src);
    let profile = profile_file(t.path());
    let img = t.path().join("p.sqfs");
    // No fragments: every file's data is its blocks, so contiguity shows
    // in the block starts alone.
    let order = format!("profile:{}", profile.display());
    pack(
        &src,
        &img,
        &["--order", &order, "-b", "4K", "--no-fragments"],
    );
    assert_first_and_contiguous(&img, &PROFILED, &["z/late-2", "d/text4096", "d/rand300000"]);
    // With fragments, the profile's tails are in blocks of their own, ahead
    // of every other file's.
    let img2 = t.path().join("pf.sqfs");
    pack(&src, &img2, &["--order", &order, "-b", "4K"]);
    let fs = SquashFs::open(
        Box::new(FileSource::open(&img2).unwrap()),
        Arc::new(BlockCache::new(1 << 20)),
    )
    .unwrap();
    let frag = |p: &str| file_inode(&fs, p).fragment;
    // z/late-1 is exactly three blocks: no tail.
    let last_profiled = PROFILED
        .iter()
        .map(|p| frag(p))
        .filter(|&f| f != INVALID_FRAG)
        .max()
        .unwrap();
    for p in ["z/late-2", "d/text4095"] {
        assert!(
            frag(p) > last_profiled,
            "{p} shares the profile's fragment blocks: {} <= {last_profiled} ({:?})",
            frag(p),
            PROFILED.map(frag)
        );
    }
}

#[test]
fn a_recorded_run_packs_its_files_first_in_the_order_it_read_them() {
    let t = scratch();
    let src = t.path().join("src");
    tree(&src);
    let img = t.path().join("path.sqfs");
    pack(&src, &img, &["-b", "4K"]);
    let recorded = t.path().join("recorded.txt");
    // Not path order; "small.txt" twice (recorded once); d/e is only listed.
    let reads = [
        "d/rand4097",
        "z/late-1",
        "small.txt",
        "d/e/f/deep",
        "small.txt",
        "d/mid",
    ];
    {
        let m = PackfsMount::new(&img, &["--record-access", recorded.to_str().unwrap()]);
        std::fs::read_dir(m.path().join("d/e"))
            .unwrap()
            .for_each(drop);
        for r in reads {
            std::fs::read(m.path().join(r)).unwrap();
        }
    }
    let want = "/d/rand4097\n/z/late-1\n/small.txt\n/d/e/f/deep\n/d/mid\n";
    // The daemon writes its last lines as it exits, just after the unmount.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut got = String::new();
    while std::time::Instant::now() < deadline {
        got = std::fs::read_to_string(&recorded).unwrap_or_default();
        if got == want {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(got, want);
    let ordered = t.path().join("profiled.sqfs");
    let order = format!("profile:{}", recorded.display());
    pack(
        &src,
        &ordered,
        &["--order", &order, "-b", "4K", "--no-fragments"],
    );
    assert_first_and_contiguous(
        &ordered,
        &["d/rand4097", "z/late-1", "small.txt", "d/e/f/deep", "d/mid"],
        &["z/late-2", "d/text4096", "d/rand300000"],
    );
    // The tree is the source's, and a mount preloading the profile reads it.
    let m = PackfsMount::new(&ordered, &["--preload-profile", recorded.to_str().unwrap()]);
    assert_same(
        "profile-ordered image, --preload-profile",
        &manifest(m.path(), &ManifestOptions::default()),
        &manifest(&src, &ManifestOptions::default()),
    );
}

#[test]
fn an_unknown_order_or_an_order_for_a_zip_is_a_usage_error() {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("a"), b"a").unwrap();
    for (out, order, says) in [
        ("x.sqfs", "size", "expected path, similarity"),
        ("x.sqfs", "profile:", "the profile file is missing"),
        ("x.zip", "similarity", "ZIP archives keep path order"),
    ] {
        let o = Command::new(packfs_bin())
            .arg("pack")
            .arg(&src)
            .arg("-o")
            .arg(t.path().join(out))
            .args(["--order", order])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "--order {order} -o {out}: {err}");
        assert!(err.contains(says), "--order {order} -o {out}: {err}");
        assert!(!t.path().join(out).exists());
    }
}

#[test]
fn the_smallest_preset_is_its_flags_and_every_reader_reads_it() {
    if !require_tool("unsquashfs") {
        return;
    }
    let t = scratch();
    let src = t.path().join("src");
    tree(&src);
    let want = manifest(&src, &ManifestOptions::default());
    let preset = t.path().join("preset.sqfs");
    pack(&src, &preset, &["--preset", "smallest", "--mtime", "0"]);
    let flags = t.path().join("flags.sqfs");
    pack(
        &src,
        &flags,
        &[
            "-c",
            "xz",
            "-l",
            "9e",
            "--xz-lzma2",
            "lc=4,lp=0,pb=0",
            "-b",
            "1M",
            "--order",
            "similarity",
            "--mtime",
            "0",
            "-j",
            "1",
        ],
    );
    let bytes = std::fs::read(&preset).unwrap();
    assert!(
        bytes == std::fs::read(&flags).unwrap(),
        "preset != its flags"
    );
    let sb = Superblock::decode(&bytes[..SUPERBLOCK_SIZE].try_into().unwrap());
    // 4 = xz.
    assert_eq!((sb.compression_id, sb.block_size), (4, 1 << 20));
    // Not the default xz stream: the tuning is in effect.
    let plain = t.path().join("plain.sqfs");
    pack(
        &src,
        &plain,
        &[
            "-c",
            "xz",
            "-b",
            "1M",
            "--order",
            "similarity",
            "--mtime",
            "0",
        ],
    );
    assert!(std::fs::read(&plain).unwrap() != bytes);
    // The readers, on an image with the tree's own times.
    let preset = t.path().join("preset-times.sqfs");
    pack(&src, &preset, &["--preset", "smallest"]);
    let out = t.path().join("unsq");
    run(Command::new("unsquashfs").arg("-d").arg(&out).arg(&preset));
    assert_same(
        "unsquashfs, --preset smallest",
        &manifest(&out, &ManifestOptions::default()),
        &want,
    );
    let ours = PackfsMount::new(&preset, &[]);
    assert_same(
        "packfs, --preset smallest",
        &manifest(ours.path(), &ManifestOptions::default()),
        &want,
    );
    if let Some(kern) = KernelMount::new(&preset) {
        assert_same(
            "kernel, --preset smallest",
            &manifest(kern.path(), &ManifestOptions::default()),
            &want,
        );
    }
}

#[test]
fn xz_settings_a_reader_would_refuse_or_another_codec_are_usage_errors() {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("a"), b"a").unwrap();
    for (args, says) in [
        (
            &["-c", "xz", "--xz-lzma2", "lc=4,lp=1"][..],
            "lc + lp up to 4",
        ),
        (&["-c", "xz", "--xz-lzma2", "pb=5"][..], "pb takes 0 to 4"),
        (&["-c", "xz", "--xz-lzma2", "dict=1"][..], "not one of lc"),
        (&["--xz-lzma2", "lc=4"][..], "applies to -c xz"),
        (&["-l", "9e"][..], "only xz has an extreme variant"),
        (
            &["--preset", "smallest", "-b", "4K"][..],
            "cannot be used with",
        ),
    ] {
        let o = Command::new(packfs_bin())
            .arg("pack")
            .arg(&src)
            .arg("-o")
            .arg(t.path().join("x.sqfs"))
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!t.path().join("x.sqfs").exists());
    }
}
