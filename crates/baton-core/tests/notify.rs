//! Notification events in `apply`'s results: which changes are which events, that only rules
//! watching the key and wanting the kind get them, `waited` raised once, the outbox's bound,
//! and a deliverer's acknowledgements (delivered events leave, failed ones back off, in order).
#![allow(clippy::unwrap_used)]

mod common;

use baton_core::notify::{Delivered, EventKind, Rule, OUTBOX_MAX};
use baton_core::{Op, Outcome};
use common::{enqueue, token, World};

fn rule(name: &str, prefix: &str, events: &[EventKind]) -> Rule {
    Rule {
        name: name.into(),
        prefix: prefix.into(),
        url: "http://127.0.0.1:9/hook".into(),
        events: events.to_vec(),
        after_ms: events.contains(&EventKind::Waited).then_some(5_000),
    }
}

fn all(name: &str) -> Rule {
    rule(name, "", &EventKind::ALL)
}

fn release(n: u32, outcome: Outcome) -> Op {
    Op::Release {
        token: token(n),
        outcome,
        reason: None,
    }
}

/// The outbox's events as (kind, ticket id, outcome).
fn events(w: &World) -> Vec<(EventKind, String, Option<Outcome>)> {
    let outbox = w.doc.as_ref().and_then(|d| d.outbox.as_ref());
    outbox
        .map(|o| {
            o.events
                .iter()
                .map(|e| (e.kind, e.id.clone(), e.outcome))
                .collect()
        })
        .unwrap_or_default()
}

fn kinds(w: &World) -> Vec<EventKind> {
    events(w).into_iter().map(|(k, _, _)| k).collect()
}

#[test]
fn without_rules_no_outbox_is_written() {
    let mut w = World::new();
    w.run(Op::Enqueue(enqueue(1))).unwrap();
    w.run(release(1, Outcome::Failed)).unwrap();
    assert!(w.doc.as_ref().unwrap().outbox.is_none());
}

#[test]
fn grants_releases_failures_and_a_recovery_are_events_in_order() {
    use EventKind::*;
    let mut w = World::new();
    w.rules = vec![all("all")];
    w.run(Op::Enqueue(enqueue(1))).unwrap();
    w.run(Op::Enqueue(enqueue(2))).unwrap();
    w.run(release(1, Outcome::Failed)).unwrap();
    w.run(release(2, Outcome::Succeeded)).unwrap();
    assert_eq!(
        kinds(&w),
        vec![Granted, Released, Failed, Granted, Released, Recovered]
    );
    let outbox = w.doc.as_ref().unwrap().outbox.as_ref().unwrap();
    let seqs: Vec<u64> = outbox.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5, 6]);
    let granted = &outbox.events[3];
    assert_eq!(granted.id, "t2");
    assert!(granted.fence.is_some());
    assert_eq!(granted.context, "client 2");
    assert_eq!(outbox.events[1].outcome, Some(Outcome::Failed));
    // A success with no failure before it is no recovery.
    w.run(Op::Enqueue(enqueue(3))).unwrap();
    w.run(release(3, Outcome::Succeeded)).unwrap();
    assert_eq!(kinds(&w).iter().filter(|k| **k == Recovered).count(), 1);
}

#[test]
fn an_expired_lease_a_forced_cancel_and_a_supersede_are_their_own_events() {
    use EventKind::*;
    let mut w = World::new();
    w.rules = vec![rule("ops", "", &[Expired, Cancelled, Superseded])];
    w.run(Op::Enqueue(enqueue(1))).unwrap();
    w.now_ms += 60_000;
    w.run(Op::Tick).unwrap();
    assert_eq!(
        events(&w),
        vec![(Expired, "t1".into(), Some(Outcome::Expired))]
    );
    w.run(Op::Enqueue(enqueue(2))).unwrap();
    w.run(Op::Cancel { id: "t2".into() }).unwrap();
    let cancelled = w.doc.as_ref().unwrap().outbox.as_ref().unwrap().events[1].clone();
    assert_eq!(cancelled.kind, Cancelled);
    assert!(cancelled.forced);
    w.run(Op::Enqueue(enqueue(3))).unwrap();
    w.run(Op::Enqueue(baton_core::Enqueue {
        order: Some("1".into()),
        ..enqueue(4)
    }))
    .unwrap();
    w.run(Op::Enqueue(baton_core::Enqueue {
        order: Some("2".into()),
        supersede: true,
        ..enqueue(5)
    }))
    .unwrap();
    assert_eq!(kinds(&w), vec![Expired, Cancelled, Superseded]);
}

