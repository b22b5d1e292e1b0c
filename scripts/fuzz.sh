#!/usr/bin/env bash
# Runs each fuzz target for SECONDS, one after the other, on one core.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     (default: 600 s; squashfs zip any tar)
#
# Needs nightly Rust and cargo-fuzz (`cargo install cargo-fuzz`). Builds the
# seed images first when fuzz/seeds/ is missing (scripts/fuzz_seeds.sh).
# Each target reads its corpus (fuzz/corpus/TARGET, grown by the run), the
# seeds and the regression inputs (tests/fuzz_regressions/TARGET). A crash,
# timeout (-timeout=10 s per input) or out-of-memory (-rss_limit_mb=2048)
# is copied from fuzz/artifacts/TARGET/ into tests/fuzz_regressions/TARGET/,
# where `cargo test` replays it (tests/suite/fuzz_regressions.rs); the script then
# goes on with the next target and exits 1 at the end. Minimise an input
# before committing it:
#   cargo +nightly fuzz tmin -a -s none TARGET tests/fuzz_regressions/TARGET/crash-...
#
# Environment: CARGO_TARGET_DIR for the nightly build (default fuzz/target),
# FUZZ_ARGS for extra libFuzzer flags, PACKFS / PACKFS_TARGET_DIR for the
# seeds (see fuzz_seeds.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-600}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(squashfs zip any tar)
cd "$root"

cargo +nightly fuzz --version >/dev/null 2>&1 || {
    echo "fuzz.sh: needs cargo-fuzz on nightly: rustup toolchain install nightly && cargo install cargo-fuzz" >&2
    exit 2
}
if [ ! -d fuzz/seeds/squashfs ] || [ ! -d fuzz/seeds/zip ] ||
    [ -z "$(ls -A fuzz/seeds/squashfs)" ] || [ -z "$(ls -A fuzz/seeds/zip)" ]; then
    scripts/fuzz_seeds.sh fuzz/seeds
fi

# One core: libFuzzer runs one process; the readers' rayon pool (preload)
# gets one thread.
export RAYON_NUM_THREADS=1
# -a: debug assertions and overflow checks, as the stable tests have them.
# No sanitizer by default: the readers are safe Rust (ASan would instrument
# no unsafe code of ours, and not the C codecs, which cargo-fuzz builds
# without it) and it halves the executions; FUZZ_SANITIZER=address for it.
san=${FUZZ_SANITIZER:-none}
fuzz_flags=(-a -s "$san")
cargo +nightly fuzz build "${fuzz_flags[@]}"
failed=0
summary=()
for t in "${targets[@]}"; do
    case $t in
    squashfs) seeds=(fuzz/seeds/squashfs) ;;
    zip) seeds=(fuzz/seeds/zip) ;;
    any) seeds=(fuzz/seeds/squashfs fuzz/seeds/zip) ;;
    # Small archives of each dialect, kept with the regression inputs.
    tar) seeds=(tests/fuzz_regressions/tar) ;;
    *)
        echo "fuzz.sh: unknown target $t" >&2
        exit 2
        ;;
    esac
    corpus=fuzz/corpus/$t
    arts=fuzz/artifacts/$t
    regress=tests/fuzz_regressions/$t
    mkdir -p "$corpus" "$arts" "$regress"
    before=$(ls "$arts")
    log=fuzz/artifacts/$t.log
    echo "fuzz.sh: $t for ${secs}s (log: $log)" >&2
    set +e
    # shellcheck disable=SC2086
    cargo +nightly fuzz run "${fuzz_flags[@]}" "$t" "$corpus" "${seeds[@]}" "$regress" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 \
        -dict="$root/fuzz/images.dict" -print_final_stats=1 ${FUZZ_ARGS:-} >"$log" 2>&1
    rc=$?
    set -e
    # The last status line (#N DONE/pulse ... corp: units/bytes) and the totals.
    last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
    took=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
    line="$t: rc=$rc execs=${execs:-?} exec/s=${rate:-?} time=${took:-?}s peak_rss=${rss:-?}MB corpus=$(ls "$corpus" | wc -l) files | $last"
    new=$(comm -13 <(echo "$before") <(ls "$arts") || true)
    if [ "$rc" -ne 0 ] || [ -n "$new" ]; then
        failed=1
        for f in $new; do
            cp "$arts/$f" "$regress/$f"
            line="$line
  found: $regress/$f"
        done
        [ -n "$new" ] || line="$line
  failed without an artifact: see $log"
        grep -E -A40 'ERROR: libFuzzer|panicked at|==[0-9]+==ERROR' "$log" | head -60 >&2 || true
    fi
    summary+=("$line")
done
echo "fuzz.sh: summary"
printf '%s\n' "${summary[@]}"
exit "$failed"
