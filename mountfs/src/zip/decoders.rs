//! Member decoders, reading the member's compressed bytes straight from the
//! image source. Deflate and zstd are driven directly (miniz_oxide's core
//! inflater, zstd's streaming decoder) so that a decoder's position can be
//! saved as a [`Checkpoint`] and resumed from later; the other methods are
//! streaming `Read`s that can only start at the member's first byte.

use crate::error::{FsError, Result};
use crate::source::ImageSource;
use miniz_oxide::inflate::core::inflate_flags::TINFL_FLAG_HAS_MORE_INPUT;
use miniz_oxide::inflate::core::{decompress_with_limit, DecompressorOxide};
use miniz_oxide::inflate::TINFLStatus;
use packfs_format::zip::unzip::member_decoder;
use packfs_format::zip::*;
use std::io::{self, Read};
use std::sync::Arc;
use zstd::stream::raw::{Decoder as ZstdDecoder, InBuffer, Operation, OutBuffer};

/// The compressed bytes of one member, as a `Read`.
pub struct SrcReader {
    src: Arc<dyn ImageSource>,
    pos: u64,
    end: u64,
}

impl Read for SrcReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = ((self.end - self.pos) as usize).min(buf.len()).min(1 << 20);
        if n == 0 {
            return Ok(0);
        }
        self.src
            .read_at(self.pos, &mut buf[..n])
            .map_err(|e| io::Error::new(io::ErrorKind::UnexpectedEof, e.to_string()))?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Deflate's LZ77 window (32 KiB, RFC 1951 §3.2.5), used as the inflater's
/// *wrapping* output buffer. Given a power-of-two buffer at least this large
/// and no `TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF`, miniz_oxide's core
/// inflater resolves back references modulo the buffer size and keeps every
/// other bit of its progress (bit buffer, Huffman tables, a half-copied
/// match) in its `Clone` state. So the buffer *is* the window, and (state,
/// buffer, input offset, output offset) is everything a resumed inflater
/// needs: that is a [`Checkpoint`].
pub const WINDOW: usize = 32 << 10;

/// Compressed bytes read from the source at a time. Any size is correct
/// (the inflater keeps partial bits in its state, zstd buffers internally);
/// a small one keeps what a decoder reads close to what it consumes, and
/// what a parked decoder holds small (the core keeps up to 256 prepared
/// files, each with its live decoder: 256 x (32 KiB window + 11 KiB state
/// + this) is the decoders' share of the daemon's memory).
const IN_STEP: usize = 16 << 10;

/// Compressed input read ahead of a decoder: one positional read of up to
/// [`IN_STEP`] bytes, consumed over several calls (a decoder that stops
/// because its output is full resumes inside the same read, instead of
/// reading the unconsumed part again).
#[derive(Default)]
struct InWindow {
    buf: Vec<u8>,
    /// Image offset of `buf[0]`.
    at: u64,
}

impl InWindow {
    /// The compressed bytes from `pos` on, up to `end` (none when `pos` is
    /// `end`), reading a new window when `pos` is outside the current one.
    fn get(
        &mut self,
        src: &dyn ImageSource,
        pos: u64,
        end: u64,
    ) -> std::result::Result<&[u8], String> {
        let inside = pos >= self.at && pos < self.at + self.buf.len() as u64;
        if !inside {
            let take = (end - pos).min(IN_STEP as u64) as usize;
            self.buf.resize(take, 0);
            src.read_at(pos, &mut self.buf).map_err(|e| e.to_string())?;
            self.at = pos;
        }
        Ok(&self.buf[(pos - self.at) as usize..])
    }
}

/// The method-specific decoder inside a [`Stream`].
enum Decoder {
    /// Stored, deflate64, bzip2, LZMA, xz: streaming readers that can only
    /// start at the member's first byte.
    Read(Box<dyn Read + Send>),
    /// Deflate, resumable from any [`Checkpoint`].
    Inflate(Box<Inflate>),
    /// Zstandard, restartable at any frame start.
    Zstd(Box<Zstd>),
}

/// A raw deflate stream decoded with miniz_oxide's core inflater.
struct Inflate {
    src: Arc<dyn ImageSource>,
    /// Offset in the image of the next compressed byte to hand over.
    in_pos: u64,
    /// End of the member's compressed data.
    end: u64,
    /// Boxed: ~11 KiB of Huffman tables, moved around otherwise.
    state: Box<DecompressorOxide>,
    /// The wrapping output buffer, `WINDOW` bytes: the last 32 KiB produced.
    window: Box<[u8]>,
    /// Where the next output byte goes in `window` (output offset mod WINDOW).
    ring: usize,
    /// The final block has been decoded.
    done: bool,
    input: InWindow,
}

