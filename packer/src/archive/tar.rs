//! A streaming reader of tar archives in every dialect packfs meets: v7,
//! ustar, GNU (long names and links, base-256 numbers, old sparse files)
//! and PAX (extended and global headers, xattrs, sub-second and negative
//! times, large ids, and the GNU sparse formats 0.0, 0.1 and 1.0).
//!
//! It reads forward only, once, from any [`Read`]: a member's header is
//! parsed by [`TarStream::next_member`], its data read with
//! [`TarStream::read_data`], and whatever the caller leaves unread is
//! skipped by the next call. Nothing is sized by what a header claims:
//! names and extended headers are capped ([`MAX_META`]), data is streamed,
//! and a member longer than the rest of the stream is an error at the
//! offset where the stream ended.

use std::io::{self, Read};

/// Bytes of a GNU long name/link or a PAX extended header accepted.
pub const MAX_META: u64 = 16 << 20;
/// The size a sparse member may claim: its holes cost the image (and the
/// packer's memory) a block-size word per block, not their bytes, so the
/// claim is bounded to keep that list within 128 MiB at 128 KiB blocks.
pub const MAX_SPARSE_SIZE: u64 = 1 << 42;
/// Data segments a sparse member may list.
const MAX_SEGMENTS: usize = 1 << 20;
const BLOCK: usize = 512;

/// What went wrong, at which byte of the (decompressed) tar stream, and in
/// which member when one is known.
#[derive(Debug)]
pub struct TarError {
    pub offset: u64,
    pub member: Option<Vec<u8>>,
    pub kind: TarErrorKind,
}

#[derive(Debug)]
pub enum TarErrorKind {
    /// Reading the stream failed (the decompressor or the file below it).
    Io(io::Error),
    /// The stream is damaged or not what tar writes.
    Bad(String),
    /// The stream ends inside a header or a member's data.
    Truncated(String),
}

impl std::fmt::Display for TarError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            TarErrorKind::Io(e) => write!(f, "{e}"),
            TarErrorKind::Bad(m) | TarErrorKind::Truncated(m) => f.write_str(m),
        }
    }
}

/// The type of a member, as `tar -x` would create it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberKind {
    File,
    HardLink,
    Symlink,
    CharDev,
    BlockDev,
    Dir,
    Fifo,
}

/// One member's metadata; its data follows in the stream.
#[derive(Clone, Debug)]
pub struct Member {
    /// The path as the archive names it (not yet normalised).
    pub path: Vec<u8>,
    /// Hard links: the path linked to; symlinks: the target.
    pub link: Vec<u8>,
    pub kind: MemberKind,
    /// Permission bits with suid, sgid and sticky.
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    /// Seconds since the epoch, rounded down (PAX times may be fractional
    /// and negative).
    pub mtime: i64,
    /// Files: the size of the file (of the whole file, holes included, for
    /// a sparse one).
    pub size: u64,
    /// Sparse files: the data segments (offset, length), in order, whose
    /// bytes [`TarStream::read_data`] returns back to back; the rest of
    /// the file is holes.
    pub sparse: Option<Vec<(u64, u64)>>,
    pub dev_major: u32,
    pub dev_minor: u32,
    /// Extended attributes: full names (`user.foo`) and values.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// Where the member's header starts in the tar stream.
    pub offset: u64,
    /// The member had a type flag tar does not define: extracted as a
    /// regular file, as POSIX asks.
    pub unknown_type: Option<u8>,
}

/// PAX values that apply to one member (or, for a global header, to all
/// the members after it).
#[derive(Clone, Default)]
struct Pax {
    path: Option<Vec<u8>>,
    link: Option<Vec<u8>>,
    size: Option<u64>,
    uid: Option<u64>,
    gid: Option<u64>,
    mtime: Option<i64>,
    dev_major: Option<u32>,
    dev_minor: Option<u32>,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    sparse_major: Option<u64>,
    sparse_minor: Option<u64>,
    sparse_name: Option<Vec<u8>>,
    sparse_size: Option<u64>,
    /// Format 0.0: offset and numbytes records, in order.
    sparse_pairs: Vec<u64>,
    /// Format 0.1: the map, `off,len,off,len...`.
    sparse_map: Option<Vec<u8>>,
}

/// A forward-only reader of a tar stream.
pub struct TarStream<R: Read> {
    r: R,
    /// Bytes consumed from `r`.
    pos: u64,
    global: Pax,
    /// Data bytes of the current member not read yet, then its padding.
    left: u64,
    pad: u64,
    /// The member being read, for messages.
    current: Option<Vec<u8>>,
    ended: bool,
}

fn bad(offset: u64, member: Option<&[u8]>, m: impl Into<String>) -> TarError {
    TarError {
        offset,
        member: member.map(<[u8]>::to_vec),
        kind: TarErrorKind::Bad(m.into()),
    }
}

/// A NUL-terminated field.
fn field(b: &[u8]) -> &[u8] {
    match b.iter().position(|&c| c == 0) {
        Some(n) => &b[..n],
        None => b,
    }
}

