//! Times as people read them in listings: local time, minutes, like
//! `unsquashfs -lls` (`2026-11-23 18:51`), rather than raw epoch seconds.

/// `secs` since the epoch as local `YYYY-MM-DD HH:MM` (with seconds when
/// `with_seconds`); the number itself if the C library cannot convert it.
pub fn format(secs: i64, with_seconds: bool) -> String {
    let t = secs as _;
    // SAFETY: localtime_r writes into the zeroed struct we own; strftime
    // writes at most buf.len() bytes into buf and NUL-terminates.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return secs.to_string();
        }
        let fmt = if with_seconds {
            c"%Y-%m-%d %H:%M:%S %Z"
        } else {
            c"%Y-%m-%d %H:%M"
        };
        let mut buf = [0u8; 64];
        let n = libc::strftime(buf.as_mut_ptr().cast(), buf.len(), fmt.as_ptr(), &tm);
        if n == 0 {
            return secs.to_string();
        }
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }
}

#[cfg(test)]
mod tests {
    extern "C" {
        fn tzset();
    }

    #[test]
    fn dates_in_utc() {
        // SAFETY: tests in this binary do not read TZ concurrently with
        // anything that cares; tzset re-reads it.
        unsafe {
            std::env::set_var("TZ", "UTC");
            tzset();
        }
        assert_eq!(super::format(1795427936, false), "2026-11-23 09:58");
        assert_eq!(super::format(0, true), "1970-01-01 00:00:00 UTC");
        assert_eq!(super::format(-86400, false), "1969-12-31 00:00");
    }
}
