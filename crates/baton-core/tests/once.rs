//! Run-once and sequences in `apply`: a once ticket is granted only when its verdict is to run;
//! duplicates queued behind a run end skipped when it succeeds and run in turn when it fails; a
//! run that ends any other way than succeeded spends an attempt (its lease running out
//! included); spent attempts leave the key dead until `RetryOnce`; steps run in order.

use baton_core::op::TicketView;
use baton_core::{decode, encode, Mode, OnceSpec, Op, Outcome, Refusal, Reply, TicketState};

mod common;
use common::*;

fn once(n: u32, seq: Option<u64>) -> Op {
    Op::Enqueue(baton_core::Enqueue {
        pool: None,
        once: Some(OnceSpec {
            seq,
            max_attempts: 2,
            retain_ms: 60_000,
        }),
        ..enqueue(n)
    })
}

fn release(n: u32, outcome: Outcome) -> Op {
    Op::Release {
        token: token(n),
        outcome,
        reason: None,
    }
}

/// How a reply says the ticket ended (`None`: it is live).
fn ended(reply: &Reply) -> Option<Outcome> {
    match reply {
        Reply::Ticket(TicketView::Finished { outcome, .. }) => Some(*outcome),
        _ => None,
    }
}

fn record(w: &World) -> baton_core::OnceRecord {
    w.doc
        .as_ref()
        .and_then(|d| d.once.clone())
        .expect("a once record")
}

#[test]
fn duplicates_wait_for_the_run_and_are_skipped_when_it_succeeds() {
    let mut w = World::new();
    let first = live(w.run(once(1, None)).expect("enqueue"));
    assert_eq!(first.state, TicketState::Held);
    for n in 2..=5 {
        let status = live(w.run(once(n, None)).expect("enqueue"));
        assert_eq!(status.state, TicketState::Queued, "a duplicate waits");
    }
    w.run(release(1, Outcome::Succeeded)).expect("release");
    // Every duplicate ended skipped in the same write, none was granted.
    let doc = w.doc.clone().expect("doc");
    assert!(doc.tickets.is_empty(), "{:?}", doc.tickets);
    let skipped = w
        .ended
        .iter()
        .filter(|(_, o)| *o == Outcome::Skipped)
        .count();
    assert_eq!(skipped, 4);
    assert_eq!(record(&w).done_seq, 1);
    assert_eq!(record(&w).runs, 1);
    // A later caller is answered at its enqueue, and nothing is written.
    let before = w.doc.clone();
    let reply = w.run(once(6, None)).expect("enqueue");
    assert_eq!(ended(&reply), Some(Outcome::Skipped));
    assert_eq!(w.doc, before, "a skipped enqueue changes nothing");
}

#[test]
fn a_failed_run_lets_the_next_duplicate_try_and_spent_attempts_make_the_key_dead() {
    let mut w = World::new();
    w.run(once(1, None)).expect("enqueue");
    w.run(once(2, None)).expect("enqueue");
    w.run(once(3, None)).expect("enqueue");
    w.run(release(1, Outcome::Failed)).expect("release");
    assert_eq!(w.holders(), vec!["t2".to_string()], "the next one tries");
    assert_eq!(record(&w).failures, 1);
    // The second attempt (of 2) fails: dead, and the last duplicate ends dead, never granted.
    w.run(release(2, Outcome::Failed)).expect("release");
    assert!(record(&w).dead);
    assert_eq!(w.ended.last(), Some(&("t3".to_string(), Outcome::Dead)));
    let reply = w.run(once(4, None)).expect("enqueue");
    assert_eq!(ended(&reply), Some(Outcome::Dead));
    // Retry gives the attempts back.
    w.run(Op::RetryOnce).expect("retry");
    assert!(!record(&w).dead);
    assert_eq!(record(&w).failures, 0);
    let status = live(w.run(once(5, None)).expect("enqueue"));
    assert_eq!(status.state, TicketState::Held);
    w.run(release(5, Outcome::Succeeded)).expect("release");
    assert_eq!(
        w.run(Op::RetryOnce),
        Err(Refusal::OnceNotDead {
            state: "done".into()
        })
    );
}

#[test]
fn a_run_whose_lease_runs_out_is_a_spent_attempt_recorded_expired() {
    let mut w = World::new();
    w.run(once(1, None)).expect("enqueue");
    w.run(once(2, None)).expect("enqueue");
    // The holder stops renewing (killed); the waiter keeps refreshing past the lease.
    w.now_ms += 11_000;
    let status = live(w.run(Op::Refresh { token: token(2) }).expect("refresh"));
    assert_eq!(status.state, TicketState::Held, "the next caller runs it");
    assert_eq!(w.ended[0], ("t1".to_string(), Outcome::Expired));
    let r = record(&w);
    assert_eq!((r.failures, r.last), (1, Some(Outcome::Expired)));
}

