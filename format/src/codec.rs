//! Block codecs: the compressors SquashFS names, in both directions. This
//! module depends on no format module; SquashFS stores a [`Compressor`]'s id.
//!
//! Decompression is bounded: callers pass the largest size the block may
//! expand to (the block size, or 8 KiB for metadata) and anything larger is an
//! error, so a corrupt image can never make us allocate without limit.
//! Compression keeps per-thread codec contexts, because creating a zstd or
//! deflate context per 128 KiB block costs more than compressing it.

use std::cell::RefCell;

/// The compressors SquashFS names, by the id its superblock stores.
/// (ZIP names its methods differently; `packer` maps these onto them.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compressor {
    Gzip = 1,
    Lzma = 2,
    Lzo = 3,
    Xz = 4,
    Lz4 = 5,
    Zstd = 6,
}

impl Compressor {
    pub fn from_id(id: u16) -> Option<Self> {
        Some(match id {
            1 => Self::Gzip,
            2 => Self::Lzma,
            3 => Self::Lzo,
            4 => Self::Xz,
            5 => Self::Lz4,
            6 => Self::Zstd,
            _ => return None,
        })
    }

    /// The id stored in a SquashFS superblock.
    pub fn id(self) -> u16 {
        self as u16
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Gzip => "gzip",
            Self::Lzma => "lzma",
            Self::Lzo => "lzo",
            Self::Xz => "xz",
            Self::Lz4 => "lz4",
            Self::Zstd => "zstd",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("{codec} stream is corrupt: {detail}")]
    Corrupt { codec: &'static str, detail: String },
    #[error("{codec} block expands beyond {limit} bytes")]
    TooLarge { codec: &'static str, limit: usize },
    #[error("compressor {0} is not supported for writing")]
    Unsupported(&'static str),
}

fn corrupt(codec: Compressor, detail: impl std::fmt::Display) -> CodecError {
    CodecError::Corrupt {
        codec: codec.name(),
        detail: detail.to_string(),
    }
}

thread_local! {
    static ZSTD_D: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
    static ZSTD_C: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> = const { RefCell::new(None) };
    /// One libdeflate compressor per level (1..=12): the packer deflates
    /// high-entropy blocks at level 1 and the rest at the level asked for,
    /// and rebuilding the match-finder tables on every switch is a
    /// noticeable share of a gzip pack.
    static LIBDEFLATE_C: RefCell<[Option<libdeflater::Compressor>; 13]> = RefCell::new(Default::default());
}

/// Decompresses one block into `out` (cleared first). `limit` is the largest
/// permitted decompressed size.
pub fn decompress(
    codec: Compressor,
    input: &[u8],
    out: &mut Vec<u8>,
    limit: usize,
) -> Result<(), CodecError> {
    out.clear();
    match codec {
        Compressor::Gzip => inflate(input, out, limit),
        Compressor::Xz => unxz(codec, input, out, limit),
        Compressor::Lzma => unlzma(input, out, limit),
        Compressor::Lz4 => {
            out.resize(limit, 0);
            let n = lz4_flex::block::decompress_into(input, out).map_err(|e| corrupt(codec, e))?;
            out.truncate(n);
            Ok(())
        }
        Compressor::Zstd => unzstd(input, out, limit),
        Compressor::Lzo => crate::lzo::decompress(input, limit, out).map_err(|e| match e {
            crate::lzo::LzoError::TooLong { limit } => too_large(codec, limit),
            e => corrupt(codec, e),
        }),
    }
}

fn too_large(codec: Compressor, limit: usize) -> CodecError {
    CodecError::TooLarge {
        codec: codec.name(),
        limit,
    }
}

/// [`decompress`] for gzip: a zlib stream.
fn inflate(input: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), CodecError> {
    let codec = Compressor::Gzip;
    let mut d = flate2::Decompress::new(true);
    out.reserve(limit + 1);
    loop {
        let before_in = d.total_in();
        let st = d
            .decompress_vec(
                &input[d.total_in() as usize..],
                out,
                flate2::FlushDecompress::Finish,
            )
            .map_err(|e| corrupt(codec, e))?;
        if out.len() > limit {
            return Err(too_large(codec, limit));
        }
        match st {
            flate2::Status::StreamEnd => return Ok(()),
            _ if out.len() == out.capacity() => out.reserve(4096),
            _ if d.total_in() == before_in => {
                return Err(corrupt(codec, "truncated deflate stream"))
            }
            _ => {}
        }
    }
}

/// [`decompress`] for xz and lzma (`codec`).
fn unxz(
    codec: Compressor,
    input: &[u8],
    out: &mut Vec<u8>,
    limit: usize,
) -> Result<(), CodecError> {
    let mut s = if codec == Compressor::Xz {
        xz2::stream::Stream::new_stream_decoder(u64::MAX, 0)
    } else {
        xz2::stream::Stream::new_lzma_decoder(u64::MAX)
    }
    .map_err(|e| corrupt(codec, e))?;
    out.reserve(limit + 1);
    loop {
        let consumed = s.total_in() as usize;
        let st = s
            .process_vec(&input[consumed..], out, xz2::stream::Action::Finish)
            .map_err(|e| corrupt(codec, e))?;
        if out.len() > limit {
            return Err(too_large(codec, limit));
        }
        match st {
            xz2::stream::Status::StreamEnd => return Ok(()),
            _ if out.len() == out.capacity() => out.reserve(4096),
            _ if s.total_in() as usize == consumed => {
                return Err(corrupt(codec, "truncated stream"))
            }
            _ => {}
        }
    }
}

/// [`decompress`] for legacy lzma: an `.lzma` stream (13-byte header:
/// properties, dictionary size, uncompressed size).
///
/// mksquashfs's liblzma wrapper writes the block's size into the header
/// and an end marker after the data. liblzma before 5.4 refuses that pair
/// as a data error; the liblzma that lzma-sys compiles into static builds
/// (the musl release, the Python wheel) is such a one. So a stream it
/// refuses is decoded again with the size marked unknown, which lets the
/// end marker end it, and must then hold exactly the size it declared.
fn unlzma(input: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), CodecError> {
    let codec = Compressor::Lzma;
    let first = unxz(codec, input, out, limit);
    if !matches!(first, Err(CodecError::Corrupt { .. })) || input.len() < 13 {
        return first;
    }
    let declared = u64::from_le_bytes(input[5..13].try_into().expect("8 bytes"));
    if declared == u64::MAX {
        return first;
    }
    let mut unknown = input.to_vec();
    unknown[5..13].fill(0xff);
    out.clear();
    match unxz(codec, &unknown, out, limit) {
        Ok(()) if out.len() as u64 == declared => Ok(()),
        Ok(()) => Err(corrupt(
            codec,
            format!(
                "the stream holds {} bytes, its header says {declared}",
                out.len()
            ),
        )),
        // The first error is the one that describes the stream as written.
        Err(_) => first,
    }
}

/// [`decompress`] for zstd, with a per-thread context.
fn unzstd(input: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), CodecError> {
    let codec = Compressor::Zstd;
    // Decode into spare capacity: no zero-fill of a block we are about
    // to overwrite. zstd never writes past the capacity, and a result
    // beyond `limit` (capacity may round up) is rejected below.
    if out.capacity() < limit {
        out.reserve_exact(limit);
    }
    let n = ZSTD_D.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new().map_err(|e| corrupt(codec, e))?);
        }
        let d = slot.as_mut().expect("just set");
        d.decompress_to_buffer(input, out)
            .map_err(|e| corrupt(codec, e))
    })?;
    if n > limit {
        return Err(too_large(codec, limit));
    }
    Ok(())
}

