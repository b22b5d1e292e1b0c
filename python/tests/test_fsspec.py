"""``packfs://`` through fsspec, pandas and pyarrow."""

from __future__ import annotations

import os
import pickle
import subprocess

import pytest

import fsspec
import pandas

import packfs
from conftest import pack
from packfs.fsspec import PackFileSystem


def test_registered_by_entry_point():
    assert fsspec.get_filesystem_class("packfs") is PackFileSystem


def test_open_cat_ls_glob(images, tree):
    path = str(images["packfs-sqfs"][0])
    fs = fsspec.filesystem("packfs", fo=path)
    assert fs.cat("a/hello.txt") == b"hello world\n"
    assert fs.cat_file("big.txt", 10, 30) == (tree / "big.txt").read_bytes()[10:30]
    assert fs.cat_file("big.txt", -5) == (tree / "big.txt").read_bytes()[-5:]
    assert sorted(fs.ls("a", detail=False)) == sorted(f"a/{p.name}" for p in (tree / "a").iterdir())
    info = fs.info("big.txt")
    assert info["type"] == "file" and info["size"] == (tree / "big.txt").stat().st_size
    assert fs.info("a")["type"] == "directory"
    assert fs.isdir("a/b") and fs.isfile("a/hello.txt") and not fs.exists("nope")
    assert sorted(fs.glob("many/f000*")) == [f"many/f000{i}" for i in range(10)]
    assert "a/b/c/deep.txt" in fs.find("a")
    with fsspec.open("packfs://a/b/c/deep.txt", fo=path) as f:
        assert f.read() == (tree / "a/b/c/deep.txt").read_bytes()
    with fsspec.open("packfs://table.csv", "rt", fo=path) as f:
        assert f.readline() == "x,y,name\n"
    with pytest.raises(FileNotFoundError):
        fs.cat("missing")
    with pytest.raises(ValueError):
        fs.open("a/new", "wb")


def test_walks_do_not_descend_into_links_to_directories(tmp_path, packfs_bin):
    """Regression: ``ls`` typed a link by its target, so ``find``, ``walk``,
    ``du`` and ``glob('**')`` went through links to directories, 40 levels
    deep through a link to its own directory (and endlessly with two such
    links). fsspec's local filesystem is the reference."""
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "f").write_bytes(b"12345")
    (src / "a" / "b" / "g").write_bytes(b"x")
    os.symlink(".", src / "a" / "self")
    os.symlink("b", src / "a" / "to_b")
    os.symlink("f", src / "a" / "to_f")
    os.symlink("nowhere", src / "a" / "dangling")
    img = pack(packfs_bin, src, tmp_path / "links.sqfs")
    fs = fsspec.filesystem("packfs", fo=str(img))
    local = fsspec.filesystem("file")
    root = src.as_posix()

    def rel(paths: list) -> list:
        # Local's lists hold the root itself too.
        return sorted(p[len(root) + 1 :] for p in paths if p != root)

    assert sorted(fs.find("", withdirs=True)) == rel(local.find(root, withdirs=True))
    assert sorted(fs.glob("**")) == rel(local.glob(root + "/**"))

    def listed(entries, name):
        return {name(e): (e["type"], e["islink"], e.get("destination")) for e in entries}

    assert listed(fs.ls("a"), lambda e: e["name"]) == listed(
        local.ls(root + "/a", detail=True), lambda e: e["name"][len(root) + 1 :]
    )
    assert {e["name"]: e["size"] for e in fs.ls("a")}["a/to_f"] == 5
    # info follows a link, as local's does for a path.
    assert fs.info("a/to_b")["type"] == "directory" and fs.info("a/to_b")["islink"]


def test_pandas_and_pyarrow_read_inside_an_image(images, tree):
    path = str(images["packfs-zip"][0])
    want = pandas.read_csv(tree / "table.csv")
    got = pandas.read_csv("packfs://table.csv", storage_options={"fo": path})
    pandas.testing.assert_frame_equal(got, want)
    # Chained: the image is the target of the URL.
    got = pandas.read_csv(f"packfs://table.csv::file://{path}")
    pandas.testing.assert_frame_equal(got, want)
    import pyarrow.csv as pacsv

    with fsspec.open("packfs://table.csv", fo=path) as f:
        table = pacsv.read_csv(f)
    assert table.num_rows == 1000


def test_s3_target_and_chaining(images, tree, moto):
    name = images["packfs-sqfs"][0].name
    fs = fsspec.filesystem("packfs", fo=f"s3://images/{name}", endpoint=moto)
    assert fs.cat("a/hello.txt") == b"hello world\n"
    try:
        import s3fs  # noqa: F401  (fsspec needs it to parse a chained s3:// URL)
    except ImportError:
        from conftest import need

        need(False, "s3fs is not installed (fsspec parses chained s3:// URLs with it)")
    with fsspec.open(f"packfs://table.csv::s3://images/{name}",
                     s3={"endpoint_url": moto}) as f:
        assert pandas.read_csv(f).equals(pandas.read_csv(tree / "table.csv"))


