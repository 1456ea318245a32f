//! Freeze windows: `baton pause` stops new grants on a key or every key under a prefix
//! ("no deploys during the audit", "not on Friday after 16:00"), without touching the queue.
//!
//! A [`Freeze`] names its target (an exact key, a prefix ending in `/`, or `*` for every key),
//! why and who, and when it is in force: from when it was set (or `from`) until it is resumed
//! (or `until`), and, for a recurring one, only inside its [`Weekly`] window. Freezes live in
//! the store's settings document ([`crate::settings::Settings::freezes`]), never in a key's, so a
//! process reads them with the notification rules, from a copy at most one poll interval old:
//! a lock operation's round trips do not grow.
//!
//! The writer of a key decides the freeze in force with [`in_force`] on its wall clock and
//! hands it to `apply`, which records it in the document ([`crate::Doc::paused`]) and makes no
//! grant while it holds, except to the queue up to and including the last ticket that asked to
//! [override](crate::Enqueue::override_freeze) it, in order ([`crate::Doc::frozen_for`]).
//! Holders are not touched; waiters keep their places and read why from the document. Freezes
//! are judged on wall clocks (a few seconds of skew move a window's edges by as much): they
//! decide *when* grants may happen, never who holds, so no lease rule depends on them.
//!
//! Times are UTC milliseconds; a weekly window is in UTC or a fixed offset (`+02:00`): baton
//! carries no time-zone database, so a window in a zone with summer time is given in the offset
//! in force and moved by hand twice a year.

use serde::{Deserialize, Serialize};

use crate::limits::{self, InvalidInput};

/// Freezes a store keeps.
pub const FREEZES_MAX: usize = 100;
/// Ended freezes a store remembers, for `baton log`.
pub const FREEZES_REMEMBERED: usize = 32;
/// The longest text of a freeze's reason or of who set it.
pub const FREEZE_TEXT_MAX_BYTES: usize = 256;

const MINUTE_MS: u64 = 60_000;
const DAY_MS: u64 = 24 * 60 * MINUTE_MS;
const WEEK_MS: u64 = 7 * DAY_MS;
/// 1970-01-01 was a Thursday: three days after the Monday a week position counts from.
const EPOCH_WEEKDAY: u64 = 3;
const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// One freeze: no new grant on the keys it covers while it is in force.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Freeze {
    /// An exact key, a prefix ending in `/`, or `*` for every key.
    pub target: String,
    /// Why (shown on every waiting line).
    pub reason: String,
    /// Who set it (the CLI's context: user and host, or the CI job).
    pub by: String,
    /// When it was set (wall ms).
    pub set_wall_ms: u64,
    /// Not in force before this (wall ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_ms: Option<u64>,
    /// Not in force from this on (wall ms); none: until `baton resume`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<u64>,
    /// In force only inside this window of each week.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weekly: Option<Weekly>,
}

/// A window of each week: from `start` to `end` (minutes after Monday 00:00 in the window's
/// offset; `end` before `start` wraps over the week's end), at `offset_min` from UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Weekly {
    /// Minutes after Monday 00:00 when the window opens.
    pub start: u32,
    /// Minutes after Monday 00:00 when it closes.
    pub end: u32,
    /// The offset from UTC the times are in, in minutes (east positive).
    #[serde(default)]
    pub offset_min: i32,
}

/// The freeze in force on a key, as its document records it: why, who, since and until when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Paused {
    /// The freeze's target (the key, or a prefix that covers it).
    pub target: String,
    /// Why.
    pub reason: String,
    /// Who paused it.
    pub by: String,
    /// Since when this stretch of the freeze holds (wall ms).
    pub since_ms: u64,
    /// When it ends by itself (wall ms); none: at `baton resume`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<u64>,
}

impl Paused {
    /// Whether it still holds at `wall_ms` (a document read later may carry a freeze that has
    /// ended since it was written).
    pub fn holds_at(&self, wall_ms: u64) -> bool {
        self.until_ms.is_none_or(|until| wall_ms < until)
    }
}

/// A freeze that ended by `baton resume`, remembered for `baton log`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resumed {
    /// The freeze.
    pub freeze: Freeze,
    /// Who resumed it.
    pub by: String,
    /// When (wall ms).
    pub at_ms: u64,
}

impl Freeze {
    /// Checks what a caller gave: the target, the texts, the times.
    pub fn check(&self) -> Result<(), InvalidInput> {
        check_target(&self.target)?;
        for (what, text) in [("reason", &self.reason), ("who", &self.by)] {
            if text.len() > FREEZE_TEXT_MAX_BYTES || text.chars().any(char::is_control) {
                return Err(InvalidInput(format!(
                    "the freeze's {what} must be one line of at most {FREEZE_TEXT_MAX_BYTES} bytes"
                )));
            }
        }
        if self.reason.trim().is_empty() {
            return Err(InvalidInput(
                "a freeze needs a reason (--reason TEXT): it is shown to everyone waiting".into(),
            ));
        }
        if let (Some(from), Some(until)) = (self.from_ms, self.until_ms) {
            if until <= from {
                return Err(InvalidInput("--until must come after --from".into()));
            }
        }
        if let Some(weekly) = &self.weekly {
            weekly.check()?;
        }
        Ok(())
    }

