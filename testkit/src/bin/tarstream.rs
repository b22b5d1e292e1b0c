//! Writes the scale test's tar stream (`packfs_testkit::tarstream`) to
//! stdout: `tarstream FILES [PER_DIR]` (PER_DIR defaults to 1000), e.g.
//! `tarstream 10000000 | packfs pack - -o big.sqfs`.

use packfs_testkit::tarstream::{write, Layout};
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: Option<u64>| match args.get(i) {
        Some(s) => s.replace('_', "").parse::<u64>().ok(),
        None => default,
    };
    let (Some(files), Some(per_dir)) = (num(0, None), num(1, Some(1000))) else {
        eprintln!("usage: tarstream FILES [PER_DIR]");
        return ExitCode::from(2);
    };
    if per_dir == 0 || args.len() > 2 {
        eprintln!("usage: tarstream FILES [PER_DIR]  (PER_DIR at least 1)");
        return ExitCode::from(2);
    }
    let out = std::io::stdout().lock();
    let mut out = std::io::BufWriter::with_capacity(1 << 20, out);
    match write(Layout { files, per_dir }, &mut out).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that stops early (`| head`) is not an error of ours.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tarstream: {e}");
            ExitCode::FAILURE
        }
    }
}
