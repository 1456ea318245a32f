//! Durations and times on the command line: every duration flag is bounded where it is parsed
//! (`--ttl`, `--poll`, `--retain`, `--not-before`…), and `--from`/`--until` read a time.

use std::time::Duration;

use baton_client::poll::PollBounds;

/// The largest value a duration flag takes, and how to write it in a message.
///
/// Every duration is bounded where it is parsed, so no later `Instant + Duration`,
/// `SystemTime + Duration` or conversion to milliseconds can overflow or wrap (humantime
/// reads `500000000000y` without complaint). Flags the core bounds take the core's limit;
/// the rest take [`LONGEST`], longer than any wait or hold anyone means.
#[derive(Clone, Copy, Debug)]
pub struct Bound {
    /// The largest value allowed.
    pub max: Duration,
    /// It, as a user would write it.
    pub written: &'static str,
}

const DAY_S: u64 = 24 * 3600;

/// Waits, holds, retries, grace periods, kv TTLs and times from now: 100 years (humantime's
/// year, 365.25 days).
pub const LONGEST: Bound = Bound {
    max: Duration::from_secs(36_525 * DAY_S),
    written: "100y",
};
/// Leases (`--ttl`, `--waiter-ttl`), `--max-run`, `--backoff` and `--min-left`: the core's
/// longest lease, 7 days.
pub const LEASE: Bound = Bound {
    max: Duration::from_millis(baton_core::limits::TTL_MAX_MS),
    written: "7d",
};
/// How often to look (`--poll`, `--interval`): an hour.
pub const INTERVAL: Bound = Bound {
    max: Duration::from_secs(3600),
    written: "1h",
};
/// `once --retain`: the core's longest retention, 3650 days.
pub const RETENTION: Bound = Bound {
    max: Duration::from_millis(baton_core::once::RETAIN_MAX_MS),
    written: "3650d",
};
/// `--not-before` and `--release-delay`: the core's longest delay of a job, 366 days.
pub const DELAY: Bound = Bound {
    max: Duration::from_millis(baton_core::job::DELAY_MAX_MS),
    written: "366d",
};

/// Parses `500ms`, `5s`, `15m`, `1h30m`, or a bare `0`, up to `bound`.
pub fn parse_duration_within(text: &str, bound: Bound) -> Result<Duration, String> {
    let duration = if text.trim() == "0" {
        Duration::ZERO
    } else {
        humantime::parse_duration(text.trim()).map_err(|e| {
            format!("`{text}` is not a duration ({e}); write it like 500ms, 5s, 15m or 1h30m")
        })?
    };
    if duration > bound.max {
        return Err(format!(
            "`{text}` is too long: the largest value allowed is {}",
            bound.written
        ));
    }
    Ok(duration)
}

/// A duration up to [`LONGEST`] (100 years).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    parse_duration_within(text, LONGEST)
}

/// A lease or a run's length, up to [`LEASE`] (7 days).
pub fn parse_lease(text: &str) -> Result<Duration, String> {
    parse_duration_within(text, LEASE)
}

/// An interval between looks, up to [`INTERVAL`] (1 hour).
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    parse_duration_within(text, INTERVAL)
}

/// A run-once retention, up to [`RETENTION`] (3650 days).
pub fn parse_retention(text: &str) -> Result<Duration, String> {
    parse_duration_within(text, RETENTION)
}

/// A job's delay, up to [`DELAY`] (366 days).
pub fn parse_delay(text: &str) -> Result<Duration, String> {
    parse_duration_within(text, DELAY)
}

