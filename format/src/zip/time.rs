//! MS-DOS date and time, the timestamp every ZIP record carries: date =
//! `(year - 1980) << 9 | month << 5 | day`, time = `hour << 11 | minute << 5
//! | second / 2`, in an unspecified time zone (local time, by convention).

/// DOS date and time of `t` seconds since the epoch, in UTC (so that
/// output does not depend on the machine's time zone; the extended
/// timestamp carries the exact time anyway), clamped to DOS's 1980..=2107
/// range. Returns (date, time).
pub fn dos_datetime(t: u32) -> (u16, u16) {
    let secs = t as i64;
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    if y < 1980 {
        return DOS_1980_01_01;
    }
    if y > 2107 {
        return ((127 << 9) | (12 << 5) | 31, (23 << 11) | (59 << 5) | 29);
    }
    let date = (((y - 1980) << 9) | (m << 5) | d) as u16;
    let time = (((rem / 3600) << 11) | (((rem / 60) % 60) << 5) | ((rem % 60) / 2)) as u16;
    (date, time)
}

/// The earliest DOS date/time, 1980-01-01 00:00:00.
pub const DOS_1980_01_01: (u16, u16) = ((1 << 5) | 1, 0);

extern "C" {
    /// glibc/musl: seconds west of UTC of local standard time, set by tzset.
    static timezone: libc::c_long;
    fn tzset();
}

/// A DOS date and time, as local time, in seconds since the epoch, computed
/// exactly as unzip 6.0 does (`dos_to_unix_time` in fileio.c), so that a
/// mount shows what extraction sets: days counted by hand (with its quirk of
/// counting 2100 as a leap year in the years after it: dates from 2101 on
/// are one day later than a calendar would say), then shifted by the
/// standard-time offset and by one hour when that instant is in DST.
/// Out-of-range months are clamped (unzip would read outside its table).
pub fn dos_to_unix(date: u16, time: u16) -> i64 {
    let mut t = dos_as_utc(date, time);
    // SAFETY: tzset initialises `timezone`; localtime_r writes into `tm`.
    unsafe {
        tzset();
        #[allow(clippy::unnecessary_cast)] // c_long is i32 on 32-bit targets
        let west = timezone as i64;
        t += west;
        let mut tm: libc::tm = std::mem::zeroed();
        let tt = t as _;
        if !libc::localtime_r(&tt, &mut tm).is_null() && tm.tm_isdst > 0 {
            t -= 3600;
        }
    }
    t
}

/// unzip's day arithmetic, before the timezone shift.
pub fn dos_as_utc(date: u16, time: u16) -> i64 {
    const YDAYS: [i64; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yr = (date >> 9) as i64 + 10; // years since 1970
    let mo = (((date >> 5) & 0xF) as i64 - 1).clamp(0, 11);
    let dy = (date & 0x1F) as i64 - 1;
    let (hh, mm, ss) = (
        (time >> 11) as i64,
        ((time >> 5) & 0x3F) as i64,
        ((time & 0x1F) * 2) as i64,
    );
    let leap = (yr + 1970 - 1) / 4;
    let mut days = yr * 365 + (leap - 492) + YDAYS[mo as usize];
    if mo > 1 && (yr + 1970) % 4 == 0 && yr + 1970 != 2100 {
        days += 1;
    }
    days += dy;
    ((days * 24 + hh) * 60 + mm) * 60 + ss
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_times_read_back_as_utc() {
        // Even seconds in DOS's range survive the round trip exactly.
        for t in [315_532_800u32, 951_868_798, 1_600_000_000, 4_000_000_000] {
            let (d, tm) = dos_datetime(t);
            let back = dos_as_utc(d, tm);
            // unzip's 2100 quirk adds a day from 2101 on.
            let quirk = if t >= 4_133_980_800 { 86_400 } else { 0 };
            assert_eq!(back, t as i64 + quirk, "{t}");
        }
        assert_eq!(dos_datetime(1), DOS_1980_01_01);
    }
}