#[test]
fn a_run_once_key_going_dead_is_a_dead_event() {
    let mut w = World::new();
    w.rules = vec![rule("dead", "", &[EventKind::Dead])];
    w.run(Op::Enqueue(baton_core::Enqueue {
        once: Some(baton_core::OnceSpec {
            seq: None,
            max_attempts: 1,
            retain_ms: 60_000,
        }),
        ..enqueue(1)
    }))
    .unwrap();
    w.run(release(1, Outcome::Failed)).unwrap();
    assert_eq!(kinds(&w), vec![EventKind::Dead]);
}

#[test]
fn only_rules_that_watch_the_key_and_want_the_kind_are_pending() {
    let mut w = World::new();
    // The World's key is not named: rules here watch every key, and the prefix test is below.
    w.rules = vec![
        rule("grants", "", &[EventKind::Granted]),
        rule("ends", "", &[EventKind::Released]),
    ];
    w.run(Op::Enqueue(enqueue(1))).unwrap();
    w.run(release(1, Outcome::Succeeded)).unwrap();
    let outbox = w.doc.as_ref().unwrap().outbox.clone().unwrap();
    assert_eq!(outbox.events[0].pending, vec!["grants".to_owned()]);
    assert_eq!(outbox.events[1].pending, vec!["ends".to_owned()]);
    let prefixed = rule("p", "deploy/", &[EventKind::Granted]);
    assert!(prefixed.watches("deploy/prod"));
    assert!(!prefixed.watches("build/x"));
}

#[test]
fn waited_is_raised_once_by_the_first_write_after_the_threshold() {
    let mut w = World::new();
    w.rules = vec![rule("slow", "", &[EventKind::Waited])];
    w.run(Op::Enqueue(enqueue(1))).unwrap();
    w.run(Op::Enqueue(enqueue(2))).unwrap();
    w.now_ms += 4_000;
    w.run(Op::Refresh { token: token(2) }).unwrap();
    assert!(kinds(&w).is_empty(), "not yet past --after");
    w.now_ms += 2_000;
    w.run(Op::Refresh { token: token(2) }).unwrap();
    w.now_ms += 2_000;
    w.run(Op::Refresh { token: token(2) }).unwrap();
    assert_eq!(events(&w), vec![(EventKind::Waited, "t2".into(), None)]);
    // Once the ticket ends, nothing remembers it.
    w.run(release(1, Outcome::Succeeded)).unwrap();
    w.run(release(2, Outcome::Succeeded)).unwrap();
    assert!(w
        .doc
        .as_ref()
        .unwrap()
        .outbox
        .as_ref()
        .unwrap()
        .waited
        .is_empty());
}

#[test]
fn the_outbox_keeps_the_newest_events_and_counts_the_dropped() {
    let mut w = World::new();
    w.rules = vec![rule("g", "", &[EventKind::Granted, EventKind::Released])];
    for n in 1..=60 {
        w.run(Op::Enqueue(enqueue(n))).unwrap();
        w.run(release(n, Outcome::Succeeded)).unwrap();
    }
    let outbox = w.doc.as_ref().unwrap().outbox.clone().unwrap();
    assert_eq!(outbox.events.len(), OUTBOX_MAX);
    assert_eq!(outbox.dropped, 20);
    assert_eq!(outbox.events[0].seq, 21);
    assert_eq!(outbox.events.last().unwrap().seq, 120);
}

