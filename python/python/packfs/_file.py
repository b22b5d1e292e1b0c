"""The file object of ``Image.open``: a read-only, seekable raw stream."""

from __future__ import annotations

import io
import operator
import os
from typing import Any


class ImageFile(io.RawIOBase):
    """A regular file inside an image, as an unbuffered binary stream.

    ``Image.open`` wraps it in ``io.BufferedReader`` (or ``TextIOWrapper``);
    alone it behaves like ``open(path, "rb", buffering=0)``: ``readinto``,
    ``read``, ``readall``, ``seek`` (past the end is allowed and reads
    nothing), ``tell``; not writable, no ``fileno``. The path is resolved
    once, at open; in a forked child it is resolved again in that process's
    image.
    """

    def __init__(self, image: Any, path: Any) -> None:
        super().__init__()
        self._image = image
        self._path = os.fspath(path)
        self.name = self._path
        self._pos = 0
        self._open_here()

    def _open_here(self) -> Any:
        native = self._image._native()
        self._node, self._size = native.open_file(self._path)
        self._native_ref = native
        return native

    def _reader(self) -> Any:
        native = self._native_ref
        if native.pid != os.getpid():
            # Inherited through fork: resolve again in this process's image.
            native = self._open_here()
        return native

    @property
    def mode(self) -> str:
        return "rb"

    @property
    def size(self) -> int:
        """The file's size in bytes."""
        return self._size

    def readable(self) -> bool:
        self._check_open()
        return True

    def seekable(self) -> bool:
        self._check_open()
        return True

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed file.")

    def _read(self, n: int) -> bytes:
        if n <= 0 or self._pos >= self._size:
            return b""
        n = min(n, self._size - self._pos)
        data = self._reader().read_node(self._node, self._pos, n, self._path)
        self._pos += len(data)
        return data

    def readinto(self, b: Any) -> int:
        self._check_open()
        view = memoryview(b).cast("B")
        data = self._read(len(view))
        view[: len(data)] = data
        return len(data)

    def read(self, size: int = -1) -> bytes:
        self._check_open()
        if size is None or size < 0:
            return self.readall()
        return self._read(size)

    def readall(self) -> bytes:
        self._check_open()
        return self._read(self._size - self._pos)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check_open()
        offset = operator.index(offset)  # as FileIO: 1.5 is a TypeError
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._size + offset
        else:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        if pos < 0:
            raise OSError(22, "Invalid argument: negative seek position")
        self._pos = pos
        return pos

    def write(self, b: Any) -> int:
        raise io.UnsupportedOperation("write: packfs images are read-only")

    def writelines(self, lines: Any) -> None:
        raise io.UnsupportedOperation("write: packfs images are read-only")

    def truncate(self, size: Any = None) -> int:
        raise io.UnsupportedOperation("truncate: packfs images are read-only")

    def tell(self) -> int:
        self._check_open()
        return self._pos

    def __repr__(self) -> str:
        return f"<packfs.ImageFile name={self._path!r} image={self._image.location!r}>"
