#!/usr/bin/env python3
"""PyTorch DataLoader over one JPEG set stored seven ways.

Sides (each sample index names the same file on every side; samplers are shared, so every side reads the same
samples in the same order, except WebDataset, which cannot be indexed):
  raw         the files, read by FileDataset (open + read per sample)
  fuse        the packfs SquashFS image mounted by `packfs mount`, read by the SAME FileDataset
  packfs      packfs.torch over the same image, no mount (batched reads through __getitems__)
  h5py        one HDF5 file: a variable-length uint8 dataset + labels, opened lazily in each worker
  arrow       one Arrow IPC file (binary column), memory-mapped, opened lazily in each worker
  wds         WebDataset: 16 tar shards in path order, shards shuffled, shuffle buffer 1000 (its own sampling)
  ratarmount  ratarmountcore's fsspec filesystem over the same SquashFS image, opened lazily in each worker
  packfs-read (optional, not in the default --sides) packfs.Image.read per sample: packfs direct without batching
Orders: "shuffle" (a random subset of the set, a new permutation each epoch) for all indexable sides; "wds" (the
access pattern WebDataset produces: contiguous shards split among workers, shard order shuffled, a 1000-sample
shuffle buffer, batches round-robin over workers) for packfs and wds, so packfs is compared with WebDataset on
WebDataset's own sequential pattern.
Modes: "bytes" (collate returns the raw bytes: the I/O path) and "decode" (PIL decode + RandomResizedCrop(224)).
Caches: "cold" (fresh mount / fresh open, sync + drop_caches before each epoch) and "warm" (every storage file of the
side read once before the cell, then one warm-up epoch; workers persist across epochs as in training).

Each cell: 1 warm-up epoch (not counted) + --epochs measured epochs; samples/s is the median. Also reported: time
to first batch (median), peak RSS and PSS summed over the main process, its workers and (fuse) the mount daemon, CPU
seconds of those processes. Writes JSON (--json) and prints a table with the ratios of the data-loading goals.

Run it through run.sh, which builds the venv. Needs root for drop_caches (falls back to posix_fadvise(DONTNEED) on
the side's files, which leaves the dentry/inode caches warm; the JSON says which was used).
"""
import argparse
import gc
import io
import json
import os
import platform
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tarfile
import threading
import time

import numpy as np

SIDES = ["raw", "fuse", "packfs", "h5py", "arrow", "wds", "ratarmount"]
OPTIONAL_SIDES = ["packfs-read"]
BATCH = 64
PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")
WDS_SHARDS = 16
WDS_BUFFER = 1000


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------------------
# The sample list: every side stores the same files in the same (sorted path) order, so index i is one file.


def list_samples(root):
    """Sorted (relative path, label) of every file under root/train/<class>/, classes sorted as ImageFolder does."""
    train = os.path.join(root, "train")
    classes = sorted(e.name for e in os.scandir(train) if e.is_dir())
    paths, labels = [], []
    for label, c in enumerate(classes):
        for name in sorted(os.listdir(os.path.join(train, c))):
            paths.append(f"train/{c}/{name}")
            labels.append(label)
    return classes, paths, labels


def subset_tree(corpus, work, n):
    """A tree of n files of the corpus (every k-th file, so all classes appear) made of hard links, or the corpus
    itself when n is 0 or covers it."""
    _, paths, _ = list_samples(corpus)
    if not n or n >= len(paths):
        return corpus
    dst = os.path.join(work, f"subset-{n}")
    if os.path.isdir(dst):
        return dst
    tmp = dst + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    step = len(paths) / n
    for k in range(n):
        p = paths[int(k * step)]
        os.makedirs(os.path.join(tmp, os.path.dirname(p)), exist_ok=True)
        os.link(os.path.join(corpus, p), os.path.join(tmp, p))
    os.rename(tmp, dst)
    return dst


# ---------------------------------------------------------------------------------------------------------------
# Transforms and collate functions (module level so that worker processes can pickle them under any start method).


def as_bytes(data):
    return bytes(data)


class DecodeCrop:
    """PIL decode + RandomResizedCrop(224) + uint8 tensor: the usual ImageNet training transform minus the
    float normalisation, which costs the same on every side."""

    def __init__(self):
        from torchvision import transforms

        self.t = transforms.Compose([transforms.RandomResizedCrop(224), transforms.PILToTensor()])

    def __call__(self, data):
        from PIL import Image

        return self.t(Image.open(io.BytesIO(data)).convert("RGB"))


def collate_bytes(batch):
    """The I/O path: a batch is the list of (bytes, label) as the dataset returned them."""
    return batch


def collate_decode(batch):
    import torch

    return torch.stack([b[0] for b in batch]), torch.tensor([int(b[1]) for b in batch])


# ---------------------------------------------------------------------------------------------------------------
# Datasets. The index is numpy arrays, never one Python object per sample (copy-on-access growth in forked workers,
# pytorch #13246), on every side alike.


def scan_classes(listdir):
    """ImageFolder's scan: classes are the sorted subdirectories of train/, samples their sorted files; listdir(rel)
    lists a directory of the side. Returns (paths as a numpy bytes array, labels)."""
    paths, labels = [], []
    for label, c in enumerate(sorted(listdir("train"))):
        for name in sorted(listdir(f"train/{c}")):
            paths.append(f"train/{c}/{name}".encode())
            labels.append(label)
    return np.array(paths), np.asarray(labels, dtype=np.int64)


