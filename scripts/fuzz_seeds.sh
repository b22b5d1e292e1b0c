#!/usr/bin/env bash
# Builds the seed corpora of the fuzz targets: small real images (a few KiB
# to ~100 KiB) of one tiny tree, written by every writer packfs reads.
#
#   scripts/fuzz_seeds.sh [OUT]      (default: fuzz/seeds)
#
# OUT/squashfs/*.sqfs  mksquashfs (gzip, xz, lz4, zstd, lzo; -noI -noD -noF
#                      -noX; -no-fragments, -always-use-fragments; 4K and
#                      128K blocks; no xattrs) and `packfs pack` (zstd, gzip,
#                      lz4, xz; 4K blocks, no fragments)
# OUT/zip/*.zip        Info-ZIP `zip` (deflate, stored, -9, forced zip64,
#                      self-extractor style with a stub in front), Python
#                      `zipfile` (deflate, stored, bzip2, lzma, forced zip64,
#                      an empty archive), 7-Zip (deflate, deflate64, copy,
#                      bzip2, lzma) and `packfs pack` (deflate, zstd, stored)
#
# A writer that is missing (no 7z, an old mksquashfs without a codec) is
# skipped with a note. The packfs binary is $PACKFS, or built with cargo
# (stable) into $PACKFS_TARGET_DIR (default: target/ of the workspace).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/fuzz/seeds}
mkdir -p "$out/squashfs" "$out/zip"
out=$(cd "$out" && pwd)

note() { echo "fuzz_seeds: $*" >&2; }
have() { command -v "$1" >/dev/null 2>&1; }

work=$(mktemp -d /var/tmp/packfs-fuzz-seeds.XXXXXX)
trap 'rm -rf "$work"' EXIT

# The tree: a subdirectory, empty/small/multi-block/incompressible/sparse
# files, a symlink, a hard link, a fifo (SquashFS only) and xattrs (where
# the filesystem keeps them). Little incompressible data, so that most
# mutations land on structure: the images are 4 to 60 KiB.
t=$work/tree
mkdir -p "$t/dir/sub" "$t/empty_dir"
: >"$t/empty"
printf 'hello, packfs\n' >"$t/hello.txt"
for i in $(seq 1 200); do printf 'line %04d of a compressible file\n' "$i"; done >"$t/dir/lines.txt"
head -c 6000 /dev/urandom >"$t/dir/random.bin"
head -c 5000 /dev/zero >"$t/dir/zeros"
printf 'tail' | dd of="$t/dir/sparse" bs=1 seek=12288 conv=notrunc status=none
printf 'deep\n' >"$t/dir/sub/deep.txt"
ln -s ../hello.txt "$t/dir/link"
ln -s /nonexistent/target "$t/dangling"
ln "$t/hello.txt" "$t/dir/hardlink.txt"
mkfifo "$t/dir/fifo" 2>/dev/null || true
if have setfattr; then
    setfattr -n user.comment -v 'a value' "$t/hello.txt" 2>/dev/null || note "no user xattrs on $work"
    setfattr -n user.empty "$t/dir" 2>/dev/null || true
    setfattr -n user.bin -v 0x00ff10 "$t/dir/lines.txt" 2>/dev/null || true