/// Whether zstd frames carry their content checksum. They do not: the
/// kernel's SquashFS zstd decoder (fs/squashfs/zstd_wrapper.c, Linux 6.18)
/// fails with EIO on some full blocks whose frame ends in one ("zstd
/// decompression failed, data probably corrupt"), though libzstd, packfs
/// and unsquashfs decode them (docs/FORMAT.md, "Integrity"). mksquashfs
/// writes none either. Damage is caught by the image's hash record instead.
pub const ZSTD_FRAME_CHECKSUM: bool = false;

/// liblzma's flag for a preset's slower, deeper match search (`xz -9e`).
const LZMA_PRESET_EXTREME: u32 = 1 << 31;

/// LZMA2 settings of the xz encoder beyond its preset level. Every choice
/// here yields a stream that every SquashFS xz reader decodes: the kernel's
/// decoder (xz-embedded) takes any LZMA2 stream with lc + lp ≤ 4 and a
/// dictionary no larger than the image's block size (which the encoder
/// always uses, see [`Encoder`]), unsquashfs and packfs (liblzma) any.
/// The stream records lc, lp and pb itself, so the image needs no
/// compressor options for them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XzOptions {
    /// The preset's extreme variant (`xz -9e`): a deeper match search.
    pub extreme: bool,
    /// Literal context bits (0-4; the preset's 3 when unset).
    pub lc: Option<u32>,
    /// Literal position bits (0-4; the preset's 0 when unset).
    pub lp: Option<u32>,
    /// Position bits (0-4; the preset's 2 when unset). 0 suits text, whose
    /// symbols are not aligned to 2^pb bytes.
    pub pb: Option<u32>,
    /// Match length at which the search stops looking for a longer one
    /// (2-273).
    pub nice_len: Option<u32>,
    /// Match finder search depth (0 = liblzma chooses from `nice_len`).
    pub depth: Option<u32>,
}

