//! `packfs`: pack a tree into one SquashFS or ZIP image, inspect it, mount it.
//!
//! Exit codes: see [`exit::TABLE`] (shown by `packfs --help`, and the
//! same table as README's). An error is printed on stderr as `packfs: ...`
//! with its causes; a usage error (clap's, or [`args::usage::UsageError`] from
//! our own checks) exits 2. `packfs pack` stopped by SIGINT, SIGTERM or
//! SIGHUP removes its temporary file, then dies of that signal (status
//! 128+N in a shell), so scripts see the interruption.

/// `eprintln!` that ignores a failed write: a summary or message on a
/// closed stderr (`2>&1 | head`, a dead ssh session) must not turn finished
/// work into a panic and exit status 101. On a terminal, control
/// characters in the text are `?` ([`terminal`]).
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let text = format!($($t)*);
        let _ = writeln!(std::io::stderr(), "{}", $crate::terminal::for_stderr(&text));
    }};
}

/// `println!` for a command's output: a write that fails (a full disk or
/// quota behind `> file`, a closed pipe) ends the command with status 1 and
/// a message naming stdout, not a panic (status 101).
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout().lock(), $($t)*) {
            crate::exit::stdout_failed(&e)
        }
    }};
}

mod args;
mod cmd;
mod exit;
mod logging;
mod mount;
mod oserror;
mod progress;
mod terminal;
mod version;

fn main() {
    logging::init();
    let cli = args::parse();
    use args::cli::Command;
    if matches!(
        cli.cmd,
        Command::Info { .. }
            | Command::Ls { .. }
            | Command::Cat { .. }
            | Command::Completions { .. }
            | Command::Man { .. }
    ) {
        // Listing commands end quietly when their reader goes away
        // (`packfs ls IMG | head`), as `ls` and `cat` do, instead of
        // panicking in println! on EPIPE. Only these: a mount daemon or a
        // pack must never die of a closed pipe.
        // SAFETY: restoring a default signal action before any thread starts.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    match cmd::dispatch(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => std::process::exit(exit::failed(&e)),
    }
}