#[test]
fn a_waiter_that_lapses_or_is_withdrawn_spends_no_attempt() {
    let mut w = World::new();
    w.run(once(1, None)).expect("enqueue");
    w.run(once(2, None)).expect("enqueue");
    w.run(release(2, Outcome::Cancelled)).expect("withdraw");
    w.run(release(1, Outcome::Succeeded)).expect("release");
    assert_eq!(record(&w).runs, 1);
    assert_eq!(record(&w).failures, 0);
}

#[test]
fn steps_run_in_order_a_replay_is_skipped_and_a_gap_refused() {
    let mut w = World::new();
    let reply = w.run(once(1, Some(2))).expect("enqueue");
    assert_eq!(ended(&reply), Some(Outcome::OutOfOrder));
    assert!(w.doc.as_ref().is_none_or(|d| d.tickets.is_empty()));
    live(w.run(once(2, Some(1))).expect("enqueue"));
    // Step 2 while step 1 runs: step 1 has not completed, so step 2 is refused, not queued.
    let reply = w.run(once(3, Some(2))).expect("enqueue");
    assert_eq!(ended(&reply), Some(Outcome::OutOfOrder));
    // A duplicate of step 1 waits for it, and is skipped when it succeeds.
    live(w.run(once(4, Some(1))).expect("enqueue"));
    w.run(release(2, Outcome::Succeeded)).expect("release");
    assert!(w.ended.contains(&("t4".to_string(), Outcome::Skipped)));
    live(w.run(once(3, Some(2))).expect("enqueue"));
    w.run(release(3, Outcome::Failed)).expect("release");
    // A failed step may be tried again with the same number.
    live(w.run(once(5, Some(2))).expect("enqueue"));
    w.run(release(5, Outcome::Succeeded)).expect("release");
    let r = record(&w);
    assert_eq!((r.done_seq, r.failures), (2, 0));
    let reply = w.run(once(6, Some(1))).expect("enqueue");
    assert_eq!(ended(&reply), Some(Outcome::Skipped));
    let reply = w.run(once(7, Some(4))).expect("enqueue");
    assert_eq!(ended(&reply), Some(Outcome::OutOfOrder));
}

#[test]
fn a_success_is_forgotten_after_its_retention() {
    let mut w = World::new();
    w.run(once(1, None)).expect("enqueue");
    w.run(release(1, Outcome::Succeeded)).expect("release");
    w.now_ms += 59_000;
    assert_eq!(
        ended(&w.run(once(2, None)).expect("enqueue")),
        Some(Outcome::Skipped)
    );
    w.now_ms += 1_000;
    let status = live(w.run(once(3, None)).expect("enqueue"));
    assert_eq!(status.state, TicketState::Held, "forgotten: it runs again");
    assert_eq!(record(&w).done_seq, 0);
}

#[test]
fn a_once_ticket_is_a_mutex_and_its_spec_is_checked() {
    let mut w = World::new();
    let shared = Op::Enqueue(baton_core::Enqueue {
        pool: None,
        mode: Mode::Shared,
        once: Some(OnceSpec::new()),
        ..enqueue(1)
    });
    assert!(matches!(w.run(shared), Err(Refusal::Invalid(_))));
    let seq0 = Op::Enqueue(baton_core::Enqueue {
        pool: None,
        once: Some(OnceSpec {
            seq: Some(0),
            ..OnceSpec::new()
        }),
        ..enqueue(2)
    });
    assert!(matches!(w.run(seq0), Err(Refusal::Invalid(_))));
    assert_eq!(w.doc, None);
}

#[test]
fn a_lock_ticket_and_a_once_ticket_share_the_key_in_order() {
    let mut w = World::new();
    live(w.run(Op::Enqueue(enqueue(1))).expect("lock"));
    let status = live(w.run(once(2, None)).expect("once"));
    assert_eq!(status.state, TicketState::Queued);
    live(w.run(Op::Enqueue(enqueue(3))).expect("lock"));
    w.run(release(1, Outcome::Succeeded)).expect("release");
    assert_eq!(w.holders(), vec!["t2".to_string()]);
    // A lock ticket's end never touches the record; only the once run's does.
    w.run(release(2, Outcome::Succeeded)).expect("release");
    assert_eq!(record(&w).runs, 1);
    assert_eq!(w.holders(), vec!["t3".to_string()]);
}

#[test]
fn a_document_with_a_once_record_is_format_3_and_round_trips() {
    let mut w = World::new();
    w.run(once(1, Some(1))).expect("enqueue");
    let doc = w.doc.clone().expect("doc");
    let bytes = encode(&doc).expect("encode");
    assert!(String::from_utf8_lossy(&bytes).contains("\"format\":3"));
    assert_eq!(decode(&bytes).expect("decode"), doc);
    w.run(release(1, Outcome::Succeeded)).expect("release");
    let doc = w.doc.clone().expect("doc");
    let bytes = encode(&doc).expect("encode");
    assert!(String::from_utf8_lossy(&bytes).contains("\"format\":3"));
    assert_eq!(decode(&bytes).expect("decode"), doc);
}
