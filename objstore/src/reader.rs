//! [`ObjectReader`]: one object read front to back as a `std::io::Read`,
//! for a consumer that takes the bytes in order (the packer reading a tar
//! or ZIP archive from `s3://` or `https://`).
//!
//! The object is read in chunks of [`ReaderOptions::chunk_size`] bytes
//! (8 MiB by default), each one range GET of the version pinned at open
//! ([`Remote::get_range`]: `If-Match`, the answer checked). While the
//! consumer works on one chunk the next [`ReaderOptions::ahead`] are
//! already being fetched on the process's runtime, so that network time
//! overlaps the consumer's: with first-byte latencies of tens of ms and
//! a consumer that decompresses, one chunk at a time would leave each
//! side idle half the time. Memory is bounded: the chunk being read plus
//! those in flight, `chunk_size × (ahead + 1)` bytes at most.
//!
//! Failures are the client's (retries and the `--remote-timeout` cut of
//! each fetch); a failed read is an `io::Error` holding the
//! [`RemoteError`], restated with the offset the consumer had reached.
//! Reading again after an error starts over from that offset.

use crate::client::{Remote, Target, Version};
use crate::error::RemoteError;
use crate::options::ClientOptions;
use crate::stats::RemoteCounters;
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// How an [`ObjectReader`] fetches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReaderOptions {
    /// Bytes per range GET.
    pub chunk_size: u64,
    /// Chunks fetched ahead of the one being read.
    pub ahead: usize,
}

impl Default for ReaderOptions {
    fn default() -> Self {
        ReaderOptions {
            chunk_size: 8 << 20,
            ahead: 2,
        }
    }
}

/// A fetch started on the runtime: the object's bytes from `at`.
struct Pending {
    at: u64,
    task: JoinHandle<Result<Bytes, RemoteError>>,
}

/// One object, read in order; see the module doc.
pub struct ObjectReader {
    remote: Arc<Remote>,
    version: Version,
    opts: ReaderOptions,
    /// Fetches in flight (or done, not yet read), in object order: the
    /// first starts at `pos` when `chunk` is used up.
    pending: VecDeque<Pending>,
    /// Where the next fetch to start begins.
    next_fetch: u64,
    /// The chunk being read and how far.
    chunk: Bytes,
    used: usize,
    /// Bytes handed to the consumer so far.
    pos: u64,
}

impl ObjectReader {
    /// Opens `target` with [`ReaderOptions::default`]: see [`ObjectReader::new`].
    pub fn open(target: &Target, client: &ClientOptions) -> Result<Self, RemoteError> {
        Self::new(Remote::connect(target, client)?, ReaderOptions::default())
    }

    /// Pins the object's version and length by a HEAD (a 403 or 404 is an
    /// error here, naming the URL) and starts fetching its first chunks.
    pub fn new(remote: Remote, opts: ReaderOptions) -> Result<Self, RemoteError> {
        if opts.chunk_size == 0 {
            return Err(RemoteError::Config(format!(
                "{}: a chunk size of 0 bytes",
                remote.url()
            )));
        }
        let version = remote.head()?;
        let mut r = ObjectReader {
            remote: Arc::new(remote),
            version,
            opts,
            pending: VecDeque::new(),
            next_fetch: 0,
            chunk: Bytes::new(),
            used: 0,
            pos: 0,
        };
        r.fill();
        Ok(r)
    }

    /// The object's length, pinned at open.
    pub fn len(&self) -> u64 {
        self.version.len
    }

    pub fn is_empty(&self) -> bool {
        self.version.len == 0
    }

    /// Bytes read so far.
    pub fn bytes_read(&self) -> u64 {
        self.pos
    }

    pub fn url(&self) -> &str {
        self.remote.url()
    }

    /// The version every chunk was checked against.
    pub fn version(&self) -> &Version {
        &self.version
    }

    /// The requests made for this object (GETs, retries, bytes fetched).
    pub fn counters(&self) -> &Arc<RemoteCounters> {
        &self.remote.counters
    }

