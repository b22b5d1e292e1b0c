# A tar stream of one file, "blocks", of N unique, compressible 4 KiB blocks:
# `python3 gen_blocks.py 1048576 | packfs pack - -o big.sqfs -b 4K` gives an image
# with as many stored pieces (and hash entries) as 140 GB of 128 KiB blocks.
import struct, sys, tarfile
n = int(sys.argv[1])
class Blocks:
    def __init__(self): self.i = 0; self.buf = b""
    def read(self, size=-1):
        out = []
        got = 0
        while got < size and self.i < n:
            b = struct.pack("<Q", self.i) * 512
            self.i += 1
            out.append(b); got += len(b)
        return b"".join(out)
ti = tarfile.TarInfo("blocks"); ti.size = n * 4096; ti.mtime = 1700000000
with tarfile.open(fileobj=sys.stdout.buffer, mode="w|") as t:
    t.addfile(ti, Blocks())
