"""packfs.torch.ImageFolder in a real torch DataLoader: 2 workers under each
start method, and persistent workers."""

from __future__ import annotations

import os
import sys

import pytest

import packfs
import packfs.torch
from conftest import need, pack

try:
    import torch
    from torch.utils.data import DataLoader
except ImportError:  # scripts/python_tests.sh installs torch
    torch = None


@pytest.fixture(scope="module")
def folder(tmp_path_factory, packfs_bin):
    need(torch is not None, "torch is not installed (scripts/python_tests.sh installs it)")
    root = tmp_path_factory.mktemp("folder")
    tree = root / "tree" / "train"
    want = {}
    for c in ("cat", "dog", "eel"):
        (tree / c / "sub").mkdir(parents=True)
        for i in range(23):
            p = tree / c / ("sub" if i % 4 == 0 else "") / f"{i:03d}.jpg"
            data = os.urandom(100 + 37 * i) + c.encode()
            p.write_bytes(data)
            want[data] = c
        (tree / c / "notes.txt").write_text("not a sample")
    img = pack(packfs_bin, root / "tree", root / "folder.sqfs")
    return img, want


def collate(batch):
    return batch


def test_index_like_torchvision(folder):
    img, want = folder
    ds = packfs.torch.ImageFolder(packfs.Image(img), "train", extensions=(".jpg",))
    assert ds.classes == ["cat", "dog", "eel"] and len(ds) == 69
    assert ds._paths.dtype.name == "uint8" and ds.targets.dtype.name == "int64"
    for i in range(len(ds)):
        data, target = ds[i]
        assert want[data] == ds.classes[target]
    assert ds.__getitems__([5, 0, 68]) == [ds[5], ds[0], ds[68]]
    assert ds.path(0) == "train/cat/000.jpg" or ds.path(0).startswith("train/cat/")



def walked_index(image, root, extensions=None, is_valid_file=None):
    """The index as ImageFolder built it over ``Image.walk`` in Python (as
    torchvision's make_dataset over ``os.walk``): the reference for the one
    it now finds in Rust."""
    if isinstance(extensions, str):
        extensions = (extensions,)
    exts = None if extensions is None else tuple(e.lower() for e in extensions)
    if is_valid_file is None:
        is_valid_file = lambda p: exts is None or p.lower().endswith(exts)  # noqa: E731
    classes = sorted(e.name for e in image.scandir(root) if e.is_dir())
    out = []
    for t, c in enumerate(classes):
        top = f"{root}/{c}" if root else c
        for dirpath, _, filenames in sorted(image.walk(top, followlinks=True)):
            out += [(f"{dirpath}/{n}", t) for n in sorted(filenames) if is_valid_file(f"{dirpath}/{n}")]
    return out


def test_the_index_is_the_python_walks_on_links_loops_and_odd_names(tmp_path, packfs_bin):
    tree = tmp_path / "tree"
    a, b = tree / "data" / "a", tree / "data" / "b"
    for d in (a / "s" / "u", a / "s-t", a / "S", b, tree / "data" / "empty", tree / "data" / "\u00fc"):
        d.mkdir(parents=True, exist_ok=True)
    for f in ("x.JPG", "y.jpg", "z.png", "s/1.jpg", "s/u/v.jpg", "s-t/2.jpg", "S/3.jpg", "k.\u212a"):
        (a / f).write_bytes(f.encode())
    for f in ("\ue000.jpg", "\u00e9.jpg", "Z.jpg", "\u03a3"):
        (b / f).write_bytes(f.encode())
    (tree / "data" / "\u00fc" / "w.jpg").write_bytes(b"w")
    raw = os.fsencode(b)
    for name in (b"\xfe.jpg", b"\xff.JPG", b"\xc3.png"):  # not UTF-8
        with open(raw + b"/" + name, "wb") as f:
            f.write(name)
    os.symlink("../b", a / "link")  # a directory, followed
    os.symlink(".", a / "s" / "loop")  # its own ancestor: not entered
    os.symlink("nowhere", a / "broken")  # a file that is not there: a sample
    os.symlink("y.jpg", a / "file.jpg")  # a file
    os.symlink("../..", a / "s" / "up")  # the classes again, then a loop
    img = packfs.Image(pack(packfs_bin, tree, tmp_path / "odd.sqfs"))
    cases = [
        {},
        {"extensions": (".JPG", ".k", "\u03c3")},
        {"extensions": ".png"},
        {"is_valid_file": lambda p: "s" in p},
    ]
    for kw in cases:
        ds = packfs.torch.ImageFolder(img, "data", allow_empty=True, **kw)
        want = walked_index(img, "data", **kw)
        assert list(ds.samples) == want, kw
        assert ds.targets.tolist() == [t for _, t in want]
    # The loop was not entered, the broken link is a sample, the classes
    # were reached again through the link up.
    paths = [p for p, _ in packfs.torch.ImageFolder(img, "data", allow_empty=True).samples]
    assert "data/a/broken" in paths and not any("loop" in p for p in paths)
    assert "data/a/s/up/b/Z.jpg" in paths and "data/a/link/Z.jpg" in paths


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
@pytest.mark.parametrize("persistent", [False, True])
def test_dataloader_two_workers(folder, method, persistent):
    img, want = folder
    ds = packfs.torch.ImageFolder(img, "train", extensions=(".jpg",))
    ds.image.read(ds.path(0))  # used in the parent before the workers start
    dl = DataLoader(ds, batch_size=8, shuffle=True, num_workers=2, collate_fn=collate,
                    multiprocessing_context=method, persistent_workers=persistent)
    for epoch in range(2):
        seen = []
        for batch in dl:
            for data, target in batch:
                assert want[data] == ds.classes[target]
                seen.append(data)
        assert sorted(seen) == sorted(want), epoch


