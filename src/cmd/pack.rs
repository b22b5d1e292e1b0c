//! `packfs pack`: the flags become a checked [`PackPlan`] and the packer's
//! own [`PackOptions`]; then one image (to a file or an upload) or a set of
//! shards is written.

use super::interrupt::{self, die_of_signal};
use crate::args::cli::{Codec, OutFormat, PackArgs, PackConflict, Preset, RemoteArgs};
use crate::args::location;
use crate::args::usage::usage;
use crate::args::values::Level;
use anyhow::Context;
use packer::archive::Source;
use packer::{Compressor, PackOptions};
use packfs_bench::size::human;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Where the image goes.
enum Dest {
    File,
    S3(packfs_objstore::Target),
}

pub fn format_for(
    output: &std::path::Path,
    forced: Option<OutFormat>,
) -> anyhow::Result<OutFormat> {
    if let Some(f) = forced {
        return Ok(f);
    }
    let ext = output
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    Ok(match ext.as_str() {
        "sqfs" | "squashfs" | "sfs" | "img" => OutFormat::Squashfs,
        "zip" => OutFormat::Zip,
        _ => return Err(usage(format!(
            "{}: cannot tell the image format from the extension; use .sqfs, .squashfs or .zip, or pass --format",
            output.display()
        ))),
    })
}

/// What `packfs pack` was asked for, checked before anything is read.
struct PackPlan {
    format: OutFormat,
    /// The codec as named on the command line, or the format's default.
    codec: Codec,
    compressor: Compressor,
    level: Option<i32>,
    xz: packfs_format::codec::XzOptions,
    block_size: u32,
    mtime: Option<u32>,
    dest: Dest,
    order: packer::order::DataOrder,
}

impl PackPlan {
    fn from_args(args: &PackArgs) -> anyhow::Result<PackPlan> {
        let format = output_format(args)?;
        let dest = destination(args)?;
        if format == OutFormat::Zip {
            zip_takes(args)?;
        }
        let chosen = Chosen::from_args(args);
        let (codec, compressor, level, extreme) =
            codec_and_level(format, chosen.compression, chosen.level)?;
        if chosen.xz_lzma2.is_some() && compressor != Compressor::Xz {
            return Err(usage(format!(
                "--xz-lzma2 applies to -c xz, not {}",
                codec_name(codec)
            )));
        }
        let xz = packfs_format::codec::XzOptions {
            extreme,
            ..chosen.xz_lzma2.unwrap_or_default()
        };
        let order = data_order(args, format, chosen.order)?;
        Ok(PackPlan {
            format,
            codec,
            compressor,
            level,
            xz,
            block_size: chosen.block_size,
            mtime: mtime(args.mtime)?,
            dest,
            order,
        })
    }
}

/// The image's format, from `--format` or the output's extension (after
/// `{shard}` for a template), once the output is known to be one.
fn output_format(args: &PackArgs) -> anyhow::Result<OutFormat> {
    // `packfs pack IMAGE DIR`, the two swapped: said as that, not as an
    // output whose format cannot be told.
    if args.output().is_dir() && args.src.is_file() {
        return Err(usage(format!(
            "{} is a directory and {} a file: the directory to pack comes first \
             (packfs pack {} {})",
            args.output().display(),
            args.src.display(),
            args.output().display(),
            args.src.display()
        )));
    }
    let template = args.output().to_string_lossy();
    // The extension after {shard} decides the format, as for one image.
    let format = format_for(args.output(), args.format)?;
    if args.shards.is_none() && template.contains("{shard}") {
        return Err(usage(format!(
            "{template}: {{shard}} in the output name needs --shards N"
        )));
    }
    Ok(format)
}

