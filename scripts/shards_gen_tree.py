import os, random, sys
root = sys.argv[1]
random.seed(14)
for d in range(100):
    dd = os.path.join(root, "train", f"n{d:05d}")
    os.makedirs(dd, exist_ok=True)
    for f in range(500):
        n = random.randint(500, 6000)
        with open(os.path.join(dd, f"img_{f:04d}.bin"), "wb") as fh:
            fh.write(random.randbytes(n // 2) + bytes(n - n // 2))
