//! LZO1X decompression: SquashFS's `lzo` compressor (mksquashfs writes
//! LZO1X-1 or LZO1X-999 streams; both decode here).
//!
//! Every read of the input, every write of the output and every match's
//! reference back into it is checked, so a damaged stream is an
//! [`LzoError`], never a panic or a read outside the buffers. (The crate
//! used before panicked on some damaged streams; a caught panic still
//! printed its message into a mount's log.)
//!
//! # The stream
//!
//! A sequence of instructions, each a first byte `t` and its operands.
//! What `t` means depends on `state`, the number of literals the previous
//! instruction copied after itself (0 to 3), or 4 after a literal run:
//!
//! | `t` | state | instruction |
//! |---|---|---|
//! | 0-15 | 0 | literal run of `t + 3` bytes (`t` = 0: 18 + an extended length) |
//! | 0-15 | 1-3 | 2-byte match, distance `1 + (t >> 2) + (b << 2)` |
//! | 0-15 | 4 | 3-byte match, distance `2049 + (t >> 2) + (b << 2)` |
//! | 64-255 | any | match of `(t >> 5) + 1` bytes, distance `1 + ((t >> 2) & 7) + (b << 3)` |
//! | 32-63 | any | match of `(t & 31) + 2` bytes (0: extended), distance `1 + (d >> 2)` |
//! | 16-31 | any | match of `(t & 7) + 2` bytes (0: extended), distance `16384 + ((t & 8) << 11) + (d >> 2)`; distance 16384 of 3 bytes ends the stream |
//!
//! `b` is the next byte, `d` the next little-endian 16 bits; after a match
//! its low two bits (`t & 3` or `d & 3`) are the literals that follow it.
//! An extended length is a run of zero bytes, 255 each, and a nonzero
//! byte added to the base. A first byte over 17 is a literal run of
//! `t - 17` bytes with no instruction before it.

use std::fmt;

/// What is wrong with a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LzoError {
    /// The input ends inside an instruction or its literals.
    Truncated,
    /// The output would grow past the limit the caller set.
    TooLong { limit: usize },
    /// A match refers to bytes before the start of the output.
    BeforeStart { distance: usize, at: usize },
    /// A length does not fit in memory's address range.
    LengthOverflow,
    /// The end marker has a length other than 3.
    BadEnd,
    /// Bytes follow the end marker.
    Trailing { bytes: usize },
}

impl fmt::Display for LzoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LzoError::Truncated => write!(f, "the stream ends inside an instruction"),
            LzoError::TooLong { limit } => write!(f, "it decodes to more than {limit} bytes"),
            LzoError::BeforeStart { distance, at } => write!(
                f,
                "a match {distance} bytes back at output offset {at} refers before the start"
            ),
            LzoError::LengthOverflow => write!(f, "a run length overflows"),
            LzoError::BadEnd => write!(f, "its end marker is malformed"),
            LzoError::Trailing { bytes } => write!(f, "{bytes} bytes follow its end marker"),
        }
    }
}

impl std::error::Error for LzoError {}

type Result<T> = std::result::Result<T, LzoError>;

/// The input, read forward.
struct Input<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Input<'a> {
    fn byte(&mut self) -> Result<usize> {
        let v = *self.b.get(self.at).ok_or(LzoError::Truncated)?;
        self.at += 1;
        Ok(v as usize)
    }

    fn le16(&mut self) -> Result<usize> {
        Ok(self.byte()? | (self.byte()? << 8))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).ok_or(LzoError::Truncated)?;
        let s = self.b.get(self.at..end).ok_or(LzoError::Truncated)?;
        self.at = end;
        Ok(s)
    }

    /// An extended length: `base` plus 255 for each zero byte, plus the
    /// nonzero byte that ends the run.
    fn extended(&mut self, base: usize) -> Result<usize> {
        let mut t = base;
        loop {
            match self.byte()? {
                0 => t = t.checked_add(255).ok_or(LzoError::LengthOverflow)?,
                b => return t.checked_add(b).ok_or(LzoError::LengthOverflow),
            }
        }
    }
}

/// The output, at most `limit` bytes.
struct Output<'o> {
    v: &'o mut Vec<u8>,
    limit: usize,
}

impl Output<'_> {
    fn room(&self, n: usize) -> Result<()> {
        if n > self.limit - self.v.len() {
            return Err(LzoError::TooLong { limit: self.limit });
        }
        Ok(())
    }

    fn literals(&mut self, input: &mut Input<'_>, n: usize) -> Result<()> {
        self.room(n)?;
        self.v.extend_from_slice(input.take(n)?);
        Ok(())
    }

    /// Copies `len` bytes from `distance` back; they may overlap what the
    /// copy writes (a distance shorter than the length repeats a pattern).
    fn matched(&mut self, distance: usize, len: usize) -> Result<()> {
        let at = self.v.len();
        if distance == 0 || distance > at {
            return Err(LzoError::BeforeStart { distance, at });
        }
        self.room(len)?;
        let from = at - distance;
        if distance >= len {
            self.v.extend_from_within(from..from + len);
        } else {
            for i in 0..len {
                let b = self.v[from + i];
                self.v.push(b);
            }
        }
        Ok(())
    }
}

