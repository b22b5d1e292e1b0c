#!/bin/bash
# bench_jpeg.sh N...: packfs (manifest of N shards, own mount) vs ratarmount (union of the same N .sqfs) vs raw
cd /var/tmp/s14/jpeg
P=/work/wt-bench14/target/release/packfs; R=/tmp/rat/bin/ratarmount; M=/var/tmp/s14/rmnt
for n in "$@"; do
  $R o$n/t-*.sqfs $M > /var/tmp/s14/rat_bench_$n.log 2>&1 || { echo "ratarmount o$n failed"; continue; }
  s=$(date +%s)
  $P bench --raw /tmp/corpus/imagenet-mini --image o$n/t.manifest.json --mountpoint ratarmount=$M --self-mount \
     --workload walk,shuffle --threads 1,4 --epochs 2 --json /var/tmp/s14/bench_o$n.json > /var/tmp/s14/bench_o$n.txt 2>&1
  echo "o$n rc=$? $(( $(date +%s) - s )) s"
  fusermount -u $M
done
