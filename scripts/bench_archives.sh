#!/usr/bin/env bash
# scripts/bench_archives.sh WORKDIR [PACKFS]
# JPEGS=DIR scripts/bench_archives.sh WORKDIR [PACKFS]
#
# Packing from archives, packfs against the tools that read a tar stream, on
# the Linux source tree (Debian's linux-source-6.1) as .tar, .tar.zst and
# .tar.xz: wall and CPU seconds, peak RSS and image size of each, zstd
# level 3 and 128 KiB blocks for every SquashFS writer, in one run. The
# archives are read once before each command (warm page cache): what is
# compared is the work of converting, not the disk. The tools:
# squashfs-tools (mksquashfs -tar),
# squashfs-tools-ng (tar2sqfs), zstd, xz-utils, GNU time.
# With JPEGS=DIR (a tree DIR/train/<class>/*.JPEG made by the corpora's
# make_jpeg_dataset.py), the same on incompressible samples: the tree as one
# tar, as 16 WebDataset-style shards, and as a tar of per-class tars
# (ImageNet's shape, --expand-nested), instead of the Linux tree.
set -euo pipefail
work=${1:?usage: scripts/bench_archives.sh WORKDIR [PACKFS]}
packfs=${2:-$(cd "$(dirname "$0")/.." && pwd)/target/release/packfs}
src=/usr/src/linux-source-6.1.tar.xz
[ -n "${JPEGS:-}" ] || [ -f "$src" ] || { echo "bench_archives: $src missing (apt-get install linux-source-6.1)" >&2; exit 2; }
mkdir -p "$work"
cd "$work"

# run NAME INPUT IMAGE COMMAND...: one row (name, wall s, cpu s, peak RSS MiB, image MB).
run() {
    local name=$1 input=$2 img=$3
    shift 3
    rm -rf "$img"
    cat $input >/dev/null
    /usr/bin/time -f '%e %U %S %M' -o time.txt bash -c "$*" >/dev/null 2>log.txt ||
        { echo "bench_archives: $name failed:" >&2; cat log.txt >&2; return 1; }
    read -r wall user sys rss <time.txt
    local size
    size=$(du -sb --apparent-size "$img" | cut -f1)
    printf '%s\t%s\t%.2f\t%.0f\t%.1f\n' "$name" "$wall" "$(echo "$user + $sys" | bc)" \
        "$(echo "$rss / 1024" | bc -l)" "$(echo "$size / 1000000" | bc -l)"
}
zs="-comp zstd -Xcompression-level 3 -b 131072 -no-progress -quiet"

if [ -n "${JPEGS:-}" ]; then
    j=$(cd "$JPEGS" && pwd)
    if [ ! -f one.tar ]; then
        tar -C "$j" --sort=name -cf one.tar train
        (cd "$j/train" && find . -type f | LC_ALL=C sort) >list.txt
        split -n l/16 -d -a 6 list.txt part.
        mkdir -p shards classes
        for p in part.*; do tar -C "$j/train" -cf "shards/train-${p#part.}.tar" -T "$p"; done
        for c in "$j"/train/*; do tar -C "$c" --sort=name -cf "classes/$(basename "$c").tar" .; done
        tar -C classes --sort=name -cf nested.tar .
        rm -f list.txt part.*
    fi
    printf 'command\twall_s\tcpu_s\tpeak_rss_mib\timage_mb\n'
    run "packfs pack one.tar" one.tar p.sqfs "$packfs pack one.tar -o p.sqfs -q"
    run "mksquashfs - IMG -tar < one.tar" one.tar m.sqfs "mksquashfs - m.sqfs -tar $zs < one.tar"
    run "tar2sqfs IMG < one.tar" one.tar t.sqfs "tar2sqfs -q -c zstd -X level=3 -b 131072 t.sqfs < one.tar"
    run "packfs pack 16 shards" "shards/*" p.sqfs "$packfs pack 'shards/train-{000000..000015}.tar' -o p.sqfs -q"
    run "packfs pack nested.tar --expand-nested" nested.tar p.sqfs "$packfs pack nested.tar --expand-nested '*.tar' -o p.sqfs -q"
    run "packfs pack DIR (the tree)" one.tar p.sqfs "$packfs pack $j/train -o p.sqfs -q"
    rm -f ./*.sqfs time.txt log.txt
    exit 0
fi
[ -f linux.tar ] || xz -dc "$src" >linux.tar
[ -f linux.tar.zst ] || zstd -q -3 -T0 -c linux.tar >linux.tar.zst
[ -f linux.tar.xz ] || cp "$src" linux.tar.xz

printf 'command\twall_s\tcpu_s\tpeak_rss_mib\timage_mb\n'
run "packfs pack linux.tar" linux.tar p.sqfs "$packfs pack linux.tar -o p.sqfs -q"
run "mksquashfs - IMG -tar < linux.tar" linux.tar m.sqfs "mksquashfs - m.sqfs -tar $zs < linux.tar"
# sqfstar is the same code as `mksquashfs - IMG -tar`; Debian's 4.5.1 refuses any
# -Xcompression-level ("missing compression level"), so it is left out here.
if command -v tar2sqfs >/dev/null; then
    run "tar2sqfs IMG < linux.tar" linux.tar t.sqfs "tar2sqfs -q -c zstd -X level=3 -b 131072 t.sqfs < linux.tar"
fi
run "packfs pack linux.tar.zst" linux.tar.zst p.sqfs "$packfs pack linux.tar.zst -o p.sqfs -q"
run "zstdcat | mksquashfs - IMG -tar" linux.tar.zst m.sqfs "zstdcat linux.tar.zst | mksquashfs - m.sqfs -tar $zs"
run "packfs pack linux.tar.xz" linux.tar.xz p.sqfs "$packfs pack linux.tar.xz -o p.sqfs -q"
run "xzcat | mksquashfs - IMG -tar" linux.tar.xz m.sqfs "xzcat linux.tar.xz | mksquashfs - m.sqfs -tar $zs"
# What the archive spares: extracting it (a tree of files made), then packing the tree.
run "tar -x (extracting, for the next row)" linux.tar extracted "mkdir extracted && tar -xf linux.tar -C extracted"
mv extracted tree
run "packfs pack DIR (the extracted tree)" linux.tar p.sqfs "$packfs pack tree -o p.sqfs -q"
rm -rf tree ./*.sqfs time.txt log.txt
