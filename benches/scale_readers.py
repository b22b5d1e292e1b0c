"""Readers at scale (docs/benchmarks/scale.md): `listdir IMG DIR` times Image.scandir and
Image.listdir of one directory; `folder IMG [ROOT]` builds packfs.torch.ImageFolder over the
image; each prints its time and memory."""
import resource, sys, time, os

def rss_mib():
    with open("/proc/self/status") as f:
        for l in f:
            if l.startswith("VmRSS"):
                return int(l.split()[1]) / 1024
def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

import numpy, packfs
what, img, arg = sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else ""
base = rss_mib()
t = time.perf_counter()
im = packfs.Image(img)
if what == "listdir":
    it = im.scandir(arg)
    first = next(it)
    t1 = time.perf_counter() - t
    n = 1 + sum(1 for _ in it)
    t2 = time.perf_counter() - t
    t = time.perf_counter()
    names = im.listdir(arg)
    t3 = time.perf_counter() - t
    print(f"scandir first {t1:.4f} s, all {n} in {t2:.2f} s; listdir {len(names)} in {t3:.2f} s; "
          f"RSS {base:.0f} -> peak {peak_mib():.0f} MiB")
else:
    import packfs.torch
    ds = packfs.torch.ImageFolder(im, root=arg or "")
    t1 = time.perf_counter() - t
    after = rss_mib()
    n = len(ds)
    print(f"ImageFolder {n} samples, {len(ds.classes)} classes in {t1:.1f} s; RSS {base:.0f} -> {after:.0f} MiB "
          f"({(after - base) * 1048576 / n:.0f} B a sample held), peak {peak_mib():.0f} MiB "
          f"({(peak_mib() - base) * 1048576 / n:.0f} B a sample at the peak)")
