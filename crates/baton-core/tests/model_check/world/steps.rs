//! Every step a participant can take: the clients' on each key (as the client library takes
//! them, its rules in `rules.rs`), time moving on, and other participants ending tickets.

use std::rc::Rc;

use baton_core::arrival::Arrival;
use baton_core::lease::{self, Basis};
use baton_core::limits::FINISHED_REMEMBERED;
use baton_core::{
    Applied, Clock, Doc, Enqueue, Mode, Observer, Op, Outcome, Refusal, Reply, Request,
    TicketState, TicketView,
};

use super::memo::{self, Written};
use super::*;
use crate::rules::{self, Reading};

impl World {
    /// Every successor of this state, with the step that led to it.
    pub fn successors(&self, setup: &Setup) -> Vec<(Step, World)> {
        let mut next = Vec::new();
        if self.now + STEP <= setup.horizon && self.held_up_releases_land_in_time() {
            let mut later = self.clone();
            later.now += STEP;
            for client in &mut later.clients {
                client.acted = [false; MAX_KEYS];
            }
            next.push((self.step(None, Action::TimePasses, 0), later));
        }
        if let Some(k) = self.key_to_churn(setup) {
            let mut w = self.clone();
            w.churn(setup, k);
            next.push((self.step(None, Action::Churn, 0), w));
        }
        for i in 0..self.flying.len() {
            let mut w = self.clone();
            let (k, arrival) = w.flying.remove(i);
            w.arrivals[usize::from(k)].push(arrival);
            next.push((self.step(None, Action::AppendLands, 0), w));
        }
        for c in 0..self.clients.len() {
            for &k in &setup.clients[c].plan {
                if self.clients[c].acted[k] {
                    continue;
                }
                let before = next.len();
                self.steps_of(setup, c, k, &mut next);
                for (_, world) in &mut next[before..] {
                    world.clients[c].acted[k] = true;
                }
            }
        }
        next
    }

    fn step(&self, who: Option<(usize, usize)>, action: Action, lag: u64) -> Step {
        Step {
            at: self.now,
            who: who.map(|(c, k)| (c as u8, k as u8)),
            action,
            lag,
        }
    }

