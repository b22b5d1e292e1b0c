//! `packfs pack -o s3://...`: the upload around the pack (the multipart
//! upload itself is `packfs_objstore::upload`).

use crate::args::cli::RemoteArgs;
use anyhow::{bail, Context};
use packfs_objstore::upload::Upload;
use packfs_objstore::{Remote, RemoteError, Target};
use std::path::Path;

use std::sync::atomic::AtomicBool;

/// Connects and starts the multipart upload; refuses an existing object
/// unless `force` (as for a file).
pub fn begin(target: &Target, force: bool, remote: &RemoteArgs) -> anyhow::Result<Upload> {
    Ok(Upload::begin(destination(target, force, remote)?)?)
}

/// [`begin`], for an upload whose parts are numbered by the caller (an
/// image sent while it is written).
pub fn begin_numbered(
    target: &Target,
    force: bool,
    remote: &RemoteArgs,
) -> anyhow::Result<packfs_objstore::parts::NumberedUpload> {
    Ok(packfs_objstore::parts::NumberedUpload::begin(destination(
        target, force, remote,
    )?)?)
}

/// The client for the upload's object, which must not exist unless `force`.
fn destination(target: &Target, force: bool, remote: &RemoteArgs) -> anyhow::Result<Remote> {
    let remote = Remote::connect_for_upload(target, &remote.client())?;
    match remote.head() {
        Ok(_) if !force => bail!(
            "{}: the object exists (pass --force to replace it)",
            target.url()
        ),
        Ok(_) => {}
        Err(RemoteError::Status { status, .. }) if status.starts_with("404") => {}
        Err(e) => return Err(e).context("checking the destination"),
    }
    Ok(remote)
}

/// Sends the packed image; the upload is aborted on error or signal.
pub fn send(
    up: Upload,
    image: &Path,
    cancel: &AtomicBool,
    quiet: bool,
) -> Result<u64, RemoteError> {
    let t = std::time::Instant::now();
    let parts = up.send_file(image, Some(cancel))?;
    if !quiet {
        say!(
            "uploaded in {parts} parts, {:.2} s",
            t.elapsed().as_secs_f64()
        );
    }
    Ok(parts)
}

/// The key prefix ("dir/" or "") and file name of an S3 key.
fn split_key(key: &str) -> (&str, &str) {
    match key.rfind('/') {
        Some(i) => (&key[..=i], &key[i + 1..]),
        None => ("", key),
    }
}

/// Where a shard packed locally at `local` goes: beside the template's key.
pub fn shard_url(template: &Path, local: &Path) -> String {
    let t = template.to_string_lossy();
    let dir = t.rfind('/').map_or(&t[..], |i| &t[..=i]);
    format!(
        "{dir}{}",
        local.file_name().unwrap_or_default().to_string_lossy()
    )
}

/// `pack --shards N -o s3://BUCKET/PREFIX/NAME-{shard}.EXT`: this task's
/// shards, uploaded, then their sidecars, then the manifest if every
/// shard's sidecar is in the bucket.
///
/// Why this is safe when the tasks of a job array finish together: each
/// task puts its sidecar object only after its image is complete, and lists
/// the sidecars only after its own put returned; S3 lists what was written
/// before (strong read-after-write consistency, also in Ceph RGW, which
/// LUMI-O runs), so the task whose sidecar completes the set sees them all.
/// Tasks finishing together may both see them all: they then put the same
/// bytes (the manifest depends only on the sidecars), and either PUT
/// replaces the other whole. Sidecars of another split (an older run with
/// other parameters) are ignored, as for local shards.
pub struct ShardUploads {
    bucket: String,
    /// "dir/" of the template's key, or "".
    prefix: String,
    /// The template's file name.
    template: String,
    /// One started multipart upload per shard this task packs.
    parts: Vec<(u32, Upload)>,
    remote: Remote,
    /// `--force`: a sibling's sidecar of another split is taken for a
    /// leftover (its shard is to be repacked) rather than refused.
    force: bool,
}

