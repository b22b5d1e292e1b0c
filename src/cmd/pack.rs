//! `packfs pack`.

use crate::cli::{Codec, Command, OutFormat};
use crate::size::human;
use anyhow::{bail, Context};
use packer::{Compressor, PackOptions};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, OnceLock};

static CANCEL: OnceLock<Arc<AtomicBool>> = OnceLock::new();
/// The signal that asked the pack to stop (0: none yet).
static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only atomic stores: async-signal-safe. The packer notices between
    // batches, removes its temporary file and returns Interrupted.
    SIGNAL.store(sig, Ordering::SeqCst);
    if let Some(c) = CANCEL.get() {
        c.store(true, Ordering::SeqCst);
    }
}

/// After a pack stopped by a signal (its temporary file already removed):
/// says so, then dies of that signal, its default action restored.
///
/// Exiting with status 1 instead would hide the signal from the caller: a
/// shell running `packfs pack` in a loop or script stops on Ctrl-C only if
/// the child dies of SIGINT (bash's "wait and cooperative exit"), and a
/// batch system's SIGTERM would read as packfs failing on its own.
fn die_of_signal() -> anyhow::Error {
    let sig = SIGNAL.load(Ordering::SeqCst);
    let name = match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => return packer::PackError::Interrupted.into(),
    };
    eprintln!("packfs: interrupted by {name}; no image written");
    // SAFETY: restoring a default action and raising a signal have no
    // memory effects; no other code of ours handles these signals now.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
    // Not reached: the default action of all three is to terminate.
    std::process::exit(128 + sig)
}

fn install_cancel_handler() -> Arc<AtomicBool> {
    let flag = CANCEL
        .get_or_init(|| Arc::new(AtomicBool::new(false)))
        .clone();
    // SAFETY: the handler only performs an atomic store.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as usize);
        libc::signal(libc::SIGTERM, on_signal as *const () as usize);
        libc::signal(libc::SIGHUP, on_signal as *const () as usize);
    }
    flag
}

/// Where the image goes.
enum Dest {
    File,
    S3(mountfs::remote::Target),
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
        _ => bail!(
            "{}: cannot tell the image format from the extension; use .sqfs, .squashfs or .zip, or pass --format",
            output.display()
        ),
    })
}

