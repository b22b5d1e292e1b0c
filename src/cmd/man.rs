//! `packfs man [--out DIR]`: manual pages generated from the clap
//! definitions, so they say exactly what `--help` says. Without `--out`,
//! packfs(1) goes to stdout (`packfs man | man -l -`); with it, packfs.1 and
//! one page per visible subcommand (packfs-pack.1, packfs-shards-verify.1,
//! ...) are written into DIR, which is created if missing.

use crate::args::cli::Cli;
use anyhow::Context;
use clap::CommandFactory;
use std::io::Write;
use std::path::{Path, PathBuf};

pub fn run(out: Option<&Path>) -> anyhow::Result<i32> {
    match out {
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(Cli::command()).render(&mut page)?;
            std::io::stdout().lock().write_all(&page)?;
        }
        Some(dir) => {
            for page in write_pages(dir)? {
                outln!("{}", page.display());
            }
        }
    }
    Ok(0)
}

/// Writes every page into `dir`; returns their paths, packfs.1 first.
pub fn write_pages(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // `help` is clap's, not ours: no page for it. build() gives each
    // subcommand its full name (packfs-pack), which becomes the page name.
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut pages = Vec::new();
    let mut todo = vec![cmd];
    while let Some(cmd) = todo.pop() {
        todo.extend(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
        let path = clap_mangen::Man::new(cmd)
            .generate_to(dir)
            .with_context(|| format!("writing a manual page into {}", dir.display()))?;
        pages.push(path);
    }
    pages[1..].sort();
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_page_for_the_command_and_each_visible_subcommand() {
        let dir = tempfile::tempdir().unwrap();
        let pages = write_pages(dir.path()).unwrap();
        let names: Vec<String> = pages
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names[0], "packfs.1");
        for n in ["packfs-pack.1", "packfs-shards-verify.1", "packfs-man.1"] {
            assert!(names.iter().any(|x| x == n), "{n} missing from {names:?}");
        }
        assert!(!names
            .iter()
            .any(|x| x.contains("unmount-watcher") || x.contains("help")));
        let pack = std::fs::read_to_string(dir.path().join("packfs-pack.1")).unwrap();
        assert!(pack.contains(".TH packfs-pack 1"), "{pack}");
        assert!(pack.contains("block\\-size"), "{pack}");
    }
}
