//! `packfs info`, `ls`, `cat`, `extract`: the image read without mounting,
//! through the same [`PackFs`] core the FUSE server uses.

mod date;

use crate::args::cli::RemoteArgs;
use anyhow::{bail, Context};
use mountfs::fs::{Attr, FileKind, PackFs};
use mountfs::open::{AnyImage, OpenOptions, Opener};
use packfs_bench::size::human;
use std::collections::{HashMap, HashSet};
use std::ffi::{CString, OsStr};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Cache for one-shot commands: enough to keep metadata and a few blocks hot.
const CLI_CACHE: usize = 64 << 20;

fn open(image: &Path, remote: &RemoteArgs) -> anyhow::Result<PackFs<AnyImage>> {
    Ok(PackFs::new(open_image(image, remote)?.image, 0, 0))
}

/// The image a path or URL names (see `crate::args::location`).
fn open_image(image: &Path, remote: &RemoteArgs) -> anyhow::Result<mountfs::open::OpenedImage> {
    let loc = crate::args::location(image)?;
    let o = OpenOptions {
        remote: remote.options(),
        ..OpenOptions::new(CLI_CACHE)
    };
    Ok(Opener::new(o).open(&loc)?)
}

/// A path in the image, as bytes: names need not be UTF-8.
/// The entry `path` names in the image, resolved as under a mount (`..`,
/// symlinks on the way); `follow` follows a final symlink too.
fn resolve(fs: &PackFs<AnyImage>, image: &Path, path: &Path, follow: bool) -> anyhow::Result<Attr> {
    fs.resolve_path(path.as_os_str().as_bytes(), follow)
        .with_context(|| format!("{}: {}", image.display(), path.display()))
}

pub fn info(image: &Path, remote: &RemoteArgs) -> anyhow::Result<i32> {
    let mountfs::open::OpenedImage {
        image: img, len, ..
    } = open_image(image, remote)?;
    match &img {
        AnyImage::SquashFs(s) => info_squashfs(image, s, len),
        AnyImage::Zip(z) => info_zip(image, z, len),
        AnyImage::Union(u) => info_union(image, u),
    }
    // Only for an image on Lustre (see packer::lustre).
    if let Some(layout) = packer::lustre::describe(image) {
        outln!("striping:     {layout}");
    }
    Ok(0)
}

fn info_squashfs(image: &Path, s: &mountfs::squashfs::SquashFs, len: u64) {
    use packfs_format::squashfs::*;
    let sb = &s.sb;
    let flag = |f: u16, name: &'static str| sb.has_flag(f).then_some(name);
    let flags: Vec<&str> = [
        flag(FLAG_UNCOMPRESSED_INODES, "uncompressed-inodes"),
        flag(FLAG_UNCOMPRESSED_DATA, "uncompressed-data"),
        flag(FLAG_UNCOMPRESSED_FRAGMENTS, "uncompressed-fragments"),
        flag(FLAG_NO_FRAGMENTS, "no-fragments"),
        flag(FLAG_ALWAYS_FRAGMENTS, "always-fragments"),
        flag(FLAG_DUPLICATES, "duplicates"),
        flag(FLAG_EXPORTABLE, "exportable"),
        flag(FLAG_NO_XATTRS, "no-xattrs"),
        flag(FLAG_COMPRESSOR_OPTIONS, "compressor-options"),
    ]
    .into_iter()
    .flatten()
    .collect();
    outln!("image:        {}", image.display());
    outln!(
        "format:       SquashFS {}.{}",
        sb.version_major,
        sb.version_minor
    );
    outln!("compression:  {}", s.compressor().name());
    outln!("block size:   {}", human(sb.block_size as u64));
    outln!(
        "size:         {} ({} bytes used, file {} bytes)",
        human(sb.bytes_used),
        sb.bytes_used,
        len
    );
    outln!("inodes:       {}", sb.inode_count);
    outln!("fragments:    {}", sb.fragment_count);
    outln!("ids:          {}", sb.id_count);
    outln!(
        "created:      {} ({} seconds since the epoch)",
        date::format(sb.mod_time as i64, true),
        sb.mod_time
    );
    outln!(
        "xattrs:       {}",
        if sb.xattr_id_table_start == INVALID_TABLE {
            "no"
        } else {
            "yes"
        }
    );
    outln!("flags:        {}", flags.join(" "));
    outln!(
        "hash record:  {}",
        match s.hash_record() {
            Some(r) => format!(
                "{} pieces (checked on every read; `packfs verify` checks all)",
                r.len()
            ),
            None => "none".into(),
        }
    );
}

