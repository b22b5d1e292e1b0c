//! The connection to one object: an object_store client (S3 or plain
//! HTTP), the tokio runtime its requests run on, and the request counters.
//!
//! Sync on the outside: callers (the image readers, FUSE session threads,
//! [`crate::ObjectReader`]) call [`Remote::block_on`] or spawn onto
//! [`Remote::handle`] and wait; the runtime's worker threads only move
//! bytes.
//!
//! # One runtime per process
//! Every [`Remote`] of a process runs on one shared runtime ([`runtime`]):
//! a manifest of hundreds of remote shards opens hundreds of objects, and
//! a runtime each would start two threads each. The workers only poll
//! sockets, so two serve any number of objects; counters and health stay
//! per object. The runtime is started on first use, never before: the
//! mount daemon forks before it opens a remote image, so the parent starts
//! none. A process forked after it started (a Python DataLoader worker)
//! inherits a runtime without its threads: [`runtime`] notices the changed
//! pid and starts a new one there, leaking the inherited one (dropping it
//! would wait for threads that do not exist). Objects opened before the
//! fork keep the dead runtime and must not be used in the child; the Python
//! binding reopens its images in a new process and leaks the old ones.

use crate::config::{self, S3Settings};
use crate::error::{RemoteError, Unreachable};
use crate::options::ClientOptions;
use crate::stats::RemoteCounters;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService,
    ReqwestConnector,
};
use object_store::path::Path as ObjPath;
use object_store::{
    BackoffConfig, ClientOptions as HttpOptions, ObjectStore, ObjectStoreExt, RetryConfig,
};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// The object_store path of S3 key `key`, taken as it is: `Path::from`
/// would percent-encode characters it thinks unsafe (`~`, `ü`, `[`), and the
/// client encodes the request again, so the key sent was not the key given
/// (an existing object was "NoSuchKey", an upload landed under another
/// name). A key object_store cannot address (an empty segment, `.` or
/// `..`) is an error naming it.
pub(crate) fn obj_path(url: &str, key: &str) -> Result<ObjPath, RemoteError> {
    ObjPath::parse(key).map_err(|e| {
        RemoteError::Config(format!(
            "{url}: this S3 key cannot be used by packfs's S3 client ({e}); \
             copy the object to a key without empty, '.' or '..' segments"
        ))
    })
}
use std::time::{Duration, Instant};

/// Which object, in the form each client wants it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    S3 { bucket: String, key: String },
    Http { url: String },
}

impl Target {
    /// Reads `s3://BUCKET/KEY`, `http://HOST/...` or `https://HOST/...`
    /// (schemes in any case); anything else is a configuration error
    /// naming it.
    pub fn parse(url: &str) -> Result<Self, RemoteError> {
        let bad = |why: &str| Err(RemoteError::Config(format!("{url}: {why}")));
        let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
        if lower.starts_with("s3://") {
            let rest = &url[5..];
            let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() || key.is_empty() || key.ends_with('/') {
                return bad("an S3 object is s3://BUCKET/KEY (a bucket and an object key)");
            }
            return Ok(Target::S3 {
                bucket: bucket.into(),
                key: key.into(),
            });
        }
        if lower.starts_with("http://") || lower.starts_with("https://") {
            let host = url.split_once("://").map_or("", |(_, r)| r);
            if host.is_empty() || host.starts_with('/') {
                return bad("a URL needs a host");
            }
            return Ok(Target::Http { url: url.into() });
        }
        bad("not an s3://, http:// or https:// URL")
    }

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

    #[test]
    fn urls_parse_into_targets_or_errors_naming_them() {
        assert_eq!(
            Target::parse("S3://b/dir/k.tar").unwrap(),
            Target::S3 {
                bucket: "b".into(),
                key: "dir/k.tar".into()
            }
        );
        assert_eq!(
            Target::parse("https://h/p?sig=1").unwrap(),
            Target::Http {
                url: "https://h/p?sig=1".into()
            }
        );
        for bad in [
            "s3://b",
            "s3://b/",
            "s3:///k",
            "s3://b/d/",
            "http://",
            "https:///p",
            "/x",
        ] {
            let e = Target::parse(bad).unwrap_err();
            assert!(
                matches!(&e, RemoteError::Config(m) if m.starts_with(bad)),
                "{e}"
            );
        }
    }

