#!/usr/bin/env bash
# scripts/bench_archives.sh WORKDIR [PACKFS]
# JPEGS=DIR scripts/bench_archives.sh WORKDIR [PACKFS]
# IMAGENET=N|full scripts/bench_archives.sh WORKDIR [PACKFS]
#
# Packing from archives, packfs against the tools that read a tar stream, on
# the Linux source tree (Debian's linux-source-6.1) as .tar, .tar.zst and
# .tar.xz: wall and CPU seconds, peak RSS, output size and the entries each
# command leaves (files and directories), zstd level 3 and 128 KiB blocks for
# every SquashFS writer, in one run. The archives are read once before each
# command (warm page cache): what is compared is the work of converting, not
# the disk. The tools: squashfs-tools (mksquashfs -tar), squashfs-tools-ng
# (tar2sqfs), zstd, xz-utils, GNU time; and, where built (recipe below),
# sqfstar >= 4.6 (accepts -Xcompression-level), mkfs.erofs >= 1.7 (--tar) and
# ratarmount (its index build: `--no-mount`, the index is the output).
# EROFS is another format: its size is not comparable 1:1 (EROFS_OPTS, default
# -zlz4hc, its level 9 and 4 KiB clusters, the compressor EROFS is mostly used
# with; zstd there is marked experimental in 1.9.3).
# With JPEGS=DIR (a tree DIR/train/<class>/*.JPEG made by the corpora's
# make_jpeg_dataset.py), the same on incompressible samples: the tree as one
# tar, as 16 WebDataset-style shards, and as a tar of per-class tars
# (ImageNet's shape, --expand-nested), instead of the Linux tree.
# With IMAGENET=N (N files; `full` = ILSVRC2012's 1,281,167 in 1,000 classes;
# IMAGENET_CLASSES, IMAGENET_SIZE the mean file size, default 2048), a tar of
# class tars made once by scripts/imagenet_shape.py: packfs --expand-nested
# from the file; extracting as ImageNet's own instructions do (tar -x of the
# outer tar, then of each class tar into its directory, removing it; the
# extraction is timed and added to the packing of the tree); ratarmount -r's
# index. mksquashfs -tar, sqfstar and mkfs.erofs --tar cannot open member
# archives: they would store the class tars as files, so they appear only
# on the extracted tree (mksquashfs DIR).
# LINUX_SRC=FILE.tar.xz replaces the Linux archive (for a smoke test).
#
# The newer tools (/var/tmp/tools; TOOLS=DIR elsewhere; SQFSTAR, MKFS_EROFS,
# RATARMOUNT name each), as built on Debian 12, sources from their public
# repositories:
#   apt-get install autoconf automake libtool pkg-config uuid-dev zlib1g-dev \
#       liblz4-dev libzstd-dev liblzma-dev libfuse3-dev
#   plougher/squashfs-tools tag 4.7.5 (708c59ae):
#     make -C squashfs-tools ZSTD_SUPPORT=1 XZ_SUPPORT=1 LZ4_SUPPORT=1 LZO_SUPPORT=0
#     make -C squashfs-tools install INSTALL_DIR=$TOOLS/bin   (same flags)
#   erofs/erofs-utils tag v1.9.3 (7db78788):
#     ./autogen.sh && ./configure --prefix=$TOOLS --with-libzstd --enable-lz4 \
#       --enable-lzma --enable-fuse --without-libcurl --without-openssl \
#       --without-libxml2 && make && make install
#   python3 -m venv $TOOLS/venv && $TOOLS/venv/bin/pip install ratarmount  (1.3.0)
# mkfs.erofs 1.9.3's --unxz fails (EIO) on any but a tiny .xz: xzcat pipes it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=${1:?usage: scripts/bench_archives.sh WORKDIR [PACKFS]}
packfs=${2:-$here/../target/release/packfs}
src=${LINUX_SRC:-/usr/src/linux-source-6.1.tar.xz}
tools=${TOOLS:-/var/tmp/tools}
sqfstar=${SQFSTAR:-$tools/bin/sqfstar}
mkfs_erofs=${MKFS_EROFS:-$tools/bin/mkfs.erofs}
ratarmount=${RATARMOUNT:-$tools/venv/bin/ratarmount}
erofs_opts=${EROFS_OPTS:--zlz4hc}
[ -n "${JPEGS:-}${IMAGENET:-}" ] || [ -f "$src" ] || { echo "bench_archives: $src missing (apt-get install linux-source-6.1)" >&2; exit 2; }
mkdir -p "$work"
cd "$work"

