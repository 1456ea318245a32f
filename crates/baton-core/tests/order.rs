//! `--order` values: numbers compare as integers (build numbers are not zero-padded), text as
//! strings, and a key's live tickets never mix the two.

use baton_core::{Enqueue, Op, Outcome, Refusal, Submit};
use proptest::prelude::*;

mod common;
use common::*;

fn ordered(n: u32, order: &str) -> Enqueue {
    Enqueue {
        pool: None,
        order: Some(order.into()),
        ..enqueue(n)
    }
}

fn queued_ids(w: &World) -> Vec<String> {
    let doc = w.doc.as_ref().expect("doc");
    doc.queued().iter().map(|t| t.id.clone()).collect()
}

#[test]
fn build_100_is_granted_after_build_99() {
    let mut w = World::new();
    w.run(Op::Enqueue(enqueue(1))).expect("holder");
    w.run(Op::Enqueue(ordered(2, "100"))).expect("100");
    w.run(Op::Enqueue(ordered(3, "99"))).expect("99");
    w.run(Op::Enqueue(ordered(4, "9"))).expect("9");
    assert_eq!(queued_ids(&w), vec!["t4", "t3", "t2"]);
}

#[test]
fn equal_numbers_with_leading_zeros_go_by_arrival() {
    let mut w = World::new();
    w.run(Op::Enqueue(enqueue(1))).expect("holder");
    w.run(Op::Enqueue(ordered(2, "99"))).expect("99");
    w.run(Op::Enqueue(ordered(3, "099"))).expect("099");
    w.run(Op::Enqueue(ordered(4, "0099"))).expect("0099");
    assert_eq!(queued_ids(&w), vec!["t2", "t3", "t4"]);
}

#[test]
fn build_98_supersedes_099_but_not_100() {
    let mut w = World::new();
    w.run(Op::Enqueue(enqueue(1))).expect("holder");
    w.run(Op::Enqueue(ordered(2, "099"))).expect("099");
    w.run(Op::Enqueue(ordered(3, "100"))).expect("100");
    w.run(Op::Enqueue(Enqueue {
        pool: None,
        supersede: true,
        ..ordered(4, "98")
    }))
    .expect("98");
    assert_eq!(queued_ids(&w), vec!["t4", "t2", "t3"], "98 goes first");
    assert!(
        w.finished.is_empty(),
        "nothing newer superseded: {:?}",
        w.finished
    );
    // 101 supersedes every queued build before it.
    w.run(Op::Enqueue(Enqueue {
        pool: None,
        supersede: true,
        ..ordered(5, "101")
    }))
    .expect("101");
    assert_eq!(queued_ids(&w), vec!["t5"]);
    for id in ["t2", "t3", "t4"] {
        assert!(
            w.finished.contains(&(id.into(), Outcome::Superseded)),
            "{id}"
        );
    }
}

#[test]
fn a_job_with_build_100_runs_after_build_99() {
    let mut w = World::new();
    let job = |id: &str, order: &str| Submit {
        order: Some(order.into()),
        ..submit(id)
    };
    w.run(Op::Submit(job("j100", "100"))).expect("100");
    w.run(Op::Submit(job("j99", "99"))).expect("99");
    assert_eq!(queued_ids(&w), vec!["j99", "j100"]);
}

/// The refusal names both values.
fn assert_mismatch(result: Result<baton_core::Reply, Refusal>, asked: &str, live: &str) {
    let err = result.expect_err("mixed kinds are refused");
    match &err {
        Refusal::OrderKindMismatch {
            asked: a, live: l, ..
        } => assert_eq!((a.as_str(), l.as_str()), (asked, live)),
        other => panic!("expected an order kind mismatch, got {other:?}"),
    }
    let message = err.to_string();
    assert!(
        message.contains(asked) && message.contains(live),
        "{message}"
    );
}

#[test]
fn a_number_beside_text_is_refused_and_the_reverse() {
    let mut w = World::new();
    w.run(Op::Enqueue(enqueue(1))).expect("holder");
    w.run(Op::Enqueue(ordered(2, "2024-05-01"))).expect("text");
    assert_mismatch(w.run(Op::Enqueue(ordered(3, "100"))), "100", "2024-05-01");
    let job = Submit {
        order: Some("7".into()),
        ..submit("j7")
    };
    assert_mismatch(w.run(Op::Submit(job)), "7", "2024-05-01");
    // A ticket without an order value joins any key.
    w.run(Op::Enqueue(enqueue(4))).expect("no order");

    let mut w = World::new();
    w.run(Op::Enqueue(ordered(1, "41"))).expect("number, held");
    assert_mismatch(w.run(Op::Enqueue(ordered(2, "v42"))), "v42", "41");
    // Once the key's tickets with numbers have ended, text is welcome.
    w.run(Op::Release {
        token: token(1),
        outcome: Outcome::Succeeded,
        reason: None,
    })
    .expect("release");
    w.run(Op::Enqueue(ordered(3, "v42")))
        .expect("text on an idle key");
}

proptest! {
    /// Tickets with build numbers (some zero-padded) are queued in numeric order, ties by
    /// arrival, whatever order they arrive in.
    #[test]
    fn build_numbers_queue_in_numeric_order(
        builds in prop::collection::vec((0u64..2_000, 0usize..3), 1..12)
    ) {
        let mut w = World::new();
        w.run(Op::Enqueue(enqueue(1000))).expect("holder");
        for (i, (build, zeros)) in builds.iter().enumerate() {
            let order = format!("{}{build}", "0".repeat(*zeros));
            w.run(Op::Enqueue(ordered(i as u32, &order))).expect("enqueue");
        }
        let mut want: Vec<(u64, usize)> =
            builds.iter().enumerate().map(|(i, (build, _))| (*build, i)).collect();
        want.sort();
        let want: Vec<String> = want.iter().map(|(_, i)| format!("t{i}")).collect();
        prop_assert_eq!(queued_ids(&w), want);
    }
}
