//! `packfs._native.Image`: one opened image in one process.
//!
//! The Python class `packfs.Image` (python/packfs/_image.py) owns one of
//! these per process: it opens a new one when it finds itself in a process
//! other than the one that opened it (after `fork`, or unpickled in a
//! spawned worker), because an image holds threads (the remote client's
//! runtime, the `read_many` pool) that a forked child does not have. For
//! the same reason an image dropped in another process than its own is
//! leaked, not dropped: dropping a runtime whose threads do not exist
//! could wait for them forever (see [`NativeImage`]'s `Drop`).
//!
//! Every method releases the GIL while it works inside mountfs, and holds
//! a [`Call`] there so that a fork waits for it (see `fork.rs`).

use crate::errors::{guarded, py_name, to_py, At, Error, Result};
use crate::fork::Call;
use crate::open::{self, Options, StorageCounters};
use mountfs::fs::{Attr, FileKind, PackFs};
use mountfs::open::{AnyImage, ZipIndex};
use mountfs::remote::disk_cache::DiskCache;
use mountfs::FsError;
use packfs_objstore::RemoteCounters;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use rayon::prelude::*;
use std::mem::ManuallyDrop;
use std::os::unix::ffi::OsStringExt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock};

/// The longest read handed to mountfs at once. A longer read is split, its
/// pieces copied into one buffer of the whole length allocated first (a
/// failure there is `MemoryError`), so that it costs the result plus one
/// piece. A piece is allocated inside mountfs, where running out of memory
/// aborts the process: pieces are small so that an address-space limit
/// (`ulimit -v`) that leaves room for the result leaves room for them too.
const CHUNK: u64 = 4 << 20;

/// What one process holds of an opened image.
struct Inner {
    /// The filesystem core the FUSE server uses, without readahead: no
    /// background decoding threads, so nothing runs inside mountfs behind
    /// the binding's back (see `fork.rs`).
    fs: PackFs<AnyImage>,
    location: String,
    storage: Arc<StorageCounters>,
    remote: Option<Arc<RemoteCounters>>,
    /// Threads for `read_many`, made at its first call.
    pool: OnceLock<std::result::Result<rayon::ThreadPool, String>>,
    threads: usize,
    /// A local ZIP image's index, for the processes this one forks.
    zip_index: Option<ZipIndex>,
}

#[pyclass(frozen, module = "packfs._native", name = "Image")]
pub struct NativeImage {
    /// The process that opened the image.
    pid: u32,
    inner: ManuallyDrop<Inner>,
}

impl Drop for NativeImage {
    fn drop(&mut self) {
        if std::process::id() == self.pid {
            // SAFETY: dropped once, here, and never used again.
            unsafe { ManuallyDrop::drop(&mut self.inner) }
        }
        // Else: inherited through fork, its threads are not in this process;
        // leaked on purpose (see the module doc).
    }
}

/// A path argument: `str` (undecodable bytes as lone surrogates, as
/// `os.fsencode` takes them), `bytes`, or an `os.PathLike`. A NUL in it is
/// a `ValueError`, as `os` says: no entry can have one, so "no such file"
/// would hide a caller's bug.
fn path_arg(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    let p = path_bytes(obj)?;
    if p.contains(&0) {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "embedded null byte",
        ));
    }
    Ok(p)
}

/// Every path of an iterable, each as [`path_arg`] takes it.
fn path_args(paths: &Bound<'_, PyAny>) -> PyResult<Vec<Vec<u8>>> {
    paths.try_iter()?.map(|p| path_arg(&p?)).collect()
}

fn path_bytes(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(s) = obj.cast::<PyString>() {
        return match s.to_str() {
            Ok(s) => Ok(s.as_bytes().to_vec()),
            Err(_) => Ok(s
                .call_method1("encode", ("utf-8", "surrogateescape"))?
                .cast::<PyBytes>()?
                .as_bytes()
                .to_vec()),
        };
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    let fspath = obj.py().import("os")?.call_method1("fspath", (obj,))?;
    if fspath.is(obj) {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "expected str, bytes or os.PathLike",
        ));
    }
    path_bytes(&fspath)
}

