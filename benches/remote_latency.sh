#!/bin/bash
# Images on object storage: reading every file of one image held by a local S3 server, with the
# same injected latency per request for every reader, against what a user would
# do today:
#   packfs      packfs mount s3://bench/KEY                  (range GETs, this project)
#   s3fs        s3fs (Debian) mount of the bucket + squashfuse_ll on the image in it
#   ratarmount  ratarmount s3://bench/KEY (fsspec + s3fs from PyPI, its defaults)
# All three talk to moto through scripts/latency_proxy.py, which adds LAT ms once
# per HTTP request (a round trip, whatever the answer's size) and counts requests
# and bytes: the same instrument for every side. Per pass: drop the page cache,
# mount fresh, list the tree and read every file (sequential = sorted paths, or
# shuffled, with 1 or 4 reader threads), unmount; one line per pass:
#   side order threads secs files GETs bytes_fetched x_image | mount_s walk_s read_s other_reqs wire_bytes
# secs = mount + walk + read (all cold); files = files read (of the total; less
# when PASS_TIMEOUT cut the pass short); GETs = every GET (bucket listings
# included), bytes_fetched = body bytes of those GETs, x_image = bytes/image
# size; other_reqs = HEADs etc.; wire_bytes = all bytes server->client.
# Before the timed passes each side is checked once: a digest of every file read
# through it must equal the reference's (the source tree, or `unsquashfs -d` of
# the image), and packfs's own --stats must agree with the proxy's counts.
#
# The server: moto (venv /var/tmp/packfs-moto, see tests/common/servers.rs). Stock
# moto reads the whole object for every GET (~0.45 ms per MB of object per
# request: 145 ms per GET for a 330 MB image), which would swamp the injected
# latency, so by default moto runs with a small patch ($W/moto_fast.py) that serves
# range GETs from the object's buffer in O(range). MOTO_FAST=0: stock moto.
# moto (werkzeug) closes the connection after each answer, so every request is a
# new loopback connection (the proxy adds LAT to each; --connect-ms stays 0).
# moto keeps the object in memory (MOTO_S3_DEFAULT_KEY_BUFFER_SIZE > image size;
# by default it spills objects over 5 MB to a temporary file), so dropping the
# page cache makes the clients cold, not the server.
#
# Usage: benches/remote_latency.sh SRC [RUNS]     (root: drops caches, FUSE)
#   SRC  a directory: packed once with $PACKFS into $WORK/NAME.sqfs (REPACK=1 to redo);
#        the directory is the reference for the digest check
#        an image (.sqfs): used as is; the reference is `unsquashfs -d` of it
# Environment (defaults):
#   PACKFS=target/release/packfs   the packfs binary (copy it somewhere stable while others rebuild)
#   LAT=5                ms added per request by the proxy
#   RANGE_SIZE= RANGE_CACHE=   packfs --range-size / --range-cache (empty: packfs's defaults)
#   PACKFS_FLAGS=  S3FS_FLAGS=  RAT_FLAGS=   extra flags (S3FS_FLAGS: ",opt=val,..." appended to -o)
#   SIDES="packfs s3fs ratarmount"  ORDERS="sequential shuffle"  THREADS="1 4"
#   PASS_TIMEOUT=600     seconds of reading after which a pass stops (files column tells)
#   VERIFY=1             the digest check first (0: skip)
#   PORT=19640           moto on PORT, the proxy on PORT+1
#   WORK=/var/tmp/rlat/bench   work directory;  RAT=/tmp/rat/bin/ratarmount
#   MOTO_FAST=1          see above
# Results are also appended (tab-separated) to $WORK/NAME.results.tsv; a summary
# (median seconds per side/order/threads, ratios) ends the output.
# ratarmount needs `pip install s3fs` in its venv (fsspec's S3 backend); it reads
# the endpoint from AWS_ENDPOINT_URL (botocore >= 1.31), FSSPEC_S3_ENDPOINT_URL is
# set too. It runs with --index-file :memory: (no index kept between passes: cold).
set -euo pipefail
SRC=${1:?usage: benches/remote_latency.sh SRC_DIR_OR_IMAGE [RUNS]}; RUNS=${2:-1}
HERE=$(cd "$(dirname "$0")/.." && pwd)
B=${PACKFS:-$HERE/target/release/packfs}
PROXY=$HERE/scripts/latency_proxy.py
MOTO=/var/tmp/packfs-moto
RAT=${RAT:-/tmp/rat/bin/ratarmount}
LAT=${LAT:-5}; PORT=${PORT:-19640}; PPORT=$((PORT + 1))
SIDES=${SIDES:-packfs s3fs ratarmount}; ORDERS=${ORDERS:-sequential shuffle}; THREADS=${THREADS:-1 4}
PASS_TIMEOUT=${PASS_TIMEOUT:-600}; VERIFY=${VERIFY:-1}; MOTO_FAST=${MOTO_FAST:-1}
W=${WORK:-/var/tmp/rlat/bench}; mkdir -p "$W"
die() { echo "remote_latency: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (drop_caches, FUSE)"
[ -x "$B" ] || die "no packfs binary at $B (set PACKFS)"
# The tools every run uses, then those only the s3fs side does.
tools="fusermount3 curl mountpoint unsquashfs"
case " $SIDES " in *" s3fs "*) tools="$tools s3fs squashfuse_ll";; esac
for t in $tools; do
  command -v $t > /dev/null || die "$t missing (apt-get install s3fs squashfuse squashfs-tools curl fuse3)"
