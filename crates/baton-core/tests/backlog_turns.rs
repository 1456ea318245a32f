//! Waiting turns of a lock in the key's backlog: a client that can wait there
//! (`may_wait_in_backlog`) gets a plain turn kept outside the hot document once the window is
//! full. Nothing is granted there; turns are taken into the window in arrival order and start
//! their waiter lease then; a turn can be withdrawn from the tail or from a segment; a client
//! that says nothing keeps its place in the window, behind the backlog. The document stays small
//! however long the queue, and it is written in the format that says it holds such turns.

use baton_core::backlog::{SEGMENT_JOBS, WINDOW_JOBS};
use baton_core::doc::FORMAT_BACKLOG_TURNS;
use baton_core::op::TicketView;
use baton_core::{encode, Enqueue, Op, Outcome, Refusal, Reply, Request, TicketState};

mod common;
use common::*;

/// The enqueue of turn `n` by a client that can wait in the backlog.
fn turn(n: u32) -> Enqueue {
    Enqueue {
        may_wait_in_backlog: true,
        ..enqueue(n)
    }
}

/// A held key with `waiting` turns queued behind its holder `t0` (claimed).
fn queue(waiting: u32) -> World {
    let mut w = World::new();
    w.run(Op::Enqueue(turn(0))).expect("enqueue t0");
    for n in 1..=waiting {
        w.run(Op::Enqueue(turn(n))).expect("enqueue");
    }
    w
}

fn doc_bytes(w: &World) -> usize {
    encode(w.doc.as_ref().expect("doc")).expect("encode").len()
}

/// Releases the holder `t{n}` as succeeded; the grant that follows, if any: (id, fence).
fn release(w: &mut World, n: u32) -> Reply {
    w.run(Op::Release {
        token: token(n),
        outcome: Outcome::Succeeded,
        reason: None,
    })
    .expect("release")
}

/// Releases the holder `t0`, then each turn granted after it as soon as it has claimed its
/// grant; the numbers of the turns granted, in grant order.
fn run_to_the_end(w: &mut World) -> Vec<u32> {
    let mut granted = Vec::new();
    let mut current = 0;
    loop {
        release(w, current);
        let next = w.doc.as_ref().and_then(|d| d.holders().next());
        let Some(next) = next.map(|t| t.id.clone()) else {
            return granted;
        };
        current = next[1..].parse().expect("number");
        w.run(Op::Refresh {
            token: token(current),
        })
        .expect("claim");
        granted.push(current);
    }
}

fn holder(w: &World) -> (String, u64) {
    let doc = w.doc.as_ref().expect("doc");
    let holders: Vec<_> = doc.holders().collect();
    assert_eq!(holders.len(), 1, "one holder: {holders:?}");
    (holders[0].id.clone(), holders[0].fence)
}

#[test]
fn a_long_queue_keeps_the_document_small_and_every_turn_comes_in_arrival_order() {
    let mut w = queue(600);
    let doc = w.doc.as_ref().expect("doc");
    let backlog = doc.backlog.as_ref().expect("a backlog");
    assert!(backlog.waiters, "the backlog says it holds turns");
    assert_eq!(doc.window_waiting(), WINDOW_JOBS, "the window is full");
    assert!(
        w.records.len() * SEGMENT_JOBS >= 600 - WINDOW_JOBS - SEGMENT_JOBS,
        "most turns were written out: {} segments",
        w.records.len()
    );
    assert!(doc_bytes(&w) < 24 * 1024, "{} bytes", doc_bytes(&w));
    let value: serde_json::Value =
        serde_json::from_slice(&encode(doc).expect("encode")).expect("JSON");
    assert_eq!(
        value["format"].as_u64(),
        Some(u64::from(FORMAT_BACKLOG_TURNS))
    );
    let status = baton_core::apply::status_of(doc, "t600").expect("the last turn is live");
    assert_eq!(status.position, 599, "the last turn's place");

    let mut fence = holder(&w).1;
    for n in 0..600 {
        assert_eq!(holder(&w).0, format!("t{n}"), "turns in arrival order");
        release(&mut w, n);
        let (next, next_fence) = holder(&w);
        assert_eq!(next, format!("t{}", n + 1));
        assert!(next_fence > fence, "fences grow");
        fence = next_fence;
        // The new holder claims its grant; the window's waiters keep their places.
        w.run(Op::Refresh {
            token: token(n + 1),
        })
        .expect("claim");
        assert!(doc_bytes(&w) < 24 * 1024, "{} bytes", doc_bytes(&w));
    }
    release(&mut w, 600);
    let doc = w.doc.as_ref().expect("doc");
    assert!(doc.tickets.is_empty() && doc.backlog.is_none(), "{doc:?}");
    let succeeded = w
        .ended
        .iter()
        .filter(|(_, outcome)| *outcome == Outcome::Succeeded)
        .count();
    assert_eq!(succeeded, 601, "every turn ran once: {:?}", w.ended.len());
}

