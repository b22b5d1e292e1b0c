//! ZIP archives as sources: what `unzip` as root would extract, read
//! without extracting.
//!
//! A ZIP's table of contents is its central directory, at its end; its
//! local headers may carry no sizes (a data descriptor follows the data),
//! so a ZIP is read from a source that allows reads at any offset
//! ([`RandomAccess`]: a file, an object in object storage), never from a
//! pipe. The central directory is walked once, front to back, through a
//! bounded window, and its members join the namespace in its order (a later
//! record of a path replaces an earlier one, as `unzip -o` leaves it); then
//! the regular files' data is read in the order it lies in the archive (so
//! reads move forward) and decoded, CRC-checked and sent to the writer as a
//! tar member's is. Names, types, permissions and times follow unzip 6.0
//! (`packfs_format::zip::unzip`, the rules the ZIP mount follows); owners
//! come from Info-ZIP's uid/gid extra, else root, as unzip run by root
//! leaves them.
//!
//! Memory: the window over the central directory, one member's decoder and
//! a few words per regular file until its data is read, besides the
//! namespace every source shares.

use super::{stage_error, Notes, Reader};
use crate::squashfs::data::{piece_spans, Piece, PieceData};
use crate::walk::Kind;
use crate::PackError;
use packfs_format::zip::entry::{parse_central, CentralEntry};
use packfs_format::zip::local::LocalHeader;
use packfs_format::zip::unzip::{
    decode_name, entry_mtime, kind_and_perm, locate, member_decoder, LocateError,
};
use packfs_format::zip::{method_name, CENTRAL_LEN, LOCAL_LEN};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::stage::{Added, Entry};

/// An archive that can be read at any offset.
pub trait RandomAccess: Send + Sync {
    /// The archive's size in bytes, fixed while it is read.
    fn size(&self) -> u64;
    /// Fills `buf` from byte `at`; an archive shorter than that is an
    /// `UnexpectedEof` error.
    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> io::Result<()>;
}

/// A ZIP in a local file.
pub struct ZipFile {
    file: std::fs::File,
    size: u64,
}

impl ZipFile {
    pub fn new(file: std::fs::File) -> io::Result<ZipFile> {
        let size = file.metadata()?.len();
        Ok(ZipFile { file, size })
    }
}

impl RandomAccess for ZipFile {
    fn size(&self) -> u64 {
        self.size
    }
    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, at)
    }
}

/// Whether `head` (an archive's first bytes) starts a ZIP: a local header,
/// or the end record of an empty archive.
pub fn looks_like_zip(head: &[u8]) -> bool {
    head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06")
}

/// The central directory is read through a window of this many bytes.
const CD_WINDOW: usize = 1 << 20;

/// A symlink's target is its member's data: at most this long (PATH_MAX).
const MAX_TARGET: u64 = 4096;

/// Member data is read from the archive in reads of this size.
const READ_STEP: u64 = 256 << 10;

/// A regular file waiting for its data: the namespace's inode and what the
/// central record says of the data.
struct Pending {
    inode: u32,
    local_offset: u64,
    method: u16,
    flags: u16,
    crc: u32,
    csize: u64,
    size: u64,
    /// Index of the record in the central directory, to name it again.
    record: u64,
    name: Box<[u8]>,
}

/// The bytes of `start..end` of the archive, as a stream.
struct Span<'s> {
    src: &'s dyn RandomAccess,
    pos: u64,
    end: u64,
}

impl Read for Span<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = (self.end - self.pos).min(buf.len() as u64).min(READ_STEP) as usize;
        if n == 0 {
            return Ok(0);
        }
        self.src.read_exact_at(&mut buf[..n], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Marks an error of the archive's own reads, so that a failed read is
/// reported as the I/O error it is and not as damaged data.
struct Failing<'s> {
    inner: Span<'s>,
    failed: &'s AtomicBool,
}

impl Read for Failing<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner
            .read(buf)
            .inspect_err(|_| self.failed.store(true, Ordering::Relaxed))
    }
}

