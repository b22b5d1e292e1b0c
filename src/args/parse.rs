//! The command tree as the user meets it: clap's, from [`Cli`], with the
//! remote-image options (global, so that they may come anywhere on the
//! line) shown only under the commands that read or write an image, so
//! that `packfs umount --help` lists what umount takes.

use crate::args::cli::{Cli, RemoteArgs};
use clap::{Command, CommandFactory, FromArgMatches};

/// Commands that take no image: the remote options are hidden from their
/// help (still accepted, and ignored, like any global flag).
const NO_IMAGE: [&str; 4] = ["umount", "shards", "completions", "man"];

/// The command tree, with [`NO_IMAGE`]'s help trimmed: those commands get
/// hidden, non-global copies of the remote options before clap propagates
/// the global ones (it skips a subcommand that has an argument of the same
/// name), so they are still accepted there and ignored.
pub fn command() -> Command {
    let mut cmd = Cli::command();
    let remote: Vec<clap::Arg> = <RemoteArgs as clap::Args>::augment_args(Command::new("remote"))
        .get_arguments()
        .map(|a| a.clone().global(false).hide(true))
        .collect();
    for name in NO_IMAGE {
        cmd = cmd.mut_subcommand(name, |c| hide(c, &remote));
    }
    cmd
}

fn hide(mut c: Command, remote: &[clap::Arg]) -> Command {
    c = c.args(remote.iter().cloned());
    let subs: Vec<String> = c
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for s in subs {
        c = c.mut_subcommand(s, |sc| hide(sc, remote));
    }
    c
}

/// Parses the process's arguments; a usage error exits 2, as clap does.
pub fn parse() -> Cli {
    let matches = command().try_get_matches().unwrap_or_else(|e| exit(e));
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| exit(e))
}

/// clap's exit, except that `--help` or `--version` that cannot be written
/// (`> /dev/full`) is an error, not a success.
fn exit(e: clap::Error) -> ! {
    use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
    if matches!(e.kind(), DisplayHelp | DisplayVersion) {
        use std::io::Write as _;
        if let Err(w) = e.print().and_then(|()| std::io::stdout().flush()) {
            crate::exit::stdout_failed(&w);
        }
        std::process::exit(0);
    }
    e.exit()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every visible argument of `cmd` and its subcommands lacking help.
    fn without_help(cmd: &Command, path: &str, out: &mut Vec<String>) {
        for a in cmd.get_arguments() {
            let builtin = matches!(a.get_id().as_str(), "help" | "version");
            if !a.is_hide_set() && !builtin && a.get_help().is_none() && a.get_long_help().is_none()
            {
                out.push(format!("{path} {}", a.get_id()));
            }
        }
        for s in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            without_help(s, &format!("{path} {}", s.get_name()), out);
        }
    }

    #[test]
    fn every_option_and_argument_has_help() {
        let mut missing = Vec::new();
        let mut cmd = command();
        cmd.build();
        without_help(&cmd, "packfs", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:#?}");
    }

    #[test]
    fn umount_help_lists_only_what_umount_takes() {
        let mut cmd = command();
        cmd.build();
        let umount = cmd.find_subcommand_mut("umount").unwrap();
        let help = umount.render_long_help().to_string();
        assert!(
            !help.contains("--endpoint") && !help.contains("--range-size"),
            "{help}"
        );
        assert!(help.contains("MOUNTPOINT"), "{help}");
        // Nor do the commands that write shell completions or manual pages.
        for name in ["completions", "man"] {
            let help = cmd
                .find_subcommand_mut(name)
                .unwrap()
                .render_long_help()
                .to_string();
            assert!(!help.contains("--endpoint"), "{name}: {help}");
        }
        // Commands that read images still show them.
        let info = cmd
            .find_subcommand_mut("info")
            .unwrap()
            .render_long_help()
            .to_string();
        assert!(info.contains("--endpoint"), "{info}");
    }
}
