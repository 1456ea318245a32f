//! How often a waiter looks at the store.
//!
//! On a store that pushes changes (SQLite, PostgreSQL, Redis, etcd) a waiter reads when it is
//! woken, and by timer only at the longest interval, as a safety net. On a store that cannot
//! push (S3, DynamoDB) every read is a billed request, so the interval follows what a read can
//! find out:
//!
//! - the waiter next in line reads at the shortest interval (its turn comes at the holder's
//!   release, which only a read reveals);
//! - each place further back doubles it, up to the longest (a waiter three places back cannot
//!   be granted before three turns have passed);
//! - whatever the place, a waiter wakes just after the earliest deadline among the key's other
//!   tickets (a lease, a claim window), so taking over from a dead holder costs its TTL and not
//!   a poll interval more (the caller does this; see `acquire`);
//! - every interval is spread by ±20% at random, so waiters that started together do not read
//!   together.
//!
//! That bounds the reads of one waiter: [`PollBounds::reads_per_minute_at_most`] is the
//! documented bound (docs/locks.md, *Waiting*), and the tests hold the code to it.
//!
//! On a store that pushes, a wake-up says that the key (on SQLite: the file) was written, not
//! what changed, so every waiter that looks at every wake-up reads once per write: with N
//! waiters on a key, N reads for each grant. A waiter far back does not need to:
//! [`wakes_before_look`] lets it skip the bare wake-ups that cannot yet have brought its turn.
//! (A wake-up that carries the document, as PostgreSQL's, Redis's and etcd's do below a size,
//! costs no read and is always looked at.)

use std::time::Duration;

/// The shortest and longest interval between two reads of a waiter (`--poll MIN..MAX`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollBounds {
    /// The interval of the waiter next in line, on a store that cannot push.
    pub min: Duration,
    /// The longest interval of any waiter; the claim window is derived from it.
    pub max: Duration,
}

/// The smallest and largest factor the jitter applies.
const JITTER: (f64, f64) = (0.8, 1.2);

/// The default shortest interval: four reads a second for the waiter next in line.
pub const DEFAULT_MIN: Duration = Duration::from_millis(250);
/// The default longest interval.
pub const DEFAULT_MAX: Duration = Duration::from_secs(1);

impl Default for PollBounds {
    fn default() -> Self {
        PollBounds {
            min: DEFAULT_MIN,
            max: DEFAULT_MAX,
        }
    }
}

/// How many wake-ups a waiter lets pass before it looks (a read where the wake-up is bare, a
/// decode of the pushed document where it carries one), `ahead` places behind the front of a
/// key with `limit` permits (`always`: a ticket that must look at every one: held, or shared,
/// which a single write may grant together with the run of shared tickets ahead of it).
///
/// Each write grants at most one normal ticket of a key whose holders stay below its limit, so
/// a waiter with `ahead` tickets in front cannot be granted before `ahead − limit + 1` writes
/// have gone by: it looks at that many wake-ups, learns its new place, and counts again. The
/// waiters that the next write may grant look at every wake-up. A write that moves the queue
/// by several places at once (a supersede, several expiries, an operator's cancel) can leave a
/// waiter's count behind: it then looks at its timer, the longest poll interval, which is
/// shorter than the claim window ([`crate::acquire`]), so a grant is claimed later, never lost.
pub fn wakes_before_look(ahead: usize, limit: u32, always: bool) -> usize {
    if always {
        return 1;
    }
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    (ahead + 1).saturating_sub(limit).max(1)
}

impl PollBounds {
    /// Bounds with only the longest interval given: the shortest is [`DEFAULT_MIN`], or the
    /// longest if that is shorter.
    pub fn up_to(max: Duration) -> PollBounds {
        PollBounds {
            min: DEFAULT_MIN.min(max),
            max,
        }
    }

    /// The interval before jitter for a waiter at `position` in the queue (0: next in line),
    /// on a store that pushes (`pushed`) or not.
    pub fn interval(&self, position: usize, pushed: bool) -> Duration {
        if pushed {
            return self.max;
        }
        let doublings = u32::try_from(position).unwrap_or(u32::MAX).min(16);
        self.min
            .saturating_mul(1u32 << doublings)
            .clamp(self.min, self.max.max(self.min))
    }

