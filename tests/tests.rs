//! The integration suite: one test binary, one module per topic, the
//! helpers they share in `common` (fixture trees, manifests, mounts, tools,
//! servers). One binary links once, and `cargo test --test tests MODULE::`
//! runs one topic.
//!
//! Tests run on parallel threads of this one process: anything a test
//! starts (mounts, servers, scratch directories) gets a place of its own
//! (a fresh scratch directory, a port the kernel picked), never a fixed one.

mod common;

mod suite {
    mod bench_cli;
    mod cli_messages;
    mod corrupt_images;
    mod disk_cache;
    mod empty_root;
    mod exit_codes;
    mod format_records;
    mod fuzz_regressions;
    mod history_words;
    mod install_cli;
    mod integrity;
    mod jobs_cli;
    mod load;
    mod lustre_stripe;
    mod module_graph;
    mod mount_errors;
    mod mount_squashfs;
    mod mount_zip;
    mod open_errors;
    mod order;
    mod pack_archive;
    mod pack_archive_remote;
    mod pack_archive_zip;
    mod pack_cancel;
    mod pack_squashfs;
    mod pack_zip;
    mod packer_faults;
    mod read_faults;
    mod reader_core;
    mod reftest;
    mod regression;
    mod remote_http;
    mod remote_s3;
    mod remote_shards;
    mod remote_stream;
    mod scale;
    mod shards;
    mod slurm_jobs;
    mod transport;
    mod venv;
}