#[test]
fn a_turn_has_no_waiter_lease_in_the_backlog_and_a_fresh_one_when_taken_in() {
    let mut w = queue(WINDOW_JOBS as u32 + 40);
    // Ten minutes pass: the holder and the window's waiters refresh, the backlog's cannot.
    for _ in 0..120 {
        w.now_ms += 5_000;
        for n in 0..=WINDOW_JOBS as u32 {
            w.run(Op::Refresh { token: token(n) }).expect("refresh");
        }
    }
    assert!(w.ended.is_empty(), "nothing lapsed: {:?}", w.ended);
    // The window's waiters give up: the backlog's first turns are taken in, each with a waiter
    // lease counted from now.
    for n in 1..=WINDOW_JOBS as u32 {
        w.run(Op::Release {
            token: token(n),
            outcome: Outcome::TimedOut,
            reason: None,
        })
        .expect("withdraw");
    }
    let first_in_backlog = format!("t{}", WINDOW_JOBS + 1);
    let taken = w
        .doc
        .as_ref()
        .and_then(|d| d.by_id(&first_in_backlog))
        .cloned()
        .expect("taken in");
    assert_eq!(taken.deadline_ms, Some(w.now_ms + 60_000), "{taken:?}");
    assert!(taken.heartbeat > 0, "a new phase is a new heartbeat");
    // Its client never looks again: it lapses one waiter lease later, not before.
    for _ in 0..12 {
        w.now_ms += 5_000;
        w.run(Op::Refresh { token: token(0) }).expect("holder");
        if w.now_ms < taken.deadline_ms.unwrap_or_default() {
            assert_eq!(w.state(&first_in_backlog), Some(TicketState::Queued));
        }
    }
    assert_eq!(w.state(&first_in_backlog), None);
    assert!(
        w.ended
            .contains(&(first_in_backlog.clone(), Outcome::Abandoned)),
        "{:?}",
        w.ended
    );
}

