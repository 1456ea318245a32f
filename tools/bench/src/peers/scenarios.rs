//! The in-process scenarios, each run for baton and a peer in alternating rounds (B1 to B4).
//!
//! Every client is a [`Locker`] with its own connection, a task of this process; the two sides
//! of a comparison run the same code around their lockers, so what differs is the lock alone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::contenders::{Contender, Locker, Split, Ticketed};
use crate::setup::fresh_key;
use crate::stats::Summary;

/// Whether `round` runs the first side first: alternating, so that what the machine does in
/// the background falls on both sides alike.
fn order<T>(round: usize, a: T, b: T) -> [T; 2] {
    if round.is_multiple_of(2) {
        [a, b]
    } else {
        [b, a]
    }
}

/// The clients of both sides, made before any round: connecting is not what is measured.
async fn clients(contender: &dyn Contender, n: usize) -> Result<Vec<Box<dyn Locker>>> {
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        clients.push(
            contender
                .client()
                .await
                .with_context(|| format!("cannot make a {} client", contender.name()))?,
        );
    }
    Ok(clients)
}

fn requests_of(clients: &[Box<dyn Locker>]) -> u64 {
    clients.iter().map(|c| c.requests()).sum()
}

fn split_of(clients: &[Box<dyn Locker>]) -> Option<Split> {
    clients.iter().map(|c| c.split()).sum()
}

/// B1's figures for one side.
#[derive(Clone, Debug, Serialize)]
pub struct Latency {
    /// One acquire + release, uncontended.
    pub cycle_ms: Summary,
    /// Store requests per cycle.
    pub requests_per_cycle: f64,
}

/// B1: one client, one key nobody else uses: `cycles` acquire + release per round, `rounds`
/// rounds per side, alternating.
pub async fn uncontended(
    baton: &dyn Contender,
    peer: &dyn Contender,
    rounds: usize,
    cycles: usize,
) -> Result<[Latency; 2]> {
    let mut sides = [clients(baton, 1).await?, clients(peer, 1).await?];
    let keys = [fresh_key("b1-baton"), fresh_key("b1-peer")];
    let mut samples: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    // One unmeasured cycle each: the first opens files and prepares statements.
    for (side, key) in sides.iter_mut().zip(&keys) {
        side[0].lock(key).await?;
        side[0].unlock(key).await?;
    }
    let before = [requests_of(&sides[0]), requests_of(&sides[1])];
    for round in 0..rounds {
        for side in order(round, 0, 1) {
            let client = &mut sides[side][0];
            for _ in 0..cycles {
                let started = Instant::now();
                client.lock(&keys[side]).await?;
                client.unlock(&keys[side]).await?;
                samples[side].push(started.elapsed());
            }
        }
    }
    let n = (rounds * cycles) as f64;
    let latency = |side: usize| -> Result<Latency> {
        Ok(Latency {
            cycle_ms: Summary::of(&samples[side]).context("no cycles")?,
            requests_per_cycle: (requests_of(&sides[side]) - before[side]) as f64 / n,
        })
    };
    Ok([latency(0)?, latency(1)?])
}

/// B2's figures for one side and one number of clients.
#[derive(Clone, Debug, Serialize)]
pub struct Throughput {
    /// Clients, each cycling on a key of its own.
    pub clients: usize,
    /// Acquire + release cycles per second, all clients together, one value per round.
    pub per_round: Vec<f64>,
}

