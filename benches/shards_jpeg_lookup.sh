#!/bin/bash
# lookup_jpeg.sh: 10,000 first-time stats on fresh mounts (page cache warm), 3 mounts per side and shard count
cd /var/tmp/s14/jpeg
P=/work/wt-bench14/target/release/packfs; R=/tmp/rat/bin/ratarmount; M=/var/tmp/s14/lmnt; mkdir -p $M
L="python3 /work/wt-bench14/scripts/shards_lookup.py"
cat o*/t-*.sqfs one.sqfs > /dev/null
for n in 1 16 64; do
  for r in 1 2 3; do
    $P mount o$n/t.manifest.json $M; echo "packfs o$n r$r $($L $M 10000 /tmp/corpus/imagenet-mini)"; fusermount -u $M
    $R o$n/t-*.sqfs $M >/dev/null 2>&1; echo "ratarmount o$n r$r $($L $M 10000 /tmp/corpus/imagenet-mini)"; fusermount -u $M
  done
done
