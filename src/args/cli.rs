//! Command-line definition (clap derive).

use clap::{Parser, Subcommand, ValueEnum};
use mountfs::source::IoMode;
use mountfs::union::OnConflict;
use std::path::PathBuf;

/// `mount --negative-ttl` default: a year, as for positive entries.
pub const NEGATIVE_TTL_DEFAULT: u64 = 365 * 24 * 3600;

#[derive(Parser, Debug)]
#[command(
    name = "packfs",
    version = crate::version::SHORT,
    long_version = crate::version::long(),
    about = "Pack many small files into one SquashFS or ZIP image and mount it without root",
    after_help = crate::exit::TABLE
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Command,
    #[command(
        flatten,
        next_help_heading = "Remote images (s3://BUCKET/KEY, http(s)://HOST/PATH)"
    )]
    pub remote: RemoteArgs,
}

/// How `s3://` and `http(s)://` images are reached and read; accepted by
/// every command that takes an image (and by `pack -o s3://...`).
#[derive(clap::Args, Debug, Clone)]
pub struct RemoteArgs {
    /// S3 endpoint, e.g. https://lumidata.eu (default: $AWS_ENDPOINT_URL, the
    /// profile's endpoint_url, else AWS).
    // The URL is help text, not a rustdoc link.
    #[allow(rustdoc::bare_urls)]
    #[arg(long, global = true, value_name = "URL", value_parser = crate::args::values::endpoint)]
    pub endpoint: Option<String>,
    /// Profile in ~/.aws/credentials and ~/.aws/config (default: $AWS_PROFILE;
    /// keys in $AWS_ACCESS_KEY_ID/$AWS_SECRET_ACCESS_KEY win otherwise; no
    /// keys at all: anonymous requests, for public buckets).
    #[arg(long, global = true, value_name = "NAME")]
    pub profile: Option<String>,
    /// Bytes per range request (aligned), a power of two from 64K to 256M.
    #[arg(long, global = true, value_parser = packfs_bench::size::parse_size, default_value = "4M")]
    pub range_size: u64,
    /// Byte budget of the cache of fetched ranges [default: an eighth of the
    /// memory this process may use (RAM, or the job's or container's cgroup
    /// limit), 256M to 8G]; an image that fits is fetched once per mount.
    #[arg(long, global = true, value_parser = packfs_bench::size::parse_size)]
    pub range_cache: Option<u64>,
    /// Seconds a read may take, retries included, before it fails with EIO.
    #[arg(long, global = true, value_name = "SECONDS", default_value_t = 60)]
    pub remote_timeout: u64,
    /// Keep fetched bytes of remote images in DIR on this node (a local SSD,
    /// /tmp), checksummed, across restarts and shared by the packfs
    /// processes of the node: a second pass reads the disk, not the network.
    #[arg(long, global = true, value_name = "DIR")]
    pub disk_cache: Option<std::path::PathBuf>,
    /// Byte budget of --disk-cache, least recently used evicted first
    /// [default: half the free space of its filesystem].
    #[arg(long, global = true, value_parser = packfs_bench::size::parse_size, requires = "disk_cache")]
    pub disk_cache_size: Option<u64>,
}

impl RemoteArgs {
    pub fn options(&self) -> mountfs::remote::RemoteOptions {
        mountfs::remote::RemoteOptions {
            disk_cache: self.disk_cache(),
            ..self.settings()
        }
    }

    /// [`Self::options`] without opening the disk cache: for checking the
    /// values (opening it twice would warn twice about a bad directory).
    pub fn settings(&self) -> mountfs::remote::RemoteOptions {
        mountfs::remote::RemoteOptions {
            client: self.client(),
            range_size: self.range_size,
            cache_bytes: self.range_cache.unwrap_or_else(|| {
                default_range_cache(mountfs::memory_limit::limit(), self.range_size)
            }),
            ..Default::default()
        }
    }

    /// How objects are reached (endpoint, credentials, timeout), for the
    /// client alone: uploads, and reading an object as a stream.
    pub fn client(&self) -> packfs_objstore::ClientOptions {
        packfs_objstore::ClientOptions {
            endpoint: self.endpoint.clone(),
            profile: self.profile.clone(),
            timeout: std::time::Duration::from_secs(self.remote_timeout),
            ..Default::default()
        }
    }

