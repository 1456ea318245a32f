//! Jobs under random histories: submits (one at a time, and in bursts that overflow the window
//! into the backlog), duplicate submits, lock tickets on the same key, claims by workers,
//! completions that succeed, fail or give the job back, completions by stale tokens, cancels,
//! and time passing past leases, backoffs and waiting tickets. After every step:
//!
//! - no more holders than the key's limit;
//! - every new grant (a job's run or a lock ticket's turn) has a fence above every earlier one;
//! - a new grant never overtakes: everything that arrived before it and is still live holds;
//! - a job's failed attempts never exceed its attempts, and they only grow while it lives;
//! - no job or ticket ends twice; a completion by a token that does not hold changes no holder.
//!
//! At the end the key is drained (time passes, a worker runs what is left): every job and ticket
//! ended exactly once, and the key is empty. `properties.rs` checks the lock rules against a
//! reference model; this checks what jobs and the backlog add, by invariants.

use std::collections::{BTreeMap, BTreeSet};

use baton_core::job::{JobResult, JobSpec};
use baton_core::op::TicketView;
use baton_core::{Mode, Op, Outcome, Reply, TicketState};
use proptest::prelude::*;

mod common;
use common::*;

#[derive(Clone, Debug)]
enum Step {
    /// Submits this many new jobs, with this many attempts each.
    Submit { n: usize, attempts: u32 },
    /// Submits again a live job the document shows, in its window or its backlog's tail (by
    /// index): changes nothing. (A job in a written segment, which the core cannot see, is the
    /// client's to find first: `jobs::submit` reads the segments.)
    Resubmit(usize),
    /// Queues a lock ticket.
    Enqueue,
    /// A worker claims the next job.
    Claim,
    /// A running job's worker (by index among the running) says its command succeeded; it
    /// goes on renewing, or stops, as any worker may.
    SaySucceeded(usize),
    /// A running job (by index among the running) ends so (succeeded, if its worker said so).
    Complete(usize, Ending),
    /// A completion by a token that holds nothing (a run that ended).
    StaleComplete(usize),
    /// A held lock ticket (by index) is released.
    Release(usize),
    /// An operator cancels a job or ticket (by index among all that arrived).
    Cancel(usize),
    /// Time passes.
    Wait(u64),
}

#[derive(Clone, Copy, Debug)]
enum Ending {
    Succeeded,
    Failed,
    ReleasedBack,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (1usize..4, 1u32..4).prop_map(|(n, attempts)| Step::Submit { n, attempts }),
        1 => (20usize..70, 1u32..3).prop_map(|(n, attempts)| Step::Submit { n, attempts }),
        1 => any::<usize>().prop_map(Step::Resubmit),
        1 => Just(Step::Enqueue),
        5 => Just(Step::Claim),
        5 => (any::<usize>(), prop_oneof![
            3 => Just(Ending::Succeeded),
            2 => Just(Ending::Failed),
            1 => Just(Ending::ReleasedBack),
        ])
            .prop_map(|(i, e)| Step::Complete(i, e)),
        2 => any::<usize>().prop_map(Step::SaySucceeded),
        1 => any::<usize>().prop_map(Step::StaleComplete),
        2 => any::<usize>().prop_map(Step::Release),
        1 => any::<usize>().prop_map(Step::Cancel),
        2 => prop_oneof![0u64..500, 500u64..5_000, 5_000u64..70_000].prop_map(Step::Wait),
    ]
}

/// The world seen from outside the core: what arrived, in which order, which runs a worker
/// holds, and what the invariants remember.
struct Key {
    w: World,
    limit: u32,
    /// Every job and ticket id, in arrival order.
    arrived: Vec<String>,
    /// Ids of lock tickets, with their tokens.
    tickets: BTreeMap<String, String>,
    /// Runs a worker holds: (job id, token).
    running: Vec<(String, String)>,
    /// Tokens of runs that ended.
    stale: Vec<String>,
    /// Jobs whose running worker said, and was told it was heard, that its command succeeded.
    said: BTreeSet<String>,
    /// Holders after the last step, with their fences.
    held: BTreeSet<(String, u64)>,
    max_fence: u64,
    /// Each live job's failed attempts as last seen.
    failures: BTreeMap<String, u32>,
    next_token: u32,
}

