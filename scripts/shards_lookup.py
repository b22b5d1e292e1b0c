# Lookup latency: stat N random files (first time since the mount: each
# stat costs a FUSE LOOKUP of the file; parents are looked up once).
import os, random, sys, time
mnt, n = sys.argv[1], int(sys.argv[2])
paths = []
for d in sorted(os.listdir(os.path.join(mnt, "train"))):
    paths += [os.path.join("train", d, f"img_{i:04d}.bin") for i in range(500)]
random.seed(1)
pick = random.sample(paths, n)
t = time.perf_counter()
for p in pick:
    os.stat(os.path.join(mnt, p))
dt = time.perf_counter() - t
print(f"{n} stats in {dt:.3f} s: {dt / n * 1e6:.1f} us each")