#[test]
fn a_waiter_withdraws_its_turn_from_the_tail_or_a_segment_and_the_others_keep_their_order() {
    let mut w = queue(WINDOW_JOBS as u32 + SEGMENT_JOBS as u32 + 10);
    let doc = w.doc.clone().expect("doc");
    let backlog = doc.backlog.clone().expect("backlog");
    assert!(backlog.has_segments());
    let in_segment = format!("t{}", WINDOW_JOBS + 3);
    let in_tail = backlog.tail[2].id.clone();
    let tail_n: u32 = in_tail[1..].parse().expect("number");
    // From the tail, by its token, as a release of a queued turn.
    let withdrawn = w
        .run(Op::Release {
            token: token(tail_n),
            outcome: Outcome::TimedOut,
            reason: None,
        })
        .expect("withdraw from the tail");
    assert!(
        matches!(
            withdrawn,
            Reply::Ticket(TicketView::Finished {
                outcome: Outcome::TimedOut,
                ..
            })
        ),
        "{withdrawn:?}"
    );
    // Its refresh now says it ended; its retry answers the same.
    let refused = w.run(Op::Refresh {
        token: token(tail_n),
    });
    assert!(
        matches!(
            refused,
            Err(Refusal::Ended {
                outcome: Outcome::TimedOut,
                ..
            })
        ),
        "{refused:?}"
    );
    // From a segment, by id and the segment it was written to.
    let withdraw = Op::CancelInBacklog {
        id: in_segment.clone(),
        generation: backlog.generation,
        segment: backlog.first,
        by: String::new(),
        withdrawn: Some(Outcome::Cancelled),
    };
    w.run(withdraw.clone()).expect("withdraw from a segment");
    w.run(withdraw).expect("its retry answers the same");
    let bad = w.run(Op::CancelInBacklog {
        id: format!("t{}", WINDOW_JOBS + 4),
        generation: backlog.generation,
        segment: backlog.first,
        by: String::new(),
        withdrawn: Some(Outcome::Succeeded),
    });
    assert!(matches!(bad, Err(Refusal::BadOutcome { .. })), "{bad:?}");

    let total = WINDOW_JOBS as u32 + SEGMENT_JOBS as u32 + 10;
    let granted: Vec<String> = run_to_the_end(&mut w)
        .into_iter()
        .map(|n| format!("t{n}"))
        .collect();
    let expected: Vec<String> = (1..=total)
        .map(|n| format!("t{n}"))
        .filter(|id| *id != in_segment && *id != in_tail)
        .collect();
    assert_eq!(granted, expected);
    assert!(w.ended.contains(&(in_tail, Outcome::TimedOut)));
    assert!(w.ended.contains(&(in_segment, Outcome::Cancelled)));
}

#[test]
fn a_client_that_cannot_wait_in_the_backlog_keeps_a_place_in_the_window_behind_it() {
    let waiting = WINDOW_JOBS as u32 + 20;
    let mut w = queue(waiting);
    let late = waiting + 1;
    let reply = w.run(Op::Enqueue(enqueue(late))).expect("an older client");
    let status = live(reply);
    assert_eq!(status.position, waiting as usize, "behind every turn");
    assert!(w.state(&format!("t{late}")).is_some(), "in the window");
    // An order value, a pool, a run-once spec, --supersede, --cancel-running and a freeze
    // override are decided in the window: such a turn never goes to the backlog.
    let ordered = Enqueue {
        order: Some("9".into()),
        ..turn(late + 1)
    };
    w.run(Op::Enqueue(ordered)).expect("ordered");
    assert!(
        w.state(&format!("t{}", late + 1)).is_some(),
        "in the window"
    );
    let granted = run_to_the_end(&mut w);
    let mut expected = vec![late + 1];
    expected.extend(1..=late);
    assert_eq!(granted, expected, "the order value first, then arrival");
}

#[test]
fn a_turn_in_the_tail_is_refreshed_as_a_no_op_renewed_as_not_held_and_its_enqueue_retried() {
    let waiting = WINDOW_JOBS as u32 + 3;
    let mut w = queue(waiting);
    let before = w.doc.clone();
    let reply = w
        .run(Op::Refresh {
            token: token(waiting),
        })
        .expect("refresh in the tail");
    assert_eq!(live(reply).position, waiting as usize - 1);
    assert_eq!(w.doc, before, "nothing to write");
    let renew = w.run(Op::Renew {
        token: token(waiting),
        ttl_ms: None,
    });
    assert!(matches!(renew, Err(Refusal::NotHeld { .. })), "{renew:?}");
    let again = w.run(Op::Enqueue(turn(waiting))).expect("a retry");
    assert_eq!(live(again).position, waiting as usize - 1);
    assert_eq!(w.doc, before, "queued once");
    let other_token = Enqueue {
        token: token(9999),
        ..turn(waiting)
    };
    let duplicate = w.run(Op::Enqueue(other_token));
    assert!(matches!(duplicate, Err(Refusal::DuplicateId { .. })));
}

