"""Pickling, fork, and a real torch DataLoader under each start method."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import subprocess
import sys
import zipfile

import pytest

import packfs
from conftest import need


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


def _reads_so_far(img, path):
    img.read(path)
    return os.getpid(), img.stats()["reads"]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_pool_opens_an_image_once_per_worker(images, tmp_path, method):
    """Found by a review: a process pool unpickles its task's arguments for
    every task (Pool.map, concurrent.futures), and each unpickled image
    opened the image again: a 200k-entry ZIP's index was rebuilt per task
    (20 MiB read for a 128-byte file). Copies unpickled in one process now
    share one open image, while the file is the same file."""
    from concurrent.futures import ProcessPoolExecutor
    from functools import partial

    img = packfs.Image(images["packfs-zip"][0])
    paths = ["a/hello.txt", "big.txt", "table.csv"] * 10
    with ProcessPoolExecutor(2, mp_context=mp.get_context(method)) as pool:
        got = list(pool.map(partial(_reads_so_far, img), paths))
    # One open image per worker: its read counter goes up with each task
    # the worker ran (a fresh open per task would say 1 every time).
    per_worker: dict = {}
    for pid, reads in got:
        per_worker.setdefault(pid, []).append(reads)
    for pid, reads in per_worker.items():
        assert sorted(reads) == list(range(1, len(reads) + 1)), (pid, reads)
    # In one process too; a replaced file is opened anew.
    copy = tmp_path / "copy.zip"
    copy.write_bytes(images["packfs-zip"][0].read_bytes())
    data = pickle.dumps(packfs.Image(copy))
    a, b = pickle.loads(data), pickle.loads(data)
    assert a._native() is b._native()
    copy.write_bytes(copy.read_bytes())  # the same bytes, a new time
    os.utime(copy, ns=(0, 0))
    c = pickle.loads(data)
    assert c._native() is not a._native() and c.read("a/hello.txt") == b"hello world\n"


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


def _private_kb() -> int:
    """This process's private memory (its own pages, not shared ones), kB."""
    with open("/proc/self/smaps_rollup") as f:
        return sum(int(l.split()[1]) for l in f if l.startswith(("Private_Clean:", "Private_Dirty:")))


def _many_entries_zip(path, n=150_000):
    """A ZIP of ``n`` one-line members in 300 directories."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for i in range(n):
            z.writestr(f"d{i % 300}/f{i}", b"%d" % i)
    return path


def _first_use_cost(img, name, q):
    before = _private_kb()
    data = img.read(name)  # opens the image in this process
    q.put((_private_kb() - before, data))


def _in_forked_child(img, name):
    """(private kB the child's first read of ``name`` cost, its bytes)."""
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_first_use_cost, args=(img, name, q), daemon=True)
    p.start()
    try:
        return q.get(timeout=60)
    finally:
        p.kill()
        p.join(10)


def test_a_forked_child_indexes_a_large_zip(tmp_path):
    """Bug: indexing a ZIP of more than a few thousand entries sorts on
    rayon's global pool; once a parent had indexed one, a forked child
    (a DataLoader worker) that indexed one waited forever for the pool's
    threads, which a fork does not copy."""
    big = packfs.Image(_many_entries_zip(tmp_path / "a.zip", 20_000))
    assert big.read("d7/f7") == b"7"
    other = packfs.Image._lazy(str(_many_entries_zip(tmp_path / "b.zip", 20_000)), big._options)
    _, data = _in_forked_child(other, "d9/f19509")
    assert data == b"19509"


def test_forked_workers_share_an_unchanged_zips_index(tmp_path):
    """A ZIP's index (about 90 bytes an entry) was built again by every
    forked DataLoader worker. A worker now takes its parent's, whose pages
    stay shared, if the file is still the one the parent indexed; a file
    written since (here, touched) is indexed again. The anchor is that
    rebuild, in the same run."""
    path = _many_entries_zip(tmp_path / "many.zip")
    img = packfs.Image(path)
    assert img.read("d7/f7") == b"7"
    shared, data = _in_forked_child(img, "d9/f149709")
    assert data == b"149709"
    # Another modification time, as a write gives (one that cannot fall
    # in the same second as the first, whatever the file system keeps).
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**10))
    rebuilt, data = _in_forked_child(img, "d9/f149709")
    assert data == b"149709"
    assert rebuilt > 8_000, f"rebuilding the index cost only {rebuilt} kB"
    assert shared < rebuilt * 0.3, f"shared {shared} kB, rebuilt {rebuilt} kB"


def _memory_cgroup(name: str, limit: int):
    """A memory cgroup limited to ``limit`` bytes, made inside this
    process's own (v1 where the v1 memory controller is mounted, else v2),
    as a path to write pids to; the caller removes it."""
    with open("/proc/self/cgroup") as f:
        lines = [l.rstrip("\n").split(":", 2) for l in f]
    v1 = [p for _, ctl, p in lines if "memory" in ctl.split(",")]
    if v1 and os.path.isdir("/sys/fs/cgroup/memory"):
        base, limit_file = "/sys/fs/cgroup/memory" + v1[0], "memory.limit_in_bytes"
    else:
        base, limit_file = "/sys/fs/cgroup" + next(p for _, ctl, p in lines if ctl == ""), "memory.max"
    cg = os.path.join(base, name)
    os.mkdir(cg)
    try:
        with open(os.path.join(cg, limit_file), "w") as f:
            f.write(str(limit))
    except OSError:
        os.rmdir(cg)
        raise
    return cg


def test_default_budgets_follow_a_cgroup_memory_limit(images):
    """Bug: the package read only cgroup v2's ``memory.max``, so in a job
    limited by a v1 memory cgroup (this machine's kind) its default caches
    were sized from the node's RAM: a 4 GiB job on a large node got 1 GiB
    of block cache and up to 8 GiB of range cache. It now asks the code
    ``packfs mount`` sizes its defaults with."""
    need(os.geteuid() == 0, "making a memory cgroup needs root")
    name = f"packfs-test-{os.getpid()}"
    try:
        cg = _memory_cgroup(name, 1 << 30)
    except OSError as e:
        need(False, f"cannot make a memory cgroup: {e}")
    script = (
        "import sys, packfs\n"
        "sys.stdin.readline()\n"  # moved into the cgroup meanwhile
        f"print(packfs.Image({str(images['packfs-sqfs'][0])!r}).stats()['cache_budget'])\n"
    )
    p = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write(str(p.pid))
        out, _ = p.communicate("go\n", timeout=60)
    finally:
        p.kill()
        p.wait()
        os.rmdir(cg)
    # An eighth of the limit, within the 64 MiB to 1 GiB the default keeps.
    assert int(out) == (1 << 30) // 8
