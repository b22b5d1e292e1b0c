//! The order file data is written in.
//!
//! SquashFS puts no constraint on where a file's blocks sit or on which
//! tails share a fragment block: every inode records its own block start
//! and fragment index. So the order the packer writes file data in is free,
//! and it decides two things: which tails are compressed together in one
//! fragment block (a block is compressed alone, so neighbours that share
//! content compress better), and which files a reader finds next to each
//! other (a start-up that reads files in a known order reads one region).
//! The directory tree is the same whatever the order.
//!
//! Every order here is a pure function of the tree, the files' contents and
//! the options, never of the thread count or of timing, so packing stays
//! reproducible.

mod profile;
mod similarity;

use crate::tree::Tree;
use crate::PackError;
pub use profile::Profile;
use std::path::Path;

/// How file data is ordered in the image.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum DataOrder {
    /// Depth-first, siblings by name: the order mksquashfs uses.
    #[default]
    Path,
    /// Files grouped by name suffix, then chained by content fingerprint so
    /// that similar tails share fragment blocks (see `similarity`).
    Similarity,
    /// The profile's files first, in its order, then the rest in `rest`'s
    /// order (never itself a profile).
    Profile { profile: Profile, rest: Rest },
}

/// The order of the files a profile does not name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Rest {
    #[default]
    Path,
    Similarity,
}

impl DataOrder {
    /// Parses `path`, `similarity`, `profile:FILE` (the rest by path) or
    /// `profile+similarity:FILE`; a profile file is read here.
    pub fn parse(s: &str) -> Result<DataOrder, PackError> {
        let profile = |rest: Rest, file: &str| -> Result<DataOrder, PackError> {
            if file.is_empty() {
                return Err(PackError::InvalidOption(format!(
                    "order {s:?}: the profile file is missing"
                )));
            }
            Ok(DataOrder::Profile {
                profile: Profile::read(Path::new(file))?,
                rest,
            })
        };
        match s {
            "path" => Ok(DataOrder::Path),
            "similarity" => Ok(DataOrder::Similarity),
            _ => {
                if let Some(f) = s.strip_prefix("profile:") {
                    profile(Rest::Path, f)
                } else if let Some(f) = s.strip_prefix("profile+similarity:") {
                    profile(Rest::Similarity, f)
                } else {
                    Err(PackError::InvalidOption(format!(
                        "order {s:?}: expected path, similarity, profile:FILE or profile+similarity:FILE"
                    )))
                }
            }
        }
    }
}

impl DataOrder {
    /// How the shard manifest records this order (`Split::order`): the
    /// name, and for a profile its content hash instead of its file.
    pub fn describe(&self) -> String {
        match self {
            DataOrder::Path => "path".into(),
            DataOrder::Similarity => "similarity".into(),
            DataOrder::Profile { profile, rest } => {
                let kind = match rest {
                    Rest::Path => "profile",
                    Rest::Similarity => "profile+similarity",
                };
                format!("{kind}:blake3:{}", profile.digest())
            }
        }
    }
}

/// What the ordering step decided.
pub struct Ordered {
    /// Every regular-file inode once, in the order its data is written.
    pub files: Vec<u32>,
    /// How many of `files`, from the start, are a profile's files: the
    /// writer closes the fragment block after them, so their data ends at a
    /// known point that a mount can read ahead in one pass.
    pub profiled: usize,
}

/// Orders the tree's regular files for writing. `block_size` and
/// `fragments` say which bytes of each file become a fragment tail (what
/// the similarity order compares).
pub(crate) fn order_files(
    tree: &Tree,
    order: &DataOrder,
    block_size: u32,
    fragments: bool,
    pool: &rayon::ThreadPool,
) -> Ordered {
    let by_path = tree.files_in_data_order();
    match order {
        DataOrder::Path => Ordered {
            files: by_path,
            profiled: 0,
        },
        DataOrder::Similarity => Ordered {
            files: pool.install(|| similarity::order(tree, &by_path, block_size, fragments)),
            profiled: 0,
        },
        DataOrder::Profile { profile, rest } => {
            let first = profile.inodes(tree);
            let mut taken = vec![false; tree.inodes.len()];
            for &i in &first {
                taken[i as usize] = true;
            }
            let others: Vec<u32> = by_path
                .into_iter()
                .filter(|&i| !taken[i as usize])
                .collect();
            let others = match rest {
                Rest::Path => others,
                Rest::Similarity => {
                    pool.install(|| similarity::order(tree, &others, block_size, fragments))
                }
            };
            let profiled = first.len();
            let mut files = first;
            files.extend(others);
            Ordered { files, profiled }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_order_names_and_refuses_others() {
        assert_eq!(DataOrder::parse("path").unwrap(), DataOrder::Path);
        assert_eq!(
            DataOrder::parse("similarity").unwrap(),
            DataOrder::Similarity
        );
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.txt");
        std::fs::write(&f, "a/b\n/c\n").unwrap();
        let DataOrder::Profile { profile, rest } =
            DataOrder::parse(&format!("profile+similarity:{}", f.display())).unwrap()
        else {
            panic!("not a profile order")
        };
        assert_eq!(rest, Rest::Similarity);
        assert_eq!(profile.len(), 2);
        for bad in ["", "size", "profile:", "profile:/nonexistent/profile.txt"] {
            assert!(DataOrder::parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
