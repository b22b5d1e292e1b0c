#!/usr/bin/env bash
# benches/loaders/run.sh [run.py options]: set up a venv with every side's dependencies from PyPI (once), install
# the packfs Python package, then run run.py. The first setup's wall time and the venv's size on disk are written to
# $VENV/install.json (torch from PyPI carries the CUDA libraries: several GB).
#
# Environment: VENV (default /tmp/loaders-venv), PACKFS_PY (the python/ package dir to install; default this
# repository's python/), PACKFS (the CLI binary; default target/release/packfs of this repository),
# REINSTALL_PACKFS=1 to reinstall the Python package (after its sources changed).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
VENV=${VENV:-/tmp/loaders-venv}
PACKFS_PY=${PACKFS_PY:-$repo/python}
export PACKFS=${PACKFS:-$repo/target/release/packfs}

if [ ! -x "$VENV/bin/python" ] || [ ! -f "$VENV/install.json" ]; then
    start=$(date +%s.%N)
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q -r "$here/requirements.txt"
    end=$(date +%s.%N)
    bytes=$(du -sb "$VENV" | cut -f1)
    torch_bytes=$(du -sbc "$VENV"/lib/python3*/site-packages/{torch,nvidia,triton} 2>/dev/null | tail -1 | cut -f1)
    printf '{"seconds": %.1f, "venv_bytes": %s, "torch_nvidia_triton_bytes": %s, "torch": "%s"}\n' \
        "$(echo "$end - $start" | bc)" "$bytes" "$torch_bytes" \
        "$("$VENV/bin/python" -c 'import torch; print(torch.__version__)')" > "$VENV/install.json"
    echo "venv ready: $(cat "$VENV/install.json")" >&2
fi
if [ -d "$PACKFS_PY" ] && { [ "${REINSTALL_PACKFS:-0}" = 1 ] || ! "$VENV/bin/python" -c 'import packfs' 2>/dev/null; }; then
    "$VENV/bin/pip" install -q --force-reinstall --no-deps "$PACKFS_PY"
fi
exec "$VENV/bin/python" "$here/run.py" "$@"
