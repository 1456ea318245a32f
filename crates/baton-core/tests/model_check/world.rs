//! The model: a store's keys, the clients, every step each can take, and the checks every
//! state must pass.

use std::fmt;
use std::rc::Rc;

use baton_core::lease::Basis;
use baton_core::limits::FINISHED_REMEMBERED;
use baton_core::{Doc, Mode, Observer, TicketState};

use crate::explore::Digest;

mod checks;
mod memo;
mod steps;

pub use memo::forget as forget_memo;
use memo::Written;

/// One step of time, ms.
pub const STEP: u64 = 500;
pub const TTL: u64 = 2_000;
/// Four steps: a grant seen one step after the last queued answer is still fresh, so the
/// clients' unclaimed start is explored.
pub const CLAIM: u64 = 2_000;
const WAITER_TTL: u64 = 3_000;
const EPOCH: &str = "model";
/// How long a release may be held up on its way: two steps. One is enough for a grant to land
/// after its waiter's last queued answer, the case the fresh-grant rule must bound by the
/// grant's deadline; longer ones only grow the world.
const HELD_UP: u64 = 2 * STEP;
/// The most keys and rounds a world has (they size the ticket ledger).
const MAX_KEYS: usize = 2;
const MAX_ROUNDS: usize = 3;
/// The most clients a world has.
const MAX_CLIENTS: usize = 3;
/// Tickets in the ledger: one per client, key and round.
const LEDGER: usize = MAX_CLIENTS * MAX_KEYS * MAX_ROUNDS;
const KEY_NAMES: [&str; MAX_KEYS] = ["A", "B"];
/// A ledger entry's bit for "enqueued"; the low bits count the ticket's finishes.
const ENQUEUED: u8 = 0x80;

/// How the participants tell time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockKind {
    /// A store clock read to the millisecond (SQLite, PostgreSQL, Redis).
    Exact,
    /// S3's `Date`: readings floored to whole seconds, `uncertain_ms` 1000, so deadlines are
    /// set from floored readings.
    Coarse,
    /// No store clock (etcd, DynamoDB): each client judges with its own `Observer`, fed every
    /// document it reads or writes, on its monotonic clock (the model's time).
    Observed,
}

impl ClockKind {
    fn uncertain_ms(self) -> u64 {
        match self {
            ClockKind::Coarse => 1_000,
            ClockKind::Exact | ClockKind::Observed => 0,
        }
    }
}

/// One client of a world: its mode and the keys it takes, one after another, holding the
/// earlier ones (its heartbeat renewing them) while it waits for the next.
pub struct ClientSetup {
    pub shared: bool,
    pub plan: Vec<usize>,
}

/// A world to explore.
pub struct Setup {
    pub name: &'static str,
    pub limit: u32,
    pub clients: Vec<ClientSetup>,
    pub keys: usize,
    pub rounds: u8,
    /// The last instant explored, ms.
    pub horizon: u64,
    pub clock: ClockKind,
    /// How far behind the store a client's reading of its clock may be (`behind_ms`), one of
    /// these at each reading (ascending, from 0).
    pub lags: &'static [u64],
    /// The reply to an enqueue, refresh, claim or renewal may be handled at any later step.
    pub late: bool,
    /// The reply to an enqueue that landed may be lost: the client retries it later.
    pub lost: bool,
    /// A release may be held up on its way, landing up to [`HELD_UP`] later.
    pub held_up: bool,
    /// How many late, lost or held-up writes one run may have (each multiplies the world).
    pub faults: u8,
    /// A client may enqueue on a key it sees held by an arrival beside the document, which
    /// the key's next writer takes in (`baton_core::arrival`); with `lost`, the append's
    /// reply may be lost, and the append itself may land late (after its client's retry).
    pub arrivals: bool,
}

/// An arrival beside a key's document: client `c`'s enqueue in `round`, with the count of
/// unsettled turns its client read before appending it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PendingArrival {
    c: u8,
    round: u8,
    unsettled_seen: u64,
}

