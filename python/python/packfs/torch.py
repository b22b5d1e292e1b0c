"""``packfs.torch``: a map-style dataset over a directory of an image.

:class:`ImageFolder` is torchvision's ``ImageFolder`` read from an image:
each subdirectory of ``root`` is a class (sorted by name, numbered from 0),
every file below it a sample. Samples are read with
:meth:`packfs.Image.read` (one file) or, through ``__getitems__``, which
torch's DataLoader calls with a whole batch of indices, with
:meth:`packfs.Image.read_many` (the batch decoded in parallel with the GIL
released).

The index is three numpy arrays (the paths' bytes end to end, their
offsets, the targets), not a Python object per sample: a DataLoader worker
forked from the main process touches no reference counts when it reads a
sample's path, so the index stays shared with the parent instead of being
copied page by page (PyTorch #13246).

Needs numpy, and torch only to be used by a DataLoader: this module
imports neither torch nor torchvision.
"""

from __future__ import annotations

import array
import io
import operator
import os
import sys
from collections.abc import Sequence as SequenceABC
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from . import _sampler
from ._image import Image

#: torchvision's ``IMG_EXTENSIONS``.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def pil_loader(data: bytes) -> Any:
    """Decodes a sample to an RGB ``PIL.Image`` (as torchvision's default
    loader does from a file); needs Pillow."""
    from PIL import Image as PILImage

    with PILImage.open(io.BytesIO(data)) as im:
        return im.convert("RGB")


def raw_loader(data: bytes) -> bytes:
    """The sample's bytes as stored (the default: no decoding)."""
    return data