def test_pil_loader_decodes_images_from_an_image(tmp_path, packfs_bin):
    """The README's DataLoader example decodes with pil_loader: real PNG and
    JPEG files written by Pillow come back as RGB images of their size and
    pixels (Pillow is in the `torch` extra)."""
    need(torch is not None, "torch is not installed (scripts/python_tests.sh installs it)")
    from PIL import Image as PILImage

    tree = tmp_path / "tree" / "train" / "red"
    tree.mkdir(parents=True)
    PILImage.new("RGB", (7, 5), (200, 10, 20)).save(tree / "a.png")
    PILImage.new("L", (3, 9), 128).save(tree / "b.jpg", quality=100)
    img = pack(packfs_bin, tmp_path / "tree", tmp_path / "pics.sqfs")
    ds = packfs.torch.ImageFolder(img, "train", loader=packfs.torch.pil_loader)
    got = sorted((ds[i][0].size, ds[i][0].mode, ds[i][0].getpixel((0, 0))) for i in range(len(ds)))
    assert got[0][:2] == ((3, 9), "RGB") and all(abs(v - 128) <= 2 for v in got[0][2])
    assert got[1] == ((7, 5), "RGB", (200, 10, 20))


def test_arguments_and_errors_as_torchvision_has_them(folder):
    """Found by a review: ``extensions=".jpg"`` was split into characters,
    a ``pathlib`` root raised AttributeError, a class without samples and
    both filters at once were accepted silently, a loader's error named no
    file, and there were no ``samples``/``imgs``."""
    import pathlib

    img, _ = folder
    ds = packfs.torch.ImageFolder(img, pathlib.PurePosixPath("train"), extensions=".JPG")
    assert len(ds) == 69 and all(p.endswith(".jpg") for p, _ in ds.samples)
    assert ds.imgs == ds.samples and ds.samples[0] == (ds.path(0), int(ds.targets[0]))
    with pytest.raises(ValueError):
        packfs.torch.ImageFolder(img, "train", extensions=".jpg", is_valid_file=lambda p: True)
    with pytest.raises(FileNotFoundError, match="cat, dog, eel"):
        packfs.torch.ImageFolder(img, "train", extensions=".png")
    assert len(packfs.torch.ImageFolder(img, "train", extensions=".png", allow_empty=True)) == 0

    def bad_loader(data):
        raise OSError("cannot identify image file <_io.BytesIO>")

    with pytest.raises(OSError) as e:
        packfs.torch.ImageFolder(img, "train", loader=bad_loader, extensions=".jpg")[0]
    if sys.version_info >= (3, 11):  # exception notes are 3.11's
        assert f"loading {ds.path(0)}" in "".join(e.value.__notes__)


def test_samples_index_in_place_and_take_a_subset(folder):
    """Found by a review: ``samples`` was a list rebuilt on every access,
    so a subclass indexing ``self.samples[i]`` per item (as torchvision
    code does) paid a whole list per item, and ``ds.samples = subset``,
    torchvision's way to take a subset, raised AttributeError."""
    img, want = folder
    ds = packfs.torch.ImageFolder(img, "train", extensions=".jpg")
    calls = []
    path = ds.path
    ds.path = lambda i: calls.append(i) or path(i)
    assert ds.samples[-1] == (path(68), int(ds.targets[68])) and calls == [-1]
    ds.path = path
    every = list(ds.samples)
    assert len(every) == 69 and ds.samples == every and ds.imgs == every
    assert ds.samples[1:4] == every[1:4] and ds.samples != every[:3]
    with pytest.raises(IndexError):
        ds.samples[69]

    keep = [every[i] for i in (60, 2, 30)]
    ds.samples = keep
    assert len(ds) == 3 and ds.samples == keep and list(ds.targets) == [2, 0, 1]
    assert [want[ds[i][0]] for i in range(3)] == ["eel", "cat", "dog"]
    with pytest.raises(TypeError):
        ds.samples = [(every[0][0], "cat")]
    assert ds.samples == keep  # a bad pair left the dataset as it was
    ds.imgs = every
    assert len(ds) == 69
