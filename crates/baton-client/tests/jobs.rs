//! Jobs through the library alone, as a Rust worker uses them: submit, claim (a run with its
//! lease, heartbeat and parameters), complete, release back, wait; and a claim whose answer was
//! lost, which is never trusted before a write of this call confirms it.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use baton_client::jobs::{self, ClaimOptions, JobEnd, KeyPatterns, SubmitOptions};
use baton_client::Coordinator;
use baton_core::job::JobResult;
use baton_core::op::TicketView;
use baton_core::{decode, Outcome, TicketState};
use baton_store::memory::MemoryStore;
use baton_store::Store;
use common::Probe;

mod common;

fn claim_options() -> ClaimOptions {
    ClaimOptions {
        ttl: Duration::from_secs(5),
    }
}

#[tokio::test]
async fn a_rust_worker_needs_no_cli() {
    let store = Arc::new(MemoryStore::new());
    let coord = Arc::new(Coordinator::new(store.clone()));
    let options = SubmitOptions::default();
    let a1 = jobs::submit(&coord, "env/a", b"{\"n\":1}", &options)
        .await
        .unwrap()
        .id;
    let a2 = jobs::submit(&coord, "env/a", b"{\"n\":2}", &options)
        .await
        .unwrap()
        .id;
    let b1 = jobs::submit(&coord, "env/b", b"[3]", &options)
        .await
        .unwrap()
        .id;
    let patterns = KeyPatterns::new(vec!["env/".into()]);

    // Two at once: one of each key (A's second waits for its first).
    let first = jobs::claim_next(&coord, &patterns, &claim_options())
        .await
        .unwrap()
        .unwrap();
    let second = jobs::claim_next(&coord, &patterns, &claim_options())
        .await
        .unwrap()
        .unwrap();
    let mut ids = vec![first.id().to_owned(), second.id().to_owned()];
    ids.sort();
    let mut want = vec![a1.clone(), b1.clone()];
    want.sort();
    assert_eq!(ids, want, "A's first and B's, never A's two");
    assert!(jobs::claim_next(&coord, &patterns, &claim_options())
        .await
        .unwrap()
        .is_none());
    for job in [&first, &second] {
        let want: &[u8] = if job.id() == a1 { b"{\"n\":1}" } else { b"[3]" };
        assert_eq!(job.params, want, "parameters exactly as submitted");
        assert_eq!(job.attempt, 1);
        assert!(job.heartbeat.standing().is_ok());
    }
    let view = first.complete(JobResult::Succeeded).await.unwrap();
    assert!(matches!(
        view,
        TicketView::Finished {
            outcome: Outcome::Succeeded,
            ..
        }
    ));
    second.complete(JobResult::Succeeded).await.unwrap();
    let next = jobs::claim_next(&coord, &patterns, &claim_options())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.id(), a2);
    // Released back: no attempt spent, ready again after its delay, then claimed again.
    let view = next.release_back(Duration::from_millis(200)).await.unwrap();
    assert!(matches!(view, TicketView::Live(ref s) if s.state == TicketState::Queued));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = jobs::claim_next(&coord, &patterns, &claim_options())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((again.id(), again.attempt, again.run), (a2.as_str(), 1, 2));
    again.complete(JobResult::Succeeded).await.unwrap();
    let end = jobs::wait(&coord, "env/a", &a2, Duration::from_millis(50), &|_| {})
        .await
        .unwrap();
    assert_eq!(
        end,
        JobEnd {
            outcome: Outcome::Succeeded,
            forced: false,
            reason: None,
            run: 2,
        }
    );
}

