#!/bin/bash
# benches/shards_jpeg_lookup.sh: 10,000 first-time stats on fresh mounts (page cache warm), 3 mounts per side and shard count
# Paths: PACKFS (default: this checkout's release build), WORK (default $W, holding
# jpeg/oN/ with the shards of N, as docs/benchmarks/shards.md packs them), RAW (the tree),
# RATARMOUNT (default /tmp/rat/bin/ratarmount).
here=$(cd "$(dirname "$0")/.." && pwd)
P=${PACKFS:-$here/target/release/packfs}
W=${WORK:-$W}
R=${RATARMOUNT:-/tmp/rat/bin/ratarmount}
cd $W/jpeg
M=$W/lmnt; mkdir -p $M
L="python3 $here/scripts/shards_lookup.py"
cat o*/t-*.sqfs one.sqfs > /dev/null
for n in 1 16 64; do
  for r in 1 2 3; do
    $P mount o$n/t.manifest.json $M; echo "packfs o$n r$r $($L $M 10000 ${RAW:-/tmp/corpus/imagenet-mini})"; fusermount -u $M
    $R o$n/t-*.sqfs $M >/dev/null 2>&1; echo "ratarmount o$n r$r $($L $M 10000 ${RAW:-/tmp/corpus/imagenet-mini})"; fusermount -u $M
  done
done
