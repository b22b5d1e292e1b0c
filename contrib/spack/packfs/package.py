# A Spack recipe for packfs, built with Spack's Cargo build system
# (CargoPackage: `cargo install --root PREFIX --path .` from the source tree).
# Use it from a repository of your own (docs/INSTALL.md):
#   spack repo create ~/spack-packfs && cp -r contrib/spack/packfs ~/spack-packfs/packages/
#   spack repo add ~/spack-packfs
# The source is scripts/release.sh's packfs-VERSION.tar.gz (`git archive`).
# There is no public download yet, hence no `url`: point Spack at the
# unpacked tarball or a checkout with
#   spack develop --path DIR packfs@=0.1.0 && spack install packfs
# (in an environment). Once the tarball has a URL, add `url = ...` and the
# version's sha256 (`sha256sum packfs-0.1.0.tar.gz`).

from spack.package import *


class Packfs(CargoPackage):
    """Pack many small files into one SquashFS or ZIP image and mount it
    without root (FUSE), from a local file, s3:// or http(s)://."""

    license("MIT OR Apache-2.0")

    version("0.1.0")

    # Cargo.toml's rust-version.
    depends_on("rust@1.87:", type="build")
    # The bundled C codecs (zstd, xz, libdeflate) and aws-lc build with cc.
    depends_on("c", type="build")
    # Mounting needs fusermount3 (setuid, from the OS's fuse3 package) and
    # /dev/fuse at run time: not something Spack can install.

    @property
    def build_args(self):
        return ["--locked", "--bin", "packfs"]

    @run_after("install")
    def install_man_and_completions(self):
        packfs = Executable(join_path(self.prefix.bin, "packfs"))
        packfs("man", "--out", join_path(self.prefix.share, "man", "man1"), output=str)
        completions = join_path(self.prefix.share, "completions")
        mkdirp(completions)
        for shell, name in (("bash", "packfs.bash"), ("zsh", "_packfs"), ("fish", "packfs.fish")):
            with open(join_path(completions, name), "w") as f:
                f.write(packfs("completions", shell, output=str))

    def setup_run_environment(self, env):
        env.prepend_path("MANPATH", self.prefix.share.man)
