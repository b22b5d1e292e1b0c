//! What the venv scan reports: one [`Finding`] per file or symlink that ties
//! a venv to its build path or host, by [`Kind`].

use std::path::PathBuf;

/// Kinds of ties to the build path or host, in report order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A script in `bin/` whose shebang names the build path. Rewritable.
    Shebang,
    /// `bin/activate*` naming the build path. Rewritable.
    Activate,
    /// `pyvenv.cfg` naming the build path (its `command`). Rewritable.
    PyvenvCfg,
    /// Another text file in `bin/` naming the build path. Rewritable.
    BinText,
    /// A `.pth` file adding a path inside the build path. Rewritable.
    Pth,
    /// An absolute symlink into the build path. Rewritten as relative.
    SymlinkIntoBuild,
    /// `bin/python*` pointing outside the venv: the base interpreter.
    BaseInterpreter,
    /// Another symlink leaving the tree.
    SymlinkOut,
    /// A `.pth` file adding absolute paths outside the venv.
    PthOut,
    /// pip's install records (`RECORD`, `direct_url.json`) naming the build path.
    PipRecord,
    /// Any other text file naming the build path.
    OtherText,
}

impl Kind {
    /// Can a mount path fix it in the image?
    pub fn rewritable(self) -> bool {
        matches!(
            self,
            Kind::Shebang
                | Kind::Activate
                | Kind::PyvenvCfg
                | Kind::BinText
                | Kind::Pth
                | Kind::SymlinkIntoBuild
        )
    }

    pub fn describe(self) -> &'static str {
        match self {
            Kind::Shebang => "console-script shebangs",
            Kind::Activate => "activate scripts",
            Kind::PyvenvCfg => "pyvenv.cfg",
            Kind::BinText => "other scripts in bin/",
            Kind::Pth => ".pth files with paths inside the venv",
            Kind::SymlinkIntoBuild => "absolute symlinks into the venv",
            Kind::BaseInterpreter => "base interpreter links",
            Kind::SymlinkOut => "symlinks leaving the tree",
            Kind::PthOut => ".pth files adding paths outside the venv",
            Kind::PipRecord => "pip install records (RECORD, direct_url.json)",
            Kind::OtherText => "other text files",
        }
    }
}

/// One file or symlink that ties the venv to its build path or host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub kind: Kind,
    /// Relative to the venv root.
    pub path: PathBuf,
    /// What it says (a shebang, a link target).
    pub detail: String,
    /// Symlinks into the build path: the relative target they get.
    pub new_target: Option<PathBuf>,
}
