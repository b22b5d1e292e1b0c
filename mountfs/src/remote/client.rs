//! The connection to one object: an object_store client (S3 or plain
//! HTTP), the tokio runtime its requests run on, and the request counters.
//!
//! Sync on the outside: the image readers and FUSE session threads call
//! [`Remote::block_on`] or spawn onto [`Remote::handle`] and wait; the
//! runtime's two worker threads only move bytes. The runtime must be created
//! after any `fork` (the mount daemon opens remote images in the child).

use super::config::{self, S3Settings};
use super::error::RemoteError;
use super::options::RemoteOptions;
use super::stats::RemoteCounters;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};
use object_store::path::Path as ObjPath;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt, RetryConfig};
use std::future::Future;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which object, in the form each client wants it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    S3 { bucket: String, key: String },
    Http { url: String },
}

impl Target {
    /// The URL as the user wrote it, for messages, without its query: the
    /// query of a presigned URL is its signature, a credential that must
    /// not end up in logs.
    pub fn url(&self) -> String {
        match self {
            Target::S3 { bucket, key } => format!("s3://{bucket}/{key}"),
            Target::Http { url } => match url.split_once('?') {
                Some((base, _)) => format!("{base}?…"),
                None => url.clone(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_url_without_its_query() {
        let t = |u: &str| Target::Http { url: u.into() }.url();
        assert_eq!(t("https://h/p.sqfs"), "https://h/p.sqfs");
        assert_eq!(
            t("https://h/p.sqfs?X-Amz-Signature=abc&X-Amz-Expires=60"),
            "https://h/p.sqfs?…"
        );
        let s3 = Target::S3 {
            bucket: "b".into(),
            key: "k/x.sqfs".into(),
        };
        assert_eq!(s3.url(), "s3://b/k/x.sqfs");
    }
}

/// Counts every request the object_store client sends (wraps reqwest).
#[derive(Debug)]
struct Counting {
    inner: HttpClient,
    counters: Arc<RemoteCounters>,
}

#[async_trait::async_trait]
impl HttpService for Counting {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let c = &self.counters;
        let get = req.method().as_str() == "GET";
        match req.method().as_str() {
            "GET" => &c.gets,
            "HEAD" => &c.heads,
            _ => &c.other_requests,
        }
        .fetch_add(1, Relaxed);
        let t = Instant::now();
        let r = self.inner.execute(req).await;
        if get {
            let us = t.elapsed().as_micros() as u64;
            c.ttfb_us_sum.fetch_add(us, Relaxed);
            c.ttfb_us_max.fetch_max(us, Relaxed);
        }
        let failed = match &r {
            Ok(res) => {
                let s = res.status().as_u16();
                s >= 500 || s == 408 || s == 429
            }
            Err(_) => true,
        };
        if failed {
            c.failed_requests.fetch_add(1, Relaxed);
        }
        r
    }
}

#[derive(Debug)]
struct CountingConnector(Arc<RemoteCounters>);

impl HttpConnector for CountingConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(Counting {
            inner,
            counters: self.0.clone(),
        }))
    }
}

/// What was pinned at open: the version every later read must match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    pub len: u64,
    pub etag: Option<String>,
    /// Last-Modified, used only when the server sends no ETag.
    pub modified: Option<String>,
}

/// One object on one server, with its own runtime and counters.
pub struct Remote {
    runtime: tokio::runtime::Runtime,
    store: Arc<dyn ObjectStore>,
    path: ObjPath,
    url: String,
    pub opts: RemoteOptions,
    pub counters: Arc<RemoteCounters>,
    /// Where the S3 keys came from ("environment", "profile x", anonymous).
    pub keys_from: Option<String>,
}

impl Remote {
    /// Builds the client for `target` (no request is sent yet). S3 settings
    /// come from the process environment, the AWS files and `opts`.
    pub fn connect(target: &Target, opts: &RemoteOptions) -> Result<Self, RemoteError> {
        let settings = match target {
            Target::S3 { .. } => Some(config::resolve(
                &|k| std::env::var(k).ok(),
                opts.endpoint.as_deref(),
                opts.profile.as_deref(),
            )?),
            Target::Http { .. } => None,
        };
        Self::connect_with(target, opts, settings.as_ref())
    }

