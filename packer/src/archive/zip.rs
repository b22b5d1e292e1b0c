//! ZIP archives as sources: what `unzip` as root would extract, read
//! without extracting.
//!
//! A ZIP's table of contents is its central directory, at its end; its
//! local headers may carry no sizes (a data descriptor follows the data),
//! so a ZIP is read from a source that allows reads at any offset
//! ([`RandomAccess`]: a file, an object in object storage), never from a
//! pipe. The central directory is walked once, front to back, through a
//! bounded window ([`Central`]), and its members join the namespace in its
//! order (a later record of a path replaces an earlier one, as `unzip -o`
//! leaves it); then the regular files' data is read in the order it lies in
//! the archive (so reads move forward), decoded and CRC-checked
//! ([`MemberData`]), and sent to the writer as a tar member's is (the
//! driving is `super::reader`'s). Names, types, permissions and times follow unzip 6.0
//! (`packfs_format::zip::unzip`, the rules the ZIP mount follows); owners
//! come from Info-ZIP's uid/gid extra, else root, as unzip run by root
//! leaves them.
//!
//! Memory: the window over the central directory, one member's decoder and
//! a few words per regular file until its data is read, besides the
//! namespace every source shares.

use crate::PackError;
use packfs_format::zip::entry::{parse_central, CentralEntry};
use packfs_format::zip::local::LocalHeader;
use packfs_format::zip::unzip::{locate, member_decoder, LocateError};
use packfs_format::zip::{method_name, CENTRAL_LEN, LOCAL_LEN};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

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
pub const MAX_TARGET: u64 = 4096;

/// Member data is read from the archive in reads of this size.
const READ_STEP: u64 = 256 << 10;

/// Where a member's data is and how it is stored, as its central record
/// says.
pub struct Member {
    pub local_offset: u64,
    method: u16,
    flags: u16,
    crc: u32,
    pub csize: u64,
    pub size: u64,
    /// Index of the record in the central directory, to name it again.
    record: u64,
    pub name: Box<[u8]>,
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

/// The central directory of a ZIP, read record by record through a
/// bounded window.
pub struct Central<'s> {
    src: &'s dyn RandomAccess,
    name: &'s Path,
    cd_offset: u64,
    cd_size: u64,
    /// Bytes prepended to the archive: added to every offset it records.
    shift: u64,
    /// Entries the end record counts.
    entries: u64,
    window: Window,
    at: u64,
    record: u64,
}

impl<'s> Central<'s> {
    /// Locates the central directory of `src` (named `name` in errors).
    pub fn open(name: &'s Path, src: &'s dyn RandomAccess) -> Result<Central<'s>, PackError> {
        let len = src.size();
        let eocd = locate(len, |at, buf| src.read_exact_at(buf, at)).map_err(|e| match e {
            LocateError::Read(e) => PackError::io(name)(e),
            LocateError::Corrupt(m) | LocateError::Unsupported(m) => {
                PackError::archive(name, None, m)
            }
        })?;
        if eocd
            .cd_offset
            .checked_add(eocd.cd_size)
            .is_none_or(|e| e > len)
        {
            return Err(PackError::archive(
                name,
                None,
                format!(
                    "the central directory ({} bytes at byte {}) runs past the end of the archive",
                    eocd.cd_size, eocd.cd_offset
                ),
            ));
        }
        Ok(Central {
            src,
            name,
            cd_offset: eocd.cd_offset,
            cd_size: eocd.cd_size,
            shift: eocd.shift,
            entries: eocd.entries,
            window: Window::default(),
            at: 0,
            record: 0,
        })
    }

    /// The next record and its number; `None` after the last (then a count
    /// that differs from the end record's is noted).
    pub fn next_record(&mut self) -> Result<Option<(CentralEntry, u64)>, PackError> {
        if self.at >= self.cd_size {
            if self.record != self.entries {
                log::warn!(
                    "{}: the end record counts {} entries, the central directory holds {}",
                    self.name.display(),
                    self.entries,
                    self.record
                );
            }
            return Ok(None);
        }
        let where_ = self.cd_offset + self.at;
        let bytes = self
            .window
            .record(self.src, self.cd_offset, self.cd_size, self.at)
            .map_err(PackError::io(self.name))?;
        let record = self.record;
        let (e, n) = parse_central(bytes).map_err(|err| {
            PackError::archive(
                self.name,
                None,
                format!("central directory record {record} (at byte {where_}): {err}"),
            )
        })?;
        self.at += n as u64;
        self.record += 1;
        Ok(Some((e, record)))
    }

    /// A regular file or symlink member's data as record `record` gives it.
    pub fn member(&self, e: &CentralEntry, name: &[u8], record: u64) -> Result<Member, PackError> {
        let bad = |m: String| PackError::archive(self.name, Some(name), m);
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
            .checked_add(self.shift)
            .filter(|&o| o < self.src.size())
            .ok_or_else(|| {
                bad(format!(
                    "its local header offset {} is past the end of the archive",
                    e.local_offset
                ))
            })?;
        Ok(Member {
            local_offset,
            method: e.method,
            flags: e.flags,
            crc: e.crc,
            csize: e.csize,
            size: e.size,
            record,
            name: name.to_vec().into_boxed_slice(),
        })
    }
}

/// A symlink member's target: its data, decoded and checked.
pub fn read_target(name: &Path, src: &dyn RandomAccess, p: &Member) -> Result<Vec<u8>, PackError> {
    let failed = AtomicBool::new(false);
    let mut m = MemberData::open(name, src, p, &failed)?;
    let mut target = vec![0u8; p.size as usize];
    m.read_exact(&mut target)?;
    m.finish()?;
    Ok(target)
}

/// A member's decoded data, read from its local header on; its size and
/// CRC-32 are checked by [`MemberData::finish`].
pub struct MemberData<'s> {
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
    pub fn open(
        name: &'s Path,
        src: &'s dyn RandomAccess,
        p: &Member,
        failed: &'s AtomicBool,
    ) -> Result<Self, PackError> {
        let member = String::from_utf8_lossy(&p.name).into_owned();
        let bad = |message: String| PackError::archive(name, Some(member.as_bytes()), message);
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
        let data = p.local_offset.saturating_add(h.data_offset());
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
        PackError::archive(
            self.archive,
            Some(self.member.as_bytes()),
            format!("{} data: {e}", method_name(self.method)),
        )
    }

    fn short(&self) -> PackError {
        PackError::archive(
            self.archive,
            Some(self.member.as_bytes()),
            format!(
                "decodes to {} bytes, its record gives {} (truncated or damaged)",
                self.got, self.size
            ),
        )
    }

    /// Fills `buf` with the next bytes of the member.
    pub fn read_exact(&mut self, mut buf: &mut [u8]) -> Result<(), PackError> {
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
    pub fn finish(mut self) -> Result<(), PackError> {
        let mut one = [0u8; 1];
        loop {
            match self.dec.read(&mut one) {
                Ok(0) => break,
                Ok(_) => {
                    return Err(PackError::archive(
                        self.archive,
                        Some(self.member.as_bytes()),
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
            return Err(PackError::archive(
                self.archive,
                Some(self.member.as_bytes()),
                format!(
                    "CRC-32 mismatch (the record gives {:08x}, the data {crc:08x}): damaged",
                    self.expect_crc
                ),
            ));
        }
        Ok(())
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
