//! Lustre striping of the image being written.
//!
//! A Lustre file's layout (how many object storage targets, OSTs, hold its
//! data, and in what stripe size) is fixed once the file has data objects,
//! and a plain `open(O_CREAT)` allocates them with the directory's default
//! layout, usually one stripe: every node of a job then reads the image
//! from one OST behind one server. So on Lustre the temporary image file is
//! created with `O_LOV_DELAY_CREATE` (no objects yet), and once the walk has
//! measured the tree, before the first byte is written, [`set_layout`]
//! gives it the layout [`plan`] chose: with `lfs setstripe` when `lfs` is on
//! PATH (it knows every layout version of the installed Lustre), else with
//! the `LL_IOC_LOV_SETSTRIPE` ioctl and a `lov_user_md_v1`. If neither
//! works the file keeps the directory's default: striping is advice, and
//! nothing here may fail a pack.
//!
//! The rule of thumb ([`plan`] for `auto`), after the usual site advice
//! (LUMI's Lustre guide: stripe large files read by many clients over many
//! OSTs; leave small files on one):
//! - under 1 GiB of source data: the directory's default (nothing is set);
//! - from 1 GiB to under 64 GiB: one stripe per 4 GiB, at least 4, at most 16;
//! - 64 GiB and more: every OST (`-c -1`).
//!
//! The stripe size is always 4 MiB: packfs's default remote range size and
//! within the 1-4 MiB sites recommend. The estimate is the source data's
//! size (the image is at most about that, and the rule has wide steps).
//!
//! Off Lustre (statfs magic other than [`LL_SUPER_MAGIC`]) nothing happens.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};

/// `statfs.f_type` of a Lustre client mount.
pub const LL_SUPER_MAGIC: i64 = 0x0BD0_0BD0;
/// `lov_user_md_v1.lmm_magic`.
const LOV_USER_MAGIC_V1: u32 = 0x0BD1_0BD0;
const LOV_USER_MAGIC_V3: u32 = 0x0BD3_0BD0;
const LOV_USER_MAGIC_COMP_V1: u32 = 0x0BD6_0BD0;
/// Plain striping (RAID0 over the OSTs).
const LOV_PATTERN_RAID0: u32 = 0x001;
/// `lmm_stripe_offset`: let the MDS choose the first OST.
const STRIPE_OFFSET_ANY: u16 = 0xFFFF;
/// `_IOW('f', 154, long)` and `_IOW('f', 155, long)` (lustre_user.h).
pub const LL_IOC_LOV_SETSTRIPE: u64 = ioc_w(b'f', 154, 8);
pub const LL_IOC_LOV_GETSTRIPE: u64 = ioc_w(b'f', 155, 8);
/// `O_LOV_DELAY_CREATE` of Lustre 2.4 and later: `O_NOCTTY | FASYNC`, flags
/// meaningless on a regular file elsewhere, which Lustre reads as "create
/// the inode, not its objects".
pub const O_LOV_DELAY_CREATE: i32 = libc::O_NOCTTY | libc::O_ASYNC;
/// The stripe size packfs sets.
pub const STRIPE_SIZE: u32 = 4 << 20;

const GIB: u64 = 1 << 30;

/// Linux `_IOW(type, nr, size)`.
const fn ioc_w(ty: u8, nr: u8, size: u64) -> u64 {
    (1 << 30) | (size << 16) | ((ty as u64) << 8) | nr as u64
}

/// `pack --stripe-count`: what to do when the output is on Lustre.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StripeCount {
    /// The rule of thumb of [`plan`].
    #[default]
    Auto,
    /// Leave the directory's default layout.
    None,
    /// This many stripes; -1 is every OST.
    Count(i32),
}

impl std::str::FromStr for StripeCount {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(StripeCount::Auto),
            "none" => Ok(StripeCount::None),
            n => match n.parse::<i32>() {
                Ok(c) if c == -1 || (1..=2000).contains(&c) => Ok(StripeCount::Count(c)),
                _ => Err(format!(
                    "{s:?}: a stripe count is 1 to 2000, -1 (every OST), auto or none"
                )),
            },
        }
    }
}

/// A layout to set: `count` stripes (-1: every OST) of `size` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub count: i32,
    pub size: u32,
}

