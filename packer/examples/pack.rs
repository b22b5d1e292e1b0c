//! Minimal driver for manual checks: `pack SRC OUT [gzip|xz|lz4|zstd] [block_size] [level]`.
use packer::{pack_squashfs, Compressor, PackOptions};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 3 {
        eprintln!("usage: pack SRC OUT [gzip|xz|lz4|zstd] [block_size] [level]");
        std::process::exit(2);
    }
    let compressor = match a.get(3).map(String::as_str) {
        Some("gzip") => Compressor::Gzip,
        Some("xz") => Compressor::Xz,
        Some("lz4") => Compressor::Lz4,
        _ => Compressor::Zstd,
    };
    let o = PackOptions {
        compressor,
        block_size: a.get(4).and_then(|s| s.parse().ok()).unwrap_or(131072),
        level: a.get(5).and_then(|s| s.parse().ok()),
        force: true,
        no_fragments: std::env::var_os("PACK_NO_FRAGMENTS").is_some(),
        ..Default::default()
    };
    match pack_squashfs(a[1].as_ref(), a[2].as_ref(), &o) {
        Ok(s) => println!("{s:?}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
