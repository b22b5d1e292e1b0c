#!/usr/bin/env bash
# The main job on a small built-in example: build packfs, generate a small
# dataset-like tree, pack it into SquashFS, inspect it, mount it without
# extracting, check it against the source, unmount, and time reading the
# source against reading the mounted image (packfs bench).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release --quiet
bin=target/release/packfs
work=$(mktemp -d /var/tmp/packfs-demo.XXXXXX)
trap 'fusermount3 -u "$work/mnt" 2>/dev/null || true; rm -rf "$work"' EXIT

# A small "dataset": 20 classes x 100 samples of text and binary, plus this
# repository's own sources.
python3 - "$work/src" <<'PY'
import os, sys, random
root = sys.argv[1]
rng = random.Random(42)
for c in range(20):
    d = os.path.join(root, "train", f"class{c:02d}")
    os.makedirs(d)
    for i in range(100):
        with open(os.path.join(d, f"sample{i:03d}.txt"), "w") as f:
            f.write(" ".join(rng.choice(["cat", "dog", "bird", "fish"]) for _ in range(rng.randint(10, 2000))))
        with open(os.path.join(d, f"sample{i:03d}.bin"), "wb") as f:
            f.write(rng.randbytes(rng.randint(100, 20000)))
PY
cp -r mountfs packer src "$work/src/"

echo "== pack"
$bin pack "$work/src" -o "$work/demo.sqfs"
echo "== info"
$bin info "$work/demo.sqfs"
echo "== ls /"
$bin ls -l "$work/demo.sqfs" /
echo "== mount"
mkdir "$work/mnt"
$bin mount "$work/demo.sqfs" "$work/mnt"
diff -r "$work/src" "$work/mnt" && echo "mounted tree is identical to the source"
find "$work/mnt" | wc -l | xargs echo "entries visible through the mount:"
$bin umount "$work/mnt"
echo "== compare: the source directory against the image mounted by packfs"
# Each cell starts cold (as root that drops the machine's page cache; the
# bench says so); the table gives each side's time and the ratio.
$bin bench --raw "$work/src" --image "$work/demo.sqfs" --workload walk,sequential,shuffle --epochs 2
echo "== done"
