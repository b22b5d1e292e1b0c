//! `packfs bench` end to end: a small tree is packed, benchmarked raw
//! against its packfs mount, and the outputs are checked against their
//! contracts: the JSON against the field table of docs/BENCH_JSON.md (both
//! ways: every documented field present with its type, every field present
//! documented), the SVG by rendering it. A tree that does not match its
//! image must be refused.

use crate::common::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

/// 40 small files in 4 directories, 3 files over 1 MiB, a symlink: at most
/// 64 files, so verification compares every file's content.
fn small_tree(root: &Path) {
    for d in 0..4 {
        let dir = root.join(format!("d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..10u64 {
            let n = ((d * 10 + i) * 997 % 9000) as usize;
            std::fs::write(
                dir.join(format!("f{i}.txt")),
                bytes(d * 100 + i, n, i % 2 == 0),
            )
            .unwrap();
        }
    }
    for i in 0..3u64 {
        std::fs::write(
            root.join(format!("big{i}.bin")),
            bytes(1000 + i, 1_300_000, i == 0),
        )
        .unwrap();
    }
    std::os::unix::fs::symlink("big0.bin", root.join("link")).unwrap();
}

fn packed(tmp: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let src = tmp.join("src");
    std::fs::create_dir(&src).unwrap();
    small_tree(&src);
    let img = tmp.join("img.sqfs");
    pack(&src, &img, &[]);
    (src, img)
}

fn bench(src: &Path, img: &Path, extra: &[&str]) -> Output {
    Command::new(packfs_bin())
        .arg("bench")
        .arg("--raw")
        .arg(src)
        .arg("--image")
        .arg(img)
        // drop_caches would disturb everything else on the machine.
        .args(["--cold", "fadvise"])
        .args(extra)
        .output()
        .expect("running packfs bench")
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "packfs bench failed ({}):\n{}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// (path, allowed types) from the field table of docs/BENCH_JSON.md.
fn documented_fields() -> Vec<(String, Vec<String>)> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/BENCH_JSON.md"))
            .expect("docs/BENCH_JSON.md");
    let fields: Vec<(String, Vec<String>)> = doc
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            let path = cells[0]
                .trim_start_matches("| ")
                .trim_matches('`')
                .to_string();
            let types = cells[1]
                .replace("\\|", "|")
                .split('|')
                .map(|t| t.trim().to_string())
                .collect();
            (path, types)
        })
        .collect();
    assert!(
        fields.len() > 40,
        "the field table of docs/BENCH_JSON.md was not found"
    );
    fields
}

fn type_ok(v: &Value, t: &str) -> bool {
    match t {
        "integer" => v.is_u64() || v.is_i64(),
        "number" => v.is_number(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        "null" => v.is_null(),
        other => panic!("docs/BENCH_JSON.md: unknown type {other:?}"),
    }
}

/// Values at a documented path; `a[].b` visits `b` of every element of `a`.
/// Children of a null parent are not visited (the parent's type allows null).
fn values_at<'a>(root: &'a Value, path: &str) -> Vec<(String, Option<&'a Value>)> {
    let mut cur: Vec<(String, &Value)> = vec![(String::new(), root)];
    let parts: Vec<&str> = path.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        let (name, each) = match part.strip_suffix("[]") {
            Some(n) => (n, true),
            None => (*part, false),
        };
        let mut next = Vec::new();
        for (p, v) in cur {
            if v.is_null() {
                continue;
            }
            let here = format!("{p}.{name}");
            match v.get(name) {
                None => return vec![(here, None)],
                Some(c) if each && i + 1 < parts.len() => {
                    for (k, e) in c
                        .as_array()
                        .unwrap_or_else(|| panic!("{here} is not an array"))
                        .iter()
                        .enumerate()
                    {
                        next.push((format!("{here}[{k}]"), e));
                    }
                }
                Some(c) => next.push((here, c)),
            }
        }
        cur = next;
    }
    cur.into_iter().map(|(p, v)| (p, Some(v))).collect()
}

/// Every field of the document, as a documented path (`runs[].seconds`).
fn present_fields(v: &Value, prefix: &str, out: &mut Vec<String>) {
    if let Value::Object(m) = v {
        for (k, c) in m {
            let p = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            out.push(p.clone());
            match c {
                Value::Array(a) if a.iter().any(Value::is_object) => {
                    for e in a {
                        present_fields(e, &format!("{p}[]"), out);
                    }
                }
                Value::Object(_) => present_fields(c, &p, out),
                _ => {}
            }
        }
    }
}

