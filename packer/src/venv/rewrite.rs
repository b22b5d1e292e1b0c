//! Byte-level rewrites of what ties a venv file to its build path: path
//! occurrences in text, and script shebangs in both forms pip writes.
//!
//! Pure functions over bytes, so each rule is tested without a venv.

/// Bytes that continue a path component: an occurrence of the build path
/// followed by one of these is a longer, different path (`/tmp/venv2` is
/// not `/tmp/venv`), and one preceded by one of these or by `/` is the tail
/// of another path (`/x/tmp/venv`).
fn continues_name(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+' | b'~')
}

/// Positions of `path` in `text` that stand for that path itself (or a path
/// below it), not for a longer name or another path's tail.
pub fn path_occurrences(text: &[u8], path: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    if path.is_empty() || text.len() < path.len() {
        return out;
    }
    let mut i = 0;
    while i + path.len() <= text.len() {
        if &text[i..i + path.len()] == path {
            let before_ok = i == 0 || !(continues_name(text[i - 1]) || text[i - 1] == b'/');
            let after_ok = text.get(i + path.len()).is_none_or(|&b| !continues_name(b));
            if before_ok && after_ok {
                out.push(i);
                i += path.len();
                continue;
            }
        }
        i += 1;
    }
    out
}

/// `text` with every path occurrence of each of `from` replaced by `to`;
/// the count of replacements. Longer `from` paths are tried first so a
/// build path that is a prefix of another candidate cannot split it.
pub fn replace_paths(text: &[u8], from: &[Vec<u8>], to: &[u8]) -> (Vec<u8>, usize) {
    let mut order: Vec<&Vec<u8>> = from.iter().filter(|f| !f.is_empty()).collect();
    order.sort_by_key(|f| std::cmp::Reverse(f.len()));
    let mut cur = text.to_vec();
    let mut total = 0;
    for f in order {
        let hits = path_occurrences(&cur, f);
        if hits.is_empty() {
            continue;
        }
        total += hits.len();
        let mut next = Vec::with_capacity(cur.len() + hits.len() * to.len());
        let mut last = 0;
        for h in hits {
            next.extend_from_slice(&cur[last..h]);
            next.extend_from_slice(to);
            last = h + f.len();
        }
        next.extend_from_slice(&cur[last..]);
        cur = next;
    }
    (cur, total)
}

/// The longest `#!` line the packer writes directly. Linux reads up to 255
/// bytes of it (BINPRM_BUF_SIZE, since 5.1; 127 before), and pip and distlib
/// switch to the `/bin/sh` form above 127 on POSIX: do as they do, so the
/// script also runs on older kernels.
pub const MAX_SHEBANG: usize = 127;

/// How a script starts, as pip and venv write console scripts.
#[derive(Debug, PartialEq, Eq)]
pub enum Shebang<'a> {
    /// `#!/path/bin/python3 [args]`: the interpreter and its arguments.
    Direct { interp: &'a [u8], args: &'a [u8] },
    /// `#!/bin/sh` then `'''exec' "/path/bin/python3" "$0" "$@"` then
    /// `' '''`: what pip writes when the path is too long or has spaces.
    ShExec { interp: &'a [u8] },
    /// Anything else starting with `#!`.
    Other,
}

fn first_line(text: &[u8]) -> &[u8] {
    let end = text.iter().position(|&b| b == b'\n').unwrap_or(text.len());
    &text[..end]
}

/// Parses the start of a script (`None`: not a `#!` script).
pub fn shebang(text: &[u8]) -> Option<Shebang<'_>> {
    let line = first_line(text).strip_prefix(b"#!")?;
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let trimmed = line.trim_ascii();
    if trimmed == b"/bin/sh" {
        let rest = &text[first_line(text).len().min(text.len())..];
        let rest = rest.strip_prefix(b"\n").unwrap_or(rest);
        let second = first_line(rest);
        // '''exec' "/path/bin/python" "$0" "$@"   (or single quotes)
        if let Some(q) = second.strip_prefix(b"'''exec' ") {
            let quote = *q.first()?;
            if quote == b'"' || quote == b'\'' {
                let body = &q[1..];
                let end = body.iter().position(|&b| b == quote)?;
                return Some(Shebang::ShExec {
                    interp: &body[..end],
                });
            }
        }
        return Some(Shebang::Other);
    }
    let (interp, args) = match trimmed.iter().position(|b| b.is_ascii_whitespace()) {
        Some(p) => (&trimmed[..p], trimmed[p..].trim_ascii()),
        None => (trimmed, &b""[..]),
    };
    if interp.is_empty() {
        return Some(Shebang::Other);
    }
    Some(Shebang::Direct { interp, args })
}