#[tokio::test]
async fn a_claim_whose_answer_was_lost_counts_its_lease_from_before_its_first_attempt() {
    let shared = Arc::new(MemoryStore::new());
    let probe = Probe::new(shared.clone(), true);
    let coord = Arc::new(Coordinator::new(probe.clone()));
    let id = jobs::submit(&coord, "k", b"null", &SubmitOptions::default())
        .await
        .unwrap()
        .id;
    // The claim is written, its answer held 1.5 s and lost; the retry finds the job held by
    // this very token. The lease stands from before the first attempt's clock reading, never
    // from when the retry's answer came: 1.5 s of the 5 s are gone.
    probe.lose_reply_after_ms.store(1_500, Ordering::SeqCst);
    let before_ms = coord.local_ms();
    let job = jobs::claim(&coord, "k", &claim_options())
        .await
        .unwrap()
        .unwrap();
    let after_ms = coord.local_ms();
    assert_eq!(job.id(), id);
    assert!(after_ms >= before_ms + 1_500, "the answer was held");
    assert!(
        job.lease.holds_until_ms <= before_ms + 5_000,
        "counted from before the first attempt: holds until {} ms, claimed at {before_ms} ms",
        job.lease.holds_until_ms
    );
    assert!(job.lease.holds_until_ms > after_ms, "and it still stands");
    let doc = decode(&shared.load("k").await.unwrap().unwrap().bytes).unwrap();
    assert_eq!(doc.by_id(&id).unwrap().state, TicketState::Held);
    assert_eq!(doc.tickets.len(), 1, "one job, claimed once");
    job.complete(JobResult::Succeeded).await.unwrap();
}

#[tokio::test]
async fn a_key_with_a_long_backlog_delays_another_key_by_one_run_at_most() {
    let store = Arc::new(MemoryStore::new());
    let coord = Arc::new(Coordinator::new(store.clone()));
    let options = SubmitOptions::default();
    for n in 0..200 {
        let params = format!("{n}");
        jobs::submit(&coord, "hot", params.as_bytes(), &options)
            .await
            .unwrap();
    }
    let patterns = KeyPatterns::new(Vec::new());
    // One worker slot, running the hot key's jobs one after another.
    for _ in 0..5 {
        let job = jobs::claim_next(&coord, &patterns, &claim_options())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(job.key(), "hot");
        job.complete(JobResult::Succeeded).await.unwrap();
    }
    // A job for another key arrives while a hot job runs: it is next, not 195 jobs later.
    let running = jobs::claim_next(&coord, &patterns, &claim_options())
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let cold = jobs::submit(&coord, "cold", b"null", &options)
        .await
        .unwrap()
        .id;
    tokio::time::sleep(Duration::from_millis(5)).await;
    running.complete(JobResult::Succeeded).await.unwrap();
    let next = jobs::claim_next(&coord, &patterns, &claim_options())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((next.key(), next.id()), ("cold", cold.as_str()));
    next.complete(JobResult::Succeeded).await.unwrap();
    let after = jobs::claim_next(&coord, &patterns, &claim_options())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.key(), "hot", "and the hot key goes on");
}

