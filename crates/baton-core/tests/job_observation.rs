//! Jobs on a store without a clock (etcd, DynamoDB, S3), where leases are judged by
//! observation, under id reuse: a dead job revived under its id (`baton retry`) and second
//! submits with the same id (`submit --id`), seen by several long-lived clients (a worker busy
//! on other keys, `baton serve`, a deliverer) that each feed their own [`Observer`] every
//! document they read or write, on monotonic clocks of their own.
//!
//! The property: a run's lease ends by observation only after its lease has passed since its
//! last beat (its claim or a renewal), in real time. A client that saw an earlier incarnation
//! of the id at the same heartbeat must not carry that sighting over to the new one: that
//! would end the new run at once, and a second worker would run the key's job beside it.

use baton_core::job::{JobResult, JobSpec};
use baton_core::{apply, token_hash, Clock, Doc, Observer, Op, Request};
use proptest::prelude::*;

mod common;
use common::{submit, token, wall_at};

/// The job ids the steps reuse.
const IDS: [&str; 2] = ["x", "y"];
const CLIENTS: usize = 3;
const TTL_MS: u64 = 6_000;

#[derive(Clone, Debug)]
enum Step {
    /// Client `c` submits job `IDS[i]` (a second submit of a live or remembered id changes
    /// nothing).
    Submit { c: usize, i: usize },
    /// Client `c` revives job `IDS[i]` if it is dead (`baton retry`).
    Revive { c: usize, i: usize },
    /// Client `c` claims the head job as a worker.
    Claim { c: usize },
    /// The worker of running run `r` (by index) renews it, through client `c`.
    Beat { c: usize, r: usize },
    /// Running run `r` ends (succeeded or failed), through client `c`.
    Complete { c: usize, r: usize, ok: bool },
    /// Client `c` writes the key for another reason (expire and grant only).
    Tick { c: usize },
    /// Client `c` reads the key.
    Read { c: usize },
    /// Real time passes.
    Wait(u64),
}

fn step() -> impl Strategy<Value = Step> {
    let c = 0..CLIENTS;
    let i = 0..IDS.len();
    prop_oneof![
        2 => (c.clone(), i.clone()).prop_map(|(c, i)| Step::Submit { c, i }),
        2 => (c.clone(), i).prop_map(|(c, i)| Step::Revive { c, i }),
        3 => c.clone().prop_map(|c| Step::Claim { c }),
        2 => (c.clone(), 0usize..2).prop_map(|(c, r)| Step::Beat { c, r }),
        1 => (c.clone(), 0usize..2, any::<bool>()).prop_map(|(c, r, ok)| Step::Complete { c, r, ok }),
        3 => c.clone().prop_map(|c| Step::Tick { c }),
        2 => c.prop_map(|c| Step::Read { c }),
        3 => prop_oneof![0u64..2_000, 2_000u64..8_000].prop_map(Step::Wait),
    ]
}

/// A run a worker holds: its job id, token and the real time of its last beat.
struct Run {
    id: String,
    token: String,
    beat_at_ms: u64,
}

struct World {
    doc: Option<Doc>,
    now_ms: u64,
    observers: Vec<Observer>,
    /// Each client's monotonic clock is real time plus its own offset.
    mono_offset_ms: [u64; CLIENTS],
    running: Vec<Run>,
    attempts: u64,
    tokens: u32,
}

impl World {
    fn new() -> World {
        World {
            doc: None,
            now_ms: 1_000,
            observers: vec![Observer::default(); CLIENTS],
            mono_offset_ms: [0, 7_777, 123_456],
            running: Vec::new(),
            attempts: 0,
            tokens: 0,
        }
    }

    /// Client `c` loads the document, applies `op` with its own observation clock and writes
    /// the result back; it observes what it read and what it wrote, as the coordinator does.
    fn run(&mut self, c: usize, op: Op) -> Option<baton_core::Reply> {
        let mono_ms = self.now_ms + self.mono_offset_ms[c];
        if let Some(doc) = &self.doc {
            self.observers[c].observe(doc, mono_ms);
        }
        self.attempts += 1;
        let request = Request::new(format!("a{}", self.attempts), op);
        let clock = Clock::Observed {
            observer: &self.observers[c],
            mono_ms,
            wall_ms: wall_at(self.now_ms),
        };
        let applied = apply(self.doc.as_ref(), &request, &clock).ok()?;
        self.observers[c].observe(&applied.doc, mono_ms);
        self.doc = Some(applied.doc);
        self.check_runs_that_ended();
        Some(applied.reply)
    }

