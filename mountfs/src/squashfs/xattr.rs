//! Extended attributes: the xattr id table maps an inode's xattr index to a
//! run of key/value pairs in the key/value area.
//!
//! Key: `u16 type` (0 user, 1 trusted, 2 security; bit 8 = value stored out
//! of line), `u16 name length`, name without its prefix. Value: `u32 length`,
//! bytes; an out-of-line value is a u64 reference to another value record.

use super::format::*;
use super::reader::SquashFs;
use crate::error::{FsError, Result};

impl SquashFs {
    /// All xattrs of an inode as (full name, value), in stored order.
    pub fn xattrs(&self, xattr_idx: u32) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        if xattr_idx == INVALID_XATTR || self.sb.xattr_id_table_start == INVALID_TABLE {
            return Ok(Vec::new());
        }
        let (xref, count, _size) = self.xattr_entry(xattr_idx)?;
        let (block, off) = split_ref(xref);
        let mut c = self.meta_cursor(self.xattr_kv_start + block, off)?;
        let mut out = Vec::with_capacity(count.min(1024) as usize);
        for _ in 0..count {
            let ty = c.u16()?;
            let name_len = c.u16()? as usize;
            let prefix: &[u8] = match ty & XATTR_PREFIX_MASK {
                XATTR_USER => b"user.",
                XATTR_TRUSTED => b"trusted.",
                XATTR_SECURITY => b"security.",
                other => {
                    return Err(FsError::corrupt(format!(
                        "unknown xattr prefix type {other}"
                    )))
                }
            };
            let mut name = prefix.to_vec();
            name.extend_from_slice(&c.bytes(name_len)?);
            let vlen = c.u32()? as usize;
            let value = if ty & XATTR_VALUE_OOL != 0 {
                if vlen != 8 {
                    return Err(FsError::corrupt(
                        "out-of-line xattr value reference is not 8 bytes",
                    ));
                }
                let vref = c.u64()?;
                let (vb, vo) = split_ref(vref);
                let mut vc = self.meta_cursor(self.xattr_kv_start + vb, vo)?;
                let n = vc.u32()? as usize;
                if n > 1 << 24 {
                    return Err(FsError::corrupt("xattr value larger than 16 MiB"));
                }
                vc.bytes(n)?
            } else {
                if vlen > 1 << 24 {
                    return Err(FsError::corrupt("xattr value larger than 16 MiB"));
                }
                c.bytes(vlen)?
            };
            out.push((name, value));
        }
        Ok(out)
    }
}