/// What a client makes of a write's reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Heard {
    Queued,
    /// Held; `set_here`: the write that got this reply set the lease (rule 2).
    Held {
        set_here: bool,
    },
    /// Ended, or refused.
    Ended,
}

/// Where a client stands with one key.
#[derive(Clone, Debug)]
enum Phase {
    /// About to enqueue, once the keys before this one in its plan are held.
    Idle,
    /// Queued; `queued_at`: the basis of the last request whose answer showed it queued.
    Waiting { queued_at: u64 },
    /// Believes it holds until `until` (a lease, or a grant started unclaimed).
    Holding { until: u64 },
    /// A write landed at `basis`; its reply is handled at a later step. `written`: the
    /// document it wrote, which the client's observer is fed then (observation only).
    /// `holding_until`: a renewal's client still acts on the bound it had (and judges the
    /// lease lost when it passes) until the reply comes.
    Awaiting {
        heard: Heard,
        basis: Basis,
        written: Option<Rc<Doc>>,
        holding_until: Option<u64>,
    },
    /// Its enqueue landed but the reply was lost (an ambiguous failure): retried later with
    /// the finish count the first attempt read; `late_arrival`: it is the enqueue written
    /// after its arrival's append went unanswered (which may still land).
    Retrying {
        finishes_seen: u64,
        late_arrival: bool,
    },
    /// Its arrival was appended at `sent_at` (any grant to it is written after), carrying
    /// `finishes_seen`; no document has shown its ticket yet.
    Arriving { sent_at: u64, finishes_seen: u64 },
    /// Its release computed at `sent_at` is on its way; `stale`: another write has landed
    /// since, so its CAS will conflict and it is applied again (as it does when it read no
    /// arrival and one is pending when it lands).
    Releasing {
        flight: Rc<Written>,
        stale: bool,
        sent_at: u64,
    },
    /// Released this round.
    Released,
    /// Gave up, lost its turn or its lease, or finished all its rounds: acts no more.
    Done,
    /// Not in this client's plan.
    Unused,
}

impl Phase {
    /// Until when the client believes it holds the key, if it does.
    fn holding_until(&self) -> Option<u64> {
        match *self {
            Phase::Holding { until } => Some(until),
            Phase::Awaiting { holding_until, .. } => holding_until,
            _ => None,
        }
    }

    /// Whether the client still has something to do with the key this round.
    fn is_active(&self) -> bool {
        !matches!(self, Phase::Released | Phase::Done | Phase::Unused)
    }

    fn digest(&self, d: &mut Digest, setup: &Setup, current: Option<&Doc>) {
        match self {
            Phase::Idle => d.u8(0),
            Phase::Waiting { queued_at } => {
                d.u8(1);
                d.u64(*queued_at);
            }
            Phase::Holding { until } => {
                d.u8(2);
                d.u64(*until);
            }
            Phase::Awaiting {
                heard,
                basis,
                written,
                holding_until,
            } => {
                d.u8(3);
                d.opt(*holding_until);
                d.u8(match heard {
                    Heard::Queued => 0,
                    Heard::Held { set_here: false } => 1,
                    Heard::Held { set_here: true } => 2,
                    Heard::Ended => 3,
                });
                d.u64(basis.basis_local_ms);
                d.u64(basis.behind_ms);
                if let Some(doc) = written {
                    project(d, doc, setup, Some(current.unwrap_or(doc)));
                }
            }
            Phase::Retrying {
                finishes_seen,
                late_arrival,
            } => {
                d.u8(4);
                d.u64(*finishes_seen);
                d.u8(u8::from(*late_arrival));
            }
            Phase::Arriving {
                sent_at,
                finishes_seen,
            } => {
                d.u8(9);
                d.u64(*sent_at);
                d.u64(*finishes_seen);
            }
            Phase::Releasing {
                flight,
                stale,
                sent_at,
            } => {
                d.u8(5);
                project(d, &flight.doc, setup, Some(current.unwrap_or(&flight.doc)));
                for (id, fence) in &flight.applied.granted {
                    d.str(id);
                    d.u64(*fence);
                }
                for finished in &flight.applied.finished {
                    d.str(&finished.id);
                }
                d.u8(u8::from(*stale));
                d.u64(*sent_at);
            }
            Phase::Released => d.u8(6),
            Phase::Done => d.u8(7),
            Phase::Unused => d.u8(8),
        }
    }
}

