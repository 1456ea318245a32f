//! The checker: every violation the records show, from the records alone.
//!
//! It is given what the run promised (each key's limit, and whether it is a mutex whose fences
//! must order its holds), every accepted [`Interval`], and every ticket's enqueue and outcomes,
//! and recomputes everything: it does not trust the resource's rejections, the store, or the
//! clients. An empty list is the only passing result.

use std::collections::{BTreeMap, HashMap};

use crate::{Interval, Mode};

/// What a key promised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeySpec {
    /// Normal holders at once, at most.
    pub limit: u32,
    /// A mutex: holds must not overlap and fences must rise in the order holds began.
    pub fenced: bool,
}

/// One broken promise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// An interval on a key the run did not declare.
    UnknownKey {
        /// The key.
        key: String,
    },
    /// More normal holders at once than the key's limit (on a mutex: two holds overlapping).
    OverLimit {
        /// The key.
        key: String,
        /// When it happened (ns).
        at_ns: u64,
        /// Who held then.
        holders: Vec<String>,
    },
    /// A shared holder beside a normal one.
    SharedBesideNormal {
        /// The key.
        key: String,
        /// When it happened (ns).
        at_ns: u64,
        /// Who held then.
        holders: Vec<String>,
    },
    /// On a mutex, a hold that began later carries a fence not above an earlier one's.
    FenceNotRising {
        /// The key.
        key: String,
        /// The earlier hold: ticket and fence.
        earlier: (String, u64),
        /// The later hold: ticket and fence.
        later: (String, u64),
    },
    /// A ticket that ended more than once, or a process with more than one ticket.
    Outcomes {
        /// The ticket.
        ticket: String,
        /// The outcomes recorded for it.
        outcomes: Vec<String>,
    },
    /// A ticket that never ended, or a process whose ticket vanished.
    Lost {
        /// The ticket, or the process when its ticket is unknown.
        ticket: String,
        /// What shows it.
        why: String,
    },
    /// A hold used another fence than its ticket's history records.
    FenceMismatch {
        /// The ticket.
        ticket: String,
        /// The fence the holder was given.
        used: u64,
        /// The fences its history entries record.
        recorded: Vec<Option<u64>>,
    },
    /// Granted before a ticket that arrived earlier: the queue was jumped.
    GrantOutOfOrder {
        /// The ticket granted first: id and arrival.
        earlier: (String, u64),
        /// The ticket granted next, which arrived before it.
        later: (String, u64),
    },
    /// A holder that was never paused had a write refused by the fence: its lease ended while
    /// it still ran (`baton run` must stop its command first, a library client must stop at
    /// the heartbeat's word).
    FencedOffUnpaused {
        /// The process.
        who: String,
        /// What the resource said.
        why: String,
    },
    /// A hold began while a process was stopped inside SQLite's write transaction, when no
    /// grant could be written.
    HeldWhileStopped {
        /// The process that held.
        who: String,
        /// The process that was stopped.
        stopped: String,
    },
    /// A job that did not end as its command and the faults allow: ended twice, ran after its
    /// recorded success, queued again under a reused id, lost, or dead with attempts to spare.
    Job {
        /// The job's key and id (`KEY JOB_ID`).
        job: String,
        /// What the records show.
        why: String,
    },
    /// A run-once key whose command ran again after a recorded success, or a caller told of a
    /// success nobody recorded.
    Once {
        /// The key.
        key: String,
        /// What the records show.
        why: String,
    },
    /// A shared value that lost an increment its writer was told had landed, or applied one
    /// twice.
    Value {
        /// The value's name.
        name: String,
        /// What the records show.
        why: String,
    },
    /// A holder died or paused and the next grant came later than the bound allows.
    LateTakeover {
        /// What happened to the holder, and to whom.
        after: String,
        /// How long the next grant took (ms).
        took_ms: u64,
        /// The bound (ms).
        bound_ms: u64,
    },
}

/// Every violation among `intervals` of keys described by `specs`.
pub fn check_intervals(specs: &HashMap<String, KeySpec>, intervals: &[Interval]) -> Vec<Violation> {
    let mut by_key: BTreeMap<&str, Vec<&Interval>> = BTreeMap::new();
    for interval in intervals {
        by_key.entry(&interval.key).or_default().push(interval);
    }
    let mut violations = Vec::new();
    for (key, mut holds) in by_key {
        let Some(spec) = specs.get(key) else {
            violations.push(Violation::UnknownKey {
                key: key.to_owned(),
            });
            continue;
        };
        holds.sort_by_key(|i| (i.start_ns, i.end_ns));
        violations.extend(sweep(key, spec, &holds));
        if spec.fenced {
            for pair in holds.windows(2) {
                let (earlier, later) = (pair[0], pair[1]);
                if later.fence <= earlier.fence {
                    violations.push(Violation::FenceNotRising {
                        key: key.to_owned(),
                        earlier: (earlier.ticket.clone(), earlier.fence),
                        later: (later.ticket.clone(), later.fence),
                    });
                }
            }
        }
    }
    violations
}