def test_filesystem_pickles(images):
    fs = PackFileSystem(fo=str(images["packfs-sqfs"][0]))
    fs2 = pickle.loads(pickle.dumps(fs))
    assert fs2.cat("a/hello.txt") == b"hello world\n"
    assert isinstance(fs2.image, packfs.Image)


def test_names_with_double_colons_are_names(tmp_path, packfs_bin):
    # Regression: "::" was cut off as a chained URL's tail inside the
    # filesystem, so "x::y" served x's bytes and "d::1" could not be listed;
    # fsspec splits chains before a filesystem sees a path.
    src = tmp_path / "src"
    (src / "d::1").mkdir(parents=True)
    (src / "x").write_bytes(b"I am x\n")
    (src / "x::y").write_bytes(b"I am x::y\n")
    (src / "d::1" / "f").write_bytes(b"in\n")
    img = pack(packfs_bin, src, tmp_path / "colon.sqfs")
    fs = fsspec.filesystem("packfs", fo=str(img))
    assert fs.cat_file("x::y") == b"I am x::y\n"
    with fs.open("packfs://x::y") as f:
        assert f.read() == b"I am x::y\n"
    assert fs.ls("d::1", detail=False) == ["d::1/f"]
    assert sorted(fs.find("")) == ["d::1/f", "x", "x::y"]
    # A chained URL still names the image after "::".
    with fsspec.open(f"packfs://x::file://{img}") as f:
        assert f.read() == b"I am x\n"


def test_open_files_have_a_size_and_read_block_works(images, tree):
    # Regression: fs.open returned a bare BufferedReader without `size`,
    # which read_block and fsspec's block caches need.
    fs = fsspec.filesystem("packfs", fo=str(images["packfs-sqfs"][0]))
    with fs.open("big.txt") as f:
        assert f.size == (tree / "big.txt").stat().st_size
    want = fsspec.filesystem("file").read_block(str(tree / "big.txt"), 1000, 100, delimiter=b"\n")
    assert fs.read_block("big.txt", 1000, 100, delimiter=b"\n") == want


def test_two_images_of_one_file_get_their_own_filesystems(images):
    # Regression: fsspec keys cached instances on the repr of their
    # arguments, and two Images of one file had the same repr: the second
    # filesystem was the first, holding the first (closed) image.
    path = str(images["packfs-sqfs"][0])
    a = packfs.Image(path, cache_size=32 << 20)
    fa = fsspec.filesystem("packfs", fo=a)
    a.close()
    b = packfs.Image(path, cache_size=16 << 20)
    fb = fsspec.filesystem("packfs", fo=b)
    assert fb.image is b
    assert fb.cat_file("a/hello.txt") == b"hello world\n"
    assert fa is not fb


def test_a_relative_image_path_means_the_working_directorys_image(packfs_bin, tmp_path):
    """Bug: fsspec returns one instance per set of constructor arguments,
    so ``fo="data.sqfs"`` after a ``chdir`` gave the previous directory's
    image, and a pickled filesystem (a spawned worker's) opened the path
    in the worker's own working directory."""
    for name in ("one", "two"):
        tree = tmp_path / name / "tree"
        tree.mkdir(parents=True)
        (tree / f"{name}.txt").write_text(name)
        pack(packfs_bin, tree, tmp_path / name / "data.sqfs")
    was = os.getcwd()
    try:
        os.chdir(tmp_path / "one")
        one = fsspec.filesystem("packfs", fo="data.sqfs")
        os.chdir(tmp_path / "two")
        two = fsspec.filesystem("packfs", fo="data.sqfs")
        assert one.ls("", detail=False) == ["one.txt"]
        assert two.ls("", detail=False) == ["two.txt"]
        copy = pickle.loads(pickle.dumps(one))
        assert copy.cat("one.txt") == b"one"
    finally:
        os.chdir(was)


