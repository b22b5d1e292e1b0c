//! A tar stream of many tiny files, made on the fly: the input of the
//! packer's scale test (`tests/suite/scale.rs`) and of the runs in
//! docs/benchmarks/scale.md (`src/bin/tarstream.rs` writes it to stdout). Ten
//! million entries are ten gigabytes of tar; nothing is stored, and every
//! name and content is a function of the entry's index, so a reader can
//! check an image against the stream without keeping it.
//!
//! Layout: `DIR/FILE` with `per_dir` files a directory, each directory
//! given by a member of its own before its files (as `tar -c` of a tree
//! writes it); file `i` holds 14 to 98 bytes that begin with `i` in hex,
//! so no two files are alike and whole-file dedup finds nothing.

use std::io::{self, Write};

/// The mtime of every member.
pub const MTIME: u64 = 1_700_000_000;

/// The shape of a stream: `files` files, `per_dir` to a directory.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub files: u64,
    pub per_dir: u64,
}

impl Layout {
    pub fn dirs(&self) -> u64 {
        self.files.div_ceil(self.per_dir.max(1))
    }

    /// The name of directory `d`.
    pub fn dir_name(d: u64) -> String {
        format!("d{d:06}")
    }

    /// The name of file `i` inside its directory.
    pub fn file_name(&self, i: u64) -> String {
        format!("f{:07}", i % self.per_dir.max(1))
    }

    /// The path of file `i` in the image.
    pub fn file_path(&self, i: u64) -> String {
        format!(
            "{}/{}",
            Self::dir_name(i / self.per_dir.max(1)),
            self.file_name(i)
        )
    }
}

/// The bytes of file `i`.
pub fn content(i: u64, out: &mut Vec<u8>) {
    out.clear();
    let len = 14 + (i.wrapping_mul(7919) % 85) as usize;
    write!(out, "{i:x}:").expect("a Vec takes any write");
    let filler = b"packfs scale test, tiny file content. ";
    while out.len() < len {
        let take = (len - out.len()).min(filler.len());
        out.extend_from_slice(&filler[..take]);
    }
}

/// A ustar header for `name` (at most 100 bytes), `size` bytes, of type
/// `kind` (`b'0'` file, `b'5'` directory).
fn header(name: &str, size: u64, kind: u8, mode: u32) -> [u8; 512] {
    member_header(name, size, kind, mode, "")
}

/// A ustar header for `name` as [`write`] makes them, of any type `kind`
/// (`b'1'` a hard link, `b'2'` a symlink, to `link`), for streams that add
/// members to one of [`write`]'s.
pub fn member_header(name: &str, size: u64, kind: u8, mode: u32, link: &str) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[157..157 + link.len()].copy_from_slice(link.as_bytes());
    let octal = |h: &mut [u8; 512], at: usize, width: usize, v: u64| {
        let s = format!("{v:0w$o}\0", w = width - 1);
        h[at..at + width].copy_from_slice(s.as_bytes());
    };
    h[..name.len()].copy_from_slice(name.as_bytes());
    octal(&mut h, 100, 8, mode as u64);
    octal(&mut h, 108, 8, 0);
    octal(&mut h, 116, 8, 0);
    octal(&mut h, 124, 12, size);
    octal(&mut h, 136, 12, MTIME);
    h[156] = kind;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[265..269].copy_from_slice(b"root");
    h[297..301].copy_from_slice(b"root");
    h[148..156].copy_from_slice(b"        ");
    let sum: u64 = h.iter().map(|&b| b as u64).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    h
}

/// Writes the stream of `layout` to `w`, end blocks included.
pub fn write(layout: Layout, w: &mut impl Write) -> io::Result<()> {
    let mut buf = Vec::with_capacity(1 << 20);
    let mut body = Vec::new();
    let per_dir = layout.per_dir.max(1);
    for i in 0..layout.files {
        if i % per_dir == 0 {
            let d = format!("{}/", Layout::dir_name(i / per_dir));
            buf.extend_from_slice(&header(&d, 0, b'5', 0o755));
        }
        content(i, &mut body);
        buf.extend_from_slice(&header(
            &layout.file_path(i),
            body.len() as u64,
            b'0',
            0o644,
        ));
        buf.extend_from_slice(&body);
        buf.resize(buf.len().next_multiple_of(512), 0);
        if buf.len() >= 1 << 20 {
            w.write_all(&buf)?;
            buf.clear();
        }
    }
    buf.extend_from_slice(&[0u8; 1024]);
    w.write_all(&buf)?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contents_are_distinct_and_sized() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        content(0xabc, &mut a);
        content(0xabd, &mut b);
        assert_ne!(a, b);
        for i in 0..1000 {
            content(i, &mut a);
            assert!((14..=98).contains(&a.len()));
        }
    }

    #[test]
    fn stream_is_whole_records() {
        let mut out = Vec::new();
        write(
            Layout {
                files: 10,
                per_dir: 4,
            },
            &mut out,
        )
        .unwrap();
        // 3 directories, 10 files of one data record each, 2 end records.
        assert_eq!(out.len(), (3 + 10 * 2 + 2) * 512);
    }
}