/// `st_mode` type bits of a kind.
fn type_bits(kind: FileKind) -> u32 {
    kind.mode_bits()
}

/// `threads` threads to open an image or read files (`read_many`) on.
fn thread_pool(threads: usize) -> std::result::Result<rayon::ThreadPool, String> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .thread_name(|i| format!("packfs-read-{i}"))
        .build()
        .map_err(|e| e.to_string())
}

impl Inner {
    fn read_pool(&self) -> Result<&rayon::ThreadPool> {
        self.pool
            .get_or_init(|| thread_pool(self.threads))
            .as_ref()
            .map_err(|e| Error::Panic(format!("cannot start read threads: {e}")))
    }

    /// A regular file's entry (following symlinks).
    fn file(&self, path: &[u8]) -> Result<Attr> {
        let a = self.fs.resolve_path(path, true)?;
        match a.kind {
            FileKind::File => Ok(a),
            FileKind::Dir => Err(FsError::IsDir.into()),
            _ => Err(FsError::Invalid("not a regular file".into()).into()),
        }
    }

    /// Up to `size` bytes of `node` from `offset`; fewer only at the end.
    fn read_node(&self, node: u64, offset: u64, size: u64) -> Result<Vec<u8>> {
        let want = size.min(CHUNK);
        let first = self.fs.read(node, offset, want as u32)?;
        if (first.len() as u64) < want || size <= CHUNK {
            return Ok(first);
        }
        let len = self.len_at(node, offset, size)?;
        let mut out = alloc(len)?;
        out.extend_from_slice(&first);
        drop(first);
        while (out.len() as u64) < len {
            let at = offset + out.len() as u64;
            let want = (len - out.len() as u64).min(CHUNK) as u32;
            let got = self.fs.read(node, at, want)?;
            out.extend_from_slice(&got);
            if got.len() < want as usize {
                break;
            }
        }
        Ok(out)
    }

    /// What a read of `size` bytes of `node` from `offset` returns, by the
    /// file's recorded size.
    fn len_at(&self, node: u64, offset: u64, size: u64) -> Result<u64> {
        Ok(size.min(self.fs.getattr(node)?.size.saturating_sub(offset)))
    }

    /// The whole file, checked against the size its entry records.
    fn read_whole(&self, a: &Attr) -> Result<Vec<u8>> {
        let data = self.read_node(a.node, 0, a.size)?;
        if (data.len() as u64) < a.size {
            return Err(Error::Short {
                got: data.len() as u64,
                size: a.size,
            });
        }
        Ok(data)
    }

    fn read_path(&self, path: &[u8]) -> Result<Vec<u8>> {
        let a = self.file(path)?;
        self.read_whole(&a)
    }

    fn list(&self, path: &[u8]) -> Result<Vec<mountfs::fs::DirEntry>> {
        let a = self.fs.resolve_path(path, true)?;
        if a.kind != FileKind::Dir {
            return Err(FsError::NotDir.into());
        }
        Ok(self.fs.list(a.node)?)
    }
}

/// An empty buffer with room for `len` bytes, or [`Error::NoMemory`].
fn alloc(len: u64) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    usize::try_from(len)
        .ok()
        .and_then(|n| v.try_reserve_exact(n).ok())
        .ok_or(Error::NoMemory { bytes: len })?;
    Ok(v)
}

/// `data` as Python `bytes`; `MemoryError` when Python cannot allocate it.
fn to_bytes<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    PyBytes::new_with(py, data.len(), |b| {
        b.copy_from_slice(data);
        Ok(())
    })
}

impl NativeImage {
    fn inner(&self) -> &Inner {
        &self.inner
    }

