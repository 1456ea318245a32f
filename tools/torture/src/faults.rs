//! The faults a run can inject, and the seeded schedule that picks them.
//!
//! A seed fixes the schedule: which fault comes next, after how long, and which of the
//! candidates (holders, waiters) it hits, given the same candidates. Real processes on a real
//! machine do not repeat their timing exactly, so a seed reproduces the schedule, not every
//! interleaving; a violation found with a seed is re-run with it until it shows again, then
//! pinned down in a test of the core or the store.

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
        }
    }

    /// Whether it needs the fault proxy between clients and the store.
    pub fn needs_proxy(self) -> bool {
        matches!(
            self,
            Fault::ProxyDrop | Fault::ProxyHole | Fault::ProxyLatency
        )
    }

    /// Whether it takes a holder away (its takeover time is measured).
    pub fn hits_holder(self) -> bool {
        matches!(self, Fault::KillHolder | Fault::PauseHolder)
    }
}

/// The seeded schedule.
pub struct Schedule {
    rng: ChaCha8Rng,
    faults: Vec<Fault>,
    every: Duration,
}

impl Schedule {
    /// A schedule of `faults` (none: a quiet run), one about every `every`, from `seed`.
    pub fn new(seed: u64, faults: &[Fault], every: Duration) -> Schedule {
        Schedule {
            rng: ChaCha8Rng::seed_from_u64(seed),
            faults: faults.to_vec(),
            every,
        }
    }

    /// The next fault and how long to wait before it (half to one and a half `every`).
    pub fn next_fault(&mut self) -> Option<(Duration, Fault)> {
        if self.faults.is_empty() {
            return None;
        }
        let wait = self.every.mul_f64(self.rng.random_range(0.5..1.5));
        let fault = self.faults[self.rng.random_range(0..self.faults.len())];
        Some((wait, fault))
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
    fn no_faults_no_schedule() {
        let mut schedule = Schedule::new(1, &[], Duration::from_secs(1));
        assert_eq!(schedule.next_fault(), None);
        assert_eq!(schedule.pick(0), None);
    }
}
