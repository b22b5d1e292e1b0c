//! A central directory record as readers use it: the fixed header's fields
//! with the Zip64 values and the extra fields packfs understands applied.

use super::central::CentralHeader;
use super::extra::{self, fields};
use super::*;
use crate::FormatError;

/// One central directory record as readers use it: the header's fields
/// with the Zip64 values and the extra fields packfs understands applied.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CentralEntry {
    pub made_by: u16,
    pub flags: u16,
    pub method: u16,
    pub dos_time: u16,
    pub dos_date: u16,
    pub crc: u32,
    pub csize: u64,
    pub size: u64,
    pub disk: u32,
    pub external: u32,
    pub local_offset: u64,
    /// The name as stored (bytes in the archive's encoding).
    pub raw_name: Vec<u8>,
    /// UTF-8 name from the Info-ZIP Unicode Path extra (0x7075), when valid.
    pub unicode_name: Option<Vec<u8>>,
    /// Extended timestamp (0x5455) modification time, raw 32 bits.
    pub ut_mtime: Option<u32>,
    /// Old Info-ZIP Unix (0x5855) or PKWARE Unix (0x000d) modification time.
    pub old_unix_mtime: Option<u32>,
    pub uid_gid: Option<(u32, u32)>,
    /// Some value came from a Zip64 extra.
    pub zip64: bool,
}

impl CentralEntry {
    pub fn host(&self) -> u8 {
        (self.made_by >> 8) as u8
    }
    pub fn unix_mode(&self) -> Option<u32> {
        matches!(self.host(), HOST_UNIX | HOST_OSX)
            .then_some(self.external >> 16)
            .filter(|&m| m != 0)
    }
    pub fn encrypted(&self) -> bool {
        self.flags & (FLAG_ENCRYPTED | FLAG_STRONG_ENCRYPTION) != 0 || self.method == METHOD_AES
    }
}

/// Parses the record at `b[0..]`; returns it and its total length.
pub fn parse_central(b: &[u8]) -> Result<(CentralEntry, usize), FormatError> {
    let h = CentralHeader::decode(b)?;
    let total = h.total_len();
    if b.len() < total {
        return Err(FormatError::invalid(
            "central directory record runs past the central directory",
        ));
    }
    let name_end = CENTRAL_LEN + h.name_len as usize;
    let mut e = CentralEntry {
        made_by: h.made_by,
        flags: h.flags,
        method: h.method,
        dos_time: h.dos_time,
        dos_date: h.dos_date,
        crc: h.crc,
        csize: h.csize as u64,
        size: h.size as u64,
        disk: h.disk_start as u32,
        external: h.external,
        local_offset: h.local_offset as u64,
        raw_name: b[CENTRAL_LEN..name_end].to_vec(),
        ..Default::default()
    };
    apply_extras(&mut e, &b[name_end..name_end + h.extra_len as usize]);
    Ok((e, total))
}

/// Applies the extra fields of a central record to `e`. Unknown ids are
/// skipped; a malformed tail is ignored, as unzip does.
pub fn apply_extras(e: &mut CentralEntry, x: &[u8]) {
    for (id, d) in fields(x) {
        match id {
            extra::ZIP64 => {
                // Present only for the fields saturated in the record.
                let want = [
                    e.size == 0xFFFF_FFFF,
                    e.csize == 0xFFFF_FFFF,
                    e.local_offset == 0xFFFF_FFFF,
                ];
                let (vals, disk) = extra::decode_zip64(d, want, e.disk == 0xFFFF);
                for (slot, v) in [&mut e.size, &mut e.csize, &mut e.local_offset]
                    .into_iter()
                    .zip(vals)
                {
                    if let Some(v) = v {
                        *slot = v;
                        e.zip64 = true;
                    }
                }
                if let Some(disk) = disk {
                    e.disk = disk;
                }
            }
            extra::EXTENDED_TIMESTAMP => {
                if let Some(t) = extra::decode_extended_timestamp(d) {
                    e.ut_mtime = Some(t);
                }
            }
            extra::INFOZIP_UNIX_OLD | extra::PKWARE_UNIX => {
                if let Some((t, ids)) = extra::decode_old_unix(d) {
                    e.old_unix_mtime = Some(t);
                    if e.uid_gid.is_none() {
                        e.uid_gid = ids;
                    }
                }
            }
            extra::INFOZIP_UNIX => {
                if let Some(ids) = extra::decode_infozip_unix(d) {
                    e.uid_gid = Some(ids);
                }
            }
            extra::UNICODE_PATH => {
                if let Some(n) = extra::decode_unicode_path(d, &e.raw_name) {
                    e.unicode_name = Some(n);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zip::extra::{extended_timestamp, infozip_unix, zip64};

    /// Zip64 sizes and offset, UT time and ux ids as packfs writes them,
    /// applied to a record whose 32-bit fields are saturated. (Extras from
    /// other writers, CRC-checked Unicode Path among them, are tested with
    /// the reader in `mountfs/src/zip/records.rs`.)
    #[test]
    fn a_record_with_extras_parses_with_them_applied() {
        let mut x = Vec::new();
        zip64(&mut x, &[5_000_000_000, 7, 6_000_000_000]);
        extended_timestamp(&mut x, 4_000_000_000);
        infozip_unix(&mut x, 1234, 5678);
        let h = CentralHeader {
            made_by: VERSION_MADE_BY,
            csize: 0xFFFF_FFFF,
            size: 0xFFFF_FFFF,
            local_offset: 0xFFFF_FFFF,
            name_len: 3,
            extra_len: x.len() as u16,
            comment_len: 2,
            external: 0o100644 << 16,
            ..Default::default()
        };
        let mut b = Vec::new();
        h.encode(&mut b);
        b.extend_from_slice(b"a/b");
        b.extend_from_slice(&x);
        b.extend_from_slice(b"hi");
        let (e, n) = parse_central(&b).unwrap();
        assert_eq!(n, b.len());
        assert_eq!(e.raw_name, b"a/b");
        assert_eq!(
            (e.size, e.csize, e.local_offset, e.zip64),
            (5_000_000_000, 7, 6_000_000_000, true)
        );
        assert_eq!(e.ut_mtime, Some(4_000_000_000));
        assert_eq!(e.uid_gid, Some((1234, 5678)));
        assert_eq!(e.unix_mode(), Some(0o100644));
        // Cut inside the comment: an error, not a panic.
        assert!(parse_central(&b[..b.len() - 1]).is_err());
    }
}
