"""Errors as ``os`` raises them, and damaged images: exceptions, never a
crash of the interpreter."""

from __future__ import annotations

import errno
import os
import random
import subprocess
import sys
import textwrap

import pytest

import packfs
from conftest import mksquashfs, need_tool, pack


def test_missing_and_wrong_kinds(images):
    img = packfs.Image(images["packfs-sqfs"][0])
    with pytest.raises(FileNotFoundError) as e:
        img.read("no/such/file")
    assert e.value.errno == errno.ENOENT and e.value.filename == "no/such/file"
    assert "packfs.sqfs" in str(e.value)
    with pytest.raises(NotADirectoryError):
        img.listdir("a/hello.txt")
    with pytest.raises(NotADirectoryError):
        img.read("a/hello.txt/x")
    with pytest.raises(IsADirectoryError):
        img.read("a")
    with pytest.raises(IsADirectoryError):
        img.open("a/b")
    with pytest.raises(OSError) as e:
        img.readlink("a/hello.txt")
    assert e.value.errno == errno.EINVAL
    assert not img.exists("nope") and not img.isdir("nope") and not img.isfile("a/hello.txt/x")
    with pytest.raises(ValueError):
        img.open("a/hello.txt", "w")
    with pytest.raises(FileNotFoundError):
        img.read_many(["a/hello.txt", "missing"])


def test_not_an_image(tmp_path):
    junk = tmp_path / "notes.txt"
    junk.write_text("just text, long enough to have a magic number\n" * 10)
    with pytest.raises(packfs.NotAnImageError) as e:
        packfs.Image(junk)
    assert isinstance(e.value, OSError) and e.value.filename == str(junk)
    assert "not a SquashFS or ZIP image" in str(e.value)
    with pytest.raises(FileNotFoundError) as e:
        packfs.Image(tmp_path / "missing.sqfs")
    assert e.value.filename == str(tmp_path / "missing.sqfs")
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    with pytest.raises(packfs.NotAnImageError) as e:
        packfs.Image(empty)
    # The image is named once, as `filename` (the message named it too).
    assert e.value.filename == str(empty) and str(empty) not in e.value.strerror, e.value
    with pytest.raises(ValueError):
        packfs.Image("s3://bucket-without-key")


def test_symlink_loops_end(tmp_path, packfs_bin):
    d = tmp_path / "loops"
    d.mkdir()
    os.symlink("b", d / "a")
    os.symlink("a", d / "b")
    os.symlink("/self", d / "self")
    out = pack(packfs_bin, d, tmp_path / "loops.sqfs")
    img = packfs.Image(out)
    for p in ("a", "b", "self", "a/x"):
        with pytest.raises(OSError) as e:
            img.read(p)
        assert e.value.errno == errno.ELOOP, p
    assert not img.exists("a") and img.islink("a")
    # A loop on the way: absent, as os.path.islink says (it raised ELOOP).
    assert not img.islink("a/x") and not img.isdir("a/x")
    # Found by a review: DirEntry.is_dir() answered False for a loop where
    # os.DirEntry raises ELOOP (and ENOTDIR for a file on the way).
    os.symlink("f/x", d / "notdir")
    (d / "f").write_bytes(b"")
    img = packfs.Image(pack(packfs_bin, d, tmp_path / "loops2.sqfs"))
    for at in (d, ""):
        got = {}
        for e in (os.scandir(at) if at else img.scandir(at)):
            if e.name == "self":  # "/self": the host's root is not the image's
                continue
            for m in ("is_dir", "is_file"):
                try:
                    got[e.name, m] = getattr(e, m)()
                except OSError as x:
                    got[e.name, m] = x.errno
        if at:
            want = got
        else:
            assert got == want and got["a", "is_dir"] == errno.ELOOP, got
    assert [w[0] for w in img.walk("")] == [""]


