//! Criterion benchmarks of packfs's hot paths, kept short (small samples,
//! ~1 s of measurement each) so `cargo bench` is a quick regression check,
//! not a soak test:
//!
//! * `decode/<codec>`: one 128 KiB data block through `packfs_format::codec`.
//! * `cache/hit`, `cache/miss`: `BlockCache::get_or_load` on a resident
//!   block, and on a cold key (insert + eviction under a small budget).
//! * `meta/lookup_100k`, `meta/list_100k`: name lookup in, and full listing
//!   of, one directory of 100,000 entries in a packed image.
//! * `pack/tree`: packing a generated tree of 2,000 files end to end.
//!
//! Run: `cargo bench --bench hot_paths` (or add a filter, e.g. `-- decode`).

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use mountfs::cache::{Block, BlockCache};
use mountfs::fs::{PackFs, ROOT};
use mountfs::open::AnyImage;
use packfs_format::codec::Compressor;
use packfs_format::codec::{decompress, Encoder};
use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

const BLOCK: usize = 128 << 10;

/// Text-like data that compresses about as well as source code does.
fn block_data(n: usize) -> Vec<u8> {
    let words: [&[u8]; 8] = [
        b"fn ",
        b"let ",
        b"packfs ",
        b"block ",
        b"cache\n",
        b"    ",
        b"0x1f ",
        b"// note ",
    ];
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut out = Vec::with_capacity(n + 16);
    while out.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(words[(x % 8) as usize]);
        if x % 5 == 2 {
            out.extend_from_slice(&x.to_le_bytes()[..3]);
        }
    }
    out.truncate(n);
    out
}

fn decode(c: &mut Criterion) {
    let data = block_data(BLOCK);
    let mut g = c.benchmark_group("decode");
    g.sample_size(20)
        .measurement_time(Duration::from_secs(1))
        .warm_up_time(Duration::from_millis(300));
    g.throughput(Throughput::Bytes(BLOCK as u64));
    for codec in [
        Compressor::Zstd,
        Compressor::Gzip,
        Compressor::Lz4,
        Compressor::Xz,
    ] {
        let enc = Encoder::new(codec, None, BLOCK as u32).expect("encoder");
        let mut packed = Vec::new();
        assert!(
            enc.compress(&data, &mut packed).expect("compress"),
            "{codec:?}: test data must compress"
        );
        let mut out = Vec::with_capacity(BLOCK);
        g.bench_function(codec.name(), |b| {
            b.iter(|| {
                decompress(codec, black_box(&packed), &mut out, BLOCK).expect("decode");
                black_box(out.len())
            })
        });
    }
    g.finish();
}

fn cache(c: &mut Criterion) {
    let mut g = c.benchmark_group("cache");
    g.sample_size(20)
        .measurement_time(Duration::from_secs(1))
        .warm_up_time(Duration::from_millis(300));
    let payload = vec![7u8; 4096];
    let load = |p: &[u8]| Ok::<_, ()>(Block::new(p.to_vec(), 0));
    let hot = BlockCache::new(64 << 20);
    hot.get_or_load(42, || load(&payload)).expect("load");
    g.bench_function("hit", |b| {
        b.iter(|| {
            black_box(
                hot.get_or_load(black_box(42), || load(&payload))
                    .expect("hit"),
            )
        })
    });
    // 1 MiB budget, 4 KiB blocks, ever-new keys: every call misses and,
    // once full, evicts.
    let cold = BlockCache::new(1 << 20);
    let mut key = 0u64;
    g.bench_function("miss", |b| {
        b.iter(|| {
            key += 1;
            black_box(cold.get_or_load(key, || load(&payload)).expect("miss"))
        })
    });
    g.finish();
}

fn big_dir_image(dir: &Path) -> std::path::PathBuf {
    let src = dir.join("src");
    let big = src.join("big");
    std::fs::create_dir_all(&big).expect("mkdir");
    for i in 0..100_000 {
        std::fs::write(big.join(format!("entry-{i:06}")), b"").expect("write");
    }
    let img = dir.join("big.sqfs");
    packer::pack_squashfs(&src, &img, &packer::PackOptions::default()).expect("pack");
    img
}

fn metadata(c: &mut Criterion) {
    let tmp = tempfile::Builder::new()
        .prefix("packfs-bench-")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    let img = big_dir_image(tmp.path());
    let fs = PackFs::new(AnyImage::open(&img, 64 << 20).expect("open image"), 0, 0);
    let dir = fs.lookup(ROOT, b"big").expect("big/").node;
    let mut g = c.benchmark_group("meta");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(300));
    let names: Vec<Vec<u8>> = (0..1000)
        .map(|i| format!("entry-{:06}", i * 97 % 100_000).into_bytes())
        .collect();
    let mut i = 0;
    g.bench_function("lookup_100k", |b| {
        b.iter(|| {
            i = (i + 1) % names.len();
            black_box(fs.lookup(dir, &names[i]).expect("lookup"))
        })
    });
    g.bench_function("list_100k", |b| {
        b.iter(|| black_box(fs.list(dir).expect("list").len()))
    });
    g.finish();
}

fn pack(c: &mut Criterion) {
    let tmp = tempfile::Builder::new()
        .prefix("packfs-bench-")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    let src = tmp.path().join("src");
    let mut total = 0u64;
    for d in 0..20 {
        let dir = src.join(format!("d{d:02}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        for f in 0..100 {
            let data = block_data(500 + (d * 100 + f) * 37 % 20_000);
            total += data.len() as u64;
            std::fs::write(dir.join(format!("f{f:03}.txt")), data).expect("write");
        }
    }
    let out = tmp.path().join("out.sqfs");
    let mut g = c.benchmark_group("pack");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(300));
    g.throughput(Throughput::Bytes(total));
    g.bench_function("tree_2000_files", |b| {
        b.iter_batched(
            || {
                let _ = std::fs::remove_file(&out);
            },
            |()| packer::pack_squashfs(&src, &out, &packer::PackOptions::default()).expect("pack"),
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, decode, cache, metadata, pack);
criterion_main!(benches);
