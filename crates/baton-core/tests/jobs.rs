//! Jobs in `apply`: submit, claim, complete; order shared with lock tickets; a failing job keeps
//! its place; releases back; leases that run out; stale workers refused; retries recognised.

use baton_core::job::{JobResult, RELEASES_PER_ATTEMPT};
use baton_core::op::TicketView;
use baton_core::{
    decode, encode, CancelledTicket, Op, Outcome, Refusal, Reply, Request, TicketState,
};

mod common;
use common::*;

fn claim(n: u32) -> Op {
    Op::Claim {
        token: token(n),
        ttl_ms: 30_000,
    }
}

fn complete(n: u32, result: JobResult) -> Op {
    Op::Complete {
        token: token(n),
        id: None,
        result,
    }
}

fn failed(error: &str) -> JobResult {
    JobResult::Failed {
        error: Some(error.into()),
    }
}

/// The job a claim took (its id and attempt), or `None` for "no job".
fn claimed(reply: Reply) -> Option<(String, u32)> {
    match reply {
        Reply::NoJob { .. } => None,
        other => {
            let status = live(other);
            assert_eq!(status.state, TicketState::Held);
            assert!(status.claimed, "a claim is claimed at once");
            let job = status.job.expect("a job");
            Some((status.id, job.attempt()))
        }
    }
}

fn finished_view(reply: Reply) -> (String, Outcome) {
    match reply {
        Reply::Ticket(TicketView::Finished { id, outcome, .. }) => (id, outcome),
        other => panic!("expected a finished job, got {other:?}"),
    }
}

#[test]
fn a_job_waits_for_a_worker_and_a_claim_takes_the_head() {
    let mut w = World::new();
    let status = live(w.run(Op::Submit(submit("j1"))).expect("submit"));
    assert_eq!(
        status.state,
        TicketState::Queued,
        "no process waits for a job"
    );
    w.run(Op::Submit(submit("j2"))).expect("submit");
    w.run(Op::Tick).expect("tick");
    assert_eq!(w.state("j1"), Some(TicketState::Queued), "never granted");
    let (id, attempt) = claimed(w.run(claim(1)).expect("claim")).expect("a job");
    assert_eq!((id.as_str(), attempt), ("j1", 1));
    // Limit 1: the key is full.
    assert_eq!(claimed(w.run(claim(2)).expect("claim")), None);
    let reply = w.run(complete(1, JobResult::Succeeded)).expect("complete");
    assert_eq!(finished_view(reply), ("j1".into(), Outcome::Succeeded));
    let (id, _) = claimed(w.run(claim(2)).expect("claim")).expect("a job");
    assert_eq!(id, "j2");
    assert_eq!(w.finished, [("j1".into(), Outcome::Succeeded)]);
}

#[test]
fn jobs_and_lock_tickets_share_one_order() {
    let mut w = World::new();
    w.run(Op::Enqueue(enqueue(1))).expect("t1 holds");
    w.run(Op::Submit(submit("j2"))).expect("j2");
    w.run(Op::Enqueue(enqueue(3))).expect("t3");
    w.run(Op::Release {
        token: token(1),
        outcome: Outcome::Succeeded,
        reason: None,
    })
    .expect("release");
    assert_eq!(
        w.state("t3"),
        Some(TicketState::Queued),
        "t3 does not pass the job ahead of it"
    );
    assert_eq!(w.holders(), Vec::<String>::new());
    claimed(w.run(claim(10)).expect("claim")).expect("j2");
    assert_eq!(w.holders(), ["j2"]);
    w.run(complete(10, JobResult::Succeeded)).expect("done");
    assert_eq!(w.holders(), ["t3"], "granted when the job before it ended");
    // A claim while a lock ticket is the head takes nothing.
    w.run(Op::Enqueue(enqueue(4))).expect("t4");
    w.run(Op::Submit(submit("j5"))).expect("j5");
    w.run(Op::Release {
        token: token(3),
        outcome: Outcome::Succeeded,
        reason: None,
    })
    .expect("release");
    assert_eq!(w.holders(), ["t4"]);
    assert_eq!(claimed(w.run(claim(11)).expect("claim")), None);
}

