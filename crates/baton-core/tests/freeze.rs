//! Freeze windows (`baton pause`): while a freeze is in force no ticket is granted and no job
//! claimed, but those up to and including the last ticket that overrides it, in order; holders
//! and waiters are untouched; the document says why; scheduled and weekly windows open and
//! close on the wall clock; `paused` and `resumed` are events.

mod common;

use std::collections::HashSet;

use baton_core::freeze::{self, Freeze, Weekly};
use baton_core::notify::{EventKind, Rule};
use baton_core::{Enqueue, Op, Outcome, TicketState};
use common::{enqueue, live, submit, token, wall_at, World, KEY};
use proptest::prelude::*;

fn freeze_on(target: &str) -> Freeze {
    Freeze {
        target: target.into(),
        reason: "audit".into(),
        by: "alice@ops".into(),
        set_wall_ms: wall_at(0),
        from_ms: None,
        until_ms: None,
        weekly: None,
    }
}

fn overriding(n: u32) -> Enqueue {
    Enqueue {
        pool: None,
        override_freeze: Some("hotfix INC-42".into()),
        ..enqueue(n)
    }
}

fn release(w: &mut World, n: u32) {
    w.run(Op::Release {
        token: token(n),
        outcome: Outcome::Succeeded,
        reason: None,
    })
    .expect("release");
}

fn state(w: &World, n: u32) -> Option<TicketState> {
    w.state(&format!("t{n}"))
}

#[test]
fn a_pause_lets_the_holder_finish_and_holds_the_queue_in_place() {
    let mut w = World::new();
    w.run(Op::Enqueue(enqueue(1))).expect("1");
    w.run(Op::Enqueue(enqueue(2))).expect("2");
    w.freezes.push(freeze_on("deploy/"));

    // The holder is untouched: it renews and keeps its turn.
    let renewed = live(
        w.run(Op::Renew {
            token: token(1),
            ttl_ms: None,
        })
        .expect("renew"),
    );
    assert_eq!(renewed.state, TicketState::Held);
    let paused = w
        .doc
        .as_ref()
        .and_then(|d| d.paused.clone())
        .expect("paused");
    assert_eq!(
        (
            paused.target.as_str(),
            paused.reason.as_str(),
            paused.by.as_str()
        ),
        ("deploy/", "audit", "alice@ops")
    );
    assert_eq!(paused.until_ms, None);

    release(&mut w, 1);
    assert_eq!(
        state(&w, 2),
        Some(TicketState::Queued),
        "no grant while paused"
    );
    w.run(Op::Enqueue(enqueue(3))).expect("3 joins the queue");
    let doc = w.doc.clone().expect("doc");
    let queue: Vec<&str> = doc.queued().iter().map(|t| t.id.as_str()).collect();
    assert_eq!(queue, ["t2", "t3"], "waiters keep their places");

    // Resumed: the next write grants in order.
    w.freezes.clear();
    w.run(Op::Tick).expect("tick");
    assert_eq!(w.holders(), ["t2"]);
    assert_eq!(w.doc.as_ref().and_then(|d| d.paused.clone()), None);
}

#[test]
fn a_freeze_covers_its_key_or_prefix_only() {
    assert!(freeze::target_covers("deploy/", "deploy/prod"));
    assert!(freeze::target_covers("deploy/prod", "deploy/prod"));
    assert!(freeze::target_covers("*", "anything"));
    assert!(!freeze::target_covers("deploy/", "deploy"));
    assert!(!freeze::target_covers("deploy/prod", "deploy/production"));
    assert!(!freeze::target_covers("deploy", "deploy/prod"));

    let mut w = World::new();
    w.freezes.push(freeze_on("build/"));
    let first = live(w.run(Op::Enqueue(enqueue(1))).expect("1"));
    assert_eq!(first.state, TicketState::Held, "{KEY} is not under build/");
}

#[test]
fn an_override_is_granted_in_its_turn_and_nobody_behind_it_is() {
    let mut w = World::new();
    w.run(Op::Enqueue(enqueue(1))).expect("1");
    w.freezes.push(freeze_on("*"));
    w.run(Op::Enqueue(enqueue(2))).expect("2");
    w.run(Op::Enqueue(overriding(3))).expect("3 overrides");
    w.run(Op::Enqueue(enqueue(4))).expect("4");
    assert_eq!(w.holders(), ["t1"], "the override does not barge");

    release(&mut w, 1);
    assert_eq!(
        w.holders(),
        ["t2"],
        "the queue before the override goes first"
    );
    release(&mut w, 2);
    assert_eq!(w.holders(), ["t3"]);
    release(&mut w, 3);
    assert_eq!(
        state(&w, 4),
        Some(TicketState::Queued),
        "behind it, the freeze holds"
    );

    let entry = w
        .entries
        .iter()
        .find(|e| e.id == "t3")
        .expect("t3's history entry");
    assert_eq!(entry.override_freeze.as_deref(), Some("hotfix INC-42"));
    let before = w.entries.iter().find(|e| e.id == "t2").expect("t2's entry");
    assert_eq!(before.override_freeze, None);
}