    /// Starts fetches until `ahead` chunks past the one being read are in
    /// flight, or the object ends.
    fn fill(&mut self) {
        let len = self.version.len;
        while self.pending.len() < self.opts.ahead + usize::from(self.unread() == 0)
            && self.next_fetch < len
        {
            let at = self.next_fetch;
            let end = len.min(at.saturating_add(self.opts.chunk_size));
            let (remote, version) = (self.remote.clone(), self.version.clone());
            let ahead = !self.pending.is_empty() || self.unread() > 0;
            let task = self.remote.handle().spawn(async move {
                let limit = remote.opts.timeout;
                let r = remote.get_range(&version, at..end, limit).await;
                if r.is_ok() && ahead {
                    remote.counters.ranges_ahead.fetch_add(1, Relaxed);
                }
                r
            });
            self.pending.push_back(Pending { at, task });
            self.next_fetch = end;
        }
    }

    fn unread(&self) -> usize {
        self.chunk.len() - self.used
    }

    /// Makes the next chunk the one being read: waits for its fetch.
    fn next_chunk(&mut self) -> Result<(), RemoteError> {
        self.fill();
        let p = self
            .pending
            .pop_front()
            .expect("a fetch for the next chunk");
        debug_assert_eq!(p.at, self.pos);
        let url = self.url().to_string();
        let timeout = self.remote.opts.timeout;
        let mut task = p.task;
        // The fetch cuts itself at the timeout; this wait's limit, a
        // little longer, only guards against a runtime that stopped.
        let got = self.remote.handle().clone().block_on(async {
            tokio::time::timeout(timeout + Duration::from_secs(5), &mut task).await
        });
        let r = match got {
            Ok(Ok(r)) => r,
            Ok(Err(join)) => Err(RemoteError::Transport {
                url,
                what: String::new(),
                detail: format!("the fetch's task failed: {join}"),
            }),
            Err(_) => {
                task.abort();
                Err(RemoteError::Timeout {
                    url,
                    what: "waiting for a fetch".into(),
                    secs: timeout.as_secs(),
                    cause: None,
                    extra: String::new(),
                })
            }
        };
        match r {
            Ok(b) => {
                self.chunk = b;
                self.used = 0;
                self.fill();
                Ok(())
            }
            Err(e) => {
                // Start over from here on the next read: what was fetched
                // ahead is dropped, so memory stays bounded and a server
                // that recovers is asked again in order.
                self.stop();
                self.next_fetch = self.pos;
                Err(e)
            }
        }
    }

    /// Cancels the fetches in flight.
    fn stop(&mut self) {
        for p in self.pending.drain(..) {
            p.task.abort();
        }
    }
}

impl std::io::Read for ObjectReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() || self.pos >= self.version.len {
            return Ok(0);
        }
        if self.unread() == 0 {
            let at = self.pos;
            self.next_chunk()
                .map_err(|e| e.during(format!("read at offset {at}")))?;
        }
        let n = buf.len().min(self.unread());
        buf[..n].copy_from_slice(&self.chunk[self.used..self.used + n]);
        self.used += n;
        self.pos += n as u64;
        if self.unread() == 0 {
            // Let the chunk's memory go, and its place in the budget to
            // the next fetch, while the consumer works on these bytes.
            self.chunk = Bytes::new();
            self.used = 0;
            self.fill();
        }
        Ok(n)
    }
}

impl Drop for ObjectReader {
    fn drop(&mut self) {
        self.stop();
    }
}