impl XzOptions {
    /// Why these settings would make a stream some reader refuses, if so.
    pub fn check(&self) -> Result<(), String> {
        for (name, v) in [("lc", self.lc), ("lp", self.lp), ("pb", self.pb)] {
            if v.is_some_and(|v| v > 4) {
                return Err(format!("{name} takes 0 to 4"));
            }
        }
        let (lc, lp) = (self.lc.unwrap_or(3), self.lp.unwrap_or(0));
        if lc + lp > 4 {
            return Err(format!(
                "lc={lc} with lp={lp}: the kernel's xz decoder takes lc + lp up to 4"
            ));
        }
        if self.nice_len.is_some_and(|n| !(2..=273).contains(&n)) {
            return Err("nice takes 2 to 273".into());
        }
        Ok(())
    }
}

/// A compressor with its level, as used by the writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Encoder {
    pub codec: Compressor,
    pub level: i32,
    /// The image block size; bounds the xz dictionary (the kernel refuses
    /// streams whose dictionary exceeds it).
    pub block_size: u32,
    /// For xz only; checked by [`XzOptions::check`] before use.
    pub xz: XzOptions,
}

impl Encoder {
    pub fn new(codec: Compressor, level: Option<i32>, block_size: u32) -> Result<Self, CodecError> {
        let level = level.unwrap_or(match codec {
            Compressor::Gzip => 9,
            Compressor::Xz | Compressor::Lzma => 6,
            Compressor::Zstd => 15,
            Compressor::Lz4 | Compressor::Lzo => 0,
        });
        if matches!(codec, Compressor::Lzo | Compressor::Lzma) {
            return Err(CodecError::Unsupported(codec.name()));
        }
        Ok(Encoder {
            codec,
            level,
            block_size,
            xz: XzOptions::default(),
        })
    }

    /// Valid level range for the codec, for CLI validation.
    pub fn level_range(codec: Compressor) -> (i32, i32) {
        match codec {
            Compressor::Gzip => (1, 9),
            Compressor::Xz | Compressor::Lzma => (0, 9),
            Compressor::Zstd => (1, 22),
            Compressor::Lz4 | Compressor::Lzo => (0, 0),
        }
    }

    /// Compresses `input` into `out` (cleared first). Returns false when the
    /// result is not smaller than the input: the caller then stores the block
    /// raw, as SquashFS requires.
    pub fn compress(&self, input: &[u8], out: &mut Vec<u8>) -> Result<bool, CodecError> {
        out.clear();
        if input.is_empty() {
            return Ok(false);
        }
        let complete = match self.codec {
            Compressor::Gzip => self.deflate(input, out)?,
            Compressor::Zstd => self.zstd(input, out)?,
            Compressor::Lz4 => {
                out.resize(lz4_flex::block::get_maximum_output_size(input.len()), 0);
                let n = lz4_flex::block::compress_into(input, out)
                    .map_err(|e| corrupt(self.codec, e))?;
                out.truncate(n);
                true
            }
            Compressor::Xz => self.xz(input, out)?,
            Compressor::Lzo | Compressor::Lzma => {
                return Err(CodecError::Unsupported(self.codec.name()))
            }
        };
        Ok(complete && out.len() < input.len())
    }