#[test]
fn a_scheduled_window_opens_and_closes_on_the_wall_clock() {
    let mut w = World::new();
    w.freezes.push(Freeze {
        from_ms: Some(wall_at(10_000)),
        until_ms: Some(wall_at(20_000)),
        ..freeze_on(KEY)
    });
    w.run(Op::Enqueue(enqueue(1))).expect("1");
    assert_eq!(w.holders(), ["t1"], "before the window");
    w.run(Op::Enqueue(enqueue(2))).expect("2");

    w.now_ms = 10_000;
    release(&mut w, 1);
    assert_eq!(state(&w, 2), Some(TicketState::Queued), "inside the window");
    let paused = w
        .doc
        .as_ref()
        .and_then(|d| d.paused.clone())
        .expect("paused");
    assert_eq!(paused.since_ms, wall_at(10_000));
    assert_eq!(paused.until_ms, Some(wall_at(20_000)));

    w.now_ms = 19_999;
    w.run(Op::Tick).expect("tick");
    assert_eq!(state(&w, 2), Some(TicketState::Queued));
    w.now_ms = 20_000;
    w.run(Op::Tick).expect("tick");
    assert_eq!(w.holders(), ["t2"], "the window closed");
}

#[test]
fn a_job_is_not_claimed_while_paused_and_is_due_when_the_freeze_ends() {
    let mut w = World::new();
    w.freezes.push(Freeze {
        until_ms: Some(wall_at(60_000)),
        ..freeze_on(KEY)
    });
    w.run(Op::Submit(submit("j1"))).expect("submit");
    let claim = w
        .run(Op::Claim {
            token: token(9),
            ttl_ms: 10_000,
        })
        .expect("claim");
    assert!(
        matches!(claim, baton_core::Reply::NoJob { .. }),
        "{claim:?}"
    );
    let doc = w.doc.clone().expect("doc");
    assert_eq!(
        baton_core::job::due_ms(&doc, w.now_ms, wall_at(w.now_ms)),
        Some(60_000),
        "a worker is needed when the freeze ends, not before"
    );
    w.now_ms = 60_000;
    let claim = w
        .run(Op::Claim {
            token: token(9),
            ttl_ms: 10_000,
        })
        .expect("claim");
    assert!(matches!(claim, baton_core::Reply::Ticket(_)), "{claim:?}");
}

#[test]
fn paused_and_resumed_are_events() {
    let mut w = World::new();
    w.rules = vec![Rule {
        name: "ops".into(),
        prefix: String::new(),
        url: "http://127.0.0.1:9/hook".into(),
        events: vec![EventKind::Paused, EventKind::Resumed],
        after_ms: None,
    }];
    w.run(Op::Enqueue(enqueue(1))).expect("1");
    w.freezes.push(freeze_on("deploy/"));
    w.run(Op::Tick).expect("tick");
    w.run(Op::Tick).expect("a second write raises nothing new");
    w.freezes.clear();
    w.run(Op::Tick).expect("tick");
    let kinds: Vec<(EventKind, &str, Option<&str>)> = w
        .events
        .iter()
        .map(|e| (e.kind, e.context.as_str(), e.reason.as_deref()))
        .collect();
    assert_eq!(
        kinds,
        [
            (EventKind::Paused, "alice@ops", Some("audit")),
            (EventKind::Resumed, "alice@ops", Some("audit")),
        ]
    );
    assert_eq!(w.events[0].id, "deploy/");
    // Both wait in the outbox for their deliverer.
    let doc = w.doc.clone().expect("doc");
    let built = baton_core::notify::events_after(&doc, &[], 0);
    let seqs: Vec<u64> = built.iter().map(|(_, e)| e.seq).collect();
    assert_eq!(seqs, [1, 2]);
}

