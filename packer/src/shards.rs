//! Splitting one source tree into N standalone images (shards), and the
//! manifest that describes them (`packfs_format::shards`).
//!
//! # The split rule
//! Every entry but the root, in depth-first pre-order with siblings by name
//! bytes (`Tree::pre_order`, the ZIP writer's entry order and, for files,
//! the SquashFS writer's data order), gets a weight: a regular file its size
//! plus `entry_cost`, anything else (directories, symlinks, further names of
//! a hard-linked file) `entry_cost`. The sequence is cut into N contiguous
//! runs at the positions whose cumulative weight is nearest to `W * i / N`
//! (W the total), never inside a hard-link group (the first to the last
//! name of an inode with several names): such a cut moves to the nearest
//! allowed position. Cuts never go backwards, so a shard may be empty when
//! N exceeds what can be cut.
//!
//! Only the walk's metadata goes in (names, sizes, link structure), so every
//! task of a job array computes the same split on any node and with any
//! thread count. Contiguous runs keep directories together and give each
//! shard a `[first, last]` path range; a shard also holds the directories
//! leading to its entries, with their real metadata. Union mounts route a
//! path to the shards whose range meets its subtree (`packfs_format::shards::holds`).
//!
//! # Sidecars and the manifest
//! Each shard writer also writes `<image>.shard.json` (a [`Sidecar`]) next
//! to its image, atomically, then looks for the sidecars of all N shards; the
//! task that finds them all writes the manifest (temporary file + rename).
//! Its content depends only on the sidecars, so tasks finishing together
//! write the same bytes. [`finalize`] does the same on demand.

use crate::cut::{self, Cut};
use crate::output::{self, Target};
use crate::tree::{Kind, Tree};
use crate::walk;
use crate::{validate, PackError, PackOptions, PackSummary};
use packfs_format::shards::{
    encode_path, manifest_name, shard_name, Manifest, Range, Shard, Split, MANIFEST_VERSION,
};
use serde::{Deserialize, Serialize};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Default per-entry weight: about what an entry costs beyond its data (an
/// inode, a directory entry, a small file's share of a block), so a tree of
/// a million empty files still spreads over the shards.
pub const DEFAULT_ENTRY_COST: u64 = 4096;

/// The image format of the shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardFormat {
    SquashFs,
    Zip,
}

impl ShardFormat {
    fn name(self) -> &'static str {
        match self {
            ShardFormat::SquashFs => "squashfs",
            ShardFormat::Zip => "zip",
        }
    }
}

/// What to split and where the shards go.
pub struct ShardSpec {
    /// N, at least 1.
    pub shards: u32,
    /// Output template, with `{shard}` (see `packfs_format::shards::shard_name`).
    pub template: String,
    /// Manifest path; default from the template (`manifest_name`).
    pub manifest: Option<PathBuf>,
    pub entry_cost: u64,
    pub format: ShardFormat,
    /// Codec name and level as the user sees them, for the manifest.
    pub compression: String,
}

impl ShardSpec {
    pub fn manifest_path(&self) -> PathBuf {
        self.manifest
            .clone()
            .unwrap_or_else(|| PathBuf::from(manifest_name(&self.template)))
    }

    pub fn image_path(&self, k: u32) -> PathBuf {
        PathBuf::from(shard_name(&self.template, k, self.shards).expect("checked template"))
    }
}

/// The per-shard file written next to each image: what the manifest will
/// say about that shard, and which manifest it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sidecar {
    pub packfs_shard: u32,
    /// The manifest's file name (in the same directory).
    pub manifest: String,
    pub split: Split,
    pub shard: Shard,
}

/// The cut of a tree: `cuts[k]..cuts[k + 1]` are shard k's positions in
/// `order`.
#[derive(Default)]
pub struct Plan {
    pub order: Vec<u32>,
    pub cuts: Vec<usize>,
    pub total_bytes: u64,
}

/// Computes the split of `tree` into `n` shards (see the module doc).
pub fn plan(tree: &Tree, n: u32, entry_cost: u64) -> Plan {
    let order = tree.pre_order();
    let m = order.len();
    // Prefix weights; hard-link groups' first and last positions.
    let mut prefix = Vec::with_capacity(m + 1);
    prefix.push(0u128);
    let mut first_pos = vec![usize::MAX; tree.inodes.len()];
    let mut last_pos = vec![0usize; tree.inodes.len()];
    let mut total_bytes = 0u64;
    for (p, &node) in order.iter().enumerate() {
        let ino = tree.nodes[node as usize].inode as usize;
        let i = &tree.inodes[ino];
        let first = first_pos[ino] == usize::MAX;
        if first {
            first_pos[ino] = p;
        }
        last_pos[ino] = p;
        let w = if i.kind == Kind::File && first {
            total_bytes += i.size;
            i.size as u128 + entry_cost as u128
        } else {
            entry_cost as u128
        };
        prefix.push(prefix[p] + w);
    }
    // blocked[c]: a cut before position c would separate names of one inode.
    let mut depth = vec![0i64; m + 2];
    for ino in 0..tree.inodes.len() {
        if first_pos[ino] != usize::MAX && last_pos[ino] > first_pos[ino] {
            depth[first_pos[ino] + 1] += 1;
            depth[last_pos[ino] + 1] -= 1;
        }
    }
    let mut blocked = vec![false; m + 1];
    let mut d = 0i64;
    for (c, b) in blocked.iter_mut().enumerate() {
        d += depth[c];
        *b = d > 0;
    }
    let cuts = cut::choose_cuts(n, m, &|c| prefix[c], &|c| blocked[c]);
    Plan {
        order,
        cuts,
        total_bytes,
    }
}

