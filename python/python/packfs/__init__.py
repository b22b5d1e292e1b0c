"""packfs: read SquashFS and ZIP images (local, shard manifests, S3, HTTP)
without a mount.

>>> import packfs
>>> img = packfs.Image("train.sqfs")
>>> img.listdir("train")[:2]
>>> data = img.read("train/n01440764/img_0001.JPEG")

``packfs.fsspec`` (needs fsspec) and ``packfs.torch`` (needs torch and
numpy) are imported on demand; importing ``packfs`` imports neither.
docs/PYTHON.md in the repository describes the whole API.
"""

from ._image import DirEntry, Extent, Image, NotAnImageError, ScandirIterator, VerifyReport
from ._file import ImageFile

__all__ = [
    "Image",
    "DirEntry",
    "Extent",
    "ScandirIterator",
    "ImageFile",
    "NotAnImageError",
    "VerifyReport",
]
__version__ = "0.1.0"