    #[test]
    fn objects_share_the_process_runtime_and_keep_their_own_counters() {
        let open = |u: &str| {
            let t = Target::Http { url: u.into() };
            Remote::connect(&t, &ClientOptions::default()).unwrap()
        };
        let (a, b) = (open("http://127.0.0.1:1/a"), open("http://127.0.0.1:1/b"));
        assert!(Arc::ptr_eq(&a.runtime, &b.runtime));
        assert!(Arc::ptr_eq(&a.runtime, &runtime().unwrap()));
        assert!(!Arc::ptr_eq(&a.counters, &b.counters));
        assert!(!Arc::ptr_eq(&a.health, &b.health));
    }

    #[test]
    fn an_error_answer_is_its_status_and_s3_reason_never_a_page() {
        let html = "Object at location  not found: Error performing GET http://h/x in 9ms - \
            Server returned non-2xx status code: 404 Not Found: <!DOCTYPE HTML>\n<html><body>\
            <h1>Error response</h1></body></html>\n";
        let (status, body) = status_of(html).unwrap();
        assert_eq!(status, "404 Not Found");
        assert_eq!(s3_reason(body), "");
        let xml = "Server returned non-2xx status code: 403 Forbidden: <?xml version='1.0'?>\
            <Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>";
        let (status, body) = status_of(xml).unwrap();
        assert_eq!(status, "403 Forbidden");
        assert_eq!(s3_reason(body), "AccessDenied: Access Denied");
        // A HEAD answer has no body.
        assert_eq!(
            status_of("status code: 503 Service Unavailable: "),
            Some(("503 Service Unavailable", ""))
        );
        assert_eq!(status_of("error sending request"), None);
        let e = RemoteError::Status {
            url: "http://h/x".into(),
            status: "404 Not Found".into(),
            detail: String::new(),
        };
        assert_eq!(e.to_string(), "http://h/x: HTTP 404 Not Found");
    }
}

/// What the requests to one server have shown so far, for errors: whether
/// it ever answered, and the last failed attempt worth naming.
#[derive(Debug, Default)]
pub(crate) struct Health {
    /// Set by the first answer of any status.
    answered: AtomicBool,
    /// The last retried failure (a 5xx status, a refused connection) and
    /// when it came; an attempt that timed out is not one (the timeout
    /// says so itself).
    last: Mutex<Option<(Instant, String)>>,
}

impl Health {
    fn note(&self, what: String) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), what));
    }

    /// The last failure noted since `since`, if any.
    pub(crate) fn last_since(&self, since: Instant) -> Option<String> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.as_ref()
            .filter(|(t, _)| *t >= since)
            .map(|(_, w)| w.clone())
    }
}

