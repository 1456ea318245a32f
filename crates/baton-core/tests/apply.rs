//! Data-driven tests of `apply`: each scenario is a script of operations at store times, with
//! the expected standing after each step.

use baton_core::op::TicketView;
use baton_core::{
    apply, CancelledTicket, Clock, Doc, Enqueue, Mode, Observer, Op, Outcome, Refusal, Reply,
    Request, TicketState,
};

mod common;
use common::*;

#[test]
fn first_ticket_is_granted_and_claimed_at_once() {
    let mut w = World::new();
    let status = live(w.run(Op::Enqueue(enqueue(1))).expect("enqueue"));
    assert_eq!(status.state, TicketState::Held);
    assert!(status.claimed, "the enqueuer was looking");
    assert_eq!(status.deadline_ms, Some(1_000 + 10_000));
    assert!(status.fence >= 1_700_000_000_001_000 * 1000 / 1000);
}

#[test]
fn grants_follow_arrival_and_release_hands_over_with_a_claim_window() {
    let mut w = World::new();
    w.run(Op::Enqueue(enqueue(1))).expect("1");
    let s2 = live(w.run(Op::Enqueue(enqueue(2))).expect("2"));
    let s3 = live(w.run(Op::Enqueue(enqueue(3))).expect("3"));
    assert_eq!((s2.state, s2.position), (TicketState::Queued, 0));
    assert_eq!((s3.state, s3.position), (TicketState::Queued, 1));
    let fence1 = w
        .doc
        .as_ref()
        .and_then(|d| d.by_id("t1"))
        .map(|t| t.fence)
        .expect("t1");
    w.run(Op::Release {
        token: token(1),
        outcome: Outcome::Succeeded,
        reason: None,
    })
    .expect("release");
    assert_eq!(w.holders(), vec!["t2"]);
    let t2 = w
        .doc
        .as_ref()
        .and_then(|d| d.by_id("t2"))
        .expect("t2")
        .clone();
    assert!(!t2.claimed, "granted while its owner was not looking");
    assert_eq!(t2.deadline_ms, Some(w.now_ms + 3_000), "claim window");
    assert!(t2.fence > fence1);
    // Unclaimed past the claim window: expired, and t3 is granted.
    w.now_ms += 3_000;
    w.run(Op::Tick).expect("tick");
    assert_eq!(w.holders(), vec!["t3"]);
    assert!(w.finished.contains(&("t2".into(), Outcome::Expired)));
    // t2's owner comes back: its turn is lost.
    let err = w
        .run(Op::Refresh { token: token(2) })
        .expect_err("lost turn");
    assert!(
        matches!(
            err,
            Refusal::Ended {
                outcome: Outcome::Expired,
                ..
            }
        ),
        "{err:?}"
    );
    // t3 claims in time.
    let s3 = live(w.run(Op::Refresh { token: token(3) }).expect("claim"));
    assert!(s3.claimed);
}

#[test]
fn order_values_go_first_then_arrival() {
    let mut w = World::new();
    w.run(Op::Enqueue(enqueue(1))).expect("holder");
    w.run(Op::Enqueue(enqueue(2))).expect("no order");
    w.run(Op::Enqueue(Enqueue {
        pool: None,
        order: Some("0002".into()),
        ..enqueue(3)
    }))
    .expect("3");
    w.run(Op::Enqueue(Enqueue {
        pool: None,
        order: Some("0001".into()),
        ..enqueue(4)
    }))
    .expect("4");
    let doc = w.doc.clone().expect("doc");
    let queued: Vec<&str> = doc.queued().iter().map(|t| t.id.as_str()).collect();
    assert_eq!(queued, vec!["t4", "t3", "t2"]);
}

