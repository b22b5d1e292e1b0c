//! What the ZIP reader makes of the records (which the `packfs_format::zip`
//! crate module encodes and decodes): the end records and the central
//! directory read from an image source, and the data offset of a member.
//! The rules unzip 6.0 follows for names, times and paths, shared with the
//! packer's ZIP input, are `packfs_format::zip::unzip`'s.
//!
//! Everything here parses untrusted bytes: every offset is checked, every
//! sum is checked arithmetic, and a malformed structure is a
//! [`FsError::Corrupt`], never a panic.

use crate::error::{FsError, Result};
use crate::source::ImageSource;
use packfs_format::zip::end::find_eocd;
use packfs_format::zip::local::LocalHeader;
pub use packfs_format::zip::unzip::{decode_name, entry_mtime, normalise, BadName, Eocd};
use packfs_format::zip::unzip::{locate, LocateError};
use packfs_format::zip::*;

/// Whether the last 64 KiB of `src` hold an end of central directory
/// record: `Some(true)` when its comment ends the file, `Some(false)` when
/// bytes follow it (tolerated, but as likely a chance match inside other
/// data). A file that does not start like a ZIP (a self-extractor, data in
/// front, a split archive's last part) may be one only if they do.
pub fn end_record(src: &dyn ImageSource) -> Result<Option<bool>> {
    let len = src.len();
    if len < EOCD_LEN as u64 {
        return Ok(None);
    }
    let tail_len = len.min(EOCD_SEARCH);
    let tail = src.read_vec(len - tail_len, tail_len as usize)?;
    let found = find_eocd(&tail, len - tail_len)
        .map(|(pos, clen)| pos + EOCD_LEN as u64 + clen as u64 == len);
    crate::buffers::recycle(tail);
    Ok(found)
}

/// Reads the end records and locates the central directory.
pub fn read_eocd(src: &dyn ImageSource) -> Result<Eocd> {
    let e = locate(src.len(), |at, buf| src.read_at(at, buf)).map_err(|e| match e {
        LocateError::Read(e) => e,
        LocateError::Corrupt(m) => FsError::Corrupt(m),
        LocateError::Unsupported(m) => FsError::Unsupported(m),
    })?;
    if e.shift > 0 {
        log::warn!(
            "zip: {} extra bytes before the archive (offsets adjusted)",
            e.shift
        );
    }
    Ok(e)
}

/// Offset of the member's data from its local header: the local name and
/// extra lengths may differ from the central ones, so they are read here.
pub fn local_data_offset(src: &dyn ImageSource, local: u64) -> Result<u64> {
    let mut h = [0u8; LOCAL_LEN];
    crate::source::range_check(src.len(), local, LOCAL_LEN).map_err(|_| {
        FsError::corrupt(format!(
            "local header at {local} is past the end of the file"
        ))
    })?;
    src.read_at(local, &mut h)?;
    let h = LocalHeader::decode(&h)
        .map_err(|_| FsError::corrupt(format!("no local header signature at {local}")))?;
    Ok(local + h.data_offset())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::MemSource;

    fn eocd(entries: u16, cd_size: u32, cd_off: u32, comment: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&SIG_EOCD.to_le_bytes());
        v.extend_from_slice(&[0; 4]);
        v.extend_from_slice(&entries.to_le_bytes());
        v.extend_from_slice(&entries.to_le_bytes());
        v.extend_from_slice(&cd_size.to_le_bytes());
        v.extend_from_slice(&cd_off.to_le_bytes());
        v.extend_from_slice(&(comment.len() as u16).to_le_bytes());
        v.extend_from_slice(comment);
        v
    }

    #[test]
    fn eocd_found_behind_a_comment_containing_a_fake_signature() {
        let mut comment = b"xx".to_vec();
        comment.extend_from_slice(&SIG_EOCD.to_le_bytes());
        comment.extend_from_slice(&[0; 30]);
        let img = eocd(0, 0, 0, &comment);
        let (pos, clen) = find_eocd(&img, 0).unwrap();
        assert_eq!((pos, clen as usize), (0, comment.len()));
        let e = read_eocd(&MemSource(img)).unwrap();
        assert_eq!((e.entries, e.cd_offset, e.zip64, e.shift), (0, 0, false, 0));
    }

    #[test]
    fn eocd_with_maximal_comment_is_found_and_beyond_is_not() {
        let comment = vec![b'c'; 0xFFFF];
        let mut img = vec![0u8; 100];
        img.extend(eocd(0, 0, 100, &comment));
        let e = read_eocd(&MemSource(img.clone())).unwrap();
        assert_eq!(e.pos, 100);
        assert_eq!(e.shift, 0);
        // One garbage byte more than the search window: the record is out of reach.
        let mut far = vec![0u8; 10];
        far.extend(eocd(0, 0, 10, &[]));
        far.extend(vec![b'g'; 0xFFFF + 1]);
        assert!(read_eocd(&MemSource(far)).is_err());
    }

    #[test]
    fn prepended_data_shifts_offsets() {
        let mut img = vec![b'#'; 50];
        img.extend(eocd(0, 0, 0, &[]));
        let e = read_eocd(&MemSource(img)).unwrap();
        assert_eq!((e.shift, e.cd_offset), (50, 50));
    }

    #[test]
    fn truncated_and_garbage_inputs_are_errors() {
        assert!(read_eocd(&MemSource(vec![])).is_err());
        assert!(read_eocd(&MemSource(vec![0; 21])).is_err());
        assert!(read_eocd(&MemSource(vec![0x50; 1000])).is_err());
        // Central directory beyond the record.
        assert!(read_eocd(&MemSource(eocd(1, 46, 1000, &[]))).is_err());
        // Offsets that overflow.
        assert!(read_eocd(&MemSource(eocd(1, u32::MAX, u32::MAX, &[]))).is_err());
    }
}
