//! The filesystem core served over FUSE (feature `fuse`): everything that
//! knows the kernel's FUSE protocol or the `fuser` crate lives here; the
//! core ([`crate::fs::PackFs`], the readers, caches and sources) knows
//! nothing of it.
//!
//! - [`ops`]: the answer to each FUSE operation (negative entries, declined
//!   OPEN, refused writes), the same whichever transport carried it;
//! - [`stats`]: those requests counted by kind, and `packfs mount
//!   --stats`'s JSON;
//! - [`adapter`]: the `fuser` filesystem, for `/dev/fuse` served by
//!   `fuser`'s threads;
//! - [`transport`]: how requests arrive (`fuser`'s threads, packfs's own
//!   `/dev/fuse` threads, or io_uring queues);
//! - [`serve`]: the mount options and the session, which picks a transport.

pub mod adapter;
pub mod ops;
pub mod serve;
pub mod stats;
pub mod transport;
