//! Property tests of [`baton_core::apply`] against a reference model of one key.
//!
//! **The world.** One key whose store is an `Option<Doc>`: the core is always applied to the
//! latest document, as the store's compare-and-swap guarantees. Time is either the store's clock
//! (`now_ms` plus an epoch that a reboot changes, which also restarts `now_ms`) or, in the second
//! test, observation: every client has its own [`Observer`] and its own monotonic clock (an
//! arbitrary offset from real time), and feeds the observer every document it reads. Up to six
//! clients each own up to five tickets whose ids and tokens exist before the first attempt; a
//! run ends far more tickets than the document remembers, and the model predicts which ones it
//! still knows (the last `FINISHED_REMEMBERED` to end, in the core's order). Each client has its own
//! wall clock (skewed by up to ten minutes), used by the core only for display and fences.
//!
//! **The steps.** Enqueue (normal or shared; limit fixed per run from 1..=3, now and then a wrong
//! one; order `None`, a build number (some zero-padded) or text; supersede; keep; TTL, waiter TTL
//! and claim window from small sets; now and then a live-ticket bound of 3), refresh, renew (now
//! and then with a wrong or a stale token, or an invalid TTL), release with any of the eight
//! outcomes, operator cancel by id (live, ended or never created), cancel-queued, tick, enqueue
//! of another ticket's id with a new token, polls (reads that feed an observer), small and large
//! clock steps, steps to exactly the next expiry ±1 ms, reboots, client restarts (new observer,
//! new monotonic clock, the pending retry forgotten), and invalid input. Every client request is an (attempt id, op) delivered in one
//! of four ways: normally; reply lost (applied, the client does not learn the result and later
//! retries the same request); request lost (not applied, retried later); duplicated (applied
//! twice in a row). A client with a request outstanding retries it at its next step.
//!
//! **The model** keeps its own books, apart from the core's internals: every ticket's state,
//! claim, phase start and phase *generation* (bumped whenever the model believes a new phase
//! began), the fence it saw it granted, how it ended and by which attempt, the key's limit, and
//! for each client the log of what its observer was fed. From them it predicts every apply: the
//! tickets that expire, the reply or the exact refusal, and the tickets the operation itself
//! ends. After every apply (and the document again after every step) it checks, besides that
//! prediction:
//! 1. `invariants::check`, and its own count: at most `limit` normal holders, never shared beside
//!    normal.
//! 2. `invariants::check_settled`, its own settledness check, and no barging: each grant (in
//!    `Applied::granted` order) is of a queued ticket that fits beside the holders at that
//!    moment, and every live ticket ahead of it in queue order (order values as numbers when
//!    they are, else as strings, then arrival, tickets without order after) already holds.
//! 3. Fences of successive grants strictly increase over the whole run (across reboots), each is
//!    `max(previous + 1, wall_ms × 1000)`, and the document's fence never decreases.
//! 4. An op with a token never issued, or of a ticket ended and forgotten, is refused with
//!    `UnknownToken`; a refresh, renew or release of a ticket no longer live but remembered is
//!    refused with `Ended` (its real outcome), except the retry of the very release that ended
//!    it, which gets the same answer. A retry (after a lost request or reply it carries the
//!    finish count it saw, as the coordinator does) that names a ticket the core no longer knows
//!    while more tickets ended since than are remembered is refused with `Uncertain`, never
//!    repeated; the document's finish count and its marks are checked against the books.
//! 5. Every ticket ever created is live in the document or has exactly one `Finished` record,
//!    never both; no ticket comes back; a retried operation ends nothing and creates nothing,
//!    and answers as the first time (a cancel-queued that ended nothing left no trace, so its
//!    retry counts as a late first delivery). At the end of a run the outstanding retries are
//!    delivered, the key is drained, and every ticket has ended exactly once.
//! 6. Refusals are the predicted ones (a refused apply keeps the old document); invalid input
//!    (oversize context, bad id, 10 ms TTL, …) is refused with `Refusal::Invalid`.
//! 7. Every returned document encodes and decodes back to an equal document.
//! 8. Expiry follows time: with the store's clock, a ticket expires at the first apply with
//!    `now >= phase start + phase` (so never earlier) and the document's deadline says so; with
//!    observation, a ticket expires exactly when the applying client's feed log shows its
//!    current phase unchanged for the phase's duration on that client's monotonic clock, and
//!    every new phase changes the ticket's heartbeat.
//! 9. Whom each write wakes ([`baton_core::wake`]): every ticket it granted or ended, the
//!    enqueuing ticket aside; any ticket it does not wake is live and the same before and after.
//!
//! Each of these checks was seen to fail against a deliberately broken core (barging, expiry
//! off by one either way, an observer that ignores heartbeats, double release, ghost enqueue,
//! fences without `+ 1`, supersede past `keep`, unrecognised retries, …), also in release
//! builds where the core's own `debug_assert`s are off.

use std::collections::{BTreeSet, HashMap};

use baton_core::limits::InvalidInput;
use baton_core::wake::{self, Wakes};
use baton_core::{
    apply, decode, encode, invariants, Applied, CancelledTicket, Clock, Doc, Enqueue, Mode,
    Observer, Op, Outcome, Refusal, Reply, Request, TicketState, TicketView,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const MAX_CLIENTS: usize = 6;
const TICKETS_PER_CLIENT: usize = 5;
const TTLS: [u64; 3] = [1_000, 10_000, 120_000];
const WAITER_TTLS: [u64; 3] = [2_000, 30_000, 300_000];
const CLAIMS: [u64; 3] = [100, 5_000, 60_000];
/// The last one is below the 1 s minimum: a renew asking for it is refused.
const RENEW_TTLS: [u64; 4] = [1_000, 10_000, 120_000, 10];
/// Build numbers compare as integers ("2" < "10"; "099" and "99" are one place, then by
/// arrival); text compares as strings ("a" < "b10"), and never joins live numbers.
const ORDERS: [&str; 8] = ["1", "10", "2", "9", "099", "99", "a", "b10"];
/// Every outcome, then again those an owner may ask for (so that more releases fit).
const OUTCOMES: [Outcome; 12] = [
    Outcome::Succeeded,
    Outcome::Failed,
    Outcome::Cancelled,
    Outcome::Expired,
    Outcome::Abandoned,
    Outcome::Superseded,
    Outcome::TimedOut,
    Outcome::Dead,
    Outcome::Succeeded,
    Outcome::Failed,
    Outcome::Cancelled,
    Outcome::TimedOut,
];
const WALL_BASE_MS: u64 = 1_700_000_000_000;
const WEEK_MS: u64 = 7 * 24 * 3600 * 1000;

/// How many finished tickets the document remembers. Runs create more tickets than that, so
/// the model keeps its own count of finishes and predicts which are forgotten.
const REMEMBERED: u64 = baton_core::limits::FINISHED_REMEMBERED as u64;
const _: () = assert!((MAX_CLIENTS * TICKETS_PER_CLIENT) as u64 > 2 * REMEMBERED);

// ---------------------------------------------------------------------------------------------
// Generated steps (abstract: interpreted against the world's state when they run).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClockKind {
    Store,
    Observed,
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    Deliver,
    LoseReply,
    LoseRequest,
    Duplicate,
}

#[derive(Clone, Copy, Debug)]
enum TokenSeed {
    Own,
    Wrong,
    Stale,
}

#[derive(Clone, Debug)]
struct EnqueueSeed {
    shared: bool,
    order: Option<u8>,
    supersede: bool,
    keep: bool,
    ttl: u8,
    waiter: u8,
    claim: u8,
    wrong_limit: bool,
    small_queue: bool,
    cancel_running: bool,
}

#[derive(Clone, Debug)]
enum OpSeed {
    Enqueue(EnqueueSeed),
    Refresh {
        pick: u8,
    },
    Renew {
        pick: u8,
        ttl: Option<u8>,
        token: TokenSeed,
    },
    Release {
        pick: u8,
        outcome: u8,
        token: TokenSeed,
    },
    Cancel {
        pick: u8,
    },
    CancelQueued,
    Tick,
    Steal {
        pick: u8,
    },
}

#[derive(Clone, Debug)]
enum Step {
    Op {
        client: u8,
        op: OpSeed,
        fault: Fault,
        read_first: bool,
    },
    Poll {
        client: u8,
    },
    Advance {
        ms: u64,
    },
    /// Time runs to the next moment a ticket may expire (by the store's clock, or in the eyes
    /// of `client`'s observer), give or take 1 ms: the boundaries of expiry.
    AdvanceToExpiry {
        client: u8,
        delta: i8,
    },
    Reboot {
        now_ms: u64,
    },
    Restart {
        client: u8,
        mono_offset: u64,
    },
    Invalid {
        client: u8,
        kind: u8,
    },
}

#[derive(Clone, Debug)]
struct Setup {
    clients: usize,
    limit: u32,
    /// Per client: wall-clock skew, monotonic-clock offset.
    clocks: Vec<(i64, u64)>,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        1usize..=MAX_CLIENTS,
        1u32..=3,
        prop::collection::vec((-600_000i64..600_000, 0u64..1_000_000_000), MAX_CLIENTS),
    )
        .prop_map(|(clients, limit, clocks)| Setup {
            clients,
            limit,
            clocks,
        })
}

