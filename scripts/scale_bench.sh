#!/usr/bin/env bash
# scripts/scale_bench.sh WORKDIR [PACKFS] [TARSTREAM]
#
# Packing at scale from a stream, in one run: a tar of N tiny files (14 to 98
# bytes, 1,000 to a directory; testkit's `tarstream`, made on the fly and
# never stored) piped into `packfs pack -` and, for the sizes in MKSQ_FILES,
# into `mksquashfs - IMG -tar -no-duplicates` (zstd level 3, as packfs's
# default): wall and CPU seconds and peak RSS (GNU time, of the packer only)
# and the image's size. For each packfs image of the sizes in CHECK_FILES,
# the time `packfs mount` takes to return (the daemon serving), and a kernel
# loop mount's `find` counting every entry (root only).
#
#   cargo build --release -p packfs -p packfs-testkit --bins
#   FILES="1000000 10000000" MKSQ_FILES=1000000 scripts/scale_bench.sh /var/tmp/scale
#
# Defaults: FILES="1000000", MKSQ_FILES="1000000", CHECK_FILES="" (sizes of
# FILES to check). Images are removed after their row unless KEEP=1. A
# 10 M stream is 10 GB of tar; the images of 10 M files are ~150 MB.
set -euo pipefail
W=${1:?usage: scale_bench.sh WORKDIR [PACKFS] [TARSTREAM]}
P=${2:-target/release/packfs}
G=${3:-target/release/tarstream}
FILES=${FILES:-1000000}
MKSQ_FILES=${MKSQ_FILES:-1000000}
CHECK_FILES=${CHECK_FILES:-}
mkdir -p "$W"

# row LABEL N IMAGE COMMAND...: runs `tarstream N | COMMAND` under GNU time.
row() {
    local label=$1 n=$2 img=$3
    shift 3
    rm -f "$img"
    "$G" "$n" | /usr/bin/time -v "$@" > "$W/out.txt" 2> "$W/time.txt"
    local wall cpu rss size
    wall=$(awk -F': ' '/Elapsed/ {n = split($2, t, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + t[i]; print s}' "$W/time.txt")
    cpu=$(awk -F': ' '/User time/ {u = $2} /System time/ {s = $2} END {printf "%.1f", u + s}' "$W/time.txt")
    rss=$(awk -F': ' '/Maximum resident/ {printf "%.0f", $2 / 1024}' "$W/time.txt")
    size=$(stat -c %s "$img")
    printf '| %s | %s | %.1f | %s | %s | %.1f |\n' "$label" "$n" "$wall" "$cpu" "$rss" "$(echo "$size / 1000000" | bc -l)"
    grep -a '^packed' "$W/out.txt" "$W/time.txt" | sed 's/^[^:]*://; s/^/    /' || true
}

echo "| command | files | wall s | CPU s | peak RSS MiB | image MB |"
echo "|---|---|---|---|---|---|"
for n in $FILES; do
    img="$W/packfs-$n.sqfs"
    row "packfs pack -" "$n" "$img" "$P" pack -f - -o "$img"
    if [[ " $CHECK_FILES " == *" $n "* ]]; then
        mp="$W/mnt-$n"
        mkdir -p "$mp"
        s=$(date +%s.%N)
        "$P" mount "$img" "$mp"
        e=$(date +%s.%N)
        echo "    packfs mount returned in $(echo "$e - $s" | bc -l | cut -c1-6) s; root listed: $(ls "$mp" | wc -l) entries"
        "$P" umount "$mp"
        if [ "$(id -u)" = 0 ]; then
            mount -t squashfs -o loop,ro "$img" "$mp"
            s=$(date +%s.%N)
            count=$(find "$mp" -mindepth 1 | wc -l)
            e=$(date +%s.%N)
            umount "$mp"
            echo "    kernel: find lists $count entries in $(echo "$e - $s" | bc -l | cut -c1-6) s"
        fi
        rmdir "$mp"
    fi
    [ "${KEEP:-0}" = 1 ] || rm -f "$img"
done
for n in $MKSQ_FILES; do
    img="$W/mksquashfs-$n.sqfs"
    row "mksquashfs - IMG -tar -no-duplicates" "$n" "$img" \
        mksquashfs - "$img" -tar -no-duplicates -comp zstd -Xcompression-level 3 -noappend -quiet
    [ "${KEEP:-0}" = 1 ] || rm -f "$img"
done