/// Shard `k`'s part of the plan: its entries' positions, plus the
/// directories leading to them, as a `keep` mask over the tree's nodes.
fn keep_mask(tree: &Tree, plan: &Plan, k: usize) -> Vec<bool> {
    let mut keep = vec![false; tree.nodes.len()];
    keep[0] = true;
    for &node in &plan.order[plan.cuts[k]..plan.cuts[k + 1]] {
        let mut n = node;
        while !keep[n as usize] {
            keep[n as usize] = true;
            n = tree.nodes[n as usize].parent;
        }
    }
    keep
}

fn rel_bytes(tree: &Tree, node: u32) -> Vec<u8> {
    tree.rel_path(node).as_os_str().as_bytes().to_vec()
}

/// The manifest record of shard `k`, before the image exists (file, size
/// and hash are filled in once it is written).
fn shard_record(tree: &Tree, plan: &Plan, k: usize) -> Shard {
    let run = &plan.order[plan.cuts[k]..plan.cuts[k + 1]];
    let mut files = 0;
    let mut bytes = 0;
    let mut seen = std::collections::HashSet::new();
    for &node in run {
        let ino = tree.nodes[node as usize].inode;
        let i = &tree.inodes[ino as usize];
        if i.kind == Kind::File && seen.insert(ino) {
            files += 1;
            bytes += i.size;
        }
    }
    Shard {
        index: k as u32,
        file: String::new(),
        size: 0,
        blake3: String::new(),
        entries: run.len() as u64,
        files,
        bytes,
        range: (!run.is_empty()).then(|| Range {
            first: encode_path(&rel_bytes(tree, run[0])),
            last: encode_path(&rel_bytes(tree, run[run.len() - 1])),
        }),
    }
}

/// The split's parameters as the manifest records them, for a source tree
/// of `entries` entries holding `bytes` bytes of files.
fn split_params(
    src: &Path,
    (entries, bytes): (u64, u64),
    spec: &ShardSpec,
    opts: &PackOptions,
) -> Split {
    Split {
        shards: spec.shards,
        weighting: "bytes+entry_cost".into(),
        entry_cost: spec.entry_cost,
        excludes: opts.excludes.clone(),
        format: spec.format.name().into(),
        compression: spec.compression.clone(),
        level: opts.level,
        block_size: opts.block_size,
        mtime: opts.mtime,
        all_root: opts.all_root,
        no_fragments: opts.no_fragments,
        fragment_incompressible: opts.fragment_incompressible,
        order: opts.order.describe(),
        extreme: opts.xz.extreme,
        xz_lzma2: xz_lzma2(&opts.xz),
        source: src
            .canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default(),
        total_entries: entries,
        total_bytes: bytes,
        sources: None,
    }
}

/// `--xz-lzma2` as the manifest records it (see `Split::xz_lzma2`).
fn xz_lzma2(x: &packfs_format::codec::XzOptions) -> Option<String> {
    let set: Vec<String> = [
        ("lc", x.lc),
        ("lp", x.lp),
        ("pb", x.pb),
        ("nice", x.nice_len),
        ("depth", x.depth),
    ]
    .iter()
    .filter_map(|(k, v)| v.map(|v| format!("{k}={v}")))
    .collect();
    (!set.is_empty()).then(|| set.join(","))
}

/// How two splits differ, one item per parameter as the command line names
/// it (`--order similarity in this task, path in the sidecar` for labels
/// `this task` and `the sidecar`); empty when equal.
pub fn split_differences(here: &Split, a: &str, there: &Split, b: &str) -> Vec<String> {
    fn opt<T: std::fmt::Debug>(v: &Option<T>) -> String {
        match v {
            Some(v) => format!("{v:?}"),
            None => "unset".into(),
        }
    }
    let mut out = Vec::new();
    let mut cmp = |name: &str, x: String, y: String| {
        if x != y {
            out.push(format!("{name} {x} in {a}, {y} in {b}"));
        }
    };
    cmp(
        "--shards",
        here.shards.to_string(),
        there.shards.to_string(),
    );
    cmp("weighting", here.weighting.clone(), there.weighting.clone());
    cmp(
        "--entry-cost",
        here.entry_cost.to_string(),
        there.entry_cost.to_string(),
    );
    cmp(
        "--exclude",
        format!("{:?}", here.excludes),
        format!("{:?}", there.excludes),
    );
    cmp("format", here.format.clone(), there.format.clone());
    cmp(
        "--compression",
        here.compression.clone(),
        there.compression.clone(),
    );
    cmp("--level", opt(&here.level), opt(&there.level));
    cmp(
        "xz extreme (--level Ne)",
        here.extreme.to_string(),
        there.extreme.to_string(),
    );
    cmp("--xz-lzma2", opt(&here.xz_lzma2), opt(&there.xz_lzma2));
    cmp(
        "--block-size",
        here.block_size.to_string(),
        there.block_size.to_string(),
    );
    cmp(
        "--mtime/SOURCE_DATE_EPOCH",
        opt(&here.mtime),
        opt(&there.mtime),
    );
    cmp(
        "--all-root",
        here.all_root.to_string(),
        there.all_root.to_string(),
    );
    cmp(
        "--no-fragments",
        here.no_fragments.to_string(),
        there.no_fragments.to_string(),
    );
    cmp(
        "--fragment-incompressible",
        here.fragment_incompressible.to_string(),
        there.fragment_incompressible.to_string(),
    );
    cmp("--order", here.order.clone(), there.order.clone());
    cmp("source", here.source.clone(), there.source.clone());
    cmp("archive options", opt(&here.sources), opt(&there.sources));
    cmp(
        "source entries",
        here.total_entries.to_string(),
        there.total_entries.to_string(),
    );
    cmp(
        "source bytes",
        here.total_bytes.to_string(),
        there.total_bytes.to_string(),
    );
    out
}

