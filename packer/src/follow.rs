//! An image followed while it is written: how a consumer (the CLI's upload
//! to object storage) learns which bytes of the image file are final, so it
//! can send them and free their disk space before the pack ends.
//!
//! The SquashFS writer writes forward, with two exceptions: it undoes the
//! blocks of a file that turn out to duplicate an earlier file's (a rewind
//! to that file's start), and it writes the superblock over the image's
//! first bytes at the very end. So at each batch end it publishes the
//! image position below which nothing will be rewritten again (the start of
//! the file in progress, or everything written), after flushing its buffer
//! to the file; the superblock's bytes are below the first part a follower
//! keeps back (see [`Follow::KEEP`]).

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Shared between the writer and its follower.
#[derive(Debug, Default)]
pub struct Follow {
    /// The image file being written (a handle of its own).
    file: OnceLock<File>,
    /// Bytes of the file, from its start, that will not change again,
    /// except the first [`Follow::KEEP`], which change at the end.
    final_len: AtomicU64,
}

impl Follow {
    /// Bytes at the image's start that change when it is finished (the
    /// superblock, padded to one device block).
    pub const KEEP: u64 = 4096;

    /// The image file, once the writer has started it.
    pub fn file(&self) -> Option<&File> {
        self.file.get()
    }

    pub fn final_len(&self) -> u64 {
        self.final_len.load(Ordering::Acquire)
    }

    pub(crate) fn start(&self, file: &File) {
        if let Ok(f) = file.try_clone() {
            let _ = self.file.set(f);
        }
    }

    /// `len` bytes are final and on the file: never moves back.
    pub(crate) fn publish(&self, len: u64) {
        self.final_len.fetch_max(len, Ordering::AcqRel);
    }
}
