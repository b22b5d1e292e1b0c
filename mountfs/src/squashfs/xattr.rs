//! Extended attributes: the xattr id table maps an inode's xattr index to a
//! run of key/value records (`packfs_format::squashfs::xattr`) in the
//! key/value area; this module follows that run, and out-of-line values.

use super::blocks::Blocks;
use super::meta::MetaCursor;
use super::tables::Tables;
use crate::error::{FsError, Result};
use packfs_format::bytes::Input;
use packfs_format::squashfs::metadata::split_ref;
use packfs_format::squashfs::xattr::{prefix, XattrKey};
use packfs_format::squashfs::{INVALID_TABLE, INVALID_XATTR, XATTR_PREFIX_MASK};

/// Largest value accepted (bounds the allocation a corrupt length causes).
const MAX_VALUE: usize = 1 << 24;

/// Absolute position of block `block` of the key/value area. Both come
/// from the image: a corrupt area start near `u64::MAX` plus a reference's
/// block overflowed (a panic with overflow checks, a wrap to some other
/// position without; tests/corrupt_corpus.rs, `kv-start-*`).
fn kv_block(tables: &Tables, block: u64) -> Result<u64> {
    tables
        .xattr_kv_start
        .checked_add(block)
        .ok_or_else(|| FsError::corrupt("xattr reference beyond the end of the image"))
}

/// All xattrs of an inode as (full name, value), in stored order.
pub fn read_xattrs(
    blocks: &Blocks,
    tables: &Tables,
    xattr_table_start: u64,
    xattr_idx: u32,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    if xattr_idx == INVALID_XATTR || xattr_table_start == INVALID_TABLE {
        return Ok(Vec::new());
    }
    let entry = tables.xattr_entry(blocks, xattr_idx)?;
    let (block, off) = split_ref(entry.xattr_ref);
    let mut c = MetaCursor::new(blocks, kv_block(tables, block)?, off)?;
    let mut out = Vec::with_capacity(entry.count.min(1024) as usize);
    for _ in 0..entry.count {
        let key = XattrKey::decode(&mut c)?;
        let Some(prefix) = prefix(key.kind) else {
            return Err(FsError::corrupt(format!(
                "unknown xattr prefix type {}",
                key.kind & XATTR_PREFIX_MASK
            )));
        };
        let mut name = prefix.to_vec();
        name.extend_from_slice(&c.bytes(key.name_len as usize)?);
        let vlen = c.u32()? as usize;
        let value = if key.out_of_line() {
            if vlen != 8 {
                return Err(FsError::corrupt(
                    "out-of-line xattr value reference is not 8 bytes",
                ));
            }
            let vref = c.u64()?;
            let (vb, vo) = split_ref(vref);
            let mut vc = MetaCursor::new(blocks, kv_block(tables, vb)?, vo)?;
            let n = vc.u32()? as usize;
            if n > MAX_VALUE {
                return Err(FsError::corrupt("xattr value larger than 16 MiB"));
            }
            vc.bytes(n)?
        } else {
            if vlen > MAX_VALUE {
                return Err(FsError::corrupt("xattr value larger than 16 MiB"));
            }
            c.bytes(vlen)?
        };
        out.push((name, value));
    }
    Ok(out)
}