def test_walk_lists_an_entry_whose_type_cannot_be_told(tmp_path):
    # A link in an encrypted ZIP: its target cannot be read (EACCES), so
    # whether it leads to a directory cannot be told. os.walk lists such an
    # entry as a file; Image.walk raised PermissionError out of the walk.
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_bytes(b"x")
    (src / "d").mkdir()
    (src / "d" / "g").write_bytes(b"y")
    os.symlink("d", src / "link")
    z = tmp_path / "enc.zip"
    subprocess.run(["zip", "-q", "-r", "-y", "-P", "secret", str(z), "."], cwd=src, check=True)
    img = packfs.Image(z)
    with pytest.raises(PermissionError):
        img.stat("link")
    errors = []
    got = sorted((d, sorted(ds), sorted(fs)) for d, ds, fs in img.walk("", onerror=errors.append))
    assert got == [("", ["d"], ["f", "link"]), ("d", [], ["g"])], got
    assert errors == []


def test_reading_a_fifo_is_einval_naming_the_path(tmp_path, packfs_bin):
    """Regression: it was OSError(EIO) naming the image, the errno kept
    for damage, though the image is sound."""
    d = tmp_path / "special"
    d.mkdir()
    os.mkfifo(d / "fifo")
    out = pack(packfs_bin, d, tmp_path / "special.sqfs")
    img = packfs.Image(out)
    for call in (img.read, img.open):
        with pytest.raises(OSError) as e:
            call("fifo")
        assert e.value.errno == errno.EINVAL and e.value.filename == "fifo", e.value


# Damage through Python: truncations and byte flips of real images (the
# idea of tests/corrupt_corpus). Each variant is read whole in a child
# interpreter, so a crash (a signal, an abort) fails the test instead of
# taking pytest down; the child must end with only OSError/ValueError.
CHILD = textwrap.dedent(
    """
    import sys, packfs
    bad = 0
    for path in sys.argv[1:]:
        try:
            img = packfs.Image(path)
            for d, ds, fs in img.walk(""):
                for n in fs:
                    try:
                        img.read(f"{d}/{n}" if d else n)
                    except OSError:
                        bad += 1
                for n in ds:
                    try:
                        img.stat(f"{d}/{n}" if d else n)
                    except OSError:
                        bad += 1
        except OSError:
            bad += 1
        except ValueError:
            bad += 1
    print("ok", bad)
    """
)


def variants(src: bytes, rng: random.Random, n: int):
    for i in range(n):
        b = bytearray(src)
        if i % 3 == 0:
            yield bytes(b[: rng.randrange(1, len(b))])
        else:
            for _ in range(rng.randrange(1, 8)):
                at = rng.randrange(len(b))
                b[at] = rng.randrange(256)
            yield bytes(b)


