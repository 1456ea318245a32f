//! The rows of `peers`, the goals of issue 19 each row is held to, and the Markdown table.

use std::time::Duration;

use serde::Serialize;

use super::growth::Growth;
use super::scenarios::{Handoff, HotKey, Latency, Throughput};
use super::takeover::Takeover;
use super::whole::{Loops, Process};
use super::PeersReport;
use crate::process::{GOAL_RATIO_ETCDCTL, GOAL_RATIO_FLOCK};
use crate::setup::describe_load;

/// A figure: the median, and the p99 where the figure is a distribution of samples.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Fig {
    /// Median.
    pub median: f64,
    /// 99th percentile (nearest rank), where there are samples.
    pub p99: Option<f64>,
}

/// A goal and whether the run met it.
#[derive(Clone, Debug, Serialize)]
pub struct Goal {
    /// The goal in words (`≤ 1.5x`).
    pub text: String,
    /// Met in this run.
    pub met: bool,
}

impl Goal {
    fn at_most(ratio: f64, limit: f64) -> Goal {
        Goal {
            text: format!("≤ {limit}x"),
            met: ratio <= limit,
        }
    }

    fn at_least(ratio: f64, limit: f64) -> Goal {
        Goal {
            text: format!("≥ {limit}x"),
            met: ratio >= limit,
        }
    }

    /// Several goals of one row: all must hold.
    fn all(goals: Vec<Goal>) -> Option<Goal> {
        if goals.is_empty() {
            return None;
        }
        Some(Goal {
            text: goals
                .iter()
                .map(|g| g.text.as_str())
                .collect::<Vec<_>>()
                .join("; "),
            met: goals.iter().all(|g| g.met),
        })
    }
}

/// One line of the table: a scenario on a store, baton next to one peer.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// B1 … B8.
    pub scenario: &'static str,
    /// The store.
    pub store: String,
    /// What is measured, with its unit.
    pub measure: String,
    /// baton's figure.
    pub baton: Fig,
    /// The peer.
    pub peer: String,
    /// The peer's figure.
    pub peer_fig: Fig,
    /// baton's median / the peer's.
    pub ratio: f64,
    /// What the ratio (or a note) must be, where issue 19 sets a goal.
    pub goal: Option<Goal>,
    /// The other figures of the scenario.
    pub notes: String,
}

/// The median of some values (the mean of the middle two when even); 0 when empty.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

fn rate(values: &[f64]) -> Fig {
    Fig {
        median: median(values),
        p99: None,
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        f64::INFINITY
    } else {
        a / b
    }
}

/// B1: one client, uncontended. Goal on Redis and PostgreSQL: within 1.5x of the primitive.
pub fn b1(store: &str, peer: &str, baton: &Latency, other: &Latency) -> Row {
    let r = ratio(baton.cycle_ms.p50_ms, other.cycle_ms.p50_ms);
    Row {
        scenario: "B1",
        store: store.into(),
        measure: "acquire + release, 1 client, ms".into(),
        baton: Fig {
            median: baton.cycle_ms.p50_ms,
            p99: Some(baton.cycle_ms.p99_ms),
        },
        peer: peer.into(),
        peer_fig: Fig {
            median: other.cycle_ms.p50_ms,
            p99: Some(other.cycle_ms.p99_ms),
        },
        ratio: r,
        goal: matches!(store, "Redis" | "PostgreSQL").then(|| Goal::at_most(r, 1.5)),
        notes: format!(
            "requests/cycle: baton {:.2}, peer {:.2}",
            baton.requests_per_cycle, other.requests_per_cycle
        ),
    }
}

/// B9: B1 beside `idle` holders of other keys. No goal of its own: next to B1's row it shows
/// what a write costs the processes that do not wait for it.
pub fn b9(store: &str, peer: &str, baton: &Latency, other: &Latency, idle: usize) -> Row {
    Row {
        scenario: "B9",
        measure: format!(
            "acquire + release, 1 client, beside {idle} idle holders of other keys, ms"
        ),
        goal: None,
        ..b1(store, peer, baton, other)
    }
}

/// A row of B1 or B4 whose baton columns hold a floor (`floor`, not a lock: what the store's own
/// costs allow a lock built as baton's is), next to the row's peer. No goal: it shows how much
/// of a goal the store leaves reachable.
pub fn floor(row: Row, floor: &str) -> Row {
    Row {
        measure: format!("{}; the baton columns: {floor}", row.measure),
        goal: None,
        notes: row
            .notes
            .replace("requests/cycle: baton", "requests/cycle: floor"),
        ..row
    }
}