/// A look reads only the first [`jobs::DUE_SCAN`] due keys. When other workers took every one
/// of them between the read and this worker's claims while more keys were due, the worker looks
/// again at once: it claims the next due key, not waits for a push or its poll.
#[tokio::test]
async fn a_look_whose_due_keys_were_all_taken_looks_again() {
    let store = Arc::new(MemoryStore::new());
    let others = Arc::new(Coordinator::new(store.clone()));
    let keys: Vec<String> = (0..jobs::DUE_SCAN + 2)
        .map(|n| format!("w/k{n:03}"))
        .collect();
    for key in &keys {
        jobs::submit(&others, key, b"{}", &SubmitOptions::default())
            .await
            .unwrap();
        // Due times a millisecond apart: the due order is the keys' order.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let before = store
        .due_keys("w/", jobs::DUE_SCAN, baton_store::WithDocs::NONE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(before.len(), jobs::DUE_SCAN);
    let mut taken = Vec::new();
    for key in &keys[..jobs::DUE_SCAN] {
        taken.push(
            jobs::claim(&others, key, &claim_options())
                .await
                .unwrap()
                .unwrap(),
        );
    }

    let probe = Probe::new(store.clone(), false);
    probe.stale_due.lock().unwrap().push(before);
    let worker = Arc::new(Coordinator::new(probe.clone()));
    let patterns = KeyPatterns::new(vec!["w/".into()]);
    let job = jobs::claim_next(&worker, &patterns, &claim_options())
        .await
        .unwrap()
        .expect("a due key was left: the worker should have claimed it");
    assert_eq!(job.key(), keys[jobs::DUE_SCAN]);
    assert_eq!(probe.due_looks.load(Ordering::SeqCst), 2);
    job.complete(JobResult::Succeeded).await.unwrap();
    for job in taken {
        job.complete(JobResult::Succeeded).await.unwrap();
    }
}

/// A worker with no room rests its waker: no pushes while it is busy. Its next wait subscribes
/// again and returns at once, since what changed meanwhile was not pushed: the worker looks
/// again before it waits, and a job submitted while it rested is claimed at once, not after
/// the poll. From then on, pushes wake it again.
#[tokio::test]
async fn a_rested_waker_has_the_worker_look_again_then_pushes_again() {
    // SQLite: a store whose prefix watches push (the in-memory one has none).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    let open = || async {
        let store = baton_store::sqlite::SqliteStore::open(&path).await.unwrap();
        Arc::new(Coordinator::new(Arc::new(store)))
    };
    let (submitter, worker) = (open().await, open().await);
    let patterns = KeyPatterns::new(vec!["rest/".into()]);
    let mut waker = jobs::WorkWaker::new(&worker, &patterns).await.unwrap();
    assert!(waker.pushes());
    waker.rest();
    assert!(
        waker.pushes(),
        "resting, it still wakes on a push once it waits"
    );
    jobs::submit(&submitter, "rest/a", b"{}", &SubmitOptions::default())
        .await
        .unwrap();
    let poll = Duration::from_secs(30);
    tokio::time::timeout(Duration::from_secs(5), waker.wait(poll))
        .await
        .expect("the first wait after a rest returns at once");
    let job = jobs::claim_next(&worker, &patterns, &claim_options())
        .await
        .unwrap()
        .expect("the job submitted while the waker rested");
    job.complete(JobResult::Succeeded).await.unwrap();
    // The claim's and the completion's own commits may wake it (SQLite's wake-ups are per
    // commit, for any key): spurious wake-ups are allowed, missed ones are not.
    for _ in 0..5 {
        if tokio::time::timeout(Duration::from_millis(200), waker.wait(poll))
            .await
            .is_err()
        {
            break;
        }
    }

    let waiting = tokio::spawn(async move { waker.wait(poll).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished(), "nothing new: it waits");
    jobs::submit(&submitter, "rest/b", b"{}", &SubmitOptions::default())
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("a push wakes it again")
        .unwrap();
}

/// Finding work reads only the keys that need a worker: 200 keys whose jobs are done, one whose
/// job waits for its `--not-before`, and 3 with ready jobs cost an idle worker's look the 3
/// ready keys' reads (the due index, kept by the same writes as the documents), not 204.
#[tokio::test]
async fn finding_work_does_not_read_idle_keys() {
    let store = Arc::new(MemoryStore::new());
    let probe = Probe::new(store.clone(), false);
    let coord = Arc::new(Coordinator::new(probe.clone()));
    let patterns = KeyPatterns::new(vec!["env/".into()]);
    let options = SubmitOptions::default();
    for i in 0..200 {
        let key = format!("env/done-{i:03}");
        jobs::submit(&coord, &key, b"{}", &options).await.unwrap();
        let job = jobs::claim(&coord, &key, &claim_options())
            .await
            .unwrap()
            .unwrap();
        job.complete(JobResult::Succeeded).await.unwrap();
    }
    let later = SubmitOptions {
        spec: baton_core::job::JobSpec {
            delay_ms: 3_600_000,
            ..options.spec.clone()
        },
        ..options.clone()
    };
    jobs::submit(&coord, "env/later", b"{}", &later)
        .await
        .unwrap();
    let mut ready_keys = Vec::new();
    for i in 0..3 {
        let key = format!("env/ready-{i}");
        jobs::submit(&coord, &key, b"{}", &options).await.unwrap();
        ready_keys.push(key);
    }

    let loads_before = probe.loads();
    let ready = jobs::ready_keys(&coord, &patterns).await.unwrap();
    let loads = probe.loads() - loads_before;
    let mut found: Vec<String> = ready.into_iter().map(|r| r.key).collect();
    found.sort();
    assert_eq!(found, ready_keys);
    assert!(
        loads <= 3,
        "an idle worker's look read {loads} documents; only the 3 due keys need reading"
    );

    // Each claim's write takes its key out of the index again: nothing left to read.
    for _ in 0..3 {
        let job = jobs::claim_next(&coord, &patterns, &claim_options())
            .await
            .unwrap()
            .unwrap();
        job.complete(JobResult::Succeeded).await.unwrap();
    }
    let loads_before = probe.loads();
    assert!(jobs::ready_keys(&coord, &patterns)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(probe.loads() - loads_before, 0);
}

/// A job whose record was replaced after its submit (here directly through the store, as a
/// writer with the store's credentials, or one racing the submit through a server, could) is
/// never run: the claim ends its run as a failed attempt naming the replacement, the worker
/// gets the error and no parameters, and a revive (`baton retry`) keeps the first hash.
#[tokio::test]
async fn a_job_whose_record_was_replaced_after_its_submit_is_never_run() {
    let store = Arc::new(MemoryStore::new());
    let coord = Arc::new(Coordinator::new(store.clone()));
    let options = SubmitOptions {
        spec: baton_core::job::JobSpec {
            max_attempts: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    let id = jobs::submit(&coord, "deploy", b"{\"commit\":\"good\"}", &options)
        .await
        .unwrap()
        .id;
    let record = jobs::job_record(&id);
    let good = store.get_record("deploy", &record).await.unwrap().unwrap();
    let evil = String::from_utf8(good.clone())
        .unwrap()
        .replace("good", "evil");
    store
        .put_record("deploy", &record, evil.as_bytes())
        .await
        .unwrap();

    let error = jobs::claim(&coord, "deploy", &claim_options())
        .await
        .expect_err("the replaced parameters are not handed to the worker");
    let said = error.to_string();
    assert!(
        said.contains(&format!(
            "the parameters of job {id} were replaced after it was submitted"
        )),
        "{said}"
    );
    // Its run ended failed, spending its one attempt: dead, with the reason kept.
    let end = jobs::wait(&coord, "deploy", &id, Duration::from_millis(50), &|_| {})
        .await
        .unwrap();
    assert_eq!((end.outcome, end.run), (Outcome::Dead, 1));
    let reason = end.reason.unwrap_or_default();
    assert!(
        reason.contains("were replaced after it was submitted"),
        "{reason}"
    );
    assert!(jobs::claim(&coord, "deploy", &claim_options())
        .await
        .unwrap()
        .is_none());

    // A revive keeps the first hash: refused while the record is the replaced one...
    let refused = jobs::revive(&coord, "deploy", &id)
        .await
        .expect_err("not revived with replaced parameters");
    assert!(
        refused
            .to_string()
            .contains("were replaced after it was submitted"),
        "{refused}"
    );
    assert!(jobs::claim(&coord, "deploy", &claim_options())
        .await
        .unwrap()
        .is_none());
    // ...and runs the submitted parameters once they are back.
    store.put_record("deploy", &record, &good).await.unwrap();
    jobs::revive(&coord, "deploy", &id).await.unwrap();
    let job = jobs::claim(&coord, "deploy", &claim_options())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(job.params, b"{\"commit\":\"good\"}");
    job.complete(JobResult::Succeeded).await.unwrap();
}

/// The outcome of job `id` of `key` once its lease would have run out, and how many runs it
/// had: a succeeded job that counted as a lost lease would be queued again and claimed.
async fn after_the_lease(coord: &Arc<Coordinator>, key: &str, id: &str) -> (Outcome, u32) {
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    assert!(
        jobs::claim(coord, key, &claim_options_ttl(3))
            .await
            .unwrap()
            .is_none(),
        "the job is not run again"
    );
    let end = jobs::wait(coord, key, id, Duration::from_millis(50), &|_| {})
        .await
        .unwrap();
    (end.outcome, end.run)
}

fn claim_options_ttl(secs: u64) -> ClaimOptions {
    ClaimOptions {
        ttl: Duration::from_secs(secs),
    }
}

/// A worker's completion that the store fails (a restart, a failover) is sent again, the same
/// request, while the lease stands: the job ends succeeded, not as a lost lease run again.
#[tokio::test]
async fn a_completion_the_store_fails_is_retried_within_the_lease() {
    let shared = Arc::new(MemoryStore::new());
    let probe = Probe::new(shared.clone(), true);
    let coord = Arc::new(Coordinator::new(probe.clone()));
    let id = jobs::submit(&coord, "k", b"null", &SubmitOptions::default())
        .await
        .unwrap()
        .id;
    let job = jobs::claim(&coord, "k", &claim_options_ttl(3))
        .await
        .unwrap()
        .unwrap();
    // Every write fails for 600 ms, from the completion's first try on.
    probe.down.store(true, Ordering::SeqCst);
    let back = probe.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(600)).await;
        back.down.store(false, Ordering::SeqCst);
    });
    let view = job.complete(JobResult::Succeeded).await.unwrap();
    assert!(
        matches!(
            view,
            TicketView::Finished {
                outcome: Outcome::Succeeded,
                ..
            }
        ),
        "{view:?}"
    );
    assert_eq!(
        after_the_lease(&coord, "k", &id).await,
        (Outcome::Succeeded, 1)
    );
}

/// A completion that landed but whose answer was lost, the store then unreachable for a while
/// (a server that went down right after taking the write), is sent again with the same attempt:
/// the core answers it as the first time, and the worker hears that its job succeeded.
#[tokio::test]
async fn a_completion_whose_answer_was_lost_is_answered_by_its_retry() {
    let shared = Arc::new(MemoryStore::new());
    let probe = Probe::new(shared.clone(), true);
    let coord = Arc::new(Coordinator::new(probe.clone()));
    let id = jobs::submit(&coord, "k", b"null", &SubmitOptions::default())
        .await
        .unwrap()
        .id;
    let job = jobs::claim(&coord, "k", &claim_options_ttl(3))
        .await
        .unwrap()
        .unwrap();
    probe.vanish_after_cas.store(true, Ordering::SeqCst);
    let back = probe.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(600)).await;
        back.unreachable.store(false, Ordering::SeqCst);
    });
    let view = job.complete(JobResult::Succeeded).await.unwrap();
    assert!(
        matches!(
            view,
            TicketView::Finished {
                outcome: Outcome::Succeeded,
                ..
            }
        ),
        "{view:?}"
    );
    assert_eq!(
        after_the_lease(&coord, "k", &id).await,
        (Outcome::Succeeded, 1)
    );
}