/// Where the image (or the shards) go: a file, or an S3 object.
fn destination(args: &PackArgs) -> anyhow::Result<Dest> {
    let dest = match location(args.output())? {
        mountfs::location::ImageLocation::Local(_) => Dest::File,
        mountfs::location::ImageLocation::S3 { bucket, key } => {
            Dest::S3(packfs_objstore::Target::S3 { bucket, key })
        }
        mountfs::location::ImageLocation::Http(u) => {
            return Err(usage(format!(
                "{u}: packfs uploads to s3://BUCKET/KEY only (a plain web server takes no uploads)"
            )))
        }
    };
    if args.shards.is_some() && matches!(dest, Dest::S3(_)) && args.manifest.is_some() {
        return Err(usage(format!(
            "{}: with shards on S3 the manifest goes beside them (named from the \
             template); --manifest is for local shards",
            args.output().to_string_lossy()
        )));
    }
    Ok(dest)
}

/// Refuses the flags a ZIP archive has no use for. Each ZIP entry is one
/// deflate or zstd stream, with no blocks or fragments: a flag that would
/// change nothing is refused rather than ignored.
fn zip_takes(args: &PackArgs) -> anyhow::Result<()> {
    if args.preset.is_some() {
        return Err(usage("--preset makes SquashFS images, not ZIP archives"));
    }
    let squashfs_only = [
        (args.block_size.is_some(), "--block-size"),
        (args.no_fragments, "--no-fragments"),
        (args.fragment_incompressible, "--fragment-incompressible"),
    ];
    if args.no_checksums {
        return Err(usage(
            "--no-checksums applies to SquashFS images; a ZIP archive's members carry their CRC-32 whatever the flags",
        ));
    }
    if let Some((_, flag)) = squashfs_only.iter().find(|(given, _)| *given) {
        return Err(usage(format!(
            "{flag} applies to SquashFS images; a ZIP archive stores each file as one stream"
        )));
    }
    Ok(())
}

/// What the flags choose, or the preset that stands for them (clap
/// refuses a preset with a flag it sets).
struct Chosen<'a> {
    compression: Option<Codec>,
    level: Option<Level>,
    xz_lzma2: Option<packfs_format::codec::XzOptions>,
    block_size: u32,
    order: &'a str,
}

impl Chosen<'_> {
    fn from_args(args: &PackArgs) -> Chosen<'_> {
        match args.preset {
            None => Chosen {
                compression: args.compression,
                level: args.level,
                xz_lzma2: args.xz_lzma2,
                block_size: args.block_size.unwrap_or(128 << 10) as u32,
                order: args.order.as_str(),
            },
            Some(Preset::Smallest) => Chosen {
                compression: Some(Codec::Xz),
                level: Some(Level {
                    n: 9,
                    extreme: true,
                }),
                xz_lzma2: Some(packfs_format::codec::XzOptions {
                    lc: Some(4),
                    lp: Some(0),
                    pb: Some(0),
                    ..Default::default()
                }),
                block_size: 1 << 20,
                order: "similarity",
            },
        }
    }
}

/// The data order `order` names (`--order`, or the preset's), which a ZIP
/// archive takes only as path order.
fn data_order(
    args: &PackArgs,
    format: OutFormat,
    order: &str,
) -> anyhow::Result<packer::order::DataOrder> {
    let order = packer::order::DataOrder::parse(order).map_err(|e| match e {
        packer::PackError::InvalidOption(m) => usage(format!("--order: {m}")),
        e => anyhow::Error::new(e).context("--order"),
    })?;
    if format == OutFormat::Zip && order != packer::order::DataOrder::Path {
        return Err(usage(match args.preset {
            Some(_) => "--preset makes SquashFS images, not ZIP archives".to_string(),
            None => format!(
                "--order {}: ZIP archives keep path order (orders apply to SquashFS images)",
                args.order
            ),
        }));
    }
    Ok(order)
}

/// The codec's name as `-c` takes it (deflate, not the packer's gzip).
fn codec_name(codec: Codec) -> String {
    clap::ValueEnum::to_possible_value(&codec)
        .map(|v| v.get_name().to_string())
        .unwrap_or_else(|| format!("{codec:?}").to_lowercase())
}

