//! Shards on S3: `pack --shards N -o s3://...` as the tasks of
//! a job array (the last one writes the manifest object beside the
//! shards), a manifest of `s3://` shards mounted as one tree equal to the
//! source, manifests mixing local and remote shards, and a missing shard
//! object as an error naming it. Against moto, as `remote_s3` starts it.
//! And many HTTP shards (`scripts/range_server.py`) on one shared runtime.

use crate::common::servers::{Moto, RangeServer};
use crate::common::*;
use std::path::Path;
use std::process::Output;

/// `pack SRC --shards 3 --shard K -o TEMPLATE` with a fixed mtime, so
/// that packing again (locally) gives the same bytes.
fn pack_task(moto: &Moto, src: &Path, template: &str, k: Option<u32>) -> Output {
    let mut args = vec![
        "pack".to_string(),
        src.to_str().unwrap().into(),
        "--shards".into(),
        "3".into(),
        "-o".into(),
        template.into(),
    ];
    if let Some(k) = k {
        args.extend(["--shard".into(), k.to_string()]);
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    moto.packfs(&a)
}

#[test]
fn s3_shards_pack_as_a_job_array_and_mount_as_one_tree() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    let moto = Moto::start();
    moto.create_bucket("shards");
    let template = "s3://shards/sets/t-{shard}.sqfs";

    // Task 0 alone: its shard and sidecar, no manifest yet.
    let out = pack_task(&moto, &src, template, Some(0));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    assert!(err.contains("manifest: not yet"), "{err}");
    let keys = moto.keys("shards");
    assert!(keys.contains(&"sets/t-0.sqfs".to_string()), "{keys:?}");
    assert!(
        !keys.iter().any(|k| k.ends_with("manifest.json")),
        "{keys:?}"
    );

    // Tasks 1 and 2 finish together: whichever is last writes the manifest.
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| pack_task(&moto, &src, template, Some(1)));
        let b = s.spawn(|| pack_task(&moto, &src, template, Some(2)));
        (a.join().unwrap(), b.join().unwrap())
    });
    let said: Vec<String> = [a, b]
        .into_iter()
        .map(|o| {
            let e = String::from_utf8_lossy(&o.stderr).into_owned();
            assert!(o.status.success(), "{e}");
            e
        })
        .collect();
    assert!(
        said.iter()
            .any(|e| e.contains("manifest: s3://shards/sets/t.manifest.json")),
        "{said:?}"
    );
    assert!(moto
        .keys("shards")
        .contains(&"sets/t.manifest.json".to_string()));

    // Mounted: one tree, equal to the source entry by entry.
    let url = "s3://shards/sets/t.manifest.json";
    let dir = scratch();
    let mp = dir.path().to_str().unwrap().to_string();
    assert_ok(moto.packfs(&["mount", url, &mp, "--range-size", "64K"]));
    let m = PackfsMount { dir };
    let o = ManifestOptions::default();
    assert_same(
        "s3 shards vs source",
        &manifest(m.path(), &o),
        &manifest(&src, &o),
    );
    drop(m);
    // `ls` reads it too.
    let listed = assert_ok(moto.packfs(&["ls", url]));
    assert!(listed.contains("d"), "{listed}");

    // The same split packed locally gives the same images: a local
    // manifest naming shard 0 by its URL mixes local and remote shards.
    let local = t.path().join("local");
    std::fs::create_dir(&local).unwrap();
    let out = pack_task(
        &moto,
        &src,
        local.join("t-{shard}.sqfs").to_str().unwrap(),
        None,
    );
    assert_ok(out);
    let mpath = local.join("t.manifest.json");
    let mut mj: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&mpath).unwrap()).unwrap();
    mj["shards"][0]["file"] = "s3://shards/sets/t-0.sqfs".into();
    std::fs::remove_file(local.join("t-0.sqfs")).unwrap();
    std::fs::write(&mpath, serde_json::to_vec(&mj).unwrap()).unwrap();
    // Bug: such a manifest was opened before the daemon's fork, so shard 0's
    // S3 client kept the parent's runtime, whose threads the daemon does
    // not have: every read that missed the range cache failed (EIO). The
    // smallest range cache makes the reads go to S3 after the fork.
    let dir = scratch();
    let mp = dir.path().to_str().unwrap().to_string();
    assert_ok(moto.packfs(&[
        "mount",
        mpath.to_str().unwrap(),
        &mp,
        "--range-size",
        "64K",
        "--range-cache",
        "128K",
        "--remote-timeout",
        "10",
    ]));
    let m = PackfsMount { dir };
    assert_same(
        "mixed shards vs source",
        &manifest(m.path(), &o),
        &manifest(&src, &o),
    );
    drop(m);

    // A shard object missing: an error naming it, before anything mounts.
    moto.py("s3.delete_object(Bucket='shards', Key='sets/t-1.sqfs')");
    let dir = scratch();
    let out = moto.packfs(&["mount", url, dir.path().to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("shard 1") && err.contains("s3://shards/sets/t-1.sqfs") && err.contains("404"),
        "{err}"
    );
}