#[test]
fn a_failing_job_keeps_its_place_backs_off_and_dies_when_its_attempts_are_spent() {
    let mut w = World::new();
    w.run(Op::Submit(submit("j1"))).expect("j1");
    w.run(Op::Submit(submit("j2"))).expect("j2");
    let mut delays = Vec::new();
    for (n, attempt) in [(1, 1), (2, 2), (3, 3)] {
        let (id, got) = claimed(w.run(claim(n)).expect("claim")).expect("a job");
        assert_eq!((id.as_str(), got), ("j1", attempt));
        let reply = w.run(complete(n, failed("exit 3"))).expect("fail");
        if attempt == 3 {
            assert_eq!(finished_view(reply), ("j1".into(), Outcome::Dead));
            break;
        }
        let status = live(reply);
        let job = status.job.expect("job");
        assert_eq!(status.state, TicketState::Queued);
        assert_eq!(job.last_error.as_deref(), Some("exit 3"));
        let ready_at = job.ready_at_ms.expect("backing off");
        delays.push(ready_at - w.now_ms);
        // j2 never overtakes it while it backs off.
        match w.run(claim(100 + n)).expect("claim") {
            Reply::NoJob { ready_at_ms } => assert_eq!(ready_at_ms, Some(ready_at)),
            other => panic!("j2 overtook the failing job: {other:?}"),
        }
        w.now_ms = ready_at;
    }
    assert_eq!(delays, [10_000, 20_000], "10 s, doubling");
    let (id, attempt) = claimed(w.run(claim(9)).expect("claim")).expect("j2");
    assert_eq!(
        (id.as_str(), attempt),
        ("j2", 1),
        "a dead job leaves the key"
    );
    let entries: Vec<&(String, Outcome)> = w.finished.iter().filter(|f| f.0 == "j1").collect();
    assert_eq!(
        entries,
        [
            &("j1".into(), Outcome::Failed),
            &("j1".into(), Outcome::Failed),
            &("j1".into(), Outcome::Dead)
        ],
        "every run in the history"
    );
}

#[test]
fn a_release_back_spends_no_attempt_until_it_has_been_done_too_often() {
    let mut w = World::new();
    w.run(Op::Submit(submit("j1"))).expect("j1");
    for n in 1..=RELEASES_PER_ATTEMPT {
        let (_, attempt) = claimed(w.run(claim(n)).expect("claim")).expect("j1");
        assert_eq!(attempt, 1, "release {n} spent no attempt");
        let status = live(
            w.run(complete(n, JobResult::ReleasedBack { delay_ms: 5_000 }))
                .expect("release back"),
        );
        assert_eq!(status.job.expect("job").ready_at_ms, Some(w.now_ms + 5_000));
        w.now_ms += 5_000;
    }
    let n = RELEASES_PER_ATTEMPT + 1;
    claimed(w.run(claim(n)).expect("claim")).expect("j1");
    let status = live(
        w.run(complete(n, JobResult::ReleasedBack { delay_ms: 5_000 }))
            .expect("release back"),
    );
    let job = status.job.expect("job");
    assert_eq!(job.attempt(), 2, "one release too many is a failed attempt");
    assert!(job.last_error.expect("why").contains("released back"));
    assert_eq!(job.ready_at_ms, Some(w.now_ms + 10_000), "with its backoff");
}

#[test]
fn a_run_whose_lease_runs_out_is_a_failed_attempt_and_its_worker_is_refused() {
    let mut w = World::new();
    w.run(Op::Submit(submit("j1"))).expect("j1");
    claimed(w.run(claim(1)).expect("claim")).expect("j1");
    w.run(Op::Renew {
        token: token(1),
        ttl_ms: None,
    })
    .expect("renewed while it runs");
    w.now_ms += 30_001;
    w.run(Op::Tick).expect("tick");
    let job = w.doc.as_ref().and_then(|d| d.by_id("j1")).expect("live");
    assert_eq!(job.state, TicketState::Queued);
    assert_eq!(job.job.as_ref().expect("job").attempt(), 2);
    assert_eq!(w.finished, [("j1".into(), Outcome::Expired)]);
    // The worker that lost it can neither renew nor complete it.
    for op in [
        Op::Renew {
            token: token(1),
            ttl_ms: None,
        },
        complete(1, JobResult::Succeeded),
    ] {
        let refusal = w.run(op).expect_err("stale worker");
        assert!(
            matches!(refusal, Refusal::RunEnded { ref id, .. } if id == "j1"),
            "{refusal:?}"
        );
    }
}