impl Key {
    fn new(limit: u32) -> Key {
        Key {
            w: World::new(),
            limit,
            arrived: Vec::new(),
            tickets: BTreeMap::new(),
            running: Vec::new(),
            stale: Vec::new(),
            said: BTreeSet::new(),
            held: BTreeSet::new(),
            max_fence: 0,
            failures: BTreeMap::new(),
            next_token: 0,
        }
    }

    fn token(&mut self) -> String {
        self.next_token += 1;
        token(self.next_token)
    }

    fn submit(&mut self, id: String, attempts: u32) {
        let mut s = submit(&id);
        s.limit = self.limit;
        s.spec = JobSpec {
            max_attempts: attempts,
            backoff_ms: 200,
            ..JobSpec::default()
        };
        // Refused (the backlog's bounds are the core's to enforce): nothing arrived.
        if self.w.run(Op::Submit(s)).is_ok() {
            self.arrived.push(id);
        }
    }

    fn apply(&mut self, step: &Step) {
        match step {
            Step::Submit { n, attempts } => {
                for _ in 0..*n {
                    let id = format!("j{}", self.arrived.len() + 1);
                    self.submit(id, *attempts);
                }
            }
            Step::Resubmit(i) => {
                let Some(doc) = self.w.doc.as_ref() else {
                    return;
                };
                let jobs: Vec<String> = self
                    .live()
                    .into_iter()
                    .filter(|id| id.starts_with('j'))
                    .filter(|id| {
                        doc.by_id(id).is_some()
                            || doc
                                .backlog
                                .as_ref()
                                .is_some_and(|b| b.tail_job(id).is_some())
                    })
                    .collect();
                if jobs.is_empty() {
                    return;
                }
                let id = jobs[i % jobs.len()].clone();
                let before = self.w.doc.clone();
                let mut s = submit(&id);
                s.limit = self.limit;
                let ended_before = self.w.ended.len();
                let _ = self.w.run(Op::Submit(s));
                // Its write may end what time ended (an expired waiter), nothing more, and
                // adds no job.
                let count = |doc: &Option<baton_core::Doc>| {
                    doc.as_ref().map_or(0, |d| {
                        d.tickets.len() as u64 + d.backlog.as_ref().map_or(0, |b| b.len())
                    })
                };
                let ended_now = (self.w.ended.len() - ended_before) as u64;
                assert_eq!(
                    count(&self.w.doc) + ended_now,
                    count(&before),
                    "a second submit of live job {id} changed the queue"
                );
            }
            Step::Enqueue => {
                let n = self.arrived.len() as u32 + 1;
                let token = self.token();
                let mut e = enqueue(n);
                e.id = format!("t{n}");
                e.token = token.clone();
                e.limit = self.limit;
                e.mode = Mode::Normal;
                if self.w.run(Op::Enqueue(e.clone())).is_ok() {
                    self.arrived.push(e.id.clone());
                    self.tickets.insert(e.id, token);
                }
            }
            Step::Claim => self.claim(),
            Step::Complete(i, ending) => {
                if self.running.is_empty() {
                    return;
                }
                let (id, token) = self.running.remove(i % self.running.len());
                // A worker says so only when the command exited 0, and completes it so.
                let ending = if self.said.contains(&id) {
                    Ending::Succeeded
                } else {
                    *ending
                };
                let result = match ending {
                    Ending::Succeeded => JobResult::Succeeded,
                    Ending::Failed => JobResult::Failed {
                        error: Some("exit 1".into()),
                    },
                    Ending::ReleasedBack => JobResult::ReleasedBack { delay_ms: 300 },
                };
                // A run whose lease ran out is refused or told it ended; either way it holds
                // no more.
                let _ = self.w.run(Op::Complete {
                    token: token.clone(),
                    id: Some(id),
                    result,
                });
                self.stale.push(token);
            }
            Step::SaySucceeded(i) => {
                if self.running.is_empty() {
                    return;
                }
                let (id, token) = self.running[i % self.running.len()].clone();
                if self.w.run(Op::RunSucceeded { token }).is_ok() {
                    self.said.insert(id);
                }
            }
            Step::StaleComplete(i) => {
                if self.stale.is_empty() {
                    return;
                }
                let token = self.stale[i % self.stale.len()].clone();
                let holders_before = self.holders();
                let _ = self.w.run(Op::Complete {
                    token,
                    id: None,
                    result: JobResult::Succeeded,
                });
                assert_eq!(
                    self.holders(),
                    holders_before,
                    "a completion by a stale token changed the holders"
                );
            }
            Step::Release(i) => {
                let held: Vec<String> = self
                    .holders()
                    .into_iter()
                    .map(|(id, _)| id)
                    .filter(|id| self.tickets.contains_key(id))
                    .collect();
                if held.is_empty() {
                    return;
                }
                let id = &held[i % held.len()];
                let token = self.tickets[id].clone();
                let _ = self.w.run(Op::Release {
                    token,
                    outcome: Outcome::Succeeded,
                    reason: None,
                });
            }
            Step::Cancel(i) => {
                if self.arrived.is_empty() {
                    return;
                }
                let id = self.arrived[i % self.arrived.len()].clone();
                // An id in the backlog is not in the document: the client finds its segment.
                let _ = self.w.run(Op::Cancel {
                    reason: None,
                    id: id.clone(),
                    by: String::new(),
                });
                self.running.retain(|(running, _)| *running != id);
            }
            Step::Wait(ms) => {
                self.w.now_ms += ms;
                // A worker's heartbeat renews its lease, and lock holders claim theirs; a wait
                // without them ends what the time ends. Half the running jobs beat.
                let beating: Vec<String> = self
                    .running
                    .iter()
                    .step_by(2)
                    .map(|r| r.1.clone())
                    .collect();
                for token in beating {
                    let _ = self.w.run(Op::Renew {
                        token,
                        ttl_ms: None,
                    });
                }
                let _ = self.w.run(Op::Tick);
            }
        }
    }

