#!/usr/bin/env python3
"""Shuffled DataLoader reads of one image, by sampler and storage.

Sides (one DataLoader each, bytes only, the same dataset and batch size):
  random       torch's RandomSampler (a uniform shuffle; what `shuffle=True` gives)
  shuffle      packfs.torch.ShuffleSampler(locality=False): a uniform shuffle of its own
  locality     packfs.torch.ShuffleSampler(locality=True), reading ahead (its default), told the
               DataLoader's workers and batch size (a stream of regions per worker)
  locality-one the same in one stream for all the workers (not told the workers)
  locality-nora  the same order with read_ahead=False
  sequential   the dataset's order (the anchor a storage system is happiest with)
  wds          WebDataset over HTTP: shards shuffled, then a 1,000-sample buffer (the shards
               written in the dataset's order, as a conversion of the class folders makes them)
  wds-mixed    the same over shards written in a shuffled order (WebDataset's advice)

Storages (--storage, comma-separated):
  http   the image served by scripts/range_server.py with --latency-ms per request
  s3     the image in moto's S3 server (its own cost per request; see its note in the docs)
  local  the image file on local disk, cold: posix_fadvise(DONTNEED) on it before each side

For each storage, worker count and side: a fresh `packfs.Image` (no cache carried over) and fresh
counters, then the first --samples samples (0: the whole epoch). Reported: samples/s, MB fetched and requests (summed over
the DataLoader's processes from each one's `Image.stats()`; for the WebDataset sides, the server's
counters), and label mixing (distinct classes per batch over a uniform shuffle's on as many batches).

  python3 benches/loaders/shuffle.py IMAGE [ROOT] [--storage http,s3,local] [--latency-ms 5]
      [--samples 5000] [--workers 0,2,4] [--range-size BYTES] [--range-cache BYTES] [--sides ...]
      [--disk-cache DIR]

IMAGE is a SquashFS image of an ImageFolder tree under ROOT (class directories). The WebDataset
sides write their shards once, from the image, into IMAGE_STEM-wds/ beside it. Needs torch and
packfs (scripts/python_env.sh's venv has both), webdataset for the wds sides and moto for s3.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import shutil
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, RandomSampler, get_worker_info

import packfs
import packfs.torch

REPO = Path(__file__).resolve().parents[2]
WDS_SHARD = 500
WDS_BUFFER = 1000


def counted_collate(batch):
    """Sizes and targets of a batch, with this process's image counters (the
    DataLoader runs collate in the worker that read the batch)."""
    info = get_worker_info()
    image = (info.dataset if info else COUNTED[0]).image
    st = image.stats()
    return [len(d) for d, _ in batch], [t for _, t in batch], (os.getpid(), st)


COUNTED: list = [None]  # the dataset read without workers


def serve(root: Path, latency_ms: float) -> tuple[subprocess.Popen, str]:
    p = subprocess.Popen(
        [sys.executable, str(REPO / "scripts/range_server.py"), "--root", str(root), "--port", "0",
         "--latency-ms", str(latency_ms)],
        stdout=subprocess.PIPE, text=True,
    )
    port = p.stdout.readline().split()[1]
    return p, f"http://127.0.0.1:{port}"


def control(base: str, what: str) -> dict:
    with urllib.request.urlopen(f"{base}/_control/{what}") as r:
        body = r.read()
    return json.loads(body) if body.strip().startswith(b"{") else {}


class Moto:
    """moto's S3 server holding IMAGE as s3://images/IMAGE_NAME (and, for a
    sharded image's manifest, its shards beside it)."""

    def __init__(self, image: Path):
        import socket

        import boto3

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = Path(sys.executable).parent / "moto_server"
        self.proc = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                           "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"})
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                if time.time() > deadline:
                    raise SystemExit("moto_server did not start")
                time.sleep(0.2)
        s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
        s3.create_bucket(Bucket="images")
        s3.upload_file(str(image), "images", image.name)
        if image.suffix == ".json":  # a sharded image's manifest: its shards beside it
            for shard in json.loads(image.read_text())["shards"]:
                s3.upload_file(str(image.parent / shard["file"]), "images", shard["file"])
        self.url = f"s3://images/{image.name}"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()