fn info_zip(image: &Path, z: &mountfs::zip::ZipFs, len: u64) {
    let i = z.info();
    let methods: Vec<String> = i
        .methods
        .iter()
        .map(|(_, n, c)| format!("{n} ({c})"))
        .collect();
    outln!("image:        {}", image.display());
    outln!("format:       ZIP{}", if i.zip64 { " (zip64)" } else { "" });
    outln!("entries:      {} in the central directory", i.entries);
    outln!(
        "tree:         {} files, {} directories ({} synthesised), {} symlinks",
        i.files,
        i.dirs,
        i.synthesised_dirs,
        i.symlinks
    );
    outln!(
        "skipped:      {} (unsafe or duplicate names; see warnings)",
        i.skipped
    );
    outln!("encrypted:    {}", i.encrypted);
    outln!("methods:      {}", methods.join(", "));
    outln!(
        "data:         {} uncompressed, {} compressed",
        human(i.uncompressed_bytes),
        human(i.compressed_bytes)
    );
    outln!(
        "size:         {} bytes (prefix {} bytes)",
        len,
        i.prefix_bytes
    );
    outln!("index memory: {}", human(i.index_bytes));
}

fn info_union(image: &Path, u: &mountfs::union::UnionImage<AnyImage>) {
    let paths: Vec<_> = u.shards().collect();
    outln!("image:        {}", image.display());
    outln!(
        "format:       union of {} shards (packfs manifest)",
        paths.len()
    );
    let mut total = 0;
    for (p, len) in &paths {
        total += len;
        outln!("shard:        {p} ({})", human(*len));
    }
    outln!("size:         {} in all shards", human(total));
}

