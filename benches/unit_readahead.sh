#!/usr/bin/env bash
# Image-order unit readahead under `packfs mount`, on against off: two packfs
# builds that differ only in that (PACKFS_ON forwards the unit hooks through
# AnyImage, PACKFS_OFF does not), timed in one run on the same images.
#
#   PACKFS_ON=./packfs-units-on PACKFS_OFF=./packfs-units-off \
#       benches/unit_readahead.sh [REPS]
#
# Every cell is cold: `packfs bench` remounts its own mount (a fresh daemon,
# so an empty block cache) and drops the page cache before it. The two
# builds are interleaved (rep 1: on, off; rep 2: off, on; ...), so drift in
# the machine's speed hits both alike. Prints one table: the median over
# REPS (default 3) of the cold seconds and device reads per cell, and
# on/off (below 1: unit readahead helps).
#
# Environment:
#   PACKFS_ON, PACKFS_OFF  the two binaries (required)
#   CORPORA     space-separated NAME=DIR (default: linux=/tmp/corpus/linux-6.1
#               jpeg=/tmp/corpus/imagenet-mini)
#   WORK        images, JSON and logs (default /var/tmp/unit-readahead); an
#               image already there is reused, else packed by PACKFS_ON with
#               SOURCE_DATE_EPOCH=0
#   WORKLOADS   default walk,sequential,shuffle
#   THREADS     default 1,4
# Needs root (drop_caches) and /dev/fuse; run it on an otherwise idle machine.
set -euo pipefail
reps=${1:-3}
: "${PACKFS_ON:?set PACKFS_ON to the build with unit readahead}"
: "${PACKFS_OFF:?set PACKFS_OFF to the build without it}"
corpora=${CORPORA:-linux=/tmp/corpus/linux-6.1 jpeg=/tmp/corpus/imagenet-mini}
work=${WORK:-/var/tmp/unit-readahead}
workloads=${WORKLOADS:-walk,sequential,shuffle}
threads=${THREADS:-1,4}
[ "$(id -u)" = 0 ] || { echo "unit_readahead.sh: needs root (drop_caches)" >&2; exit 1; }
for b in "$PACKFS_ON" "$PACKFS_OFF"; do
    [ -x "$b" ] || { echo "unit_readahead.sh: $b is not an executable" >&2; exit 1; }
done
mkdir -p "$work"

for c in $corpora; do
    name=${c%%=*} dir=${c#*=}
    [ -d "$dir" ] || { echo "unit_readahead.sh: corpus $name: $dir is not a directory" >&2; exit 1; }
    img=$work/$name.sqfs
    if [ ! -f "$img" ]; then
        echo "packing $dir -> $img" >&2
        SOURCE_DATE_EPOCH=0 "$PACKFS_ON" pack -q "$dir" -o "$img" >&2
    fi
done

for rep in $(seq 1 "$reps"); do
    if [ $((rep % 2)) = 1 ]; then order="on off"; else order="off on"; fi
    for c in $corpora; do
        name=${c%%=*} dir=${c#*=}
        for side in $order; do
            if [ "$side" = on ]; then bin=$PACKFS_ON; else bin=$PACKFS_OFF; fi
            out=$work/$name-$side-$rep
            echo "rep $rep/$reps: $name, units $side" >&2
            # --no-raw: the raw tree is still scanned and checked against the
            # mount, but not timed (both builds read the same image).
            "$bin" bench --raw "$dir" --image "$work/$name.sqfs" --no-raw \
                --workload "$workloads" --threads "$threads" --epochs 1 \
                --cold drop-caches --json "$out.json" > "$out.txt" 2>&1 ||
                { echo "unit_readahead.sh: bench failed, see $out.txt" >&2; exit 1; }
        done
    done
done

python3 - "$work" "$reps" $corpora <<'EOF'
import json, statistics, sys
work, reps, corpora = sys.argv[1], int(sys.argv[2]), [c.split("=", 1)[0] for c in sys.argv[3:]]
cells = {}
for name in corpora:
    for side in ("on", "off"):
        for rep in range(1, reps + 1):
            with open(f"{work}/{name}-{side}-{rep}.json") as f:
                report = json.load(f)
            for r in report["runs"]:
                if r["side"] != "packfs" or not r["cold"]:
                    continue
                if r["errors"]:
                    sys.exit(f"{name} {side} rep {rep}: {r['first_error']}")
                cell = cells.setdefault((name, r["workload"], r["threads"]), {"on": [], "off": []})
                cell[side].append((r["seconds"], r["storage"]["device_reads"]))

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None

def fmt(x, spec):
    return "-" if x is None else format(x, spec)

print(f"cold, median of {reps}; seconds (device reads); on/off below 1 = unit readahead helps")
print(f"{'corpus':8} {'workload':11} {'thr':>3} {'on s':>8} {'off s':>8} {'on/off':>7} {'on reads':>9} {'off reads':>9}  on runs / off runs")
for (name, wl, t), cell in cells.items():
    on_s, off_s = med(s for s, _ in cell["on"]), med(s for s, _ in cell["off"])
    on_r, off_r = med(d for _, d in cell["on"]), med(d for _, d in cell["off"])
    ratio = on_s / off_s if on_s is not None and off_s else None
    runs = " ".join(f"{s:.2f}" for s, _ in cell["on"]) + " / " + " ".join(f"{s:.2f}" for s, _ in cell["off"])
    print(f"{name:8} {wl:11} {t:>3} {fmt(on_s, '8.2f')} {fmt(off_s, '8.2f')} {fmt(ratio, '7.2f')} "
          f"{fmt(on_r, '9.0f')} {fmt(off_r, '9.0f')}  {runs}")
EOF
