//! A key's backlog: jobs beyond the window wait outside the hot document, in submit order, and
//! every rule of the queue holds across it — order shared with lock tickets, cancels,
//! supersedes, retries — while the document stays small. A writer that dies between writing a
//! segment and writing the document changes nothing.

use baton_core::backlog::{Segment, SEGMENT_JOBS, WINDOW_JOBS};
use baton_core::job::JobResult;
use baton_core::op::TicketView;
use baton_core::{encode, Op, Outcome, Reply, TicketState};

mod common;
use common::*;

/// Claims the next job with a fresh token and completes it as succeeded; its id, or `None`.
/// As a worker does, it claims again while a claim found no job but took backlog jobs in (all
/// of which a cancel or a cut had ended).
fn run_next(w: &mut World, n: &mut u32) -> Option<String> {
    *n += 1;
    let token = token(*n);
    let id = loop {
        let reply = w
            .run(Op::Claim {
                token: token.clone(),
                ttl_ms: 30_000,
            })
            .expect("claim");
        match reply {
            Reply::NoJob { .. }
                if w.reads_segments && w.doc.as_ref()?.segment_wanted().is_some() =>
            {
                continue
            }
            Reply::NoJob { .. } => return None,
            other => break live(other).id,
        }
    };
    w.run(Op::Complete {
        token,
        id: None,
        result: JobResult::Succeeded,
    })
    .expect("complete");
    Some(id)
}

fn submit_n(w: &mut World, ids: impl Iterator<Item = String>) -> usize {
    let mut largest = 0;
    for id in ids {
        w.run(Op::Submit(submit(&id))).expect("submit");
        let bytes = encode(w.doc.as_ref().expect("doc")).expect("encode");
        largest = largest.max(bytes.len());
    }
    largest
}

#[test]
fn a_backlog_keeps_submit_order_and_the_document_small() {
    let mut w = World::new();
    let largest = submit_n(&mut w, (1..=3000).map(|i| format!("j{i}")));
    // The window, the tail and the counters: tens of jobs, never thousands.
    assert!(largest < 40 * 1024, "the document grew to {largest} bytes");
    assert!(
        w.records.len() * SEGMENT_JOBS >= 3000 - WINDOW_JOBS - SEGMENT_JOBS,
        "most jobs were written out: {} segments",
        w.records.len()
    );
    let status = baton_core::apply::status_of(w.doc.as_ref().expect("doc"), "j3000");
    assert_eq!(
        status.map(|s| s.position),
        Some(2999),
        "the last job's place"
    );
    let mut n = 0;
    let mut ran = Vec::new();
    while let Some(id) = run_next(&mut w, &mut n) {
        ran.push(id);
        let bytes = encode(w.doc.as_ref().expect("doc")).expect("encode");
        assert!(bytes.len() < 40 * 1024, "{} bytes", bytes.len());
    }
    let expected: Vec<String> = (1..=3000).map(|i| format!("j{i}")).collect();
    assert_eq!(ran, expected, "every job ran once, in submit order");
    let doc = w.doc.as_ref().expect("doc");
    assert!(doc.backlog.is_none() && doc.tickets.is_empty());
    assert_eq!(w.finished.len(), 3000);
}