impl Inflate {
    /// Fills `out`, or less when the deflate stream ends first.
    fn fill(&mut self, out: &mut [u8]) -> std::result::Result<usize, String> {
        let src = self.src.clone();
        let mut got = 0;
        while got < out.len() && !self.done {
            // Empty at the member's end: the inflater may still have output
            // to flush from its bit buffer.
            let input = self.input.get(&*src, self.in_pos, self.end)?;
            let take = input.len();
            // Without HAS_MORE_INPUT the inflater takes the end of `input`
            // for the end of the member (and fails if the stream goes on).
            let flags = if self.in_pos + (take as u64) < self.end {
                TINFL_FLAG_HAS_MORE_INPUT
            } else {
                0
            };
            let (mut used, before) = (0usize, got);
            loop {
                // Never past the buffer's end (the inflater does not wrap a
                // single call) nor past what the caller asked for.
                let room = (WINDOW - self.ring).min(out.len() - got);
                let rest = input.get(used..).unwrap_or_default();
                let (status, nin, nout) = decompress_with_limit(
                    &mut self.state,
                    rest,
                    &mut self.window,
                    self.ring,
                    room,
                    flags,
                );
                let produced = self
                    .window
                    .get(self.ring..self.ring + nout)
                    .ok_or("inflater wrote past its window")?;
                out.get_mut(got..got + nout)
                    .ok_or("inflater wrote past the request")?
                    .copy_from_slice(produced);
                used += nin;
                got += nout;
                self.ring = (self.ring + nout) & (WINDOW - 1);
                match status {
                    TINFLStatus::Done => {
                        self.done = true;
                        break;
                    }
                    // All of `input` is in the inflater's bit buffer.
                    TINFLStatus::NeedsMoreInput => break,
                    TINFLStatus::HasMoreOutput if got == out.len() => break,
                    // The buffer's end was reached: go on at its start.
                    TINFLStatus::HasMoreOutput if nin + nout > 0 => {}
                    TINFLStatus::HasMoreOutput => return Err("inflater made no progress".into()),
                    TINFLStatus::FailedCannotMakeProgress => {
                        return Err("deflate stream is truncated".into())
                    }
                    other => return Err(format!("invalid deflate stream ({other:?})")),
                }
            }
            self.in_pos += used as u64;
            if used == 0 && got == before && !self.done {
                return Err("inflater made no progress".into());
            }
        }
        Ok(got)
    }
}

/// A zstd stream (one or more frames) decoded with zstd's streaming API.
struct Zstd {
    src: Arc<dyn ImageSource>,
    in_pos: u64,
    end: u64,
    dec: ZstdDecoder<'static>,
    input: InWindow,
}

impl Zstd {
    /// Decodes into `out` until it is full or a frame ends (then `true`:
    /// nothing of the next frame has been consumed, so `in_pos` is where a
    /// fresh decoder could start). `(0, false)`: the input is exhausted.
    fn fill(&mut self, out: &mut [u8]) -> std::result::Result<(usize, bool), String> {
        let src = self.src.clone();
        let mut got = 0;
        while got < out.len() {
            let input = self.input.get(&*src, self.in_pos, self.end)?;
            let mut inb = InBuffer::around(input);
            let rest = out.get_mut(got..).unwrap_or_default();
            let mut outb = OutBuffer::around(rest);
            let hint = self
                .dec
                .run(&mut inb, &mut outb)
                .map_err(|e| format!("invalid zstd stream: {e}"))?;
            let (nin, nout) = (inb.pos(), outb.pos());
            self.in_pos += nin as u64;
            got += nout;
            if nin == 0 && nout == 0 {
                return Ok((got, false));
            }
            // 0: a frame is complete and flushed; ZSTD_decompressStream
            // stops at the frame's end, so in_pos is the next frame's start.
            if hint == 0 {
                return Ok((got, true));
            }
        }
        Ok((got, false))
    }
}

/// A saved decoder position inside one member, from which a decoder can
/// resume without decoding what precedes it.
pub struct Checkpoint {
    /// Output (uncompressed) offset at which the resumed decoder continues.
    pub pos: u64,
    /// Image offset of the next compressed byte.
    in_pos: u64,
    /// CRC-32 of the member's bytes `0..pos`, so that a resumed decoder
    /// still verifies the whole member's CRC when it reaches the end.
    crc: crc32fast::Hasher,
    /// Deflate: the inflater's state and window. `None`: a zstd frame
    /// start, where a fresh decoder needs nothing else.
    inflate: Option<(Box<DecompressorOxide>, Box<[u8]>)>,
}

