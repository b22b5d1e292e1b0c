//! The project describes what packfs is, not how it was made: no file git
//! tracks (docs, README, scripts, code comments, test names) names a numbered
//! work session, an issue of this project, a person, or a path outside the
//! repository. A reader of a benchmark wants its date and build commit, a
//! reader of a comment wants the reason, and neither can open a work
//! session's number, an entry of this project's tracker or a directory on
//! another machine.
//!
//! Flagged (case-insensitive unless said): `session N`, `sessions N`;
//! `this|previous|last|next|earlier|later|same|another|other session`
//! (but not "… session thread", FUSE's own word); `issue N`, `issue #N`,
//! `issues #N`; `(#N` (but not a Markdown anchor `](#1-…`); `#N's`; `#N`
//! after a little word such as "of", "in", "see", "from", "against";
//! "the project's lead"; `CEO` (case-sensitive); `/work/`; `../shared/`.
//! Upstream references in a sentence naming their project pass:
//! "squashfs-tools #238", "LitData #248", "ratarmount #71".

use std::process::Command;

/// Little words after which `#N` can only mean an issue of this project.
const BEFORE_HASH: &[&str] = &[
    "of", "in", "see", "from", "for", "by", "and", "against", "until", "since", "after", "before",
    "per", "with", "to", "on", "at", "closes", "fixes",
];

/// Words that make "X session" a reference to a work session.
const SESSION_WORDS: &[&str] = &[
    "this", "previous", "last", "next", "earlier", "later", "same", "another", "other",
];

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The word (letters, digits, `_`) that ends right before `end` in `s`,
/// after skipping spaces.
fn word_before(s: &[u8], mut end: usize) -> &[u8] {
    while end > 0 && s[end - 1] == b' ' {
        end -= 1;
    }
    let mut start = end;
    while start > 0 && is_word(s[start - 1]) {
        start -= 1;
    }
    &s[start..end]
}

/// Every start index of `needle` in `hay`.
fn find_all<'a>(hay: &'a [u8], needle: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
    (0..hay.len().saturating_sub(needle.len() - 1)).filter(move |&i| hay[i..].starts_with(needle))
}

fn digit_at(s: &[u8], i: usize) -> bool {
    s.get(i).is_some_and(u8::is_ascii_digit)
}

/// What in `line` names history, if anything.
pub(crate) fn flag(line: &str) -> Option<&'static str> {
    let lower = line.to_ascii_lowercase();
    let s = lower.as_bytes();
    let starts_word = |i: usize| i == 0 || !is_word(s[i - 1]);
    for i in find_all(s, b"session") {
        if !starts_word(i) {
            continue;
        }
        let mut j = i + "session".len();
        if s.get(j) == Some(&b's') {
            j += 1;
        }
        if s.get(j) == Some(&b' ') && digit_at(s, j + 1) {
            return Some("a numbered session");
        }
        let ends_word = s.get(j).is_none_or(|&c| !is_word(c));
        let w = word_before(s, i);
        if ends_word
            && i > 0
            && s[i - 1] == b' '
            && SESSION_WORDS.iter().any(|x| x.as_bytes() == w)
            && !s[j..].starts_with(b" thread")
        {
            return Some("a work session");
        }
    }
    for i in find_all(s, b"issue") {
        if !starts_word(i) {
            continue;
        }
        let j = i + "issue".len();
        let (j, plural) = if s.get(j) == Some(&b's') {
            (j + 1, true)
        } else {
            (j, false)
        };
        if s.get(j) != Some(&b' ') {
            continue;
        }
        let hash = s.get(j + 1) == Some(&b'#');
        let d = if hash { j + 2 } else { j + 1 };
        if digit_at(s, d) && (hash || !plural) {
            return Some("an issue number");
        }
    }
    for i in find_all(s, b"#") {
        if !digit_at(s, i + 1) {
            continue;
        }
        let mut e = i + 1;
        while digit_at(s, e) {
            e += 1;
        }
        if s.get(e).is_some_and(|&c| is_word(c)) {
            continue; // a hex colour or an identifier
        }
        if i > 0 && s[i - 1] == b'(' && !(i > 1 && s[i - 2] == b']') {
            return Some("an issue number");
        }
        if i > 0 && (is_word(s[i - 1]) || s[i - 1] == b'/') {
            continue;
        }
        if s[e..].starts_with(b"'s") || s[e..].starts_with("’s".as_bytes()) {
            return Some("an issue number");
        }
        if i > 0 && s[i - 1] == b' ' {
            let w = word_before(s, i);
            if BEFORE_HASH.iter().any(|x| x.as_bytes() == w) {
                return Some("an issue number");
            }
        }
    }
    if lower.contains("the project's lead") || lower.contains("the project’s lead") {
        return Some("a person");
    }
    let b = line.as_bytes();
    for i in find_all(b, b"CEO") {
        let before = i == 0 || !is_word(b[i - 1]);
        let after = b.get(i + 3).is_none_or(|&c| !is_word(c));
        if before && after {
            return Some("a person");
        }
    }
    if line.contains("/work/") || line.contains("../shared/") {
        return Some("a path outside the repository");
    }
    None
}

