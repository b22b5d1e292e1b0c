#!/bin/bash
# Images on object storage: reading every file of an image held by a local S3 server (moto),
# cold, sequential and shuffled, 1 and 4 reader threads:
#   packfs mount s3://...            (range GETs, this project)
#   s3fs bucket + squashfuse_ll      (what a user would do today)
# Requests are counted from moto's access log (one line per request), bytes
# from packfs's --stats and from s3fs's /proc/PID/io (rchar: socket reads).
# moto answers each request in ~70 ms whatever its size: that is the
# per-request latency of this setup (docs/benchmarks/history.md says so).
# Usage: benches/remote_matrix.sh TREE [RUNS]   (root; packfs in target/release)
set -euo pipefail
TREE=${1:?tree}; RUNS=${2:-1}
B=${PACKFS:-$(dirname "$0")/../target/release/packfs}
W=/var/tmp/packfs-rbench; mkdir -p $W
MOTO=/var/tmp/packfs-moto
PORT=18600
[ -f $W/img.sqfs ] || $B pack "$TREE" -o $W/img.sqfs -q
export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=http://127.0.0.1:$PORT
$MOTO/bin/moto_server -H 127.0.0.1 -p $PORT > $W/moto.log 2>&1 & MOTO_PID=$!
trap 'kill $MOTO_PID' EXIT
sleep 3
$MOTO/bin/python -c "
import boto3; s3=boto3.client('s3'); s3.create_bucket(Bucket='bench')
s3.upload_file('$W/img.sqfs','bench','img.sqfs')"
echo "testing:testing" > $W/pw; chmod 600 $W/pw
cat > $W/read.py <<'PY'
import os, random, sys, time, concurrent.futures as cf
root, order, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs
               if os.path.isfile(os.path.join(d, f)) and not os.path.islink(os.path.join(d, f)))
if order == "shuffle": random.Random(42).shuffle(files)
def rd(p):
    with open(p, "rb") as f:
        while f.read(1 << 20): pass
t = time.time()
with cf.ThreadPoolExecutor(threads) as ex: list(ex.map(rd, files, chunksize=16))
print("%.2f %d" % (time.time() - t, len(files)))
PY
gets() { grep -c 'GET /bench/img.sqfs' $W/moto.log || true; }
M=$W/mnt; S=$W/s3; mkdir -p $M $S
IMG=$(stat -c %s $W/img.sqfs)
echo "image $IMG bytes; side order threads secs files GETs bytes_fetched x_image"
for run in $(seq $RUNS); do
for order in sequential shuffle; do for th in 1 4; do
  # packfs
  sync; echo 3 > /proc/sys/vm/drop_caches
  g0=$(gets)
  $B mount s3://bench/img.sqfs $M --stats $W/st.json
  r=$(python3 $W/read.py $M $order $th)
  $B umount $M; sleep 0.5
  g1=$(gets); by=$(python3 -c "import json;print(json.load(open('$W/st.json'))['remote']['bytes_fetched'])")
  echo "packfs $order $th $r $((g1-g0)) $by $(python3 -c "print(round($by/$IMG,2))")"
  # s3fs + squashfuse_ll
  sync; echo 3 > /proc/sys/vm/drop_caches
  g0=$(gets)
  s3fs bench $S -o passwd_file=$W/pw,url=http://127.0.0.1:$PORT,use_path_request_style,ro
  SP=$(pgrep -n -x s3fs); rc0=$(awk '/rchar/{print $2}' /proc/$SP/io)
  squashfuse_ll $S/img.sqfs $M
  r=$(python3 $W/read.py $M $order $th)
  rc1=$(awk '/rchar/{print $2}' /proc/$SP/io)
  fusermount3 -u $M; fusermount3 -u $S; sleep 0.5
  g1=$(gets); by=$((rc1-rc0))
  echo "s3fs+squashfuse_ll $order $th $r $((g1-g0)) $by $(python3 -c "print(round($by/$IMG,2))")"
done; done; done
