//! The compact in-memory index of a ZIP archive's central directory.
//!
//! One fixed-size [`Node`] per entry (64 bytes), base names in one
//! arena, and every directory's children as a range of one `u32` array
//! sorted by name. Node index 0 is the root; node id = index + 1, so entry
//! nodes start at id 2.
//!
//! [`Index::build`] runs in phases, each a function with its own tests:
//!
//! 1. `read_central`: the central records, parsed once, become pending
//!    nodes in central order; their normalised paths (components joined by
//!    NUL so that plain byte order is component-wise order) go to a
//!    temporary arena.
//! 2. `tree::preorder`: sorting the entries by (path, central order) gives
//!    a depth-first pre-order with siblings by name.
//! 3. `tree::build_tree`: one walk over that order with a stack of open
//!    directories synthesises missing directories, resolves duplicates
//!    (last wins) and file/directory clashes (directory wins), and emits
//!    the nodes, every parent before its children.
//! 4. `layout::lay_out_children`: a counting pass lays the children ranges.
//! 5. `layout::date_synthesised_dirs`: directories without an entry take
//!    their newest child's time.
//! 6. `tally`: the counts `packfs info` shows.
//!
//! O(n log n) for the sort, O(n) otherwise; no per-entry hash map or string.

use super::records::*;
use crate::error::{FsError, Result};
use crate::source::ImageSource;
use packfs_format::zip::entry::{parse_central, CentralEntry};
use packfs_format::zip::unzip::kind_and_perm;
use packfs_format::zip::*;

mod layout;
mod node;
mod tree;

use node::Pending;
pub use node::{Node, NODE_ENCRYPTED, NODE_LZMA_EOS, NODE_SYNTH, S_IFMT};

/// Archive statistics for `packfs info`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZipInfo {
    /// Records in the central directory.
    pub entries: u64,
    /// Nodes visible in the mounted tree (files, directories, symlinks).
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// Directories that had no entry of their own.
    pub synthesised_dirs: u64,
    /// Entries not shown (bad names, duplicates, clashes).
    pub skipped: u64,
    pub encrypted: u64,
    pub uncompressed_bytes: u64,
    pub compressed_bytes: u64,
    pub zip64: bool,
    /// (method id, name, number of entries), by id.
    pub methods: Vec<(u16, &'static str, u64)>,
    /// Bytes before the archive (self-extractor stub).
    pub prefix_bytes: u64,
    /// Bytes of index memory (nodes, children, names).
    pub index_bytes: u64,
}

pub struct Index {
    pub nodes: Vec<Node>,
    pub children: Vec<u32>,
    pub names: Vec<u8>,
    pub info: ZipInfo,
}

fn name_err(e: BadName) -> &'static str {
    match e {
        BadName::Empty => "empty name",
        BadName::DotDot => "'..' component (would escape the root)",
        BadName::TooLong => "a component longer than 255 bytes",
        BadName::Nul => "a NUL byte in the name",
    }
}

impl Index {
    pub fn name(&self, n: &Node) -> &[u8] {
        &self.names[n.name_off as usize..n.name_off as usize + n.name_len as usize]
    }

    pub fn children_of(&self, n: &Node) -> &[u32] {
        if !n.is_dir() {
            return &[];
        }
        let s = n.child_start() as usize;
        self.children
            .get(s..s + n.child_len() as usize)
            .unwrap_or(&[])
    }

    /// Reads and indexes the central directory: the phases of the module
    /// documentation, in order.
    pub fn build(src: &dyn ImageSource, default_owner: (u32, u32)) -> Result<Index> {
        let Central {
            pend,
            paths,
            mut info,
        } = read_central(src, default_owner)?;
        let order = tree::preorder(&pend, &paths);
        let tree::Tree {
            mut nodes,
            mut names,
            skipped,
        } = tree::build_tree(&pend, &order, &paths, default_owner)?;
        info.skipped += skipped;
        // The paths are only needed to build the tree; free them before the
        // children array is allocated.
        drop(order);
        drop(pend);
        drop(paths);
        let children = layout::lay_out_children(&mut nodes)?;
        layout::date_synthesised_dirs(&mut nodes, &children);
        tally(&nodes, &mut info);
        nodes.shrink_to_fit();
        names.shrink_to_fit();
        info.index_bytes =
            (nodes.len() * std::mem::size_of::<Node>() + children.len() * 4 + names.len()) as u64;
        Ok(Index {
            nodes,
            children,
            names,
            info,
        })
    }
}

