#!/usr/bin/env bash
# The mount benchmark of docs/benchmarks/reads.md, in one run: the same image read
# through packfs, the kernel's SquashFS driver and squashfuse_ll, against the
# raw tree, with the page cache dropped and fresh mounts for every cold run.
#
#   benches/mount_matrix.sh RAW_DIR IMAGE OUT_PREFIX [WORKLOADS] [THREADS]
#
# Needs root (kernel loop mount, drop_caches) and a release build.
set -euo pipefail
raw=$1 img=$2 out=$3
workloads=${4:-walk,sequential,shuffle}
threads=${5:-1,4}
bin=$(dirname "$0")/../target/release/packfs
k=$(mktemp -d /var/tmp/bench-kernel.XXXX)
s=$(mktemp -d /var/tmp/bench-squashfuse.XXXX)
cleanup() { umount "$k" 2>/dev/null || true; fusermount3 -u "$s" 2>/dev/null || true; rmdir "$k" "$s"; }
trap cleanup EXIT
mount -t squashfs -o loop,ro "$img" "$k"
mounts=(--mountpoint "kernel=$k")
if command -v squashfuse_ll >/dev/null; then
    squashfuse_ll "$img" "$s"
    mounts+=(--mountpoint "squashfuse_ll=$s")
fi
"$bin" bench --raw "$raw" --image "$img" --self-mount "${mounts[@]}" \
    --workload "$workloads" --threads "$threads" --epochs 2 \
    --json "$out.json" --plot "$out.svg" | tee "$out.txt"
