//! Per-entry compression: method and level from [`PackOptions`], whole
//! buffers (libdeflate / zstd, a compressor cached per thread), stream
//! segments for large files (zlib sync-flushed deflate / zstd frames), and
//! the cheap incompressibility test.
//!
//! [`PackOptions`]: crate::PackOptions

use crate::PackError;
use packfs_format::codec::Compressor;
use packfs_format::zip::{METHOD_DEFLATE, METHOD_STORED, METHOD_ZSTD};
use std::cell::RefCell;
use std::io;

/// Deflate level used when none is given: Info-ZIP's default.
pub const DEFAULT_DEFLATE_LEVEL: i32 = 6;
/// zstd level used when none is given (zstd's own default).
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;

/// How entries are compressed (each may still end up stored).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Codec {
    pub method: u16,
    pub level: i32,
}

impl Codec {
    /// `Gzip` = deflate (levels 1..=9 on Info-ZIP's scale, see
    /// [`deflate_effort`]), `Zstd` = zstd (method 93, zstd's levels);
    /// level 0 = store everything.
    pub fn from_options(c: Compressor, level: Option<i32>) -> Result<Codec, PackError> {
        let bad = |range: &str| {
            PackError::InvalidOption(format!(
                "ZIP {} level {}: accepts {range} (0 = store)",
                c.name(),
                level.unwrap_or_default()
            ))
        };
        match (c, level) {
            (Compressor::Gzip | Compressor::Zstd, Some(0)) => Ok(Codec {
                method: METHOD_STORED,
                level: 0,
            }),
            (Compressor::Gzip, l) => {
                let level = l.unwrap_or(DEFAULT_DEFLATE_LEVEL);
                if !(1..=9).contains(&level) {
                    return Err(bad("0 to 9"));
                }
                Ok(Codec {
                    method: METHOD_DEFLATE,
                    level,
                })
            }
            (Compressor::Zstd, l) => {
                let level = l.unwrap_or(DEFAULT_ZSTD_LEVEL);
                let r = zstd::compression_level_range();
                if !r.contains(&level) {
                    return Err(bad(&format!("{} to {}", r.start(), r.end())));
                }
                Ok(Codec {
                    method: METHOD_ZSTD,
                    level,
                })
            }
            _ => Err(PackError::InvalidOption(format!(
                "ZIP output supports deflate (gzip), zstd or level 0 (stored), not {}",
                c.name()
            ))),
        }
    }
}

/// Order-0 entropy in bits per byte, with the Miller-Madow correction
/// for small samples (uniform noise of 8 KiB measures ~7.98, not 8).
fn entropy(data: &[u8]) -> f64 {
    let mut h = [[0u32; 256]; 4];
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        h[0][c[0] as usize] += 1;
        h[1][c[1] as usize] += 1;
        h[2][c[2] as usize] += 1;
        h[3][c[3] as usize] += 1;
    }
    for &b in chunks.remainder() {
        h[0][b as usize] += 1;
    }
    let n = data.len() as f64;
    let (mut bits, mut used) = (0.0, 0u32);
    let [h0, h1, h2, h3] = &h;
    for (((a, b), c), d) in h0.iter().zip(h1).zip(h2).zip(h3) {
        let c = a + b + c + d;
        if c > 0 {
            let p = c as f64 / n;
            bits -= p * p.log2();
            used += 1;
        }
    }
    bits + (used.saturating_sub(1)) as f64 / (2.0 * n * std::f64::consts::LN_2)
}

/// True when data is not worth compressing (JPEG, PNG, archives, noise):
/// byte entropy of at least 7.9 bits, so entropy coding could save ~1%.
/// A histogram runs at GB/s, far cheaper than deflating the data to find
/// out, and a 4 KiB sample from the middle decides alone when the data is
/// clearly compressible (text and binaries measure 4.5-6.5 bits), so most
/// files cost one small histogram. Measured on imagenet-mini's JPEGs:
/// 7.87-7.94 bits over the whole file (7.89-7.96 corrected), which zlib -6
/// shrinks by only 1-3%; they are stored without trying. Files under
/// 4 KiB are always tried, as is anything below the threshold; the
/// compressed result is kept only if smaller.
pub fn looks_incompressible(data: &[u8]) -> bool {
    const SAMPLE: usize = 4096;
    if data.len() < SAMPLE {
        return false;
    }
    let mid = data.len() / 2 - SAMPLE / 2;
    entropy(&data[mid..mid + SAMPLE]) >= 7.5 && entropy(data) >= 7.9
}

