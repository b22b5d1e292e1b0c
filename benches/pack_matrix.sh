#!/usr/bin/env bash
# The pack benchmark of docs/benchmarks/packing.md, in one run: packfs against
# mksquashfs on the same cores, codec and level, cold page cache before every
# run (needs root for drop_caches), alternating the two tools.
#
#   benches/pack_matrix.sh SRC_DIR [zstd:3 gzip:9 ...]
#
# Prints one line per run (wall seconds, peak RSS, image bytes) and the ratios.
set -euo pipefail
src=$1; shift
codecs=("${@:-zstd:3 gzip:9}")
bin=$(dirname "$0")/../target/release/packfs
out=$(mktemp -d /var/tmp/pack-matrix.XXXX)
trap 'rm -rf "$out"' EXIT
procs=$(nproc)
cold() { sync; echo 3 > /proc/sys/vm/drop_caches; }
measure() { # label image command...
    local label=$1 img=$2; shift 2
    rm -f "$img"; cold
    /usr/bin/time -f "%e %M" -o "$out/time" "$@" >/dev/null 2>&1
    read -r wall rss < "$out/time"
    printf '%-28s %8.2f s %9d KB %12d bytes\n' "$label" "$wall" "$rss" "$(stat -c %s "$img")"
    echo "$wall $rss $(stat -c %s "$img")" > "$out/$label"
}
for spec in ${codecs[*]}; do
    c=${spec%%:*} l=${spec##*:}
    measure "packfs-$c-$l" "$out/p.sqfs" "$bin" pack "$src" -o "$out/p.sqfs" -c "$c" -l "$l" -q -j "$procs"
    measure "mksquashfs-$c-$l" "$out/m.sqfs" mksquashfs "$src" "$out/m.sqfs" -comp "$c" \
        -Xcompression-level "$l" -processors "$procs" -quiet -no-progress
    read -r pw pr ps < "$out/packfs-$c-$l"
    read -r mw mr ms < "$out/mksquashfs-$c-$l"
    awk -v pw="$pw" -v mw="$mw" -v pr="$pr" -v mr="$mr" -v ps="$ps" -v ms="$ms" -v c="$c-$l" \
        'BEGIN { printf "ratio %-22s wall %.2fx  rss %.2fx  size %.3fx\n", c, pw/mw, pr/mr, ps/ms }'
done