/// B2: `n` clients, each on its own key, cycling for `duration` per round.
pub async fn distinct_keys(
    baton: &dyn Contender,
    peer: &dyn Contender,
    n: usize,
    rounds: usize,
    duration: Duration,
) -> Result<[Throughput; 2]> {
    let mut sides = [clients(baton, n).await?, clients(peer, n).await?];
    let mut rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for side in order(round, 0, 1) {
            let taken = std::mem::take(&mut sides[side]);
            let deadline = Instant::now() + duration;
            let started = Instant::now();
            let tasks: Vec<_> = taken
                .into_iter()
                .enumerate()
                .map(|(i, mut client)| {
                    let key = fresh_key(&format!("b2-{side}-{i}"));
                    tokio::spawn(async move {
                        let mut cycles = 0_u64;
                        while Instant::now() < deadline {
                            client.lock(&key).await?;
                            client.unlock(&key).await?;
                            cycles += 1;
                        }
                        anyhow::Ok((client, cycles))
                    })
                })
                .collect();
            let mut total = 0;
            for task in tasks {
                let (client, cycles) = task.await.context("a client task panicked")??;
                sides[side].push(client);
                total += cycles;
            }
            rates[side].push(total as f64 / started.elapsed().as_secs_f64());
        }
    }
    let [a, b] = rates;
    Ok([
        Throughput {
            clients: n,
            per_round: a,
        },
        Throughput {
            clients: n,
            per_round: b,
        },
    ])
}

/// One grant on the hot key, as a client saw it.
#[derive(Clone, Copy, Debug)]
struct Grant {
    client: usize,
    /// Just before `lock` was called.
    asked: Instant,
    /// Its arrival number and fence, where the lock numbers them.
    ticketed: Option<Ticketed>,
    /// Just after `lock` returned.
    held: Instant,
    /// Just before `unlock` was called.
    released: Instant,
}

/// B3's figures for one side.
#[derive(Clone, Debug, Serialize)]
pub struct HotKey {
    /// Grants per second, one value per round.
    pub per_round: Vec<f64>,
    /// Grants in all rounds.
    pub grants: usize,
    /// Grants that passed a waiter queued earlier: counted exactly where the lock numbers its
    /// tickets (baton: a grant whose fence is below that of a ticket that arrived before it),
    /// else by time (a client that called `lock` more than [`FIFO_MARGIN`] earlier was still
    /// waiting).
    pub fifo_violations: usize,
    /// Whether `fifo_violations` was counted exactly (by arrival and fence) or by time.
    pub fifo_exact: bool,
    /// Jain's fairness index over the grants per client (1: all equal; 1/n: one took all).
    pub fairness: f64,
    /// Store requests per grant.
    pub requests_per_grant: f64,
    /// Of those, document reads per grant, where the lock tells them apart.
    pub loads_per_grant: Option<f64>,
    /// Of those, writes per grant that lost to another and wrote nothing, where the lock tells
    /// them apart.
    pub conflicts_per_grant: Option<f64>,
    /// Of those, writes per grant under the store's lock (which cannot lose; on PostgreSQL
    /// each is four statements), where the lock tells them apart.
    pub locked_per_grant: Option<f64>,
    /// Holds that began before the previous one ended: must be 0 for any lock.
    pub overlaps: usize,
    /// How long a client waited for its grant.
    pub wait_ms: Summary,
}

/// Two requests closer than this are taken as simultaneous: which of them a fair lock queues
/// first depends on the network and the scheduler, not on the lock.
pub const FIFO_MARGIN: Duration = Duration::from_millis(2);

