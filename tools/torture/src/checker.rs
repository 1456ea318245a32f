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
    /// A ticket that was enqueued and never ended (lost), or ended more than once.
    Outcomes {
        /// The ticket.
        ticket: String,
        /// The outcomes recorded for it.
        outcomes: Vec<String>,
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

/// Every ticket in `enqueued` must have exactly one outcome in `outcomes` (ticket, outcome),
/// and no outcome may name a ticket that was never enqueued.
pub fn check_outcomes(enqueued: &[String], outcomes: &[(String, String)]) -> Vec<Violation> {
    let mut recorded: BTreeMap<&str, Vec<String>> = enqueued
        .iter()
        .map(|ticket| (ticket.as_str(), Vec::new()))
        .collect();
    let mut violations = Vec::new();
    for (ticket, outcome) in outcomes {
        match recorded.get_mut(ticket.as_str()) {
            Some(list) => list.push(outcome.clone()),
            None => violations.push(Violation::Outcomes {
                ticket: ticket.clone(),
                outcomes: vec![format!("{outcome} (never enqueued)")],
            }),
        }
    }
    for (ticket, list) in recorded {
        if list.len() != 1 {
            violations.push(Violation::Outcomes {
                ticket: ticket.to_owned(),
                outcomes: list,
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

    #[test]
    fn every_ticket_ends_exactly_once() {
        let enqueued = ["a", "b", "c"].map(String::from);
        let outcome = |t: &str, o: &str| (t.to_owned(), o.to_owned());
        assert_eq!(
            check_outcomes(
                &enqueued,
                &[
                    outcome("a", "succeeded"),
                    outcome("b", "expired"),
                    outcome("c", "cancelled")
                ]
            ),
            []
        );
        let violations = check_outcomes(
            &enqueued,
            &[
                outcome("a", "succeeded"),
                outcome("a", "expired"),
                outcome("b", "expired"),
                outcome("z", "succeeded"),
            ],
        );
        let tickets: Vec<_> = violations
            .iter()
            .map(|v| match v {
                Violation::Outcomes { ticket, .. } => ticket.as_str(),
                other => panic!("{other:?}"),
            })
            .collect();
        // z was never enqueued; a ended twice; c was lost.
        assert_eq!(tickets, ["z", "a", "c"]);
    }
}