    /// Runs `f` inside mountfs: GIL released, fork held off, panics caught.
    fn call<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Inner) -> Result<T> + Send,
    ) -> Result<T> {
        let inner = self.inner();
        py.detach(|| {
            let _call = Call::enter();
            guarded(|| f(inner))
        })
    }

    /// The entries of the directory `path`, errors raised as Python's.
    fn entries(
        &self,
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<mountfs::fs::DirEntry>> {
        let p = path_arg(path)?;
        self.call(py, |i| i.list(&p))
            .map_err(|e| self.err(py, e, &p, None))
    }

    /// Exactly `len` bytes of file `node` from `offset`, which its entry
    /// says it holds (fewer is damage), as Python `bytes`. Read in pieces
    /// of at most [`CHUNK`] with the GIL released, each copied into the
    /// result as it comes: a large file costs its size plus one piece.
    fn bytes_of<'py>(
        &self,
        py: Python<'py>,
        node: u64,
        offset: u64,
        len: u64,
        path: &[u8],
    ) -> PyResult<Bound<'py, PyBytes>> {
        let no_memory = || self.err(py, Error::NoMemory { bytes: len }, path, None);
        let mut allocated = false;
        let n = usize::try_from(len).map_err(|_| no_memory())?;
        // A read longer than a piece reads its first piece before the whole
        // length is allocated: a damaged entry's size (gigabytes) then fails
        // with its damage, not with the memory it claims.
        let first = if n > CHUNK as usize {
            let piece = self.call(py, |i| Ok(i.fs.read(node, offset, CHUNK as u32)?));
            let piece = piece.map_err(|e| self.err(py, e, path, Some(offset)))?;
            if piece.len() < CHUNK as usize {
                let e = Error::Short {
                    got: offset + piece.len() as u64,
                    size: offset + len,
                };
                return Err(self.err(py, e, path, Some(offset)));
            }
            Some(piece)
        } else {
            None
        };
        let r = PyBytes::new_with(py, n, |buf| {
            allocated = true;
            let mut done = 0;
            if let Some(first) = first {
                buf[..CHUNK as usize].copy_from_slice(&first[..CHUNK as usize]);
                done = CHUNK as usize;
            }
            while done < buf.len() {
                let at = offset + done as u64;
                let want = (buf.len() - done).min(CHUNK as usize);
                let piece = self.call(py, |i| Ok(i.fs.read(node, at, want as u32)?));
                let e = match piece {
                    Ok(got) => {
                        // The core answers at most what was asked.
                        let got = &got[..got.len().min(want)];
                        buf[done..done + got.len()].copy_from_slice(got);
                        done += got.len();
                        if got.len() == want {
                            continue;
                        }
                        Error::Short {
                            got: offset + done as u64,
                            size: offset + len,
                        }
                    }
                    Err(e) => e,
                };
                return Err(self.err(py, e, path, Some(at)));
            }
            Ok(())
        });
        // Python's own MemoryError says nothing of what was being read.
        r.map_err(|e| if allocated { e } else { no_memory() })
    }

    fn err(&self, py: Python<'_>, e: Error, path: &[u8], offset: Option<u64>) -> PyErr {
        to_py(
            py,
            e,
            &At {
                image: &self.inner.location,
                path,
                offset,
            },
        )
    }
}

/// The fields of `os.stat_result` the image knows, in that order.
type StatTuple = (u32, u64, u32, u32, u32, u64, i64, u32, u64);

fn stat_tuple(a: &Attr) -> StatTuple {
    (
        type_bits(a.kind) | a.perm as u32,
        a.ino,
        a.nlink,
        a.uid,
        a.gid,
        a.size,
        a.mtime,
        a.rdev,
        a.blocks,
    )
}

/// Opens the disk cache in `dir`. A directory that cannot be used is a
/// `RuntimeWarning`, not an error, as for `packfs mount --disk-cache`: the
/// image reads the same without it, and one DataLoader worker whose cache
/// directory is unusable should not stop the training.
fn open_disk_cache(
    py: Python<'_>,
    dir: &[u8],
    size: Option<u64>,
) -> PyResult<Option<Arc<DiskCache>>> {
    use std::os::unix::ffi::OsStrExt;
    let dir = std::path::Path::new(std::ffi::OsStr::from_bytes(dir));
    let budget = size.unwrap_or_else(|| DiskCache::default_budget(dir));
    match py.detach(|| DiskCache::open(dir, budget)) {
        Ok(c) => Ok(Some(Arc::new(c))),
        Err(e) => {
            let msg = format!("disk_cache {}: {e}; not caching to disk", dir.display());
            let cat = py.get_type::<pyo3::exceptions::PyRuntimeWarning>();
            PyErr::warn(
                py,
                &cat,
                &std::ffi::CString::new(msg).unwrap_or_default(),
                1,
            )?;
            Ok(None)
        }
    }
}