pub fn run(c: Command) -> anyhow::Result<i32> {
    let Command::Pack {
        src,
        output,
        format,
        compression,
        level,
        block_size,
        threads,
        exclude,
        force,
        all_root,
        mtime,
        no_fragments,
        mount_at,
        compile,
        venv,
        quiet,
        shards,
        shard,
        manifest,
        entry_cost,
    } = c
    else {
        unreachable!()
    };
    let template = output.to_string_lossy().into_owned();
    // The extension after {shard} decides the format, as for one image.
    let fmt = format_for(&output, format)?;
    if shards.is_none() && template.contains("{shard}") {
        bail!("{template}: {{shard}} in the output name needs --shards N");
    }
    let dest = match super::location(&output)? {
        mountfs::location::ImageLocation::Local(_) => Dest::File,
        mountfs::location::ImageLocation::S3 { bucket, key } => {
            Dest::S3(mountfs::remote::Target::S3 { bucket, key })
        }
        mountfs::location::ImageLocation::Http(u) => bail!(
            "{u}: packfs uploads to s3://BUCKET/KEY only (a plain web server takes no uploads)"
        ),
    };
    if shards.is_some() && matches!(dest, Dest::S3(_)) {
        bail!("{template}: shards are packed to local files; upload them, or pack each to s3:// one by one");
    }
    if !block_size.is_power_of_two() || !(4096..=1 << 20).contains(&block_size) {
        bail!("--block-size {block_size}: must be a power of two from 4K to 1M");
    }
    let compression = compression.unwrap_or(match fmt {
        OutFormat::Squashfs => Codec::Zstd,
        OutFormat::Zip => Codec::Deflate,
    });
    let compressor = match compression {
        Codec::Zstd => Compressor::Zstd,
        Codec::Gzip | Codec::Deflate => Compressor::Gzip,
        Codec::Lz4 => Compressor::Lz4,
        Codec::Xz => Compressor::Xz,
    };
    if fmt == OutFormat::Zip && !matches!(compressor, Compressor::Gzip | Compressor::Zstd) {
        bail!(
            "ZIP images take -c deflate or -c zstd, not {}",
            compressor.name()
        );
    }
    let level = level.or(match (fmt, compressor) {
        (_, Compressor::Zstd) => Some(3),
        (OutFormat::Zip, _) => Some(6),
        _ => None,
    });
    if let Some(l) = level {
        let (lo, hi) = match (fmt, compressor) {
            (OutFormat::Zip, Compressor::Gzip) => (0, 9),
            _ => packfs_format::codec::Encoder::level_range(compressor),
        };
        if !(lo..=hi).contains(&l) {
            bail!("--level {l}: {} accepts {lo}..={hi}", compressor.name());
        }
    }
    let mtime =
        match mtime {
            Some(m) => Some(m),
            None => match std::env::var("SOURCE_DATE_EPOCH") {
                Ok(v) if !v.is_empty() => Some(v.trim().parse::<u32>().with_context(|| {
                    format!("SOURCE_DATE_EPOCH={v:?} is not a number of seconds")
                })?),
                _ => None,
            },
        };
    let cancel = install_cancel_handler();
    let is_venv = venv || packer::venv::is_venv(&src);
    if !is_venv && (mount_at.is_some() || compile) {
        bail!(
            "{}: --mount-at and --compile apply to Python environments, and it has no pyvenv.cfg (pass --venv to treat it as one)",
            src.display()
        );
    }
    // Kept alive until the pack is done: the image reads from it.
    let mut stage = None;
    if is_venv {
        let vopts = packer::venv::VenvOptions {
            mount_at: mount_at.clone(),
            compile,
        };
        let (report, staged) = match packer::venv::prepare(&src, &vopts, mtime, Some(&cancel)) {
            Err(packer::PackError::Interrupted) => return Err(die_of_signal()),
            r => r?,
        };
        for line in report.lines() {
            match line.strip_prefix("! ") {
                Some(w) => eprintln!("packfs: warning: {w}"),
                None if !quiet => eprintln!("packfs: venv: {line}"),
                None => {}
            }
        }
        stage = staged;
    }
    let progress = if quiet {
        None
    } else {
        crate::progress::Bar::new_if_tty()
    };
    let opts = PackOptions {
        compressor,
        level,
        block_size: block_size as u32,
        threads,
        excludes: exclude,
        all_root,
        mtime,
        force,
        no_fragments,
        overlay: stage.as_ref().map(|s| s.path().to_path_buf()),
        progress: progress.map(|p| Arc::new(p) as Arc<dyn packer::Progress>),
        cancel: Some(cancel.clone()),
    };
    // To object storage: the multipart upload is started first (a wrong
    // bucket or key fails now, not after the pack), the image packed to a
    // temporary file, then sent (see mountfs::remote::upload).
    let upload = match &dest {
        Dest::S3(target) => Some(super::upload::begin(target, force)?),
        Dest::File => None,
    };
    let tmp_dir = match &upload {
        Some(_) => Some(
            tempfile::Builder::new()
                .prefix("packfs-upload-")
                .tempdir()
                .context("creating a temporary directory in $TMPDIR for the image")?,
        ),
        None => None,
    };
    let local = match &tmp_dir {
        Some(d) => d
            .path()
            .join(output.file_name().unwrap_or("image".as_ref())),
        None => output.clone(),
    };
    if let Some(n) = shards {
        let spec = packer::shards::ShardSpec {
            shards: n,
            template,
            manifest,
            entry_cost,
            format: match fmt {
                OutFormat::Squashfs => packer::shards::ShardFormat::SquashFs,
                OutFormat::Zip => packer::shards::ShardFormat::Zip,
            },
            compression: format!("{compression:?}").to_lowercase(),
        };
        let done = packer::shards::pack_shards(&src, &spec, shard, &opts);
        drop(stage);
        let done = match done {
            Err(packer::PackError::Interrupted) => return Err(die_of_signal()),
            r => r?,
        };
        if !quiet {
            for r in &done {
                eprintln!(
                    "shard {}/{n}: {} entries, {} in, {} out -> {}",
                    r.index,
                    r.summary.entries,
                    human(r.summary.bytes_in),
                    human(r.summary.bytes_out),
                    r.path.display()
                );
            }
            match done.last().and_then(|r| r.manifest.as_ref()) {
                Some(m) => eprintln!("manifest: {}", m.display()),
                None => eprintln!(
                    "manifest: not yet (written by the task that packs the last missing shard, \
                     or by `packfs shards finalize {}`)",
                    spec.manifest_path().display()
                ),
            }
        }
        return Ok(0);
    }
    let packed = match fmt {
        OutFormat::Squashfs => packer::pack_squashfs(&src, &local, &opts),
        OutFormat::Zip => packer::pack_zip(&src, &local, &opts),
    };
    // The staging tree goes first: dying of a signal runs no destructors.
    drop(stage);
    let summary = match packed {
        Err(packer::PackError::Interrupted) => {
            drop(upload);
            drop(tmp_dir);
            return Err(die_of_signal());
        }
        r => r?,
    };
    if let Some(up) = upload {
        let sent = super::upload::send(up, &local, &cancel, quiet);
        drop(tmp_dir);
        match sent {
            Err(mountfs::remote::RemoteError::Interrupted) => return Err(die_of_signal()),
            r => {
                r.with_context(|| format!("uploading the image to {}", output.display()))?;
            }
        }
    }
    if !quiet {
        let ratio = if summary.bytes_in > 0 {
            summary.bytes_out as f64 / summary.bytes_in as f64
        } else {
            0.0
        };
        eprintln!(
            "packed {} entries ({} inodes): {} in, {} out (ratio {:.3}), dedup saved {} in {} files, {:.2} s -> {}",
            summary.entries,
            summary.inodes,
            human(summary.bytes_in),
            human(summary.bytes_out),
            ratio,
            human(summary.dedup_bytes),
            summary.dedup_files,
            summary.elapsed.as_secs_f64(),
            output.display()
        );
    }
    Ok(0)
}