/// The layout for an image of about `estimate` bytes, or None to keep the
/// directory's default (see the module doc for the rule).
pub fn plan(policy: StripeCount, estimate: u64) -> Option<Layout> {
    let count = match policy {
        StripeCount::None => return None,
        StripeCount::Count(c) => c,
        StripeCount::Auto if estimate < GIB => return None,
        StripeCount::Auto if estimate >= 64 * GIB => -1,
        StripeCount::Auto => estimate.div_ceil(4 * GIB).clamp(4, 16) as i32,
    };
    Some(Layout {
        count,
        size: STRIPE_SIZE,
    })
}

/// Whether `dir` is on a Lustre filesystem. An error (no statfs) is "no".
pub fn is_lustre(dir: &Path) -> bool {
    crate::statfs::fs_type(dir) == Some(LL_SUPER_MAGIC)
}

/// `lfs setstripe -c COUNT -S SIZE PATH`.
pub fn lfs_setstripe_args(layout: Layout, path: &Path) -> Vec<OsString> {
    vec![
        "setstripe".into(),
        "-c".into(),
        layout.count.to_string().into(),
        "-S".into(),
        layout.size.to_string().into(),
        path.into(),
    ]
}

/// The `lov_user_md_v1` for `LL_IOC_LOV_SETSTRIPE`, in the packed layout
/// of lustre_user.h (32 bytes, host byte order): magic, pattern, a 16-byte
/// object id (zero: the MDS assigns it), stripe size, stripe count (-1 as
/// 0xFFFF: every OST), stripe offset (0xFFFF: any).
pub fn lov_user_md_v1(layout: Layout) -> [u8; 32] {
    let mut b = [0u8; 32];
    b[0..4].copy_from_slice(&LOV_USER_MAGIC_V1.to_ne_bytes());
    b[4..8].copy_from_slice(&LOV_PATTERN_RAID0.to_ne_bytes());
    b[24..28].copy_from_slice(&layout.size.to_ne_bytes());
    b[28..30].copy_from_slice(&(layout.count as u16).to_ne_bytes());
    b[30..32].copy_from_slice(&STRIPE_OFFSET_ANY.to_ne_bytes());
    b
}

/// How [`set_layout`] set the layout.
#[derive(Debug, PartialEq, Eq)]
pub enum SetBy {
    Lfs,
    Ioctl,
}

