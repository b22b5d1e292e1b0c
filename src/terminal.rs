//! Messages as a terminal gets them. Errors and warnings quote names from
//! the command line or from an image, which may hold escape sequences
//! (clear the screen, retitle the window, fake a line); on a terminal
//! every control character but a newline is shown as `?`, as `ls` shows
//! names. A pipe or a log file gets the text unchanged.

use std::borrow::Cow;
use std::io::IsTerminal;

/// `text` as shown on a terminal (`terminal`), else unchanged.
pub fn shown(text: &str, terminal: bool) -> Cow<'_, str> {
    if !terminal || !text.chars().any(|c| c.is_control() && c != '\n') {
        return text.into();
    }
    text.chars()
        .map(|c| if c.is_control() && c != '\n' { '?' } else { c })
        .collect::<String>()
        .into()
}

/// `text` as it should be written to stderr now. Asked at each write: a
/// mount daemon's stderr becomes its `--log` file after it starts.
pub fn for_stderr(text: &str) -> Cow<'_, str> {
    shown(text, std::io::stderr().is_terminal())
}