    /// [`Remote::connect`] for an upload: each request (a part of up to
    /// 64 MiB) may take the whole `--remote-timeout`, not a quarter of it.
    pub fn connect_for_upload(target: &Target, opts: &RemoteOptions) -> Result<Self, RemoteError> {
        let settings = config::resolve(
            &|k| std::env::var(k).ok(),
            opts.endpoint.as_deref(),
            opts.profile.as_deref(),
        )?;
        Self::build(target, opts, Some(&settings), opts.timeout)
    }

    /// [`Remote::connect`] with explicit S3 settings (None for HTTP).
    pub fn connect_with(
        target: &Target,
        opts: &RemoteOptions,
        settings: Option<&S3Settings>,
    ) -> Result<Self, RemoteError> {
        Self::build(target, opts, settings, opts.attempt_timeout())
    }

    fn build(
        target: &Target,
        opts: &RemoteOptions,
        settings: Option<&S3Settings>,
        attempt: Duration,
    ) -> Result<Self, RemoteError> {
        opts.validate().map_err(RemoteError::Config)?;
        let url = target.url();
        let counters = Arc::new(RemoteCounters::default());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("packfs-remote")
            .enable_all()
            .build()
            .map_err(|e| RemoteError::Config(format!("{url}: starting the I/O runtime: {e}")))?;
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(50),
                max_backoff: Duration::from_secs(2),
                base: 2.0,
            },
            max_retries: 1000,
            retry_timeout: opts.timeout,
        };
        let client = super::roots::with_bundled_roots(ClientOptions::new())
            .with_allow_http(true)
            .with_timeout(attempt)
            .with_connect_timeout(attempt.min(Duration::from_secs(5)))
            .with_pool_max_idle_per_host(32);
        let connector = Arc::new(CountingConnector(counters.clone()));
        let bad = |e: object_store::Error| RemoteError::Config(format!("{url}: {e}"));
        let (store, path, keys_from): (Arc<dyn ObjectStore>, ObjPath, _) = match target {
            Target::S3 { bucket, key } => {
                let s = settings.cloned().unwrap_or_default();
                let mut b = object_store::aws::AmazonS3Builder::new()
                    .with_bucket_name(bucket)
                    .with_region(&s.region)
                    .with_virtual_hosted_style_request(false)
                    .with_retry(retry)
                    .with_client_options(client)
                    .with_http_connector(ConnectorRef(connector));
                if let Some(e) = &s.endpoint {
                    b = b.with_endpoint(e);
                }
                b = match &s.keys {
                    Some((id, secret, token)) => {
                        let b = b.with_access_key_id(id).with_secret_access_key(secret);
                        match token {
                            Some(t) => b.with_token(t),
                            None => b,
                        }
                    }
                    // Without keys object_store would ask the EC2 metadata
                    // service (a hang off AWS); public buckets take unsigned
                    // requests.
                    None => b.with_skip_signature(true),
                };
                (
                    Arc::new(b.build().map_err(bad)?),
                    ObjPath::from(key.as_str()),
                    Some(s.keys_from),
                )
            }
            Target::Http { url: u } => {
                let store = object_store::http::HttpBuilder::new()
                    .with_url(u)
                    .with_retry(retry)
                    .with_client_options(client)
                    .with_http_connector(ConnectorRef(connector))
                    .build()
                    .map_err(bad)?;
                (Arc::new(store), ObjPath::default(), None)
            }
        };
        Ok(Remote {
            runtime,
            store,
            path,
            url,
            opts: opts.clone(),
            counters,
            keys_from,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    pub fn path(&self) -> &ObjPath {
        &self.path
    }

    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime.handle()
    }

    /// Runs `f` on the runtime and waits for it, at most the configured
    /// timeout (`what` names the operation in the error).
    pub fn block_on<T>(
        &self,
        what: &str,
        f: impl Future<Output = Result<T, RemoteError>>,
    ) -> Result<T, RemoteError> {
        let secs = self.opts.timeout.as_secs();
        self.runtime
            .block_on(async { tokio::time::timeout(self.opts.timeout, f).await })
            .unwrap_or_else(|_| {
                Err(RemoteError::Timeout {
                    url: self.url.clone(),
                    what: what.into(),
                    secs,
                    last: String::new(),
                })
            })
    }

    /// HEAD: the object's length and version, or the error a user needs
    /// (403 with the server's reason, 404, connection refused...).
    ///
    /// A HEAD refused while a one-byte GET is answered is a presigned URL
    /// (its signature covers the method, so S3 answers HEAD with 403
    /// SignatureDoesNotMatch): the GET's answer pins the object instead
    /// (total length from Content-Range, ETag, Last-Modified).
    pub fn head(&self) -> Result<Version, RemoteError> {
        let (store, path) = (self.store.clone(), self.path.clone());
        let url = self.url.clone();
        let meta = self.block_on("HEAD", async move {
            match store.head(&path).await {
                Ok(m) => Ok(m),
                // A HEAD answer has no body; a one-byte GET gets the
                // server's reason (NoSuchBucket or NoSuchKey,
                // InvalidAccessKeyId or SignatureDoesNotMatch).
                Err(e) => {
                    let head = classify(&url, "HEAD", e);
                    if !matches!(head, RemoteError::Status { .. }) {
                        return Err(head);
                    }
                    let o = object_store::GetOptions {
                        range: Some(object_store::GetRange::Bounded(0..1)),
                        ..Default::default()
                    };
                    match store.get_opts(&path, o).await {
                        Err(e) => match classify(&url, "GET", e) {
                            get @ RemoteError::Status { .. } => Err(get),
                            _ => Err(head),
                        },
                        Ok(r) => Ok(r.meta),
                    }
                }
            }
        })?;
        let modified =
            (meta.last_modified.timestamp() != 0).then(|| meta.last_modified.to_rfc2822());
        Ok(Version {
            len: meta.size,
            etag: meta.e_tag,
            modified,
        })
    }
}

