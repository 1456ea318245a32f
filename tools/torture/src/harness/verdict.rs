//! After the clients: the sweep that lets every dead ticket lapse, the history read back, and
//! the takeover times.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use baton_torture::checker::{Entry, Violation};
use baton_torture::faults::Fault;
use baton_torture::Interval;
use serde_json::{json, Value};

use super::{baton_ok, Config, Event, KeyPlan};

/// Takeover times after holders were killed or paused.
pub(super) struct Takeovers {
    /// (ms, disturbed by a store or network fault at the same time).
    samples: Vec<(u64, bool)>,
    pub(super) late: Vec<Violation>,
}

impl Takeovers {
    pub(super) fn json(&self) -> Value {
        let mut clean: Vec<u64> = self
            .samples
            .iter()
            .filter(|(_, d)| !d)
            .map(|(ms, _)| *ms)
            .collect();
        clean.sort_unstable();
        let at = |q: f64| -> Option<u64> {
            if clean.is_empty() {
                return None;
            }
            let i = ((clean.len() as f64 - 1.0) * q).round() as usize;
            clean.get(i).copied()
        };
        json!({
            "samples": clean.len(),
            "disturbed": self.samples.len() - clean.len(),
            "p50": at(0.5),
            "p99": at(0.99),
            "max": clean.last(),
        })
    }
}

/// For every holder killed or paused at t (or client stopped before a reply): the time to the
/// next hold of the key by another client, against the bound: the longer of the TTL and the
/// claim window (a holder hit before its claim landed holds the key for the claim window), plus
/// one claim window
/// for each waiter killed (or stopped before a reply) in the window that could have been ahead,
/// plus the longest poll interval (with its jitter), plus the slack for starting a process. A
/// takeover during a store or network fault is reported but not held to the bound (the store
/// itself was away).
pub(super) fn takeovers(
    config: &Config,
    events: &[Event],
    intervals: &[Interval],
    history: &[Entry],
    key_of: &HashMap<&str, &str>,
) -> Takeovers {
    // A holder is picked while its hold is open and hit a moment later: if it released in
    // between, its ticket did not end by running out, and what follows is no takeover.
    let expired: HashSet<&str> = history
        .iter()
        .filter(|e| e.outcome == "expired")
        .map(|e| e.who.as_str())
        .collect();
    let mut by_start: Vec<&Interval> = intervals.iter().collect();
    by_start.sort_by_key(|i| i.start_ns);
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let mut result = Takeovers {
        samples: Vec::new(),
        late: Vec::new(),
    };
    for event in events.iter().filter(|e| e.fault.hits_holder()) {
        let victim = event.who.as_deref().unwrap_or("");
        if !expired.contains(victim) {
            continue;
        }
        let key = key_of.get(victim).copied().unwrap_or("");
        let Some(next) = by_start.iter().find(|i| {
            i.start_ns > event.at_ns && i.who != victim && baton_torture::pool_of(&i.key) == key
        }) else {
            continue;
        };
        let took_ns = next.start_ns - event.at_ns;
        let took_ms = took_ns / 1_000_000;
        let window_start = event.at_ns.saturating_sub(
            u64::try_from((config.waiter_ttl + config.claim()).as_nanos()).unwrap_or(0),
        );
        let window_end = next.start_ns;
        // A client stopped past its claim window while waiting ahead holds the queue up as a
        // dead waiter does: granted, it cannot claim.
        let dead_waiters = events
            .iter()
            .filter(|e| {
                matches!(e.fault, Fault::KillWaiter | Fault::StopBeforeReply)
                    && e.at_ns >= window_start
                    && e.at_ns <= window_end
                    && e.at_ns != event.at_ns
            })
            .count() as u32;
        let disturbed = events.iter().any(|e| {
            !e.fault.hits_holder()
                && e.fault != Fault::KillWaiter
                && e.at_ns <= window_end
                && e.at_ns
                    + u64::try_from(e.lasted.as_nanos()).unwrap_or(0)
                    + u64::try_from(config.ttl.as_nanos()).unwrap_or(0)
                    >= event.at_ns
        });
        // A holder hit right after its grant may not have claimed it yet (a library client
        // starts its work on a grant it saw unclaimed, and its heartbeat claims it a moment
        // later): its ticket then lives out the claim window, not the lease.
        let victim_phase = config.ttl.max(config.claim());
        let bound = victim_phase
            + config.claim() * dead_waiters
            + config.poll_max.mul_f64(1.2)
            + config.takeover_slack;
        result.samples.push((took_ms, disturbed));
        if !disturbed && took_ms > ms(bound) {
            result.late.push(Violation::LateTakeover {
                after: format!(
                    "{} {} ({dead_waiters} waiters killed around it)",
                    event.fault.name(),
                    victim
                ),
                took_ms,
                bound_ms: ms(bound),
            });
        }
    }
    result
}