#[test]
fn lock_tickets_keep_their_place_beside_backlog_jobs() {
    let mut w = World::new();
    submit_n(&mut w, (1..=100).map(|i| format!("j{i}")));
    // A plain lock ticket arrives after 100 jobs: it waits for all of them.
    w.run(Op::Enqueue(enqueue(1))).expect("enqueue");
    let status = baton_core::apply::status_of(w.doc.as_ref().expect("doc"), "t1").expect("t1");
    assert_eq!(status.position, 100);
    submit_n(&mut w, (101..=140).map(|i| format!("j{i}")));
    // While no segment can be read, the window's jobs run, and the ticket still waits: the
    // backlog's jobs arrived before it.
    w.reads_segments = false;
    let mut n = 100;
    for i in 1..=WINDOW_JOBS {
        assert_eq!(run_next(&mut w, &mut n), Some(format!("j{i}")));
    }
    assert_eq!(run_next(&mut w, &mut n), None, "nothing claimable");
    assert_eq!(
        w.state("t1"),
        Some(TicketState::Queued),
        "not past the backlog"
    );
    w.reads_segments = true;
    for i in (WINDOW_JOBS + 1)..=100 {
        assert_eq!(w.state("t1"), Some(TicketState::Queued), "before job {i}");
        assert_eq!(run_next(&mut w, &mut n), Some(format!("j{i}")));
    }
    // The jobs that came after it wait for it.
    assert_eq!(w.state("t1"), Some(TicketState::Held));
    assert_eq!(run_next(&mut w, &mut n), None, "the key is held by t1");
    w.run(Op::Release {
        token: token(1),
        outcome: Outcome::Succeeded,
        reason: None,
    })
    .expect("release");
    assert_eq!(run_next(&mut w, &mut n), Some("j101".into()));
    // A ticket with an order value sorts before every plain one, backlog or not.
    let mut ordered = enqueue(2);
    ordered.order = Some("0".into());
    w.run(Op::Enqueue(ordered)).expect("enqueue");
    assert_eq!(w.state("t2"), Some(TicketState::Held), "ahead of 39 jobs");
}

#[test]
fn a_writer_that_dies_after_writing_a_segment_leaves_the_same_bytes_or_none_counted() {
    let mut w = World::new();
    submit_n(
        &mut w,
        (1..=(WINDOW_JOBS + SEGMENT_JOBS)).map(|i| format!("j{i}")),
    );
    let before = w.doc.clone();
    let segments_before = w.records.len();
    // Two writers find the tail full; each writes the segment, and only one document write
    // lands. Their segments are the same bytes under the same name.
    let first = w.run(Op::Submit(submit("a"))).map(|_| w.records.clone());
    w.doc = before.clone();
    let second = w.run(Op::Submit(submit("b"))).map(|_| w.records.clone());
    let (first, second) = (first.expect("a"), second.expect("b"));
    assert_eq!(first.len(), segments_before + 1);
    assert_eq!(first, second, "same name, same bytes");
    // The job of the writer that died is not there; the other's is, after the segment.
    let doc = w.doc.as_ref().expect("doc");
    let backlog = doc.backlog.as_ref().expect("a backlog");
    assert_eq!(backlog.tail.len(), 1);
    assert_eq!(backlog.tail[0].id, "b");
    // A written-out tail that is then taken in whole moves to the next number: a stale copy
    // of it under the old number is never read.
    let mut w = World::new();
    submit_n(&mut w, (1..=(WINDOW_JOBS + 3)).map(|i| format!("j{i}")));
    let mut n = 0;
    for _ in 0..=(WINDOW_JOBS - baton_core::backlog::REFILL_BELOW) {
        run_next(&mut w, &mut n).expect("a job");
    }
    assert!(
        w.doc.as_ref().expect("doc").backlog.is_none(),
        "tail taken in"
    );
    submit_n(&mut w, (100..=(100 + WINDOW_JOBS)).map(|i| format!("k{i}")));
    let backlog = w.doc.as_ref().and_then(|d| d.backlog.clone()).expect("new");
    assert!(
        backlog.generation > WINDOW_JOBS as u64 + 3,
        "a new backlog's segments have new names"
    );
}