/// object_store wants the connector by value; this shares ours.
#[derive(Debug)]
struct ConnectorRef(Arc<CountingConnector>);

impl HttpConnector for ConnectorRef {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        self.0.connect(options)
    }
}

/// Turns an object_store error into what a user needs to know.
pub fn classify(url: &str, what: &str, e: object_store::Error) -> RemoteError {
    use object_store::Error as E;
    let detail = short(&e);
    let status = |s: &str| RemoteError::Status {
        url: url.into(),
        status: s.into(),
        detail: server_reason(&detail),
    };
    match e {
        E::NotFound { .. } => status("404 Not Found"),
        E::PermissionDenied { .. } => status("403 Forbidden"),
        E::Unauthenticated { .. } => status("401 Unauthorized"),
        E::Precondition { .. } => RemoteError::Changed {
            url: url.into(),
            detail: "412 Precondition Failed: its ETag no longer matches".into(),
        },
        _ => RemoteError::Transport {
            url: url.into(),
            what: what.into(),
            detail,
        },
    }
}

/// What the server said about an error status: an S3 error body's Code
/// and Message, else the body, else that the answer had none.
fn server_reason(msg: &str) -> String {
    let tag = |t: &str| {
        let a = msg.find(&format!("<{t}>"))? + t.len() + 2;
        let b = msg[a..].find(&format!("</{t}>"))?;
        Some(msg[a..a + b].to_string())
    };
    if let Some(code) = tag("Code") {
        return match tag("Message") {
            Some(m) => format!("{code}: {m}"),
            None => code,
        };
    }
    let body = msg
        .rsplit_once("status code: ")
        .and_then(|(_, r)| r.split_once(": "))
        .map(|(_, body)| body.trim())
        .unwrap_or("");
    if body.is_empty() {
        "no reason given".into()
    } else {
        body.into()
    }
}

/// The error on one line, bounded (an S3 error body can be long XML).
fn short(e: &object_store::Error) -> String {
    let msg: String = e
        .to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    match msg.char_indices().nth(400) {
        Some((i, _)) => format!("{}...", &msg[..i]),
        None => msg,
    }
}
