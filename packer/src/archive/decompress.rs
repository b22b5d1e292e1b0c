//! A decoder for each compression an archive may come in, told from the
//! stream's first bytes (never from its name: a `.tgz` saved as `.tar`, or
//! a stream on stdin, has none to go by).
//!
//! Each decoder reads every member or frame of its stream (`gzip -c a b`,
//! `zstd` frames written back to back by parallel compressors, `xz -T`,
//! `pbzip2`), as the command-line tools do.
//!
//! Where a stream's frames can be found without decoding them, they are
//! decoded in parallel (`super::parallel`): zstd frames (`pzstd`, seekable
//! zstd, `zstd -c a b`; `zstd -T0` writes one frame) and BGZF blocks
//! (`bgzip`). The other formats, and a stream that holds one large frame,
//! are decoded as they come.

use super::parallel::{Codec, Cutter, Frame, Limits, Parallel, Room, Src};
use std::io::{self, BufRead, Read};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// How an archive's bytes are compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
    Xz,
    Bzip2,
    Lz4,
}

impl Compression {
    /// Told from the stream's first bytes (at most 6 needed).
    pub fn sniff(head: &[u8]) -> Compression {
        if head.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd])
            // A skippable frame first: pzstd's output.
            || (head.len() >= 4 && head[0] & 0xf0 == 0x50 && head[1..4] == [0x2a, 0x4d, 0x18])
        {
            Compression::Zstd
        } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
            Compression::Xz
        } else if head.starts_with(b"BZh") && head.get(3).is_some_and(|c| (b'1'..=b'9').contains(c))
        {
            Compression::Bzip2
        } else if head.starts_with(&[0x04, 0x22, 0x4d, 0x18]) {
            Compression::Lz4
        } else {
            Compression::None
        }
    }

    /// As messages say it.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "tar",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
            Compression::Xz => "xz",
            Compression::Bzip2 => "bzip2",
            Compression::Lz4 => "lz4",
        }
    }
}

/// Counts the bytes read from the archive itself and remembers whether a
/// read of it failed, so that an error surfacing through a decoder can be
/// told apart: the file's (an I/O error) or the stream's (damage).
pub struct Counted<R> {
    inner: R,
    pub read: Arc<AtomicU64>,
    pub failed: Arc<AtomicBool>,
}

impl<R> Counted<R> {
    pub fn new(inner: R) -> Self {
        Counted {
            inner,
            read: Arc::new(AtomicU64::new(0)),
            failed: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(n) => {
                self.read.fetch_add(n as u64, Ordering::Relaxed);
                Ok(n)
            }
            Err(e) => {
                if e.kind() != io::ErrorKind::Interrupted {
                    self.failed.store(true, Ordering::Relaxed);
                }
                Err(e)
            }
        }
    }
}

/// Reads up to `n` bytes from `r` (fewer only at its end).
pub fn peek(r: &mut impl Read, n: usize) -> io::Result<Vec<u8>> {
    let mut head = vec![0u8; n];
    let mut got = 0;
    while got < n {
        match r.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    head.truncate(got);
    Ok(head)
}

/// The decoder of `c` over `r`. A `nested` stream (an archive inside an
/// archive, several of which are open at once) gets a smaller zstd window.
/// zstd frames and BGZF blocks are decoded on up to `threads` threads
/// (0: one per core; see [`decode_threads`]).
pub fn decoder<'a>(
    c: Compression,
    r: impl Read + Send + 'a,
    nested: bool,
    threads: usize,
) -> io::Result<Box<dyn Read + Send + 'a>> {
    decoder_with(c, r, nested, decode_threads(threads), Limits::DEFAULT)
}

/// Decoding threads for `-j threads`: at least 2, so that decoding runs
/// beside the tar parsing even with `-j 1`, and at most
/// [`MAX_DECODE_THREADS`].
pub fn decode_threads(threads: usize) -> usize {
    let n = match threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    n.clamp(2, MAX_DECODE_THREADS)
}

/// zstd decodes a GB/s or more per core, and the one reading thread,
/// which parses the tar and copies its data into blocks, takes at most a
/// few: more threads would only hold more jobs in memory.
pub const MAX_DECODE_THREADS: usize = 8;

