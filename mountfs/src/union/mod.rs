//! One read-only tree over several images (the shards of a split, or any
//! images given together), as one more [`Image`](crate::image::Image): the filesystem core, the
//! cache and the FUSE adapter do not know they serve a union.
//!
//! # Node ids and inode numbers
//! With S shards, node `n >= 2` of shard `s` is `(n - 2) * S + s + 2`
//! (`UnionImage::node`); node 1 is the union's root. `st_ino` is
//! interleaved the same way (`ino * S + s`). No table maps
//! ids, and every id names one shard's node.
//!
//! # Merged directories
//! A directory held by several shards shows once: its node, inode number
//! and attributes are those of the first shard (in manifest or command-line
//! order) holding it. Only such directories need state: a `MergedDir`
//! (its path, its node in each shard holding it, its parent's inode) is
//! recorded when a lookup or a listing first meets it. A directory held by
//! one shard is served by that shard alone, since a shard that holds an
//! entry holds its parent. For the shards of one split, only directories
//! spanning a cut are merged: at most (depth x shards) of them.
//!
//! # Routing
//! Every shard with entries has a path range (`packfs_format::shards`): the
//! manifest's, or for plain images the first leaf and last path found by
//! descending the first and last entries at open. A path is asked only of
//! the shards whose range meets its subtree, found by binary search when
//! the ranges are disjoint and in shard order (always, for one split): a
//! regular file is then asked of exactly one shard, whatever S, and a lookup
//! or listing costs what it costs in the single image holding it. Ranges
//! that overlap (unrelated images) are filtered linearly.
//!
//! # Listings
//! A merged directory lists its shards one after another, each in its own
//! name order, which for one split is the merged name order (its shards'
//! parts are consecutive name ranges). An entry whose path more than one
//! shard may hold is shown only by the shard the lookup rule picks (so a
//! directory spanning shards appears once). Cookies are (position of the
//! shard among the directory's shards, that shard's own cookie), so resuming
//! costs what it costs in one image.
//!
//! # Conflicts
//! A path that is a directory in one shard and not in another, or a
//! non-directory in two, is a conflict. [`OnConflict::Error`] (the default)
//! refuses to mount plain images with one (checked at open by a merge pass
//! over the directories present in several images, `build`); a manifest's
//! shards come from one source tree and cannot conflict. `First` and `Last`
//! pick the first or last shard holding the path; when that is a directory,
//! the directories of the other shards merge with it and their
//! non-directories are hidden.

mod build;
mod options;
mod tree;

pub use build::{open_images, open_manifest, ManifestSource};
pub use options::{OnConflict, OpenFn, UnionOptions};
pub use tree::{UnionHandle, UnionImage, MAX_SHARDS};