#[derive(Clone, Debug)]
struct Client {
    round: u8,
    keys: [Phase; MAX_KEYS],
    /// Whether it has taken its step on the key at this instant: a client takes at most one
    /// step per key per instant (its heartbeat and polls are timed; without this, renewals at
    /// one instant would never end). Keys are independent: one heartbeat renews them all,
    /// concurrently (rule 4).
    acted: [bool; MAX_KEYS],
}

#[derive(Clone, Debug)]
pub struct World {
    now: u64,
    docs: Vec<Option<Rc<Doc>>>,
    clients: Vec<Client>,
    /// Per client and key, what it has observed (observation only; empty otherwise).
    observers: Vec<[Observer; MAX_KEYS]>,
    /// Per key, the highest fence handed out so far.
    max_fence: [u64; MAX_KEYS],
    /// Per (client, key, round) ticket: enqueued, and how many times it finished.
    ledger: [u8; LEDGER],
    faults_left: u8,
    /// Whether other participants have already ended [`FINISHED_REMEMBERED`] tickets.
    churned: bool,
    /// Per key, the arrivals pending beside its document, oldest first.
    arrivals: Vec<Vec<PendingArrival>>,
    /// Appends on their way (their clients saw them fail), each to land on its key later.
    flying: Vec<(u8, PendingArrival)>,
    /// A check broken in the middle of a step (a fence not above the last one).
    violation: Option<String>,
}

/// A step, for the path to a broken state.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    at: u64,
    /// `None`: the world (time, other participants).
    who: Option<(u8, u8)>,
    action: Action,
    lag: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Start,
    TimePasses,
    Churn,
    Enqueue(Delivery),
    Retry(Delivery),
    Append(Delivery),
    AppendHeldUp,
    AppendLands,
    SeesItsArrivalTakenIn,
    WritesForItsArrival(Delivery),
    Read(Delivery),
    Refresh(Delivery),
    GiveUp,
    Renew(Delivery),
    Release,
    SendHeldUpRelease,
    HeldUpReleaseLands,
    HeldUpReleaseLandsPastArrivals,
    HandleReply,
    JudgeLost,
}

/// What a held-up release's version says of the arrivals pending when it was computed, where
/// it took none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Knew {
    /// It read none (a write's own version, a load's): it conflicts once one is pending.
    NoneRead,
    /// A push's that knew none pending (etcd's, Redis's): it takes none and leaves those
    /// appended since pending.
    NonePending,
}

/// How a write's reply reaches its client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Delivery {
    /// At once.
    Now,
    /// At a later step (the client stopped, or the reply sat in the network).
    Late,
    /// Never: the write landed, the client saw an ambiguous failure.
    Lost,
}

/// What a read of the key tells a waiting client to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadOutcome {
    /// Its ticket is gone: the turn is lost.
    Gone,
    Queued,
    /// Granted and provably fresh: started at once, the heartbeat claims it.
    StartUntil(u64),
    /// Granted: claim first.
    Claim,
}