#[tokio::test]
async fn a_report_whose_answer_was_lost_is_written_again_while_the_lease_stands() {
    // The report is what tells the next worker that a run's command succeeded when its worker
    // died before recording the job's end: a store's blip must not lose it.
    let shared = Arc::new(MemoryStore::new());
    let probe = Probe::new(shared.clone(), true);
    let coord = Arc::new(Coordinator::new(probe.clone()));
    let id = jobs::submit(&coord, "k", b"null", &SubmitOptions::default())
        .await
        .unwrap()
        .id;
    let job = jobs::claim(&coord, "k", &claim_options())
        .await
        .unwrap()
        .unwrap();
    let report = jobs::RunReport {
        attempt: job.attempt,
        run: job.run,
        fence: job.lease.fence,
        worker: "w".into(),
        started_wall_ms: 0,
        ended_wall_ms: 0,
        result: "succeeded".into(),
        exit_code: Some(0),
        error: None,
        stdout_tail: String::new(),
        stderr_tail: String::new(),
        awaiting_complete: false,
        note: None,
    };
    probe.lose_record_replies.store(2, Ordering::SeqCst);
    job.report(&report).await.unwrap();
    assert_eq!(probe.lose_record_replies.load(Ordering::SeqCst), 0);
    let kept = jobs::reports(&coord, "k", &id, job.run).await.unwrap();
    assert_eq!(kept, vec![report]);
    job.complete(JobResult::Succeeded).await.unwrap();
}