/// B2: N clients on N keys.
pub fn b2(store: &str, peer: &str, baton: &Throughput, other: &Throughput) -> Row {
    let (b, p) = (rate(&baton.per_round), rate(&other.per_round));
    Row {
        scenario: "B2",
        store: store.into(),
        measure: format!("cycles/s, {} clients on own keys", baton.clients),
        baton: b,
        peer: peer.into(),
        peer_fig: p,
        ratio: ratio(b.median, p.median),
        goal: None,
        notes: String::new(),
    }
}

/// B3: 16 clients on one key. Goals: no collapse (at least 0.8x one lone client's rate), at
/// most 3 requests per grant where the store pushes, no FIFO violation and no overlap for
/// baton.
pub fn b3(
    store: &str,
    peer: &str,
    baton: &HotKey,
    other: &HotKey,
    single_rate: Option<f64>,
    pushes: bool,
) -> Row {
    let (b, p) = (rate(&baton.per_round), rate(&other.per_round));
    let mut goals = Vec::new();
    let mut notes = Vec::new();
    if let Some(single) = single_rate {
        let collapse = ratio(b.median, single);
        let mut goal = Goal::at_least(collapse, 0.8);
        goal.text = format!("16 vs 1 client {}", goal.text);
        goals.push(goal);
        notes.push(format!("16 vs 1 client: {collapse:.2}x"));
    }
    if pushes {
        goals.push(Goal {
            text: "≤ 3 requests/grant".into(),
            met: baton.requests_per_grant <= 3.0,
        });
    }
    goals.push(Goal {
        text: "0 FIFO violations, 0 overlaps".into(),
        met: baton.fifo_violations == 0 && baton.overlaps == 0,
    });
    notes.push(format!(
        "requests/grant {:.1}{} vs {:.1}; FIFO violations {}{} vs {}{}; Jain {:.2} vs {:.2}; \
         overlaps {} vs {}; wait p99 {:.0} vs {:.0} ms",
        baton.requests_per_grant,
        baton.loads_per_grant.zip(baton.conflicts_per_grant).map_or(
            String::new(),
            |(loads, lost)| {
                let locked = baton.locked_per_grant.unwrap_or(0.0);
                format!(" ({loads:.1} loads, {lost:.1} lost writes, {locked:.1} locked writes)")
            }
        ),
        other.requests_per_grant,
        baton.fifo_violations,
        if baton.fifo_exact { "" } else { " (by time)" },
        other.fifo_violations,
        if other.fifo_exact { "" } else { " (by time)" },
        baton.fairness,
        other.fairness,
        baton.overlaps,
        other.overlaps,
        baton.wait_ms.p99_ms,
        other.wait_ms.p99_ms
    ));
    Row {
        scenario: "B3",
        store: store.into(),
        measure: "grants/s, 16 clients on 1 key".into(),
        baton: b,
        peer: peer.into(),
        peer_fig: p,
        ratio: ratio(b.median, p.median),
        goal: Goal::all(goals),
        notes: notes.join("; "),
    }
}

/// B4: release to the next holder. Goal where the peer is the store's own wake-up: 2x.
pub fn b4(
    store: &str,
    peer: &str,
    [baton, other]: [&Handoff; 2],
    settle: Duration,
    own_wake_up: bool,
) -> Row {
    let r = ratio(baton.handoff_ms.p50_ms, other.handoff_ms.p50_ms);
    Row {
        scenario: "B4",
        store: store.into(),
        measure: format!(
            "handoff, release → next holder, ms (queued {} ms before)",
            settle.as_millis()
        ),
        baton: Fig {
            median: baton.handoff_ms.p50_ms,
            p99: Some(baton.handoff_ms.p99_ms),
        },
        peer: peer.into(),
        peer_fig: Fig {
            median: other.handoff_ms.p50_ms,
            p99: Some(other.handoff_ms.p99_ms),
        },
        ratio: r,
        goal: own_wake_up.then(|| Goal::at_most(r, 2.0)),
        notes: format!(
            "of which the release call: {:.2} vs {:.2} ms, {:.2}{} vs {:.2} requests",
            baton.release_ms.p50_ms,
            other.release_ms.p50_ms,
            baton.release_requests,
            baton
                .release_loads_and_conflicts
                .map(|(loads, lost)| format!(" ({loads:.2} loads, {lost:.2} lost writes)"))
                .unwrap_or_default(),
            other.release_requests
        ),
    }
}

