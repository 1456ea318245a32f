//! Notification events in `apply`'s results: which changes are which events, that only rules
//! watching the key and wanting the kind get them, `waited` raised once, and the outbox's
//! cursors (the bound, a deliverer's acknowledgements, backoff, giving up, position hints).
#![allow(clippy::unwrap_used)]

mod common;

use baton_core::notify::{
    events_after, live_holds_all_after, Delivered, Event, EventKind, Outbox, Rule, OUTBOX_MAX,
};
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

/// A deliverer's report: `rule` has every event through `through`, and the next one failed.
fn ack(w: &mut World, rule: &str, through: u64, failed: bool) {
    w.run(Op::Notified(Delivered {
        rule: rule.into(),
        through,
        failed,
        ..Delivered::default()
    }))
    .unwrap();
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
fn events_ride_on_their_tickets_never_on_history_entries_of_their_own() {
    let mut w = World::new();
    w.rules = vec![all("all")];
    w.run(Op::Enqueue(enqueue(1))).unwrap();
    // While t1 holds, its grant is a note in the document.
    let live = outbox(&w).live;
    assert_eq!(live.len(), 1);
    assert_eq!(
        (live[0].ticket.as_str(), live[0].note.kind),
        ("t1", EventKind::Granted)
    );
    assert!(
        w.entries.is_empty(),
        "a grant appends nothing to the history"
    );
    // When t1 ends, the grant moves into its finished entry, with its end's events.
    w.run(release(1, Outcome::Succeeded)).unwrap();
    assert!(outbox(&w).live.is_empty());
    assert_eq!(
        w.entries.len(),
        1,
        "one entry for the ticket, events and all"
    );
    let noted: Vec<(u64, EventKind)> = w.entries[0]
        .events
        .iter()
        .map(|n| (n.seq, n.kind))
        .collect();
    assert_eq!(
        noted,
        vec![(1, EventKind::Granted), (2, EventKind::Released)]
    );
    let bytes = w.entries[0].encode();
    assert_eq!(
        baton_core::Finished::decode(&bytes).as_ref(),
        Ok(&w.entries[0])
    );
    // The events a deliverer builds from the entry are those recorded.
    let tail = vec![(0, w.entries[0].clone())];
    let built = events_after(w.doc.as_ref().unwrap(), &tail, 0);
    let built: Vec<Event> = built.into_iter().map(|(_, e)| e).collect();
    assert_eq!(built, w.events);
    // Without rules, an entry says nothing of events.
    let mut quiet = World::new();
    quiet.run(Op::Enqueue(enqueue(1))).unwrap();
    quiet.run(release(1, Outcome::Succeeded)).unwrap();
    assert!(!String::from_utf8_lossy(&quiet.entries[0].encode()).contains("events"));
}

#[test]
fn delivered_notes_are_forgotten_and_entries_carry_only_what_is_owed() {
    let mut w = World::new();
    w.rules = vec![rule("g", "", &[EventKind::Granted, EventKind::Released])];
    w.run(Op::Enqueue(enqueue(1))).unwrap();
    assert!(
        live_holds_all_after(&outbox(&w), 0),
        "no history to read for the grant"
    );
    ack(&mut w, "g", 1, false);
    let o = outbox(&w);
    assert!(o.live.is_empty() && o.cursors.is_empty(), "{o:?}");
    // The grant was delivered: t1's entry carries only its release.
    w.run(release(1, Outcome::Succeeded)).unwrap();
    let noted: Vec<u64> = w.entries[0].events.iter().map(|n| n.seq).collect();
    assert_eq!(noted, vec![2]);
    assert!(
        !live_holds_all_after(&outbox(&w), 1),
        "the release is in the history"
    );
}

#[test]
fn a_deliverer_finds_every_owed_event_in_the_document_and_the_history_tail() {
    let mut w = World::new();
    w.rules = vec![all("all")];
    w.run(Op::Enqueue(enqueue(1))).unwrap();
    w.run(Op::Enqueue(enqueue(2))).unwrap();
    w.run(release(1, Outcome::Failed)).unwrap();
    w.now_ms += 6_000;
    w.run(Op::Enqueue(enqueue(3))).unwrap();
    // t3 waits (a live note), t2 holds (a live grant), t1's events are in its entry.
    let tail: Vec<(u64, baton_core::Finished)> = w
        .entries
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, f)| (i as u64, f))
        .collect();
    let doc = w.doc.as_ref().unwrap();
    let built: Vec<Event> = events_after(doc, &tail, 0)
        .into_iter()
        .map(|(_, e)| e)
        .collect();
    assert_eq!(built, w.events);
    let after_two: Vec<u64> = events_after(doc, &tail, 2)
        .iter()
        .map(|(_, e)| e.seq)
        .collect();
    assert_eq!(after_two, (3..=w.events.len() as u64).collect::<Vec<_>>());
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
    w.run(Op::Cancel {
        reason: None,
        id: "t2".into(),
        by: "alice on call".into(),
    })
    .unwrap();
    assert_eq!(w.events[1].kind, Cancelled);
    assert!(w.events[1].forced);
    let reason = w.events[1].reason.as_deref();
    assert_eq!(
        reason,
        Some("force-released by alice on call"),
        "who forced it"
    );
    // A queued ticket cancelled by someone unknown says so.
    w.run(Op::Enqueue(enqueue(8))).unwrap();
    w.run(Op::Enqueue(enqueue(9))).unwrap();
    w.run(Op::Cancel {
        reason: None,
        id: "t9".into(),
        by: String::new(),
    })
    .unwrap();
    assert_eq!(
        w.events[2].reason.as_deref(),
        Some("cancelled by an operator")
    );
    assert!(!w.events[2].forced);
    w.run(release(8, Outcome::Succeeded)).unwrap();
    w.run(Op::Enqueue(enqueue(3))).unwrap();
    w.run(Op::Enqueue(baton_core::Enqueue {
        pool: None,
        order: Some("1".into()),
        ..enqueue(4)
    }))
    .unwrap();
    w.run(Op::Enqueue(baton_core::Enqueue {
        pool: None,
        order: Some("2".into()),
        supersede: true,
        ..enqueue(5)
    }))
    .unwrap();
    assert_eq!(kinds(&w), vec![Expired, Cancelled, Cancelled, Superseded]);
}

