//! Run-once under random histories: callers arriving (plain or as steps of a sequence, with
//! different attempt limits), runs that succeed, fail or are cancelled, waiters that withdraw,
//! holders that stop renewing while waiters keep refreshing as time passes (leases run out,
//! successes are forgotten), operators reviving the key. After every operation:
//!
//! - at most one holder;
//! - every once ticket granted by the operation was granted while the key's record said to run
//!   it — no success of its step remembered, its predecessor done, the key not dead (the record
//!   after the operation is the one the grant saw: an operation's own change, and forgetting,
//!   come before its grants);
//! - since the last recorded success or revival, no more runs started than the largest attempt
//!   limit in play (the key goes dead first);
//! - the record counts every run that ended, and no ticket ends twice.

use std::collections::{BTreeMap, BTreeSet};

use baton_core::once::{verdict, OnceSpec, Verdict};
use baton_core::{Doc, Enqueue, Op, Outcome, TicketState};
use proptest::prelude::*;

mod common;
use common::*;

#[derive(Clone, Debug)]
enum Step {
    /// A caller arrives: plain (`None`) or as step N, with this many attempts.
    Arrive { seq: Option<u64>, attempts: u32 },
    /// The holder's run ends so.
    End(Outcome),
    /// A queued caller (by index among the queued) withdraws.
    Withdraw(usize),
    /// Every waiter, and a holder that has not claimed its grant, refreshes (keeps its place,
    /// claims). A claimed holder never renews here: time ends it.
    RefreshWaiters,
    /// Time passes, and someone looks (a tick).
    Wait(u64),
    /// An operator revives the key.
    Retry,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (prop::option::weighted(0.5, 1u64..4), 1u32..4)
            .prop_map(|(seq, attempts)| Step::Arrive { seq, attempts }),
        3 => prop_oneof![
            Just(Outcome::Succeeded),
            Just(Outcome::Failed),
            Just(Outcome::Cancelled)
        ]
        .prop_map(Step::End),
        1 => (0usize..4).prop_map(Step::Withdraw),
        3 => Just(Step::RefreshWaiters),
        2 => prop_oneof![Just(500u64), Just(4_000), Just(11_000), Just(31_000)].prop_map(Step::Wait),
        1 => Just(Step::Retry),
    ]
}

const RETAIN_MS: u64 = 30_000;
/// The largest attempt limit the callers use.
const MAX_ATTEMPTS: u32 = 3;

/// What the checks remember across operations.
#[derive(Default)]
struct Seen {
    specs: BTreeMap<String, OnceSpec>,
    ended: BTreeSet<String>,
    /// Runs started (once tickets granted) in all.
    started: u64,
    /// Runs started since the last recorded success or revival.
    since_success: u32,
}

fn number(id: &str) -> u32 {
    id[1..].parse().expect("ids are t<n>")
}

fn holder_ids(doc: Option<&Doc>) -> BTreeSet<String> {
    doc.map(|d| d.holders().map(|t| t.id.clone()).collect())
        .unwrap_or_default()
}

/// Runs `op` and checks every rule above against its result.
fn run_checked(w: &mut World, seen: &mut Seen, op: Op) -> Result<(), TestCaseError> {
    let holders_before = holder_ids(w.doc.as_ref());
    let finished_before = w.finished.len();
    let is_retry = matches!(op, Op::RetryOnce);
    let result = w.run(op);
    if is_retry && result.is_ok() {
        seen.since_success = 0;
    }
    let doc = w.doc.clone().unwrap_or_default();
    prop_assert!(doc.holders().count() <= 1, "two holders: {:?}", doc.tickets);
    for (id, outcome) in &w.finished[finished_before..] {
        prop_assert!(seen.ended.insert(id.clone()), "{id} ended twice");
        if *outcome == Outcome::Succeeded {
            seen.since_success = 0;
        }
    }
    let wall_ms = 1_700_000_000_000 + w.now_ms;
    for id in holder_ids(Some(&doc)).difference(&holders_before) {
        let spec = seen.specs[id];
        let v = verdict(doc.once.as_ref(), &spec, wall_ms);
        prop_assert!(
            matches!(v, Verdict::Run { .. }),
            "{id} was granted though the record says {v:?}: {:?}",
            doc.once
        );
        seen.started += 1;
        seen.since_success += 1;
    }
    prop_assert!(
        seen.since_success <= MAX_ATTEMPTS,
        "{} runs since the last success or revival: {:?}",
        seen.since_success,
        doc.once
    );
    let holding = doc.holders().count() as u64;
    let runs = doc.once.as_ref().map_or(0, |r| r.runs);
    prop_assert_eq!(
        runs,
        seen.started - holding,
        "the record counts every ended run"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn once_tickets_run_only_when_the_record_says_so(steps in prop::collection::vec(step(), 1..60)) {
        let mut w = World::new();
        let mut seen = Seen::default();
        let mut next = 0u32;
        for step in steps {
            match step {
                Step::Arrive { seq, attempts } => {
                    next += 1;
                    let spec = OnceSpec { seq, max_attempts: attempts, retain_ms: RETAIN_MS };
                    seen.specs.insert(format!("t{next}"), spec);
                    let op = Op::Enqueue(Enqueue { once: Some(spec), ..enqueue(next) });
                    run_checked(&mut w, &mut seen, op)?;
                }
                Step::End(outcome) => {
                    let holder = holder_ids(w.doc.as_ref()).into_iter().next();
                    if let Some(id) = holder {
                        let op = Op::Release { token: token(number(&id)), outcome, reason: None };
                        run_checked(&mut w, &mut seen, op)?;
                    }
                }
                Step::Withdraw(i) => {
                    let queued: Vec<String> = w
                        .doc
                        .as_ref()
                        .map(|d| d.queued().iter().map(|t| t.id.clone()).collect())
                        .unwrap_or_default();
                    if let Some(id) = queued.get(i) {
                        let token = token(number(id));
                        let op = Op::Release { token, outcome: Outcome::Cancelled, reason: None };
                        run_checked(&mut w, &mut seen, op)?;
                    }
                }
                Step::RefreshWaiters => {
                    let ids: Vec<String> = w
                        .doc
                        .as_ref()
                        .map(|d| {
                            d.tickets
                                .iter()
                                .filter(|t| t.state == TicketState::Queued || !t.claimed)
                                .map(|t| t.id.clone())
                                .collect()
                        })
                        .unwrap_or_default();
                    for id in ids {
                        run_checked(&mut w, &mut seen, Op::Refresh { token: token(number(&id)) })?;
                    }
                }
                Step::Wait(ms) => {
                    w.now_ms += ms;
                    run_checked(&mut w, &mut seen, Op::Tick)?;
                }
                Step::Retry => run_checked(&mut w, &mut seen, Op::RetryOnce)?,
            }
        }
    }
}