/// Whole milliseconds of `duration`, saturating (a bounded flag never comes near).
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The instant `duration` from now; the far future, never a panic, if that overflows (a
/// bounded flag never does).
pub fn instant_after(duration: Duration) -> std::time::Instant {
    let now = std::time::Instant::now();
    now.checked_add(duration)
        .or_else(|| now.checked_add(LONGEST.max))
        .unwrap_or(now)
}

/// `--not-before`: a duration is bounded here (366 days); a time is judged against the clock
/// when the job is submitted.
pub fn check_not_before(text: &str) -> Result<String, String> {
    if is_duration(text) {
        parse_delay(text)?;
    }
    Ok(text.to_owned())
}

/// Whether `text` reads as a duration at all (however long): `0`, `5s`, `500000000000y`.
pub fn is_duration(text: &str) -> bool {
    text.trim() == "0" || humantime::parse_duration(text.trim()).is_ok()
}

/// Parses a time for `--from`/`--until`: RFC 3339 (`2026-12-24T16:00:00Z`, `2026-12-24
/// 16:00:00` in UTC, fractions allowed) or a duration from now (`2h`, up to 100 years); as
/// wall ms.
pub fn parse_time(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if is_duration(text) {
        let after = parse_duration(text)?;
        let now = std::time::SystemTime::now();
        let at = now.checked_add(after).ok_or_else(|| {
            format!("`{text}` from now is past what this machine's clock can count")
        })?;
        return Ok(wall_ms_of(at));
    }
    let with_seconds = |t: &str| {
        if t.len() == 16 {
            format!("{t}:00")
        } else {
            t.to_owned()
        }
    };
    humantime::parse_rfc3339_weak(&with_seconds(text))
        .map(wall_ms_of)
        .map_err(|_| {
            format!(
                "`{text}` is not a time; write it as 2026-12-24T16:00:00Z (UTC), \
                 2026-12-24 16:00 (UTC), or a duration from now such as 2h"
            )
        })
}

fn wall_ms_of(time: std::time::SystemTime) -> u64 {
    time.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Parses `--poll`: `MIN..MAX` (`250ms..5s`) or just `MAX` (the shortest interval then
/// defaults to 250ms, or MAX if shorter). Both within 10ms..1h, MIN no longer than MAX.
pub fn parse_poll(text: &str) -> Result<PollBounds, String> {
    let bounds = match text.split_once("..") {
        Some((min, max)) => PollBounds {
            min: parse_duration(min)?,
            max: parse_duration(max)?,
        },
        None => PollBounds::up_to(parse_duration(text)?),
    };
    let allowed = Duration::from_millis(10)..=Duration::from_secs(3600);
    if !allowed.contains(&bounds.min) || !allowed.contains(&bounds.max) {
        return Err(format!(
            "`{text}`: poll intervals must be between 10ms and 1h"
        ));
    }
    if bounds.min > bounds.max {
        return Err(format!(
            "`{text}`: the shortest interval is longer than the longest; write MIN..MAX, as in \
             250ms..5s"
        ));
    }
    Ok(bounds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_bounds() {
        let ms = Duration::from_millis;
        let ok = |text: &str| parse_poll(text).ok().map(|b| (b.min, b.max));
        assert_eq!(ok("250ms..5s"), Some((ms(250), ms(5000))));
        assert_eq!(ok("5s"), Some((ms(250), ms(5000))));
        assert_eq!(ok("100ms"), Some((ms(100), ms(100))));
        assert_eq!(ok("1s..1s"), Some((ms(1000), ms(1000))));
        for bad in [
            "5s..1s", "1ms", "1ms..1s", "1s..2h", "..", "1s..", "fast", "0",
        ] {
            assert!(parse_poll(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        let check = |text: &str, ms: Option<u64>| {
            assert_eq!(
                parse_duration(text).ok().map(|d| d.as_millis() as u64),
                ms,
                "{text}"
            );
        };
        check("500ms", Some(500));
        check("5s", Some(5_000));
        check("15m", Some(900_000));
        check("1h30m", Some(5_400_000));
        check("0", Some(0));
        check("0s", Some(0));
        check("5", None);
        check("soon", None);
        check("", None);
    }

    #[test]
    fn durations_are_bounded() {
        let ok = |text: &str, bound: Bound| parse_duration_within(text, bound).ok();
        assert_eq!(ok("36525d", LONGEST), Some(LONGEST.max));
        assert_eq!(ok("100y", LONGEST), Some(LONGEST.max));
        assert_eq!(ok("7d", LEASE), Some(Duration::from_secs(7 * DAY_S)));
        for (text, bound) in [
            ("36525d 1ns", LONGEST),
            ("500000000000y", LONGEST),
            ("18446744073709551615s", LONGEST),
            ("7d 1ms", LEASE),
            ("61m", INTERVAL),
            ("3651d", RETENTION),
            ("367d", DELAY),
        ] {
            let error = parse_duration_within(text, bound).expect_err(text);
            assert!(
                error.contains("largest value allowed") && error.contains(bound.written),
                "{text}: {error}"
            );
        }
        assert!(parse_time("100y").is_ok());
        assert!(parse_time("101y").is_err());
        assert!(parse_time("500000000000y").is_err());
        assert!(parse_time("2026-12-24T16:00:00Z").is_ok());
        assert!(check_not_before("367d").is_err());
        assert!(check_not_before("2099-01-01T00:00:00Z").is_ok());
    }

    /// Every flag that takes a duration or a time, with its command's path.
    fn duration_flags() -> Vec<(String, clap::Arg)> {
        use clap::CommandFactory;
        fn walk(path: String, cmd: &clap::Command, out: &mut Vec<(String, clap::Arg)>) {
            for arg in cmd.get_arguments() {
                let names = arg.get_value_names().unwrap_or_default();
                let timed = names.iter().any(|n| {
                    let n = n.as_str();
                    n.contains("DUR") || n.contains("TIME") || n == "MIN..MAX"
                });
                if timed {
                    out.push((path.clone(), arg.clone()));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(format!("{path} {}", sub.get_name()), sub, out);
            }
        }
        let mut out = Vec::new();
        let mut cmd = crate::cli::Cli::command();
        cmd.build();
        walk("baton".into(), &cmd, &mut out);
        out
    }

    /// Parses `--FLAG value` with `arg`'s own parser (alone in a command, so its command's
    /// other arguments are not needed): Ok, or the error clap prints.
    fn parse_flag(arg: &clap::Arg, value: &str) -> Result<(), String> {
        let long = arg.get_long().unwrap_or_default().to_owned();
        let alone = clap::Arg::new("flag")
            .long(long.clone())
            .value_name(arg.get_value_names().unwrap_or_default()[0].clone())
            .value_parser(arg.get_value_parser().clone());
        clap::Command::new("baton")
            .arg(alone)
            .try_get_matches_from(["baton".to_owned(), format!("--{long}={value}")])
            .map(drop)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn every_duration_flag_refuses_what_it_cannot_hold_by_name() {
        let flags = duration_flags();
        // The run, acquire, pause, kv set, submit, worker, once, check, status and serve flags.
        assert!(flags.len() >= 25, "found only {} flags", flags.len());
        for (path, arg) in &flags {
            let flag = format!("--{}", arg.get_long().unwrap_or_default());
            for huge in ["101y", "500000000000y", "18446744073709551615s", "1s..101y"] {
                if huge.contains("..") && arg.get_value_names().unwrap_or_default()[0] != "MIN..MAX"
                {
                    continue;
                }
                let error =
                    parse_flag(arg, huge).expect_err(&format!("{path} {flag} {huge} is refused"));
                assert!(
                    error.contains(&flag)
                        && (error.contains("largest value allowed") || error.contains("between")),
                    "{path} {flag} {huge}: the error names the flag and the bound: {error}"
                );
            }
            parse_flag(arg, "1s").unwrap_or_else(|e| panic!("{path} {flag} 1s: {e}"));
        }
    }

    proptest::proptest! {
        /// Whatever number and unit: a duration is read exactly or refused, never wrapped,
        /// and never past its bound; no flag's parser panics.
        #[test]
        fn durations_are_exact_or_refused(
            n in proptest::prop_oneof![
                proptest::prelude::any::<u64>(),
                0u64..100_000,
                proptest::prelude::Just(u64::MAX),
            ],
            unit in proptest::sample::select(vec![
                ("ns", 1u128),
                ("ms", 1_000_000),
                ("s", 1_000_000_000),
                ("m", 60_000_000_000),
                ("h", 3_600_000_000_000),
                ("d", 86_400_000_000_000),
                ("y", 31_557_600_000_000_000),
            ]),
        ) {
            let text = format!("{n}{}", unit.0);
            let exact_ns = u128::from(n) * unit.1;
            for bound in [LONGEST, LEASE, INTERVAL, RETENTION, DELAY] {
                match parse_duration_within(&text, bound) {
                    Ok(got) => {
                        proptest::prop_assert_eq!(got.as_nanos(), exact_ns, "{}", text);
                        proptest::prop_assert!(got <= bound.max);
                        proptest::prop_assert!(std::time::Instant::now().checked_add(got).is_some());
                        proptest::prop_assert!(u64::try_from(got.as_millis()).is_ok());
                    }
                    Err(_) => proptest::prop_assert!(
                        exact_ns > bound.max.as_nanos(),
                        "{} refused though within {}", text, bound.written
                    ),
                }
            }
            // No flag's parser panics on it (what each accepts is bounded as checked above).
            for (_, arg) in duration_flags() {
                let _ = parse_flag(&arg, &text);
            }
        }
    }
}