fn token_seed() -> impl Strategy<Value = TokenSeed> {
    prop_oneof![
        8 => Just(TokenSeed::Own),
        1 => Just(TokenSeed::Wrong),
        1 => Just(TokenSeed::Stale),
    ]
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        7 => Just(Fault::Deliver),
        1 => Just(Fault::LoseReply),
        1 => Just(Fault::LoseRequest),
        1 => Just(Fault::Duplicate),
    ]
}

fn op_seed() -> impl Strategy<Value = OpSeed> {
    let enqueue = (
        prop::bool::weighted(0.3),
        prop::option::of(0u8..8),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.2),
        0u8..3,
        0u8..3,
        0u8..3,
        prop::bool::weighted(0.04),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.15),
    )
        .prop_map(
            |(
                shared,
                order,
                supersede,
                keep,
                ttl,
                waiter,
                claim,
                wrong_limit,
                small_queue,
                cancel_running,
            )| {
                OpSeed::Enqueue(EnqueueSeed {
                    shared,
                    order,
                    supersede,
                    keep,
                    ttl,
                    waiter,
                    claim,
                    wrong_limit,
                    small_queue,
                    cancel_running,
                })
            },
        );
    prop_oneof![
        6 => enqueue,
        4 => any::<u8>().prop_map(|pick| OpSeed::Refresh { pick }),
        4 => (any::<u8>(), prop::option::of(0u8..4), token_seed())
            .prop_map(|(pick, ttl, token)| OpSeed::Renew { pick, ttl, token }),
        4 => (any::<u8>(), 0u8..12, token_seed())
            .prop_map(|(pick, outcome, token)| OpSeed::Release { pick, outcome, token }),
        1 => any::<u8>().prop_map(|pick| OpSeed::Cancel { pick }),
        1 => Just(OpSeed::CancelQueued),
        1 => Just(OpSeed::Tick),
        1 => any::<u8>().prop_map(|pick| OpSeed::Steal { pick }),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    let client = 0u8..MAX_CLIENTS as u8;
    prop_oneof![
        24 => (client.clone(), op_seed(), fault(), prop::bool::weighted(0.8)).prop_map(
            |(client, op, fault, read_first)| Step::Op { client, op, fault, read_first }
        ),
        5 => client.clone().prop_map(|client| Step::Poll { client }),
        5 => (1u64..1_500).prop_map(|ms| Step::Advance { ms }),
        1 => (1_500u64..70_000).prop_map(|ms| Step::Advance { ms }),
        2 => (client.clone(), -1i8..=1)
            .prop_map(|(client, delta)| Step::AdvanceToExpiry { client, delta }),
        1 => (0u64..5_000).prop_map(|now_ms| Step::Reboot { now_ms }),
        1 => (client.clone(), 0u64..1_000_000_000)
            .prop_map(|(client, mono_offset)| Step::Restart { client, mono_offset }),
        1 => (client, 0u8..17).prop_map(|(client, kind)| Step::Invalid { client, kind }),
    ]
}

// ---------------------------------------------------------------------------------------------
// The model.

/// How a ticket ended, in the model's books.
#[derive(Clone, Debug, PartialEq, Eq)]
struct End {
    outcome: Outcome,
    forced: bool,
    /// The attempt whose operation ended it (`None`: expiry, supersede).
    attempt: Option<String>,
}

/// An order value as the model ranks it: a number by its value, text as a string (live
/// tickets never mix the two, so the derived order between kinds never matters).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum MOrder {
    Number(u128),
    Text(String),
}

impl MOrder {
    fn of(order: &str) -> MOrder {
        match order.parse::<u128>() {
            Ok(n) if order.bytes().all(|b| b.is_ascii_digit()) => MOrder::Number(n),
            _ => MOrder::Text(order.to_string()),
        }
    }

    fn is_number(&self) -> bool {
        matches!(self, MOrder::Number(_))
    }
}

/// A created ticket, in the model's books.
#[derive(Clone, Debug)]
struct MTicket {
    id: String,
    token: String,
    mode: Mode,
    order: Option<String>,
    /// The model's own arrival counter.
    seq: u64,
    keep: bool,
    ttl: u64,
    waiter_ttl: u64,
    claim: u64,
    held: bool,
    claimed: bool,
    fence: u64,
    /// Store time at which the current phase began.
    phase_start: u64,
    /// On the store's clock, the end of the phase before the last beat: a beat never moves
    /// the end earlier (0 after a grant, which starts afresh).
    floor: u64,
    /// Bumped whenever a new phase begins (enqueue, refresh, renew, claim, grant).
    generation: u64,
    /// The generation and document heartbeat seen at the last check.
    seen: Option<(u64, u64)>,
    end: Option<End>,
    /// Its number among the key's finishes (1 is the first ticket that ended; 0 while live).
    end_no: u64,
    /// A holder asked to stop by a later `cancel_running` enqueue: it alone may release as
    /// superseded.
    asked: bool,
}

impl MTicket {
    fn live(&self) -> bool {
        self.end.is_none()
    }

    fn phase_ms(&self) -> u64 {
        match (self.held, self.claimed) {
            (false, _) => self.waiter_ttl,
            (true, false) => self.claim,
            (true, true) => self.ttl,
        }
    }

    fn queue_key(&self) -> (bool, Option<MOrder>, u64) {
        (
            self.order.is_none(),
            self.order.as_deref().map(MOrder::of),
            self.seq,
        )
    }

    /// When the current phase ends on the store's clock.
    fn end_ms(&self) -> u64 {
        self.floor.max(self.phase_start + self.phase_ms())
    }

    /// A grant (or an enqueue): a new phase from `now_ms`.
    fn new_phase(&mut self, now_ms: u64) {
        self.generation += 1;
        self.phase_start = now_ms;
        self.floor = 0;
    }

    /// A refresh, claim or renewal (after `change` to its state): a new phase from `now_ms`
    /// that ends no earlier than the current one.
    fn beat(&mut self, now_ms: u64, change: impl FnOnce(&mut MTicket)) {
        let floor = self.end_ms();
        change(self);
        self.new_phase(now_ms);
        self.floor = floor;
    }

    fn ended(&self) -> Refusal {
        let end = self.end.clone().unwrap_or(End {
            outcome: Outcome::Cancelled,
            forced: false,
            attempt: None,
        });
        Refusal::Ended {
            id: self.id.clone(),
            outcome: end.outcome,
            forced: end.forced,
        }
    }
}

/// The model's books as an apply changes them; committed only when the core accepts.
#[derive(Clone, Debug)]
struct Books {
    tickets: Vec<MTicket>,
    key_limit: u32,
    next_seq: u64,
    /// How many tickets have finished, in the order the core finishes them.
    ends: u64,
}

impl Books {
    /// Whether the core still knows ticket `i`: live, or among the last [`REMEMBERED`] finished.
    fn known(&self, i: usize) -> bool {
        let t = &self.tickets[i];
        t.live() || self.ends - t.end_no < REMEMBERED
    }

    /// Whether `request` is a retry that the document's marks no longer cover: more tickets
    /// finished since its uncertain attempt than the document remembers.
    fn uncovered(&self, request: &Request) -> bool {
        request
            .finishes_seen
            .is_some_and(|seen| self.ends - seen > REMEMBERED)
    }

    /// The refusal for a ticket the core does not know.
    fn not_found(&self, request: &Request, refusal: Refusal) -> Refusal {
        if self.uncovered(request) {
            Refusal::Uncertain
        } else {
            refusal
        }
    }

    fn by_id(&self, id: &str) -> Option<usize> {
        self.tickets.iter().position(|t| t.id == id)
    }

    fn by_token(&self, token: &str) -> Option<usize> {
        self.tickets.iter().position(|t| t.token == token)
    }

    fn live(&self) -> impl Iterator<Item = (usize, &MTicket)> {
        self.tickets.iter().enumerate().filter(|(_, t)| t.live())
    }

    fn end(&mut self, i: usize, outcome: Outcome, forced: bool, attempt: Option<&str>) {
        self.ends += 1;
        self.tickets[i].end_no = self.ends;
        self.tickets[i].end = Some(End {
            outcome,
            forced,
            attempt: attempt.map(str::to_string),
        });
    }

    /// Queued live tickets ahead of `i` in queue order.
    fn position(&self, i: usize) -> usize {
        let key = self.tickets[i].queue_key();
        self.live()
            .filter(|(_, t)| !t.held && t.queue_key() < key)
            .count()
    }

    /// (normal holders, shared holders).
    fn holders(&self) -> (u32, u32) {
        let mut counts = (0, 0);
        for (_, t) in self.live().filter(|(_, t)| t.held) {
            match t.mode {
                Mode::Normal => counts.0 += 1,
                Mode::Shared => counts.1 += 1,
            }
        }
        counts
    }

    /// Whether ticket `i` could hold beside the current holders.
    fn fits(&self, i: usize) -> bool {
        let (normal, shared) = self.holders();
        match self.tickets[i].mode {
            Mode::Normal => shared == 0 && normal < self.key_limit,
            Mode::Shared => normal == 0,
        }
    }
}

/// What the model expects of one apply.
#[derive(Debug)]
struct Expect {
    result: Result<Want, Refusal>,
    /// Tickets the operation itself ends.
    ended: Vec<usize>,
    created: Option<usize>,
    /// The ticket whose owner is looking (a grant to it in this apply is claimed).
    looking: Option<usize>,
}