#[test]
fn the_matcher_flags_history_and_passes_the_rest() {
    // Built from pieces so that this file itself passes the scan below.
    let bad = [
        format!("measured in {} 12", "session"),
        format!("(run S5, fifth {}s 3 and 4)", "session"),
        format!("tried this {}: no gain", "session"),
        format!("as the previous {} found", "session"),
        format!("The {} #21 goals", "issue"),
        format!("see {} 14", "Issue"),
        format!("Shards ({}14)", "#"),
        format!("Against {}23's goals", "#"),
        format!("the goals of {}22", "#"),
        format!("asked by the {} lead", "project's"),
        format!("the {} said so", "CEO"),
        format!("built as in {}shared/corpora/README.md", "/work/"),
        format!("see {}notes/x.md", "../shared/"),
    ];
    for l in &bad {
        assert!(flag(l).is_some(), "not flagged: {l}");
    }
    let good = [
        "#[derive(Debug, Clone)]",
        "color: #1f77b4; fill: #ff0000",
        "a user was killed at 53 GB (squashfs-tools #238)",
        "users of LitData #248/#263 and HF datasets #8308 ask for it",
        "ratarmount #71 (100 tars 6-10x slower) is not reproduced",
        "fuser::Session::new, the FUSE session threads (4 to 16)",
        "the last session thread to leave closes the device",
        "| [static binary](#1-the-static-binary) | nothing |",
        "pread still issues 2-3x the device reads",
        "scratch files under /var/tmp, mounts under /tmp/$SLURM_JOB_ID",
        "run 124ba21 (2026-11-22): walk 0.03x raw",
        "See https://github.com/o/r/issues/12 for the upstream report",
        "CEOs and PROCEEDS are words; so is process",
    ];
    for l in good {
        assert_eq!(flag(l), None, "flagged: {l}");
    }
}

#[test]
fn no_tracked_file_names_sessions_issues_people_or_outside_paths() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
        .expect("git ls-files");
    assert!(out.status.success(), "git ls-files failed");
    let me = "tests/suite/history_words.rs";
    let mut hits = Vec::new();
    for path in out.stdout.split(|&b| b == 0).filter(|p| !p.is_empty()) {
        let path = String::from_utf8_lossy(path);
        if path == me || path.starts_with("target/") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(std::path::Path::new(root).join(&*path)) else {
            continue; // binary, or deleted in the work tree
        };
        for (n, line) in text.lines().enumerate() {
            if let Some(why) = flag(line) {
                hits.push(format!("{path}:{}: {why}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        hits.is_empty(),
        "history words (name the date and build commit, the reason, or a path in the \
         repository instead):\n{}",
        hits.join("\n")
    );
}
