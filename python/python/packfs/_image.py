"""``packfs.Image``: an image read without a mount."""

from __future__ import annotations

import collections
import errno
import io
import os
import stat as _stat
import struct
import threading
import warnings
from typing import Any, Iterable, Iterator, NamedTuple

from . import _budget, _native
from ._file import ImageFile

NotAnImageError = _native.NotAnImageError

# No call may be inside the reader while the process forks (the child would
# inherit its locks as they were): see python/src/fork.rs.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_native.before_fork,
        after_in_parent=_native.after_fork_in_parent,
        after_in_child=_native.after_fork_in_child,
    )

#: Default buffer of ``Image.open``: reads from the image are whole blocks
#: anyway, and each call into the reader costs a little.
DEFAULT_BUFFER_SIZE = 256 * 1024


# Natives opened for unpickled images, by what they open, the most recent
# last. A process pool unpickles its arguments with every task and drops
# them before the next (multiprocessing's Pool.map, concurrent.futures):
# each task's copy takes the native its predecessor used instead of opening
# the image again (re-indexing a ZIP's central directory, fetching a remote
# image's tables). Held strongly, so a few at most: each holds its caches
# and a descriptor. A local file that changed since (a new inode, size or
# time) is another key.
_SHARED: "collections.OrderedDict[tuple, Any]" = collections.OrderedDict()
_SHARED_MAX = 4
_SHARED_LOCK = threading.Lock()


def _file_identity(location: str) -> tuple | None:
    """What tells a local image file from its replacement; None for a
    remote one (its source pins the object's version itself)."""
    if "://" in location:
        return ()
    try:
        st = os.stat(location)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _join(top: Any, name: Any) -> Any:
    if isinstance(top, bytes) and isinstance(name, str):
        name = os.fsencode(name)
    return os.path.join(top, name) if top not in ("", b"") else name


class Extent(NamedTuple):
    """Where a file's data lies in an image's storage (``Image.locate``)."""

    #: Which file or object of a sharded image holds it (0 for one image).
    part: int
    #: Offset of the file's first stored byte in that part.
    offset: int
    #: Bytes its data takes there (a tail kept in a block shared with other
    #: files counted at its decoded length).
    length: int


class VerifyReport(NamedTuple):
    """What ``Image.verify`` found."""

    #: No damage found.
    ok: bool
    #: Entries walked (the root included).
    entries: int
    #: Regular files read to their end.
    files: int
    #: Bytes of file data read.
    bytes: int
    #: Whether the image (every shard) has a hash record; without one only
    #: what the codecs and ZIP CRCs check was checked.
    hash_record: bool
    #: Each problem: (path in the image, or ``"(image)"``, message).
    damaged: list[tuple[str, str]]