class FileDataset:
    """open + read per sample under root: the raw side and the FUSE mount. Scans the tree at construction as
    torchvision's ImageFolder does (readdir of train/ and of every class)."""

    def __init__(self, root, transform):
        self.root = os.fsencode(root) + b"/"
        self.paths, self.labels = scan_classes(lambda rel: os.listdir(os.path.join(root, rel)))
        self.transform = transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        with open(self.root + self.paths[i], "rb") as f:
            data = f.read()
        return self.transform(data), int(self.labels[i])


class H5Dataset:
    """HDF5 as the Jülich course writes it: h5py handles cannot be pickled, so each worker opens the file at its
    first sample."""

    def __init__(self, path, transform):
        self.path, self.transform, self.f = path, transform, None
        import h5py

        with h5py.File(path, "r") as f:
            self.n = len(f["labels"])

    def __len__(self):
        return self.n

    def __getstate__(self):
        return {"path": self.path, "transform": self.transform, "n": self.n, "f": None}

    def __getitem__(self, i):
        if self.f is None:
            import h5py

            self.f = h5py.File(self.path, "r")
            self.images = self.f["images"]
            self.labels = self.f["labels"][:]
        return self.transform(self.images[i].tobytes()), int(self.labels[i])


class ArrowDataset:
    """Arrow IPC file, memory-mapped; a sample is a slice of the mapped binary column (no copy until bytes())."""

    def __init__(self, path, transform):
        self.path, self.transform, self.t = path, transform, None
        import pyarrow as pa

        with pa.memory_map(path) as m:
            r = pa.ipc.open_file(m)
            self.n = sum(r.get_batch(k).num_rows for k in range(r.num_record_batches))

    def __len__(self):
        return self.n

    def __getstate__(self):
        return {"path": self.path, "transform": self.transform, "n": self.n, "t": None}

    def _open(self):
        import pyarrow as pa

        self.m = pa.memory_map(self.path)
        self.t = pa.ipc.open_file(self.m).read_all()
        col = self.t.column("image")
        # per chunk: (first index, offsets as numpy, data buffer as memoryview), all views of the mapping
        self.chunks, first = [], []
        start = 0
        for ch in col.chunks:
            bufs = ch.buffers()
            offs = np.frombuffer(bufs[1], dtype=np.int64)[ch.offset : ch.offset + len(ch) + 1]
            self.chunks.append((offs, memoryview(bufs[2])))
            first.append(start)
            start += len(ch)
        self.first = np.asarray(first)
        self.labels = self.t.column("label").to_numpy()

    def __getitem__(self, i):
        if self.t is None:
            self._open()
        k = int(np.searchsorted(self.first, i, side="right")) - 1
        offs, data = self.chunks[k]
        j = i - self.first[k]
        return self.transform(bytes(data[offs[j] : offs[j + 1]])), int(self.labels[i])


class RatarmountDataset:
    """ratarmountcore's fsspec filesystem over the SquashFS image, opened at each worker's first sample (it loads
    the SQLite index written at prepare time)."""

    def __init__(self, image, transform):
        self.image, self.transform = image, transform
        fs = open_ratarmount(image)
        self.paths, self.labels = scan_classes(
            lambda rel: [os.path.basename(p.rstrip("/")) for p in fs.ls("/" + rel, detail=False)])
        close_ratarmount(fs)
        self.fs = None  # each worker opens its own

    def __len__(self):
        return len(self.labels)

    def __getstate__(self):
        d = dict(self.__dict__)
        d["fs"] = None
        return d

    def __getitem__(self, i):
        if self.fs is None:
            self.fs = open_ratarmount(self.image)
        with self.fs.open("/" + self.paths[i].decode(), "rb") as f:
            data = f.read()
        return self.transform(data), int(self.labels[i])


def open_ratarmount(image, write=False):
    """ratarmountcore's fsspec adaptor (MountSourceFileSystem) over its SquashFS mount source (PySquashfsImage);
    its own "ratar" filesystem reads only TARs. The index is kept beside the image, as ratarmount does; it is
    written once at prepare time (write=True) and only read afterwards."""
    from ratarmountcore.mountsource.formats.squashfs import SquashFSMountSource
    from ratarmountcore.SQLiteIndexedTarFsspec import MountSourceFileSystem

    class ReadOnlySquashFS(SquashFSMountSource):
        # Every open of an existing index rewrites its metadata rows before reopening it read-only; that write
        # fails with "database is locked" while another worker's reader holds the file, so the readers skip it.
        def _store_default_metadata(self):
            pass

    # The SquashFS backend itself, not open_mount_source(): that one first tries other backends with the same
    # index path, and one of them leaves a transaction open on it.
    cls = SquashFSMountSource if write else ReadOnlySquashFS
    return MountSourceFileSystem(cls(image, writeIndex=write, indexFilePath=image + ".index.sqlite"))


def close_ratarmount(fs):
    """Close the index and the image now: left to the garbage collector (the objects form cycles), a forked
    worker would inherit the open SQLite connection and close it too."""
    fs.mountSource.close()
    del fs
    gc.collect()


def to_bytes(x):
    """packfs.torch's loader gets the file's contents; the transform of every side takes bytes (bytes(b) of a
    bytes object is that object, no copy)."""
    return bytes(x)


def packfs_dataset(image, cache_size, transform):
    """packfs.torch's ImageFolder-like dataset over image:/train (batched reads through __getitems__). Its loader
    returns the file's bytes so that the transform gets what every other side's transform gets."""
    import packfs
    import packfs.torch as pt

    cls = getattr(pt, "ImageFolder", None)
    if cls is None:
        sys.exit(f"packfs.torch has no ImageFolder (has: {', '.join(n for n in dir(pt) if not n.startswith('_'))})")
    return cls(packfs.Image(image, cache_size=cache_size), "train", transform=transform, loader=to_bytes)


