//! An exhaustive model check of the core with the clients' side of the protocol.
//!
//! A small world — three clients, one key of limit 1 (or 2, or 1 with a shared client), a store
//! clock in half-second steps up to a horizon — is explored breadth-first over EVERY
//! interleaving of: each client's next step (enqueue; while waiting: read, refresh its waiter
//! lease or give up; while holding: renew, release), a client crashing at any point, and time
//! moving on (so any client may be paused for any stretch). Each step is one `apply` at the
//! current time, as the coordinator would make it — except a release, which may also be
//! computed now and land any time later (a write held up in the network), if nothing else was
//! written meanwhile (the CAS), its deadlines computed at the earlier time.
//!
//! What the clients believe is modelled as the library computes it: a lease stands until the
//! renewal's send time plus the TTL less the heartbeat's margin, and a grant started unclaimed
//! (`fresh_grant_until` in `baton-client`) stands until the earlier of the last answer that
//! showed the ticket queued plus the claim window, and the grant's own claim deadline on the
//! store's clock (the granter's reading may be older than that answer: the late release), less
//! the margin, used only when half the window is left.
//!
//! In every reachable state:
//! - the document passes `invariants::check` and `check_settled` (limit, no shared beside
//!   normal, unique fences, queue order: nothing that could hold is left waiting);
//! - every client that believes it holds really holds by the store's judgement at that moment
//!   (its ticket survives expiry applied now), so believers never exceed the limit and never mix
//!   shared with normal;
//! - every grant's fence is above every earlier one;
//! - every enqueued ticket is live or finished exactly once (no lost tickets, no ghosts).
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::{HashMap, VecDeque};

use sha2::{Digest, Sha256};

use baton_core::{
    apply, invariants, Applied, Clock, Doc, Enqueue, Mode, Op, Outcome, Reply, Request,
    TicketState, TicketView,
};

/// One step of time, ms.
const STEP: u64 = 500;
const TTL: u64 = 2_000;
/// Four steps: a grant seen one step after the last queued answer is still fresh, so the
/// clients' unclaimed start is explored.
const CLAIM: u64 = 2_000;
const WAITER_TTL: u64 = 3_000;
const EPOCH: &str = "model";

