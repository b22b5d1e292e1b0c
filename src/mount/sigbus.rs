//! The last line of a daemon serving a memory-mapped image (`--io mmap`).
//!
//! A page of the map that cannot be read (the image was truncated in place,
//! its storage failed) is SIGBUS, whose default action ends the process:
//! the mount is gone and, without this, its log says nothing about why.
//! The handler writes one line naming the image to stderr, which is the
//! `--log` file or nowhere in a daemon, then ends the process with the same
//! signal. Only `write`, `signal` and `raise` run in the handler: all three
//! are async-signal-safe, and the line is made before the handler is set.

use std::sync::OnceLock;

static LINE: OnceLock<Vec<u8>> = OnceLock::new();

/// Sets the handler for a daemon serving `image` through a memory map.
pub fn say_why_before_dying(image: &str) {
    let line = format!(
        "packfs: {image}: a page of the memory-mapped image could not be read (SIGBUS: the \
         file shrank or its storage failed), so the mount ends; the default, --io pread, \
         answers EIO for the files affected instead\n"
    );
    if LINE.set(line.into_bytes()).is_err() {
        return;
    }
    // SAFETY: a zeroed sigaction is valid; the handler only calls
    // async-signal-safe functions and reads a value set before it.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigbus as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
    }
}

extern "C" fn on_sigbus(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    if let Some(line) = LINE.get() {
        // SAFETY: writing a live buffer to a descriptor; a failed write
        // changes nothing.
        unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
    }
    // The default action ends the process as SIGBUS would have, with its
    // status (128 + 7 to a shell, a core where cores are kept).
    // SAFETY: both are async-signal-safe.
    unsafe {
        libc::signal(libc::SIGBUS, libc::SIG_DFL);
        libc::raise(libc::SIGBUS);
    }
}