/// Decodes the LZO1X stream `input` into `out` (cleared first), refusing
/// to write more than `limit` bytes.
pub fn decompress(input: &[u8], limit: usize, out: &mut Vec<u8>) -> Result<()> {
    out.clear();
    out.reserve(limit.min(input.len().saturating_mul(4)));
    let mut out = Output { v: out, limit };
    let mut i = Input { b: input, at: 0 };
    // Literals the last instruction copied after itself (0-3), or 4 after
    // a literal run: what a first byte under 16 means depends on it.
    let mut state = 0;
    if let Some(&first) = input.first().filter(|&&b| b > 17) {
        i.at = 1;
        let n = first as usize - 17;
        out.literals(&mut i, n)?;
        state = if n < 4 { n } else { 4 };
    }
    loop {
        let t = i.byte()?;
        let (distance, len, next);
        if t < 16 {
            match state {
                0 => {
                    let n = if t == 0 { i.extended(15)? } else { t };
                    out.literals(&mut i, n.checked_add(3).ok_or(LzoError::LengthOverflow)?)?;
                    state = 4;
                    continue;
                }
                4 => {
                    distance = 1 + 0x800 + (t >> 2) + (i.byte()? << 2);
                    len = 3;
                }
                _ => {
                    distance = 1 + (t >> 2) + (i.byte()? << 2);
                    len = 2;
                }
            }
            next = t & 3;
        } else if t >= 64 {
            distance = 1 + ((t >> 2) & 7) + (i.byte()? << 3);
            len = (t >> 5) + 1;
            next = t & 3;
        } else if t >= 32 {
            let n = if t & 31 == 0 { i.extended(31)? } else { t & 31 };
            len = n.checked_add(2).ok_or(LzoError::LengthOverflow)?;
            let d = i.le16()?;
            distance = 1 + (d >> 2);
            next = d & 3;
        } else {
            let n = if t & 7 == 0 { i.extended(7)? } else { t & 7 };
            len = n.checked_add(2).ok_or(LzoError::LengthOverflow)?;
            let d = i.le16()?;
            let far = ((t & 8) << 11) + (d >> 2);
            if far == 0 {
                if len != 3 {
                    return Err(LzoError::BadEnd);
                }
                return match input.len() - i.at {
                    0 => Ok(()),
                    bytes => Err(LzoError::Trailing { bytes }),
                };
            }
            distance = far + 0x4000;
            next = d & 3;
        }
        out.matched(distance, len)?;
        out.literals(&mut i, next)?;
        state = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut v = Vec::new();
        let mut x = 7u64;
        for i in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Text-like runs, repeats near and far, and some noise.
            match i % 5 {
                0 => v.extend_from_slice(b"the quick brown fox "),
                1 => v.push((x % 7) as u8 + b'a'),
                2 => v.extend_from_slice(&[0u8; 40][..(x % 40) as usize]),
                3 => v.push(x as u8),
                _ => {
                    let back = (x as usize % 60_000).min(v.len());
                    let from = v.len() - back;
                    let n = (x >> 20) as usize % 300;
                    for k in 0..n.min(back) {
                        v.push(v[from + k]);
                    }
                }
            }
        }
        v
    }

    fn lzo(data: &[u8]) -> Vec<u8> {
        lzokay_native::compress(data).unwrap()
    }

    #[test]
    fn round_trips_what_an_lzo1x_compressor_writes() {
        let data = sample();
        for len in [1, 3, 4, 17, 18, 300, 4096, 65536, data.len()] {
            let d = &data[..len];
            let mut out = Vec::new();
            let enc = lzo(d);
            decompress(&enc, len, &mut out)
                .unwrap_or_else(|e| panic!("{len}: {e}: {:?}", &enc[..enc.len().min(16)]));
            assert_eq!(out, d, "{len}");
        }
    }

    #[test]
    fn the_limit_is_kept() {
        let data = sample();
        let enc = lzo(&data[..10_000]);
        let mut out = Vec::new();
        assert_eq!(
            decompress(&enc, 9_999, &mut out),
            Err(LzoError::TooLong { limit: 9_999 })
        );
    }

    /// Every truncation and every single-byte change of a real stream is
    /// a result, never a panic; the truncations are all errors.
    #[test]
    fn damaged_streams_are_errors_not_panics() {
        let data = sample();
        let enc = lzo(&data[..20_000]);
        let mut out = Vec::new();
        for cut in 0..enc.len() {
            assert!(decompress(&enc[..cut], 20_000, &mut out).is_err(), "{cut}");
        }
        let mut bad = enc.clone();
        for at in (0..enc.len()).step_by(7) {
            for v in [0u8, 1, 17, 0x20, 0x40, 0xff, enc[at] ^ 0x80] {
                bad[at] = v;
                let _ = decompress(&bad, 20_000, &mut out);
                bad[at] = enc[at];
            }
        }
        let mut trailing = enc.clone();
        trailing.push(0);
        assert_eq!(
            decompress(&trailing, 20_000, &mut out),
            Err(LzoError::Trailing { bytes: 1 })
        );
    }

    /// Hand-made instructions: a match before the start, a bad end marker,
    /// an extended length of many zero bytes.
    #[test]
    fn hostile_instructions() {
        let mut out = Vec::new();
        // Two literals, then a 3-byte M2 match 9 back.
        assert_eq!(
            decompress(
                &[19, b'a', b'b', 0x40 | (1 << 5), 1, 0x11, 0, 0],
                100,
                &mut out
            ),
            Err(LzoError::BeforeStart { distance: 9, at: 2 })
        );
        // A literal, then an end marker of length 4.
        assert_eq!(
            decompress(&[18, b'x', 0x12, 0, 0], 100, &mut out),
            Err(LzoError::BadEnd)
        );
        // The empty stream's end marker alone.
        assert_eq!(decompress(&[0x11, 0, 0], 100, &mut out), Ok(()));
        assert!(out.is_empty());
        // A literal run whose length is a million zero bytes long: bounded
        // by the input, refused by the limit.
        let mut s = vec![0u8; 1_000_001];
        s.push(1);
        assert_eq!(
            decompress(&s, 1 << 20, &mut out),
            Err(LzoError::TooLong { limit: 1 << 20 })
        );
    }
}
