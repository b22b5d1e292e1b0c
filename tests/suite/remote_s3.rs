//! Images on S3, against moto's S3 server from PyPI started
//! here on 127.0.0.1 (requests signed with SigV4 by object_store; moto
//! accepts any key, so which keys are chosen is tested in
//! `packfs_objstore::config`'s unit tests and here only through a profile
//! file that must be read for the endpoint to be found at all).

use crate::common::servers::Moto;
use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// `packfs mount URL` (daemonised, moto's environment), unmounted on drop.
fn mount(moto: &Moto, url: &str, extra: &[&str]) -> PackfsMount {
    let dir = scratch();
    let mp = dir.path().to_str().unwrap().to_string();
    let mut args = vec!["mount", url, &mp];
    args.extend(extra);
    assert_ok(moto.packfs(&args));
    PackfsMount { dir }
}

#[test]
fn s3_mounts_equal_the_kernel_and_the_source_both_formats() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    let (sqfs, zip) = (t.path().join("img.sqfs"), t.path().join("img.zip"));
    pack(&src, &sqfs, &[]);
    pack(&src, &zip, &[]);
    let moto = Moto::start();
    moto.create_bucket("images");
    moto.upload(&sqfs, "images", "sets/img.sqfs");
    moto.upload(&zip, "images", "sets/img.zip");

    let m = mount(&moto, "s3://images/sets/img.sqfs", &["--range-size", "64K"]);
    let opts = ManifestOptions {
        dir_size: true,
        ..Default::default()
    };
    let got = manifest(m.path(), &opts);
    match KernelMount::new(&sqfs) {
        Some(k) => assert_same("s3 mount vs kernel", &got, &manifest(k.path(), &opts)),
        None => eprintln!("no kernel mount: compared with the source only"),
    }
    let o = ManifestOptions::default();
    assert_same(
        "s3 mount vs source",
        &manifest(m.path(), &o),
        &manifest(&src, &o),
    );

    let z = mount(&moto, "s3://images/sets/img.zip", &[]);
    let local = PackfsMount::new(&zip, &[]);
    let o = ManifestOptions {
        xattrs: false,
        ..Default::default()
    };
    assert_same(
        "s3 zip vs local zip",
        &manifest(z.path(), &o),
        &manifest(local.path(), &o),
    );
    let cat = moto.packfs(&["cat", "s3://images/sets/img.zip", "d/text1048577"]);
    assert_eq!(
        assert_ok(cat).into_bytes(),
        std::fs::read(src.join("d/text1048577")).unwrap()
    );
    // Missing key and missing bucket: 404 naming the URL, before mounting.
    for url in ["s3://images/sets/none.sqfs", "s3://nobucket/img.sqfs"] {
        let mp = scratch();
        let out = moto.packfs(&["mount", url, mp.path().to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(url) && err.contains("404"), "{err}");
    }
}

#[test]
fn a_profile_file_names_the_endpoint_and_keys_and_a_missing_one_is_an_error() {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("a"), b"from a profile").unwrap();
    let img = t.path().join("p.sqfs");
    pack(&src, &img, &[]);
    let moto = Moto::start();
    moto.create_bucket("prof");
    moto.upload(&img, "prof", "p.sqfs");
    // As lumio-conf writes them: keys in credentials, endpoint in config.
    let home = t.path().join("home");
    std::fs::create_dir_all(home.join(".aws")).unwrap();
    std::fs::write(
        home.join(".aws/credentials"),
        "[lumi-test]\naws_access_key_id = AK\naws_secret_access_key = SK\n",
    )
    .unwrap();
    std::fs::write(
        home.join(".aws/config"),
        format!(
            "[profile lumi-test]\nendpoint_url = {}\nregion = lumi\n",
            moto.endpoint()
        ),
    )
    .unwrap();
    let bare = |args: &[&str]| {
        Command::new(packfs_bin())
            .args(args)
            .env_clear()
            .env("HOME", &home)
            .env("PATH", std::env::var_os("PATH").unwrap())
            .output()
            .unwrap()
    };
    let out = bare(&["cat", "s3://prof/p.sqfs", "a", "--profile", "lumi-test"]);
    assert_eq!(assert_ok(out), "from a profile");
    let out = bare(&["cat", "s3://prof/p.sqfs", "a", "--profile", "lumi-nope"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("\"lumi-nope\"") && err.contains(".aws/credentials"),
        "{err}"
    );
}

