//! `packfs completions SHELL`: the shell's completion script on stdout,
//! generated from the clap definitions so it never lags the options.

use crate::args::cli::Cli;
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
    clap_complete::generate(shell, &mut visible(Cli::command()), "packfs", out);
}

/// `cmd` without its hidden subcommands (the daemon's internal
/// `unmount-watcher`), which clap_complete would otherwise offer; clap has
/// no way to remove a subcommand, so the top level is rebuilt from its
/// arguments and visible subcommands.
fn visible(cmd: clap::Command) -> clap::Command {
    let mut v = clap::Command::new("packfs")
        .version(crate::version::SHORT)
        .args(cmd.get_arguments().filter(|a| !a.is_hide_set()).cloned())
        .subcommands(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
    if let Some(about) = cmd.get_about() {
        v = v.about(about.clone());
    }
    v
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
            for sub in [
                "pack",
                "mount",
                "completions",
                "man",
                "range-size",
                "version",
            ] {
                assert!(s.contains(sub), "{shell}: no {sub}");
            }
            // Hidden internals are not offered.
            assert!(!s.contains("unmount-watcher"), "{shell}");
        }
    }
}