fn mode_string(a: &Attr) -> String {
    let t = match a.kind {
        FileKind::File => '-',
        FileKind::Dir => 'd',
        FileKind::Symlink => 'l',
        FileKind::BlockDevice => 'b',
        FileKind::CharDevice => 'c',
        FileKind::Fifo => 'p',
        FileKind::Socket => 's',
    };
    let p = a.perm as u32;
    let mut s = String::from(t);
    for (shift, special, ch) in [(6, 0o4000, 's'), (3, 0o2000, 's'), (0, 0o1000, 't')] {
        let bits = (p >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        let x = bits & 1 != 0;
        s.push(match (p & special != 0, x) {
            (true, true) => ch,
            (true, false) => ch.to_ascii_uppercase(),
            (false, true) => 'x',
            (false, false) => '-',
        });
    }
    s
}

pub fn ls(
    image: &Path,
    path: &Path,
    long: bool,
    recursive: bool,
    remote: &RemoteArgs,
) -> anyhow::Result<i32> {
    let fs = open(image, remote)?;
    // As `ls`: a link to a directory given by name is listed through,
    // except in the long form, which shows the link (a trailing `/`
    // follows it there too).
    let at = resolve(&fs, image, path, !long)?;
    let out = std::io::stdout();
    let terminal = std::io::IsTerminal::is_terminal(&out);
    let mut out = std::io::BufWriter::new(out.lock());
    // Names are written as their bytes, as `ls` writes them to a pipe (on a
    // terminal, control characters as `?`: see `shown`).
    let mut top = path.as_os_str().as_bytes();
    while let [rest @ .., b'/'] = top {
        top = rest;
    }
    let mut stack = vec![(top.to_vec(), at)];
    let mut walked = Walked::default();
    // As `ls`: damage met in one entry or directory is said, and the rest
    // listed; the status says that something was not.
    let mut failed = false;
    let mut complain = |out: &mut std::io::BufWriter<_>, e: anyhow::Error| {
        // After what was listed before it, on a terminal too.
        out.flush()?;
        say!("packfs: {e}");
        failed = true;
        anyhow::Ok(())
    };
    // An error names the image and the entry, as `ls IMG PATH` does.
    let at = |p: &[u8], e: mountfs::FsError| {
        let p = String::from_utf8_lossy(p);
        anyhow::anyhow!("{}: {}: {e}", image.display(), p.trim_start_matches('/'))
    };
    // A write to stdout that fails ends the listing; damage does not.
    let damage = |p: &[u8], e: anyhow::Error| match e.downcast::<mountfs::FsError>() {
        Ok(fe) => Ok(at(p, fe)),
        Err(e) => Err(e),
    };
    while let Some((dir, a)) = stack.pop() {
        if a.kind != FileKind::Dir {
            if let Err(e) = print_entry(&fs, &mut out, &dir, &a, long, terminal) {
                complain(&mut out, damage(&dir, e)?)?;
            }
            continue;
        }
        if recursive {
            if let Err(e) = walked.enter(image, &a, Path::new(OsStr::from_bytes(&dir))) {
                complain(&mut out, e)?;
                continue;
            }
        }
        let entries = match fs.list(a.node) {
            Ok(entries) => entries,
            Err(e) => {
                complain(&mut out, at(&dir, e))?;
                continue;
            }
        };
        let mut subdirs = Vec::new();
        for e in entries {
            let under = [&dir[..], b"/", &e.name].concat();
            let full = if recursive { &under } else { &e.name };
            let attr = match fs.getattr(e.node) {
                Ok(attr) => attr,
                Err(e) => {
                    complain(&mut out, at(&under, e))?;
                    continue;
                }
            };
            if let Err(e) = print_entry(&fs, &mut out, full, &attr, long, terminal) {
                complain(&mut out, damage(&under, e)?)?;
            }
            if recursive && attr.kind == FileKind::Dir {
                subdirs.push((under, attr));
            }
        }
        stack.extend(subdirs.into_iter().rev());
    }
    out.flush()?;
    Ok(if failed { 1 } else { 0 })
}

/// The directories a walk of the image has entered. Each is entered once:
/// a directory has one parent, so one met again is listed inside itself
/// or inside its own subtree, which only a damaged image does, and a walk
/// that followed it would never end.
#[derive(Default)]
struct Walked(HashSet<u64>);

impl Walked {
    fn enter(&mut self, image: &Path, dir: &Attr, path: &Path) -> anyhow::Result<()> {
        if !self.0.insert(dir.node) {
            let path = path.strip_prefix("/").unwrap_or(path);
            bail!(
                "{}: {}: corrupt image: a directory listed inside itself (a directory cycle)",
                image.display(),
                path.display()
            );
        }
        Ok(())
    }
}

/// A name as `ls` shows it: its bytes, or on a terminal, with every
/// control character (C0, DEL and C1: an escape sequence a damaged or
/// hostile image may carry, a newline that would fake a second entry) and
/// every byte that is not UTF-8 shown as `?`, as `ls -q` shows them.
fn shown(name: &[u8], terminal: bool) -> std::borrow::Cow<'_, [u8]> {
    if !terminal {
        return name.into();
    }
    let mut out = Vec::with_capacity(name.len());
    for chunk in name.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() {
                out.push(b'?');
            } else {
                out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
            }
        }
        if !chunk.invalid().is_empty() {
            out.push(b'?');
        }
    }
    if out == name {
        name.into()
    } else {
        out.into()
    }
}

fn print_entry(
    fs: &PackFs<AnyImage>,
    out: &mut impl Write,
    name: &[u8],
    a: &Attr,
    long: bool,
    terminal: bool,
) -> anyhow::Result<()> {
    let name = &shown(name, terminal);
    if !long {
        out.write_all(name)?;
        out.write_all(b"\n")?;
        return Ok(());
    }
    // Read before anything is written: a target that cannot be read (the
    // entry is damaged) leaves no half line.
    let target = match a.kind {
        FileKind::Symlink => Some(fs.readlink(a.node)?),
        _ => None,
    };
    let size = match a.kind {
        FileKind::BlockDevice | FileKind::CharDevice => {
            let (ma, mi) = packfs_format::squashfs::inode::decode_dev(a.rdev);
            format!("{ma}, {mi}")
        }
        _ => a.size.to_string(),
    };
    write!(
        out,
        "{} {:>3} {:>5} {:>5} {:>10} {} ",
        mode_string(a),
        a.nlink,
        a.uid,
        a.gid,
        size,
        date::format(a.mtime, false)
    )?;
    out.write_all(name)?;
    if let Some(target) = target {
        out.write_all(b" -> ")?;
        out.write_all(&shown(&target, terminal))?;
    }
    out.write_all(b"\n")?;
    Ok(())
}