impl Checkpoint {
    /// Bytes this checkpoint keeps alive (what the checkpoint store charges).
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Checkpoint>()
            + self.inflate.as_ref().map_or(0, |(_, w)| {
                std::mem::size_of::<DecompressorOxide>() + w.len()
            })
    }

    /// What a deflate checkpoint costs: the size its `bytes()` reports.
    pub fn inflate_bytes() -> usize {
        std::mem::size_of::<Checkpoint>() + std::mem::size_of::<DecompressorOxide>() + WINDOW
    }
}

/// The latest zstd frame start a stream passed.
struct FrameMark {
    pos: u64,
    in_pos: u64,
    crc: crc32fast::Hasher,
}

/// A decoder positioned somewhere in a member's uncompressed data, keeping a
/// running CRC-32 of the member's bytes `0..pos` (carried over from the
/// checkpoint when it was resumed from one).
pub struct Stream {
    dec: Decoder,
    /// Uncompressed bytes before the decoder's position.
    pub pos: u64,
    size: u64,
    crc: crc32fast::Hasher,
    expect_crc: u32,
    name: String,
    frame: Option<FrameMark>,
}

/// Which member to decode and how.
pub struct Member<'a> {
    pub name: &'a str,
    pub method: u16,
    pub flags: u16,
    pub data_off: u64,
    pub csize: u64,
    pub size: u64,
    pub crc: u32,
}

impl Member<'_> {
    /// End of the compressed data, checked against the image.
    fn end(&self, src: &dyn ImageSource) -> Result<u64> {
        self.data_off
            .checked_add(self.csize)
            .filter(|&e| e <= src.len())
            .ok_or_else(|| {
                FsError::corrupt(format!(
                    "{}: compressed data ({} bytes at {}) runs past the end of the file",
                    self.name, self.csize, self.data_off
                ))
            })
    }
}

fn unsupported(name: &str, method: u16) -> FsError {
    FsError::Unsupported(format!(
        "{name}: unsupported method {} ({method})",
        method_name(method)
    ))
}

fn zstd_decoder(name: &str) -> Result<ZstdDecoder<'static>> {
    ZstdDecoder::new().map_err(|e| FsError::io(format!("{name}: zstd"), e))
}

impl Stream {
    /// A decoder at the member's first byte.
    pub fn new(src: Arc<dyn ImageSource>, m: &Member<'_>) -> Result<Stream> {
        let end = m.end(&*src)?;
        let dec = match m.method {
            METHOD_DEFLATE => Decoder::Inflate(Box::new(Inflate {
                src,
                in_pos: m.data_off,
                end,
                state: Box::default(),
                window: vec![0u8; WINDOW].into_boxed_slice(),
                ring: 0,
                done: false,
                input: InWindow::default(),
            })),
            METHOD_ZSTD | 20 => Decoder::Zstd(Box::new(Zstd {
                src,
                in_pos: m.data_off,
                end,
                dec: zstd_decoder(m.name)?,
                input: InWindow::default(),
            })),
            method => {
                let raw = SrcReader {
                    src,
                    pos: m.data_off,
                    end,
                };
                let rd =
                    member_decoder(method, m.flags, m.size, raw).map_err(|e| match e.kind() {
                        io::ErrorKind::Unsupported => unsupported(m.name, method),
                        _ => FsError::corrupt(format!("{}: {e}", m.name)),
                    })?;
                Decoder::Read(rd)
            }
        };
        Ok(Stream {
            dec,
            pos: 0,
            size: m.size,
            crc: crc32fast::Hasher::new(),
            expect_crc: m.crc,
            name: m.name.to_string(),
            frame: None,
        })
    }