    /// [`Encoder::compress`] for gzip, with libdeflate: the same zlib stream
    /// format as zlib's, faster and no larger at level 9
    /// (docs/benchmarks/defaults.md). Returns false, `out` unfinished, when the
    /// stream would not be smaller than the input.
    fn deflate(&self, input: &[u8], out: &mut Vec<u8>) -> Result<bool, CodecError> {
        let fitted = LIBDEFLATE_C.with(|cell| {
            let level = self.level.clamp(1, 12);
            let mut slots = cell.borrow_mut();
            let slot = &mut slots[level as usize];
            if slot.is_none() {
                let lvl = libdeflater::CompressionLvl::new(level)
                    .map_err(|e| corrupt(self.codec, format!("{e:?}")))?;
                *slot = Some(libdeflater::Compressor::new(lvl));
            }
            let Some(c) = slot.as_mut() else {
                return Ok(None);
            };
            // Only a result smaller than the input is useful.
            out.resize(input.len(), 0);
            Ok::<_, CodecError>(c.zlib_compress(input, out).ok())
        })?;
        match fitted {
            Some(n) => {
                out.truncate(n);
                Ok(true)
            }
            None => Ok(false), // did not fit: incompressible
        }
    }

    /// [`Encoder::compress`] for zstd, with a per-thread context kept for
    /// its level: one frame, without a content checksum
    /// ([`ZSTD_FRAME_CHECKSUM`]). Always complete.
    fn zstd(&self, input: &[u8], out: &mut Vec<u8>) -> Result<bool, CodecError> {
        out.reserve(zstd::zstd_safe::compress_bound(input.len()));
        ZSTD_C.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.as_ref().map(|(l, _)| *l) != Some(self.level) {
                let mut c =
                    zstd::bulk::Compressor::new(self.level).map_err(|e| corrupt(self.codec, e))?;
                c.include_checksum(ZSTD_FRAME_CHECKSUM)
                    .map_err(|e| corrupt(self.codec, e))?;
                *slot = Some((self.level, c));
            }
            let (_, c) = slot.as_mut().expect("just set");
            c.compress_to_buffer(input, out)
                .map_err(|e| corrupt(self.codec, e))?;
            Ok::<(), CodecError>(())
        })?;
        Ok(true)
    }

    /// [`Encoder::compress`] for xz: one LZMA2 stream with a CRC32 check.
    /// Returns false, `out` unfinished, once the output has grown as large
    /// as the input.
    fn xz(&self, input: &[u8], out: &mut Vec<u8>) -> Result<bool, CodecError> {
        let mut filters = xz2::stream::Filters::new();
        filters.lzma2(&self.lzma_options()?);
        let mut s = xz2::stream::Stream::new_stream_encoder(&filters, xz2::stream::Check::Crc32)
            .map_err(|e| corrupt(self.codec, e))?;
        out.reserve(input.len() + 128);
        loop {
            let st = s
                .process_vec(
                    &input[s.total_in() as usize..],
                    out,
                    xz2::stream::Action::Finish,
                )
                .map_err(|e| corrupt(self.codec, e))?;
            if st == xz2::stream::Status::StreamEnd {
                return Ok(true);
            }
            if out.len() >= input.len() {
                return Ok(false);
            }
            out.reserve(4096);
        }
    }

    /// The LZMA2 settings of the xz encoder: the level's preset, the
    /// dictionary bounded by the block size, then [`XzOptions`].
    fn lzma_options(&self) -> Result<xz2::stream::LzmaOptions, CodecError> {
        let x = &self.xz;
        let preset = self.level as u32 | if x.extreme { LZMA_PRESET_EXTREME } else { 0 };
        let mut opts =
            xz2::stream::LzmaOptions::new_preset(preset).map_err(|e| corrupt(self.codec, e))?;
        opts.dict_size(self.block_size.max(8192));
        if let Some(v) = x.lc {
            opts.literal_context_bits(v);
        }
        if let Some(v) = x.lp {
            opts.literal_position_bits(v);
        }
        if let Some(v) = x.pb {
            opts.position_bits(v);
        }
        if let Some(v) = x.nice_len {
            opts.nice_len(v);
        }
        if let Some(v) = x.depth {
            opts.depth(v);
        }
        Ok(opts)
    }

    /// Compressor options metadata payload, when the codec needs one.
    /// The kernel's LZ4 support requires it (version 1 = legacy frame-less blocks).
    pub fn options_payload(&self) -> Option<Vec<u8>> {
        match self.codec {
            Compressor::Lz4 => {
                let mut v = 1u32.to_le_bytes().to_vec();
                v.extend_from_slice(&0u32.to_le_bytes());
                Some(v)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        (0..100_000u32)
            .flat_map(|i| format!("line {} {}\n", i % 977, i / 13).into_bytes())
            .take(131072)
            .collect()
    }

    /// An `.lzma` stream as mksquashfs writes one: liblzma's alone encoder
    /// (size unknown, end marker), then the size written into the header.
    fn lzma_as_mksquashfs_writes(data: &[u8]) -> Vec<u8> {
        let opts = xz2::stream::LzmaOptions::new_preset(6).unwrap();
        let mut s = xz2::stream::Stream::new_lzma_encoder(&opts).unwrap();
        let mut c = Vec::with_capacity(data.len() + 1024);
        s.process_vec(data, &mut c, xz2::stream::Action::Finish)
            .unwrap();
        assert_eq!(c[5..13], [0xff; 8]);
        c[5..13].copy_from_slice(&(data.len() as u64).to_le_bytes());
        c
    }

    #[test]
    fn legacy_lzma_with_a_size_and_an_end_marker_decodes() {
        let data = sample();
        let c = lzma_as_mksquashfs_writes(&data);
        let mut out = Vec::new();
        decompress(Compressor::Lzma, &c, &mut out, data.len()).unwrap();
        assert_eq!(out, data);
        // A header that lies about the size is damage, whichever liblzma.
        let mut lie = c.clone();
        lie[5..13].copy_from_slice(&(data.len() as u64 - 1).to_le_bytes());
        let e = decompress(Compressor::Lzma, &lie, &mut out, data.len()).unwrap_err();
        assert!(matches!(e, CodecError::Corrupt { .. }), "{e}");
        // A damaged stream is still refused.
        let mut bad = c;
        let mid = bad.len() / 2;
        bad[mid] ^= 0x55;
        assert!(decompress(Compressor::Lzma, &bad, &mut out, data.len()).is_err());
    }

    #[test]
    fn every_writable_codec_round_trips() {
        let data = sample();
        for codec in [
            Compressor::Gzip,
            Compressor::Zstd,
            Compressor::Lz4,
            Compressor::Xz,
        ] {
            let enc = Encoder::new(codec, None, 131072).unwrap();
            let mut c = Vec::new();
            assert!(
                enc.compress(&data, &mut c).unwrap(),
                "{codec:?} did not shrink text"
            );
            let mut d = Vec::new();
            decompress(codec, &c, &mut d, 131072).unwrap();
            assert_eq!(d, data, "{codec:?}");
            // A limit below the real size is an error, never a silent truncation.
            assert!(decompress(codec, &c, &mut d, 1000).is_err(), "{codec:?}");
        }
    }

    #[test]
    fn corrupt_input_is_an_error_not_a_panic() {
        let data = sample();
        for codec in [
            Compressor::Gzip,
            Compressor::Zstd,
            Compressor::Lz4,
            Compressor::Xz,
        ] {
            let enc = Encoder::new(codec, None, 131072).unwrap();
            let mut c = Vec::new();
            enc.compress(&data, &mut c).unwrap();
            let mut d = Vec::new();
            for cut in [0, 1, c.len() / 2] {
                let _ = decompress(codec, &c[..cut], &mut d, 131072);
            }
            for i in (0..c.len()).step_by(97) {
                let mut bad = c.clone();
                bad[i] ^= 0x5A;
                if let Ok(()) = decompress(codec, &bad, &mut d, 131072) {
                    assert!(d.len() <= 131072);
                }
            }
            let _ = decompress(Compressor::Lzo, &c, &mut d, 131072);
        }
    }

    #[test]
    fn random_data_reports_incompressible() {
        let mut x = 0x1234_5678u64;
        let data: Vec<u8> = (0..65536)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        for codec in [
            Compressor::Gzip,
            Compressor::Zstd,
            Compressor::Lz4,
            Compressor::Xz,
        ] {
            let enc = Encoder::new(codec, None, 131072).unwrap();
            let mut c = Vec::new();
            assert!(!enc.compress(&data, &mut c).unwrap(), "{codec:?}");
        }
    }
}
