//! Durations and times as people write them (`30s`, `15m`, `2026-12-24 16:00`), for the CLI's
//! flags and the server's bodies alike: every duration is bounded where it is parsed
//! (`--ttl`, `--poll`, `--retain`, `--not-before`…, a turn's `ttl`), and `--from`/`--until`
//! read a time.

use std::time::Duration;

use crate::poll::PollBounds;

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