    /// The `--disk-cache`, opened; a directory that cannot be used is a
    /// warning (remote reads work without it), not an error.
    fn disk_cache(&self) -> Option<std::sync::Arc<mountfs::remote::disk_cache::DiskCache>> {
        use mountfs::remote::disk_cache::DiskCache;
        let dir = self.disk_cache.as_ref()?;
        let budget = self
            .disk_cache_size
            .unwrap_or_else(|| DiskCache::default_budget(dir));
        match DiskCache::open(dir, budget) {
            Ok(c) => Some(std::sync::Arc::new(c)),
            Err(e) => {
                log::warn!("--disk-cache {}: {e}; not caching to disk", dir.display());
                None
            }
        }
    }

    /// The flags again, for a `packfs mount` started by `run` or `bench`.
    pub fn to_args(&self) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(e) = &self.endpoint {
            v.extend(["--endpoint".into(), e.clone()]);
        }
        if let Some(p) = &self.profile {
            v.extend(["--profile".into(), p.clone()]);
        }
        if let Some(c) = self.range_cache {
            v.extend(["--range-cache".into(), c.to_string()]);
        }
        if let Some(d) = &self.disk_cache {
            v.extend(["--disk-cache".into(), d.to_string_lossy().into_owned()]);
        }
        if let Some(n) = self.disk_cache_size {
            v.extend(["--disk-cache-size".into(), n.to_string()]);
        }
        v.extend([
            "--range-size".into(),
            self.range_size.to_string(),
            "--remote-timeout".into(),
            self.remote_timeout.to_string(),
        ]);
        v
    }
}