/// What packing one shard produced.
pub struct ShardResult {
    pub index: u32,
    pub path: PathBuf,
    pub summary: PackSummary,
    /// `Some(path)` if this call wrote the manifest (it found all sidecars).
    pub manifest: Option<PathBuf>,
}

/// Packs shards of `src`: all N when `only` is `None` (then writes the
/// manifest), else shard `only` alone (then writes the manifest only if the
/// other N - 1 sidecars are already there). The tree is walked once, or,
/// when too large for memory, measured and walked again (`crate::cut`).
pub fn pack_shards(
    src: &Path,
    spec: &ShardSpec,
    only: Option<u32>,
    opts: &PackOptions,
) -> Result<Vec<ShardResult>, PackError> {
    let started = Instant::now();
    let begun = std::time::SystemTime::now();
    validate(opts)?;
    let which = shard_indices(spec, only)?;
    // Check every output before the (long) walk.
    let targets: Vec<Target> = which
        .iter()
        .map(|&k| output::prepare(src, &spec.image_path(k), opts.force))
        .collect::<Result<_, _>>()?;
    // A tree larger than the stage's share of the budget is split by a
    // walk that keeps its numbers on disk, and each shard walks its run
    // into the namespace that spills to disk.
    let bounded = spec.format == ShardFormat::SquashFs
        && opts.order == crate::order::DataOrder::Path
        && opts.overlay.is_none();
    let limit = match bounded {
        true => walk::tree_share(opts),
        false => u64::MAX,
    };
    let Some(tree) = walk::walk_within(src, opts, None, limit)? else {
        drop(targets);
        return pack_large_shards(src, spec, only, &which, opts, begun);
    };
    if crate::cancelled(opts) {
        return Err(PackError::Interrupted);
    }
    let plan = plan(&tree, spec.shards, spec.entry_cost);
    let totals = (plan.order.len() as u64, plan.total_bytes);
    let split = split_params(src, totals, spec, opts);
    let mut targets = targets.into_iter();
    record_shards(spec, only, &split, &which, opts.force, begun, |k| {
        let target = targets.next().expect("one target per shard");
        let sub = tree.subset(&keep_mask(&tree, &plan, k as usize));
        let tmp = target.create_temp()?;
        let summary = match spec.format {
            ShardFormat::SquashFs => crate::write_squashfs(&sub, target, tmp, opts, started)?,
            ShardFormat::Zip => crate::zip::write_tree(&sub, target, tmp, opts, started)?,
        };
        Ok((summary, shard_record(&tree, &plan, k as usize)))
    })
}

/// [`pack_shards`] for a tree too large to hold in memory (see
/// `crate::cut`): the same cuts, each shard packed through the namespace
/// that spills to disk.
fn pack_large_shards(
    src: &Path,
    spec: &ShardSpec,
    only: Option<u32>,
    which: &[u32],
    opts: &PackOptions,
    begun: std::time::SystemTime,
) -> Result<Vec<ShardResult>, PackError> {
    log::info!(
        "{}: a tree larger than an eighth of --memory: split by a walk that keeps its \
         numbers on disk, each shard walked into the namespace that spills to disk",
        src.display()
    );
    let near = spec.image_path(which[0]);
    let cut = Cut::measure(src, opts, spec.shards, spec.entry_cost, &near)?;
    if crate::cancelled(opts) {
        return Err(PackError::Interrupted);
    }
    let split = split_params(src, (cut.m as u64, cut.total_bytes), spec, opts);
    let cut = std::sync::Arc::new(cut);
    record_shards(spec, only, &split, which, opts.force, begun, |k| {
        let out = spec.image_path(k);
        crate::archive::pack_large_shard(src, &out, opts, cut.clone(), k as usize)
    })
}