def sampler_for(side: str, ds, seed: int, group_bytes: int, workers: int, batch: int):
    if side == "random":
        return RandomSampler(ds, generator=torch.Generator().manual_seed(seed))
    if side == "shuffle":
        return packfs.torch.ShuffleSampler(ds, seed=seed, locality=False, group_bytes=group_bytes)
    if side == "locality":
        return packfs.torch.ShuffleSampler(ds, seed=seed, group_bytes=group_bytes, num_workers=workers,
                                           batch_size=batch)
    if side == "locality-one":
        return packfs.torch.ShuffleSampler(ds, seed=seed, group_bytes=group_bytes)
    if side == "locality-nora":
        return packfs.torch.ShuffleSampler(ds, seed=seed, group_bytes=group_bytes, read_ahead=False)
    if side == "sequential":
        return None
    raise SystemExit(f"unknown side {side}")


def mixing(targets: np.ndarray, batch: int) -> float:
    b = targets[: len(targets) // batch * batch].reshape(-1, batch)
    return float(np.mean([len(np.unique(r)) for r in b]))


def make_shards(image: Path, root: str, out: Path, shuffled: bool, seed: int) -> list[str]:
    """WebDataset shards of WDS_SHARD samples from the image's ImageFolder, in
    the dataset's order or shuffled; names of the shards (made once)."""
    out.mkdir(parents=True, exist_ok=True)
    ds = packfs.torch.ImageFolder(packfs.Image(image), root)
    order = np.arange(len(ds))
    if shuffled:
        order = np.random.default_rng(seed).permutation(len(ds))
    names = [f"shard-{k:04d}.tar" for k in range(-(-len(ds) // WDS_SHARD))]
    if all((out / n).exists() for n in names):
        return names
    for k, name in enumerate(names):
        with tarfile.open(out / f"{name}.tmp", "w") as t:
            for i in order[k * WDS_SHARD : (k + 1) * WDS_SHARD].tolist():
                data, target = ds[i]
                for ext, payload in (("jpg", data), ("cls", str(target).encode())):
                    ti = tarfile.TarInfo(f"{i:08d}.{ext}")
                    ti.size = len(payload)
                    t.addfile(ti, io.BytesIO(payload))
        os.rename(out / f"{name}.tmp", out / name)
    return names


def wds_loader(urls: list[str], workers: int, batch: int, seed: int) -> DataLoader:
    import webdataset as wds

    pipe = (
        wds.WebDataset(urls, shardshuffle=len(urls), seed=seed, nodesplitter=wds.split_by_node,
                       workersplitter=wds.split_by_worker, empty_check=False)
        .shuffle(WDS_BUFFER, seed=seed)
        .to_tuple("jpg", "cls")
        .map_tuple(len, lambda c: int(c))
    )
    return DataLoader(pipe, batch_size=batch, num_workers=workers,
                      collate_fn=lambda b: ([s for s, _ in b], [t for _, t in b], None),
                      multiprocessing_context="fork" if workers else None)


def one_side(args, storage: str, location: str, side: str, workers: int, base: str | None) -> dict:
    if base:
        control(base, "reset")
    if side.startswith("wds"):
        sub = f"{args.image.stem}-wds/{side}"
        dl = wds_loader([f"{base}/{sub}/{n}" for n in args.shards[side]], workers, args.batch, args.seed)
        listing = {}
    else:
        if storage == "local":
            fd = os.open(location, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
        if storage == "local":
            image = packfs.Image(location)
        else:
            disk = None
            if args.disk_cache:
                # A fresh cache per side: nothing carried over from the one before.
                disk = args.disk_cache / f"{storage}-{side}-{workers}"
                shutil.rmtree(disk, ignore_errors=True)
                disk.mkdir(parents=True)
            # The loader's range cache is divided among its workers.
            ranges = None if args.range_cache is None else args.range_cache * max(1, workers)
            image = packfs.Image(location, range_size=args.range_size, disk_cache=disk, range_cache=ranges)
        ds = packfs.torch.ImageFolder(image, args.root)
        COUNTED[0] = ds
        listing = image.stats()
        if base:
            control(base, "reset")
        dl = DataLoader(ds, batch_size=args.batch, sampler=sampler_for(side, ds, args.seed, args.range_size, workers, args.batch),
                        num_workers=workers, collate_fn=counted_collate,
                        multiprocessing_context="fork" if workers else None)
    t0 = time.perf_counter()
    n, targets, last = 0, [], {}
    for sizes, ts, counters in dl:
        n += len(sizes)
        targets += ts
        if counters:
            last[counters[0]] = counters[1]
        if args.samples and n >= args.samples:
            break
    dt = time.perf_counter() - t0
    del dl
    if side.startswith("wds") or storage == "http":
        st = control(base, "stats")
        mb, requests = st["bytes"] / 1e6, st["get"]
    else:
        # Every process's counters; the main process's include the index.
        mb = sum(s.get("storage_bytes", 0) for s in last.values()) / 1e6
        requests = sum(s.get("get_requests", s.get("requests", 0)) for s in last.values())
        if os.getpid() in last:
            mb -= listing.get("storage_bytes", 0) / 1e6
            requests -= listing.get("get_requests", listing.get("requests", 0))
    uniform = np.random.default_rng(args.seed).permutation(args.targets)[: len(targets)]
    return {
        "storage": storage, "side": side, "workers": workers, "samples": n, "seconds": round(dt, 3),
        "samples_per_s": round(n / dt, 1), "mb_fetched": round(mb, 1), "requests": requests,
        "mixing": round(mixing(np.asarray(targets), args.batch) / mixing(uniform, args.batch), 3),
    }


def run(args) -> list[dict]:
    args.targets = packfs.torch.ImageFolder(packfs.Image(args.image), args.root).targets
    wanted = {"wds": False, "wds-mixed": True}
    wds_dir = args.image.parent / f"{args.image.stem}-wds"
    args.shards = {s: make_shards(args.image, args.root, wds_dir / s, mixed, args.seed)
                   for s, mixed in wanted.items() if s in args.sides}
    server, base = serve(args.image.parent, args.latency_ms)
    moto = Moto(args.image) if "s3" in args.storage else None
    rows = []
    try:
        for storage in args.storage:
            location = {"http": f"{base}/{args.image.name}", "s3": moto.url if moto else None,
                        "local": str(args.image)}[storage]
            for workers in args.workers:
                for side in args.sides:
                    if side.startswith("wds") and storage != "http":
                        continue
                    rows.append(one_side(args, storage, location, side, workers,
                                         base if storage == "http" or side.startswith("wds") else None))
                    print(json.dumps(rows[-1]), flush=True)
    finally:
        server.terminate()
        server.wait()
        if moto:
            moto.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("image", type=Path)
    ap.add_argument("root", nargs="?", default="")
    ap.add_argument("--storage", type=lambda s: s.split(","), default=["http"])
    ap.add_argument("--latency-ms", type=float, default=5.0)
    ap.add_argument("--samples", type=int, default=5000, help="samples read per side (0: a whole epoch)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--range-size", type=int, default=4 << 20,
                    help="bytes per range request, and the sampler's group_bytes (default 4 MiB)")
    ap.add_argument("--range-cache", type=int, default=None,
                    help="fetched-range cache of each DataLoader process, in bytes (default: packfs's, the "
                         "loader's share of memory); smaller than the image, it stands for a dataset much "
                         "larger than any node's memory")
    ap.add_argument("--disk-cache", type=Path, default=None,
                    help="give every remote side a fresh node-local disk cache under this directory "
                         "(DataLoader workers share what they fetch through it)")
    ap.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",")], default=[0, 2])
    ap.add_argument("--sides", type=lambda s: s.split(","),
                    default=["random", "shuffle", "locality", "locality-nora", "sequential", "wds", "wds-mixed"])
    args = ap.parse_args()
    args.image = args.image.resolve()
    rows = run(args)
    print("| storage | side | workers | samples/s | MB fetched | requests | label mixing |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['storage']} | {r['side']} | {r['workers']} | {r['samples_per_s']:,} | {r['mb_fetched']} "
              f"| {r['requests']} | {r['mixing']} |")


if __name__ == "__main__":
    main()