/// The range cache's default for a process that may use `limit` bytes:
/// an eighth of it, 256 MiB to 8 GiB, and always two ranges. Why this
/// large: what the cache cannot hold is fetched again, so a shuffled epoch
/// over an image larger than the cache fetches the image about as many
/// times as it is larger, while a reader through the kernel page cache
/// (s3fs) keeps the whole image. Memory is taken only as ranges arrive, so
/// a small image costs its own size.
pub fn default_range_cache(limit: u64, range_size: u64) -> u64 {
    (limit / 8).clamp(256 << 20, 8 << 30).max(2 * range_size)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Codec {
    Zstd,
    /// zlib/deflate; for ZIP the same as `deflate`.
    Gzip,
    /// ZIP's deflate (method 8); for SquashFS the same as `gzip`.
    Deflate,
    Lz4,
    Xz,
}

/// `pack --preset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Preset {
    /// The smallest standard SquashFS: xz 9e tuned for text, 1 MiB blocks,
    /// similarity order.
    Smallest,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutFormat {
    Squashfs,
    Zip,
}

#[derive(Subcommand, Debug)]
pub enum ShardsCommand {
    /// Write the manifest from the sidecars (*.shard.json) next to the shards.
    /// Takes the manifest path or the -o template the shards were packed with.
    Finalize {
        /// The manifest's path, or the -o template with {shard} the shards were packed with.
        manifest_or_template: String,
    },
    /// Check that every shard a manifest names is there with its size and blake3.
    Verify {
        /// The manifest (*.manifest.json).
        manifest: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Pack directories or archives into an image (format from the extension: .sqfs/.squashfs, .zip).
    #[command(override_usage = "packfs pack [OPTIONS] <SOURCE>... <-o IMAGE | IMAGE>")]
    Pack(PackArgs),
    /// Show the image's format, compression, sizes and counts.
    Info {
        /// The image: a file, s3://BUCKET/KEY or http(s)://HOST/PATH.
        image: PathBuf,
    },
    /// List a directory of the image (like `ls -l` with -l).
    Ls {
        /// The image: a file, s3://BUCKET/KEY or http(s)://HOST/PATH.
        image: PathBuf,
        /// The directory (or file) in the image to list.
        #[arg(default_value = "/")]
        path: PathBuf,
        /// One line per entry: mode, owner, size, date, name (and a symlink's target).
        #[arg(short, long)]
        long: bool,
        /// List the subdirectories too, all the way down.
        #[arg(short = 'R', long)]
        recursive: bool,
    },
    /// Write a file of the image to stdout.
    Cat {
        /// The image: a file, s3://BUCKET/KEY or http(s)://HOST/PATH.
        image: PathBuf,
        /// The file's path in the image.
        path: PathBuf,
    },
    /// Extract the image (or a subtree) into a directory.
    Extract {
        /// The image: a file, s3://BUCKET/KEY or http(s)://HOST/PATH.
        image: PathBuf,
        /// The directory to extract into (made if missing; must be empty).
        #[arg(short, long)]
        output: PathBuf,
        /// Subtree to extract.
        #[arg(long, default_value = "/")]
        path: PathBuf,
    },
    /// Mount an image read-only (returns once the mount is ready unless --foreground).
    /// A shard manifest, or several images, mount as one tree.
    #[command(override_usage = "packfs mount [OPTIONS] <IMAGE>... <MOUNTPOINT>")]
    Mount(MountArgs),
    /// Check a whole image (or every shard of a manifest): parse every table,
    /// decode every block, check every hash, checksum and CRC it has. Names
    /// each damaged file; exits 1 if any.
    Verify {
        /// The image or shard manifest: a file, s3://BUCKET/KEY or http(s)://HOST/PATH.
        image: PathBuf,
        /// Threads reading the image (default: all cores).
        #[arg(short = 'j', long, default_value_t = 0)]
        threads: usize,
        /// No progress bar, only the summary line and the damage found.
        #[arg(short, long)]
        quiet: bool,
    },
    /// Shard manifests: write one from the shards' sidecars, or check the shards.
    Shards {
        #[command(subcommand)]
        cmd: ShardsCommand,
    },
    /// Unmount a packfs mount.
    Umount {
        /// Where the image is mounted.
        mountpoint: PathBuf,
    },
    /// Mount images, run a command, unmount; exits with the command's status.
    /// A missing mountpoint (and its missing parents) is created, and removed
    /// again afterwards, so a job can mount on a fresh node-local path.
    Run(RunArgs),
    /// Compare reading a raw tree with reading its image through mounts
    /// (table on stdout, --json, --plot).
    Bench(Box<packfs_bench::BenchArgs>),
    /// Print the completion script for SHELL (bash: `source <(packfs
    /// completions bash)`; zsh: save as `_packfs` in $fpath; fish: save in
    /// ~/.config/fish/completions/packfs.fish).
    Completions {
        /// The shell to write the script for.
        shell: clap_complete::Shell,
    },
    /// Print packfs(1) in roff, or with --out DIR write it and one page per
    /// subcommand (packfs-pack.1, ...) into DIR.
    Man {
        /// Write every page into this directory instead of packfs(1) to stdout.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Internal: unmounts MOUNTPOINT when the daemon holding FD's pipe dies.
    #[command(hide = true)]
    UnmountWatcher {
        fd: i32,
        mountpoint: PathBuf,
        fsname: String,
    },
}

/// `packfs pack SOURCE... -o OUTPUT` (or `packfs pack SRC OUTPUT`).
#[derive(clap::Args, Debug)]
pub struct PackArgs {
    /// What to pack: a directory (its contents become the image's root), or
    /// an archive told by its content: tar (v7, ustar, GNU, PAX), plain or
    /// compressed with gzip, zstd, xz, bzip2 or lz4; `-` reads one from
    /// stdin. Several sources merge at the root. Without -o the last
    /// argument is the image (`packfs pack SRC IMAGE`, mksquashfs's order).
    #[arg(value_name = "SOURCE", required = true, num_args = 1..)]
    pub sources: Vec<PathBuf>,
    /// The one directory packed, when it is the only source (set by
    /// `pack::run` from `sources`).
    #[arg(skip)]
    pub src: PathBuf,
    /// Archive sources: drop this many leading components from each
    /// member's path, as `tar -x --strip-components`; members with no
    /// more are left out.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub strip_components: usize,
    /// Several sources: what a path given by two shows. `error` refuses and
    /// names both; `first` and `last` keep that source's entry (two
    /// directories always merge).
    #[arg(long, value_enum, default_value = "error")]
    pub on_conflict: PackConflict,
    /// Archive sources: a member archive whose path (or name) matches GLOB
    /// becomes a directory of its name without the archive extension,
    /// read from the stream without a temporary file (ImageNet's
    /// `n01440764.tar` -> `n01440764/`); repeatable.
    #[arg(long, value_name = "GLOB")]
    pub expand_nested: Vec<String>,
    /// The image file, or s3://BUCKET/KEY: packed to a temporary file in
    /// $TMPDIR, then sent as a multipart upload (the object appears only
    /// when complete; an error or a signal aborts the upload).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Override the format chosen from the output extension.
    #[arg(long, value_enum)]
    pub format: Option<OutFormat>,
    /// Codec: SquashFS takes zstd (default), gzip, lz4, xz; ZIP takes deflate (default) or zstd.
    #[arg(short, long, value_enum)]
    pub compression: Option<Codec>,
    /// Compression level (zstd 1-22, gzip 1-9, xz 0-9, or 0e-9e for xz's
    /// slower extreme variant as in `xz -9e`; ZIP deflate 0-9, 0 = stored);
    /// default: zstd 3, gzip 9, xz 6, ZIP deflate 6.
    #[arg(short, long, value_parser = crate::args::values::level)]
    pub level: Option<crate::args::values::Level>,
    /// xz only: LZMA2 settings beyond the level, as `xz --lzma2=` names them:
    /// `lc=N,lp=N,pb=N` (literal context, literal position and position
    /// bits; lc + lp at most 4, as the kernel's decoder requires),
    /// `nice=N` (2-273), `depth=N`. For source text `lc=4,lp=0,pb=0` makes
    /// smaller images. The image stays one every xz reader opens.
    #[arg(long, value_name = "KEY=N,...", value_parser = crate::args::values::xz_lzma2)]
    pub xz_lzma2: Option<packfs_format::codec::XzOptions>,
    /// Settings for a purpose: `smallest` = the smallest standard SquashFS
    /// packfs makes (`-c xz --level 9e --xz-lzma2 lc=4,lp=0,pb=0 -b 1M
    /// --order similarity`; slow: xz at its most thorough).
    #[arg(
        long,
        value_enum,
        conflicts_with_all = ["compression", "level", "xz_lzma2", "block_size", "order"]
    )]
    pub preset: Option<Preset>,
    /// Data block size, a power of two from 4K to 1M [default: 128K]
    /// (SquashFS images only).
    #[arg(short, long, value_parser = crate::args::values::block_size)]
    pub block_size: Option<u64>,
    /// Worker threads (default: all cores). The image is identical whatever the value.
    #[arg(short = 'j', long, default_value_t = 0, hide_default_value = true)]
    pub threads: usize,
    /// Leave out what matches this glob; repeatable. Without a `/` (but a
    /// trailing one) it matches names at any depth (`*.tmp`, `__pycache__`); with one, the path from
    /// SRC (`/build`, `./data/cache`, `logs/*.gz`: `*` stays within a name,
    /// `**` crosses directories). A trailing `/` matches directories only;
    /// a directory left out takes its contents with it. A pattern that
    /// matches nothing is warned about.
    #[arg(short, long, value_name = "GLOB", value_parser = crate::args::values::exclude)]
    pub exclude: Vec<String>,
    /// Overwrite OUTPUT if it exists.
    #[arg(short, long)]
    pub force: bool,
    /// Store every entry as owned by root (uid 0, gid 0).
    #[arg(long)]
    pub all_root: bool,
    /// Set every mtime (and the image time) to this many seconds since the
    /// epoch; defaults to $SOURCE_DATE_EPOCH when that is set.
    #[arg(long)]
    pub mtime: Option<u32>,
    /// Store file tails in their own blocks instead of packing them
    /// together (SquashFS images only).
    #[arg(long)]
    pub no_fragments: bool,
    /// Pack incompressible file tails (JPEG, PNG, archives) into fragment
    /// blocks too, as mksquashfs does. By default each gets a raw block of
    /// its own, which readers copy without decoding a shared block
    /// (SquashFS images only).
    #[arg(long, conflicts_with = "no_fragments")]
    pub fragment_incompressible: bool,
    /// Leave out the hash record (a hash of every block as stored, after
    /// the filesystem's end, which packfs checks on every read and
    /// `packfs verify` checks in full; standard readers never see it).
    /// zstd blocks keep their frame checksums (SquashFS images only).
    #[arg(long)]
    pub no_checksums: bool,
    /// Memory budget of the packer's bookkeeping (names, inodes, where each
    /// file's data went, the dedup index), e.g. 512M or 2G. A namespace
    /// larger than its share goes to sorted temporary files beside the
    /// image, removed when the pack ends; the dedup index stops growing at
    /// its share (later duplicates are then stored again). A directory
    /// whose tree passes an eighth of it is walked again straight into
    /// that namespace (with `--shards`, its split is measured by a walk
    /// into temporary files), except with `--order` or a Python
    /// environment, which keep the tree. Data buffers in flight and the
    /// codec's state come on top.
    #[arg(long, value_name = "SIZE", value_parser = packfs_bench::size::parse_size,
          default_value_t = packer::DEFAULT_MEMORY)]
    pub memory: u64,
    /// Python environments: rewrite, in the image only, what ties the venv
    /// to its build path (console-script shebangs, activate scripts,
    /// pyvenv.cfg, absolute links into it) so it works when mounted at PATH.
    #[arg(long, value_name = "PATH", value_parser = crate::args::values::absolute_path)]
    pub mount_at: Option<PathBuf>,
    /// Python environments: byte-compile the .py files lacking a valid .pyc
    /// into the image (with the venv's own interpreter), so imports from the
    /// read-only mount never compile in memory or try to write __pycache__.
    #[arg(long)]
    pub compile: bool,
    /// Treat SRC as a Python environment even without a pyvenv.cfg at its root.
    #[arg(long)]
    pub venv: bool,
    /// When OUTPUT's directory is on Lustre: stripe the image over N OSTs
    /// (-1: all of them), `auto` (by the data's size: none under 1 GiB, 4 to
    /// 16 up to 64 GiB, then all; docs/HPC.md), or `none` (the directory's
    /// default). Elsewhere ignored; never fails a pack.
    #[arg(
        long,
        value_name = "N|auto|none",
        default_value = "auto",
        allow_negative_numbers = true
    )]
    pub stripe_count: packer::lustre::StripeCount,
    /// Where file data sits in a SquashFS image (the tree is the same):
    /// `path` (depth-first by name, as mksquashfs), `similarity` (tails
    /// with alike content share fragment blocks: smaller images),
    /// `profile:FILE` (the files FILE lists, as `mount --record-access`
    /// writes it, first and contiguous, in its order; the rest by path) or
    /// `profile+similarity:FILE` (the rest by similarity).
    #[arg(long, value_name = "ORDER", default_value = "path")]
    pub order: String,
    /// No progress bar and no summary line.
    #[arg(short, long)]
    pub quiet: bool,
    /// Split the tree into N standalone images (OUTPUT must contain {shard},
    /// which becomes the shard number zero-padded to the digits of N-1) and
    /// write a manifest (docs/SHARDS.md).
    #[arg(long, value_name = "N")]
    pub shards: Option<u32>,
    /// With --shards: pack only shard K (0..N-1), e.g. $SLURM_ARRAY_TASK_ID; the
    /// task that finds every shard's sidecar writes the manifest.
    #[arg(long, value_name = "K", requires = "shards")]
    pub shard: Option<u32>,
    /// With --shards: the manifest's path (default: OUTPUT without {shard}, with
    /// extension .manifest.json: out/train-{shard}.sqfs -> out/train.manifest.json).
    #[arg(long, requires = "shards")]
    pub manifest: Option<PathBuf>,
    /// With --shards: weight of each entry in bytes, added to file sizes when
    /// balancing shards (spreads many small or empty files).
    #[arg(long, requires = "shards", value_parser = packfs_bench::size::parse_size,
          default_value_t = packer::shards::DEFAULT_ENTRY_COST)]
    pub entry_cost: u64,
}

