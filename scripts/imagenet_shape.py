#!/usr/bin/env python3
"""Write a tar shaped like ImageNet's ILSVRC2012_img_train.tar, without making any file.

    scripts/imagenet_shape.py [-o OUT] [--files N] [--classes C] [--size-bytes B] [--seed S]

The outer tar holds C member tars named like WordNet synsets (``n01440764.tar``), in name
order; each holds only its class's files (``n01440764_10026.JPEG``), no directory entries,
as the real one does. By default 1,000 classes and 1,281,167 files, as ILSVRC2012's training
set; the class sizes are a deterministic pseudo-random draw between 732 and 1,300 files (the
real range; most classes at the maximum, as in the real set) that sums exactly to N, scaled
to N/C when --files or --classes change. File sizes are drawn uniformly in [B/2, 3B/2]
(mean B, default 2,048 bytes; the real mean is about 110 KB); each file is a 16-byte header
(a JPEG SOI/APP0 marker, the class and file numbers) and then the next bytes of a fixed
pseudo-random buffer, walked in order, so every file differs, none compresses, and no two
files in one 128 KiB neighbourhood share bytes. The same arguments give the same bytes.

Headers are written directly (ustar, checksums computed, each tar padded to 10,240-byte
records as GNU tar pads them): about ten times the speed of Python's tarfile. One class tar
(about 3 MB at the defaults) is held in memory at a time; the rest streams to OUT or stdout.
"""

import argparse
import random
import struct
import sys

IMAGENET_FILES = 1_281_167
IMAGENET_CLASSES = 1_000
IMAGENET_MIN, IMAGENET_MAX = 732, 1_300
RECORD = 10_240
MTIME = 1_335_830_400  # 2012-05-01, about when ILSVRC2012 was released
HEAD = 16  # bytes of per-file header before the buffer's bytes


def octal(value, width):
    """A ustar numeric field: octal digits, zero-padded, NUL-terminated."""
    s = b"%0*o" % (width - 1, value)
    if len(s) != width - 1:
        raise ValueError(f"{value} does not fit a {width}-byte ustar field")
    return s + b"\0"


# The header's fixed parts; name (100 bytes), size (12) and checksum (8) vary.
_MODE_UID_GID = octal(0o644, 8) + octal(0, 8) + octal(0, 8)
_MTIME = octal(MTIME, 12)
_TAIL = (
    b"0"  # typeflag: regular file
    + b"\0" * 100  # linkname
    + b"ustar\x0000"  # magic, version
    + b"root".ljust(32, b"\0")  # uname
    + b"root".ljust(32, b"\0")  # gname
    + octal(0, 8)  # devmajor
    + octal(0, 8)  # devminor
    + b"\0" * 155  # prefix
    + b"\0" * 12  # pad to 512
)
_CONST_SUM = sum(_MODE_UID_GID) + sum(_MTIME) + sum(_TAIL) + 8 * ord(" ")
assert 100 + len(_MODE_UID_GID) + 12 + len(_MTIME) + 8 + len(_TAIL) == 512


def header(name, size):
    """One 512-byte ustar header of a regular file NAME (bytes, < 100) of SIZE bytes."""
    if len(name) > 100:
        raise ValueError(f"name too long for ustar without prefix: {name!r}")
    size_field = octal(size, 12)
    chksum = _CONST_SUM + sum(name) + sum(size_field)
    return b"".join(
        (
            name.ljust(100, b"\0"),
            _MODE_UID_GID,
            size_field,
            _MTIME,
            b"%06o\0 " % chksum,
            _TAIL,
        )
    )


def pad(n, unit):
    return -n % unit


def class_sizes(files, classes, rng):
    """C sizes summing to N between ImageNet's 732 and 1,300 scaled to N/C, most at the top."""
    if classes < 1 or files < classes:
        raise SystemExit("imagenet_shape: need --classes >= 1 and --files >= --classes")
    scale = files / classes / (IMAGENET_FILES / IMAGENET_CLASSES)
    hi = max(-(-files // classes), round(IMAGENET_MAX * scale))
    lo = max(1, min(files // classes, round(IMAGENET_MIN * scale)))
    sizes = [hi] * classes
    deficit = hi * classes - files
    while deficit:
        i = rng.randrange(classes)
        room = sizes[i] - lo
        if room:
            cut = rng.randint(1, min(deficit, room))
            sizes[i] -= cut
            deficit -= cut
    return sizes


def synsets(classes, rng):
    """C distinct synset-like ids (WordNet noun offsets lie in 1,440,764 .. 15,075,141), sorted."""
    return sorted(rng.sample(range(1_440_764, 15_075_142), classes))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", help="file to write (default: stdout)")
    ap.add_argument("--files", type=int, default=IMAGENET_FILES, help="total files (default %(default)s)")
    ap.add_argument("--classes", type=int, default=IMAGENET_CLASSES, help="class tars (default %(default)s)")
    ap.add_argument("--size-bytes", type=int, default=2048, help="mean file size (default %(default)s)")
    ap.add_argument("--seed", type=int, default=2012, help="(default %(default)s)")
    args = ap.parse_args()
    if args.size_bytes < 2 * HEAD:
        raise SystemExit(f"imagenet_shape: --size-bytes must be at least {2 * HEAD}")

    rng = random.Random(args.seed)
    sizes = class_sizes(args.files, args.classes, rng)
    ids = synsets(args.classes, rng)
    smin, smax = args.size_bytes // 2, args.size_bytes * 3 // 2
    buf_len = max(64 << 20, 4 * smax)
    raw = random.Random(args.seed ^ 0x5EED).randbytes(buf_len)
    buf = memoryview(raw + raw[:smax])  # a slice starting near the end wraps around
    del raw
    pos = 0  # where the next file's bytes start in buf
    written = 0  # bytes of the outer tar so far

    out = open(args.output, "wb") if args.output else sys.stdout.buffer
    try:
        for c, (syn, count) in enumerate(zip(ids, sizes)):
            crng = random.Random(args.seed * 1_000_003 + c)
            prefix = b"n%08d" % syn
            # Image numbers as in the real names (n01440764_10026): distinct, up to ~50,000,
            # listed in name order as in the real class tars.
            nums = crng.sample(range(1, max(50_000, 4 * count)), count)
            names = sorted(b"%s_%d.JPEG" % (prefix, n) for n in nums)
            randint = crng.randint
            parts = []
            total = 0
            for k, name in enumerate(names):
                size = randint(smin, smax)
                head = b"\xff\xd8\xff\xe0" + struct.pack("<III", c, k, args.seed & 0xFFFFFFFF)
                body = buf[pos : pos + size - HEAD]
                pos += size - HEAD
                if pos >= buf_len:
                    pos -= buf_len
                parts.append(header(name, size))
                parts.append(head)
                parts.append(body)
                p = pad(size, 512)
                if p:
                    parts.append(b"\0" * p)
                total += 512 + size + p
            total += 1024  # two zero blocks end the archive
            parts.append(b"\0" * (1024 + pad(total, RECORD)))
            total += pad(total, RECORD)
            inner = b"".join(parts)
            assert len(inner) == total
            out.write(header(prefix + b".tar", total))
            out.write(inner)  # a multiple of 10,240, so of 512: no padding
            written += 512 + total
        written += 1024
        out.write(b"\0" * (1024 + pad(written, RECORD)))
        out.flush()
    except BrokenPipeError:
        sys.stderr.close()
        raise SystemExit(1)
    finally:
        if args.output:
            out.close()


if __name__ == "__main__":
    main()
