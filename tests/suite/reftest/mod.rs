//! Model-based test of the readers: proptest generates a random tree
//! ([`tree`]: directories, files around block and fragment edges, empty
//! files, symlinks, hard links, odd names, modes, owners, times, xattrs),
//! writes it to disk and packs it four ways — packfs SquashFS (random codec
//! and block size), packfs ZIP, a union of three packfs SquashFS shards
//! (the shard API) and mksquashfs with unusual options — then checks every
//! filesystem-core request on each ([`check`]) against the in-memory model.
//! A failing case is shrunk to the fewest entries and operations that still
//! fail, and printed.
//!
//! The system under test is `PackFs` over `AnyImage` as `packfs mount`
//! builds it (format detection, a manifest opening the union), without the
//! FUSE adapter, which only converts what these calls return. Each image
//! has a block cache far smaller than its data and sequential prefetch on
//! two threads, so evictions and background decodes interleave with the
//! reads being checked.
//!
//! `PROPTEST_CASES=N` runs N cases instead of the default.

mod check;
mod tree;

use crate::common::{mksquashfs, require, scratch};
use check::{check, Flavor, ReadOp};
use mountfs::fs::PackFs;
use mountfs::open::AnyImage;
use packer::shards::{pack_shards, ShardFormat, ShardSpec, DEFAULT_ENTRY_COST};
use packer::{pack_squashfs, pack_zip, Compressor, PackOptions};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::test_runner::{Config, TestRunner};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use tree::{Model, Spec};

/// Cases when `PROPTEST_CASES` is not set: enough to meet every entry
/// kind and edge many times, few enough for a debug build's test run.
const CASES: u32 = 24;
/// Block cache of each opened image: smaller than many of the files.
const CACHE: usize = 96 << 10;

/// One generated case: a tree and how to pack and probe it.
#[derive(Clone, Debug)]
struct Case {
    specs: Vec<Spec>,
    codec: Compressor,
    block_size: u32,
    mksquashfs: Index,
    /// Entries per readdir call.
    page: usize,
    reads: Vec<ReadOp>,
}

fn case() -> impl Strategy<Value = Case> {
    let read = (
        any::<Index>(),
        any::<bool>(),
        any::<Index>(),
        select(vec![1u32, 100, 4095, 4096, 4097, 65536, 1 << 20]),
    )
        .prop_map(|(file, at_edge, offset, len)| ReadOp {
            file,
            at_edge,
            offset,
            len,
        });
    (
        tree::specs(40),
        select(vec![
            Compressor::Zstd,
            Compressor::Gzip,
            Compressor::Lz4,
            Compressor::Xz,
        ]),
        select(vec![4096u32, 8192, 131072]),
        any::<Index>(),
        1usize..8,
        vec(read, 0..24),
    )
        .prop_map(|(specs, codec, block_size, mksquashfs, page, reads)| Case {
            specs,
            codec,
            block_size,
            mksquashfs,
            page,
            reads,
        })
}

/// mksquashfs option sets: fragments always, every area stored raw, xz.
const MKSQUASHFS: [&[&str]; 3] = [
    &["-comp", "gzip", "-b", "4096", "-always-use-fragments"],
    &["-noI", "-noD", "-noF", "-noX"],
    &["-comp", "xz", "-b", "8192"],
];

fn squashfs_flavor(name: &'static str, xattrs: bool) -> Flavor {
    Flavor {
        name,
        hard_links: true,
        xattrs,
        root_meta: true,
        files: |m| m.inodes() as u64,
        shown: <[u8]>::to_vec,
    }
}

