//! Little-endian fields: a forward reader ([`Input`]) that decoders are
//! generic over, and the `put_*` helpers encoders append with.
//!
//! Decoders take an [`Input`] rather than a slice because SquashFS records
//! live in metadata areas whose 8 KiB blocks are decompressed one at a
//! time: the reader's metadata cursor implements [`Input`] and carries a
//! record across a block boundary without the decoder knowing.

use crate::FormatError;

/// A source of bytes read front to back.
pub trait Input {
    /// The reader's error; every [`FormatError`] a decoder raises converts into it.
    type Error: From<FormatError>;

    /// Fills `buf` completely or fails.
    fn read_into(&mut self, buf: &mut [u8]) -> Result<(), Self::Error>;

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Self::Error> {
        let mut b = [0u8; N];
        self.read_into(&mut b)?;
        Ok(b)
    }
    fn u8(&mut self) -> Result<u8, Self::Error> {
        Ok(self.array::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, Self::Error> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    fn i16(&mut self) -> Result<i16, Self::Error> {
        Ok(i16::from_le_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32, Self::Error> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, Self::Error> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    /// `n` bytes into a fresh vector. Callers bound `n` before asking.
    fn bytes(&mut self, n: usize) -> Result<Vec<u8>, Self::Error> {
        let mut v = vec![0u8; n];
        self.read_into(&mut v)?;
        Ok(v)
    }
}

/// [`Input`] over a slice; running off its end is [`FormatError::Truncated`]
/// naming `what` was being read.
pub struct SliceInput<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> SliceInput<'a> {
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        SliceInput { buf, pos: 0, what }
    }
    /// Bytes consumed so far.
    pub fn pos(&self) -> usize {
        self.pos
    }
    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }
}

impl Input for SliceInput<'_> {
    type Error = FormatError;
    fn read_into(&mut self, out: &mut [u8]) -> Result<(), FormatError> {
        let end = self
            .pos
            .checked_add(out.len())
            .filter(|&e| e <= self.buf.len())
            .ok_or(FormatError::Truncated(self.what))?;
        out.copy_from_slice(&self.buf[self.pos..end]);
        self.pos = end;
        Ok(())
    }
}

pub fn put_u8(out: &mut Vec<u8>, v: u8) {
    out.push(v);
}
pub fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}
pub fn put_i16(out: &mut Vec<u8>, v: i16) {
    out.extend_from_slice(&v.to_le_bytes());
}
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Fixed-offset reads of a slice the caller has length-checked (ZIP records
/// are parsed in place this way). Panics past the end, so callers check
/// `len` first.
pub fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
pub fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_input_reads_in_order_and_reports_truncation() {
        let mut v = Vec::new();
        put_u16(&mut v, 0xBEEF);
        put_i16(&mut v, -2);
        put_u32(&mut v, 7);
        put_u64(&mut v, u64::MAX - 1);
        put_u8(&mut v, 9);
        let mut i = SliceInput::new(&v, "test record");
        assert_eq!(i.u16().unwrap(), 0xBEEF);
        assert_eq!(i.i16().unwrap(), -2);
        assert_eq!(i.u32().unwrap(), 7);
        assert_eq!(i.u64().unwrap(), u64::MAX - 1);
        assert_eq!(i.pos(), 16);
        assert_eq!(i.u8().unwrap(), 9);
        assert_eq!(i.u16(), Err(FormatError::Truncated("test record")));
        assert_eq!(
            FormatError::Truncated("test record").to_string(),
            "test record is truncated"
        );
    }
}