/// After the run: waits (with `baton run` turns that take every permit) until every dead
/// ticket has lapsed, then reads the key's history and whatever is still live.
pub(super) fn sweep(
    config: &Config,
    key: &KeyPlan,
    log: &File,
) -> Result<(Vec<Entry>, Vec<String>), String> {
    let shape = key.shape_flags();
    let ttl = format!("{}ms", config.ttl.as_millis());
    // Held long enough that a dead holder's lease and a dead waiter's grant lapse while the
    // sweep holds: observation-judged stores need a full phase seen unchanged.
    let hold = config.ttl.max(config.waiter_ttl).max(config.claim()) + Duration::from_secs(1);
    let sleep = format!("{:.1}", hold.as_secs_f64());
    let give_up = Instant::now() + Duration::from_secs(180);
    let mut live = Vec::new();
    let mut round = 0;
    while Instant::now() < give_up {
        let sweepers: Vec<_> = (0..key.limit)
            .map(|i| {
                Command::new(&config.baton)
                    .args(["run", &key.name, "--quiet", "--store", &config.store])
                    .args(&shape)
                    .args(["--ttl", &ttl, "--timeout", "120s"])
                    .args(["--context", &format!("sweep-{round}-{i}")])
                    .args(["--", "sleep", &sleep])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(log.try_clone().map_or(Stdio::null(), Stdio::from))
                    .spawn()
            })
            .collect();
        for sweeper in sweepers.into_iter().flatten() {
            let mut sweeper = sweeper;
            let _ = sweeper.wait();
        }
        let status = baton_ok(config, &config.store, &["status", &key.name, "--json"], log)?;
        let status: Value = serde_json::from_str(&status)
            .map_err(|e| format!("cannot read `baton status --json`: {e}"))?;
        live = status["keys"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|k| k["key"] == key.name.as_str())
            .flat_map(|k| {
                let holders = k["holders"].as_array().cloned().unwrap_or_default();
                let queue = k["queue"].as_array().cloned().unwrap_or_default();
                // Turns in the backlog are only counted by status.
                let backlog = k["backlog"]
                    .as_u64()
                    .filter(|n| *n > 0)
                    .map(|n| json!({"id": format!("{n} in the backlog"), "context": ""}));
                holders.into_iter().chain(queue).chain(backlog)
            })
            .map(|t| {
                format!(
                    "{} ({})",
                    t["id"].as_str().unwrap_or("?"),
                    t["context"].as_str().unwrap_or("")
                )
            })
            .collect();
        if live.is_empty() {
            break;
        }
        round += 1;
    }
    let log_json = baton_ok(
        config,
        &config.store,
        &["log", &key.name, "--json", "-n", "10000"],
        log,
    )?;
    let mut history = Vec::new();
    for line in log_json.lines().filter(|l| !l.trim().is_empty()) {
        let entry: Value = serde_json::from_str(line)
            .map_err(|e| format!("cannot read a line of `baton log --json`: {e}: {line}"))?;
        if let Some(error) = entry.get("error") {
            return Err(format!("the history holds an unreadable entry: {error}"));
        }
        history.push(Entry {
            ticket: entry["id"].as_str().unwrap_or_default().to_owned(),
            who: entry["context"].as_str().unwrap_or_default().to_owned(),
            outcome: entry["outcome"].as_str().unwrap_or_default().to_owned(),
            fence: entry["fence"].as_u64(),
            arrival: entry["arrival"].as_u64().unwrap_or(0),
        });
    }
    if history.len() >= 10_000 {
        return Err(
            "the history has 10,000 entries or more, more than `baton log` prints: \
                    run fewer turns per key"
                .into(),
        );
    }
    Ok((history, live))
}
