//! `packfs completions SHELL`: the shell's completion script on stdout,
//! generated from the clap definitions so it never lags the options.

use crate::cli::Cli;
use clap::CommandFactory;
use clap_complete::Shell;
use std::io::Write;

pub fn run(shell: Shell) -> anyhow::Result<i32> {
    let mut out = Vec::new();
    write(shell, &mut out);
    std::io::stdout().lock().write_all(&out)?;
    Ok(0)
}

/// Writes the completion script for `shell` into `out`.
pub fn write(shell: Shell, out: &mut dyn Write) {
    clap_complete::generate(shell, &mut Cli::command(), "packfs", out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shell_gets_a_script_naming_the_subcommands() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let mut out = Vec::new();
            write(shell, &mut out);
            let s = String::from_utf8(out).unwrap();
            for sub in ["pack", "mount", "completions", "man"] {
                assert!(s.contains(sub), "{shell}: no {sub}");
            }
        }
    }
}