/// B3: `n` clients on one key for `duration` per round, each cycling acquire + release.
pub async fn hot_key(
    baton: &dyn Contender,
    peer: &dyn Contender,
    n: usize,
    rounds: usize,
    duration: Duration,
) -> Result<[HotKey; 2]> {
    let mut sides = [clients(baton, n).await?, clients(peer, n).await?];
    let mut rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut grants: [Vec<Grant>; 2] = [Vec::new(), Vec::new()];
    let mut overlaps = [0, 0];
    let mut per_round_fifo = [0, 0];
    let before = [requests_of(&sides[0]), requests_of(&sides[1])];
    let split_before = [split_of(&sides[0]), split_of(&sides[1])];
    for round in 0..rounds {
        for side in order(round, 0, 1) {
            let key = Arc::new(fresh_key(&format!("b3-{side}")));
            let taken = std::mem::take(&mut sides[side]);
            let started = Instant::now();
            let deadline = started + duration;
            let tasks: Vec<_> = taken
                .into_iter()
                .enumerate()
                .map(|(client_no, mut client)| {
                    let key = key.clone();
                    tokio::spawn(async move {
                        let mut mine = Vec::new();
                        while Instant::now() < deadline {
                            let asked = Instant::now();
                            client.lock(&key).await?;
                            let held = Instant::now();
                            let ticketed = client.last_grant();
                            let released = Instant::now();
                            client.unlock(&key).await?;
                            mine.push(Grant {
                                client: client_no,
                                asked,
                                ticketed,
                                held,
                                released,
                            });
                        }
                        anyhow::Ok((client, mine))
                    })
                })
                .collect();
            let mut round_grants = Vec::new();
            for task in tasks {
                let (client, mine) = task.await.context("a client task panicked")??;
                sides[side].push(client);
                round_grants.extend(mine);
            }
            // Grants after the deadline were waited for during it; the rate counts only those
            // made inside the round.
            let inside = round_grants.iter().filter(|g| g.held <= deadline).count();
            rates[side].push(inside as f64 / duration.as_secs_f64());
            overlaps[side] += count_overlaps(&round_grants);
            per_round_fifo[side] += if round_grants.iter().all(|g| g.ticketed.is_some()) {
                passed_in_arrival_order(&round_grants)
            } else {
                fifo_violations(&round_grants, FIFO_MARGIN)
            };
            grants[side].extend(round_grants);
        }
    }
    let hot = |side: usize| -> Result<HotKey> {
        let all = &grants[side];
        if all.is_empty() {
            bail!("no grant was made in {rounds} rounds of {duration:?}");
        }
        let waits: Vec<Duration> = all.iter().map(|g| g.held - g.asked).collect();
        Ok(HotKey {
            per_round: rates[side].clone(),
            grants: all.len(),
            fifo_violations: per_round_fifo[side],
            fifo_exact: all.iter().all(|g| g.ticketed.is_some()),
            fairness: jain(all, n),
            requests_per_grant: (requests_of(&sides[side]) - before[side]) as f64
                / all.len() as f64,
            loads_per_grant: split_of(&sides[side])
                .zip(split_before[side])
                .map(|(after, before)| (after.loads - before.loads) as f64 / all.len() as f64),
            conflicts_per_grant: split_of(&sides[side]).zip(split_before[side]).map(
                |(after, before)| (after.conflicts - before.conflicts) as f64 / all.len() as f64,
            ),
            locked_per_grant: split_of(&sides[side])
                .zip(split_before[side])
                .map(|(after, before)| (after.locked - before.locked) as f64 / all.len() as f64),
            overlaps: overlaps[side],
            wait_ms: Summary::of(&waits).context("no waits")?,
        })
    };
    Ok([hot(0)?, hot(1)?])
}

/// Holds (from `held` to `released`, a window inside the real hold) that began before an
/// earlier one ended.
fn count_overlaps(grants: &[Grant]) -> usize {
    let mut sorted: Vec<&Grant> = grants.iter().collect();
    sorted.sort_by_key(|g| g.held);
    let mut latest_end: Option<Instant> = None;
    let mut overlaps = 0;
    for grant in sorted {
        if latest_end.is_some_and(|end| grant.held < end) {
            overlaps += 1;
        }
        latest_end = Some(latest_end.map_or(grant.released, |end| end.max(grant.released)));
    }
    overlaps
}

/// Grants made to a client while another that asked more than `margin` earlier was still
/// waiting (it was granted later): each is a waiter passed over.
fn fifo_violations(grants: &[Grant], margin: Duration) -> usize {
    let mut by_ask: Vec<&Grant> = grants.iter().collect();
    by_ask.sort_by_key(|g| g.asked);
    // Sweep in order of asking: `latest` is the latest grant among those that asked more than
    // `margin` before the current one.
    let mut latest: Option<Instant> = None;
    let mut earlier = 0;
    let mut violations = 0;
    for i in 0..by_ask.len() {
        let grant = by_ask[i];
        while earlier < i && by_ask[earlier].asked + margin < grant.asked {
            let held = by_ask[earlier].held;
            latest = Some(latest.map_or(held, |l| l.max(held)));
            earlier += 1;
        }
        if latest.is_some_and(|l| l > grant.held) {
            violations += 1;
        }
    }
    violations
}

