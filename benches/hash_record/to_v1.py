# Rewrites a packfs image's version 2 hash record in place as a version 1
# record (what earlier builds wrote), for comparing the two readers:
# `cp big.sqfs big-v1.sqfs && python3 to_v1.py big-v1.sqfs` (needs `pip install xxhash`).
import struct, sys, xxhash
p = sys.argv[1]
with open(p, "r+b") as f:
    f.seek(0, 2); L = f.tell()
    f.seek(L - 48); t = f.read(48)
    magic, ver, algo, esz, plog, start, rlen, h, th = struct.unpack("<8sHHHHQQQQ", t)
    assert magic == b"PKFSHASH" and ver == 2, (magic, ver)
    f.seek(start); rec = f.read(rlen)
    f.truncate(start)
    f.seek(start); f.write(rec)
    end = start + rlen + 48
    L2 = (end + 4095) // 4096 * 4096
    f.write(b"\0" * (L2 - end))
    head = struct.pack("<8sHHIQQQ", b"PKFSHASH", 1, 1, 20, start, rlen, xxhash.xxh3_64_intdigest(rec))
    f.write(head + struct.pack("<Q", xxhash.xxh3_64_intdigest(head)))
print(p, "entries", rlen // 20)