impl Step {
    pub fn start() -> Step {
        Step {
            at: 0,
            who: None,
            action: Action::Start,
            lag: 0,
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = match self.who {
            Some((c, k)) => {
                write!(f, "c{c} ")?;
                KEY_NAMES[usize::from(k)]
            }
            None => "",
        };
        match self.action {
            Action::Start => write!(f, "start")?,
            Action::TimePasses => write!(f, "time passes")?,
            Action::Churn => write!(f, "{FINISHED_REMEMBERED} other tickets come and go")?,
            Action::Enqueue(d) => write!(f, "enqueues on {key}{d}")?,
            Action::Retry(d) => write!(f, "retries its enqueue on {key}{d}")?,
            Action::Append(d) => write!(f, "appends its arrival to {key}{d}")?,
            Action::AppendHeldUp => {
                write!(f, "appends its arrival to {key}, held up, its reply lost")?
            }
            Action::AppendLands => write!(f, "a held-up arrival lands")?,
            Action::SeesItsArrivalTakenIn => write!(f, "sees its arrival on {key} taken in")?,
            Action::WritesForItsArrival(d) => {
                write!(f, "writes its enqueue on {key} as its arrival's retry{d}")?
            }
            Action::Read(d) => write!(f, "reads {key}{d}")?,
            Action::Refresh(d) => write!(f, "refreshes on {key}{d}")?,
            Action::GiveUp => write!(f, "gives up on {key}")?,
            Action::Renew(d) => write!(f, "renews {key}{d}")?,
            Action::Release => write!(f, "releases {key}")?,
            Action::SendHeldUpRelease => write!(f, "sends its release of {key}, held up")?,
            Action::HeldUpReleaseLands => write!(f, "sees its held-up release of {key} land")?,
            Action::HeldUpReleaseLandsPastArrivals => write!(
                f,
                "sees its held-up release of {key} land past the arrivals appended since"
            )?,
            Action::HandleReply => write!(f, "handles its late reply on {key}")?,
            Action::JudgeLost => write!(f, "judges its lease on {key} lost")?,
        }
        if self.lag > 0 {
            write!(f, " (its reading {} ms behind)", self.lag)?;
        }
        write!(f, " @{}", self.at)
    }
}

impl fmt::Display for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Delivery::Now => Ok(()),
            Delivery::Late => write!(f, ", its reply handled later"),
            Delivery::Lost => write!(f, ", its reply lost"),
        }
    }
}

/// The id of client `c`'s ticket on key `k` in round `round`.
fn ticket_id(c: usize, k: usize, round: u8) -> String {
    format!("t-c{c}k{k}r{round}")
}

fn token(c: usize, k: usize, round: u8) -> String {
    format!("{:032x}", 0x70000 + c * 256 + k * 16 + usize::from(round))
}

/// The ledger entry of a ticket id of [`ticket_id`]'s form (`None` for other participants').
fn ledger_index(id: &str) -> Option<usize> {
    let digit = |i: usize| {
        id.as_bytes()
            .get(i)
            .filter(|b| b.is_ascii_digit())
            .map(|b| usize::from(b - b'0'))
    };
    if !id.starts_with("t-c") || id.len() != 8 {
        return None;
    }
    Some((digit(3)? * MAX_KEYS + digit(5)?) * MAX_ROUNDS + digit(7)?)
}

/// What of a document decides what happens next, for the state's digest. Left out, so that
/// worlds differing only in them are one state: wall-clock times and hold-time samples
/// (display and estimates), arrival numbers (the tickets' order says it), and the finished
/// marks and count unless a retry may read them. Heartbeat counters are read only by
/// observers, which only ask whether one is the one they saw: the current document's are left
/// out (each observer's view of them is in the digest), and a document still to be observed or
/// landed (`current`: the key's document now) gives each ticket's heartbeat relative to the
/// current one.
fn project(d: &mut Digest, doc: &Doc, setup: &Setup, current: Option<&Doc>) {
    d.u64(doc.tickets.len() as u64);
    for t in &doc.tickets {
        d.str(&t.id);
        d.u8(match (t.state, t.mode, t.claimed) {
            (TicketState::Queued, Mode::Normal, _) => 0,
            (TicketState::Queued, Mode::Shared, _) => 1,
            (TicketState::Held, Mode::Normal, false) => 2,
            (TicketState::Held, Mode::Normal, true) => 3,
            (TicketState::Held, Mode::Shared, false) => 4,
            (TicketState::Held, Mode::Shared, true) => 5,
        });
        d.u64(t.fence);
        d.opt(t.deadline_ms);
        if setup.clock == ClockKind::Observed {
            if let Some(current) = current {
                let now = current.by_id(&t.id).map(|c| c.heartbeat);
                d.opt(now.map(|now| now.wrapping_sub(t.heartbeat)));
            }
        }
    }
    if setup.lost {
        for mark in &doc.finished {
            d.str(&mark.id);
            d.u8(mark.outcome.code() as u8);
        }
        d.u64(doc.finishes);
    }
    d.u64(doc.fence);
    d.u64(u64::from(doc.limit));
}