pub fn cat(image: &Path, path: &Path, remote: &RemoteArgs) -> anyhow::Result<i32> {
    let fs = open(image, remote)?;
    let a = resolve(&fs, image, path, true)?;
    if a.kind != FileKind::File {
        bail!(
            "{}: {}: not a regular file",
            image.display(),
            path.display()
        );
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    fs.read_all(a.node, |b| out.write_all(b))
        .with_context(|| format!("{}: {}", image.display(), path.display()))?;
    out.flush()?;
    Ok(0)
}

fn cstr(p: &Path) -> anyhow::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .with_context(|| format!("{}: path contains NUL", p.display()))
}

fn check(rc: libc::c_int, what: &str, p: &Path) -> anyhow::Result<()> {
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        bail!("{}: {what}: {e}", p.display());
    }
    Ok(())
}

/// Applies owner (when root), extended attributes, mode and mtime, in that
/// order: the kernel takes `security.capability` (and the set-id bits) off
/// a file whose owner is set, so the attributes come after the owner and
/// the mode after both. Symlinks get no mode.
fn apply_meta(fs: &PackFs<AnyImage>, p: &Path, a: &Attr, is_root: bool) -> anyhow::Result<()> {
    let c = cstr(p)?;
    if is_root {
        // SAFETY: `c` is a valid NUL-terminated path for the call.
        check(
            unsafe { libc::lchown(c.as_ptr(), a.uid, a.gid) },
            "chown",
            p,
        )?;
    }
    apply_xattrs(fs, p, a)?;
    // SAFETY: `c` is a valid NUL-terminated path for the duration of each call.
    unsafe {
        if a.kind != FileKind::Symlink {
            check(libc::chmod(c.as_ptr(), a.perm as libc::mode_t), "chmod", p)?;
        }
        let ts = libc::timespec {
            tv_sec: a.mtime as _,
            tv_nsec: 0,
        };
        let times = [ts, ts];
        check(
            libc::utimensat(
                libc::AT_FDCWD,
                c.as_ptr(),
                times.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            ),
            "set mtime",
            p,
        )?;
    }
    Ok(())
}

fn apply_xattrs(fs: &PackFs<AnyImage>, p: &Path, a: &Attr) -> anyhow::Result<()> {
    let list = fs.listxattr(a.node)?;
    let c = cstr(p)?;
    for name in list.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let value = fs.getxattr(a.node, name)?;
        let cname = CString::new(name).expect("xattr names have no NUL");
        // SAFETY: valid pointers and lengths for the duration of the call.
        let rc = unsafe {
            libc::lsetxattr(
                c.as_ptr(),
                cname.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        };
        if rc != 0 {
            log::warn!(
                "{}: cannot set xattr {}: {}",
                p.display(),
                String::from_utf8_lossy(name),
                std::io::Error::last_os_error()
            );
        }
    }
    Ok(())
}

/// Recreates a device, FIFO or socket entry at `p` (a socket as the bare
/// inode `mknod` makes, as unsquashfs and tar make it: nothing listens).
fn make_node(p: &Path, attr: &Attr) -> anyhow::Result<()> {
    let fmt = attr.kind.mode_bits();
    let (ma, mi) = packfs_format::squashfs::inode::decode_dev(attr.rdev);
    let c = cstr(p)?;
    // SAFETY: valid path; mknod has no memory preconditions.
    let rc = unsafe {
        libc::mknod(
            c.as_ptr(),
            fmt | attr.perm as libc::mode_t,
            libc::makedev(ma, mi),
        )
    };
    check(rc, "mknod", p)
}

/// Writes a file's data leaving holes where it is zero, as unsquashfs and
/// `cp --sparse` do: a sparse file (a VM disk, a preallocated dataset file)
/// takes the room its data takes, not its length.
struct SparseWriter {
    f: std::io::BufWriter<std::fs::File>,
    /// Zero bytes read and not written yet: a hole unless data follows.
    hole: u64,
}

impl SparseWriter {
    /// Zero runs shorter than this are written: a hole is a seek and, in the
    /// file system, a block at least this large.
    const MIN_HOLE: usize = 4096;