#[test]
fn a_weekly_window_is_read_and_judged_in_its_offset() {
    let weekly = Weekly::parse("fri 16:00..mon 08:00").expect("parse");
    assert_eq!(weekly.describe(), "fri 16:00..mon 08:00 UTC");
    let f = Freeze {
        weekly: Some(weekly),
        ..freeze_on(KEY)
    };
    // 2026-11-27 is a Friday.
    let fri_1700 = 1_795_798_800_000; // 2026-11-27T17:00:00Z
    let mon_0800 = fri_1700 + (2 * 24 + 15) * 3_600_000;
    let (since, until) = f.stretch_at(fri_1700).expect("in force on Friday evening");
    assert_eq!(since, fri_1700 - 3_600_000);
    assert_eq!(until, Some(mon_0800));
    assert!(f.stretch_at(mon_0800).is_none(), "closed at Monday 08:00");
    assert!(
        f.stretch_at(fri_1700 - 2 * 3_600_000).is_none(),
        "Friday 15:00"
    );
    assert_eq!(
        f.next_start(mon_0800),
        Some(fri_1700 - 3_600_000 + 7 * 24 * 3_600_000)
    );

    let east = Weekly::parse("Friday 16:00..Monday 08:00 +01:00").expect("parse");
    assert_eq!(east.describe(), "fri 16:00..mon 08:00 +01:00");
    let f = Freeze {
        weekly: Some(east),
        ..freeze_on(KEY)
    };
    // 16:00 at +01:00 is 15:00 UTC.
    assert!(f.stretch_at(fri_1700 - 2 * 3_600_000).is_some());
    assert!(f.stretch_at(fri_1700 - 2 * 3_600_000 - 1).is_none());

    for bad in [
        "fri 16:00",
        "fri 16:00..fri 16:00",
        "fry 16:00..mon 08:00",
        "fri 24:00..mon 08:00",
        "fri 16:0..mon 08:00",
        "fri 16:00..mon 08:00 CET",
        "fri 16:00..mon 08:00 +25:00",
    ] {
        assert!(Weekly::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn a_freeze_without_a_reason_or_with_a_bad_target_is_refused() {
    for (target, reason) in [
        ("deploy/", " "),
        ("", "audit"),
        ("/", "audit"),
        ("a\nb", "audit"),
    ] {
        let f = Freeze {
            reason: reason.into(),
            ..freeze_on(target)
        };
        assert!(f.check().is_err(), "{target:?} {reason:?}");
    }
    let backwards = Freeze {
        from_ms: Some(2),
        until_ms: Some(1),
        ..freeze_on("deploy/")
    };
    assert!(backwards.check().is_err());
}

#[derive(Clone, Debug)]
enum Step {
    Enqueue { overrides: bool },
    ReleaseHolder,
    Pause,
    Resume,
    Tick,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => any::<bool>().prop_map(|o| Step::Enqueue { overrides: o }),
        3 => Just(Step::ReleaseHolder),
        1 => Just(Step::Pause),
        1 => Just(Step::Resume),
        1 => Just(Step::Tick),
    ]
}

proptest! {
    /// Whatever the sequence of enqueues, releases, pauses and resumes: while a freeze is in
    /// force, only tickets queued at or before a ticket that overrides it are ever granted,
    /// and grants keep arrival order; once resumed, the next write leaves nothing grantable
    /// waiting.
    #[test]
    fn while_paused_only_the_queue_up_to_an_override_is_granted(
        steps in proptest::collection::vec(step(), 1..60),
        limit in 1u32..3,
    ) {
        let mut w = World::new();
        let mut next = 0u32;
        let mut granted_order: Vec<u32> = Vec::new();
        for step in steps {
            let before: HashSet<String> = w
                .doc
                .as_ref()
                .map(|d| d.holders().map(|t| t.id.clone()).collect())
                .unwrap_or_default();
            // Tickets an override lets through: those queued at or before one, by arrival.
            let mut eligible: HashSet<String> = HashSet::new();
            let paused = !w.freezes.is_empty();
            match step {
                Step::Enqueue { overrides } => {
                    next += 1;
                    let e = Enqueue {
                        pool: None,
                        limit,
                        ..if overrides { overriding(next) } else { enqueue(next) }
                    };
                    w.run(Op::Enqueue(e)).expect("enqueue");
                }
                Step::ReleaseHolder => {
                    let holder = w.doc.as_ref().and_then(|d| d.holders().next().map(|t| t.id.clone()));
                    if let Some(id) = holder {
                        let n: u32 = id[1..].parse().expect("id");
                        release(&mut w, n);
                    }
                }
                Step::Pause => w.freezes = vec![freeze_on("deploy/")],
                Step::Resume => w.freezes.clear(),
                Step::Tick => {
                    w.run(Op::Tick).expect("tick");
                }
            }
            if let Some(doc) = &w.doc {
                let last_override = doc
                    .tickets
                    .iter()
                    .filter(|t| t.override_freeze.is_some())
                    .map(|t| t.arrival)
                    .chain(w.entries.iter().filter(|e| e.override_freeze.is_some()).map(|e| e.arrival))
                    .max();
                for t in &doc.tickets {
                    if last_override.is_some_and(|last| t.arrival <= last) {
                        eligible.insert(t.id.clone());
                    }
                }
                for t in doc.holders() {
                    if !before.contains(&t.id) {
                        let n: u32 = t.id[1..].parse().expect("id");
                        granted_order.push(n);
                        prop_assert!(
                            !paused || eligible.contains(&t.id),
                            "{} was granted through the freeze without an override", t.id
                        );
                    }
                }
                if !paused {
                    prop_assert_eq!(baton_core::invariants::check_settled(doc), Ok(()));
                }
            }
        }
        let mut sorted = granted_order.clone();
        sorted.sort_unstable();
        prop_assert_eq!(granted_order, sorted, "grants in arrival order");
    }
}
