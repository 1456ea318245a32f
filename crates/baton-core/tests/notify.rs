//! Notification events in `apply`'s results: which changes are which events, that only rules
//! watching the key and wanting the kind get them, `waited` raised once, and the outbox's
//! cursors (the bound, a deliverer's acknowledgements, backoff, giving up, position hints).
#![allow(clippy::unwrap_used)]

mod common;

use baton_core::notify::{Delivered, Event, EventKind, Outbox, Rule, OUTBOX_MAX};
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

/// The events appended as (kind, ticket id, outcome).
fn events(w: &World) -> Vec<(EventKind, String, Option<Outcome>)> {
    w.events
        .iter()
        .map(|e| (e.kind, e.id.clone(), e.outcome))
        .collect()
}

fn kinds(w: &World) -> Vec<EventKind> {
    w.events.iter().map(|e| e.kind).collect()
}

fn outbox(w: &World) -> Outbox {
    w.doc.as_ref().unwrap().outbox.clone().unwrap()
}

fn wall(w: &World) -> u64 {
    1_700_000_000_000 + w.now_ms
}

#[test]
fn without_rules_nothing_is_recorded() {
    let mut w = World::new();
    w.run(Op::Enqueue(enqueue(1))).unwrap();
    w.run(release(1, Outcome::Failed)).unwrap();
    assert!(w.doc.as_ref().unwrap().outbox.is_none());
    assert!(w.events.is_empty());
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
    let seqs: Vec<u64> = w.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5, 6]);
    let granted = &w.events[3];
    assert_eq!(granted.id, "t2");
    assert!(granted.fence.is_some());
    assert_eq!(granted.context, "client 2");
    assert_eq!(w.events[1].outcome, Some(Outcome::Failed));
    // A success with no failure before it is no recovery.
    w.run(Op::Enqueue(enqueue(3))).unwrap();
    w.run(release(3, Outcome::Succeeded)).unwrap();
    assert_eq!(kinds(&w).iter().filter(|k| **k == Recovered).count(), 1);
    // The document keeps a cursor and counts, never the events.
    let outbox = outbox(&w);
    assert_eq!(outbox.last_seq, 8);
    assert_eq!(outbox.cursors.len(), 1);
    assert_eq!(outbox.cursors[0].through, 0);
    assert_eq!(outbox.undelivered(), 8);
}