#[derive(Debug)]
enum Want {
    Ticket(usize),
    Cancelled(Vec<usize>),
    Nothing,
}

/// The first accepted application of an attempt.
#[derive(Debug)]
struct Landing {
    reply: Reply,
}

struct Client {
    /// Ids and tokens made before their first attempt.
    planned: Vec<(String, String)>,
    /// How many of them have been sent as an enqueue.
    sent: usize,
    attempts: u64,
    pending: Option<Request>,
    wall_skew: i64,
    mono_offset: u64,
    observer: Observer,
    /// What the observer was fed: (monotonic time, live tickets with their model generation).
    feeds: Vec<(u64, Vec<(usize, u64)>)>,
}

struct World {
    kind: ClockKind,
    run_limit: u32,
    books: Books,
    real_ms: u64,
    now_ms: u64,
    epochs: u32,
    epoch: String,
    /// The epoch of the last accepted apply (Store clock).
    written_epoch: Option<String>,
    doc: Option<Doc>,
    clients: Vec<Client>,
    landed: HashMap<String, Landing>,
    /// `Finished` records seen per ticket id over the run.
    records: HashMap<String, usize>,
    last_fence: u64,
    extra: u64,
    trace: Vec<String>,
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn valid_token(token: &str) -> bool {
    !token.is_empty() && token.len() <= 128 && !token.chars().any(char::is_control)
}

fn valid_order(order: &str) -> bool {
    !order.is_empty() && order.len() <= 128 && !order.chars().any(char::is_control)
}

fn valid_ttl(ms: u64) -> bool {
    (1_000..=WEEK_MS).contains(&ms)
}

fn refuse(refusal: Refusal) -> Expect {
    Expect {
        result: Err(refusal),
        ended: Vec::new(),
        created: None,
        looking: None,
    }
}

fn invalid() -> Expect {
    refuse(Refusal::Invalid(InvalidInput(String::new())))
}

fn same_refusal(a: &Refusal, b: &Refusal) -> bool {
    match (a, b) {
        (Refusal::Invalid(_), Refusal::Invalid(_)) => true,
        _ => a == b,
    }
}

fn op_token(op: &Op) -> Option<&str> {
    match op {
        Op::Refresh { token } | Op::Renew { token, .. } | Op::Release { token, .. } => Some(token),
        _ => None,
    }
}

fn describe(request: &Request) -> String {
    let op = match &request.op {
        Op::Enqueue(e) => format!(
            "enqueue {} {:?} limit {} order {:?}{}{} ttl {} waiter {} claim {} max_live {}{}",
            e.id,
            e.mode,
            e.limit,
            e.order,
            if e.supersede { " supersede" } else { "" },
            if e.keep { " keep" } else { "" },
            e.ttl_ms,
            e.waiter_ttl_ms,
            e.claim_ms,
            e.max_live,
            if e.context.len() > 64 {
                format!(" context {} bytes", e.context.len())
            } else {
                String::new()
            },
        ),
        Op::Refresh { token } => format!("refresh {}", short(token)),
        Op::Renew { token, ttl_ms } => format!("renew {} ttl {ttl_ms:?}", short(token)),
        Op::Release { token, outcome, .. } => format!("release {} {outcome}", short(token)),
        Op::Cancel { id, .. } => format!("cancel {id:?}"),
        Op::CancelQueued { .. } => "cancel-queued".into(),
        Op::Tick => "tick".into(),
        other => format!("{other:?}"),
    };
    format!("{op} (attempt {})", request.attempt)
}

fn short(token: &str) -> String {
    let tail: String = token.chars().rev().take(6).collect();
    format!("tok…{}", tail.chars().rev().collect::<String>())
}

impl World {
    fn new(kind: ClockKind, setup: &Setup) -> World {
        let clients = (0..setup.clients)
            .map(|c| Client {
                planned: (0..TICKETS_PER_CLIENT)
                    .map(|k| {
                        (
                            format!("c{c}t{k}"),
                            format!("{:032x}", 0x7000_0000u64 + (c * 16 + k) as u64),
                        )
                    })
                    .collect(),
                sent: 0,
                attempts: 0,
                pending: None,
                wall_skew: setup.clocks[c].0,
                mono_offset: setup.clocks[c].1,
                observer: Observer::default(),
                feeds: Vec::new(),
            })
            .collect();
        World {
            kind,
            run_limit: setup.limit,
            books: Books {
                tickets: Vec::new(),
                key_limit: 1,
                next_seq: 0,
                ends: 0,
            },
            real_ms: 0,
            now_ms: 1_000,
            epochs: 1,
            epoch: "boot-1".into(),
            written_epoch: None,
            doc: None,
            clients,
            landed: HashMap::new(),
            records: HashMap::new(),
            last_fence: 0,
            extra: 0,
            trace: vec![format!(
                "{kind:?} clock, {} clients, limit {}",
                setup.clients, setup.limit
            )],
        }
    }

    fn at(&self) -> String {
        format!("\n--- trace ---\n{}", self.trace.join("\n"))
    }

    fn wall(&self, c: usize) -> u64 {
        (WALL_BASE_MS as i64 + self.real_ms as i64 + self.clients[c].wall_skew) as u64
    }

    fn mono(&self, c: usize) -> u64 {
        self.real_ms + self.clients[c].mono_offset
    }

    fn attempt(&mut self, c: usize) -> String {
        self.clients[c].attempts += 1;
        format!("c{c}-a{}", self.clients[c].attempts)
    }

    fn step(&mut self, n: usize, step: &Step) -> Result<(), TestCaseError> {
        let clients = self.clients.len();
        match step {
            Step::AdvanceToExpiry { client, delta } => {
                let c = *client as usize % clients;
                let Some(until) = self.next_expiry(c) else {
                    return Ok(());
                };
                let ms = until.saturating_add_signed(i64::from(*delta));
                self.real_ms += ms;
                self.now_ms += ms;
                self.trace.push(format!(
                    "#{n} advance {ms} ms to the next expiry{delta:+} for c{c} (store {}, real {})",
                    self.now_ms, self.real_ms
                ));
            }
            Step::Advance { ms } => {
                self.real_ms += ms;
                self.now_ms += ms;
                self.trace.push(format!(
                    "#{n} advance {ms} ms (store {}, real {})",
                    self.now_ms, self.real_ms
                ));
            }
            Step::Reboot { now_ms } => match self.kind {
                ClockKind::Store => {
                    self.epochs += 1;
                    self.epoch = format!("boot-{}", self.epochs);
                    self.now_ms = *now_ms;
                    self.trace.push(format!(
                        "#{n} reboot: epoch {}, store clock {now_ms}",
                        self.epoch
                    ));
                }
                ClockKind::Observed => {
                    self.restart(n, *now_ms as usize % clients, *now_ms * 1_000);
                }
            },
            Step::Restart {
                client,
                mono_offset,
            } => self.restart(n, *client as usize % clients, *mono_offset),
            Step::Poll { client } => {
                let c = *client as usize % clients;
                if self.kind == ClockKind::Observed {
                    self.trace
                        .push(format!("#{n} c{c} reads at mono {}", self.mono(c)));
                    self.read(c);
                }
            }
            Step::Invalid { client, kind } => self.invalid(n, *client as usize % clients, *kind)?,
            Step::Op {
                client,
                op,
                fault,
                read_first,
            } => self.client_op(n, *client as usize % clients, op, *fault, *read_first)?,
        }
        Ok(())
    }

    fn restart(&mut self, n: usize, c: usize, mono_offset: u64) {
        let client = &mut self.clients[c];
        client.observer = Observer::default();
        client.feeds.clear();
        client.mono_offset = mono_offset;
        let forgot = client.pending.take();
        self.trace.push(format!(
            "#{n} c{c} restarts (new observer, mono offset {mono_offset}){}",
            forgot.map_or(String::new(), |r| format!(", forgets {}", describe(&r)))
        ));
    }

    /// A client reads the document: its observer is fed (observation only).
    fn read(&mut self, c: usize) {
        if self.kind != ClockKind::Observed {
            return;
        }
        let Some(doc) = &self.doc else { return };
        let mono = self.mono(c);
        let seen = self.books.live().map(|(i, t)| (i, t.generation)).collect();
        let client = &mut self.clients[c];
        client.observer.observe(doc, mono);
        client.feeds.push((mono, seen));
    }

    /// One of the client's tokens: mostly of a live ticket, else of any it planned (sent or not).
    fn own_token(&self, c: usize, pick: u8) -> String {
        let client = &self.clients[c];
        let live: Vec<&String> = client
            .planned
            .iter()
            .filter_map(|(id, token)| {
                let i = self.books.by_id(id)?;
                self.books.tickets[i].live().then_some(token)
            })
            .collect();
        if !pick.is_multiple_of(4) && !live.is_empty() {
            return live[pick as usize % live.len()].clone();
        }
        let pool = if client.sent == 0 || pick % 8 == 4 {
            &client.planned[..]
        } else {
            &client.planned[..client.sent]
        };
        pool[pick as usize % pool.len()].1.clone()
    }

