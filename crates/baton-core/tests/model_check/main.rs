//! An exhaustive model check of the core with the clients' side of the protocol.
//!
//! Small worlds — two or three clients, one key of limit 1 (or 2, or 1 with shared clients) or
//! two keys, time in half-second steps up to a horizon — are explored breadth-first over EVERY
//! interleaving of: each client's next step on each key (enqueue; while waiting: read, refresh
//! its waiter lease, or give up; while holding: renew, release), time moving on (so any client
//! may be paused, or dead, for any stretch: a crashed client is one that never acts again), and
//! the faults a world allows, each write going one of these ways:
//! - at once: computed, landed and its reply handled at one instant;
//! - **handled late** (`late`): an enqueue, refresh, claim or renewal computed and landed at one
//!   step, its reply handled at any later step (a stopped process, a reply held in a network);
//!   while a renewal's reply is out, its client acts on the bound it had (and is checked
//!   against it), judging the lease lost when it passes; a release's reply changes no belief,
//!   so handling it late is only a pause;
//! - **reply lost** (`lost`): an enqueue that landed, seen by its client as an ambiguous
//!   failure and retried at any later step with the same attempt id and `finishes_seen`;
//!   meanwhile other participants may end `FINISHED_REMEMBERED` tickets at once, so that the
//!   retry finds its ticket forgotten;
//! - **held up** (`held_up`): a release computed at one step and landing up to two steps later
//!   if nothing else was written meanwhile (the CAS), applied again otherwise.
//!
//! Where a world keeps arrivals (`arrivals`, as etcd and Redis do), a client may instead
//! enqueue on a held key by appending its arrival beside the document; every write takes in
//! the arrivals pending when it is computed (a held-up release the first it read, later ones
//! staying; one that read none conflicts once one is pending, or, its version a push's that
//! knew none pending, lands past them, as on etcd and Redis). An append's reply may be lost
//! (the client writes its enqueue as the arrival's retry), and the append itself may land at
//! any later step (after that retry, after its ticket ended and was forgotten). Until a
//! document shows its ticket, the client may write its enqueue as the arrival's retry at any
//! step (a superset of when the library does), or give up.
//!
//! Every reading of the store's clock may lag the store (`lags`: by one step, `behind_ms`
//! reporting it; by three in `a_coarse_store_clock`); on S3's coarse clock readings are also
//! floored to whole seconds (`Clock::Store { uncertain_ms: 1000 }`, deadlines set from floored
//! readings). Stores without a
//! clock are judged by observation: each client feeds its own `Observer` every document it
//! reads or writes (a written one when it handles the reply), on its monotonic clock, the
//! model's time. One world has a client that holds key A while it waits for key B (the other
//! client contends for B): one heartbeat renews A and claims B, each lease on its own bound.
//!
//! The clients follow the client library's rules (`rules.rs`), every belief computed through
//! `baton_core::lease` only:
//! 1. a lease's local bound counts from the moment its write read the store's clock, less how
//!    far the reading lagged (`Basis::holds_until_local_ms`), never from when the reply was
//!    handled; a reply handled after that bound gives the lease up;
//! 2. a reply showing the ticket held is trusted only when the write that got it granted it or
//!    beat it (a refresh or renewal: `lease::write_set_the_lease`); a retried enqueue that
//!    finds its ticket already held is followed by a claim, whose write sets the bound;
//! 3. a retry after an ambiguous failure carries `finishes_seen` (the count its first attempt
//!    read), on every retry;
//! 4. one heartbeat renews every lease its client holds, concurrently, each on its own bound;
//! 5. a grant seen unclaimed is started at once only within `fresh_grant_until_local_ms` of the
//!    last queued answer's basis and (on a store clock) of `deadline_stands_until_local_ms` of
//!    the grant's deadline as read; for a turn enqueued by arrival, the append's sending is
//!    the first such basis (its grant is written after);
//! 6. an arrival carries the count of unsettled turns its client last read, and the enqueue
//!    its client writes after the append went unanswered says the append may land late, so
//!    the turn it queues is remembered and a late copy queues nothing (or, forgotten, is
//!    refused as uncertain); the finishes since its client's read do not matter.
//!
//! In every reachable state:
//! - each document passes `invariants::check` and `check_settled` (limit, no shared beside
//!   normal, unique fences, queue order: nothing that could hold is left waiting);
//! - every client that believes it holds a key really holds it by the judgement of whoever
//!   could end it now: on a store clock, expiry applied at the store's exact time (readings are
//!   never ahead of it, so none ends more); by observation, expiry applied by EVERY client still
//!   acting, each with its own observer (a ticket ended by observation is ended by whichever
//!   participant's apply ends it first). So believers never exceed the limit and never mix
//!   shared with normal;
//! - every grant's fence on a key is above every earlier one;
//! - every enqueued ticket is live or finished exactly once (no lost tickets, no ghosts).
//!
//! Each rule, broken in the model (the old behaviour), is caught here within a few steps: a
//! lease counted from the reply's handling, a held reply from a retried enqueue trusted, a
//! retry without `finishes_seen` (a ghost ticket), an enqueue after an unanswered append
//! without `may_arrive_late` (a ghost from a late append), a turn by arrival counted queued
//! from when it saw its ticket rather than from its append, one bound for all of a
//! heartbeat's leases, `behind_ms` ignored (in the lease bound or in the grant's deadline
//! bound), no deadline bound at all, (by observation) a fresh grant counted from the read that
//! saw it, and (in the core) a beat that moves a deadline earlier
//! (`lease::extended_deadline_store_ms`).
//!
//! `BATON_MODEL_CHECK=long cargo test -p baton-core --test model_check` explores larger worlds
//! (longer horizons, more faults, a third client or lagging readings where the default has
//! none): 43 million states, about half an hour on two cores and up to 8 GB of memory.
//!
//! The default run (in the test command; the core is optimised in the dev profile, and applies
//! are memoised on store clocks): 11.6 million states, about 90 s on two cores and 3 GB of
//! memory, per world:
//!
//! | test | states |
//! |---|---:|
//! | `a_coarse_store_clock` | 372,362 |
//! | `a_mutex_taken_twice_by_one_client` | 857,972 |
//! | `a_mutex_with_three_clients` | 942,767 |
//! | `a_semaphore_of_two_with_three_clients` | 157,874 |
//! | `arrivals_judged_by_observation` | 1,250,142 |
//! | `enqueues_by_arrival` | 3,704,429 |
//! | `leases_judged_by_observation` | 771,692 |
//! | `readings_that_lag_the_store` | 379,348 |
//! | `retried_enqueues_after_lost_replies` | 729,079 |
//! | `retried_enqueues_on_a_semaphore` | 461,658 |
//! | `shared_holders_never_beside_a_normal_one` | 178,783 |
//! | `two_keys_held_by_one_heartbeat` | 1,783,588 |
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod explore;
mod rules;
mod world;