#[pymethods]
impl NativeImage {
    /// Opens `location` with a decoded-block cache of `cache_size` bytes, a
    /// fetched-range cache of `range_cache` bytes (remote images) and
    /// `threads` threads for `read_many`; a remote image's fetched bytes
    /// also go to the node-local cache in directory `disk_cache` (at most
    /// `disk_cache_size` bytes, or half the free space there).
    #[new]
    #[pyo3(signature = (location, cache_size, range_cache, threads, profile=None, endpoint=None,
                        disk_cache=None, disk_cache_size=None, remote_timeout=None, inherited=None,
                        range_size=None))]
    #[allow(clippy::too_many_arguments)] // the keyword arguments of packfs.Image
    fn new(
        py: Python<'_>,
        location: &Bound<'_, PyAny>,
        cache_size: usize,
        range_cache: u64,
        threads: usize,
        profile: Option<String>,
        endpoint: Option<String>,
        disk_cache: Option<&Bound<'_, PyAny>>,
        disk_cache_size: Option<u64>,
        remote_timeout: Option<f64>,
        inherited: Option<PyRef<'_, NativeImage>>,
        range_size: Option<u64>,
    ) -> PyResult<Self> {
        let timeout = remote_timeout
            .map(|s| {
                std::time::Duration::try_from_secs_f64(s)
                    .ok()
                    .filter(|d| !d.is_zero())
                    .ok_or_else(|| {
                        pyo3::exceptions::PyValueError::new_err(format!(
                            "remote_timeout must be a positive number of seconds, not {s}"
                        ))
                    })
            })
            .transpose()?;
        // Bytes: a local path need not be UTF-8 (a URL always is).
        let path = std::path::PathBuf::from(std::ffi::OsString::from_vec(path_arg(location)?));
        let location = path.to_string_lossy().into_owned();
        let disk_cache = match disk_cache {
            Some(dir) => open_disk_cache(py, &path_arg(dir)?, disk_cache_size)?,
            None => None,
        };
        let o = Options {
            cache_bytes: cache_size,
            range_cache,
            range_size,
            profile,
            endpoint,
            disk_cache,
            timeout,
            // Read, never dropped or otherwise used: an image a fork
            // inherited (see the module documentation).
            zip_index: inherited.and_then(|i| i.inner.zip_index.clone()),
        };
        // Opening runs on threads of its own, gone once it is open:
        // indexing a ZIP sorts in parallel, and on rayon's global pool that
        // sort waited forever in a forked child (a DataLoader worker) whose
        // parent had started the pool, since a fork copies the pool but not
        // its threads. (A process that cannot start threads opens as
        // before, on the global pool.)
        let opened = py
            .detach(|| {
                let _call = Call::enter();
                let open = || Ok(open::open(&path, &o)?);
                guarded(|| match thread_pool(threads) {
                    Ok(pool) => pool.install(open),
                    Err(_) => open(),
                })
            })
            .map_err(|e| crate::errors::open_to_py(e, &location))?;
        let open::Opened { image, storage } = opened;
        Ok(NativeImage {
            pid: std::process::id(),
            inner: ManuallyDrop::new(Inner {
                fs: PackFs::new(image.image, 0, 0),
                location,
                storage,
                remote: image.remote,
                pool: OnceLock::new(),
                threads,
                zip_index: image.zip_index,
            }),
        })
    }

    /// The process id that opened this image.
    #[getter]
    fn pid(&self) -> u32 {
        self.pid
    }

    #[getter]
    fn location(&self) -> &str {
        &self.inner.location
    }

    /// "squashfs", "zip" or "union".
    #[getter]
    fn format(&self) -> &'static str {
        match self.inner.fs.image.format() {
            mountfs::open::Format::SquashFs => "squashfs",
            mountfs::open::Format::Zip => "zip",
            mountfs::open::Format::Union => "union",
        }
    }

    /// Entries of a ZIP the tree does not show (names that would leave
    /// it, duplicates, a file and a directory of one name); 0 otherwise.
    #[getter]
    fn hidden_entries(&self) -> u64 {
        match &*self.inner.fs.image {
            AnyImage::Zip(z) => z.info().skipped,
            _ => 0,
        }
    }

    /// The image's block size (a good buffer size for streams).
    #[getter]
    fn block_size(&self) -> u32 {
        use mountfs::image::Image as _;
        self.inner.fs.image.block_size()
    }

    /// `(mode, ino, nlink, uid, gid, size, mtime, rdev, blocks)` of `path`.
    fn stat(
        &self,
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        follow_symlinks: bool,
    ) -> PyResult<StatTuple> {
        let p = path_arg(path)?;
        self.call(py, |i| {
            Ok(stat_tuple(&i.fs.resolve_path(&p, follow_symlinks)?))
        })
        .map_err(|e| self.err(py, e, &p, None))
    }

    /// The `st_mode` type bits of `path` (following symlinks), or None
    /// when nothing can be found there (missing, a non-directory in the
    /// way, a symlink loop, or a link whose target is encrypted, as
    /// `os.path` answers for a directory it may not search); damage raises.
    fn kind(&self, py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<Option<u32>> {
        let p = path_arg(path)?;
        match self.call(py, |i| Ok(i.fs.resolve_path(&p, true)?)) {
            Ok(a) => Ok(Some(type_bits(a.kind))),
            Err(Error::Fs(
                FsError::NotFound | FsError::NotDir | FsError::NameTooLong | FsError::SymlinkLoop,
            )) => Ok(None),
            Err(Error::Fs(e)) if e.errno() == libc::EACCES => Ok(None),
            Err(e) => Err(self.err(py, e, &p, None)),
        }
    }

    /// `(node, size)` of a regular file, for a file object.
    fn open_file(&self, py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<(u64, u64)> {
        let p = path_arg(path)?;
        self.call(py, |i| {
            let a = i.file(&p)?;
            // Prepares the file now, so that a damaged entry fails here.
            i.fs.open(a.node)?;
            Ok((a.node, a.size))
        })
        .map_err(|e| self.err(py, e, &p, None))
    }

    /// The whole file at `path`.
    fn read<'py>(
        &self,
        py: Python<'py>,
        path: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let p = path_arg(path)?;
        let (node, len) = self
            .call(py, |i| i.file(&p).map(|a| (a.node, a.size)))
            .map_err(|e| self.err(py, e, &p, None))?;
        self.bytes_of(py, node, 0, len, &p)
    }

    /// Up to `size` bytes of `path` from `offset` (fewer at the end).
    fn read_range<'py>(
        &self,
        py: Python<'py>,
        path: &Bound<'py, PyAny>,
        offset: u64,
        size: u64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let p = path_arg(path)?;
        let (node, len) = self
            .call(py, |i| {
                let a = i.file(&p)?;
                Ok((a.node, size.min(a.size.saturating_sub(offset))))
            })
            .map_err(|e| self.err(py, e, &p, Some(offset)))?;
        self.bytes_of(py, node, offset, len, &p)
    }

    /// Exactly `size` bytes of file `node` from `offset`, where the caller
    /// (`ImageFile`) has kept the read within the size `open_file` gave:
    /// no lookup of the file's attributes per read. `path` is for messages.
    fn read_node<'py>(
        &self,
        py: Python<'py>,
        node: u64,
        offset: u64,
        size: u64,
        path: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let p = path_arg(path).unwrap_or_default();
        self.bytes_of(py, node, offset, size, &p)
    }

    /// Whole files, decoded in parallel on this image's read threads; the
    /// first failure (in the order given) raises.
    fn read_many<'py>(
        &self,
        py: Python<'py>,
        paths: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let paths = path_args(paths)?;
        let results: Vec<Result<Vec<u8>>> = self
            .call(py, |i| {
                let pool = i.read_pool()?;
                Ok(pool.install(|| {
                    paths
                        .par_iter()
                        .map(|p| guarded(|| i.read_path(p)))
                        .collect()
                }))
            })
            .map_err(|e| self.err(py, e, b"", None))?;
        let list = PyList::empty(py);
        for (r, p) in results.into_iter().zip(&paths) {
            match r {
                Ok(data) => list.append(to_bytes(py, &data)?)?,
                Err(e) => return Err(self.err(py, e, p, Some(0))),
            }
        }
        Ok(list)
    }

    /// Names in the directory `path` (without "." and "..").
    fn listdir<'py>(
        &self,
        py: Python<'py>,
        path: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for e in self.entries(py, path)? {
            list.append(py_name(py, &e.name)?)?;
        }
        Ok(list)
    }

    /// `(name, type bits, ino)` of each entry of the directory `path`.
    fn scandir<'py>(
        &self,
        py: Python<'py>,
        path: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for e in self.entries(py, path)? {
            list.append((py_name(py, &e.name)?, type_bits(e.kind), e.ino))?;
        }
        Ok(list)
    }

    /// The files under `top` in `packfs.torch.ImageFolder`'s order
    /// (`walk.rs`): `(paths, offsets, undecided)`, the paths one after
    /// another in one `bytes`, path `i` at `offsets[i]..offsets[i + 1]`
    /// (little-endian u64s). With `exts` (lowercase), only the paths whose
    /// lowercase ends with one of them; a path that is not UTF-8 is kept
    /// and its index listed in `undecided`, for Python to lowercase as it
    /// does its own `str`s.
    fn files_under<'py>(
        &self,
        py: Python<'py>,
        top: &Bound<'py, PyAny>,
        exts: Option<Vec<String>>,
    ) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>, Vec<u64>)> {
        let p = path_arg(top)?;
        let mut undecided = Vec::new();
        let paths = self
            .call(py, |i| {
                let mut kept = 0u64;
                crate::walk::files_under(&i.fs, &p, &mut |path| {
                    let keep = match (&exts, std::str::from_utf8(path)) {
                        (None, _) => true,
                        (Some(exts), Ok(s)) => {
                            let lower = s.to_lowercase();
                            exts.iter().any(|e| lower.ends_with(e.as_str()))
                        }
                        (Some(_), Err(_)) => {
                            undecided.push(kept);
                            true
                        }
                    };
                    kept += u64::from(keep);
                    keep
                })
            })
            .map_err(|e| self.err(py, e, &p, None))?;
        let (blob, ends) = paths;
        let blob = PyBytes::new(py, &blob);
        let offsets = PyBytes::new_with(py, (ends.len() + 1) * 8, |b| {
            b[..8].copy_from_slice(&0u64.to_le_bytes());
            for (k, end) in ends.iter().enumerate() {
                b[(k + 1) * 8..(k + 2) * 8].copy_from_slice(&end.to_le_bytes());
            }
            Ok(())
        })?;
        Ok((blob, offsets, undecided))
    }

    /// Where the data of regular file `path` lies: (part, offset, length).
    fn locate(&self, py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<(u32, u64, u64)> {
        let p = path_arg(path)?;
        self.call(py, |i| {
            let e = i.fs.extent(i.file(&p)?.node)?;
            Ok((e.part, e.offset, e.len))
        })
        .map_err(|e| self.err(py, e, &p, None))
    }

    /// `locate` of each path, as one `bytes` of little-endian u64 triples
    /// (part, offset, length): a dataset of millions of samples asks once
    /// and makes numpy arrays of it without a Python object per sample.
    fn locate_many<'py>(
        &self,
        py: Python<'py>,
        paths: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let paths = path_args(paths)?;
        let mut out = Vec::with_capacity(paths.len() * 24);
        let mut failed = None;
        self.call(py, |i| {
            for (k, p) in paths.iter().enumerate() {
                match i.file(p).and_then(|a| Ok(i.fs.extent(a.node)?)) {
                    Ok(e) => {
                        for v in [e.part as u64, e.offset, e.len] {
                            out.extend_from_slice(&v.to_le_bytes());
                        }
                    }
                    Err(e) => {
                        failed = Some((k, e));
                        break;
                    }
                }
            }
            Ok(())
        })
        .map_err(|e| self.err(py, e, b"", None))?;
        if let Some((k, e)) = failed {
            return Err(self.err(py, e, &paths[k], None));
        }
        Ok(PyBytes::new(py, &out))
    }

    /// Starts fetching `spans` (little-endian u64 triples part, offset,
    /// length, as `locate_many` gives) in the background: the caller will
    /// read all of them soon. Hints only: a span outside the image is
    /// ignored, nothing waits and nothing raises but a malformed argument.
    fn will_read(&self, py: Python<'_>, spans: &[u8]) -> PyResult<()> {
        if !spans.len().is_multiple_of(24) {
            return Err(PyValueError::new_err(format!(
                "spans must be whole (part, offset, length) triples of 24 bytes, got {} bytes",
                spans.len()
            )));
        }
        let u64_at = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
        self.call(py, |i| {
            for t in spans.chunks_exact(24) {
                let Ok(part) = u32::try_from(u64_at(&t[..8])) else {
                    continue;
                };
                i.fs.will_read(mountfs::image::Extent {
                    part,
                    offset: u64_at(&t[8..16]),
                    len: u64_at(&t[16..]),
                });
            }
            Ok(())
        })
        .map_err(|e| self.err(py, e, b"", None))
    }

    /// The target of the symlink `path`.
    fn readlink<'py>(
        &self,
        py: Python<'py>,
        path: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let p = path_arg(path)?;
        let target = self
            .call(py, |i| {
                let a = i.fs.resolve_path(&p, false)?;
                Ok(i.fs.readlink(a.node)?)
            })
            .map_err(|e| self.err(py, e, &p, None))?;
        py_name(py, &target)
    }

    /// The whole image checked (`packfs verify`): every directory listed,
    /// every file read to its end on `threads` threads (0: all cores), every
    /// hash, checksum and CRC the image has checked. A dict: `entries`,
    /// `files`, `bytes`, `pieces`, `hash_record` and `damaged`, a list of
    /// (path, message).
    fn verify<'py>(&self, py: Python<'py>, threads: usize) -> PyResult<Bound<'py, PyDict>> {
        let r = self
            .call(py, |i| {
                Ok(mountfs::verify::verify(
                    &i.fs,
                    threads,
                    &mountfs::verify::Quiet,
                ))
            })
            .map_err(|e| self.err(py, e, b"/", None))?;
        let d = PyDict::new(py);
        d.set_item("entries", r.entries)?;
        d.set_item("files", r.files)?;
        d.set_item("bytes", r.bytes)?;
        d.set_item("pieces", r.pieces)?;
        d.set_item("hash_record", r.hash_record)?;
        let damaged: Vec<(String, String)> =
            r.damaged.into_iter().map(|x| (x.path, x.error)).collect();
        d.set_item("damaged", damaged)?;
        Ok(d)
    }

    /// Counters since the image was opened in this process.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let i = self.inner();
        let c = i.fs.image.cache().stats();
        let fsc = i.fs.counters.snapshot();
        let d = PyDict::new(py);
        d.set_item("cache_hits", c.hits)?;
        d.set_item("cache_misses", c.misses)?;
        d.set_item("cache_evictions", c.evictions)?;
        d.set_item("cache_bytes", c.bytes)?;
        d.set_item("cache_budget", c.budget)?;
        d.set_item("lookups", fsc.lookups)?;
        d.set_item("reads", fsc.reads)?;
        d.set_item("read_bytes", fsc.read_bytes)?;
        d.set_item("errors", fsc.errors)?;
        match &i.remote {
            // A remote image: what went over the network.
            Some(r) => {
                let s = r.snapshot();
                d.set_item("storage_bytes", s.bytes_fetched)?;
                d.set_item(
                    "requests",
                    s.get_requests + s.head_requests + s.other_requests,
                )?;
                d.set_item("get_requests", s.get_requests)?;
                d.set_item("failed_requests", s.failed_requests)?;
                d.set_item("ranges_fetched", s.ranges_fetched)?;
                d.set_item("disk_cache_bytes", s.bytes_from_disk)?;
            }
            // A file: the reads that reached it.
            None => {
                d.set_item("storage_bytes", i.storage.bytes.load(Relaxed))?;
                d.set_item("requests", i.storage.reads.load(Relaxed))?;
            }
        }
        Ok(d)
    }
}