    /// Client `c`'s possible steps on key `k`.
    fn steps_of(&self, setup: &Setup, c: usize, k: usize, next: &mut Vec<(Step, World)>) {
        let mut push = |action: Action, lag: u64, world: World| {
            next.push((self.step(Some((c, k)), action, lag), world));
        };
        let lags = self.lags(setup);
        match &self.clients[c].keys[k] {
            Phase::Idle if self.may_enqueue(setup, c, k) => {
                for &lag in lags {
                    for &delivery in self.deliveries(setup, true) {
                        let mut w = self.clone();
                        let request = w.enqueue_request(setup, c, k);
                        w.write(setup, c, k, request, lag, delivery, None);
                        push(Action::Enqueue(delivery), lag, w);
                    }
                }
                if self.may_arrive(setup, k) {
                    for &delivery in self.deliveries(setup, true) {
                        if delivery == Delivery::Late {
                            continue;
                        }
                        let mut w = self.clone();
                        w.append(c, k, delivery, false);
                        push(Action::Append(delivery), 0, w);
                    }
                    if setup.lost && self.faults_left > 0 {
                        let mut w = self.clone();
                        w.append(c, k, Delivery::Lost, true);
                        push(Action::AppendHeldUp, 0, w);
                    }
                }
            }
            Phase::Arriving {
                sent_at,
                finishes_seen,
            } => {
                let id = self.id(c, k);
                if self.docs[k]
                    .as_ref()
                    .is_some_and(|doc| doc.by_id(&id).is_some())
                {
                    let mut w = self.clone();
                    w.clients[c].keys[k] = Phase::Waiting {
                        queued_at: *sent_at,
                    };
                    push(Action::SeesItsArrivalTakenIn, 0, w);
                    return;
                }
                // Whenever its client may write (the key free, its holder's lease run out, its
                // own refresh due, or its arrival gone): the enqueue, as the arrival's retry.
                for &lag in lags {
                    for &delivery in self.deliveries(setup, true) {
                        let w = self.retried(setup, c, k, lag, delivery, *finishes_seen, false);
                        push(Action::WritesForItsArrival(delivery), lag, w);
                    }
                    let mut w = self.clone();
                    w.give_up(setup, c, k, lag);
                    push(Action::GiveUp, lag, w);
                }
            }
            Phase::Waiting { queued_at } => {
                for &lag in lags {
                    let read = self.read_outcome(setup, c, k, *queued_at, lag);
                    let deliveries = match read {
                        ReadOutcome::Claim => self.deliveries(setup, false),
                        _ => &[Delivery::Now],
                    };
                    for &delivery in deliveries {
                        let mut w = self.clone();
                        w.read(setup, c, k, read, lag, delivery);
                        push(Action::Read(delivery), lag, w);
                    }
                    for &delivery in self.deliveries(setup, false) {
                        let mut w = self.clone();
                        let request = w.request(
                            c,
                            k,
                            "refresh",
                            Op::Refresh {
                                token: w.token(c, k),
                            },
                        );
                        w.write(setup, c, k, request, lag, delivery, None);
                        push(Action::Refresh(delivery), lag, w);
                    }
                    let mut w = self.clone();
                    w.give_up(setup, c, k, lag);
                    push(Action::GiveUp, lag, w);
                }
            }
            phase if phase.holding_until().is_some_and(|until| self.now >= until) => {
                // The heartbeat judged the lease lost: the command is stopped.
                let mut w = self.clone();
                w.fail(setup, c);
                push(Action::JudgeLost, 0, w);
            }
            Phase::Holding { .. } => {
                for &lag in lags {
                    for &delivery in self.deliveries(setup, false) {
                        let mut w = self.clone();
                        let op = Op::Renew {
                            token: w.token(c, k),
                            ttl_ms: None,
                        };
                        let request = w.request(c, k, "renew", op);
                        w.write(setup, c, k, request, lag, delivery, None);
                        push(Action::Renew(delivery), lag, w);
                    }
                    if !self.may_release(setup, c) {
                        continue;
                    }
                    let mut w = self.clone();
                    w.release(setup, c, k, lag);
                    push(Action::Release, lag, w);
                    if setup.held_up && self.faults_left > 0 {
                        let mut w = self.clone();
                        if w.send_held_up_release(setup, c, k, lag) {
                            push(Action::SendHeldUpRelease, lag, w);
                        }
                    }
                }
            }
            Phase::Releasing { stale, flight, .. } => {
                // A stale release is applied again, with a new reading of the clock.
                let lags = if *stale { lags } else { &[0] };
                for &lag in lags {
                    let mut w = self.clone();
                    w.land_held_up_release(setup, c, k, lag, Knew::NoneRead);
                    push(Action::HeldUpReleaseLands, lag, w);
                }
                // Its version a push's that knew none pending: it lands past later arrivals.
                if !*stale && flight.took == 0 && !self.arrivals[k].is_empty() {
                    let mut w = self.clone();
                    w.land_held_up_release(setup, c, k, 0, Knew::NonePending);
                    push(Action::HeldUpReleaseLandsPastArrivals, 0, w);
                }
            }
            Phase::Awaiting { heard, .. } => {
                // Only a reply that leads to a claim reads the clock again.
                let lags = if *heard == (Heard::Held { set_here: false }) {
                    lags
                } else {
                    &[0]
                };
                for &lag in lags {
                    let mut w = self.clone();
                    w.handle_late_reply(setup, c, k, lag);
                    push(Action::HandleReply, lag, w);
                }
            }
            Phase::Retrying {
                finishes_seen,
                late_arrival,
            } => {
                for &lag in lags {
                    for &delivery in self.deliveries(setup, true) {
                        let (seen, late) = (*finishes_seen, *late_arrival);
                        let w = self.retried(setup, c, k, lag, delivery, seen, late);
                        push(Action::Retry(delivery), lag, w);
                    }
                }
            }
            Phase::Idle | Phase::Released | Phase::Done | Phase::Unused => {}
        }
    }