fi
touch -h -d '2001-02-03 04:05:06' "$t" "$t"/* "$t"/dir/* 2>/dev/null || true

# --- SquashFS -------------------------------------------------------------
sq=0
mks() { # NAME ARGS...: one mksquashfs image
    local name=$1
    shift
    if mksquashfs "$t" "$out/squashfs/$name.sqfs" -noappend -quiet -no-progress -nopad "$@" >/dev/null 2>&1; then
        sq=$((sq + 1))
    else
        note "mksquashfs $* failed, skipped"
        rm -f "$out/squashfs/$name.sqfs"
    fi
}
if have mksquashfs; then
    for c in gzip xz lz4 zstd lzo; do
        mks "mksquashfs-$c" -comp "$c"
        mks "mksquashfs-$c-4k" -comp "$c" -b 4K
    done
    mks mksquashfs-noI -noI
    mks mksquashfs-noD -noD
    mks mksquashfs-noF -noF
    mks mksquashfs-noX -noX
    mks mksquashfs-uncompressed -noI -noD -noF -noX
    mks mksquashfs-no-fragments -no-fragments -b 4K
    mks mksquashfs-always-fragments -always-use-fragments -b 4K
    mks mksquashfs-128k -b 128K
    # Padded to 4 KiB, as mksquashfs writes by default (-nopad elsewhere).
    if mksquashfs "$t" "$out/squashfs/mksquashfs-padded.sqfs" -noappend -quiet -no-progress >/dev/null 2>&1; then
        sq=$((sq + 1))
    fi
    mks mksquashfs-no-xattrs -no-xattrs
    mks mksquashfs-lz4-hc -comp lz4 -Xhc
    mks mksquashfs-xz-bcj -comp xz -Xbcj x86
else
    note "no mksquashfs: SquashFS seeds come from packfs only"
fi

packfs=${PACKFS:-}
if [ -z "$packfs" ]; then
    tdir=${PACKFS_TARGET_DIR:-$root/target}
    (cd "$root" && CARGO_TARGET_DIR=$tdir cargo build -q --bin packfs)
    packfs=$tdir/debug/packfs
fi
pk() { # IMAGE ARGS...: one packfs image
    local img=$1
    shift
    if "$packfs" pack "$t" -o "$img" -q -j 1 "$@" >/dev/null 2>&1; then
        return 0
    fi
    note "packfs pack $* failed, skipped"
    rm -f "$img"
    return 1
}
for c in zstd gzip lz4 xz; do
    pk "$out/squashfs/packfs-$c.sqfs" -c "$c" && sq=$((sq + 1))
done
pk "$out/squashfs/packfs-zstd-4k-nofrag.sqfs" -b 4K --no-fragments && sq=$((sq + 1))
pk "$out/squashfs/packfs-gzip-4k.sqfs" -c gzip -b 4K && sq=$((sq + 1))

# --- ZIP ------------------------------------------------------------------
# No fifo in a ZIP (7z would block reading it).
rm -f "$t/dir/fifo"
zp=0
for c in deflate zstd; do
    pk "$out/zip/packfs-$c.zip" -c "$c" && zp=$((zp + 1))
done
pk "$out/zip/packfs-stored.zip" -c deflate -l 0 && zp=$((zp + 1))

# Info-ZIP: -y stores symlinks as links; -X keeps the extra fields out for one variant.
iz() { # NAME ARGS...
    local name=$1
    shift
    if (cd "$t" && zip -q -r -y "$@" "$out/zip/$name.zip" .) >/dev/null 2>&1; then
        zp=$((zp + 1))
    else
        note "zip $* failed, skipped"
        rm -f "$out/zip/$name.zip"
    fi
}
if have zip; then
    iz infozip-deflate
    iz infozip-stored -0
    iz infozip-9-noextra -9 -X
    iz infozip-zip64 -fz
    # Data in front of the archive, offsets adjusted (`zip -A`), as a
    # self-extractor has.
    printf '#!/bin/sh\necho self-extracting stub\nexit 0\n' >"$work/stub"
    head -c 3000 /dev/urandom >>"$work/stub"
    if [ -f "$out/zip/infozip-deflate.zip" ]; then
        cat "$work/stub" "$out/zip/infozip-deflate.zip" >"$out/zip/infozip-sfx.zip"
        zip -q -A "$out/zip/infozip-sfx.zip" && zp=$((zp + 1)) || rm -f "$out/zip/infozip-sfx.zip"
    fi
else
    note "no zip (Info-ZIP): skipped"
fi

# Python zipfile: directories, a symlink (mode in external_attr), every method it writes.
if have python3; then
    n=$(python3 - "$t" "$out/zip" <<'PY'
import os, stat, sys, zipfile
src, out = sys.argv[1], sys.argv[2]
made = 0
def entries():
    for d, dirs, files in os.walk(src):
        dirs.sort()
        for n in sorted(dirs) + sorted(files):
            p = os.path.join(d, n)
            yield p, os.path.relpath(p, src)
def write(name, method, zip64=False):
    global made
    path = os.path.join(out, name)
    try:
        with zipfile.ZipFile(path, "w", compression=method) as z:
            for p, rel in entries():
                st = os.lstat(p)
                if stat.S_ISLNK(st.st_mode):
                    zi = zipfile.ZipInfo(rel, (2001, 2, 3, 4, 5, 6))
                    zi.create_system = 3
                    zi.external_attr = (stat.S_IFLNK | 0o777) << 16
                    z.writestr(zi, os.readlink(p))
                elif stat.S_ISDIR(st.st_mode):
                    z.write(p, rel)
                elif stat.S_ISREG(st.st_mode):
                    zi = zipfile.ZipInfo.from_file(p, rel)
                    zi.compress_type = method
                    with open(p, "rb") as f, z.open(zi, "w", force_zip64=zip64) as w:
                        w.write(f.read())
        made += 1
    except Exception as e:
        print(f"fuzz_seeds: python {name}: {e}", file=sys.stderr)
        if os.path.exists(path):
            os.remove(path)
write("python-deflate.zip", zipfile.ZIP_DEFLATED)
write("python-stored.zip", zipfile.ZIP_STORED)
write("python-bzip2.zip", zipfile.ZIP_BZIP2)
write("python-lzma.zip", zipfile.ZIP_LZMA)
write("python-zip64.zip", zipfile.ZIP_DEFLATED, zip64=True)
write("python-zip64-stored.zip", zipfile.ZIP_STORED, zip64=True)
with zipfile.ZipFile(os.path.join(out, "python-empty.zip"), "w"):
    pass
made += 1
print(made)
PY
)
    zp=$((zp + n))
else
    note "no python3: skipped"
fi

# 7-Zip writing ZIP.
sz() { # NAME ARGS...
    local name=$1
    shift
    if (cd "$t" && 7z a -tzip -bd -bso0 -bsp0 "$@" "$out/zip/$name.zip" .) >/dev/null 2>&1; then
        zp=$((zp + 1))
    else
        note "7z $* failed, skipped"
        rm -f "$out/zip/$name.zip"
    fi
}
if have 7z; then
    sz 7z-deflate
    sz 7z-deflate64 -mm=Deflate64
    sz 7z-copy -mm=Copy
    sz 7z-bzip2 -mm=BZip2
    sz 7z-lzma -mm=LZMA
    sz 7z-deflate-utf8-ntfs-times -mcu=on -mtc=on
else
    note "no 7z (p7zip-full): skipped"
fi

big=$(find "$out" -type f -size +200k | wc -l)
[ "$big" -eq 0 ] || note "$big seed(s) over 200 KiB: the tree grew?"
echo "fuzz_seeds: $sq SquashFS and $zp ZIP seeds in $out"
