#!/usr/bin/env bash
# Builds and tests the Python package (python/): a venv in target/pyvenv
# with the `test` extra and torch (scripts/python_env.sh), a wheel from
# `maturin build` installed into it (the same build `pip install ./python`
# runs through PEP 517; tests/test_wheel.py checks the wheel itself), then
# pytest on python/tests. Run after scripts/setup.sh (it needs
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

# The venv and its PyPI packages (waits for a run of it still in progress).
scripts/python_env.sh
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
# The extension is built in dev profile into the main target directory:
# the main workspace's build has compiled the shared dependencies the same
# way already (python/Cargo.toml copies its profiles and its lock pins the
# same versions). A release wheel is `maturin build --release`.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target}
wheels=$CARGO_TARGET_DIR/wheels
rm -f "$wheels"/packfs-*.whl
"$venv/bin/maturin" build --quiet --profile dev --manifest-path python/Cargo.toml \
    --interpreter "$venv/bin/python" --out "$wheels"
wheel=$(ls "$wheels"/packfs-*.whl)
"${pip[@]}" install --force-reinstall --no-deps "$wheel"
export PACKFS_WHEEL=$wheel
cd python
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
