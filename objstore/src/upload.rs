//! `packfs pack -o s3://BUCKET/KEY`: a multipart upload that either
//! completes, making the object appear whole, or is aborted.
//!
//! This is the upload of a finished file (a ZIP image, a shard): ZIP's
//! writer fills in local headers behind itself, so its image is written to
//! a local temporary file and then sent. A SquashFS image is sent while it
//! is written instead, through [`crate::parts::NumberedUpload`] (its first
//! part, which holds the superblock written last, goes last). Memory stays
//! bounded either way: `part_size` bytes at a time, at most [`IN_FLIGHT`]
//! parts at once.
//!
//! The upload is created before the pack starts ([`Upload::begin`]), so a
//! wrong bucket, endpoint or key fails in seconds, not after an hour of
//! packing. [`Upload::send_file`] aborts it on any error or when the cancel
//! flag is raised (SIGINT/SIGTERM in the CLI), and dropping an `Upload` that
//! was not completed aborts it too, so no parts are left billed in the bucket.

use crate::client::classify;
use crate::client::Remote;
use crate::error::RemoteError;
use object_store::ObjectStoreExt;
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Parts being sent at once.
pub const IN_FLIGHT: usize = 2;
/// Default part size; grown for images over ~150 GB (S3 allows 10,000 parts).
pub const PART_SIZE: usize = 16 << 20;

/// A multipart upload in progress.
pub struct Upload {
    remote: Remote,
    upload: Option<Box<dyn object_store::MultipartUpload>>,
}

impl Upload {
    /// Starts a multipart upload to the remote's object.
    pub fn begin(remote: Remote) -> Result<Self, RemoteError> {
        let (store, path, url) = (
            remote.store().clone(),
            remote.path().clone(),
            remote.url().to_string(),
        );
        let secs = remote.opts.timeout.as_secs();
        let upload = remote.block_on("starting a multipart upload", async move {
            store
                .put_multipart(&path)
                .await
                .map_err(|e| classify(&url, secs, "starting a multipart upload", e))
        })?;
        Ok(Upload {
            remote,
            upload: Some(upload),
        })
    }

    /// Sends `file` part by part and completes the upload; returns the
    /// number of parts. On error or cancel the upload is aborted.
    pub fn send_file(
        mut self,
        file: &Path,
        cancel: Option<&AtomicBool>,
    ) -> Result<u64, RemoteError> {
        let r = self.send(file, cancel);
        if r.is_err() {
            self.abort();
        }
        r
    }

    fn send(&mut self, file: &Path, cancel: Option<&AtomicBool>) -> Result<u64, RemoteError> {
        let url = self.remote.url().to_string();
        let secs = self.remote.opts.timeout.as_secs();
        let local = |e: std::io::Error| RemoteError::Config(format!("{}: {e}", file.display()));
        let mut f = std::fs::File::open(file).map_err(local)?;
        let len = f.metadata().map_err(local)?.len();
        let part = part_size(len);
        let cancelled = || cancel.is_some_and(|c| c.load(Ordering::SeqCst));
        let upload = self.upload.as_mut().expect("an upload not yet ended");
        let rt = self.remote.handle().clone();
        type Part = tokio::task::JoinHandle<object_store::Result<()>>;
        let mut flying: std::collections::VecDeque<Part> = Default::default();
        let mut parts = 0u64;
        let mut sent = 0u64;
        // Waits for the oldest part, checking for cancellation meanwhile.
        let wait_one = |flying: &mut std::collections::VecDeque<Part>| {
            let mut h = flying.pop_front().expect("a part in flight");
            wait_part(&rt, &mut h, cancel, &url, secs)
        };
        while sent < len {
            if cancelled() {
                return Err(RemoteError::Interrupted);
            }
            let n = part.min((len - sent) as usize);
            let mut buf = vec![0u8; n];
            f.read_exact(&mut buf).map_err(local)?;
            sent += n as u64;
            let fut = upload.put_part(buf.into());
            flying.push_back(rt.spawn(fut));
            parts += 1;
            if flying.len() >= IN_FLIGHT {
                wait_one(&mut flying)?;
            }
        }
        while !flying.is_empty() {
            wait_one(&mut flying)?;
        }
        if cancelled() {
            return Err(RemoteError::Interrupted);
        }
        let upload = self.upload.take().expect("an upload not yet ended");
        let url2 = url.clone();
        self.remote.block_on("completing the upload", async move {
            let mut upload = upload;
            upload
                .complete()
                .await
                .map_err(|e| classify(&url2, secs, "completing the upload", e))
        })?;
        Ok(parts)
    }

    /// Aborts the upload (its parts are deleted); errors are logged only.
    fn abort(&mut self) {
        let Some(mut upload) = self.upload.take() else {
            return;
        };
        let url = self.remote.url().to_string();
        let secs = self.remote.opts.timeout.as_secs();
        let r = self.remote.block_on("aborting the upload", async move {
            upload
                .abort()
                .await
                .map_err(|e| classify(&url, secs, "aborting the upload", e))
        });
        if let Err(e) = r {
            log::error!(
                "{e} (the parts sent may remain until the bucket's lifecycle removes them)"
            );
        }
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        self.abort();
    }
}

/// Waits for the part being sent by `h`, checking `cancel` every 100 ms
/// (the task is aborted then); its error names `url`.
pub(crate) fn wait_part<T>(
    rt: &tokio::runtime::Handle,
    h: &mut tokio::task::JoinHandle<object_store::Result<T>>,
    cancel: Option<&AtomicBool>,
    url: &str,
    secs: u64,
) -> Result<T, RemoteError> {
    loop {
        if cancel.is_some_and(|c| c.load(Ordering::SeqCst)) {
            h.abort();
            return Err(RemoteError::Interrupted);
        }
        let r =
            rt.block_on(async { tokio::time::timeout(Duration::from_millis(100), &mut *h).await });
        match r {
            Err(_) => continue,
            Ok(Err(join)) => {
                return Err(RemoteError::Transport {
                    url: url.to_string(),
                    what: "uploading a part".into(),
                    detail: join.to_string(),
                })
            }
            Ok(Ok(r)) => return r.map_err(|e| classify(url, secs, "uploading a part", e)),
        }
    }
}

/// Part size for an object of `len` bytes: 16 MiB, or larger (whole MiB)
/// to stay within 9,000 parts.
pub fn part_size(len: u64) -> usize {
    let need = len.div_ceil(9000).div_ceil(1 << 20) << 20;
    (need as usize).max(PART_SIZE)
}

#[cfg(test)]
mod tests {
    #[test]
    fn parts_stay_within_the_s3_limit() {
        use super::*;
        assert_eq!(part_size(0), PART_SIZE);
        assert_eq!(part_size(100 << 30), PART_SIZE);
        let big = 1u64 << 40;
        let p = part_size(big) as u64;
        assert!(big.div_ceil(p) <= 9000 && p.is_multiple_of(1 << 20));
    }
}