#[test]
fn the_retry_of_an_enqueue_that_may_be_in_a_segment_is_uncertain_and_the_bound_counts_the_backlog()
{
    let mut w = queue(WINDOW_JOBS as u32 + SEGMENT_JOBS as u32 + 5);
    let retry = Request {
        finishes_seen: Some(0),
        may_arrive_late: false,
        attempt: "retry".into(),
        op: Op::Enqueue(turn(WINDOW_JOBS as u32 + 2)),
    };
    let answer = w.run_request(&retry);
    assert!(matches!(answer, Err(Refusal::Uncertain)), "{answer:?}");
    let bounded = Enqueue {
        max_live: 40,
        ..turn(5000)
    };
    let full = w.run(Op::Enqueue(bounded));
    assert!(
        matches!(full, Err(Refusal::QueueFull { max: 40 })),
        "{full:?}"
    );
    let other_limit = Enqueue {
        limit: 2,
        ..turn(5001)
    };
    let mismatch = w.run(Op::Enqueue(other_limit));
    assert!(
        matches!(mismatch, Err(Refusal::LimitMismatch { .. })),
        "{mismatch:?}"
    );
}

mod properties {
    //! Random runs of one key: clients that can wait in the backlog or not, that act, die, or
    //! withdraw; time that passes while the live ones keep their turns alive as a client does
    //! (a turn in the backlog writes nothing). Checked: turns are granted in arrival order with
    //! growing fences, one at a time; a live client's turn never lapses; the document stays
    //! small while every client can wait in the backlog; and once the clients are gone and
    //! time has passed, every turn has ended exactly once.

    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    #[derive(Clone, Debug)]
    enum Step {
        Enqueue { may_wait: bool },
        Release(usize),
        Kill(usize),
        Pass(u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => Just(Step::Enqueue { may_wait: true }),
            1 => Just(Step::Enqueue { may_wait: false }),
            3 => any::<usize>().prop_map(Step::Release),
            1 => any::<usize>().prop_map(Step::Kill),
            2 => (0u64..4_000).prop_map(Step::Pass),
        ]
    }

    struct Run {
        w: World,
        enqueued: u32,
        dead: Vec<bool>,
        last_granted: Option<(u32, u64)>,
        all_may_wait: bool,
    }

    impl Run {
        fn id(n: u32) -> String {
            format!("t{n}")
        }

        /// A live client looks after its turn as the library does: refreshes it in the window
        /// (a holder's refresh renews), writes nothing in the backlog.
        fn keep_alive(&mut self) {
            for n in 0..self.enqueued {
                if self.dead[n as usize] {
                    continue;
                }
                if self
                    .w
                    .doc
                    .as_ref()
                    .and_then(|d| d.by_id(&Self::id(n)))
                    .is_some()
                {
                    self.w
                        .run(Op::Refresh { token: token(n) })
                        .expect("refresh");
                }
            }
        }

        /// The client ends its turn: releases it if held, withdraws it if waiting (from the
        /// window or the tail by its token, from a segment by id as found there).
        fn end(&mut self, n: u32) {
            let id = Self::id(n);
            let doc = self.w.doc.clone().unwrap_or_default();
            let op = match doc.by_id(&id).map(|t| t.state) {
                Some(TicketState::Held) => Op::Release {
                    token: token(n),
                    outcome: Outcome::Succeeded,
                    reason: None,
                },
                Some(TicketState::Queued) => Op::Release {
                    token: token(n),
                    outcome: Outcome::TimedOut,
                    reason: None,
                },
                None => match self.segment_of(&id) {
                    Some((generation, segment)) => Op::CancelInBacklog {
                        id,
                        generation,
                        segment,
                        by: String::new(),
                        withdrawn: Some(Outcome::TimedOut),
                    },
                    None => Op::Release {
                        token: token(n),
                        outcome: Outcome::TimedOut,
                        reason: None,
                    },
                },
            };
            self.w.run(op).expect("the owner ends its turn");
        }

