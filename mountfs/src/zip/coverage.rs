//! The CRC-32 of a large stored member, checked over reads in any order.
//!
//! A stored member of [`super::SMALL`] or more is too large to read twice,
//! so it is checked over the bytes readers are served. Through a mount the
//! kernel's readahead and several serving threads deliver those reads out of
//! order, overlapping, and split between file handles; a check that needed
//! them in order from offset 0 gave up and served damaged bytes.
//!
//! CRC-32 composes: the CRC of `A ‖ B` follows from `crc(A)`, `crc(B)` and
//! `len(B)` ([`crc32fast::Hasher::combine`]). So each member keeps the
//! disjoint runs of its bytes served so far, each with its CRC; a read adds
//! the parts of its range no run holds yet and merges touching runs. When
//! one run spans the whole member, its CRC is the member's: the read that
//! completed it fails if it does not match, and every later read of the
//! member fails too (the caller remembers the verdict).
//!
//! Memory is bounded: a member holds at most [`MAX_RUNS`] runs (a reader
//! scattering more disjoint reads starts its check over), and at most
//! [`MAX_MEMBERS`] members are tracked (the one touched longest ago is
//! dropped). A member read only in part is never checked; that is the one
//! case a stored member is served unchecked (docs/SECURITY.md).

use std::collections::{BTreeMap, HashMap};

/// Disjoint runs a member may hold before its check starts over.
pub const MAX_RUNS: usize = 512;
/// Members whose runs are kept at once.
pub const MAX_MEMBERS: usize = 256;

/// One run of served bytes: `start..end` with their CRC-32.
#[derive(Clone)]
struct Run {
    end: u64,
    crc: crc32fast::Hasher,
}

/// The served runs of one member, keyed by start offset.
///
/// Invariant: runs are disjoint and never touch (touching runs are merged),
/// and every run's hasher has seen exactly `end - start` bytes.
#[derive(Default)]
struct Runs {
    runs: BTreeMap<u64, Run>,
    /// [`Coverage::tick`] when the member was last read.
    touched: u64,
}

/// What adding a read to a member's runs concluded.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Some of the member has not been served yet.
    Partial,
    /// Every byte has been served and the CRC-32 is the expected one.
    Good,
    /// Every byte has been served and the CRC-32 is `got`.
    Bad { got: u32 },
}

/// Served runs of the large stored members being read (see the module doc).
#[derive(Default)]
pub struct Coverage {
    members: HashMap<u32, Runs>,
    tick: u64,
}

impl Runs {
    /// Adds `data`, served at `offset`, to the runs.
    fn add(&mut self, offset: u64, data: &[u8]) {
        let end = offset + data.len() as u64;
        let mut at = offset;
        // The runs that overlap or touch `offset..end`, in order: the one
        // starting at or before `offset`, then those starting inside.
        let first = self
            .runs
            .range(..=offset)
            .next_back()
            .filter(|(_, r)| r.end >= offset)
            .map(|(&s, _)| s);
        let mut touching: Vec<u64> = first.into_iter().collect();
        touching.extend(
            self.runs
                .range(offset.saturating_add(1)..=end)
                .map(|(&s, _)| s)
                .filter(|s| Some(*s) != first),
        );
        // Build the merged run from left to right: an existing run's CRC
        // where it holds the bytes already, `data`'s where it does not.
        let mut merged: Option<(u64, crc32fast::Hasher)> = None;
        for s in touching {
            let r = self.runs.remove(&s).expect("listed above");
            if s > at {
                let gap = &data[(at - offset) as usize..(s - offset) as usize];
                let mut h = crc32fast::Hasher::new();
                h.update(gap);
                push(&mut merged, at, h);
            }
            push(&mut merged, s, r.crc);
            at = at.max(r.end);
        }
        if at < end {
            let mut h = crc32fast::Hasher::new();
            h.update(&data[(at - offset) as usize..]);
            push(&mut merged, at, h);
            at = end;
        }
        if let Some((s, crc)) = merged {
            self.runs.insert(s, Run { end: at, crc });
        }
    }
}

/// Appends the run `start..` hashed by `h` to `merged`, which ends where
/// it starts.
fn push(merged: &mut Option<(u64, crc32fast::Hasher)>, start: u64, h: crc32fast::Hasher) {
    match merged {
        None => *merged = Some((start, h)),
        Some((_, m)) => m.combine(&h),
    }
}

