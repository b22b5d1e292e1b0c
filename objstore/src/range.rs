//! A range of the pinned version of an object: one GET with `If-Match`,
//! its answer checked before its bytes are used. Every reader of an object
//! fetches this way (mountfs's image source, [`crate::ObjectReader`]), so
//! none of them can mix bytes of two versions.

use crate::client::{classify, Remote, Version};
use crate::error::RemoteError;
use bytes::Bytes;
use object_store::{GetOptions, GetRange};
use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

impl Remote {
    /// The bytes `span` of `version` (pinned by [`Remote::head`]): one range
    /// GET carrying `If-Match`, whose answer must be that version (ETag, or
    /// Last-Modified without one, and length) and the range asked. Retries
    /// are object_store's; the whole fetch is cut at `limit` (the
    /// client's timeout, or less for a caller that knows the server is
    /// failing). Counted as a range fetched.
    pub async fn get_range(
        &self,
        version: &Version,
        span: Range<u64>,
        limit: Duration,
    ) -> Result<Bytes, RemoteError> {
        let (start, end) = (span.start, span.end);
        let url = self.url();
        let what = format!("range GET of bytes {start}..{end}");
        let secs = self.opts.timeout.as_secs();
        let t0 = Instant::now();
        let get = async {
            let o = GetOptions {
                range: Some(GetRange::Bounded(start..end)),
                if_match: version.etag.clone(),
                ..Default::default()
            };
            let r = self
                .store()
                .get_opts(self.path(), o)
                .await
                .map_err(|e| classify(url, secs, &what, e))?;
            check(url, version, &r.meta, &r.range, start..end)?;
            r.bytes().await.map_err(|e| classify(url, secs, &what, e))
        };
        let bytes = match tokio::time::timeout(limit, get).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(RemoteError::Timeout {
                    url: url.into(),
                    what,
                    secs: whole_secs(limit),
                    cause: self.health.last_since(t0),
                    extra: String::new(),
                });
            }
        };
        if bytes.len() as u64 != end - start {
            return Err(RemoteError::Transport {
                url: url.into(),
                what,
                detail: format!("{} bytes arrived", bytes.len()),
            });
        }
        let c = &self.counters;
        c.ranges.fetch_add(1, Relaxed);
        c.bytes.fetch_add(bytes.len() as u64, Relaxed);
        Ok(bytes)
    }
}

/// The answer must come from the pinned version and be the range asked.
fn check(
    url: &str,
    v: &Version,
    meta: &object_store::ObjectMeta,
    got: &Range<u64>,
    want: Range<u64>,
) -> Result<(), RemoteError> {
    let changed = |detail: String| RemoteError::Changed {
        url: url.into(),
        detail,
    };
    let missing = |validator, pinned: &str| RemoteError::NoValidator {
        url: url.into(),
        validator,
        pinned: pinned.into(),
    };
    match (&v.etag, &meta.e_tag) {
        (Some(pinned), Some(now)) if pinned != now => {
            return Err(changed(format!("ETag {pinned} is now {now}")));
        }
        (Some(pinned), None) => return Err(missing("ETag", pinned)),
        _ => {}
    }
    if v.etag.is_none() {
        let now = (meta.last_modified.timestamp() != 0).then(|| meta.last_modified.to_rfc2822());
        match (&v.modified, &now) {
            (Some(pinned), None) => return Err(missing("Last-Modified", pinned)),
            (Some(pinned), Some(now)) if pinned != now => {
                return Err(changed(format!("Last-Modified {pinned} is now {now}")));
            }
            _ => {}
        }
    }
    if meta.size != v.len {
        return Err(changed(format!("length {} is now {}", v.len, meta.size)));
    }
    if *got != want {
        return Err(RemoteError::Transport {
            url: url.into(),
            what: format!("range GET of bytes {}..{}", want.start, want.end),
            detail: format!("the server sent bytes {}..{}", got.start, got.end),
        });
    }
    Ok(())
}

/// Seconds for a message, rounded up: a limit of half a second is not
/// "0 s".
fn whole_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}