    fn token(&self, c: usize, pick: u8, seed: TokenSeed) -> String {
        match seed {
            TokenSeed::Own => self.own_token(c, pick),
            TokenSeed::Wrong => format!("{:032x}", 0xbad0_0000u64 + u64::from(pick)),
            TokenSeed::Stale => {
                let ended: Vec<&MTicket> = self
                    .books
                    .tickets
                    .iter()
                    .filter(|t| !t.live() && t.id.starts_with(&format!("c{c}t")))
                    .collect();
                match ended.len() {
                    0 => self.own_token(c, pick),
                    n => ended[pick as usize % n].token.clone(),
                }
            }
        }
    }

    fn build(&mut self, c: usize, seed: &OpSeed) -> Op {
        match seed {
            OpSeed::Enqueue(e) => {
                let client = &mut self.clients[c];
                if client.sent == client.planned.len() {
                    return Op::Tick;
                }
                let (id, token) = client.planned[client.sent].clone();
                client.sent += 1;
                Op::Enqueue(Enqueue {
                    may_wait_in_backlog: false,
                    pool: None,
                    ci_run: None,
                    id,
                    token,
                    mode: if e.shared { Mode::Shared } else { Mode::Normal },
                    limit: if e.wrong_limit {
                        self.run_limit % 3 + 1
                    } else {
                        self.run_limit
                    },
                    context: format!("client {c}"),
                    order: e.order.map(|o| ORDERS[o as usize].to_string()),
                    supersede: e.supersede,
                    keep: e.keep,
                    ttl_ms: TTLS[e.ttl as usize],
                    waiter_ttl_ms: WAITER_TTLS[e.waiter as usize],
                    claim_ms: CLAIMS[e.claim as usize],
                    max_live: if e.small_queue { 3 } else { 1000 },
                    once: None,
                    cancel_running: e.cancel_running,
                    override_freeze: None,
                })
            }
            OpSeed::Refresh { pick } => Op::Refresh {
                token: self.own_token(c, *pick),
            },
            OpSeed::Renew { pick, ttl, token } => Op::Renew {
                token: self.token(c, *pick, *token),
                ttl_ms: ttl.map(|t| RENEW_TTLS[t as usize]),
            },
            OpSeed::Release {
                pick,
                outcome,
                token,
            } => Op::Release {
                token: self.token(c, *pick, *token),
                outcome: OUTCOMES[*outcome as usize],
                reason: None,
            },
            OpSeed::Cancel { pick } => {
                let all: Vec<&String> = self
                    .clients
                    .iter()
                    .flat_map(|cl| cl.planned.iter().map(|(id, _)| id))
                    .collect();
                Op::Cancel {
                    reason: None,
                    id: all[*pick as usize % all.len()].clone(),
                    by: String::new(),
                }
            }
            OpSeed::CancelQueued => Op::CancelQueued { by: String::new() },
            OpSeed::Tick => Op::Tick,
            OpSeed::Steal { pick } => {
                // Ids are unique among the tickets the core knows: a forgotten ticket's id may
                // be used again (tests/apply.rs checks that case on its own). So the victim is
                // one the core still knows once this apply's expiries have ended theirs: a
                // ticket that expires in it ends in document order (creation order), and keeps
                // its mark only if fewer than REMEMBERED end after it.
                let expiring = self.expiring(c);
                let n_expiring = expiring.len() as u64;
                let b = &self.books;
                let known: Vec<&MTicket> = b
                    .tickets
                    .iter()
                    .enumerate()
                    .filter(|(i, t)| match expiring.iter().position(|e| e == i) {
                        Some(rank) => n_expiring - rank as u64 - 1 < REMEMBERED,
                        None => t.live() || b.ends + n_expiring - t.end_no < REMEMBERED,
                    })
                    .map(|(_, t)| t)
                    .collect();
                if known.is_empty() {
                    return Op::Tick;
                }
                let id = known[*pick as usize % known.len()].id.clone();
                self.extra += 1;
                Op::Enqueue(Enqueue {
                    may_wait_in_backlog: false,
                    pool: None,
                    ci_run: None,
                    id,
                    token: format!("{:032x}", 0x5ea1_0000u64 + self.extra),
                    mode: Mode::Normal,
                    limit: self.run_limit,
                    context: format!("client {c} reusing an id"),
                    order: None,
                    supersede: true,
                    keep: false,
                    ttl_ms: 1_000,
                    waiter_ttl_ms: 2_000,
                    claim_ms: 100,
                    max_live: 1000,
                    once: None,
                    cancel_running: false,
                    override_freeze: None,
                })
            }
        }
    }

    fn client_op(
        &mut self,
        n: usize,
        c: usize,
        seed: &OpSeed,
        fault: Fault,
        read_first: bool,
    ) -> Result<(), TestCaseError> {
        let (request, retry) = match self.clients[c].pending.take() {
            Some(request) => (request, true),
            // A steal is never retried: by the retry its victim may be forgotten, and the core
            // then starts a second ticket under the id, which the books (one ticket per id)
            // cannot follow. tests/apply.rs checks that reuse on its own.
            None if matches!(seed, OpSeed::Steal { .. })
                && matches!(fault, Fault::LoseReply | Fault::LoseRequest) =>
            {
                return self.client_op(n, c, seed, Fault::Deliver, read_first);
            }
            None => {
                let op = self.build(c, seed);
                let attempt = self.attempt(c);
                (
                    Request {
                        attempt,
                        op,
                        finishes_seen: None,
                        may_arrive_late: false,
                    },
                    false,
                )
            }
        };
        self.trace.push(format!(
            "#{n} c{c} {}{} [{fault:?}] at store {} / mono {}",
            if retry { "RETRY " } else { "" },
            describe(&request),
            self.now_ms,
            self.mono(c)
        ));
        if read_first {
            self.read(c);
        }
        // The client learns nothing of a lost request or reply: it retries, saying how many
        // finishes the document had before this attempt (as the coordinator does).
        let mut retry = request.clone();
        retry.finishes_seen = retry.finishes_seen.or(Some(self.books.ends));
        match fault {
            Fault::LoseRequest => self.clients[c].pending = Some(retry),
            Fault::Deliver => {
                self.deliver(c, &request)?;
                self.read(c);
            }
            Fault::LoseReply => {
                self.deliver(c, &request)?;
                self.clients[c].pending = Some(retry);
            }
            Fault::Duplicate => {
                self.deliver(c, &request)?;
                self.deliver(c, &request)?;
                self.read(c);
            }
        }
        Ok(())
    }

    fn invalid(&mut self, n: usize, c: usize, kind: u8) -> Result<(), TestCaseError> {
        self.extra += 1;
        let base = Enqueue {
            may_wait_in_backlog: false,
            pool: None,
            ci_run: None,
            id: format!("inv{}", self.extra),
            token: format!("{:032x}", 0x1_0000_0000u64 + self.extra),
            mode: Mode::Normal,
            limit: self.run_limit,
            context: String::new(),
            order: None,
            supersede: false,
            keep: false,
            ttl_ms: 1_000,
            waiter_ttl_ms: 2_000,
            claim_ms: 100,
            max_live: 1000,
            once: None,
            cancel_running: false,
            override_freeze: None,
        };
        let own = self.own_token(c, kind);
        let op = match kind % 17 {
            0 => Op::Enqueue(Enqueue {
                pool: None,
                context: "x".repeat(1025),
                ..base
            }),
            1 => Op::Enqueue(Enqueue {
                pool: None,
                id: "bad id".into(),
                ..base
            }),
            2 => Op::Enqueue(Enqueue { ttl_ms: 10, ..base }),
            3 => Op::Enqueue(Enqueue {
                pool: None,
                waiter_ttl_ms: 999,
                ..base
            }),
            4 => Op::Enqueue(Enqueue {
                pool: None,
                claim_ms: 50,
                ..base
            }),
            5 => Op::Enqueue(Enqueue { limit: 0, ..base }),
            6 => Op::Enqueue(Enqueue {
                pool: None,
                order: Some(String::new()),
                ..base
            }),
            7 => Op::Enqueue(Enqueue {
                pool: None,
                order: Some("a\nb".into()),
                ..base
            }),
            8 => Op::Enqueue(Enqueue {
                pool: None,
                max_live: 0,
                ..base
            }),
            9 => Op::Renew {
                token: String::new(),
                ttl_ms: None,
            },
            10 => Op::Release {
                token: format!("{own}\u{7}"),
                outcome: Outcome::Succeeded,
                reason: None,
            },
            11 => Op::Cancel {
                reason: None,
                id: "no such".into(),
                by: String::new(),
            },
            12 => Op::Refresh {
                token: "f".repeat(129),
            },
            13 => Op::Enqueue(Enqueue {
                pool: None,
                id: "i".repeat(65),
                ..base
            }),
            14 => Op::Enqueue(Enqueue {
                pool: None,
                limit: 100_001,
                ..base
            }),
            15 => Op::Enqueue(Enqueue {
                pool: None,
                ttl_ms: WEEK_MS + 1,
                ..base
            }),
            _ => Op::Cancel {
                reason: None,
                id: String::new(),
                by: String::new(),
            },
        };
        let request = Request {
            finishes_seen: None,
            may_arrive_late: false,
            attempt: self.attempt(c),
            op,
        };
        self.trace
            .push(format!("#{n} c{c} INVALID {}", describe(&request)));
        let result = self.deliver(c, &request)?;
        prop_assert!(
            matches!(&result, Some(Refusal::Invalid(e)) if !e.0.is_empty()),
            "invalid input not refused as such: {result:?}{}",
            self.at()
        );
        Ok(())
    }

