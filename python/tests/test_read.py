"""Every file of every fixture image, read through packfs, against a reader
nobody here wrote: the kernel's SquashFS driver (loop mount, as root) or
unsquashfs, and unzip."""

from __future__ import annotations

import io
import os
import pickle
import stat
import subprocess
from pathlib import Path

import pytest

import packfs
from conftest import need, need_tool, pack

IMAGE_NAMES = [
    "mksquashfs-gzip-131072",
    "mksquashfs-xz-1048576",
    "mksquashfs-lz4-4096",
    "mksquashfs-zstd-65536",
    "mksquashfs-lzo-131072",
    "packfs-sqfs",
    "packfs-zip",
    "infozip",
    "pyzip",
]


@pytest.fixture(scope="module")
def reference(images, work, request):
    """name -> (root of the reference tree, whether it has full stat)."""
    refs: dict = {}
    mounts: list = []
    yield refs, mounts
    for m in mounts:
        subprocess.run(["umount", str(m)], check=False)


def reference_tree(name, images, work, reference):
    refs, mounts = reference
    if name in refs:
        return refs[name]
    path, kind = images[name]
    dest = work / "ref" / name
    dest.parent.mkdir(exist_ok=True)
    if kind == "squashfs":
        if os.geteuid() == 0:
            dest.mkdir()
            r = subprocess.run(["mount", "-t", "squashfs", "-o", "loop,ro", str(path), str(dest)],
                               capture_output=True, text=True)
            need(r.returncode == 0, f"kernel squashfs mount failed: {r.stderr.strip()}")
            mounts.append(dest)
            refs[name] = (dest, True)
        else:
            need(not os.environ.get("CI"), "the kernel mount reference needs root")
            need_tool("unsquashfs")
            subprocess.run(["unsquashfs", "-q", "-n", "-d", str(dest), str(path)], check=True,
                           stdout=subprocess.DEVNULL)
            refs[name] = (dest, False)
    else:
        need_tool("unzip")
        dest.mkdir()
        subprocess.run(["unzip", "-q", "-X", str(path), "-d", str(dest)], check=True,
                       env=dict(os.environ, TZ="UTC"))
        refs[name] = (dest, False)
    return refs[name]


def walk_reference(root: Path):
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        rel = "" if rel == "." else rel
        for n in dirnames + filenames:
            yield os.path.join(rel, n) if rel else n


@pytest.mark.parametrize("name", IMAGE_NAMES)
def test_every_file_equals_the_reference(name, images, work, reference):
    root, full_stat = reference_tree(name, images, work, reference)
    img = packfs.Image(images[name][0])
    seen = set()
    for rel in walk_reference(root):
        ref = root / rel
        seen.add(rel)
        lst = os.lstat(ref)
        mine = img.lstat(rel)
        assert stat.S_IFMT(mine.st_mode) == stat.S_IFMT(lst.st_mode), rel
        if stat.S_ISLNK(lst.st_mode):
            assert img.readlink(rel) == os.readlink(ref), rel
            assert img.islink(rel)
            continue
        if images[name][1] == "squashfs" or name != "pyzip":
            assert stat.S_IMODE(mine.st_mode) == stat.S_IMODE(lst.st_mode), rel
        if stat.S_ISREG(lst.st_mode):
            data = ref.read_bytes()
            assert img.read(rel) == data, rel
            assert img.read("/" + rel) == data, rel
            assert mine.st_size == lst.st_size, rel
            assert img.isfile(rel) and not img.isdir(rel)
            if images[name][1] == "zip" and name == "pyzip":
                pass  # zipfile stores local DOS times: compared by size and bytes only
            else:
                assert mine.st_mtime == lst.st_mtime, rel
        else:
            assert img.isdir(rel) and img.isdir(rel + "/")
            assert sorted(img.listdir(rel)) == sorted(os.listdir(ref)), rel
        if full_stat:
            for f in ("st_ino", "st_nlink", "st_uid", "st_gid", "st_mtime", "st_size", "st_mode"):
                assert getattr(mine, f) == getattr(lst, f), (rel, f)
    # Nothing the reference lacks (pyzip stores no symlinks or empty dirs).
    listed = {os.path.join(d, n) if d else n for d, ds, fs in img.walk("") for n in ds + fs}
    assert listed == seen
    assert sorted(img.listdir("")) == sorted(os.listdir(root))
    assert sorted(img.listdir("/")) == sorted(os.listdir(root))