done
[ -x $MOTO/bin/moto_server ] || die "no moto in $MOTO (see tests/common/servers.rs)"
case " $SIDES " in *" ratarmount "*)
  [ -x "$RAT" ] || die "no ratarmount at $RAT (set RAT)"
  "$(dirname "$RAT")/python" -c 'import s3fs' 2> /dev/null || die "ratarmount's venv lacks s3fs: $(dirname "$RAT")/pip install s3fs";;
esac
for p in $PORT $PPORT; do
  if [ -n "$(ss -ltnH "sport = :$p")" ]; then die "port $p is in use (set PORT)"; fi
done

# The image and its reference tree
if [ -d "$SRC" ]; then
  NAME=$(basename "$(cd "$SRC" && pwd)"); IMG=$W/$NAME.sqfs; REF=$SRC
  if [ ! -f "$IMG" ] || [ "${REPACK:-0}" = 1 ]; then $B pack "$SRC" -o "$IMG" -f -q; fi
else
  [ -f "$SRC" ] || die "$SRC: no such directory or image"
  IMG=$(cd "$(dirname "$SRC")" && pwd)/$(basename "$SRC"); NAME=$(basename "$IMG" .sqfs); REF=$W/$NAME.ref
fi
KEY=$NAME.sqfs
ISIZE=$(stat -c %s "$IMG")
M=$W/mnt; S=$W/s3; mkdir -p "$M" "$S"
LOG=$W/logs; mkdir -p "$LOG"
TSV=$W/$NAME.results.tsv

