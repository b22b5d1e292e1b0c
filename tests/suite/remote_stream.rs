//! Objects read front to back through `packfs_objstore::ObjectReader`, as
//! the packer reads an archive from a URL, against real servers started
//! here: `scripts/range_server.py` (what nginx or a public bucket serves)
//! and moto's S3. Every byte must arrive in order, for an object of several
//! chunks, one shorter than a chunk and one of 0 bytes; a missing object is
//! an error naming its URL.

use crate::common::servers::{Moto, RangeServer};
use crate::common::*;
use packfs_objstore::config::S3Settings;
use packfs_objstore::{ClientOptions, ObjectReader, ReaderOptions, Remote, RemoteError, Target};
use std::io::Read;
use std::time::Duration;

/// Objects by name: several default chunks and a bit, a short one, none.
fn objects() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("big.bin", bytes(7, (17 << 20) + 12_345, false)),
        ("small.bin", bytes(8, 70_000, false)),
        ("empty.bin", Vec::new()),
    ]
}

fn client() -> ClientOptions {
    ClientOptions {
        timeout: Duration::from_secs(30),
        ..Default::default()
    }
}

/// Everything `r` yields, read in pieces of `step` bytes, as a consumer
/// that parses as it goes would.
fn read_all(mut r: ObjectReader, step: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; step];
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) => panic!("{}: {e}", r.url()),
        }
    }
    assert_eq!(r.bytes_read(), r.len());
    out
}

/// A 404 at open: an error naming the URL and the status, which an
/// `io::Error` made of it still holds.
fn assert_missing(e: RemoteError, url: &str) {
    let msg = e.to_string();
    assert!(msg.starts_with(url) && msg.contains("404"), "{msg}");
    let io = std::io::Error::from(e);
    assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
    assert!(io.get_ref().is_some_and(|x| x.is::<RemoteError>()));
}

#[test]
fn http_objects_read_whole_and_in_order() {
    let dir = scratch();
    let objs = objects();
    for (name, data) in &objs {
        std::fs::write(dir.path().join(name), data).unwrap();
    }
    let server = RangeServer::start(dir.path(), &[]);
    for (name, data) in &objs {
        let t = Target::parse(&server.url(name)).unwrap();
        let r = ObjectReader::open(&t, &client()).unwrap();
        assert_eq!(r.len(), data.len() as u64, "{name}");
        let got = read_all(r, 100_003);
        assert!(got == *data, "{name}: the bytes read differ");
    }
    // Small chunks and no readahead: many GETs, the same bytes.
    let (name, data) = &objs[1];
    let remote = Remote::connect(&Target::parse(&server.url(name)).unwrap(), &client()).unwrap();
    let o = ReaderOptions {
        chunk_size: 4096,
        ahead: 0,
    };
    let r = ObjectReader::new(remote, o).unwrap();
    let counters = r.counters().clone();
    assert!(read_all(r, 1000) == *data);
    assert_eq!(counters.snapshot().ranges_fetched, 70_000u64.div_ceil(4096));

    let url = server.url("missing.bin");
    let e = ObjectReader::open(&Target::parse(&url).unwrap(), &client()).unwrap_err();
    assert_missing(e, &url);
}

#[test]
fn s3_objects_read_whole_and_in_order() {
    let moto = Moto::start();
    moto.create_bucket("stream");
    let dir = scratch();
    let objs = objects();
    for (name, data) in &objs {
        let p = dir.path().join(name);
        std::fs::write(&p, data).unwrap();
        moto.upload(&p, "stream", &format!("in/{name}"));
    }
    // The client's settings given, not read from this process's
    // environment, which the suite's other threads share.
    let settings = S3Settings {
        keys: Some(("testing".into(), "testing".into(), None)),
        endpoint: Some(moto.endpoint()),
        region: "us-east-1".into(),
        keys_from: "test".into(),
    };
    let open = |url: &str| {
        let t = Target::parse(url).unwrap();
        Remote::connect_with(&t, &client(), Some(&settings))
            .and_then(|r| ObjectReader::new(r, ReaderOptions::default()))
    };
    for (name, data) in &objs {
        let r = open(&format!("s3://stream/in/{name}")).unwrap();
        assert_eq!(r.len(), data.len() as u64, "{name}");
        assert!(
            read_all(r, 65_536) == *data,
            "{name}: the bytes read differ"
        );
    }
    let url = "s3://stream/in/missing.bin";
    assert_missing(open(url).unwrap_err(), url);
}