impl Reader<'_> {
    /// The ZIP archive `src` (source number `k`, named `name`).
    pub(super) fn zip(
        &mut self,
        k: u16,
        name: &Path,
        src: &dyn RandomAccess,
    ) -> Result<(), PackError> {
        let bad = |member: Option<&[u8]>, message: String| PackError::Archive {
            path: name.to_path_buf(),
            member: member.map(|m| String::from_utf8_lossy(m).into_owned()),
            offset: None,
            message,
        };
        let len = src.size();
        let eocd = locate(len, |at, buf| src.read_exact_at(buf, at)).map_err(|e| match e {
            LocateError::Read(e) => PackError::io(name)(e),
            LocateError::Corrupt(m) | LocateError::Unsupported(m) => bad(None, m),
        })?;
        if eocd
            .cd_offset
            .checked_add(eocd.cd_size)
            .is_none_or(|e| e > len)
        {
            return Err(bad(
                None,
                format!(
                    "the central directory ({} bytes at byte {}) runs past the end of the archive",
                    eocd.cd_size, eocd.cd_offset
                ),
            ));
        }
        let mut notes = Notes::default();
        let mut pending = Vec::new();
        let mut window = Window::default();
        let (mut at, mut record) = (0u64, 0u64);
        while at < eocd.cd_size {
            self.cancelled()?;
            let where_ = eocd.cd_offset + at;
            let bytes = window
                .record(src, eocd.cd_offset, eocd.cd_size, at)
                .map_err(PackError::io(name))?;
            let (e, n) = parse_central(bytes).map_err(|err| {
                bad(
                    None,
                    format!("central directory record {record} (at byte {where_}): {err}"),
                )
            })?;
            at += n as u64;
            if let Some(p) = self.zip_record(k, name, src, &e, eocd.shift, record, &mut notes)? {
                pending.push(p);
            }
            record += 1;
        }
        if record != eocd.entries {
            log::warn!(
                "{}: the end record counts {} entries, the central directory holds {record}",
                name.display(),
                eocd.entries
            );
        }
        // In archive order: reads move forward through the file.
        pending.sort_by_key(|p| p.local_offset);
        let mut reported = 0u64;
        for p in pending {
            self.cancelled()?;
            // Progress: the archive's bytes up to the end of this member's data.
            let upto = (p.local_offset + p.csize).min(len);
            self.zip_data(name, src, p)?;
            if upto > reported {
                self.unreported += upto - reported;
                reported = upto;
            }
        }
        self.unreported += len - reported.min(len);
        self.input_bytes += len;
        Ok(())
    }

    /// One central record into the namespace; a regular file comes back
    /// to have its data read.
    #[allow(clippy::too_many_arguments)]
    fn zip_record(
        &mut self,
        k: u16,
        name: &Path,
        src: &dyn RandomAccess,
        e: &CentralEntry,
        shift: u64,
        record: u64,
        notes: &mut Notes,
    ) -> Result<Option<Pending>, PackError> {
        let raw = decode_name(e);
        let bad = |message: String| PackError::Archive {
            path: name.to_path_buf(),
            member: Some(String::from_utf8_lossy(&raw).into_owned()),
            offset: None,
            message,
        };
        let is_dir_name = raw.ends_with(b"/");
        let Some(comps) = self.member_path(&raw, name, notes, true)? else {
            return Ok(None);
        };
        if comps.is_empty() {
            // `/` or `./`: the root itself, whose metadata a ZIP does not carry.
            return Ok(None);
        }
        let (kind, perm) = kind_and_perm(e, is_dir_name);
        let kind = match kind {
            k if k == libc::S_IFDIR => Kind::Dir,
            k if k == libc::S_IFLNK => Kind::Symlink,
            _ => Kind::File,
        };
        if self.excluded(&comps, kind == Kind::Dir) {
            return Ok(None);
        }
        if e.encrypted() {
            return Err(bad(
                "encrypted: packfs cannot decrypt members (extract it with the password)".into(),
            ));
        }
        if e.disk != 0 {
            return Err(bad("lies on another disk of a spanned archive".into()));
        }
        let local_offset = e
            .local_offset
            .checked_add(shift)
            .filter(|&o| o < src.size())
            .ok_or_else(|| {
                bad(format!(
                    "its local header offset {} is past the end of the archive",
                    e.local_offset
                ))
            })?;
        let mut entry = Entry::new(kind, k);
        entry.mode = perm as u16;
        (entry.uid, entry.gid) = e.uid_gid.unwrap_or((0, 0));
        entry.mtime = entry_mtime(e);
        entry.size = if kind == Kind::File { e.size } else { 0 };
        let mut pending = Pending {
            inode: 0,
            local_offset,
            method: e.method,
            flags: e.flags,
            crc: e.crc,
            csize: e.csize,
            size: e.size,
            record,
            name: raw.clone().into_boxed_slice(),
        };
        if kind == Kind::Symlink {
            if e.size > MAX_TARGET {
                return Err(bad(format!(
                    "a symlink whose target is {} bytes (at most {MAX_TARGET})",
                    e.size
                )));
            }
            let target = read_target(name, src, &pending)?;
            if target.contains(&0) {
                return Err(bad("a symlink target holding a NUL byte".into()));
            }
            entry.target = target;
        }
        let added = self
            .stage
            .add(&comps, entry)
            .map_err(|err| stage_error(name, Some(&raw), err, &self.names))?;
        match (added, kind) {
            (Added::Inode(si), Kind::File) => {
                pending.inode = si;
                Ok(Some(pending))
            }
            _ => Ok(None),
        }
    }

    /// A regular file's data, decoded and checked, to the writer.
    fn zip_data(
        &mut self,
        name: &Path,
        src: &dyn RandomAccess,
        p: Pending,
    ) -> Result<(), PackError> {
        let id = self.next_id()?;
        self.stage.entry_mut(p.inode).data = id;
        let path: Arc<Path> = Arc::from(
            PathBuf::from(format!(
                "{}:{}",
                name.display(),
                String::from_utf8_lossy(&p.name)
            ))
            .as_path(),
        );
        self.file_bytes += p.size;
        let failed = AtomicBool::new(false);
        let mut m = MemberData::open(name, src, &p, &failed)?;
        for (first_block, nblocks, last) in piece_spans(p.size, self.bs) {
            self.cancelled()?;
            let mut data = Vec::with_capacity(nblocks as usize);
            for b in first_block..first_block + nblocks {
                let start = b * self.bs;
                let mut buf = vec![0u8; (p.size.min(start + self.bs) - start) as usize];
                m.read_exact(&mut buf)?;
                data.push(Some(buf));
            }
            self.emit(Piece {
                ino: id,
                path: path.clone(),
                size: p.size,
                first_block,
                nblocks,
                last,
                data: PieceData::Blocks(data),
            })?;
        }
        m.finish()
    }
}

