#!/usr/bin/env bash
# Data order, three parts:
#  pack   sizes, pack times (wall, user+sys CPU) and peak RSS per order and
#         codec, against mksquashfs (same codec, level and block size), each
#         cold (page cache dropped before every pack);
#  read   cold sequential (tree order) and shuffled reads of the
#         similarity-ordered image against the path-ordered one, same codec
#         and block size (`packfs bench --no-raw`, both images in one run);
#  import cold/warm `import MODULES` from a venv: raw venv, path-ordered
#         image, profile-ordered image (profile recorded by `packfs run
#         --record-access` of one import), on the local disk and under
#         --emulate-latency 500,100; then the profile-ordered image mounted
#         with --preload-profile (local disk, cold).
#
#   benches/order_matrix.sh TREE OUT_PREFIX [VENV]
#   CODECS="zstd:3:128K zstd:19:1M xz:6:1M" (codec:level:block size)
#   ORDERS="path similarity"   READ_CODEC=xz:6:1M   MODULES=numpy,pandas,scipy.stats
#   PARTS=pack,read,import (default: all; import needs VENV)
#   BIN=target/release/packfs (default)
#
# Needs root (drop_caches) and a release build. Images go to /var/tmp.
set -euo pipefail
tree=$1 out=$2 venv=${3:-}
codecs=${CODECS:-zstd:3:128K zstd:19:1M xz:6:1M}
orders=${ORDERS:-path similarity}
read_codec=${READ_CODEC:-xz:6:1M}
modules=${MODULES:-numpy,pandas,scipy.stats}
parts=${PARTS:-pack,read,import}
bin=${BIN:-$(dirname "$0")/../target/release/packfs}
want() { [[ ",$parts," == *",$1,"* ]]; }
work=$(mktemp -d /var/tmp/bench-order.XXXX)
mnt=$(mktemp -d /var/tmp/bench-order-mnt.XXXX)
cleanup() {
    "$bin" umount "$mnt" 2>/dev/null || true
    rm -rf "$work"
    rmdir "$mnt" 2>/dev/null || true
}
trap cleanup EXIT
cold() { sync; echo 3 > /proc/sys/vm/drop_caches; }
codec_args() { # codec:level:bs -> packfs args
    IFS=: read -r c l b <<< "$1"
    echo "-c $c -l $l -b $b"
}
mks_args() { # codec:level:bs -> mksquashfs args
    IFS=: read -r c l b <<< "$1"
    case $c in
        xz) echo "-comp xz -b $b" ;; # mksquashfs's xz has no level option: its preset is 6
        zstd) echo "-comp zstd -Xcompression-level $l -b $b" ;;
        gzip) echo "-comp gzip -Xcompression-level $l -b $b" ;;
        *) echo "-comp $c -b $b" ;;
    esac
}
# timed LABEL IMAGE CMD... : one line "label size wall user+sys rss_kb"
timed() {
    local label=$1 img=$2; shift 2
    cold
    /usr/bin/time -f '%e %U %S %M' -o "$work/time" "$@" > /dev/null
    read -r wall user sys rss < "$work/time"
    local size
    size=$(stat -c %s "$img")
    printf '%-36s %12s B %8.2f s wall %8.2f s cpu %8d KB rss\n' \
        "$label" "$size" "$wall" "$(echo "$user + $sys" | bc)" "$rss" | tee -a "$out-pack.txt"
}

if want pack; then
    echo "== pack: $tree" | tee "$out-pack.txt"
    for spec in $codecs; do
        for order in $orders; do
            img=$work/p.sqfs
            # shellcheck disable=SC2046
            timed "packfs $spec --order $order" "$img" \
                "$bin" pack "$tree" -o "$img" -f -q --mtime 0 --order "$order" $(codec_args "$spec")
            rm -f "$img"
        done
        img=$work/m.sqfs
        # shellcheck disable=SC2046
        timed "mksquashfs $spec" "$img" \
            mksquashfs "$tree" "$img" -noappend -quiet -no-progress \
            -processors "$(nproc)" $(mks_args "$spec")
        rm -f "$img"
    done
fi

if want read; then
    echo "== cold reads: $read_codec, path vs similarity" | tee "$out-read.txt"
    for order in path similarity; do
        # shellcheck disable=SC2046
        "$bin" pack "$tree" -o "$work/r-$order.sqfs" -f -q --mtime 0 --order "$order" $(codec_args "$read_codec")
    done
    for order in path similarity; do
        echo "-- --order $order" | tee -a "$out-read.txt"
        "$bin" bench --raw "$tree" --image "$work/r-$order.sqfs" --no-raw \
            --workload sequential,shuffle --threads 1,4 --epochs 1 --repeat 2 \
            --json "$out-read-$order.json" | tee -a "$out-read.txt"
    done
    rm -f "$work"/r-*.sqfs
fi

want import || exit 0
[ -n "$venv" ] || { echo "import: no VENV given" >&2; exit 2; }
echo "== import $modules: raw venv, path order, profile order" | tee "$out-import.txt"
# No --mtime 0 for a venv: a .pyc records its source's mtime, so an image
# whose sources all say 0 has every .pyc stale, and each import recompiles.
"$bin" pack "$venv" -o "$work/v-path.sqfs" -f -q
profile=$out-import-profile.txt
code="import ${modules}"
cold
"$bin" run --record-access "$profile" "$work/v-path.sqfs:$mnt" -- "$mnt/bin/python" -c "$code"
for _ in $(seq 100); do [ -s "$profile" ] && break; sleep 0.1; done
echo "profile: $(wc -l < "$profile") files" | tee -a "$out-import.txt"
"$bin" pack "$venv" -o "$work/v-profile.sqfs" -f -q --order "profile:$profile"
for lat in local 500,100; do
    extra=()
    [ "$lat" = local ] || extra=(--emulate-latency "$lat")
    for order in path profile; do
        raw=()
        [ "$order" = path ] || raw=(--no-raw)
        echo "-- $lat, --order $order" | tee -a "$out-import.txt"
        "$bin" bench --raw "$venv" --image "$work/v-$order.sqfs" "${raw[@]}" "${extra[@]}" \
            --workload import --import "$modules" --threads 1,4 --epochs 3 --repeat 2 \
            --json "$out-import-$lat-$order.json" | tee -a "$out-import.txt"
    done
done
echo "-- local, profile order, mount --preload-profile (cold, 3 runs; wall s)" | tee -a "$out-import.txt"
for _ in 1 2 3; do
    cold
    "$bin" mount "$work/v-profile.sqfs" "$mnt" --preload-profile "$profile"
    /usr/bin/time -f '%e' "$mnt/bin/python" -c "$code" 2>&1 | tail -1 | tee -a "$out-import.txt"
    "$bin" umount "$mnt"
    sleep 0.5
done