@pytest.mark.parametrize("name", ["mksquashfs-gzip-131072", "packfs-zip"])
def test_symlinks_are_followed_inside_the_image(name, images, tree):
    img = packfs.Image(images[name][0])
    assert img.read("a/link_rel") == (tree / "a/hello.txt").read_bytes()
    assert img.read("a/link_up") == (tree / "random.bin").read_bytes()
    assert img.read("a/link_dir/deep.txt") == (tree / "a/b/c/deep.txt").read_bytes()
    assert img.isdir("a/link_dir") and not img.islink("a/b")
    assert img.stat("a/link_rel").st_size == 12
    assert stat.S_ISLNK(img.lstat("a/link_rel").st_mode)
    assert not img.exists("dangling") and img.islink("dangling")
    with pytest.raises(FileNotFoundError):
        img.read("dangling")


def test_ranges_files_and_many(images, tree):
    img = packfs.Image(images["mksquashfs-lz4-4096"][0])
    big = (tree / "big.txt").read_bytes()
    assert img.read_range("big.txt", 1000, 50_000) == big[1000:51_000]
    assert img.read_range("big.txt", len(big) - 10, 100) == big[-10:]
    assert img.read_range("big.txt", len(big) + 5, 100) == b""
    with img.open("big.txt") as f:
        assert isinstance(f, io.BufferedReader)
        assert f.read(10) == big[:10]
        f.seek(-100, io.SEEK_END)
        assert f.tell() == len(big) - 100
        assert f.read() == big[-100:]
        f.seek(5000)
        assert f.readline() == big[5000:].split(b"\n", 1)[0] + b"\n"
        assert f.seekable() and f.readable() and not f.writable()
    assert f.closed
    with pytest.raises(ValueError):
        f.read()
    raw = img.open("random.bin", buffering=0)
    buf = bytearray(1000)
    assert raw.readinto(buf) == 1000 and bytes(buf) == (tree / "random.bin").read_bytes()[:1000]
    raw.seek(0)
    assert raw.readall() == (tree / "random.bin").read_bytes()
    # As a read-only FileIO: writing is UnsupportedOperation (an OSError
    # and a ValueError), a float position a TypeError.
    for write in (lambda: raw.write(b"x"), lambda: raw.writelines([b"x"]), lambda: raw.truncate(0)):
        with pytest.raises(io.UnsupportedOperation):
            write()
    with pytest.raises(TypeError):
        raw.seek(1.5)
    assert raw.tell() == len((tree / "random.bin").read_bytes())
    raw.close()
    with img.open("table.csv", "r") as t:
        assert t.readline() == "x,y,name\n"
        assert t.mode == "r"  # as open() says (code that checks "b" in f.mode)
    with img.open("table.csv") as b:
        assert b.mode == "rb"
    names = [f"many/f{i:04d}" for i in range(0, 300, 7)]
    assert img.read_many(names) == [(tree / n).read_bytes() for n in names]
    assert img.read_many([]) == []


def assert_reads_as(img, tree: Path):
    """Every directory of `tree` lists the same names in `img`, and every
    regular file there reads the same bytes (symlinks are listed, not read:
    the other tests follow them)."""
    for dirpath, dirnames, filenames in os.walk(tree):
        rel = os.path.relpath(dirpath, tree)
        rel = "" if rel == "." else rel
        assert sorted(img.listdir(rel)) == sorted(dirnames + filenames)
        for n in filenames:
            p = os.path.join(rel, n) if rel else n
            if not os.path.islink(os.path.join(dirpath, n)):
                assert img.read(p) == Path(dirpath, n).read_bytes(), p


def test_manifest_reads_as_one_tree(manifest, tree):
    img = packfs.Image(manifest)
    assert img.format == "union"
    assert_reads_as(img, tree)