class PackfsReadDataset:
    """packfs.Image.read per sample, no batching: FileDataset's pattern without a mount (side "packfs-read"),
    to tell what the native reader gives from what batched reads add."""

    def __init__(self, image, cache_size, transform):
        import packfs

        self.img, self.transform = packfs.Image(image, cache_size=cache_size), transform
        self.paths, self.labels = scan_classes(self.img.listdir)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.transform(self.img.read(self.paths[i].decode())), int(self.labels[i])


def wds_dataset(shards, transform, seed):
    import webdataset as wds

    def to_sample(s):
        return transform(s["jpg"]), int(s["cls"])

    return (
        wds.WebDataset(shards, shardshuffle=WDS_SHARDS, seed=seed, empty_check=False,
                       workersplitter=wds.split_by_worker)
        .shuffle(WDS_BUFFER)
        .map(to_sample)
    )


# ---------------------------------------------------------------------------------------------------------------
# Samplers: a new order every epoch from (seed, epoch), the same for every side.


class EpochSampler:
    """Yields the indices of one epoch: order "shuffle" (the first n of a permutation of all indices) or "wds"
    (WebDataset's pattern, see wds_order). set_epoch() picks the next epoch's order; the sampler runs in the main
    process, so this works with persistent workers."""

    def __init__(self, n_total, n, order, workers, seed):
        self.n_total, self.n, self.order, self.workers, self.seed, self.epoch = n_total, n, order, workers, seed, 0

    def set_epoch(self, e):
        self.epoch = e

    def indices(self):
        rng = np.random.default_rng([self.seed, self.epoch])
        if self.order == "shuffle":
            return rng.permutation(self.n_total)[: self.n]
        return wds_order(self.n_total, self.n, self.workers, rng)

    def __iter__(self):
        return iter(self.indices().tolist())

    def __len__(self):
        return min(self.n, self.n_total)


def wds_order(n_total, n, workers, rng):
    """The order in which WebDataset delivers samples, as indices into the path-ordered set: 16 contiguous shards,
    shuffled, dealt to workers round-robin (split_by_worker); each worker streams its shards through a 1000-sample
    shuffle buffer; the DataLoader takes batches from the workers in turn. Truncated to n samples."""
    bounds = np.linspace(0, n_total, WDS_SHARDS + 1).astype(int)
    shards = rng.permutation(WDS_SHARDS)
    w = max(workers, 1)
    streams = []
    for k in range(w):
        stream = np.concatenate([np.arange(bounds[s], bounds[s + 1]) for s in shards[k::w]] or [np.arange(0)])
        streams.append(buffer_shuffle(stream, WDS_BUFFER, rng))
    batches = [[s[j : j + BATCH] for j in range(0, len(s), BATCH)] for s in streams]
    out = []
    for j in range(max(len(b) for b in batches)):
        for b in batches:
            if j < len(b):
                out.append(b[j])
    return np.concatenate(out)[:n]


def buffer_shuffle(stream, size, rng, initial=100):
    """webdataset's shuffle(bufsize, initial=100): take up to two samples per step while the buffer is below
    size, emit a random one once it holds `initial`, drain at the end."""
    buf, out = [], []
    it = iter(stream.tolist())

    def pick():
        k = int(rng.integers(len(buf)))
        buf[k], buf[-1] = buf[-1], buf[k]
        out.append(buf.pop())

    for x in it:
        buf.append(x)
        if len(buf) < size:
            nxt = next(it, None)
            if nxt is not None:
                buf.append(nxt)
        if len(buf) >= min(initial, size):
            pick()
    while buf:
        pick()
    return np.asarray(out, dtype=np.int64)


# ---------------------------------------------------------------------------------------------------------------
# Preparation: every format written from the same sorted sample list, timed, sized.


def dir_usage(path):
    """(bytes allocated on disk, inodes) of a file or a tree."""
    if os.path.isfile(path):
        return os.stat(path).st_blocks * 512, 1
    total, inodes = os.stat(path).st_blocks * 512, 1
    for dirpath, dirs, files in os.walk(path):
        for name in dirs + files:
            total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            inodes += 1
    return total, inodes


def timed_build(src, out, build):
    """Run build(tmp) unless out exists, starting with src out of the page cache; time it (written beside out)."""
    if os.path.exists(out):
        return None
    base, ext = os.path.splitext(out)
    tmp = base + ".tmp" + ext  # packfs pack tells the format from the extension
    if os.path.isdir(tmp):
        shutil.rmtree(tmp)
    elif os.path.exists(tmp):
        os.unlink(tmp)
    drop_caches(storage_files(src))  # every conversion starts from a cold source tree
    t = time.perf_counter()
    build(tmp)
    os.sync()
    s = time.perf_counter() - t
    os.rename(tmp, out)
    with open(out + ".seconds", "w") as f:
        f.write(f"{s}\n")
    return s


def read_seconds(out):
    try:
        with open(out + ".seconds") as f:
            return float(f.read())
    except OSError:
        return None