    /// `interval` spread by a factor between 0.8 and 1.2; `unit` is a random number in [0, 1).
    pub fn jittered(interval: Duration, unit: f64) -> Duration {
        let unit = if unit.is_finite() {
            unit.clamp(0.0, 1.0)
        } else {
            0.5
        };
        interval.mul_f64(JITTER.0 + (JITTER.1 - JITTER.0) * unit)
    }

    /// The shortest sleep between two timed reads on a store that cannot push: no deadline
    /// wake-up may make a waiter read more often than this.
    pub fn floor(&self) -> Duration {
        self.min.mul_f64(JITTER.0)
    }

    /// The most timed reads a waiter at `position` makes in a minute on a store that cannot
    /// push: one per shortest jittered interval. (Writes come on top only when a read found
    /// something to do: claiming a grant, ending an expired ticket, or refreshing the waiter's
    /// own lease every third of its TTL.)
    pub fn reads_per_minute_at_most(&self, position: usize) -> u64 {
        let shortest = self
            .interval(position, false)
            .mul_f64(JITTER.0)
            .max(self.floor());
        let shortest_ms = shortest.as_millis().max(1);
        (60_000u128).div_ceil(shortest_ms) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn only_a_waiter_the_next_write_may_grant_looks_at_every_wake_up() {
        // A mutex: the next in line and the one behind it look at every wake-up (the one
        // behind becomes next when the next is granted); further back, one look per place.
        let mutex: Vec<_> = (0..5)
            .map(|ahead| wakes_before_look(ahead, 1, false))
            .collect();
        assert_eq!(mutex, [1, 1, 2, 3, 4]);
        // Three permits: the first three places may be granted by the next write.
        let three: Vec<_> = (0..5)
            .map(|ahead| wakes_before_look(ahead, 3, false))
            .collect();
        assert_eq!(three, [1, 1, 1, 1, 2]);
        // Held and shared tickets look at every one, wherever they are.
        assert_eq!(wakes_before_look(40, 1, true), 1);
        // Never zero, even for a limit of zero or a huge one.
        assert_eq!(wakes_before_look(0, 0, false), 1);
        assert_eq!(wakes_before_look(3, u32::MAX, false), 1);
    }

    #[test]
    fn intervals_double_with_each_place_up_to_the_longest() {
        let bounds = PollBounds {
            min: ms(250),
            max: ms(1000),
        };
        let by_place: Vec<_> = (0..5).map(|p| bounds.interval(p, false)).collect();
        assert_eq!(by_place, [ms(250), ms(500), ms(1000), ms(1000), ms(1000)]);
        assert_eq!(bounds.interval(usize::MAX, false), ms(1000));
    }

    #[test]
    fn a_store_that_pushes_is_read_by_timer_only_at_the_longest_interval() {
        let bounds = PollBounds::default();
        assert_eq!(bounds.interval(0, true), bounds.max);
    }

    #[test]
    fn jitter_stays_within_twenty_percent() {
        let base = ms(1000);
        assert_eq!(PollBounds::jittered(base, 0.0), ms(800));
        assert_eq!(PollBounds::jittered(base, 1.0), ms(1200));
        assert_eq!(PollBounds::jittered(base, f64::NAN), ms(1000));
        for i in 0..100 {
            let d = PollBounds::jittered(base, f64::from(i) / 100.0);
            assert!((ms(800)..=ms(1200)).contains(&d), "{d:?}");
        }
    }

    #[test]
    fn only_a_longest_interval_keeps_the_shortest_below_it() {
        assert_eq!(PollBounds::up_to(ms(100)).min, ms(100));
        assert_eq!(PollBounds::up_to(ms(5000)).min, DEFAULT_MIN);
    }

    #[test]
    fn the_documented_bound_of_the_defaults() {
        let bounds = PollBounds::default();
        // 250 ms × 0.8 = 200 ms: 300 reads a minute next in line, 150 one place back, 75 from
        // two places back on (1 s × 0.8).
        assert_eq!(bounds.reads_per_minute_at_most(0), 300);
        assert_eq!(bounds.reads_per_minute_at_most(1), 150);
        assert_eq!(bounds.reads_per_minute_at_most(2), 75);
        assert_eq!(bounds.reads_per_minute_at_most(40), 75);
    }
}
