#!/usr/bin/env bash
# The FUSE transport benchmark (docs/benchmarks/uring.md), in one run: cold passes over
# every file of a tree (sorted = `sequential`, `shuffle`) at 1 and 4 reader
# threads, read from the raw tree, from kernel EROFS (mkfs.erofs -zlz4hc) and
# from packfs on each transport (`dev`, `uring`); all of it twice, with the
# vCPUs left to halt when idle and with /dev/cpu_dma_latency held at 0; then
# the sequential throughput of one large file on each packfs transport.
#
#   benches/transport.sh RAW_DIR OUT_DIR [THREADS] [BIG_FILE_MIB]
#
# e.g. benches/transport.sh /tmp/corpus/linux-source-6.1 /var/tmp/transport
# Needs root (loop mount, drop_caches, enable_uring, /dev/cpu_dma_latency),
# a release build (or PACKFS_BIN=path), mkfs.erofs (erofs-utils) and Linux 6.14+ for `uring`.
#
# Every packfs pass has a fresh mount (`packfs mount --transport T`), so its
# cold pass starts with an empty block cache. Per pass, OUT_DIR/passes.tsv has its
# round (see ROUNDS), idle mode, side, workload and threads, then:
#   seconds        the pass, as `packfs bench` times it (--epochs 1, cold)
#   fuse_requests  requests the daemon answered (`--stats`), 0 for kernel sides
#   uring_requests of those, answered through the io_uring queues
#   daemon_cpu_s   the packfs daemon's user+system CPU seconds over the pass
#   machine_cpu_s  non-idle CPU seconds of the whole machine over the bench
#                  invocation (its scan of the raw tree to plan the pass
#                  included, the same for every side; NA for raw, which the
#                  bench only times next to a mount)
#   halts          times a vCPU halted over that invocation (the haltpoll
#                  cpuidle state's usage summed over CPUs; NA without it)
# Sides: raw, erofs, and the packfs sides in SIDES (default all of them):
#   dev           fuser's /dev/fuse threads (--dev-spin 0)
#   dev-spin      packfs's own /dev/fuse threads, spinning SPIN_US microseconds (default
#                 50) before they sleep (mount --dev-spin)
#   dev-spinN     the same, spinning N microseconds (e.g. SIDES="dev-spin20 dev-spin200")
#   uring         the io_uring queues
#   uring-nostay  the queues without the SCHED_IDLE submission that keeps a
#                 woken caller on its CPU (PACKFS_URING_STAY=0)
#   uring-keep    the queues, the daemon keeping blocks it has served in full
#                 in its cache (PACKFS_RELEASE_SERVED=0; the default releases them)
#   uring-threadsN  the queues, each served by N threads holding one entry each
#                 (PACKFS_URING_THREADS=N; see ARCHITECTURE "FUSE transports")
#   uring-hot     the floor of any daemon on the queues: the whole image decoded
#                 into the daemon's cache at mount (--preload --cache-size HOT_CACHE,
#                 default 4G), then the page cache dropped, so that the pass is
#                 FUSE requests answered from memory (no decoding, no image reads)
# IDLES (default "halt poll") picks the idle modes, BIG_MIB=0 skips the large file,
# BIG_ROUNDS (default 1) repeats its reads, alternating transports.
# ROUNDS (default 1) repeats the whole set of passes (every idle mode, in turn); each
# round turns the order of EROFS and the packfs sides by one (the raw tree stays first),
# so that each side's neighbours change; OUT_DIR/summary.tsv then has, per idle mode, workload,
# threads and side, the median seconds over the rounds and the median of the per-round
# ratios to EROFS (each round's side over the EROFS pass of that round).
# and OUT_DIR/big.tsv the large file's read rate per transport, as `dd bs=1M` prints it (cold).
set -euo pipefail
raw=$(realpath "$1") out=$2
threads=${3:-1,4}
big_mib=${4:-2048}
sides=${SIDES:-dev dev-spin uring uring-nostay}
idles=${IDLES:-halt poll}
spin_us=${SPIN_US:-50}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${PACKFS_BIN:-$here/target/release/packfs}
mkdir -p "$out"
work=$(mktemp -d /var/tmp/bench-transport.XXXX)
param=/sys/module/fuse/parameters/enable_uring
old_param=$(cat "$param")
dma_fd=
cleanup() {
    [ -n "$dma_fd" ] && eval "exec $dma_fd>&-"
    for m in "$work"/m-*; do umount "$m" 2>/dev/null || true; done
    echo "$old_param" > "$param"
    rm -rf "$work"
}
trap cleanup EXIT
echo Y > "$param"

