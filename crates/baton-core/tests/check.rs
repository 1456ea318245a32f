//! Fence checks (`baton_core::check`): the holder with the fence passes, with its lease left on
//! the store's clock; a released turn, a lease that ran out, too little left and a store without
//! a clock are each told apart.

mod common;

use baton_core::check::{check_fence, FenceCheck};
use baton_core::{Op, Outcome};
use common::{enqueue, live, token, World};

/// A key held by ticket 1 (fence F1) with ticket 2 waiting; the world's clock at 1 000 ms.
fn held() -> (World, u64) {
    let mut w = World::new();
    let first = live(w.run(Op::Enqueue(enqueue(1))).expect("enqueue 1"));
    w.run(Op::Enqueue(enqueue(2))).expect("enqueue 2");
    assert!(first.fence > 0, "granted at once");
    (w, first.fence)
}

#[test]
fn the_holder_passes_with_the_lease_left_on_the_store_clock() {
    let (w, fence) = held();
    let doc = w.doc.as_ref();
    // enqueue(1)'s ttl is 10 s; 4 s later, 6 s are left (no uncertainty), 5 s with 1 s of it.
    let check = check_fence(doc, fence, Some(w.now_ms + 4_000), 0, None);
    assert_eq!(
        check,
        FenceCheck::Holds {
            id: "t1".into(),
            context: "client 1".into(),
            lease_left_ms: Some(6_000),
        }
    );
    assert!(check_fence(doc, fence, Some(w.now_ms + 4_000), 1_000, Some(7_000)).holds());
    assert_eq!(
        check_fence(doc, fence, Some(w.now_ms + 4_000), 0, Some(7_000)),
        FenceCheck::TooLittleLeft {
            id: "t1".into(),
            lease_left_ms: 6_000,
        }
    );
    assert!(check_fence(doc, fence, Some(w.now_ms + 4_000), 0, Some(6_000)).holds());
}

#[test]
fn a_lease_that_ran_out_fails_though_the_document_still_lists_it() {
    let (w, fence) = held();
    let doc = w.doc.as_ref();
    assert_eq!(
        check_fence(doc, fence, Some(w.now_ms + 10_000), 0, None),
        FenceCheck::LeaseEnded { id: "t1".into() }
    );
    // The store clock's uncertainty is waited out, as every participant waits it out.
    assert!(check_fence(doc, fence, Some(w.now_ms + 10_000), 500, None).holds());
    assert!(!check_fence(doc, fence, Some(w.now_ms + 10_500), 500, None).holds());
}

#[test]
fn after_a_release_the_old_fence_fails_and_the_new_holder_is_named() {
    let (mut w, fence) = held();
    w.run(Op::Release {
        token: token(1),
        outcome: Outcome::Succeeded,
        reason: None,
    })
    .expect("release");
    let doc = w.doc.as_ref().expect("doc");
    let next = doc.fence;
    assert!(next > fence);
    assert_eq!(
        check_fence(Some(doc), fence, Some(w.now_ms), 0, None),
        FenceCheck::NotHeld {
            last_fence: next,
            holders: vec![(next, "client 2".into())],
        }
    );
    assert!(check_fence(Some(doc), next, Some(w.now_ms), 0, None).holds());
    // A fence never granted, and a key never used.
    assert!(!check_fence(Some(doc), next + 1, Some(w.now_ms), 0, None).holds());
    assert_eq!(
        check_fence(None, 1, None, 0, None),
        FenceCheck::NotHeld {
            last_fence: 0,
            holders: vec![],
        }
    );
}

#[test]
fn without_a_store_clock_the_document_decides_and_a_minimum_left_cannot_be_told() {
    let (w, fence) = held();
    let doc = w.doc.as_ref();
    assert_eq!(
        check_fence(doc, fence, None, 0, None),
        FenceCheck::Holds {
            id: "t1".into(),
            context: "client 1".into(),
            lease_left_ms: None,
        }
    );
    assert_eq!(
        check_fence(doc, fence, None, 0, Some(1)),
        FenceCheck::NoClock
    );
    // A turn that is gone is gone on any store.
    assert!(matches!(
        check_fence(doc, fence + 1, None, 0, Some(1)),
        FenceCheck::NotHeld { .. }
    ));
}

#[test]
fn a_holder_asked_to_stop_still_holds_and_the_check_says_who_asked() {
    let (mut w, fence) = held();
    w.run(Op::Enqueue(baton_core::Enqueue {
        pool: None,
        cancel_running: true,
        ..common::enqueue(3)
    }))
    .expect("a newer ticket asks");
    let check = check_fence(w.doc.as_ref(), fence, Some(w.now_ms), 0, None);
    assert_eq!(
        check,
        FenceCheck::StopAsked {
            id: "t1".into(),
            by: "ticket t3 (client 3)".into(),
        }
    );
    assert!(check.holds(), "it still holds: nobody is granted beside it");
}