/// `pack --on-conflict`: which source's entry a path given by several keeps.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PackConflict {
    /// Refuse to pack, naming both sources.
    Error,
    /// The first source's entry.
    First,
    /// The last source's entry.
    Last,
}

impl PackArgs {
    /// The image to write: `-o`, or the last argument (`pack::run` puts
    /// either in `output` before anything reads it).
    pub fn output(&self) -> &std::path::Path {
        self.output
            .as_deref()
            .expect("pack::run sets the output first")
    }
}

/// `packfs mount IMAGE... MOUNTPOINT`.
#[derive(clap::Args, Debug)]
pub struct MountArgs {
    /// IMAGE... MOUNTPOINT: one image, one shard manifest, or several images
    /// merged into one tree (in the order given).
    #[arg(required = true, num_args = 2.., value_names = ["IMAGE", "MOUNTPOINT"])]
    pub paths: Vec<PathBuf>,
    /// For several images: what a path present in more than one shows
    /// (error: refuse to mount).
    #[arg(long, value_enum, default_value_t = OnConflict::Error)]
    pub on_conflict: OnConflict,
    /// Byte budget of the decoded block cache (default: 1/8 of the memory
    /// limit, RAM or the cgroup's (a Slurm job's --mem), 64M to 1G).
    #[arg(long, value_parser = packfs_bench::size::parse_size)]
    pub cache_size: Option<u64>,
    /// FUSE session threads, each reading requests from its own /dev/fuse clone and
    /// answering them (default: twice the cores, 4 to 16). Under io_uring, when the image
    /// is read over the network (a URL, NFS, Lustre...), the CPUs' queues get twice as
    /// many in all, at most this many per queue.
    #[arg(short = 'j', long)]
    pub threads: Option<usize>,
    /// Stay in the foreground (logs on stderr) instead of daemonising.
    #[arg(short, long)]
    pub foreground: bool,
    /// Decode the whole image into the cache at mount, up to 90% of --cache-size (a shard manifest or several images: every shard, in order, into the cache they share).
    #[arg(long)]
    pub preload: bool,
    /// Let other users access the mount (needs user_allow_other in /etc/fuse.conf).
    #[arg(long)]
    pub allow_other: bool,
    /// Extra FUSE mount options, comma-separated; repeatable.
    #[arg(short = 'o')]
    pub options: Vec<String>,
    /// How the image file is read.
    #[arg(long, value_enum, default_value_t = IoMode::Pread)]
    pub io: IoMode,
    /// Seconds the kernel may remember that a name does not exist (the image
    /// never changes; 0 answers every lookup of a missing name anew).
    #[arg(long, value_name = "SECONDS", default_value_t = NEGATIVE_TTL_DEFAULT)]
    pub negative_ttl: u64,
    /// How FUSE requests reach packfs: io_uring queues where the kernel
    /// offers them (Linux 6.14+, `enable_uring` on), `/dev/fuse` otherwise
    /// [default: auto, or the environment's PACKFS_TRANSPORT].
    #[arg(long, value_enum)]
    pub transport: Option<mountfs::fuse::transport::Transport>,
    /// Where requests come through `/dev/fuse`: serve with packfs's own
    /// threads, one of which waits for the next request by spinning this many
    /// microseconds before it sleeps (50 suits a one-thread reader of local
    /// images, which then waits for no wakeup per file); 0 serves with
    /// `fuser`'s threads, which never spin and keep every thread waiting on
    /// the device, the better choice for slow or remote storage
    /// [default: 0, or the environment's PACKFS_DEV_SPIN_US].
    #[arg(long, value_name = "MICROS")]
    pub dev_spin: Option<u64>,
    /// When the mount ends, write what it served (FUSE requests by kind,
    /// negative lookups, bytes read, the block cache's hits, misses, blocks
    /// released once served and readahead loads skipped as just released;
    /// for a remote image, its requests, bytes
    /// fetched and time to first byte) to FILE as JSON; also at once on
    /// SIGUSR1 (`kill -USR1 PID`), while it keeps serving. SIGTERM, SIGINT
    /// or SIGHUP ends the mount as `packfs umount` does, stats written.
    #[arg(long, value_name = "FILE")]
    pub stats: Option<PathBuf>,
    /// Write the paths of files in the order they are first read to FILE
    /// (one per line, so a name holding a newline is left out; rewritten
    /// at most every second and at unmount), for `pack --order
    /// profile:FILE`.
    #[arg(long, value_name = "FILE")]
    pub record_access: Option<PathBuf>,
    /// Append the daemon's log to FILE: what reads failed and why (a
    /// damaged image, failing storage), warnings. Without it, a mount
    /// that runs in the background discards its log; with -f it goes to
    /// stderr.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Decode the files FILE lists (a `--record-access` profile) into the
    /// cache at mount, in its order, while the mount already serves: for an
    /// image packed with `--order profile:FILE`, one pass over its start.
    #[arg(long, value_name = "FILE")]
    pub preload_profile: Option<PathBuf>,
    /// Mount over a directory that is not empty (its contents are hidden
    /// until the image is unmounted).
    #[arg(long)]
    pub nonempty: bool,
    /// `packfs run`'s: end the mount, as SIGTERM does, once FD (a pipe's
    /// read end) reaches its end, which is when `run` is gone, however it
    /// ended.
    #[arg(long, value_name = "FD", hide = true)]
    pub exit_with_fd: Option<i32>,
}