@pytest.mark.parametrize("name", ["packfs-sqfs", "packfs-zip"])
def test_http_and_s3_images(name, images, tree, range_server, moto):
    path = images[name][0]
    for loc, kw in [
        (f"{range_server}/{path.name}", {}),
        (f"s3://images/{path.name}", {"endpoint": moto}),
    ]:
        img = packfs.Image(loc, **kw)
        assert img.read("big.txt") == (tree / "big.txt").read_bytes()
        names = [f"many/f{i:04d}" for i in range(300)]
        assert img.read_many(names) == [(tree / n).read_bytes() for n in names]
        s = img.stats()
        assert s["requests"] > 0 and s["storage_bytes"] > 0, s
    with pytest.raises(FileNotFoundError):
        packfs.Image(f"{range_server}/missing.sqfs")
    with pytest.raises(FileNotFoundError):
        packfs.Image("s3://images/missing.sqfs", endpoint=moto)


def test_disk_cache_serves_the_next_open_without_fetching(images, tree, range_server, tmp_path):
    loc = f"{range_server}/{images['packfs-sqfs'][0].name}"
    cache = tmp_path / "cache"
    names = [f"many/f{i:04d}" for i in range(300)]
    want = [(tree / n).read_bytes() for n in names]

    def read_all(img):
        assert img.read("big.txt") == (tree / "big.txt").read_bytes()
        assert img.read_many(names) == want
        return img.stats()

    with packfs.Image(loc, disk_cache=cache, disk_cache_size=256 << 20) as first:
        s1 = read_all(first)
    assert s1["storage_bytes"] > 0 and s1["disk_cache_bytes"] == 0, s1
    assert any(p.is_file() for p in (cache / "packfs-cache-v1" / "objects").rglob("*"))
    # A new image (as a new process or DataLoader worker would open it).
    with packfs.Image(loc, disk_cache=cache) as second:
        s2 = read_all(second)
    assert s2["disk_cache_bytes"] > 0, s2
    assert s2["storage_bytes"] <= s1["storage_bytes"] // 20, (s1, s2)


def test_an_unusable_disk_cache_is_a_warning_and_reads_go_on(images, tree, range_server, tmp_path):
    loc = f"{range_server}/{images['packfs-sqfs'][0].name}"
    not_a_dir = tmp_path / "file"
    not_a_dir.write_bytes(b"x")
    with pytest.warns(RuntimeWarning, match="disk_cache"):
        img = packfs.Image(loc, disk_cache=not_a_dir)
    assert img.read("big.txt") == (tree / "big.txt").read_bytes()
    with pytest.raises(ValueError, match="disk_cache"):
        packfs.Image(loc, disk_cache_size=1 << 20)


def test_stats_count_cache_and_storage(images):
    img = packfs.Image(images["packfs-sqfs"][0], cache_size=64 << 20)
    before = img.stats()
    img.read("big.txt")
    mid = img.stats()
    assert mid["storage_bytes"] > before["storage_bytes"]
    assert mid["cache_misses"] > before["cache_misses"]
    assert mid["cache_budget"] == 64 << 20
    img.read("big.txt")
    after = img.stats()
    assert after["cache_hits"] > mid["cache_hits"]
    assert after["storage_bytes"] == mid["storage_bytes"]


def test_scandir_and_walk_like_os(images, tree):
    img = packfs.Image(images["packfs-sqfs"][0])
    with img.scandir("a") as it:
        entries = {e.name: e for e in it}
    ref = {e.name: e for e in os.scandir(tree / "a")}
    assert entries.keys() == ref.keys()
    for n, e in entries.items():
        r = ref[n]
        assert e.path == f"a/{n}"
        assert e.is_dir() == r.is_dir() and e.is_file() == r.is_file(), n
        assert e.is_symlink() == r.is_symlink(), n
        assert e.is_dir(follow_symlinks=False) == r.is_dir(follow_symlinks=False), n
        if not r.is_dir(follow_symlinks=False):  # directory sizes are the filesystem's
            assert e.stat(follow_symlinks=False).st_size == r.stat(follow_symlinks=False).st_size, n
    mine = sorted((d, sorted(ds), sorted(fs)) for d, ds, fs in img.walk("a"))
    theirs = sorted(
        (os.path.relpath(d, tree), sorted(ds), sorted(fs)) for d, ds, fs in os.walk(tree / "a")
    )
    assert mine == theirs
    # A caller's edits of `dirnames` top-down, as os.walk takes them: a
    # removed name is not entered, an added one is (it had been ignored).
    def edited(walk, rel):
        out, errors = [], []
        for d, ds, fs in walk(errors.append):
            out.append((rel(d), sorted(ds), sorted(fs)))
            if "b" in ds:
                ds.remove("b")
                ds.append("link_dir")  # a link: not entered either way
                ds.append("nope")  # missing: onerror
        return sorted(out), sorted(e.errno for e in errors)

    assert edited(lambda on: img.walk("a", onerror=on), lambda d: d) == edited(
        lambda on: os.walk(tree / "a", onerror=on), lambda d: os.path.relpath(d, tree)
    )
    bottom_up = [d for d, _, _ in img.walk("a", topdown=False)]
    assert bottom_up[-1] == "a" and bottom_up.index("a/b/c") < bottom_up.index("a/b")
    assert img.listdir(b"a") and all(isinstance(n, bytes) for n in img.listdir(b"a"))