@pytest.mark.parametrize("name", ["packfs-sqfs", "packfs-zip", "mksquashfs-xz-1048576", "infozip"])
def test_corrupt_images_raise_and_never_crash(name, images, tmp_path):
    src = images[name][0].read_bytes()
    rng = random.Random(f"packfs-python-{name}")
    paths = []
    for i, v in enumerate(variants(src, rng, 60)):
        p = tmp_path / f"v{i}"
        p.write_bytes(v)
        paths.append(str(p))
    r = subprocess.run([sys.executable, "-c", CHILD, *paths], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    assert r.stdout.startswith("ok"), r.stdout
    # Damage was seen (the flips are not all in padding).
    assert int(r.stdout.split()[1]) > 0


def test_damage_is_eio_naming_image_and_offset(images, tmp_path):
    """Data blocks overwritten after the metadata: EIO with where."""
    src = bytearray(images["mksquashfs-gzip-131072"][0].read_bytes())
    # gzip data of random.bin starts right after the 96-byte superblock.
    for i in range(200, 4000):
        src[i] ^= 0x5A
    p = tmp_path / "damaged.sqfs"
    p.write_bytes(bytes(src))
    # The tables follow the data: the damage cannot reach them.
    img = packfs.Image(p)
    failed = 0
    for d, ds, fs in img.walk(""):
        for n in fs:
            rel = f"{d}/{n}" if d else n
            if img.islink(rel):
                continue
            try:
                img.read(rel)
            except OSError as e:
                failed += 1
                assert e.errno == errno.EIO, e
                assert e.filename == str(p) and "offset" in str(e), e
    assert failed > 0


def test_a_link_with_an_encrypted_target_is_absent_to_predicates_and_listed_by_fsspec(tmp_path):
    # Regression: exists/isdir/isfile/islink raised PermissionError on a
    # link in an encrypted ZIP, and fsspec's ls raised on it (so find()
    # came back silently empty); os.path answers False for what it cannot
    # reach, and os.scandir lists the link.
    import fsspec

    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f").write_bytes(b"hi\n")
    os.symlink("d", src / "ld")
    z = tmp_path / "enc.zip"
    subprocess.run(["zip", "-q", "-r", "-y", "-P", "pw", str(z), "."], cwd=src, check=True)
    img = packfs.Image(z)
    for ask in (img.exists, img.isdir, img.isfile):
        assert ask("ld") is False, ask
        assert ask("ld/f") is False, ask
    assert img.islink("ld") is True
    assert img.islink("ld/f") is False
    with pytest.raises(PermissionError):
        img.readlink("ld")
    fs = fsspec.filesystem("packfs", fo=str(z))
    listed = {e["name"]: e for e in fs.ls("")}
    assert sorted(listed) == ["d", "ld"]
    assert listed["ld"]["islink"] and "destination" not in listed["ld"]
    assert sorted(fs.find("")) == ["d/f", "ld"]
    assert fs.info("ld")["islink"]


def test_a_read_larger_than_memory_is_memory_error_and_costs_one_copy(tmp_path):
    # Regression: a read larger than the process could allocate aborted the
    # interpreter ("memory allocation of 2147483648 bytes failed"), and
    # every read held the file twice (a Rust buffer, then the bytes object).
    need_tool("mksquashfs")
    src = tmp_path / "src"
    src.mkdir()
    with open(src / "huge.bin", "wb") as f:
        f.truncate(4_924_112_896)  # sparse: stored as holes
        f.seek(3 << 30)
        f.write(b"marker")
    img = mksquashfs(src, tmp_path / "big.sqfs", "gzip", 4096)
    child = textwrap.dedent(f"""
        import resource, packfs
        img = packfs.Image({str(img)!r}, cache_size=8 << 20)
        # One GiB read: its bytes object and one 64 MiB piece, not two GiB.
        data = img.read_range("huge.bin", (2 << 30) + 6, 1 << 30)
        assert len(data) == 1 << 30 and data[-6:] == b"marker", len(data)
        assert img.read_range("huge.bin", 3 << 30, 6) == b"marker"
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
        del data
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
        try:
            img.read("huge.bin")
        except MemoryError as e:
            print("MemoryError", e)
        print("peak", peak)
    """)
    r = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    assert "huge.bin" in lines["MemoryError"], r.stdout
    assert int(lines["peak"]) < (1 << 30) + (400 << 20), r.stdout


def test_a_nul_in_a_path_is_value_error_and_an_unknown_scheme_is_named(images, tmp_path):
    """Regression: a NUL in a path was FileNotFoundError, where ``os`` says
    ValueError ("embedded null byte") and ``os.path`` answers False; and
    ``gs://`` or ``ftp://`` were opened as file paths, "no such file"."""
    img = packfs.Image(images["packfs-sqfs"][0])
    for call in (lambda: img.read("a\0b"), lambda: img.stat(b"a/\0"), lambda: img.open("a\0"),
                 lambda: img.listdir("a\0"), lambda: img.read_many(["a/hello.txt", "x\0"]),
                 lambda: img.scandir("\0"), lambda: img.readlink("\0")):
        with pytest.raises(ValueError, match="embedded null byte"):
            call()
    assert not img.exists("a\0") and not img.isdir("a\0") and not img.islink("a\0")
    assert not img.isfile("a/hello.txt\0") and img.isfile("a/hello.txt")
    img.close()
    with pytest.raises(ValueError, match="closed"):
        img.exists("a")
    with pytest.raises(ValueError, match="closed"):
        img.islink("a")
    for url in ("gs://bucket/x.sqfs", "ftp://host/x.sqfs"):
        with pytest.raises(ValueError, match="s3://") as e:
            packfs.Image(url)
        assert "not " + url.split("://")[0] + "://" in str(e.value)
    same = packfs.Image("file://" + str(images["packfs-sqfs"][0]))
    assert same.read("a/hello.txt") == b"hello world\n"


def test_a_name_longer_than_squashfs_allows_is_enametoolong(images):
    # Regression: such a lookup said FileNotFoundError; the kernel's
    # SquashFS driver says ENAMETOOLONG, and os.path answers False.
    img = packfs.Image(images["packfs-sqfs"][0])
    long = "a/" + "b" * 300
    with pytest.raises(OSError) as e:
        img.stat(long)
    assert e.value.errno == errno.ENAMETOOLONG and e.value.filename == long
    assert not img.exists(long) and not img.isdir(long) and not img.islink(long)
    with pytest.raises(FileNotFoundError):
        img.stat("a/" + "b" * 256)


def test_remote_timeout_bounds_a_stalled_server(tmp_path):
    # A server that accepts and never answers: the open fails within the
    # remote_timeout given, not the default 60 s.
    import socket
    import time

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(16)
        port = srv.getsockname()[1]
        t0 = time.monotonic()
        with pytest.raises(OSError) as e:
            packfs.Image(f"http://127.0.0.1:{port}/x.sqfs", remote_timeout=2)
        took = time.monotonic() - t0
    assert took < 20, took
    # Named as the argument the caller gave, not as the CLI's flag.
    assert "2 s (remote_timeout)" in str(e.value) and "--" not in str(e.value), e.value
    with pytest.raises(ValueError, match="remote_timeout"):
        packfs.Image(f"http://127.0.0.1:{port}/x.sqfs", remote_timeout=0)


def test_a_missing_shard_is_named_with_its_manifest(tmp_path, packfs_bin):
    # Regression: the manifest's name was cut out of the middle of the
    # message ("shard 1 of ./s-1.sqfs: No such file..."), as if the shard
    # were of itself.
    src = tmp_path / "src"
    for d in ("a", "b"):
        (src / d).mkdir(parents=True)
        for i in range(40):
            (src / d / f"f{i}").write_bytes(b"%d\n" % i)
    subprocess.run([packfs_bin, "pack", str(src), "-o", str(tmp_path / "s-{shard}.sqfs"),
                    "--shards", "2"], check=True, capture_output=True)
    (tmp_path / "s-1.sqfs").unlink()
    manifest = tmp_path / "s.manifest.json"
    with pytest.raises(OSError) as e:
        packfs.Image(manifest)
    msg = str(e.value)
    assert f"shard 1 of {manifest}: " in msg and "s-1.sqfs" in msg, msg
    assert e.value.filename == str(manifest)


def test_a_shard_damaged_after_the_open_is_named_once(tmp_path, packfs_bin):
    """Regression: a shard opens on first use; one truncated between the
    manifest's open and that use was named twice ("S: corrupt image: S:
    superblock says ...")."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(40):
        (src / f"f{i}").write_bytes(os.urandom(20_000))
    subprocess.run([packfs_bin, "pack", str(src), "-o", str(tmp_path / "s-{shard}.sqfs"),
                    "--shards", "2"], check=True, capture_output=True)
    img = packfs.Image(tmp_path / "s.manifest.json")
    shard = str(tmp_path / "s-1.sqfs")
    os.truncate(shard, 100_000)
    with pytest.raises(OSError) as e:
        img.listdir("")
    msg = str(e.value)
    assert msg.count(shard) == 1 and "truncated" in msg, msg


def test_walk_stops_at_a_directory_listed_inside_itself(tmp_path):
    """Bug: in a damaged image whose directory lists itself (one flipped
    bit in a directory entry), ``walk`` descended forever, each level
    slower. The repeated directory now goes to ``onerror`` as ELOOP."""
    need_tool("mksquashfs")
    tree = tmp_path / "tree"
    (tree / "loopdirAAAA" / "childBBBB").mkdir(parents=True)
    (tree / "loopdirAAAA" / "fileCCCC").write_text("hi")
    img = tmp_path / "cycle.sqfs"
    subprocess.run(["mksquashfs", str(tree), str(img), "-noI", "-noD", "-noF", "-noX",
                    "-noappend", "-quiet", "-no-progress"], check=True)
    b = bytearray(img.read_bytes())
    # A directory entry starts with the u16 offset of its inode, 8 bytes
    # before its name: the child's entry is pointed at its parent's inode.
    parent, child = b.index(b"loopdirAAAA") - 8, b.index(b"childBBBB") - 8
    b[child:child + 2] = b[parent:parent + 2]
    img.write_bytes(bytes(b))
    errors = []
    walked = list(packfs.Image(img).walk(onerror=errors.append))
    assert [w[0] for w in walked] == ["", "loopdirAAAA"]
    assert [(e.errno, e.filename) for e in errors] == [(errno.ELOOP, "loopdirAAAA/childBBBB")]
    assert "corrupt image" in str(errors[0]) and "cycle.sqfs" in str(errors[0])
    # Following links (as packfs.torch.ImageFolder walks) it ends too.
    errors = []
    walked = list(packfs.Image(img).walk(onerror=errors.append, followlinks=True))
    assert [w[0] for w in walked] == ["", "loopdirAAAA"]
    assert [(e.errno, e.filename) for e in errors] == [(errno.ELOOP, "loopdirAAAA/childBBBB")]


def test_walk_following_links_stops_at_a_link_loop(tmp_path, packfs_bin):
    """``os.walk(followlinks=True)`` descends a link to an ancestor without
    end; ``Image.walk`` passes it to ``onerror`` as ELOOP, and still enters
    a directory that two links reach from different places."""
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "f").write_text("f")
    (tree / "a" / "b" / "up").symlink_to("..")
    (tree / "other").symlink_to("a/b")
    img = pack(packfs_bin, tree, tmp_path / "links.sqfs")
    errors = []
    walked = sorted(w[0] for w in packfs.Image(img).walk(onerror=errors.append, followlinks=True))
    # other -> a/b; other/up -> a, whose b is other itself.
    assert walked == ["", "a", "a/b", "other", "other/up"]
    assert sorted(e.filename for e in errors) == ["a/b/up", "other/up/b"]


def test_errors_pickle_as_they_are(tmp_path):
    """Bug: ``NotAnImageError`` named a module ``_native`` no one can import,
    so it did not pickle: a DataLoader worker that met it (its image
    overwritten by something else) could not send it, and the main process
    waited forever. Every error the package raises must cross a process."""
    import pickle

    bad = tmp_path / "not.sqfs"
    bad.write_bytes(b"not an image any more" * 10)
    raised = []
    for call in (lambda: packfs.Image(bad), lambda: packfs.Image(tmp_path / "missing.sqfs")):
        with pytest.raises(OSError) as e:
            call()
        raised.append(e.value)
    assert isinstance(raised[0], packfs.NotAnImageError)
    for err in raised:
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err)
        assert (back.errno, back.strerror, back.filename) == (err.errno, err.strerror, err.filename)


_UNDER_A_LIMIT = r"""
import packfs, resource, sys
img = packfs.Image(sys.argv[1], cache_size=8 << 20)
img.read("small.txt")
def vm():
    for l in open("/proc/self/status"):
        if l.startswith("VmSize"):
            return int(l.split()[1]) * 1024
lim = vm() + int(sys.argv[2]) * (1 << 20)
resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
ops = {
    "read": lambda: img.read("huge.bin"),
    "read_range": lambda: img.read_range("huge.bin", 0, 70_000_000),
    "read_many": lambda: img.read_many(["huge.bin"])[0],
    "open_read": lambda: img.open("huge.bin").read(),
    "raw_read": lambda: img.open("huge.bin", buffering=0).read(),
}
try:
    print(len(ops[sys.argv[3]]()))
except MemoryError:
    print("MemoryError")
"""


def test_large_reads_under_an_address_space_limit_raise_memory_error(packfs_bin, tmp_path):
    """Bug: under ``ulimit -v`` (which some clusters set), reading a 70 MB
    file aborted the interpreter (SIGABRT) when the limit left room for the
    result but not for the 64 MiB pieces mountfs was asked for, whose
    allocation cannot fail gracefully. Pieces are small now: every read
    returns the file or raises ``MemoryError``."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "small.txt").write_text("x")
    (tree / "huge.bin").write_bytes(b"".join(b"%09d\n" % i for i in range(7_000_000)))
    img = pack(packfs_bin, tree, tmp_path / "img.sqfs")
    for headroom in (30, 100, 200):
        for op in ("read", "read_range", "read_many", "open_read", "raw_read"):
            r = subprocess.run([sys.executable, "-c", _UNDER_A_LIMIT, str(img), str(headroom), op],
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, f"+{headroom} MiB {op}: exit {r.returncode}: {r.stderr[-500:]}"
            assert r.stdout.strip() in ("70000000", "MemoryError"), (headroom, op, r.stdout)


_PEAK = r"""
import packfs, sys
img = packfs.Image(sys.argv[1])
for read in (lambda: img.read("f.bin"), lambda: img.open("f.bin").read()):
    try:
        read()
        print("read")
    except OSError as e:
        print("OSError", e.errno)
# This process's peak (ru_maxrss would carry the forking parent's over exec).
print(next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) >> 10)
"""


def test_a_damaged_size_fails_before_its_memory_is_taken(tmp_path):
    """Found by a review: ``read`` of a file whose inode claims 1.8 GB (one
    damaged size field) allocated the whole claim before the read failed:
    under a job's memory limit, one damaged inode killed the worker. The
    first piece is now read before the rest is allocated."""
    need_tool("mksquashfs")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "f.bin").write_bytes(b"z" * 777_777)
    img = tmp_path / "big-claim.sqfs"
    subprocess.run(["mksquashfs", str(tree), str(img), "-noI", "-noD", "-noF", "-noX",
                    "-noappend", "-quiet", "-no-progress"], check=True)
    b = bytearray(img.read_bytes())
    size = (777_777).to_bytes(4, "little")
    at = b.index(size)
    assert b.count(size) == 1
    b[at:at + 4] = (0x7000_0000).to_bytes(4, "little")
    img.write_bytes(bytes(b))
    r = subprocess.run([sys.executable, "-c", _PEAK, str(img)], capture_output=True, text=True,
                       timeout=120)
    out = r.stdout.split()
    assert r.returncode == 0 and out[:4] == ["OSError", "5", "OSError", "5"], r.stdout + r.stderr
    assert int(out[4]) < 300, f"peak {out[4]} MiB for a read that fails"


def test_entries_a_zip_hides_are_said_in_a_warning(tmp_path):
    """Found by a review: a ZIP holding "clash" and "clash/inner.txt"
    shows the directory and hides the file, which the CLI says and Python
    did not: the 11 bytes were silently unreachable."""
    import warnings
    import zipfile

    p = tmp_path / "c.zip"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("clash", "eleven byte")
        z.writestr("clash/inner.txt", "inner")
        z.writestr("../out.txt", "escapes")
    with pytest.warns(UserWarning, match=r"c\.zip: 2 of the archive's entries are not shown"):
        img = packfs.Image(p)
    assert img.isdir("clash") and img.read("clash/inner.txt") == b"inner"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pickle_copy = __import__("pickle").loads(__import__("pickle").dumps(img))
        ok = tmp_path / "ok.zip"
        with zipfile.ZipFile(ok, "w") as z:
            z.writestr("a", "a")
        packfs.Image(ok)
        # Said once, to who opened it: not again in a worker's copy.
        assert pickle_copy.read("clash/inner.txt") == b"inner"


def test_a_damaged_large_stored_zip_member_is_eio_in_any_read_order(tmp_path):
    """A stored member too large to check at open is checked over the bytes
    served, whatever their order: whole, in pieces backwards, or through two
    file objects; the read that completes it raises EIO, and so does every
    read after it."""
    import zipfile

    content = random.Random(5).randbytes(3_000_000)
    for where in (0, len(content) // 2, len(content) - 1):
        p = tmp_path / f"damaged-{where}.zip"
        with zipfile.ZipFile(p, "w", zipfile.ZIP_STORED) as z:
            z.writestr("photo.jpg", content)
        b = bytearray(p.read_bytes())
        start = bytes(b).index(content[:64])
        b[start + where] ^= 1
        p.write_bytes(bytes(b))

        with pytest.raises(OSError) as e:
            packfs.Image(p).read("photo.jpg")
        assert e.value.errno == errno.EIO and "CRC-32" in str(e.value), e.value

        img = packfs.Image(p)
        piece = 1 << 16
        offsets = list(range(0, len(content), piece))[::-1]
        for off in offsets[:-1]:
            img.read_range("photo.jpg", off, piece)
        with pytest.raises(OSError) as e:
            img.read_range("photo.jpg", 0, piece)
        assert e.value.errno == errno.EIO, e.value
        with pytest.raises(OSError):
            img.read_range("photo.jpg", 1_000_000, 10)

        img = packfs.Image(p)
        with img.open("photo.jpg", buffering=0) as f, img.open("photo.jpg", buffering=0) as g:
            f.seek(1_500_000)
            f.read()
            with pytest.raises(OSError) as e:
                g.read(1_500_000)
            assert e.value.errno == errno.EIO, e.value
