#!/usr/bin/env python3
"""Shuffled DataLoader reads of one image from an HTTP server with per-request latency, by sampler.

Sides (one DataLoader each, bytes only, the same dataset and batch size):
  random       torch's RandomSampler (a uniform shuffle; what `shuffle=True` gives)
  shuffle      packfs.torch.ShuffleSampler(locality=False): a uniform shuffle of its own
  locality     packfs.torch.ShuffleSampler(locality=True): the image-layout order
  sequential   the dataset's order (the anchor a storage system is happiest with)

For each side and worker count: a fresh server count and a fresh `packfs.Image` (no cache carried over),
then the first --samples samples. Reported: samples/s, MB fetched from the server, GET requests, and
label mixing (distinct classes per batch, over a uniform shuffle's on the same batches count).

  python3 benches/loaders/shuffle.py IMAGE ROOT [--latency-ms 5] [--samples 5000] [--workers 0,2,4]
                                   [--range-size BYTES]

IMAGE is a SquashFS image of an ImageFolder tree under ROOT (class directories); the script serves it
with scripts/range_server.py. Needs torch and packfs (scripts/python_env.sh's venv has both).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, RandomSampler

import packfs
import packfs.torch

REPO = Path(__file__).resolve().parents[2]


def collate(batch):
    return [len(data) for data, _ in batch], [t for _, t in batch]


def serve(image: Path, latency_ms: float) -> tuple[subprocess.Popen, str]:
    p = subprocess.Popen(
        [sys.executable, str(REPO / "scripts/range_server.py"), "--root", str(image.parent), "--port", "0",
         "--latency-ms", str(latency_ms)],
        stdout=subprocess.PIPE, text=True,
    )
    port = p.stdout.readline().split()[1]
    return p, f"http://127.0.0.1:{port}"


def control(base: str, what: str) -> dict:
    with urllib.request.urlopen(f"{base}/_control/{what}") as r:
        body = r.read()
    return json.loads(body) if body.strip().startswith(b"{") else {}


def sampler_for(side: str, ds, seed: int, group_bytes: int):
    if side == "random":
        return RandomSampler(ds, generator=torch.Generator().manual_seed(seed))
    if side == "shuffle":
        return packfs.torch.ShuffleSampler(ds, seed=seed, locality=False, group_bytes=group_bytes)
    if side == "locality":
        return packfs.torch.ShuffleSampler(ds, seed=seed, group_bytes=group_bytes)
    if side == "sequential":
        return None
    raise SystemExit(f"unknown side {side}")


def mixing(targets: np.ndarray, batch: int) -> float:
    b = targets[: len(targets) // batch * batch].reshape(-1, batch)
    return float(np.mean([len(np.unique(r)) for r in b]))


def run(args) -> list[dict]:
    server, base = serve(args.image, args.latency_ms)
    url = f"{base}/{args.image.name}"
    rows = []
    try:
        for workers in args.workers:
            for side in args.sides:
                control(base, "reset")
                ds = packfs.torch.ImageFolder(packfs.Image(url, range_size=args.range_size), args.root)
                listing = control(base, "stats")
                control(base, "reset")
                dl = DataLoader(ds, batch_size=args.batch, sampler=sampler_for(side, ds, args.seed, args.range_size),
                                num_workers=workers, collate_fn=collate,
                                multiprocessing_context="fork" if workers else None)
                t0 = time.perf_counter()
                n, targets = 0, []
                for sizes, ts in dl:
                    n += len(sizes)
                    targets += ts
                    if n >= args.samples:
                        break
                dt = time.perf_counter() - t0
                del dl
                st = control(base, "stats")
                uniform = np.random.default_rng(args.seed).permutation(ds.targets)[: len(targets)]
                rows.append({
                    "side": side, "workers": workers, "samples": n, "seconds": round(dt, 3),
                    "samples_per_s": round(n / dt, 1), "mb_fetched": round(st["bytes"] / 1e6, 1),
                    "gets": st["get"], "index_mb": round(listing.get("bytes", 0) / 1e6, 1),
                    "mixing": round(mixing(np.asarray(targets), args.batch) / mixing(uniform, args.batch), 3),
                })
                print(json.dumps(rows[-1]), flush=True)
    finally:
        server.terminate()
        server.wait()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("image", type=Path)
    ap.add_argument("root", nargs="?", default="")
    ap.add_argument("--latency-ms", type=float, default=5.0)
    ap.add_argument("--samples", type=int, default=5000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--range-size", type=int, default=4 << 20,
                    help="bytes per range request, and the sampler's group_bytes (default 4 MiB)")
    ap.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",")], default=[0, 2])
    ap.add_argument("--sides", type=lambda s: s.split(","), default=["random", "shuffle", "locality", "sequential"])
    args = ap.parse_args()
    args.image = args.image.resolve()
    rows = run(args)
    print("| side | workers | samples/s | MB fetched | GETs | label mixing |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['side']} | {r['workers']} | {r['samples_per_s']:,} | {r['mb_fetched']} | {r['gets']} | {r['mixing']} |")


if __name__ == "__main__":
    main()
