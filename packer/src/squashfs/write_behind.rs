//! The data area written behind the fragment blocks still being compressed.
//!
//! Where a fragment block goes in the image is fixed when it is placed (at a
//! batch end, see `super::data`), but its bytes are known only when its
//! compression ends. Waiting for it there would compress fragment blocks one
//! batch at a time: with large blocks and small files (a source tree at
//! 1 MiB blocks, where nearly all data is tails) a batch seals about one
//! fragment block, so the pool would compress them one after the other.
//! [`WriteBehind`] instead keeps, in image order, the placed fragment blocks
//! still compressing and the data bytes that follow them, and writes each as
//! soon as everything before it is written. Positions handed out before that
//! are [`Mark`]s, resolved to image offsets by [`WriteBehind::resolve`] once
//! all is written. The bytes and their order are exactly those of writing
//! each block as it is placed; only when it happens differs.
//!
//! Memory: at most [`WriteBehind::max_fragments`] fragment blocks (each at
//! most one block size, raw while compressing, then compressed) and at most
//! the data bytes given to [`WriteBehind::new`] (plus one block) wait in the
//! queue; placing more first writes (waiting for) the oldest.

use super::writer::ImageWriter;
use crate::detach::{self, Outcome};
use crate::{PackError, PackOptions};
use packfs_format::codec::CodecError;
use packfs_format::squashfs::metadata::data_word;
use packfs_format::squashfs::tables::FragmentEntry;
use std::collections::VecDeque;
use std::sync::mpsc::{self, TryRecvError};

/// A fragment block being compressed on the pool: its stored bytes and
/// whether they are compressed.
pub(super) type SealedFragment = mpsc::Receiver<Outcome<Result<(Vec<u8>, bool), CodecError>>>;

/// A position in the data area that may lie behind fragment blocks whose
/// size is not known yet: `data` bytes of data blocks and the first `frags`
/// fragment blocks precede it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Mark {
    data: u64,
    frags: u32,
}

impl Mark {
    /// The mark as (data bytes, fragment blocks), for a caller that keeps
    /// many of them in a struct of its own instead of a `Mark` with padding.
    pub fn parts(self) -> (u64, u32) {
        (self.data, self.frags)
    }

    pub fn from_parts(data: u64, frags: u32) -> Mark {
        Mark { data, frags }
    }
}

enum Item {
    Fragment(SealedFragment),
    Data(Vec<u8>),
}

pub(super) struct WriteBehind {
    /// Image position where the data area starts.
    base: u64,
    /// Not yet written, in image order.
    queue: VecDeque<Item>,
    frags_queued: usize,
    bytes_queued: usize,
    /// Fragment blocks queued at most.
    max_frags: usize,
    /// Data bytes queued at most (plus one block).
    max_bytes: usize,
    /// Data bytes placed so far (written or queued).
    data: u64,
    /// Fragment blocks placed so far (written or queued).
    frags: u32,
    /// `frag_end[i]`: bytes of the first `i` fragment blocks written, for
    /// every `i` up to the number written.
    frag_end: Vec<u64>,
    /// The fragment table entries of the blocks written.
    pub entries: Vec<u8>,
}

impl WriteBehind {
    /// `threads`: the pool's size. Enough fragment blocks may wait to keep
    /// every thread compressing one while the writer reads ahead.
    /// `max_bytes`: data bytes that may wait behind them.
    pub fn new(base: u64, threads: usize, max_bytes: usize) -> Self {
        WriteBehind {
            base,
            queue: VecDeque::new(),
            frags_queued: 0,
            bytes_queued: 0,
            max_frags: Self::max_fragments(threads),
            max_bytes,
            data: 0,
            frags: 0,
            frag_end: vec![0],
            entries: Vec::new(),
        }
    }

    /// Fragment blocks that may wait at most with `threads` threads.
    pub fn max_fragments(threads: usize) -> usize {
        (2 * threads).max(4)
    }

