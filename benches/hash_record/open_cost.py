"""Open, cold-first-read and verify cost of an image with a version 2 hash
record against the same image with its record rewritten as version 1 (read
whole at open), alternating the two so that drift hits both alike.

    python3 open_cost.py PACKFS IMG_V2 IMG_V1 open|cold|verify RUNS
"""
import os
import statistics as st
import subprocess
import sys
import time

packfs, v2, v1, mode, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])


def evict(p):
    fd = os.open(p, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def once(img):
    if mode == "open":
        cmd, shell = [packfs, "ls", img, "/"], False
    elif mode == "cold":
        evict(img)
        cmd, shell = f"{packfs} cat {img} blocks | head -c 4096", True
    elif mode == "verify":
        cmd, shell = [packfs, "verify", "-q", img], False
    else:
        sys.exit(f"unknown mode {mode}")
    t = time.perf_counter()
    subprocess.run(cmd, shell=shell, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t


res = {v2: [], v1: []}
for k in range(n):
    for img in (v2, v1) if k % 2 == 0 else (v1, v2):
        res[img].append(once(img))
for img, v in res.items():
    print(f"{mode} {img}: median {st.median(v) * 1000:.1f} ms, min {min(v) * 1000:.1f} ms, n={len(v)}")
print(f"{mode}: version 1 / version 2, medians: {st.median(res[v1]) / st.median(res[v2]):.2f}")
