"""Image.verify(): the whole image checked as `packfs verify` does; damage
reported by path, and a read of a damaged block raising OSError (EIO)."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

import packfs


def _tree(root: Path) -> None:
    (root / "d").mkdir(parents=True)
    (root / "d" / "noise.jpg").write_bytes(os.urandom(200_000))
    (root / "text").write_bytes(b"".join(b"line %07d of text\n" % i for i in range(20_000)))
    for i in range(20):
        (root / "d" / f"small-{i}").write_bytes(b"small %d\n" % i * 300)


def _flip(path: Path, at: int) -> None:
    b = bytearray(path.read_bytes())
    b[at] ^= 0x10
    path.write_bytes(bytes(b))


@pytest.fixture
def packed(tmp_path, packfs_bin):
    src = tmp_path / "src"
    _tree(src)

    def pack(name: str, *args: str) -> Path:
        out = tmp_path / name
        subprocess.run([packfs_bin, "pack", str(src), "-o", str(out), "-q", *args], check=True)
        return out

    return pack


def test_an_undamaged_image_verifies(packed):
    for img in [packed("a.sqfs"), packed("a.zip")]:
        r = packfs.Image(img).verify()
        assert r.ok and not r.damaged, r
        assert r.files == 22 and r.bytes > 500_000
        assert r.hash_record == (img.suffix == ".sqfs")


@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_damage_in_a_raw_block_is_found_by_verify_and_eio_on_read(packed, where):
    img = packed("a.sqfs")
    part, offset, length = packfs.Image(img).locate("d/noise.jpg")
    at = {"start": offset, "middle": offset + length // 2, "end": offset + length - 1}[where]
    _flip(img, at)
    im = packfs.Image(img)
    r = im.verify(threads=2)
    assert not r.ok
    assert [p for p, _ in r.damaged if p != "(image)"] == ["/d/noise.jpg"], r.damaged
    assert "hash record" in r.damaged[0][1]
    with pytest.raises(OSError) as e:
        im.read("d/noise.jpg")
    assert e.value.errno == errno.EIO
    assert im.read("text").startswith(b"line 0000000")


def test_damage_in_a_zip_member_is_found_by_its_crc(packed):
    img = packed("a.zip")
    _, offset, length = packfs.Image(img).locate("text")
    _flip(img, offset + length // 2)
    r = packfs.Image(img).verify()
    assert not r.ok
    assert any(p == "/text" for p, _ in r.damaged), r.damaged


def test_without_the_record_a_raw_block_flip_goes_unseen(packed):
    img = packed("bare.sqfs", "--no-checksums")
    _, offset, length = packfs.Image(img).locate("d/noise.jpg")
    _flip(img, offset + length // 2)
    r = packfs.Image(img).verify()
    assert r.ok and not r.hash_record, r


def test_a_damaged_record_does_not_open(packed):
    img = packed("a.sqfs")
    _flip(img, img.stat().st_size - 20)
    with pytest.raises(OSError) as e:
        packfs.Image(img).stat("/")
    assert e.value.errno == errno.EIO
    assert "hash record" in str(e.value)