#[derive(Default)]
struct Cached {
    deflate: Option<(i32, libdeflater::Compressor)>,
    zstd: Option<(i32, zstd::bulk::Compressor<'static>)>,
}

thread_local! {
    /// Compressors are expensive to set up (libdeflate allocates ~0.5 MB
    /// of match-finder state): one per pool thread, reused for every entry.
    static CACHED: RefCell<Cached> = RefCell::new(Cached::default());
}

/// Compresses a whole entry. Returns the method actually used and the
/// bytes to store: `raw` itself when the codec stores, the data looks
/// incompressible, or compression would not make it smaller.
pub fn compress_whole(codec: Codec, raw: Vec<u8>) -> io::Result<(u16, Vec<u8>)> {
    if codec.method == METHOD_STORED || raw.is_empty() || looks_incompressible(&raw) {
        return Ok((METHOD_STORED, raw));
    }
    // Room for one byte less than the input: a result that does not fit is
    // not worth keeping, and libdeflate / zstd report that as an error.
    let mut out = vec![0u8; raw.len() - 1];
    let n = CACHED.with(|c| -> io::Result<Option<usize>> {
        let mut c = c.borrow_mut();
        match codec.method {
            METHOD_DEFLATE => {
                let effort = deflate_effort(codec.level);
                if c.deflate.as_ref().map(|d| d.0) != Some(effort) {
                    let lvl = libdeflater::CompressionLvl::new(effort).map_err(|e| {
                        io::Error::new(io::ErrorKind::InvalidInput, format!("{e:?}"))
                    })?;
                    c.deflate = Some((effort, libdeflater::Compressor::new(lvl)));
                }
                let Some((_, d)) = c.deflate.as_mut() else {
                    unreachable!("set above")
                };
                Ok(d.deflate_compress(&raw, &mut out).ok())
            }
            _ => {
                if c.zstd.as_ref().map(|z| z.0) != Some(codec.level) {
                    c.zstd = Some((codec.level, zstd::bulk::Compressor::new(codec.level)?));
                }
                let Some((_, z)) = c.zstd.as_mut() else {
                    unreachable!("set above")
                };
                // The only failure with a valid context is "destination too small".
                Ok(z.compress_to_buffer(&raw, &mut out).ok())
            }
        }
    })?;
    match n {
        Some(n) if n < raw.len() => {
            out.truncate(n);
            // Return the unused room: entries wait in the window until written.
            out.shrink_to_fit();
            Ok((codec.method, out))
        }
        _ => Ok((METHOD_STORED, raw)),
    }
}

/// The libdeflate (whole entries) and zlib (streamed segments) level run
/// for ZIP deflate level `level` (Info-ZIP's scale): two below it, at
/// least 1. Info-ZIP's own deflate is weaker than zlib's, so libdeflate
/// two levels down already writes an archive no larger than `zip` at the
/// same level, at the lowest CPU cost that does (docs/benchmarks/defaults.md); the
/// streamed zlib path follows the same scale, where two levels down is
/// several times faster for a slightly larger output.
pub fn deflate_effort(level: i32) -> i32 {
    (level - 2).max(1)
}

/// Compresses one segment of a streamed entry so that the segments'
/// concatenation is one valid stream: deflate segments end with a sync
/// flush (an empty stored block, byte-aligned, not final) except the last,
/// which finishes the stream; zstd segments are whole frames (a zstd
/// stream is a sequence of frames). Segments are independent, so they
/// compress in parallel and the result does not depend on the thread count.
pub fn compress_segment(codec: Codec, data: &[u8], last: bool) -> io::Result<Vec<u8>> {
    match codec.method {
        METHOD_DEFLATE => {
            use flate2::{Compress, Compression, FlushCompress, Status};
            let mut c = Compress::new(Compression::new(deflate_effort(codec.level) as u32), false);
            let flush = if last {
                FlushCompress::Finish
            } else {
                FlushCompress::Sync
            };
            let mut out = Vec::with_capacity(data.len() / 2 + 1024);
            loop {
                let consumed = c.total_in() as usize;
                if out.capacity() - out.len() < 64 {
                    out.reserve(out.capacity().max(4096));
                }
                let st = c
                    .compress_vec(&data[consumed..], &mut out, flush)
                    .map_err(io::Error::other)?;
                let room_left = out.len() < out.capacity();
                let done = match st {
                    Status::StreamEnd => true,
                    // With room left over, zlib has flushed everything.
                    Status::Ok | Status::BufError => {
                        !last && c.total_in() as usize == data.len() && room_left
                    }
                };
                if done {
                    return Ok(out);
                }
            }
        }
        _ => CACHED.with(|c| {
            let mut c = c.borrow_mut();
            if c.zstd.as_ref().map(|z| z.0) != Some(codec.level) {
                c.zstd = Some((codec.level, zstd::bulk::Compressor::new(codec.level)?));
            }
            let Some((_, z)) = c.zstd.as_mut() else {
                unreachable!("set above")
            };
            z.compress(data)
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_data::noise;
    use std::io::Read;

    fn text(n: usize) -> Vec<u8> {
        let words = ["alpha ", "beta ", "gamma\n", "delta ", "epsilon "];
        let mut v = Vec::new();
        let mut i = 0usize;
        while v.len() < n {
            v.extend_from_slice(words[(i * 7 + i / 3) % 5].as_bytes());
            i += 1;
        }
        v.truncate(n);
        v
    }

    #[test]
    fn incompressible_test_fires_on_noise_only() {
        assert!(looks_incompressible(&noise(100_000, 3)));
        assert!(!looks_incompressible(&text(100_000)));
        assert!(!looks_incompressible(&noise(1000, 3))); // too small to judge
        let deflate = Codec::from_options(Compressor::Gzip, None).unwrap();
        let (m, out) = compress_whole(deflate, noise(100_000, 3)).unwrap();
        assert_eq!((m, out.len()), (METHOD_STORED, 100_000));
        // Small noise skips the test but is stored because deflate grows it.
        let (m, out) = compress_whole(deflate, noise(1000, 3)).unwrap();
        assert_eq!((m, out.len()), (METHOD_STORED, 1000));
        let (m, out) = compress_whole(deflate, text(100_000)).unwrap();
        assert_eq!(m, METHOD_DEFLATE);
        assert!(out.len() < 50_000);
    }

    #[test]
    fn options_map_to_methods() {
        let c = |k, l| Codec::from_options(k, l).map(|c| c.method).ok();
        assert_eq!(c(Compressor::Gzip, None), Some(METHOD_DEFLATE));
        assert_eq!(c(Compressor::Zstd, Some(19)), Some(METHOD_ZSTD));
        assert_eq!(c(Compressor::Gzip, Some(0)), Some(METHOD_STORED));
        assert_eq!(c(Compressor::Zstd, Some(0)), Some(METHOD_STORED));
        assert_eq!(c(Compressor::Gzip, Some(10)), None);
        assert_eq!(c(Compressor::Gzip, Some(-1)), None);
        assert_eq!(c(Compressor::Xz, None), None);
        assert_eq!(c(Compressor::Lz4, None), None);
    }

    #[test]
    fn segments_concatenate_into_one_stream() {
        let data = [text(300_000), noise(200_000, 5), text(100_001)].concat();
        for codec in [
            Codec::from_options(Compressor::Gzip, Some(6)).unwrap(),
            Codec::from_options(Compressor::Zstd, Some(3)).unwrap(),
        ] {
            let segs: Vec<&[u8]> = data.chunks(131_072).collect();
            let mut stream = Vec::new();
            for (i, s) in segs.iter().enumerate() {
                stream.extend(compress_segment(codec, s, i + 1 == segs.len()).unwrap());
            }
            let mut back = Vec::new();
            if codec.method == METHOD_DEFLATE {
                flate2::read::DeflateDecoder::new(&stream[..])
                    .read_to_end(&mut back)
                    .unwrap();
            } else {
                zstd::stream::read::Decoder::new(&stream[..])
                    .unwrap()
                    .read_to_end(&mut back)
                    .unwrap();
            }
            assert!(back == data, "{codec:?}: round trip differs");
        }
    }
}