/// The heartbeat's margin, as `baton_client::heartbeat::safety_margin` computes it.
fn margin(duration: u64) -> u64 {
    (duration / 10).max(300).min(duration / 2)
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Phase {
    /// About to enqueue its ticket for round `round`.
    Idle,
    /// Queued; `queued_at`: when the last answer that showed it queued was asked for.
    Waiting { queued_at: u64 },
    /// Believes it holds until `until` (a lease, or a grant started unclaimed).
    Holding { until: u64 },
    /// Its command done, its release sent but not landed yet (`World::in_flight`).
    Releasing,
    /// Gave up, lost its turn or its lease, or finished all its rounds.
    Done,
    /// Killed: acts no more and uses nothing.
    Crashed,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Client {
    phase: Phase,
    round: u8,
    shared: bool,
    /// The time of its last step: a client takes at most one step per instant (its heartbeat
    /// and polls are timed; without this, renewals at one instant would never end).
    acted_at: Option<u64>,
}

#[derive(Clone, Debug)]
struct World {
    now: u64,
    doc: Option<Doc>,
    clients: Vec<Client>,
    /// Highest fence handed out so far.
    max_fence: u64,
    /// How many times each enqueued ticket has finished.
    finished: HashMap<String, u32>,
    enqueued: Vec<String>,
    /// Per client, a release computed earlier and not landed yet: the document it would write
    /// and whether another write has landed since it was computed (then its CAS conflicts).
    in_flight: Vec<Option<InFlight>>,
}

#[derive(Clone, Debug)]
struct InFlight {
    applied: Applied,
    stale: bool,
    /// When it was computed: it lands within [`HELD_UP`] of it.
    sent_at: u64,
}

/// How long a release may be held up on its way: two steps. One is enough for a grant to land
/// after its waiter's last queued answer, the case `fresh_grant_until` must bound by the
/// grant's deadline; longer ones only grow the world.
const HELD_UP: u64 = 2 * STEP;

struct Setup {
    limit: u32,
    shared: Vec<bool>,
    rounds: u8,
    horizon: u64,
    /// Releases may be held up on their way ([`HELD_UP`]); it multiplies the world, so only
    /// some setups explore it.
    held_up: bool,
}

impl World {
    /// The state's identity: a 128-bit digest of everything in it (hash compaction, as model
    /// checkers do to fit large worlds in memory; a collision would skip one state, with
    /// odds far below any other failure).
    fn key(&self) -> u128 {
        let mut hasher = Sha256::new();
        hasher.update(self.now.to_be_bytes());
        if let Some(doc) = &self.doc {
            hasher.update(projection(doc));
        }
        hasher.update(format!("{:?}", self.clients));
        let mut finished: Vec<_> = self.finished.iter().collect();
        finished.sort();
        hasher.update(format!("{finished:?}{}", self.max_fence));
        for flight in self.in_flight.iter().flatten() {
            hasher.update(projection(&flight.applied.doc));
            hasher.update(format!(
                "{:?}{}{}",
                flight.applied.granted, flight.stale, flight.sent_at
            ));
        }
        let digest = hasher.finalize();
        u128::from_be_bytes(digest[..16].try_into().unwrap())
    }

    fn clock(&self) -> Clock<'static> {
        Clock::Store {
            now_ms: self.now,
            uncertain_ms: 0,
            epoch: EPOCH,
            wall_ms: self.now,
        }
    }

    fn id(c: usize, round: u8) -> String {
        format!("t-c{c}r{round}")
    }

    fn token(c: usize, round: u8) -> String {
        format!("{:032x}", 0x7000 + c * 16 + round as usize)
    }

    /// Applies `op` now; on success records finishes and grants and checks fences. Returns the
    /// reply, or `None` when refused (nothing changed).
    fn apply(&mut self, op: Op, attempt: &str) -> Option<Reply> {
        let applied = self.compute(op, attempt)?;
        Some(self.land(applied))
    }

    /// What `op` would write now (`None`: refused).
    fn compute(&self, op: Op, attempt: &str) -> Option<Applied> {
        let request = Request {
            finishes_seen: None,
            attempt: attempt.to_string(),
            op,
        };
        apply(self.doc.as_ref(), &request, &self.clock()).ok()
    }

    /// Writes what was computed (the caller knows the CAS would succeed): records finishes and
    /// grants, checks fences, and makes every write still in flight stale.
    fn land(&mut self, applied: Applied) -> Reply {
        for (id, fence) in &applied.granted {
            assert!(
                *fence > self.max_fence,
                "fence {fence} for {id} is not above {}",
                self.max_fence
            );
            self.max_fence = *fence;
        }
        for finished in &applied.finished {
            *self.finished.entry(finished.id.clone()).or_default() += 1;
        }
        if applied.changed {
            self.doc = Some(applied.doc);
            for flight in self.in_flight.iter_mut().flatten() {
                flight.stale = true;
            }
        }
        applied.reply
    }

    /// Every successor of this state, with what led to it.
    fn successors(&self, setup: &Setup) -> Vec<(String, World)> {
        let mut next = Vec::new();
        let flights_land_in_time = self
            .in_flight
            .iter()
            .flatten()
            .all(|flight| self.now + STEP <= flight.sent_at + HELD_UP);
        if self.now + STEP <= setup.horizon && flights_land_in_time {
            let mut later = self.clone();
            later.now += STEP;
            next.push(("time passes".to_string(), later));
        }
        for c in 0..self.clients.len() {
            let client = &self.clients[c];
            if matches!(client.phase, Phase::Done | Phase::Crashed) {
                continue;
            }
            let client_acted = client.acted_at == Some(self.now);
            let mut crashed = self.clone();
            crashed.clients[c].phase = Phase::Crashed;
            // A release held up when its sender dies may land or not: here, not (the world
            // where it lands first is the one where the release lands, then the client dies).
            crashed.in_flight[c] = None;
            next.push((format!("c{c} crashes"), crashed));
            if client_acted {
                continue;
            }
            let round = client.round;
            let before = next.len();
            let (id, token) = (World::id(c, round), World::token(c, round));
            match client.phase {
                Phase::Idle => {
                    let mut w = self.clone();
                    let op = Op::Enqueue(Enqueue {
                        id: id.clone(),
                        token: token.clone(),
                        mode: if client.shared {
                            Mode::Shared
                        } else {
                            Mode::Normal
                        },
                        limit: setup.limit,
                        context: String::new(),
                        order: None,
                        supersede: false,
                        keep: false,
                        ttl_ms: TTL,
                        waiter_ttl_ms: WAITER_TTL,
                        claim_ms: CLAIM,
                        max_live: 1000,
                    });
                    let reply = w.apply(op, &format!("{id}-enqueue"));
                    w.enqueued.push(id.clone());
                    w.after_reply(c, reply);
                    next.push((format!("c{c} enqueues"), w));
                }
                Phase::Waiting { queued_at } => {
                    // A read: the document as stored, nothing applied.
                    let mut w = self.clone();
                    let ticket = self.doc.as_ref().and_then(|d| d.by_id(&id)).cloned();
                    match ticket {
                        None => w.clients[c].phase = Phase::Done,
                        Some(t) if t.state == TicketState::Queued => {
                            w.clients[c].phase = Phase::Waiting {
                                queued_at: self.now,
                            }
                        }
                        Some(t) if !t.claimed => {
                            // Start at the grant when it is provably fresh, else claim first. The
                            // store's clock reads exactly the model's time here.
                            let stands_until = (queued_at + CLAIM).min(t.deadline_ms.unwrap_or(0));
                            let until = stands_until.saturating_sub(margin(CLAIM));
                            if until.saturating_sub(self.now) >= CLAIM / 2 {
                                w.clients[c].phase = Phase::Holding { until };
                            } else {
                                let reply = w.apply(
                                    Op::Refresh {
                                        token: token.clone(),
                                    },
                                    &format!("{id}-claim-{}", self.now),
                                );
                                w.after_reply(c, reply);
                            }
                        }
                        Some(_) => {
                            let reply = w.apply(
                                Op::Refresh {
                                    token: token.clone(),
                                },
                                &format!("{id}-claim-{}", self.now),
                            );
                            w.after_reply(c, reply);
                        }
                    }
                    next.push((format!("c{c} reads"), w));

                    let mut w = self.clone();
                    let reply = w.apply(
                        Op::Refresh {
                            token: token.clone(),
                        },
                        &format!("{id}-refresh-{}", self.now),
                    );
                    w.after_reply(c, reply);
                    next.push((format!("c{c} refreshes"), w));

                    let mut w = self.clone();
                    w.apply(
                        Op::Release {
                            token: token.clone(),
                            outcome: Outcome::TimedOut,
                            reason: None,
                        },
                        &format!("{id}-give-up"),
                    );
                    w.clients[c].phase = Phase::Done;
                    next.push((format!("c{c} gives up"), w));
                }
                Phase::Holding { until } => {
                    if self.now >= until {
                        // The heartbeat judged the lease lost: the command is stopped.
                        let mut w = self.clone();
                        w.clients[c].phase = Phase::Done;
                        next.push((format!("c{c} judges its lease lost"), w));
                        continue;
                    }
                    let mut w = self.clone();
                    let reply = w.apply(
                        Op::Renew {
                            token: token.clone(),
                            ttl_ms: None,
                        },
                        &format!("{id}-renew-{}", self.now),
                    );
                    match reply {
                        Some(Reply::Ticket(TicketView::Live(status)))
                            if status.state == TicketState::Held =>
                        {
                            w.clients[c].phase = Phase::Holding {
                                until: self.now + TTL - margin(TTL),
                            }
                        }
                        // Refused (ended): the lease is lost.
                        _ => w.clients[c].phase = Phase::Done,
                    }
                    next.push((format!("c{c} renews"), w));

                    let mut w = self.clone();
                    w.apply(release_op(&token), &format!("{id}-release"));
                    w.finish_round(c, setup);
                    next.push((format!("c{c} releases"), w));

                    // The same release, held up on its way: computed now, landing later.
                    let held_up = setup
                        .held_up
                        .then(|| self.compute(release_op(&token), &format!("{id}-release")));
                    if let Some(applied) = held_up.flatten() {
                        let mut w = self.clone();
                        w.in_flight[c] = Some(InFlight {
                            applied,
                            stale: false,
                            sent_at: self.now,
                        });
                        w.clients[c].phase = Phase::Releasing;
                        next.push((format!("c{c} sends its release, held up"), w));
                    }
                }
                Phase::Releasing => {
                    let mut w = self.clone();
                    if let Some(flight) = w.in_flight[c].take() {
                        if flight.stale {
                            // The CAS conflicts: the coordinator reads and applies it again.
                            w.apply(release_op(&token), &format!("{id}-release"));
                        } else {
                            w.land(flight.applied);
                        }
                    }
                    w.finish_round(c, setup);
                    next.push((format!("c{c}'s held-up release lands"), w));
                }
                Phase::Done | Phase::Crashed => {}
            }
            for (_, world) in &mut next[before..] {
                world.clients[c].acted_at = Some(self.now);
            }
        }
        next
    }

    /// Client `c` is done with its round: the next, or done.
    fn finish_round(&mut self, c: usize, setup: &Setup) {
        self.clients[c].round += 1;
        self.clients[c].phase = if self.clients[c].round < setup.rounds {
            Phase::Idle
        } else {
            Phase::Done
        };
    }

    /// Moves client `c` on after a reply to an enqueue, refresh or claim sent now.
    fn after_reply(&mut self, c: usize, reply: Option<Reply>) {
        self.clients[c].phase = match reply {
            Some(Reply::Ticket(TicketView::Live(status))) => match status.state {
                TicketState::Queued => Phase::Waiting {
                    queued_at: self.now,
                },
                TicketState::Held => Phase::Holding {
                    until: self.now + TTL - margin(TTL),
                },
            },
            _ => Phase::Done,
        };
    }

    /// The invariants; `Err` says which failed.
    fn check(&self) -> Result<(), String> {
        if let Some(doc) = &self.doc {
            invariants::check(doc)?;
            invariants::check_settled(doc)?;
        }
        // What the store would judge right now: expiry applied, nothing else.
        let tick = Request {
            finishes_seen: None,
            attempt: String::new(),
            op: Op::Tick,
        };
        let judged = match &self.doc {
            Some(doc) => {
                apply(Some(doc), &tick, &self.clock())
                    .map_err(|r| format!("a tick was refused: {r}"))?
                    .doc
            }
            None => Doc::default(),
        };
        let (mut normal, mut shared) = (0, 0);
        for (c, client) in self.clients.iter().enumerate() {
            let Phase::Holding { until } = client.phase else {
                continue;
            };
            if self.now >= until {
                continue;
            }
            let id = World::id(c, client.round);
            match judged.by_id(&id) {
                Some(t) if t.state == TicketState::Held => {}
                other => {
                    return Err(format!(
                        "c{c} believes it holds until {until} but the store, now at {}, says \
                         {other:?}",
                        self.now
                    ))
                }
            }
            if client.shared {
                shared += 1;
            } else {
                normal += 1;
            }
        }
        let limit = self.doc.as_ref().map_or(1, |d| d.limit);
        if normal > limit || (normal > 0 && shared > 0) {
            return Err(format!("{normal} normal and {shared} shared believers"));
        }
        for id in &self.enqueued {
            let live = self.doc.as_ref().is_some_and(|d| d.by_id(id).is_some());
            let ended = self.finished.get(id).copied().unwrap_or(0);
            if ended > 1 || (live && ended > 0) || (!live && ended == 0) {
                return Err(format!("{id}: live {live}, finished {ended} times"));
            }
        }
        Ok(())
    }
}

/// A holder's release after its command succeeded.
fn release_op(token: &str) -> Op {
    Op::Release {
        token: token.to_string(),
        outcome: Outcome::Succeeded,
        reason: None,
    }
}

/// What of a document decides what happens next on a store clock with no retries: the tickets'
/// states, deadlines and fences, the counter and the limit. Left out, so that worlds differing
/// only in them are one state: heartbeat counters (read only by observers), wall-clock times
/// and hold-time samples (display and estimates), and finished marks' attempt tags (read only
/// by retries, which this world does not make).
fn projection(doc: &Doc) -> String {
    let tickets: Vec<_> = doc
        .tickets
        .iter()
        .map(|t| (&t.id, t.state, t.mode, t.claimed, t.fence, t.deadline_ms))
        .collect();
    let marks: Vec<_> = doc.finished.iter().map(|m| (&m.id, m.outcome)).collect();
    format!("{tickets:?}{marks:?}{}{}", doc.fence, doc.limit)
}

/// Explores every state reachable from the start; panics with the path to the first state that
/// breaks an invariant. Returns how many states were seen.
fn explore(setup: Setup) -> usize {
    let start = World {
        now: 0,
        doc: None,
        clients: setup
            .shared
            .iter()
            .map(|&shared| Client {
                phase: Phase::Idle,
                round: 0,
                shared,
                acted_at: None,
            })
            .collect(),
        max_fence: 0,
        finished: HashMap::new(),
        enqueued: Vec::new(),
        in_flight: vec![None; setup.shared.len()],
    };
    // Every state seen, with the state it was first reached from and the step (for the
    // report of a broken invariant: the path is rebuilt by following parents).
    let mut seen: HashMap<u128, (u128, String)> = HashMap::new();
    let mut queue: VecDeque<(World, u128)> = VecDeque::new();
    let start_key = start.key();
    seen.insert(start_key, (start_key, String::new()));
    queue.push_back((start, start_key));
    while let Some((world, key)) = queue.pop_front() {
        if let Err(broken) = world.check() {
            let mut path = Vec::new();
            let mut at = key;
            while at != start_key {
                let (parent, step) = &seen[&at];
                path.push(step.clone());
                at = *parent;
            }
            path.reverse();
            panic!("{broken}\nafter: {}\nstate: {world:#?}", path.join(" → "));
        }
        for (step, next) in world.successors(&setup) {
            let next_key = next.key();
            if let std::collections::hash_map::Entry::Vacant(entry) = seen.entry(next_key) {
                entry.insert((key, format!("{step} @{}", world.now)));
                queue.push_back((next, next_key));
            }
        }
    }
    seen.len()
}

#[test]
fn a_mutex_with_three_clients() {
    let states = explore(Setup {
        limit: 1,
        shared: vec![false, false, false],
        rounds: 1,
        horizon: 3_000,
        held_up: false,
    });
    println!("mutex, 3 clients: {states} states");
    assert!(
        states > 10_000,
        "the world is explored, not skipped: {states}"
    );
}

#[test]
fn a_mutex_taken_twice_by_one_client() {
    let states = explore(Setup {
        limit: 1,
        shared: vec![false, false],
        rounds: 2,
        horizon: 6_000,
        held_up: true,
    });
    println!("mutex, 2 clients, 2 rounds: {states} states");
    assert!(states > 1_000, "{states}");
}

#[test]
fn a_semaphore_of_two_with_three_clients() {
    let states = explore(Setup {
        limit: 2,
        shared: vec![false, false, false],
        rounds: 1,
        horizon: 3_000,
        held_up: false,
    });
    println!("limit 2, 3 clients: {states} states");
    assert!(states > 10_000, "{states}");
}

#[test]
fn shared_holders_never_beside_a_normal_one() {
    let states = explore(Setup {
        limit: 1,
        shared: vec![true, true, false],
        rounds: 1,
        horizon: 3_000,
        held_up: false,
    });
    println!("shared, shared, normal: {states} states");
    assert!(states > 10_000, "{states}");
}