#[test]
fn supersede_cancels_queued_tickets_before_it_except_keep_and_holders() {
    let mut w = World::new();
    w.run(Op::Enqueue(enqueue(1))).expect("holder");
    w.run(Op::Enqueue(enqueue(2))).expect("2");
    w.run(Op::Enqueue(Enqueue {
        pool: None,
        keep: true,
        ..enqueue(3)
    }))
    .expect("3 keep");
    w.run(Op::Enqueue(enqueue(4))).expect("4");
    w.run(Op::Enqueue(Enqueue {
        pool: None,
        supersede: true,
        ..enqueue(5)
    }))
    .expect("5");
    let doc = w.doc.clone().expect("doc");
    let queued: Vec<&str> = doc.queued().iter().map(|t| t.id.as_str()).collect();
    assert_eq!(queued, vec!["t3", "t5"]);
    assert_eq!(w.holders(), vec!["t1"]);
    assert!(w.finished.contains(&("t2".into(), Outcome::Superseded)));
    assert!(w.finished.contains(&("t4".into(), Outcome::Superseded)));
    // The superseded owner learns of it when it looks.
    let err = w
        .run(Op::Refresh { token: token(2) })
        .expect_err("superseded");
    assert!(matches!(
        err,
        Refusal::Ended {
            outcome: Outcome::Superseded,
            ..
        }
    ));
}

#[test]
fn semaphore_and_shared_modes() {
    let mut w = World::new();
    for n in 1..=4 {
        w.run(Op::Enqueue(Enqueue {
            pool: None,
            limit: 3,
            ..enqueue(n)
        }))
        .expect("enqueue");
    }
    assert_eq!(w.holders(), vec!["t1", "t2", "t3"]);
    assert_eq!(w.state("t4"), Some(TicketState::Queued));
    let err = w
        .run(Op::Enqueue(Enqueue {
            pool: None,
            limit: 2,
            ..enqueue(9)
        }))
        .expect_err("limit");
    assert!(matches!(
        err,
        Refusal::LimitMismatch {
            asked: 2,
            current: 3
        }
    ));

    // Readers and writers: readers hold together; a writer waits; readers behind it wait too.
    let mut w = World::new();
    let shared = |n| Enqueue {
        pool: None,
        mode: Mode::Shared,
        ..enqueue(n)
    };
    w.run(Op::Enqueue(shared(1))).expect("r1");
    w.run(Op::Enqueue(shared(2))).expect("r2");
    w.run(Op::Enqueue(enqueue(3))).expect("w3");
    w.run(Op::Enqueue(shared(4))).expect("r4");
    assert_eq!(w.holders(), vec!["t1", "t2"]);
    assert_eq!(
        w.state("t4"),
        Some(TicketState::Queued),
        "no barging past the writer"
    );
    w.run(Op::Release {
        token: token(1),
        outcome: Outcome::Succeeded,
        reason: None,
    })
    .expect("r1 done");
    assert_eq!(w.holders(), vec!["t2"]);
    w.run(Op::Release {
        token: token(2),
        outcome: Outcome::Succeeded,
        reason: None,
    })
    .expect("r2 done");
    assert_eq!(w.holders(), vec!["t3"]);
    w.run(Op::Release {
        token: token(3),
        outcome: Outcome::Failed,
        reason: None,
    })
    .expect("w3 done");
    assert_eq!(w.holders(), vec!["t4"]);
    assert_eq!(
        w.doc.as_ref().map(|d| d.summary.consecutive_failures),
        Some(1),
        "w3 failed"
    );
}

#[test]
fn tokens_guard_renew_and_release_and_retries_are_recognised() {
    let mut w = World::new();
    w.run(Op::Enqueue(enqueue(1))).expect("1");
    let err = w
        .run(Op::Renew {
            token: token(7),
            ttl_ms: None,
        })
        .expect_err("wrong token");
    assert_eq!(err, Refusal::UnknownToken);
    let release = Request {
        finishes_seen: None,
        may_arrive_late: false,
        attempt: "release-1".into(),
        op: Op::Release {
            token: token(1),
            outcome: Outcome::Succeeded,
            reason: None,
        },
    };
    w.run_request(&release).expect("release");
    // The coordinator's retry of the same attempt is answered as the first time.
    let again = w.run_request(&release).expect("retry recognised");
    assert!(matches!(
        again,
        Reply::Ticket(TicketView::Finished {
            outcome: Outcome::Succeeded,
            ..
        })
    ));
    // A new release of the released ticket is refused.
    let err = w
        .run(Op::Release {
            token: token(1),
            outcome: Outcome::Succeeded,
            reason: None,
        })
        .expect_err("double");
    assert!(matches!(
        err,
        Refusal::Ended {
            outcome: Outcome::Succeeded,
            ..
        }
    ));
    let err = w
        .run(Op::Renew {
            token: token(1),
            ttl_ms: None,
        })
        .expect_err("stale");
    assert!(matches!(err, Refusal::Ended { .. }));
    // One ticket ended exactly once.
    assert_eq!(w.finished, vec![("t1".to_string(), Outcome::Succeeded)]);
}

