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
    use crate::zip::extra::{extended_timestamp, infozip_unix, zip64, UNIX_EXTRAS_LEN};

    #[test]
    fn written_extras_read_back() {
        let mut x = Vec::new();
        zip64(&mut x, &[5_000_000_000, 7]);
        extended_timestamp(&mut x, 4_000_000_000);
        infozip_unix(&mut x, 1234, 5678);
        assert_eq!(x.len(), 4 + 16 + UNIX_EXTRAS_LEN as usize);
        x.extend_from_slice(&[0xAA, 0xBB, 200, 0, 1]); // truncated field: ignored
        let mut e = CentralEntry {
            size: 0xFFFF_FFFF,
            csize: 0xFFFF_FFFF,
            local_offset: 3,
            ..Default::default()
        };
        apply_extras(&mut e, &x);
        assert_eq!((e.size, e.csize, e.local_offset), (5_000_000_000, 7, 3));
        assert!(e.zip64);
        assert_eq!(e.ut_mtime, Some(4_000_000_000));
        assert_eq!(e.uid_gid, Some((1234, 5678)));
    }

    #[test]
    fn unicode_path_extra_needs_matching_crc() {
        let raw = b"x?y".to_vec();
        let mut extra = vec![0x75, 0x70];
        let uname = "xäy".as_bytes();
        extra.extend_from_slice(&((5 + uname.len()) as u16).to_le_bytes());
        extra.push(1);
        extra.extend_from_slice(&crc32fast::hash(&raw).to_le_bytes());
        extra.extend_from_slice(uname);
        let mut e = CentralEntry {
            raw_name: raw.clone(),
            ..Default::default()
        };
        apply_extras(&mut e, &extra);
        assert_eq!(e.unicode_name.as_deref(), Some(uname));
        let mut e2 = CentralEntry {
            raw_name: b"other".to_vec(),
            ..Default::default()
        };
        apply_extras(&mut e2, &extra);
        assert_eq!(e2.unicode_name, None);
    }
}