#[test]
fn a_run_once_key_going_dead_is_a_dead_event() {
    let mut w = World::new();
    w.rules = vec![rule("dead", "", &[EventKind::Dead])];
    w.run(Op::Enqueue(baton_core::Enqueue {
        pool: None,
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
    // Its position hint moved with it: a deliverer reads the entries of the tickets the last
    // 100 events are about (two events each here), give or take a mark, not the whole history.
    let tickets = OUTBOX_MAX as u64 / 2;
    let read = outbox.tail_to_read();
    assert!(read >= tickets, "{read}");
    assert!(read <= tickets + baton_core::notify::MARK_EVERY, "{read}");
    // The document does not grow with the events: it is as small with 120 as with 2.
    let bytes = baton_core::encode(w.doc.as_ref().unwrap()).unwrap();
    assert!(bytes.len() < 2_000, "{} bytes", bytes.len());
}

#[test]
fn positions_say_how_much_history_to_read() {
    let mut w = World::new();
    w.rules = vec![rule("r", "", &[EventKind::Released])];
    // Entries appended: t1's end, which carries its released event.
    w.run(Op::Enqueue(enqueue(1))).unwrap();
    w.run(release(1, Outcome::Succeeded)).unwrap();
    let first = outbox(&w);
    assert_eq!(first.appended, 1);
    assert_eq!(first.cursors[0].from, 0, "the finished entry");
    assert_eq!(first.tail_to_read(), 1);
    // More history after it widens the read.
    w.run(Op::Enqueue(enqueue(2))).unwrap();
    w.run(release(2, Outcome::Succeeded)).unwrap();
    assert_eq!(outbox(&w).appended, 2);
    assert_eq!(outbox(&w).tail_to_read(), 2);
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
    ack(&mut w, "a", 2, true);
    ack(&mut w, "b", 4, false);
    let o = outbox(&w);
    assert_eq!(o.cursors.len(), 1, "b has everything: its cursor goes");
    assert_eq!((o.cursors[0].through, o.cursors[0].tries), (2, 1));
    assert!(!o.deliverable(wall(&w)), "a backs off");
    w.now_ms += 1_000;
    assert!(outbox(&w).deliverable(wall(&w)));
    // Failing for a day: what it has is skipped, counted.
    w.now_ms += 25 * 3600 * 1000;
    ack(&mut w, "a", 2, true);
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

/// Random changes of a key with a rule for every kind, and deliverers acknowledging (or
/// failing) at random: at every step, for every rule's cursor, the events a deliverer builds
/// from the document and the history are exactly the recorded ones after the cursor, and the
/// cursor's position hint is at or before the first of them. This is what makes moving notes
/// between the document and finished entries safe: no owed event is lost or made up.
mod owed_events {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Step {
        Enqueue(u32),
        Release(u32, bool),
        Wait(u64),
        Cancel(u32),
        Ack { through: u64, failed: bool },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (1u32..6).prop_map(Step::Enqueue),
            ((1u32..6), any::<bool>()).prop_map(|(n, ok)| Step::Release(n, ok)),
            (1u64..20_000).prop_map(Step::Wait),
            (1u32..6).prop_map(Step::Cancel),
            ((0u64..8), any::<bool>()).prop_map(|(through, failed)| Step::Ack { through, failed }),
        ]
    }

    fn check(w: &World) -> Result<(), TestCaseError> {
        let Some(doc) = w.doc.as_ref() else {
            return Ok(());
        };
        let Some(outbox) = doc.outbox.as_ref() else {
            return Ok(());
        };
        // The rules are set before the first change, so positions are indexes of entries.
        let tail: Vec<(u64, baton_core::Finished)> = w
            .entries
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, f)| (i as u64, f))
            .collect();
        for cursor in &outbox.cursors {
            let built = events_after(doc, &tail, cursor.through);
            let wanted: Vec<&Event> = w
                .events
                .iter()
                .filter(|e| e.seq > cursor.through && e.rules.contains(&cursor.rule))
                .collect();
            let got: Vec<&Event> = built
                .iter()
                .map(|(_, e)| e)
                .filter(|e| e.rules.contains(&cursor.rule))
                .collect();
            prop_assert_eq!(got, wanted);
            if let Some((position, _)) = built.first() {
                prop_assert!(
                    *position >= cursor.from,
                    "hint {} past {}",
                    cursor.from,
                    position
                );
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
        #[test]
        fn every_owed_event_can_be_built(steps in proptest::collection::vec(step(), 1..80)) {
            let mut w = World::new();
            w.rules = vec![
                all("all"),
                rule("ends", "", &[EventKind::Released, EventKind::Failed, EventKind::Cancelled]),
            ];
            for step in steps {
                let _ = match step {
                    Step::Enqueue(n) => w.run(Op::Enqueue(enqueue(n))),
                    Step::Release(n, ok) => {
                        let outcome = if ok { Outcome::Succeeded } else { Outcome::Failed };
                        w.run(release(n, outcome))
                    }
                    Step::Wait(ms) => {
                        w.now_ms += ms;
                        w.run(Op::Tick)
                    }
                    Step::Cancel(n) => w.run(Op::Cancel {
                        reason: None,
                        id: format!("t{n}"),
                        by: "ops".into(),
                    }),
                    Step::Ack { through, failed } => {
                        let rule = if through % 2 == 0 { "all" } else { "ends" };
                        let last = w.doc.as_ref().and_then(|d| d.outbox.as_ref());
                        let from = last.and_then(|o| o.cursors.iter().find(|c| c.rule == rule));
                        let Some(cursor) = from.cloned() else { continue };
                        w.run(Op::Notified(Delivered {
                            rule: rule.into(),
                            through: cursor.through + through,
                            failed,
                            ..Delivered::default()
                        }))
                    }
                };
                check(&w)?;
            }
        }
    }
}
