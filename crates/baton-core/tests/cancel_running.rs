//! `cancel_running` (`baton run --cancel-running`): a new ticket asks the key's holders that
//! were not queued with `keep` to stop. Nothing ends at the ask: the holder hears it at its
//! next renewal, releases as superseded (which only an asked holder may), and only then is the
//! new ticket granted, in its turn.

mod common;

use baton_core::op::TicketView;
use baton_core::{Enqueue, Op, Outcome, Refusal, Reply, TicketState};
use common::{enqueue, live, token, World};

fn cancelling(n: u32) -> Enqueue {
    Enqueue {
        pool: None,
        cancel_running: true,
        ..enqueue(n)
    }
}

fn stop_asked(w: &World, id: &str) -> Option<String> {
    w.doc.as_ref()?.by_id(id)?.stop_asked.clone()
}

#[test]
fn a_holder_is_asked_and_the_new_ticket_waits_until_it_releases_as_superseded() {
    let mut w = World::new();
    w.run(Op::Enqueue(enqueue(1))).expect("1");
    w.run(Op::Enqueue(enqueue(2))).expect("2 queued");
    let third = live(w.run(Op::Enqueue(cancelling(3))).expect("3"));
    assert_eq!(
        third.state,
        TicketState::Queued,
        "nobody is granted at the ask"
    );
    assert_eq!(
        stop_asked(&w, "t1").as_deref(),
        Some("ticket t3 (client 3)")
    );
    assert_eq!(stop_asked(&w, "t2"), None, "only holders are asked");
    assert_eq!(w.holders(), ["t1"]);

    // The holder hears it when it renews, and keeps its lease meanwhile.
    let renewed = live(
        w.run(Op::Renew {
            token: token(1),
            ttl_ms: None,
        })
        .expect("renew"),
    );
    assert_eq!(renewed.stop_asked.as_deref(), Some("ticket t3 (client 3)"));
    assert_eq!(renewed.state, TicketState::Held);

    let released = w
        .run(Op::Release {
            token: token(1),
            outcome: Outcome::Superseded,
            reason: Some("asked to stop by ticket t3 (client 3) (--cancel-running)".into()),
        })
        .expect("an asked holder releases as superseded");
    assert!(matches!(
        released,
        Reply::Ticket(TicketView::Finished {
            outcome: Outcome::Superseded,
            ..
        })
    ));
    assert!(w.ended.contains(&("t1".into(), Outcome::Superseded)));
    // The queue goes on in its order: t2 was ahead of t3.
    assert_eq!(w.holders(), ["t2"]);
}

#[test]
fn holders_queued_with_keep_are_not_asked_and_unasked_holders_cannot_claim_superseded() {
    let mut w = World::new();
    w.run(Op::Enqueue(Enqueue {
        pool: None,
        keep: true,
        limit: 2,
        ..enqueue(1)
    }))
    .expect("1");
    w.run(Op::Enqueue(Enqueue {
        pool: None,
        limit: 2,
        ..enqueue(2)
    }))
    .expect("2");
    w.run(Op::Enqueue(Enqueue {
        pool: None,
        limit: 2,
        ..cancelling(3)
    }))
    .expect("3");
    assert_eq!(stop_asked(&w, "t1"), None, "kept");
    assert!(stop_asked(&w, "t2").is_some(), "asked");
    let refused = w
        .run(Op::Release {
            token: token(1),
            outcome: Outcome::Superseded,
            reason: None,
        })
        .expect_err("a holder nobody asked to stop is not superseded");
    assert!(matches!(refused, Refusal::BadOutcome { .. }), "{refused:?}");
    assert_eq!(w.holders(), ["t1", "t2"], "the refusal changed nothing");
}

#[test]
fn a_holder_that_ignores_the_ask_keeps_the_key_until_its_lease_runs_out() {
    let mut w = World::new();
    w.run(Op::Enqueue(enqueue(1))).expect("1");
    w.run(Op::Enqueue(cancelling(2))).expect("2");
    // Renewed as asked, but never released: still the holder, the newer one waits.
    for _ in 0..3 {
        w.now_ms += 5_000;
        w.run(Op::Renew {
            token: token(1),
            ttl_ms: None,
        })
        .expect("renew");
        w.run(Op::Refresh { token: token(2) }).expect("refresh");
        assert_eq!(w.holders(), ["t1"]);
    }
    w.now_ms += 10_001;
    w.run(Op::Refresh { token: token(2) }).expect("refresh");
    assert!(w.ended.contains(&("t1".into(), Outcome::Expired)));
    assert_eq!(w.holders(), ["t2"]);
}

#[test]
fn who_asked_is_cut_short_enough_for_a_release_reason() {
    let mut w = World::new();
    w.run(Op::Enqueue(enqueue(1))).expect("1");
    w.run(Op::Enqueue(Enqueue {
        pool: None,
        context: "é".repeat(500),
        ..cancelling(2)
    }))
    .expect("2");
    let by = stop_asked(&w, "t1").expect("asked");
    assert!(
        by.len() <= baton_core::apply::STOP_ASKED_MAX_BYTES,
        "{}",
        by.len()
    );
    assert!(by.starts_with("ticket t2 (é") && by.ends_with('…'), "{by}");
    let reason = format!("asked to stop by {by} (--cancel-running)");
    assert!(baton_core::limits::check_reason(&reason).is_ok());
}

#[test]
fn a_job_submitted_with_cancel_running_asks_the_lock_holders() {
    let mut w = World::new();
    w.run(Op::Enqueue(enqueue(1))).expect("1");
    w.run(Op::Submit(baton_core::Submit {
        cancel_running: true,
        ..common::submit("j1")
    }))
    .expect("submit");
    assert_eq!(
        stop_asked(&w, "t1").as_deref(),
        Some("ticket j1 (submitted j1)"),
        "the lock holder is asked"
    );
}

#[test]
fn a_running_job_is_asked_too_and_ends_superseded_when_its_worker_stops_it() {
    use baton_core::job::JobResult;
    let mut w = World::new();
    w.run(Op::Submit(common::submit("j1"))).expect("submit");
    w.run(Op::Claim {
        token: token(7),
        ttl_ms: 30_000,
    })
    .expect("a worker claims j1");
    let complete = |result| Op::Complete {
        token: token(7),
        id: None,
        result,
    };
    // Nobody asked yet: superseded is refused, and nothing changes.
    let refused = w
        .run(complete(JobResult::Superseded { reason: None }))
        .expect_err("not asked");
    assert!(matches!(refused, Refusal::BadOutcome { .. }), "{refused:?}");
    assert_eq!(w.holders(), ["j1"]);

    w.run(Op::Enqueue(cancelling(2))).expect("a run asks");
    assert_eq!(
        stop_asked(&w, "j1").as_deref(),
        Some("ticket t2 (client 2)")
    );
    w.run(complete(JobResult::Superseded {
        reason: Some("asked to stop by ticket t2 (client 2) (--cancel-running)".into()),
    }))
    .expect("the worker stopped it");
    assert!(
        w.ended.contains(&("j1".into(), Outcome::Superseded)),
        "the job ends, never retried: {:?}",
        w.ended
    );
    assert_eq!(w.holders(), ["t2"]);
}