/// Grants whose fence is below that of a ticket that arrived earlier (granted later): exact,
/// with no clock involved. All grants must be of one key.
fn passed_in_arrival_order(grants: &[Grant]) -> usize {
    let mut tickets: Vec<Ticketed> = grants.iter().filter_map(|g| g.ticketed).collect();
    tickets.sort_by_key(|t| t.arrival);
    let mut highest_fence = 0;
    let mut passed = 0;
    for ticket in tickets {
        if highest_fence > ticket.fence {
            passed += 1;
        }
        highest_fence = highest_fence.max(ticket.fence);
    }
    passed
}

/// Jain's fairness index of the grants per client: (Σx)² / (n·Σx²).
fn jain(grants: &[Grant], clients: usize) -> f64 {
    let mut per_client = vec![0_f64; clients];
    for grant in grants {
        if let Some(count) = per_client.get_mut(grant.client) {
            *count += 1.0;
        }
    }
    let sum: f64 = per_client.iter().sum();
    let squares: f64 = per_client.iter().map(|x| x * x).sum();
    if squares == 0.0 {
        return 0.0;
    }
    sum * sum / (clients as f64 * squares)
}

/// B4's figures for one side.
#[derive(Clone, Debug, Serialize)]
pub struct Handoff {
    /// From the holder's `unlock` being called to the waiter's `lock` returning.
    pub handoff_ms: Summary,
    /// The holder's `unlock` call alone: the part of the handoff before the waiter can know
    /// (where the waiter holds before `unlock` returns, the whole handoff).
    pub release_ms: Summary,
    /// Store requests the holder sent from calling `unlock` to its return, per handoff: a
    /// release that lost to a write it had not seen sends more than one; what the holder's
    /// background tasks send meanwhile counts too (baton: the settings read a write starts
    /// when its copy is past half its life, which the write does not wait for).
    pub release_requests: f64,
    /// Of those, the reads of a whole document and the writes that lost, per handoff, where
    /// the lock tells them apart.
    pub release_loads_and_conflicts: Option<(f64, f64)>,
}

