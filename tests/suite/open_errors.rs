//! Opening an image that cannot be opened: the message is the
//! first cause, on one line, said once (no `[ERROR …]` log line repeating
//! it); what a retry cannot fix (a refused connection, an unknown host, a
//! failed TLS handshake, a 4xx) fails at once; a 5xx is retried within
//! `--remote-timeout` and named when it outlives it; "not a SquashFS or ZIP
//! image" only for bytes that were read and are not one.

use crate::common::servers::{PlainHttpServer, RangeServer};
use crate::common::*;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// What `packfs ls IMAGE / EXTRA...` printed and how long it took. The
/// environment names no S3 endpoint, keys or profile (a HOME of its own).
struct Run {
    code: Option<i32>,
    stderr: String,
    took: Duration,
}

fn ls(image: &str, extra: &[&str]) -> Run {
    let home = scratch();
    let mut cmd = Command::new(packfs_bin());
    cmd.args(["ls", image, "/"])
        .args(extra)
        .env("HOME", home.path());
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") {
            cmd.env_remove(k);
        }
    }
    let t = Instant::now();
    let out = cmd.output().unwrap();
    Run {
        code: out.status.code(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: t.elapsed(),
    }
}

/// A failed open: exit status 1 and one line on stderr, which names
/// `image` and contains every one of `cause`, and no log line.
fn failed(r: &Run, image: &str, cause: &[&str]) {
    let e = &r.stderr;
    assert_eq!(r.code, Some(1), "{e}");
    let lines: Vec<&str> = e.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line, said once:\n{e}");
    assert!(!e.contains("[ERROR") && !e.contains("[WARN"), "{e}");
    assert!(lines[0].starts_with("packfs: "), "{e}");
    assert!(e.contains(image), "names {image}: {e}");
    for c in cause {
        assert!(e.contains(c), "{c:?} in: {e}");
    }
    assert!(!e.contains("not a SquashFS or ZIP image"), "{e}");
}

/// The fail-fast bound: far below any retry loop (60 s by default).
const AT_ONCE: Duration = Duration::from_secs(2);

#[test]
fn a_refused_connection_fails_at_once_for_http_and_s3() {
    let url = "http://127.0.0.1:1/x.sqfs";
    let r = ls(url, &[]);
    failed(&r, url, &["connection refused by 127.0.0.1:1"]);
    assert!(r.took < AT_ONCE, "took {:?}", r.took);

    let s3 = "s3://bucket/x.sqfs";
    let r = ls(s3, &["--endpoint", "http://127.0.0.1:1"]);
    failed(&r, s3, &["connection refused by 127.0.0.1:1"]);
    assert!(r.took < AT_ONCE, "took {:?}", r.took);
}

#[test]
fn an_unknown_host_fails_at_once() {
    // RFC 6761: `.invalid` never resolves. A bounded timeout, so that a
    // resolver that says "try again" fails this test in seconds, not 60.
    let url = "http://packfs-test.invalid/x.sqfs";
    let r = ls(url, &["--remote-timeout", "5"]);
    failed(&r, url, &["unknown host packfs-test.invalid"]);
    assert!(r.took < AT_ONCE, "took {:?}", r.took);
}

#[test]
fn a_failed_tls_handshake_fails_at_once() {
    // https:// to a server that speaks plain HTTP.
    let t = scratch();
    let server = RangeServer::start(t.path(), &[]);
    let url = format!("https://127.0.0.1:{}/x.sqfs", server.port);
    let r = ls(&url, &[]);
    failed(&r, &url, &["TLS handshake with 127.0.0.1:", "failed"]);
    assert!(r.took < AT_ONCE, "took {:?}", r.took);
}