fn validate_against_doc(json: &Value) {
    let fields = documented_fields();
    for (path, types) in &fields {
        // `runs[]` itself is documented as `runs`; its elements' fields as `runs[].x`.
        for (at, v) in values_at(json, path) {
            let v = v.unwrap_or_else(|| panic!("{at}: documented field missing from the JSON"));
            assert!(
                types.iter().any(|t| type_ok(v, t)),
                "{at}: {v} is not {}",
                types.join("|")
            );
        }
    }
    let mut present = Vec::new();
    present_fields(json, "", &mut present);
    for p in present {
        assert!(
            fields.iter().any(|(f, _)| *f == p),
            "{p}: field not documented in docs/BENCH_JSON.md"
        );
    }
}

/// Renders the SVG and returns (width, height, non-white pixels, pixels of each side's colour).
fn render(svg: &str) -> (u32, u32, usize, Vec<usize>) {
    let tree =
        resvg::usvg::Tree::from_str(svg, &resvg::usvg::Options::default()).expect("the SVG parses");
    let size = tree.size().to_int_size();
    let mut pixmap =
        resvg::tiny_skia::Pixmap::new(size.width(), size.height()).expect("a non-empty canvas");
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    let px = pixmap.pixels();
    let ink = px
        .iter()
        .filter(|p| (p.red(), p.green(), p.blue()) != (255, 255, 255) && p.alpha() > 0)
        .count();
    let side_colours = [(0x4e, 0x79, 0xa7), (0xf2, 0x8e, 0x2b)];
    let per_side = side_colours
        .iter()
        .map(|&c| {
            px.iter()
                .filter(|p| (p.red(), p.green(), p.blue()) == c)
                .count()
        })
        .collect();
    (size.width(), size.height(), ink, per_side)
}

#[test]
fn bench_prints_table_and_writes_valid_json_and_svg() {
    let tmp = scratch();
    let (src, img) = packed(tmp.path());
    let (json_path, svg_path) = (tmp.path().join("out.json"), tmp.path().join("out.svg"));
    let out = bench(
        &src,
        &img,
        &[
            "--workload",
            "walk,sequential,shuffle,sample",
            "--threads",
            "1,2",
            "--repeat",
            "1",
            "--epochs",
            "2",
            "--samples",
            "40",
            "--json",
            json_path.to_str().unwrap(),
            "--plot",
            svg_path.to_str().unwrap(),
        ],
    );
    let table = ok(&out);
    assert!(
        table.contains("seconds") && table.contains("files/s") && table.contains("vs raw"),
        "{table}"
    );
    assert!(
        table.contains("cold runs: fadvise"),
        "the table must say how runs were made cold:\n{table}"
    );
    // 4 workloads x 2 thread counts x 2 sides x 2 epochs.
    let data_lines = table
        .lines()
        .filter(|l| l.starts_with("raw ") || l.starts_with("packfs "))
        .count();
    assert_eq!(data_lines, 32, "{table}");

    let json: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    validate_against_doc(&json);
    assert_eq!(json["schema_version"], 1);
    assert_eq!(json["config"]["verified"], true);
    assert_eq!(json["tree"]["files"], 43);
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 32);
    for r in runs {
        let raw = r["side"] == "raw";
        assert_eq!(r["cold"], r["epoch"] == 1, "{r}");
        assert_eq!(r["errors"], 0, "{r}");
        assert!(r["seconds"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["items"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["ratio_vs_raw"].is_null(), raw, "{r}");
        match r["workload"].as_str().unwrap() {
            // Every entry below the root: 43 files, 4 directories, 1 symlink.
            "walk" => assert_eq!(r["items"], 48, "{r}"),
            "sequential" | "shuffle" => assert_eq!(r["items"], 43, "{r}"),
            "sample" => assert_eq!(r["items"], 40, "{r}"),
            w => panic!("unexpected workload {w}"),
        }
        if matches!(r["workload"].as_str(), Some("sequential" | "shuffle")) {
            assert_eq!(r["bytes"], json["tree"]["file_bytes"], "{r}");
        }
    }
    let sides: Vec<&str> = json["sides"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["label"].as_str().unwrap())
        .collect();
    assert_eq!(sides, ["raw", "packfs"]);
    assert!(json["sides"][1]["cold"]
        .as_str()
        .unwrap()
        .contains("mount refreshed"));

    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let (w, h, ink, per_side) = render(&svg);
    assert!(w >= 400 && h >= 400, "{w}x{h}");
    assert!(
        ink * 50 > (w * h) as usize / 100,
        "the chart is nearly blank: {ink} non-white pixels of {}",
        w * h
    );
    assert!(
        per_side.iter().all(|&n| n > 20),
        "bars of both sides drawn: {per_side:?}"
    );
}

#[test]
fn grouped_reads_every_file_once_in_the_image_layout_order() {
    let tmp = scratch();
    let (src, img) = packed(tmp.path());
    let json_path = tmp.path().join("out.json");
    let args = [
        "--workload",
        "grouped",
        "--group-bytes",
        "64K",
        "--window",
        "3",
        "--epochs",
        "1",
        "--json",
        json_path.to_str().unwrap(),
    ];
    ok(&bench(&src, &img, &args));
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    validate_against_doc(&json);
    assert_eq!(json["config"]["group_bytes"], 65536);
    assert_eq!(json["config"]["window"], 3);
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "raw and packfs");
    for r in runs {
        assert_eq!(r["workload"], "grouped", "{r}");
        assert_eq!(r["errors"], 0, "{r}");
        assert_eq!(r["items"], json["tree"]["files"], "{r}");
        assert_eq!(r["bytes"], json["tree"]["file_bytes"], "{r}");
    }
}