fn decoder_with<'a>(
    c: Compression,
    r: impl Read + Send + 'a,
    nested: bool,
    threads: usize,
    limits: Limits,
) -> io::Result<Box<dyn Read + Send + 'a>> {
    // Decoders read in large pieces: a pipe or a network stream gives
    // what it has.
    let r = io::BufReader::with_capacity(256 << 10, r);
    Ok(match c {
        Compression::None => Box::new(r),
        Compression::Gzip => Box::new(bgzf(Box::new(r), threads, limits)),
        Compression::Zstd => Box::new(zstd(Box::new(r), nested, threads, limits)),
        // xz2 0.1 binds liblzma 5.2's API, which has no multi-threaded
        // decoder (lzma_stream_decoder_mt came with 5.4).
        Compression::Xz => Box::new(xz2::bufread::XzDecoder::new_multi_decoder(r)),
        // bzip2 blocks start at any bit, behind a 48-bit magic that the
        // compressed data may also hold: found only by decoding.
        Compression::Bzip2 => Box::new(bzip2::bufread::MultiBzDecoder::new(r)),
        // lz4 decodes faster than the tar is parsed: nothing to gain.
        Compression::Lz4 => Box::new(lz4_flex::frame::FrameDecoder::new(r)),
    })
}

/// zstd's sequential decoder over `r`: every frame, skippable ones
/// skipped.
fn zstd_sequential<'a>(
    r: Box<dyn BufRead + Send + 'a>,
    nested: bool,
) -> io::Result<Box<dyn Read + Send + 'a>> {
    let mut d = zstd::stream::read::Decoder::with_buffer(r)?;
    // Long-distance matching (`zstd --long=31`) needs a 2 GiB window;
    // within an archive, 128 MiB (`--long=27`, zstd's own default).
    d.window_log_max(if nested { 27 } else { 31 })?;
    Ok(Box::new(d))
}

/// A zstd stream, its frames decoded on `threads` threads.
fn zstd<'a>(
    r: Box<dyn BufRead + Send + 'a>,
    nested: bool,
    threads: usize,
    limits: Limits,
) -> Parallel<'a> {
    let cap = limits.job_out as usize;
    // Decoded in one call straight into the output, with no window
    // buffer: into the size the frames declare, or else into at most
    // `cap` bytes (more is an error, and the job goes back). The decoder
    // checks each frame's size and checksum, and that the bytes are whole
    // frames. It ignores the window rule, but the cutter left the frames
    // that break it to the sequential decoder, which reports them.
    let decode = move |data: &[u8], out: Option<u64>| -> Option<Vec<u8>> {
        zstd::bulk::decompress(data, out.map_or(cap, |n| n as usize)).ok()
    };
    let codec = Codec {
        name: "packfs-unzstd",
        decode: Arc::new(decode),
        sequential: Box::new(move |r| zstd_sequential(r, nested)),
    };
    Parallel::new(Cutter::new(r, zstd_frame, limits), codec, threads)
}

const ZSTD_MAGIC: u32 = 0xFD2F_B528;