impl World {
    pub fn start(setup: &Setup) -> World {
        let n = setup.clients.len();
        assert!(
            n <= MAX_CLIENTS && setup.keys <= MAX_KEYS && usize::from(setup.rounds) <= MAX_ROUNDS
        );
        World {
            now: 0,
            docs: vec![None; setup.keys],
            clients: setup
                .clients
                .iter()
                .map(|client| Client {
                    round: 0,
                    keys: std::array::from_fn(|k| {
                        if client.plan.contains(&k) {
                            Phase::Idle
                        } else {
                            Phase::Unused
                        }
                    }),
                    acted: [false; MAX_KEYS],
                })
                .collect(),
            observers: if setup.clock == ClockKind::Observed {
                vec![Default::default(); n]
            } else {
                Vec::new()
            },
            max_fence: [0; MAX_KEYS],
            ledger: [0; LEDGER],
            faults_left: setup.faults,
            churned: false,
            arrivals: vec![Vec::new(); setup.keys],
            flying: Vec::new(),
            violation: None,
        }
    }

    /// The state's identity: a digest of everything that decides its future.
    pub fn key(&self, setup: &Setup) -> u128 {
        let mut d = Digest::default();
        d.u64(self.now);
        d.u8(self.faults_left);
        d.u8(u8::from(self.churned));
        d.u8(u8::from(self.violation.is_some()));
        for doc in &self.docs {
            match doc {
                Some(doc) => {
                    d.u8(1);
                    project(&mut d, doc, setup, None);
                }
                None => d.u8(0),
            }
        }
        for client in &self.clients {
            d.u8(client.round);
            for k in 0..setup.keys {
                client.keys[k].digest(&mut d, setup, self.docs[k].as_deref());
                d.u8(u8::from(client.acted[k]));
            }
        }
        for observers in &self.observers {
            for (k, observer) in observers.iter().enumerate().take(setup.keys) {
                self.digest_observer(&mut d, k, observer);
            }
        }
        for fence in &self.max_fence[..setup.keys] {
            d.u64(*fence);
        }
        for entry in &self.ledger {
            d.u8(*entry);
        }
        let arrival = |d: &mut Digest, a: &PendingArrival| {
            d.u8(a.c);
            d.u8(a.round);
            d.u64(a.unsettled_seen);
        };
        for pending in &self.arrivals {
            d.u64(pending.len() as u64);
            for a in pending {
                arrival(&mut d, a);
            }
        }
        d.u64(self.flying.len() as u64);
        for (k, a) in &self.flying {
            d.u8(*k);
            arrival(&mut d, a);
        }
        d.finish()
    }

    /// Client `c`'s ticket on `k` this round.
    fn id(&self, c: usize, k: usize) -> String {
        ticket_id(c, k, self.clients[c].round)
    }

    fn token(&self, c: usize, k: usize) -> String {
        token(c, k, self.clients[c].round)
    }

    /// What an observer knows that can still matter: for every ticket it may yet judge (in
    /// the key's document, or in a written document a client will be fed), when it would
    /// judge it ended — or only that it would, once that is past (it stays so until the
    /// heartbeat changes). Nothing else of it is ever read again.
    fn digest_observer(&self, d: &mut Digest, k: usize, observer: &Observer) {
        let pending = self
            .clients
            .iter()
            .filter_map(|client| match &client.keys[k] {
                Phase::Awaiting {
                    written: Some(doc), ..
                } => Some(doc),
                _ => None,
            });
        for doc in self.docs[k].iter().chain(pending) {
            for ticket in &doc.tickets {
                let expires_at = observer.expires_at_mono_ms(ticket);
                d.opt(expires_at.map(|at| at.max(self.now)));
            }
        }
    }
}