class SampleList(SequenceABC):
    """``(path, target)`` pairs of an :class:`ImageFolder`, made from its
    arrays one at a time as they are asked for.

    What torchvision's ``samples`` list does for a reader: ``len``,
    indexing (a slice gives a list), iteration, and ``==`` with a list.
    Indexing costs one pair: a subclass's ``__getitem__`` may index
    ``self.samples[i]`` as it would torchvision's list.
    """

    __slots__ = ("_folder",)

    def __init__(self, folder: "ImageFolder") -> None:
        self._folder = folder

    def __len__(self) -> int:
        return len(self._folder)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = operator.index(i)
        return (self._folder.path(i), int(self._folder.targets[i]))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (SampleList, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        n = len(self)
        head = ", ".join(repr(self[i]) for i in range(min(n, 3)))
        return f"SampleList([{head}{', ...' if n > 3 else ''}], {n} samples)"


class ImageFolder:
    """Samples under ``root`` in ``image``, one class per subdirectory.

    ``image`` is a :class:`packfs.Image` or a location to open one;
    ``loader(bytes)`` turns a file's bytes into a sample (default: the bytes
    themselves; :func:`pil_loader` decodes images), then ``transform`` and
    ``target_transform`` apply as in torchvision. A file is a sample when
    ``is_valid_file(path)`` says so, else when its name ends with one of
    ``extensions`` (case-insensitive; default: every file). Items are
    ``(sample, target)``.

    As torchvision's: ``extensions`` may be one string; giving both
    ``extensions`` and ``is_valid_file`` is a ``ValueError``; a class with
    no sample is a ``FileNotFoundError`` unless ``allow_empty``; a loader's
    error says which file it was loading.

    Attributes as torchvision's: ``classes``, ``class_to_idx``, ``targets``
    (a numpy array), ``samples`` and ``imgs`` (``(path, target)`` pairs: a
    :class:`SampleList` that makes each pair when it is read, since the
    dataset holds no Python object per sample; assigning a list of pairs
    to ``samples`` makes them the dataset's samples, as one does with
    torchvision's to take a subset); ``path(i)`` is sample ``i``'s path in
    the image.
    """

    def __init__(
        self,
        image: Image | str | os.PathLike,
        root: str = "",
        transform: Callable | None = None,
        target_transform: Callable | None = None,
        loader: Callable[[bytes], Any] | None = None,
        extensions: str | Sequence[str] | None = None,
        is_valid_file: Callable[[str], bool] | None = None,
        allow_empty: bool = False,
    ) -> None:
        if extensions is not None and is_valid_file is not None:
            raise ValueError("give extensions or is_valid_file, not both")
        if isinstance(extensions, str):
            extensions = (extensions,)
        self.image = image if isinstance(image, Image) else Image(image)
        self._read_plan: _sampler.ReadPlan | None = None
        self.root = os.fsdecode(os.fspath(root)).strip("/")
        self.transform = transform
        self.target_transform = target_transform
        self.loader = loader if loader is not None else raw_loader
        exts = tuple(e.lower() for e in extensions) if extensions is not None else None
        self.classes = sorted(
            e.name for e in self.image.scandir(self.root) if e.is_dir()
        )
        if not self.classes:
            raise FileNotFoundError(f"no class directories under {self.root!r} in {self.image.location}")
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        # The order of torchvision's make_dataset (directories sorted by
        # path, files by name, links followed), found in Rust: a Python
        # object per file would cost more than the file's name.
        native = self.image._native()
        blobs, ends, counts = [], [], []
        at = 0
        for c in self.classes:
            top = f"{self.root}/{c}" if self.root else c
            blob, offsets, undecided = native.files_under(top, None if is_valid_file else exts)
            offs = np.frombuffer(offsets, dtype="<u8").astype(np.int64)
            keep = None
            if is_valid_file is not None:
                keep = [is_valid_file(os.fsdecode(blob[a:b])) for a, b in zip(offs[:-1], offs[1:])]
            elif undecided:
                # Not UTF-8: lowercased as Python lowercases the str it decodes to.
                keep = np.ones(len(offs) - 1, dtype=bool)
                for k in undecided:
                    keep[k] = os.fsdecode(blob[offs[k] : offs[k + 1]]).lower().endswith(exts)
            if keep is not None and not all(keep):
                starts = offs[:-1][np.asarray(keep, dtype=bool)]
                stops = offs[1:][np.asarray(keep, dtype=bool)]
                blob = b"".join(blob[a:b] for a, b in zip(starts, stops))
                offs = np.concatenate([[0], np.cumsum(stops - starts)])
            blobs.append(blob)
            ends.append(offs[1:] + at)
            at += len(blob)
            counts.append(len(offs) - 1)
        offsets = np.concatenate([np.zeros(1, dtype=np.int64), *ends])
        targets = np.repeat(np.arange(len(self.classes), dtype=np.int64), counts)
        empty = [c for c, n in zip(self.classes, counts) if n == 0]
        if empty and not allow_empty:
            what = f"with extensions {', '.join(exts)}" if exts else "that is a sample"
            raise FileNotFoundError(
                f"{self.image.location}: no file {what} in the class directories "
                f"{', '.join(empty)} under {self.root or '/'!r} (allow_empty=True keeps them)"
            )
        self._set_index(b"".join(blobs), offsets, targets)

    def _set_index(self, blob: bytes | bytearray, offsets: Sequence[int], targets: Sequence[int]) -> None:
        self._paths = np.frombuffer(bytes(blob), dtype=np.uint8)
        self._offsets = np.array(offsets, dtype=np.int64)
        self.targets = np.array(targets, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.targets)

    def _path_bytes(self, i: int) -> bytes:
        n = len(self.targets)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {i} out of range for {n} samples")
        return self._paths[self._offsets[i] : self._offsets[i + 1]].tobytes()

    def path(self, i: int) -> str:
        """Sample ``i``'s path in the image."""
        return os.fsdecode(self._path_bytes(i))

    @property
    def samples(self) -> SampleList:
        """``(path, target)`` of every sample, as torchvision's."""
        return SampleList(self)

    @samples.setter
    def samples(self, pairs: Iterable[tuple[str | bytes, int]]) -> None:
        # Built aside first: a bad pair leaves the dataset as it was.
        blob = bytearray()
        offsets = array.array("q", [0])
        targets = array.array("q")
        for path, target in list(pairs):
            blob += os.fsencode(path)
            offsets.append(len(blob))
            targets.append(operator.index(target))
        self._set_index(blob, offsets, targets)

    imgs = samples

    def _item(self, i: int, data: bytes) -> tuple:
        try:
            sample = self.loader(data)
        except Exception as e:
            # A decoder given bytes (PIL: "cannot identify image file
            # <_io.BytesIO ...>") cannot say which file they were.
            if hasattr(e, "add_note"):
                e.add_note(f"loading {self.path(i)} of {self.image.location}")
            raise
        if self.transform is not None:
            sample = self.transform(sample)
        target = int(self.targets[i])
        if self.target_transform is not None:
            target = self.target_transform(target)
        return sample, target

    def layout(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where each sample's bytes lie in the image, for
        :class:`ShuffleSampler`: ``(offsets, lengths, parts)``, numpy arrays
        indexed by sample (``Image.locate`` of every path, asked at once)."""
        raw = self.image._native().locate_many(self._path_bytes(i) for i in range(len(self)))
        a = np.frombuffer(raw, dtype="<u8").reshape(-1, 3).astype(np.int64)
        return a[:, 1], a[:, 2], a[:, 0]

    def set_read_plan(self, plan: _sampler.ReadPlan | None) -> None:
        """What to fetch ahead of the samples read next (:class:`ShuffleSampler`
        with locality sets it; None stops it). A hint only: any order of
        reads stays correct under any plan."""
        self._read_plan = plan

    def _read_ahead(self, indices: Sequence[int]) -> None:
        plan = self._read_plan
        if plan is not None:
            spans = plan.spans_for(np.asarray(indices, dtype=np.int64), self._fetch_share())
            if spans:
                self.image._native().will_read(spans)

    def _fetch_share(self) -> tuple[int, int]:
        """``(worker, workers)`` of this DataLoader worker when the workers
        share fetched bytes through the image's disk cache, else (0, 1)."""
        torch = sys.modules.get("torch")
        if torch is None or not self.image._options.get("disk_cache"):
            return 0, 1
        info = torch.utils.data.get_worker_info()
        return (info.id, info.num_workers) if info is not None else (0, 1)

    def __getitem__(self, i: int) -> tuple:
        i = int(i)
        self._read_ahead([i])
        return self._item(i, self.image.read(self._path_bytes(i)))

    def __getitems__(self, indices: Sequence[int]) -> list:
        """A batch: the files read together (``Image.read_many``), after
        the read plan's hints, if any."""
        indices = [int(i) for i in indices]
        self._read_ahead(indices)
        datas = self.image.read_many([self._path_bytes(i) for i in indices])
        return [self._item(i, d) for i, d in zip(indices, datas)]

    def __repr__(self) -> str:
        return (
            f"packfs.torch.ImageFolder({self.image.location!r}, root={self.root!r}: "
            f"{len(self)} samples, {len(self.classes)} classes)"
        )


class ShuffleSampler:
    """A deterministic, resumable, rank-split shuffle for a DataLoader.

    ``DataLoader(ds, sampler=ShuffleSampler(ds, seed=...), batch_size=B)``;
    call ``set_epoch(e)`` before each epoch, as with torch's
    ``DistributedSampler``. One global order per ``(seed, epoch)`` is split
    round-robin among ranks, so the samples of each global step
    (``B * world_size`` of them) are the same whatever the world size;
    ``rank`` and ``world_size`` default to torch.distributed's when it is
    initialised, else 0 and 1. ``len()`` and the padding (or ``drop_last``)
    are DistributedSampler's.

    ``state_dict(samples_seen)`` saves where the epoch is;
    ``load_state_dict(state)`` continues it from there, at this world size
    or another: every sample the epoch has not given yet then comes once
    across the new ranks. ``samples_seen`` is what each rank has consumed
    (steps times batch size); left out, it is what this sampler has
    yielded, which runs ahead of training when DataLoader workers prefetch.

    ``locality=True`` orders samples by where their bytes lie in the image
    (the dataset's ``layout()``; :class:`ImageFolder` has one): groups of
    the samples in one aligned span of ``group_bytes`` (set it to the
    image's ``range_size`` for a remote image) are shuffled and
    ``window`` groups at a time interleaved at random, so that batches stay
    mixed while reads move forward through a few regions of the image. A
    dataset without ``layout()`` is grouped by index, 64 samples a group.
    ``locality=False`` is a uniform shuffle. docs/PYTHON.md ("Shuffling")
    says what locality trades.

    ``read_ahead=True`` (with locality) gives a dataset that has
    ``set_read_plan`` (:class:`ImageFolder` does) the epoch's read plan:
    when a batch starts a group, the dataset asks the image for all of it
    and for the group the same slot reads next, so each region arrives in
    one request, ahead of its samples. The plan travels to DataLoader
    workers with the dataset when they start; workers kept across epochs
    (``persistent_workers=True``) keep the plan of the epoch they started
    in, which then fetches the wrong regions (reads stay correct).

    ``num_workers`` and ``batch_size`` (with locality): the DataLoader's.
    Each worker process has its own image and caches, and the loader hands
    it every ``num_workers``-th batch; with more than one worker the order
    is dealt in as many streams of regions, one per worker, so that each
    region is fetched by one worker, not by all (module doc of
    ``packfs._sampler``, "Streams"). Left out, every worker's batches draw
    from every region. The order then depends on ``batch_size *
    world_size``, the global batch, and on ``num_workers``; a loaded state
    continues its epoch in the order it was saved in.
    """

    def __init__(
        self,
        dataset: Any,
        *,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        locality: bool = True,
        drop_last: bool = False,
        group_bytes: int = 4 << 20,
        window: int = 64,
        read_ahead: bool = True,
        batch_size: int | None = None,
        num_workers: int = 0,
    ) -> None:
        if rank is None or world_size is None:
            dist_rank, dist_world = _distributed()
            rank = dist_rank if rank is None else rank
            world_size = dist_world if world_size is None else world_size
        rank, world_size = operator.index(rank), operator.index(world_size)
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in 0..{world_size - 1} (world_size {world_size})")
        if group_bytes < 1 or window < 1:
            raise ValueError("group_bytes and window must be positive")
        num_workers = operator.index(num_workers)
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, not {num_workers}")
        if batch_size is not None and operator.index(batch_size) < 1:
            raise ValueError(f"batch_size must be positive, not {batch_size}")
        if num_workers > 1 and batch_size is None:
            raise ValueError(
                "num_workers needs batch_size (the DataLoader's): the workers' streams are cut in batches"
            )
        self.dataset = dataset
        self.seed = operator.index(seed)
        self.rank = rank
        self.world_size = world_size
        self.locality = bool(locality)
        self.drop_last = bool(drop_last)
        self.group_bytes = operator.index(group_bytes)
        self.window = operator.index(window)
        self.read_ahead = bool(read_ahead)
        self.batch_size = None if batch_size is None else operator.index(batch_size)
        self.num_workers = num_workers
        self.epoch = 0
        self._size = len(dataset)
        self._layout: _sampler.Layout | None = None
        # The last locality schedule made: its key (seed, epoch, streams,
        # chunk), order and next groups.
        self._schedule: tuple[tuple, np.ndarray, np.ndarray] | None = None
        # (epoch, streams, chunk) of a loaded state: that epoch keeps the
        # dealing it was saved with.
        self._loaded_dealing: tuple[int, int, int] | None = None
        # Global position where the next iteration starts (set by
        # load_state_dict), and what the current one has yielded.
        self._start = 0
        self._yielded = 0
        # A loaded state whose epoch no iteration has started yet: the
        # set_epoch a training loop calls at the top of that epoch must not
        # throw its position away.
        self._resuming = False
        self._plan_dataset()

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order the next iteration gives, from its start;
        after :meth:`load_state_dict`, the state's own epoch continues from
        where the state left it (so the usual loop that calls ``set_epoch``
        at the top of every epoch resumes as it should)."""
        epoch = operator.index(epoch)
        if self._resuming and epoch == self.epoch:
            return
        self._resuming = False
        self.epoch = epoch
        self._start = 0
        self._yielded = 0
        self._plan_dataset()

    def order(self) -> np.ndarray:
        """The global order of this epoch (every rank's samples interleaved)."""
        if not self.locality:
            return _sampler.uniform_order(self._size, self.seed, self.epoch)
        return self._local_schedule()[0]

    def _dealing(self) -> tuple[int, int]:
        """``(streams, chunk)`` of this epoch's order: a loaded state's for
        its own epoch, else one stream per DataLoader worker, cut in global
        batches."""
        loaded = self._loaded_dealing
        if loaded is not None and loaded[0] == self.epoch:
            return loaded[1], loaded[2]
        if self.locality and self.num_workers > 1 and self.batch_size is not None:
            return self.num_workers, self.batch_size * self.world_size
        return 1, 0

    def _local_schedule(self) -> tuple[np.ndarray, np.ndarray, int]:
        key = (self.seed, self.epoch, *self._dealing())
        s = self._schedule
        if s is None or s[0] != key:
            if self._layout is None:
                self._layout = self._make_layout()
            order, after = _sampler.local_schedule(self._layout, self.window, self.seed, self.epoch, *key[2:])
            s = self._schedule = (key, order, after)
        return s[1], s[2], s[0][2]

    def _plan_dataset(self) -> None:
        """Gives the dataset this epoch's read plan (see the class doc)."""
        setter = getattr(self.dataset, "set_read_plan", None)
        if not (self.locality and self.read_ahead and setter is not None):
            return
        _, after, streams = self._local_schedule()
        layout = self._layout
        if layout is not None and layout.lengths is not None:
            setter(_sampler.ReadPlan(layout, after, streams))

    def _make_layout(self) -> _sampler.Layout:
        layout = getattr(self.dataset, "layout", None)
        if layout is None:
            n = self._size
            # 64 samples to a group.
            unit = -(-self.group_bytes // 64)
            return _sampler.Layout(np.arange(n, dtype=np.int64) * unit, None, self.group_bytes)
        keys, lengths, parts = layout()
        if len(keys) != self._size:
            raise ValueError(f"the dataset's layout has {len(keys)} samples, the dataset {self._size}")
        return _sampler.Layout(keys, parts, self.group_bytes, lengths)

    def __iter__(self) -> Iterator[int]:
        share = _sampler.rank_share(
            self.order(), self._start, self.rank, self.world_size, self.drop_last
        )
        self._yielded = 0
        self._resuming = False
        for i in share.tolist():
            self._yielded += 1
            yield i
        # A finished epoch: the next iteration (without set_epoch) gives it
        # again from its start, as DistributedSampler does.
        self._start = 0
        self._yielded = 0

    def __len__(self) -> int:
        return _sampler.share_len(self._size - self._start, self.world_size, self.drop_last)

    def state_dict(self, samples_seen: int | None = None) -> dict:
        """Where this epoch is, after each rank consumed ``samples_seen``."""
        seen = self._yielded if samples_seen is None else operator.index(samples_seen)
        if seen < 0:
            raise ValueError(f"samples_seen is negative: {seen}")
        return {
            "version": _sampler.STATE_VERSION,
            "seed": self.seed,
            "epoch": self.epoch,
            "position": min(self._start + seen * self.world_size, self._size),
            "size": self._size,
            "locality": self.locality,
            "group_bytes": self.group_bytes,
            "window": self.window,
            "streams": self._dealing()[0],
            "chunk": self._dealing()[1],
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue the epoch ``state`` was saved in, where it was left."""
        if state.get("version") != _sampler.STATE_VERSION:
            raise ValueError(f"a sampler state of version {state.get('version')!r}, not {_sampler.STATE_VERSION}")
        if state["size"] != self._size:
            raise ValueError(
                f"the state was saved for a dataset of {state['size']} samples, this one has {self._size}"
            )
        for key in ("locality", "group_bytes", "window"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"the state was saved with {key}={state[key]!r}, this sampler has "
                    f"{getattr(self, key)!r}: the order would not be the same"
                )
        self.seed = state["seed"]
        self.epoch = state["epoch"]
        # States saved before streams existed were dealt in one.
        self._loaded_dealing = (self.epoch, int(state.get("streams", 1)), int(state.get("chunk", 0)))
        self._start = state["position"]
        self._yielded = 0
        self._resuming = True
        self._plan_dataset()

    def __repr__(self) -> str:
        return (
            f"packfs.torch.ShuffleSampler({self._size} samples, seed={self.seed}, epoch={self.epoch}, "
            f"rank {self.rank} of {self.world_size}, locality={self.locality})"
        )


def _distributed() -> tuple[int, int]:
    """torch.distributed's rank and world size when it is initialised; this
    module imports torch only when the program already has."""
    torch = sys.modules.get("torch")
    if torch is not None:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    return 0, 1