# run NAME INPUT OUTPUT COMMAND...: one row (name, wall s, cpu s, peak RSS MiB,
# output MB, entries OUTPUT holds); the figures stay in r_wall r_cpu r_rss r_mb.
run() {
    local name=$1 input=$2 img=$3
    shift 3
    rm -rf "$img"
    # shellcheck disable=SC2086 # INPUT may be a glob (shards/*)
    cat $input >/dev/null
    /usr/bin/time -f '%e %U %S %M' -o time.txt bash -c "$*" >/dev/null 2>log.txt ||
        { echo "bench_archives: $name failed:" >&2; cat log.txt >&2; return 1; }
    local user sys size entries
    read -r r_wall user sys r_rss <time.txt
    r_cpu=$(echo "$user + $sys" | bc)
    size=$(du -sb --apparent-size "$img" | cut -f1)
    r_mb=$(echo "$size / 1000000" | bc -l)
    entries=$(find "$img" | wc -l)
    printf '%s\t%s\t%.2f\t%.0f\t%.1f\t%s\n' "$name" "$r_wall" "$r_cpu" \
        "$(echo "$r_rss / 1024" | bc -l)" "$r_mb" "$entries"
}
# sum NAME: a row adding the last run's figures to those saved in x_* (peak RSS: the larger).
sum() {
    printf '%s\t%.2f\t%.2f\t%.0f\t%.1f\t-\n' "$1" "$(echo "$x_wall + $r_wall" | bc)" \
        "$(echo "$x_cpu + $r_cpu" | bc)" \
        "$(echo "r = $x_rss; if ($r_rss > r) r = $r_rss; r / 1024" | bc -l)" "$r_mb"
}
save() { x_wall=$r_wall x_cpu=$r_cpu x_rss=$r_rss; }
header() { printf 'command\twall_s\tcpu_s\tpeak_rss_mib\toutput_mb\tentries\n'; }
# have TOOL: whether the newer tool is there; says which row is left out if not.
have() {
    [ -x "$1" ] && return 0
    echo "bench_archives: $1 missing, its rows left out (the recipe is in this script's header)" >&2
    return 1
}
# count IMAGE N: check a SquashFS image holds N *.JPEG files.
count() {
    local got
    got=$(unsquashfs -lc "$1" | grep -c '\.JPEG$' || true)
    [ "$got" = "$2" ] || { echo "bench_archives: $1 holds $got JPEG files, not $2" >&2; exit 1; }
}
zs="-comp zstd -Xcompression-level 3 -b 131072 -no-progress -quiet"
# Versions for the row names (empty where the tool is missing).
# shellcheck disable=SC2015
sqv=$([ -x "$sqfstar" ] && "$sqfstar" -version | sed -n '1s/.*version \([^ ]*\).*/\1/p' || true)
# shellcheck disable=SC2015
erv=$([ -x "$mkfs_erofs" ] && "$mkfs_erofs" --version 2>&1 | sed -n '1s/.*) //p' || true)
# shellcheck disable=SC2015
rav=$([ -x "$ratarmount" ] && "$ratarmount" --version 2>/dev/null | sed -n 's/^ratarmount *//p' | head -1 || true)
# Rows of the newer tools on one plain tar T (a name in this folder).
newer() {
    local t=$1
    if have "$sqfstar"; then
        run "sqfstar $sqv IMG < $t" "$t" s.sqfs "$sqfstar $zs s.sqfs < $t"
    fi
    if have "$mkfs_erofs"; then
        run "mkfs.erofs $erv --tar=f $erofs_opts IMG $t" "$t" e.erofs "$mkfs_erofs --quiet --tar=f $erofs_opts e.erofs $t"
    fi
    if have "$ratarmount"; then
        run "ratarmount $rav --no-mount $t (index)" "$t" r.sqlite "$ratarmount --no-mount -c --index-file r.sqlite $t"
    fi
}