/// A worker that said its command succeeded, then stopped before recording the job's end
/// (killed, paused, cut off): when its lease runs out the job ends succeeded with that run's
/// fence, and is never handed to another worker.
#[test]
fn a_lapsed_run_whose_worker_said_it_succeeded_ends_the_job_succeeded() {
    let mut w = World::new();
    w.run(Op::Submit(submit("j1"))).expect("j1");
    claimed(w.run(claim(1)).expect("claim")).expect("j1");
    let fence = w
        .doc
        .as_ref()
        .and_then(|d| d.by_id("j1"))
        .expect("live")
        .fence;
    w.run(Op::RunSucceeded { token: token(1) })
        .expect("told while it holds");
    w.run(Op::RunSucceeded { token: token(1) })
        .expect("told again: the same");
    w.now_ms += 30_001;
    w.run(Op::Tick).expect("tick");
    assert_eq!(w.finished, [("j1".into(), Outcome::Succeeded)]);
    assert!(w.doc.as_ref().and_then(|d| d.by_id("j1")).is_none());
    assert_eq!(
        claimed(w.run(claim(2)).expect("claim")),
        None,
        "nothing to run"
    );
    let entry = w.entries.last().expect("a history entry");
    assert_eq!(entry.fence, Some(fence), "the run's own fence");
    assert!(entry
        .reason
        .as_deref()
        .is_some_and(|r| r.contains("succeeded")));
    // Its late completion is answered with the end, not a second one.
    let refusal = w.run(complete(1, JobResult::Succeeded)).expect_err("ended");
    assert!(
        matches!(
            refusal,
            Refusal::Ended {
                outcome: Outcome::Succeeded,
                ..
            }
        ),
        "{refusal:?}"
    );
}

/// A worker that says its command succeeded after its lease ran out (it was paused after the
/// command ended) is refused: the job runs again, and that worker's success counts for nothing.
/// A run that said so and then ran out on a restarted store clock ends succeeded too.
#[test]
fn a_success_told_after_the_lease_ran_out_is_refused_and_the_job_runs_again() {
    let mut w = World::new();
    w.run(Op::Submit(submit("j1"))).expect("j1");
    claimed(w.run(claim(1)).expect("claim")).expect("j1");
    w.now_ms += 30_001;
    w.run(Op::Tick).expect("tick");
    let refusal = w
        .run(Op::RunSucceeded { token: token(1) })
        .expect_err("a stale worker");
    assert!(
        matches!(refusal, Refusal::RunEnded { ref id, .. } if id == "j1"),
        "{refusal:?}"
    );
    w.now_ms += 3_600_000; // past its backoff
    let (id, attempt) = claimed(w.run(claim(2)).expect("claim")).expect("runs again");
    assert_eq!((id.as_str(), attempt), ("j1", 2));
    w.run(Op::RunSucceeded { token: token(2) }).expect("told");
    let mut doc = w.doc.clone().expect("doc");
    doc.epoch = Some("boot-0".into());
    w.doc = Some(doc);
    w.run(Op::Tick).expect("tick");
    assert_eq!(w.finished.last(), Some(&("j1".into(), Outcome::Succeeded)));
}

/// A worker whose claim's answer came after the lease it set had run out never starts the
/// command: it gives the run back. The lapse had spent an attempt; the give-back returns it,
/// so a run that never started costs the job nothing. Only a give-back does: a completion of
/// that run is still refused.
#[test]
fn a_lapsed_run_given_back_by_its_worker_spends_no_attempt() {
    let mut w = World::new();
    w.run(Op::Submit(submit("j1"))).expect("j1");
    claimed(w.run(claim(1)).expect("claim")).expect("j1");
    w.now_ms += 30_001;
    w.run(Op::Tick).expect("tick");
    let attempt = |w: &World| {
        let job = w.doc.as_ref().and_then(|d| d.by_id("j1")).expect("live");
        job.job.as_ref().expect("job").attempt()
    };
    assert_eq!(attempt(&w), 2, "the lapse spent an attempt");
    let refusal = w
        .run(complete(1, JobResult::Succeeded))
        .expect_err("a completion of a lapsed run");
    assert!(matches!(refusal, Refusal::RunEnded { .. }), "{refusal:?}");
    let give_back = Request::new(
        "give-back",
        complete(1, JobResult::ReleasedBack { delay_ms: 0 }),
    );
    w.run_request(&give_back).expect("given back");
    assert_eq!(attempt(&w), 1, "the attempt is returned");
    assert_eq!(w.state("j1"), Some(TicketState::Queued));
    // Its retry is answered the same; a second give-back (another attempt) is refused.
    w.run_request(&give_back).expect("the retry");
    assert_eq!(attempt(&w), 1);
    let again = w.run(complete(1, JobResult::ReleasedBack { delay_ms: 0 }));
    assert!(matches!(again, Err(Refusal::RunEnded { .. })), "{again:?}");
    assert_eq!(attempt(&w), 1);
    // Claimed again, it runs as attempt 1.
    let (_, attempt_now) = claimed(w.run(claim(2)).expect("claim")).expect("j1");
    assert_eq!(attempt_now, 1);
}