/// An image of a few files in `dir`, named `name`.
fn image(dir: &Path, name: &str) -> std::path::PathBuf {
    let src = dir.join(format!("{name}.src"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("hello.txt"), b"hello\n").unwrap();
    std::fs::write(src.join("data.bin"), bytes(7, 300_000, false)).unwrap();
    let img = dir.join(name);
    pack(&src, &img, &[]);
    img
}

#[test]
fn a_404_is_the_status_without_the_servers_page() {
    let t = scratch();
    let server = PlainHttpServer::start(t.path());
    let url = server.url("missing.sqfs");
    let r = ls(&url, &[]);
    failed(&r, &url, &["HTTP 404 Not Found"]);
    assert!(r.took < AT_ONCE, "took {:?}", r.took);
    let lower = r.stderr.to_lowercase();
    assert!(
        !lower.contains('<') && !lower.contains("html"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.len() < 200, "short: {}", r.stderr);
}

#[test]
fn a_server_that_ignores_range_is_named() {
    let t = scratch();
    image(t.path(), "img.sqfs");
    let server = PlainHttpServer::start(t.path());
    let url = server.url("img.sqfs");
    let r = ls(&url, &[]);
    failed(&r, &url, &["ignores Range requests"]);
    assert!(r.took < AT_ONCE, "took {:?}", r.took);
}

#[test]
fn a_server_that_drops_the_validator_is_named() {
    let t = scratch();
    image(t.path(), "img.sqfs");
    let server = RangeServer::start(t.path(), &["--drop-validator"]);
    let url = server.url("img.sqfs");
    let r = ls(&url, &[]);
    failed(
        &r,
        &url,
        &["carry no ETag", "cannot tell whether the object changed"],
    );
    assert!(
        !r.stderr.contains("changed since it was opened ("),
        "{}",
        r.stderr
    );
    assert!(r.took < AT_ONCE, "took {:?}", r.took);
}

#[test]
fn a_directory_and_a_file_of_zeros_are_told_apart() {
    let t = scratch();
    let dir = t.path().join("a-directory.sqfs");
    std::fs::create_dir(&dir).unwrap();
    let d = dir.to_str().unwrap();
    failed(&ls(d, &[]), d, &["is a directory"]);

    // Bytes were read, and they are not an image: that is the message.
    let zeros = t.path().join("zeros.sqfs");
    std::fs::write(&zeros, vec![0u8; 100_000]).unwrap();
    let z = zeros.to_str().unwrap();
    let r = ls(z, &[]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(
        r.stderr.trim(),
        format!("packfs: {z}: not a SquashFS or ZIP image (unrecognised magic)")
    );
    // The same over HTTP: the first range was read.
    let server = RangeServer::start(t.path(), &[]);
    let r = ls(&server.url("zeros.sqfs"), &[]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        r.stderr
            .trim()
            .ends_with("zeros.sqfs: not a SquashFS or ZIP image (unrecognised magic)")
            && r.stderr.lines().count() == 1,
        "{}",
        r.stderr
    );
}

/// A file that does not start like a ZIP but ends with a ZIP end record is
/// a ZIP with something wrong, and that is the error: a split archive's
/// parts and an archive missing its first bytes were all "not a SquashFS
/// or ZIP image (unrecognised magic)".
#[test]
fn a_split_or_cut_zip_says_what_is_wrong_with_it() {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("noise"), bytes(9, 300_000, false)).unwrap();
    let split = t.path().join("split.zip");
    run(Command::new("zip")
        .args(["-q", "-0", "-s", "64k", "-r"])
        .arg(&split)
        .arg(".")
        .current_dir(&src));
    let last = split.to_str().unwrap();
    failed(&ls(last, &[]), last, &["multi-disk (spanned) ZIP"]);
    let first = t.path().join("split.z01");
    let first = first.to_str().unwrap();
    failed(
        &ls(first, &[]),
        first,
        &["first part of a split ZIP archive"],
    );

    let whole = t.path().join("whole.zip");
    run(Command::new("zip")
        .args(["-q", "-r"])
        .arg(&whole)
        .arg(".")
        .current_dir(&src));
    let cut = t.path().join("cut.zip");
    std::fs::write(&cut, &std::fs::read(&whole).unwrap()[1000..]).unwrap();
    let c = cut.to_str().unwrap();
    failed(&ls(c, &[]), c, &["corrupt image", "central directory"]);
}

#[test]
fn a_5xx_is_retried_within_the_timeout() {
    let t = scratch();
    image(t.path(), "img.sqfs");
    // Three 503s, then answers: the retries (50 ms backoff, doubling) get
    // through well within the timeout, and the listing is whole.
    let server = RangeServer::start(t.path(), &["--fail", "503:3"]);
    let out = Command::new(packfs_bin())
        .args(["ls"])
        .arg(server.url("img.sqfs"))
        .args(["/", "--remote-timeout", "20"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        listing.contains("hello.txt") && listing.contains("data.bin"),
        "{listing}"
    );
    assert_eq!(server.failed(), 3, "the 503s were answered and retried");
}

#[test]
fn a_persistent_5xx_is_named_after_the_timeout() {
    let t = scratch();
    image(t.path(), "img.sqfs");
    let server = RangeServer::start(t.path(), &["--fail", "503"]);
    let url = server.url("img.sqfs");
    let r = ls(&url, &["--remote-timeout", "2"]);
    failed(
        &r,
        &url,
        &[
            "HTTP 503 Service Unavailable",
            "still failing after 2 s",
            "--remote-timeout",
        ],
    );
    assert!(!r.stderr.to_lowercase().contains("html"), "{}", r.stderr);
    assert!(
        r.took >= Duration::from_secs(2),
        "gave up early: {:?}",
        r.took
    );
    assert!(r.took < Duration::from_secs(2 + 5), "took {:?}", r.took);
    assert!(server.failed() > 1, "retried");
}

#[test]
fn a_shard_that_is_not_an_image_is_named_once() {
    let t = scratch();
    let src = t.path().join("src");
    for d in ["a", "b"] {
        std::fs::create_dir_all(src.join(d)).unwrap();
        std::fs::write(src.join(d).join("f"), d).unwrap();
    }
    let out = t.path().join("t-{shard}.sqfs");
    pack(&src, &out, &["--shards", "2"]);
    let shard = t.path().join("t-0.sqfs");
    let manifest = t.path().join("t.manifest.json");
    let m = manifest.to_str().unwrap();
    let s = shard.to_str().unwrap();
    // Zeros of the recorded size (the manifest's size check passes).
    let len = std::fs::metadata(&shard).unwrap().len() as usize;
    std::fs::write(&shard, vec![0u8; len]).unwrap();
    let r = ls(m, &[]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(
        r.stderr.trim(),
        format!("packfs: {s}: not a SquashFS or ZIP image (unrecognised magic)")
    );
    std::fs::remove_file(&shard).unwrap();
    std::fs::create_dir(&shard).unwrap();
    let r = ls(m, &[]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stderr.matches(s).count() == 1, "{}", r.stderr);
    assert!(r.stderr.lines().count() == 1, "{}", r.stderr);
}

/// Bug: a fifo given as the image made every command wait forever (opening
/// a fifo waits for a writer), and a pipe (`/dev/stdin`, `<(...)`) was
/// "corrupt image: empty file". Both are named as what they are now.
#[test]
fn a_pipe_as_the_image_is_named_as_one_at_once() {
    let t = scratch();
    let fifo = t.path().join("f.sqfs");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let r = ls(fifo.to_str().unwrap(), &[]);
    failed(&r, fifo.to_str().unwrap(), &["a pipe, not a file"]);
    assert!(r.took < AT_ONCE, "{:?}", r.took);
    let img = image(t.path(), "i.sqfs");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{} info /dev/stdin < {}",
            packfs_bin().display(),
            img.display()
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "a redirected file is a file");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cat {} | {} info /dev/stdin",
            img.display(),
            packfs_bin().display()
        ))
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("/dev/stdin: a pipe, not a file"), "{e}");
}