/// The codec (default: zstd for SquashFS, deflate for ZIP), the packer's
/// compressor for it, the level (default: the codec's) and whether it is
/// xz's extreme variant, checked against what the format takes.
fn codec_and_level(
    format: OutFormat,
    codec: Option<Codec>,
    level: Option<Level>,
) -> anyhow::Result<(Codec, Compressor, Option<i32>, bool)> {
    let codec = codec.unwrap_or(match format {
        OutFormat::Squashfs => Codec::Zstd,
        OutFormat::Zip => Codec::Deflate,
    });
    let compressor = match codec {
        Codec::Zstd => Compressor::Zstd,
        Codec::Gzip | Codec::Deflate => Compressor::Gzip,
        Codec::Lz4 => Compressor::Lz4,
        Codec::Xz => Compressor::Xz,
    };
    if format == OutFormat::Zip && !matches!(compressor, Compressor::Gzip | Compressor::Zstd) {
        return Err(usage(format!(
            "ZIP images take -c deflate or -c zstd, not {}",
            codec_name(codec)
        )));
    }
    let extreme = level.is_some_and(|l| l.extreme);
    if extreme && compressor != Compressor::Xz {
        return Err(usage(format!(
            "--level {}e: only xz has an extreme variant (e)",
            level.map_or(0, |l| l.n)
        )));
    }
    let level = level.map(|l| l.n).or(match (format, compressor) {
        (_, Compressor::Zstd) => Some(3),
        (OutFormat::Zip, _) => Some(6),
        _ => None,
    });
    if let Some(l) = level {
        let (lo, hi) = match (format, compressor) {
            (OutFormat::Zip, Compressor::Gzip) => (0, 9),
            _ => packfs_format::codec::Encoder::level_range(compressor),
        };
        if !(lo..=hi).contains(&l) {
            return Err(usage(if lo == hi {
                format!("--level {l}: {} takes no level", codec_name(codec))
            } else {
                format!(
                    "--level {l}: {} takes a level from {lo} to {hi}",
                    codec_name(codec)
                )
            }));
        }
    }
    Ok((codec, compressor, level, extreme))
}

/// `--mtime`, else $SOURCE_DATE_EPOCH when set and not empty.
fn mtime(flag: Option<u32>) -> anyhow::Result<Option<u32>> {
    if flag.is_some() {
        return Ok(flag);
    }
    match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) if !v.is_empty() => match v.trim().parse::<i64>() {
            Ok(s) => u32::try_from(s).map(Some).map_err(|_| {
                usage(format!(
                    "SOURCE_DATE_EPOCH={v:?}: outside the times an image stores \
                     (0 to {}, 1970 to 2106)",
                    u32::MAX
                ))
            }),
            Err(_) => Err(usage(format!(
                "SOURCE_DATE_EPOCH={v:?}: expected seconds since 1970"
            ))),
        },
        _ => Ok(None),
    }
}

