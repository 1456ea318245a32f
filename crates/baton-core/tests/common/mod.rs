//! The driver the data-driven tests of `apply` share: a document, a store clock, and a counter
//! for attempt ids.
#![allow(dead_code)] // each test file uses what it needs

use baton_core::job::JobSpec;
use baton_core::op::TicketView;
use baton_core::{
    Clock, Doc, Enqueue, Mode, Op, Outcome, Refusal, Reply, Request, Submit, TicketState,
};

pub const EPOCH: &str = "boot-1";

pub fn token(n: u32) -> String {
    format!("{n:032x}")
}

pub fn enqueue(n: u32) -> Enqueue {
    Enqueue {
        may_wait_in_backlog: false,
        pool: None,
        ci_run: None,
        id: format!("t{n}"),
        token: token(n),
        mode: Mode::Normal,
        limit: 1,
        context: format!("client {n}"),
        order: None,
        supersede: false,
        keep: false,
        ttl_ms: 10_000,
        waiter_ttl_ms: 60_000,
        claim_ms: 3_000,
        max_live: 1000,
        once: None,
        cancel_running: false,
        override_freeze: None,
    }
}

/// A tiny driver: a document, a store clock, and a counter for attempt ids.
pub struct World {
    pub doc: Option<Doc>,
    pub now_ms: u64,
    pub attempts: u64,
    /// Every history entry written: tickets that ended, and jobs' runs.
    pub finished: Vec<(String, Outcome)>,
    /// The entries that ended a ticket or a job (not a job's run that queued it again).
    pub ended: Vec<(String, Outcome)>,
    /// Backlog segments written, by record name, as a store keeps records.
    pub records: std::collections::HashMap<String, Vec<u8>>,
    /// Whether a request carries the segment the document asks for (a caller that could not
    /// read it sends none).
    pub reads_segments: bool,
    /// Notification rules watching the key: the events they want are recorded in the outbox
    /// after each apply, as the coordinator does.
    pub rules: Vec<baton_core::notify::Rule>,
    /// Every notification event recorded, in order.
    pub events: Vec<baton_core::notify::Event>,
    /// Every history entry written, as written.
    pub entries: Vec<baton_core::Finished>,
    /// The store's freezes: the one in force on [`KEY`] is handed to each apply, as the
    /// coordinator does.
    pub freezes: Vec<baton_core::freeze::Freeze>,
}

/// The key a [`World`] is (for freezes).
pub const KEY: &str = "deploy/prod";

/// The wall clock of a [`World`] at its store time `now_ms`.
pub fn wall_at(now_ms: u64) -> u64 {
    1_700_000_000_000 + now_ms
}

impl World {
    pub fn new() -> World {
        World {
            doc: None,
            now_ms: 1_000,
            attempts: 0,
            finished: Vec::new(),
            ended: Vec::new(),
            records: std::collections::HashMap::new(),
            reads_segments: true,
            rules: Vec::new(),
            events: Vec::new(),
            entries: Vec::new(),
            freezes: Vec::new(),
        }
    }

    pub fn run(&mut self, op: Op) -> Result<Reply, Refusal> {
        self.attempts += 1;
        let request = Request {
            finishes_seen: None,
            may_arrive_late: false,
            attempt: format!("a{}", self.attempts),
            op,
        };
        self.run_request(&request)
    }

    pub fn run_request(&mut self, request: &Request) -> Result<Reply, Refusal> {
        let clock = Clock::Store {
            uncertain_ms: 0,
            now_ms: self.now_ms,
            epoch: EPOCH,
            wall_ms: wall_at(self.now_ms),
        };
        // As the coordinator does: the segment the document asks for, read first; a segment to
        // write out, written before the document.
        let wanted = self.doc.as_ref().and_then(|d| d.segment_wanted());
        let wanted = wanted.filter(|_| self.reads_segments);
        let segment = wanted.map(|(generation, number)| {
            let name = baton_core::backlog::segment_record(generation, number);
            let bytes = self
                .records
                .get(&name)
                .expect("a counted segment is written");
            baton_core::backlog::Segment::decode(bytes, generation, number).expect("segment")
        });
        let paused = baton_core::freeze::in_force(&self.freezes, KEY, clock.wall_ms());
        let inputs = baton_core::Inputs {
            segment: segment.as_ref(),
            paused: paused.as_ref(),
            arrivals: &[],
        };
        let mut applied = baton_core::apply_with(self.doc.as_ref(), request, &clock, inputs)?;
        let rules: Vec<&baton_core::notify::Rule> = self.rules.iter().collect();
        let events =
            baton_core::notify::record(self.doc.as_ref(), &mut applied, &rules, clock.wall_ms());
        self.events.extend(events);
        if let Some(out) = &applied.segment_out {
            self.records.insert(out.record_name(), out.encode());
        }
        self.entries.extend(applied.finished.iter().cloned());
        for f in &applied.finished {
            self.finished.push((f.id.clone(), f.outcome));
            // A job's run that ended with the job queued again is not the job's end.
            if !f.job.as_ref().is_some_and(|run| run.requeued) {
                self.ended.push((f.id.clone(), f.outcome));
            }
        }
        self.doc = Some(applied.doc);
        Ok(applied.reply)
    }

    pub fn state(&self, id: &str) -> Option<TicketState> {
        self.doc.as_ref()?.by_id(id).map(|t| t.state)
    }

    pub fn holders(&self) -> Vec<String> {
        let doc = self.doc.as_ref().expect("doc");
        let mut ids: Vec<String> = doc.holders().map(|t| t.id.clone()).collect();
        ids.sort();
        ids
    }
}

pub fn live(reply: Reply) -> baton_core::TicketStatus {
    match reply {
        Reply::Ticket(TicketView::Live(status)) => status,
        other => panic!("expected a live ticket, got {other:?}"),
    }
}

/// A submit of job `id` with the default spec, limit 1.
pub fn submit(id: &str) -> Submit {
    Submit {
        pool: None,
        id: id.into(),
        limit: 1,
        context: format!("submitted {id}"),
        order: None,
        supersede: false,
        keep: false,
        spec: JobSpec::default(),
        max_live: 1000,
        revive: false,
        runs_before: 0,
        cancel_running: false,
        params_sha256: None,
    }
}