/// Does `interp` look like a Python interpreter (`python`, `python3.11`)?
pub fn is_python(interp: &[u8]) -> bool {
    let name = interp.rsplit(|&b| b == b'/').next().unwrap_or(interp);
    name.starts_with(b"python") || name.starts_with(b"pypy")
}

/// Rewrites a script whose interpreter path names a build path so it names
/// `to` instead; `None` if the interpreter does not name a build path.
///
/// A direct shebang that would grow past [`MAX_SHEBANG`] bytes, or whose
/// interpreter path would contain a space, becomes the `/bin/sh` form (only
/// for Python, where the form is valid source); the rest of the script is
/// kept byte for byte.
pub fn rewrite_script(text: &[u8], from: &[Vec<u8>], to: &[u8]) -> Option<Vec<u8>> {
    match shebang(text)? {
        Shebang::Direct { interp, args } => {
            let (new_interp, n) = replace_paths(interp, from, to);
            if n == 0 {
                return None;
            }
            let line_len = first_line(text).len();
            let rest = &text[line_len..];
            let mut line = b"#!".to_vec();
            line.extend_from_slice(&new_interp);
            if !args.is_empty() {
                line.push(b' ');
                line.extend_from_slice(args);
            }
            let too_long = line.len() > MAX_SHEBANG || new_interp.contains(&b' ');
            let mut out = Vec::with_capacity(text.len() + to.len() + 32);
            if too_long && is_python(&new_interp) {
                out.extend_from_slice(b"#!/bin/sh\n'''exec' \"");
                out.extend_from_slice(&new_interp);
                out.push(b'"');
                if !args.is_empty() {
                    out.push(b' ');
                    out.extend_from_slice(args);
                }
                out.extend_from_slice(b" \"$0\" \"$@\"\n' '''");
            } else {
                out.extend_from_slice(&line);
            }
            out.extend_from_slice(rest);
            Some(out)
        }
        Shebang::ShExec { .. } => {
            // The path sits on the second line; the first stays /bin/sh.
            let (out, n) = replace_paths(text, from, to);
            (n > 0).then_some(out)
        }
        Shebang::Other => None,
    }
}

