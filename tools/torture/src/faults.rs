//! The faults a run can inject, and the seeded schedule that picks them.
//!
//! A seed fixes the schedule: which fault comes next, after how long, and which of the
//! candidates (holders, waiters) it hits, given the same candidates. Real processes on a real
//! machine do not repeat their timing exactly, so a seed reproduces the schedule, not every
//! interleaving; a violation found with a seed is re-run with it until it shows again, then
//! pinned down in a test of the core or the store.
//!
//! The faults take turns: the schedule deals them from a shuffled deck, every fault once per
//! round, so a short run (the test command's 45 s) sees every kind of fault several times and
//! a fault added to a run does not starve the others of their turns.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A fault the harness can inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum Fault {
    /// `kill -9` of a process holding the key (`baton run` or a library client).
    KillHolder,
    /// `kill -9` of a process waiting for the key.
    KillWaiter,
    /// `SIGSTOP` of a holder (and its command) for longer than its TTL, then `SIGCONT`: it
    /// must be fenced off. Mutex keys only: nothing but a fence protects a resource from a
    /// holder that was paused past its lease.
    PauseHolder,
    /// Restart the store's server (`--restart-cmd`).
    Restart,
    /// Cut every connection between clients and the store (through the fault proxy).
    ProxyDrop,
    /// Forward nothing between clients and the store for `--hole` (through the fault proxy).
    ProxyHole,
    /// Delay everything between clients and the store by up to 50 ms for a few seconds.
    ProxyLatency,
    /// SQLite only: stop a process in the middle of its write transaction for longer than the
    /// TTL (every other process must wait until it resumes; nothing lost or granted twice).
    PauseInTransaction,
    /// Lose the answer to a write the store has executed, and cut its connection (through the
    /// fault proxy): the client sees an ambiguous write. It must find out what its write did,
    /// never believing it holds what the store has given away.
    ProxyLoseReply,
    /// Stop a client (`SIGSTOP`; a `baton run` with its command) after its write has landed
    /// and before it reads the answer, for longer than the lease, the waiter lease and the
    /// claim window, then `SIGCONT`: the answer it reads is stale by then, and a lease counted
    /// from when it arrived would be believed long after the store ended it. Through the fault
    /// proxy, which finds the moment; mutex keys only, as for `pause-holder`.
    StopBeforeReply,
}

impl Fault {
    /// The name used on the command line and in summaries.
    pub fn name(self) -> &'static str {
        match self {
            Fault::KillHolder => "kill-holder",
            Fault::KillWaiter => "kill-waiter",
            Fault::PauseHolder => "pause-holder",
            Fault::Restart => "restart",
            Fault::ProxyDrop => "proxy-drop",
            Fault::ProxyHole => "proxy-hole",
            Fault::ProxyLatency => "proxy-latency",
            Fault::PauseInTransaction => "pause-in-transaction",
            Fault::ProxyLoseReply => "proxy-lose-reply",
            Fault::StopBeforeReply => "stop-before-reply",
        }
    }

    /// Whether it needs the fault proxy between clients and the store.
    pub fn needs_proxy(self) -> bool {
        matches!(
            self,
            Fault::ProxyDrop
                | Fault::ProxyHole
                | Fault::ProxyLatency
                | Fault::ProxyLoseReply
                | Fault::StopBeforeReply
        )
    }

    /// Whether it takes away a process that holds, or may (its takeover time is measured when
    /// its ticket then ran out).
    pub fn hits_holder(self) -> bool {
        matches!(
            self,
            Fault::KillHolder | Fault::PauseHolder | Fault::StopBeforeReply
        )
    }

    /// Whether it stops a process (`SIGSTOP`) rather than killing it: a stopped holder cannot
    /// know its lease ran out, so a fence refusing it afterwards is the fence at work.
    pub fn stops_process(self) -> bool {
        matches!(
            self,
            Fault::PauseHolder | Fault::PauseInTransaction | Fault::StopBeforeReply
        )
    }
}

/// The seeded schedule.
pub struct Schedule {
    rng: ChaCha8Rng,
    faults: Vec<Fault>,
    every: Duration,
    /// What is left of this round's shuffled deck of faults (dealt from the end).
    deck: Vec<Fault>,
    /// The faults dealt again in this round ([`Schedule::deal_later`]): once each.
    dealt_again: Vec<Fault>,
}

impl Schedule {
    /// A schedule of `faults` (none: a quiet run), one about every `every`, from `seed`.
    pub fn new(seed: u64, faults: &[Fault], every: Duration) -> Schedule {
        Schedule {
            rng: ChaCha8Rng::seed_from_u64(seed),
            faults: faults.to_vec(),
            every,
            deck: Vec::new(),
            dealt_again: Vec::new(),
        }
    }

    /// The next fault and how long to wait before it (half to one and a half `every`). Each
    /// round deals every fault once, in a seeded order.
    pub fn next_fault(&mut self) -> Option<(Duration, Fault)> {
        if self.faults.is_empty() {
            return None;
        }
        let wait = self.every.mul_f64(self.rng.random_range(0.5..1.5));
        if self.deck.is_empty() {
            self.deck = self.shuffled();
            self.dealt_again.clear();
        }
        let fault = self.deck.pop()?;
        Some((wait, fault))
    }

