//! packfs write side: packs a directory tree into a standard SquashFS 4.0
//! image (readable by the Linux kernel, unsquashfs and squashfuse).
//!
//! Pipeline: `walk` scans the tree into a compact description, then
//! `squashfs` writes data (in parallel, deterministically), inodes,
//! directories and tables into a temporary file that `output` renames into
//! place only on success.

pub mod archive;
mod cut;
mod detach;
mod error;
pub mod exclude;
pub mod follow;
mod io_pool;
pub mod lustre;
pub mod order;
mod output;
mod prefetch;
mod record;
pub mod shards;
mod source_check;
mod squashfs;
mod statfs;
#[cfg(test)]
mod test_data;
mod tree;
pub mod venv;
mod walk;
mod xattrs;
mod zip;

pub use error::PackError;
pub use packfs_format::codec::Compressor;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Progress callbacks; called from the packing thread only.
pub trait Progress: Send + Sync {
    /// Called once the tree is scanned.
    fn start(&self, total_bytes: u64, total_entries: u64);
    /// Called as file data is written (bytes of source data).
    fn advance(&self, bytes: u64);
    fn finish(&self);
}

pub struct PackOptions {
    pub compressor: Compressor,
    /// `None` = the codec's default level (see `packfs_format::codec::Encoder::new`).
    pub level: Option<i32>,
    /// LZMA2 settings for xz beyond the level (ignored by other codecs).
    pub xz: packfs_format::codec::XzOptions,
    /// Power of two, 4096..=1048576.
    pub block_size: u32,
    /// 0 = all cores.
    pub threads: usize,
    /// Glob patterns matched against the path relative to SRC and the bare name.
    pub excludes: Vec<String>,
    /// uid = gid = 0 for every entry.
    pub all_root: bool,
    /// Overrides every entry's mtime and the superblock's mod_time.
    pub mtime: Option<u32>,
    /// Overwrite an existing output.
    pub force: bool,
    pub no_fragments: bool,
    /// Pack incompressible tails into fragment blocks too, as mksquashfs
    /// does, instead of storing each raw in a block of its own (which reads
    /// without decoding a whole fragment block; see `squashfs::data`).
    pub fragment_incompressible: bool,
    /// A tree laid over the source: an entry here replaces the source's
    /// entry at the same relative path (two directories merge, keeping the
    /// source's metadata), and new entries are added. The source is never
    /// written. Used for the rewritten files of a venv (see [`venv`]).
    pub overlay: Option<std::path::PathBuf>,
    pub progress: Option<Arc<dyn Progress>>,
    /// When set (e.g. by a SIGINT handler), packing stops with
    /// [`PackError::Interrupted`] and leaves no output behind.
    pub cancel: Option<Arc<AtomicBool>>,
    /// The image's striping when its directory is on Lustre (see [`lustre`]).
    pub stripe: lustre::StripeCount,
    /// Where file data goes in a SquashFS image (see [`order`]); ZIP
    /// archives keep path order.
    pub order: order::DataOrder,
    /// Tells a follower (an upload) which bytes of the SquashFS image are
    /// final while it is written.
    pub follow: Option<Arc<follow::Follow>>,
    /// Append the hash record to a SquashFS image: a hash of every block
    /// as stored, after the filesystem's end, which packfs's readers check
    /// and standard readers never see (`packfs_format::squashfs::hashes`).
    pub checksums: bool,
    /// Byte budget of the bookkeeping that grows with the entry count (see
    /// `archive::spill`): past it a stream's namespace spills to sorted
    /// temporary files beside the output and the dedup index of tails
    /// stops growing.
    pub memory: u64,
}

/// [`PackOptions::memory`] unless told: enough for a few million entries
/// in memory (the path whose images are byte for byte what they were before
/// spilling existed), small beside a build node's RAM.
pub const DEFAULT_MEMORY: u64 = 1 << 30;

