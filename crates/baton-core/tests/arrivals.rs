//! Property tests of arrivals ([`baton_core::arrival`]): enqueues written beside a key's
//! document and taken in by its next writer.
//!
//! **Taken in as if written one by one.** From a document built by random steps (enqueues,
//! some of them written by their owners after an unanswered append, releases, refreshes,
//! cancels, time passing), a batch of arrivals (new tickets, copies of live or ended ones,
//! late copies of turns their owners wrote, another token under a live id, a wrong limit, a
//! full queue, supersede, order values, counts of unsettled turns seen from current to stale)
//! and the writer's own operation: [`apply_with`] with the arrivals must equal applying each
//! arrival's enqueue as a request of its own (its refusal leaving the document as it was;
//! refused too if it would queue a ticket while the document no longer remembers every turn
//! recorded unsettled since its owner's read; a late copy of a turn remembered only settling
//! it), its grant, if any, unclaimed (its owner was not looking), then the operation. Same
//! document, same tickets ended, same grants, same reply or refusal.
//!
//! **No ghost.** The batch's turns are written instead by their owners, each after its append
//! went unanswered; those queued are ended by an operator, time passes, more tickets may end,
//! and the appends land late: none of those turns is live again.

mod common;

use baton_core::arrival::Arrival;
use baton_core::{
    apply, apply_with, invariants, Applied, Clock, Doc, Enqueue, Inputs, Mode, Op, Outcome,
    Refusal, Reply, Request,
};
use common::{enqueue, token, wall_at, EPOCH};
use proptest::prelude::*;

const CLIENTS: u32 = 8;

fn clock(now_ms: u64) -> Clock<'static> {
    Clock::Store {
        uncertain_ms: 0,
        now_ms,
        epoch: EPOCH,
        wall_ms: wall_at(now_ms),
    }
}

/// A step that builds the document the arrivals meet.
#[derive(Clone, Debug)]
enum Step {
    /// `late`: written by its owner after its arrival's append went unanswered.
    Enqueue {
        n: u32,
        shared: bool,
        late: bool,
    },
    Release(u32),
    Refresh(u32),
    Cancel(u32),
    Pass(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..CLIENTS, any::<bool>(), prop::bool::weighted(0.3))
            .prop_map(|(n, shared, late)| Step::Enqueue { n, shared, late }),
        2 => (0..CLIENTS).prop_map(Step::Release),
        1 => (0..CLIENTS).prop_map(Step::Refresh),
        1 => (0..CLIENTS).prop_map(Step::Cancel),
        1 => prop_oneof![Just(1_000u64), Just(5_000), Just(70_000)].prop_map(Step::Pass),
    ]
}

/// One arrival of the batch, and the count of unsettled turns its client saw, as steps back
/// from the document's (`None`: more than it has, from before an older baton rewrote it).
#[derive(Clone, Debug)]
struct Ask {
    n: u32,
    shared: bool,
    wrong_limit: bool,
    other_token: bool,
    supersede: bool,
    keep: bool,
    order: Option<u8>,
    small_queue: bool,
    seen_back: Option<u64>,
}

fn ask() -> impl Strategy<Value = Ask> {
    (
        (0..CLIENTS, any::<bool>(), prop::bool::weighted(0.1)),
        (
            prop::bool::weighted(0.1),
            prop::bool::weighted(0.15),
            any::<bool>(),
        ),
        (
            prop::option::weighted(0.2, 0..3u8),
            prop::bool::weighted(0.15),
        ),
        prop_oneof![
            4 => Just(Some(0u64)),
            2 => (1..4u64).prop_map(Some),
            1 => (8..14u64).prop_map(Some),
            1 => Just(None),
        ],
    )
        .prop_map(
            |(
                (n, shared, wrong_limit),
                (other_token, supersede, keep),
                (order, small_queue),
                seen_back,
            )| Ask {
                n,
                shared,
                wrong_limit,
                other_token,
                supersede,
                keep,
                order,
                small_queue,
                seen_back,
            },
        )
}

/// The writer's own operation.
#[derive(Clone, Debug)]
enum Last {
    Release(u32),
    Enqueue(u32),
    Refresh(u32),
    Tick,
}

fn last() -> impl Strategy<Value = Last> {
    prop_oneof![
        3 => (0..CLIENTS).prop_map(Last::Release),
        1 => (0..CLIENTS).prop_map(Last::Enqueue),
        1 => (0..CLIENTS).prop_map(Last::Refresh),
        1 => Just(Last::Tick),
    ]
}