impl Coverage {
    /// Adds `data`, served at `offset` of member `node` of `size` bytes
    /// whose CRC-32 should be `expected`. On a verdict other than
    /// [`Verdict::Partial`] the member's runs are dropped: the caller keeps
    /// the verdict.
    pub fn add(
        &mut self,
        node: u32,
        size: u64,
        expected: u32,
        offset: u64,
        data: &[u8],
    ) -> Verdict {
        if data.is_empty() || offset >= size {
            return Verdict::Partial;
        }
        let data = &data[..data.len().min((size - offset) as usize)];
        self.tick += 1;
        if !self.members.contains_key(&node) && self.members.len() >= MAX_MEMBERS {
            if let Some(old) = self
                .members
                .iter()
                .min_by_key(|(_, r)| r.touched)
                .map(|(&n, _)| n)
            {
                self.members.remove(&old);
            }
        }
        let runs = self.members.entry(node).or_default();
        runs.touched = self.tick;
        runs.add(offset, data);
        if runs.runs.len() > MAX_RUNS {
            // A scattered reader: start over rather than grow.
            runs.runs.clear();
            return Verdict::Partial;
        }
        let whole = match runs.runs.first_key_value() {
            Some((&0, r)) if r.end >= size => Some(r.crc.clone().finalize()),
            _ => None,
        };
        let Some(got) = whole else {
            return Verdict::Partial;
        };
        self.members.remove(&node);
        if got == expected {
            Verdict::Good
        } else {
            Verdict::Bad { got }
        }
    }

    /// Members with runs kept (tests).
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.members.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic bytes without a generator crate.
    fn bytes(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// Serves `pieces` (start, len) of `data` in the given order and
    /// returns the verdict of each read.
    fn serve(
        c: &mut Coverage,
        data: &[u8],
        expected: u32,
        pieces: &[(usize, usize)],
    ) -> Vec<Verdict> {
        pieces
            .iter()
            .map(|&(s, n)| {
                let e = (s + n).min(data.len());
                c.add(7, data.len() as u64, expected, s as u64, &data[s..e])
            })
            .collect()
    }

    #[test]
    fn reads_in_any_order_verify_the_whole_member() {
        let data = bytes(10_000, 1);
        let crc = crc32fast::hash(&data);
        // Out of order, overlapping, one read repeated, one past the end.
        let pieces = [
            (4000, 3000),
            (0, 1000),
            (6500, 2000),
            (0, 1000),
            (9000, 5000),
            (500, 3600),
            (8400, 700),
        ];
        let mut c = Coverage::default();
        let v = serve(&mut c, &data, crc, &pieces);
        assert_eq!(v.last(), Some(&Verdict::Good));
        assert!(v[..v.len() - 1].iter().all(|v| *v == Verdict::Partial));
        assert_eq!(c.tracked(), 0);
    }

    #[test]
    fn a_flipped_bit_anywhere_fails_whatever_the_order() {
        let good = bytes(50_000, 2);
        let crc = crc32fast::hash(&good);
        for at in [0, 1, 4095, 4096, 25_000, 49_999] {
            let mut bad = good.clone();
            bad[at] ^= 0x10;
            for order in 0..6u64 {
                // Pieces of 4 KiB and 16 KiB, shuffled by `order`.
                let mut pieces: Vec<(usize, usize)> = (0..50_000)
                    .step_by(4096)
                    .map(|s| (s, if s % 3 == 0 { 16_384 } else { 4096 }))
                    .collect();
                let k = pieces.len();
                for i in 0..k {
                    let j = (i * 7 + order as usize * 5) % k;
                    pieces.swap(i, j);
                }
                let mut c = Coverage::default();
                let v = serve(&mut c, &bad, crc, &pieces);
                // The read that completes the member gets the verdict (the
                // caller fails every read after it).
                let bad = v
                    .iter()
                    .filter(|v| matches!(v, Verdict::Bad { .. }))
                    .count();
                assert_eq!(bad, 1, "damage at {at}, order {order}: {v:?}");
                assert!(!v.contains(&Verdict::Good));
            }
        }
    }

    #[test]
    fn partial_reads_stay_unchecked_and_scattered_readers_start_over() {
        let data = bytes(1 << 20, 3);
        let crc = crc32fast::hash(&data);
        let mut c = Coverage::default();
        // Every other 512-byte piece: 1024 disjoint runs, more than the cap.
        let pieces: Vec<(usize, usize)> = (0..data.len()).step_by(1024).map(|s| (s, 512)).collect();
        let v = serve(&mut c, &data, crc, &pieces);
        assert!(v.iter().all(|v| *v == Verdict::Partial));
        assert!(c.members[&7].runs.len() <= MAX_RUNS);
        // Read whole afterwards, it is checked.
        let v = serve(&mut c, &data, crc, &[(0, data.len())]);
        assert_eq!(v, [Verdict::Good]);
    }

    #[test]
    fn members_tracked_at_once_are_bounded() {
        let data = bytes(100, 4);
        let mut c = Coverage::default();
        for node in 0..(MAX_MEMBERS as u32 + 50) {
            c.add(node, 100, 0, 0, &data[..10]);
        }
        assert_eq!(c.tracked(), MAX_MEMBERS);
        // The oldest went first.
        assert!(!c.members.contains_key(&0));
        assert!(c.members.contains_key(&(MAX_MEMBERS as u32 + 49)));
    }
}
