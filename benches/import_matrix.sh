#!/usr/bin/env bash
# The Python-import benchmark of docs/benchmarks/python-import.md: cold and warm
# `import MODULES` by 1 and 4 concurrent interpreters from the raw venv, the
# kernel's SquashFS mount and packfs's mount of the same image, on the local
# disk and through the --emulate-latency passthrough; then the daemon's FUSE
# request counts for one cold and four warm interpreters, with the kernel
# caching negative entries (the default) and without (--negative-ttl 0).
#
#   benches/import_matrix.sh VENV OUT_PREFIX [MODULES]
#   PARTS=local,latency,requests (default: all three) picks the sections.
#
# Needs root (kernel loop mount, drop_caches) and a release build.
set -euo pipefail
venv=$1 out=$2
modules=${3:-numpy,pandas,scipy.stats}
parts=${PARTS:-local,latency,requests}
want() { [[ ",$parts," == *",$1,"* ]]; }
bin=$(dirname "$0")/../target/release/packfs
img=$(mktemp -u /var/tmp/bench-venv.XXXX).sqfs
k=$(mktemp -d /var/tmp/bench-kernel.XXXX)
m=$(mktemp -d /var/tmp/bench-packfs.XXXX)
cleanup() {
    umount "$k" 2>/dev/null || true
    "$bin" umount "$m" 2>/dev/null || true
    rmdir "$k" "$m" 2>/dev/null || true
    rm -f "$img"
}
trap cleanup EXIT
"$bin" pack "$venv" -o "$img" -q
mount -t squashfs -o loop,ro "$img" "$k"
common=(--raw "$venv" --image "$img" --workload import --import "$modules"
        --threads 1,4 --epochs 3 --repeat 2)
if want local; then
    echo "== local disk: raw, kernel, packfs"
    "$bin" bench "${common[@]}" --self-mount --mountpoint "kernel=$k" \
        --json "$out-local.json" | tee "$out-local.txt"
fi
umount "$k"
if want latency; then
    echo "== --emulate-latency 500,100: raw, packfs"
    "$bin" bench "${common[@]}" --emulate-latency 500,100 \
        --json "$out-latency.json" | tee "$out-latency.txt"
fi
want requests || exit 0

code="import ${modules}"
echo "== daemon requests: 1 cold + 4 warm interpreters (--stats)" | tee "$out-requests.txt"
for ttl in default 0; do
    args=(--stats "$out-requests-ttl-$ttl.json")
    [ "$ttl" = default ] || args+=(--negative-ttl "$ttl")
    sync; echo 3 > /proc/sys/vm/drop_caches
    "$bin" mount "$img" "$m" "${args[@]}"
    for i in 1 2 3 4 5; do "$m/bin/python" -c "$code"; done
    "$bin" umount "$m"
    for _ in $(seq 100); do [ -e "$out-requests-ttl-$ttl.json" ] && break; sleep 0.1; done
    python3 - "$ttl" "$out-requests-ttl-$ttl.json" <<'PY' | tee -a "$out-requests.txt"
import json, sys
s = json.load(open(sys.argv[2]))
r = s["requests"]
print(f"negative-ttl {sys.argv[1]:>7}: {s['requests_total']} requests "
      f"(lookup {r['lookup']}, getattr {r['getattr']}, read {r['read']}, readdir {r['readdir']}), "
      f"{s['negative_lookups']} negative lookups")
PY
done
