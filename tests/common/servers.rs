//! Real servers for the remote-image tests, started on 127.0.0.1 by the
//! test and stopped when dropped: `scripts/range_server.py` (a static range
//! server with stall and 403 switches) and moto's S3 server (from PyPI,
//! installed on first use into /var/tmp/packfs-moto, bounded in time).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One plain HTTP/1.0 request; returns (status, body).
pub fn http(port: u16, method: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "{method} {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map_or("", |x| x.1).to_string();
    (status, body)
}

fn wait_listening(port: u16, what: &str, limit: Duration) {
    let t = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t.elapsed() < limit, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `scripts/range_server.py` serving `root`.
pub struct RangeServer {
    child: Option<Child>,
    pub port: u16,
    root: PathBuf,
    extra: Vec<String>,
}

impl RangeServer {
    pub fn start(root: &Path, extra: &[&str]) -> Self {
        let mut s = RangeServer {
            child: None,
            port: 0,
            root: root.into(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let mut child = Command::new("python3")
            .arg(repo().join("scripts/range_server.py"))
            .arg("--root")
            .arg(&self.root)
            .arg("--port")
            .arg(self.port.to_string())
            .args(&self.extra)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 scripts/range_server.py");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        self.port = line
            .trim()
            .strip_prefix("PORT ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("range server said {line:?}"));
        self.child = Some(child);
        wait_listening(self.port, "range server", Duration::from_secs(10));
    }

    pub fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}", self.port)
    }

    /// `packfs bench --raw RAW --image URL EXTRA... --json FILE` against
    /// the image `name` served here, asserting success; returns the
    /// printed table and the JSON report.
    pub fn bench(&self, raw: &Path, name: &str, extra: &[&str]) -> (String, serde_json::Value) {
        let dir = super::scratch();
        let json = dir.path().join("bench.json");
        let out = super::run(
            Command::new(super::packfs_bin())
                .args(["bench", "--raw"])
                .arg(raw)
                .arg("--image")
                .arg(self.url(name))
                .args(extra)
                .arg("--json")
                .arg(&json),
        );
        let report = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        (out, report)
    }

    /// Requests hang until [`RangeServer::resume`].
    pub fn stall(&self) {
        assert_eq!(http(self.port, "GET", "/_control/stall").0, 200);
    }

    /// The next GET alone hangs until [`RangeServer::resume`].
    pub fn stall_next(&self) {
        assert_eq!(http(self.port, "GET", "/_control/stall_next").0, 200);
    }

    /// Requests hanging now.
    pub fn held(&self) -> u64 {
        self.counters()["held"].as_u64().unwrap()
    }

    pub fn resume(&self) {
        assert_eq!(http(self.port, "GET", "/_control/resume").0, 200);
    }

    /// `/_control/stats`, one snapshot of the counters.
    fn counters(&self) -> serde_json::Value {
        let (_, body) = http(self.port, "GET", "/_control/stats");
        serde_json::from_str(&body).unwrap()
    }

    /// (GET requests, bytes sent) so far.
    pub fn stats(&self) -> (u64, u64) {
        let v = self.counters();
        (v["get"].as_u64().unwrap(), v["bytes"].as_u64().unwrap())
    }

    /// Requests answered with the `--fail` status so far.
    pub fn failed(&self) -> u64 {
        self.counters()["failed"].as_u64().unwrap()
    }

    /// Kills the server (connections refused until [`RangeServer::restart`]).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for RangeServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Python's own `python3 -m http.server` serving `root`: what a user tries
/// first, and a server that ignores `Range` (it answers 200 with the whole
/// file) and answers errors with an HTML page.
pub struct PlainHttpServer {
    child: Child,
    pub port: u16,
}

impl PlainHttpServer {
    pub fn start(root: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("python3")
            .args(["-m", "http.server", "--bind", "127.0.0.1", "--directory"])
            .arg(root)
            .arg(port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 -m http.server");
        wait_listening(port, "python3 -m http.server", Duration::from_secs(10));
        PlainHttpServer { child, port }
    }

    pub fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for PlainHttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where moto lives; reused across runs.
const MOTO_VENV: &str = "/var/tmp/packfs-moto";

/// Installs `moto[server]` and boto3 into [`MOTO_VENV`] if they are not
/// there (pip from PyPI, at most 10 minutes). Panics with the reason if it
/// cannot: the S3 tests need a real S3 server.
pub fn ensure_moto() -> PathBuf {
    let venv = PathBuf::from(MOTO_VENV);
    let ready = venv.join("bin/moto_server").exists()
        && Command::new(venv.join("bin/python"))
            .args(["-c", "import boto3, moto"])
            .status()
            .is_ok_and(|s| s.success());
    if ready {
        return venv;
    }
    // Several test binaries may get here at once: one installs.
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/var/tmp/packfs-moto.lock")
        .unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor we own.
    unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
    if venv.join("bin/moto_server").exists() {
        return venv;
    }
    eprintln!("installing moto[server] and boto3 into {MOTO_VENV} (pip, PyPI)");
    let script = format!(
        "python3 -m venv {MOTO_VENV} && timeout 600 {MOTO_VENV}/bin/pip install -q 'moto[server]' boto3"
    );
    let st = Command::new("sh").args(["-c", &script]).status().unwrap();
    assert!(
        st.success() && venv.join("bin/moto_server").exists(),
        "could not install moto (needs python3-venv and PyPI): {st}"
    );
    venv
}

/// moto's S3 server on a free port, with credentials in the environment a
/// client needs (moto accepts any key).
pub struct Moto {
    child: Child,
    pub port: u16,
    venv: PathBuf,
}

impl Moto {
    pub fn start() -> Self {
        let venv = ensure_moto();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(venv.join("bin/moto_server"))
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server");
        wait_listening(port, "moto_server", Duration::from_secs(30));
        Moto { child, port, venv }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The variables a client (packfs, boto3) is given.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", "testing".into()),
            ("AWS_SECRET_ACCESS_KEY", "testing".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
        ]
    }

    /// `packfs ARGS` with moto's credentials and endpoint in the
    /// environment; the output, for the test to judge.
    pub fn packfs(&self, args: &[&str]) -> Output {
        Command::new(super::packfs_bin())
            .args(args)
            .envs(self.env())
            .output()
            .unwrap()
    }

    /// Runs Python with boto3's `s3` client in scope; returns stdout.
    pub fn py(&self, code: &str) -> String {
        let prog = format!(
            "import boto3, sys, json\ns3 = boto3.client('s3', endpoint_url='{}')\n{code}\n",
            self.endpoint()
        );
        let out = Command::new(self.venv.join("bin/python"))
            .arg("-c")
            .arg(&prog)
            .envs(self.env())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "boto3 failed: {}\n{prog}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn create_bucket(&self, bucket: &str) {
        self.py(&format!("s3.create_bucket(Bucket='{bucket}')"));
    }

    pub fn upload(&self, file: &Path, bucket: &str, key: &str) {
        self.py(&format!(
            "s3.upload_file('{}', '{bucket}', '{key}')",
            file.display()
        ));
    }

    /// Keys in the bucket.
    pub fn keys(&self, bucket: &str) -> Vec<String> {
        let out = self.py(&format!(
            "r = s3.list_objects_v2(Bucket='{bucket}')\nprint(json.dumps([o['Key'] for o in r.get('Contents', [])]))"
        ));
        serde_json::from_str(out.trim()).unwrap()
    }

    /// Multipart uploads started and neither completed nor aborted.
    pub fn open_uploads(&self, bucket: &str) -> usize {
        let out = self.py(&format!(
            "r = s3.list_multipart_uploads(Bucket='{bucket}')\nprint(len(r.get('Uploads', [])))"
        ));
        out.trim().parse().unwrap()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