#[test]
fn cancels_and_supersedes_reach_jobs_in_the_backlog() {
    let mut w = World::new();
    for i in 1..=120 {
        let mut s = submit(&format!("j{i}"));
        s.keep = i == 60;
        w.run(Op::Submit(s)).expect("submit");
    }
    // j100 is in a written segment: the caller found it there.
    let doc = w.doc.clone().expect("doc");
    let backlog = doc.backlog.as_ref().expect("backlog");
    let found = (backlog.first..backlog.next).find(|&n| {
        let name = baton_core::backlog::segment_record(backlog.generation, n);
        let segment = Segment::decode(&w.records[&name], backlog.generation, n).expect("seg");
        segment.tickets.iter().any(|t| t.id == "j100")
    });
    let segment = found.expect("j100 is in a segment");
    let cancel = Op::CancelInBacklog {
        id: "j100".into(),
        generation: backlog.generation,
        segment,
        by: "ops lead".into(),
        withdrawn: None,
    };
    let reply = w.run(cancel.clone()).expect("cancel");
    assert!(
        matches!(reply, Reply::Cancelled(ref c) if c.len() == 1),
        "{reply:?}"
    );
    assert!(
        matches!(w.run(cancel), Ok(Reply::Cancelled(_))),
        "again: same"
    );
    // j120 is in the tail: a plain cancel finds it.
    let reply = w
        .run(Op::Cancel {
            reason: None,
            id: "j120".into(),
            by: String::new(),
        })
        .expect("cancel");
    assert!(matches!(reply, Reply::Cancelled(_)), "{reply:?}");
    let again = w.run(Op::Submit(submit("j120"))).expect("submit again");
    assert!(
        matches!(
            again,
            Reply::Ticket(TicketView::Finished {
                outcome: Outcome::Cancelled,
                ..
            })
        ),
        "{again:?}"
    );
    let mut n = 0;
    assert_eq!(run_next(&mut w, &mut n), Some("j1".into()));
    // A plain job with --supersede ends every earlier one but those with --keep.
    let mut s = submit("s");
    s.supersede = true;
    w.run(Op::Submit(s)).expect("supersede");
    let mut ran = Vec::new();
    while let Some(id) = run_next(&mut w, &mut n) {
        ran.push(id);
    }
    assert_eq!(ran, ["j60", "s"]);
    let count = |outcome: Outcome| w.finished.iter().filter(|f| f.1 == outcome).count();
    assert_eq!(count(Outcome::Succeeded), 3);
    assert_eq!(count(Outcome::Cancelled), 2, "{:?}", w.finished);
    assert_eq!(count(Outcome::Superseded), 120 - 4);
    let mut ids: Vec<&str> = w.finished.iter().map(|f| f.0.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 121, "each job ended exactly once");
    // The job cancelled deep in the backlog says who cancelled it when its entry is written.
    let j100 = w
        .entries
        .iter()
        .find(|f| f.id == "j100")
        .expect("j100's entry");
    assert_eq!(j100.reason.as_deref(), Some("cancelled by ops lead"));
    let j120 = w
        .entries
        .iter()
        .find(|f| f.id == "j120")
        .expect("j120's entry");
    assert_eq!(j120.reason.as_deref(), Some("cancelled by an operator"));
}

#[test]
fn a_retried_submit_finds_its_job_in_the_tail_and_cancel_queued_reaches_the_backlog() {
    let mut w = World::new();
    submit_n(&mut w, (1..=40).map(|i| format!("j{i}")));
    let again = w.run(Op::Submit(submit("j40"))).expect("again");
    let status = live(again);
    assert_eq!((status.id.as_str(), status.position), ("j40", 39));
    let tail = |w: &World| {
        w.doc
            .as_ref()
            .and_then(|d| d.backlog.as_ref())
            .map(|b| b.tail.len())
    };
    assert_eq!(tail(&w), Some(40 - WINDOW_JOBS), "not queued twice");
    w.run(Op::CancelQueued { by: String::new() })
        .expect("cancel queued");
    let mut n = 0;
    assert_eq!(run_next(&mut w, &mut n), None);
    assert!(w.doc.as_ref().expect("doc").backlog.is_none());
    assert_eq!(w.finished.len(), 40);
    assert!(w.finished.iter().all(|f| f.1 == Outcome::Cancelled));
}

#[test]
fn a_retried_submit_is_uncertain_once_its_tail_may_have_been_written_out() {
    let mut w = World::new();
    submit_n(
        &mut w,
        (1..=(WINDOW_JOBS + SEGMENT_JOBS + 1)).map(|i| format!("j{i}")),
    );
    // The first attempt of `late` may have landed in a tail that has since been written out:
    // the core cannot see the segment, so it refuses rather than queue the job twice.
    let retry = baton_core::Request {
        attempt: "late-1".into(),
        op: Op::Submit(submit("late")),
        finishes_seen: Some(0),
        may_arrive_late: false,
    };
    assert_eq!(w.run_request(&retry), Err(baton_core::Refusal::Uncertain));
    // A first attempt is queued as usual.
    w.run(Op::Submit(submit("late"))).expect("submit");
}
