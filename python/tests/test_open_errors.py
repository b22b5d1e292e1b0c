"""Opening a location that cannot be opened raises the ``OSError`` subclass
``os`` would, with the cause in its message, and at once when a retry
cannot help."""

from __future__ import annotations

import errno
import time

import pytest

import packfs


def test_a_refused_connection_raises_connection_refused_at_once():
    url = "http://127.0.0.1:1/x.sqfs"
    t = time.monotonic()
    with pytest.raises(ConnectionRefusedError) as e:
        packfs.Image(url)
    took = time.monotonic() - t
    assert took < 2, f"took {took:.1f} s"
    assert e.value.errno == errno.ECONNREFUSED and e.value.filename == url
    assert "connection refused by 127.0.0.1:1" in str(e.value)


def test_a_directory_raises_is_a_directory(tmp_path):
    with pytest.raises(IsADirectoryError) as e:
        packfs.Image(tmp_path)
    assert e.value.filename == str(tmp_path)
    assert "is a directory" in str(e.value)
    assert "not a SquashFS" not in str(e.value)


def test_a_missing_image_says_it_once(tmp_path):
    """Found by a review: the message carried Rust's " (os error 2)" after
    the system's words, which the exception's errno already says."""
    missing = tmp_path / "nope.sqfs"
    with pytest.raises(FileNotFoundError) as e:
        packfs.Image(missing)
    assert e.value.errno == errno.ENOENT and e.value.filename == str(missing)
    assert e.value.strerror == "No such file or directory"