    /// Where the next placed byte goes.
    pub fn mark(&self) -> Mark {
        Mark {
            data: self.data,
            frags: self.frags,
        }
    }

    /// Fragment blocks placed so far: the index the next one gets.
    pub fn fragments_placed(&self) -> u32 {
        self.frags
    }

    /// Places data bytes next.
    pub fn data(&mut self, img: &mut ImageWriter, bytes: Vec<u8>) -> Result<(), PackError> {
        self.data += bytes.len() as u64;
        if self.queue.is_empty() {
            img.write_piece(&bytes)
        } else {
            self.bytes_queued += bytes.len();
            self.queue.push_back(Item::Data(bytes));
            Ok(())
        }
    }

    /// Places a fragment block next.
    pub fn fragment(&mut self, rx: SealedFragment) {
        self.frags += 1;
        self.frags_queued += 1;
        self.queue.push_back(Item::Fragment(rx));
    }

    /// Drops the data placed since `mark`, which no fragment block follows
    /// (a file's blocks, the last thing placed, that turned out to be a
    /// duplicate).
    pub fn rewind(&mut self, img: &mut ImageWriter, mark: Mark) -> Result<(), PackError> {
        assert_eq!(mark.frags, self.frags, "no fragment follows a rewind mark");
        let mut drop = self.data - mark.data;
        self.data = mark.data;
        while drop > 0 {
            match self.queue.back_mut() {
                Some(Item::Data(b)) => {
                    let cut = (b.len() as u64).min(drop) as usize;
                    b.truncate(b.len() - cut);
                    self.bytes_queued -= cut;
                    drop -= cut as u64;
                    if b.is_empty() {
                        self.queue.pop_back();
                    }
                }
                Some(Item::Fragment(_)) => unreachable!("no fragment follows a rewind mark"),
                None => return img.rewind(img.pos() - drop),
            }
        }
        Ok(())
    }

    /// Writes what can be written: everything up to the first fragment block
    /// still compressing, or, with `wait`, everything.
    pub fn flush(
        &mut self,
        img: &mut ImageWriter,
        opts: &PackOptions,
        wait: bool,
    ) -> Result<(), PackError> {
        while !self.queue.is_empty() {
            if !self.write_front(img, opts, wait)? {
                break;
            }
        }
        Ok(())
    }

    /// Writes the oldest items until the queue is within its bounds.
    pub fn bound(&mut self, img: &mut ImageWriter, opts: &PackOptions) -> Result<(), PackError> {
        while self.frags_queued > self.max_frags || self.bytes_queued > self.max_bytes {
            self.write_front(img, opts, true)?;
        }
        Ok(())
    }

    /// Writes the front item; false when it is a fragment block still
    /// compressing and `wait` is false.
    fn write_front(
        &mut self,
        img: &mut ImageWriter,
        opts: &PackOptions,
        wait: bool,
    ) -> Result<bool, PackError> {
        let Some(front) = self.queue.front() else {
            return Ok(false);
        };
        let bytes = match front {
            Item::Data(b) => {
                img.write_piece(b)?;
                self.bytes_queued -= b.len();
                self.queue.pop_front();
                return Ok(true);
            }
            Item::Fragment(rx) if wait => detach::wait(rx, opts)?,
            Item::Fragment(rx) => match rx.try_recv() {
                Ok(Ok(v)) => v,
                Ok(Err(panic)) => std::panic::resume_unwind(panic),
                Err(TryRecvError::Empty) => return Ok(false),
                Err(TryRecvError::Disconnected) => {
                    unreachable!("a task sends its result or its panic before it ends")
                }
            },
        };
        self.queue.pop_front();
        self.frags_queued -= 1;
        let (bytes, compressed) = bytes.map_err(|source| PackError::Codec {
            path: img.path().to_path_buf(),
            source,
        })?;
        let start = img.pos();
        img.write_piece(&bytes)?;
        FragmentEntry {
            start,
            size: data_word(bytes.len(), compressed),
            unused: 0,
        }
        .encode(&mut self.entries);
        let end = self.frag_end.last().copied().unwrap_or(0);
        self.frag_end.push(end + bytes.len() as u64);
        Ok(true)
    }

