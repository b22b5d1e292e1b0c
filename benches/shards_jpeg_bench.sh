#!/bin/bash
# benches/shards_jpeg_bench.sh N...: packfs (manifest of N shards, own mount) vs ratarmount (union of the same N .sqfs) vs raw
# Paths: PACKFS (default: this checkout's release build), WORK (default $W, holding
# jpeg/oN/ with the shards of N, as docs/benchmarks/shards.md packs them), RAW (the tree),
# RATARMOUNT (default /tmp/rat/bin/ratarmount).
here=$(cd "$(dirname "$0")/.." && pwd)
P=${PACKFS:-$here/target/release/packfs}
W=${WORK:-$W}
R=${RATARMOUNT:-/tmp/rat/bin/ratarmount}
cd $W/jpeg
M=$W/rmnt
for n in "$@"; do
  $R o$n/t-*.sqfs $M > $W/rat_bench_$n.log 2>&1 || { echo "ratarmount o$n failed"; continue; }
  s=$(date +%s)
  $P bench --raw ${RAW:-/tmp/corpus/imagenet-mini} --image o$n/t.manifest.json --mountpoint ratarmount=$M --self-mount \
     --workload walk,shuffle --threads 1,4 --epochs 2 --json $W/bench_o$n.json > $W/bench_o$n.txt 2>&1
  echo "o$n rc=$? $(( $(date +%s) - s )) s"
  fusermount -u $M
done