/// `packfs pack SOURCE... -o OUTPUT`.
pub fn run(mut args: PackArgs, remote: &RemoteArgs) -> anyhow::Result<i32> {
    // From here on the image is `args.output`, whichever way it was given:
    // with -o every argument is a source, without it the last is the image.
    let mut paths = std::mem::take(&mut args.sources);
    let output = match args.output.take() {
        Some(o) => {
            // `pack SRC IMAGE -o OTHER`: an image named twice, not a source.
            if let Some(p) = paths.iter().find(|p| {
                !p.exists()
                    && !matches!(Source::from_arg(p), Source::Remote(_))
                    && format_for(p, None).is_ok()
                    && paths.len() > 1
            }) {
                return Err(usage(format!(
                    "{}: not found, and -o names the image: the image is given once, as the \
                     last argument or with -o/--output",
                    p.display()
                )));
            }
            o
        }
        None if paths.len() >= 2 => paths.pop().expect("two or more"),
        None => {
            return Err(usage(
                "no image to write: give it after the source or with -o/--output IMAGE",
            ))
        }
    };
    // `-o file:///PATH` names the file PATH.
    args.output = Some(match location(&output)? {
        mountfs::location::ImageLocation::Local(p) => p,
        _ => output,
    });
    // A quoted brace range names several sources (a name that exists as
    // given is taken as it is).
    let mut expanded = Vec::with_capacity(paths.len());
    for p in paths {
        match p.to_str() {
            Some(s) if s.contains('{') && !p.exists() => expanded.extend(
                crate::args::braces::expand(s)
                    .map_err(usage)?
                    .into_iter()
                    .map(Into::into),
            ),
            _ => expanded.push(p),
        }
    }
    let paths = expanded;
    let sources: Vec<Source> = paths.iter().map(|p| Source::from_arg(p)).collect();
    if let [_] = sources.as_slice() {
        args.src = paths[0].clone();
    }
    if matches!(sources.as_slice(), [Source::Dir(_)])
        && (args.strip_components > 0 || !args.expand_nested.is_empty())
    {
        return Err(usage(format!(
            "{}: --strip-components and --expand-nested apply to archive sources, not to a \
             directory",
            paths[0].display()
        )));
    }
    let plan = PackPlan::from_args(&args)?;
    if !matches!(sources.as_slice(), [Source::Dir(_)]) {
        return pack_sources(&args, &sources, &plan, remote);
    }
    let cancel = interrupt::install();
    // Kept alive until the pack is done: the image reads from it.
    let stage = stage_venv(&args, plan.mtime, &cancel)?;
    let overlay = stage.as_ref().map(|s| s.path().to_path_buf());
    let mut opts = pack_options(&args, &plan, overlay, &cancel);
    opts.follow = streamed(&args, &plan);
    let follow = opts.follow.clone();
    match args.shards {
        Some(n) => pack_shards(&args, n, &plan, stage, &cancel, remote, |spec| {
            packer::shards::pack_shards(&args.src, spec, args.shard, &opts)
        }),
        None => pack_image(&args, &plan, &cancel, remote, follow, |local| {
            let packed = match plan.format {
                OutFormat::Squashfs => packer::pack_squashfs(&args.src, local, &opts),
                OutFormat::Zip => packer::pack_zip(&args.src, local, &opts),
            };
            // The staging tree goes first: dying of a signal runs no destructors.
            drop(stage);
            packed
        }),
    }
}

/// The packer's options for what `args` and `plan` ask.
fn pack_options(
    args: &PackArgs,
    plan: &PackPlan,
    overlay: Option<std::path::PathBuf>,
    cancel: &Arc<AtomicBool>,
) -> PackOptions {
    let progress = if args.quiet {
        None
    } else {
        crate::progress::Bar::new_if_tty()
    };
    PackOptions {
        compressor: plan.compressor,
        level: plan.level,
        xz: plan.xz,
        block_size: plan.block_size,
        threads: args.threads,
        excludes: args.exclude.clone(),
        all_root: args.all_root,
        mtime: plan.mtime,
        force: args.force,
        no_fragments: args.no_fragments,
        fragment_incompressible: args.fragment_incompressible,
        overlay,
        progress: progress.map(|p| Arc::new(p) as Arc<dyn packer::Progress>),
        cancel: Some(cancel.clone()),
        stripe: args.stripe_count,
        order: plan.order.clone(),
        follow: None,
        checksums: !args.no_checksums,
        memory: args.memory,
    }
}

/// For a Python environment: scans it and stages what `--mount-at` and
/// `--compile` add (None when nothing is staged); prints the report.
fn stage_venv(
    args: &PackArgs,
    mtime: Option<u32>,
    cancel: &AtomicBool,
) -> anyhow::Result<Option<packer::venv::Stage>> {
    let is_venv = args.venv || packer::venv::is_venv(&args.src);
    if !is_venv && (args.mount_at.is_some() || args.compile) {
        return Err(usage(format!(
            "{}: --mount-at and --compile apply to Python environments, and it has no pyvenv.cfg (pass --venv to treat it as one)",
            args.src.display()
        )));
    }
    if !is_venv {
        return Ok(None);
    }
    let vopts = packer::venv::VenvOptions {
        mount_at: args.mount_at.clone(),
        compile: args.compile,
    };
    let (report, staged) = match packer::venv::prepare(&args.src, &vopts, mtime, Some(cancel)) {
        Err(packer::PackError::Interrupted) => return Err(die_of_signal()),
        r => r?,
    };
    for line in report.lines() {
        match line.strip_prefix("! ") {
            Some(w) => say!("packfs: warning: {w}"),
            None if !args.quiet => say!("packfs: venv: {line}"),
            None => {}
        }
    }
    Ok(staged)
}

