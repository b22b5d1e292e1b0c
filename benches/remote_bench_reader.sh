#!/bin/bash
# Images on object storage, measured by `packfs bench`'s own reader (Rust) instead of the Python
# reader of benches/remote_latency.sh: packfs mounting s3://bench/KEY against
# s3fs + squashfuse_ll, both through scripts/latency_proxy.py (LAT ms per request)
# in front of moto. s3fs+squashfuse_ll is mounted once and measured as an external
# side (`--mountpoint`); every pass starts after drop_caches.
# Usage: benches/remote_bench_reader.sh SRC_DIR IMAGE [REPEAT]   (root)
#   SRC_DIR  the tree the image was packed from (the bench plans and verifies from it)
#   IMAGE    the .sqfs; uploaded as s3://bench/$(basename IMAGE)
# Needs benches/remote_latency.sh to have run once (it writes the patched moto,
# $WORK/moto_fast.py). Environment: PACKFS, LAT=5, PORT=19650 (proxy PORT+1),
# WORK=/var/tmp/rlat/bench, OUT=$WORK/reader.
set -euo pipefail
SRC=${1:?usage: SRC_DIR IMAGE [REPEAT]}; IMG=${2:?image}; REPEAT=${3:-3}
HERE=$(cd "$(dirname "$0")/.." && pwd)
B=${PACKFS:-$HERE/target/release/packfs}
LAT=${LAT:-5}; PORT=${PORT:-19650}; PPORT=$((PORT + 1))
WORK=${WORK:-/var/tmp/rlat/bench}; OUT=${OUT:-$WORK/reader}
MOTO=/var/tmp/packfs-moto
KEY=$(basename "$IMG"); ISIZE=$(stat -c %s "$IMG")
[ -f "$WORK/moto_fast.py" ] || { echo "run benches/remote_latency.sh once first ($WORK/moto_fast.py)" >&2; exit 1; }
mkdir -p "$OUT/s3" "$OUT/sq"
export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1
export MOTO_S3_DEFAULT_KEY_BUFFER_SIZE=$((ISIZE + (64 << 20)))
$MOTO/bin/python "$WORK/moto_fast.py" -H 127.0.0.1 -p $PORT > "$OUT/moto.log" 2>&1 & MP=$!
python3 "$HERE/scripts/latency_proxy.py" --listen 127.0.0.1:$PPORT --upstream 127.0.0.1:$PORT \
  --latency-ms "$LAT" > "$OUT/proxy.log" 2>&1 & PP=$!
trap 'fusermount3 -u "$OUT/sq" 2>/dev/null; fusermount3 -u "$OUT/s3" 2>/dev/null; kill $MP $PP 2>/dev/null' EXIT
for i in $(seq 100); do
  curl -s -o /dev/null http://127.0.0.1:$PORT/ && curl -sf -o /dev/null http://127.0.0.1:$PPORT/_proxy/stats && break
  sleep 0.2
done
AWS_ENDPOINT_URL=http://127.0.0.1:$PORT $MOTO/bin/python -c "
import boto3; s3 = boto3.client('s3'); s3.create_bucket(Bucket='bench'); s3.upload_file('$IMG', 'bench', '$KEY')"
export AWS_ENDPOINT_URL=http://127.0.0.1:$PPORT
echo testing:testing > "$OUT/pw"; chmod 600 "$OUT/pw"
s3fs bench "$OUT/s3" -o "passwd_file=$OUT/pw,url=http://127.0.0.1:$PPORT,use_path_request_style,ro"
for i in $(seq 50); do [ -f "$OUT/s3/$KEY" ] && break; sleep 0.1; done
squashfuse_ll "$OUT/s3/$KEY" "$OUT/sq"
"$B" bench --raw "$SRC" --image "s3://bench/$KEY" --mountpoint "s3fs=$OUT/sq" --self-mount --no-raw \
  --workload sequential,shuffle --threads 1,4 --epochs 1 --repeat "$REPEAT" --cold drop-caches \
  --json "$OUT/bench.json"
