#!/usr/bin/env bash
# scripts/release.sh OUT_DIR [--no-test]
#
# Builds the release of this checkout and writes into OUT_DIR:
#   packfs-VERSION-x86_64-linux.tar.gz (+ .sha256)  a static, stripped x86_64 binary with
#       bin/packfs, share/man/man1/packfs*.1, share/completions/{packfs.bash,_packfs,packfs.fish},
#       README.md, LICENSE-MIT, LICENSE-APACHE, docs/, THIRD_PARTY.tsv (the crates linked
#       into the binary and their licenses), SHA256SUMS (of every file in the tarball)
#   packfs-VERSION.tar.gz  the source (`git archive` of HEAD), for EasyBuild and Spack
#   packfs-VERSION-cp310-abi3-manylinux_2_17_x86_64.whl (+ .sha256)  the Python package for
#       glibc 2.17+ and CPython 3.10+, built with maturin --zig (tools from PyPI)
#
# Static linking: musl (x86_64-unknown-linux-musl) when rustup has or can add that target
# and musl-gcc is there (Debian: musl-tools) for the C codecs; else glibc with
# `-C target-feature=+crt-static`. musl is preferred: its resolver reads /etc/hosts and
# /etc/resolv.conf itself, where a static glibc still loads NSS modules at run time and
# would need the build machine's glibc on the machine that runs it.
#
# Then, unless --no-test: `file` and `ldd` must call the binary static, `man -l` must render
# every page, bash must load the completion, and the empty-root test
# (tests/suite/empty_root.rs, as root with bwrap) runs on this binary; auditwheel must call the
# wheel manylinux_2_17, and it must install into a fresh venv and read an image in a root
# where bwrap hides every Rust toolchain.
#
# No network is used beyond crates.io (cargo), PyPI (the wheel's build tools) and, for the musl
# target, rustup's own fetch.
set -euo pipefail

die() { echo "release: $*" >&2; exit 1; }
[ $# -ge 1 ] || die "usage: scripts/release.sh OUT_DIR [--no-test]"
out_dir=$1
test=1
[ "${2:-}" = "--no-test" ] && test=0
cd "$(dirname "$0")/.."
repo=$PWD
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)

for tool in cargo python3 file ldd sha256sum tar git; do
    command -v "$tool" >/dev/null || die "$tool is needed"
done

version=$(cargo metadata --no-deps --format-version 1 --offline 2>/dev/null \
    | python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"]=="packfs"))')
[ -n "$version" ] || die "cannot read the version from Cargo.toml"
name=packfs-$version-x86_64-linux

# --- the target -----------------------------------------------------------------------------
target=x86_64-unknown-linux-musl
rustflags=""
if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    rustup target add "$target" >/dev/null 2>&1 || true
fi
if rustup target list --installed 2>/dev/null | grep -qx "$target" && command -v musl-gcc >/dev/null; then
    echo "release: static musl build ($target)"
else
    target=x86_64-unknown-linux-gnu
    rustflags="-C target-feature=+crt-static"
    echo "release: no musl target or musl-gcc here; static glibc build ($target, +crt-static)" >&2
fi

# --- the binary -----------------------------------------------------------------------------
# --target keeps the RUSTFLAGS off build scripts and proc macros (which must stay dynamic).
# The profile's debug info is dropped and the symbols stripped: the binary ships alone.
export CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=symbols
RUSTFLAGS="$rustflags" cargo build --release --locked --target "$target" --bin packfs
target_dir=$(cargo metadata --no-deps --format-version 1 --offline \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
bin=$target_dir/$target/release/packfs

desc=$(file -b "$bin")
echo "release: file: $desc"
case $desc in
    *"statically linked"*|*"static-pie linked"*) ;;
    *) die "the binary is not static: $desc" ;;
esac
case $desc in *"not stripped"*) die "the binary is not stripped: $desc" ;; esac
if ldd_out=$(ldd "$bin" 2>&1); then
    case $ldd_out in
        *"statically linked"*|*"not a dynamic executable"*) ;;
        *) die "ldd lists libraries: $ldd_out" ;;
    esac
fi
echo "release: ldd: ${ldd_out}"
"$bin" --version | grep -q '^target: .* (static)$' || die "--version does not say static: $("$bin" --version)"

