#!/usr/bin/env bash
# Creates the Python test venv (target/pyvenv, reused) and installs the
# PyPI packages the Python tests need: maturin, the `test` extra of
# python/pyproject.toml, s3fs, and torch. Idempotent; holds a lock on the
# venv so that two runs never install into it at once. (Running it in the
# background while cargo builds gained nothing on two cores: the cold
# build took 10m22s instead of 9m17s, about what the install it hid takes.)
#
# Env: PYTHON (default python3), PACKFS_PY_VENV (default target/pyvenv),
# PACKFS_PY_TORCH=0 to leave torch out.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${PACKFS_PY_VENV:-$(pwd)/target/pyvenv}
python=${PYTHON:-python3}
mkdir -p "$(dirname "$venv")"
exec {lock}>"$venv.lock"
flock "$lock"

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install --upgrade pip
"${pip[@]}" install 'maturin>=1.9.4,<2.0'
# The `test` extra's requirements, without building the package (a
# `./python[test]` install would build a release extension): read from
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
