#!/usr/bin/env bash
# scripts/easybuild_test.sh [WORKDIR]
#
# Builds packfs with real EasyBuild (from PyPI, in a venv) from the committed
# contrib/easybuild/packfs-VERSION.eb and a source tarball of HEAD
# (`git archive`, as release.sh makes it), then loads the module with Lmod
# (Debian's lmod) and uses it:
#   module load packfs && packfs --version && packfs pack ... && packfs ls ...
# The crates come from cargo's own download (`cargo fetch`), laid out as
# EasyBuild's source path wants them, as a site whose build nodes have no
# internet does; EasyBuild checks them against the easyconfig's sha256s and
# builds offline.
# This is a full release build of packfs and its crates: tens of minutes on
# two cores, so it is a script to run, not part of the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
work=${1:-/var/tmp/packfs-easybuild-test}
venv=/var/tmp/packfs-easybuild
rm -rf "$work"
mkdir -p "$work"/{sources/p/packfs,build,install,tmp}

python3 scripts/easyconfig.py --check
version=$(python3 -c 'import tomllib; print(tomllib.load(open("Cargo.toml","rb"))["workspace"]["package"]["version"])')
eb_file=contrib/easybuild/packfs-$version.eb

# EasyBuild from PyPI, Lmod from Debian.
if [ ! -x "$venv/bin/eb" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q easybuild
fi
if [ ! -f /usr/share/lmod/lmod/init/bash ]; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq lmod >/dev/null
fi
# shellcheck disable=SC1091
source /usr/share/lmod/lmod/init/bash

# The crates, as a site without internet on its build nodes provides them:
# fetched by cargo (on a login node, or any machine with crates.io), then
# put where EasyBuild looks for them, named as the Cargo easyblock names them
# (a .crate file is the .tar.gz EasyBuild expects; the easyconfig's
# checksums, from Cargo.lock, verify them).
cargo fetch --locked --manifest-path Cargo.toml >/dev/null
mkdir -p "$work/sources/c/crates.io"
python3 - "$work/sources/c/crates.io" <<'PY'
import glob, os, shutil, sys, tomllib
home = os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo"))
caches = glob.glob(os.path.join(home, "registry/cache/index.crates.io-*"))
for p in tomllib.load(open("Cargo.lock", "rb"))["package"]:
    if p.get("source", "").startswith("registry+"):
        name = f"{p['name']}-{p['version']}"
        src = next((os.path.join(c, name + ".crate") for c in caches
                    if os.path.exists(os.path.join(c, name + ".crate"))), None)
        if src is None:
            sys.exit(f"easybuild_test: {name}.crate is not in cargo's cache")
        shutil.copy(src, os.path.join(sys.argv[1], name + ".tar.gz"))
PY

git archive --format=tar.gz --prefix="packfs-$version/" \
    -o "$work/sources/p/packfs/packfs-$version.tar.gz" HEAD

export PATH="$venv/bin:$PATH"
export EASYBUILD_PREFIX=$work EASYBUILD_SOURCEPATH=$work/sources \
    EASYBUILD_BUILDPATH=$work/build EASYBUILD_INSTALLPATH=$work/install \
    EASYBUILD_TMPDIR=$work/tmp EASYBUILD_MODULES_TOOL=Lmod EASYBUILD_MODULE_SYNTAX=Lua
# The Rust build dependency is the toolchain on PATH here (rustup's cargo).
start=$(date +%s)
eb "$eb_file" --filter-deps=Rust --detect-loaded-modules=ignore --allow-use-as-root-and-accept-consequences
echo "easybuild_test: eb took $(( $(date +%s) - start )) s"

module use "$work/install/modules/all"
module load packfs
command -v packfs
packfs --version
mkdir -p "$work/tree/sub"
echo "hello from EasyBuild" >"$work/tree/sub/hello.txt"
packfs pack -q "$work/tree" -o "$work/tree.sqfs"
listing=$(packfs ls -R "$work/tree.sqfs")
echo "$listing"
grep -q hello.txt <<<"$listing"
[ "$(packfs cat "$work/tree.sqfs" sub/hello.txt)" = "hello from EasyBuild" ]
man -w packfs-pack >/dev/null
echo "easybuild_test: packfs $version built by EasyBuild, loaded with Lmod, packs and lists"