#[test]
fn mismatched_tree_is_refused_unless_no_verify() {
    let tmp = scratch();
    let (src, img) = packed(tmp.path());
    // Same size, different content: only the content check can see it.
    let f = src.join("d2/f7.txt");
    let mut data = std::fs::read(&f).unwrap();
    assert!(!data.is_empty());
    data[0] ^= 0xff;
    std::fs::write(&f, &data).unwrap();

    let args = ["--workload", "walk,sequential", "--epochs", "1"];
    let out = bench(&src, &img, &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("do not hold the same files"), "{stderr}");
    assert!(stderr.contains("d2/f7.txt: contents differ"), "{stderr}");
    assert!(stderr.contains("--no-verify"), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "no speed may be reported: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    // A missing file is a listing difference.
    std::fs::remove_file(src.join("d0/f1.txt")).unwrap();
    let out = bench(&src, &img, &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("d0/f1.txt: only in the image"), "{stderr}");

    let json_path = tmp.path().join("nv.json");
    let mut nv = args.to_vec();
    nv.extend(["--no-verify", "--json", json_path.to_str().unwrap()]);
    let table = ok(&bench(&src, &img, &nv));
    assert!(table.contains("--no-verify"), "{table}");
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    assert_eq!(json["config"]["verified"], false);
}

#[test]
fn emulated_latency_counts_operations_through_the_passthrough() {
    let tmp = scratch();
    let (src, img) = packed(tmp.path());
    let json_path = tmp.path().join("emu.json");
    ok(&bench(
        &src,
        &img,
        &[
            "--workload",
            "walk,sequential",
            "--threads",
            "2",
            "--epochs",
            "2",
            "--emulate-latency",
            "300,100",
            "--json",
            json_path.to_str().unwrap(),
        ],
    ));
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    validate_against_doc(&json);
    assert_eq!(json["config"]["emulate_latency"]["meta_us"], 300);
    assert_eq!(json["config"]["emulate_latency"]["read_us"], 100);
    for r in json["runs"].as_array().unwrap() {
        let pt = &r["storage"]["passthrough"];
        assert!(pt.is_object(), "{r}");
        if r["cold"] == true {
            assert!(pt["meta_ops"].as_u64().unwrap() > 0, "{r}");
        }
        if r["side"] == "raw" && r["workload"] == "sequential" {
            // Every file is opened through the layer, one metadata op each at least.
            assert!(pt["meta_ops"].as_u64().unwrap() >= 43, "{r}");
            // At 300 us per op and 2 threads, 43 opens cannot take under 6 ms.
            assert!(r["seconds"].as_f64().unwrap() > 0.006, "{r}");
        }
        if r["side"] == "packfs" {
            // The image is opened once, at mount (counted in the cold run):
            // reading its files costs no metadata operation on the storage.
            let limit = if r["cold"] == true { 8 } else { 0 };
            assert!(pt["meta_ops"].as_u64().unwrap() <= limit, "{r}");
        }
    }
    // The passthroughs are named after what they expose (this test's
    // directories); other tests' mounts may be up meanwhile.
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let ours = format!(
        "packfs-bench:{}",
        tmp.path().canonicalize().unwrap().display()
    );
    assert!(
        !mounts.lines().any(|l| l.starts_with(&ours)),
        "a passthrough mount was left behind:\n{mounts}"
    );
}

/// With `--client-cache none` no page cache stands between the readers and
/// the storage: a warm epoch of the raw tree reads every byte through the
/// layer again, and a cold epoch of packfs's mount reads more of the image
/// than its small block cache holds. (Its warm epoch is served from the
/// kernel's cache of the mount's own files, which the option leaves as it
/// is.) The report says which caches there were.
#[test]
fn without_a_client_cache_every_epoch_reaches_the_storage() {
    let tmp = scratch();
    let (src, img) = packed(tmp.path());
    let json_path = tmp.path().join("nocache.json");
    let out = ok(&bench(
        &src,
        &img,
        &[
            "--workload",
            "sequential",
            "--epochs",
            "2",
            "--emulate-latency",
            "0,0",
            "--client-cache",
            "none",
            "--cache-size",
            "1M",
            "--no-verify",
            "--json",
            json_path.to_str().unwrap(),
        ],
    ));
    assert!(
        out.contains("client cache of file data: none (direct I/O)"),
        "{out}"
    );
    assert!(out.contains("; block cache 1.0 MiB;"), "{out}");
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    validate_against_doc(&json);
    assert_eq!(json["config"]["emulate_latency"]["client_cache_bytes"], 0);
    let sides = json["sides"].as_array().unwrap();
    assert_eq!(sides[0]["block_cache_bytes"], Value::Null);
    assert_eq!(sides[1]["block_cache_bytes"], 1 << 20);
    let file_bytes = json["tree"]["file_bytes"].as_u64().unwrap();
    for r in json["runs"].as_array().unwrap() {
        let pt = &r["storage"]["passthrough"];
        if r["side"] == "raw" {
            // Exactly the files' bytes, warm or cold: no read past an end.
            assert_eq!(pt["read_bytes"].as_u64(), Some(file_bytes), "{r}");
        } else if r["cold"] == true {
            // The image's blocks are several times the block cache.
            assert!(pt["read_bytes"].as_u64().unwrap() > 2 << 20, "{r}");
        }
    }
}

#[test]
fn bad_arguments_are_errors_not_panics() {
    let tmp = scratch();
    let (src, img) = packed(tmp.path());
    // Usage errors: status 2, as for any command.
    for (args, msg) in [
        (&["--threads", "0"][..], "1 to 1024"),
        (&["--workload", "import"][..], "--import"),
        (&["--emulate-latency", "abc"][..], "not a number"),
        (&["--client-cache", "1G"][..], "needs --emulate-latency"),
        (
            &["--import", "os;rm", "--workload", "import"][..],
            "not a Python module name",
        ),
    ] {
        let out = bench(&src, &img, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(msg), "{args:?}: {stderr}");
    }
    let out = bench(&src, &tmp.path().join("missing.sqfs"), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.sqfs"));
}

/// The command line of the `packfs mount --foreground` child of `bench`.
fn bench_mount_of(bench: u32) -> Option<Vec<std::path::PathBuf>> {
    std::fs::read_dir("/proc").ok()?.find_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let ppid: u32 = stat.rsplit(") ").next()?.split(' ').nth(1)?.parse().ok()?;
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<&[u8]> = cmd.split(|&b| b == 0).filter(|a| !a.is_empty()).collect();
        use std::os::unix::ffi::OsStrExt;
        (ppid == bench && args.get(1) == Some(&&b"mount"[..])).then(|| {
            args.iter()
                .map(|a| std::ffi::OsStr::from_bytes(a).into())
                .collect()
        })
    })
}

