//! A decoder for each compression an archive may come in, told from the
//! stream's first bytes (never from its name: a `.tgz` saved as `.tar`, or
//! a stream on stdin, has none to go by).
//!
//! Each decoder reads every member or frame of its stream (`gzip -c a b`,
//! `zstd` frames written back to back by parallel compressors, `xz -T`,
//! `pbzip2`), as the command-line tools do.

use std::io::{self, Read};
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
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
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
pub fn decoder<'a>(
    c: Compression,
    r: impl Read + Send + 'a,
    nested: bool,
) -> io::Result<Box<dyn Read + Send + 'a>> {
    // Decoders read in large pieces: a pipe or a network stream gives
    // what it has.
    let r = io::BufReader::with_capacity(256 << 10, r);
    Ok(match c {
        Compression::None => Box::new(r),
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(r)),
        Compression::Zstd => {
            let mut d = zstd::stream::read::Decoder::with_buffer(r)?;
            // Long-distance matching (`zstd --long=31`) needs a 2 GiB window;
            // within an archive, 128 MiB (`--long=27`, zstd's own default).
            d.window_log_max(if nested { 27 } else { 31 })?;
            Box::new(d)
        }
        Compression::Xz => Box::new(xz2::bufread::XzDecoder::new_multi_decoder(r)),
        Compression::Bzip2 => Box::new(bzip2::bufread::MultiBzDecoder::new(r)),
        Compression::Lz4 => Box::new(lz4_flex::frame::FrameDecoder::new(r)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
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
            decoder(c, &data[..], false)
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
        assert!(decoder(Compression::Gzip, &gz[..], false)
            .unwrap()
            .read_to_end(&mut out)
            .is_err());
    }
}