    fn new(f: std::fs::File) -> Self {
        SparseWriter {
            f: std::io::BufWriter::with_capacity(1 << 20, f),
            hole: 0,
        }
    }

    /// Writes the next bytes of the file. They come in pieces that start
    /// at multiples of the image's block size, so the [`Self::MIN_HOLE`]
    /// pieces looked at here are aligned in the file too.
    fn write(&mut self, b: &[u8]) -> std::io::Result<()> {
        use std::io::{Seek, SeekFrom};
        for piece in b.chunks(Self::MIN_HOLE) {
            if piece.len() == Self::MIN_HOLE && piece.iter().all(|&x| x == 0) {
                self.hole += piece.len() as u64;
                continue;
            }
            if self.hole > 0 {
                self.f.seek(SeekFrom::Current(self.hole as i64))?;
                self.hole = 0;
            }
            self.f.write_all(piece)?;
        }
        Ok(())
    }

    /// Flushes, and gives the file its length `len` when it ends in a hole.
    fn finish(&mut self, len: u64) -> std::io::Result<()> {
        self.f.flush()?;
        if self.hole > 0 {
            self.f.get_ref().set_len(len)?;
        }
        Ok(())
    }
}

/// The error of creating `p`, which extraction had not made (a name the
/// image lists twice is caught before): another name of this directory,
/// equal to it on a case-insensitive output file system, got there first.
fn create_error(p: &Path, e: std::io::Error) -> anyhow::Error {
    if e.kind() == std::io::ErrorKind::AlreadyExists {
        return anyhow::anyhow!(
            "{}: exists already: another name in the image is the same on this file system \
             (is it case-insensitive?)",
            p.display()
        );
    }
    anyhow::Error::new(e).context(p.display().to_string())
}

pub fn extract(
    image: &Path,
    path: &Path,
    output: &Path,
    remote: &RemoteArgs,
) -> anyhow::Result<i32> {
    let fs = open(image, remote)?;
    let top = resolve(&fs, image, path, true)?;
    if top.kind != FileKind::Dir {
        bail!("{}: {}: not a directory", image.display(), path.display());
    }
    match std::fs::read_dir(output) {
        Ok(mut d) => {
            if d.next().is_some() {
                bail!(
                    "{}: output directory exists and is not empty",
                    output.display()
                );
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir(output)
                .with_context(|| format!("{}: cannot create", output.display()))?;
            // A failure before anything was extracted leaves no empty
            // directory of ours behind (remove_dir takes only an empty one).
            return extract_into(&fs, image, top, output).inspect_err(|_| {
                let _ = std::fs::remove_dir(output);
            });
        }
        Err(e) => return Err(e).with_context(|| output.display().to_string()),
    }
    extract_into(&fs, image, top, output)
}

/// Extracts the tree under `top` into the empty directory `output`; an
/// error names the image or the output file it is about.
fn extract_into(
    fs: &PackFs<AnyImage>,
    image: &Path,
    top: Attr,
    output: &Path,
) -> anyhow::Result<i32> {
    let mut x = Extraction {
        fs,
        image,
        output,
        // SAFETY: geteuid has no preconditions.
        is_root: unsafe { libc::geteuid() } == 0,
        links: HashMap::new(),
        dirs: vec![(output.to_path_buf(), top.clone())],
        files: 0,
        bytes: 0,
    };
    let mut stack = vec![(output.to_path_buf(), top)];
    let mut walked = Walked::default();
    while let Some((dir, a)) = stack.pop() {
        let within = dir.strip_prefix(output).unwrap_or(&dir);
        walked.enter(image, &a, within)?;
        // Every entry is created new (never through what is there: a damaged
        // image may list a name twice, first as a symlink to anywhere).
        let mut names = HashSet::new();
        for e in fs.list(a.node).map_err(|e| x.in_image(e))? {
            let p = dir.join(OsStr::from_bytes(&e.name));
            if !names.insert(e.name.clone()) {
                bail!(
                    "{}: {}: corrupt image: the directory lists this name twice",
                    image.display(),
                    p.strip_prefix(output).unwrap_or(&p).display()
                );
            }
            let attr = fs.getattr(e.node).map_err(|e| x.in_image(e))?;
            stack.extend(x.entry(p, attr)?);
        }
    }
    // Directories last, deepest first, so writing into them does not reset their mtimes.
    for (p, a) in x.dirs.iter().rev() {
        apply_meta(fs, p, a, x.is_root)?;
    }
    say!(
        "extracted {} directories, {} files, {} into {}",
        x.dirs.len(),
        x.files,
        human(x.bytes),
        output.display()
    );
    Ok(0)
}

/// An extraction under way (see [`extract_into`]).
struct Extraction<'a> {
    fs: &'a PackFs<AnyImage>,
    image: &'a Path,
    output: &'a Path,
    is_root: bool,
    /// Where each file with several links was extracted first.
    links: HashMap<u64, PathBuf>,
    /// The directories made, whose metadata is applied at the end.
    dirs: Vec<(PathBuf, Attr)>,
    files: u64,
    bytes: u64,
}