img=$work/tree.sqfs
"$bin" pack "$raw" -o "$img" -q
erofs_img=$work/tree.erofs
mkfs.erofs -zlz4hc "$erofs_img" "$raw" >/dev/null
mkdir -p "$work/m-erofs" "$work/m-packfs"
mount -t erofs -o loop,ro "$erofs_img" "$work/m-erofs"

# Non-idle jiffies of the whole machine (user nice system irq softirq steal).
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
# Halts of every vCPU so far (cpuidle state 1 is haltpoll's "halt").
halts() {
    cat /sys/devices/system/cpu/cpu*/cpuidle/state1/usage 2>/dev/null | awk '{s+=$1} END {print NR ? s : "NA"}'
}
# user+system jiffies of a process.
proc_cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
delta() { if [ "$1" = NA ]; then echo NA; else echo $(($2 - $1)); fi; }

# bench_pass WORKLOAD THREADS ARGS...: one cold pass of each side.
bench_pass() {
    local wl=$1 th=$2
    shift 2
    "$bin" bench --raw "$raw" "$@" --workload "$wl" --threads "$th" --epochs 1 \
        --no-verify --json "$work/pass.json" >/dev/null
}
# seconds LABEL: the pass time of side LABEL in the last bench_pass.
seconds() {
    python3 -c 'import json,sys; print(next(r["seconds"] for r in json.load(open(sys.argv[1]))["runs"] if r["side"] == sys.argv[2]))' \
        "$work/pass.json" "$1"
}

printf 'round\tidle\tside\tworkload\tthreads\tseconds\tfuse_requests\turing_requests\tdaemon_cpu_s\tmachine_cpu_s\thalts\n' \
    > "$out/passes.tsv"
