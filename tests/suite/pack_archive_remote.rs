//! Archives packed where they are, from object storage and web servers
//! (real ones started here: moto's S3, `scripts/range_server.py`): tar
//! shards named by a brace range, one compressed with zstd, and a ZIP, read
//! by URL, give the image their local copies give, byte for byte, written
//! locally or to S3; a missing object fails naming its URL and leaves no
//! image.

use crate::common::servers::{Moto, RangeServer};
use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Three tar shards (the last compressed with zstd) and a ZIP, of files of
/// a few sizes, in `dir`; their names.
fn archives(dir: &Path) -> Vec<&'static str> {
    let src = dir.join("src");
    for i in 0..3 {
        for j in 0..20u64 {
            let p = src.join(format!("train/{:06}.bin", i * 20 + j));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(
                &p,
                bytes(i * 100 + j, (j * 9_001 % 300_000) as usize, j % 2 == 0),
            )
            .unwrap();
        }
    }
    let names: Vec<String> = (0..60).map(|n| format!("train/{n:06}.bin")).collect();
    for i in 0..3 {
        let tar = dir.join(format!("train-{i:06}.tar"));
        run(Command::new("tar")
            .args([
                "--sort=name",
                "--mtime=@1600000000",
                "--owner=0",
                "--group=0",
                "-cf",
            ])
            .arg(&tar)
            .arg("-C")
            .arg(&src)
            .args(&names[i * 20..i * 20 + 20]));
    }
    run(Command::new("zstd")
        .args(["-q", "--rm", "-3"])
        .arg(dir.join("train-000002.tar"))
        .arg("-o")
        .arg(dir.join("train-000002.tar.zst")));
    std::fs::create_dir_all(src.join("extra")).unwrap();
    std::fs::write(src.join("extra/labels.csv"), "a,b\n1,2\n").unwrap();
    run(Command::new("zip")
        .args(["-q", "-r", "-X"])
        .arg(dir.join("extra.zip"))
        .arg("extra")
        .current_dir(&src));
    vec![
        "train-000000.tar",
        "train-000001.tar",
        "train-000002.tar.zst",
        "extra.zip",
    ]
}

/// `packfs pack` of `sources` to `out`, through `moto` when given.
fn pack(sources: &[String], out: &str, moto: Option<&Moto>) -> std::process::Output {
    let mut args = vec!["pack".to_string()];
    args.extend(sources.iter().cloned());
    args.extend(["-o".into(), out.into(), "-q".into()]);
    let mut c = Command::new(packfs_bin());
    c.args(&args).env("SOURCE_DATE_EPOCH", "0");
    if let Some(m) = moto {
        c.envs(m.env());
    }
    c.output().unwrap()
}

fn ok(o: std::process::Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn local_image(dir: &Path, names: &[&str]) -> Vec<u8> {
    let img = dir.join("local.sqfs");
    if !img.exists() {
        let sources: Vec<String> = names
            .iter()
            .map(|n| dir.join(n).to_string_lossy().into_owned())
            .collect();
        ok(pack(&sources, img.to_str().unwrap(), None));
    }
    std::fs::read(img).unwrap()
}

/// The archives in a scratch directory and the image their local copies
/// give; None without the tools that make them.
fn setup() -> Option<(tempfile::TempDir, Vec<&'static str>, Vec<u8>)> {
    if !require_tool("zip") || !require_tool("zstd") {
        return None;
    }
    let t = scratch();
    let names = archives(t.path());
    let want = local_image(t.path(), &names);
    Some((t, names, want))
}

#[test]
fn archives_in_s3_pack_as_their_local_copies_do() {
    let Some((t, names, want)) = setup() else {
        return;
    };
    let dir = t.path();
    let moto = Moto::start();
    moto.create_bucket("data");
    for n in &names {
        moto.upload(&dir.join(n), "data", &format!("shards/{n}"));
    }
    let sources = vec![
        "s3://data/shards/train-{000000..000001}.tar".to_string(),
        "s3://data/shards/train-000002.tar.zst".to_string(),
        "s3://data/shards/extra.zip".to_string(),
    ];
    let img = dir.join("from-s3.sqfs");
    ok(pack(&sources, img.to_str().unwrap(), Some(&moto)));
    assert!(
        std::fs::read(&img).unwrap() == want,
        "the image packed from s3:// differs from the local archives'"
    );
    // Both sides in object storage.
    ok(pack(&sources, "s3://data/train.sqfs", Some(&moto)));
    let back = dir.join("back.sqfs");
    moto.py(&format!(
        "s3.download_file('data', 'train.sqfs', '{}')",
        back.display()
    ));
    assert!(std::fs::read(&back).unwrap() == want);
    // A missing object: its URL named, status 1, nothing written.
    let out = dir.join("missing.sqfs");
    let o = pack(
        &["s3://data/shards/nothere.tar".to_string()],
        out.to_str().unwrap(),
        Some(&moto),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("s3://data/shards/nothere.tar") && err.contains("404"),
        "{err}"
    );
    assert!(!out.exists());
}

#[test]
fn archives_on_a_web_server_pack_as_their_local_copies_do() {
    let Some((t, names, want)) = setup() else {
        return;
    };
    let dir = t.path();
    let server = RangeServer::start(dir, &[]);
    let sources: Vec<String> = names.iter().map(|n| server.url(n)).collect();
    let img: PathBuf = dir.join("from-http.sqfs");
    ok(pack(&sources, img.to_str().unwrap(), None));
    assert!(
        std::fs::read(&img).unwrap() == want,
        "the image packed from http:// differs from the local archives'"
    );
}
