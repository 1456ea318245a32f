//! The one way baton writes a duration for people: `850ms`, `12s`, `3m04s`, `1h`, `7d`,
//! `365d06h`.
//!
//! Two units at most, the largest first, the smaller cut (not rounded up: a lease shown with
//! `59s` left has not a minute left) and zero-padded so that a column of them lines up; a
//! smaller unit that is zero is left out (`7d`, not `7d00h` nor "7days"). Days are the largest
//! unit: months and years have no fixed length, and a `--retain 365d` must read back as
//! `365d`, not "11months 30days 3h 50m 24s". What a person typed is quoted as typed where the
//! text is still at hand (the CLI's flag parser); this form is for every duration baton
//! computed or was handed as a number. It reads back through the CLI's duration flags.

const SECOND_MS: u64 = 1000;
const MINUTE_S: u64 = 60;
const HOUR_S: u64 = 60 * MINUTE_S;
const DAY_S: u64 = 24 * HOUR_S;

/// `ms` milliseconds for people (see the module's doc).
pub fn human_ms(ms: u64) -> String {
    let s = ms / SECOND_MS;
    let (big, big_unit, small, small_unit) = match s {
        0 => return format!("{ms}ms"),
        1..MINUTE_S => return format!("{s}s"),
        MINUTE_S..HOUR_S => (s / MINUTE_S, "m", s % MINUTE_S, "s"),
        HOUR_S..DAY_S => (s / HOUR_S, "h", s % HOUR_S / MINUTE_S, "m"),
        _ => (s / DAY_S, "d", s % DAY_S / HOUR_S, "h"),
    };
    if small == 0 {
        format!("{big}{big_unit}")
    } else {
        format!("{big}{big_unit}{small:02}{small_unit}")
    }
}

/// `duration` for people, as [`human_ms`] (whole milliseconds; saturating).
pub fn human(duration: std::time::Duration) -> String {
    human_ms(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        let day = 86_400_000;
        let cases: &[(u64, &str)] = &[
            (0, "0ms"),
            (850, "850ms"),
            (1_000, "1s"),
            (12_400, "12s"),
            (59_999, "59s"),
            (60_000, "1m"),
            (90_000, "1m30s"),
            (184_000, "3m04s"),
            (3_599_000, "59m59s"),
            (3_600_000, "1h"),
            (3_720_000, "1h02m"),
            (5_400_000, "1h30m"),
            (86_399_000, "23h59m"),
            (day, "1d"),
            (183_600_000, "2d03h"),
            (7 * day, "7d"),
            (365 * day, "365d"),
            // humantime's `1y`: 365.25 days.
            (31_557_600_000, "365d06h"),
            (3650 * day, "3650d"),
            (u64::MAX, "213503982334d14h"),
        ];
        for &(ms, written) in cases {
            assert_eq!(human_ms(ms), written, "{ms} ms");
        }
        assert_eq!(human(std::time::Duration::from_secs(7 * 86_400)), "7d");
        assert_eq!(human(std::time::Duration::MAX), human_ms(u64::MAX));
    }
}