def prepare(a, raw, paths, labels):
    """Write every format from raw; returns {format: {convert_s, bytes, inodes, path}}."""
    w = a.work
    os.makedirs(w, exist_ok=True)
    tag = os.path.basename(raw.rstrip("/"))
    out = {}

    def rd(p):
        with open(os.path.join(raw, p), "rb") as f:
            return f.read()

    img = os.path.join(w, f"{tag}.sqfs")

    def pack(tmp):
        env = dict(os.environ, SOURCE_DATE_EPOCH="0")
        subprocess.run([a.packfs, "pack", raw, "-o", tmp], env=env, check=True, stdout=subprocess.DEVNULL)

    needs_image = bool(a.latency) or any(s in a.sides for s in ("fuse", "packfs", "packfs-read", "ratarmount"))
    if needs_image:
        timed_build(raw, img, pack)

    h5 = os.path.join(w, f"{tag}.h5")

    def write_h5(tmp):
        import h5py

        with h5py.File(tmp, "w") as f:
            d = f.create_dataset("images", (len(paths),), dtype=h5py.vlen_dtype(np.dtype("uint8")))
            for s in range(0, len(paths), 1000):
                chunk = np.empty(min(1000, len(paths) - s), dtype=object)
                for k in range(len(chunk)):
                    chunk[k] = np.frombuffer(rd(paths[s + k]), dtype=np.uint8)
                d[s : s + len(chunk)] = chunk
            f.create_dataset("labels", data=np.asarray(labels, dtype=np.int64))

    if "h5py" in a.sides:
        timed_build(raw, h5, write_h5)

    arrow = os.path.join(w, f"{tag}.arrow")

    def write_arrow(tmp):
        import pyarrow as pa

        schema = pa.schema([("path", pa.string()), ("image", pa.large_binary()), ("label", pa.int64())])
        with pa.OSFile(tmp, "wb") as f, pa.ipc.new_file(f, schema) as wr:
            for s in range(0, len(paths), 1000):
                ps = paths[s : s + 1000]
                wr.write_batch(pa.record_batch(
                    [pa.array(ps), pa.array([rd(p) for p in ps], pa.large_binary()),
                     pa.array(labels[s : s + 1000], pa.int64())], schema=schema))

    if "arrow" in a.sides:
        timed_build(raw, arrow, write_arrow)

    wdsdir = os.path.join(w, f"{tag}.wds")

    def write_wds(tmp):
        os.makedirs(tmp)
        bounds = np.linspace(0, len(paths), WDS_SHARDS + 1).astype(int)
        for s in range(WDS_SHARDS):
            with tarfile.open(os.path.join(tmp, f"shard-{s:02d}.tar"), "w", format=tarfile.USTAR_FORMAT) as t:
                for i in range(bounds[s], bounds[s + 1]):
                    for ext, data in (("jpg", rd(paths[i])), ("cls", str(labels[i]).encode())):
                        ti = tarfile.TarInfo(f"{i:08d}.{ext}")
                        ti.size, ti.mtime, ti.mode = len(data), 0, 0o644
                        t.addfile(ti, io.BytesIO(data))

    if "wds" in a.sides:
        timed_build(raw, wdsdir, write_wds)

    # ratarmount writes its SQLite index of the image (every inode walked) at the first open; that is its
    # conversion step. The index lands beside the image (<image>.index.sqlite) and is reused by later opens.
    rat_index = img + ".index.sqlite"
    if "ratarmount" in a.sides and not os.path.exists(rat_index + ".seconds"):
        for p in (rat_index,):
            if os.path.exists(p):
                os.unlink(p)
        drop_caches([img])
        t = time.perf_counter()
        fs = open_ratarmount(img, write=True)
        fs.ls("/train")
        close_ratarmount(fs)
        with open(rat_index + ".seconds", "w") as f:
            f.write(f"{time.perf_counter() - t}\n")

    def entry(path, seconds, extra=()):
        b, n = dir_usage(path)
        for e in extra:
            if os.path.exists(e):
                eb, en = dir_usage(e)
                b, n = b + eb, n + en
        return {"path": path, "convert_s": seconds, "bytes_on_disk": b, "inodes": n}

    out["raw"] = entry(raw, 0.0)
    if needs_image:
        out["sqfs"] = entry(img, read_seconds(img))
    if "h5py" in a.sides:
        out["h5py"] = entry(h5, read_seconds(h5))
    if "arrow" in a.sides:
        out["arrow"] = entry(arrow, read_seconds(arrow))
    if "wds" in a.sides:
        out["wds"] = entry(wdsdir, read_seconds(wdsdir))
    if "ratarmount" in a.sides:
        out["ratarmount"] = entry(img, read_seconds(rat_index), [rat_index])
        out["ratarmount"]["note"] = "the SquashFS image plus ratarmount's SQLite index; convert_s = index build"
    out["wds_shards"] = sorted(os.path.join(wdsdir, n) for n in os.listdir(wdsdir)) if "wds" in a.sides else []
    return out


# ---------------------------------------------------------------------------------------------------------------
# Mounts, caches, process accounting.


class Mount:
    """`packfs mount IMAGE MNT --cache-size N`; daemon found by its command line naming MNT (it detaches)."""

    def __init__(self, a, image):
        self.a, self.image, self.dir, self.pid = a, image, os.path.join(a.work, "mnt"), None

    def up(self):
        os.makedirs(self.dir, exist_ok=True)
        subprocess.run([self.a.packfs, "mount", self.image, self.dir, "--cache-size", str(self.a.cache_size)],
                       check=True)
        self.pid = find_daemon(self.dir)

    def down(self):
        subprocess.run([self.a.packfs, "umount", self.dir], check=True)
        self.pid = None

    def fresh(self):
        if self.pid is not None:
            self.down()
        self.up()


def find_daemon(mnt):
    """The process serving mnt: its command line holds 'mount' and mnt (unique to this run's work directory)."""
    me = os.getpid()
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == me:
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if os.fsencode(mnt) in argv and b"mount" in argv:
            found.append(int(p))
    return min(found) if found else None


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(x) for x in f.read().split()]
                out += kids
                todo += kids
        except OSError:
            pass
    return out