/// B5: takeover after SIGKILL of the holder.
pub fn b5(
    store: &str,
    peer: &str,
    baton: &Takeover,
    other: &Takeover,
    ttl: std::time::Duration,
) -> Row {
    Row {
        scenario: "B5",
        store: store.into(),
        measure: "takeover after kill -9 of the holder, ms".into(),
        baton: Fig {
            median: baton.takeover_ms.p50_ms,
            p99: Some(baton.takeover_ms.max_ms),
        },
        peer: peer.into(),
        peer_fig: Fig {
            median: other.takeover_ms.p50_ms,
            p99: Some(other.takeover_ms.max_ms),
        },
        ratio: ratio(baton.takeover_ms.p50_ms, other.takeover_ms.p50_ms),
        goal: None,
        notes: format!(
            "leases {}; p99 column: the largest of {}",
            humantime::format_duration(ttl),
            baton.takeover_ms.n
        ),
    }
}

/// B6: baton against itself, large case / small case. Goals: a try-acquire behind a queue of
/// [`super::growth::LONG_QUEUE`] tickets at most 2x one behind 10; history length and the
/// number of keys change nothing measurable (taken here as at most 1.25x: the medians of two
/// alternating samples differ by noise alone).
pub fn b6(store: &str, growth: &Growth) -> Row {
    let r = ratio(growth.large_ms.p50_ms, growth.small_ms.p50_ms);
    let longest = format!("{} tickets", super::growth::LONG_QUEUE);
    let goal = if growth.what.contains(&longest) {
        Some(Goal::at_most(r, 2.0))
    } else if growth.what.contains("history") || growth.what.contains("keys in the store") {
        Some(Goal::at_most(r, 1.25))
    } else {
        None
    };
    Row {
        scenario: "B6",
        store: store.into(),
        measure: format!("{}, ms", growth.what),
        baton: Fig {
            median: growth.large_ms.p50_ms,
            p99: Some(growth.large_ms.p99_ms),
        },
        peer: format!("baton, {}", growth.small),
        peer_fig: Fig {
            median: growth.small_ms.p50_ms,
            p99: Some(growth.small_ms.p99_ms),
        },
        ratio: r,
        goal,
        notes: String::new(),
    }
}

/// B7: one whole process. Goals: within 2x of `flock`, at most 0.3x of `etcdctl lock`
/// ([`GOAL_RATIO_FLOCK`], [`GOAL_RATIO_ETCDCTL`], which `process` reports by too). With
/// the floor (`baton-floor-run`) among the commands, two rows more without a goal: the floor
/// against `flock`, what no lock kept in a SQLite row can beat, and baton against the floor,
/// what baton could still win.
pub fn b7(figures: &[Process]) -> Vec<Row> {
    let Some((baton, others)) = figures.split_first() else {
        return Vec::new();
    };
    let is_floor = |p: &Process| p.command.contains("baton-floor-run");
    let floor = others.iter().find(|p| is_floor(p));
    let mut rows: Vec<Row> = others
        .iter()
        .filter(|other| !is_floor(other))
        .map(|other| {
            let etcdctl = other.command.contains("etcdctl");
            let goal = if etcdctl {
                GOAL_RATIO_ETCDCTL
            } else {
                GOAL_RATIO_FLOCK
            };
            let peer = if etcdctl { "etcdctl lock" } else { "flock(1)" };
            b7_row(baton, "", peer, other, Some(goal))
        })
        .collect();
    if let Some(floor) = floor {
        if let Some(flock) = others.iter().find(|p| p.command.starts_with("flock")) {
            rows.push(b7_row(floor, B7_FLOOR, "flock(1)", flock, None));
        }
        rows.push(b7_row(baton, "", "floor: baton-floor-run", floor, None));
    }
    rows
}

/// How B7's floor is named where it stands in the baton columns.
const B7_FLOOR: &str = "; the baton columns: floor: one SQLite write to take, CMD, one to give \
                        back, no runtime, no supervisor";

fn b7_row(baton: &Process, measured: &str, peer: &str, other: &Process, goal: Option<f64>) -> Row {
    let r = ratio(baton.ms.p50_ms, other.ms.p50_ms);
    Row {
        scenario: "B7",
        store: "SQLite".into(),
        measure: format!("whole process, `… -- true`, ms{measured}"),
        baton: Fig {
            median: baton.ms.p50_ms,
            p99: Some(baton.ms.p99_ms),
        },
        peer: peer.into(),
        peer_fig: Fig {
            median: other.ms.p50_ms,
            p99: Some(other.ms.p99_ms),
        },
        ratio: r,
        goal: goal.map(|g| Goal::at_most(r, g)),
        notes: String::new(),
    }
}

