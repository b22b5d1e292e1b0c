//! Bytes given to the ZIP reader, then the whole tree walked and read.
//! The walk is `packfs_testkit`, shared with tests/suite/fuzz_regressions.rs.
#![no_main]
mod common;
use libfuzzer_sys::fuzz_target;
use packfs_testkit::{open_and_walk, Limits, Target};

fuzz_target!(
    init: common::tolerate_caught_codec_panics(),
    |data: &[u8]| {
        let _ = open_and_walk(Target::Zip, data, Limits::default());
    }
);