/// Packs the shards `which` of a split, one `pack(k)` each (which writes
/// shard k's image at `spec.image_path(k)` and gives its record), with
/// each shard's sidecar, and the manifest once every shard's sidecar is
/// there. For a job-array task (`only`), a sibling whose sidecar records
/// another split is an error before anything is written (and after).
fn record_shards(
    spec: &ShardSpec,
    only: Option<u32>,
    split: &Split,
    which: &[u32],
    force: bool,
    begun: std::time::SystemTime,
    mut pack: impl FnMut(u32) -> Result<(PackSummary, Shard), PackError>,
) -> Result<Vec<ShardResult>, PackError> {
    let manifest = spec.manifest_path();
    // The images and their sidecars are beside the template's first shard.
    let shards_dir = parent(&spec.image_path(0)).to_path_buf();
    // For a job-array task: a sibling that finished before this task
    // began is caught before anything is written (with --force, only one
    // whose sidecar is newer than this task: an older one is taken for a
    // leftover); one finishing meanwhile, after.
    let siblings = |packed| match only {
        Some(_) => check_siblings(&manifest, &shards_dir, split, which, force, begun, packed),
        None => Ok(()),
    };
    siblings(false)?;
    let mut out = Vec::new();
    for &k in which {
        let (summary, mut record) = pack(k)?;
        let path = spec.image_path(k);
        record.index = k;
        record.file = relative_name(&path, &manifest)?;
        record.size = std::fs::metadata(&path)
            .map_err(PackError::io(&path))?
            .len();
        record.blake3 = hash_file(&path)?;
        write_sidecar(
            &path,
            &Sidecar {
                packfs_shard: MANIFEST_VERSION,
                manifest: file_name(&manifest)?,
                split: split.clone(),
                shard: record,
            },
        )?;
        out.push(ShardResult {
            index: k,
            path,
            summary,
            manifest: None,
        });
    }
    siblings(true)?;
    // Only when this process wrote every shard is a missing sidecar an
    // error; a job-array task just leaves the manifest to the last one.
    let wrote = match finalize_if_complete(&manifest, Some(&shards_dir), split)? {
        Ok(()) => Some(manifest),
        Err(missing) if only.is_none() => {
            return Err(PackError::Shards(format!(
                "{}: sidecars missing after packing every shard: {missing}",
                spec.manifest_path().display()
            )))
        }
        Err(_) => None,
    };
    if let Some(last) = out.last_mut() {
        last.manifest = wrote;
    }
    Ok(out)
}

/// The shards `which` of a split of `sources` (archives, directories) into
/// `spec.shards` images: shard k packs the contiguous group of sources
/// `M * k / N .. M * (k + 1) / N` (M sources, N shards, integer division),
/// merged as one `pack` of that group merges them. Each task of a job
/// array reads only its own group. The rule needs only the count of
/// sources, so every task computes it alike; the split records the
/// sources' names and sizes, so tasks given different lists disagree.
pub fn pack_source_shards(
    sources: &[crate::archive::Source],
    so: &crate::archive::SourceOptions,
    spec: &ShardSpec,
    only: Option<u32>,
    opts: &PackOptions,
) -> Result<Vec<ShardResult>, PackError> {
    use crate::archive::Source;
    let begun = std::time::SystemTime::now();
    validate(opts)?;
    let which = shard_indices(spec, only)?;
    if spec.format != ShardFormat::SquashFs {
        return Err(PackError::InvalidOption(
            "shards of archives are SquashFS images".into(),
        ));
    }
    let m = sources.len() as u64;
    if m < spec.shards as u64 {
        return Err(PackError::InvalidOption(format!(
            "--shards {}: more shards than the {m} sources (each shard packs whole sources)",
            spec.shards
        )));
    }
    if sources.contains(&Source::Stdin) {
        return Err(PackError::InvalidOption(
            "stdin (-) cannot be split into shards: name the archives".into(),
        ));
    }
    let mut total_bytes = 0u64;
    for s in sources {
        if let Source::Archive(p) = s {
            total_bytes += std::fs::metadata(p).map_err(PackError::io(p))?.len();
        }
    }
    let names: Vec<String> = sources
        .iter()
        .map(|s| s.display().to_string_lossy().into_owned())
        .collect();
    let mut split = split_params(Path::new(""), (0, 0), spec, opts);
    split.weighting = "inputs".into();
    split.entry_cost = 0;
    split.source = source_list(&names);
    split.total_entries = m;
    split.total_bytes = total_bytes;
    split.sources = Some(format!(
        "strip-components={} expand-nested={:?} on-conflict={:?}",
        so.strip_components, so.expand_nested, so.on_conflict
    ));
    let group = |k: u32| {
        let n = spec.shards as u64;
        let (a, b) = (m * k as u64 / n, m * (k as u64 + 1) / n);
        &sources[a as usize..b as usize]
    };
    record_shards(spec, only, &split, &which, opts.force, begun, |k| {
        crate::archive::pack_sources_recorded(group(k), &spec.image_path(k), opts, so)
    })
}

/// The sources of a split as the manifest names them: all of them, or the
/// first and last and their count when there are many.
fn source_list(names: &[String]) -> String {
    match names {
        [] => String::new(),
        [one] => one.clone(),
        _ if names.len() <= 4 => names.join(" "),
        [first, .., last] => format!("{first} .. {last} ({} sources)", names.len()),
    }
}

/// The shards a task packs: all, or `--shard K`; checks N and the template.
fn shard_indices(spec: &ShardSpec, only: Option<u32>) -> Result<Vec<u32>, PackError> {
    if spec.shards == 0 || spec.shards > MAX_SHARDS {
        return Err(PackError::InvalidOption(format!(
            "--shards {}: must be 1 to {MAX_SHARDS}",
            spec.shards
        )));
    }
    if shard_name(&spec.template, 0, spec.shards).is_none() {
        return Err(PackError::InvalidOption(format!(
            "-o {}: a sharded output needs {{shard}} in its name (e.g. train-{{shard}}.sqfs)",
            spec.template
        )));
    }
    match only {
        Some(k) if k >= spec.shards => Err(PackError::InvalidOption(format!(
            "--shard {k}: must be below --shards {}",
            spec.shards
        ))),
        Some(k) => Ok(vec![k]),
        None => Ok((0..spec.shards).collect()),
    }
}