#[test]
fn a_retried_completion_is_answered_as_the_first_time() {
    let mut w = World::new();
    w.run(Op::Submit(submit("j1"))).expect("j1");
    claimed(w.run(claim(1)).expect("claim")).expect("j1");
    let request = Request::new("fail-once", complete(1, failed("boom")));
    let first = w.run_request(&request).expect("fail");
    let doc = w.doc.clone();
    let again = w.run_request(&request).expect("the retry");
    assert_eq!(first, again);
    assert_eq!(w.doc, doc, "nothing changed");
    // A retried claim finds the job its token holds.
    w.now_ms += 10_000;
    let request = Request::new("claim-once", claim(2));
    let first = claimed(w.run_request(&request).expect("claim"));
    let doc = w.doc.clone();
    assert_eq!(claimed(w.run_request(&request).expect("retry")), first);
    assert_eq!(w.doc, doc);
}

#[test]
fn a_second_submit_with_the_same_id_changes_nothing() {
    let mut w = World::new();
    let first = w.run(Op::Submit(submit("deploy-42"))).expect("submit");
    let doc = w.doc.clone();
    let mut other = submit("deploy-42");
    other.spec.max_attempts = 9;
    assert_eq!(w.run(Op::Submit(other)).expect("again"), first);
    assert_eq!(w.doc, doc);
    claimed(w.run(claim(1)).expect("claim")).expect("job");
    w.run(complete(1, JobResult::Succeeded)).expect("done");
    let reply = w.run(Op::Submit(submit("deploy-42"))).expect("after");
    assert_eq!(
        finished_view(reply),
        ("deploy-42".into(), Outcome::Succeeded)
    );
    // Not a lock ticket's id either.
    w.run(Op::Enqueue(enqueue(7))).expect("t7");
    let refusal = w.run(Op::Submit(submit("t7"))).expect_err("taken");
    assert!(
        matches!(refusal, Refusal::DuplicateId { .. }),
        "{refusal:?}"
    );
}

#[test]
fn only_a_dead_job_is_revived() {
    let mut w = World::new();
    let mut once = submit("j1");
    once.spec.max_attempts = 1;
    w.run(Op::Submit(once)).expect("j1");
    claimed(w.run(claim(1)).expect("claim")).expect("j1");
    let reply = w.run(complete(1, failed("no"))).expect("fail");
    assert_eq!(finished_view(reply), ("j1".into(), Outcome::Dead));
    let mut revive = submit("j1");
    revive.revive = true;
    let status = live(w.run(Op::Submit(revive.clone())).expect("revived"));
    assert_eq!(status.job.expect("job").attempt(), 1, "attempts reset");
    claimed(w.run(claim(2)).expect("claim")).expect("j1");
    w.run(complete(2, JobResult::Succeeded)).expect("done");
    let refusal = w.run(Op::Submit(revive)).expect_err("not dead");
    assert!(matches!(refusal, Refusal::NotDead { .. }), "{refusal:?}");
}

#[test]
fn not_before_delays_the_head_and_operators_cancel_jobs() {
    let mut w = World::new();
    let mut later = submit("j1");
    later.spec.delay_ms = 60_000;
    w.run(Op::Submit(later)).expect("j1");
    w.run(Op::Submit(submit("j2"))).expect("j2");
    match w.run(claim(1)).expect("claim") {
        Reply::NoJob { ready_at_ms } => assert_eq!(ready_at_ms, Some(w.now_ms + 60_000)),
        other => panic!("claimed a job not yet ready: {other:?}"),
    }
    let reply = w
        .run(Op::Cancel {
            reason: None,
            id: "j1".into(),
            by: String::new(),
        })
        .expect("cancel");
    assert_eq!(
        reply,
        Reply::Cancelled(vec![CancelledTicket::new("j1", false)])
    );
    claimed(w.run(claim(2)).expect("claim")).expect("j2");
    let reply = w
        .run(Op::Cancel {
            reason: None,
            id: "j2".into(),
            by: String::new(),
        })
        .expect("force");
    assert_eq!(
        reply,
        Reply::Cancelled(vec![CancelledTicket::new("j2", true)])
    );
    let refusal = w
        .run(complete(2, JobResult::Succeeded))
        .expect_err("forced");
    assert!(
        matches!(refusal, Refusal::Ended { forced: true, .. }),
        "{refusal:?}"
    );
}