/// `packfs run IMAGE:MOUNTPOINT... -- COMMAND`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// IMAGE:MOUNTPOINT pairs.
    #[arg(required = true, value_name = "IMAGE:MOUNTPOINT", value_parser = crate::args::values::mount_spec)]
    pub mounts: Vec<crate::args::values::MountSpec>,
    /// Byte budget of each mount's decoded block cache (as for `mount --cache-size`).
    #[arg(long, value_parser = packfs_bench::size::parse_size)]
    pub cache_size: Option<u64>,
    /// How the image files are read (as for `mount --io`).
    #[arg(long, value_enum, default_value_t = IoMode::Pread)]
    pub io: IoMode,
    /// Mount over directories that are not empty (as for `mount --nonempty`).
    #[arg(long)]
    pub nonempty: bool,
    /// With one IMAGE:MOUNTPOINT: record the order of first reads to FILE
    /// (as for `mount --record-access`).
    #[arg(long, value_name = "FILE")]
    pub record_access: Option<PathBuf>,
    /// Append the mounts' daemons' logs to FILE (as for `mount --log`).
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// With one IMAGE:MOUNTPOINT: write the mount's counters to FILE as
    /// JSON when it ends, before `run` returns (as for `mount --stats`).
    #[arg(long, value_name = "FILE")]
    pub stats: Option<PathBuf>,
    /// With one IMAGE:MOUNTPOINT: decode the files FILE lists into the
    /// cache at mount (as for `mount --preload-profile`).
    #[arg(long, value_name = "FILE")]
    pub preload_profile: Option<PathBuf>,
    /// Decode each whole image into its cache at mount (as for `mount --preload`).
    #[arg(long)]
    pub preload: bool,
    /// FUSE session threads of each mount (as for `mount -j`).
    #[arg(short = 'j', long)]
    pub threads: Option<usize>,
    /// How FUSE requests reach the daemons (as for `mount --transport`).
    #[arg(long, value_enum)]
    pub transport: Option<mountfs::fuse::transport::Transport>,
    /// Spin before sleeping on `/dev/fuse` (as for `mount --dev-spin`).
    #[arg(long, value_name = "MICROS")]
    pub dev_spin: Option<u64>,
    /// Let other users access the mounts (as for `mount --allow-other`).
    #[arg(long)]
    pub allow_other: bool,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_cache_default_follows_the_memory_limit_within_bounds() {
        const G: u64 = 1 << 30;
        assert_eq!(default_range_cache(24 * G, 4 << 20), 3 * G);
        // A 1 GiB container still gets 256 MiB; a 1 TiB node at most 8 GiB.
        assert_eq!(default_range_cache(G, 4 << 20), 256 << 20);
        assert_eq!(default_range_cache(1024 * G, 4 << 20), 8 * G);
        // Always room for two ranges.
        assert_eq!(default_range_cache(G, 256 << 20), 512 << 20);
    }
}