#[test]
fn a_retried_enqueue_makes_no_ghost() {
    let mut w = World::new();
    let request = Request {
        finishes_seen: None,
        may_arrive_late: false,
        attempt: "e1".into(),
        op: Op::Enqueue(enqueue(1)),
    };
    w.run_request(&request).expect("first");
    w.run_request(&request).expect("retry");
    assert_eq!(w.doc.as_ref().map(|d| d.tickets.len()), Some(1));
    w.run(Op::Release {
        token: token(1),
        outcome: Outcome::Succeeded,
        reason: None,
    })
    .expect("release");
    let reply = w.run_request(&request).expect("late retry");
    assert!(
        matches!(reply, Reply::Ticket(TicketView::Finished { .. })),
        "{reply:?}"
    );
    assert_eq!(w.doc.as_ref().map(|d| d.tickets.len()), Some(0));
}

#[test]
fn leases_expire_and_waiters_are_abandoned() {
    let mut w = World::new();
    w.run(Op::Enqueue(enqueue(1))).expect("1");
    w.run(Op::Enqueue(enqueue(2))).expect("2");
    w.now_ms += 9_999;
    w.run(Op::Renew {
        token: token(1),
        ttl_ms: None,
    })
    .expect("renew in time");
    w.now_ms += 10_000;
    w.run(Op::Tick).expect("tick");
    assert!(w.finished.contains(&("t1".into(), Outcome::Expired)));
    // t2 was not refreshing either: 60 s waiter lease ended earlier? No: 19.999 s < 60 s.
    assert_eq!(w.holders(), vec!["t2"]);
    w.run(Op::Enqueue(enqueue(3))).expect("3");
    w.now_ms += 60_000;
    w.run(Op::Tick).expect("tick");
    assert!(w.finished.contains(&("t3".into(), Outcome::Abandoned)));
}

#[test]
fn a_changed_store_epoch_ends_every_ticket() {
    let mut w = World::new();
    w.run(Op::Enqueue(enqueue(1))).expect("1");
    w.run(Op::Enqueue(enqueue(2))).expect("2");
    let doc = w.doc.clone().expect("doc");
    let clock = Clock::Store {
        uncertain_ms: 0,
        now_ms: 5,
        epoch: "boot-2",
        wall_ms: 1_800_000_000_000,
    };
    let applied = apply(
        Some(&doc),
        &Request {
            finishes_seen: None,
            may_arrive_late: false,
            attempt: "x".into(),
            op: Op::Tick,
        },
        &clock,
    )
    .expect("tick");
    assert!(applied.doc.tickets.is_empty());
    assert_eq!(applied.finished.len(), 2);
    assert!(
        applied.doc.fence >= doc.fence,
        "an idle key keeps its fence"
    );
}