    /// A decoder at `cp.pos`, resumed from a checkpoint of the same member.
    pub fn resume(src: Arc<dyn ImageSource>, m: &Member<'_>, cp: &Checkpoint) -> Result<Stream> {
        let end = m.end(&*src)?;
        let fits = cp.pos < m.size && (m.data_off..=end).contains(&cp.in_pos);
        let dec = match (m.method, &cp.inflate) {
            (METHOD_DEFLATE, Some((state, window))) if fits && window.len() == WINDOW => {
                Decoder::Inflate(Box::new(Inflate {
                    src,
                    in_pos: cp.in_pos,
                    end,
                    state: state.clone(),
                    window: window.clone(),
                    ring: (cp.pos % WINDOW as u64) as usize,
                    done: false,
                    input: InWindow::default(),
                }))
            }
            (METHOD_ZSTD | 20, None) if fits => Decoder::Zstd(Box::new(Zstd {
                src,
                in_pos: cp.in_pos,
                end,
                dec: zstd_decoder(m.name)?,
                input: InWindow::default(),
            })),
            _ => {
                return Err(FsError::corrupt(format!(
                    "{}: checkpoint at {} does not fit the member",
                    m.name, cp.pos
                )))
            }
        };
        Ok(Stream {
            dec,
            pos: cp.pos,
            size: m.size,
            crc: cp.crc.clone(),
            expect_crc: m.crc,
            name: m.name.to_string(),
            frame: None,
        })
    }

    /// Where this decoder could be checkpointed now or (zstd) where it last
    /// could have been: a deflate decoder at a multiple of `interval`, the
    /// last zstd frame start. `None` at the member's start or end.
    pub fn checkpoint_due(&self, interval: u64) -> Option<u64> {
        let at = match &self.dec {
            Decoder::Inflate(z) if !z.done && self.pos.is_multiple_of(interval) => self.pos,
            Decoder::Zstd(_) => self.frame.as_ref()?.pos,
            _ => return None,
        };
        (at > 0 && at < self.size).then_some(at)
    }

    /// The checkpoint [`Stream::checkpoint_due`] named (a copy of the
    /// inflater's state and window, or the zstd frame start).
    pub fn checkpoint(&self) -> Option<Checkpoint> {
        match &self.dec {
            Decoder::Inflate(z) if !z.done => Some(Checkpoint {
                pos: self.pos,
                in_pos: z.in_pos,
                crc: self.crc.clone(),
                inflate: Some((z.state.clone(), z.window.clone())),
            }),
            Decoder::Zstd(_) => self.frame.as_ref().map(|f| Checkpoint {
                pos: f.pos,
                in_pos: f.in_pos,
                crc: f.crc.clone(),
                inflate: None,
            }),
            _ => None,
        }
    }

    fn corrupt(&self, why: impl std::fmt::Display) -> FsError {
        FsError::corrupt(format!("{}: compressed data is corrupt: {why}", self.name))
    }

    /// Decodes the next `min(n, remaining)` bytes. Verifies the CRC when the
    /// member's end is reached.
    pub fn next(&mut self, n: usize) -> Result<Vec<u8>> {
        let n = (self.size - self.pos).min(n as u64) as usize;
        let mut buf = vec![0u8; n];
        let mut got = 0;
        while got < n {
            let rest = &mut buf[got..];
            let (k, frame_end) = match &mut self.dec {
                Decoder::Read(rd) => match rd.read(rest) {
                    Ok(k) => (k, false),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(self.corrupt(e)),
                },
                Decoder::Inflate(z) => match z.fill(rest) {
                    Ok(k) => (k, false),
                    Err(e) => return Err(self.corrupt(e)),
                },
                Decoder::Zstd(z) => match z.fill(rest) {
                    Ok(r) => r,
                    Err(e) => return Err(self.corrupt(e)),
                },
            };
            if k == 0 && !frame_end {
                return Err(FsError::corrupt(format!(
                    "{}: compressed data ends after {} of {} bytes",
                    self.name,
                    self.pos + got as u64,
                    self.size
                )));
            }
            self.crc.update(&buf[got..got + k]);
            got += k;
            if frame_end {
                if let Decoder::Zstd(z) = &self.dec {
                    self.frame = Some(FrameMark {
                        pos: self.pos + got as u64,
                        in_pos: z.in_pos,
                        crc: self.crc.clone(),
                    });
                }
            }
        }
        self.pos += n as u64;
        if self.pos == self.size {
            let crc = std::mem::take(&mut self.crc).finalize();
            if crc != self.expect_crc {
                return Err(crc_mismatch(&self.name, self.expect_crc, crc));
            }
        }
        Ok(buf)
    }
}

/// The error for member `name`, whose bytes have CRC-32 `got` where the
/// archive says `expected`. Not logged here, as no error a reader returns
/// is: whoever is handed it says it once (the FUSE edge logs what it
/// answers EIO for, the CLI and Python report it).
pub(crate) fn crc_mismatch(name: &str, expected: u32, got: u32) -> FsError {
    FsError::corrupt(format!(
        "{name}: CRC-32 mismatch (expected {expected:08x}, got {got:08x})"
    ))
}
