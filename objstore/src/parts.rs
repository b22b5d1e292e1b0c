//! A multipart upload whose parts the caller numbers, so that they may be
//! sent in any order: `pack -o s3://` sends an image while it is written,
//! part 1 onwards as they become final, and part 0 (which holds the
//! superblock, written last) at the end. S3 assembles the object by part
//! number; every part but the last by number must be at least 5 MiB.
//!
//! As [`crate::upload::Upload`]: created first (a wrong bucket or key fails
//! at once), at most [`IN_FLIGHT`] parts in the air, and aborted on any
//! error, on cancel, or when dropped before it completed, so no object and
//! no parts are left behind.

use crate::client::{classify, Remote};
use crate::error::RemoteError;
use crate::upload::{wait_part, IN_FLIGHT};
use object_store::multipart::{MultipartStore, PartId};
use object_store::MultipartId;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

type Flying = tokio::task::JoinHandle<object_store::Result<PartId>>;

/// An S3 multipart upload with numbered parts.
pub struct NumberedUpload {
    remote: Remote,
    store: Arc<dyn MultipartStore>,
    id: Option<MultipartId>,
    done: BTreeMap<usize, PartId>,
    flying: VecDeque<(usize, Flying)>,
    bytes: u64,
}

impl NumberedUpload {
    /// Starts the upload of the remote's object (an `s3://` one).
    pub fn begin(remote: Remote) -> Result<Self, RemoteError> {
        let store = remote.multipart().cloned().ok_or_else(|| {
            RemoteError::Config(format!(
                "{}: uploads go to s3:// objects only",
                remote.url()
            ))
        })?;
        let (s, path, url) = (
            store.clone(),
            remote.path().clone(),
            remote.url().to_string(),
        );
        let secs = remote.opts.timeout.as_secs();
        let id = remote.block_on("starting a multipart upload", async move {
            s.create_multipart(&path)
                .await
                .map_err(|e| classify(&url, secs, "starting a multipart upload", e))
        })?;
        Ok(NumberedUpload {
            remote,
            store,
            id: Some(id),
            done: BTreeMap::new(),
            flying: VecDeque::new(),
            bytes: 0,
        })
    }

    pub fn url(&self) -> &str {
        self.remote.url()
    }

    /// Bytes of the parts sent (or being sent).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Sends part `idx` (from 0): returns once at most [`IN_FLIGHT`] parts
    /// are in the air. On error the upload is aborted.
    pub fn put(
        &mut self,
        idx: usize,
        data: Vec<u8>,
        cancel: Option<&AtomicBool>,
    ) -> Result<(), RemoteError> {
        let r = self.put_inner(idx, data, cancel);
        if r.is_err() {
            self.abort();
        }
        r
    }

    fn put_inner(
        &mut self,
        idx: usize,
        data: Vec<u8>,
        cancel: Option<&AtomicBool>,
    ) -> Result<(), RemoteError> {
        let id = self.id.clone().expect("an upload not yet ended");
        let (s, path) = (self.store.clone(), self.remote.path().clone());
        self.bytes += data.len() as u64;
        let task = self
            .remote
            .handle()
            .spawn(async move { s.put_part(&path, &id, idx, data.into()).await });
        self.flying.push_back((idx, task));
        while self.flying.len() >= IN_FLIGHT {
            self.wait_one(cancel)?;
        }
        Ok(())
    }

    /// Waits for the oldest part in the air, checking for cancellation.
    fn wait_one(&mut self, cancel: Option<&AtomicBool>) -> Result<(), RemoteError> {
        let Some((idx, mut h)) = self.flying.pop_front() else {
            return Ok(());
        };
        let url = self.remote.url().to_string();
        let secs = self.remote.opts.timeout.as_secs();
        let part = wait_part(self.remote.handle(), &mut h, cancel, &url, secs)?;
        self.done.insert(idx, part);
        Ok(())
    }

    /// Waits for every part and completes the upload: the parts must be
    /// numbered 0 to N - 1. Returns N. On error the upload is aborted.
    pub fn complete(mut self, cancel: Option<&AtomicBool>) -> Result<usize, RemoteError> {
        let r = self.complete_inner(cancel);
        if r.is_err() {
            self.abort();
        }
        r
    }

    fn complete_inner(&mut self, cancel: Option<&AtomicBool>) -> Result<usize, RemoteError> {
        while !self.flying.is_empty() {
            self.wait_one(cancel)?;
        }
        let n = self.done.len();
        if self.done.keys().copied().ne(0..n) {
            return Err(RemoteError::Config(format!(
                "{}: parts sent are not numbered 0 to {}",
                self.remote.url(),
                n.saturating_sub(1)
            )));
        }
        let parts: Vec<PartId> = std::mem::take(&mut self.done).into_values().collect();
        let id = self.id.clone().expect("an upload not yet ended");
        let (s, path, url) = (
            self.store.clone(),
            self.remote.path().clone(),
            self.remote.url().to_string(),
        );
        let secs = self.remote.opts.timeout.as_secs();
        self.remote.block_on("completing the upload", async move {
            s.complete_multipart(&path, &id, parts)
                .await
                .map_err(|e| classify(&url, secs, "completing the upload", e))
        })?;
        self.id = None;
        Ok(n)
    }

    /// Aborts the upload (its parts are deleted); errors are logged only.
    fn abort(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        for (_, h) in self.flying.drain(..) {
            h.abort();
        }
        let (s, path, url) = (
            self.store.clone(),
            self.remote.path().clone(),
            self.remote.url().to_string(),
        );
        let secs = self.remote.opts.timeout.as_secs();
        let r = self.remote.block_on("aborting the upload", async move {
            s.abort_multipart(&path, &id)
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

impl Drop for NumberedUpload {
    fn drop(&mut self) {
        self.abort();
    }
}