#[test]
fn operators_cancel_and_force_release() {
    let mut w = World::new();
    w.run(Op::Enqueue(enqueue(1))).expect("1");
    w.run(Op::Enqueue(enqueue(2))).expect("2");
    w.run(Op::Enqueue(enqueue(3))).expect("3");
    // The reply says which were held (force-released) and which waited.
    assert_eq!(
        w.run(Op::Cancel {
            reason: None,
            id: "t3".into(),
            by: String::new()
        }),
        Ok(Reply::Cancelled(vec![CancelledTicket::new("t3", false)]))
    );
    assert_eq!(
        w.run(Op::Cancel {
            reason: None,
            id: "t1".into(),
            by: String::new()
        }),
        Ok(Reply::Cancelled(vec![CancelledTicket::new("t1", true)]))
    );
    assert_eq!(w.holders(), vec!["t2"]);
    let err = w
        .run(Op::Renew {
            token: token(1),
            ttl_ms: None,
        })
        .expect_err("forced");
    assert!(matches!(err, Refusal::Ended { forced: true, .. }));
    w.run(Op::Enqueue(enqueue(4))).expect("4");
    w.run(Op::Enqueue(enqueue(5))).expect("5");
    let reply = w
        .run(Op::CancelQueued { by: String::new() })
        .expect("cancel queued");
    let withdrawn = |id: &str| CancelledTicket::new(id, false);
    assert_eq!(
        reply,
        Reply::Cancelled(vec![withdrawn("t4"), withdrawn("t5")])
    );
    assert_eq!(
        w.run(Op::Cancel {
            reason: None,
            id: "nope".into(),
            by: String::new()
        }),
        Err(Refusal::UnknownId { id: "nope".into() })
    );
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let mut w = World::new();
    w.run(Op::Enqueue(enqueue(1))).expect("1");
    let before = w.doc.clone();
    let cases = vec![
        Op::Enqueue(Enqueue {
            pool: None,
            context: "x".repeat(1025),
            ..enqueue(2)
        }),
        Op::Enqueue(Enqueue {
            pool: None,
            ttl_ms: 10,
            ..enqueue(2)
        }),
        Op::Enqueue(Enqueue {
            pool: None,
            id: "bad id".into(),
            ..enqueue(2)
        }),
        Op::Enqueue(Enqueue {
            pool: None,
            limit: 0,
            ..enqueue(2)
        }),
        Op::Enqueue(Enqueue {
            pool: None,
            order: Some(String::new()),
            ..enqueue(2)
        }),
        Op::Enqueue(Enqueue {
            pool: None,
            max_live: 1,
            ..enqueue(2)
        }),
        Op::Release {
            token: token(1),
            outcome: Outcome::Expired,
            reason: None,
        },
        Op::Renew {
            token: String::new(),
            ttl_ms: None,
        },
    ];
    for op in cases {
        assert!(w.run(op.clone()).is_err(), "{op:?} accepted");
        assert_eq!(w.doc, before, "{op:?} changed the document");
    }
}

#[test]
fn observation_expires_only_after_a_heartbeat_is_seen_unchanged_for_the_lease() {
    // Store without a clock: each client judges by its own monotonic clock.
    let mut observer = Observer::default();
    fn clock(o: &Observer, mono_ms: u64) -> Clock<'_> {
        Clock::Observed {
            observer: o,
            mono_ms,
            wall_ms: 1_700_000_000_000,
        }
    }
    let req = |op| Request {
        finishes_seen: None,
        may_arrive_late: false,
        attempt: format!("{op:?}"),
        op,
    };
    let a = apply(None, &req(Op::Enqueue(enqueue(1))), &clock(&observer, 0)).expect("1");
    assert_eq!(a.doc.tickets[0].deadline_ms, None);
    let doc = a.doc;
    // A second client starts observing late, at its own mono 500_000 (clocks do not agree).
    observer.observe(&doc, 500_000);
    let tick = req(Op::Tick);
    let applied = apply(Some(&doc), &tick, &clock(&observer, 509_999)).expect("tick");
    assert!(applied.finished.is_empty(), "seen for less than the TTL");
    let applied = apply(Some(&doc), &tick, &clock(&observer, 510_000)).expect("tick");
    assert_eq!(
        applied.finished.len(),
        1,
        "seen unchanged for the whole TTL"
    );
    // A heartbeat restarts the observation.
    let renewed = apply(
        Some(&doc),
        &req(Op::Renew {
            token: token(1),
            ttl_ms: None,
        }),
        &clock(&observer, 505_000),
    )
    .expect("renew");
    observer.observe(&renewed.doc, 506_000);
    let applied = apply(Some(&renewed.doc), &tick, &clock(&observer, 515_000)).expect("tick");
    assert!(applied.finished.is_empty());
}

/// Enqueues and releases tickets `from..to` one after another.
fn cycle(w: &mut World, from: u32, to: u32) {
    for n in from..to {
        w.run(Op::Enqueue(enqueue(n))).expect("enqueue");
        w.run(Op::Release {
            token: token(n),
            outcome: Outcome::Succeeded,
            reason: None,
        })
        .expect("release");
    }
}

