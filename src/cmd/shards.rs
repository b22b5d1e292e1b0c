//! `packfs shards finalize|verify`.

use crate::cli::ShardsCommand;
use std::path::PathBuf;

pub fn run(cmd: ShardsCommand) -> anyhow::Result<i32> {
    match cmd {
        ShardsCommand::Finalize {
            manifest_or_template,
        } => {
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
            for line in packer::shards::verify(&manifest)? {
                println!("{line}");
            }
            Ok(0)
        }
    }
}