# Cleanup: unmount everything, stop what this script started (by pid): PIDS =
# moto and the proxy, SIDE_PIDS = the FUSE daemons of the side mounted now
PIDS=(); SIDE_PIDS=()
cleanup() {
  set +e
  for d in "$M" "$S"; do if mountpoint -q "$d"; then fusermount3 -u -z "$d"; fi; done
  for p in "${SIDE_PIDS[@]}" "${PIDS[@]}"; do kill "$p" 2> /dev/null; done
  sleep 0.5
  for p in "${SIDE_PIDS[@]}" "${PIDS[@]}"; do if kill -0 "$p" 2> /dev/null; then kill -9 "$p"; fi; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Helpers written to the work directory
cat > "$W/read.py" << 'PY'
# read.py ROOT ORDER THREADS TIMEOUT: list the tree, read every file; prints
# "walk_s read_s files_read files_total bytes"
import os, random, sys, time, concurrent.futures as cf
root, order, threads, limit = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
t0 = time.time()
files = []
for d, _, fs in os.walk(root):
    for f in fs:
        p = os.path.join(d, f)
        if not os.path.islink(p) and os.path.isfile(p):
            files.append(p)
files.sort()
if order == "shuffle": random.Random(42).shuffle(files)
t1 = time.time(); deadline = t1 + limit
def rd(p):
    if time.time() > deadline: return -1
    n = 0
    with open(p, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b: return n
            n += len(b)
with cf.ThreadPoolExecutor(threads) as ex: res = list(ex.map(rd, files))
t2 = time.time()
done = [r for r in res if r >= 0]
print("%.3f %.3f %d %d %d" % (t1 - t0, t2 - t1, len(done), len(files), sum(done)))
PY
cat > "$W/digest.py" << 'PY'
# digest.py ROOT: one digest of every path, file content and symlink target
import hashlib, os, sys
root = sys.argv[1]; h = hashlib.sha256(); n = nb = 0
for d, dirs, files in os.walk(root):
    dirs.sort()
    for f in sorted(files):
        p = os.path.join(d, f); rel = os.path.relpath(p, root)
        if os.path.islink(p):
            h.update(b"L" + rel.encode() + b"\0" + os.readlink(p).encode() + b"\0")
        elif os.path.isfile(p):
            fh = hashlib.sha256()
            with open(p, "rb") as fo:
                for b in iter(lambda: fo.read(1 << 20), b""):
                    fh.update(b); nb += len(b)
            h.update(b"F" + rel.encode() + b"\0" + fh.digest()); n += 1
print(h.hexdigest()[:32], n, nb)
PY
cat > "$W/delta.py" << 'PY'
# delta.py BEFORE.json AFTER.json: "GETs get_body_bytes other_requests wire_bytes"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
d = lambda k, m: b[k].get(m, 0) - a[k].get(m, 0)
gets = d("requests", "GET"); other = (b["requests_total"] - a["requests_total"]) - gets
print(gets, d("body_bytes", "GET"), other, b["bytes_s2c"] - a["bytes_s2c"])
PY
cat > "$W/moto_fast.py" << 'PY'
# moto_server whose range GETs cost O(range): stock moto materialises the whole
# object (FakeKey.value) for every GET and then slices it. Only GETs with a Range
# header are changed; everything else is moto's own code.
import threading
import moto.s3.models as m, moto.s3.responses as r
import moto.server
tl = threading.local()
orig_value = m.FakeKey.value
class Lazy:
    def __init__(s, key): s.key = key
    def __len__(s): return s.key.size
    def __bool__(s): return True
    def __getitem__(s, sl):
        a, b, _ = sl.indices(s.key.size)
        with s.key.lock:
            s.key._value_buffer.seek(a)
            return s.key._value_buffer.read(max(0, b - a))
    def full(s): return orig_value.fget(s.key)
def value_get(self):
    return Lazy(self) if getattr(tl, "lazy", False) else orig_value.fget(self)
m.FakeKey.value = property(value_get, orig_value.fset)
og = r.S3Response.get_object
def get_object(self):
    tl.lazy = bool(self.headers.get("range"))
    try: return og(self)
    finally: tl.lazy = False
r.S3Response.get_object = get_object
oh = r.S3Response._handle_range_header
def handle_range(self, *a):
    st, h, b = oh(self, *a)
    return st, h, (b.full() if isinstance(b, Lazy) else b)
r.S3Response._handle_range_header = handle_range
moto.server.main()
PY

# moto, the proxy in front of it, the bucket
export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1
export MOTO_S3_DEFAULT_KEY_BUFFER_SIZE=$((ISIZE + (64 << 20)))
if [ "$MOTO_FAST" = 1 ]; then
  $MOTO/bin/python "$W/moto_fast.py" -H 127.0.0.1 -p $PORT > "$LOG/moto.log" 2>&1 & PIDS+=($!)
else
  $MOTO/bin/moto_server -H 127.0.0.1 -p $PORT > "$LOG/moto.log" 2>&1 & PIDS+=($!)
fi
python3 "$PROXY" --listen 127.0.0.1:$PPORT --upstream 127.0.0.1:$PORT --latency-ms "$LAT" \
  --stats "$W/proxy-final.json" > "$LOG/proxy.log" 2>&1 & PIDS+=($!)
for i in $(seq 100); do
  curl -s -o /dev/null http://127.0.0.1:$PORT/ && curl -sf -o /dev/null http://127.0.0.1:$PPORT/_proxy/stats && break
  [ "$i" = 100 ] && die "moto or the proxy did not start: $(tail -3 "$LOG/moto.log" "$LOG/proxy.log")"
  sleep 0.2
done
AWS_ENDPOINT_URL=http://127.0.0.1:$PORT $MOTO/bin/python -c "
import boto3; s3 = boto3.client('s3'); s3.create_bucket(Bucket='bench')
s3.upload_file('$IMG', 'bench', '$KEY')
assert s3.head_object(Bucket='bench', Key='$KEY')['ContentLength'] == $ISIZE"
# From here on every client goes through the proxy
export AWS_ENDPOINT_URL=http://127.0.0.1:$PPORT FSSPEC_S3_ENDPOINT_URL=http://127.0.0.1:$PPORT
echo "testing:testing" > "$W/pw"; chmod 600 "$W/pw"
stats() { curl -sf http://127.0.0.1:$PPORT/_proxy/stats > "$1" || die "proxy gone: $(tail -3 "$LOG/proxy.log")"; }

PFLAGS=()
[ -n "${RANGE_SIZE:-}" ] && PFLAGS+=(--range-size "$RANGE_SIZE")
[ -n "${RANGE_CACHE:-}" ] && PFLAGS+=(--range-cache "$RANGE_CACHE")
read -r -a XFLAGS <<< "${PACKFS_FLAGS:-}"; PFLAGS+=("${XFLAGS[@]}")
read -r -a RFLAGS <<< "${RAT_FLAGS:-}"

# wait_mount DIR PID LOGFILE: until DIR is a mountpoint (the daemon must stay alive)
wait_mount() {
  local i
  for i in $(seq 6000); do
    mountpoint -q "$1" && return 0
    kill -0 "$2" 2> /dev/null || die "mount of $1 failed: $(tail -5 "$3")"
    sleep 0.01
  done
  die "mount of $1 not ready after 60 s: $(tail -5 "$3")"
}
# unmount DIR PID: unmount and wait until the daemon exited (its connections closed)
unmount() {
  local i
  if mountpoint -q "$1"; then fusermount3 -u "$1" || { sleep 1; fusermount3 -u -z "$1"; }; fi
  for i in $(seq 600); do kill -0 "$2" 2> /dev/null || { wait "$2" 2> /dev/null || true; return 0; }; sleep 0.05; done
  echo "remote_latency: pid $2 still alive 30 s after unmounting $1; killing it" >&2
  kill "$2" 2> /dev/null || true; sleep 1; kill -9 "$2" 2> /dev/null || true
  return 0
}
# mount_side SIDE: mounts SIDE on $M (fresh); sets SIDE_PIDS
mount_side() {
  case $1 in
  packfs)
    rm -f "$W/packfs-stats.json"
    $B mount s3://bench/$KEY "$M" -f --stats "$W/packfs-stats.json" "${PFLAGS[@]}" > "$LOG/packfs.log" 2>&1 &
    SIDE_PIDS=($!); wait_mount "$M" $! "$LOG/packfs.log";;
  s3fs)
    s3fs bench "$S" -f -o "passwd_file=$W/pw,url=http://127.0.0.1:$PPORT,use_path_request_style,ro${S3FS_FLAGS:-}" \
      > "$LOG/s3fs.log" 2>&1 &
    SIDE_PIDS=($!); wait_mount "$S" $! "$LOG/s3fs.log"
    squashfuse_ll -f "$S/$KEY" "$M" > "$LOG/squashfuse.log" 2>&1 &
    SIDE_PIDS=($! "${SIDE_PIDS[@]}"); wait_mount "$M" $! "$LOG/squashfuse.log";;
  ratarmount)
    "$RAT" -f --index-file :memory: "${RFLAGS[@]}" s3://bench/$KEY "$M" > "$LOG/ratarmount.log" 2>&1 &
    SIDE_PIDS=($!); wait_mount "$M" $! "$LOG/ratarmount.log";;
  *) die "unknown side $1";;
  esac
}
umount_side() {
  unmount "$M" "${SIDE_PIDS[0]}"
  if [ "$1" = s3fs ]; then unmount "$S" "${SIDE_PIDS[1]}"; fi
  SIDE_PIDS=()
}
# counters SIDE: the proxy's counts since s0.json -> g by other wire
counters() {
  local out
  stats "$W/s1.json"
  out=$(python3 "$W/delta.py" "$W/s0.json" "$W/s1.json") || die "delta.py failed"
  read -r g by other wire <<< "$out"
}
now() { date +%s.%N; }
ratio() { python3 -c "print('%.2f' % ($1 / $2))"; }
# packfs's own counters against the proxy's (GETs, body bytes)
crosscheck() {
  local own
  own=$(python3 -c "import json; r = json.load(open('$W/packfs-stats.json'))['remote']; print(r['get_requests'], r['bytes_fetched'])") \
    || { echo "remote_latency: packfs wrote no --stats" >&2; return 0; }
  if [ "$own" != "$1 $2" ]; then echo "remote_latency: packfs --stats says GETs/bytes $own, the proxy saw $1 $2" >&2; fi
  [ "${3:-}" = show ] && echo "# cross-check: packfs --stats GETs/bytes $own; proxy $1 $2"
  return 0
}

