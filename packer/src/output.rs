//! Atomic output: the image is written to a temporary file beside the final
//! name and renamed into place only once complete and synced, so a failed or
//! interrupted run never leaves a partial image under the final name.

use crate::PackError;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tempfile::NamedTempFile;

/// The validated destination of an image.
#[derive(Debug)]
pub struct Target {
    final_path: PathBuf,
    dir: PathBuf,
    name: String,
    /// OUT's directory is on Lustre: see [`crate::lustre`].
    lustre: bool,
    /// The image's permission bits, and the owner to give it back (root
    /// replacing another user's image): what OUT had when it existed, as
    /// writing over it in place would keep; else `0o666` less the umask,
    /// as any new file gets.
    mode: u32,
    owner: Option<(u32, u32)>,
}

/// (dev, ino) of the temporary file the image is written to.
pub fn identity(tmp: &NamedTempFile) -> Option<(u64, u64)> {
    tmp.as_file().metadata().ok().map(|m| (m.dev(), m.ino()))
}

/// The process's umask, read without changing it (`umask(2)` can only set
/// it, and the pack's threads may be creating files meanwhile).
pub(crate) fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

/// What OUT is when it is not a file an image may replace: a device, a
/// fifo or a socket (or a link to one), which a rename would silently
/// replace with a regular file (`-o /dev/sdX` would fill memory).
fn special(m: &fs::Metadata) -> Option<&'static str> {
    let t = m.file_type();
    if t.is_block_device() {
        Some("a block device")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_fifo() {
        Some("a fifo")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        None
    }
}

/// Checks SRC and OUT before any work is done: SRC must be a directory, OUT's
/// directory must exist, OUT must not lie inside SRC (the image would try to
/// contain itself) and must not exist unless `force`.
pub fn prepare(src: &Path, out: &Path, force: bool) -> Result<Target, PackError> {
    let meta = fs::metadata(src).map_err(PackError::io(src))?;
    if !meta.is_dir() {
        return Err(PackError::NotADirectory { path: src.into() });
    }
    prepare_output(out, force, &[src])
}

/// [`prepare`] for any sources: OUT must not lie inside any of the
/// directories `dirs`.
pub fn prepare_output(out: &Path, force: bool, dirs: &[&Path]) -> Result<Target, PackError> {
    let name = out.file_name().ok_or_else(|| {
        PackError::InvalidOption(format!("{}: output has no file name", out.display()))
    })?;
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = match fs::canonicalize(parent) {
        Ok(d) if d.is_dir() => d,
        Ok(_) => {
            return Err(PackError::NotADirectory {
                path: parent.into(),
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(PackError::OutputDirMissing {
                path: parent.into(),
            })
        }
        Err(e) => return Err(PackError::io(parent)(e)),
    };
    // Compare canonical parent + name, not the canonical OUT: OUT need not
    // exist yet, and if it is a symlink we replace the link, not its target.
    for src in dirs {
        let src_canon = fs::canonicalize(src).map_err(PackError::io(*src))?;
        if dir.join(name).starts_with(&src_canon) {
            return Err(PackError::OutputInsideSource {
                path: out.into(),
                src: src.into(),
            });
        }
    }
    let existing = fs::symlink_metadata(out).ok();
    if let Some(kind) = fs::metadata(out).ok().as_ref().and_then(special) {
        return Err(PackError::InvalidOption(format!(
            "{}: output is {kind}; packfs writes images to regular files",
            out.display()
        )));
    }
    match &existing {
        Some(_) if !force => return Err(PackError::OutputExists { path: out.into() }),
        Some(m) if m.is_dir() => {
            return Err(PackError::io(out)(std::io::Error::new(
                std::io::ErrorKind::IsADirectory,
                "output is a directory",
            )))
        }
        _ => {}
    }
    let (mode, owner) = match existing.filter(|m| m.is_file()) {
        Some(m) => (m.mode() & 0o7777, Some((m.uid(), m.gid()))),
        None => (0o666 & !umask(), None),
    };
    Ok(Target {
        final_path: out.into(),
        lustre: crate::lustre::is_lustre(&dir),
        dir,
        name: name.to_string_lossy().into_owned(),
        mode,
        owner,
    })
}

impl Target {
    /// The output as given (errors name it, not the temporary file).
    pub fn path(&self) -> &Path {
        &self.final_path
    }

    /// Creates `.<name>.tmp-XXXXXX` in OUT's directory. Dropping the returned
    /// file without [`Target::commit`] deletes it.
    ///
    /// Called before the walk, so an output directory the user cannot
    /// write fails at once, not after scanning a large tree.
    ///
    /// On Lustre the file is created without data objects, so that
    /// [`Target::stripe`] can still choose its layout.
    pub fn create_temp(&self) -> Result<NamedTempFile, PackError> {
        // The temporary name must fit NAME_MAX (255 bytes) where OUT does.
        let mut stem = self.name.as_str();
        if stem.len() > 200 {
            let mut end = 200;
            while !stem.is_char_boundary(end) {
                end -= 1;
            }
            stem = &stem[..end];
        }
        let prefix = format!(".{stem}.tmp-");
        let mut b = tempfile::Builder::new();
        b.prefix(&prefix).rand_bytes(6);
        let made = if self.lustre {
            b.make_in(&self.dir, |p| {
                use std::os::unix::fs::OpenOptionsExt;
                fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(crate::lustre::O_LOV_DELAY_CREATE)
                    .open(p)
            })
        } else {
            b.tempfile_in(&self.dir)
        };
        made.map_err(PackError::output(
            &self.final_path,
            "cannot create its temporary file",
        ))
    }

    /// On Lustre, gives `tmp` (created by [`Target::create_temp`], nothing
    /// written yet) the layout `policy` chooses for about `estimate` bytes.
    /// Elsewhere nothing. Never an error: a layout that cannot be set is a
    /// warning, and the image keeps the directory's default.
    pub fn stripe(&self, tmp: &NamedTempFile, policy: crate::lustre::StripeCount, estimate: u64) {
        if !self.lustre {
            return;
        }
        let Some(layout) = crate::lustre::plan(policy, estimate) else {
            return;
        };
        match crate::lustre::set_layout(tmp.as_file(), tmp.path(), layout) {
            Ok(by) => log::info!(
                "{}: striped over {} OSTs, {} byte stripes ({by:?})",
                self.final_path.display(),
                layout.count,
                layout.size
            ),
            Err(e) => log::warn!(
                "{}: Lustre striping not set, the image keeps the directory's default layout: {e}",
                self.final_path.display()
            ),
        }
    }

    /// Syncs the temporary file and renames it to the final name.
    pub fn commit(&self, tmp: NamedTempFile) -> Result<(), PackError> {
        let out = &self.final_path;
        // tempfile creates 0600: the image gets the mode OUT had, or a new
        // file's (module doc of `Target`), and root gives a replaced image
        // back to its owner.
        if let Some((uid, gid)) = self.owner {
            let _ = std::os::unix::fs::fchown(tmp.as_file(), Some(uid), Some(gid));
        }
        fs::set_permissions(tmp.path(), fs::Permissions::from_mode(self.mode))
            .map_err(PackError::output(out, "setting the image's mode"))?;
        // Delayed allocation and network filesystems report a full disk or
        // a failed write only here.
        tmp.as_file()
            .sync_all()
            .map_err(PackError::output(out, "writing the image"))?;
        tmp.persist(out)
            .map_err(|e| PackError::output(out, "renaming the image into place")(e.error))?;
        // Make the rename itself durable; failure here is not worth failing the run.
        if let Ok(d) = fs::File::open(&self.dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}