        fn segment_of(&self, id: &str) -> Option<(u64, u64)> {
            let backlog = self.w.doc.as_ref()?.backlog.clone()?;
            (backlog.first..backlog.next).find_map(|number| {
                let name = baton_core::backlog::segment_record(backlog.generation, number);
                let bytes = self.w.records.get(&name)?;
                let segment =
                    baton_core::backlog::Segment::decode(bytes, backlog.generation, number).ok()?;
                segment
                    .tickets
                    .iter()
                    .any(|t| t.id == id)
                    .then_some((backlog.generation, number))
            })
        }

        /// A live client claims a grant as soon as it is made (it is woken by the write).
        fn claim_grants(&mut self) {
            let doc = self.w.doc.clone().unwrap_or_default();
            for t in doc.holders().filter(|t| !t.claimed) {
                let n: u32 = t.id[1..].parse().expect("number");
                if !self.dead[n as usize] {
                    self.w.run(Op::Refresh { token: token(n) }).expect("claim");
                }
            }
        }

        fn check(&mut self) -> Result<(), TestCaseError> {
            let Some(doc) = self.w.doc.as_ref() else {
                return Ok(());
            };
            let holders: Vec<_> = doc.holders().collect();
            prop_assert!(holders.len() <= 1, "two holders: {holders:?}");
            if let Some(h) = holders.first() {
                let n: u32 = h.id[1..].parse().expect("number");
                if self.last_granted.is_none_or(|(last, _)| last != n) {
                    if let Some((last, fence)) = self.last_granted {
                        prop_assert!(n > last, "t{n} granted after t{last}");
                        prop_assert!(h.fence > fence, "fence {} after {fence}", h.fence);
                    }
                    self.last_granted = Some((n, h.fence));
                }
            }
            if self.all_may_wait {
                let bytes = encode(doc).expect("encode").len();
                prop_assert!(bytes < 24 * 1024, "the document grew to {bytes} bytes");
            }
            for (id, outcome) in &self.w.ended {
                let n: usize = id[1..].parse().expect("number");
                let lapsed = matches!(outcome, Outcome::Abandoned | Outcome::Expired);
                prop_assert!(
                    !lapsed || self.dead[n],
                    "{id} lapsed while its client lived"
                );
            }
            Ok(())
        }
    }

