//! Requests about other objects of a bucket than the one a [`Remote`] was
//! opened for: the lengths of a manifest's shards (one client per bucket,
//! HEADs concurrent) and what `pack --shards -o s3://...` needs to write a
//! manifest beside its shards (list, small GETs and PUTs).

use crate::client::{classify, obj_path, Remote, Target};
use crate::error::RemoteError;
use crate::options::ClientOptions;
use object_store::{ObjectStore, ObjectStoreExt};
use std::collections::BTreeMap;

/// HEADs sent at once for one bucket: enough to hide the first-byte
/// latency of hundreds of shards, few enough for any server.
const CONCURRENT_HEADS: usize = 32;

impl Remote {
    fn url_of(&self, key: &str) -> String {
        match self.url().strip_prefix("s3://") {
            Some(rest) => {
                let bucket = rest.split('/').next().unwrap_or(rest);
                format!("s3://{bucket}/{key}")
            }
            None => self.url().to_string(),
        }
    }

    /// The lengths of objects `keys` of this remote's bucket, HEADs sent
    /// `CONCURRENT_HEADS` at a time; each error names its object.
    pub fn lengths_of(&self, keys: &[String]) -> Vec<Result<u64, RemoteError>> {
        let secs = self.opts.timeout.as_secs();
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(CONCURRENT_HEADS) {
            let tasks: Vec<_> = chunk
                .iter()
                .map(|k| {
                    let (store, url) = (self.store().clone(), self.url_of(k));
                    let path = obj_path(&url, k);
                    self.handle().spawn(async move {
                        store
                            .head(&path?)
                            .await
                            .map(|m| m.size)
                            .map_err(|e| classify(&url, secs, "", e))
                    })
                })
                .collect();
            for (t, k) in tasks.into_iter().zip(chunk) {
                let url = self.url_of(k);
                out.push(self.block_on("HEAD", async move {
                    t.await.map_err(|e| RemoteError::Transport {
                        url,
                        what: "HEAD".into(),
                        detail: e.to_string(),
                    })?
                }));
            }
        }
        out
    }

    /// Keys under `prefix` (a "directory" ending in `/`, or empty) whose
    /// names end with `suffix`, not descending into deeper "directories".
    pub fn list_keys(&self, prefix: &str, suffix: &str) -> Result<Vec<String>, RemoteError> {
        let (store, url) = (self.store().clone(), self.url_of(prefix));
        let secs = self.opts.timeout.as_secs();
        let p = match prefix.trim_end_matches('/') {
            "" => None,
            dir => Some(obj_path(&url, dir)?),
        };
        let listed = self.block_on("listing", async move {
            store
                .list_with_delimiter(p.as_ref())
                .await
                .map_err(|e| classify(&url, secs, "listing", e))
        })?;
        Ok(listed
            .objects
            .into_iter()
            .map(|m| m.location.to_string())
            .filter(|k| k.ends_with(suffix))
            .collect())
    }

    /// The whole object `key` of this bucket (for small objects).
    pub fn get_key(&self, key: &str) -> Result<Vec<u8>, RemoteError> {
        let (store, url) = (self.store().clone(), self.url_of(key));
        let path = obj_path(&url, key)?;
        let secs = self.opts.timeout.as_secs();
        self.block_on("GET", async move {
            let r = store
                .get(&path)
                .await
                .map_err(|e| classify(&url, secs, "GET", e))?;
            r.bytes()
                .await
                .map(|b| b.to_vec())
                .map_err(|e| classify(&url, secs, "GET", e))
        })
    }

    /// Writes the small object `key` of this bucket in one PUT: it appears
    /// whole or not at all.
    pub fn put_key(&self, key: &str, bytes: Vec<u8>) -> Result<(), RemoteError> {
        let (store, url) = (self.store().clone(), self.url_of(key));
        let path = obj_path(&url, key)?;
        let secs = self.opts.timeout.as_secs();
        self.block_on("PUT", async move {
            store
                .put(&path, bytes.into())
                .await
                .map(|_| ())
                .map_err(|e| classify(&url, secs, "PUT", e))
        })
    }
}

/// The lengths of the objects `targets`, in order: the S3 objects of one
/// bucket through one client and concurrent HEADs, each other URL on its
/// own. Each error names its object.
pub fn lengths(targets: &[Target], opts: &ClientOptions) -> Vec<Result<u64, RemoteError>> {
    let mut out: Vec<Option<Result<u64, RemoteError>>> = vec![None; targets.len()];
    let mut buckets: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    let mut http = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        match t {
            Target::S3 { bucket, .. } => buckets.entry(bucket).or_default().push(i),
            Target::Http { .. } => http.push(i),
        }
    }
    // HTTP objects have no bucket to list or share a client: their HEADs
    // go out `CONCURRENT_HEADS` at a time too, so that a server that does
    // not answer costs one timeout, not one per shard.
    for chunk in http.chunks(CONCURRENT_HEADS) {
        let got: Vec<_> = std::thread::scope(|s| {
            let tasks: Vec<_> = chunk
                .iter()
                .map(|&i| {
                    s.spawn(move || {
                        Remote::connect(&targets[i], opts)
                            .and_then(|r| r.head())
                            .map(|v| v.len)
                    })
                })
                .collect();
            tasks
                .into_iter()
                .map(|t| {
                    t.join().unwrap_or_else(|_| {
                        Err(RemoteError::Config(
                            "a HEAD request's thread panicked".into(),
                        ))
                    })
                })
                .collect()
        });
        for (&i, len) in chunk.iter().zip(got) {
            out[i] = Some(len);
        }
    }
    for idx in buckets.values() {
        let keys: Vec<String> = idx
            .iter()
            .map(|&i| match &targets[i] {
                Target::S3 { key, .. } => key.clone(),
                Target::Http { .. } => unreachable!("grouped S3 targets only"),
            })
            .collect();
        match Remote::connect(&targets[idx[0]], opts) {
            Ok(r) => {
                for (&i, len) in idx.iter().zip(r.lengths_of(&keys)) {
                    out[i] = Some(len);
                }
            }
            Err(e) => {
                for &i in idx {
                    out[i] = Some(Err(e.clone()));
                }
            }
        }
    }
    out.into_iter()
        .map(|r| r.expect("every target answered"))
        .collect()
}