    /// Every run the document no longer holds under its token, and that no completion ended,
    /// ended by its lease running out: that must not happen before its lease has passed since
    /// its last beat.
    fn check_runs_that_ended(&mut self) {
        let doc = self.doc.as_ref().expect("written");
        let now_ms = self.now_ms;
        self.running.retain(|run| {
            if doc.by_token_hash(&token_hash(&run.token)).is_some() {
                return true;
            }
            assert!(
                now_ms - run.beat_at_ms >= TTL_MS,
                "run of {} ended {} ms after its last beat, with a lease of {TTL_MS} ms",
                run.id,
                now_ms - run.beat_at_ms
            );
            false
        });
    }

    fn apply(&mut self, step: &Step) {
        match *step {
            Step::Submit { c, i } => {
                let mut s = submit(IDS[i]);
                s.spec = spec();
                self.run(c, Op::Submit(s));
            }
            Step::Revive { c, i } => {
                let mut s = submit(IDS[i]);
                s.spec = spec();
                s.revive = true;
                self.run(c, Op::Submit(s));
            }
            Step::Claim { c } => self.claim(c),
            Step::Beat { c, r } => self.beat(c, r),
            Step::Complete { c, r, ok } => self.complete(c, r, ok),
            Step::Tick { c } => {
                self.run(c, Op::Tick);
            }
            Step::Read { c } => {
                let mono_ms = self.now_ms + self.mono_offset_ms[c];
                if let Some(doc) = &self.doc {
                    self.observers[c].observe(doc, mono_ms);
                }
            }
            Step::Wait(ms) => self.now_ms += ms,
        }
    }

    fn claim(&mut self, c: usize) {
        self.tokens += 1;
        let token = token(self.tokens);
        let op = Op::Claim {
            token: token.clone(),
            ttl_ms: TTL_MS,
        };
        self.run(c, op);
        let doc = self.doc.as_ref().expect("written");
        if let Some(ticket) = doc.by_token_hash(&token_hash(&token)) {
            self.running.push(Run {
                id: ticket.id.clone(),
                token,
                beat_at_ms: self.now_ms,
            });
        }
    }

    fn beat(&mut self, c: usize, r: usize) {
        let Some(run) = self.running.get(r) else {
            return;
        };
        let token = run.token.clone();
        let op = Op::Renew {
            token: token.clone(),
            ttl_ms: Some(TTL_MS),
        };
        let renewed = self.run(c, op).is_some();
        if let Some(run) = self.running.iter_mut().find(|run| run.token == token) {
            if renewed {
                run.beat_at_ms = self.now_ms;
            }
        }
    }

    fn complete(&mut self, c: usize, r: usize, ok: bool) {
        let Some(run) = self.running.get(r) else {
            return;
        };
        let token = run.token.clone();
        // The completion ends the run: it is no run that ran out.
        let run = self.running.remove(r);
        let result = if ok {
            JobResult::Succeeded
        } else {
            JobResult::Failed { error: None }
        };
        let op = Op::Complete {
            token,
            id: None,
            result,
        };
        if self.run(c, op).is_none() {
            // Refused: the run had already ended, by its lease. Judge it as such.
            self.running.push(run);
            self.check_runs_that_ended();
        }
    }
}

/// One attempt, so a run that runs out makes the job dead and `Revive` can bring it back.
fn spec() -> JobSpec {
    JobSpec {
        max_attempts: 1,
        ..JobSpec::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn a_reused_job_id_never_ends_the_new_run_early(
        steps in proptest::collection::vec(step(), 1..60)
    ) {
        let mut world = World::new();
        for step in &steps {
            world.apply(step);
        }
    }
}

/// The case found in the field, step by step: client 0 (`baton serve`) saw run 1 of job x at
/// heartbeat 1; client 1 ended it by its lease and the job died; x was revived and claimed by
/// client 2, at heartbeat 1 again, more than a lease after client 0's sighting.
#[test]
fn an_observer_that_saw_the_old_run_does_not_end_the_revived_one() {
    let mut w = World::new();
    for step in [
        Step::Submit { c: 1, i: 0 },
        Step::Claim { c: 1 },
        Step::Read { c: 0 },
        Step::Read { c: 1 },
        Step::Wait(TTL_MS + 1),
        Step::Tick { c: 1 },
        Step::Revive { c: 2, i: 0 },
        Step::Claim { c: 2 },
        Step::Tick { c: 0 },
    ] {
        w.apply(&step);
    }
    assert_eq!(w.running.len(), 1, "the revived run still runs");
}