#[test]
fn a_restarted_store_clock_ends_runs_but_keeps_waiting_jobs() {
    let mut w = World::new();
    w.run(Op::Submit(submit("j1"))).expect("j1");
    w.run(Op::Submit(submit("j2"))).expect("j2");
    claimed(w.run(claim(1)).expect("claim")).expect("j1");
    let mut doc = w.doc.clone().expect("doc");
    doc.epoch = Some("boot-0".into());
    w.doc = Some(doc);
    w.run(Op::Tick).expect("tick");
    let doc = w.doc.as_ref().expect("doc");
    assert_eq!(doc.tickets.len(), 2, "{doc:?}");
    assert!(doc.tickets.iter().all(|t| t.state == TicketState::Queued));
    let j1 = doc.by_id("j1").and_then(|t| t.job.as_ref()).expect("j1");
    assert_eq!(j1.attempt(), 2);
    assert_eq!(j1.ready_at_ms, Some(w.now_ms), "ready now on the new clock");
}

#[test]
fn a_lock_token_is_not_a_job_token_and_the_other_way_round() {
    let mut w = World::new();
    w.run(Op::Enqueue(enqueue(1))).expect("t1");
    let refusal = w
        .run(complete(1, JobResult::Succeeded))
        .expect_err("not a job");
    assert!(matches!(refusal, Refusal::NotAJob(_)), "{refusal:?}");
    w.run(Op::Release {
        token: token(1),
        outcome: Outcome::Succeeded,
        reason: None,
    })
    .expect("release");
    w.run(Op::Submit(submit("j1"))).expect("j1");
    claimed(w.run(claim(2)).expect("claim")).expect("j1");
    let refusal = w
        .run(Op::Release {
            token: token(2),
            outcome: Outcome::Succeeded,
            reason: None,
        })
        .expect_err("not a lock");
    assert!(matches!(refusal, Refusal::NotAJob(_)), "{refusal:?}");
}

#[test]
fn a_key_with_jobs_is_written_in_the_newer_format_and_one_without_in_the_old() {
    let mut w = World::new();
    w.run(Op::Enqueue(enqueue(1))).expect("t1");
    let bytes = encode(w.doc.as_ref().expect("doc")).expect("small");
    assert!(String::from_utf8_lossy(&bytes).contains("\"format\":2"));
    w.run(Op::Submit(submit("j1"))).expect("j1");
    let bytes = encode(w.doc.as_ref().expect("doc")).expect("small");
    assert!(String::from_utf8_lossy(&bytes).contains("\"format\":3"));
    assert_eq!(decode(&bytes).as_ref(), Ok(w.doc.as_ref().expect("doc")));
}

/// When a key next needs a worker (the due index): never for a lock-only key; at once for a
/// ready head job; a failed job's backoff; while a run holds the key, its lease's end (a
/// dead worker's run is taken over then); when a lock holder blocks the head job, that
/// holder's phase end; never once every job is done.
#[test]
fn due_times_follow_what_a_worker_could_do() {
    let due = |w: &World| {
        let doc = w.doc.as_ref().expect("a document");
        baton_core::job::due_ms(doc, w.now_ms, 1_700_000_000_000 + w.now_ms)
    };
    let mut w = World::new();
    live(w.run(Op::Enqueue(enqueue(9))).expect("a lock ticket"));
    assert_eq!(due(&w), None, "a lock-only key never needs a worker");

    // The lock holder blocks j1: the key is looked at when the holder's lease may end.
    w.run(Op::Submit(submit("j1"))).expect("submit");
    let holder_deadline = w.doc.as_ref().and_then(|d| d.holders().next()?.deadline_ms);
    assert!(holder_deadline.is_some());
    assert_eq!(due(&w), holder_deadline);
    w.run(Op::Release {
        token: token(9),
        outcome: Outcome::Succeeded,
        reason: None,
    })
    .expect("release");
    let now = w.now_ms;
    assert_eq!(due(&w), Some(now), "ready since the holder's release");

    // Running: due when its lease may run out.
    w.now_ms += 500;
    assert!(claimed(w.run(claim(1)).expect("claim")).is_some());
    assert_eq!(due(&w), Some(w.now_ms + 30_000));

    // A failed run: due when its backoff ends (10 s).
    w.now_ms += 1_000;
    w.run(complete(1, failed("boom"))).expect("complete");
    assert_eq!(due(&w), Some(w.now_ms + 10_000));

    w.now_ms += 10_000;
    assert!(claimed(w.run(claim(2)).expect("claim")).is_some());
    w.run(complete(2, JobResult::Succeeded)).expect("complete");
    assert_eq!(due(&w), None, "nothing left for a worker");
}