if [ -n "${IMAGENET:-}" ]; then
    n=$IMAGENET
    [ "$n" = full ] && n=1281167
    classes=${IMAGENET_CLASSES:-1000}
    size=${IMAGENET_SIZE:-2048}
    t=imagenet-$n-$classes-$size.tar
    if [ ! -f "$t" ]; then
        python3 "$here/imagenet_shape.py" --files "$n" --classes "$classes" --size-bytes "$size" -o "$t.part"
        mv "$t.part" "$t"
    fi
    echo "# $t: $n files in $classes class tars, $(du -b --apparent-size "$t" | cut -f1) bytes"
    header
    run "packfs pack $t --expand-nested '*.tar'" "$t" p.sqfs "$packfs pack $t --expand-nested '*.tar' -o p.sqfs -q"
    count p.sqfs "$n"
    if have "$ratarmount"; then
        run "ratarmount $rav -r --no-mount $t (index)" "$t" r.sqlite "$ratarmount --no-mount -r -c --index-file r.sqlite $t"
    fi
    # ImageNet's own recipe: the outer tar into train/, then each class tar into its folder, removed.
    # shellcheck disable=SC2016
    run "tar -x $t, then each class tar (rm each)" "$t" extracted 'mkdir extracted && tar -xf '"$t"' -C extracted &&
        cd extracted && for c in *.tar; do mkdir "${c%.tar}" && tar -xf "$c" -C "${c%.tar}" && rm "$c"; done'
    save
    mv extracted tree
    run "packfs pack DIR (the extracted tree)" "$t" p.sqfs "$packfs pack tree -o p.sqfs -q"
    count p.sqfs "$n"
    sum "extracting + packfs pack DIR"
    run "mksquashfs DIR IMG (the extracted tree)" "$t" m.sqfs "mksquashfs tree m.sqfs $zs"
    count m.sqfs "$n"
    sum "extracting + mksquashfs DIR IMG"
    rm -rf tree ./*.sqfs r.sqlite time.txt log.txt
    exit 0
fi

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
    header
    run "packfs pack one.tar" one.tar p.sqfs "$packfs pack one.tar -o p.sqfs -q"
    run "mksquashfs - IMG -tar < one.tar" one.tar m.sqfs "mksquashfs - m.sqfs -tar $zs < one.tar"
    run "tar2sqfs IMG < one.tar" one.tar t.sqfs "tar2sqfs -q -c zstd -X level=3 -b 131072 t.sqfs < one.tar"
    newer one.tar
    run "packfs pack 16 shards" "shards/*" p.sqfs "$packfs pack 'shards/train-{000000..000015}.tar' -o p.sqfs -q"
    run "packfs pack nested.tar --expand-nested" nested.tar p.sqfs "$packfs pack nested.tar --expand-nested '*.tar' -o p.sqfs -q"
    if have "$ratarmount"; then
        run "ratarmount $rav -r --no-mount nested.tar (index)" nested.tar r.sqlite "$ratarmount --no-mount -r -c --index-file r.sqlite nested.tar"
    fi
    run "packfs pack DIR (the tree)" one.tar p.sqfs "$packfs pack $j/train -o p.sqfs -q"
    rm -f ./*.sqfs ./*.erofs r.sqlite time.txt log.txt
    exit 0
fi
[ -f linux.tar ] || xz -dc "$src" >linux.tar
[ -f linux.tar.zst ] || zstd -q -3 -T0 -c linux.tar >linux.tar.zst
[ -f linux.tar.xz ] || cp "$src" linux.tar.xz

header
run "packfs pack linux.tar" linux.tar p.sqfs "$packfs pack linux.tar -o p.sqfs -q"
run "mksquashfs - IMG -tar < linux.tar" linux.tar m.sqfs "mksquashfs - m.sqfs -tar $zs < linux.tar"
# Debian's sqfstar (4.5.1) refuses any -Xcompression-level; the newer one is in newer().
if command -v tar2sqfs >/dev/null; then
    run "tar2sqfs IMG < linux.tar" linux.tar t.sqfs "tar2sqfs -q -c zstd -X level=3 -b 131072 t.sqfs < linux.tar"
fi
newer linux.tar
run "packfs pack linux.tar.zst" linux.tar.zst p.sqfs "$packfs pack linux.tar.zst -o p.sqfs -q"
run "zstdcat | mksquashfs - IMG -tar" linux.tar.zst m.sqfs "zstdcat linux.tar.zst | mksquashfs - m.sqfs -tar $zs"
if have "$sqfstar"; then
    run "zstdcat | sqfstar $sqv IMG" linux.tar.zst s.sqfs "zstdcat linux.tar.zst | $sqfstar $zs s.sqfs"
fi
if have "$mkfs_erofs"; then
    run "zstdcat | mkfs.erofs $erv --tar=f $erofs_opts IMG" linux.tar.zst e.erofs \
        "zstdcat linux.tar.zst | $mkfs_erofs --quiet --tar=f $erofs_opts e.erofs"
fi
if have "$ratarmount"; then
    run "ratarmount $rav --no-mount linux.tar.zst (index)" linux.tar.zst r.sqlite \
        "$ratarmount --no-mount -c --index-file r.sqlite linux.tar.zst"
fi
run "packfs pack linux.tar.xz" linux.tar.xz p.sqfs "$packfs pack linux.tar.xz -o p.sqfs -q"
run "xzcat | mksquashfs - IMG -tar" linux.tar.xz m.sqfs "xzcat linux.tar.xz | mksquashfs - m.sqfs -tar $zs"
if have "$sqfstar"; then
    run "xzcat | sqfstar $sqv IMG" linux.tar.xz s.sqfs "xzcat linux.tar.xz | $sqfstar $zs s.sqfs"
fi
if have "$mkfs_erofs"; then
    run "xzcat | mkfs.erofs $erv --tar=f $erofs_opts IMG" linux.tar.xz e.erofs \
        "xzcat linux.tar.xz | $mkfs_erofs --quiet --tar=f $erofs_opts e.erofs"
fi
if have "$ratarmount"; then
    run "ratarmount $rav --no-mount linux.tar.xz (index)" linux.tar.xz r.sqlite \
        "$ratarmount --no-mount -c --index-file r.sqlite linux.tar.xz"
fi
# What the archive spares: extracting it (a tree of files made), then packing the tree.
run "tar -x (extracting, for the next row)" linux.tar extracted "mkdir extracted && tar -xf linux.tar -C extracted"
save
mv extracted tree
run "packfs pack DIR (the extracted tree)" linux.tar p.sqfs "$packfs pack tree -o p.sqfs -q"
sum "tar -x + packfs pack DIR"
rm -rf tree ./*.sqfs ./*.erofs r.sqlite time.txt log.txt
