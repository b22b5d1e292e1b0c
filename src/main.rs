//! `packfs`: pack a tree into one SquashFS or ZIP image, inspect it, mount it.
//!
//! Exit codes: 0 success; 1 an error (printed on stderr as `packfs: ...` with
//! its causes); 2 a usage error (from clap); for `packfs run`, the command's
//! own status (128+N when it died of signal N). `packfs pack` stopped by
//! SIGINT, SIGTERM or SIGHUP removes its temporary file, then dies of that
//! signal (status 128+N in a shell), so scripts see the interruption.

mod cli;
mod cmd;
mod daemon;
mod date;
mod fusermount;
mod location;
mod machine;
mod memory;
mod progress;
mod version;

use clap::Parser;

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format_timestamp(None)
        .init();
    let cli = cli::Cli::parse();
    if matches!(
        cli.cmd,
        cli::Command::Info { .. }
            | cli::Command::Ls { .. }
            | cli::Command::Cat { .. }
            | cli::Command::Completions { .. }
            | cli::Command::Man { .. }
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
        Err(e) => {
            let mut shown = e.to_string();
            eprintln!("packfs: {shown}");
            for cause in e.chain().skip(1) {
                let cause = cause.to_string();
                // The packer's errors print their source in their own
                // message and return it as source() too: say it once.
                if !shown.contains(&cause) {
                    eprintln!("  caused by: {cause}");
                }
                shown = cause;
            }
            std::process::exit(1);
        }
    }
}