def proc_cpu(pid):
    """utime + stime of pid, seconds (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except OSError:
        return 0.0


def proc_mem(pid):
    """(RSS, PSS) bytes of pid."""
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/statm") as f:
            rss = int(f.read().split()[1]) * PAGE
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    return rss, pss


class Watch:
    """Samples RSS and PSS summed over this process, its descendants (DataLoader workers) and the extra pids (the
    FUSE daemon) every `interval` seconds; keeps the peaks."""

    def __init__(self, extra, interval=0.1):
        self.extra, self.interval = extra, interval
        self.peak_rss = self.peak_pss = 0
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)

    def sample(self):
        pids = [os.getpid()] + descendants(os.getpid()) + [p for p in self.extra() if p]
        rss = pss = 0
        for p in set(pids):
            r, s = proc_mem(p)
            rss, pss = rss + r, pss + s
        self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)

    def run(self):
        while not self.stop.wait(self.interval):
            self.sample()

    def __enter__(self):
        self.sample()
        self.t.start()
        return self

    def __exit__(self, *e):
        self.stop.set()
        self.t.join()


def cpu_now(extra_pids):
    """CPU seconds so far of this process, its reaped children, its live descendants and extra_pids."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    live = sum(proc_cpu(p) for p in descendants(os.getpid()))
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime + live + sum(proc_cpu(p) for p in extra_pids if p)