    /// Whether it covers `key`.
    pub fn covers(&self, key: &str) -> bool {
        target_covers(&self.target, key)
    }

    /// If it is in force at `wall_ms`: since when this stretch holds and when it ends
    /// (`None`: not before a resume).
    pub fn stretch_at(&self, wall_ms: u64) -> Option<(u64, Option<u64>)> {
        if self.from_ms.is_some_and(|from| wall_ms < from) {
            return None;
        }
        if self.until_ms.is_some_and(|until| wall_ms >= until) {
            return None;
        }
        let since = self.from_ms.unwrap_or(self.set_wall_ms);
        let Some(weekly) = &self.weekly else {
            return Some((since, self.until_ms));
        };
        let (opened, closes) = weekly.stretch_at(wall_ms)?;
        let until = match self.until_ms {
            Some(until) => until.min(closes),
            None => closes,
        };
        Some((opened.max(since), Some(until)))
    }

    /// When it is next in force after `wall_ms` (now, if it is), or `None` if never again.
    pub fn next_start(&self, wall_ms: u64) -> Option<u64> {
        let mut at = wall_ms.max(self.from_ms.unwrap_or(0));
        if let Some(weekly) = &self.weekly {
            if weekly.stretch_at(at).is_none() {
                at = weekly.next_open(at);
            }
        }
        self.until_ms.is_none_or(|until| at < until).then_some(at)
    }

    /// Whether it can never be in force again after `wall_ms` (it is forgotten).
    pub fn is_over(&self, wall_ms: u64) -> bool {
        self.until_ms.is_some_and(|until| wall_ms >= until)
    }
}

impl Weekly {
    /// Checks the window: both ends within the week, not empty, the offset within a day.
    pub fn check(&self) -> Result<(), InvalidInput> {
        let week = (WEEK_MS / MINUTE_MS) as u32;
        if self.start >= week || self.end >= week || self.start == self.end {
            return Err(InvalidInput(
                "a weekly window needs two different times of the week, e.g. \"fri 16:00..mon 08:00\""
                    .into(),
            ));
        }
        if self.offset_min.unsigned_abs() >= 24 * 60 {
            return Err(InvalidInput(
                "a weekly window's offset must be less than a day from UTC".into(),
            ));
        }
        Ok(())
    }

    /// Where `wall_ms` falls in the week of this window's offset, in ms after Monday 00:00.
    fn position_ms(&self, wall_ms: u64) -> u64 {
        let local = i128::from(wall_ms) + i128::from(self.offset_min) * i128::from(MINUTE_MS);
        let shifted = local + i128::from(EPOCH_WEEKDAY * DAY_MS);
        shifted.rem_euclid(i128::from(WEEK_MS)) as u64
    }

    /// If `wall_ms` is inside the window: when this stretch opened and when it closes.
    fn stretch_at(&self, wall_ms: u64) -> Option<(u64, u64)> {
        let position = self.position_ms(wall_ms);
        let (start, end) = (
            u64::from(self.start) * MINUTE_MS,
            u64::from(self.end) * MINUTE_MS,
        );
        let inside = if start < end {
            (start..end).contains(&position)
        } else {
            position >= start || position < end
        };
        if !inside {
            return None;
        }
        let since_open = (position + WEEK_MS - start) % WEEK_MS;
        let to_close = (end + WEEK_MS - position) % WEEK_MS;
        Some((
            wall_ms.saturating_sub(since_open),
            wall_ms.saturating_add(to_close),
        ))
    }

    /// The next opening after `wall_ms`.
    fn next_open(&self, wall_ms: u64) -> u64 {
        let position = self.position_ms(wall_ms);
        let start = u64::from(self.start) * MINUTE_MS;
        let wait = (start + WEEK_MS - position) % WEEK_MS;
        wall_ms.saturating_add(if wait == 0 { WEEK_MS } else { wait })
    }