/// Reads one zstd frame (RFC 8878, 3.1): its header tells the fields that
/// follow, each block's 3-byte header its length, and the last block is
/// marked. Anything unexpected is left to the sequential decoder, whose
/// error is the one to give.
fn zstd_frame(src: &mut Src, job: &mut Vec<u8>, room: Room) -> io::Result<Frame> {
    let start = job.len();
    if let Some(f) = src.head(4, job)? {
        return Ok(f);
    }
    let magic = u32::from_le_bytes(job[start..start + 4].try_into().expect("4 bytes"));
    if magic & 0xFFFF_FFF0 == 0x184D_2A50 {
        // A skippable frame: a 4-byte length, then data no decoder reads.
        if src.take(4, job)? < 4 {
            return Ok(Frame::Rest);
        }
        let n = u32::from_le_bytes(job[start + 4..start + 8].try_into().expect("4 bytes"));
        if src.skip(n.into())? < n.into() {
            // Truncated: its header alone makes the sequential decoder
            // report the same.
            return Ok(Frame::Rest);
        }
        job.truncate(start);
        return Ok(Frame::Skipped);
    }
    // Another format (a legacy zstd frame) or damage.
    if magic != ZSTD_MAGIC || src.take(1, job)? < 1 {
        return Ok(Frame::Rest);
    }
    let fhd = job[start + 4];
    // A reserved bit (damage), or a dictionary's ID (no dictionary is
    // given: the sequential decoder says so).
    if fhd & 0x08 != 0 || fhd & 0x03 != 0 {
        return Ok(Frame::Rest);
    }
    let single_segment = fhd & 0x20 != 0;
    let fcs_len = match fhd >> 6 {
        0 => usize::from(single_segment),
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let wd_len = usize::from(!single_segment);
    if src.take(wd_len + fcs_len, job)? < wd_len + fcs_len {
        return Ok(Frame::Rest);
    }
    let fields = &job[start + 5..];
    let fcs = (fcs_len > 0).then(|| {
        let mut b = [0u8; 8];
        b[..fcs_len].copy_from_slice(&fields[wd_len..wd_len + fcs_len]);
        u64::from_le_bytes(b) + if fcs_len == 2 { 256 } else { 0 }
    });
    let window = if single_segment {
        fcs.unwrap_or(0)
    } else {
        let wd = fields[0];
        let base = 1u64 << (10 + (wd >> 3));
        base + base / 8 * u64::from(wd & 7)
    };
    // A larger window than a job's output: more than the sequential
    // decoder would need to hold, and the window rule (at least 2^27) is
    // beyond the limit, so the sequential decoder applies it.
    if window > room.limits.job_out || fcs.is_some_and(|n| n > room.limits.job_out) {
        return Ok(Frame::Rest);
    }
    if fcs.is_some_and(|n| n > room.out) {
        return Ok(Frame::Later);
    }
    loop {
        if src.take(3, job)? < 3 {
            return Ok(Frame::Rest);
        }
        let at = job.len() - 3;
        let bh = u32::from(job[at]) | u32::from(job[at + 1]) << 8 | u32::from(job[at + 2]) << 16;
        let len = match (bh >> 1) & 3 {
            // Raw and compressed blocks: their length; RLE: one byte.
            0 | 2 => (bh >> 3) as usize,
            1 => 1,
            _ => return Ok(Frame::Rest),
        };
        if job.len() - start + len > room.limits.frame_bytes {
            return Ok(Frame::Rest);
        }
        if src.take(len, job)? < len {
            return Ok(Frame::Rest);
        }
        if bh & 1 != 0 {
            break;
        }
    }
    // The content checksum.
    if fhd & 0x04 != 0 && src.take(4, job)? < 4 {
        return Ok(Frame::Rest);
    }
    Ok(Frame::Whole { out: fcs })
}

/// A gzip stream: its BGZF blocks (`bgzip`'s members, which say their
/// length) decoded on `threads` threads; from the first member that is
/// not one, sequentially. A plain gzip stream costs its first header.
fn bgzf<'a>(r: Box<dyn BufRead + Send + 'a>, threads: usize, limits: Limits) -> Parallel<'a> {
    let decode = |data: &[u8], out: Option<u64>| -> Option<Vec<u8>> {
        let n = out.expect("BGZF blocks declare their size");
        let mut v = Vec::with_capacity(n as usize);
        // The sequential decoder's own code, to the job's end: it checks
        // each member's CRC-32 and size, and that the bytes are whole
        // members.
        flate2::bufread::MultiGzDecoder::new(data)
            .take(n + 1)
            .read_to_end(&mut v)
            .ok()?;
        (v.len() as u64 == n).then_some(v)
    };
    let codec = Codec {
        name: "packfs-ungzip",
        decode: Arc::new(decode),
        sequential: Box::new(|r| Ok(Box::new(flate2::bufread::MultiGzDecoder::new(r)))),
    };
    Parallel::new(Cutter::new(r, bgzf_block, limits), codec, threads)
}