    /// A worker's claim: as `baton worker` does, again while a claim took backlog jobs in but
    /// found none to run (all of them cancelled).
    fn claim(&mut self) {
        let token = self.token();
        for _ in 0..8 {
            let reply = self.w.run(Op::Claim {
                token: token.clone(),
                ttl_ms: 30_000,
            });
            match reply {
                Ok(Reply::Ticket(TicketView::Live(status)))
                    if status.state == TicketState::Held =>
                {
                    self.running.push((status.id, token));
                    return;
                }
                Ok(Reply::NoJob { .. })
                    if self
                        .w
                        .doc
                        .as_ref()
                        .and_then(|d| d.segment_wanted())
                        .is_some() =>
                {
                    continue
                }
                _ => return,
            }
        }
    }

    fn holders(&self) -> BTreeSet<(String, u64)> {
        self.w
            .doc
            .as_ref()
            .map(|d| d.holders().map(|t| (t.id.clone(), t.fence)).collect())
            .unwrap_or_default()
    }

    fn ended(&self) -> BTreeSet<String> {
        self.w.ended.iter().map(|(id, _)| id.clone()).collect()
    }

    fn live(&self) -> Vec<String> {
        let ended = self.ended();
        self.arrived
            .iter()
            .filter(|id| !ended.contains(*id))
            .cloned()
            .collect()
    }

    /// The invariants, after a step.
    /// A job whose worker was heard saying its command succeeded ends succeeded (or cancelled
    /// by an operator), whether its worker completes it or stops: it is never queued again.
    fn check_said(
        &self,
        step: &Step,
        holders: &BTreeSet<(String, u64)>,
    ) -> Result<(), TestCaseError> {
        for id in &self.said {
            match self.w.ended.iter().find(|(ended, _)| ended == id) {
                Some((_, outcome)) => prop_assert!(
                    matches!(outcome, Outcome::Succeeded | Outcome::Cancelled),
                    "after {step:?}: {id} said it succeeded, then ended {outcome:?}"
                ),
                None => prop_assert!(
                    holders.iter().any(|(held, _)| held == id),
                    "after {step:?}: {id} said it succeeded, then was queued again"
                ),
            }
        }
        Ok(())
    }