/// Every remote object of a process shares one runtime: a manifest of 48
/// shards served over HTTP, mounted and read whole, keeps the daemon's
/// thread count small (a runtime per object started two threads each),
/// and every file reads as the source.
#[test]
fn many_remote_shards_share_one_runtime() {
    const SHARDS: u32 = 48;
    let t = scratch();
    let src = t.path().join("src");
    for d in 0..4 {
        let dir = src.join(format!("d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..SHARDS / 2 {
            let seed = u64::from(d * 100 + f);
            std::fs::write(dir.join(format!("f{f:02}")), bytes(seed, 40_000, true)).unwrap();
        }
    }
    let served = t.path().join("served");
    let m = super::shards::pack_shards(&src, &served, "sqfs", SHARDS, &["--mtime", "0"]);
    let server = RangeServer::start(&served, &[]);
    // A local manifest naming every shard by its URL.
    let mut mj: serde_json::Value = serde_json::from_slice(&std::fs::read(&m).unwrap()).unwrap();
    let shards = mj["shards"].as_array_mut().unwrap();
    assert_eq!(shards.len(), SHARDS as usize);
    for s in shards.iter_mut() {
        assert!(
            s["files"].as_u64().unwrap() > 0,
            "every shard holds a file: {s}"
        );
        s["file"] = server.url(s["file"].as_str().unwrap()).into();
    }
    let local = t.path().join("local");
    std::fs::create_dir(&local).unwrap();
    let manifest = local.join("t.manifest.json");
    std::fs::write(&manifest, serde_json::to_vec(&mj).unwrap()).unwrap();

    // Ranges smaller than a shard: reads go to the network after the open.
    let mnt = PackfsMount::new(&manifest, &["--range-size", "64K", "--range-cache", "128K"]);
    let pid = daemon_pid(mnt.path());
    for d in 0..4 {
        for f in 0..SHARDS / 2 {
            let rel = format!("d{d}/f{f:02}");
            let got = std::fs::read(mnt.path().join(&rel)).unwrap();
            assert!(got == bytes(u64::from(d * 100 + f), 40_000, true), "{rel}");
        }
    }
    let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .count();
    assert!(
        threads < SHARDS as usize / 2,
        "{threads} threads in the daemon after reading from {SHARDS} remote shards"
    );
}

/// Bug: a job-array task whose sibling's sidecar on S3 came from other
/// split options (another codec) exited 0 with "manifest: not yet", and
/// the manifest could never be written; local shards refuse this, naming
/// the differing option.
#[test]
fn an_s3_task_refuses_a_sibling_packed_with_other_options() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    let moto = Moto::start();
    moto.create_bucket("mix");
    let template = "s3://mix/j/t-{shard}.sqfs";
    let base = [
        "pack",
        src.to_str().unwrap(),
        "--shards",
        "2",
        "-o",
        template,
    ];
    assert_ok(moto.packfs(&[&base[..], &["--shard", "0"]].concat()));
    let out = moto.packfs(&[&base[..], &["--shard", "1", "-c", "gzip"]].concat());
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(
        e.contains("other split options") && e.contains("compression"),
        "{e}"
    );
    assert!(!moto
        .keys("mix")
        .iter()
        .any(|k| k.ends_with("manifest.json")));
}

/// Bug: the lengths of HTTP shards were asked one after another, each
/// waiting the whole --remote-timeout for a server that does not answer:
/// 3 shards took 3 timeouts, 300 shards at the default 60 s five hours.
/// They are asked together now, as S3 shards are.
#[test]
fn http_shards_of_a_stalled_server_fail_in_one_timeout() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    let served = t.path().join("served");
    let m = super::shards::pack_shards(&src, &served, "sqfs", 3, &[]);
    let server = RangeServer::start(&served, &[]);
    let mut mj: serde_json::Value = serde_json::from_slice(&std::fs::read(&m).unwrap()).unwrap();
    for s in mj["shards"].as_array_mut().unwrap() {
        s["file"] = server.url(s["file"].as_str().unwrap()).into();
    }
    let manifest = t.path().join("http.manifest.json");
    std::fs::write(&manifest, serde_json::to_vec(&mj).unwrap()).unwrap();
    server.stall();
    let t0 = std::time::Instant::now();
    let out = std::process::Command::new(packfs_bin())
        .args([
            "ls",
            manifest.to_str().unwrap(),
            "/",
            "--remote-timeout",
            "3",
        ])
        .output()
        .unwrap();
    let took = t0.elapsed();
    server.resume();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{e}");
    assert!(took < std::time::Duration::from_secs(8), "{took:?}: {e}");
}