/// Is `to` usable as a mount path written into scripts: absolute, and free
/// of bytes that the quoting of activate scripts and the `/bin/sh` form
/// cannot carry.
pub fn check_mount_path(to: &[u8]) -> Result<(), String> {
    if !to.starts_with(b"/") {
        return Err("must be an absolute path".into());
    }
    if let Some(&b) = to
        .iter()
        .find(|&&b| matches!(b, b'"' | b'\'' | b'\\' | b'$' | b'`' | b'\n' | b'\r' | 0))
    {
        return Err(format!(
            "contains {:?}, which shell scripts cannot quote as the venv writes them",
            b as char
        ));
    }
    if to.len() > 1 && to.ends_with(b"/") {
        return Err("must not end with /".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<Vec<u8>> {
        vec![s.as_bytes().to_vec()]
    }

    #[test]
    fn only_whole_paths_are_replaced() {
        let t =
            b"A=/tmp/venv B=/tmp/venv/bin C=/tmp/venv2 D=/x/tmp/venv E=\"/tmp/venv\"\n/tmp/venv";
        let (out, n) = replace_paths(t, &v("/tmp/venv"), b"/opt/v");
        assert_eq!(n, 4);
        assert_eq!(
            out,
            b"A=/opt/v B=/opt/v/bin C=/tmp/venv2 D=/x/tmp/venv E=\"/opt/v\"\n/opt/v".to_vec()
        );
    }

    #[test]
    fn longer_build_path_wins_over_its_prefix() {
        let from = vec![b"/a".to_vec(), b"/a/b".to_vec()];
        // "/a/b" is replaced as a whole; "/a" alone too.
        let (out, n) = replace_paths(b"/a/b/bin /a/c", &from, b"/m");
        assert_eq!(out, b"/m/bin /m/c".to_vec());
        assert_eq!(n, 2);
    }

    #[test]
    fn shebang_forms_are_recognised() {
        assert_eq!(
            shebang(b"#!/tmp/v/bin/python3\nimport x\n"),
            Some(Shebang::Direct {
                interp: b"/tmp/v/bin/python3",
                args: b""
            })
        );
        assert_eq!(
            shebang(b"#!/tmp/v/bin/python -E -s\r\n"),
            Some(Shebang::Direct {
                interp: b"/tmp/v/bin/python",
                args: b"-E -s"
            })
        );
        let sh = b"#!/bin/sh\n'''exec' \"/long path/bin/python\" \"$0\" \"$@\"\n' '''\nimport x\n";
        assert_eq!(
            shebang(sh),
            Some(Shebang::ShExec {
                interp: b"/long path/bin/python"
            })
        );
        assert_eq!(shebang(b"#!/bin/sh\necho hi\n"), Some(Shebang::Other));
        assert_eq!(shebang(b"import x\n"), None);
    }

    #[test]
    fn direct_shebang_is_rewritten_and_the_body_kept() {
        let s = b"#!/tmp/v/bin/python3\n# -*- coding: utf-8 -*-\nimport sys\n";
        let out = rewrite_script(s, &v("/tmp/v"), b"/opt/venv").unwrap();
        assert_eq!(
            out,
            b"#!/opt/venv/bin/python3\n# -*- coding: utf-8 -*-\nimport sys\n".to_vec()
        );
        // Another interpreter's script is left alone.
        assert!(rewrite_script(b"#!/usr/bin/env python3\n", &v("/tmp/v"), b"/o").is_none());
    }

    #[test]
    fn a_shebang_too_long_for_the_kernel_becomes_the_sh_form() {
        let long = format!("/{}", "d".repeat(130));
        let s = b"#!/tmp/v/bin/python3\nimport sys\nprint(sys.argv)\n";
        let out = rewrite_script(s, &v("/tmp/v"), long.as_bytes()).unwrap();
        let want = format!(
            "#!/bin/sh\n'''exec' \"{long}/bin/python3\" \"$0\" \"$@\"\n' '''\nimport sys\nprint(sys.argv)\n"
        );
        assert_eq!(String::from_utf8(out.clone()).unwrap(), want);
        // And that form is recognised (and rewritten again) as pip's.
        assert!(matches!(shebang(&out), Some(Shebang::ShExec { .. })));
        let back = rewrite_script(&out, &[long.into_bytes()], b"/tmp/v").unwrap();
        assert!(back.starts_with(b"#!/bin/sh\n'''exec' \"/tmp/v/bin/python3\""));
    }

    #[test]
    fn pip_sh_form_is_rewritten_on_its_exec_line() {
        let s = b"#!/bin/sh\n'''exec' \"/tmp/v/bin/python3\" \"$0\" \"$@\"\n' '''\nimport x\n";
        let out = rewrite_script(s, &v("/tmp/v"), b"/opt/v").unwrap();
        assert_eq!(
            out,
            b"#!/bin/sh\n'''exec' \"/opt/v/bin/python3\" \"$0\" \"$@\"\n' '''\nimport x\n".to_vec()
        );
    }

    #[test]
    fn mount_paths_that_scripts_cannot_carry_are_refused() {
        assert!(check_mount_path(b"/opt/venv").is_ok());
        assert!(check_mount_path(b"/opt/my venv").is_ok());
        assert!(check_mount_path(b"opt/venv").is_err());
        assert!(check_mount_path(b"/opt/$HOME").is_err());
        assert!(check_mount_path(b"/opt/a\"b").is_err());
        assert!(check_mount_path(b"/opt/v/").is_err());
    }
}
