//! OS errors in plain words: "input/output error", not "Input/output
//! error (os error 5)". Rust's `io::Error` prints the C library's phrase
//! followed by the errno, which tells a user nothing more; every message
//! packfs prints (errors, their causes, warnings) goes through [`plain_text`],
//! because the error may have been turned into text layers below.

/// One I/O error, in words.
pub fn plain(e: &std::io::Error) -> String {
    plain_text(&e.to_string())
}

/// `msg` with every "Phrase (os error N)" made "phrase".
pub fn plain_text(msg: &str) -> String {
    const MARK: &str = " (os error ";
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    while let Some(at) = rest.find(MARK) {
        let after = &rest[at + MARK.len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || !after[digits..].starts_with(')') {
            out.push_str(&rest[..at + MARK.len()]);
            rest = after;
            continue;
        }
        // The phrase starts after the last ": " (or at the start).
        let head = &rest[..at];
        let phrase_at = head.rfind(": ").map_or(0, |i| i + 2);
        out.push_str(&head[..phrase_at]);
        out.push_str(&lower_first(&head[phrase_at..]));
        rest = &after[digits + 1..];
    }
    out.push_str(rest);
    out
}

/// "Input/output error" -> "input/output error"; an acronym ("EOF") stays.
fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    match (c.next(), c.next()) {
        (Some(a), Some(b)) if a.is_ascii_uppercase() && !b.is_ascii_uppercase() => {
            let mut t = String::with_capacity(s.len());
            t.push(a.to_ascii_lowercase());
            t.push_str(&s[1..]);
            t
        }
        _ => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_read_as_words() {
        let e = std::io::Error::from_raw_os_error(libc::EIO);
        assert_eq!(plain(&e), "input/output error");
        assert_eq!(
            plain_text("img.sqfs: reading inode 3: Input/output error (os error 5)"),
            "img.sqfs: reading inode 3: input/output error"
        );
        assert_eq!(
            plain_text(
                "a: No such file or directory (os error 2); b: Is a directory (os error 21)"
            ),
            "a: no such file or directory; b: is a directory"
        );
        assert_eq!(plain_text("nothing (os error x)"), "nothing (os error x)");
    }
}
