"""The wheel `maturin build` makes (scripts/python_tests.sh builds it and
installs it into the test venv, so every other test runs against it)."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import packfs

from conftest import need


def wheel() -> Path:
    path = os.environ.get("PACKFS_WHEEL")
    need(path is not None, "PACKFS_WHEEL is not set: run the tests through scripts/python_tests.sh")
    return Path(path)


def test_wheel_is_abi3_and_carries_the_extension_and_the_fsspec_entry_point():
    w = wheel()
    # name-version-python-abi-platform.whl: one wheel for every CPython >= 3.10.
    name, version, py, abi, platform = w.name[: -len(".whl")].split("-")
    assert (name, version, py, abi) == ("packfs", packfs.__version__, "cp310", "abi3"), w.name
    assert "x86_64" in platform or "aarch64" in platform, w.name
    with zipfile.ZipFile(w) as z:
        names = z.namelist()
        assert "packfs/_native.abi3.so" in names, names
        for module in ("__init__", "_image", "_file", "_budget", "fsspec", "torch"):
            assert f"packfs/{module}.py" in names, names
        # PEP 561: users' type checkers read the package's annotations and
        # the extension's stub.
        assert "packfs/py.typed" in names, names
        assert "packfs/_native.pyi" in names, names
        meta_dir = f"packfs-{version}.dist-info"
        entry_points = z.read(f"{meta_dir}/entry_points.txt").decode()
        metadata = z.read(f"{meta_dir}/METADATA").decode()
    lines = [line.replace(" ", "") for line in entry_points.splitlines()]
    assert "[fsspec.specs]" in lines, entry_points
    assert "packfs=packfs.fsspec:PackFileSystem" in lines, entry_points
    assert "Requires-Python: >=3.10" in metadata
    # The package's description on an index is python/README.md.
    assert "Description-Content-Type: text/markdown" in metadata, metadata
    assert "without a FUSE mount" in metadata, metadata


def test_the_readme_example_runs(tmp_path, packfs_bin, monkeypatch):
    """python/README.md's first example, on an image with its paths."""
    from conftest import pack

    (tmp_path / "src" / "train" / "cat").mkdir(parents=True)
    (tmp_path / "src" / "train" / "cat" / "001.jpg").write_bytes(b"\xff\xd8\xff\xe0" + bytes(100))
    image = pack(packfs_bin, tmp_path / "src", tmp_path / "data.sqfs")
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    example = readme.split("```python\n")[1].split("\nimport packfs.torch")[0]
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(example, scope)
    assert scope["head"] == b"\xff\xd8\xff\xe0" + bytes(12)


def test_the_package_under_test_is_the_installed_wheel_not_the_sources():
    wheel()
    here = Path(packfs.__file__).resolve()
    assert "site-packages" in here.parts, here
    native = here.parent / "_native.abi3.so"
    assert native.is_file(), native