/// For one task of a job array (`--shard K`): fails, naming the
/// parameters, when a sidecar of another shard of this split's range of
/// indices records a different split: the manifest would never be written,
/// since only sidecars of one split are counted together, and the tasks
/// would each wait for the others. The sidecar is a sibling task's (the
/// mistake to report) unless it is left from an earlier run over the same
/// outputs, which needs `--force` to overwrite them: so without `--force`
/// any disagreeing sidecar is an error, and with it only one written since
/// this task began (a stale one is overwritten when its shard is repacked).
/// Called before this task packs (nothing is written then) and after (its
/// images and sidecars are written by then and stay, and the message says
/// so). `mine` are the shards this task packs.
fn check_siblings(
    manifest: &Path,
    shards_dir: &Path,
    split: &Split,
    mine: &[u32],
    force: bool,
    begun: std::time::SystemTime,
    packed: bool,
) -> Result<(), PackError> {
    for (p, s) in sidecars(manifest, Some(shards_dir))? {
        // Not a sibling: this task's own shard, or one no task of this
        // split writes (left by a split into more shards).
        if &s.split == split || mine.contains(&s.shard.index) || s.shard.index >= split.shards {
            continue;
        }
        let recent = || {
            std::fs::metadata(&p)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t >= begun)
        };
        if !force || recent() {
            return Err(PackError::Shards(format!(
                "{}: shard {} of {} was packed with other split options than this task ({}); \
                 every task of a split must pass the same options (repack the odd ones, \
                 with --force){}",
                p.display(),
                s.shard.index,
                manifest.display(),
                split_differences(split, "this task", &s.split, "that sidecar").join("; "),
                if packed {
                    "; this task's own shard was written first and is kept"
                } else {
                    ""
                }
            )));
        }
    }
    Ok(())
}

/// Shards at most: node ids of a union mount carry the shard number in
/// their low bits (`mountfs::union`).
pub const MAX_SHARDS: u32 = 4096;

fn file_name(p: &Path) -> Result<String, PackError> {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| PackError::InvalidOption(format!("{}: no file name", p.display())))
}

fn parent(p: &Path) -> &Path {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// The image's name as the manifest records it: its file name when both
/// are in the same directory (the usual case, and what keeps the set of
/// files relocatable), else its absolute path.
fn relative_name(image: &Path, manifest: &Path) -> Result<String, PackError> {
    let di = parent(image)
        .canonicalize()
        .map_err(PackError::io(parent(image)))?;
    let dm = parent(manifest)
        .canonicalize()
        .map_err(PackError::io(parent(manifest)))?;
    if di == dm {
        file_name(image)
    } else {
        Ok(di.join(file_name(image)?).to_string_lossy().into_owned())
    }
}

/// blake3 of a whole file, hex.
pub fn hash_file(p: &Path) -> Result<String, PackError> {
    let mut h = blake3::Hasher::new();
    let mut f = std::fs::File::open(p).map_err(PackError::io(p))?;
    std::io::copy(&mut f, &mut h).map_err(PackError::io(p))?;
    Ok(h.finalize().to_hex().to_string())
}

/// Where the sidecar of `image` is: `<image>.shard.json`.
pub fn sidecar_path(image: &Path) -> PathBuf {
    let mut s = image.as_os_str().to_owned();
    s.push(".shard.json");
    PathBuf::from(s)
}

/// Writes `bytes` to `path` through a temporary file in the same directory
/// and a rename, so readers see the old content or the new, never a part.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), PackError> {
    use std::io::Write;
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.tmp-", file_name(path)?))
        .tempfile_in(parent(path))
        .map_err(PackError::output(path, "creating its temporary file"))?;
    tmp.write_all(bytes)
        .and_then(|_| tmp.as_file().sync_all())
        .map_err(PackError::output(path, "writing"))?;
    // As any new file (and the images beside it): 0666 less the umask. A
    // manifest lists paths, which a umask of 077 is meant to keep private.
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o666 & !crate::output::umask()),
    )
    .map_err(PackError::output(path, "setting its mode"))?;
    tmp.persist(path)
        .map_err(|e| PackError::output(path, "renaming into place")(e.error))?;
    Ok(())
}

fn write_sidecar(image: &Path, s: &Sidecar) -> Result<(), PackError> {
    let mut json = serde_json::to_vec_pretty(s).expect("serialisable");
    json.push(b'\n');
    write_atomic(&sidecar_path(image), &json)
}