use explore::explore;
use world::{ClientSetup, ClockKind, Setup, STEP};

/// Whether the longer, larger run was asked for (`BATON_MODEL_CHECK=long`).
fn long() -> bool {
    std::env::var("BATON_MODEL_CHECK").is_ok_and(|v| v == "long")
}

/// `default` in the test command's run, `long_run` in the long one.
fn pick<T>(default: T, long_run: T) -> T {
    if long() {
        long_run
    } else {
        default
    }
}

/// A world of one key taken once by each client (`shared`: their modes), on an exact store
/// clock, with no faults: the tests below say what each explores beyond it.
fn one_key(name: &'static str, limit: u32, shared: &[bool]) -> Setup {
    Setup {
        name,
        limit,
        clients: shared
            .iter()
            .map(|&shared| ClientSetup {
                shared,
                plan: vec![0],
            })
            .collect(),
        keys: 1,
        rounds: 1,
        horizon: 3_000,
        clock: ClockKind::Exact,
        lags: &[0],
        late: false,
        lost: false,
        held_up: false,
        faults: 0,
        arrivals: false,
    }
}

/// Explores `setup`; a broken check panics with its path.
fn run(setup: Setup) {
    let states = explore(&setup);
    assert!(
        states > 10_000,
        "{}: the world is explored, not skipped: {states} states",
        setup.name
    );
}

#[test]
fn a_mutex_with_three_clients() {
    run(Setup {
        late: true,
        held_up: long(),
        faults: pick(1, 2),
        horizon: pick(3_000, 3_500),
        ..one_key("mutex, 3 clients", 1, &[false, false, false])
    });
}

#[test]
fn a_mutex_taken_twice_by_one_client() {
    run(Setup {
        rounds: 2,
        horizon: pick(5_000, 6_000),
        held_up: true,
        late: true,
        faults: pick(2, 3),
        ..one_key("mutex, 2 clients, 2 rounds", 1, &[false, false])
    });
}

#[test]
fn a_semaphore_of_two_with_three_clients() {
    run(Setup {
        late: long(),
        faults: pick(0, 1),
        horizon: pick(3_000, 3_500),
        ..one_key("limit 2, 3 clients", 2, &[false, false, false])
    });
}