    /// How long until a live ticket may next expire: by its deadline (store's clock), or in the
    /// eyes of client `c` (observation).
    fn next_expiry(&self, c: usize) -> Option<u64> {
        let remaining = self.books.live().filter_map(|(i, t)| match self.kind {
            ClockKind::Store => Some(t.end_ms().saturating_sub(self.now_ms)),
            ClockKind::Observed => {
                let since = self.seen_since(c, i)?;
                Some((since + t.phase_ms()).saturating_sub(self.mono(c)))
            }
        });
        remaining.min()
    }

    /// Since when client `c`'s observer has been fed ticket `i` in its current phase, unchanged.
    fn seen_since(&self, c: usize, i: usize) -> Option<u64> {
        let generation = self.books.tickets[i].generation;
        let mut since = None;
        for (at, seen) in self.clients[c].feeds.iter().rev() {
            if seen.contains(&(i, generation)) {
                since = Some(*at);
            } else {
                break;
            }
        }
        since
    }

    /// The tickets an apply by client `c` now must expire (model's books, before the apply).
    fn expiring(&self, c: usize) -> BTreeSet<usize> {
        match self.kind {
            ClockKind::Store => {
                let reboot = self.written_epoch.as_deref() != Some(self.epoch.as_str());
                self.books
                    .live()
                    .filter(|(_, t)| reboot || self.now_ms >= t.end_ms())
                    .map(|(i, _)| i)
                    .collect()
            }
            ClockKind::Observed => {
                let mono = self.mono(c);
                self.books
                    .live()
                    .filter(|(i, t)| {
                        self.seen_since(c, *i)
                            .is_some_and(|since| mono - since >= t.phase_ms())
                    })
                    .map(|(i, _)| i)
                    .collect()
            }
        }
    }

    /// Predicts the operation of `request` on books already past expiry, and applies it to them.
    fn predict(&self, b: &mut Books, request: &Request) -> Expect {
        let attempt = request.attempt.as_str();
        let now = self.now_ms;
        let mut x = Expect {
            result: Ok(Want::Nothing),
            ended: Vec::new(),
            created: None,
            looking: None,
        };
        match &request.op {
            Op::Enqueue(e) => {
                let valid = valid_id(&e.id)
                    && valid_token(&e.token)
                    && e.context.len() <= 1024
                    && e.order.as_deref().is_none_or(valid_order)
                    && (1..=100_000).contains(&e.limit)
                    && valid_ttl(e.ttl_ms)
                    && valid_ttl(e.waiter_ttl_ms)
                    && (100..=WEEK_MS).contains(&e.claim_ms)
                    && (1..=10_000).contains(&e.max_live);
                if !valid {
                    return invalid();
                }
                if let Some(i) = b.by_id(&e.id).filter(|&i| b.known(i)) {
                    if b.tickets[i].token != e.token {
                        return refuse(Refusal::DuplicateId { id: e.id.clone() });
                    }
                    x.result = Ok(Want::Ticket(i));
                    x.looking = b.tickets[i].live().then_some(i);
                    return x;
                }
                if b.uncovered(request) {
                    return refuse(Refusal::Uncertain);
                }
                if b.by_id(&e.id).is_some() {
                    // Only a retry can name a forgotten ticket here (steals pick known ones),
                    // and its marks cover every ticket that ended since its first attempt.
                    return refuse(Refusal::Invalid(InvalidInput(format!(
                        "model: enqueue of the forgotten ticket {} by a covered retry",
                        e.id
                    ))));
                }
                if b.live().any(|(_, t)| t.token == e.token) {
                    return refuse(Refusal::DuplicateId { id: e.id.clone() });
                }
                let live = b.live().count();
                if live > 0 && b.key_limit != e.limit {
                    return refuse(Refusal::LimitMismatch {
                        asked: e.limit,
                        current: b.key_limit,
                    });
                }
                if live >= e.max_live as usize {
                    return refuse(Refusal::QueueFull { max: e.max_live });
                }
                if let Some(asked) = &e.order {
                    let number = MOrder::of(asked).is_number();
                    let other = b.live().find_map(|(_, t)| {
                        let o = t.order.as_deref()?;
                        (MOrder::of(o).is_number() != number).then_some(o)
                    });
                    if let Some(other) = other {
                        return refuse(Refusal::OrderKindMismatch {
                            asked: asked.clone(),
                            live: other.to_string(),
                        });
                    }
                }
                if live == 0 {
                    b.key_limit = e.limit;
                }
                let i = b.tickets.len();
                b.tickets.push(MTicket {
                    id: e.id.clone(),
                    token: e.token.clone(),
                    mode: e.mode,
                    order: e.order.clone(),
                    seq: b.next_seq,
                    keep: e.keep,
                    ttl: e.ttl_ms,
                    waiter_ttl: e.waiter_ttl_ms,
                    claim: e.claim_ms,
                    held: false,
                    claimed: false,
                    fence: 0,
                    phase_start: now,
                    floor: 0,
                    generation: 0,
                    seen: None,
                    end: None,
                    end_no: 0,
                    asked: false,
                });
                b.next_seq += 1;
                if e.cancel_running {
                    for t in b
                        .tickets
                        .iter_mut()
                        .filter(|t| t.live() && t.held && !t.keep)
                    {
                        t.asked = true;
                    }
                }
                if e.supersede {
                    let key = b.tickets[i].queue_key();
                    for j in 0..i {
                        let t = &b.tickets[j];
                        if t.live() && !t.held && !t.keep && t.queue_key() < key {
                            b.end(j, Outcome::Superseded, false, None);
                            x.ended.push(j);
                        }
                    }
                }
                x.result = Ok(Want::Ticket(i));
                x.looking = Some(i);
                x.created = Some(i);
            }
            Op::Refresh { token } | Op::Renew { token, .. } | Op::Release { token, .. } => {
                if !valid_token(token) {
                    return invalid();
                }
                let Some(i) = b.by_token(token).filter(|&i| b.known(i)) else {
                    return refuse(b.not_found(request, Refusal::UnknownToken));
                };
                if !b.tickets[i].live() {
                    let retry = matches!(request.op, Op::Release { .. })
                        && b.tickets[i].end.as_ref().and_then(|e| e.attempt.as_deref())
                            == Some(attempt);
                    if !retry {
                        return refuse(b.tickets[i].ended());
                    }
                    x.result = Ok(Want::Ticket(i));
                    return x;
                }
                let held = b.tickets[i].held;
                match &request.op {
                    Op::Refresh { .. } => {
                        b.tickets[i].beat(now, |t| t.claimed |= held);
                        x.looking = Some(i);
                    }
                    Op::Renew { ttl_ms, .. } => {
                        if !held {
                            return refuse(Refusal::NotHeld {
                                position: b.position(i),
                            });
                        }
                        if ttl_ms.is_some_and(|ttl| !valid_ttl(ttl)) {
                            return invalid();
                        }
                        b.tickets[i].beat(now, |t| {
                            t.ttl = ttl_ms.unwrap_or(t.ttl);
                            t.claimed = true;
                        });
                        x.looking = Some(i);
                    }
                    Op::Release { outcome, .. } => {
                        let fits = if held {
                            matches!(
                                outcome,
                                Outcome::Succeeded | Outcome::Failed | Outcome::Cancelled
                            ) || (*outcome == Outcome::Superseded && b.tickets[i].asked)
                        } else {
                            matches!(outcome, Outcome::Cancelled | Outcome::TimedOut)
                        };
                        if !fits {
                            return refuse(Refusal::BadOutcome {
                                state: if held {
                                    TicketState::Held
                                } else {
                                    TicketState::Queued
                                },
                                outcome: *outcome,
                            });
                        }
                        b.end(i, *outcome, false, Some(attempt));
                        x.ended.push(i);
                    }
                    _ => unreachable!("matched above"),
                }
                x.result = Ok(Want::Ticket(i));
            }
            Op::Cancel { id, .. } => {
                if !valid_id(id) {
                    return invalid();
                }
                let Some(i) = b.by_id(id).filter(|&i| b.known(i)) else {
                    return refuse(b.not_found(request, Refusal::UnknownId { id: id.clone() }));
                };
                let t = &b.tickets[i];
                if t.live() {
                    let forced = t.held;
                    b.end(i, Outcome::Cancelled, forced, Some(attempt));
                    x.ended.push(i);
                } else if t.end.as_ref().and_then(|e| e.attempt.as_deref()) != Some(attempt) {
                    return refuse(t.ended());
                }
                x.result = Ok(Want::Cancelled(vec![i]));
            }
            Op::CancelQueued { .. } => {
                if b.uncovered(request) {
                    return refuse(Refusal::Uncertain);
                }
                // An attempt that already ended tickets has had its effect: its retry ends
                // nothing more and answers as the first time (with the tickets still known).
                let before: Vec<usize> = b
                    .tickets
                    .iter()
                    .enumerate()
                    .filter(|&(i, t)| {
                        t.end.as_ref().and_then(|e| e.attempt.as_deref()) == Some(attempt)
                            && b.known(i)
                    })
                    .map(|(i, _)| i)
                    .collect();
                if !before.is_empty() {
                    x.result = Ok(Want::Cancelled(before));
                    return x;
                }
                let queued: Vec<usize> =
                    b.live().filter(|(_, t)| !t.held).map(|(i, _)| i).collect();
                for &i in &queued {
                    b.end(i, Outcome::Cancelled, false, Some(attempt));
                }
                x.ended.clone_from(&queued);
                x.result = Ok(Want::Cancelled(queued));
            }
            Op::Tick => {}
            // Jobs, run-once and notifications are not among the operations this model
            // generates (`tests/jobs.rs`, `tests/once.rs` and `tests/notify.rs` drive them); an
            // operation it cannot predict must never be delivered to it.
            Op::Submit(_)
            | Op::Claim { .. }
            | Op::RunSucceeded { .. }
            | Op::Complete { .. }
            | Op::CancelInBacklog { .. }
            | Op::RetryOnce
            | Op::Notified(_) => {
                panic!(
                    "the reference model does not generate jobs, run-once or notifications: \
                     {request:?}"
                )
            }
        }
        x
    }