echo "# $(date -u +%FT%TZ) image $IMG ($ISIZE bytes), LAT=${LAT}ms, moto $([ "$MOTO_FAST" = 1 ] && echo O\(range\) GETs || echo stock), $($B --version)${PFLAGS[*]:+ ${PFLAGS[*]}}, load $(cut -d' ' -f1-3 /proc/loadavg)"

# The check: every side reads the same bytes as the reference
if [ "$VERIFY" = 1 ]; then
  if [ "$REF" = "$W/$NAME.ref" ]; then  # unsquashfs -d of the image, redone when the image changed
    stamp="$IMG $(stat -c '%s %Y' "$IMG")"
    if [ ! -d "$REF" ] || [ "$(cat "$REF.stamp" 2> /dev/null)" != "$stamp" ]; then
      rm -rf "$REF"; unsquashfs -q -n -d "$REF" "$IMG" > /dev/null; echo "$stamp" > "$REF.stamp"
    fi
  fi
  want=$(python3 "$W/digest.py" "$REF")
  echo "# reference $REF: digest files bytes = $want"
  for side in $SIDES; do
    sync; echo 3 > /proc/sys/vm/drop_caches
    stats "$W/s0.json"
    mount_side $side
    got=$(python3 "$W/digest.py" "$M") || die "$side: reading failed (logs in $LOG)"
    umount_side $side
    counters
    [ "$got" = "$want" ] || die "$side reads wrong bytes: digest files bytes = $got, want $want"
    echo "# verify $side ok ($got); GETs $g bytes $by x_image $(ratio $by $ISIZE) other_reqs $other"
    if [ $side = packfs ]; then crosscheck $g $by show; fi
  done