/// Phase 1's output.
struct Central {
    /// One per accepted record, in central directory order.
    pend: Vec<Pending>,
    /// The arena the pending paths point into.
    paths: Vec<u8>,
    /// `entries`, `zip64`, `prefix_bytes`, `encrypted` and `methods` final;
    /// `skipped` so far (the rejected names).
    info: ZipInfo,
}

/// Phase 1: reads the end records and walks the central directory once.
///
/// Input: the image. Output: a [`Pending`] per record whose name survives
/// [`normalise`], in central order, with its path in the arena: non-empty,
/// no NUL, no `..`, `.` or empty components, none longer than 255 bytes.
/// Records with a bad name are logged and counted as skipped. Fails on the
/// first record that does not parse (naming its number and offset), on a
/// record on another disk, and on a local header offset that overflows once
/// shifted by the prepended bytes.
fn read_central(src: &dyn ImageSource, default_owner: (u32, u32)) -> Result<Central> {
    let eocd = read_eocd(src)?;
    crate::source::range_check(src.len(), eocd.cd_offset, eocd.cd_size as usize).map_err(|_| {
        FsError::corrupt(format!(
            "central directory ({} bytes at {}) is past the end of the file",
            eocd.cd_size, eocd.cd_offset
        ))
    })?;
    let mut cd = CdWindow::new(src, eocd.cd_offset, eocd.cd_size);
    // The record count may lie; the directory's size bounds how many
    // records can really be there.
    let cap = eocd.entries.min(eocd.cd_size / CENTRAL_LEN as u64) as usize;
    let mut info = ZipInfo {
        zip64: eocd.zip64,
        prefix_bytes: eocd.shift,
        ..Default::default()
    };
    let mut paths: Vec<u8> = Vec::new();
    let mut pend: Vec<Pending> = Vec::with_capacity(cap);
    let mut methods: Vec<(u16, u64)> = Vec::new();
    let mut at = 0usize;
    while (at as u64) < eocd.cd_size {
        let (e, n) = parse_central(cd.from(at as u64)?).map_err(|err| {
            FsError::corrupt(format!(
                "central directory entry {} (at {}): {err}",
                info.entries,
                eocd.cd_offset + at as u64
            ))
        })?;
        at += n;
        info.entries += 1;
        info.zip64 |= e.zip64;
        match methods.iter_mut().find(|(m, _)| *m == e.method) {
            Some((_, c)) => *c += 1,
            None => methods.push((e.method, 1)),
        }
        if e.disk != 0 {
            return Err(FsError::Unsupported(
                "multi-disk (spanned) ZIP archives".into(),
            ));
        }
        let name = decode_name(&e);
        let off = paths.len() as u64;
        let is_dir_name = match normalise(&name, &mut paths) {
            Ok(d) => d,
            Err(why) => {
                log::warn!(
                    "zip: skipping entry {:?}: {}",
                    String::from_utf8_lossy(&name),
                    name_err(why)
                );
                info.skipped += 1;
                continue;
            }
        };
        let path_len = u32::try_from(paths.len() as u64 - off)
            .map_err(|_| FsError::corrupt("entry name too long"))?;
        let (node, is_dir) = entry_node(&e, is_dir_name, default_owner, eocd.shift)?;
        if node.encrypted() {
            info.encrypted += 1;
        }
        pend.push(Pending {
            node,
            path_off: off,
            path_len,
            is_dir,
        });
    }
    methods.sort_unstable();
    info.methods = methods
        .into_iter()
        .map(|(m, c)| (m, method_name(m), c))
        .collect();
    Ok(Central { pend, paths, info })
}

/// The central directory, read through a window of at most [`CD_WINDOW`]
/// bytes: a million-entry archive has a directory of ~100 MB, which the
/// index (docs/ARCHITECTURE.md, "ZIP index memory") must not double while it is built.
struct CdWindow<'a> {
    src: &'a dyn ImageSource,
    /// Absolute position and size of the central directory.
    start: u64,
    size: u64,
    buf: Vec<u8>,
    /// Offset in the directory of `buf[0]`.
    at: u64,
}

