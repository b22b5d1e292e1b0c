//! Bytes packed as an archive source (tar, plain or compressed), then the
//! image made of them, if any, walked. The work is `packfs_testkit`'s,
//! shared with tests/suite/fuzz_regressions.rs.
#![no_main]
mod common;
use libfuzzer_sys::fuzz_target;
use packfs_testkit::{open_and_walk, Limits, Target};

fuzz_target!(
    init: common::tolerate_caught_codec_panics(),
    |data: &[u8]| {
        let _ = open_and_walk(Target::Tar, data, Limits::default());
    }
);