fi

echo "side order threads secs files GETs bytes_fetched x_image | mount_s walk_s read_s other_reqs wire_bytes"
read -r -a SIDEV <<< "$SIDES"; NS=${#SIDEV[@]}
for run in $(seq "$RUNS"); do
  # rotate the sides' order from one run to the next
  sides=(); for i in $(seq 0 $((NS - 1))); do sides+=("${SIDEV[$(( (i + run - 1) % NS ))]}"); done
  for order in $ORDERS; do for th in $THREADS; do for side in "${sides[@]}"; do
    sync; echo 3 > /proc/sys/vm/drop_caches
    stats "$W/s0.json"
    t0=$(now); mount_side $side; t1=$(now)
    out=$(python3 "$W/read.py" "$M" $order $th "$PASS_TIMEOUT") || die "$side $order $th: reading failed (logs in $LOG)"
    t2=$(now)
    read -r walk rd files total bytes <<< "$out"
    umount_side $side
    counters
    if [ $side = packfs ]; then crosscheck $g $by; fi
    ms=$(python3 -c "print('%.2f' % ($t1 - $t0))"); secs=$(python3 -c "print('%.2f' % ($t2 - $t0))")
    fl=$files; [ "$files" = "$total" ] || fl="$files/$total"
    echo "$side $order $th $secs $fl $g $by $(ratio $by $ISIZE) | $ms $walk $rd $other $wire"
    printf '%s\n' "$(date -u +%FT%TZ) $NAME $LAT $run $side $order $th $secs $files $total $g $by $ISIZE $ms $walk $rd $other $wire" \
      | tr ' ' '\t' >> "$TSV"
  done; done; done
done

# Summary of this invocation's passes: median seconds (full passes only), ratios
tail -n $((RUNS * $(wc -w <<< "$ORDERS") * $(wc -w <<< "$THREADS") * NS)) "$TSV" | python3 -c '
import sys, statistics as st, collections as c
t = c.defaultdict(list); g = c.defaultdict(list); p = c.defaultdict(list); q = c.defaultdict(list)
for l in sys.stdin:
    f = l.rstrip("\n").split("\t")
    side, order, th, secs, files, total, gets, by, isz = f[4], f[5], f[6], float(f[7]), int(f[8]), int(f[9]), int(f[10]), int(f[11]), int(f[12])
    k = (order, th)
    g[k + (side,)].append((gets, by / isz))
    t[k + (side,)].append(secs if files == total else float("inf"))
    if files < total:  # cut by PASS_TIMEOUT: mount + walk + read time projected from the files read
        p[k + (side,)].append(float(f[13]) + float(f[14]) + float(f[15]) * total / max(files, 1))
        q[k + (side,)].append(secs)
print("# median secs (inf: a pass hit PASS_TIMEOUT; ~N: its full pass projected from the files read);")
print("# packfs/s3fs, packfs/ratarmount (<X(~Y): the other side timed out: bound, projection); GETs/x_image of the last pass")
for k in sorted({k[:2] for k in t}):
    m = {s: st.median(t[k + (s,)]) for (o, th, s) in t if (o, th) == k}
    def r(a, b):
        if a not in m or b not in m or m[a] == float("inf"): return "-"
        if m[b] == float("inf"): return "<%.3f(~%.4f)" % (m[a] / min(q[k + (b,)]), m[a] / st.median(p[k + (b,)]))
        return "%.2f" % (m[a] / m[b])
    show = lambda s, v: "%s %.2f" % (s, v) if v != float("inf") else "%s inf(~%.0f)" % (s, st.median(p[k + (s,)]))
    print("# %s %s: %s | packfs/s3fs %s packfs/ratarmount %s | %s" % (k[0], k[1],
        " ".join(show(s, v) for s, v in sorted(m.items())), r("packfs", "s3fs"), r("packfs", "ratarmount"),
        " ".join("%s %d/%.2f" % (s, *g[k + (s,)][-1]) for s in sorted(m))))
'