# erofs_pass WORKLOAD THREADS: EROFS in a bench of its own, so that
# machine_cpu_s is EROFS's alone.
erofs_pass() {
    local wl=$1 th=$2
    b0=$(busy) h0=$(halts)
    bench_pass "$wl" "$th" --no-raw --mountpoint "erofs=$work/m-erofs"
    b1=$(busy) h1=$(halts)
    printf '%s\t%s\terofs\t%s\t%s\t%s\t0\t0\t0\t%.2f\t%s\n' "$round" "$idle" "$wl" "$th" "$(seconds erofs)" \
        "$(echo "($b1 - $b0) / $hz" | bc -l)" "$(delta "$h0" "$h1")" >> "$out/passes.tsv"
}
# packfs_pass SIDE WORKLOAD THREADS: a fresh mount of the image for SIDE.
packfs_pass() {
    local side=$1 wl=$2 th=$3
    local t=${side%%-*} stay=1 spin=0 release=1 qthreads= extra=()
    case $side in
        uring-nostay) stay=0 ;;
        uring-hot) extra=(--preload --cache-size "${HOT_CACHE:-4G}") ;;
        uring-keep) release=0 ;;
        uring-threads*) qthreads=${side#uring-threads} ;;
        dev-spin) spin=$spin_us ;;
        dev-spin*) spin=${side#dev-spin} ;;
    esac
    local m=$work/m-packfs stats=$work/stats-$side.json
    rm -f "$stats"
    sync; echo 3 > /proc/sys/vm/drop_caches
    PACKFS_URING_THREADS=$qthreads PACKFS_URING_STAY=$stay PACKFS_DEV_SPIN_US=$spin PACKFS_RELEASE_SERVED=$release "$bin" mount --transport "$t" --stats "$stats" \
        "${extra[@]}" "$img" "$m"
    # The preload read the image; the pass must not find it in the page cache.
    [ ${#extra[@]} -eq 0 ] || { sync; echo 3 > /proc/sys/vm/drop_caches; }
    pid=$(pgrep -f " mount --transport $t --stats $stats" | head -1)
    c0=$(proc_cpu "$pid") b0=$(busy) h0=$(halts)
    bench_pass "$wl" "$th" --no-raw --mountpoint "packfs-$side=$m"
    c1=$(proc_cpu "$pid") b1=$(busy) h1=$(halts)
    secs=$(seconds "packfs-$side")
    "$bin" umount "$m"
    for _ in $(seq 100); do [ -s "$stats" ] && break; sleep 0.1; done
    read -r req ureq tr < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["requests_total"], d["uring_requests"], d["transport"])' "$stats")
    [ "$tr" = "$t" ] || { echo "transport.sh: asked for $t, served by $tr" >&2; exit 1; }
    printf '%s\t%s\tpackfs-%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t%.2f\t%s\n' "$round" "$idle" "$side" "$wl" "$th" "$secs" \
        "$req" "$ureq" "$(echo "($c1 - $c0) / $hz" | bc -l)" "$(echo "($b1 - $b0) / $hz" | bc -l)" \
        "$(delta "$h0" "$h1")" >> "$out/passes.tsv"
}
run_all() {
    local idle=$1
    # EROFS and the packfs sides in an order that turns by one side each
    # round: a side's time depends on the pass before it (EROFS right after
    # the raw tree's pass runs faster than elsewhere), so over ROUNDS equal
    # to the number of sides each side follows each other once.
    local order=(erofs $sides)
    local k=$(((round - 1) % ${#order[@]}))
    order=("${order[@]:k}" "${order[@]:0:k}")
    for wl in sequential shuffle; do
        for th in ${threads//,/ }; do
            # The raw tree first (the bench always needs a mount to compare:
            # EROFS, whose time in this invocation is not reported).
            bench_pass "$wl" "$th" --mountpoint "erofs=$work/m-erofs"
            printf '%s\t%s\traw\t%s\t%s\t%s\t0\t0\t0\tNA\tNA\n' "$round" "$idle" "$wl" "$th" "$(seconds raw)" \
                >> "$out/passes.tsv"
            for side in "${order[@]}"; do
                if [ "$side" = erofs ]; then
                    erofs_pass "$wl" "$th"
                else
                    packfs_pass "$side" "$wl" "$th"
                fi
            done
        done
    done
}

for round in $(seq "${ROUNDS:-1}"); do
    for idle in $idles; do
        if [ "$idle" = poll ]; then
            exec {dma_fd}>/dev/cpu_dma_latency
            printf '\0\0\0\0' >&"$dma_fd"
        fi
        run_all "$idle"
        if [ -n "$dma_fd" ]; then
            eval "exec $dma_fd>&-"
            dma_fd=
        fi
    done
done

umount "$work/m-erofs"
column -t "$out/passes.tsv"
# Medians over the rounds (see ROUNDS above).
python3 - "$out/passes.tsv" > "$out/summary.tsv" <<'PY'
import csv, statistics, sys
from collections import defaultdict
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
erofs = {(r["round"], r["idle"], r["workload"], r["threads"]): float(r["seconds"])
         for r in rows if r["side"] == "erofs"}
secs, ratios = defaultdict(list), defaultdict(list)
for r in rows:
    k = (r["idle"], r["workload"], r["threads"], r["side"])
    secs[k].append(float(r["seconds"]))
    ratios[k].append(float(r["seconds"]) / erofs[(r["round"],) + k[:3]])
print("idle\tworkload\tthreads\tside\trounds\tmedian_seconds\tmedian_ratio_to_erofs")
for k in secs:
    print("\t".join(k + (str(len(secs[k])), "%.3f" % statistics.median(secs[k]),
                          "%.3f" % statistics.median(ratios[k]))))
PY
column -t "$out/summary.tsv"
[ "$big_mib" -gt 0 ] || exit 0
# One large file, read sequentially, cold, on each transport.
mkdir -p "$work/big"
head -c "$((big_mib << 20))" /dev/urandom > "$work/big/big"
"$bin" pack "$work/big" -o "$work/big.sqfs" -q
rm -rf "$work/big"
printf 'round\ttransport\tMiB\trate\n' > "$out/big.tsv"
for round in $(seq "${BIG_ROUNDS:-1}"); do
    for t in dev dev-spin uring; do
        spin=0
        [ "$t" = dev-spin ] && spin=$spin_us
        sync; echo 3 > /proc/sys/vm/drop_caches
        PACKFS_DEV_SPIN_US=$spin "$bin" mount --transport "${t%%-*}" "$work/big.sqfs" "$work/m-packfs"
        mbs=$(dd if="$work/m-packfs/big" of=/dev/null bs=1M 2>&1 | awk '/copied/{print $(NF-1) $NF}')
        "$bin" umount "$work/m-packfs"
        printf '%s\t%s\t%s\t%s\n' "$round" "$t" "$big_mib" "$mbs" >> "$out/big.tsv"
    done
done
column -t "$out/big.tsv"
