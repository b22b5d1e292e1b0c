//! `packfs pack` stopped by SIGINT, SIGTERM or SIGHUP: the handler raises
//! the packer's cancel flag, and once the packer has removed its temporary
//! file the process dies of that signal.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, OnceLock};

/// The flag the packer polls; the handler can only reach it through a static.
static CANCEL: OnceLock<Arc<AtomicBool>> = OnceLock::new();
/// The signal that asked the pack to stop (0: none yet).
static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only atomic stores: async-signal-safe. The packer notices between
    // batches, removes its temporary file and returns Interrupted.
    SIGNAL.store(sig, Ordering::SeqCst);
    if let Some(c) = CANCEL.get() {
        c.store(true, Ordering::SeqCst);
    }
}

/// Installs the handlers; returns the flag they raise.
pub fn install() -> Arc<AtomicBool> {
    let flag = CANCEL
        .get_or_init(|| Arc::new(AtomicBool::new(false)))
        .clone();
    // SAFETY: the handler only performs an atomic store.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as usize);
        libc::signal(libc::SIGTERM, on_signal as *const () as usize);
        libc::signal(libc::SIGHUP, on_signal as *const () as usize);
    }
    flag
}

/// After a pack stopped by a signal (its temporary file already removed):
/// says so, then dies of that signal, its default action restored.
///
/// Exiting with status 1 instead would hide the signal from the caller: a
/// shell running `packfs pack` in a loop or script stops on Ctrl-C only if
/// the child dies of SIGINT (bash's "wait and cooperative exit"), and a
/// batch system's SIGTERM would read as packfs failing on its own.
pub fn die_of_signal() -> anyhow::Error {
    die_of_signal_saying("no image written")
}

/// [`die_of_signal`], saying `what` of the output.
pub fn die_of_signal_saying(what: &str) -> anyhow::Error {
    let sig = SIGNAL.load(Ordering::SeqCst);
    let name = match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => return packer::PackError::Interrupted.into(),
    };
    // A progress bar may be on the line: the message takes its place
    // rather than trailing it ("eta 76spackfs: interrupted...").
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        use std::io::Write;
        let _ = std::io::stderr().write_all(b"\r\x1b[2K");
    }
    say!("packfs: interrupted by {name}; {what}");
    // SAFETY: restoring a default action and raising a signal have no
    // memory effects; no other code of ours handles these signals now.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
    // Not reached: the default action of all three is to terminate.
    std::process::exit(128 + sig)
}