/// The sidecars that name this manifest, by shard index: in the manifest's
/// directory, and in `shards_dir` (where the images and their sidecars
/// are, when `--manifest` put the manifest elsewhere). A sidecar that does
/// not parse is an error naming it.
fn sidecars(
    manifest: &Path,
    shards_dir: Option<&Path>,
) -> Result<Vec<(PathBuf, Sidecar)>, PackError> {
    let want = file_name(manifest)?;
    let mut out = Vec::new();
    let mut dirs = vec![parent(manifest)];
    if let Some(d) = shards_dir {
        let same = |a: &Path, b: &Path| match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
            (Ok(a), Ok(b)) => a == b,
            _ => a == b,
        };
        if !same(d, dirs[0]) {
            dirs.push(d);
        }
    }
    for dir in dirs {
        sidecars_in(dir, &want, &mut out)?;
    }
    out.sort_by_key(|(p, s)| (s.shard.index, p.clone()));
    Ok(out)
}

fn sidecars_in(dir: &Path, want: &str, out: &mut Vec<(PathBuf, Sidecar)>) -> Result<(), PackError> {
    for e in std::fs::read_dir(dir).map_err(PackError::io(dir))? {
        let e = e.map_err(PackError::io(dir))?;
        let name = e.file_name();
        if !name.as_bytes().ends_with(b".shard.json") || name.as_bytes().starts_with(b".") {
            continue;
        }
        let p = e.path();
        let bytes = std::fs::read(&p).map_err(PackError::io(&p))?;
        let s: Sidecar = serde_json::from_slice(&bytes)
            .map_err(|e| PackError::Shards(format!("{}: not a shard sidecar: {e}", p.display())))?;
        if s.manifest == want {
            out.push((p, s));
        }
    }
    Ok(())
}

/// The manifest of `split` from sidecars (named, for errors): those of
/// other splits are ignored; `Ok(Err(which))` names the shards missing.
/// Its bytes depend only on the sidecars, so every task that finds them
/// all writes the same manifest (locally or as an object).
pub fn manifest_of(
    found: Vec<(String, Sidecar)>,
    split: &Split,
) -> Result<Result<Manifest, String>, PackError> {
    let mut shards: Vec<Option<Shard>> = vec![None; split.shards as usize];
    for (p, s) in found.into_iter().filter(|(_, s)| &s.split == split) {
        let k = s.shard.index as usize;
        if k >= shards.len() {
            return Err(PackError::Shards(format!(
                "{p}: shard {k} of a split into {}",
                split.shards
            )));
        }
        shards[k] = Some(s.shard);
    }
    let missing: Vec<String> = (0..split.shards)
        .filter(|&k| shards[k as usize].is_none())
        .map(|k| k.to_string())
        .collect();
    if !missing.is_empty() {
        return Ok(Err(format!("shard(s) {}", missing.join(", "))));
    }
    Ok(Ok(Manifest {
        packfs_shards: MANIFEST_VERSION,
        split: split.clone(),
        shards: shards.into_iter().map(|s| s.expect("checked")).collect(),
    }))
}

/// A manifest as written: pretty JSON and a newline.
pub fn manifest_bytes(m: &Manifest) -> Vec<u8> {
    let mut json = serde_json::to_vec_pretty(m).expect("serialisable");
    json.push(b'\n');
    json
}

/// Writes the manifest if the sidecars of all shards of `split` are present
/// (sidecars of another split naming the same manifest are ignored);
/// otherwise returns which are missing.
fn finalize_if_complete(
    manifest: &Path,
    shards_dir: Option<&Path>,
    split: &Split,
) -> Result<Result<(), String>, PackError> {
    let found = sidecars(manifest, shards_dir)?
        .into_iter()
        .map(|(p, s)| (p.display().to_string(), s))
        .collect();
    match manifest_of(found, split)? {
        Ok(m) => {
            write_atomic(manifest, &manifest_bytes(&m))?;
            Ok(Ok(()))
        }
        Err(missing) => Ok(Err(missing)),
    }
}

/// `packfs shards finalize`: writes `manifest` from the sidecars next to it.
/// They must all describe the same split and all N must be present, and
/// each image must still have the size its sidecar recorded.
pub fn finalize(manifest: &Path) -> Result<Manifest, PackError> {
    let found = sidecars(manifest, None)?;
    let Some((first_path, first)) = found.first() else {
        return Err(PackError::Shards(format!(
            "{}: no shard sidecars (*.shard.json) for this manifest in {}",
            manifest.display(),
            parent(manifest).display()
        )));
    };
    for (p, s) in &found {
        if s.split != first.split {
            return Err(PackError::Shards(format!(
                "{} and {} describe different splits ({}); remove the stale one",
                p.display(),
                first_path.display(),
                split_differences(&s.split, "the first", &first.split, "the second").join("; ")
            )));
        }
        let img = resolve(manifest, &s.shard.file);
        let size = std::fs::metadata(&img).map_err(PackError::io(&img))?.len();
        if size != s.shard.size {
            return Err(PackError::Shards(format!(
                "{}: {size} bytes, its sidecar says {}",
                img.display(),
                s.shard.size
            )));
        }
    }
    match finalize_if_complete(manifest, None, &first.split)? {
        Ok(()) => {}
        Err(missing) => {
            return Err(PackError::Shards(format!(
                "{}: {missing} not packed yet (no sidecar)",
                manifest.display()
            )))
        }
    }
    read_manifest(manifest)
}

/// A shard's image path: `file` relative to the manifest's directory.
pub fn resolve(manifest: &Path, file: &str) -> PathBuf {
    parent(manifest).join(file)
}