/// A job's parameters are bound to its ticket by the SHA-256 of its record
/// (`Submit::params_sha256`): the ticket keeps it through its runs, its history entry keeps it
/// when it dies, and a revive (`baton retry`) queues it again with that first hash.
#[test]
fn the_parameters_hash_is_kept_through_runs_death_and_revival() {
    let hash = "ab".repeat(32);
    let kept = |reply: Reply| live(reply).job.expect("a job").params_sha256;
    let mut w = World::new();
    let mut first = submit("j1");
    first.spec.max_attempts = 2;
    first.params_sha256 = Some(hash.clone());
    assert_eq!(
        kept(w.run(Op::Submit(first.clone())).expect("submit")),
        Some(hash.clone())
    );
    // The claim's answer carries it: the worker checks the record it reads against it.
    assert_eq!(kept(w.run(claim(1)).expect("claim")), Some(hash.clone()));
    assert_eq!(
        kept(w.run(complete(1, failed("x"))).expect("fail")),
        Some(hash.clone())
    );
    // A second submit with the same id and another hash changes nothing.
    let mut other = first.clone();
    other.params_sha256 = Some("cd".repeat(32));
    assert_eq!(
        kept(w.run(Op::Submit(other)).expect("again")),
        Some(hash.clone())
    );
    w.now_ms += 60_000;
    assert_eq!(kept(w.run(claim(2)).expect("claim")), Some(hash.clone()));
    let reply = w.run(complete(2, failed("x"))).expect("fail");
    assert_eq!(finished_view(reply), ("j1".into(), Outcome::Dead));
    // The entry that ends the job keeps the hash, for a revive; a run's entry does not.
    let hashes: Vec<Option<String>> = w
        .entries
        .iter()
        .filter(|e| e.id == "j1")
        .map(|e| e.job.as_ref().expect("a job's run").params_sha256.clone())
        .collect();
    assert_eq!(hashes, [None, Some(hash.clone())]);
    let mut revive = first.clone();
    revive.revive = true;
    assert_eq!(
        kept(w.run(Op::Submit(revive)).expect("revived")),
        Some(hash.clone())
    );
    assert_eq!(kept(w.run(claim(3)).expect("claim")), Some(hash));
    // Only a SHA-256 in hex: anything else is refused at the edge.
    for bad in ["", "xyz", &"AB".repeat(32), &"ab".repeat(33)] {
        let mut s = submit("j2");
        s.params_sha256 = Some(bad.to_owned());
        let refusal = w.run(Op::Submit(s)).expect_err("not a hash");
        assert!(matches!(refusal, Refusal::Invalid(_)), "{bad}: {refusal:?}");
    }
}

/// Submits of older clients carry no hash and their jobs run unchecked, as before; the field is
/// written only when there is one, so older readers of documents and records see nothing new.
#[test]
fn a_submit_without_a_parameters_hash_is_read_and_kept_without_one() {
    let older = serde_json::to_value(submit("j1")).expect("json");
    assert!(older.get("params_sha256").is_none(), "{older}");
    let read: baton_core::Submit = serde_json::from_value(older).expect("an older submit");
    assert_eq!(read.params_sha256, None);
    let mut w = World::new();
    let status = live(w.run(Op::Submit(read)).expect("submit"));
    let job = status.job.expect("a job");
    assert_eq!(job.params_sha256, None);
    let json = serde_json::to_value(&job).expect("json");
    assert!(json.get("params_sha256").is_none(), "{json}");
}