/// Walks the holds of one key in time order and reports each moment the holders break the
/// limit or mix modes. Intervals are half-open: one ending when another begins do not overlap.
fn sweep(key: &str, spec: &KeySpec, holds: &[&Interval]) -> Vec<Violation> {
    // (time, 0 = end / 1 = begin, index): ends sort before begins at the same instant.
    let mut events: Vec<(u64, u8, usize)> = Vec::new();
    for (index, hold) in holds.iter().enumerate() {
        if hold.end_ns > hold.start_ns {
            events.push((hold.start_ns, 1, index));
            events.push((hold.end_ns, 0, index));
        }
    }
    events.sort_unstable();
    let limit = if spec.fenced { 1 } else { spec.limit };
    let mut active: Vec<usize> = Vec::new();
    let mut violations = Vec::new();
    for (at_ns, kind, index) in events {
        if kind == 0 {
            active.retain(|&a| a != index);
            continue;
        }
        active.push(index);
        let normal = active
            .iter()
            .filter(|&&a| holds[a].mode == Mode::Normal)
            .count();
        let shared = active.len() - normal;
        let holders = || active.iter().map(|&a| holds[a].ticket.clone()).collect();
        if normal > limit as usize {
            violations.push(Violation::OverLimit {
                key: key.to_owned(),
                at_ns,
                holders: holders(),
            });
        }
        if normal > 0 && shared > 0 {
            violations.push(Violation::SharedBesideNormal {
                key: key.to_owned(),
                at_ns,
                holders: holders(),
            });
        }
    }
    violations
}

/// How a client process of the run ended, as the harness saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// It exited by itself with this status (`None`: killed by a signal it did not get from
    /// the harness).
    Exited(Option<i32>),
    /// The harness killed it (`kill -9`): it may have died before enqueuing.
    Killed,
}

/// One client process: its name (`cC-rR`, also its ticket's context) and how it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Process {
    /// `cC-rR`.
    pub who: String,
    /// How it ended.
    pub ending: Ending,
}

/// One entry of a key's history, as `baton log --json` printed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The ticket's id.
    pub ticket: String,
    /// Its context: the process that enqueued it.
    pub who: String,
    /// How it ended (`succeeded`, `expired`, ...).
    pub outcome: String,
    /// The fence it held under, if it was granted.
    pub fence: Option<u64>,
    /// Its arrival number within the key.
    pub arrival: u64,
}