/// A symlink member's target: its data, decoded and checked.
fn read_target(name: &Path, src: &dyn RandomAccess, p: &Pending) -> Result<Vec<u8>, PackError> {
    let failed = AtomicBool::new(false);
    let mut m = MemberData::open(name, src, p, &failed)?;
    let mut target = vec![0u8; p.size as usize];
    m.read_exact(&mut target)?;
    m.finish()?;
    Ok(target)
}

/// A member's decoded data, read from its local header on; its size and
/// CRC-32 are checked by [`MemberData::finish`].
struct MemberData<'s> {
    dec: Box<dyn Read + Send + 's>,
    failed: &'s AtomicBool,
    crc: crc32fast::Hasher,
    got: u64,
    size: u64,
    expect_crc: u32,
    method: u16,
    archive: &'s Path,
    member: String,
}

impl<'s> MemberData<'s> {
    fn open(
        name: &'s Path,
        src: &'s dyn RandomAccess,
        p: &Pending,
        failed: &'s AtomicBool,
    ) -> Result<Self, PackError> {
        let member = String::from_utf8_lossy(&p.name).into_owned();
        let bad = |message: String| archive_error(name, &member, message);
        let mut h = [0u8; LOCAL_LEN];
        src.read_exact_at(&mut h, p.local_offset)
            .map_err(|e| match e.kind() {
                io::ErrorKind::UnexpectedEof => bad(format!(
                    "its local header at byte {} is cut off by the end of the archive",
                    p.local_offset
                )),
                _ => PackError::io(name)(e),
            })?;
        let h = LocalHeader::decode(&h).map_err(|_| {
            bad(format!(
                "no local header at byte {} (central directory record {})",
                p.local_offset, p.record
            ))
        })?;
        let data = p.local_offset + h.data_offset();
        let end = data
            .checked_add(p.csize)
            .filter(|&e| e <= src.size())
            .ok_or_else(|| {
                bad(format!(
                    "its data ({} bytes at byte {data}) runs past the end of the archive",
                    p.csize
                ))
            })?;
        let raw = Failing {
            inner: Span {
                src,
                pos: data,
                end,
            },
            failed,
        };
        let dec = member_decoder(p.method, p.flags, p.size, raw).map_err(|e| {
            if e.kind() == io::ErrorKind::Unsupported {
                bad(format!(
                    "compressed with {} (method {}), which packfs does not decode",
                    method_name(p.method),
                    p.method
                ))
            } else if failed.load(Ordering::Relaxed) {
                PackError::io(name)(e)
            } else {
                bad(format!("{} data: {e}", method_name(p.method)))
            }
        })?;
        Ok(MemberData {
            dec,
            failed,
            crc: crc32fast::Hasher::new(),
            got: 0,
            size: p.size,
            expect_crc: p.crc,
            method: p.method,
            archive: name,
            member,
        })
    }

