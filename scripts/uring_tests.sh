#!/usr/bin/env bash
# The FUSE suite once more with every mount served by the io_uring queues
# (`PACKFS_TRANSPORT=uring`, read by `packfs mount` when --transport is not
# given), then the transport tests that switch the kernel's settings
# (tests/suite/transport.rs). Needs root and Linux 6.14+ with
# CONFIG_FUSE_IO_URING; puts enable_uring and kernel.io_uring_disabled back
# as they were on any exit.
set -euo pipefail
cd "$(dirname "$0")/.."

param=/sys/module/fuse/parameters/enable_uring
sysctl=/proc/sys/kernel/io_uring_disabled
if [ ! -w "$param" ] || [ ! -w "$sysctl" ]; then
    echo "uring_tests: $param and $sysctl must be writable (root, Linux 6.14+ with CONFIG_FUSE_IO_URING)" >&2
    exit 1
fi
old_param=$(cat "$param")
old_sysctl=$(cat "$sysctl")
trap 'echo "$old_param" > "$param"; echo "$old_sysctl" > "$sysctl"' EXIT
echo Y > "$param"
echo 0 > "$sysctl"

# The modules whose tests exercise what a transport carries: every kind of
# request, unmount and a killed daemon, EIO from failed storage, stats,
# negative entries, readahead, ioctl (venv). Modules that mount only to reach
# something else (packing faults, ZIP packing, Slurm, moto, bubblewrap, exit
# codes, jobs) run once, in the main suite: a second run would test the same
# requests again and cost CI minutes.
modules=(bench_cli:: load:: mount_errors:: mount_squashfs:: mount_zip:: order:: read_faults::
    regression:: remote_http:: shards:: venv::)
PACKFS_TRANSPORT=uring cargo test --test tests -- --test-threads=2 "${modules[@]}"
cargo test --test tests transport:: -- --ignored --test-threads=1