def drop_caches(files):
    """Evict the page cache: drop_caches as root, else posix_fadvise(DONTNEED) on files. Returns the method."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return "drop_caches"
    except OSError:
        for p in files:
            try:
                fd = os.open(p, os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.close(fd)
            except OSError:
                pass
        return "fadvise"


def storage_files(path):
    if os.path.isfile(path):
        return [path]
    return [os.path.join(d, n) for d, _, ns in os.walk(path) for n in ns]


def warm_files(files):
    """Read every file once so its pages are in the page cache."""
    for p in files:
        with open(p, "rb") as f:
            while f.read(1 << 20):
                pass


# ---------------------------------------------------------------------------------------------------------------
# One cell: a side, a mode, a cache state, a worker count, an order.


def make_dataset(a, side, prep, paths, labels, transform, seed, mnt):
    if side == "raw":
        return FileDataset(prep["raw"]["path"], transform)
    if side == "fuse":
        return FileDataset(mnt.dir, transform)
    if side == "packfs":
        return packfs_dataset(prep["sqfs"]["path"], a.cache_size, transform)
    if side == "packfs-read":
        return PackfsReadDataset(prep["sqfs"]["path"], a.cache_size, transform)
    if side == "h5py":
        return H5Dataset(prep["h5py"]["path"], transform)
    if side == "arrow":
        return ArrowDataset(prep["arrow"]["path"], transform)
    if side == "ratarmount":
        return RatarmountDataset(prep["sqfs"]["path"], transform)
    if side == "wds":
        return wds_dataset(prep["wds_shards"], transform, seed)
    raise ValueError(side)


def side_files(side, prep):
    key = {"raw": "raw", "fuse": "sqfs", "packfs": "sqfs", "packfs-read": "sqfs", "ratarmount": "sqfs"}.get(side, side)
    files = storage_files(prep[key]["path"])
    if side == "ratarmount":
        files.append(prep["sqfs"]["path"] + ".index.sqlite")
    return files


def run_cell(a, side, mode, cache, workers, order, prep, paths, labels, mnt):
    import torch
    from torch.utils.data import DataLoader

    n_total = len(paths)
    n = a.decode_samples if mode == "decode" else a.samples
    if side == "ratarmount":
        n = min(n, a.slow_samples)
    n = min(n, n_total)
    transform = DecodeCrop() if mode == "decode" else as_bytes
    collate = collate_decode if mode == "decode" else collate_bytes
    files = side_files(side, prep)
    cold_method = None
    epochs = []
    extra = (lambda: [mnt.pid]) if side == "fuse" else (lambda: [])

    def loader_for(ds, sampler, persistent):
        kw = dict(batch_size=BATCH, num_workers=workers, collate_fn=collate)
        if workers:
            kw.update(persistent_workers=persistent, prefetch_factor=2)
        if sampler is not None:
            kw["sampler"] = sampler
        return DataLoader(ds, **kw)

    def one_epoch(loader, sampler, e):
        if sampler is not None:
            sampler.set_epoch(e)
        it_t = time.perf_counter()
        first = None
        got = 0
        it = iter(loader)
        for batch in it:
            if first is None:
                first = time.perf_counter() - it_t
            got += len(batch) if mode == "bytes" else len(batch[1])
            if got >= n:
                break
        secs = time.perf_counter() - it_t
        return it, {"epoch": e, "seconds": secs, "samples": got, "samples_per_s": got / secs,
                    "first_batch_s": first}

    def shutdown(it):
        if hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()

    seed = a.seed
    sampler = None if side == "wds" else EpochSampler(n_total, n, order, workers, seed)
    cpu0 = cpu_now(extra())
    daemon_cpu = 0.0
    with Watch(extra) as watch:
        if cache == "warm":
            if side == "fuse" and mnt.pid is None:
                mnt.up()
            warm_files(files)
            t = time.perf_counter()
            ds = make_dataset(a, side, prep, paths, labels, transform, seed, mnt)
            open_s = time.perf_counter() - t
            loader = loader_for(ds, sampler, True)
            for e in range(a.epochs + 1):
                it, rec = one_epoch(loader, sampler, e)
                rec["open_s"] = open_s if e == 0 else 0.0
                if e > 0:
                    epochs.append(rec)
            cpu1 = cpu_now(extra())
            shutdown(it)  # with persistent workers, the loader's own iterator
            del loader, ds, it
        else:
            for e in range(a.epochs + 1):
                if side == "fuse":
                    if mnt.pid is not None:
                        daemon_cpu += proc_cpu(mnt.pid)
                        mnt.down()
                cold_method = drop_caches(files)
                t = time.perf_counter()
                if side == "fuse":
                    mnt.up()
                ds = make_dataset(a, side, prep, paths, labels, transform, seed + e, mnt)
                open_s = time.perf_counter() - t
                loader = loader_for(ds, sampler, False)
                it, rec = one_epoch(loader, sampler, e)
                rec["open_s"] = open_s
                if e > 0:
                    epochs.append(rec)
                if e == a.epochs:
                    cpu1 = cpu_now(extra())
                shutdown(it)
                del loader, ds, it
        gc.collect()
    cpu = cpu1 - cpu0 + daemon_cpu
    rates = [r["samples_per_s"] for r in epochs]
    return {
        "side": side, "mode": mode, "cache": cache, "workers": workers, "order": order,
        "samples_per_epoch": n, "epochs": epochs,
        "samples_per_s": statistics.median(rates),
        "first_batch_s": statistics.median(r["first_batch_s"] for r in epochs),
        # constructing the dataset (the ImageFolder scan, index loads, and for fuse the mount) before iter():
        # every cold epoch pays it, a warm cell once (reported as that one time)
        "open_s": statistics.median(r["open_s"] for r in epochs) if cache == "cold" else open_s,
        "peak_rss_bytes": watch.peak_rss, "peak_pss_bytes": watch.peak_pss,
        "cpu_s": cpu, "cpu_ms_per_sample": 1000 * cpu / (n * (a.epochs + 1)),
        "cold_method": cold_method,
    }


# ---------------------------------------------------------------------------------------------------------------
# Verification: each side's sample i is raw's sample i.


def verify(a, prep, paths, labels, mnt):
    import torch  # noqa: F401  (the datasets import it lazily)

    rng = np.random.default_rng(a.seed)
    idx = rng.choice(len(paths), size=min(32, len(paths)), replace=False).tolist()
    raw = FileDataset(prep["raw"]["path"], as_bytes)
    if [p.decode() for p in raw.paths] != paths or raw.labels.tolist() != labels:
        sys.exit("verify: the scan of the raw tree differs from the sample list")
    want = [raw[i] for i in idx]
    for side in a.sides:
        if side == "wds":
            ds = make_dataset(a, side, prep, paths, labels, as_bytes, a.seed, mnt)
            missing = set(want)
            seen = 0
            for d, lab in ds:
                missing.discard((d, lab))
                seen += 1
            if missing or seen != len(paths):
                sys.exit(f"verify: wds gave {seen} samples of {len(paths)}, {len(missing)} of {len(want)} checked "
                         "samples missing")
            log(f"verify: wds: {seen} samples, the {len(want)} checked ones equal to the raw files")
            continue
        if side == "fuse" and mnt.pid is None:
            mnt.up()
        ds = make_dataset(a, side, prep, paths, labels, as_bytes, a.seed, mnt)
        own = (FileDataset, RatarmountDataset, PackfsReadDataset)
        if isinstance(ds, own) and [p.decode() for p in ds.paths] != paths:
            sys.exit(f"verify: {side} lists other files than the raw tree, or in another order")
        if callable(getattr(ds, "path", None)) and [ds.path(i) for i in range(len(ds))] != paths:  # packfs.torch
            sys.exit(f"verify: {side} lists other files than the raw tree, or in another order")
        if len(ds) != len(paths):
            sys.exit(f"verify: {side} has {len(ds)} samples, the raw tree {len(paths)}")
        got = ds.__getitems__(idx) if hasattr(ds, "__getitems__") else [ds[i] for i in idx]
        for i, g, w in zip(idx, got, want):
            if (bytes(g[0]), int(g[1])) != w:
                sys.exit(f"verify: {side} sample {i} ({paths[i]}) differs from the raw file")
        log(f"verify: {side}: {len(idx)} samples equal to the raw files")


# ---------------------------------------------------------------------------------------------------------------
# Emulated latency: the passthrough layer lives inside `packfs bench` (no standalone mount takes it), so the raw and
# FUSE sides under latency are measured by packfs bench's shuffled reader, not by a DataLoader.


def latency_bench(a, prep):
    out = os.path.join(a.work, "latency-bench.json")
    cmd = [a.packfs, "bench", "--raw", prep["raw"]["path"], "--image", prep["sqfs"]["path"],
           "--workload", "shuffle", "--threads", a.latency_threads,
           "--emulate-latency", a.latency, "--epochs", "1", "--cache-size", str(a.cache_size), "--json", out]
    log("latency:", " ".join(cmd))
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    with open(out) as f:
        rep = json.load(f)
    rows = []
    for r in rep["runs"]:
        side = "fuse" if r["side"] == "packfs" else r["side"]  # the bench's own packfs mount
        rows.append({"side": side, "threads": r["threads"], "epoch": r["epoch"], "cold": r["cold"],
                     "seconds": r["seconds"], "files_per_s": r["files_per_sec"]})
    return {"command": cmd, "emulate_latency": rep["config"]["emulate_latency"], "runs": rows}


# ---------------------------------------------------------------------------------------------------------------
# Report.


def ratios(cells, cache_budget):
    """The ratios of the data-loading goals, from the bytes-only cells."""
    def get(side, cache, w, order="shuffle"):
        for c in cells:
            if (c["side"], c["mode"], c["cache"], c["workers"], c["order"]) == (side, "bytes", cache, w, order):
                return c
        return None

    out = []
    for cache in ("cold", "warm"):
        for w in sorted({c["workers"] for c in cells}):
            p = get("packfs", cache, w)

            def ratio(name, other, goal, q=p):
                if q and other:
                    out.append({"ratio": name, "cache": cache, "workers": w, "goal": goal,
                                "value": q["samples_per_s"] / other["samples_per_s"]})

            ratio("packfs / fuse", get("fuse", cache, w), 1.3)
            best = max((c for c in (get("h5py", cache, w), get("arrow", cache, w)) if c),
                       key=lambda c: c["samples_per_s"], default=None)
            ratio(f"packfs / max(h5py, arrow) = {best['side'] if best else '-'}", best, 1.0)
            ratio("packfs (wds order) / wds", get("wds", cache, w, "wds"), 0.9, get("packfs", cache, w, "wds"))
            ratio("packfs / ratarmount", get("ratarmount", cache, w), 5.0)
            r = get("raw", cache, w)
            if p and r:
                out.append({"ratio": "packfs peak RSS - (raw peak RSS + cache budget), MB", "cache": cache,
                            "workers": w, "goal": "<= 0",
                            "value": (p["peak_rss_bytes"] - r["peak_rss_bytes"] - cache_budget) / 1e6})
    return out


def table(rep):
    lines = []
    h = f"{'side':<11} {'order':<7} {'mode':<6} {'cache':<5} {'w':>2} {'n/epoch':>7} {'samples/s':>10} " \
        f"{'1st batch s':>11} {'open s':>7} {'peak RSS MB':>11} {'peak PSS MB':>11} {'CPU s':>7}"
    lines.append(h)
    lines.append("-" * len(h))
    for c in rep["cells"]:
        lines.append(f"{c['side']:<11} {c['order']:<7} {c['mode']:<6} {c['cache']:<5} {c['workers']:>2} "
                     f"{c['samples_per_epoch']:>7} {c['samples_per_s']:>10.0f} {c['first_batch_s']:>11.3f} "
                     f"{c['open_s']:>7.3f} "
                     f"{c['peak_rss_bytes'] / 1e6:>11.0f} {c['peak_pss_bytes'] / 1e6:>11.0f} {c['cpu_s']:>7.1f}")
    lines.append("")
    lines.append(f"{'format':<11} {'convert s':>9} {'MB on disk':>10} {'inodes':>7}")
    for k, v in rep["formats"].items():
        cs = "-" if v["convert_s"] is None else f"{v['convert_s']:.1f}"
        lines.append(f"{k:<11} {cs:>9} {v['bytes_on_disk'] / 1e6:>10.0f} {v['inodes']:>7}")
    lines.append("")
    lines.append("ratios (bytes-only mode; data-loading goals):")
    for r in rep["ratios"]:
        lines.append(f"  {r['ratio']:<52} {r['cache']:<5} w={r['workers']}  {r['value']:8.2f}  (goal {r['goal']})")
    if rep.get("latency"):
        lines.append("")
        lines.append(f"emulated latency {rep['latency']['emulate_latency']} (packfs bench shuffle reader, "
                     "not a DataLoader):")
        for r in rep["latency"]["runs"]:
            lines.append(f"  {r['side']:<8} threads={r['threads']} epoch={r['epoch']} cold={r['cold']!s:<5} "
                         f"{r['files_per_s']:>9.0f} files/s")
    lines.append("")
    lines += ["notes:"] + [f"  - {n}" for n in rep["notes"]]
    return "\n".join(lines)


def main():
    import warnings

    # 4 workers on 2 CPUs is part of the matrix on purpose
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", default="/tmp/corpus/imagenet-mini", help="JPEG set: CORPUS/train/<class>/*.JPEG")
    p.add_argument("--work", default="/tmp/loaders-work", help="where the formats, mountpoint and JSON go")
    p.add_argument("--files", type=int, default=0, help="use a subset of this many files (hard links); 0 = all")
    p.add_argument("--packfs", default=os.environ.get("PACKFS", "packfs"), help="the packfs CLI")
    p.add_argument("--sides", default=",".join(SIDES))
    p.add_argument("--workers", default="0,2,4")
    p.add_argument("--modes", default="bytes,decode")
    p.add_argument("--caches", default="cold,warm")
    p.add_argument("--orders", default="shuffle,wds",
                   help="wds order runs for packfs and wds only; shuffle for every side but wds")
    p.add_argument("--samples", type=int, default=10000, help="samples per epoch, bytes mode")
    p.add_argument("--decode-samples", type=int, default=1000, help="samples per epoch, decode mode")
    p.add_argument("--slow-samples", type=int, default=2000, help="cap on samples per epoch for ratarmount")
    p.add_argument("--epochs", type=int, default=3, help="measured epochs per cell (after one warm-up epoch)")
    p.add_argument("--cache-size", type=int, default=256 << 20,
                   help="block cache budget of the packfs mount and of packfs.Image, bytes")
    p.add_argument("--latency", default="500,100",
                   help="META_US,READ_US for the packfs bench raw-vs-FUSE run; '' to skip it")
    p.add_argument("--latency-threads", default="1,4", help="reader threads of that run")
    p.add_argument("--seed", type=int, default=21)
    p.add_argument("--json", default=None, help="result file (default WORK/results.json)")
    p.add_argument("--markdown", default=None, help="the table as a Markdown section (default WORK/results.md)")
    p.add_argument("--no-verify", action="store_true")
    a = p.parse_args()
    a.sides = [s for s in a.sides.split(",") if s]
    for s in a.sides:
        if s not in SIDES + OPTIONAL_SIDES:
            p.error(f"unknown side {s!r}; sides: {','.join(SIDES + OPTIONAL_SIDES)}")
    a.workers = [int(x) for x in a.workers.split(",")]
    a.modes = a.modes.split(",")
    a.caches = a.caches.split(",")
    a.orders = a.orders.split(",")
    a.json = a.json or os.path.join(a.work, "results.json")
    a.markdown = a.markdown or os.path.join(a.work, "results.md")
    argv = shlex.join(sys.argv[1:])
    a.work = os.path.abspath(a.work)
    os.makedirs(a.work, exist_ok=True)

    t0 = time.time()
    raw = subset_tree(a.corpus, a.work, a.files)
    classes, paths, labels = list_samples(raw)
    log(f"{len(paths)} files in {len(classes)} classes under {raw}")
    prep = prepare(a, raw, paths, labels)
    mnt = Mount(a, prep["sqfs"]["path"] if "sqfs" in prep else None)
    cells = []
    latency = None
    try:
        if not a.no_verify:
            verify(a, prep, paths, labels, mnt)
        for mode in a.modes:
            for cache in a.caches:
                for w in a.workers:
                    for order in a.orders:
                        for side in a.sides:
                            if order == "wds" and side not in ("packfs", "wds"):
                                continue
                            if order == "shuffle" and side == "wds":
                                continue
                            log(f"cell: {side} {order} {mode} {cache} workers={w}")
                            c = run_cell(a, side, mode, cache, w, order, prep, paths, labels, mnt)
                            log(f"  {c['samples_per_s']:.0f} samples/s, first batch {c['first_batch_s']:.3f} s")
                            cells.append(c)
            if mnt.pid is not None:
                mnt.down()
        if a.latency:
            latency = latency_bench(a, prep)
    finally:
        if mnt.pid is not None:
            mnt.down()

    install = None
    venv_install = os.path.join(sys.prefix, "install.json")
    if os.path.exists(venv_install):
        with open(venv_install) as f:
            install = json.load(f)
    notes = [
        "samples/s = median of the measured epochs after one warm-up epoch; each epoch reads samples_per_epoch "
        f"samples, batch {BATCH}; shuffle order = a random subset of all {len(paths)} samples, new each epoch",
        f"decode mode reads {a.decode_samples} samples per epoch, bytes mode {a.samples}; ratarmount at most "
        f"{a.slow_samples} (its pure-Python reader is slow); samples/s is comparable, totals are not",
        "ratarmount: readers skip the metadata rewrite ratarmountcore does at every open of an existing index (it "
        "fails with 'database is locked' while another worker reads the index); nothing else is changed",
        "wds: WebDataset's own sampling (16 shards in path order, shard order shuffled, shards split among workers, "
        f"shuffle buffer {WDS_BUFFER}): not a uniform shuffle; 'packfs wds' reads the image in that same pattern",
        "cold = sync + drop_caches (or fadvise, see cold_method) before every epoch, fresh mount (fuse), fresh "
        "dataset and workers (every side reopens its file/index in each worker); warm = every storage file read "
        "once before the cell, workers persistent, mount kept",
        "peak RSS/PSS: summed over the main process, its DataLoader workers and, for fuse, the mount daemon; RSS "
        "counts shared pages (torch libraries, the mmap'd Arrow file) in every process, PSS divides them",
        f"cache budget: packfs mount --cache-size and packfs.Image(cache_size=) both {a.cache_size} bytes in total "
        "(packfs.Image divides its budget among DataLoader workers); the mount also has the kernel's page cache",
        "CPU s: user+system of the main process, workers and (fuse) daemon over the whole cell, warm-up included",
        "open s: constructing the dataset before iter() (raw/fuse/ratarmount/packfs scan the class directories as "
        "ImageFolder does; h5py/arrow read their row count; fuse includes the mount); not in samples/s or 1st batch",
    ]
    rep = {
        "schema": "packfs-loaders-1",
        "created_unix": int(time.time()),
        "host": {"kernel": platform.release(), "cpus": os.cpu_count(), "python": platform.python_version(),
                 "root": os.geteuid() == 0},
        "install": install,
        "config": {k: v for k, v in vars(a).items()},
        "files": len(paths), "classes": len(classes),
        "formats": {k: v for k, v in prep.items() if k != "wds_shards"},
        "cells": cells,
        "ratios": ratios(cells, a.cache_size),
        "latency": latency,
        "notes": notes,
        "wall_s": time.time() - t0,
    }
    with open(a.json, "w") as f:
        json.dump(rep, f, indent=1)
    text = table(rep)
    print(text)
    inst = ""
    if install:
        inst = (f"venv from PyPI: {install['seconds']:.0f} s to install, {install['venv_bytes'] / 1e9:.2f} GB "
                f"(torch {install['torch']} with its CUDA libraries: "
                f"{install['torch_nvidia_triton_bytes'] / 1e9:.2f} GB)"
                "\n\n")
    with open(a.markdown, "w") as f:
        f.write(f"### DataLoader: {len(paths)} JPEGs, {platform.release()}, {os.cpu_count()} CPUs\n\n"
                f"`benches/loaders/run.sh {argv}` ({rep['wall_s'] / 60:.0f} min)\n\n{inst}```\n{text}\n```\n")
    log(f"wrote {a.json} and {a.markdown} ({rep['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