/// Regression: `gs://`, `ftp://` and any other URL scheme were read as a
/// file path, so the error was "no such file or directory". They are a
/// usage error naming the schemes packfs reads; `file:///PATH` is the file
/// PATH, for `pack -o` as for every reader.
#[test]
fn an_unknown_url_scheme_is_named_and_file_urls_are_files() {
    for url in ["gs://bucket/x.sqfs", "ftp://host/x.sqfs"] {
        let r = ls(url, &[]);
        assert_eq!(r.code, Some(2), "{}", r.stderr);
        let scheme = url.split_once("://").unwrap().0;
        assert!(
            r.stderr.contains(&format!("not {scheme}://")) && r.stderr.contains("s3://"),
            "{}",
            r.stderr
        );
        assert!(!r.stderr.contains("no such file"), "{}", r.stderr);
    }
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("hello.txt"), b"hello\n").unwrap();
    let url = format!("file://{}/i.sqfs", t.path().display());
    let out = Command::new(packfs_bin())
        .args(["pack", "-q", src.to_str().unwrap(), "-o", &url])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(t.path().join("i.sqfs").is_file());
    let out = Command::new(packfs_bin())
        .args(["cat", &url, "hello.txt"])
        .output()
        .unwrap();
    assert_eq!(
        out.stdout,
        b"hello\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Found by review: several images of one mount and the shards commands
    // took a file URL as a path.
    let ok = |args: &[&str]| {
        let out = Command::new(packfs_bin()).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let shards = format!("file://{}/s-{{shard}}.sqfs", t.path().display());
    ok(&[
        "pack",
        "-q",
        src.to_str().unwrap(),
        "--shards",
        "1",
        "-o",
        &shards,
    ]);
    let manifest = format!("file://{}/s.manifest.json", t.path().display());
    ok(&["shards", "verify", &manifest]);
    if require_root("mounts") {
        let mp = t.path().join("mp");
        std::fs::create_dir(&mp).unwrap();
        let s0 = format!("file://{}/s-0.sqfs", t.path().display());
        ok(&[
            "mount",
            "--on-conflict",
            "first",
            &url,
            &s0,
            mp.to_str().unwrap(),
        ]);
        let read = std::fs::read(mp.join("hello.txt"));
        ok(&["umount", mp.to_str().unwrap()]);
        assert_eq!(read.unwrap(), b"hello\n");
        ok(&[
            "bench",
            "--raw",
            src.to_str().unwrap(),
            "--image",
            &url,
            "--cold",
            "fadvise",
            "--epochs",
            "1",
        ]);
    }
}
