//! Exit codes as documented: README's table and the one at the end of
//! `packfs --help` are the same, and every row is what the commands do.
//! Usage errors exit 2 whichever check finds them (clap's parsing, a value
//! parser, or packfs's own checks of a combination), each with a message
//! naming the cause; `run` gives a shell's 126 and 127.

use crate::common::{pack, packfs_bin, require_root, run, scratch};
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// The (code, meaning) rows of README's exit-code table.
fn readme_rows() -> Vec<(String, String)> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let start = readme
        .find("<!-- exit-codes -->")
        .expect("README marks its exit-code table");
    let end = readme.find("<!-- /exit-codes -->").unwrap();
    readme[start..end]
        .lines()
        .filter(|l| l.starts_with('|'))
        .skip(2) // header and rule
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            (cells[0].to_string(), cells[1].to_string())
        })
        .collect()
}

/// The rows of the table `packfs --help` ends with.
fn help_rows() -> Vec<(String, String)> {
    let out = Command::new(packfs_bin()).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let table = &help[help
        .find("Exit codes:")
        .expect("--help shows the exit codes")..];
    table
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| {
            let (code, meaning) = l.trim().split_once(' ').unwrap();
            (code.to_string(), meaning.trim().to_string())
        })
        .collect()
}

fn packfs(args: &[&str], dir: &Path) -> Output {
    Command::new(packfs_bin())
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Asserts exit `code` and a stderr containing `cause`.
fn expect(args: &[&str], dir: &Path, code: i32, cause: &str) {
    let out = packfs(args, dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(code),
        "packfs {}: want {code}, got {}; stderr:\n{stderr}",
        args.join(" "),
        out.status
    );
    assert!(
        stderr.contains(cause),
        "packfs {}: stderr lacks {cause:?}:\n{stderr}",
        args.join(" ")
    );
    for raw in ["..=", "(os error"] {
        assert!(
            !stderr.contains(raw),
            "packfs {}: {raw:?} in:\n{stderr}",
            args.join(" ")
        );
    }
}

/// A work directory with a small tree `src` and its image `img.sqfs`.
fn work() -> tempfile::TempDir {
    let w = scratch();
    let src = w.path().join("src");
    std::fs::create_dir_all(src.join("d0")).unwrap();
    std::fs::write(src.join("d0/a.txt"), b"a").unwrap();
    pack(&src, &w.path().join("img.sqfs"), &[]);
    w
}

/// Regression: `packfs pack SRC IMAGE`, the order mksquashfs takes, was
/// "unexpected argument"; the image had to be given with `-o`.
#[test]
fn pack_takes_the_image_as_its_second_argument_too() {
    let w = work();
    let out = packfs(&["pack", "-q", "src", "two.sqfs"], w.path());
    assert!(out.status.success(), "{out:?}");
    let out = packfs(&["cat", "two.sqfs", "d0/a.txt"], w.path());
    assert_eq!(out.stdout, b"a", "{out:?}");
}

#[test]
fn readme_and_help_show_the_same_table() {
    let readme = readme_rows();
    assert!(readme.len() >= 5, "{readme:?}");
    assert_eq!(readme, help_rows());
}

#[test]
fn every_usage_error_exits_2_naming_its_cause() {
    let w = work();
    let d = w.path();
    let cases: &[(&[&str], &str)] = &[
        // Found by clap's value parsers.
        (
            &["pack", "src", "-o", "x.sqfs", "-b", "3000"],
            "power of two from 4K to 1M",
        ),
        (
            &["pack", "src", "-o", "x.sqfs", "--exclude", "["],
            "not a valid glob",
        ),
        (
            &["pack", "src", "-o", "x.sqfs", "--exclude", "/"],
            "source root",
        ),
        (
            &["pack", "src", "-o", "x.sqfs", "--mount-at", "opt/venv"],
            "is relative",
        ),
        (
            &["run", "img.sqfs", "--", "true"],
            "expected IMAGE:MOUNTPOINT",
        ),
        (
            &[
                "bench",
                "--raw",
                "src",
                "--image",
                "img.sqfs",
                "--threads",
                "0",
            ],
            "1 to 1024",
        ),
        (
            &[
                "bench", "--raw", "src", "--image", "img.sqfs", "--repeat", "0",
            ],
            "at least 1",
        ),
        (&["pack", "src"], "--output"),
        (
            &["pack", "src", "x.sqfs", "-o", "y.sqfs"],
            "the image is given once",
        ),
        (&["pack", "src", "gs://b/x.sqfs"], "not gs://"),
        (
            &["pack", "img.sqfs", "src"],
            "the directory to pack comes first",
        ),
        // Found by packfs's own checks.
        (&["pack", "src", "-o", "x.sqfs", "-l", "50"], "from 1 to 22"),
        (
            &["pack", "src", "-o", "x.sqfs", "-c", "xz", "-l", "10"],
            "from 0 to 9",
        ),
        (
            &["pack", "src", "-o", "x.zip", "-c", "zstd", "-l", "50"],
            "to 22",
        ),
        (
            &["pack", "src", "-o", "x.zip", "-c", "xz"],
            "ZIP images take",
        ),
        (
            &["pack", "src", "-o", "x.bin"],
            "cannot tell the image format",
        ),
        (&["pack", "src", "-o", "x-{shard}.sqfs"], "needs --shards"),
        (
            &["pack", "src", "-o", "x-{shard}.sqfs", "--shards", "0"],
            "must be 1 to",
        ),
        (
            &[
                "pack",
                "src",
                "-o",
                "x-{shard}.sqfs",
                "--shards",
                "2",
                "--shard",
                "5",
            ],
            "below",
        ),
        (
            &["pack", "src", "-o", "x.sqfs", "--mount-at", "/opt/v"],
            "Python environments",
        ),
        (
            &["mount", "img.sqfs", "src", "-o", "bogus"],
            "unknown mount option",
        ),
        (&["info", "img.sqfs", "--range-size", "3000"], "range"),
        (&["bench", "--raw", "src"], "--image is required"),
        (
            &[
                "bench", "--raw", "src", "--image", "img.sqfs", "--plot", "out.png",
            ],
            "as SVG",
        ),
        (
            &[
                "bench",
                "--raw",
                "src",
                "--image",
                "img.sqfs",
                "--workload",
                "import",
            ],
            "--import",
        ),
    ];
    for (args, cause) in cases {
        expect(args, d, 2, cause);
    }
    // Nothing was written by any of them.
    let mut left: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["img.sqfs", "src"]);
}

