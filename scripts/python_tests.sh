#!/usr/bin/env bash
# Builds and tests the Python package (python/): a venv in target/pyvenv
# (reused), a wheel from `maturin build` installed into it (the same build
# `pip install ./python` runs through PEP 517; tests/test_wheel.py checks
# the wheel itself), the `test` extra, torch, then pytest on python/tests. Run after scripts/setup.sh (it needs
# python3-venv, zip, unzip, squashfs-tools; the kernel reference mounts
# need root). Extra arguments go to pytest.
#
# Env: PYTHON (default python3), PACKFS_PY_VENV (default target/pyvenv),
# PACKFS_BIN (the CLI the fixtures are packed with; default: cargo builds
# it), PACKFS_PY_TORCH=0 to leave torch out (its tests then skip, or fail
# under CI).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
venv=${PACKFS_PY_VENV:-$repo/target/pyvenv}
python=${PYTHON:-python3}

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install --upgrade pip
# The extension is built in dev profile into the main target directory:
# the main workspace's build has compiled the shared dependencies the same
# way already (python/Cargo.toml copies its profiles and its lock pins the
# same versions). A release wheel is `maturin build --release`.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target}
"${pip[@]}" install 'maturin>=1.9.4,<2.0'
wheels=$CARGO_TARGET_DIR/wheels
rm -f "$wheels"/packfs-*.whl
"$venv/bin/maturin" build --quiet --profile dev --manifest-path python/Cargo.toml \
    --interpreter "$venv/bin/python" --out "$wheels"
wheel=$(ls "$wheels"/packfs-*.whl)
"${pip[@]}" install --force-reinstall --no-deps "$wheel"
export PACKFS_WHEEL=$wheel
# The `test` extra's requirements, without building the package a second
# time (`./python[test]` would build a release extension): read from
# pyproject.toml, installed in one resolution with s3fs so that pip picks
# one botocore for boto3, moto and s3fs. The lower bound matters: without
# it pip keeps the newest boto3 and falls back to s3fs 0.4 (2020), the last
# release that does not pin botocore through aiobotocore.
mapfile -t test_reqs < <("$venv/bin/python" - <<'PY'
import tomllib
with open("python/pyproject.toml", "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["optional-dependencies"]["test"]))
PY
)
"${pip[@]}" install "${test_reqs[@]}" "s3fs>=2024.1"
if [ "${PACKFS_PY_TORCH:-1}" != 0 ] && ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
    # PyPI's torch is the CUDA build: about 3 minutes and 5 GB here.
    "${pip[@]}" install torch
fi
cd python
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
