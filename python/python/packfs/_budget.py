"""How much memory and how many threads one process's image gets.

An image in a DataLoader worker shares the machine with the other workers,
so the budgets a user gives (or the defaults) are for the whole loader and
are divided by the number of workers. The worker count is read from
``torch.utils.data.get_worker_info()`` only when torch is already imported:
packfs never imports torch itself.
"""

from __future__ import annotations

import os
import sys

from . import _native

MIB = 1 << 20
#: Smallest decoded-block cache one process gets: metadata blocks of a
#: large directory and a few data blocks stay cached.
MIN_CACHE = 8 * MIB
#: Smallest fetched-range cache one process gets: two 4 MiB ranges, the
#: least the remote source accepts.
MIN_RANGE_CACHE = 8 * MIB


def memory_limit() -> int:
    """Bytes this process may use: RAM, or the tighter cgroup limit (v2
    ``memory.max`` of the cgroup and its ancestors, v1
    ``memory.limit_in_bytes``) of a Slurm job or a container: what
    ``packfs mount`` computes, by the same code."""
    return _native.memory_limit()


def default_cache_size() -> int:
    """The default decoded-block cache for the whole loader: an eighth of
    the memory limit, 64 MiB to 1 GiB (``packfs mount``'s default)."""
    return max(64 * MIB, min(memory_limit() // 8, 1 << 30))


def default_range_cache() -> int:
    """The default fetched-range cache of a remote image for the whole
    loader: an eighth of the memory limit, 256 MiB to 8 GiB (``packfs
    mount --range-cache``'s default)."""
    return max(256 * MIB, min(memory_limit() // 8, 8 << 30))


def num_workers() -> int:
    """DataLoader workers sharing the budgets: ``num_workers`` inside a
    worker, else 1."""
    data = sys.modules.get("torch.utils.data")
    if data is None:
        return 1
    try:
        info = data.get_worker_info()
    except Exception:  # a torch too old or too new to ask: one share
        return 1
    return max(1, int(info.num_workers)) if info is not None else 1


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def process_budget(
    cache_size: int | None, workers: int | None = None, range_cache: int | None = None
) -> tuple[int, int, int]:
    """``(cache bytes, range-cache bytes, read_many threads)`` for this
    process: the loader's budgets divided by its worker count (``workers``,
    else :func:`num_workers`), and the cores allowed to this process shared
    among the workers."""
    workers = num_workers() if workers is None else workers
    total = default_cache_size() if cache_size is None else int(cache_size)
    if total < 0:
        raise ValueError(f"cache_size must be >= 0, not {cache_size}")
    cache = max(total // workers, MIN_CACHE)
    remote = default_range_cache() if range_cache is None else int(range_cache)
    if remote < 0:
        raise ValueError(f"range_cache must be >= 0, not {range_cache}")
    ranges = max(remote // workers, MIN_RANGE_CACHE)
    threads = max(1, cpu_count() // workers)
    return cache, ranges, threads