impl std::fmt::Debug for ObjectReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectReader")
            .field("url", &self.url())
            .field("len", &self.version.len)
            .field("pos", &self.pos)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::{Condvar, Mutex};

    /// What the test server serves and has seen.
    #[derive(Default)]
    struct State {
        data: Vec<u8>,
        etag: String,
        /// Range GETs received.
        gets: u64,
        /// While set, GETs wait before answering.
        held: bool,
        /// GETs of ranges starting here or later answer 404.
        missing_from: Option<u64>,
    }

    /// A one-object HTTP server on 127.0.0.1: HEAD and range GETs with an
    /// ETag honoured by If-Match, one request per connection.
    struct Server {
        port: u16,
        state: Arc<(Mutex<State>, Condvar)>,
    }

    impl Server {
        fn start(data: Vec<u8>) -> Self {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = l.local_addr().unwrap().port();
            let state = Arc::new((
                Mutex::new(State {
                    data,
                    etag: "\"v1\"".into(),
                    ..Default::default()
                }),
                Condvar::new(),
            ));
            let s = state.clone();
            std::thread::spawn(move || {
                for c in l.incoming().flatten() {
                    let s = s.clone();
                    std::thread::spawn(move || answer(c, &s));
                }
            });
            Server { port, state }
        }

        fn url(&self) -> Target {
            Target::Http {
                url: format!("http://127.0.0.1:{}/obj", self.port),
            }
        }

        fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
            let r = f(&mut self.state.0.lock().unwrap());
            self.state.1.notify_all();
            r
        }
    }

    fn answer(mut c: TcpStream, state: &(Mutex<State>, Condvar)) {
        let mut head = Vec::new();
        let mut r = BufReader::new(c.try_clone().unwrap());
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            head.push(line.trim_end().to_string());
        }
        let header = |name: &str| {
            head.iter().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
        };
        let is_head = head.first().is_some_and(|l| l.starts_with("HEAD"));
        if head.first().is_none_or(|l| !l.contains(" /obj ")) {
            let _ = c.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
            return;
        }
        let mut g = state.0.lock().unwrap();
        if !is_head {
            g.gets += 1;
            while g.held {
                g = state.1.wait(g).unwrap();
            }
        }
        let len = g.data.len() as u64;
        let meta = format!(
            "ETag: {}\r\nLast-Modified: Mon, 01 Jan 2024 00:00:00 GMT\r\nConnection: close\r\n",
            g.etag
        );
        let range = header("range").and_then(|r| {
            let (a, b) = r.strip_prefix("bytes=")?.split_once('-')?;
            Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?))
        });
        let reply = match range {
            _ if is_head => {
                format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n{meta}\r\n").into_bytes()
            }
            Some((a, _)) if g.missing_from.is_some_and(|m| a >= m) => {
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec()
            }
            _ if header("if-match").is_some_and(|m| m != g.etag) => {
                format!("HTTP/1.1 412 Precondition Failed\r\nContent-Length: 0\r\n{meta}\r\n")
                    .into_bytes()
            }
            Some((a, b)) => {
                let body = &g.data[a as usize..=(b.min(len - 1)) as usize];
                let mut out = format!(
                    "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\n\
                     Content-Range: bytes {a}-{}/{len}\r\n{meta}\r\n",
                    body.len(),
                    a + body.len() as u64 - 1
                )
                .into_bytes();
                out.extend_from_slice(body);
                out
            }
            None => b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n".to_vec(),
        };
        drop(g);
        let _ = c.write_all(&reply);
    }

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    fn small(chunk: u64, ahead: usize) -> ReaderOptions {
        ReaderOptions {
            chunk_size: chunk,
            ahead,
        }
    }

    fn open(s: &Server, o: ReaderOptions) -> ObjectReader {
        let c = ClientOptions {
            timeout: Duration::from_secs(10),
            ..Default::default()
        };
        ObjectReader::new(Remote::connect(&s.url(), &c).unwrap(), o).unwrap()
    }

    #[test]
    fn reads_every_byte_in_chunks_whatever_the_read_sizes() {
        let want = data(10_000);
        let s = Server::start(want.clone());
        for (chunk, ahead, step) in [(1000, 2, 333), (4096, 0, 10_000), (3, 5, 1), (20_000, 1, 7)] {
            let mut r = open(&s, small(chunk, ahead));
            assert_eq!(r.len(), 10_000);
            let mut got = Vec::new();
            let mut buf = vec![0; step];
            loop {
                let n = r.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            assert!(got == want, "chunk {chunk} ahead {ahead} step {step}");
            assert_eq!(r.bytes_read(), 10_000);
            let stats = r.counters().snapshot();
            assert_eq!(stats.ranges_fetched, 10_000u64.div_ceil(chunk));
            assert_eq!(stats.bytes_fetched, 10_000);
        }
    }

    #[test]
    fn an_empty_object_reads_as_end_of_file_without_a_get() {
        let s = Server::start(Vec::new());
        let mut r = open(&s, ReaderOptions::default());
        assert!(r.is_empty());
        let mut out = Vec::new();
        assert_eq!(r.read_to_end(&mut out).unwrap(), 0);
        assert_eq!(s.with(|st| st.gets), 0);
    }

    /// Waits for the server to have seen `gets` GETs, then checks that no
    /// more come.
    fn settles_at(s: &Server, gets: u64) {
        let t = std::time::Instant::now();
        while s.with(|st| st.gets) < gets && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(s.with(|st| st.gets), gets);
    }

    /// The memory bound: while the consumer reads nothing, no more than
    /// `ahead + 1` chunks are fetched.
    #[test]
    fn fetches_run_at_most_ahead_plus_one_chunks_before_the_reader() {
        let s = Server::start(data(100_000));
        s.with(|st| st.held = true);
        let mut r = open(&s, small(1000, 2));
        settles_at(&s, 3);
        s.with(|st| st.held = false);
        let mut buf = vec![0; 1000];
        r.read_exact(&mut buf).unwrap();
        // The first chunk read and released: one more fetch in its place.
        settles_at(&s, 4);
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).unwrap();
        assert_eq!(s.with(|st| st.gets), 100);
    }

    #[test]
    fn an_error_names_the_url_and_offset_and_holds_the_remote_error() {
        let s = Server::start(data(5000));
        s.with(|st| st.missing_from = Some(2000));
        let mut r = open(&s, small(1000, 1));
        let mut buf = vec![0; 5000];
        let mut n = 0;
        let e = loop {
            match r.read(&mut buf[n..]) {
                Ok(k) => n += k,
                Err(e) => break e,
            }
        };
        assert_eq!(n, 2000);
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        let msg = e.to_string();
        assert!(
            msg.contains("/obj") && msg.contains("404") && msg.contains("offset 2000"),
            "{msg}"
        );
        let inner = e.get_ref().and_then(|x| x.downcast_ref::<RemoteError>());
        assert!(matches!(inner, Some(RemoteError::Status { .. })), "{e:?}");
        // Read again once the server serves: it goes on from where it was.
        s.with(|st| st.missing_from = None);
        r.read_exact(&mut buf[2000..]).unwrap();
        assert!(buf == data(5000));
    }

    #[test]
    fn a_replaced_object_is_an_error_never_mixed_bytes() {
        let s = Server::start(data(4000));
        let mut r = open(&s, small(1000, 0));
        let mut buf = vec![0; 1000];
        r.read_exact(&mut buf).unwrap();
        s.with(|st| st.etag = "\"v2\"".into());
        let e = r.read_exact(&mut buf).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("changed since it was opened"), "{msg}");
        assert!(msg.contains("offset 1000"), "{msg}");
    }

    #[test]
    fn a_missing_object_fails_at_open_naming_its_url() {
        let s = Server::start(data(10));
        let c = ClientOptions::default();
        let t = Target::Http {
            url: format!("http://127.0.0.1:{}/nothing", s.port),
        };
        let e = ObjectReader::open(&t, &c).unwrap_err();
        assert_eq!(e.to_string(), format!("{}: HTTP 404 Not Found", t.url()));
        assert_eq!(s.with(|st| st.gets), 0);
    }

    #[test]
    fn the_reader_is_send_and_needs_chunks_of_some_bytes() {
        fn send<T: Send>() {}
        send::<ObjectReader>();
        assert!(ObjectReader::new(
            Remote::connect(
                &Target::Http {
                    url: "http://127.0.0.1:1/x".into()
                },
                &ClientOptions::default()
            )
            .unwrap(),
            small(0, 1)
        )
        .is_err());
    }
}