/// A numeric header field: octal (spaces and NULs around it ignored) or
/// GNU's base-256 (high bit of the first byte set; 0xff: negative).
/// `None` for an empty field; `Err` for one that is neither.
fn number(b: &[u8]) -> Result<Option<i128>, String> {
    if b.first().is_some_and(|&c| c & 0x80 != 0) {
        let negative = b[0] == 0xff;
        let mut v: i128 = if negative { -1 } else { (b[0] & 0x7f) as i128 };
        for &c in &b[1..] {
            v = v
                .checked_mul(256)
                .and_then(|v| v.checked_add(c as i128))
                .ok_or("a base-256 number beyond 2^120")?;
        }
        // Negative: two's complement over the field, the -1 seeded above
        // standing for its high bits.
        return Ok(Some(v));
    }
    let t: &[u8] = {
        let s = b
            .iter()
            .position(|&c| c != b' ' && c != 0)
            .unwrap_or(b.len());
        let e = b[s..]
            .iter()
            .position(|&c| c == b' ' || c == 0)
            .map_or(b.len(), |n| s + n);
        &b[s..e]
    };
    if t.is_empty() {
        return Ok(None);
    }
    let mut v: i128 = 0;
    for &c in t {
        if !(b'0'..=b'7').contains(&c) {
            return Err(format!(
                "{:?} is not an octal number",
                String::from_utf8_lossy(b)
            ));
        }
        v = v * 8 + (c - b'0') as i128;
    }
    Ok(Some(v))
}

/// Whether `h` is a header whose checksum holds (unsigned, or signed as
/// some old tars summed it).
fn checksum_ok(h: &[u8; BLOCK]) -> bool {
    let Ok(Some(want)) = number(&h[148..156]) else {
        return false;
    };
    let mut unsigned: i128 = 0;
    let mut signed: i128 = 0;
    for (i, &c) in h.iter().enumerate() {
        let c = if (148..156).contains(&i) { b' ' } else { c };
        unsigned += c as i128;
        signed += c as i8 as i128;
    }
    want == unsigned || want == signed
}

/// Whether `head` (the first 1024 bytes, or all there are) starts a tar
/// archive: a header whose checksum holds, or the two end-of-archive zero
/// blocks of an empty one (one zero block alone is more likely a disk
/// image or other zero-filled file than an archive).
pub fn looks_like_tar(head: &[u8]) -> bool {
    let Some(h) = head
        .get(..BLOCK)
        .and_then(|b| <&[u8; BLOCK]>::try_from(b).ok())
    else {
        return false;
    };
    if h.iter().all(|&c| c == 0) {
        return head.len() >= 2 * BLOCK && head.iter().all(|&c| c == 0);
    }
    checksum_ok(h)
}

/// Parses PAX records (`LEN key=value\n`) into `pax`.
fn parse_pax(data: &[u8], pax: &mut Pax, at: u64, member: Option<&[u8]>) -> Result<(), TarError> {
    let mut rest = data;
    while !rest.is_empty() {
        // Some writers pad the header's data with NULs.
        if rest.iter().all(|&c| c == 0) {
            break;
        }
        let sp = rest
            .iter()
            .position(|&c| c == b' ')
            .ok_or_else(|| bad(at, member, "a PAX record without a length"))?;
        let len: usize = std::str::from_utf8(&rest[..sp])
            .ok()
            .and_then(|s| s.parse().ok())
            .filter(|&n: &usize| n > sp + 1 && n <= rest.len())
            .ok_or_else(|| bad(at, member, "a PAX record with a bad length"))?;
        let rec = &rest[sp + 1..len];
        rest = &rest[len..];
        let rec = rec
            .strip_suffix(b"\n")
            .ok_or_else(|| bad(at, member, "a PAX record not ended by a newline"))?;
        let eq = rec
            .iter()
            .position(|&c| c == b'=')
            .ok_or_else(|| bad(at, member, "a PAX record without '='"))?;
        let (key, value) = (&rec[..eq], &rec[eq + 1..]);
        pax_record(pax, key, value).map_err(|m| {
            bad(
                at,
                member,
                format!("PAX record {}: {m}", String::from_utf8_lossy(key)),
            )
        })?;
    }
    Ok(())
}

fn dec(v: &[u8]) -> Result<u64, String> {
    std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{:?} is not a number", String::from_utf8_lossy(v)))
}

/// A PAX time: decimal seconds, maybe negative, maybe with a fraction;
/// rounded down to whole seconds.
fn pax_time(v: &[u8]) -> Result<i64, String> {
    let s = std::str::from_utf8(v).map_err(|_| "not text".to_string())?;
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let secs: i64 = int.parse().map_err(|_| format!("{s:?} is not a time"))?;
    if !frac.bytes().all(|c| c.is_ascii_digit()) {
        return Err(format!("{s:?} is not a time"));
    }
    let has_fraction = frac.bytes().any(|c| c != b'0');
    // -1.5 is 1.5 s before the epoch: second -2.
    Ok(if int.starts_with('-') && has_fraction {
        secs.checked_sub(1)
            .ok_or_else(|| format!("{s:?} is out of range"))?
    } else {
        secs
    })
}