class BytesPath:
    def __init__(self, p: bytes) -> None:
        self.p = p

    def __fspath__(self) -> bytes:
        return self.p


def test_path_likes_as_os_takes_them(images, tree, tmp_path):
    """Regressions: a path-like giving bytes got str names back; a
    DirEntry was no path-like; an image file whose name is not UTF-8 could
    not be opened (its name was decoded lossily)."""
    img = packfs.Image(images["packfs-sqfs"][0])
    assert sorted(img.listdir(BytesPath(b"a"))) == sorted(os.listdir(os.fsencode(tree / "a")))
    assert img.readlink(BytesPath(b"a/link_rel")) == b"hello.txt"
    with img.scandir("a") as it:
        hello = next(e for e in it if e.name == "hello.txt")
    assert os.fspath(hello) == "a/hello.txt"
    assert img.read(hello) == (tree / "a/hello.txt").read_bytes()
    odd = os.path.join(os.fsencode(tmp_path), b"image-\xe9.sqfs")
    with open(odd, "wb") as f:
        f.write(images["packfs-sqfs"][0].read_bytes())
    for location in (odd, os.fsdecode(odd)):
        assert packfs.Image(location).read("a/hello.txt") == b"hello world\n"


def test_s3_manifest_reads_as_one_tree(tree, packfs_bin, moto):
    # Shards packed straight to the bucket by the CLI; the manifest object
    # beside them names them relatively.
    env = dict(os.environ, AWS_ENDPOINT_URL=moto)
    subprocess.run(
        [packfs_bin, "pack", str(tree), "--shards", "3", "-o",
         "s3://images/sharded/t-{shard}.sqfs", "-q"],
        check=True, env=env,
    )
    img = packfs.Image("s3://images/sharded/t.manifest.json", endpoint=moto)
    assert img.format == "union"
    assert_reads_as(img, tree)
    assert img.stats()["requests"] > 0


def test_paths_resolve_as_the_kernel_resolves_them(tmp_path, packfs_bin):
    """Regression: `.` components were dropped, so `f/.` named a file and
    `link/.` the link itself; a link whose target ends in `/` reached a
    file. Each call on the image must end as the same call on the raw tree
    (same result kind, or the same errno)."""
    src = tmp_path / "src"
    (src / "d" / "e").mkdir(parents=True)
    (src / "f").write_bytes(b"file")
    (src / "d" / "g").write_bytes(b"in d")
    os.symlink("d", src / "todir")
    os.symlink("f/", src / "slashlink")
    os.symlink("d/.", src / "dotlink")
    os.symlink("f", src / "tofile")
    img_path = pack(packfs_bin, src, tmp_path / "paths.sqfs")
    img = packfs.Image(img_path)
    names = ["f", "d", "todir", "slashlink", "dotlink", "tofile"]
    paths = [p for n in names for p in (n, f"{n}/", f"{n}/.", f"{n}/./", f"{n}/..", f"{n}/g")]
    paths += ["d/./e/..", ".", "./d", "d/e/../../f/."]

    def outcome(call, *args):
        try:
            r = call(*args)
        except OSError as e:
            return ("error", e.errno)
        if isinstance(r, os.stat_result):
            return ("stat", stat.S_IFMT(r.st_mode), r.st_size if stat.S_ISREG(r.st_mode) else None)
        return ("value", sorted(r) if isinstance(r, list) else r)

    for p in paths:
        raw = os.path.join(src, p)
        for mine, theirs in [
            (img.stat, os.stat),
            (img.lstat, os.lstat),
            (img.readlink, os.readlink),
            (img.listdir, os.listdir),
            (img.read, lambda q: open(q, "rb").read()),
            (img.islink, os.path.islink),
            (img.isdir, os.path.isdir),
            (img.exists, os.path.exists),
        ]:
            assert outcome(mine, p) == outcome(theirs, raw), (p, theirs)


