# Lookup latency: stat N random files (first time since the mount: each
# stat costs a FUSE LOOKUP of the file; parents are looked up once).
#
#   python3 scripts/shards_lookup.py MNT N [RAW]
#
# Without RAW the names are those of scripts/shards_gen_tree.py
# (train/nXXXXX/img_XXXX.bin); with RAW they are the regular files of that
# tree (listed before the mount is touched, so listing costs no lookup).
import os, random, sys, time

mnt, n = sys.argv[1], int(sys.argv[2])
paths = []
if len(sys.argv) > 3:
    raw = sys.argv[3]
    for d, dirs, files in os.walk(raw):
        dirs.sort()
        paths += [os.path.relpath(os.path.join(d, f), raw) for f in sorted(files)]
else:
    for d in sorted(os.listdir(os.path.join(mnt, "train"))):
        paths += [os.path.join("train", d, f"img_{i:04d}.bin") for i in range(500)]
random.seed(1)
pick = random.sample(paths, n)
t = time.perf_counter()
for p in pick:
    os.stat(os.path.join(mnt, p))
dt = time.perf_counter() - t
print(f"{n} stats in {dt:.3f} s: {dt / n * 1e6:.1f} us each")