/// Every violation of "every ticket ended in exactly one outcome, and grants followed the
/// queue", from the key's history after the run, the processes that ran, the holds the
/// resource accepted and the tickets still live once every dead one must have lapsed:
///
/// - a ticket with two entries, or a process with two tickets, is a duplicate;
/// - a process that took its turn (exit 0) without an entry, a process that held
///   the key at the resource without an entry, and a ticket still live are lost;
/// - a hold whose fence is not the one its process's entry records is a mismatch;
/// - granted tickets in fence order (the order grants were made) must arrive in increasing
///   order: the queue is first come, first served, so a later arrival granted first jumped it.
///
/// Entries whose context is not a process of the run (`sweep`, say) are ignored, but count as
/// the only entry of their ticket.
pub fn check_history(
    processes: &[Process],
    history: &[Entry],
    intervals: &[Interval],
    still_live: &[String],
) -> Vec<Violation> {
    let mut violations = Vec::new();
    let mut by_ticket: BTreeMap<&str, Vec<&Entry>> = BTreeMap::new();
    let mut by_who: BTreeMap<&str, Vec<&Entry>> = BTreeMap::new();
    for entry in history {
        by_ticket.entry(&entry.ticket).or_default().push(entry);
        by_who.entry(&entry.who).or_default().push(entry);
    }
    for (ticket, entries) in &by_ticket {
        if entries.len() > 1 {
            violations.push(Violation::Outcomes {
                ticket: (*ticket).to_owned(),
                outcomes: entries.iter().map(|e| e.outcome.clone()).collect(),
            });
        }
    }
    for process in processes {
        let entries = by_who
            .get(process.who.as_str())
            .map_or(&[][..], Vec::as_slice);
        if entries.len() > 1 {
            violations.push(Violation::Outcomes {
                ticket: format!("the tickets of {}", process.who),
                outcomes: entries
                    .iter()
                    .map(|e| format!("{} {}", e.ticket, e.outcome))
                    .collect(),
            });
        }
        // Exit 0 is a turn taken and released; any other end may have come before the enqueue
        // (a store that refused the connection, a kill): its ticket, if it had one, is checked
        // through its hold and through what is still live.
        if entries.is_empty() && process.ending == Ending::Exited(Some(0)) {
            violations.push(Violation::Lost {
                ticket: process.who.clone(),
                why: "the process took its turn (exit 0) and its ticket has no history".into(),
            });
        }
    }
    // A hold names its process; the process's one entry must record the hold's fence (the
    // holder's ticket name at the resource may be its secret token, never stored).
    let mut seen = HashMap::new();
    for interval in intervals {
        if seen.insert(interval.who.as_str(), ()).is_some() {
            continue;
        }
        match by_who.get(interval.who.as_str()) {
            None => violations.push(Violation::Lost {
                ticket: interval.who.clone(),
                why: format!(
                    "it held the key with fence {} and its ticket has no history",
                    interval.fence
                ),
            }),
            Some(entries) => {
                if entries.iter().any(|e| e.fence != Some(interval.fence)) {
                    violations.push(Violation::FenceMismatch {
                        ticket: interval.who.clone(),
                        used: interval.fence,
                        recorded: entries.iter().map(|e| e.fence).collect(),
                    });
                }
            }
        }
    }
    for ticket in still_live {
        violations.push(Violation::Lost {
            ticket: ticket.clone(),
            why: "still live after every dead ticket had to lapse".to_owned(),
        });
    }
    let mut granted: Vec<&Entry> = by_ticket
        .values()
        .filter_map(|entries| entries.first().copied())
        .filter(|e| e.fence.is_some())
        .collect();
    granted.sort_by_key(|e| e.fence);
    for pair in granted.windows(2) {
        let (earlier, later) = (pair[0], pair[1]);
        if later.arrival <= earlier.arrival && earlier.arrival != 0 {
            violations.push(Violation::GrantOutOfOrder {
                earlier: (earlier.ticket.clone(), earlier.arrival),
                later: (later.ticket.clone(), later.arrival),
            });
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(key: &str, ticket: &str, fence: u64, mode: Mode, start: u64, end: u64) -> Interval {
        Interval {
            key: key.to_owned(),
            ticket: ticket.to_owned(),
            who: format!("who-{ticket}"),
            fence,
            mode,
            start_ns: start,
            end_ns: end,
        }
    }

    fn specs() -> HashMap<String, KeySpec> {
        HashMap::from([
            (
                "m".to_owned(),
                KeySpec {
                    limit: 1,
                    fenced: true,
                },
            ),
            (
                "s".to_owned(),
                KeySpec {
                    limit: 2,
                    fenced: false,
                },
            ),
        ])
    }

    #[test]
    fn holds_one_after_another_pass_even_when_they_touch() {
        let holds = [
            hold("m", "a", 1, Mode::Normal, 0, 10),
            hold("m", "b", 2, Mode::Normal, 10, 20),
            hold("m", "c", 3, Mode::Normal, 25, 30),
        ];
        assert_eq!(check_intervals(&specs(), &holds), []);
    }

    #[test]
    fn overlapping_holds_on_a_mutex_are_caught_with_their_names() {
        let holds = [
            hold("m", "a", 1, Mode::Normal, 0, 10),
            hold("m", "b", 2, Mode::Normal, 9, 20),
        ];
        assert_eq!(
            check_intervals(&specs(), &holds),
            [Violation::OverLimit {
                key: "m".into(),
                at_ns: 9,
                holders: vec!["a".into(), "b".into()],
            }]
        );
    }

    #[test]
    fn a_fence_that_does_not_rise_is_caught_even_without_overlap() {
        let holds = [
            hold("m", "a", 5, Mode::Normal, 0, 10),
            hold("m", "b", 5, Mode::Normal, 11, 20),
            hold("m", "c", 4, Mode::Normal, 21, 30),
        ];
        let violations = check_intervals(&specs(), &holds);
        assert_eq!(violations.len(), 2, "{violations:?}");
        assert!(violations
            .iter()
            .all(|v| matches!(v, Violation::FenceNotRising { .. })));
    }

    #[test]
    fn a_semaphore_holds_its_limit_and_no_more() {
        let two = [
            hold("s", "a", 1, Mode::Normal, 0, 10),
            hold("s", "b", 2, Mode::Normal, 1, 10),
        ];
        assert_eq!(check_intervals(&specs(), &two), []);
        let three = [
            hold("s", "a", 1, Mode::Normal, 0, 10),
            hold("s", "b", 2, Mode::Normal, 1, 10),
            hold("s", "c", 3, Mode::Normal, 5, 6),
        ];
        assert!(matches!(
            check_intervals(&specs(), &three)[..],
            [Violation::OverLimit { at_ns: 5, .. }]
        ));
    }

    #[test]
    fn shared_beside_shared_passes_and_beside_normal_is_caught() {
        let shared = [
            hold("s", "a", 1, Mode::Shared, 0, 10),
            hold("s", "b", 2, Mode::Shared, 0, 10),
            hold("s", "c", 3, Mode::Shared, 0, 10),
        ];
        assert_eq!(check_intervals(&specs(), &shared), []);
        let mixed = [
            hold("s", "a", 1, Mode::Shared, 0, 10),
            hold("s", "b", 2, Mode::Normal, 3, 4),
        ];
        assert!(matches!(
            check_intervals(&specs(), &mixed)[..],
            [Violation::SharedBesideNormal { at_ns: 3, .. }]
        ));
    }

    #[test]
    fn a_key_nobody_declared_is_reported() {
        let holds = [hold("x", "a", 1, Mode::Normal, 0, 1)];
        assert_eq!(
            check_intervals(&specs(), &holds),
            [Violation::UnknownKey { key: "x".into() }]
        );
    }

    fn entry(ticket: &str, who: &str, outcome: &str, fence: Option<u64>, arrival: u64) -> Entry {
        Entry {
            ticket: ticket.into(),
            who: who.into(),
            outcome: outcome.into(),
            fence,
            arrival,
        }
    }

    fn process(who: &str, ending: Ending) -> Process {
        Process {
            who: who.into(),
            ending,
        }
    }

    #[test]
    fn a_clean_history_passes() {
        let processes = [
            process("c0-r0", Ending::Exited(Some(0))),
            process("c1-r0", Ending::Killed),
            process("c2-r0", Ending::Killed),
            process("c3-r0", Ending::Exited(Some(1))),
        ];
        let history = [
            entry("a", "c0-r0", "succeeded", Some(1), 1),
            entry("b", "c1-r0", "expired", Some(2), 2),
            entry("s", "sweep", "succeeded", Some(3), 4),
        ];
        // c2 was killed and c3 failed before they enqueued: no entry is right.
        let mut held = hold("m", "a-token", 1, Mode::Normal, 0, 10);
        held.who = "c0-r0".into();
        let holds = [held];
        assert_eq!(check_history(&processes, &history, &holds, &[]), []);
    }

    #[test]
    fn duplicates_lost_tickets_wrong_fences_and_jumps_are_each_caught() {
        let processes = [
            process("c0-r0", Ending::Exited(Some(0))),
            process("c1-r0", Ending::Exited(Some(0))),
            process("c2-r0", Ending::Exited(Some(0))),
        ];
        let history = [
            entry("a", "c0-r0", "succeeded", Some(1), 1),
            entry("a", "c0-r0", "expired", Some(1), 1),
            entry("b", "c1-r0", "succeeded", Some(5), 3),
            entry("d", "x", "succeeded", Some(6), 2),
        ];
        let mut b = hold("m", "b", 4, Mode::Normal, 0, 10);
        b.who = "c1-r0".into();
        let mut z = hold("m", "z", 7, Mode::Normal, 10, 20);
        z.who = "c9-r0".into();
        let holds = [b, z];
        let violations = check_history(&processes, &history, &holds, &["q".to_owned()]);
        let kinds: Vec<String> = violations
            .iter()
            .map(|v| match v {
                Violation::Outcomes { ticket, .. } => format!("twice {ticket}"),
                Violation::Lost { ticket, .. } => format!("lost {ticket}"),
                Violation::FenceMismatch { ticket, .. } => format!("fence {ticket}"),
                Violation::GrantOutOfOrder { later, .. } => format!("jump {}", later.0),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "twice a",
                "twice the tickets of c0-r0",
                "lost c2-r0",
                "fence c1-r0",
                "lost c9-r0",
                "lost q",
                "jump d"
            ]
        );
    }
}
