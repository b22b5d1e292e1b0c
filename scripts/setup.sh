#!/usr/bin/env bash
# Installs the system packages packfs and its tests need (Debian/Ubuntu).
# fuse3: fusermount3 for unprivileged mounts; squashfs-tools, zip, unzip,
# libarchive-tools (bsdtar): the reference writers/readers the tests compare
# against; attr: setfattr/getfattr. man-db, groff-base: `man -l` renders the
# generated pages in tests; file, musl-tools: scripts/release.sh (static musl build);
# busybox, git, xz-utils, zstd, bzip2, lz4, tabix (bgzip): archive writers and compressors
# whose output the archive-packing tests read.
set -euo pipefail
pkgs=(fuse3 squashfs-tools zip unzip libarchive-tools p7zip-full attr python3 kmod procps
      slurm-wlm munge bubblewrap squashfuse strace python3-venv python3-pip
      man-db groff-base file musl-tools busybox git xz-utils zstd bzip2 lz4 tabix)
missing=()
for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The kernel's squashfs and loop drivers are the reference reader in tests.
if [ "$(id -u)" -eq 0 ]; then
    modprobe fuse 2>/dev/null || true
    modprobe loop 2>/dev/null || true
    modprobe squashfs 2>/dev/null || true
fi
[ -e /dev/fuse ] || { echo "setup: /dev/fuse is missing; FUSE mounts will not work here" >&2; exit 1; }
echo "setup: system packages ready"
