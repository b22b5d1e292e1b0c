//! Decoding a FUSE request and answering it through [`Ops`], shared by the
//! two transports that read the kernel ABI themselves: the io_uring queues
//! ([`super::uring`]) and packfs's own `/dev/fuse` threads ([`super::dev`]).
//! Both hand over the operation's own header (`op_in`, as the kernel lays
//! it out after `struct fuse_in_header`) and the request's payload (names)
//! at the start of the answer buffer; only the operations packfs serves are
//! decoded, anything else is answered ENOSYS, as `fuser`'s defaults do.

use super::abi::*;
use crate::fs::Image;
use crate::fuse::ops::{Lookup, Ops, Xattr, TTL};

/// Who may use the mount besides its owner (`-o allow_root`): as `fuser`
/// does on `/dev/fuse`, requests other users may send without a uid of
/// their own (reads of pages already opened) are let through.
#[derive(Clone, Copy, Debug)]
pub struct Access {
    pub owner: u32,
    pub root_too: bool,
}

/// `-o allow_root`: another user's request, other than those the kernel
/// sends on behalf of no particular user.
pub fn refused(a: Access, h: &InHeader) -> bool {
    h.uid != a.owner
        && !(a.root_too && h.uid == 0)
        && !matches!(
            h.opcode,
            READ | READDIR | READDIRPLUS | RELEASE | RELEASEDIR
        )
}

/// The bytes up to the first NUL (names arrive NUL-terminated).
fn c_name(b: &[u8]) -> &[u8] {
    b.iter().position(|&c| c == 0).map_or(b, |n| &b[..n])
}

/// Decodes one request, answers it through `ops` into `out` (the payload
/// buffer, which held the request's own payload of `in_len` bytes) and
/// returns the answer's length, or an errno.
pub fn dispatch<I: Image>(
    ops: &Ops<I>,
    h: &InHeader,
    op_in: &[u8; 128],
    out: &mut [u8],
    in_len: usize,
) -> crate::fuse::ops::Answer<usize> {
    let node = h.nodeid;
    match h.opcode {
        LOOKUP => {
            let name = c_name(&out[..in_len]).to_vec();
            match ops.lookup(node, &name)? {
                Lookup::Found(a) => put_entry(out, Some(&a), TTL),
                Lookup::Negative(ttl) => put_entry(out, None, ttl),
            }
            Ok(ENTRY_OUT)
        }
        GETATTR => {
            put_attr_out(out, &ops.getattr(node)?, TTL);
            Ok(ATTR_OUT)
        }
        READLINK => copy(out, &ops.readlink(node)?),
        OPEN | OPENDIR => ops.open().map(|()| 0),
        RELEASE | RELEASEDIR => Ok(0),
        READ => {
            let (offset, size) = (u64_at(op_in, 8), u32_at(op_in, 16));
            copy(out, &ops.read(node, offset, size)?)
        }
        READDIR | READDIRPLUS => {
            let (cookie, size) = (u64_at(op_in, 8), u32_at(op_in, 16) as usize);
            let end = size.min(out.len());
            let out = &mut out[..end];
            let mut at = 0;
            if h.opcode == READDIR {
                ops.readdir(node, cookie, &mut |e| {
                    put_dirent(out, &mut at, e.node, e.cookie, dirent_type(e.kind), &e.name)
                })?;
            } else {
                ops.readdirplus(node, cookie, &mut |e, a| {
                    let start = at;
                    if at + ENTRY_OUT > out.len() {
                        return false;
                    }
                    at += ENTRY_OUT;
                    if !put_dirent(out, &mut at, a.node, e.cookie, dirent_type(a.kind), &e.name) {
                        at = start;
                        return false;
                    }
                    put_entry(&mut out[start..], Some(a), TTL);
                    true
                })?;
            }
            Ok(at)
        }
        STATFS => {
            let s = ops.statfs();
            out[..STATFS_OUT].fill(0);
            put64(out, 0, s.blocks);
            put64(out, 24, s.files);
            put32(out, 40, s.block_size);
            put32(out, 44, s.name_max);
            put32(out, 48, s.block_size);
            Ok(STATFS_OUT)
        }
        GETXATTR | LISTXATTR => {
            let size = u32_at(op_in, 0);
            let x = if h.opcode == GETXATTR {
                let name = c_name(&out[..in_len]).to_vec();
                ops.getxattr(node, &name, size)?
            } else {
                ops.listxattr(node, size)?
            };
            match x {
                Xattr::Size(n) => {
                    out[..8].fill(0);
                    put32(out, 0, n);
                    Ok(8)
                }
                Xattr::Data(v) => copy(out, &v),
            }
        }
        ACCESS => ops.access(u32_at(op_in, 0)).map(|()| 0),
        IOCTL => ops.ioctl().map(|()| 0),
        _ => Err(libc::ENOSYS),
    }
}

/// Copies an answer into the payload buffer (sized for the largest
/// request the kernel sends, so an answer to it always fits).
fn copy(out: &mut [u8], data: &[u8]) -> crate::fuse::ops::Answer<usize> {
    if data.len() > out.len() {
        log::error!(
            "answer of {} bytes exceeds the FUSE payload buffer",
            data.len()
        );
        return Err(libc::EIO);
    }
    out[..data.len()].copy_from_slice(data);
    Ok(data.len())
}