    /// Parses `DAY HH:MM..DAY HH:MM [ZONE]`: days `mon`…`sun` (or full names), 24-hour
    /// times, and `UTC` (the default), `Z` or a fixed offset `+HH:MM` / `-HH:MM`.
    pub fn parse(text: &str) -> Result<Weekly, InvalidInput> {
        let bad = |why: &str| {
            InvalidInput(format!(
                "bad weekly window {text:?}: {why}; write it as \"fri 16:00..mon 08:00\", \
                 optionally followed by UTC (the default) or an offset such as +02:00"
            ))
        };
        let (range, zone) = match text.trim().rsplit_once(char::is_whitespace) {
            Some((range, zone)) if !zone.contains(':') || zone.starts_with(['+', '-']) => {
                (range.trim(), Some(zone))
            }
            _ => (text.trim(), None),
        };
        let (from, to) = range.split_once("..").ok_or_else(|| bad("no `..`"))?;
        let start = parse_week_time(from).map_err(|why| bad(&why))?;
        let end = parse_week_time(to).map_err(|why| bad(&why))?;
        let offset_min = match zone {
            None => 0,
            Some(zone) => parse_offset(zone).map_err(|why| bad(&why))?,
        };
        let weekly = Weekly {
            start,
            end,
            offset_min,
        };
        weekly.check()?;
        Ok(weekly)
    }

    /// The window as [`Weekly::parse`] reads it.
    pub fn describe(&self) -> String {
        let time = |minutes: u32| {
            let day = DAYS[(minutes / (24 * 60)) as usize % 7];
            let (h, m) = ((minutes / 60) % 24, minutes % 60);
            format!("{day} {h:02}:{m:02}")
        };
        let zone = if self.offset_min == 0 {
            "UTC".to_owned()
        } else {
            let sign = if self.offset_min < 0 { '-' } else { '+' };
            let abs = self.offset_min.unsigned_abs();
            format!("{sign}{:02}:{:02}", abs / 60, abs % 60)
        };
        format!("{}..{} {zone}", time(self.start), time(self.end))
    }
}

fn parse_week_time(text: &str) -> Result<u32, String> {
    const FULL: [&str; 7] = [
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
    ];
    let text = text.trim();
    let (day, time) = text
        .split_once(char::is_whitespace)
        .ok_or_else(|| format!("`{text}` is not DAY HH:MM"))?;
    let day = day.to_ascii_lowercase();
    let index = DAYS
        .iter()
        .position(|d| *d == day)
        .or_else(|| FULL.iter().position(|d| *d == day))
        .ok_or_else(|| format!("`{day}` is not a day (mon, tue, … sun)"))?;
    let time = time.trim();
    let hm = time
        .split_once(':')
        .filter(|(h, m)| (1..=2).contains(&h.len()) && m.len() == 2)
        .and_then(|(h, m)| Some((h.parse::<u32>().ok()?, m.parse::<u32>().ok()?)));
    let (h, m) = match hm {
        Some((h, m)) if h < 24 && m < 60 => (h, m),
        _ => return Err(format!("`{time}` is not a time from 00:00 to 23:59")),
    };
    Ok(index as u32 * 24 * 60 + h * 60 + m)
}

fn parse_offset(zone: &str) -> Result<i32, String> {
    if zone.eq_ignore_ascii_case("utc") || zone.eq_ignore_ascii_case("z") {
        return Ok(0);
    }
    let (sign, rest) = match zone.split_at_checked(1) {
        Some(("+", rest)) => (1, rest),
        Some(("-", rest)) => (-1, rest),
        _ => return Err(format!("`{zone}` is not UTC or an offset such as +02:00")),
    };
    let (h, m) = rest.split_once(':').unwrap_or((rest, "0"));
    match (h.parse::<i32>(), m.parse::<i32>()) {
        (Ok(h), Ok(m)) if (0..24).contains(&h) && (0..60).contains(&m) => Ok(sign * (h * 60 + m)),
        _ => Err(format!("`{zone}` is not an offset such as +02:00")),
    }
}

/// Checks a freeze's target: `*`, a prefix ending in `/`, or a key.
pub fn check_target(target: &str) -> Result<(), InvalidInput> {
    if target == "*" {
        return Ok(());
    }
    match target.strip_suffix('/') {
        Some("") => Err(InvalidInput(
            "`/` alone is not a prefix: give one such as `deploy/`, or `*` for every key".into(),
        )),
        Some(prefix) => limits::check_key(prefix),
        None => limits::check_key(target),
    }
}

/// Whether `target` (see [`Freeze::target`]) covers `key`.
pub fn target_covers(target: &str, key: &str) -> bool {
    target == "*" || target == key || (target.ends_with('/') && key.starts_with(target))
}

/// The freeze in force on `key` at `wall_ms`, if any: among several, the one that holds
/// longest (one until a resume before any that ends by itself).
pub fn in_force(freezes: &[Freeze], key: &str, wall_ms: u64) -> Option<Paused> {
    freezes
        .iter()
        .filter(|freeze| freeze.covers(key))
        .filter_map(|freeze| {
            let (since_ms, until_ms) = freeze.stretch_at(wall_ms)?;
            Some(Paused {
                target: freeze.target.clone(),
                reason: freeze.reason.clone(),
                by: freeze.by.clone(),
                since_ms,
                until_ms,
            })
        })
        .max_by_key(|paused| (paused.until_ms.is_none(), paused.until_ms))
}