/// Found by a new user's review: a bench ended by SIGTERM (`timeout`, a
/// scheduler) or SIGKILL left its mount and daemon behind: the unmount
/// was in a destructor, which a signal never runs. Its daemon now ends
/// with it, unmounting as `packfs umount` does.
#[test]
fn a_bench_killed_by_a_signal_takes_its_mount_with_it() {
    let tmp = scratch();
    let (src, img) = packed(tmp.path());
    for sig in [libc::SIGTERM, libc::SIGKILL] {
        let mut b = ChildGuard(
            Command::new(packfs_bin())
                .arg("bench")
                .arg("--raw")
                .arg(&src)
                .arg("--image")
                .arg(&img)
                .args(["--cold", "fadvise", "--no-raw", "--epochs", "100000"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        let mut args = None;
        assert!(
            within_10s(|| {
                args = bench_mount_of(b.0.id());
                args.as_ref()
                    .is_some_and(|a| listed_in_mounts(a.last().unwrap()))
            }),
            "the bench's mount did not appear"
        );
        let args = args.unwrap();
        let mp = args.last().unwrap().clone();
        let stats = args
            .iter()
            .skip_while(|a| *a != Path::new("--stats"))
            .nth(1);
        let stats_dir = stats.and_then(|s| s.parent()).map(Path::to_path_buf);
        let _gone = Unmounted(mp.clone());
        // SAFETY: signalling our own child.
        unsafe { libc::kill(b.0.id() as i32, sig) };
        let _ = b.0.wait();
        assert!(
            within_10s(|| !listed_in_mounts(&mp)),
            "signal {sig}: {} is still mounted",
            mp.display()
        );
        // What a signalled bench cannot remove: its scratch directories.
        let _ = std::fs::remove_dir(&mp);
        if let Some(d) = stats_dir.filter(|d| d.starts_with(std::env::temp_dir())) {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Unmounts (lazily) what a failed test left mounted.
struct Unmounted(std::path::PathBuf);

impl Drop for Unmounted {
    fn drop(&mut self) {
        if listed_in_mounts(&self.0) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}