/// `LIBARCHIVE.xattr.` names are URL-encoded.
fn url_decode(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        if v[i] == b'%' && i + 2 < v.len() {
            if let Ok(b) = u8::from_str_radix(&String::from_utf8_lossy(&v[i + 1..i + 3]), 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(v[i]);
        i += 1;
    }
    out
}

/// Standard base64 (libarchive's xattr values), padding optional.
fn base64(v: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(v.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for &c in v {
        let d = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => break,
            _ => return Err("a value that is not base64".into()),
        };
        acc = (acc << 6) | d as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Ok(out)
}

fn pax_record(pax: &mut Pax, key: &[u8], v: &[u8]) -> Result<(), String> {
    // An empty value deletes the keyword (POSIX): the header's field, or
    // the global value, applies again. (An xattr's empty value is a value.)
    if v.is_empty()
        && matches!(
            key,
            b"path" | b"linkpath" | b"size" | b"uid" | b"gid" | b"mtime"
        )
    {
        match key {
            b"path" => pax.path = None,
            b"linkpath" => pax.link = None,
            b"size" => pax.size = None,
            b"uid" => pax.uid = None,
            b"gid" => pax.gid = None,
            _ => pax.mtime = None,
        }
        return Ok(());
    }
    match key {
        b"path" => pax.path = Some(v.to_vec()),
        b"linkpath" => pax.link = Some(v.to_vec()),
        b"size" => pax.size = Some(dec(v)?),
        b"uid" => pax.uid = Some(dec(v)?),
        b"gid" => pax.gid = Some(dec(v)?),
        b"mtime" => pax.mtime = Some(pax_time(v)?),
        b"SCHILY.devmajor" => pax.dev_major = Some(dec(v)? as u32),
        b"SCHILY.devminor" => pax.dev_minor = Some(dec(v)? as u32),
        b"GNU.sparse.major" => pax.sparse_major = Some(dec(v)?),
        b"GNU.sparse.minor" => pax.sparse_minor = Some(dec(v)?),
        b"GNU.sparse.name" => pax.sparse_name = Some(v.to_vec()),
        b"GNU.sparse.size" | b"GNU.sparse.realsize" => pax.sparse_size = Some(dec(v)?),
        b"GNU.sparse.offset" | b"GNU.sparse.numbytes" => {
            if pax.sparse_pairs.len() >= 2 * MAX_SEGMENTS {
                return Err("too many sparse segments".into());
            }
            pax.sparse_pairs.push(dec(v)?);
        }
        b"GNU.sparse.map" => pax.sparse_map = Some(v.to_vec()),
        _ => {
            if let Some(name) = key.strip_prefix(b"SCHILY.xattr.") {
                set_xattr(&mut pax.xattrs, name.to_vec(), v.to_vec())?;
            } else if let Some(name) = key.strip_prefix(b"LIBARCHIVE.xattr.") {
                set_xattr(&mut pax.xattrs, url_decode(name), base64(v)?)?;
            }
            // Others (atime, ctime, uname, gname, comment, charset, ACLs,
            // file flags) change nothing an image holds.
        }
    }
    Ok(())
}

/// Extended attributes one member may carry, as Linux bounds them: names
/// of at most 255 bytes, values of at most 64 KiB, and a name list of at
/// most 64 KiB (so at most a few thousand attributes).
const MAX_XATTR_NAME: usize = 255;
const MAX_XATTR_VALUE: usize = 64 << 10;
const MAX_XATTRS: usize = 4096;

/// bsdtar writes an xattr both ways: one value per name. The list is
/// short ([`MAX_XATTRS`] at most), so a linear search stays cheap.
fn set_xattr(
    list: &mut Vec<(Vec<u8>, Vec<u8>)>,
    name: Vec<u8>,
    value: Vec<u8>,
) -> Result<(), String> {
    if name.len() > MAX_XATTR_NAME {
        return Err(format!(
            "an extended attribute name of {} bytes (Linux allows {MAX_XATTR_NAME})",
            name.len()
        ));
    }
    if value.len() > MAX_XATTR_VALUE {
        return Err(format!(
            "an extended attribute value of {} bytes (Linux allows {MAX_XATTR_VALUE})",
            value.len()
        ));
    }
    match list.iter().position(|(n, _)| *n == name) {
        Some(i) => list[i].1 = value,
        None if list.len() >= MAX_XATTRS => {
            return Err(format!("more than {MAX_XATTRS} extended attributes"))
        }
        None => list.push((name, value)),
    }
    Ok(())
}

impl<R: Read> TarStream<R> {
    pub fn new(r: R) -> Self {
        TarStream {
            r,
            pos: 0,
            global: Pax::default(),
            left: 0,
            pad: 0,
            current: None,
            ended: false,
        }
    }

    /// Bytes of the tar stream consumed so far.
    pub fn position(&self) -> u64 {
        self.pos
    }

    fn err_io(&self, e: io::Error) -> TarError {
        TarError {
            offset: self.pos,
            member: self.current.clone(),
            kind: TarErrorKind::Io(e),
        }
    }

    /// Fills `buf` from the stream; the number of bytes read, short only
    /// at its end.
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize, TarError> {
        let mut n = 0;
        while n < buf.len() {
            match self.r.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.pos += n as u64;
                    return Err(self.err_io(e));
                }
            }
        }
        self.pos += n as u64;
        Ok(n)
    }

    /// Skips `n` bytes; `what` says what they were, if the stream ends.
    fn skip(&mut self, mut n: u64, what: &str) -> Result<(), TarError> {
        let mut buf = [0u8; 8192];
        while n > 0 {
            let k = self.fill(&mut buf[..n.min(8192) as usize])?;
            if k == 0 {
                return Err(TarError {
                    offset: self.pos,
                    member: self.current.clone(),
                    kind: TarErrorKind::Truncated(format!(
                        "the archive ends {n} bytes before the end of {what}"
                    )),
                });
            }
            n -= k as u64;
        }
        Ok(())
    }

    /// Reads a meta member's data (long name, PAX header) whole.
    fn read_meta(&mut self, size: u64, what: &str, at: u64) -> Result<Vec<u8>, TarError> {
        if size > MAX_META {
            return Err(bad(
                at,
                self.current.as_deref(),
                format!("a {what} of {size} bytes (more than {MAX_META} bytes is refused)"),
            ));
        }
        let mut data = vec![0u8; size as usize];
        if self.fill(&mut data)? < data.len() {
            return Err(TarError {
                offset: self.pos,
                member: self.current.clone(),
                kind: TarErrorKind::Truncated(format!("the archive ends inside a {what}")),
            });
        }
        self.skip(padding(size), what)?;
        Ok(data)
    }

    /// Reads up to `buf.len()` bytes of the current member's data (of its
    /// segments, back to back, for a sparse member); 0 at its end.
    pub fn read_data(&mut self, buf: &mut [u8]) -> Result<usize, TarError> {
        let want = (buf.len() as u64).min(self.left) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = self.fill(&mut buf[..want])?;
        if n == 0 {
            return Err(TarError {
                offset: self.pos,
                member: self.current.clone(),
                kind: TarErrorKind::Truncated(format!(
                    "the archive ends {} bytes before the end of the member's data",
                    self.left
                )),
            });
        }
        self.left -= n as u64;
        Ok(n)
    }

    /// Reads the current member's data into `buf` whole.
    pub fn read_data_exact(&mut self, buf: &mut [u8]) -> Result<(), TarError> {
        let mut n = 0;
        while n < buf.len() {
            let k = self.read_data(&mut buf[n..])?;
            if k == 0 {
                return Err(bad(
                    self.pos,
                    self.current.as_deref(),
                    "the member's data is shorter than its size",
                ));
            }
            n += k;
        }
        Ok(())
    }

    /// Reads the rest of the stream after the end-of-archive blocks, so
    /// that a compressed stream's own checks (CRC, checksum) run to its end.
    pub fn finish(&mut self) -> Result<(), TarError> {
        let mut buf = [0u8; 65536];
        while self.fill(&mut buf)? > 0 {}
        Ok(())
    }

    /// The next member, or `None` at the end of the archive. The data of
    /// the member before it is skipped if it was not read.
    pub fn next_member(&mut self) -> Result<Option<Member>, TarError> {
        if self.ended {
            return Ok(None);
        }
        if self.left > 0 {
            let left = self.left;
            self.left = 0;
            self.skip(left, "the member's data")?;
        }
        let pad = std::mem::take(&mut self.pad);
        self.skip(pad, "the member's padding")?;
        self.current = None;
        let mut ext = Extensions::default();
        loop {
            let Some((at, block)) = self.read_header()? else {
                return Ok(None);
            };
            let mut h = Header::new(block, at, &ext);
            self.current = Some(h.shown.clone());
            let size_field = h.num(124..136, "size")?.unwrap_or(0);
            if size_field < 0 || size_field > u64::MAX as i128 {
                return Err(bad(
                    at,
                    Some(&h.shown),
                    format!("size {size_field} out of range"),
                ));
            }
            if self.read_extension(&h, size_field as u64, &mut ext)? {
                continue;
            }
            let (mut member, size) = self.member(&mut h, size_field as u64, &mut ext)?;
            self.current = Some(member.path.clone());
            self.start_data(&mut member, &h, &ext.pax, size)?;
            return Ok(Some(member));
        }
    }

    /// Reads the next header block: `None` at the end of the archive (two
    /// zero blocks, or none at all), else where it starts and its bytes,
    /// its checksum checked.
    fn read_header(&mut self) -> Result<Option<(u64, [u8; BLOCK])>, TarError> {
        let at = self.pos;
        let mut h = [0u8; BLOCK];
        let n = self.fill(&mut h)?;
        if n == 0 {
            // No end-of-archive blocks: what GNU tar and Python's
            // tarfile accept too. A stream cut inside a member is an
            // error above; one cut between members cannot be told.
            if at > 0 {
                log::debug!("the archive has no end-of-archive blocks");
            }
            self.ended = true;
            return Ok(None);
        }
        if n < BLOCK {
            return Err(TarError {
                offset: at,
                member: None,
                kind: TarErrorKind::Truncated(format!(
                    "the archive ends inside a header ({n} of 512 bytes)"
                )),
            });
        }
        if h.iter().all(|&c| c == 0) {
            self.ended = true;
            return Ok(None);
        }
        if !checksum_ok(&h) {
            return Err(bad(at, None, "bad header checksum (not a tar header)"));
        }
        Ok(Some((at, h)))
    }

    /// Reads the member of header `h` if it only says something of the
    /// members after it (a PAX header, a GNU long name or link, a volume
    /// label) into `ext` or the global PAX values; false for any other
    /// member. `size`: its size field.
    fn read_extension(
        &mut self,
        h: &Header,
        size: u64,
        ext: &mut Extensions,
    ) -> Result<bool, TarError> {
        let (at, shown) = (h.at, Some(&h.shown[..]));
        match h.typeflag() {
            b'x' => {
                let data = self.read_meta(size, "PAX extended header", at)?;
                parse_pax(&data, &mut ext.pax, at, shown)?;
            }
            b'g' => {
                let data = self.read_meta(size, "PAX extended header", at)?;
                parse_pax(&data, &mut self.global, at, shown)?;
            }
            b'L' => {
                ext.long_name = Some(field(&self.read_meta(size, "GNU long name", at)?).to_vec());
            }
            b'K' => {
                ext.long_link = Some(field(&self.read_meta(size, "GNU long link", at)?).to_vec());
            }
            b'V' => {
                // A volume label: no file.
                self.skip(size, "a volume label")?;
                self.skip(padding(size), "a volume label")?;
            }
            b'M' => {
                return Err(bad(
                    at,
                    shown,
                    "a multi-volume continuation (packfs reads whole archives only)",
                ))
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The member header `h` describes: the global PAX values, then the
    /// member's own (`ext`), then the header's fields. Returns it with the
    /// size of its data in the archive (`size`, the size field, unless PAX
    /// gives one).
    fn member(
        &self,
        h: &mut Header,
        mut size: u64,
        ext: &mut Extensions,
    ) -> Result<(Member, u64), TarError> {
        let (at, g, pax) = (h.at, &self.global, &ext.pax);
        let path = ext
            .long_name
            .take()
            .or_else(|| pax.path.clone())
            .or_else(|| g.path.clone())
            .unwrap_or_else(|| std::mem::take(&mut h.name));
        let link = ext
            .long_link
            .take()
            .or_else(|| pax.link.clone())
            .or_else(|| g.link.clone())
            .unwrap_or_else(|| field(&h.block[157..257]).to_vec());
        if let Some(s) = pax.size.or(g.size) {
            size = s;
        }
        let id = |own: Option<u64>, glob: Option<u64>, r, what| -> Result<u64, TarError> {
            match own.or(glob) {
                Some(v) => Ok(v),
                None => {
                    let v = h.num(r, what)?.unwrap_or(0);
                    u64::try_from(v)
                        .map_err(|_| bad(at, Some(&h.shown), format!("{what} {v} is negative")))
                }
            }
        };
        let uid = id(pax.uid, g.uid, 108..116, "uid")?;
        let gid = id(pax.gid, g.gid, 116..124, "gid")?;
        let mtime = match pax.mtime.or(g.mtime) {
            Some(t) => t,
            None => {
                let t = h.num(136..148, "mtime")?.unwrap_or(0);
                i64::try_from(t).map_err(|_| bad(at, Some(&h.shown), "mtime out of range"))?
            }
        };
        let mode = (h.num(100..108, "mode")?.unwrap_or(0) & 0o7777) as u32;
        let (dev_major, dev_minor) = if h.ustar {
            (
                pax.dev_major
                    .or(g.dev_major)
                    .unwrap_or(h.num(329..337, "devmajor")?.unwrap_or(0) as u32),
                pax.dev_minor
                    .or(g.dev_minor)
                    .unwrap_or(h.num(337..345, "devminor")?.unwrap_or(0) as u32),
            )
        } else {
            (0, 0)
        };
        let mut xattrs = g.xattrs.clone();
        for (n, v) in &pax.xattrs {
            set_xattr(&mut xattrs, n.clone(), v.clone()).map_err(|m| bad(at, Some(&h.shown), m))?;
        }
        let (kind, unknown_type) = member_kind(h.typeflag(), &path);
        let member = Member {
            path,
            link,
            kind,
            mode,
            uid,
            gid,
            mtime,
            size: if kind == MemberKind::File { size } else { 0 },
            sparse: None,
            dev_major,
            dev_minor,
            xattrs,
            offset: at,
            unknown_type,
        };
        Ok((member, size))
    }

    /// Reads `member`'s sparse map, if it has one (old GNU headers, PAX
    /// records or, in format 1.0, the start of its data), and sets up the
    /// reading of its data: `size` bytes and their padding follow the
    /// header, skipped at once unless the member is a file.
    fn start_data(
        &mut self,
        member: &mut Member,
        h: &Header,
        pax: &Pax,
        size: u64,
    ) -> Result<(), TarError> {
        let at = h.at;
        // Data the archive holds for this member (skipped unless a
        // file's): its size field's, less a sparse map read below.
        let mut stored = size;
        if h.typeflag() == b'S' {
            let (segments, real) = self.old_gnu_sparse(&h.block, at, &member.path)?;
            member.sparse = Some(segments);
            member.size = real;
        } else if member.kind == MemberKind::File {
            if let Some(sp) = self.pax_sparse(pax, size, at, &member.path)? {
                member.sparse = Some(sp.segments);
                member.size = sp.real;
                stored = size - sp.map_bytes;
                if let Some(n) = sp.name {
                    member.path = n;
                    self.current = Some(member.path.clone());
                }
            }
        }
        if let Some(seg) = &member.sparse {
            if member.size > MAX_SPARSE_SIZE {
                return Err(bad(
                    at,
                    Some(&member.path),
                    format!(
                        "a sparse file of {} bytes (packfs takes sparse files up to {} bytes)",
                        member.size, MAX_SPARSE_SIZE
                    ),
                ));
            }
            check_segments(seg, member.size, stored).map_err(|m| bad(at, Some(&member.path), m))?;
        }
        self.left = stored;
        self.pad = padding(size);
        if member.kind != MemberKind::File {
            // Hard links may carry data (pax); no other type has any.
            let left = std::mem::take(&mut self.left);
            self.skip(left, "the member's data")?;
        }
        Ok(())
    }

    /// GNU's old sparse member: segments in the header, then in extension
    /// blocks while each says more follow. Returns (segments, real size).
    fn old_gnu_sparse(
        &mut self,
        h: &[u8; BLOCK],
        at: u64,
        name: &[u8],
    ) -> Result<(Vec<(u64, u64)>, u64), TarError> {
        let mut segments = Vec::new();
        let entry = |b: &[u8]| -> Result<Option<(u64, u64)>, TarError> {
            let off = number(&b[0..12]).map_err(|m| bad(at, Some(name), m))?;
            let len = number(&b[12..24]).map_err(|m| bad(at, Some(name), m))?;
            match (off, len) {
                (None, None) => Ok(None),
                (o, l) => {
                    let o = u64::try_from(o.unwrap_or(0))
                        .map_err(|_| bad(at, Some(name), "a negative sparse offset"))?;
                    let l = u64::try_from(l.unwrap_or(0))
                        .map_err(|_| bad(at, Some(name), "a negative sparse length"))?;
                    Ok(Some((o, l)))
                }
            }
        };
        for k in 0..4 {
            if let Some(e) = entry(&h[386 + 24 * k..386 + 24 * (k + 1)])? {
                segments.push(e);
            }
        }
        let real = number(&h[483..495])
            .map_err(|m| bad(at, Some(name), m))?
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(|| bad(at, Some(name), "a sparse member without its real size"))?;
        let mut more = h[482] != 0;
        while more {
            let ext_at = self.pos;
            let mut b = [0u8; BLOCK];
            if self.fill(&mut b)? < BLOCK {
                return Err(TarError {
                    offset: ext_at,
                    member: Some(name.to_vec()),
                    kind: TarErrorKind::Truncated("the archive ends inside a sparse header".into()),
                });
            }
            for k in 0..21 {
                if let Some(e) = entry(&b[24 * k..24 * (k + 1)])? {
                    segments.push(e);
                }
            }
            if segments.len() > MAX_SEGMENTS {
                return Err(bad(at, Some(name), "too many sparse segments"));
            }
            more = b[504] != 0;
        }
        Ok((segments, real))
    }

    /// The PAX sparse formats: the map of a sparse member, `None` for
    /// another.
    fn pax_sparse(
        &mut self,
        pax: &Pax,
        size: u64,
        at: u64,
        name: &[u8],
    ) -> Result<Option<SparseMap>, TarError> {
        let real = pax.sparse_size;
        let pairs = |v: Vec<u64>| -> Result<Vec<(u64, u64)>, TarError> {
            if !v.len().is_multiple_of(2) {
                return Err(bad(
                    at,
                    Some(name),
                    "a sparse map with an odd count of numbers",
                ));
            }
            Ok(v.chunks(2).map(|c| (c[0], c[1])).collect())
        };
        let map = |numbers: Vec<u64>, real: u64, map_bytes: u64| -> Result<_, TarError> {
            Ok(Some(SparseMap {
                segments: pairs(numbers)?,
                real,
                map_bytes,
                name: pax.sparse_name.clone(),
            }))
        };
        if pax.sparse_major == Some(1) {
            if pax.sparse_minor != Some(0) {
                return Err(bad(at, Some(name), "an unknown GNU sparse format version"));
            }
            let real = real.ok_or_else(|| {
                bad(
                    at,
                    Some(name),
                    "a sparse member without GNU.sparse.realsize",
                )
            })?;
            let (numbers, map_bytes) = self.sparse_map_1_0(size, at, name)?;
            return map(numbers, real, map_bytes);
        }
        if let Some(text) = &pax.sparse_map {
            let v = text
                .split(|&c| c == b',')
                .filter(|s| !s.is_empty())
                .map(dec)
                .collect::<Result<Vec<u64>, String>>()
                .map_err(|m| bad(at, Some(name), format!("GNU.sparse.map: {m}")))?;
            if v.len() > 2 * MAX_SEGMENTS {
                return Err(bad(at, Some(name), "too many sparse segments"));
            }
            let real =
                real.ok_or_else(|| bad(at, Some(name), "a sparse member without GNU.sparse.size"))?;
            return map(v, real, 0);
        }
        if !pax.sparse_pairs.is_empty() {
            let real =
                real.ok_or_else(|| bad(at, Some(name), "a sparse member without GNU.sparse.size"))?;
            return map(pax.sparse_pairs.clone(), real, 0);
        }
        Ok(None)
    }

    /// Reads the map of sparse format 1.0 from the start of a member's
    /// data (`size` bytes): decimal numbers, one a line, the count of
    /// segments first, in whole blocks. Returns the numbers after the count
    /// and the bytes the map took.
    fn sparse_map_1_0(
        &mut self,
        size: u64,
        at: u64,
        name: &[u8],
    ) -> Result<(Vec<u64>, u64), TarError> {
        let mut text = Vec::new();
        let mut numbers: Vec<u64> = Vec::new();
        let mut count: Option<u64> = None;
        let mut map_bytes = 0u64;
        loop {
            if map_bytes + BLOCK as u64 > size {
                return Err(bad(at, Some(name), "a sparse map longer than the member"));
            }
            let mut b = [0u8; BLOCK];
            if self.fill(&mut b)? < BLOCK {
                return Err(TarError {
                    offset: self.pos,
                    member: Some(name.to_vec()),
                    kind: TarErrorKind::Truncated("the archive ends inside a sparse map".into()),
                });
            }
            map_bytes += BLOCK as u64;
            for &c in &b {
                if c == b'\n' {
                    let v =
                        dec(&text).map_err(|m| bad(at, Some(name), format!("sparse map: {m}")))?;
                    text.clear();
                    match count {
                        None => {
                            if v > MAX_SEGMENTS as u64 {
                                return Err(bad(at, Some(name), "too many sparse segments"));
                            }
                            count = Some(v)
                        }
                        Some(_) => numbers.push(v),
                    }
                    if count.is_some_and(|n| numbers.len() as u64 == 2 * n) {
                        break;
                    }
                } else {
                    text.push(c);
                    if text.len() > 20 {
                        return Err(bad(at, Some(name), "sparse map: a number too long"));
                    }
                }
            }
            if count.is_some_and(|n| numbers.len() as u64 == 2 * n) {
                return Ok((numbers, map_bytes));
            }
        }
    }
}

/// A sparse member's map, as the PAX sparse formats give it.
struct SparseMap {
    /// Data segments (offset, length), in order.
    segments: Vec<(u64, u64)>,
    /// The file's size, holes included.
    real: u64,
    /// Bytes of the map at the start of the member's data (format 1.0).
    map_bytes: u64,
    /// The file's real name (formats 0.x and 1.0 name the member after a
    /// made-up path).
    name: Option<Vec<u8>>,
}

/// What the extension members before a member's header say of it: its PAX
/// extended header's records and a GNU long name or link.
#[derive(Default)]
struct Extensions {
    pax: Pax,
    long_name: Option<Vec<u8>>,
    long_link: Option<Vec<u8>>,
}

/// A header block, with what every member type needs of it.
struct Header {
    block: [u8; BLOCK],
    /// Where it starts in the stream.
    at: u64,
    /// The name its fields give (ustar's prefix joined).
    name: Vec<u8>,
    /// ustar's magic, or GNU's: the device fields are there.
    ustar: bool,
    /// What messages call the member: a long name or PAX path given
    /// before the header, else `name`.
    shown: Vec<u8>,
}

impl Header {
    fn new(block: [u8; BLOCK], at: u64, ext: &Extensions) -> Self {
        let gnu = &block[257..265] == b"ustar  \0";
        let ustar = &block[257..263] == b"ustar\0" || &block[257..263] == b"ustar ";
        let name = {
            let n = field(&block[0..100]);
            let prefix = field(&block[345..500]);
            if ustar && !gnu && !prefix.is_empty() {
                let mut p = prefix.to_vec();
                p.push(b'/');
                p.extend_from_slice(n);
                p
            } else {
                n.to_vec()
            }
        };
        let shown = ext
            .long_name
            .clone()
            .or_else(|| ext.pax.path.clone())
            .unwrap_or_else(|| name.clone());
        Header {
            block,
            at,
            name,
            ustar,
            shown,
        }
    }

    fn typeflag(&self) -> u8 {
        self.block[156]
    }

    /// The numeric field at `r` (`what`, for messages).
    fn num(&self, r: std::ops::Range<usize>, what: &str) -> Result<Option<i128>, TarError> {
        number(&self.block[r]).map_err(|m| bad(self.at, Some(&self.shown), format!("{what}: {m}")))
    }
}

/// The type a member of `typeflag` at `path` extracts as, and the flag
/// when tar does not define it (extracted as a regular file, as POSIX
/// asks).
fn member_kind(typeflag: u8, path: &[u8]) -> (MemberKind, Option<u8>) {
    let kind = match typeflag {
        0 | b'0' if path.ends_with(b"/") => MemberKind::Dir,
        b'0' | b'7' | b'S' => MemberKind::File,
        0 => MemberKind::File,
        b'1' => MemberKind::HardLink,
        b'2' => MemberKind::Symlink,
        b'3' => MemberKind::CharDev,
        b'4' => MemberKind::BlockDev,
        b'5' | b'D' => MemberKind::Dir,
        b'6' => MemberKind::Fifo,
        t => return (MemberKind::File, Some(t)),
    };
    (kind, None)
}

/// Padding after `size` bytes of data, to the next block.
fn padding(size: u64) -> u64 {
    (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64
}

/// A sparse map must list segments in order, apart, within the file, whose
/// lengths add up to the data the archive holds.
fn check_segments(seg: &[(u64, u64)], real: u64, stored: u64) -> Result<(), String> {
    let mut end = 0u64;
    let mut total = 0u64;
    for &(off, len) in seg {
        let e = off.checked_add(len).ok_or("a sparse segment beyond 2^64")?;
        if off < end || e > real {
            return Err(format!(
                "sparse segment {off}+{len} out of order or beyond the file's {real} bytes"
            ));
        }
        end = e;
        total += len;
    }
    if total != stored {
        return Err(format!(
            "the sparse map lists {total} bytes of data, the archive holds {stored}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_octal_and_base256() {
        assert_eq!(number(b"0000644\0").unwrap(), Some(0o644));
        assert_eq!(number(b"   755 \0").unwrap(), Some(0o755));
        assert_eq!(number(b"\0\0\0\0").unwrap(), None);
        let mut b = [0u8; 12];
        b[0] = 0x80;
        b[11] = 5;
        b[10] = 1;
        assert_eq!(number(&b).unwrap(), Some(261));
        let neg = [0xffu8; 12];
        assert_eq!(number(&neg).unwrap(), Some(-1));
        assert!(number(b"12a\0").is_err());
    }

    #[test]
    fn pax_times_round_down() {
        assert_eq!(pax_time(b"1234.999").unwrap(), 1234);
        assert_eq!(pax_time(b"-1.5").unwrap(), -2);
        assert_eq!(pax_time(b"-1.000").unwrap(), -1);
        assert!(pax_time(b"x").is_err());
    }

    #[test]
    fn base64_and_url_names() {
        assert_eq!(base64(b"aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64(b"aGk").unwrap(), b"hi");
        assert_eq!(url_decode(b"user.a%3Db"), b"user.a=b");
    }

    /// A ustar header: name, type flag, size field (raw, 12 bytes).
    fn header(name: &str, typeflag: u8, size: [u8; 12]) -> [u8; BLOCK] {
        let mut h = [0u8; BLOCK];
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[100..108].copy_from_slice(b"0000644\0");
        h[108..116].copy_from_slice(b"0000000\0");
        h[116..124].copy_from_slice(b"0000000\0");
        h[124..136].copy_from_slice(&size);
        h[136..148].copy_from_slice(b"00000000000\0");
        h[156] = typeflag;
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&c| c as u32).sum();
        h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        h
    }

    fn octal12(n: u64) -> [u8; 12] {
        let mut f = [0u8; 12];
        f[..11].copy_from_slice(format!("{n:011o}").as_bytes());
        f
    }

    fn pax(records: &[u8]) -> Vec<u8> {
        let mut a = header("pax", b'x', octal12(records.len() as u64)).to_vec();
        a.extend_from_slice(records);
        a.resize(a.len() + padding(records.len() as u64) as usize, 0);
        a
    }

    fn record(kv: &str) -> Vec<u8> {
        let mut n = kv.len() + 3;
        while format!("{n} {kv}\n").len() != n {
            n += 1;
        }
        format!("{n} {kv}\n").into_bytes()
    }

    fn first_member(bytes: &[u8]) -> Result<Option<Member>, TarError> {
        TarStream::new(bytes).next_member()
    }

    #[test]
    fn hostile_headers_are_errors_not_panics() {
        // A volume label claiming 2^64 - 1 bytes.
        let mut huge = [0xffu8; 12];
        huge[0] = 0x80;
        let a = header("label", b'V', huge);
        assert!(first_member(&a).is_err());
        // A time before any i64 second.
        let a = pax(&record("mtime=-9223372036854775808.5"));
        assert!(first_member(&a).is_err());
        // Thousands of xattrs, and a name longer than Linux allows.
        let many: Vec<u8> = (0..MAX_XATTRS + 1)
            .flat_map(|i| record(&format!("SCHILY.xattr.user.a{i}=")))
            .collect();
        let mut a = pax(&many);
        a.extend_from_slice(&header("f", b'0', octal12(0)));
        assert!(first_member(&a).is_err());
        let long = format!("SCHILY.xattr.user.{}=v", "n".repeat(300));
        let mut a = pax(&record(&long));
        a.extend_from_slice(&header("f", b'0', octal12(0)));
        assert!(first_member(&a).is_err());
        // A sparse file claiming 2^64 - 1 bytes of holes.
        let mut a = pax(&[
            record("GNU.sparse.size=18446744073709551615"),
            record("GNU.sparse.map=0,0"),
        ]
        .concat());
        a.extend_from_slice(&header("s", b'0', octal12(0)));
        let e = first_member(&a).unwrap_err();
        assert!(e.to_string().contains("sparse file"), "{e}");
    }

    #[test]
    fn an_empty_pax_value_deletes_the_keyword() {
        let mut a = pax(&[record("path=from-pax"), record("path=")].concat());
        a.extend_from_slice(&header("from-header", b'0', octal12(0)));
        let m = first_member(&a).unwrap().unwrap();
        assert_eq!(m.path, b"from-header");
    }

    #[test]
    fn one_zero_block_is_not_an_empty_archive() {
        assert!(looks_like_tar(&[0u8; 1024]));
        let mut disk = [0u8; 1024];
        disk[600] = 1;
        assert!(!looks_like_tar(&disk));
        assert!(!looks_like_tar(&[0u8; 512]));
        assert!(looks_like_tar(&header("f", b'0', octal12(0))));
    }

    #[test]
    fn sparse_maps_are_checked() {
        assert!(check_segments(&[(0, 10), (100, 5)], 105, 15).is_ok());
        assert!(check_segments(&[(100, 5), (0, 10)], 105, 15).is_err());
        assert!(check_segments(&[(0, 10)], 5, 10).is_err());
        assert!(check_segments(&[(0, 10)], 10, 11).is_err());
    }
}