/// B4: a holder, a waiter queued behind it for `settle`; the time from the holder's release to
/// the waiter holding. One key per round.
pub async fn handoff(
    baton: &dyn Contender,
    peer: &dyn Contender,
    rounds: usize,
    settle: Duration,
) -> Result<[Handoff; 2]> {
    let mut sides = [clients(baton, 2).await?, clients(peer, 2).await?];
    let mut samples: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let mut releases: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let mut release_requests = [0_u64; 2];
    let mut release_split: [Option<Split>; 2] = [Some(Split::default()), Some(Split::default())];
    for round in 0..rounds {
        for side in order(round, 0, 1) {
            let key = fresh_key(&format!("b4-{side}"));
            let mut waiter = sides[side].pop().context("two clients")?;
            let holder = &mut sides[side][0];
            holder.lock(&key).await?;
            let waiting_key = key.clone();
            let waiting = tokio::spawn(async move {
                waiter.lock(&waiting_key).await?;
                let held = Instant::now();
                anyhow::Ok((waiter, held))
            });
            tokio::time::sleep(settle).await;
            if waiting.is_finished() {
                bail!("the waiter was granted while the holder held (round {round})");
            }
            let (requests_before, split_before) = (holder.requests(), holder.split());
            let released = Instant::now();
            holder.unlock(&key).await?;
            let unlocked = Instant::now();
            release_requests[side] += holder.requests() - requests_before;
            release_split[side] = match (release_split[side], split_before, holder.split()) {
                (Some(sum), Some(before), Some(after)) => Some(Split {
                    loads: sum.loads + (after.loads - before.loads),
                    conflicts: sum.conflicts + (after.conflicts - before.conflicts),
                    locked: sum.locked + (after.locked - before.locked),
                }),
                _ => None,
            };
            let (mut waiter, held) = waiting.await.context("the waiter panicked")??;
            samples[side].push(held.saturating_duration_since(released));
            releases[side].push(unlocked.min(held).saturating_duration_since(released));
            waiter.unlock(&key).await?;
            sides[side].push(waiter);
        }
    }
    let figures = |side: usize| -> Result<Handoff> {
        Ok(Handoff {
            handoff_ms: Summary::of(&samples[side]).context("no handoffs")?,
            release_ms: Summary::of(&releases[side]).context("no handoffs")?,
            release_requests: release_requests[side] as f64 / rounds as f64,
            release_loads_and_conflicts: release_split[side].map(|split| {
                let per = |n: u64| n as f64 / rounds as f64;
                (per(split.loads), per(split.conflicts))
            }),
        })
    };
    Ok([figures(0)?, figures(1)?])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(base: Instant, client: usize, asked: u64, held: u64, released: u64) -> Grant {
        let at = |ms: u64| base + Duration::from_millis(ms);
        Grant {
            client,
            asked: at(asked),
            ticketed: None,
            held: at(held),
            released: at(released),
        }
    }

    #[test]
    fn a_waiter_passed_over_is_a_fifo_violation() {
        let base = Instant::now();
        // Client 0 asked at 0 and was granted at 30; client 1 asked at 10 and was granted at
        // 20: client 1 passed client 0.
        let grants = [grant(base, 0, 0, 30, 31), grant(base, 1, 10, 20, 21)];
        assert_eq!(fifo_violations(&grants, Duration::from_millis(2)), 1);
        // In order: none.
        let grants = [grant(base, 0, 0, 20, 21), grant(base, 1, 10, 30, 31)];
        assert_eq!(fifo_violations(&grants, Duration::from_millis(2)), 0);
        // Within the margin: simultaneous, none.
        let grants = [grant(base, 0, 0, 30, 31), grant(base, 1, 1, 20, 21)];
        assert_eq!(fifo_violations(&grants, Duration::from_millis(2)), 0);
    }

    #[test]
    fn a_lower_fence_after_a_higher_arrival_passed_a_waiter() {
        let base = Instant::now();
        let ticketed = |arrival, fence| {
            let mut g = grant(base, 0, 0, 1, 2);
            g.ticketed = Some(Ticketed { arrival, fence });
            g
        };
        let in_order = [ticketed(1, 10), ticketed(2, 11), ticketed(3, 12)];
        assert_eq!(passed_in_arrival_order(&in_order), 0);
        // Arrival 3 was granted (fence 11) before arrival 2 (fence 12).
        let passed = [ticketed(1, 10), ticketed(2, 12), ticketed(3, 11)];
        assert_eq!(passed_in_arrival_order(&passed), 1);
    }

    #[test]
    fn overlapping_holds_are_counted() {
        let base = Instant::now();
        let grants = [grant(base, 0, 0, 1, 10), grant(base, 1, 0, 5, 12)];
        assert_eq!(count_overlaps(&grants), 1);
        let grants = [grant(base, 0, 0, 1, 10), grant(base, 1, 0, 10, 12)];
        assert_eq!(count_overlaps(&grants), 0);
    }

    #[test]
    fn jain_is_one_when_equal_and_one_over_n_when_one_takes_all() {
        let base = Instant::now();
        let equal = [grant(base, 0, 0, 1, 2), grant(base, 1, 0, 3, 4)];
        assert!((jain(&equal, 2) - 1.0).abs() < 1e-9);
        let one = [grant(base, 0, 0, 1, 2), grant(base, 0, 0, 3, 4)];
        assert!((jain(&one, 2) - 0.5).abs() < 1e-9);
    }
}