pub fn read_manifest(p: &Path) -> Result<Manifest, PackError> {
    use std::io::Read;
    // An image given where its manifest belongs (often gigabytes): told
    // from its first bytes and said as that, not read whole into memory
    // for a JSON parser's "expected value at line 1 column 1".
    let mut f = std::fs::File::open(p).map_err(PackError::io(p))?;
    let mut head = [0u8; 4];
    let n = f.read(&mut head).map_err(PackError::io(p))?;
    let what = match head.get(..n.min(4)) {
        Some(b"hsqs") => Some("a SquashFS image"),
        Some(b"PK\x03\x04") | Some(b"PK\x05\x06") => Some("a ZIP image"),
        _ => None,
    };
    if let Some(what) = what {
        return Err(PackError::Shards(format!(
            "{}: {what}, not a manifest (the JSON file `packfs pack --shards` writes beside the \
             shards, *.manifest.json)",
            p.display()
        )));
    }
    let len = f.metadata().map_err(PackError::io(p))?.len();
    if len > MAX_MANIFEST_BYTES {
        return Err(PackError::Shards(format!(
            "{}: {len} bytes, too large for a manifest",
            p.display()
        )));
    }
    let mut bytes = head[..n].to_vec();
    f.read_to_end(&mut bytes).map_err(PackError::io(p))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| PackError::Shards(format!("{}: not a packfs manifest: {e}", p.display())))
}

/// Larger than any manifest (4096 shards make a few MiB), as mountfs's
/// limit for reading one.
const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// One shard's result in [`verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardCheck {
    /// Present with the recorded size and blake3.
    Ok {
        path: PathBuf,
        size: u64,
        blake3: String,
    },
    /// Missing, unreadable, of another size or another hash: `why`.
    Bad { path: PathBuf, why: String },
}

/// `packfs shards verify`: checks every shard the manifest names (present,
/// of its recorded size, of its blake3), in order, handing each result to
/// `each` as soon as it is known; a bad shard does not stop the others
/// from being checked. Returns how many were bad. Only the manifest's own
/// failure (unreadable, not a manifest) is an error.
pub fn verify(manifest: &Path, mut each: impl FnMut(&ShardCheck)) -> Result<usize, PackError> {
    let m = read_manifest(manifest)?;
    let mut bad = 0;
    for s in &m.shards {
        let path = resolve(manifest, &s.file);
        let r = check_shard(&path, s);
        bad += usize::from(matches!(r, ShardCheck::Bad { .. }));
        each(&r);
    }
    Ok(bad)
}