fn ticket_enqueue(n: u32, shared: bool, limit: u32) -> Enqueue {
    Enqueue {
        mode: if shared { Mode::Shared } else { Mode::Normal },
        limit,
        ..enqueue(n)
    }
}

fn request(attempt: String, op: Op) -> Request {
    Request::new(attempt, op)
}

/// Runs the steps from no document, each refusal leaving it as it was.
fn build(steps: &[Step], limit: u32) -> (Option<Doc>, u64) {
    let (mut doc, mut now_ms) = (None::<Doc>, 1_000u64);
    for (i, step) in steps.iter().enumerate() {
        let mut late_write = false;
        let op = match step {
            Step::Pass(ms) => {
                now_ms += ms;
                continue;
            }
            Step::Enqueue { n, shared, late } => {
                late_write = *late;
                Op::Enqueue(ticket_enqueue(*n, *shared, limit))
            }
            Step::Release(n) => Op::Release {
                token: token(*n),
                outcome: Outcome::Succeeded,
                reason: None,
            },
            Step::Refresh(n) => Op::Refresh { token: token(*n) },
            Step::Cancel(n) => Op::Cancel {
                id: format!("t{n}"),
                by: "operator".into(),
                reason: None,
            },
        };
        let mut written = request(format!("s{i}"), op);
        written.may_arrive_late = late_write;
        if let Ok(applied) = apply(doc.as_ref(), &written, &clock(now_ms)) {
            doc = Some(applied.doc);
        }
    }
    (doc, now_ms)
}

/// The enqueue an ask carries, with its token, and the unsettled turns its client saw of the
/// `recorded`.
fn asked(ask: &Ask, limit: u32, recorded: u64) -> (Enqueue, u64) {
    let mut e = ticket_enqueue(
        ask.n,
        ask.shared,
        if ask.wrong_limit { limit + 1 } else { limit },
    );
    if ask.other_token {
        e.token = token(ask.n + 100);
    }
    e.supersede = ask.supersede;
    e.keep = ask.keep;
    e.order = ask.order.map(|o| o.to_string());
    if ask.small_queue {
        e.max_live = 3;
    }
    let seen = ask
        .seen_back
        .map_or(recorded + 1, |back| recorded.saturating_sub(back));
    (e, seen)
}

/// The unsettled turns `doc` ever recorded.
fn recorded(doc: Option<&Doc>) -> u64 {
    doc.map_or(0, Doc::unsettled_recorded)
}

/// What an apply came to, compared whole.
type Outcome_ = Result<(Doc, Vec<baton_core::Finished>, Vec<(String, u64)>, Reply), Refusal>;

fn outcome(result: Result<Applied, Refusal>) -> Outcome_ {
    result.map(|a| (a.doc, a.finished, a.granted, a.reply))
}

/// Each arrival as a request of its own, its grant unclaimed, then the writer's `last`.
fn one_by_one(doc: Option<&Doc>, asks: &[(Enqueue, u64)], last: &Request, now_ms: u64) -> Outcome_ {
    let clock = clock(now_ms);
    let (mut doc, mut finished, mut granted) = (doc.cloned(), Vec::new(), Vec::new());
    for (i, (e, seen)) in asks.iter().enumerate() {
        let hash = baton_core::doc::token_hash(&e.token);
        if let Some(unsettled) = doc.as_mut().and_then(|d| d.unsettled.as_mut()) {
            if unsettled.settle(&e.id, &hash) {
                continue;
            }
        }
        let arrival = request(format!("arrival-{i}"), Op::Enqueue(e.clone()));
        let Ok(mut applied) = apply(doc.as_ref(), &arrival, &clock) else {
            continue;
        };
        let queued = applied.doc.next_arrival != doc.as_ref().map_or(1, |d| d.next_arrival);
        let unsettled = doc.as_ref().and_then(|d| d.unsettled.as_ref());
        if queued && !baton_core::arrival::remembers_since(unsettled, *seen) {
            continue;
        }
        if applied.granted.iter().any(|(id, _)| *id == e.id) {
            // Its owner was not looking: the grant waits for its claim.
            let ticket = applied.doc.tickets.iter_mut().find(|t| t.id == e.id);
            let ticket = ticket.expect("a ticket granted is live");
            ticket.claimed = false;
            ticket.deadline_ms = clock.deadline_ms(ticket.claim_ms);
        }
        finished.extend(applied.finished);
        granted.extend(applied.granted);
        doc = Some(applied.doc);
    }
    let applied = apply(doc.as_ref(), last, &clock)?;
    finished.extend(applied.finished);
    granted.extend(applied.granted);
    Ok((applied.doc, finished, granted, applied.reply))
}