#[test]
fn shared_holders_never_beside_a_normal_one() {
    run(Setup {
        late: long(),
        faults: pick(0, 1),
        horizon: pick(3_000, 3_500),
        ..one_key("shared, shared, normal", 1, &[true, true, false])
    });
}

#[test]
fn retried_enqueues_after_lost_replies() {
    run(Setup {
        rounds: 2,
        lost: true,
        late: true,
        faults: pick(2, 3),
        horizon: pick(4_000, 5_000),
        ..one_key("retries, mutex, 2 clients, 2 rounds", 1, &[false, false])
    });
}

/// On a semaphore a retried enqueue can find its ticket held while its own apply changes the
/// document (another holder's lease runs out in it): only a grant in the write itself sets the
/// lease (rule 2), not any change.
#[test]
fn retried_enqueues_on_a_semaphore() {
    let clients: &[bool] = pick(&[false, false], &[false, false, false]);
    run(Setup {
        lost: true,
        late: !long(),
        faults: pick(2, 1),
        horizon: 4_000,
        ..one_key("retries, limit 2", 2, clients)
    });
}

#[test]
fn readings_that_lag_the_store() {
    let clients: &[bool] = pick(&[false, false], &[false, false, false]);
    run(Setup {
        rounds: pick(2, 1),
        lags: &[0, STEP],
        late: true,
        held_up: true,
        faults: 1,
        horizon: pick(4_000, 3_500),
        ..one_key("lagging readings, mutex", 1, clients)
    });
}

/// S3: readings floored to whole seconds, deadlines set from them, phases ending a second
/// late. That second also covers a one-step lag, so ignoring `behind_ms` is caught here only
/// with lags over a second — which also let a renewal's lagging reading set a deadline before
/// the previous one's while the holder still acts on the previous bound (a process's readings
/// can go backwards: `ServerClock` keeps the last reply's). This world found that; the core
/// now never moves a live ticket's deadline earlier (`lease::extended_deadline_store_ms`).
#[test]
fn a_coarse_store_clock() {
    run(Setup {
        clock: ClockKind::Coarse,
        lags: &[0, STEP, 3 * STEP],
        rounds: 2,
        late: true,
        faults: pick(1, 2),
        horizon: pick(4_000, 5_000),
        ..one_key(
            "coarse clock, mutex, 2 clients, 2 rounds",
            1,
            &[false, false],
        )
    });
}

/// Each client judges by its own observer. Two rounds, so that a client that released comes
/// back as a waiter whose observer watches the next holder. (Three clients grow ninefold per
/// step here: every observer keeps its own first sight of every heartbeat.)
#[test]
fn leases_judged_by_observation() {
    run(Setup {
        clock: ClockKind::Observed,
        rounds: 2,
        late: true,
        held_up: true,
        faults: pick(1, 2),
        horizon: pick(4_500, 5_000),
        ..one_key(
            "observation, mutex, 2 clients, 2 rounds",
            1,
            &[false, false],
        )
    });
}

/// c0 takes A, then B while its heartbeat renews A; c1 contends for B.
#[test]
fn two_keys_held_by_one_heartbeat() {
    let mut setup = Setup {
        keys: 2,
        late: true,
        lags: pick(&[0], &[0, STEP]),
        faults: 1,
        horizon: pick(4_000, 4_500),
        ..one_key("two keys, one heartbeat", 1, &[false, false])
    };
    setup.clients[0].plan = vec![0, 1];
    setup.clients[1].plan = vec![1];
    run(setup);
}

/// Enqueues by arrival on a held key (as on etcd and Redis): each taken in by the key's next
/// write (the holder's release, a renewal, another's enqueue) or by its own client's write;
/// an append whose reply is lost, and one held up to land after its client's retry, even after
/// its ticket ended and was forgotten (other participants churn the marks).
#[test]
fn enqueues_by_arrival() {
    run(Setup {
        rounds: 2,
        lost: true,
        late: true,
        held_up: true,
        arrivals: true,
        // A third fault makes more than the explorer's bound of states: longer only.
        faults: 2,
        horizon: pick(4_000, 5_000),
        ..one_key("arrivals, mutex, 2 clients, 2 rounds", 1, &[false, false])
    });
}

/// Arrivals where leases are judged by observation (etcd keeps arrivals and has no clock).
#[test]
fn arrivals_judged_by_observation() {
    run(Setup {
        clock: ClockKind::Observed,
        rounds: 2,
        lost: true,
        late: true,
        arrivals: true,
        // A second fault makes more than the explorer's bound of states: longer only.
        faults: 1,
        horizon: pick(4_000, 5_000),
        ..one_key(
            "arrivals by observation, mutex, 2 clients, 2 rounds",
            1,
            &[false, false],
        )
    });
}
