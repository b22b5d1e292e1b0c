"""Pickling, fork, and a real torch DataLoader under each start method."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import subprocess
import sys

import pytest

import packfs


def test_importing_packfs_imports_no_torch():
    r = subprocess.run(
        [sys.executable, "-c", "import sys, packfs, packfs.fsspec; print('torch' in sys.modules)"],
        capture_output=True, text=True, check=True,
    )
    assert r.stdout.strip() == "False"


def test_pickles_as_location_and_options(images):
    img = packfs.Image(images["packfs-sqfs"][0], cache_size=32 << 20)
    img.read("a/hello.txt")
    data = pickle.dumps(img)
    assert len(data) < 500  # the location and options, no state
    copy = pickle.loads(data)
    assert copy._opened is None  # lazily opened
    assert copy.read("a/hello.txt") == b"hello world\n"
    assert copy.stats()["cache_budget"] == 32 << 20


def _read_in_child(img, q):
    q.put((os.getpid(), img.read("a/hello.txt"), img._native().pid))


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_child_processes_reopen(images, method):
    img = packfs.Image(images["packfs-zip"][0])
    img.read_many(["a/hello.txt", "big.txt"])  # the parent's image is in use
    ctx = mp.get_context(method)
    q = ctx.Queue()
    p = ctx.Process(target=_read_in_child, args=(img, q))
    p.start()
    pid, data, native_pid = q.get(timeout=120)
    p.join(60)
    assert p.exitcode == 0
    assert data == b"hello world\n" and native_pid == pid != os.getpid()
    assert img._native().pid == os.getpid()


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_child_processes_reopen_remote_images(images, range_server, method):
    """All remote objects of a process share one runtime: a forked child
    inherits it without its threads, and must start its own for the image
    it reopens (and for one it opens anew)."""
    img = packfs.Image(f"{range_server}/{images['packfs-sqfs'][0].name}")
    img.read_many(["a/hello.txt", "big.txt"])  # the parent's runtime runs
    other = packfs.Image(f"{range_server}/{images['packfs-zip'][0].name}")
    ctx = mp.get_context(method)
    for image in (img, other):
        q = ctx.Queue()
        p = ctx.Process(target=_read_in_child, args=(image, q))
        p.start()
        pid, data, native_pid = q.get(timeout=120)
        p.join(60)
        assert p.exitcode == 0
        assert data == b"hello world\n" and native_pid == pid != os.getpid()
    assert img.read("a/hello.txt") == b"hello world\n"


def test_fork_while_threads_read(images):
    """Forks while other threads are inside read_many: the child's reads
    must not wait on a lock held by a thread it does not have."""
    import threading

    img = packfs.Image(images["packfs-sqfs"][0], cache_size=8 << 20)
    names = [f"many/f{i:04d}" for i in range(300)] + ["big.txt", "random.bin"]
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            img.read_many(names)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        ctx = mp.get_context("fork")
        for _ in range(10):
            q = ctx.Queue()
            p = ctx.Process(target=_read_in_child, args=(img, q))
            p.start()
            assert q.get(timeout=60)[1] == b"hello world\n"
            p.join(60)
            assert p.exitcode == 0
    finally:
        stop.set()
        for t in threads:
            t.join()


@contextlib.contextmanager
def _as_worker(n: int):
    """Runs the block as if inside a DataLoader worker of ``n`` workers:
    ``torch.utils.data.get_worker_info()`` says so (torch not needed)."""

    class Info:
        num_workers = n

    class FakeData:
        @staticmethod
        def get_worker_info():
            return Info()

    saved = sys.modules.get("torch.utils.data")
    sys.modules["torch.utils.data"] = FakeData
    try:
        yield
    finally:
        if saved is None:
            del sys.modules["torch.utils.data"]
        else:
            sys.modules["torch.utils.data"] = saved


def test_cache_budget_divided_among_workers():
    from packfs import _budget

    loader_ranges = _budget.default_range_cache()
    assert 256 << 20 <= loader_ranges <= 8 << 30
    with _as_worker(4):
        cache, ranges, threads = _budget.process_budget(400 << 20)
        assert cache == 100 << 20 and ranges == loader_ranges // 4 and threads >= 1
        # A range cache given for the loader is divided the same way.
        assert _budget.process_budget(None, range_cache=1 << 30)[1] == 256 << 20
    assert _budget.process_budget(400 << 20)[0] == 400 << 20
    assert _budget.process_budget(None, range_cache=1 << 30)[1] == 1 << 30
    with pytest.raises(ValueError, match="range_cache"):
        _budget.process_budget(None, range_cache=-1)


def test_an_image_opened_before_its_process_became_a_worker_takes_a_share(images):
    # Regression: an image made at import of a script (which a spawn or
    # forkserver DataLoader worker imports again, before it is a worker)
    # kept the whole loader's cache budget in every worker.
    img = packfs.Image(images["packfs-sqfs"][0], cache_size=400 << 20)
    assert img.stats()["cache_budget"] == 400 << 20
    with _as_worker(4):
        assert img.read("a/hello.txt") == b"hello world\n"
        assert img.stats()["cache_budget"] == 100 << 20