#[test]
fn a_retry_is_recognised_or_refused_as_uncertain_never_repeated() {
    let remembered = baton_core::limits::FINISHED_REMEMBERED as u32;
    let mut w = World::new();
    cycle(&mut w, 1, 3);
    let seen = w.doc.as_ref().map(|d| d.finishes);
    assert_eq!(seen, Some(2));
    // An enqueue whose reply was lost; the ticket is released by a waiter of its own token
    // (as `baton release` would) and then more tickets end than the document remembers.
    let lost = Request {
        finishes_seen: None,
        may_arrive_late: false,
        attempt: "lost-enqueue".into(),
        op: Op::Enqueue(enqueue(100)),
    };
    w.run_request(&lost).expect("landed, reply lost");
    w.run(Op::Release {
        token: token(100),
        outcome: Outcome::Succeeded,
        reason: None,
    })
    .expect("released");
    let retry = Request {
        finishes_seen: seen,
        may_arrive_late: false,
        ..lost
    };
    // Within the window the retry finds the ticket's mark and answers as before.
    cycle(&mut w, 3, 3 + remembered - 1);
    let answer = w.run_request(&retry).expect("recognised");
    assert!(
        matches!(&answer, Reply::Ticket(TicketView::Finished { id, .. }) if id == "t100"),
        "{answer:?}"
    );
    // Past it the mark is gone: the retry is refused, not enqueued again.
    cycle(&mut w, 100 + 1, 100 + 3);
    let doc_before = w.doc.clone();
    assert_eq!(w.run_request(&retry), Err(Refusal::Uncertain));
    assert_eq!(w.doc, doc_before, "a refused retry changes nothing");
    assert!(Refusal::Uncertain.to_string().contains("baton log"));
    // A first attempt naming the forgotten ticket's token is simply unknown.
    let err = w
        .run(Op::Renew {
            token: token(100),
            ttl_ms: None,
        })
        .expect_err("forgotten");
    assert_eq!(err, Refusal::UnknownToken);
    let doc = w.doc.as_ref().expect("doc");
    assert_eq!(doc.finished.len(), remembered as usize);
    assert_eq!(doc.finishes, u64::from(2 + 1 + (remembered - 1) + 2));
}

#[test]
fn a_forgotten_tickets_id_may_start_a_new_ticket() {
    // Ids are unique among the tickets a key knows (live or remembered). A client that reuses
    // an id long after its ticket ended gets a new ticket, and its history has both.
    let remembered = baton_core::limits::FINISHED_REMEMBERED as u32;
    let mut w = World::new();
    cycle(&mut w, 1, 2);
    let reuse = Enqueue {
        pool: None,
        token: token(999),
        ..enqueue(1)
    };
    assert_eq!(
        w.run(Op::Enqueue(reuse.clone())),
        Err(Refusal::DuplicateId { id: "t1".into() }),
        "remembered: refused"
    );
    cycle(&mut w, 2, 2 + remembered);
    let status = live(w.run(Op::Enqueue(reuse)).expect("forgotten: a new ticket"));
    assert_eq!(
        (status.id.as_str(), status.state),
        ("t1", TicketState::Held)
    );
    let t1: Vec<&(String, Outcome)> = w.finished.iter().filter(|(id, _)| id == "t1").collect();
    assert_eq!(t1.len(), 1, "the first t1 ended once");
}

#[test]
fn a_renewal_never_moves_a_deadline_earlier() {
    // Readings of the store's clock may go backwards (the later request's reply was slower to
    // come back), and a renewal may ask for a shorter TTL. The holder still counts on the lease
    // the last renewal it saw answered set: a renewal whose answer was lost, or a claim sent on
    // the strength of a grant's claim window, must not cut that lease short on the store.
    let mut w = World::new();
    w.now_ms = 5_000;
    w.run(Op::Enqueue(enqueue(1))).expect("enqueue");
    let deadline = |w: &World| w.doc.as_ref().and_then(|d| d.by_id("t1")?.deadline_ms);
    assert_eq!(deadline(&w), Some(15_000));
    w.now_ms = 4_200; // a reading 800 ms behind the last one
    w.run(Op::Renew {
        token: token(1),
        ttl_ms: None,
    })
    .expect("renew");
    assert_eq!(deadline(&w), Some(15_000), "a lagging reading shortened it");
    w.now_ms = 6_000;
    w.run(Op::Renew {
        token: token(1),
        ttl_ms: Some(2_000),
    })
    .expect("renew shorter");
    assert_eq!(deadline(&w), Some(15_000), "a shorter TTL cut it short");
    w.now_ms = 14_000;
    w.run(Op::Renew {
        token: token(1),
        ttl_ms: None,
    })
    .expect("renew again");
    assert_eq!(
        deadline(&w),
        Some(16_000),
        "the new TTL counts from then on"
    );

    // A grant's claim window (3 s) longer than its TTL (1 s): the claim keeps the window.
    let mut w = World::new();
    let short = |n| Enqueue {
        pool: None,
        ttl_ms: 1_000,
        ..enqueue(n)
    };
    w.run(Op::Enqueue(short(1))).expect("1");
    w.run(Op::Enqueue(short(2))).expect("2");
    w.run(Op::Release {
        token: token(1),
        outcome: Outcome::Succeeded,
        reason: None,
    })
    .expect("release");
    let granted = w.doc.as_ref().and_then(|d| d.by_id("t2")?.deadline_ms);
    assert_eq!(granted, Some(1_000 + 3_000));
    w.now_ms = 1_500;
    w.run(Op::Refresh { token: token(2) }).expect("claim");
    let claimed = w.doc.as_ref().and_then(|d| d.by_id("t2")?.deadline_ms);
    assert_eq!(claimed, Some(4_000), "the claim cut the claim window short");
}