/// Bytes read at a time; more than the largest record (46 bytes and three
/// 64 KiB fields), so a record is always whole in one window.
const CD_WINDOW: u64 = 1 << 20;
const MAX_RECORD: u64 = (CENTRAL_LEN + 3 * 0xFFFF) as u64;

impl<'a> CdWindow<'a> {
    fn new(src: &'a dyn ImageSource, start: u64, size: u64) -> Self {
        CdWindow {
            src,
            start,
            size,
            buf: Vec::new(),
            at: 0,
        }
    }

    /// The directory's bytes from offset `at`: at least a whole record's
    /// worth, or up to the directory's end.
    fn from(&mut self, at: u64) -> Result<&[u8]> {
        let want_end = (at + MAX_RECORD).min(self.size);
        if at < self.at || want_end > self.at + self.buf.len() as u64 {
            let len = (self.size - at).min(CD_WINDOW.max(MAX_RECORD)) as usize;
            self.buf.resize(len, 0);
            self.src.read_at(self.start + at, &mut self.buf)?;
            self.at = at;
        }
        Ok(&self.buf[(at - self.at) as usize..])
    }
}

/// One central record as a node, with what unzip would extract: returns the
/// node (no name or parent yet) and whether it is a directory.
///
/// Type and permissions as unzip gives them (`kind_and_perm`); a directory
/// carries no sizes. Owner from the uid/gid extra, else `default_owner`. The local header offset is moved by
/// `shift`, the bytes prepended to the archive.
fn entry_node(
    e: &CentralEntry,
    is_dir_name: bool,
    default_owner: (u32, u32),
    shift: u64,
) -> Result<(Node, bool)> {
    let (kind, perm) = kind_and_perm(e, is_dir_name);
    let is_dir = kind == libc::S_IFDIR;
    let (uid, gid) = e.uid_gid.unwrap_or(default_owner);
    let local_offset = e
        .local_offset
        .checked_add(shift)
        .ok_or_else(|| FsError::corrupt("local header offset overflows"))?;
    let mut flags = e.flags & NODE_LZMA_EOS;
    if e.encrypted() {
        flags |= NODE_ENCRYPTED;
    }
    let node = Node {
        local_offset,
        csize: if is_dir { 0 } else { e.csize },
        size: if is_dir { 0 } else { e.size },
        mtime: entry_mtime(e),
        name_off: 0,
        parent: 0,
        crc: e.crc,
        uid,
        gid,
        mode: kind | perm,
        name_len: 0,
        method: e.method,
        flags,
    };
    Ok((node, is_dir))
}