    /// Check 9, whom the write wakes ([`wake::to_wake`]): every ticket it granted or ended,
    /// and every ticket it left out is the same before and after (a waiter not woken has
    /// nothing to act on); or everyone.
    fn check_wakes(&self, request: &Request, applied: &Applied) -> Result<(), TestCaseError> {
        let own = match &request.op {
            Op::Enqueue(enqueue) => Some(enqueue.id.as_str()),
            _ => None,
        };
        let wakes = wake::to_wake(self.doc.as_ref(), &applied.doc, own);
        if wakes == Wakes::Every {
            return Ok(());
        }
        if let Wakes::Only { ended, .. } = &wakes {
            for id in ended {
                prop_assert!(
                    applied.doc.by_id(id).is_none(),
                    "{id} told it ended, and is live{}",
                    self.at()
                );
            }
        }
        let granted = applied.granted.iter().map(|(id, _)| id);
        let ended = applied.finished.iter().map(|f| &f.id);
        for id in granted.chain(ended) {
            if Some(id.as_str()) != own {
                prop_assert!(wakes.wakes(id), "{id} not woken{}", self.at());
            }
        }
        let before = self.doc.as_ref().map_or(&[][..], |d| &d.tickets[..]);
        for ticket in before.iter().chain(&applied.doc.tickets) {
            if wakes.wakes(&ticket.id) || Some(ticket.id.as_str()) == own {
                continue;
            }
            let after = applied.doc.by_id(&ticket.id);
            let was = self.doc.as_ref().and_then(|d| d.by_id(&ticket.id));
            prop_assert!(
                after.is_some() && after == was,
                "{} changed and not woken{}",
                ticket.id,
                self.at()
            );
        }
        Ok(())
    }

    /// Applies `request` for client `c` to the latest document, checking everything.
    fn deliver(&mut self, c: usize, request: &Request) -> Result<Option<Refusal>, TestCaseError> {
        let wall_ms = self.wall(c);
        let mono_ms = self.mono(c);
        let expiring = self.expiring(c);
        let mut b = self.books.clone();
        for &i in &expiring {
            let outcome = if b.tickets[i].held {
                Outcome::Expired
            } else {
                Outcome::Abandoned
            };
            b.end(i, outcome, false, None);
        }
        let expect = self.predict(&mut b, request);
        let result = {
            let clock = match self.kind {
                ClockKind::Store => Clock::Store {
                    uncertain_ms: 0,
                    now_ms: self.now_ms,
                    epoch: &self.epoch,
                    wall_ms,
                },
                ClockKind::Observed => Clock::Observed {
                    observer: &self.clients[c].observer,
                    mono_ms,
                    wall_ms,
                },
            };
            apply(self.doc.as_ref(), request, &clock)
        };
        let landed_before = self.landed.contains_key(&request.attempt);
        self.trace.push(match &result {
            Err(refusal) => format!("    -> refused: {refusal:?}"),
            Ok(applied) => format!(
                "    -> {:?}; finished {:?}; granted {:?}",
                applied.reply,
                applied
                    .finished
                    .iter()
                    .map(|f| format!("{} {}", f.id, f.outcome))
                    .collect::<Vec<_>>(),
                applied.granted
            ),
        });

        self.check_token_rules(request, &b, &expiring, &result)?;

        let applied = match (result, &expect.result) {
            (Err(refusal), Err(want)) => {
                prop_assert!(
                    same_refusal(&refusal, want),
                    "refused with {refusal:?}, the model expected {want:?}{}",
                    self.at()
                );
                if landed_before {
                    prop_assert!(
                        (matches!(request.op, Op::Renew { .. } | Op::Refresh { .. })
                            && matches!(refusal, Refusal::Ended { .. }))
                            || (refusal == Refusal::Uncertain && b.uncovered(request)),
                        "the retry of an attempt that landed was refused: {refusal:?}{}",
                        self.at()
                    );
                }
                return Ok(Some(refusal));
            }
            (Err(refusal), Ok(want)) => {
                return Err(TestCaseError::fail(format!(
                    "refused with {refusal:?}, the model expected {want:?}{}",
                    self.at()
                )));
            }
            (Ok(applied), Err(want)) => {
                return Err(TestCaseError::fail(format!(
                    "accepted ({:?}), the model expected the refusal {want:?}{}",
                    applied.reply,
                    self.at()
                )));
            }
            (Ok(applied), Ok(_)) => applied,
        };
        let doc = &applied.doc;

        // 7. Round trip.
        let bytes = encode(doc);
        prop_assert!(bytes.is_ok(), "encode failed: {bytes:?}{}", self.at());
        let back = bytes.ok().map(|bytes| decode(&bytes));
        prop_assert_eq!(back, Some(Ok(doc.clone())), "round trip{}", self.at());

        // 1, 2: the core's own checks.
        prop_assert_eq!(invariants::check(doc), Ok(()), "check{}", self.at());
        prop_assert_eq!(
            invariants::check_settled(doc),
            Ok(()),
            "check_settled{}",
            self.at()
        );
        self.check_wakes(request, &applied)?;
        let pre = self.doc.clone().unwrap_or_default();
        prop_assert_eq!(applied.changed, *doc != pre, "changed flag{}", self.at());
        prop_assert!(doc.fence >= pre.fence, "the fence went down{}", self.at());

        // 5, 8: exactly the tickets the model expects ended, each once, with its outcome.
        let mut finished_now = BTreeSet::new();
        for f in &applied.finished {
            let i = self.books.by_id(&f.id);
            prop_assert!(
                i.is_some_and(|i| self.books.tickets[i].live()),
                "finished {} which was not live (ghost or second finish){}",
                f.id,
                self.at()
            );
            let i = i.unwrap_or_default();
            prop_assert!(
                finished_now.insert(i),
                "{} finished twice{}",
                f.id,
                self.at()
            );
            *self.records.entry(f.id.clone()).or_default() += 1;
            let t = &b.tickets[i];
            prop_assert!(
                t.end
                    .as_ref()
                    .is_some_and(|e| e.outcome == f.outcome && e.forced == f.forced),
                "{} finished as {} (forced {}), the model expected {:?}{}",
                f.id,
                f.outcome,
                f.forced,
                t.end,
                self.at()
            );
            let fence = self.books.tickets[i].fence;
            prop_assert_eq!(
                f.fence,
                (fence > 0).then_some(fence),
                "fence recorded for {}{}",
                f.id,
                self.at()
            );
        }
        let mut expected_ends: BTreeSet<usize> = expiring.clone();
        expected_ends.extend(expect.ended.iter().copied());
        prop_assert_eq!(
            &finished_now,
            &expected_ends,
            "tickets finished (by index) vs expected (expiring {:?}){}",
            expiring,
            self.at()
        );

        // 2, 3: grants in queue order, no barging, fences strictly increasing.
        let mut fence = pre.fence;
        for (id, granted) in &applied.granted {
            let i = b.by_id(id);
            prop_assert!(
                i.is_some_and(|i| b.tickets[i].live() && !b.tickets[i].held),
                "granted {id}, which is not a live queued ticket{}",
                self.at()
            );
            let i = i.unwrap_or_default();
            let key = b.tickets[i].queue_key();
            let barged: Vec<&str> = b
                .live()
                .filter(|(_, t)| !t.held && t.queue_key() < key)
                .map(|(_, t)| t.id.as_str())
                .collect();
            prop_assert!(
                barged.is_empty(),
                "{id} was granted ahead of {barged:?} (barging){}",
                self.at()
            );
            prop_assert!(
                b.fits(i),
                "{id} was granted beside incompatible holders {:?}{}",
                b.holders(),
                self.at()
            );
            prop_assert!(
                *granted > self.last_fence,
                "fence {granted} of {id} is not above the last grant's {}{}",
                self.last_fence,
                self.at()
            );
            prop_assert_eq!(
                *granted,
                (fence + 1).max(wall_ms * 1000),
                "fence of {} is not max(previous + 1, wall_ms × 1000){}",
                id,
                self.at()
            );
            fence = *granted;
            self.last_fence = *granted;
            let t = &mut b.tickets[i];
            t.held = true;
            t.fence = *granted;
            t.claimed = expect.looking == Some(i);
            t.new_phase(self.now_ms);
        }
        prop_assert_eq!(doc.fence, fence, "document fence{}", self.at());

        // 1, 2: the model's own count, and nothing left waiting that could hold.
        let (normal, shared) = b.holders();
        prop_assert!(
            normal <= b.key_limit && (normal == 0 || shared == 0),
            "{normal} normal and {shared} shared holders with limit {}{}",
            b.key_limit,
            self.at()
        );
        let head = b
            .live()
            .filter(|(_, t)| !t.held)
            .min_by_key(|(_, t)| t.queue_key())
            .map(|(i, _)| i);
        if let Some(head) = head {
            prop_assert!(
                !b.fits(head),
                "{} waits although it could hold{}",
                b.tickets[head].id,
                self.at()
            );
        }

        // The document says what the books say.
        self.sync(&mut b, doc)?;
        if self.kind == ClockKind::Store {
            prop_assert_eq!(
                doc.epoch.as_deref(),
                Some(self.epoch.as_str()),
                "epoch{}",
                self.at()
            );
        }

        self.check_reply(&b, &expect.result, &applied.reply)?;

        self.check_retry(&b, request, &expiring, &pre, &applied)?;

        self.books = b;
        self.written_epoch = Some(self.epoch.clone());
        self.doc = Some(applied.doc);
        Ok(None)
    }