#[test]
fn an_event_is_a_history_entry_that_a_finished_tickets_entry_is_not() {
    let mut w = World::new();
    w.rules = vec![all("all")];
    w.run(Op::Enqueue(enqueue(1))).unwrap();
    let event = &w.events[0];
    let bytes = event.encode();
    assert!(Event::is_entry(&bytes));
    assert_eq!(Event::from_entry(&bytes).as_ref(), Some(event));
    w.run(release(1, Outcome::Succeeded)).unwrap();
    let finished = baton_core::Finished::decode(br#"{"id":"t1","mode":"normal","outcome":"succeeded","enqueued_wall_ms":1,"finished_wall_ms":2}"#);
    assert!(finished.is_ok());
    assert!(!Event::is_entry(br#"{"id":"t1"}"#));
    assert!(baton_core::Finished::decode(&bytes).is_err());
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
    assert_eq!(w.events[1].kind, Cancelled);
    assert!(w.events[1].forced);
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
fn each_event_names_the_rules_that_want_it() {
    let mut w = World::new();
    w.rules = vec![
        rule("grants", "", &[EventKind::Granted]),
        rule("ends", "", &[EventKind::Released]),
    ];
    w.run(Op::Enqueue(enqueue(1))).unwrap();
    w.run(release(1, Outcome::Succeeded)).unwrap();
    assert_eq!(w.events[0].rules, vec!["grants".to_owned()]);
    assert_eq!(w.events[1].rules, vec!["ends".to_owned()]);
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
    assert!(outbox(&w).waited.is_empty());
}

#[test]
fn a_cursor_is_never_more_than_the_bound_behind_and_skipped_events_are_counted() {
    let mut w = World::new();
    w.rules = vec![rule("g", "", &[EventKind::Granted, EventKind::Released])];
    for n in 1..=60 {
        w.run(Op::Enqueue(enqueue(n))).unwrap();
        w.run(release(n, Outcome::Succeeded)).unwrap();
    }
    let outbox = outbox(&w);
    assert_eq!(outbox.last_seq, 120);
    assert_eq!(outbox.undelivered(), OUTBOX_MAX as u64);
    assert_eq!(outbox.cursors[0].through, 20);
    assert_eq!(outbox.dropped, 20);
    // Its position hint moved with it: a deliverer reads about the last 100 events' entries
    // (each event here follows a finished entry or a grant), not the whole history.
    assert!(outbox.tail_to_read() <= 2 * (OUTBOX_MAX as u64 + baton_core::notify::MARK_EVERY));
    assert!(outbox.tail_to_read() >= OUTBOX_MAX as u64);
    // The document does not grow with the events: it is as small with 120 as with 2.
    let bytes = baton_core::encode(w.doc.as_ref().unwrap()).unwrap();
    assert!(bytes.len() < 2_000, "{} bytes", bytes.len());
}

#[test]
fn positions_say_how_much_history_to_read() {
    let mut w = World::new();
    w.rules = vec![rule("r", "", &[EventKind::Released])];
    // Entries appended: t1's end (a finished entry) and its released event.
    w.run(Op::Enqueue(enqueue(1))).unwrap();
    w.run(release(1, Outcome::Succeeded)).unwrap();
    let first = outbox(&w);
    assert_eq!(first.appended, 2);
    assert_eq!(first.cursors[0].from, 1, "after the finished entry");
    assert_eq!(first.tail_to_read(), 1);
    // More history after it widens the read.
    w.run(Op::Enqueue(enqueue(2))).unwrap();
    w.run(release(2, Outcome::Succeeded)).unwrap();
    assert_eq!(outbox(&w).appended, 4);
    assert_eq!(outbox(&w).tail_to_read(), 3);
}

#[test]
fn acknowledgements_move_cursors_back_off_failures_and_give_up_after_a_day() {
    let mut w = World::new();
    w.rules = vec![
        rule("a", "", &[EventKind::Granted, EventKind::Released]),
        rule("b", "", &[EventKind::Released]),
    ];
    w.run(Op::Enqueue(enqueue(1))).unwrap();
    w.run(release(1, Outcome::Succeeded)).unwrap();
    w.run(Op::Enqueue(enqueue(2))).unwrap();
    w.run(release(2, Outcome::Succeeded)).unwrap();
    assert!(outbox(&w).deliverable(wall(&w)));
    // Rule a got events 1 and 2, then event 3 failed. Rule b got everything.
    w.run(Op::Notified(Delivered {
        rule: "a".into(),
        through: 2,
        failed: true,
        ..Delivered::default()
    }))
    .unwrap();
    w.run(Op::Notified(Delivered {
        rule: "b".into(),
        through: 4,
        ..Delivered::default()
    }))
    .unwrap();
    let o = outbox(&w);
    assert_eq!(o.cursors.len(), 1, "b has everything: its cursor goes");
    assert_eq!((o.cursors[0].through, o.cursors[0].tries), (2, 1));
    assert!(!o.deliverable(wall(&w)), "a backs off");
    w.now_ms += 1_000;
    assert!(outbox(&w).deliverable(wall(&w)));
    // Failing for a day: what it has is skipped, counted.
    w.now_ms += 25 * 3600 * 1000;
    w.run(Op::Notified(Delivered {
        rule: "a".into(),
        through: 2,
        failed: true,
        ..Delivered::default()
    }))
    .unwrap();
    let o = outbox(&w);
    assert!(o.cursors.is_empty());
    assert_eq!(o.dropped, 2);
    // A rule that is gone loses its cursor.
    w.run(Op::Enqueue(enqueue(3))).unwrap();
    assert_eq!(outbox(&w).cursors.len(), 1);
    w.run(Op::Notified(Delivered {
        rule: "a".into(),
        gone: true,
        ..Delivered::default()
    }))
    .unwrap();
    assert!(outbox(&w).cursors.is_empty());
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
