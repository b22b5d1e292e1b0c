//! Member decoders: one streaming `Read` per compression method, reading the
//! member's compressed bytes straight from the image source.

use super::format::*;
use crate::error::{FsError, Result};
use crate::source::ImageSource;
use std::io::{self, Read};
use std::sync::Arc;

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
        let b = self
            .src
            .slice(self.pos, n)
            .map_err(|e| io::Error::new(io::ErrorKind::UnexpectedEof, e.to_string()))?;
        buf[..n].copy_from_slice(b);
        self.pos += n as u64;
        Ok(n)
    }
}

/// A decoder positioned somewhere in a member's uncompressed data, keeping a
/// running CRC-32 of everything it produced.
pub struct Stream {
    rd: Box<dyn Read + Send>,
    /// Uncompressed bytes produced so far.
    pub pos: u64,
    size: u64,
    crc: crc32fast::Hasher,
    expect_crc: u32,
    name: String,
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

fn unsupported(name: &str, method: u16) -> FsError {
    log::error!(
        "zip: {name}: unsupported compression method {method} ({})",
        method_name(method)
    );
    FsError::Unsupported(format!(
        "{name}: unsupported method {} ({method})",
        method_name(method)
    ))
}

impl Stream {
    pub fn new(src: Arc<dyn ImageSource>, m: &Member<'_>) -> Result<Stream> {
        let end = m
            .data_off
            .checked_add(m.csize)
            .filter(|&e| e <= src.len())
            .ok_or_else(|| {
                FsError::corrupt(format!(
                    "{}: compressed data ({} bytes at {}) runs past the end of the file",
                    m.name, m.csize, m.data_off
                ))
            })?;
        let raw = SrcReader {
            src,
            pos: m.data_off,
            end,
        };
        let rd: Box<dyn Read + Send> = match m.method {
            METHOD_STORED => Box::new(raw),
            METHOD_DEFLATE => Box::new(flate2::read::DeflateDecoder::new(raw)),
            METHOD_DEFLATE64 => Box::new(deflate64::Deflate64Decoder::new(raw)),
            METHOD_BZIP2 => Box::new(bzip2::read::BzDecoder::new(raw)),
            METHOD_ZSTD | 20 => Box::new(
                zstd::stream::read::Decoder::new(raw)
                    .map_err(|e| FsError::io(format!("{}: zstd", m.name), e))?,
            ),
            METHOD_XZ => Box::new(xz2::read::XzDecoder::new_multi_decoder(raw)),
            METHOD_LZMA => Box::new(lzma_reader(raw, m)?),
            other => return Err(unsupported(m.name, other)),
        };
        Ok(Stream {
            rd,
            pos: 0,
            size: m.size,
            crc: crc32fast::Hasher::new(),
            expect_crc: m.crc,
            name: m.name.to_string(),
        })
    }

    /// Decodes the next `min(n, remaining)` bytes. Verifies the CRC when the
    /// member's end is reached.
    pub fn next(&mut self, n: usize) -> Result<Vec<u8>> {
        let n = (self.size - self.pos).min(n as u64) as usize;
        let mut buf = vec![0u8; n];
        let mut got = 0;
        while got < n {
            match self.rd.read(&mut buf[got..]) {
                Ok(0) => {
                    return Err(FsError::corrupt(format!(
                        "{}: compressed data ends after {} of {} bytes",
                        self.name,
                        self.pos + got as u64,
                        self.size
                    )))
                }
                Ok(k) => got += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    log::error!("zip: {}: decoding failed: {e}", self.name);
                    return Err(FsError::corrupt(format!(
                        "{}: compressed data is corrupt: {e}",
                        self.name
                    )));
                }
            }
        }
        self.crc.update(&buf);
        self.pos += n as u64;
        if self.pos == self.size {
            let crc = std::mem::take(&mut self.crc).finalize();
            if crc != self.expect_crc {
                log::error!(
                    "zip: {}: CRC-32 mismatch (archive says {:08x}, data has {crc:08x})",
                    self.name,
                    self.expect_crc
                );
                return Err(FsError::corrupt(format!(
                    "{}: CRC-32 mismatch (expected {:08x}, got {crc:08x})",
                    self.name, self.expect_crc
                )));
            }
        }
        Ok(buf)
    }
}

/// ZIP's LZMA (method 14): 2-byte LZMA SDK version, 2-byte properties size,
/// the 5 properties bytes, then a raw LZMA1 stream. liblzma's "alone"
/// decoder wants the .lzma header instead: properties + 64-bit size, where
/// the size is unknown (-1) when the stream has an end marker (flag bit 1).
fn lzma_reader(mut raw: SrcReader, m: &Member<'_>) -> Result<impl Read + Send> {
    let mut head = [0u8; 4];
    raw.read_exact(&mut head)
        .map_err(|_| FsError::corrupt(format!("{}: LZMA header truncated", m.name)))?;
    let psize = u16::from_le_bytes([head[2], head[3]]) as usize;
    if psize != 5 {
        return Err(FsError::corrupt(format!(
            "{}: LZMA properties of {psize} bytes (expected 5)",
            m.name
        )));
    }
    let mut alone = vec![0u8; 13];
    raw.read_exact(&mut alone[..5])
        .map_err(|_| FsError::corrupt(format!("{}: LZMA header truncated", m.name)))?;
    let size = if m.flags & FLAG_LZMA_EOS != 0 {
        u64::MAX
    } else {
        m.size
    };
    alone[5..].copy_from_slice(&size.to_le_bytes());
    let stream = xz2::stream::Stream::new_lzma_decoder(u64::MAX)
        .map_err(|e| FsError::corrupt(format!("{}: LZMA decoder: {e}", m.name)))?;
    Ok(xz2::read::XzDecoder::new_stream(
        io::Cursor::new(alone).chain(raw),
        stream,
    ))
}
