"""``packfs://``: an fsspec filesystem over the files inside an image.

Registered through the ``fsspec.specs`` entry point, so fsspec finds it by
protocol once ``packfs`` is installed::

    import fsspec, pandas
    with fsspec.open("packfs://tables/x.csv", fo="data.sqfs") as f: ...
    pandas.read_csv("packfs://tables/x.csv::s3://bucket/data.sqfs")
    fs = fsspec.filesystem("packfs", fo="s3://bucket/data.sqfs", endpoint="http://...")

``fo`` is the image location, as for fsspec's ``zip://``: a path, a
manifest, ``s3://BUCKET/KEY`` or ``http(s)://...``, or a chained URL's
target. The image is read by packfs itself (range requests for S3 and
HTTP, its own block cache), not through another fsspec filesystem: the
chained target only names the object. So the target's options that packfs
can honour are its endpoint and profile; credentials come from the
environment or the AWS files, as for the ``packfs`` command.

Listing and ``info`` ask the image for one directory at a time; nothing
holds the image's whole file list in Python.
"""

from __future__ import annotations

import errno
import io
import os
import stat as _stat
import warnings
from typing import Any

from fsspec import AbstractFileSystem
from fsspec.spec import AbstractBufferedFile

from ._image import DEFAULT_BUFFER_SIZE, Image, _file_identity

_S3 = ("s3", "s3a")
_HTTP = ("http", "https")
_LOCAL = (None, "", "file", "local")


def _location(fo: Any, target_protocol: str | None) -> str:
    fo = os.fsdecode(fo) if isinstance(fo, bytes) else str(fo)
    if "://" in fo:
        if fo.startswith("file://"):
            return fo[len("file://") :]
        return fo
    if target_protocol in _LOCAL:
        return fo
    if target_protocol in _S3:
        return "s3://" + fo
    if target_protocol in _HTTP:
        return f"{target_protocol}://{fo}"
    raise ValueError(
        f"packfs reads images from files, s3:// and http(s)://, not {target_protocol}://"
    )


def _remote_options(target_options: dict | None) -> dict:
    """The endpoint and profile in an s3fs-style ``target_options``."""
    o = dict(target_options or {})
    out: dict = {}
    client = dict(o.pop("client_kwargs", None) or {})
    endpoint = o.pop("endpoint_url", None)
    endpoint = client.pop("endpoint_url", None) if endpoint is None else endpoint
    client.pop("endpoint_url", None)
    if endpoint:
        out["endpoint"] = endpoint
    profile = o.pop("profile", None)
    if profile:
        out["profile"] = profile
    for k in ("key", "secret", "token"):
        if o.get(k):
            raise ValueError(
                "packfs takes S3 credentials from the environment or a profile "
                "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, --profile), not from "
                f"target_options[{k!r}]"
            )
        o.pop(k, None)
    # The image is read by packfs, not by the target's filesystem: an
    # option meant for that one (anon, requester_pays, a region) would
    # otherwise be dropped without a word.
    unused = sorted(o) + [f"client_kwargs[{k!r}]" for k in sorted(client)]
    if unused:
        warnings.warn(
            f"packfs reads the image itself and does not use target_options {', '.join(unused)} "
            "(it takes endpoint_url and profile; S3 keys come from the environment or a "
            "profile, and none at all means anonymous requests)",
            UserWarning,
            stacklevel=3,
        )
    return out


def _absolute(fo: Any, target_protocol: str | None) -> Any:
    """A relative local image path, joined to the working directory."""
    if target_protocol not in _LOCAL or not isinstance(fo, (str, bytes, os.PathLike)):
        return fo
    path = os.fsdecode(os.fspath(fo))
    if not path or "://" in path or os.path.isabs(path):
        return fo
    return os.path.join(os.getcwd(), path)


class _AbsoluteImagePath(type(AbstractFileSystem)):  # type: ignore[misc]
    """fsspec's metaclass, with a relative ``fo`` made absolute first.

    fsspec hands out one instance per set of constructor arguments and
    pickles an instance as those arguments. With ``fo="data.sqfs"`` both
    meant the first image opened: after a ``chdir``, the same arguments
    returned the old directory's image, and a spawned worker unpickled
    them in its own working directory. An absolute path names one file
    wherever it is used, as :class:`packfs.Image` makes it.
    """

    def __call__(cls, *args: Any, **kwargs: Any):
        target = kwargs.get("target_protocol", args[2] if len(args) > 2 else None)
        if args:
            args = (_absolute(args[0], target), *args[1:])
        elif "fo" in kwargs:
            kwargs["fo"] = _absolute(kwargs["fo"], target)
        # The file's identity is an argument too: an image packed again in
        # place (a new inode, size or time) is a new instance, not the one
        # still holding the old file, which fsspec would hand out and read
        # the old contents through.
        fo = args[0] if args else kwargs.get("fo")
        if target in _LOCAL and isinstance(fo, (str, bytes, os.PathLike)):
            location = _location(os.fspath(fo), target)
            if "://" not in location:
                kwargs["_image_file"] = _file_identity(location)
        return super().__call__(*args, **kwargs)


