#!/bin/bash
# benches/shards_cold_pass.sh IMG TAG [strace|perf]: fresh mount (foreground, --stats), bench --mountpoint, 1-thread cold shuffle
# Paths: PACKFS (default: this checkout's release build), WORK (default $W, holding
# jpeg/oN/ with the shards of N, as docs/benchmarks/shards.md packs them), RAW (the tree),
# RATARMOUNT (default /tmp/rat/bin/ratarmount).
here=$(cd "$(dirname "$0")/.." && pwd)
P=${PACKFS:-$here/target/release/packfs}
W=${WORK:-$W}
R=${RATARMOUNT:-/tmp/rat/bin/ratarmount}
IMG=$1; TAG=$2; MNT=$W/mnt; mkdir -p $MNT
case "$3" in
 strace) PRE="strace -f -qq -e trace=pread64,fadvise64 -T -tt -o $W/$TAG.strace" ;;
 *) PRE="" ;;
esac
sync; echo 3 > /proc/sys/vm/drop_caches
$PRE $P mount --foreground --stats $W/$TAG.stats.json $IMG $MNT 2>$W/$TAG.log &
for i in $(seq 100); do mountpoint -q $MNT && break; sleep 0.1; done
$P bench --raw ${RAW:-/var/tmp/shbench/src} --mountpoint m=$MNT --workload shuffle --threads ${THR:-1} --epochs 1 --no-verify 2>/dev/null | grep "^m "
fusermount -u $MNT; wait
