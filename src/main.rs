//! `packfs`: pack a tree into one SquashFS or ZIP image, inspect it, mount it.
//!
//! Exit codes: 0 success; 1 an error (printed on stderr as `packfs: ...` with
//! its causes); 2 a usage error (from clap); for `packfs run`, the command's
//! own status (128+N when it died of signal N).

mod bench;
mod cli;
mod cmd;
mod progress;
mod size;

use clap::Parser;

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format_timestamp(None)
        .init();
    let cli = cli::Cli::parse();
    match cmd::dispatch(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("packfs: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            std::process::exit(1);
        }
    }
}
