//! How log records reach the user: a warning is one line in the same form
//! as packfs's errors, `packfs: warning: WHAT: WHY`, whichever crate raised
//! it; other levels (shown with RUST_LOG) keep their level and origin. OS
//! errors read as words ([`crate::oserror`]).
//!
//! The ZIP reader names no file in its warnings (it reads bytes, not
//! paths: "zip: duplicate entry ..."); the command that opens one image
//! sets its name with [`set_image`], and such a warning is shown under it,
//! as is a mount's log line for a request it failed.

use std::io::Write;
use std::sync::OnceLock;

static IMAGE: OnceLock<String> = OnceLock::new();

/// Installs the logger (default level: warn; RUST_LOG overrides).
pub fn init() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format(|buf, record| {
            let msg = crate::oserror::plain_text(&record.args().to_string());
            let line = match record.level() {
                log::Level::Warn => {
                    format!("packfs: warning: {}", name_image(&msg, record.target()))
                }
                level => format!(
                    "[{level:<5} {}] {}",
                    record.target(),
                    at_image(&msg, record.target())
                ),
            };
            writeln!(buf, "{}", crate::terminal::for_stderr(&line))
        })
        .init();
}

/// Names the one image this command reads, for the ZIP reader's warnings.
pub fn set_image(name: &str) {
    let _ = IMAGE.set(name.to_string());
}

/// What the FUSE edge logs for a failed request ("corrupt image: data
/// block at ...: ...") under the image's name, unless it names it already:
/// a `run --log` file gathers several mounts' lines.
fn at_image<'a>(msg: &'a str, target: &str) -> std::borrow::Cow<'a, str> {
    match IMAGE.get() {
        Some(image) if target == "mountfs::fuse::ops" && !msg.contains(image.as_str()) => {
            format!("{image}: {msg}").into()
        }
        _ => msg.into(),
    }
}

/// "zip: WHAT" from the ZIP reader -> "IMAGE: WHAT".
fn name_image<'a>(msg: &'a str, target: &str) -> std::borrow::Cow<'a, str> {
    match (IMAGE.get(), msg.strip_prefix("zip: ")) {
        (Some(image), Some(rest)) if target.starts_with("mountfs::zip") => {
            format!("{image}: {rest}").into()
        }
        _ => msg.into(),
    }
}
