//! Extended attributes: key and value records of the key/value area.
//!
//! Key: `u16 type` (namespace in the low byte: 0 user, 1 trusted,
//! 2 security; bit 8 = value stored out of line), `u16 name length`, the
//! name without its namespace prefix. Value: `u32 length`, bytes; an
//! out-of-line value is 8 bytes, a reference to another value record
//! (mksquashfs uses this to store a repeated large value once).

use super::*;
use crate::bytes::{put_u16, put_u32, Input};

/// The namespaces SquashFS can store, with the prefix their names carry.
pub const PREFIXES: [(u16, &[u8]); 3] = [
    (XATTR_USER, b"user."),
    (XATTR_TRUSTED, b"trusted."),
    (XATTR_SECURITY, b"security."),
];

/// The prefix of namespace `kind` (low byte of a key's type), if known.
pub fn prefix(kind: u16) -> Option<&'static [u8]> {
    PREFIXES
        .iter()
        .find(|(k, _)| *k == kind & XATTR_PREFIX_MASK)
        .map(|(_, p)| *p)
}

/// Splits a full attribute name into (namespace, name without prefix);
/// `None` for namespaces SquashFS cannot store.
pub fn split_name(full: &[u8]) -> Option<(u16, &[u8])> {
    PREFIXES
        .iter()
        .find_map(|(k, p)| full.strip_prefix(*p).map(|rest| (*k, rest)))
}

/// The 4 fixed bytes of a key; the name (`name_len` bytes) follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XattrKey {
    /// Namespace in the low byte, [`XATTR_VALUE_OOL`] when the value is a reference.
    pub kind: u16,
    /// Length of the name after the prefix.
    pub name_len: u16,
}

impl XattrKey {
    pub const SIZE: usize = 4;

    pub fn encode(kind: u16, name: &[u8], out: &mut Vec<u8>) {
        put_u16(out, kind);
        put_u16(out, name.len() as u16);
        out.extend_from_slice(name);
    }

    pub fn decode<I: Input>(c: &mut I) -> Result<Self, I::Error> {
        Ok(XattrKey {
            kind: c.u16()?,
            name_len: c.u16()?,
        })
    }

    pub fn out_of_line(&self) -> bool {
        self.kind & XATTR_VALUE_OOL != 0
    }
}

/// Appends a value record (u32 length, then the bytes).
pub fn encode_value(value: &[u8], out: &mut Vec<u8>) {
    put_u32(out, value.len() as u32);
    out.extend_from_slice(value);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::SliceInput;

    #[test]
    fn key_and_value_round_trip() {
        let mut out = Vec::new();
        XattrKey::encode(XATTR_SECURITY, b"selinux", &mut out);
        encode_value(b"ctx", &mut out);
        let mut c = SliceInput::new(&out, "xattr");
        let k = XattrKey::decode(&mut c).unwrap();
        assert_eq!(
            (k.kind, k.name_len, k.out_of_line()),
            (XATTR_SECURITY, 7, false)
        );
        assert_eq!(c.bytes(7).unwrap(), b"selinux");
        let n = c.u32().unwrap() as usize;
        assert_eq!(c.bytes(n).unwrap(), b"ctx");
    }

    #[test]
    fn names_split_by_namespace() {
        assert_eq!(split_name(b"user.x"), Some((XATTR_USER, &b"x"[..])));
        assert_eq!(
            split_name(b"security.selinux"),
            Some((XATTR_SECURITY, &b"selinux"[..]))
        );
        assert_eq!(split_name(b"system.posix_acl_access"), None);
        assert_eq!(
            prefix(XATTR_TRUSTED | XATTR_VALUE_OOL),
            Some(&b"trusted."[..])
        );
        assert_eq!(prefix(7), None);
    }
}