    /// How far behind the store a reading may be now.
    fn lags<'s>(&self, setup: &'s Setup) -> &'s [u64] {
        let possible = setup
            .lags
            .iter()
            .take_while(|&&lag| lag <= self.now)
            .count();
        &setup.lags[..possible]
    }

    /// How a write's reply may reach its client now.
    fn deliveries(&self, setup: &Setup, enqueue: bool) -> &'static [Delivery] {
        let lost = setup.lost && enqueue;
        match (self.faults_left > 0, setup.late, lost) {
            (false, _, _) | (true, false, false) => &[Delivery::Now],
            (true, true, false) => &[Delivery::Now, Delivery::Late],
            (true, false, true) => &[Delivery::Now, Delivery::Lost],
            (true, true, true) => &[Delivery::Now, Delivery::Late, Delivery::Lost],
        }
    }

    fn held_up_releases_land_in_time(&self) -> bool {
        self.clients
            .iter()
            .flat_map(|c| &c.keys)
            .all(|phase| match phase {
                Phase::Releasing { sent_at, .. } => self.now + STEP <= sent_at + HELD_UP,
                _ => true,
            })
    }

    /// Whether client `c` may enqueue on `k`: the keys before it in its plan are held.
    fn may_enqueue(&self, setup: &Setup, c: usize, k: usize) -> bool {
        let plan = &setup.clients[c].plan;
        plan.iter()
            .take_while(|&&earlier| earlier != k)
            .all(|&earlier| self.clients[c].keys[earlier].holding_until().is_some())
    }

    /// The world after client `c` writes its enqueue on `k` again, carrying `finishes_seen`
    /// (rule 3) and, after an unanswered append, that its arrival may land late (rule 7), its
    /// reply reaching it as `delivery` says.
    #[allow(clippy::too_many_arguments)]
    fn retried(
        &self,
        setup: &Setup,
        c: usize,
        k: usize,
        lag: u64,
        delivery: Delivery,
        finishes_seen: u64,
        late_arrival: bool,
    ) -> World {
        let mut w = self.clone();
        let mut request = rules::retry(w.enqueue_request(setup, c, k), finishes_seen);
        request.may_arrive_late = late_arrival;
        w.write(setup, c, k, request, lag, delivery, Some(finishes_seen));
        w
    }

    /// Whether a client may enqueue on `k` by arrival: the world allows it and the key is held.
    fn may_arrive(&self, setup: &Setup, k: usize) -> bool {
        setup.arrivals
            && self.docs[k]
                .as_ref()
                .is_some_and(|doc| doc.holders().next().is_some())
    }

    /// Client `c` appends its arrival to `k` (`held_up`: it lands later); `delivery`: its
    /// reply comes now, or is lost (the client then writes its enqueue as the arrival's
    /// retry).
    fn append(&mut self, c: usize, k: usize, delivery: Delivery, held_up: bool) {
        let doc = self.docs[k].as_ref();
        let finishes_seen = doc.map_or(0, |doc| doc.finishes);
        let unsettled_seen = doc.map_or(0, |doc| doc.unsettled_recorded());
        let arrival = PendingArrival {
            c: c as u8,
            round: self.clients[c].round,
            unsettled_seen,
        };
        if held_up {
            self.flying.push((k as u8, arrival));
        } else {
            self.arrivals[k].push(arrival);
        }
        self.clients[c].keys[k] = match delivery {
            Delivery::Lost => {
                self.faults_left -= 1;
                Phase::Retrying {
                    finishes_seen,
                    late_arrival: true,
                }
            }
            Delivery::Now | Delivery::Late => Phase::Arriving {
                sent_at: self.now,
                finishes_seen,
            },
        };
    }

    /// The arrivals pending on `k`, as the core takes them in.
    fn arrivals_of(&self, setup: &Setup, k: usize) -> Vec<Arrival> {
        self.arrivals[k]
            .iter()
            .map(|a| {
                let c = usize::from(a.c);
                let mode = if setup.clients[c].shared {
                    Mode::Shared
                } else {
                    Mode::Normal
                };
                let id = ticket_id(c, k, a.round);
                let op = enqueue_op(id, token(c, k, a.round), mode, setup.limit);
                let Op::Enqueue(enqueue) = op else {
                    unreachable!("enqueue_op makes an enqueue")
                };
                Arrival::of(&enqueue, a.unsettled_seen)
            })
            .collect()
    }

    /// Whether client `c` holds (or has released) every key of its plan: its command ran.
    fn may_release(&self, setup: &Setup, c: usize) -> bool {
        setup.clients[c].plan.iter().all(|&k| {
            let phase = &self.clients[c].keys[k];
            phase.holding_until().is_some()
                || matches!(phase, Phase::Releasing { .. } | Phase::Released)
        })
    }

    /// A first attempt of `op` by client `c` on `k`, named by what it does and when.
    fn request(&self, c: usize, k: usize, what: &str, op: Op) -> Request {
        Request::new(format!("{}-{what}-{}", self.id(c, k), self.now), op)
    }

    /// Client `c`'s enqueue on `k`: the same attempt id for every retry.
    fn enqueue_request(&self, setup: &Setup, c: usize, k: usize) -> Request {
        let id = self.id(c, k);
        let mode = if setup.clients[c].shared {
            Mode::Shared
        } else {
            Mode::Normal
        };
        let op = enqueue_op(id.clone(), self.token(c, k), mode, setup.limit);
        Request::new(format!("{id}-enqueue"), op)
    }

    /// The store's clock as a client reads it now, `lag` behind (floored to whole seconds on
    /// a coarse clock).
    fn reading(&self, setup: &Setup, lag: u64) -> u64 {
        let reading = self.now - lag;
        match setup.clock {
            ClockKind::Coarse => reading / 1_000 * 1_000,
            ClockKind::Exact | ClockKind::Observed => reading,
        }
    }

    fn store_clock(&self, setup: &Setup, lag: u64) -> Clock<'static> {
        Clock::Store {
            now_ms: self.reading(setup, lag),
            uncertain_ms: setup.clock.uncertain_ms(),
            epoch: EPOCH,
            wall_ms: self.now,
        }
    }

    /// What client `c`'s `request` on `k` would write now, as its coordinator computes it: it
    /// loads the document (its observer watches it) and applies with the clock it read.
    fn compute(
        &mut self,
        setup: &Setup,
        c: usize,
        k: usize,
        request: &Request,
        lag: u64,
    ) -> Result<Rc<Written>, Refusal> {
        let doc = self.docs[k].clone();
        let arrivals = self.arrivals_of(setup, k);
        if setup.clock != ClockKind::Observed {
            let clock = self.store_clock(setup, lag);
            return memo::apply_once(doc.as_ref(), request, &clock, &arrivals);
        }
        let observer = &mut self.observers[c][k];
        if let Some(doc) = &doc {
            observer.observe(doc, self.now);
        }
        let clock = Clock::Observed {
            observer,
            mono_ms: self.now,
            wall_ms: self.now,
        };
        memo::apply_once(doc.as_ref(), request, &clock, &arrivals)
    }

    /// Writes what was computed on `k` (the caller knows its CAS succeeds): records finishes
    /// and grants, checks fences, and makes every release still on its way to `k` stale.
    /// Returns the document as written.
    fn land(&mut self, k: usize, written: &Written) -> Rc<Doc> {
        let applied = &written.applied;
        // The arrivals it read are the first pending (later ones stay), each now a ticket, or
        // one that ended in the write itself, or refused (no trace).
        let took = written.took.min(self.arrivals[k].len());
        for arrival in self.arrivals[k].drain(..took) {
            let id = ticket_id(usize::from(arrival.c), k, arrival.round);
            let queued = written.doc.by_id(&id).is_some()
                || applied.finished.iter().any(|finished| finished.id == id);
            if let (true, Some(entry)) = (queued, ledger_index(&id)) {
                self.ledger[entry] |= ENQUEUED;
            }
        }
        for (id, fence) in &applied.granted {
            if *fence <= self.max_fence[k] && self.violation.is_none() {
                self.violation = Some(format!(
                    "fence {fence} for {id} on {} is not above {}",
                    KEY_NAMES[k], self.max_fence[k]
                ));
            }
            self.max_fence[k] = self.max_fence[k].max(*fence);
        }
        for finished in &applied.finished {
            if let Some(entry) = ledger_index(&finished.id) {
                self.ledger[entry] += 1;
            }
        }
        if !applied.changed {
            if let Some(doc) = &self.docs[k] {
                return doc.clone();
            }
        }
        let doc = written.doc.clone();
        self.docs[k] = Some(doc.clone());
        for client in &mut self.clients {
            if let Phase::Releasing { stale, .. } = &mut client.keys[k] {
                *stale = true;
            }
        }
        doc
    }

    /// Client `c` writes `request` to `k` now, its reading of the store's clock `lag` behind;
    /// the reply reaches it as `delivery` says. `first_seen`: on a retry, the finish count
    /// its first attempt read.
    #[allow(clippy::too_many_arguments)] // one write, every way it can go
    fn write(
        &mut self,
        setup: &Setup,
        c: usize,
        k: usize,
        request: Request,
        lag: u64,
        delivery: Delivery,
        first_seen: Option<u64>,
    ) {
        let basis = Basis {
            basis_local_ms: self.now,
            behind_ms: lag,
        };
        let finishes_read = self.docs[k].as_ref().map_or(0, |doc| doc.finishes);
        let id = self.id(c, k);
        let (heard, written) = match self.compute(setup, c, k, &request, lag) {
            Ok(written) => {
                let heard = heard_of(&request.op, &written.applied, &id);
                if matches!(request.op, Op::Enqueue(_)) {
                    self.ledger[ledger_index(&id).unwrap()] |= ENQUEUED;
                }
                (heard, Some(self.land(k, &written)))
            }
            Err(_) => (Heard::Ended, None),
        };
        match delivery {
            Delivery::Now => self.hear(setup, c, k, heard, basis, written, lag),
            Delivery::Late => {
                self.faults_left -= 1;
                let holding_until = self.clients[c].keys[k].holding_until();
                self.clients[c].keys[k] = Phase::Awaiting {
                    heard,
                    basis,
                    written: written.filter(|_| setup.clock == ClockKind::Observed),
                    holding_until,
                };
            }
            Delivery::Lost => {
                self.faults_left -= 1;
                self.clients[c].keys[k] = Phase::Retrying {
                    finishes_seen: first_seen.unwrap_or(finishes_read),
                    late_arrival: request.may_arrive_late,
                };
            }
        }
    }

    /// Client `c` handles the reply to its write on `k`, made with `basis`, now; `written`:
    /// the document the write left, which its observer is fed. A claim it leads to reads the
    /// clock `lag` behind.
    #[allow(clippy::too_many_arguments)] // a reply and everything it is judged by
    fn hear(
        &mut self,
        setup: &Setup,
        c: usize,
        k: usize,
        heard: Heard,
        basis: Basis,
        written: Option<Rc<Doc>>,
        lag: u64,
    ) {
        if let (ClockKind::Observed, Some(doc)) = (setup.clock, &written) {
            self.observers[c][k].observe(doc, self.now);
        }
        match heard {
            Heard::Queued => {
                self.clients[c].keys[k] = Phase::Waiting {
                    queued_at: rules::queued_at(basis),
                }
            }
            Heard::Held { set_here: true } => match rules::lease_until(basis, self.now) {
                Some(until) => self.clients[c].keys[k] = Phase::Holding { until },
                None => self.fail(setup, c),
            },
            Heard::Held { set_here: false } => self.claim(setup, c, k, lag, Delivery::Now),
            Heard::Ended => self.fail(setup, c),
        }
    }

    fn claim(&mut self, setup: &Setup, c: usize, k: usize, lag: u64, delivery: Delivery) {
        let request = self.request(
            c,
            k,
            "claim",
            Op::Refresh {
                token: self.token(c, k),
            },
        );
        self.write(setup, c, k, request, lag, delivery, None);
    }

    fn handle_late_reply(&mut self, setup: &Setup, c: usize, k: usize, lag: u64) {
        if let Phase::Awaiting {
            heard,
            basis,
            written,
            ..
        } = self.clients[c].keys[k].clone()
        {
            self.hear(setup, c, k, heard, basis, written, lag);
        }
    }

    /// What a read of `k` now tells waiting client `c`, its reading of the store's clock
    /// `lag` behind.
    fn read_outcome(
        &self,
        setup: &Setup,
        c: usize,
        k: usize,
        queued_at: u64,
        lag: u64,
    ) -> ReadOutcome {
        let id = self.id(c, k);
        let Some(doc) = &self.docs[k] else {
            return ReadOutcome::Gone;
        };
        let Some(ticket) = doc.by_id(&id) else {
            return ReadOutcome::Gone;
        };
        match (ticket.state, ticket.claimed) {
            (TicketState::Queued, _) => ReadOutcome::Queued,
            (TicketState::Held, false) => {
                let reading = (setup.clock != ClockKind::Observed).then(|| Reading {
                    read_from_local_ms: self.now,
                    store_ms: self.reading(setup, lag),
                    behind_ms: lag,
                });
                let same_epoch = doc.epoch.as_deref() == Some(EPOCH);
                match rules::fresh_grant_until(
                    queued_at,
                    reading,
                    ticket.deadline_ms,
                    same_epoch,
                    self.now,
                ) {
                    Some(until) => ReadOutcome::StartUntil(until),
                    None => ReadOutcome::Claim,
                }
            }
            (TicketState::Held, true) => ReadOutcome::Claim,
        }
    }

    fn read(
        &mut self,
        setup: &Setup,
        c: usize,
        k: usize,
        read: ReadOutcome,
        lag: u64,
        delivery: Delivery,
    ) {
        if let (ClockKind::Observed, Some(doc)) = (setup.clock, self.docs[k].clone()) {
            self.observers[c][k].observe(&doc, self.now);
        }
        match read {
            ReadOutcome::Gone => self.fail(setup, c),
            ReadOutcome::Queued => {
                self.clients[c].keys[k] = Phase::Waiting {
                    queued_at: self.now,
                }
            }
            ReadOutcome::StartUntil(until) => self.clients[c].keys[k] = Phase::Holding { until },
            ReadOutcome::Claim => self.claim(setup, c, k, lag, delivery),
        }
    }

    /// Writes `request` and ignores the reply (a release, or a waiter giving up): the client
    /// believes nothing either way. `false` if refused.
    fn write_regardless(
        &mut self,
        setup: &Setup,
        c: usize,
        k: usize,
        request: &Request,
        lag: u64,
    ) -> bool {
        let Ok(written) = self.compute(setup, c, k, request, lag) else {
            return false;
        };
        let written = self.land(k, &written);
        if setup.clock == ClockKind::Observed {
            self.observers[c][k].observe(&written, self.now);
        }
        true
    }

    fn give_up(&mut self, setup: &Setup, c: usize, k: usize, lag: u64) {
        let op = Op::Release {
            token: self.token(c, k),
            outcome: Outcome::TimedOut,
            reason: None,
        };
        let request = Request::new(format!("{}-give-up", self.id(c, k)), op);
        self.write_regardless(setup, c, k, &request, lag);
        self.fail(setup, c);
    }

    fn release_request(&self, c: usize, k: usize) -> Request {
        let op = Op::Release {
            token: self.token(c, k),
            outcome: Outcome::Succeeded,
            reason: None,
        };
        Request::new(format!("{}-release", self.id(c, k)), op)
    }

    fn release(&mut self, setup: &Setup, c: usize, k: usize, lag: u64) {
        let request = self.release_request(c, k);
        self.write_regardless(setup, c, k, &request, lag);
        self.released(setup, c, k);
    }

    /// Computes client `c`'s release of `k` now, to land later (`false` if refused).
    fn send_held_up_release(&mut self, setup: &Setup, c: usize, k: usize, lag: u64) -> bool {
        let request = self.release_request(c, k);
        let Ok(flight) = self.compute(setup, c, k, &request, lag) else {
            return false;
        };
        self.faults_left -= 1;
        self.clients[c].keys[k] = Phase::Releasing {
            flight,
            stale: false,
            sent_at: self.now,
        };
        true
    }

    fn land_held_up_release(&mut self, setup: &Setup, c: usize, k: usize, lag: u64, knew: Knew) {
        let Phase::Releasing { flight, stale, .. } = self.clients[c].keys[k].clone() else {
            return;
        };
        // A release that read no arrival conflicts once one is pending (the store's CAS),
        // unless its version was a push's that knew none pending: later ones stay pending.
        let read_none = flight.took == 0 && knew == Knew::NoneRead;
        let stale = stale || (read_none && !self.arrivals[k].is_empty());
        if stale {
            // The CAS conflicts: the coordinator reads and applies it again.
            let request = self.release_request(c, k);
            self.write_regardless(setup, c, k, &request, lag);
        } else {
            let written = self.land(k, &flight);
            if setup.clock == ClockKind::Observed {
                self.observers[c][k].observe(&written, self.now);
            }
        }
        self.released(setup, c, k);
    }

    fn released(&mut self, setup: &Setup, c: usize, k: usize) {
        self.clients[c].keys[k] = Phase::Released;
        self.end_round_if_over(setup, c);
    }

    /// Client `c` failed (gave up, lost its turn or a lease): it stops everything it was doing
    /// and believes nothing; tickets it leaves behind run out (a release on its way still
    /// lands).
    fn fail(&mut self, setup: &Setup, c: usize) {
        for &k in &setup.clients[c].plan {
            let phase = &mut self.clients[c].keys[k];
            if phase.is_active() && !matches!(phase, Phase::Releasing { .. }) {
                *phase = Phase::Done;
            }
        }
        self.end_round_if_over(setup, c);
    }

    /// Once client `c` has nothing left to do with any key this round: the next round if it
    /// released them all and has one, else it is done (and its observers, never used again,
    /// are dropped).
    fn end_round_if_over(&mut self, setup: &Setup, c: usize) {
        let plan = &setup.clients[c].plan;
        let client = &mut self.clients[c];
        if plan.iter().any(|&k| client.keys[k].is_active()) {
            return;
        }
        let all_released = plan
            .iter()
            .all(|&k| matches!(client.keys[k], Phase::Released));
        if all_released && client.round + 1 < setup.rounds {
            client.round += 1;
            for &k in plan {
                client.keys[k] = Phase::Idle;
            }
            return;
        }
        for &k in plan {
            client.keys[k] = Phase::Done;
        }
        if let Some(observers) = self.observers.get_mut(c) {
            *observers = Default::default();
        }
    }

    /// The key on which other participants may end [`FINISHED_REMEMBERED`] tickets now: one
    /// with a retry pending, once per run (enough for a retry to find its ticket forgotten).
    fn key_to_churn(&self, setup: &Setup) -> Option<usize> {
        if !setup.lost || self.churned {
            return None;
        }
        self.clients.iter().find_map(|client| {
            (0..setup.keys).find(|&k| matches!(client.keys[k], Phase::Retrying { .. }))
        })
    }

    /// Other participants enqueue and cancel [`FINISHED_REMEMBERED`] tickets on `k`, at once:
    /// every mark the document had is forgotten.
    fn churn(&mut self, setup: &Setup, k: usize) {
        self.churned = true;
        let stranger = Observer::default();
        for i in 0..FINISHED_REMEMBERED {
            let id = format!("t-x{i}");
            let token = format!("{:032x}", 0xe000 + i);
            let enqueue = enqueue_op(id.clone(), token.clone(), Mode::Normal, setup.limit);
            let cancel = Op::Release {
                token,
                outcome: Outcome::Cancelled,
                reason: None,
            };
            for (what, op) in [("enqueue", enqueue), ("cancel", cancel)] {
                let request = Request::new(format!("{id}-{what}"), op);
                let clock = match setup.clock {
                    ClockKind::Observed => Clock::Observed {
                        observer: &stranger,
                        mono_ms: self.now,
                        wall_ms: self.now,
                    },
                    ClockKind::Exact | ClockKind::Coarse => self.store_clock(setup, 0),
                };
                let arrivals = self.arrivals_of(setup, k);
                let doc = self.docs[k].clone();
                match memo::apply_once(doc.as_ref(), &request, &clock, &arrivals) {
                    Ok(written) => {
                        self.land(k, &written);
                    }
                    Err(refusal) => {
                        self.violation = Some(format!("{id}'s {what} was refused: {refusal}"));
                        return;
                    }
                }
            }
        }
    }
}

/// What the client makes of the reply to `op`, for ticket `id`.
fn heard_of(op: &Op, applied: &Applied, id: &str) -> Heard {
    match &applied.reply {
        Reply::Ticket(TicketView::Live(status)) => match status.state {
            TicketState::Queued => Heard::Queued,
            TicketState::Held => Heard::Held {
                set_here: lease::write_set_the_lease(op, &applied.granted, id),
            },
        },
        _ => Heard::Ended,
    }
}

/// An enqueue with the model's phases (TTL, waiter TTL, claim window) and no options.
fn enqueue_op(id: String, token: String, mode: Mode, limit: u32) -> Op {
    Op::Enqueue(Enqueue {
        may_wait_in_backlog: false,
        pool: None,
        ci_run: None,
        id,
        token,
        mode,
        limit,
        context: String::new(),
        order: None,
        supersede: false,
        keep: false,
        ttl_ms: TTL,
        waiter_ttl_ms: WAITER_TTL,
        claim_ms: CLAIM,
        max_live: 1000,
        once: None,
        cancel_running: false,
        override_freeze: None,
    })
}
