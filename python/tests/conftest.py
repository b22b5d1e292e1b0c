"""Fixture images made by real tools, and the servers that serve them.

A tool that is missing skips its test with the reason, except when env CI
is set: then the test fails with the reason (CI must run everything).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def need(cond: bool, why: str) -> None:
    """Skips (or, under CI, fails) when ``cond`` is false."""
    if not cond:
        if os.environ.get("CI"):
            pytest.fail(f"CI: {why}")
        pytest.skip(why)


def need_tool(name: str) -> str:
    path = shutil.which(name)
    need(path is not None, f"{name} is not installed (scripts/setup.sh installs it)")
    return path


def make_tree(root: Path) -> Path:
    """A small tree with what images must carry: nested dirs, empty and
    large files, a compressible and an incompressible file, symlinks
    (relative, absolute into the tree, dangling), odd names, modes."""
    root.mkdir(parents=True)
    (root / "a" / "b" / "c").mkdir(parents=True)
    (root / "empty_dir").mkdir()
    (root / "a" / "hello.txt").write_text("hello world\n")
    (root / "a" / "b" / "c" / "deep.txt").write_text("deep\n" * 100)
    (root / "empty.bin").write_bytes(b"")
    rnd = os.urandom(300_000)
    (root / "random.bin").write_bytes(rnd)
    (root / "big.txt").write_bytes(b"".join(b"line %07d of text\n" % i for i in range(120_000)))
    (root / "table.csv").write_text("x,y,name\n" + "".join(f"{i},{i * i},n{i}\n" for i in range(1000)))
    (root / "sp ace and ünïcode.txt").write_text("names\n")
    exe = root / "a" / "run.sh"
    exe.write_text("#!/bin/sh\necho hi\n")
    exe.chmod(0o755)
    ro = root / "a" / "readonly.txt"
    ro.write_text("ro\n")
    ro.chmod(0o444)
    for i in range(300):  # a directory with an index (> 256 entries)
        d = root / "many"
        d.mkdir(exist_ok=True)
        (d / f"f{i:04d}").write_bytes(b"%d\n" % i)
    os.symlink("hello.txt", root / "a" / "link_rel")
    os.symlink("../random.bin", root / "a" / "link_up")
    os.symlink("b/c", root / "a" / "link_dir")
    os.symlink("nowhere", root / "dangling")
    # Fixed times: images and references agree on them whatever the clock.
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for n in filenames + dirnames + [""]:
            p = os.path.join(dirpath, n) if n else dirpath
            os.utime(p, (1_600_000_000, 1_600_000_000), follow_symlinks=False)
    return root


@pytest.fixture(scope="session")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("packfs")


@pytest.fixture(scope="session")
def tree(work) -> Path:
    return make_tree(work / "tree")


@pytest.fixture(scope="session")
def packfs_bin() -> str:
    """The CLI: $PACKFS_BIN, or built by cargo from the repository."""
    b = os.environ.get("PACKFS_BIN")
    if b:
        return b
    subprocess.run(["cargo", "build", "--quiet", "--bin", "packfs"], cwd=REPO, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return str(target / "debug" / "packfs")


def pack(packfs_bin: str, src: Path, out: Path) -> Path:
    """``packfs pack SRC -o OUT`` (format from OUT's extension)."""
    subprocess.run([packfs_bin, "pack", str(src), "-o", str(out), "-q"], check=True)
    return out


def mksquashfs(tree: Path, out: Path, comp: str, block: int) -> Path:
    need_tool("mksquashfs")
    subprocess.run(
        ["mksquashfs", str(tree), str(out), "-comp", comp, "-b", str(block), "-noappend",
         "-quiet", "-no-progress", "-processors", "1"],
        check=True, stdout=subprocess.DEVNULL,
    )
    return out


@pytest.fixture(scope="session")
def images(work, tree, packfs_bin) -> dict:
    """name -> (image path, kind): 'squashfs' images compare with the kernel
    mount, 'zip' ones with unzip."""
    out: dict = {}
    for comp, block in [("gzip", 131072), ("xz", 1048576), ("lz4", 4096), ("zstd", 65536), ("lzo", 131072)]:
        p = mksquashfs(tree, work / f"mk-{comp}-{block}.sqfs", comp, block)
        out[f"mksquashfs-{comp}-{block}"] = (p, "squashfs")
    out["packfs-sqfs"] = (pack(packfs_bin, tree, work / "packfs.sqfs"), "squashfs")
    out["packfs-zip"] = (pack(packfs_bin, tree, work / "packfs.zip"), "zip")
    need_tool("zip")
    p = work / "infozip.zip"
    subprocess.run(["zip", "-q", "-r", "-y", str(p), "."], cwd=tree, check=True)
    out["infozip"] = (p, "zip")
    p = work / "pyzip.zip"
    with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED) as z:
        for dirpath, dirnames, filenames in os.walk(tree):
            for n in sorted(filenames):
                full = Path(dirpath) / n
                if full.is_symlink():
                    continue  # zipfile stores symlinks as their targets' bytes
                z.write(full, full.relative_to(tree))
    out["pyzip"] = (p, "zip")
    return out


@pytest.fixture(scope="session")
def manifest(work, tree, packfs_bin) -> Path:
    d = work / "shards"
    d.mkdir()
    env = dict(os.environ, SOURCE_DATE_EPOCH="0")
    subprocess.run(
        [packfs_bin, "pack", str(tree), "--shards", "3", "-o", str(d / "t-{shard}.sqfs"), "-q"],
        check=True, env=env,
    )
    found = list(d.glob("*.manifest.json"))
    assert len(found) == 1, found
    return found[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, what: str, secs: float = 60) -> None:
    end = time.time() + secs
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on {port} within {secs} s")


@pytest.fixture(scope="session")
def range_server(work, images):
    """scripts/range_server.py serving the fixture images; yields its base URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "range_server.py"), "--root", str(work),
         "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port, proc, "range_server.py")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="session")
def moto(work, images):
    """moto's S3 server with the packfs SquashFS and ZIP images uploaded;
    yields the endpoint URL (credentials are in the environment)."""
    server = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
    need(os.path.exists(server), "moto_server is not installed (pip install 'moto[server]')")
    import boto3

    port = free_port()
    proc = subprocess.Popen([server, "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    env = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        wait_port(port, proc, "moto_server")
        s3 = boto3.client("s3", endpoint_url=endpoint)
        s3.create_bucket(Bucket="images")
        for name in ("packfs-sqfs", "packfs-zip"):
            path = images[name][0]
            s3.upload_file(str(path), "images", path.name)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(10)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