#[test]
fn each_row_of_the_table_is_what_the_commands_do() {
    let w = work();
    let d = w.path();
    let mounts = require_root("mounts for `packfs run`");
    for (code, meaning) in readme_rows() {
        match code.as_str() {
            "0" => expect(&["pack", "src", "-o", "ok.sqfs", "-q"], d, 0, ""),
            "1" => expect(&["pack", "src", "-o", "img.sqfs"], d, 1, "already exists"),
            "2" => expect(
                &["pack", "src", "-o", "x.sqfs", "-b", "3000"],
                d,
                2,
                "block size",
            ),
            // The signal half of 128+N is `pack_cancel`'s; the rest runs a
            // command under `packfs run`, which needs a mount.
            _ if !mounts => {}
            "126" => {
                let script = d.join("not-executable.sh");
                std::fs::write(&script, "#!/bin/sh\n").unwrap();
                let script = script.to_str().unwrap();
                expect(
                    &["run", "img.sqfs:m126", "--", script],
                    d,
                    126,
                    "cannot execute",
                );
            }
            "127" => {
                expect(
                    &["run", "img.sqfs:m127", "--", "/nonexistent/cmd"],
                    d,
                    127,
                    "/nonexistent/cmd: command not found",
                );
                // Bug: a script whose `#!` interpreter is missing (a venv's
                // console script packed without --mount-at) was "command
                // not found" although it is there.
                let script = d.join("old-venv-tool");
                std::fs::write(&script, "#!/nonexistent/venv/bin/python3 -E\nprint()\n").unwrap();
                let mut p = std::fs::metadata(&script).unwrap().permissions();
                std::os::unix::fs::PermissionsExt::set_mode(&mut p, 0o755);
                std::fs::set_permissions(&script, p).unwrap();
                expect(
                    &["run", "img.sqfs:m127", "--", script.to_str().unwrap()],
                    d,
                    127,
                    "its interpreter /nonexistent/venv/bin/python3 (its #! line) is not found",
                );
            }
            "128+N" => expect(
                &["run", "img.sqfs:m143", "--", "sh", "-c", "kill -TERM $$"],
                d,
                128 + libc::SIGTERM,
                "",
            ),
            "other" => expect(
                &["run", "img.sqfs:m7", "--", "sh", "-c", "exit 7"],
                d,
                7,
                "",
            ),
            _ => panic!("README's exit code {code} ({meaning}) has no check here"),
        }
    }
    // `run` removed the mountpoints it made.
    for m in ["m126", "m127", "m143", "m7"] {
        assert!(!d.join(m).exists(), "{m} left behind");
    }
}