class PackFileSystem(AbstractFileSystem, metaclass=_AbsoluteImagePath):
    """The files inside one packfs image (SquashFS, ZIP or shard manifest),
    read-only. ``fo`` is the image location or an open :class:`packfs.Image`;
    ``cache_size``, ``range_cache``, ``profile``, ``endpoint``, ``disk_cache``,
    ``disk_cache_size`` and ``remote_timeout`` are :class:`packfs.Image`'s."""

    protocol = "packfs"
    root_marker = ""

    def __init__(
        self,
        fo: Any = "",
        mode: str = "r",
        target_protocol: str | None = None,
        target_options: dict | None = None,
        cache_size: int | None = None,
        profile: str | None = None,
        endpoint: str | None = None,
        disk_cache: str | os.PathLike | None = None,
        disk_cache_size: int | None = None,
        remote_timeout: float | None = None,
        range_cache: int | None = None,
        _image_file: tuple | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if mode != "r":
            raise ValueError("packfs images are read-only: mode must be 'r'")
        if isinstance(fo, Image):
            self.image = fo
        else:
            if not fo:
                raise ValueError("packfs:// needs the image location: fo=... or a chained URL")
            opts = _remote_options(target_options)
            if profile:
                opts["profile"] = profile
            if endpoint:
                opts["endpoint"] = endpoint
            if disk_cache is not None:
                opts["disk_cache"] = disk_cache
                opts["disk_cache_size"] = disk_cache_size
            if remote_timeout is not None:
                opts["remote_timeout"] = remote_timeout
            if range_cache is not None:
                opts["range_cache"] = range_cache
            self.image = Image(_location(fo, target_protocol), cache_size=cache_size, **opts)

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        # A chained URL ("packfs://x.csv::s3://...") is split by fsspec
        # before it gets here, so "::" is part of a name, as on a local
        # filesystem.
        path = os.fsdecode(path) if isinstance(path, bytes) else str(path)
        for prefix in ("packfs://", "packfs::"):
            if path.startswith(prefix):
                path = path[len(prefix) :]
        return path.strip("/")

    def _info(self, path: str, st: Any, islink: bool) -> dict:
        mode = st.st_mode
        kind = (
            "directory" if _stat.S_ISDIR(mode) else "file" if _stat.S_ISREG(mode) else "other"
        )
        return {
            "name": path,
            "size": st.st_size,
            "type": kind,
            "mode": mode,
            "ino": st.st_ino,
            "nlink": st.st_nlink,
            "uid": st.st_uid,
            "gid": st.st_gid,
            "mtime": st.st_mtime,
            "islink": islink,
        }

    def info(self, path: str, **kwargs: Any) -> dict:
        path = self._strip_protocol(path)
        lst = self.image.lstat(path)
        islink = _stat.S_ISLNK(lst.st_mode)
        st = lst
        if islink:
            try:
                st = self.image.stat(path)
            except OSError:
                pass  # a dangling link shows as itself
        info = self._info(path, st, islink)
        if islink:
            self._destination(info, path)
        return info

    def _destination(self, info: dict, path: str) -> None:
        """A link's target as ``info["destination"]``, left out when it
        cannot be read (a link in an encrypted ZIP): the entry is still
        listed, as ``os.scandir`` lists it."""
        try:
            info["destination"] = self.image.readlink(path)
        except PermissionError:
            pass

    def _entry_info(self, path: str) -> dict:
        """A listed entry as fsspec's local filesystem lists one: typed by
        the entry itself, so that a link to a directory is ``"other"`` and
        ``walk``/``find``/``glob`` do not descend into it (two links to their
        own directory would make a walk endless); its size is its target's."""
        lst = self.image.lstat(path)
        if not _stat.S_ISLNK(lst.st_mode):
            return self._info(path, lst, False)
        info = self._info(path, lst, True)
        try:
            info["size"] = self.image.stat(path).st_size
        except OSError:
            info["size"] = 0  # dangling, a loop, or unreadable
        self._destination(info, path)
        return info

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list:
        path = self._strip_protocol(path)
        if not self.image.isdir(path):
            info = self.info(path)  # raises FileNotFoundError when missing
            return [info] if detail else [info["name"]]
        out = []
        with self.image.scandir(path) as it:
            for e in it:
                full = f"{path}/{e.name}" if path else e.name
                if detail:
                    out.append(self._entry_info(full))
                else:
                    out.append(full)
        return out

    def exists(self, path: str, **kwargs: Any) -> bool:
        return self.image.exists(self._strip_protocol(path))

    def isdir(self, path: str) -> bool:
        return self.image.isdir(self._strip_protocol(path))

    def isfile(self, path: str) -> bool:
        return self.image.isfile(self._strip_protocol(path))

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        path = self._strip_protocol(path)
        if start is None and end is None:
            return self.image.read(path)
        size = self.image.stat(path).st_size
        start = 0 if start is None else (start + size if start < 0 else start)
        end = size if end is None else (end + size if end < 0 else end)
        start, end = max(0, start), min(size, end)
        if end <= start:
            return b""
        return self.image.read_range(path, start, end - start)

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: int | None = None,
        autocommit: bool = True,
        cache_options: dict | None = None,
        **kwargs: Any,
    ):
        if mode != "rb":
            raise ValueError(f"packfs images are read-only: mode must be 'rb', not {mode!r}")
        path = self._strip_protocol(path)
        if kwargs.get("cache_type") is not None:
            # fsspec's caching asked for by name, or by a caching
            # filesystem layered on this one (blockcache::, which reads
            # through `_fetch_range`): fsspec's own file object.
            return PackFile(
                self,
                path,
                mode,
                block_size=block_size or "default",
                autocommit=autocommit,
                cache_type=kwargs["cache_type"],
                cache_options=cache_options,
                size=self.image.stat(path).st_size,
            )
        return self._reader(path, block_size or -1)

    def _reader(self, path: str, buffering: int, at: int = 0) -> "_Reader":
        # The image's own buffered reader (no fsspec layer in the way),
        # which fsspec's readers need `size` of and pickle.
        raw = self.image.open(path, "rb", buffering=0)
        f = _Reader(raw, buffering if buffering > 1 else DEFAULT_BUFFER_SIZE)
        f.size = raw.size
        f.fs, f.path = self, path
        f.seek(at)
        return f

    def ukey(self, path: str) -> str:
        path = self._strip_protocol(path)
        st = self.image.stat(path)
        return f"{self.image.location}:{path}:{st.st_ino}:{st.st_size}:{st.st_mtime}"

    def modified(self, path: str):
        import datetime

        st = self.image.stat(self._strip_protocol(path))
        return datetime.datetime.fromtimestamp(st.st_mtime, tz=datetime.timezone.utc)

    # Writes: fsspec's defaults for these do nothing (mkdir) or say "not
    # implemented"; an image is read-only, and says so as the kernel does
    # for a read-only mount.
    def _read_only(self, path: Any, *args: Any, **kwargs: Any):
        raise OSError(errno.EROFS, f"{self.image.location} is a read-only image", str(path))

    # As mkdir(2) and os.makedirs on a read-only mount: a name that exists
    # is EEXIST, and makedirs' exist_ok passes for a directory, since a
    # pipeline's "makedirs(out, exist_ok=True)" must pass on an image that
    # already has the directory.
    def mkdir(self, path: Any, create_parents: bool = True, **kwargs: Any) -> None:
        stripped = self._strip_protocol(path)
        if self.image.exists(stripped) or self.image.islink(stripped):
            raise FileExistsError(errno.EEXIST, f"{self.image.location}: the name exists", str(path))
        self._read_only(path)

    def makedirs(self, path: Any, exist_ok: bool = False) -> None:
        if exist_ok and self.image.isdir(self._strip_protocol(path)):
            return
        self.mkdir(path)

    rmdir = rm_file = _rm = rm = touch = _read_only
    mv = cp_file = pipe_file = put_file = _read_only


class _Reader(io.BufferedReader):
    """A file opened through ``packfs://``: the image's buffered reader,
    which pickles as its filesystem, path and position, as fsspec's local
    files do."""

    def __init__(self, raw: Any, buffer_size: int) -> None:
        super().__init__(raw, buffer_size)
        self._buffer_size = buffer_size

    def __reduce__(self):
        return (_reopen, (self.fs, self.path, self._buffer_size, self.tell()))


def _reopen(fs: "PackFileSystem", path: str, buffering: int, at: int) -> _Reader:
    return fs._reader(path, buffering, at)


class PackFile(AbstractBufferedFile):
    """A file of ``packfs://`` as fsspec's own file objects are, for
    ``cache_type=`` and caching filesystems layered on top."""

    def _fetch_range(self, start: int, end: int) -> bytes:
        return self.fs.image.read_range(self.path, start, max(0, end - start))