impl Extraction<'_> {
    /// One line, the image first: "IMG: member: what is wrong".
    fn in_image(&self, e: mountfs::FsError) -> anyhow::Error {
        anyhow::anyhow!("{}: {e}", self.image.display())
    }

    /// "IMG: entry: what is wrong", for what is wrong with the entry at `p`.
    fn in_entry(&self, p: &Path, e: anyhow::Error) -> anyhow::Error {
        match e.downcast::<mountfs::FsError>() {
            Ok(e) => {
                let within = p.strip_prefix(self.output).unwrap_or(p);
                anyhow::anyhow!("{}: {}: {e}", self.image.display(), within.display())
            }
            Err(e) => e,
        }
    }

    /// Extracts the entry `attr` to `p`: a directory is made and returned,
    /// to be walked; anything else is whole when this returns.
    fn entry(&mut self, p: PathBuf, attr: Attr) -> anyhow::Result<Option<(PathBuf, Attr)>> {
        if attr.kind != FileKind::Dir && attr.nlink > 1 {
            if let Some(first) = self.links.get(&attr.node) {
                std::fs::hard_link(first, &p)
                    .map_err(|e| create_error(&p, e))
                    .with_context(|| format!("{}: hard link", p.display()))?;
                return Ok(None);
            }
            self.links.insert(attr.node, p.clone());
        }
        match attr.kind {
            FileKind::Dir => {
                std::fs::create_dir(&p).map_err(|e| create_error(&p, e))?;
                self.dirs.push((p.clone(), attr.clone()));
                return Ok(Some((p, attr)));
            }
            FileKind::File => self.file(&p, &attr)?,
            FileKind::Symlink => {
                let t = self
                    .fs
                    .readlink(attr.node)
                    .map_err(|e| self.in_entry(&p, e.into()))?;
                std::os::unix::fs::symlink(OsStr::from_bytes(&t), &p)
                    .map_err(|e| create_error(&p, e))?;
            }
            FileKind::BlockDevice | FileKind::CharDevice | FileKind::Fifo | FileKind::Socket => {
                make_node(&p, &attr)?
            }
        }
        apply_meta(self.fs, &p, &attr, self.is_root).map_err(|e| self.in_entry(&p, e))?;
        Ok(None)
    }

    /// Writes the regular file `attr` to `p`, sparse where it is zero.
    fn file(&mut self, p: &Path, attr: &Attr) -> anyhow::Result<()> {
        let created = std::fs::File::create_new(p).map_err(|e| create_error(p, e))?;
        let mut f = SparseWriter::new(created);
        let mut wrote = Ok(());
        let copied = self
            .fs
            .read_all(attr.node, |b| {
                f.write(b)
                    .inspect_err(|e| wrote = Err(std::io::Error::new(e.kind(), e.to_string())))
            })
            .map_err(|e| match std::mem::replace(&mut wrote, Ok(())) {
                Err(w) => anyhow::Error::new(w).context(p.display().to_string()),
                Ok(()) => self.in_image(e),
            })
            .and_then(|n| {
                f.finish(n).with_context(|| p.display().to_string())?;
                Ok(n)
            });
        // A file that could not be read to its end (damage, an
        // encrypted member) is not left behind half written.
        let n = copied.inspect_err(|_| {
            let _ = std::fs::remove_file(p);
        })?;
        self.bytes += n;
        self.files += 1;
        Ok(())
    }
}