#[test]
fn a_replaced_s3_object_gives_eio_never_mixed_bytes() {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let files: Vec<(PathBuf, Vec<u8>)> = (0..30)
        .map(|i| {
            let rel = PathBuf::from(format!("f{i:02}"));
            let data = bytes(500 + i, 100_000, false);
            std::fs::write(src.join(&rel), &data).unwrap();
            (rel, data)
        })
        .collect();
    let img = t.path().join("img.sqfs");
    pack(&src, &img, &["--no-fragments"]);
    let moto = Moto::start();
    moto.create_bucket("swap");
    moto.upload(&img, "swap", "img.sqfs");
    let m = mount(
        &moto,
        "s3://swap/img.sqfs",
        &["--range-size", "64K", "--range-cache", "128K"],
    );
    for (rel, data) in &files[..5] {
        assert_eq!(&std::fs::read(m.path().join(rel)).unwrap(), data);
    }
    for (i, (rel, _)) in files.iter().enumerate() {
        std::fs::write(src.join(rel), bytes(7000 + i as u64, 100_000, false)).unwrap();
    }
    let img2 = t.path().join("img2.sqfs");
    pack(&src, &img2, &["--no-fragments"]);
    moto.upload(&img2, "swap", "img.sqfs");
    let mut eio = 0;
    for (rel, data) in &files[5..] {
        match std::fs::read(m.path().join(rel)) {
            Ok(got) => assert_eq!(&got, data, "{rel:?}: bytes of another version"),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EIO), "{rel:?}");
                eio += 1;
            }
        }
    }
    assert!(eio > 0, "no read noticed the replaced object");
}

/// A tree of incompressible files totalling about `mb` MB.
fn big_tree(root: &Path, mb: usize) {
    std::fs::create_dir_all(root).unwrap();
    for i in 0..mb / 4 {
        std::fs::write(
            root.join(format!("b{i:03}")),
            bytes(40 + i as u64, 4 << 20, false),
        )
        .unwrap();
    }
}