class Image:
    """A SquashFS or ZIP image, a shard manifest, or an image on S3 or HTTP(S),
    read without mounting it.

    ``location`` is anything ``packfs`` commands accept: a path, a manifest
    (``packfs pack --shards``), ``s3://BUCKET/KEY`` or ``http(s)://...``.
    ``cache_size`` is the decoded-block cache in bytes for the whole program;
    in a DataLoader worker each process gets ``cache_size / num_workers``
    (default: an eighth of the memory limit, 64 MiB to 1 GiB, divided the
    same way). ``profile`` and ``endpoint`` are the S3 profile and endpoint
    (as ``--profile`` and ``--endpoint``; keys come from the environment or
    the AWS files). ``disk_cache`` is a directory on node-local disk where a
    remote image's fetched bytes are kept, checksummed, across runs and
    shared by every process on the node (as ``--disk-cache``); it holds at
    most ``disk_cache_size`` bytes (default: half the free space there). A
    directory that cannot be used is a ``RuntimeWarning`` and no caching.
    ``remote_timeout`` is how long, in seconds, a remote fetch may take with
    its retries before it raises ``OSError(EIO)`` (as ``--remote-timeout``;
    default 60): the call waits that long for a stalled server, and Ctrl-C
    is seen only when it returns. ``range_size`` is the bytes of one range
    request (as ``--range-size``: a power of two from 64 KiB to 256 MiB,
    default 4 MiB); a shuffled reader fetches one range per sample it
    misses, so smaller ranges fetch fewer bytes and larger ones fewer
    requests (``packfs.torch.ShuffleSampler``'s ``group_bytes`` should match).

    Paths are relative to the image root, with or without a leading ``/``
    (``""`` and ``"/"`` are the root); symlinks inside the image are followed
    as under a mount, with the image as the root directory.

    An image pickles as its location and options and opens again, lazily,
    in the process that unpickles it; a forked child also reopens it on first
    use instead of using anything inherited. Threads may share one image.
    """

    def __init__(
        self,
        location: str | os.PathLike,
        *,
        cache_size: int | None = None,
        range_cache: int | None = None,
        profile: str | None = None,
        endpoint: str | None = None,
        disk_cache: str | os.PathLike | None = None,
        disk_cache_size: int | None = None,
        remote_timeout: float | None = None,
        range_size: int | None = None,
    ) -> None:
        if isinstance(location, Image):
            raise TypeError("location is an Image already")
        if disk_cache_size is not None and disk_cache is None:
            raise ValueError("disk_cache_size needs disk_cache (the cache directory)")
        if disk_cache_size is not None and disk_cache_size <= 0:
            raise ValueError(f"disk_cache_size must be > 0, not {disk_cache_size}")
        self._location = os.fsdecode(os.fspath(location))
        # Where other processes (DataLoader workers, unpickled copies) open
        # it: a relative path made absolute now, so that a chdir after this
        # does not send them elsewhere. Not normalised: ".." after a
        # symlinked directory means what it meant here.
        self._reopen = (
            self._location
            if "://" in self._location
            else os.path.join(os.getcwd(), self._location)
        )
        self._options = {
            "cache_size": cache_size,
            "range_cache": range_cache,
            "profile": profile,
            "endpoint": endpoint,
            # One cache for the whole node, shared by every worker: neither
            # the directory nor its size is divided among DataLoader workers.
            "disk_cache": None if disk_cache is None else os.fsdecode(os.fspath(disk_cache)),
            "disk_cache_size": disk_cache_size,
            "remote_timeout": None if remote_timeout is None else float(remote_timeout),
            "range_size": range_size,
        }
        # (pid, native image, DataLoader workers sharing the budget then) of
        # the process that opened it, or None.
        self._opened: tuple[int, Any, int] | None = None
        # Unpickled copies take their native from _SHARED.
        self._unpickled = False
        self._closed = False
        # Open now, so that a missing file or a non-image raises here, named
        # as the caller named it.
        hidden = self._native(self._location).hidden_entries
        if hidden:
            # What the CLI logs as it indexes the archive, said once to the
            # caller who opened it (not again in each worker's copy).
            warnings.warn(
                f"{self._location}: {hidden} of the archive's entries are not shown (names "
                "that would leave it, duplicates, of which the last is shown, or a file and a "
                "directory of one name, of which the directory is shown); "
                f"`packfs ls {self._location}` names each",
                UserWarning,
                stacklevel=2,
            )

    @classmethod
    def _lazy(cls, location: str, options: dict) -> "Image":
        """An image that opens at its first use (unpickling)."""
        self = cls.__new__(cls)
        self._location = location
        self._reopen = location
        self._options = dict(options)
        self._opened = None
        self._unpickled = True
        self._closed = False
        return self

    def __reduce__(self):
        return (Image._lazy, (self._reopen, self._options))

    def _native(self, where: str | None = None) -> Any:
        opened = self._opened
        pid = os.getpid()
        # Opened here before this process became a DataLoader worker (an
        # image made at import of a script a spawn worker imports again):
        # opened again, with the worker's share of the budgets.
        if opened is not None and opened[0] == pid:
            if opened[2] > 1 or _budget.num_workers() == 1:
                return opened[1]
        if self._closed:
            raise ValueError("I/O operation on a closed image")
        workers = _budget.num_workers()
        key = None
        if self._unpickled:
            identity = _file_identity(self._reopen)
            if identity is not None:
                key = (pid, self._reopen, tuple(sorted(self._options.items())), workers, identity)
                with _SHARED_LOCK:
                    shared = _SHARED.get(key)
                    if shared is not None:
                        _SHARED.move_to_end(key)
                if shared is not None:
                    self._opened = (pid, shared, workers)
                    return shared
        cache, ranges, threads = _budget.process_budget(
            self._options["cache_size"], workers, self._options.get("range_cache")
        )
        native = _native.Image(
            where or self._reopen,
            cache,
            ranges,
            threads,
            self._options["profile"],
            self._options["endpoint"],
            self._options.get("disk_cache"),
            self._options.get("disk_cache_size"),
            self._options.get("remote_timeout"),
            # A ZIP's index, built where this image was opened before (the
            # parent of a forked worker), is taken over if the file is
            # unchanged: its memory stays shared with that process.
            None if opened is None else opened[1],
            range_size=self._options.get("range_size"),
        )
        if key is not None:
            with _SHARED_LOCK:
                # Two threads may both have opened one: the first
                # registered is kept for later copies, each keeps its own.
                _SHARED.setdefault(key, native)
                _SHARED.move_to_end(key)
                while len(_SHARED) > _SHARED_MAX:
                    _SHARED.popitem(last=False)
        # One assignment: a thread reading `_opened` sees the old or the new pair.
        self._opened = (pid, native, workers)
        return native

    # -- the image -----------------------------------------------------

    @property
    def location(self) -> str:
        return self._location

    @property
    def format(self) -> str:
        """``"squashfs"``, ``"zip"`` or ``"union"`` (a shard manifest)."""
        return self._native().format

    def stats(self) -> dict:
        """Counters of this process's image since it was opened here:
        ``cache_hits``, ``cache_misses``, ``cache_evictions``, ``cache_bytes``
        and ``cache_budget`` (decoded blocks), ``storage_bytes`` (read from
        the image file, or fetched from S3/HTTP), ``requests`` (reads of the
        file, or HTTP requests), ``lookups``, ``reads``, ``read_bytes`` (file
        bytes returned) and ``errors``; remote images add ``get_requests``,
        ``failed_requests`` and ``ranges_fetched``."""
        return self._native().stats()

    def verify(self, threads: int = 0) -> VerifyReport:
        """Checks the whole image, as ``packfs verify`` does: every directory
        listed, every file read to its end on ``threads`` threads (0: all
        cores), every hash of the image's hash record, codec checksum and ZIP
        CRC checked. Damage does not raise: each damaged path is in the
        report's ``damaged`` with its message (``"(image)"`` for a piece no
        path leads to), and ``ok`` is false. An image whose hash record is
        itself damaged does not open (``OSError``, EIO)."""
        if threads < 0:
            raise ValueError("threads must be >= 0")
        d = self._native().verify(threads)
        return VerifyReport(
            ok=not d["damaged"],
            entries=d["entries"],
            files=d["files"],
            bytes=d["bytes"],
            hash_record=d["hash_record"],
            damaged=[(p, m) for p, m in d["damaged"]],
        )

    def close(self) -> None:
        """Releases the image (its caches and threads); later calls raise
        ``ValueError``. A pickled copy is not affected."""
        self._closed = True
        self._opened = None

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "Image":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        # Two images of one location are different objects with their own
        # caches: fsspec, which keys its filesystem instances on the repr
        # of their arguments, must not take one for the other.
        return f"<packfs.Image {self._location!r} at {id(self):#x}>"

    # -- reading ------------------------------------------------------

    def read(self, path: str | bytes | os.PathLike) -> bytes:
        """The whole file at ``path``."""
        return self._native().read(path)

    def read_many(self, paths: Iterable[str | bytes | os.PathLike]) -> list[bytes]:
        """Whole files, decoded in parallel (GIL released); the first path
        that fails, in the order given, raises."""
        if isinstance(paths, (str, bytes, os.PathLike)):
            raise TypeError("read_many takes an iterable of paths, not one path: use read()")
        return self._native().read_many(paths)

    def locate(self, path: str | bytes | os.PathLike) -> Extent:
        """Where regular file ``path``'s data lies in the image's storage:
        files whose extents are close are read together cheaply (one
        request to object storage, one read-ahead on disk). A directory
        raises ``IsADirectoryError``, another kind ``OSError``."""
        return Extent(*self._native().locate(path))

    def will_read(self, extents: Iterable[tuple[int, int, int]]) -> None:
        """Say that the bytes at ``extents`` (``Extent`` or ``(part, offset,
        length)``, as :meth:`locate` gives; neighbours merged into one span
        are best) will all be read soon: the image starts fetching them in
        the background, whole (one ranged request per range of a remote
        image, a read-ahead of the span on disk), and returns at once. A
        hint: nothing waits, and a span outside the image is ignored."""
        raw = bytearray()
        for part, offset, length in extents:
            raw += struct.pack("<QQQ", part, offset, length)
        self._native().will_read(bytes(raw))

    def read_range(self, path: str | bytes | os.PathLike, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes of ``path`` from ``offset`` (fewer at the end)."""
        if offset < 0 or size < 0:
            raise ValueError("offset and size must be >= 0")
        return self._native().read_range(path, offset, size)

    def open(
        self,
        path: str | bytes | os.PathLike,
        mode: str = "rb",
        buffering: int = -1,
        encoding: str | None = None,
        errors: str | None = None,
        newline: str | None = None,
    ):
        """A read-only, seekable file object over ``path``, as ``open()``
        returns: ``io.BufferedReader`` for ``"rb"``, the raw file for
        ``buffering=0``, ``io.TextIOWrapper`` for ``"r"``/``"rt"``."""
        if mode not in ("r", "rb", "rt", "br", "tr"):
            raise ValueError(f"an image is read-only: mode must be 'rb' or 'r', not {mode!r}")
        binary = "b" in mode
        if binary and (encoding is not None or errors is not None or newline is not None):
            raise ValueError("binary mode takes no encoding, errors or newline")
        raw = ImageFile(self, path)
        if buffering == 0:
            if not binary:
                raise ValueError("text mode needs a buffer")
            return raw
        size = buffering if buffering > 1 else DEFAULT_BUFFER_SIZE
        buffered = io.BufferedReader(raw, size)
        if binary:
            return buffered
        text = io.TextIOWrapper(buffered, encoding=encoding, errors=errors, newline=newline)
        text.mode = "r"  # as open() sets it; the buffer's would say "rb"
        return text

    # -- metadata -----------------------------------------------------

    def stat(self, path: str | bytes | os.PathLike, *, follow_symlinks: bool = True) -> os.stat_result:
        """An ``os.stat_result`` for ``path`` (``st_atime`` and ``st_ctime``
        are ``st_mtime``, as the kernel shows SquashFS; ``st_dev`` is 0)."""
        native = self._native()
        return _stat_result(native.stat(path, follow_symlinks), native.block_size)

    def lstat(self, path: str | bytes | os.PathLike) -> os.stat_result:
        return self.stat(path, follow_symlinks=False)

    def exists(self, path: str | bytes | os.PathLike) -> bool:
        """Whether ``path`` names an entry (following symlinks). Unlike
        ``os.path.exists``, a damaged image raises ``OSError`` instead of
        answering False."""
        return self._kind(path) is not None

    def isdir(self, path: str | bytes | os.PathLike) -> bool:
        return self._kind(path) == _stat.S_IFDIR

    def isfile(self, path: str | bytes | os.PathLike) -> bool:
        return self._kind(path) == _stat.S_IFREG

    def _kind(self, path: str | bytes | os.PathLike) -> int | None:
        native = self._native()  # a closed image's ValueError is raised
        try:
            return native.kind(path)
        except ValueError:
            # A NUL in the path: no entry, as os.path.exists answers.
            return None

    def islink(self, path: str | bytes | os.PathLike) -> bool:
        self._native()  # a closed image's ValueError is raised
        try:
            return _stat.S_ISLNK(self.lstat(path).st_mode)
        except (FileNotFoundError, NotADirectoryError, PermissionError, ValueError):
            return False
        except OSError as e:
            # A loop on the way to it, or a name no entry can have: absent,
            # as for ``isdir``/``exists``.
            if e.errno in (errno.ELOOP, errno.ENAMETOOLONG):
                return False
            raise

    def readlink(self, path: str | bytes | os.PathLike) -> str:
        """The target of the symlink ``path``, as stored (``bytes`` for a
        ``bytes`` path)."""
        target = self._native().readlink(path)
        return os.fsencode(target) if isinstance(os.fspath(path), bytes) else target

    def listdir(self, path: str | bytes | os.PathLike = "") -> list:
        """Names in the directory ``path`` (``bytes`` for a ``bytes`` path),
        in the image's order, without ``.`` and ``..``."""
        names = self._native().listdir(path)
        if isinstance(os.fspath(path), bytes):
            return [os.fsencode(n) for n in names]
        return names

    def scandir(self, path: str | bytes | os.PathLike = "") -> "ScandirIterator":
        """An iterator of :class:`DirEntry` for the directory ``path``, usable
        as a context manager, like ``os.scandir``."""
        top = os.fspath(path)
        entries = self._native().scandir(top)
        return ScandirIterator(self, top, entries)

    def walk(
        self,
        top: str | bytes | os.PathLike = "",
        topdown: bool = True,
        onerror=None,
        followlinks: bool = False,
    ) -> Iterator[tuple]:
        """``os.walk`` over the image: ``(dirpath, dirnames, filenames)``.

        Unlike ``os.walk``, it never loops: a directory met again inside
        its own subtree (through a link when following links, or in a
        damaged image's listing) goes to ``onerror`` as ``OSError(ELOOP)``
        and is not entered.
        """
        top = os.fspath(top)
        # (path, inode numbers of the directories above it and its own):
        # a directory whose number is among them would repeat its subtree
        # forever. Without following links a sound image has one path to
        # each directory, so any directory met twice is damage (`entered`).
        try:
            stack: list = [(top, (self.stat(top).st_ino,))]
        except OSError:
            stack = [(top, ())]  # said by the listing of top, below
        entered: set = set(stack[0][1])
        while stack:
            item = stack.pop()
            if len(item) == 3:  # bottom-up: yield after the children
                yield item
                continue
            item, above = item
            dirs, files = [], []
            try:
                with self.scandir(item) as it:
                    entries = list(it)
            except OSError as e:
                if onerror is not None:
                    onerror(e)
                continue
            for e in entries:
                # As os.walk: an entry whose type cannot be told (a link to
                # an encrypted ZIP member) is listed as a file.
                try:
                    is_dir = e.is_dir()
                except OSError:
                    is_dir = False
                (dirs if is_dir else files).append(e.name)
            # Names not descended into: links, unless followed.
            links = set() if followlinks else {e.name for e in entries if e.is_symlink()}
            if topdown:
                yield item, dirs, files
            else:
                stack.append((item, dirs, files))
            # As os.walk: after a top-down yield, what the caller left in (or
            # put into) `dirs`; a name that is no directory ends in onerror.
            entry = {e.name: e for e in entries}
            for d in reversed([d for d in dirs if d not in links]):
                path = _join(item, d)
                e = entry.get(d)
                # The inode's own number, not the listing's: a damaged
                # listing may name one inode and point at another.
                try:
                    ino = None if e is None else e.stat(follow_symlinks=followlinks).st_ino
                except OSError as err:
                    if onerror is not None:
                        onerror(err)
                    continue
                if ino is not None:
                    if ino in above or (not followlinks and ino in entered):
                        if onerror is not None:
                            onerror(OSError(errno.ELOOP, f"{self._location}: a directory met "
                                            "again inside itself (a link loop, or a corrupt "
                                            "image)", path))
                        continue
                    entered.add(ino)
                stack.append((path, (*above, ino) if ino is not None else above))


def _stat_result(t: tuple, blksize: int) -> os.stat_result:
    mode, ino, nlink, uid, gid, size, mtime, rdev, blocks = t
    return os.stat_result(
        (mode, ino, 0, nlink, uid, gid, size, mtime, mtime, mtime),
        {
            "st_atime": float(mtime),
            "st_mtime": float(mtime),
            "st_ctime": float(mtime),
            "st_atime_ns": mtime * 1_000_000_000,
            "st_mtime_ns": mtime * 1_000_000_000,
            "st_ctime_ns": mtime * 1_000_000_000,
            "st_blocks": blocks,
            "st_blksize": blksize,
            "st_rdev": rdev,
        },
    )


class DirEntry:
    """One entry of :meth:`Image.scandir`, like ``os.DirEntry``."""

    __slots__ = ("name", "path", "_image", "_type", "_ino", "_stat", "_lstat")

    def __init__(self, image: Image, top: Any, name: Any, type_bits: int, ino: int) -> None:
        if isinstance(top, bytes):
            name = os.fsencode(name)
        self.name = name
        self.path = _join(top, name)
        self._image = image
        self._type = type_bits
        self._ino = ino
        self._stat = None
        self._lstat = None

    def inode(self) -> int:
        return self._ino

    def is_symlink(self) -> bool:
        return self._type == _stat.S_IFLNK

    def _followed_type(self) -> int | None:
        if self._type != _stat.S_IFLNK:
            return self._type
        try:
            return _stat.S_IFMT(self.stat().st_mode)
        except FileNotFoundError:
            # A dangling link: neither. Anything else (a loop, a file on
            # the way) raises, as os.DirEntry's does.
            return None

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        t = self._followed_type() if follow_symlinks else self._type
        return t == _stat.S_IFDIR

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        t = self._followed_type() if follow_symlinks else self._type
        return t == _stat.S_IFREG

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        if follow_symlinks:
            if self._stat is None:
                self._stat = self._image.stat(self.path)
            return self._stat
        if self._lstat is None:
            self._lstat = self._image.stat(self.path, follow_symlinks=False)
        return self._lstat

    def __fspath__(self) -> Any:
        """The entry's path in the image, so that an entry can be passed
        where a path is taken (``image.read(entry)``), as ``os.DirEntry``."""
        return self.path

    def __repr__(self) -> str:
        return f"<packfs.DirEntry {self.name!r}>"


class ScandirIterator:
    """What :meth:`Image.scandir` returns: iterable once, and a context manager."""

    def __init__(self, image: Image, top: Any, entries: list) -> None:
        self._image = image
        self._top = top
        self._entries = iter(entries)

    def __iter__(self) -> "ScandirIterator":
        return self

    def __next__(self) -> DirEntry:
        name, type_bits, ino = next(self._entries)
        return DirEntry(self._image, self._top, name, type_bits, ino)

    def close(self) -> None:
        self._entries = iter(())

    def __enter__(self) -> "ScandirIterator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