#[test]
fn acknowledgements_remove_delivered_events_and_back_off_failed_ones_in_order() {
    let mut w = World::new();
    w.rules = vec![
        rule("a", "", &[EventKind::Granted, EventKind::Released]),
        rule("b", "", &[EventKind::Released]),
    ];
    w.run(Op::Enqueue(enqueue(1))).unwrap();
    w.run(release(1, Outcome::Succeeded)).unwrap();
    w.run(Op::Enqueue(enqueue(2))).unwrap();
    w.run(release(2, Outcome::Succeeded)).unwrap();
    let wall = |w: &World| 1_700_000_000_000 + w.now_ms;
    let outbox = w.doc.as_ref().unwrap().outbox.clone().unwrap();
    let due_a: Vec<u64> = outbox.due("a", wall(&w)).map(|e| e.seq).collect();
    assert_eq!(due_a, vec![1, 2, 3, 4]);
    // Rule a: 1 and 2 delivered, 3 failed. Rule b gets 2 and 4.
    w.run(Op::Notified(Delivered {
        rule: "a".into(),
        seqs: vec![1, 2],
        failed: Some(3),
    }))
    .unwrap();
    w.run(Op::Notified(Delivered {
        rule: "b".into(),
        seqs: vec![2, 4],
        failed: None,
    }))
    .unwrap();
    let outbox = w.doc.as_ref().unwrap().outbox.clone().unwrap();
    let left: Vec<u64> = outbox.events.iter().map(|e| e.seq).collect();
    assert_eq!(
        left,
        vec![3, 4],
        "1 and 2 delivered to all; 3 and 4 wait for a"
    );
    // The failed event holds back the later ones of its rule until its backoff ends.
    assert_eq!(outbox.due("a", wall(&w)).count(), 0);
    assert!(
        !outbox.deliverable(wall(&w)),
        "only rule a waits, and it is backing off"
    );
    assert_eq!(outbox.events[0].tries, 1);
    w.now_ms += 1_000;
    let outbox = w.doc.as_ref().unwrap().outbox.clone().unwrap();
    let due_a: Vec<u64> = outbox.due("a", wall(&w)).map(|e| e.seq).collect();
    assert_eq!(due_a, vec![3, 4]);
    assert!(outbox.deliverable(wall(&w)));
    // An event that fails for a day is dropped and counted.
    w.now_ms += 25 * 3600 * 1000;
    w.run(Op::Notified(Delivered {
        rule: "a".into(),
        seqs: vec![],
        failed: Some(3),
    }))
    .unwrap();
    let outbox = w.doc.as_ref().unwrap().outbox.clone().unwrap();
    assert_eq!(
        outbox.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![4]
    );
    assert_eq!(outbox.dropped, 1);
}

#[test]
fn rules_are_checked_and_kept_by_name() {
    let mut settings = baton_core::notify::Settings::default();
    settings.add(all("x")).unwrap();
    let bad_url = Rule {
        url: "ftp://x".into(),
        ..all("y")
    };
    assert!(settings.add(bad_url).unwrap_err().0.contains("http"));
    let no_after = Rule {
        after_ms: None,
        ..all("z")
    };
    assert!(settings.add(no_after).unwrap_err().0.contains("--after"));
    assert!(settings
        .add(rule("bad name", "", &[EventKind::Granted]))
        .is_err());
    settings
        .add(rule("x", "deploy/", &[EventKind::Granted]))
        .unwrap();
    assert_eq!(settings.rules.len(), 1);
    assert_eq!(settings.rules[0].prefix, "deploy/");
    let decoded = baton_core::notify::Settings::decode(&settings.encode()).unwrap();
    assert_eq!(decoded, settings);
    assert!(settings.remove("x"));
    assert!(!settings.remove("x"));
    assert!(EventKind::parse("nope").unwrap_err().0.contains("granted"));
}