/// Bug: a bad SOURCE_DATE_EPOCH exited 1 (not the usage status 2 the other
/// PACKFS_* settings give), and one out of range was "not a number".
#[test]
fn a_bad_source_date_epoch_is_a_usage_error_saying_what_is_wrong() {
    let w = work();
    for (v, says) in [
        ("abc", "expected seconds since 1970"),
        ("-5", "outside the times an image stores"),
        ("4294967296", "outside the times an image stores"),
    ] {
        let out = Command::new(packfs_bin())
            .args(["pack", "src", "-o", "x.sqfs"])
            .current_dir(w.path())
            .env("SOURCE_DATE_EPOCH", v)
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{v}: {e}");
        assert!(e.contains(says) && e.contains(v), "{v}: {e}");
        assert!(!w.path().join("x.sqfs").exists());
    }
}

/// Bug: pack's option errors named the wrong thing: `--preset smallest -o
/// x.zip` said "not xz" (no -c given), `--xz-lzma2` with a ZIP said "not
/// gzip" for deflate, `-c lz4 -l 5` said "a level from 0 to 0".
#[test]
fn pack_option_errors_name_what_was_given() {
    let w = work();
    let lzma2 = ["--xz-lzma2", "lc=1"];
    for (args, says) in [
        (
            &["--preset", "smallest", "-o", "x.zip"][..],
            "--preset makes SquashFS images",
        ),
        (
            &["-c", "lz4", "-l", "5", "-o", "x.sqfs"][..],
            "lz4 takes no level",
        ),
        (
            &[&["-c", "deflate", "-o", "x.zip"][..], &lzma2[..]].concat()[..],
            "not deflate",
        ),
        (&["-c", "xz", "-o", "x.zip"][..], "not xz"),
    ] {
        let all = [&["pack", "src"][..], args].concat();
        expect(&all, w.path(), 2, says);
    }
}

/// Bug: `-b`, `--no-fragments` and `--fragment-incompressible` with a ZIP
/// output were accepted and silently ignored (a ZIP entry is one stream).
#[test]
fn squashfs_only_pack_flags_are_refused_for_a_zip() {
    let w = work();
    for (args, says) in [
        (
            &["-b", "64K"][..],
            "--block-size applies to SquashFS images",
        ),
        (
            &["--no-fragments"][..],
            "--no-fragments applies to SquashFS images",
        ),
        (
            &["--fragment-incompressible"][..],
            "--fragment-incompressible applies to SquashFS images",
        ),
    ] {
        let all = [&["pack", "src", "-o", "x.zip"][..], args].concat();
        expect(&all, w.path(), 2, says);
        assert!(!w.path().join("x.zip").exists());
    }
}

/// Bug: `info`, `shards verify` and `bench` panicked (status 101, a
/// backtrace) when their output could not be written (`> /dev/full`, a
/// full quota), and `--help`/`--version` exited 0. Each says so and exits 1.
#[test]
fn output_that_cannot_be_written_is_an_error_not_a_panic() {
    let w = work();
    for args in [
        &["info", "img.sqfs"][..],
        &["ls", "img.sqfs"],
        &["--version"],
        &["--help"],
        &["pack", "--help"],
        &[
            "bench",
            "--raw",
            "src",
            "--image",
            "img.sqfs",
            "--workload",
            "walk",
        ],
    ] {
        let out = Command::new(packfs_bin())
            .args(args)
            .current_dir(w.path())
            .stdout(std::fs::File::create("/dev/full").unwrap())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("no space left on device"),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// Bug: `bench --json` into a directory that does not exist failed only
/// after every run had been measured.
#[test]
fn a_bench_report_path_that_cannot_be_written_is_refused_before_measuring() {
    let w = work();
    for flag in ["--json", "--plot"] {
        expect(
            &[
                "bench",
                "--raw",
                "src",
                "--image",
                "img.sqfs",
                flag,
                "no/such/dir/r.out",
            ],
            w.path(),
            1,
            &format!("{flag} no/such/dir/r.out: cannot write in no/such/dir"),
        );
    }
}

/// Bug: a malformed `--endpoint` and a manifest mounted with other images
/// exited 1 ("invalid argument: ..."), as if something had failed, where
/// a bad value or combination on the command line exits 2.
#[test]
fn a_bad_endpoint_or_a_manifest_among_images_is_a_usage_error() {
    let w = work();
    expect(
        &["ls", "s3://bucket/x.sqfs", "--endpoint", "host:9000"],
        w.path(),
        2,
        "expected a URL such as https://host",
    );
    run(Command::new(packfs_bin())
        .args(["pack", "src", "--shards", "2", "-q", "-o", "t-{shard}.sqfs"])
        .current_dir(w.path()));
    std::fs::create_dir(w.path().join("mnt")).unwrap();
    expect(
        &["mount", "t.manifest.json", "img.sqfs", "mnt"],
        w.path(),
        2,
        "t.manifest.json: a manifest mounts alone",
    );
}
