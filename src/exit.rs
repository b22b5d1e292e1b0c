//! The exit codes packfs promises: shown by `packfs --help` (after the
//! options) and kept identical to README's table, which a test compares
//! with this one and with what the commands do.

/// The table as `--help` prints it: one code and its meaning per line.
pub const TABLE: &str = "\
Exit codes:
  0      success
  1      an error (the message on stderr names the file and the cause)
  2      a usage error: a bad value, a bad combination of options, a malformed argument
  126    run: the command was found but could not be executed
  127    run: the command was not found
  128+N  pack stopped by signal N (after cleaning up); run: the command died of signal N
  other  run: the command's own exit status";

/// `run`: a shell's status for a command that exists but cannot be executed.
pub const CANNOT_EXECUTE: i32 = 126;
/// `run`: a shell's status for a command that is not found.
pub const NOT_FOUND: i32 = 127;

/// Says a command's error on stderr, `packfs: ...` and each cause once;
/// returns the status to exit with: 2 for a usage error, else 1.
pub fn failed(e: &anyhow::Error) -> i32 {
    let mut shown = crate::oserror::plain_text(&e.to_string());
    say!("packfs: {shown}");
    for cause in e.chain().skip(1) {
        let cause = crate::oserror::plain_text(&cause.to_string());
        // The packer's errors print their source in their own
        // message and return it as source() too: say it once.
        if !shown.contains(&cause) {
            say!("  caused by: {cause}");
        }
        shown = cause;
    }
    if crate::args::usage::is_usage(e) {
        2
    } else {
        1
    }
}

/// Ends the process after a failed write to stdout (see `outln!`): quietly
/// for a reader that went away, else with the cause on stderr; status 1.
pub fn stdout_failed(e: &std::io::Error) -> ! {
    if e.kind() != std::io::ErrorKind::BrokenPipe {
        say!("packfs: writing to stdout: {}", crate::oserror::plain(e));
    }
    std::process::exit(1)
}