#[test]
fn pack_to_s3_uploads_in_parts_the_same_bytes_as_a_local_pack() {
    let t = scratch();
    let src = t.path().join("src");
    big_tree(&src, 40);
    fixture_tree(&src.join("fx"), false);
    let local = t.path().join("local.sqfs");
    pack(&src, &local, &["--mtime", "1000"]);
    let moto = Moto::start();
    moto.create_bucket("out");
    let out = moto.packfs(&[
        "pack",
        src.to_str().unwrap(),
        "-o",
        "s3://out/dir/up.sqfs",
        "--mtime",
        "1000",
    ]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_ok(out);
    // 40 MB in 16 MiB parts.
    assert!(err.contains("uploaded in 3 parts"), "{err}");
    let got = t.path().join("got.sqfs");
    moto.py(&format!(
        "s3.download_file('out', 'dir/up.sqfs', '{}')",
        got.display()
    ));
    assert!(
        std::fs::read(&got).unwrap() == std::fs::read(&local).unwrap(),
        "the uploaded object differs from the local pack"
    );
    assert_eq!(moto.open_uploads("out"), 0);
    // An existing object is kept unless --force.
    let again = moto.packfs(&[
        "pack",
        src.to_str().unwrap(),
        "-o",
        "s3://out/dir/up.sqfs",
        "-q",
    ]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    assert_eq!(moto.open_uploads("out"), 0);
    // A missing bucket fails before the pack.
    let t0 = Instant::now();
    let nob = moto.packfs(&[
        "pack",
        src.to_str().unwrap(),
        "-o",
        "s3://nobucket/x.sqfs",
        "-q",
    ]);
    let e = String::from_utf8_lossy(&nob.stderr);
    assert_eq!(nob.status.code(), Some(1), "{e}");
    assert!(
        e.contains("s3://nobucket/x.sqfs") && e.contains("404"),
        "{e}"
    );
    assert!(t0.elapsed() < Duration::from_secs(20));
}

/// `pack -o s3://` of a SquashFS image sends its parts while it is
/// written and frees them from the temporary file: during the pack, the
/// file in $TMPDIR holds far fewer bytes than its size. The object is the
/// bytes of a local pack, also where duplicate files made the writer undo
/// blocks it had written (the parts sent are never among them).
#[test]
fn pack_to_s3_sends_parts_while_packing_and_frees_them() {
    let t = scratch();
    let src = t.path().join("src");
    big_tree(&src, 120);
    let dup = bytes(99, 24 << 20, false);
    for name in ["dup-a", "dup-b", "zz-dup-c"] {
        std::fs::write(src.join(name), &dup).unwrap();
    }
    let local = t.path().join("local.sqfs");
    pack(&src, &local, &["--mtime", "1000", "-c", "xz", "-j", "2"]);
    let tmp = t.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let moto = Moto::start();
    moto.create_bucket("stream");
    let mut child = Command::new(packfs_bin())
        .args(["pack", src.to_str().unwrap(), "-o", "s3://stream/x.sqfs"])
        .args(["--mtime", "1000", "-c", "xz", "-j", "2"])
        .envs(moto.env())
        .env("TMPDIR", &tmp)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The most bytes the temporary image file was short of its size.
    let mut freed = 0u64;
    while child.try_wait().unwrap().is_none() {
        let mut stack = vec![tmp.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let Ok(m) = e.metadata() else { continue };
                if m.is_dir() {
                    stack.push(e.path());
                } else {
                    use std::os::unix::fs::MetadataExt;
                    freed = freed.max(m.len().saturating_sub(m.blocks() * 512));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    assert!(err.contains("sent while packing"), "{err}");
    assert!(
        freed >= 32 << 20,
        "the temporary image never had two sent parts freed ({freed} bytes)"
    );
    let got = t.path().join("got.sqfs");
    moto.py(&format!(
        "s3.download_file('stream', 'x.sqfs', '{}')",
        got.display()
    ));
    assert!(
        std::fs::read(&got).unwrap() == std::fs::read(&local).unwrap(),
        "the object sent while packing differs from the local pack"
    );
    assert_eq!(moto.open_uploads("stream"), 0);
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().collect();
    assert!(left.is_empty(), "left in $TMPDIR: {left:?}");
}

/// Bug: SIGINT during `pack --shards -o s3://...` died of the signal
/// without aborting the shards' multipart uploads or removing the shards
/// packed into $TMPDIR (a single image did both).
#[test]
fn pack_shards_to_s3_interrupted_leaves_no_upload_and_no_temporary_files() {
    let t = scratch();
    let src = t.path().join("src");
    big_tree(&src, 200);
    let tmp = t.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let moto = Moto::start();
    moto.create_bucket("cut");
    let mut child = Command::new(packfs_bin())
        .args([
            "pack",
            src.to_str().unwrap(),
            "-o",
            "s3://cut/s-{shard}.sqfs",
        ])
        .args(["--shards", "2", "-q", "-j", "1", "-c", "xz"])
        .envs(moto.env())
        .env("TMPDIR", &tmp)
        .spawn()
        .unwrap();
    moto.py(
        "import time\nt = time.time()\n\
         while len(s3.list_multipart_uploads(Bucket='cut').get('Uploads', [])) < 2 and time.time() - t < 60:\n    time.sleep(0.01)",
    );
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let st = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(st.signal(), Some(libc::SIGINT), "{st:?}");
    assert_eq!(moto.keys("cut"), Vec::<String>::new());
    assert_eq!(moto.open_uploads("cut"), 0);
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "left in $TMPDIR: {left:?}");
}

#[test]
fn pack_to_s3_interrupted_leaves_no_object_and_no_upload() {
    let t = scratch();
    let src = t.path().join("src");
    big_tree(&src, 200);
    let moto = Moto::start();
    moto.create_bucket("cut");

    // SIGINT once the multipart upload exists (while packing or sending).
    let mut child = Command::new(packfs_bin())
        .args(["pack", src.to_str().unwrap(), "-o", "s3://cut/x.sqfs", "-q"])
        .envs(moto.env())
        .spawn()
        .unwrap();
    moto.py(
        "import time\nt = time.time()\n\
         while not s3.list_multipart_uploads(Bucket='cut').get('Uploads') and time.time() - t < 60:\n    time.sleep(0.01)",
    );
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let st = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(st.signal(), Some(libc::SIGINT), "{st:?}");
    assert_eq!(moto.keys("cut"), Vec::<String>::new());
    assert_eq!(moto.open_uploads("cut"), 0);

    // Cancelled while parts are being sent (the library, so the moment is
    // known): aborted, no object, no upload left.
    let img = t.path().join("big.sqfs");
    pack(&src, &img, &[]);
    let opts = packfs_objstore::ClientOptions {
        endpoint: Some(moto.endpoint()),
        ..Default::default()
    };
    let target = packfs_objstore::Target::S3 {
        bucket: "cut".into(),
        key: "y.sqfs".into(),
    };
    let settings = packfs_objstore::config::S3Settings {
        keys: Some(("k".into(), "s".into(), None)),
        endpoint: Some(moto.endpoint()),
        region: "us-east-1".into(),
        keys_from: "test".into(),
    };
    let remote = packfs_objstore::Remote::connect_with(&target, &opts, Some(&settings)).unwrap();
    let up = packfs_objstore::upload::Upload::begin(remote).unwrap();
    let cancel = AtomicBool::new(false);
    let r = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(150));
            cancel.store(true, Ordering::SeqCst);
        });
        up.send_file(&img, Some(&cancel))
    });
    assert!(
        matches!(r, Err(packfs_objstore::RemoteError::Interrupted)),
        "{r:?}"
    );
    assert_eq!(moto.keys("cut"), Vec::<String>::new());
    assert_eq!(moto.open_uploads("cut"), 0);
}