/// Packs `src` every way; the images with how each shows the tree.
fn images(c: &Case, src: &Path, out: &Path, xattrs: bool) -> Vec<(Flavor, PathBuf)> {
    let opts = || PackOptions {
        compressor: c.codec,
        block_size: c.block_size,
        threads: 2,
        ..PackOptions::default()
    };
    let sqfs = out.join("packfs.sqfs");
    pack_squashfs(src, &sqfs, &opts()).expect("pack_squashfs");
    let zip = out.join("packfs.zip");
    pack_zip(src, &zip, &PackOptions::default()).expect("pack_zip");
    let spec = ShardSpec {
        shards: 3,
        template: out.join("shard-{shard}.sqfs").to_str().unwrap().to_string(),
        manifest: None,
        entry_cost: DEFAULT_ENTRY_COST,
        format: ShardFormat::SquashFs,
        compression: "zstd".into(),
    };
    pack_shards(src, &spec, None, &opts()).expect("pack_shards");
    let mk = out.join("mksquashfs.sqfs");
    mksquashfs(src, &mk, MKSQUASHFS[c.mksquashfs.index(MKSQUASHFS.len())]);
    vec![
        (squashfs_flavor("packfs SquashFS", xattrs), sqfs),
        (
            Flavor {
                name: "packfs ZIP",
                hard_links: false,
                xattrs: false,
                root_meta: false,
                // Every name has a node, the root too.
                files: |m| m.nodes.len() as u64,
                // A path that is not UTF-8 is stored without the UTF-8
                // flag, from a Unix host: it reads back as its bytes.
                shown: <[u8]>::to_vec,
            },
            zip,
        ),
        (
            Flavor {
                name: "union of 3 shards",
                hard_links: true,
                xattrs,
                root_meta: true,
                // The manifest counts every name, the root's too.
                files: |m| m.nodes.len() as u64,
                shown: <[u8]>::to_vec,
            },
            spec.manifest_path(),
        ),
        (squashfs_flavor("mksquashfs", xattrs), mk),
    ]
}

/// Whether user.* xattrs can be set in the scratch directories here.
fn xattrs_work() -> bool {
    let t = scratch();
    let p = t.path().join("probe");
    std::fs::write(&p, b"").unwrap();
    require(
        xattr::set(&p, "user.probe", b"1").is_ok(),
        "user.* xattrs on /var/tmp",
    )
}

fn run_case(c: &Case, xattrs: bool) -> Result<(), TestCaseError> {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let model = Model::build(&c.specs);
    model.write(&src, xattrs);
    for (flavor, img) in images(c, &src, t.path(), xattrs) {
        let image = AnyImage::open(&img, CACHE)
            .map_err(|e| TestCaseError::fail(format!("{}: open: {e}", flavor.name)))?;
        let fs = PackFs::new(image, 256 << 10, 2);
        check(&fs, &model, &flavor, c.page, &c.reads)
            .map_err(|e| TestCaseError::fail(format!("{}: {e}", flavor.name)))?;
    }
    Ok(())
}

#[test]
fn random_trees_read_back_as_the_model_in_every_format() {
    let xattrs = xattrs_work();
    let mut config = Config {
        failure_persistence: None,
        // Each step of shrinking packs four images.
        max_shrink_iters: 256,
        ..Config::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = CASES;
    }
    let mut runner = TestRunner::new(config);
    if let Err(e) = runner.run(&case(), |c| run_case(&c, xattrs)) {
        panic!("{e}");
    }
}

/// Regression (found by the reftest above): a ZIP path from a Unix host was
/// decoded whole (UTF-8 when valid, else CP437), so a name that is not UTF-8
/// inside a directory whose name is non-ASCII UTF-8 read back under a second,
/// CP437-named directory (`Ð/` and `├É/├`) instead of inside its own.
#[test]
fn a_non_utf8_name_below_a_utf8_directory_reads_back_from_zip_in_place() {
    let t = scratch();
    let src = t.path().join("src");
    let dir = src.join("\u{d0}");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(std::ffi::OsStr::from_bytes(b"\xc3")), b"x").unwrap();
    let zip = t.path().join("z.zip");
    pack_zip(&src, &zip, &PackOptions::default()).expect("pack_zip");
    let fs = PackFs::new(AnyImage::open(&zip, CACHE).unwrap(), 0, 0);
    let names: Vec<Vec<u8>> = fs.list(1).unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(
        names,
        vec!["\u{d0}".as_bytes().to_vec()],
        "the root holds one directory"
    );
    let d = fs.resolve("\u{d0}".as_bytes()).unwrap();
    assert_eq!(
        fs.list(d.node).unwrap().len(),
        1,
        "the file is in its directory"
    );
}