fn check_shard(path: &Path, s: &packfs_format::shards::Shard) -> ShardCheck {
    let bad = |why: String| ShardCheck::Bad {
        path: path.to_path_buf(),
        why,
    };
    let size = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) => return bad(e.to_string()),
    };
    if size != s.size {
        return bad(format!("{size} bytes, the manifest says {}", s.size));
    }
    match hash_file(path) {
        Ok(h) if h == s.blake3 => ShardCheck::Ok {
            path: path.to_path_buf(),
            size,
            blake3: h,
        },
        Ok(h) => bad(format!("blake3 {h}, the manifest says {}", s.blake3)),
        // Without the path, which the line starts with already.
        Err(PackError::Io { source, .. }) => bad(source.to_string()),
        Err(e) => bad(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn tree_of(build: impl FnOnce(&Path)) -> (tempfile::TempDir, Tree) {
        let d = tempfile::tempdir().unwrap();
        build(d.path());
        let t = walk::walk(d.path(), &PackOptions::default()).unwrap();
        (d, t)
    }

    fn shard_paths(t: &Tree, p: &Plan, k: usize) -> Vec<PathBuf> {
        p.order[p.cuts[k]..p.cuts[k + 1]]
            .iter()
            .map(|&n| t.rel_path(n))
            .collect()
    }

    #[test]
    fn a_manifest_from_before_the_order_was_recorded_reads_as_path_order() {
        let old = r#"{"packfs_shards": 1, "shards": [], "split": {
            "shards": 1, "weighting": "bytes+entry_cost", "entry_cost": 4096,
            "excludes": [], "format": "squashfs", "compression": "zstd",
            "level": null, "block_size": 131072, "mtime": null,
            "all_root": false, "no_fragments": false, "source": "src",
            "total_entries": 3, "total_bytes": 10}}"#;
        let m: Manifest = serde_json::from_str(old).unwrap();
        assert_eq!(m.split.order, "path");
        assert!(!m.split.extreme && !m.split.fragment_incompressible);
        assert_eq!(m.split.xz_lzma2, None);
    }

    #[test]
    fn empty_files_spread_evenly_by_count() {
        let (_d, t) = tree_of(|r| {
            for i in 0..1000 {
                fs::write(r.join(format!("f{i:04}")), b"").unwrap();
            }
        });
        let p = plan(&t, 4, DEFAULT_ENTRY_COST);
        let sizes: Vec<usize> = p.cuts.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(sizes, vec![250; 4]);
        assert_eq!(shard_paths(&t, &p, 1)[0], Path::new("f0250"));
    }

    #[test]
    fn two_shards_cut_where_the_weights_are_closest_to_half() {
        let (_d, t) = tree_of(|r| {
            fs::write(r.join("a-big"), vec![1u8; 1 << 20]).unwrap();
            fs::create_dir(r.join("b")).unwrap();
            for i in 0..30 {
                fs::write(r.join(format!("b/{i:02}")), vec![1u8; 3000 * i]).unwrap();
            }
        });
        let p = plan(&t, 2, DEFAULT_ENTRY_COST);
        // Brute force over every cut, weighing entries independently.
        let w: Vec<u64> = p
            .order
            .iter()
            .map(|&n| {
                let i = &t.inodes[t.nodes[n as usize].inode as usize];
                DEFAULT_ENTRY_COST + if i.kind == Kind::File { i.size } else { 0 }
            })
            .collect();
        let total: u64 = w.iter().sum();
        let best = (0..=w.len())
            .min_by_key(|&c| {
                let left: u64 = w[..c].iter().sum();
                (2 * left).abs_diff(total)
            })
            .unwrap();
        assert_eq!(p.cuts, vec![0, best, w.len()]);
        // The big file is about half: shard 0 is it and a few small ones.
        assert_eq!(shard_paths(&t, &p, 0)[0], Path::new("a-big"));
        assert!(best > 1 && best < w.len() - 1, "{best}");
    }

    #[test]
    fn hard_links_are_never_cut_apart() {
        let (_d, t) = tree_of(|r| {
            for i in 0..100 {
                fs::write(r.join(format!("f{i:03}")), b"x").unwrap();
            }
            // Names at positions 10 and 90 of the order share one inode.
            fs::remove_file(r.join("f090")).unwrap();
            fs::hard_link(r.join("f010"), r.join("f090")).unwrap();
        });
        for n in [2, 3, 4, 7] {
            let p = plan(&t, n, DEFAULT_ENTRY_COST);
            let holder: Vec<usize> = ["f010", "f090"]
                .iter()
                .map(|name| {
                    (0..n as usize)
                        .find(|&k| shard_paths(&t, &p, k).contains(&PathBuf::from(name)))
                        .unwrap()
                })
                .collect();
            assert_eq!(holder[0], holder[1], "n = {n}: {:?}", p.cuts);
        }
    }

    #[test]
    fn more_shards_than_entries_leaves_some_empty() {
        let (_d, t) = tree_of(|r| {
            fs::write(r.join("a"), b"1").unwrap();
            fs::write(r.join("b"), b"2").unwrap();
        });
        let p = plan(&t, 5, DEFAULT_ENTRY_COST);
        let total: usize = p.cuts.windows(2).map(|w| w[1] - w[0]).sum();
        assert_eq!(total, 2);
        assert_eq!(*p.cuts.last().unwrap(), 2);
        assert!(p.cuts.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn a_whole_images_range_runs_from_its_first_leaf_to_its_last_entry() {
        let (_d, t) = tree_of(|p| {
            std::fs::create_dir_all(p.join("a/b")).unwrap();
            std::fs::create_dir_all(p.join("a/d")).unwrap();
            std::fs::write(p.join("a/b/c.txt"), b"12345").unwrap();
            std::fs::write(p.join("z.txt"), b"678").unwrap();
        });
        let r = t.whole_record();
        assert_eq!((r.entries, r.files, r.bytes), (5, 2, 8));
        let range = r.range.unwrap();
        // `a` and `a/b` lead to the first leaf and are held as its ancestors.
        assert_eq!(
            (range.first.as_str(), range.last.as_str()),
            ("a/b/c.txt", "z.txt")
        );
        for p in ["a", "a/b", "a/b/c.txt", "a/d", "z.txt"] {
            assert!(
                packfs_format::shards::holds(b"a/b/c.txt", b"z.txt", p.as_bytes()),
                "{p}"
            );
        }
        // An empty directory first is a leaf itself.
        let (_d, t) = tree_of(|p| {
            std::fs::create_dir_all(p.join("a/empty")).unwrap();
            std::fs::write(p.join("b"), b"").unwrap();
        });
        assert_eq!(t.whole_record().range.unwrap().first, "a/empty");
        let (_d, t) = tree_of(|_| {});
        assert_eq!(t.whole_record().range, None);
    }

    #[test]
    fn subset_keeps_ancestors_and_drops_the_rest() {
        let (_d, t) = tree_of(|r| {
            fs::create_dir_all(r.join("x/y")).unwrap();
            fs::create_dir_all(r.join("z")).unwrap();
            fs::write(r.join("x/y/f"), b"f").unwrap();
            fs::write(r.join("z/g"), b"g").unwrap();
            std::os::unix::fs::symlink("../x", r.join("z/l")).unwrap();
        });
        let mut keep = vec![false; t.nodes.len()];
        let find = |p: &str| {
            (0..t.nodes.len() as u32)
                .find(|&n| t.rel_path(n) == Path::new(p))
                .unwrap() as usize
        };
        for p in ["", "z", "z/l"] {
            keep[find(p)] = true;
        }
        let s = t.subset(&keep);
        let names: Vec<_> = s.pre_order().iter().map(|&n| s.rel_path(n)).collect();
        assert_eq!(names, vec![PathBuf::from("z"), PathBuf::from("z/l")]);
        let l = s.nodes[2].inode;
        assert_eq!(s.symlink_target(l), b"../x");
        // Directory link counts stay the source's (root: 2 + x + z).
        assert_eq!(s.inodes[s.nodes[0].inode as usize].nlink, 4);
    }
}