/// Gives `file` (at `path`, created with [`O_LOV_DELAY_CREATE`] and not yet
/// written) the layout: `lfs setstripe` first, the ioctl if that is missing
/// or fails.
pub fn set_layout(file: &File, path: &Path, layout: Layout) -> io::Result<SetBy> {
    let lfs = Command::new("lfs")
        .args(lfs_setstripe_args(layout, path))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    let lfs_error = match lfs {
        Ok(o) if o.status.success() => return Ok(SetBy::Lfs),
        Ok(o) => format!(
            "lfs setstripe: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => format!("lfs: {e}"),
    };
    let lum = lov_user_md_v1(layout);
    // SAFETY: the kernel reads a lov_user_md_v1 (32 bytes) from `lum`.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), LL_IOC_LOV_SETSTRIPE as _, lum.as_ptr()) };
    if r == 0 {
        return Ok(SetBy::Ioctl);
    }
    let e = io::Error::last_os_error();
    Err(io::Error::new(
        e.kind(),
        format!("{lfs_error}; LL_IOC_LOV_SETSTRIPE: {e}"),
    ))
}

/// Decodes what `LL_IOC_LOV_GETSTRIPE` returned.
pub fn describe_lov_user_md(b: &[u8]) -> String {
    if b.len() < 32 {
        return "unknown layout".into();
    }
    let magic = u32::from_ne_bytes(b[0..4].try_into().unwrap());
    let size = u32::from_ne_bytes(b[24..28].try_into().unwrap());
    let count = u16::from_ne_bytes(b[28..30].try_into().unwrap());
    match magic {
        LOV_USER_MAGIC_V1 | LOV_USER_MAGIC_V3 => {
            format!("{count} stripe(s) of {} KiB", size / 1024)
        }
        LOV_USER_MAGIC_COMP_V1 => "composite layout (PFL; `lfs getstripe` shows it)".into(),
        m => format!("layout magic {m:#x}"),
    }
}

/// The striping of `path` when it is on Lustre (None elsewhere): `lfs
/// getstripe -c -S` when `lfs` is there, else the ioctl.
pub fn describe(path: &Path) -> Option<String> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !is_lustre(dir) {
        return None;
    }
    if let Ok(o) = Command::new("lfs")
        .args(["getstripe", "-c", "-S"])
        .arg(path)
        .stdin(Stdio::null())
        .output()
    {
        if o.status.success() {
            let s = String::from_utf8_lossy(&o.stdout);
            let words: Vec<&str> = s.split_whitespace().collect();
            return Some(format!("lfs getstripe -c -S: {}", words.join(" ")));
        }
    }
    let f = File::open(path).ok()?;
    // Room for a v3 header and the objects of 2000 stripes (24 bytes each).
    let mut buf = vec![0u8; 48 + 2000 * 24];
    buf[0..4].copy_from_slice(&LOV_USER_MAGIC_V1.to_ne_bytes());
    // SAFETY: the kernel writes at most the buffer's size for this count.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), LL_IOC_LOV_GETSTRIPE as _, buf.as_mut_ptr()) };
    if r != 0 {
        return Some(format!("unknown ({})", io::Error::last_os_error()));
    }
    Some(describe_lov_user_md(&buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ioctl_numbers_are_lustre_users() {
        // lustre_user.h on x86_64: LL_IOC_LOV_SETSTRIPE 0x4008669a,
        // LL_IOC_LOV_GETSTRIPE 0x4008669b.
        assert_eq!(LL_IOC_LOV_SETSTRIPE, 0x4008_669a);
        assert_eq!(LL_IOC_LOV_GETSTRIPE, 0x4008_669b);
        assert_eq!(O_LOV_DELAY_CREATE, 0o400 | 0o20000);
    }

    #[test]
    fn the_rule_of_thumb() {
        let auto = |b| plan(StripeCount::Auto, b).map(|l| l.count);
        assert_eq!(auto(0), None);
        assert_eq!(auto(GIB - 1), None);
        assert_eq!(auto(GIB), Some(4));
        assert_eq!(auto(16 * GIB), Some(4));
        assert_eq!(auto(16 * GIB + 1), Some(5));
        assert_eq!(auto(40 * GIB), Some(10));
        assert_eq!(auto(64 * GIB - 1), Some(16));
        assert_eq!(auto(64 * GIB), Some(-1));
        assert_eq!(plan(StripeCount::None, 100 * GIB), None);
        assert_eq!(
            plan(StripeCount::Count(8), 10),
            Some(Layout {
                count: 8,
                size: 4 << 20
            })
        );
    }

    #[test]
    fn stripe_count_parses_numbers_auto_and_none() {
        assert_eq!("auto".parse(), Ok(StripeCount::Auto));
        assert_eq!("none".parse(), Ok(StripeCount::None));
        assert_eq!("8".parse(), Ok(StripeCount::Count(8)));
        assert_eq!("-1".parse(), Ok(StripeCount::Count(-1)));
        for bad in ["0", "-2", "2001", "many", ""] {
            assert!(bad.parse::<StripeCount>().is_err(), "{bad}");
        }
    }

    #[test]
    fn lfs_gets_count_and_size() {
        let a = lfs_setstripe_args(
            Layout {
                count: -1,
                size: 4 << 20,
            },
            Path::new("/l/.x.tmp"),
        );
        assert_eq!(
            a,
            ["setstripe", "-c", "-1", "-S", "4194304", "/l/.x.tmp"].map(OsString::from)
        );
    }

    #[test]
    fn the_lov_user_md_v1_bytes() {
        let b = lov_user_md_v1(Layout {
            count: 8,
            size: 4 << 20,
        });
        assert_eq!(&b[0..4], &0x0BD1_0BD0u32.to_ne_bytes());
        assert_eq!(&b[4..8], &1u32.to_ne_bytes());
        assert!(b[8..24].iter().all(|&x| x == 0), "object id is the MDS's");
        assert_eq!(&b[24..28], &(4u32 << 20).to_ne_bytes());
        assert_eq!(&b[28..30], &8u16.to_ne_bytes());
        assert_eq!(&b[30..32], &[0xFF, 0xFF]);
        let all = lov_user_md_v1(Layout {
            count: -1,
            size: 1 << 20,
        });
        assert_eq!(&all[28..30], &[0xFF, 0xFF]);
        // What GETSTRIPE returns in this form reads back.
        assert_eq!(describe_lov_user_md(&b), "8 stripe(s) of 4096 KiB");
    }

    #[test]
    fn a_local_filesystem_is_not_lustre() {
        let d = tempfile::tempdir().unwrap();
        assert!(!is_lustre(d.path()));
        assert!(!is_lustre(Path::new("/nonexistent/dir")));
        let f = d.path().join("img.sqfs");
        std::fs::write(&f, b"x").unwrap();
        assert_eq!(describe(&f), None);
    }
}