/// B8: loops of whole processes on one hot key: 16 loops of baton against one loop of it
/// (≥ 1x) and against 16 loops of `flock` (≥ 0.5x); where 16 loops of B7's floor ran too, two
/// rows more without a goal: the floor against `flock`, and baton against the floor.
pub fn b8(figures: &[Loops]) -> Vec<Row> {
    let [sixteen, one, flock, rest @ ..] = figures else {
        return Vec::new();
    };
    let sqlite =
        |ours, measured, peer, other, goal| b8_row("SQLite", ours, measured, peer, other, goal);
    let mut rows = vec![
        sqlite(sixteen, "", "baton run, 1 loop", one, Some(1.0)),
        sqlite(sixteen, "", "flock(1), 16 loops", flock, Some(0.5)),
    ];
    if let Some(floor) = rest.first() {
        rows.push(sqlite(floor, B8_FLOOR, "flock(1), 16 loops", flock, None));
        rows.push(sqlite(
            sixteen,
            "",
            "floor: baton-floor-run, 16 loops",
            floor,
            None,
        ));
    }
    rows
}

/// B8 on etcd: 16 loops of `baton run` against one loop of it (≥ 1x: a queue must not make a
/// hot key slower than no contention), and against 16 loops of `etcdctl lock` on a key of its
/// own, shown without a goal (the issue sets none; B7 holds one process of each to a ratio).
pub fn b8_etcd(figures: &[Loops]) -> Vec<Row> {
    let [sixteen, one, etcdctl] = figures else {
        return Vec::new();
    };
    vec![
        b8_row("etcd", sixteen, "", "baton run, 1 loop", one, Some(1.0)),
        b8_row("etcd", sixteen, "", "etcdctl lock, 16 loops", etcdctl, None),
    ]
}

/// How B8's floor is named where it stands in the baton columns: B7's floor, looping. It has
/// no queue (a taken key is overwritten), so its loops never wait: the least CPU a turn of a
/// lock kept in a SQLite row and run as its own process could cost.
const B8_FLOOR: &str = "; the baton columns: floor: baton-floor-run, 16 loops, no queue";

fn b8_row(
    store: &str,
    ours: &Loops,
    measured: &str,
    peer: &str,
    other: &Loops,
    goal: Option<f64>,
) -> Row {
    let (b, p) = (rate(&ours.per_round), rate(&other.per_round));
    let r = ratio(b.median, p.median);
    Row {
        scenario: "B8",
        store: store.into(),
        measure: format!("turns/s, 16 loops of `baton run hk -- true`{measured}"),
        baton: b,
        peer: peer.into(),
        peer_fig: p,
        ratio: r,
        goal: goal.map(|g| Goal::at_least(r, g)),
        notes: String::new(),
    }
}

/// CPUs and model, from /proc (a virtual machine's model name is what its host says).
pub fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name"))
        .and_then(|rest| rest.split(':').nth(1))
        .map_or("unknown", str::trim)
        .to_string();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cpus} CPUs, {model}")
}

fn cell(value: Option<f64>) -> String {
    match value {
        None => "–".into(),
        Some(v) if v >= 100.0 => format!("{v:.0}"),
        Some(v) if v >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
    }
}

/// Prints the report as a Markdown table.
pub fn print(report: &PeersReport, out: &mut String) {
    outln!(
        out,
        "Machine: {}; load average (1 min) {} at the start, {} at the end.\n",
        report.machine,
        describe_load(report.load_average_1m.0),
        describe_load(report.load_average_1m.1)
    );
    outln!(out,
        "| | store | measure | baton p50 | baton p99 | peer | peer p50 | peer p99 | baton/peer | goal | notes |"
    );
    outln!(out, "|---|---|---|---:|---:|---|---:|---:|---:|---|---|");
    for row in &report.rows {
        let goal = row.goal.as_ref().map_or(String::new(), |g| {
            format!("{} {}", g.text, if g.met { "met" } else { "**not met**" })
        });
        outln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.2}x | {} | {} |",
            row.scenario,
            row.store,
            row.measure,
            cell(Some(row.baton.median)),
            cell(row.baton.p99),
            row.peer,
            cell(Some(row.peer_fig.median)),
            cell(row.peer_fig.p99),
            row.ratio,
            goal,
            row.notes
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn goals() {
        assert!(Goal::at_most(1.4, 1.5).met);
        assert!(!Goal::at_most(1.6, 1.5).met);
        assert!(Goal::at_least(0.5, 0.5).met);
        let both =
            Goal::all(vec![Goal::at_most(1.0, 2.0), Goal::at_least(0.1, 0.5)]).expect("two goals");
        assert!(!both.met);
        assert_eq!(both.text, "≤ 2x; ≥ 0.5x");
    }
}