    /// The faults in a seeded order (Fisher–Yates with this schedule's generator, written out
    /// so the order depends on ChaCha's specified stream, not on a library's shuffle).
    fn shuffled(&mut self) -> Vec<Fault> {
        let mut deck = self.faults.clone();
        for i in (1..deck.len()).rev() {
            let j = self.rng.random_range(0..=i);
            deck.swap(i, j);
        }
        deck
    }

    /// Deals `fault` again after the rest of this round: one that found nothing to hit gets
    /// another chance in this run, after the faults still to come had theirs. Once a round: a
    /// fault that misses again waits for the next round, and the others are dealt meanwhile.
    pub fn deal_later(&mut self, fault: Fault) {
        if !self.dealt_again.contains(&fault) {
            self.dealt_again.push(fault);
            self.deck.insert(0, fault);
        }
    }

    /// One of `n` candidates (`None` when there are none).
    pub fn pick(&mut self, n: usize) -> Option<usize> {
        (n > 0).then(|| self.rng.random_range(0..n))
    }

    /// A duration between `low` and `high`.
    pub fn between(&mut self, low: Duration, high: Duration) -> Duration {
        if high <= low {
            return low;
        }
        low + (high - low).mul_f64(self.rng.random_range(0.0..1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_schedule_every_time() {
        let faults = [Fault::KillHolder, Fault::KillWaiter, Fault::ProxyDrop];
        let draw = |seed| {
            let mut schedule = Schedule::new(seed, &faults, Duration::from_secs(1));
            (0..20)
                .map(|_| (schedule.next_fault(), schedule.pick(7)))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(42), draw(42));
        assert_ne!(draw(42), draw(43));
        assert!(draw(42)
            .iter()
            .all(|(next, pick)| matches!(next, Some((wait, _)) if *wait >= Duration::from_millis(500) && *wait < Duration::from_millis(1500))
                && matches!(pick, Some(i) if *i < 7)));
    }

    #[test]
    fn every_fault_takes_its_turn_once_a_round() {
        let faults = [
            Fault::KillHolder,
            Fault::KillWaiter,
            Fault::PauseHolder,
            Fault::Restart,
            Fault::ProxyDrop,
            Fault::ProxyHole,
            Fault::ProxyLoseReply,
            Fault::StopBeforeReply,
        ];
        for seed in 0..50 {
            let mut schedule = Schedule::new(seed, &faults, Duration::from_secs(1));
            let mut rounds = Vec::new();
            for _ in 0..4 {
                let mut round: Vec<Fault> = (0..faults.len())
                    .map(|_| schedule.next_fault().map(|(_, f)| f))
                    .collect::<Option<_>>()
                    .unwrap_or_default();
                rounds.push(round.clone());
                round.sort();
                assert_eq!(round, faults, "seed {seed}");
            }
            // Rounds are shuffled, not repeated.
            assert!(rounds.windows(2).any(|w| w[0] != w[1]), "seed {seed}");
        }
    }

    #[test]
    fn a_fault_dealt_later_comes_after_the_rest_of_its_round() {
        let faults = [Fault::KillHolder, Fault::PauseHolder, Fault::Restart];
        let mut schedule = Schedule::new(7, &faults, Duration::from_secs(1));
        let mut deal = || schedule.next_fault().map(|(_, fault)| fault);
        let first = deal();
        let rest: Vec<Option<Fault>> = (0..2).map(|_| deal()).collect();
        let mut schedule = Schedule::new(7, &faults, Duration::from_secs(1));
        assert_eq!(schedule.next_fault().map(|(_, f)| f), first);
        schedule.deal_later(first.expect("a fault"));
        let again: Vec<Option<Fault>> = (0..3)
            .map(|_| schedule.next_fault().map(|(_, f)| f))
            .collect();
        // The rest of the round as before, then the fault dealt later.
        assert_eq!(again[..2], rest[..]);
        assert_eq!(again[2], first);
        // Missed again, last of its round: the next round comes, every fault in it.
        schedule.deal_later(first.expect("a fault"));
        let mut next: Vec<Option<Fault>> = (0..3)
            .map(|_| schedule.next_fault().map(|(_, f)| f))
            .collect();
        next.sort();
        let mut all: Vec<Option<Fault>> = faults.iter().copied().map(Some).collect();
        all.sort();
        assert_eq!(next, all);
    }

    #[test]
    fn fault_names_are_their_command_line_names() {
        use clap::ValueEnum;
        for fault in Fault::value_variants() {
            let name = fault.to_possible_value().map(|v| v.get_name().to_owned());
            assert_eq!(name.as_deref(), Some(fault.name()));
        }
    }

    #[test]
    fn no_faults_no_schedule() {
        let mut schedule = Schedule::new(1, &[], Duration::from_secs(1));
        assert_eq!(schedule.next_fault(), None);
        assert_eq!(schedule.pick(0), None);
    }
}
