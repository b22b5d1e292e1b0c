#!/bin/bash
# run2.sh IMG TAG [strace|perf]: fresh mount (foreground, --stats), bench --mountpoint, 1-thread cold shuffle
IMG=$1; TAG=$2; MNT=/var/tmp/s14/mnt; mkdir -p $MNT
P=/work/wt-bench14/target/release/packfs
case "$3" in
 strace) PRE="strace -f -qq -e trace=pread64,fadvise64 -T -tt -o /var/tmp/s14/$TAG.strace" ;;
 *) PRE="" ;;
esac
sync; echo 3 > /proc/sys/vm/drop_caches
$PRE $P mount --foreground --stats /var/tmp/s14/$TAG.stats.json $IMG $MNT 2>/var/tmp/s14/$TAG.log &
for i in $(seq 100); do mountpoint -q $MNT && break; sleep 0.1; done
$P bench --raw ${RAW:-/var/tmp/shbench/src} --mountpoint m=$MNT --workload shuffle --threads ${THR:-1} --epochs 1 --no-verify 2>/dev/null | grep "^m "
fusermount -u $MNT; wait