fn last_request(last: &Last, limit: u32) -> Request {
    let op = match last {
        Last::Release(n) => Op::Release {
            token: token(*n),
            outcome: Outcome::Succeeded,
            reason: None,
        },
        Last::Enqueue(n) => Op::Enqueue(ticket_enqueue(*n, false, limit)),
        Last::Refresh(n) => Op::Refresh { token: token(*n) },
        Last::Tick => Op::Tick,
    };
    request("writer".into(), op)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn arrivals_are_taken_in_as_if_each_were_written_alone_and_never_twice(
        limit in 1..3u32,
        steps in prop::collection::vec(step(), 0..16),
        asks in prop::collection::vec(ask(), 1..6),
        last in last(),
        later in prop::collection::vec(step(), 0..12),
    ) {
        let (doc, now_ms) = build(&steps, limit);
        let recorded = recorded(doc.as_ref());
        let asks: Vec<(Enqueue, u64)> = asks.iter().map(|a| asked(a, limit, recorded)).collect();
        let arrivals: Vec<Arrival> = asks.iter().map(|(e, seen)| Arrival::of(e, *seen)).collect();
        let last = last_request(&last, limit);
        let inputs = Inputs { arrivals: &arrivals, ..Inputs::default() };
        let taken = apply_with(doc.as_ref(), &last, &clock(now_ms), inputs);
        if let Ok(applied) = &taken {
            prop_assert!(applied.changed, "arrivals taken in are removed by a write");
            prop_assert_eq!(invariants::check(&applied.doc), Ok(()));
        }
        let expected = one_by_one(doc.as_ref(), &asks, &last, now_ms);
        let taken = outcome(taken);
        prop_assert_eq!(&taken, &expected);

        // No ghost: the batch's turns (under ids of their own) are written by their owners
        // instead, after unanswered appends; those queued end, more may end, and the appends
        // land.
        let asks: Vec<(Enqueue, u64)> = asks
            .iter()
            .enumerate()
            .map(|(i, (e, seen))| {
                let n = 200 + i as u32;
                (Enqueue { id: format!("t{n}"), token: token(n), ..e.clone() }, *seen)
            })
            .collect();
        let arrivals: Vec<Arrival> = asks.iter().map(|(e, seen)| Arrival::of(e, *seen)).collect();
        let mut doc = doc;
        for (i, (e, _)) in asks.iter().enumerate() {
            let mut own = request(format!("own{i}"), Op::Enqueue(e.clone()));
            own.may_arrive_late = true;
            if let Ok(applied) = apply(doc.as_ref(), &own, &clock(now_ms)) {
                doc = Some(applied.doc);
            }
        }
        let before: std::collections::BTreeSet<&str> = asks
            .iter()
            .map(|(e, _)| e.id.as_str())
            .filter(|id| doc.as_ref().is_some_and(|d| d.by_id(id).is_some()))
            .collect();
        let mut now_ms = now_ms;
        for (i, id) in before.iter().enumerate() {
            let cancel = Op::Cancel { id: (*id).to_owned(), by: "operator".into(), reason: None };
            let applied = apply(doc.as_ref(), &request(format!("c{i}"), cancel), &clock(now_ms));
            doc = Some(applied.expect("a live ticket is cancelled").doc);
        }
        for (i, step) in later.iter().enumerate() {
            if let Step::Pass(ms) = step {
                now_ms += ms;
                continue;
            }
            // Others take turns meanwhile, under ids the batch does not use.
            let n = 50 + i as u32;
            let e = ticket_enqueue(n, false, limit);
            for op in [Op::Enqueue(e), Op::Cancel { id: format!("t{n}"), by: "x".into(), reason: None }] {
                if let Ok(applied) = apply(doc.as_ref(), &request(format!("l{i}"), op), &clock(now_ms)) {
                    doc = Some(applied.doc);
                }
            }
        }
        let again = Inputs { arrivals: &arrivals, ..Inputs::default() };
        let tick = request("again".into(), Op::Tick);
        let applied = apply_with(doc.as_ref(), &tick, &clock(now_ms), again)
            .expect("a tick is never refused");
        for id in before {
            prop_assert!(applied.doc.by_id(id).is_none(), "{id} queued again by a late copy");
        }
        prop_assert_eq!(invariants::check(&applied.doc), Ok(()));
    }
}