impl Default for PackOptions {
    fn default() -> Self {
        PackOptions {
            compressor: Compressor::Zstd,
            level: None,
            xz: Default::default(),
            block_size: 131072,
            threads: 0,
            excludes: Vec::new(),
            all_root: false,
            mtime: None,
            force: false,
            no_fragments: false,
            fragment_incompressible: false,
            overlay: None,
            progress: None,
            cancel: None,
            stripe: lustre::StripeCount::Auto,
            order: order::DataOrder::Path,
            follow: None,
            checksums: true,
            memory: DEFAULT_MEMORY,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PackSummary {
    /// Directory entries, the root included.
    pub entries: u64,
    /// Distinct inodes (hard links counted once).
    pub inodes: u64,
    /// Bytes of regular-file data read.
    pub bytes_in: u64,
    /// Image size including padding.
    pub bytes_out: u64,
    /// Files whose content duplicated an earlier file's and was stored once.
    pub dedup_files: u64,
    pub dedup_bytes: u64,
    pub fragments: u64,
    /// Bytes read from archives, as stored (compressed or not).
    pub source_bytes: u64,
    pub elapsed: Duration,
}

fn validate(opts: &PackOptions) -> Result<(), PackError> {
    let bs = opts.block_size;
    if !bs.is_power_of_two() || !(4096..=1 << 20).contains(&bs) {
        return Err(PackError::InvalidOption(format!(
            "block size {bs} is not a power of two between 4096 and 1048576"
        )));
    }
    if opts.memory < MIN_MEMORY {
        return Err(PackError::InvalidOption(format!(
            "--memory {}: at least {} MiB",
            opts.memory,
            MIN_MEMORY >> 20
        )));
    }
    Ok(())
}

/// The smallest [`PackOptions::memory`]: below it a large stream would
/// spill into more temporary files than are worth keeping open at once.
pub const MIN_MEMORY: u64 = 16 << 20;

/// Whether the pack was asked to stop ([`PackOptions::cancel`] raised).
pub(crate) fn cancelled(opts: &PackOptions) -> bool {
    opts.cancel
        .as_ref()
        .is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed))
}

/// Packs the directory `src` into the SquashFS image `out`.
pub fn pack_squashfs(src: &Path, out: &Path, opts: &PackOptions) -> Result<PackSummary, PackError> {
    let started = Instant::now();
    validate(opts)?;
    let target = output::prepare(src, out, opts.force)?;
    // Created before the walk, so an output directory the user cannot write
    // fails at once, not after scanning a large tree. On any error `tmp` is
    // dropped, which deletes the temporary file.
    let tmp = target.create_temp()?;
    // A tree larger than the stage's share of the budget is packed through
    // the namespace that spills to disk. Data orders and an overlay need
    // the whole tree, so they keep it in memory whatever its size.
    let bounded = opts.order == order::DataOrder::Path && opts.overlay.is_none();
    let limit = match bounded {
        true => walk::tree_share(opts),
        false => u64::MAX,
    };
    let Some(tree) = walk::walk_within(src, opts, output::identity(&tmp), limit)? else {
        log::info!(
            "{}: a tree larger than an eighth of --memory: walked again into the \
             namespace that spills to disk",
            src.display()
        );
        drop((tmp, target));
        return archive::pack_large_dir(src, out, opts, started);
    };
    log::debug!(
        "walk: {} entries in {:.2} s",
        tree.nodes.len(),
        started.elapsed().as_secs_f64()
    );
    write_squashfs(&tree, target, tmp, opts, started)
}

/// Writes `tree` as a SquashFS image into `tmp` and commits it to `target`.
pub(crate) fn write_squashfs(
    tree: &tree::Tree,
    target: output::Target,
    tmp: tempfile::NamedTempFile,
    opts: &PackOptions,
    started: Instant,
) -> Result<PackSummary, PackError> {
    let pool = worker_pool(opts)?;
    if cancelled(opts) {
        return Err(PackError::Interrupted);
    }
    // The data's size (plus symlink targets): the image's size within the
    // steps of the striping rule.
    target.stripe(&tmp, opts.stripe, tree.inodes.iter().map(|i| i.size).sum());
    let w = squashfs::write_image(tree, tmp.as_file(), target.path(), opts, &pool)?;
    commit_squashfs(target, tmp, opts, &w, 0, started)
}

/// The pool that compresses (`opts.threads`, 0 = all cores).
pub(crate) fn worker_pool(opts: &PackOptions) -> Result<rayon::ThreadPool, PackError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(opts.threads)
        .thread_name(|i| format!("packfs-{i}"))
        .build()
        .map_err(|e| PackError::Threads(format!("the worker threads: {e}")))
}

/// Renames a written image into place (unless the pack was cancelled) and
/// says what was packed.
pub(crate) fn commit_squashfs(
    target: output::Target,
    tmp: tempfile::NamedTempFile,
    opts: &PackOptions,
    w: &squashfs::Written,
    source_bytes: u64,
    started: Instant,
) -> Result<PackSummary, PackError> {
    if cancelled(opts) {
        return Err(PackError::Interrupted);
    }
    let t = Instant::now();
    target.commit(tmp)?;
    log::debug!("commit (sync + rename): {:.2} s", t.elapsed().as_secs_f64());
    if let Some(p) = &opts.progress {
        p.finish();
    }
    Ok(PackSummary {
        entries: w.entries,
        inodes: w.inodes,
        bytes_in: w.bytes_in,
        bytes_out: w.bytes_out,
        dedup_files: w.dedup_files,
        dedup_bytes: w.dedup_bytes,
        fragments: w.fragments,
        source_bytes,
        elapsed: started.elapsed(),
    })
}

/// Packs the directory `src` into the ZIP archive `out` (atomically, like
/// [`pack_squashfs`]). `opts.compressor` picks the method: `Gzip` = deflate
/// (levels 1..=9 as in Info-ZIP, default 6), `Zstd` = zstd (method 93,
/// default level 3); `level: Some(0)` stores every entry. `block_size` and
/// `no_fragments` do not apply. See the `zip` module for the format details.
pub fn pack_zip(src: &Path, out: &Path, opts: &PackOptions) -> Result<PackSummary, PackError> {
    zip::pack(src, out, opts)
}