impl ShardUploads {
    /// Starts an upload for each shard of `which` (refusing existing
    /// objects unless `force`), before the pack.
    pub fn begin(
        target: &Target,
        n: u32,
        which: &[u32],
        force: bool,
        remote: &RemoteArgs,
    ) -> anyhow::Result<Self> {
        let Target::S3 { bucket, key } = target else {
            bail!("{}: shards are uploaded to s3:// only", target.url());
        };
        let (prefix, template) = split_key(key);
        let mut parts = Vec::new();
        for &k in which {
            let name = packfs_format::shards::shard_name(template, k, n)
                .with_context(|| format!("{}: no {{shard}} in the name", target.url()))?;
            let t = Target::S3 {
                bucket: bucket.clone(),
                key: format!("{prefix}{name}"),
            };
            parts.push((k, begin(&t, force, remote)?));
        }
        Ok(ShardUploads {
            bucket: bucket.clone(),
            prefix: prefix.into(),
            template: template.into(),
            parts,
            remote: Remote::connect_for_upload(target, &remote.client())?,
            force,
        })
    }

    /// Sends the packed shards and their sidecars, then writes the manifest
    /// if all N sidecars are there; returns its URL when this call wrote it.
    pub fn send(
        self,
        done: &[packer::shards::ShardResult],
        cancel: &AtomicBool,
        quiet: bool,
    ) -> anyhow::Result<Option<String>> {
        let url = |key: &str| format!("s3://{}/{key}", self.bucket);
        let mut split = None;
        for (r, (k, up)) in done.iter().zip(self.parts) {
            debug_assert_eq!(r.index, k);
            let name = r.path.file_name().unwrap_or_default().to_string_lossy();
            let key = format!("{}{name}", self.prefix);
            send(up, &r.path, cancel, quiet)
                .with_context(|| format!("uploading shard {k} to {}", url(&key)))?;
            let side = packer::shards::sidecar_path(&r.path);
            let bytes = std::fs::read(&side).with_context(|| side.display().to_string())?;
            let s: packer::shards::Sidecar = serde_json::from_slice(&bytes)
                .with_context(|| format!("{}: not a sidecar", side.display()))?;
            split = Some(s.split);
            let skey = format!("{key}.shard.json");
            self.remote
                .put_key(&skey, bytes)
                .with_context(|| format!("writing {}", url(&skey)))?;
        }
        let Some(split) = split else {
            return Ok(None);
        };
        let manifest = packfs_format::shards::manifest_name(&self.template);
        let mut found = Vec::new();
        for key in self.remote.list_keys(&self.prefix, ".shard.json")? {
            let bytes = self.remote.get_key(&key)?;
            match serde_json::from_slice::<packer::shards::Sidecar>(&bytes) {
                Ok(s) if s.manifest == manifest => found.push((url(&key), s)),
                Ok(_) => {}
                Err(e) => bail!("{}: not a shard sidecar: {e}", url(&key)),
            }
        }
        // As for local shards: a sibling packed with other split options
        // would leave the manifest unwritten for good, so it is an error
        // (unless --force, which takes it for a leftover to be repacked).
        if !self.force {
            let mine: Vec<u32> = done.iter().map(|r| r.index).collect();
            for (u, s) in &found {
                if s.split != split
                    && !mine.contains(&s.shard.index)
                    && s.shard.index < split.shards
                {
                    bail!(
                        "{u}: shard {} of {} was packed with other split options than this \
                         task ({}); every task of a split must pass the same options (repack \
                         the odd ones, with --force)",
                        s.shard.index,
                        url(&format!("{}{manifest}", self.prefix)),
                        packer::shards::split_differences(
                            &split,
                            "this task",
                            &s.split,
                            "that sidecar"
                        )
                        .join("; ")
                    );
                }
            }
        }
        match packer::shards::manifest_of(found, &split)? {
            Ok(m) => {
                let key = format!("{}{manifest}", self.prefix);
                self.remote
                    .put_key(&key, packer::shards::manifest_bytes(&m))
                    .with_context(|| format!("writing {}", url(&key)))?;
                Ok(Some(url(&key)))
            }
            Err(_) => Ok(None),
        }
    }
}