/// Bug: S3 keys went through object_store's `Path::from`, which
/// percent-encodes `~`, non-ASCII letters, `[`..., and the request encoded
/// them again: an existing object `til~de.sqfs` was NoSuchKey, and
/// `pack -o s3://b/v~1.sqfs` wrote `v%7E1.sqfs`. Keys are used as given
/// now; one with an empty segment is an error naming it.
#[test]
fn s3_keys_are_used_as_given() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    let img = t.path().join("i.sqfs");
    pack(&src, &img, &[]);
    let moto = Moto::start();
    moto.create_bucket("keys");
    let odd = "odd/til~de ü[1].sqfs";
    moto.upload(&img, "keys", odd);
    let listed = assert_ok(moto.packfs(&["ls", &format!("s3://keys/{odd}"), "/"]));
    assert!(!listed.is_empty());
    let up = "up/v~1 dätä.sqfs";
    assert_ok(moto.packfs(&[
        "pack",
        src.to_str().unwrap(),
        "-o",
        &format!("s3://keys/{up}"),
        "-q",
    ]));
    let keys = moto.keys("keys");
    assert!(keys.contains(&up.to_string()), "{keys:?}");
    let bad = moto.packfs(&["ls", "s3://keys/a//b.sqfs", "/"]);
    let e = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success() && e.contains("s3://keys/a//b.sqfs"),
        "{e}"
    );
}