/// Phase 6: the counts of the finished tree for `packfs info`.
///
/// Input: the nodes (root first, which is not counted). Output: `files`,
/// `dirs`, `symlinks`, `synthesised_dirs` and the byte totals of `info`
/// incremented; directories contribute no bytes.
fn tally(nodes: &[Node], info: &mut ZipInfo) {
    for node in &nodes[1..] {
        if node.is_dir() {
            info.dirs += 1;
            if node.flags & NODE_SYNTH != 0 {
                info.synthesised_dirs += 1;
            }
        } else {
            if node.is_symlink() {
                info.symlinks += 1;
            } else {
                info.files += 1;
            }
            info.uncompressed_bytes += node.size;
            info.compressed_bytes += node.csize;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::MemSource;
    use packfs_format::zip::time::DOS_1980_01_01;

    /// The central record of `e` (its name from `raw_name`, then `extra`).
    fn record(e: &CentralEntry, extra: &[u8]) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&SIG_CENTRAL.to_le_bytes());
        r.extend_from_slice(&e.made_by.to_le_bytes());
        r.extend_from_slice(&20u16.to_le_bytes());
        r.extend_from_slice(&e.flags.to_le_bytes());
        r.extend_from_slice(&e.method.to_le_bytes());
        r.extend_from_slice(&e.dos_time.to_le_bytes());
        r.extend_from_slice(&e.dos_date.to_le_bytes());
        r.extend_from_slice(&e.crc.to_le_bytes());
        r.extend_from_slice(&(e.csize as u32).to_le_bytes());
        r.extend_from_slice(&(e.size as u32).to_le_bytes());
        r.extend_from_slice(&(e.raw_name.len() as u16).to_le_bytes());
        r.extend_from_slice(&(extra.len() as u16).to_le_bytes());
        r.extend_from_slice(&0u16.to_le_bytes()); // comment length
        r.extend_from_slice(&(e.disk as u16).to_le_bytes());
        r.extend_from_slice(&0u16.to_le_bytes()); // internal attributes
        r.extend_from_slice(&e.external.to_le_bytes());
        r.extend_from_slice(&(e.local_offset as u32).to_le_bytes());
        r.extend_from_slice(&e.raw_name);
        r.extend_from_slice(extra);
        r
    }

    /// An archive of only a central directory, after `prefix` bytes that
    /// its offsets do not count.
    fn image(prefix: usize, records: &[Vec<u8>]) -> MemSource {
        let cd = records.concat();
        let mut img = vec![b'#'; prefix];
        img.extend_from_slice(&cd);
        img.extend_from_slice(&SIG_EOCD.to_le_bytes());
        img.extend_from_slice(&[0; 4]);
        img.extend_from_slice(&(records.len() as u16).to_le_bytes());
        img.extend_from_slice(&(records.len() as u16).to_le_bytes());
        img.extend_from_slice(&(cd.len() as u32).to_le_bytes());
        img.extend_from_slice(&0u32.to_le_bytes());
        img.extend_from_slice(&[0, 0]);
        MemSource(img)
    }

    /// A Unix entry named `name` with mode `mode` (type included).
    fn unix(name: &str, mode: u32) -> CentralEntry {
        CentralEntry {
            made_by: ((HOST_UNIX as u16) << 8) | 30,
            method: METHOD_DEFLATE,
            dos_date: DOS_1980_01_01.0,
            dos_time: DOS_1980_01_01.1,
            csize: 7,
            size: 11,
            crc: 0x1234,
            external: mode << 16,
            raw_name: name.as_bytes().to_vec(),
            ..Default::default()
        }
    }

    /// An entry from a DOS host (no Unix mode) with attributes `attrs`.
    fn dos(name: &str, attrs: u32, size: u64) -> CentralEntry {
        CentralEntry {
            made_by: 20,
            size,
            external: attrs,
            ..unix(name, 0)
        }
    }

    fn node_of(e: &CentralEntry) -> (Node, bool) {
        entry_node(e, e.raw_name.ends_with(b"/"), (1000, 100), 0).unwrap()
    }

    fn path<'a>(c: &'a Central, p: &Pending) -> &'a [u8] {
        &c.paths[p.path_off as usize..][..p.path_len as usize]
    }

    #[test]
    fn records_become_pending_nodes_in_central_order() {
        let mut a = unix("b/x", libc::S_IFREG | 0o644);
        a.local_offset = 100;
        let mut b = unix("a/", libc::S_IFDIR | 0o755);
        b.method = METHOD_STORED;
        let mut c = unix("./b//y", libc::S_IFREG | 0o644);
        c.local_offset = 200;
        let got = read_central(
            &image(5, &[record(&a, &[]), record(&b, &[]), record(&c, &[])]),
            (0, 0),
        )
        .unwrap();
        let paths: Vec<_> = got.pend.iter().map(|p| path(&got, p)).collect();
        assert_eq!(paths, [&b"b\0x"[..], b"a", b"b\0y"]);
        let dirs: Vec<_> = got.pend.iter().map(|p| p.is_dir).collect();
        assert_eq!(dirs, [false, true, false]);
        // Offsets count from the archive's start, after the 5-byte prefix.
        assert_eq!(got.pend[0].node.local_offset, 105);
        assert_eq!(got.pend[2].node.local_offset, 205);
        assert_eq!(
            got.info,
            ZipInfo {
                entries: 3,
                prefix_bytes: 5,
                methods: vec![
                    (METHOD_STORED, method_name(METHOD_STORED), 1),
                    (METHOD_DEFLATE, method_name(METHOD_DEFLATE), 2)
                ],
                ..Default::default()
            }
        );
    }

    #[test]
    fn bad_names_are_skipped_and_counted() {
        let long = "n".repeat(256);
        let names = ["../evil", "", "/", "ok", &long, "x\0y", "a/../b"];
        let recs: Vec<_> = names
            .iter()
            .map(|n| record(&unix(n, libc::S_IFREG | 0o644), &[]))
            .collect();
        let got = read_central(&image(0, &recs), (0, 0)).unwrap();
        assert_eq!(got.pend.len(), 1);
        assert_eq!(path(&got, &got.pend[0]), b"ok");
        // Rejected names leave nothing in the arena.
        assert_eq!(got.paths, b"ok");
        assert_eq!((got.info.entries, got.info.skipped), (7, 6));
        // Skipped entries still count their method.
        assert_eq!(got.info.methods, [(METHOD_DEFLATE, "deflate", 7)]);
    }

    #[test]
    fn a_record_that_does_not_parse_is_named_by_number_and_offset() {
        let first = record(&unix("a", libc::S_IFREG | 0o644), &[]);
        let mut second = record(&unix("b", libc::S_IFREG | 0o644), &[]);
        second[0] ^= 0xFF;
        let at = 3 + first.len();
        let Err(FsError::Corrupt(m)) = read_central(&image(3, &[first, second]), (0, 0)) else {
            panic!("a bad signature must fail");
        };
        assert_eq!(
            m,
            format!("central directory entry 1 (at {at}): bad central directory record signature")
        );
    }

    #[test]
    fn a_record_on_another_disk_is_unsupported() {
        let mut e = unix("a", libc::S_IFREG | 0o644);
        e.disk = 1;
        let Err(FsError::Unsupported(m)) = read_central(&image(0, &[record(&e, &[])]), (0, 0))
        else {
            panic!("multi-disk must fail");
        };
        assert_eq!(m, "multi-disk (spanned) ZIP archives");
    }

    #[test]
    fn unix_modes_give_type_and_permissions_as_they_are() {
        let cases = [
            ("f", libc::S_IFREG | 0o640, libc::S_IFREG | 0o640),
            // A type with no permission bits is kept as it is.
            ("z", libc::S_IFREG, libc::S_IFREG),
            // Permission bits with no type: a regular file.
            ("p", 0o600, libc::S_IFREG | 0o600),
            ("l", libc::S_IFLNK | 0o777, libc::S_IFLNK | 0o777),
            ("l0", libc::S_IFLNK, libc::S_IFLNK),
            ("d", libc::S_IFDIR | 0o750, libc::S_IFDIR | 0o750),
            ("s", libc::S_IFREG | 0o4755, libc::S_IFREG | 0o4755),
            // A trailing slash makes a directory whatever the type says.
            ("t/", libc::S_IFREG | 0o644, libc::S_IFDIR | 0o644),
        ];
        for (name, mode, want) in cases {
            let (n, is_dir) = node_of(&unix(name, mode));
            assert_eq!(n.mode, want, "{name}");
            assert_eq!(is_dir, want & S_IFMT == libc::S_IFDIR, "{name}");
        }
        // A link with an empty target (size 0) is an empty file, as unzip
        // makes it: the kernel resolves "" to the link's own directory.
        let mut empty = unix("e", libc::S_IFLNK | 0o777);
        empty.size = 0;
        empty.csize = 0;
        assert_eq!(node_of(&empty).0.mode, libc::S_IFREG | 0o644);
    }

    #[test]
    fn without_a_unix_mode_directories_get_0755_and_the_rest_0644() {
        let cases = [
            (dos("f", 0, 5), libc::S_IFREG | 0o644),
            (dos("d/", 0, 0), libc::S_IFDIR | 0o755),
            // The DOS directory attribute counts only on an empty entry.
            (dos("da", 0x10, 0), libc::S_IFDIR | 0o755),
            (dos("da5", 0x10, 5), libc::S_IFREG | 0o644),
            // Read-only, as unzip makes it.
            (dos("ro", 0x01, 5), libc::S_IFREG | 0o444),
            // A Unix host with no mode recorded is treated the same.
            (unix("u", 0), libc::S_IFREG | 0o644),
        ];
        for (e, want) in cases {
            assert_eq!(node_of(&e).0.mode, want, "{:?}", e.raw_name);
        }
        // With a Unix mode the DOS attribute is ignored.
        let mut e = unix("m", libc::S_IFREG | 0o644);
        e.external |= 0x10;
        e.size = 0;
        assert_eq!(node_of(&e).0.mode, libc::S_IFREG | 0o644);
    }

    #[test]
    fn entry_node_takes_sizes_owner_flags_and_time_from_the_record() {
        let mut e = unix("f", libc::S_IFREG | 0o644);
        e.flags = FLAG_LZMA_EOS | FLAG_DESCRIPTOR | FLAG_UTF8;
        e.ut_mtime = Some(1_600_000_000);
        e.local_offset = 40;
        let (n, _) = entry_node(&e, false, (1000, 100), 2).unwrap();
        assert_eq!(
            (n.csize, n.size, n.crc, n.method, n.local_offset),
            (7, 11, 0x1234, METHOD_DEFLATE, 42)
        );
        assert_eq!((n.uid, n.gid, n.mtime), (1000, 100, 1_600_000_000));
        // Of the record's flags only the LZMA end marker is kept.
        assert_eq!(n.flags, NODE_LZMA_EOS);
        assert_eq!((n.name_len, n.parent), (0, 0));
        assert_eq!(n.mtime, entry_mtime(&e));

        e.uid_gid = Some((5, 6));
        e.flags = FLAG_ENCRYPTED;
        let (n, _) = node_of(&e);
        assert_eq!((n.uid, n.gid), (5, 6));
        assert!(n.encrypted());
        let mut aes = unix("a", libc::S_IFREG | 0o644);
        aes.method = METHOD_AES;
        assert!(node_of(&aes).0.encrypted());

        // A directory has no data, whatever the record says.
        let (d, is_dir) = node_of(&unix("d/", libc::S_IFDIR | 0o755));
        assert!(is_dir);
        assert_eq!((d.csize, d.size, d.crc), (0, 0, 0x1234));

        e.local_offset = u64::MAX - 1;
        let Err(FsError::Corrupt(m)) = entry_node(&e, false, (0, 0), 2) else {
            panic!("an overflowing offset must fail");
        };
        assert_eq!(m, "local header offset overflows");
    }

    #[test]
    fn encrypted_entries_are_counted() {
        let mut e = unix("secret", libc::S_IFREG | 0o644);
        e.flags = FLAG_ENCRYPTED;
        let plain = unix("plain", libc::S_IFREG | 0o644);
        let got = read_central(&image(0, &[record(&e, &[]), record(&plain, &[])]), (0, 0)).unwrap();
        assert_eq!(got.info.encrypted, 1);
    }

    #[test]
    fn tally_counts_nodes_below_the_root_and_bytes_of_non_directories() {
        let node = |mode: u32, flags: u16, size: u64, csize: u64| {
            let mut n = Node::dir(0, (0, 0), 0, 0);
            (n.mode, n.flags, n.size, n.csize) = (mode, flags, size, csize);
            n
        };
        let nodes = [
            node(libc::S_IFDIR | 0o755, NODE_SYNTH, 0, 1 << 32),
            node(libc::S_IFDIR | 0o755, NODE_SYNTH, 0, 3),
            node(libc::S_IFDIR | 0o755, 0, 0, 7 << 32),
            node(libc::S_IFREG | 0o644, 0, 100, 40),
            node(libc::S_IFREG | 0o644, NODE_ENCRYPTED, 10, 12),
            node(libc::S_IFLNK | 0o777, 0, 5, 5),
        ];
        // Counts are added to what `info` already holds.
        let mut info = ZipInfo {
            files: 1,
            ..Default::default()
        };
        tally(&nodes, &mut info);
        assert_eq!(
            info,
            ZipInfo {
                files: 3,
                dirs: 2,
                symlinks: 1,
                synthesised_dirs: 1,
                uncompressed_bytes: 115,
                compressed_bytes: 57,
                ..Default::default()
            }
        );
    }
}