    #[test]
    fn turns_in_the_backlog_keep_fifo_fences_and_liveness() {
        let mut runner = TestRunner::new(Config::with_cases(64));
        let with_segments = AtomicUsize::new(0);
        let result = runner.run(&prop::collection::vec(step(), 1..400), |steps| {
            let segments = one_run(steps)?;
            if segments > 0 {
                with_segments.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        });
        if let Err(failure) = result {
            panic!("{failure}");
        }
        let with_segments = with_segments.load(Ordering::Relaxed);
        assert!(
            with_segments >= 8,
            "only {with_segments} runs wrote segments"
        );
    }

    /// Liveness: the clients still alive go on, each holder ending its turn as soon as it has
    /// it, while time passes; every one of them is granted its turn and ends it, however the
    /// steps left the window, the tail and the segments (the turns of dead clients lapse on
    /// the way).
    fn live_clients_all_get_their_turn(run: &mut Run) -> Result<(), TestCaseError> {
        let live: Vec<u32> = (0..run.enqueued)
            .filter(|n| {
                !run.dead[*n as usize] && !run.w.ended.iter().any(|(id, _)| *id == Run::id(*n))
            })
            .collect();
        // Each round a second passes: a dead client's turn lapses within its waiter lease of
        // eight, and a live one is granted once those ahead of it are done.
        let rounds = (run.enqueued as usize + 1) * 16;
        for _ in 0..rounds {
            if live.iter().all(|n| run.dead[*n as usize]) {
                break;
            }
            let doc = run.w.doc.clone().unwrap_or_default();
            if let Some(holder) = doc.holders().find(|t| t.claimed) {
                let n: u32 = holder.id[1..].parse().expect("number");
                if !run.dead[n as usize] {
                    run.end(n);
                    run.dead[n as usize] = true;
                }
            }
            run.w.now_ms += 1_000;
            run.keep_alive();
            run.w.run(Op::Tick).expect("tick");
            run.claim_grants();
            run.check()?;
        }
        let waiting: Vec<u32> = live
            .iter()
            .copied()
            .filter(|n| {
                !run.w
                    .ended
                    .iter()
                    .any(|(id, o)| *id == Run::id(*n) && *o == Outcome::Succeeded)
            })
            .collect();
        prop_assert!(
            waiting.is_empty(),
            "live clients never granted: {waiting:?}"
        );
        Ok(())
    }

    /// One run of `steps`; the backlog segments it wrote.
    fn one_run(steps: Vec<Step>) -> Result<usize, TestCaseError> {
        let mut run = Run {
            w: World::new(),
            enqueued: 0,
            dead: Vec::new(),
            last_granted: None,
            all_may_wait: true,
        };
        for step in steps {
            match step {
                Step::Enqueue { may_wait } => {
                    let n = run.enqueued;
                    // A short waiter lease: turns outlast it in the backlog.
                    let op = Enqueue {
                        may_wait_in_backlog: may_wait,
                        waiter_ttl_ms: 8_000,
                        ..enqueue(n)
                    };
                    run.all_may_wait &= may_wait;
                    run.w.run(Op::Enqueue(op)).expect("enqueue");
                    run.enqueued += 1;
                    run.dead.push(false);
                }
                Step::Release(pick) if run.enqueued > 0 => {
                    let n = (pick % run.enqueued as usize) as u32;
                    if !run.dead[n as usize] && !run.w.ended.iter().any(|(id, _)| *id == Run::id(n))
                    {
                        run.end(n);
                        run.dead[n as usize] = true;
                    }
                }
                Step::Kill(pick) if run.enqueued > 0 => {
                    run.dead[pick % run.enqueued as usize] = true;
                }
                Step::Pass(ms) => {
                    run.w.now_ms += ms;
                    run.keep_alive();
                    run.w.run(Op::Tick).expect("tick");
                }
                _ => {}
            }
            run.claim_grants();
            run.check()?;
        }
        live_clients_all_get_their_turn(&mut run)?;
        // Every client goes away; time passes; the key drains.
        for n in 0..run.enqueued {
            run.dead[n as usize] = true;
        }
        for _ in 0..10_000 {
            let Some(doc) = run.w.doc.as_ref() else { break };
            if doc.tickets.is_empty() && doc.backlog.is_none() {
                break;
            }
            run.w.now_ms += 20_000;
            run.w.run(Op::Tick).expect("tick");
            run.check()?;
        }
        let doc = run.w.doc.clone().unwrap_or_default();
        prop_assert!(doc.tickets.is_empty() && doc.backlog.is_none(), "{doc:?}");
        let mut ended: Vec<u32> = run
            .w
            .ended
            .iter()
            .map(|(id, _)| id[1..].parse().expect("n"))
            .collect();
        ended.sort_unstable();
        let expected: Vec<u32> = (0..run.enqueued).collect();
        prop_assert_eq!(ended, expected, "every turn ended exactly once");
        Ok(run.w.records.len())
    }
}

/// Turns of clients that cannot wait in the backlog queue in the window behind it: however many
/// of them wait there, the backlog is still taken in when the turns ahead of them have run (a
/// window counted full of turns that wait behind the backlog would never be refilled).
#[test]
fn turns_waiting_behind_the_backlog_do_not_stop_it_being_taken_in() {
    let waiting = WINDOW_JOBS as u32 + 20;
    let mut w = queue(waiting);
    for n in waiting + 1..=waiting + 12 {
        w.run(Op::Enqueue(enqueue(n))).expect("an older client");
    }
    let granted = run_to_the_end(&mut w);
    let expected: Vec<u32> = (1..=waiting + 12).collect();
    assert_eq!(granted, expected, "every turn, in arrival order");
}
