//! `packfs pack -o s3://...`: the upload around the pack (the multipart
//! upload itself is `mountfs::remote::upload`).

use crate::cli::RemoteArgs;
use anyhow::{bail, Context};
use mountfs::remote::upload::Upload;
use mountfs::remote::{Remote, RemoteError, Target};
use std::path::Path;
use std::sync::atomic::AtomicBool;

/// Connects and starts the multipart upload; refuses an existing object
/// unless `force` (as for a file).
pub fn begin(target: &Target, force: bool, remote: &RemoteArgs) -> anyhow::Result<Upload> {
    let opts = remote.options();
    let remote = Remote::connect_for_upload(target, &opts)?;
    match remote.head() {
        Ok(_) if !force => bail!(
            "{}: the object exists (pass --force to replace it)",
            target.url()
        ),
        Ok(_) => {}
        Err(RemoteError::Status { status, .. }) if status.starts_with("404") => {}
        Err(e) => return Err(e).context("checking the destination"),
    }
    Ok(Upload::begin(remote)?)
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
        eprintln!(
            "uploaded in {parts} parts, {:.2} s",
            t.elapsed().as_secs_f64()
        );
    }
    Ok(parts)
}