/// Reads one BGZF block (SAM/BAM specification, 4.1): a gzip member whose
/// extra field has a `BC` subfield holding the member's length less one.
/// Its last 4 bytes are its output's size.
fn bgzf_block(src: &mut Src, job: &mut Vec<u8>, room: Room) -> io::Result<Frame> {
    let start = job.len();
    if let Some(f) = src.head(12, job)? {
        return Ok(f);
    }
    let h = &job[start..];
    // ID1 ID2, deflate, FEXTRA set and no reserved flag.
    if h[..3] != [0x1f, 0x8b, 8] || h[3] & 0x04 == 0 || h[3] & 0xe0 != 0 {
        return Ok(Frame::Rest);
    }
    let xlen = usize::from(u16::from_le_bytes([h[10], h[11]]));
    if src.take(xlen, job)? < xlen {
        return Ok(Frame::Rest);
    }
    let mut extra = &job[start + 12..];
    let mut bsize = None;
    while extra.len() >= 4 {
        let len = usize::from(u16::from_le_bytes([extra[2], extra[3]]));
        if extra[..2] == *b"BC" && len == 2 && extra.len() >= 6 {
            bsize = Some(usize::from(u16::from_le_bytes([extra[4], extra[5]])));
        }
        extra = &extra[(4 + len).min(extra.len())..];
    }
    // Not BGZF, or a length shorter than its own header and trailer.
    let Some(rest) = bsize.and_then(|b| (b + 1).checked_sub(12 + xlen + 8)) else {
        return Ok(Frame::Rest);
    };
    if src.take(rest + 8, job)? < rest + 8 {
        return Ok(Frame::Rest);
    }
    let isize = u64::from(u32::from_le_bytes(
        job[job.len() - 4..].try_into().expect("4 bytes"),
    ));
    if isize > room.limits.job_out {
        return Ok(Frame::Rest);
    }
    if isize > room.out {
        return Ok(Frame::Later);
    }
    Ok(Frame::Whole { out: Some(isize) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::parallel::Stats;
    use std::io::Write;

    #[test]
    fn concatenated_members_and_frames_are_read_whole() {
        let (a, b) = (b"first part ".repeat(1000), b"second part".repeat(1000));
        let whole: Vec<u8> = [a.clone(), b.clone()].concat();
        let mut gz = Vec::new();
        for part in [&a, &b] {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(part).unwrap();
            gz.extend(e.finish().unwrap());
        }
        let mut zst = zstd::encode_all(&a[..], 3).unwrap();
        zst.extend(zstd::encode_all(&b[..], 3).unwrap());
        for (c, data) in [(Compression::Gzip, gz), (Compression::Zstd, zst)] {
            assert_eq!(Compression::sniff(&data), c);
            let mut out = Vec::new();
            decoder(c, &data[..], false, 2)
                .unwrap()
                .read_to_end(&mut out)
                .unwrap();
            assert_eq!(out, whole, "{c:?}");
        }
    }

    #[test]
    fn a_damaged_gzip_stream_is_an_error() {
        let data = b"some bytes to compress, and more".repeat(500);
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&data).unwrap();
        let mut gz = e.finish().unwrap();
        let n = gz.len();
        gz[n - 6] ^= 0x40; // in the CRC-32 trailer
        let mut out = Vec::new();
        assert!(decoder(Compression::Gzip, &gz[..], false, 2)
            .unwrap()
            .read_to_end(&mut out)
            .is_err());
    }

    /// Text-like bytes (compressible about 3:1), the same for a seed.
    fn text(seed: u64, len: usize) -> Vec<u8> {
        const WORDS: [&[u8]; 8] = [
            b"usr/", b"share ", b"doc\n", b"lib", b"0755 ", b"root ", b"x86_64 ", b"README ",
        ];
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            out.extend_from_slice(WORDS[(x & 7) as usize]);
            out.extend_from_slice(format!("{}", (x >> 40) % 1000).as_bytes());
        }
        out.truncate(len);
        out
    }

    /// `n` parts of `len` text bytes (seeds from `seed` on), and all of
    /// them.
    fn parts(seed: u64, n: u64, len: usize) -> (Vec<Vec<u8>>, Vec<u8>) {
        let parts: Vec<Vec<u8>> = (seed..seed + n).map(|i| text(i, len)).collect();
        let whole = parts.concat();
        (parts, whole)
    }

    /// `tool ARGS` over `data` on stdin: its stdout, or `None` where the
    /// tool is missing (a failure under CI, which installs it).
    fn cli(tool: &str, args: &[&str], data: &[u8]) -> Option<Vec<u8>> {
        use std::process::{Command, Stdio};
        let mut child = match Command::new(tool)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                assert!(std::env::var_os("CI").is_none(), "this test needs `{tool}`");
                eprintln!("skipped: needs `{tool}` on PATH");
                return None;
            }
            Err(e) => panic!("{tool}: {e}"),
        };
        let mut stdin = child.stdin.take().unwrap();
        let data = data.to_vec();
        let feeder = std::thread::spawn(move || stdin.write_all(&data));
        let out = child.wait_with_output().unwrap();
        feeder.join().unwrap().unwrap();
        assert!(out.status.success(), "{tool} {args:?}: {}", out.status);
        Some(out.stdout)
    }

    /// Everything `r` gives, read in small pieces, and the error it ends
    /// on, if any.
    fn read_all(mut r: impl Read) -> (Vec<u8>, Option<io::Error>) {
        let (mut out, mut buf) = (Vec::new(), [0u8; 5000]);
        loop {
            match r.read(&mut buf) {
                Ok(0) => return (out, None),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => return (out, Some(e)),
            }
        }
    }

    /// What the sequential decoder makes of `data`.
    fn sequential(c: Compression, data: &[u8], nested: bool) -> (Vec<u8>, Option<String>) {
        let r: Box<dyn BufRead + Send> = Box::new(data);
        let d = match c {
            Compression::Zstd => zstd_sequential(r, nested).unwrap(),
            Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(r)),
            _ => unreachable!(),
        };
        let (out, e) = read_all(d);
        (out, e.map(|e| e.to_string()))
    }

    /// What the parallel decoder makes of `data`, and how.
    fn parallel(
        c: Compression,
        data: &[u8],
        nested: bool,
        limits: Limits,
    ) -> ((Vec<u8>, Option<String>), Stats) {
        let r: Box<dyn BufRead + Send> = Box::new(data);
        let mut d = match c {
            Compression::Zstd => zstd(r, nested, 3, limits),
            Compression::Gzip => bgzf(r, 3, limits),
            _ => unreachable!(),
        };
        let (out, e) = read_all(&mut d);
        ((out, e.map(|e| e.to_string())), d.stats())
    }

    /// A job per frame.
    const FRAME_JOBS: Limits = Limits {
        job_bytes: 1,
        ..Limits::DEFAULT
    };

    /// Asserts that both decoders give the same bytes and the same error,
    /// and that this is `want` (its bytes, whether an error); the
    /// parallel decoder's stats.
    fn same(c: Compression, data: &[u8], limits: Limits, want: (&[u8], bool)) -> Stats {
        same_nested(c, data, false, limits, want)
    }

    fn same_nested(
        c: Compression,
        data: &[u8],
        nested: bool,
        limits: Limits,
        want: (&[u8], bool),
    ) -> Stats {
        let seq = sequential(c, data, nested);
        let (par, stats) = parallel(c, data, nested, limits);
        assert_eq!(par.1, seq.1, "the error");
        assert!(
            par.0 == seq.0,
            "the bytes ({} and {})",
            par.0.len(),
            seq.0.len()
        );
        if want.1 {
            // Damage may have given wrong bytes before it is found.
            assert!(seq.1.is_some(), "an error");
        } else {
            assert_eq!(seq.1, None);
            assert!(seq.0 == want.0, "the stream's bytes");
        }
        stats
    }

    /// zstd frames, one per part, with a checksum, that declare their
    /// size (as from a file) or not (as from a pipe).
    fn frames(parts: &[impl AsRef<[u8]>], sized: bool) -> Vec<u8> {
        let mut out = Vec::new();
        for p in parts.iter().map(AsRef::as_ref) {
            let mut e = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
            e.include_checksum(true).unwrap();
            e.set_pledged_src_size(sized.then_some(p.len() as u64))
                .unwrap();
            e.write_all(p).unwrap();
            out.extend(e.finish().unwrap());
        }
        out
    }

    fn frames_with_size(parts: &[impl AsRef<[u8]>]) -> Vec<u8> {
        frames(parts, true)
    }

    fn frames_without_size(parts: &[impl AsRef<[u8]>]) -> Vec<u8> {
        frames(parts, false)
    }

    #[test]
    fn pzstd_frames_are_decoded_in_parallel_as_sequentially() {
        let data = text(1, 5 << 20);
        // pzstd -1: frames of 2 MiB of output, each after a skippable
        // frame holding its length.
        let Some(zst) = cli("pzstd", &["-q", "-1", "-p", "2", "-c"], &data) else {
            return;
        };
        let s = same(Compression::Zstd, &zst, FRAME_JOBS, (&data, false));
        assert_eq!((s.jobs, s.sequential), (3, false), "{s:?}");
        // Three threads: the three frames out at once.
        assert_eq!(s.most_in_flight, 3, "{s:?}");
        let s = same(Compression::Zstd, &zst, Limits::DEFAULT, (&data, false));
        assert!(!s.sequential, "{s:?}");
    }

    #[test]
    fn zstd_cli_frames_of_several_files_are_decoded_in_parallel() {
        let t = tempfile::tempdir().unwrap();
        let (a, b) = (text(2, 300_000), text(3, 200_000));
        std::fs::write(t.path().join("a"), &a).unwrap();
        std::fs::write(t.path().join("b"), &b).unwrap();
        let out = std::process::Command::new("zstd")
            .args(["-q", "-c", "a", "b"])
            .current_dir(t.path())
            .output();
        let zst = match out {
            Ok(o) if o.status.success() => o.stdout,
            Ok(o) => panic!("zstd: {}", o.status),
            Err(_) => {
                assert!(std::env::var_os("CI").is_none(), "this test needs `zstd`");
                return;
            }
        };
        let s = same(
            Compression::Zstd,
            &zst,
            FRAME_JOBS,
            (&[a, b].concat(), false),
        );
        assert_eq!((s.jobs, s.sequential), (2, false), "{s:?}");
    }

    #[test]
    fn frames_are_grouped_into_jobs_within_the_output_limit() {
        let (parts, whole) = parts(10, 9, 300_000);
        // Six frames' declared output fit a job, a seventh does not (2 MiB
        // also admits the 2 MiB window of zstd -3 without a size).
        let limits = Limits {
            job_bytes: usize::MAX,
            frame_bytes: 16 << 20,
            job_out: 2 << 20,
        };
        let s = same(
            Compression::Zstd,
            &frames_with_size(&parts),
            limits,
            (&whole, false),
        );
        assert_eq!((s.jobs, s.sequential), (2, false), "{s:?}");
        // Undeclared sizes are grouped by compressed bytes alone: a job
        // decoding to more than it may hold is given back, and the
        // sequential decoder reads the stream from there.
        let s = same(
            Compression::Zstd,
            &frames_without_size(&parts),
            limits,
            (&whole, false),
        );
        assert_eq!((s.jobs, s.sequential), (1, true), "{s:?}");
    }

    #[test]
    fn skippable_and_empty_frames_are_skipped() {
        let parts = [text(4, 100_000), Vec::new(), text(5, 70_000)];
        let skippable = |magic: u32, len: u32| -> Vec<u8> {
            let mut f = magic.to_le_bytes().to_vec();
            f.extend(len.to_le_bytes());
            f.extend(vec![0xAB; len as usize]);
            f
        };
        let f = |p: &Vec<u8>| frames_with_size(&[p]);
        let g = |p: &Vec<u8>| frames_without_size(&[p]);
        let zst = [
            f(&parts[0]),
            skippable(0x184D_2A50, 1000),
            g(&parts[1]),
            skippable(0x184D_2A5F, 0),
            f(&parts[1]),
            g(&parts[2]),
            skippable(0x184D_2A57, 3 << 20),
        ]
        .concat();
        let s = same(
            Compression::Zstd,
            &zst,
            FRAME_JOBS,
            (&parts.concat(), false),
        );
        assert_eq!((s.jobs, s.sequential), (4, false), "{s:?}");
        // A truncated skippable frame is the sequential decoder's error.
        let cut = &zst[..zst.len() - 10];
        let s = same(Compression::Zstd, cut, FRAME_JOBS, (&parts.concat(), true));
        assert!(s.sequential, "{s:?}");
    }

    #[test]
    fn a_damaged_frame_is_the_same_error_after_the_same_bytes() {
        let (parts, whole) = parts(20, 3, 400_000);
        for (what, zst) in [
            ("sizes declared", frames_with_size(&parts)),
            ("no sizes, checksums", frames_without_size(&parts)),
        ] {
            let first = frames_with_size(&parts[..1]).len();
            for at in [first + 300, first + 20_000] {
                let mut bad = zst.clone();
                bad[at] ^= 0x55;
                let s = same(Compression::Zstd, &bad, FRAME_JOBS, (&whole, true));
                // The three frames out, the damaged one given back.
                assert_eq!((s.jobs, s.sequential), (3, true), "{what} at {at}");
            }
        }
    }

    #[test]
    fn a_truncated_stream_is_the_same_error() {
        let (parts, whole) = parts(30, 3, 200_000);
        for zst in [frames_with_size(&parts), frames_without_size(&parts)] {
            let second = frames_with_size(&parts[..1]).len();
            // Inside the middle frame, in the last frame's checksum, and
            // within the last frame's header.
            for end in [second + 5000, zst.len() - 2, zst.len() - 1000] {
                let s = same(Compression::Zstd, &zst[..end], FRAME_JOBS, (&whole, true));
                assert!(s.sequential, "{s:?}");
            }
        }
        // Within a frame's magic.
        let zst = frames_with_size(&parts[..1]);
        let cut = [zst.clone(), zst[..2].to_vec()].concat();
        same(Compression::Zstd, &cut, FRAME_JOBS, (&parts[0], true));
    }

    #[test]
    fn large_frames_go_to_the_sequential_decoder() {
        let limits = Limits {
            job_bytes: 1,
            frame_bytes: 64 << 10,
            job_out: 2 << 20,
        };
        // One frame declaring more than a job may hold: its header alone
        // is read before the sequential decoder takes the stream.
        let big = text(40, 3 << 20);
        let s = same(
            Compression::Zstd,
            &frames_with_size(&[&big]),
            limits,
            (&big, false),
        );
        assert_eq!((s.jobs, s.sequential), (0, true), "{s:?}");
        // One frame longer than the longest buffered, its size unknown.
        let noisy = crate::test_data::noise(200 << 10, 41);
        let s = same(
            Compression::Zstd,
            &frames_without_size(&[&noisy]),
            limits,
            (&noisy, false),
        );
        assert_eq!((s.jobs, s.sequential), (0, true), "{s:?}");
        // Small frames, then a large one: the small ones in parallel.
        let small = text(42, 50_000);
        let zst = [
            frames_with_size(&[&small, &small]),
            frames_without_size(&[&noisy]),
            frames_with_size(&[&small]),
        ]
        .concat();
        let want = [&small[..], &small, &noisy, &small].concat();
        let s = same(Compression::Zstd, &zst, limits, (&want, false));
        assert_eq!((s.jobs, s.sequential), (2, true), "{s:?}");
        // Frames of unknown size that decode to more than a job may hold:
        // the first given back, and the stream read sequentially from it.
        let zeros = vec![0u8; 3 << 20];
        let zst = frames_without_size(&[&small, &zeros, &zeros, &small]);
        let want = [&small[..], &zeros, &zeros, &small].concat();
        let s = same(Compression::Zstd, &zst, limits, (&want, false));
        assert!(s.jobs >= 2 && s.sequential, "{s:?}");
    }

    #[test]
    fn the_window_rule_is_the_sequential_decoders() {
        let data = text(50, 100_000);
        let mut e = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
        e.window_log(28).unwrap();
        e.long_distance_matching(true).unwrap();
        e.write_all(&data).unwrap();
        let wide = e.finish().unwrap();
        let zst = [frames_with_size(&[&data]), wide].concat();
        let want = [&data[..], &data].concat();
        // 256 MiB: within the top level's window rule, beyond a nested
        // archive's.
        same_nested(Compression::Zstd, &zst, false, FRAME_JOBS, (&want, false));
        let s = same_nested(Compression::Zstd, &zst, true, FRAME_JOBS, (&want, true));
        assert_eq!((s.jobs, s.sequential), (1, true), "{s:?}");
    }

    /// A reader failing after `ok` bytes.
    struct Failing<'d>(&'d [u8], usize);

    impl Read for Failing<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.1 == 0 {
                return Err(io::Error::other("the disk is on fire"));
            }
            let n = buf.len().min(self.1).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            self.1 -= n;
            Ok(n)
        }
    }

    /// A read error of `data`, holding `whole` compressed with `c`, is
    /// the input's, after some of `whole`; damage is not.
    fn read_error_is_the_inputs(c: Compression, data: &[u8], whole: &[u8]) {
        let input = Counted::new(Failing(data, data.len() / 2));
        let failed = input.failed.clone();
        let (out, e) = read_all(decoder(c, input, false, 2).unwrap());
        let e = e.expect("an error");
        assert_eq!(e.to_string(), "the disk is on fire", "{c:?}");
        assert!(failed.load(Ordering::Relaxed), "{c:?}");
        assert!(!out.is_empty() && whole.starts_with(&out), "{c:?}");
        let mut bad = data.to_vec();
        bad[data.len() / 2] ^= 0x55;
        let input = Counted::new(&bad[..]);
        let failed = input.failed.clone();
        let (_, e) = read_all(decoder(c, input, false, 2).unwrap());
        assert!(e.is_some() && !failed.load(Ordering::Relaxed), "{c:?}");
    }

    #[test]
    fn a_read_error_of_the_input_stays_the_inputs() {
        let (parts, whole) = parts(60, 4, 300_000);
        read_error_is_the_inputs(Compression::Zstd, &frames_with_size(&parts), &whole);
        read_error_is_the_inputs(Compression::Gzip, &bgzf_blocks(&whole), &whole);
    }

    /// `data` as BGZF blocks of up to 65280 bytes, as `bgzip` writes
    /// them, and its empty end-of-file block.
    fn bgzf_blocks(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in data.chunks(65280).chain([&[][..]]) {
            let mut e =
                flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(chunk).unwrap();
            let deflated = e.finish().unwrap();
            let bsize = (18 + deflated.len() + 8 - 1) as u16;
            out.extend([
                0x1f, 0x8b, 8, 4, 0, 0, 0, 0, 0, 0xff, 6, 0, b'B', b'C', 2, 0,
            ]);
            out.extend(bsize.to_le_bytes());
            out.extend(deflated);
            out.extend(crc32fast::hash(chunk).to_le_bytes());
            out.extend((chunk.len() as u32).to_le_bytes());
        }
        out
    }

    #[test]
    fn bgzf_blocks_are_decoded_in_parallel_as_sequentially() {
        let data = text(70, 1 << 20);
        let gz = bgzf_blocks(&data);
        // 18 blocks: 17 of data, the end-of-file one.
        let s = same(Compression::Gzip, &gz, FRAME_JOBS, (&data, false));
        assert_eq!((s.jobs, s.sequential), (18, false), "{s:?}");
        // Grouped by output: 3 blocks of 65280 bytes per 200000, the
        // last 3 (4096 bytes, then none) with the 16th.
        let limits = Limits {
            job_bytes: usize::MAX,
            frame_bytes: 16 << 20,
            job_out: 200_000,
        };
        let s = same(Compression::Gzip, &gz, limits, (&data, false));
        assert_eq!((s.jobs, s.sequential), (6, false), "{s:?}");
        // Damage, a truncation.
        let mut bad = gz.clone();
        bad[gz.len() / 2] ^= 0x55;
        let s = same(Compression::Gzip, &bad, FRAME_JOBS, (&data, true));
        assert!(s.sequential, "{s:?}");
        let s = same(
            Compression::Gzip,
            &gz[..gz.len() / 2],
            FRAME_JOBS,
            (&data, true),
        );
        assert!(s.sequential, "{s:?}");
        // A plain gzip member after BGZF blocks: read sequentially.
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&data).unwrap();
        let mixed = [gz.clone(), e.finish().unwrap()].concat();
        let s = same(
            Compression::Gzip,
            &mixed,
            FRAME_JOBS,
            (&[&data[..], &data].concat(), false),
        );
        assert_eq!((s.jobs, s.sequential), (18, true), "{s:?}");
    }

    #[test]
    fn bgzip_output_is_decoded_in_parallel() {
        // bgzip is Debian's tabix, which scripts/setup.sh installs.
        let data = text(71, 1 << 20);
        let Some(gz) = cli("bgzip", &["-c"], &data) else {
            return;
        };
        let s = same(Compression::Gzip, &gz, FRAME_JOBS, (&data, false));
        assert!(s.jobs > 10 && !s.sequential, "{s:?}");
    }

    #[test]
    fn a_plain_gzip_stream_costs_its_first_header() {
        let data = text(72, 300_000);
        let Some(gz) = cli("gzip", &["-c", "-n"], &data) else {
            return;
        };
        let s = same(Compression::Gzip, &gz, Limits::DEFAULT, (&data, false));
        assert_eq!((s.jobs, s.sequential), (0, true), "{s:?}");
    }

    #[test]
    fn xz_blocks_of_several_threads_are_read_whole() {
        // xz stays sequential (see decoder_with); its multi-block streams
        // read whole.
        let data = text(80, 3 << 20);
        let Some(xz) = cli("xz", &["-T2", "--block-size=1MiB", "-c"], &data) else {
            return;
        };
        assert_eq!(Compression::sniff(&xz), Compression::Xz);
        let mut out = Vec::new();
        decoder(Compression::Xz, &xz[..], false, 2)
            .unwrap()
            .read_to_end(&mut out)
            .unwrap();
        assert!(out == data);
    }
}