/// `--shards N`: this task's shards (all, or `--shard K`), and the manifest
/// when every shard is there.
fn pack_shards(
    args: &PackArgs,
    n: u32,
    plan: &PackPlan,
    stage: Option<packer::venv::Stage>,
    cancel: &AtomicBool,
    remote: &RemoteArgs,
    pack: impl FnOnce(
        &packer::shards::ShardSpec,
    ) -> Result<Vec<packer::shards::ShardResult>, packer::PackError>,
) -> anyhow::Result<i32> {
    let (template, uploads, tmp_dir) = shards_to(args, n, plan, remote)?;
    let spec = packer::shards::ShardSpec {
        shards: n,
        template,
        manifest: args.manifest.clone(),
        entry_cost: args.entry_cost,
        format: match plan.format {
            OutFormat::Squashfs => packer::shards::ShardFormat::SquashFs,
            OutFormat::Zip => packer::shards::ShardFormat::Zip,
        },
        compression: format!("{:?}", plan.codec).to_lowercase(),
    };
    let done = pack(&spec);
    drop(stage);
    let done = match done {
        Err(packer::PackError::Interrupted) => {
            // Dying of a signal runs no destructors: the started uploads
            // are aborted and the packed shards removed here.
            let local = uploads.is_none();
            drop(uploads);
            drop(tmp_dir);
            return Err(match local {
                // Each shard is renamed into place when it is whole.
                true => interrupt::die_of_signal_saying(
                    "the shards finished before it are in place, without a manifest \
                     (the same command with --force packs them all again)",
                ),
                false => die_of_signal(),
            });
        }
        r => r?,
    };
    if let Some(up) = uploads {
        return send_shards(args, n, up, done, tmp_dir, cancel);
    }
    if args.quiet {
        return Ok(0);
    }
    report_shards(&done, n, &spec.manifest_path().display().to_string());
    Ok(0)
}

/// The template the shards are packed to: `-o` itself, or for S3 its file
/// name in a temporary directory (returned with it), whence the uploads
/// (returned too, see [`super::upload::ShardUploads`]) send them with their
/// sidecars. The uploads start here, before the walk, so that a wrong
/// bucket fails first.
fn shards_to(
    args: &PackArgs,
    n: u32,
    plan: &PackPlan,
    remote: &RemoteArgs,
) -> anyhow::Result<(
    String,
    Option<super::upload::ShardUploads>,
    Option<tempfile::TempDir>,
)> {
    Ok(match &plan.dest {
        Dest::File => (args.output().to_string_lossy().into_owned(), None, None),
        Dest::S3(target) => {
            let d = upload_dir("the shards")?;
            let name = args.output().file_name().unwrap_or("image".as_ref());
            let local = d.path().join(name).to_string_lossy().into_owned();
            let which: Vec<u32> = match args.shard {
                Some(k) => vec![k],
                None => (0..n).collect(),
            };
            let up = super::upload::ShardUploads::begin(target, n, &which, args.force, remote)?;
            (local, Some(up), Some(d))
        }
    })
}

/// Sends the shards packed (`done`) into `tmp_dir` to S3, and the manifest
/// when every shard is there; says where they went.
fn send_shards(
    args: &PackArgs,
    n: u32,
    up: super::upload::ShardUploads,
    mut done: Vec<packer::shards::ShardResult>,
    tmp_dir: Option<tempfile::TempDir>,
    cancel: &AtomicBool,
) -> anyhow::Result<i32> {
    let manifest = match up.send(&done, cancel, args.quiet) {
        Err(e)
            if matches!(
                e.downcast_ref(),
                Some(packfs_objstore::RemoteError::Interrupted)
            ) =>
        {
            drop(tmp_dir);
            return Err(die_of_signal());
        }
        r => r?,
    };
    drop(tmp_dir);
    for r in &mut done {
        r.path = super::upload::shard_url(args.output(), &r.path).into();
        r.manifest = None;
    }
    if let Some(last) = done.last_mut() {
        last.manifest = manifest.map(Into::into);
    }
    if !args.quiet {
        report_shards(&done, n, &args.output().to_string_lossy());
    }
    Ok(0)
}