def test_writes_say_read_only_and_keys_and_times_are_a_files(images):
    """Found by a review: ``mkdir`` did nothing and said nothing, ``rm``
    and ``modified`` were "not implemented", and ``ukey`` of "/x" differed
    from that of "x". Found by the next: ``makedirs(d, exist_ok=True)`` of
    a directory the image has raised EROFS."""
    import errno
    import datetime

    fs = fsspec.filesystem("packfs", fo=str(images["packfs-sqfs"][0]))
    for write in (lambda: fs.mkdir("new"), lambda: fs.makedirs("new/x"), lambda: fs.rm("big.txt"),
                  lambda: fs.touch("t"), lambda: fs.mv("big.txt", "b"), lambda: fs.pipe("p", b"x")):
        with pytest.raises(OSError) as e:
            write()
        assert e.value.errno == errno.EROFS
    # A name that exists is EEXIST, as mkdir(2) says on a read-only mount,
    # and makedirs(exist_ok=True) of a directory passes, as os.makedirs does.
    fs.makedirs("a/b", exist_ok=True)
    fs.makedirs("/a", exist_ok=True)
    for exists in (lambda: fs.mkdir("a"), lambda: fs.makedirs("a/b"), lambda: fs.mkdir("dangling"),
                   lambda: fs.makedirs("big.txt", exist_ok=True)):
        with pytest.raises(FileExistsError):
            exists()
    assert fs.ls("", detail=False) == fsspec.filesystem("packfs", fo=str(images["packfs-sqfs"][0])).ls("", detail=False)
    assert fs.ukey("/big.txt") == fs.ukey("big.txt")
    when = fs.modified("big.txt")
    assert isinstance(when, datetime.datetime) and when.timestamp() == fs.info("big.txt")["mtime"]


def test_an_image_packed_again_in_place_is_read_anew(tmp_path, packfs_bin):
    """Found by a review: fsspec hands out one filesystem per set of
    arguments, so after ``packfs pack -f`` over the image a read through
    ``packfs://`` (pandas, a notebook re-run) returned the old file's
    contents from the instance still holding it, without an error."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "data.csv").write_text("x\n1\n")
    img = tmp_path / "d.sqfs"
    subprocess.run([packfs_bin, "pack", str(src), "-o", str(img), "-q"], check=True)
    with fsspec.open("packfs://data.csv", fo=str(img)) as f:
        assert f.read() == b"x\n1\n"
    fs = fsspec.filesystem("packfs", fo=str(img))
    (src / "data.csv").write_text("x\n2\n3\n")
    subprocess.run([packfs_bin, "pack", str(src), "-o", str(img), "-q", "-f"], check=True)
    with fsspec.open("packfs://data.csv", fo=str(img)) as f:
        assert f.read() == b"x\n2\n3\n"
    assert fsspec.filesystem("packfs", fo=str(img)).cat("data.csv") == b"x\n2\n3\n"
    # The instance made before keeps the file it opened, as an open file does.
    assert fs.cat("data.csv") == b"x\n1\n"
    # Unchanged, the instance is reused.
    assert fsspec.filesystem("packfs", fo=str(img)) is fsspec.filesystem("packfs", fo=str(img))


def test_target_options_packfs_does_not_use_are_named():
    """Found by a review: s3fs options such as anon=True, requester_pays
    and client_kwargs' region_name were dropped without a word (packfs
    reads the image itself, with its own S3 client)."""
    import warnings

    from packfs.fsspec import _remote_options

    with pytest.warns(UserWarning, match=r"anon, requester_pays, client_kwargs\['region_name'\]"):
        got = _remote_options({"anon": True, "requester_pays": True, "client_kwargs": {
            "endpoint_url": "http://h:9000", "region_name": "x"}})
    assert got == {"endpoint": "http://h:9000"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _remote_options({"endpoint_url": "http://h", "profile": "p", "key": ""}) == {
            "endpoint": "http://h", "profile": "p"}
        assert _remote_options({"endpoint_url": "http://h", "profile": "",
                                "client_kwargs": {"endpoint_url": "http://h"}}) == {
            "endpoint": "http://h"}


def test_files_pickle_and_take_fsspecs_caches(images, tmp_path):
    """Found by a review: an open file did not pickle (fsspec's local
    files do, with their position), ``cache_type=`` was ignored, and a
    ``blockcache::`` layer failed (it reads through ``_fetch_range``)."""
    img, tree = images["packfs-sqfs"][0], images["packfs-sqfs"][0].parent / "tree"
    want = (tree / "big.txt").read_bytes()
    fs = fsspec.filesystem("packfs", fo=str(img))
    with fs.open("big.txt") as f:
        f.seek(1000)
        f.read(10)
        copy = pickle.loads(pickle.dumps(f))
        assert copy.tell() == 1010 and copy.read(50) == want[1010:1060]
    for cache in ("readahead", "bytes", "mmap", "blockcache", "none"):
        with fs.open("big.txt", cache_type=cache, block_size=4096) as f:
            f.seek(70_000)
            assert f.read(9000) == want[70_000:79_000], cache
            assert pickle.loads(pickle.dumps(f)).read(10) == want[79_000:79_010], cache
    url = f"blockcache::packfs://big.txt::file://{img}"
    with fsspec.open(url, blockcache={"cache_storage": str(tmp_path / "bc")}) as f:
        f.seek(123_456)
        assert f.read(4000) == want[123_456:127_456]