# --- the tree -------------------------------------------------------------------------------
stage=$(mktemp -d "${TMPDIR:-/tmp}/packfs-release.XXXXXX")
trap 'rm -rf "$stage"' EXIT
root=$stage/$name
mkdir -p "$root/bin" "$root/share/man/man1" "$root/share/completions" "$root/docs"
install -m 0755 "$bin" "$root/bin/packfs"
"$root/bin/packfs" man --out "$root/share/man/man1" >/dev/null
"$root/bin/packfs" completions bash >"$root/share/completions/packfs.bash"
"$root/bin/packfs" completions zsh >"$root/share/completions/_packfs"
"$root/bin/packfs" completions fish >"$root/share/completions/packfs.fish"
install -m 0644 README.md LICENSE-MIT LICENSE-APACHE "$root/"
install -m 0644 docs/*.md "$root/docs/"

# The crates linked into the binary: normal dependencies of packfs for this target, from
# Cargo.lock's resolution (no proc macros or build scripts: none of their code is in it).
cargo metadata --format-version 1 --locked --filter-platform "$target" | python3 -c '
import json, sys
m = json.load(sys.stdin)
pkgs = {p["id"]: p for p in m["packages"]}
nodes = {n["id"]: n for n in m["resolve"]["nodes"]}
root = next(i for i, p in pkgs.items() if p["name"] == "packfs" and p["source"] is None)
seen, todo = set(), [root]
while todo:
    i = todo.pop()
    if i in seen:
        continue
    seen.add(i)
    for d in nodes[i]["deps"]:
        if any(k["kind"] is None for k in d["dep_kinds"]):
            if not any(t["kind"] == ["proc-macro"] for t in pkgs[d["pkg"]]["targets"]):
                todo.append(d["pkg"])
print("# crate\tversion\tlicense\tsource")
for i in sorted(seen, key=lambda i: (pkgs[i]["name"], pkgs[i]["version"])):
    p = pkgs[i]
    src = "this repository" if p["source"] is None else p["source"].split("+")[0]
    lic = p["license"] or ("see " + p["license_file"] if p.get("license_file") else "UNKNOWN")
    print("\t".join([p["name"], p["version"], lic, src]))
' >"$root/THIRD_PARTY.tsv"
grep -q $'\tUNKNOWN\t' "$root/THIRD_PARTY.tsv" && die "a crate has no license: $(grep $'\tUNKNOWN\t' "$root/THIRD_PARTY.tsv")"

(cd "$root" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)

# Reproducible archive: sorted names, root-owned, every mtime the commit's.
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
tarball=$out_dir/$name.tar.gz
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
    -cf - "$name" | gzip -n -9 >"$tarball"
(cd "$out_dir" && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256")
# The source, for EasyBuild and Spack (.git-commit carries the commit: see build.rs).
git archive --format=tar.gz --prefix="packfs-$version/" -o "$out_dir/packfs-$version.tar.gz" HEAD
echo "release: wrote $tarball and $out_dir/packfs-$version.tar.gz"

# --- the Python wheel -----------------------------------------------------------------------
# manylinux2014 (glibc 2.17) abi3: clusters run older glibc than this build machine (SLES 15:
# 2.31, RHEL 8: 2.28), and their users have no Rust. maturin links through zig, whose glibc
# stubs are of the version asked for, so no old-distribution container is needed; maturin,
# ziglang and auditwheel come from PyPI into a venv of the target directory.
tools=$target_dir/release-tools
if [ ! -x "$tools/bin/maturin" ] || [ ! -x "$tools/bin/auditwheel" ] || ! "$tools/bin/python" -c 'import ziglang' 2>/dev/null; then
    python3 -m venv "$tools"
    "$tools/bin/pip" install -q 'maturin>=1.9.4,<2' ziglang auditwheel \
        || die "cannot install maturin, ziglang and auditwheel from PyPI into $tools"
fi
rm -f "$out_dir"/packfs-"$version"-*.whl
PATH=$tools/bin:$PATH CARGO_TARGET_DIR=$target_dir/wheel-manylinux2014 \
    maturin build --release --locked --zig --compatibility manylinux2014 \
    --manifest-path python/Cargo.toml -o "$out_dir"
wheel=$(ls "$out_dir"/packfs-"$version"-cp310-abi3-*manylinux_2_17_x86_64*.whl 2>/dev/null | head -1)
[ -n "$wheel" ] || die "no cp310-abi3 manylinux_2_17 wheel in $out_dir: $(ls "$out_dir")"
shown=$("$tools/bin/auditwheel" show "$wheel" 2>&1) || die "auditwheel show $wheel: $shown"
echo "$shown" | tr '\n' ' ' | grep -q 'consistent with the following platform tag: *"manylinux_2_17_x86_64"' \
    || die "auditwheel does not call $wheel manylinux_2_17: $shown"
(cd "$out_dir" && sha256sum "$(basename "$wheel")" >"$(basename "$wheel").sha256")
echo "release: wrote $wheel (auditwheel: manylinux_2_17_x86_64)"

[ $test = 1 ] || exit 0

# --- checks on what was packed --------------------------------------------------------------
check=$(mktemp -d "${TMPDIR:-/tmp}/packfs-release-check.XXXXXX")
trap 'rm -rf "$stage" "$check"' EXIT
tar -C "$check" -xzf "$tarball"
(cd "$check/$name" && sha256sum --quiet -c SHA256SUMS)
"$check/$name/bin/packfs" --version
for page in "$check/$name"/share/man/man1/*.1; do
    err=$(MANWIDTH=80 MANROFFOPT=-ww man -l "$page" 2>&1 >/dev/null) || die "man -l $page failed: $err"
    [ -z "$err" ] || die "man -l $page: $err"
done
bash -c "source '$check/$name/share/completions/packfs.bash' && complete -p packfs" >/dev/null \
    || die "bash does not load the completion"
echo "release: man pages and completion load; the empty-root test on $name/bin/packfs:"
PACKFS_EMPTY_ROOT_BIN="$check/$name/bin/packfs" CI=${CI:-1} \
    cargo test --test tests -- --exact suite::empty_root::pack_inspect_mount_and_http_work_in_an_empty_root
# Legacy-LZMA SquashFS (mksquashfs -comp lzma): a static build decodes with
# the liblzma lzma-sys compiles in, older than the system's, which once
# refused every such image; read one with the released binary.
lz="$check/lzma"
mkdir -p "$lz/src/d"
seq 1 200000 >"$lz/src/d/numbers.txt"
head -c 300000 /dev/urandom >"$lz/src/random.bin"
mksquashfs "$lz/src" "$lz/l.sqfs" -comp lzma -noappend -quiet -no-progress >/dev/null \
    || die "mksquashfs -comp lzma failed (scripts/setup.sh installs squashfs-tools)"
for f in d/numbers.txt random.bin; do
    "$check/$name/bin/packfs" cat "$lz/l.sqfs" "$f" | cmp - "$lz/src/$f" \
        || die "$name/bin/packfs does not read $f of a legacy-LZMA image as written"
done
echo "release: $name/bin/packfs reads legacy-LZMA images"

# The wheel installs and reads an image in a fresh venv of a root with no Rust toolchain:
# bubblewrap hides rustup's and cargo's homes and the build tree, so that nothing can be
# compiled or imported from here.
command -v bwrap >/dev/null || die "bwrap is needed to check the wheel (Debian: bubblewrap)"
wv="$check/wheel"
mkdir -p "$wv/src/a"
printf 'hello from the wheel\n' >"$wv/src/a/hello.txt"
cp "$wheel" "$wv/"
"$check/$name/bin/packfs" pack "$wv/src" -o "$wv/w.sqfs" -q
hide=()
for d in "${RUSTUP_HOME:-$HOME/.rustup}" "${CARGO_HOME:-$HOME/.cargo}" "$repo"; do
    [ -d "$d" ] && hide+=(--tmpfs "$d")
done
bwrap --dev-bind / / "${hide[@]}" --setenv PATH /usr/local/bin:/usr/bin:/bin \
    --unsetenv CARGO_HOME --unsetenv RUSTUP_HOME --unsetenv CARGO_TARGET_DIR --unsetenv PYTHONPATH \
    bash -euo pipefail -c '
        if command -v cargo || command -v rustc; then echo "a Rust toolchain is visible"; exit 1; fi
        python3 -m venv "$1/venv"
        "$1/venv/bin/pip" install -q --no-index "$2"
        cd /
        "$1/venv/bin/python" -c "
import sys, packfs
img = packfs.Image(sys.argv[1])
assert img.read(\"a/hello.txt\") == b\"hello from the wheel\n\", img.read(\"a/hello.txt\")
print(\"release: the wheel reads\", sys.argv[1], \"in a root with no Rust, packfs\", packfs.__version__)
" "$1/w.sqfs"' check "$wv" "$wv/$(basename "$wheel")" >"$wv/log" 2>&1 || die "the wheel failed in a Rust-free root: $(cat "$wv/log")"
cat "$wv/log"
echo "release: $tarball passed its checks"