/// A temporary directory in $TMPDIR, where `what` (the image, the shards)
/// is packed before it goes to S3.
fn upload_dir(what: &str) -> anyhow::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix("packfs-upload-")
        .tempdir()
        .with_context(|| format!("creating a temporary directory in $TMPDIR for {what}"))
}

/// The lines `pack --shards` prints: one per shard, then the manifest.
fn report_shards(done: &[packer::shards::ShardResult], n: u32, manifest: &str) {
    for r in done {
        say!(
            "shard {}/{n}: {} entries, {} in, {} out -> {}",
            r.index,
            r.summary.entries,
            human(r.summary.bytes_in),
            human(r.summary.bytes_out),
            r.path.display()
        );
    }
    match done.last().and_then(|r| r.manifest.as_ref()) {
        Some(m) => say!("manifest: {}", m.display()),
        None => say!(
            "manifest: not yet (written by the task that packs the last missing shard{})",
            match manifest.starts_with("s3://") {
                true => String::new(),
                false => format!(", or by `packfs shards finalize {manifest}`"),
            }
        ),
    }
}

/// Whether the image goes to S3 while it is written (one SquashFS image;
/// see `stream_upload`): then the follow the pack reports to.
fn streamed(args: &PackArgs, plan: &PackPlan) -> Option<std::sync::Arc<packer::follow::Follow>> {
    (args.shards.is_none()
        && matches!(plan.dest, Dest::S3(_))
        && plan.format == OutFormat::Squashfs)
        .then(super::stream_upload::follow)
}

/// One image, to a file or, for `s3://`, to a temporary file whose parts
/// are sent as they become final (`follow`, a SquashFS image) or after the
/// pack (a ZIP); `pack` packs it to the local path it is given.
fn pack_image(
    args: &PackArgs,
    plan: &PackPlan,
    cancel: &AtomicBool,
    remote: &RemoteArgs,
    follow: Option<std::sync::Arc<packer::follow::Follow>>,
    pack: impl FnOnce(&std::path::Path) -> Result<packer::PackSummary, packer::PackError>,
) -> anyhow::Result<i32> {
    let output = args.output();
    // To object storage: the multipart upload is started first (a wrong
    // bucket or key fails now, not after the pack), the image packed to a
    // temporary file, and sent (see packfs_objstore::upload).
    let (upload, numbered) = match (&plan.dest, &follow) {
        (Dest::S3(target), None) => (
            Some(super::upload::begin(target, args.force, remote)?),
            None,
        ),
        (Dest::S3(target), Some(_)) => (
            None,
            Some(super::upload::begin_numbered(target, args.force, remote)?),
        ),
        (Dest::File, _) => (None, None),
    };
    let tmp_dir = match matches!(plan.dest, Dest::S3(_)) {
        true => Some(upload_dir("the image")?),
        false => None,
    };
    let local = match &tmp_dir {
        Some(d) => d
            .path()
            .join(output.file_name().unwrap_or("image".as_ref())),
        None => output.to_path_buf(),
    };
    let uploading = || format!("uploading the image to {}", output.display());
    let t = std::time::Instant::now();
    let (packed, streamer) = match (numbered, &follow) {
        (Some(up), Some(f)) => {
            let (packed, st) =
                super::stream_upload::pack_while_sending(up, f, cancel, || pack(&local));
            (packed, Some(st))
        }
        _ => (pack(&local), None),
    };
    let summary = match (packed, &streamer) {
        // An upload that fails stops the pack (through the cancel flag),
        // and its error, not an interruption, is what is reported.
        (Err(packer::PackError::Interrupted), Some(Err(e)))
            if !matches!(e, packfs_objstore::RemoteError::Interrupted) =>
        {
            return Err(anyhow::anyhow!("{e}")).with_context(uploading);
        }
        (Err(packer::PackError::Interrupted), _) => {
            drop((upload, streamer, tmp_dir));
            return Err(die_of_signal());
        }
        (r, _) => r?,
    };
    let sent = match (upload, streamer) {
        (Some(up), _) => Some(super::upload::send(up, &local, cancel, args.quiet)),
        (None, Some(st)) => Some(
            st.and_then(|st| super::stream_upload::send_rest(st, &local, cancel, args.quiet, t)),
        ),
        (None, None) => None,
    };
    drop(tmp_dir);
    match sent {
        Some(Err(packfs_objstore::RemoteError::Interrupted)) => return Err(die_of_signal()),
        Some(r) => {
            r.with_context(uploading)?;
        }
        None => {}
    }
    if !args.quiet {
        print_summary(&summary, output);
    }
    Ok(0)
}