#[test]
fn a_coarse_store_clock_never_ends_a_lease_early() {
    // An S3 server's `Date` has whole seconds: a reading is up to 1 s behind the server's
    // time. A holder whose reading was a full second behind sets its deadline a second early;
    // a reader whose reading is exact must still not end the lease before its TTL has passed.
    let tick = |now_ms: u64, doc: &Doc| {
        let clock = Clock::Store {
            uncertain_ms: 1_000,
            now_ms,
            epoch: EPOCH,
            wall_ms: 1_700_000_000_000,
        };
        let request = Request {
            finishes_seen: None,
            may_arrive_late: false,
            attempt: "tick".into(),
            op: Op::Tick,
        };
        apply(Some(doc), &request, &clock).expect("tick")
    };
    let mut w = World::new();
    w.now_ms = 9_000; // the holder reads 9.0 s while the server is at 9.999 s
    w.run(Op::Enqueue(enqueue(1))).expect("enqueue");
    let doc = w.doc.clone().expect("doc");
    let deadline = doc.by_id("t1").and_then(|t| t.deadline_ms);
    assert_eq!(deadline, Some(9_000 + 10_000));
    // The server's time when the lease began was up to 9_999; its TTL is 10 s.
    let still_held = tick(9_999 + 10_000 - 1, &doc);
    assert!(still_held.finished.is_empty(), "ended before its TTL");
    assert!(tick(19_999, &doc).finished.is_empty());
    let ended = tick(20_000, &doc);
    assert_eq!(
        ended.finished.len(),
        1,
        "ends once the uncertainty has passed too"
    );
}

#[test]
fn tickets_written_on_observation_start_their_phase_on_a_new_store_clock() {
    // S3 judged leases by observation before it read the server's clock: its documents have no
    // epoch and no deadlines. On the store's clock they get a full phase from now, and end
    // after it; they are not ended as if the clock had restarted.
    let observer = Observer::default();
    let observed = Clock::Observed {
        observer: &observer,
        mono_ms: 0,
        wall_ms: 1_700_000_000_000,
    };
    let request = |n: u32| Request {
        finishes_seen: None,
        may_arrive_late: false,
        attempt: format!("e{n}"),
        op: Op::Enqueue(enqueue(n)),
    };
    let doc = apply(None, &request(1), &observed).expect("1").doc;
    let doc = apply(Some(&doc), &request(2), &observed).expect("2").doc;
    assert!(doc.epoch.is_none() && doc.tickets.iter().all(|t| t.deadline_ms.is_none()));
    let mut w = World::new();
    w.doc = Some(doc);
    w.now_ms = 50_000;
    w.run(Op::Tick).expect("tick");
    assert!(w.finished.is_empty(), "nothing ended: {:?}", w.finished);
    let d = w.doc.clone().expect("doc");
    assert_eq!(d.epoch.as_deref(), Some(EPOCH));
    assert_eq!(
        d.by_id("t1").and_then(|t| t.deadline_ms),
        Some(50_000 + 10_000)
    );
    assert_eq!(
        d.by_id("t2").and_then(|t| t.deadline_ms),
        Some(50_000 + 60_000)
    );
    w.now_ms = 60_000;
    w.run(Op::Tick).expect("tick");
    assert_eq!(w.finished, vec![("t1".to_string(), Outcome::Expired)]);
}