def _read_in_child(img, path, q):
    q.put(img.read(path))


def test_workers_reopen_a_relative_path_where_it_was_opened(images, tree, tmp_path, monkeypatch):
    # Regression: a relative image path was reopened against the worker's
    # current directory, so a chdir after opening (Hydra, a training script
    # moving into its output directory) sent workers to a missing file.
    import multiprocessing as mp

    img_path = images["packfs-sqfs"][0]
    monkeypatch.chdir(img_path.parent)
    img = packfs.Image(img_path.name)
    assert img.location == img_path.name
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.chdir(elsewhere)
    want = (tree / "a/hello.txt").read_bytes()
    assert img.read("a/hello.txt") == want
    for method in ("fork", "spawn"):
        ctx = mp.get_context(method)
        q = ctx.Queue()
        p = ctx.Process(target=_read_in_child, args=(img, "a/hello.txt", q))
        p.start()
        got = q.get(timeout=60)
        p.join(60)
        assert got == want, method
    assert pickle.loads(pickle.dumps(img)).read("a/hello.txt") == want


def test_read_many_takes_paths_not_one_path(images):
    # Regression: a str was iterated as one path per character.
    img = packfs.Image(images["packfs-sqfs"][0])
    for one in ("a/hello.txt", b"a/hello.txt", Path("a/hello.txt")):
        with pytest.raises(TypeError, match="read_many"):
            img.read_many(one)


def test_reads_wait_until_every_pending_fork_is_done(images):
    # Regression: the fork gate was a flag, so when two threads forked at
    # once the first one's after-fork hook let reads start while the second
    # had yet to fork; its child could inherit a read in progress (a held
    # lock, a count that never drops). The hooks are called here as
    # os.fork calls them, for two forks that overlap.
    import threading

    from packfs import _native

    img = packfs.Image(images["packfs-sqfs"][0])
    done = threading.Event()
    _native.before_fork()
    _native.before_fork()
    try:
        _native.after_fork_in_parent()  # the first fork is done
        t = threading.Thread(target=lambda: (img.read("a/hello.txt"), done.set()))
        t.start()
        assert not done.wait(0.3), "a read ran while a fork was still pending"
    finally:
        _native.after_fork_in_parent()  # the second
    assert done.wait(30)
    t.join()


def test_shards_of_a_relative_manifest_open_after_a_chdir(tmp_path, packfs_bin, monkeypatch):
    # Regression: shards open on first use, and a relative manifest's shard
    # paths were resolved against the directory current then, so a read
    # after os.chdir failed (or read another file of the same name there).
    src = tmp_path / "src"
    for d in ("a", "b", "c"):
        (src / d).mkdir(parents=True)
        for i in range(30):
            (src / d / f"f{i}").write_bytes(b"%s%d\n" % (d.encode(), i))
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run([packfs_bin, "pack", str(src), "-o", str(out / "s-{shard}.sqfs"),
                    "--shards", "3"], check=True, capture_output=True)
    monkeypatch.chdir(tmp_path)
    img = packfs.Image("out/s.manifest.json")
    assert img.read("a/f0") == b"a0\n"
    os.chdir("/")
    assert img.read("c/f29") == b"c29\n"
    assert img.read("b/f7") == b"b7\n"


def test_range_size_sets_the_bytes_of_each_request(images, tree, range_server):
    loc = f"{range_server}/{images['packfs-sqfs'][0].name}"
    want = (tree / "big.txt").read_bytes()
    fetched = {}
    for size in (64 << 10, 4 << 20):
        with packfs.Image(loc, range_size=size) as img:
            assert img.read("big.txt") == want
            s = img.stats()
        fetched[size] = (s["storage_bytes"], s["get_requests"])
        # Every fetch is whole ranges of that size (the last one cut at the end).
        assert s["storage_bytes"] <= s["get_requests"] * size, (size, s)
    assert fetched[64 << 10][1] > fetched[4 << 20][1], fetched
    with pytest.raises((ValueError, OSError), match="power of two"):
        packfs.Image(loc, range_size=100_000).read("big.txt")