    /// The image offset of `mark`, once every fragment block before it is
    /// written.
    pub fn resolve(&self, mark: Mark) -> u64 {
        self.base + mark.data + self.frag_end[mark.frags as usize]
    }

    /// [`WriteBehind::resolve`], if the fragment blocks before `mark` are
    /// written (their sizes known).
    pub fn try_resolve(&self, mark: Mark) -> Option<u64> {
        Some(self.base + mark.data + self.frag_end.get(mark.frags as usize)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    type Done = Outcome<Result<(Vec<u8>, bool), CodecError>>;

    fn fragment() -> (mpsc::SyncSender<Done>, SealedFragment) {
        mpsc::sync_channel(1)
    }

    #[test]
    fn later_data_waits_behind_a_fragment_and_marks_resolve_to_its_offsets() {
        let file = tempfile::tempfile().unwrap();
        let mut img = ImageWriter::new(&file, std::path::Path::new("t.img"));
        let opts = PackOptions::default();
        img.write(b"HEAD").unwrap();
        let mut wb = WriteBehind::new(img.pos(), 1, 1 << 20);
        let a = wb.mark();
        wb.data(&mut img, b"aaaa".to_vec()).unwrap();
        let (tx, rx) = fragment();
        wb.fragment(rx);
        let b = wb.mark();
        wb.data(&mut img, b"bb".to_vec()).unwrap();
        // A duplicate, undone: partly rewound out of the queue.
        let dup = wb.mark();
        wb.data(&mut img, b"dd".to_vec()).unwrap();
        wb.data(&mut img, b"ddd".to_vec()).unwrap();
        wb.rewind(&mut img, dup).unwrap();
        wb.flush(&mut img, &opts, false).unwrap();
        assert_eq!(img.pos(), 8, "nothing after a fragment still compressing");
        tx.send(Ok(Ok((b"FFF".to_vec(), true)))).unwrap();
        let c = wb.mark();
        wb.data(&mut img, b"c".to_vec()).unwrap();
        wb.flush(&mut img, &opts, true).unwrap();
        // A duplicate undone after it reached the file.
        let dup = wb.mark();
        wb.data(&mut img, b"zz".to_vec()).unwrap();
        wb.rewind(&mut img, dup).unwrap();
        wb.data(&mut img, b"e".to_vec()).unwrap();
        let end = img.pos();
        img.rewind(0).unwrap();
        drop(img);
        let mut all = Vec::new();
        (&file).read_to_end(&mut all).unwrap();
        assert_eq!(&all[..end as usize], b"HEADaaaaFFFbbce");
        assert_eq!(
            [a, b, c].map(|m| wb.resolve(m)),
            [4, 11, 13],
            "offsets of aaaa, bb, c"
        );
        assert_eq!(wb.fragments_placed(), 1);
        let mut entry = Vec::new();
        FragmentEntry {
            start: 8,
            size: data_word(3, true),
            unused: 0,
        }
        .encode(&mut entry);
        assert_eq!(wb.entries, entry);
    }

    #[test]
    fn placing_beyond_the_bound_waits_for_the_oldest_fragment() {
        let file = tempfile::tempfile().unwrap();
        let mut img = ImageWriter::new(&file, std::path::Path::new("t.img"));
        let opts = PackOptions::default();
        let mut wb = WriteBehind::new(0, 1, 1 << 20);
        let max = WriteBehind::max_fragments(1);
        for k in 0..=max {
            let (tx, rx) = fragment();
            tx.send(Ok(Ok((vec![k as u8; 2], true)))).unwrap();
            wb.fragment(rx);
        }
        wb.bound(&mut img, &opts).unwrap();
        assert_eq!(img.pos(), 2, "only the oldest was written");
        wb.flush(&mut img, &opts, true).unwrap();
        assert_eq!(img.pos(), 2 * (max as u64 + 1));
    }
}
