"""The package's types as a user's type checker sees them: the extension's
stub (`packfs/_native.pyi`) matches the built extension, and a program
written against the public API type-checks."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import need


def mypy_available() -> bool:
    try:
        import mypy  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory) -> Path:
    """One cache for the module's mypy runs: the standard library's stubs
    are analysed once, not once per run."""
    need(mypy_available(), "mypy is not installed (the `test` extra of python/pyproject.toml)")
    return tmp_path_factory.mktemp("mypy-cache")


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
    )


def test_the_extension_stub_matches_the_extension():
    need(mypy_available(), "mypy is not installed (the `test` extra of python/pyproject.toml)")
    r = run("mypy.stubtest", "packfs._native")
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_program_using_the_public_api_type_checks(mypy_cache, tmp_path):
    prog = tmp_path / "user.py"
    prog.write_text(
        textwrap.dedent(
            """
            import packfs
            from packfs import NotAnImageError

            def sizes(image: str) -> dict[str, int]:
                with packfs.Image(image) as img:
                    out: dict[str, int] = {}
                    for top, dirs, files in img.walk(""):
                        for name in files:
                            out[name] = img.stat(f"{top}/{name}").st_size
                    data: bytes = img.read("a")
                    out["a"] = len(data)
                    return out

            def is_image(path: str) -> bool:
                try:
                    packfs.Image(path).close()
                except NotAnImageError:
                    return False
                return True
            """
        )
    )
    r = run("mypy", "--strict", "--cache-dir", str(mypy_cache), str(prog), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    # The check can fail: a wrong type is reported, so the package is not
    # read as untyped (which would let anything through).
    bad = tmp_path / "bad.py"
    bad.write_text("import packfs\nx: int = packfs.Image('i').read('a')\n")
    r = run("mypy", "--strict", "--cache-dir", str(mypy_cache), str(bad), cwd=tmp_path)
    assert r.returncode != 0 and "bytes" in r.stdout, r.stdout + r.stderr
