//! `packfs shards finalize|verify`.

use crate::args::cli::ShardsCommand;
use std::path::PathBuf;

/// The local path `arg` names (`file:///PATH` included); a manifest or
/// template on object storage, which these commands cannot read yet, is
/// refused as that instead of called a missing file.
fn local_only(what: &str, arg: &std::path::Path) -> anyhow::Result<PathBuf> {
    match crate::args::location(arg)? {
        mountfs::location::ImageLocation::Local(p) => Ok(p),
        _ => Err(crate::args::usage::usage(format!(
            "{arg}: shards {what} works on shards in a local or shared filesystem; on object \
             storage the task that completes the set writes the manifest, and every mount checks \
             each shard's size",
            arg = arg.display()
        ))),
    }
}

pub fn run(cmd: ShardsCommand) -> anyhow::Result<i32> {
    match cmd {
        ShardsCommand::Finalize {
            manifest_or_template,
        } => {
            let manifest_or_template = local_only("finalize", manifest_or_template.as_ref())?
                .to_string_lossy()
                .into_owned();
            let manifest = if manifest_or_template.contains("{shard}") {
                PathBuf::from(packfs_format::shards::manifest_name(&manifest_or_template))
            } else {
                PathBuf::from(&manifest_or_template)
            };
            let m = packer::shards::finalize(&manifest)?;
            say!(
                "wrote {} ({} shards, {} entries)",
                manifest.display(),
                m.shards.len(),
                m.split.total_entries
            );
            Ok(0)
        }
        ShardsCommand::Verify { manifest } => {
            use packer::shards::ShardCheck;
            let manifest = local_only("verify", &manifest)?;
            let (mut n, mut bytes) = (0, 0);
            let t = std::time::Instant::now();
            let bad = packer::shards::verify(&manifest, |c| {
                n += 1;
                match c {
                    ShardCheck::Ok { path, size, blake3 } => {
                        bytes += size;
                        outln!("{}: ok ({size} bytes, blake3 {blake3})", path.display());
                    }
                    ShardCheck::Bad { path, why } => {
                        outln!(
                            "{}: BAD: {}",
                            path.display(),
                            crate::oserror::plain_text(why)
                        );
                    }
                }
            })?;
            if bad > 0 {
                anyhow::bail!(
                    "{}: {bad} of {n} shards do not match the manifest (listed above)",
                    manifest.display()
                );
            }
            say!(
                "verified {n} shards ({}) in {:.1} s",
                packfs_bench::size::human(bytes),
                t.elapsed().as_secs_f64()
            );
            Ok(0)
        }
    }
}