/// Archives, stdin, or several sources: one SquashFS image, read in one pass.
fn pack_sources(
    args: &PackArgs,
    sources: &[Source],
    plan: &PackPlan,
    remote: &RemoteArgs,
) -> anyhow::Result<i32> {
    if plan.format == OutFormat::Zip {
        return Err(usage(format!(
            "{}: archives and several sources pack to SquashFS images (.sqfs); ZIP output takes \
             one directory",
            args.output().display()
        )));
    }
    if args.mount_at.is_some() || args.compile || args.venv {
        return Err(usage(
            "--mount-at, --compile and --venv apply to a Python environment given as its directory",
        ));
    }
    let cancel = interrupt::install();
    let opts = pack_options(args, plan, None, &cancel);
    let so = packer::archive::SourceOptions {
        strip_components: args.strip_components,
        on_conflict: match args.on_conflict {
            PackConflict::Error => packer::archive::OnConflict::Error,
            PackConflict::First => packer::archive::OnConflict::First,
            PackConflict::Last => packer::archive::OnConflict::Last,
        },
        expand_nested: args.expand_nested.clone(),
        client: remote.client(),
    };
    let mut opts = opts;
    opts.follow = streamed(args, plan);
    let follow = opts.follow.clone();
    match args.shards {
        Some(n) => pack_shards(args, n, plan, None, &cancel, remote, |spec| {
            packer::shards::pack_source_shards(sources, &so, spec, args.shard, &opts)
        }),
        None => pack_image(args, plan, &cancel, remote, follow, |local| {
            packer::archive::pack_sources(sources, local, &opts, &so)
        }),
    }
}

fn print_summary(summary: &packer::PackSummary, output: &std::path::Path) {
    let ratio = if summary.bytes_in > 0 {
        summary.bytes_out as f64 / summary.bytes_in as f64
    } else {
        0.0
    };
    let from = match summary.source_bytes {
        0 => String::new(),
        n => format!(" (from {} of archives)", human(n)),
    };
    let secs = summary.elapsed.as_secs_f64();
    let rate = if secs > 0.0 {
        summary.entries as f64 / secs
    } else {
        0.0
    };
    let peak = match peak_rss() {
        Some(b) => format!(", peak memory {}", human(b)),
        None => String::new(),
    };
    say!(
        "packed {} entries ({} inodes): {} in{from}, {} out (ratio {:.3}), dedup saved {} in {} files, {secs:.2} s ({rate:.0} entries/s{peak}) -> {}",
        summary.entries,
        summary.inodes,
        human(summary.bytes_in),
        human(summary.bytes_out),
        ratio,
        human(summary.dedup_bytes),
        summary.dedup_files,
        output.display()
    );
}

/// This process's peak resident memory so far (`getrusage`'s high-water
/// mark), which is what `--memory` bounds; `None` if the kernel says nothing.
fn peak_rss() -> Option<u64> {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    // ru_maxrss is in KiB on Linux.
    (rc == 0 && ru.ru_maxrss > 0).then(|| ru.ru_maxrss as u64 * 1024)
}
