"""Types of `packfs._native`, the Rust extension under the package (python/src).

The package's public API is `packfs.Image` and friends (python/packfs); this
module is what they call. tests/test_typing.py checks it against the built
extension with mypy's stubtest: a name or a parameter added, removed or
renamed in Rust without its change here fails the tests (return types are
not visible at run time; they are kept by reading python/src/image.rs).
"""

import os
from typing import Any, TypeAlias, final

__all__ = [
    "Image",
    "NotAnImageError",
    "memory_limit",
    "before_fork",
    "after_fork_in_parent",
    "after_fork_in_child",
]

_Path: TypeAlias = str | bytes | os.PathLike[str] | os.PathLike[bytes]

class NotAnImageError(OSError):
    """The file or object is not a SquashFS or ZIP image packfs can read (or is damaged where the format starts)."""

@final
class Image:
    """One process's handle on an opened image (`packfs.Image` opens one per process)."""

    def __new__(
        cls,
        location: _Path,
        cache_size: int,
        range_cache: int,
        threads: int,
        profile: str | None = None,
        endpoint: str | None = None,
        disk_cache: _Path | None = None,
        disk_cache_size: int | None = None,
        remote_timeout: float | None = None,
        inherited: Image | None = None,
        range_size: int | None = None,
    ) -> Image: ...
    @property
    def pid(self) -> int: ...
    @property
    def location(self) -> str: ...
    @property
    def format(self) -> str: ...
    @property
    def hidden_entries(self) -> int: ...
    @property
    def block_size(self) -> int: ...
    def stat(
        self, path: _Path, follow_symlinks: bool
    ) -> tuple[int, int, int, int, int, int, int, int, int]:
        """(st_mode, st_ino, st_nlink, st_uid, st_gid, st_size, st_mtime, st_rdev, st_blocks)."""
    def kind(self, path: _Path) -> int | None:
        """The `st_mode` type bits of what `path` names (symlinks followed), None if nothing."""
    def open_file(self, path: _Path) -> tuple[int, int]:
        """(node, size) of a regular file, for `read_node`."""
    def read(self, path: _Path) -> bytes: ...
    def read_range(self, path: _Path, offset: int, size: int) -> bytes: ...
    def read_node(self, node: int, offset: int, size: int, path: _Path) -> bytes: ...
    def read_many(self, paths: object) -> list[bytes]:
        """Whole files, read in parallel; `paths` is any iterable of paths."""
    def listdir(self, path: _Path) -> list[str]: ...
    def scandir(self, path: _Path) -> list[tuple[str, int, int]]:
        """(name, st_mode type bits, inode number) of each entry."""
    def files_under(self, top: _Path, exts: list[str] | None) -> tuple[bytes, bytes, list[int]]:
        """Files under `top` in ImageFolder's order: (paths end to end, little-endian u64
        offsets, indices of paths that are not UTF-8 whose `exts` test is Python's)."""
    def locate(self, path: _Path) -> tuple[int, int, int]:
        """(part, offset, length) of a regular file's data in the image's storage."""
    def locate_many(self, paths: object) -> bytes:
        """`locate` of each path, little-endian u64 triples end to end."""
    def will_read(self, spans: bytes) -> None:
        """Fetch spans (little-endian u64 triples) in the background."""
    def readlink(self, path: _Path) -> str: ...
    def stats(self) -> dict[str, int]: ...
    def verify(self, threads: int) -> dict[str, Any]: ...

def memory_limit() -> int:
    """Bytes this process may use: RAM, or the tightest cgroup limit of a Slurm job or container."""

def before_fork() -> None: ...
def after_fork_in_parent() -> None: ...
def after_fork_in_child() -> None: ...