    fn error(&self, e: io::Error) -> PackError {
        if self.failed.load(Ordering::Relaxed) {
            return PackError::io(self.archive)(e);
        }
        archive_error(
            self.archive,
            &self.member,
            format!("{} data: {e}", method_name(self.method)),
        )
    }

    fn short(&self) -> PackError {
        archive_error(
            self.archive,
            &self.member,
            format!(
                "decodes to {} bytes, its record gives {} (truncated or damaged)",
                self.got, self.size
            ),
        )
    }

    /// Fills `buf` with the next bytes of the member.
    fn read_exact(&mut self, mut buf: &mut [u8]) -> Result<(), PackError> {
        while !buf.is_empty() {
            match self.dec.read(buf) {
                Ok(0) => return Err(self.short()),
                Ok(n) => {
                    self.crc.update(&buf[..n]);
                    self.got += n as u64;
                    buf = &mut buf[n..];
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.error(e)),
            }
        }
        Ok(())
    }

    /// After the last byte: the data ends where its record says, with the
    /// CRC-32 it gives.
    fn finish(mut self) -> Result<(), PackError> {
        let mut one = [0u8; 1];
        loop {
            match self.dec.read(&mut one) {
                Ok(0) => break,
                Ok(_) => {
                    return Err(archive_error(
                        self.archive,
                        &self.member,
                        format!(
                            "decodes to more than the {} bytes its record gives",
                            self.size
                        ),
                    ))
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.error(e)),
            }
        }
        let crc = std::mem::take(&mut self.crc).finalize();
        if crc != self.expect_crc {
            return Err(archive_error(
                self.archive,
                &self.member,
                format!(
                    "CRC-32 mismatch (the record gives {:08x}, the data {crc:08x}): damaged",
                    self.expect_crc
                ),
            ));
        }
        Ok(())
    }
}

fn archive_error(archive: &Path, member: &str, message: String) -> PackError {
    PackError::Archive {
        path: archive.to_path_buf(),
        member: Some(member.to_string()),
        offset: None,
        message,
    }
}

/// A window over the central directory, refilled as the walk moves on.
#[derive(Default)]
struct Window {
    /// Offset in the central directory of `buf[0]`.
    start: u64,
    buf: Vec<u8>,
}

impl Window {
    /// The bytes from `at` (relative to the central directory at `cd`, of
    /// `size` bytes) to at least the end of the record there, or to the
    /// directory's end.
    fn record(&mut self, src: &dyn RandomAccess, cd: u64, size: u64, at: u64) -> io::Result<&[u8]> {
        let have = |w: &Window, n: u64| w.start <= at && at + n <= w.start + w.buf.len() as u64;
        let left = size - at;
        let mut need = (CENTRAL_LEN as u64).min(left);
        if !have(self, need) {
            self.fill(src, cd, size, at, need)?;
        }
        if need == CENTRAL_LEN as u64 {
            let b = &self.buf[(at - self.start) as usize..];
            let var = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]) as u64;
            need = (CENTRAL_LEN as u64 + var(28) + var(30) + var(32)).min(left);
            if !have(self, need) {
                self.fill(src, cd, size, at, need)?;
            }
        }
        Ok(&self.buf[(at - self.start) as usize..])
    }

    fn fill(
        &mut self,
        src: &dyn RandomAccess,
        cd: u64,
        size: u64,
        at: u64,
        need: u64,
    ) -> io::Result<()> {
        let n = need.max(CD_WINDOW as u64).min(size - at);
        self.buf.resize(n as usize, 0);
        self.start = at;
        src.read_exact_at(&mut self.buf, cd + at)
    }
}