/// A failed attempt, described where the request's host is known, and
/// whether a retry can help. It replaces reqwest's error as the source of
/// object_store's [`HttpError`], so [`classify`] finds it in the chain.
#[derive(Debug)]
struct Failure {
    text: String,
    /// Why nothing answers, when a retry cannot help: see [`Failure::of`].
    permanent: Option<Unreachable>,
    /// Whether object_store retries this kind of failure.
    retried: bool,
    /// An attempt that got no answer in its time: outliving the retries,
    /// it is the whole timeout's "no answer", not a cause of its own.
    timed_out: bool,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for Failure {}

impl Failure {
    /// Describes `e`, an attempt to reach `authority` (`host[:port]`).
    ///
    /// Refused connections, unknown hosts and failed TLS handshakes are
    /// permanent (not retried) while the server has never answered: that
    /// is a wrong endpoint or URL, and retrying for the whole
    /// `--remote-timeout` only hides it. Once it has answered they are
    /// retried like any connection error, because a server that was there
    /// and refuses now is restarting. A temporary DNS failure ("try again")
    /// is always retried.
    fn of(e: &HttpError, host: &str, authority: &str, answered: bool) -> Self {
        let mut chain: Vec<&(dyn std::error::Error + 'static)> = Vec::new();
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(x) = next {
            chain.push(x);
            next = x.source();
        }
        let innermost = chain.last().map(|x| x.to_string()).unwrap_or_default();
        // An `io::Error` wrapping another hides it from the chain (its
        // `source()` is the inner error's source): look inside too.
        let io_kind = |k: std::io::ErrorKind| {
            chain.iter().any(|x| {
                let mut io = x.downcast_ref::<std::io::Error>();
                while let Some(e) = io {
                    if e.kind() == k {
                        return true;
                    }
                    io = e.get_ref().and_then(|i| i.downcast_ref::<std::io::Error>());
                }
                false
            })
        };
        // hyper's connector says "dns error" above the resolver's error; its
        // type is private, so the words are all there is to go by.
        let dns = chain.iter().any(|x| x.to_string() == "dns error");
        let retried = matches!(
            e.kind(),
            HttpErrorKind::Connect
                | HttpErrorKind::Request
                | HttpErrorKind::Timeout
                | HttpErrorKind::Interrupted
        );
        let (why, text) = if io_kind(std::io::ErrorKind::ConnectionRefused) {
            (
                Some(Unreachable::Refused),
                format!("connection refused by {authority}"),
            )
        } else if dns {
            let reason = innermost
                .strip_prefix("failed to lookup address information: ")
                .unwrap_or(&innermost);
            let temporary = reason.contains("Temporary failure") || reason.contains("try again");
            (
                (!temporary).then_some(Unreachable::UnknownHost),
                format!("unknown host {host} ({reason})"),
            )
        } else if e.kind() == HttpErrorKind::Connect && io_kind(std::io::ErrorKind::InvalidData) {
            // rustls reports through an `io::Error` of kind InvalidData.
            (
                Some(Unreachable::Tls),
                format!("TLS handshake with {authority} failed: {innermost}"),
            )
        } else if e.kind() == HttpErrorKind::Timeout {
            (None, format!("no answer from {authority} in time"))
        } else {
            (None, format!("{innermost} ({authority})"))
        };
        let permanent = why.filter(|_| !answered);
        Failure {
            text,
            permanent,
            retried: retried && permanent.is_none(),
            timed_out: e.kind() == HttpErrorKind::Timeout,
        }
    }
}

/// Counts every request the object_store client sends (wraps reqwest),
/// and describes its failures ([`Failure`], [`Health`]).
#[derive(Debug)]
struct Counting {
    inner: HttpClient,
    counters: Arc<RemoteCounters>,
    health: Arc<Health>,
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
        let host = req.uri().host().unwrap_or("").to_string();
        let authority = req
            .uri()
            .authority()
            .map_or_else(|| host.clone(), |a| a.to_string());
        let t = Instant::now();
        let r = self.inner.execute(req).await;
        if get {
            let us = t.elapsed().as_micros() as u64;
            c.ttfb_us_sum.fetch_add(us, Relaxed);
            c.ttfb_us_max.fetch_max(us, Relaxed);
        }
        match r {
            Ok(res) => {
                self.health.answered.store(true, Relaxed);
                let s = res.status();
                if retried_status(s.as_u16()) {
                    c.failed_requests.fetch_add(1, Relaxed);
                    self.health.note(format!("HTTP {s}"));
                }
                Ok(res)
            }
            Err(e) => {
                c.failed_requests.fetch_add(1, Relaxed);
                let answered = self.health.answered.load(Relaxed);
                let f = Failure::of(&e, &host, &authority, answered);
                if f.permanent.is_none() && !f.timed_out {
                    self.health.note(f.text.clone());
                }
                // object_store retries by kind: Unknown is never retried.
                let kind = match f.permanent {
                    Some(_) => HttpErrorKind::Unknown,
                    None => e.kind(),
                };
                Err(HttpError::new(kind, f))
            }
        }
    }
}

/// Statuses object_store retries (5xx, 408 Request Timeout, 429 Too Many
/// Requests): an answer with one is a failed attempt, not the outcome.
fn retried_status(s: u16) -> bool {
    s >= 500 || s == 408 || s == 429
}

#[derive(Debug)]
struct CountingConnector {
    counters: Arc<RemoteCounters>,
    health: Arc<Health>,
}

impl HttpConnector for CountingConnector {
    fn connect(&self, options: &HttpOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(Counting {
            inner,
            counters: self.counters.clone(),
            health: self.health.clone(),
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

/// Worker threads of the shared runtime.
const WORKERS: usize = 2;

/// Blocking-pool threads at most (name resolution); tokio's default would
/// allow hundreds when many objects connect at once.
const BLOCKING: usize = 4;

/// The process's runtime and the pid that started it.
static RUNTIME: Mutex<Option<(u32, Arc<tokio::runtime::Runtime>)>> = Mutex::new(None);

/// The runtime every [`Remote`] of this process runs on, started on first
/// use, and again in a forked child (see the module doc).
pub fn runtime() -> std::io::Result<Arc<tokio::runtime::Runtime>> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((owner, rt)) = slot.as_ref() {
        if *owner == pid {
            return Ok(rt.clone());
        }
    }
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKERS)
            .max_blocking_threads(BLOCKING)
            .thread_name("packfs-remote")
            .enable_all()
            .build()?,
    );
    if let Some((_, inherited)) = slot.replace((pid, rt.clone())) {
        // Its threads stayed in the parent: dropping it could wait forever.
        std::mem::forget(inherited);
    }
    Ok(rt)
}

/// One object on one server, with its own counters, on the process's
/// shared runtime.
pub struct Remote {
    runtime: Arc<tokio::runtime::Runtime>,
    store: Arc<dyn ObjectStore>,
    /// The same store's multipart API with explicit part numbers (S3 only).
    multipart: Option<Arc<dyn object_store::multipart::MultipartStore>>,
    path: ObjPath,
    url: String,
    pub opts: ClientOptions,
    pub counters: Arc<RemoteCounters>,
    pub(crate) health: Arc<Health>,
    /// Where the S3 keys came from ("environment", "profile x", anonymous).
    pub keys_from: Option<String>,
}

impl Remote {
    /// Builds the client for `target` (no request is sent yet). S3 settings
    /// come from the process environment, the AWS files and `opts`.
    pub fn connect(target: &Target, opts: &ClientOptions) -> Result<Self, RemoteError> {
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
    pub fn connect_for_upload(target: &Target, opts: &ClientOptions) -> Result<Self, RemoteError> {
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
        opts: &ClientOptions,
        settings: Option<&S3Settings>,
    ) -> Result<Self, RemoteError> {
        Self::build(target, opts, settings, opts.attempt_timeout())
    }

    fn build(
        target: &Target,
        opts: &ClientOptions,
        settings: Option<&S3Settings>,
        attempt: Duration,
    ) -> Result<Self, RemoteError> {
        opts.validate().map_err(RemoteError::Config)?;
        let url = target.url();
        let counters = opts.counters.clone().unwrap_or_default();
        let health = Arc::new(Health::default());
        let runtime = runtime()
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
        let client = crate::tls_roots::with_bundled_roots(HttpOptions::new())
            .with_allow_http(true)
            .with_timeout(attempt)
            .with_connect_timeout(attempt.min(Duration::from_secs(5)))
            .with_pool_max_idle_per_host(32);
        let connector = Arc::new(CountingConnector {
            counters: counters.clone(),
            health: health.clone(),
        });
        let bad = |e: object_store::Error| RemoteError::Config(format!("{url}: {e}"));
        type Multipart = Option<Arc<dyn object_store::multipart::MultipartStore>>;
        let (store, multipart, path, keys_from): (Arc<dyn ObjectStore>, Multipart, ObjPath, _) =
            match target {
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
                    let s3 = Arc::new(b.build().map_err(bad)?);
                    (
                        s3.clone(),
                        Some(s3),
                        obj_path(&url, key)?,
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
                    (Arc::new(store), None, ObjPath::default(), None)
                }
            };
        Ok(Remote {
            runtime,
            store,
            multipart,
            path,
            url,
            opts: opts.clone(),
            counters,
            health,
            keys_from,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The multipart API with explicit part numbers, for S3 objects.
    pub fn multipart(&self) -> Option<&Arc<dyn object_store::multipart::MultipartStore>> {
        self.multipart.as_ref()
    }

    pub fn path(&self) -> &ObjPath {
        &self.path
    }

    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime.handle()
    }

    /// Runs `f` on the runtime and waits for it, at most the configured
    /// timeout; past it, the error names the last failed attempt, if any
    /// (`what` names the operation, empty for the open of the object).
    pub fn block_on<T>(
        &self,
        what: &str,
        f: impl Future<Output = Result<T, RemoteError>>,
    ) -> Result<T, RemoteError> {
        let secs = self.opts.timeout.as_secs();
        let t0 = Instant::now();
        self.runtime
            .block_on(async { tokio::time::timeout(self.opts.timeout, f).await })
            .unwrap_or_else(|_| {
                Err(RemoteError::Timeout {
                    url: self.url.clone(),
                    what: what.into(),
                    secs,
                    cause: self.health.last_since(t0),
                    extra: String::new(),
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
        let secs = self.opts.timeout.as_secs();
        let meta = self.block_on("", async move {
            match store.head(&path).await {
                Ok(m) => Ok(m),
                // A HEAD answer has no body; a one-byte GET gets the
                // server's reason (NoSuchBucket or NoSuchKey,
                // InvalidAccessKeyId or SignatureDoesNotMatch).
                Err(e) => {
                    let head = classify(&url, secs, "", e);
                    if !matches!(head, RemoteError::Status { .. }) {
                        return Err(head);
                    }
                    let o = object_store::GetOptions {
                        range: Some(object_store::GetRange::Bounded(0..1)),
                        ..Default::default()
                    };
                    match store.get_opts(&path, o).await {
                        Err(e) => match classify(&url, secs, "", e) {
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
    fn connect(&self, options: &HttpOptions) -> object_store::Result<HttpClient> {
        self.0.connect(options)
    }
}

/// Turns an object_store error into what a user needs to know: the first
/// cause, in a line, without a web server's error page. `secs` is the
/// `--remote-timeout` the retries ran in: a retried failure (5xx, a lost
/// connection) that comes back from object_store outlived them.
pub fn classify(url: &str, secs: u64, what: &str, e: object_store::Error) -> RemoteError {
    use object_store::Error as E;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(x) = source {
        if let Some(f) = x.downcast_ref::<Failure>() {
            return match (f.permanent, f.retried) {
                (Some(why), _) => RemoteError::Unreachable {
                    url: url.into(),
                    why,
                    detail: f.text.clone(),
                },
                (None, true) => RemoteError::Timeout {
                    url: url.into(),
                    what: what.into(),
                    secs,
                    cause: (!f.timed_out).then(|| f.text.clone()),
                    extra: String::new(),
                },
                (None, false) => RemoteError::Transport {
                    url: url.into(),
                    what: what.into(),
                    detail: f.text.clone(),
                },
            };
        }
        source = x.source();
    }
    let full = e.to_string();
    if let E::Precondition { .. } = e {
        return RemoteError::Changed {
            url: url.into(),
            detail: "412 Precondition Failed: its ETag no longer matches".into(),
        };
    }
    // object_store's own words: the HTTP store's RangeNotSupported, and
    // the check of S3 answers (both types are private).
    if full.contains("Range request not supported")
        || full.contains("non-partial response when range requested")
    {
        return RemoteError::RangeUnsupported { url: url.into() };
    }
    if let Some((status, body)) = status_of(&full) {
        let code: u16 = status
            .split_whitespace()
            .next()
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        if retried_status(code) {
            return RemoteError::Timeout {
                url: url.into(),
                what: what.into(),
                secs,
                cause: Some(format!("HTTP {status}")),
                extra: String::new(),
            };
        }
        return RemoteError::Status {
            url: url.into(),
            status: status.into(),
            detail: s3_reason(body),
        };
    }
    match e {
        E::NotFound { .. } => status_only(url, "404 Not Found"),
        E::PermissionDenied { .. } => status_only(url, "403 Forbidden"),
        E::Unauthenticated { .. } => status_only(url, "401 Unauthorized"),
        _ => RemoteError::Transport {
            url: url.into(),
            what: what.into(),
            detail: short(&full),
        },
    }
}

fn status_only(url: &str, status: &str) -> RemoteError {
    RemoteError::Status {
        url: url.into(),
        status: status.into(),
        detail: String::new(),
    }
}

/// The status ("404 Not Found") and body of object_store's message for an
/// error answer ("... Server returned non-2xx status code: 404 Not Found:
/// BODY"), if it is one.
fn status_of(msg: &str) -> Option<(&str, &str)> {
    let rest = msg.split_once("status code: ")?.1;
    let (status, body) = rest.split_once(": ").unwrap_or((rest, ""));
    status
        .split_whitespace()
        .next()?
        .parse::<u16>()
        .ok()
        .map(|_| (status.trim(), body))
}

/// An S3 error body's Code and Message ("NoSuchKey: The specified key does
/// not exist."), else nothing: other bodies are a web server's error
/// page, which says no more than the status and can be a screenful.
fn s3_reason(body: &str) -> String {
    let tag = |t: &str| {
        let a = body.find(&format!("<{t}>"))? + t.len() + 2;
        let b = body[a..].find(&format!("</{t}>"))?;
        Some(body[a..a + b].trim().to_string())
    };
    let reason = match (tag("Code"), tag("Message")) {
        (Some(code), Some(m)) => format!("{code}: {m}"),
        (Some(code), None) => code,
        _ => String::new(),
    };
    short(&reason)
}

/// A message on one line, bounded.
fn short(msg: &str) -> String {
    let msg: String = msg.split_whitespace().collect::<Vec<_>>().join(" ");
    match msg.char_indices().nth(300) {
        Some((i, _)) => format!("{}...", &msg[..i]),
        None => msg,
    }
}