    fn check(&mut self, step: &Step) -> Result<(), TestCaseError> {
        let Some(doc) = self.w.doc.clone() else {
            return Ok(());
        };
        let holders = self.holders();
        self.check_said(step, &holders)?;
        let normal = doc.holders().filter(|t| t.mode == Mode::Normal).count();
        prop_assert!(
            normal <= self.limit as usize,
            "after {step:?}: {normal} holders, limit {}",
            self.limit
        );
        let fresh: Vec<(String, u64)> = holders.difference(&self.held).cloned().collect();
        let mut fences: Vec<u64> = fresh.iter().map(|(_, f)| *f).collect();
        fences.sort_unstable();
        for fence in fences {
            prop_assert!(
                fence > self.max_fence,
                "after {step:?}: a grant with fence {fence}, not above {}",
                self.max_fence
            );
            self.max_fence = fence;
        }
        let held_ids: BTreeSet<&str> = holders.iter().map(|(id, _)| id.as_str()).collect();
        let live = self.live();
        for (id, _) in &fresh {
            let at = self.arrived.iter().position(|a| a == id);
            prop_assert!(at.is_some(), "after {step:?}: {id} holds but never arrived");
            for earlier in live.iter().take_while(|l| *l != id) {
                prop_assert!(
                    held_ids.contains(earlier.as_str()),
                    "after {step:?}: {id} was granted while {earlier}, which arrived before it, waits"
                );
            }
        }
        let mut seen = BTreeSet::new();
        for (id, _) in &self.w.ended {
            prop_assert!(seen.insert(id.clone()), "after {step:?}: {id} ended twice");
        }
        for ticket in &doc.tickets {
            if let Some(job) = &ticket.job {
                prop_assert!(
                    job.failures <= job.max_attempts,
                    "after {step:?}: {} failed {} of {} attempts and lives",
                    ticket.id,
                    job.failures,
                    job.max_attempts
                );
                let before = self.failures.insert(ticket.id.clone(), job.failures);
                prop_assert!(
                    before.is_none_or(|b| b <= job.failures),
                    "after {step:?}: {}'s failed attempts went down",
                    ticket.id
                );
            }
        }
        // A run that ended (its lease ran out, or an operator cancelled it) is no longer ours.
        self.running
            .retain(|(id, _)| held_ids.contains(id.as_str()));
        self.held = holders;
        Ok(())
    }

    /// Time passes and a worker runs all that is left; lock holders release.
    fn drain(&mut self) -> Result<(), TestCaseError> {
        for round in 0..100_000 {
            if self.live().is_empty() {
                return Ok(());
            }
            let step = if round % 3 == 0 {
                Step::Wait(700_000)
            } else if !self.running.is_empty() {
                Step::Complete(0, Ending::Succeeded)
            } else if self
                .holders()
                .iter()
                .any(|(id, _)| self.tickets.contains_key(id))
            {
                Step::Release(0)
            } else {
                Step::Claim
            };
            self.apply(&step);
            self.check(&step)?;
        }
        prop_assert!(false, "not drained: {:?} still live", self.live());
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        ..ProptestConfig::default()
    })]

    #[test]
    fn jobs_keep_order_fences_and_attempts_and_each_ends_once(
        limit in 1u32..3,
        steps in prop::collection::vec(step(), 1..120),
    ) {
        let mut key = Key::new(limit);
        for step in &steps {
            key.apply(step);
            key.check(step)?;
        }
        key.drain()?;
        let ended = key.ended();
        for id in &key.arrived {
            prop_assert!(ended.contains(id), "{id} never ended");
        }
        if let Some(doc) = key.w.doc.as_ref() {
            prop_assert!(doc.tickets.is_empty(), "tickets left: {:?}", doc.tickets.len());
            prop_assert!(doc.backlog.as_ref().is_none_or(|b| b.is_empty()));
        }
    }
}