    /// Invariant 4 on its own: a token never issued is unknown; a refresh, renew or release of
    /// a ticket no longer live (or expiring in this very apply) is refused with its real end,
    /// unless it is the retry of the release that ended it.
    fn check_token_rules(
        &self,
        request: &Request,
        b: &Books,
        expiring: &BTreeSet<usize>,
        result: &Result<Applied, Refusal>,
    ) -> Result<(), TestCaseError> {
        if let Some(token) = op_token(&request.op).filter(|t| valid_token(t)) {
            let uncertain = b.uncovered(request);
            match self.books.by_token(token) {
                None => prop_assert!(
                    if uncertain {
                        matches!(result, Err(Refusal::Uncertain))
                    } else {
                        matches!(result, Err(Refusal::UnknownToken))
                    },
                    "a token never issued was not refused as unknown: {result:?}{}",
                    self.at()
                ),
                // Ended and forgotten (the document remembers only the last few): unknown.
                Some(i) if !b.known(i) => prop_assert!(
                    if uncertain {
                        matches!(result, Err(Refusal::Uncertain))
                    } else {
                        matches!(result, Err(Refusal::UnknownToken))
                    },
                    "a token of a forgotten ticket was not refused as unknown: {result:?}{}",
                    self.at()
                ),
                Some(i) if !self.books.tickets[i].live() || expiring.contains(&i) => {
                    let t = &b.tickets[i];
                    let retry = matches!(request.op, Op::Release { .. })
                        && t.end.as_ref().and_then(|e| e.attempt.as_deref())
                            == Some(request.attempt.as_str());
                    match result {
                        Err(Refusal::Ended {
                            id,
                            outcome,
                            forced,
                        }) => {
                            let end = t.end.as_ref();
                            prop_assert!(
                                !retry
                                    && id == &t.id
                                    && Some(*outcome) == end.map(|e| e.outcome)
                                    && Some(*forced) == end.map(|e| e.forced),
                                "wrong refusal for a ticket no longer live ({:?}): {result:?}{}",
                                t.end,
                                self.at()
                            );
                        }
                        Ok(applied) => prop_assert!(
                            retry
                                && matches!(
                                    &applied.reply,
                                    Reply::Ticket(TicketView::Finished { id, .. }) if id == &t.id
                                ),
                            "an op on a ticket no longer live was accepted: {:?}{}",
                            applied.reply,
                            self.at()
                        ),
                        Err(other) => prop_assert!(
                            false,
                            "an op on a ticket no longer live was refused with {other:?}{}",
                            self.at()
                        ),
                    }
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// The reply is the one the model expects, read from its books after the grants.
    fn check_reply(
        &self,
        b: &Books,
        want: &Result<Want, Refusal>,
        reply: &Reply,
    ) -> Result<(), TestCaseError> {
        match (want, reply) {
            (Ok(Want::Nothing), Reply::Nothing) => {}
            (Ok(Want::Cancelled(want)), Reply::Cancelled(got)) => {
                // Each with whether it was force-released (it held) or withdrawn.
                let want: BTreeSet<(&str, bool)> = want
                    .iter()
                    .map(|&i| {
                        let forced = b.tickets[i].end.as_ref().is_some_and(|e| e.forced);
                        (b.tickets[i].id.as_str(), forced)
                    })
                    .collect();
                let got_set: BTreeSet<(&str, bool)> =
                    got.iter().map(|t| (t.id.as_str(), t.forced)).collect();
                prop_assert!(
                    want == got_set && got.len() == got_set.len(),
                    "cancelled {got:?}, expected {want:?}{}",
                    self.at()
                );
            }
            (Ok(Want::Ticket(i)), Reply::Ticket(view)) => self.check_view(b, *i, view)?,
            (want, got) => prop_assert!(
                false,
                "reply {got:?}, the model expected {want:?}{}",
                self.at()
            ),
        }
        Ok(())
    }

    /// Invariants 4 and 6 for retries: an attempt that landed before ends nothing more, creates
    /// nothing, and is answered as the first time. Records first landings.
    fn check_retry(
        &mut self,
        books: &Books,
        request: &Request,
        expiring: &BTreeSet<usize>,
        pre: &Doc,
        applied: &Applied,
    ) -> Result<(), TestCaseError> {
        let doc = &applied.doc;
        // 5: a retry of an attempt that landed ends nothing, creates nothing, answers the same.
        if let Some(first) = self.landed.get(&request.attempt) {
            let ended: Vec<&str> = applied
                .finished
                .iter()
                .filter(|f| {
                    self.books
                        .by_id(&f.id)
                        .is_none_or(|i| !expiring.contains(&i))
                })
                .map(|f| f.id.as_str())
                .collect();
            prop_assert!(
                ended.is_empty(),
                "the retry of {} ended {ended:?} again{}",
                request.attempt,
                self.at()
            );
            let pre_ids: BTreeSet<&str> = pre.tickets.iter().map(|t| t.id.as_str()).collect();
            prop_assert!(
                doc.tickets.iter().all(|t| pre_ids.contains(t.id.as_str())),
                "the retry of {} created a ticket{}",
                request.attempt,
                self.at()
            );
            let same = match (&first.reply, &applied.reply) {
                (Reply::Nothing, Reply::Nothing) => true,
                (Reply::Ticket(a), Reply::Ticket(b)) => match (&request.op, a, b) {
                    (
                        Op::Release { .. },
                        TicketView::Finished { id, outcome, .. },
                        TicketView::Finished {
                            id: id2,
                            outcome: outcome2,
                            ..
                        },
                    ) => id == id2 && outcome == outcome2,
                    (Op::Release { .. }, _, _) => false,
                    _ => view_id(a) == view_id(b),
                },
                (Reply::Cancelled(a), Reply::Cancelled(b)) => {
                    // The tickets of the first answer that the document still knows: all of
                    // them, unless that cancel itself ended more than are remembered.
                    let known = |ended: &&CancelledTicket| {
                        books
                            .tickets
                            .iter()
                            .rposition(|t| t.id == ended.id)
                            .is_some_and(|i| books.known(i))
                    };
                    let (a, b): (BTreeSet<_>, BTreeSet<_>) =
                        (a.iter().filter(known).collect(), b.iter().collect());
                    a == b
                }
                _ => false,
            };
            prop_assert!(
                same,
                "the retry of {} answered {:?}, the first time {:?}{}",
                request.attempt,
                applied.reply,
                first.reply,
                self.at()
            );
        } else if !(matches!(request.op, Op::CancelQueued { .. })
            && applied.reply == Reply::Cancelled(vec![]))
        {
            // (A cancel-queued that ended nothing left no trace and had no effect: its retry
            // is a first delivery, late, like that of a lost request.)
            self.landed.insert(
                request.attempt.clone(),
                Landing {
                    reply: applied.reply.clone(),
                },
            );
        }
        Ok(())
    }

    /// The document as it stands (after every step, whether or not it applied anything):
    /// invariants 1 and 2 counted from the document itself.
    fn check_doc(&self) -> Result<(), TestCaseError> {
        let Some(doc) = &self.doc else {
            return Ok(());
        };
        prop_assert_eq!(invariants::check(doc), Ok(()), "check{}", self.at());
        prop_assert_eq!(
            invariants::check_settled(doc),
            Ok(()),
            "check_settled{}",
            self.at()
        );
        let held = |mode| {
            doc.tickets
                .iter()
                .filter(|t| t.state == TicketState::Held && t.mode == mode)
                .count()
        };
        let (normal, shared) = (held(Mode::Normal), held(Mode::Shared));
        prop_assert!(
            normal <= doc.limit as usize && (normal == 0 || shared == 0),
            "the document has {normal} normal and {shared} shared holders, limit {}{}",
            doc.limit,
            self.at()
        );
        if !doc.tickets.is_empty() {
            prop_assert_eq!(
                doc.limit,
                self.books.key_limit,
                "the key's limit{}",
                self.at()
            );
        }
        Ok(())
    }

    /// The document's live tickets are exactly the model's, in the same standing.
    fn sync(&self, b: &mut Books, doc: &Doc) -> Result<(), TestCaseError> {
        let live: BTreeSet<&str> = b.live().map(|(_, t)| t.id.as_str()).collect();
        let in_doc: BTreeSet<&str> = doc.tickets.iter().map(|t| t.id.as_str()).collect();
        prop_assert_eq!(
            &in_doc,
            &live,
            "live tickets in the document vs the model (lost or ghost tickets){}",
            self.at()
        );
        if !live.is_empty() {
            prop_assert_eq!(doc.limit, b.key_limit, "the key's limit{}", self.at());
        }
        // The document counts every finish and remembers exactly the last few, oldest first.
        prop_assert_eq!(doc.finishes, b.ends, "finishes counted{}", self.at());
        let mut ended: Vec<&MTicket> = b.tickets.iter().filter(|t| !t.live()).collect();
        ended.sort_by_key(|t| t.end_no);
        let newest = &ended[ended.len().saturating_sub(REMEMBERED as usize)..];
        let want: Vec<&str> = newest.iter().map(|t| t.id.as_str()).collect();
        let got: Vec<&str> = doc.finished.iter().map(|m| m.id.as_str()).collect();
        prop_assert_eq!(got, want, "the remembered finishes{}", self.at());
        for dt in &doc.tickets {
            let i = b.by_id(&dt.id).unwrap_or_default();
            let t = &mut b.tickets[i];
            let deadline = match self.kind {
                ClockKind::Store => Some(t.end_ms()),
                ClockKind::Observed => None,
            };
            prop_assert!(
                (dt.state == TicketState::Held) == t.held
                    && dt.claimed == t.claimed
                    && dt.fence == t.fence
                    && dt.mode == t.mode
                    && dt.order == t.order
                    && dt.keep == t.keep
                    && dt.phase_ms() == t.phase_ms()
                    && dt.deadline_ms == deadline,
                "ticket {} in the document: {dt:?}; in the model: {t:?} (deadline {deadline:?}){}",
                dt.id,
                self.at()
            );
            if let Some((generation, heartbeat)) = t.seen {
                prop_assert!(
                    generation == t.generation || heartbeat != dt.heartbeat,
                    "{} began a new phase but its heartbeat stayed {heartbeat}{}",
                    dt.id,
                    self.at()
                );
            }
            t.seen = Some((t.generation, dt.heartbeat));
        }
        Ok(())
    }

    fn check_view(&self, b: &Books, i: usize, view: &TicketView) -> Result<(), TestCaseError> {
        let t = &b.tickets[i];
        match (view, &t.end) {
            (TicketView::Live(s), None) => {
                let position = if t.held { 0 } else { b.position(i) };
                let deadline = match self.kind {
                    ClockKind::Store => Some(t.end_ms()),
                    ClockKind::Observed => None,
                };
                prop_assert!(
                    s.id == t.id
                        && (s.state == TicketState::Held) == t.held
                        && s.position == position
                        && s.fence == t.fence
                        && s.claimed == t.claimed
                        && s.deadline_ms == deadline
                        && s.phase_ms == t.phase_ms()
                        && s.stop_asked.is_some() == t.asked,
                    "status {s:?}, model {t:?} (position {position}){}",
                    self.at()
                );
            }
            (
                TicketView::Finished {
                    id,
                    outcome,
                    forced,
                },
                Some(end),
            ) => prop_assert!(
                id == &t.id && *outcome == end.outcome && *forced == end.forced,
                "finished view {view:?}, model {end:?}{}",
                self.at()
            ),
            _ => prop_assert!(false, "view {view:?}, model {t:?}{}", self.at()),
        }
        Ok(())
    }

    /// Delivers every outstanding retry, then lets time run until every ticket has ended.
    fn drain(&mut self) -> Result<(), TestCaseError> {
        for c in 0..self.clients.len() {
            if let Some(request) = self.clients[c].pending.take() {
                self.trace
                    .push(format!("drain: c{c} RETRY {}", describe(&request)));
                self.read(c);
                self.deliver(c, &request)?;
                self.read(c);
            }
        }
        for _ in 0..64 {
            if self.doc.as_ref().is_none_or(|d| d.tickets.is_empty()) {
                break;
            }
            self.read(0);
            self.real_ms += 400_000;
            self.now_ms += 400_000;
            self.read(0);
            let request = Request {
                finishes_seen: None,
                may_arrive_late: false,
                attempt: self.attempt(0),
                op: Op::Tick,
            };
            self.trace.push(format!(
                "drain: c0 {} at store {} / mono {}",
                describe(&request),
                self.now_ms,
                self.mono(0)
            ));
            self.deliver(0, &request)?;
        }
        prop_assert!(
            self.doc.as_ref().is_none_or(|d| d.tickets.is_empty()),
            "the key did not drain{}",
            self.at()
        );
        for t in &self.books.tickets {
            prop_assert!(
                t.end.is_some() && self.records.get(&t.id) == Some(&1),
                "{} ended {:?} times{}",
                t.id,
                self.records.get(&t.id),
                self.at()
            );
        }
        prop_assert_eq!(
            self.records.len(),
            self.books.tickets.len(),
            "records of tickets never created{}",
            self.at()
        );
        Ok(())
    }
}

fn view_id(view: &TicketView) -> &str {
    match view {
        TicketView::Live(s) => &s.id,
        TicketView::Finished { id, .. } => id,
    }
}

fn run(kind: ClockKind, setup: &Setup, steps: &[Step]) -> Result<(), TestCaseError> {
    let mut world = World::new(kind, setup);
    for (n, step) in steps.iter().enumerate() {
        world.step(n, step)?;
        world.check_doc()?;
    }
    world.drain()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn runs_on_the_store_clock_keep_the_invariants(
        setup in setup(),
        steps in prop::collection::vec(step(), 1..200),
    ) {
        run(ClockKind::Store, &setup, &steps)?;
    }

    #[test]
    fn runs_judged_by_observation_keep_the_invariants(
        setup in setup(),
        steps in prop::collection::vec(step(), 1..200),
    ) {
        run(ClockKind::Observed, &setup, &steps)?;
    }
}

/// Found by the properties above: the retry of a cancel-queued whose reply was lost cancelled
/// the tickets queued since (a second effect of one operation) and answered otherwise than the
/// first time.
#[test]
fn a_retried_cancel_queued_is_recognised() {
    let clock = Clock::Store {
        uncertain_ms: 0,
        now_ms: 1_000,
        epoch: "boot-1",
        wall_ms: WALL_BASE_MS,
    };
    let enqueue = |n: u64| Request {
        finishes_seen: None,
        may_arrive_late: false,
        attempt: format!("enqueue-{n}"),
        op: Op::Enqueue(Enqueue {
            may_wait_in_backlog: false,
            pool: None,
            ci_run: None,
            id: format!("t{n}"),
            token: format!("{n:032x}"),
            mode: Mode::Normal,
            limit: 1,
            context: String::new(),
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
        }),
    };
    let run = |doc: Option<&Doc>, request: &Request| apply(doc, request, &clock).expect("accepted");
    let doc = run(None, &enqueue(1)).doc;
    let doc = run(Some(&doc), &enqueue(2)).doc;
    let cancel = Request {
        finishes_seen: None,
        may_arrive_late: false,
        attempt: "operator-1".into(),
        op: Op::CancelQueued { by: String::new() },
    };
    // Applied, but the operator's reply is lost.
    let first = run(Some(&doc), &cancel);
    assert_eq!(
        first.reply,
        Reply::Cancelled(vec![CancelledTicket::new("t2", false)])
    );
    // Meanwhile someone queues.
    let doc = run(Some(&first.doc), &enqueue(3)).doc;
    // The operator's coordinator retries the same attempt.
    let retry = run(Some(&doc), &cancel);
    assert_eq!(retry.reply, first.reply, "answered as the first time");
    assert!(
        retry.finished.is_empty(),
        "ended {:?} again",
        retry.finished
    );
    assert!(
        retry.doc.by_id("t3").is_some(),
        "t3 was queued after the cancel"
    );
}

/// A steal (an id used again) right after a reboot, whose first apply ends more tickets than
/// the marks remember (ten here, eight marks): the victim, live when the steal was picked, has
/// lost its mark by the time the steal is judged, and the core rightly takes its id as new. The
/// model's picker must count the tickets that end before the victim in that same apply (found
/// by the property run above).
#[test]
fn a_steal_after_a_mass_expiry_is_picked_among_tickets_still_known() {
    let setup = Setup {
        clients: 5,
        limit: 1,
        clocks: vec![(0, 0); MAX_CLIENTS],
    };
    let enqueue = |client: u8| Step::Op {
        client,
        op: OpSeed::Enqueue(EnqueueSeed {
            shared: false,
            order: None,
            supersede: false,
            keep: false,
            ttl: 0,
            waiter: 0,
            claim: 0,
            wrong_limit: false,
            small_queue: false,
            cancel_running: false,
        }),
        fault: Fault::Deliver,
        read_first: false,
    };
    let mut steps: Vec<Step> = [1, 0, 0, 0, 1, 0, 1, 1, 0, 1, 0]
        .into_iter()
        .map(enqueue)
        .collect();
    steps.push(Step::Reboot { now_ms: 0 });
    steps.push(Step::Op {
        client: 0,
        op: OpSeed::Steal { pick: 50 },
        fault: Fault::Deliver,
        read_first: false,
    });
    if let Err(failure) = run(ClockKind::Store, &setup, &steps) {
        panic!("{failure}");
    }
}
