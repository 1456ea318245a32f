//! Whether a process's job workers have lost claims to other workers lately: what the
//! coordinator remembers for `jobs::schedule`, in a module of its own so that the coordinator
//! imports nothing of the jobs.

/// How long after a lost claim a worker's looks start spread ([`ClaimRaces`]).
const RACES_LAST_MS: u64 = 1_000;

/// Whether the workers of a process have lost a claim to another worker lately. Workers that
/// look at the index at the same moment read the same first keys, and each would try the
/// first: one wins, and the others' claims are a write, a read of the key and a read of the
/// job's parameters wasted (on PostgreSQL about one a job, with 4 workers). While they lose,
/// each look tries its first few keys in a random order, as after a loss within a look; a
/// worker that does not lose (the only one, or one ahead of the others) serves in strict due
/// order.
#[derive(Debug, Default)]
pub(crate) struct ClaimRaces {
    /// The last loss, on this process's monotonic clock (0: none yet).
    last_lost_ms: std::sync::atomic::AtomicU64,
}

impl ClaimRaces {
    /// A claim was lost to another worker at `now_ms`.
    pub(crate) fn lost(&self, now_ms: u64) {
        self.last_lost_ms
            .store(now_ms.max(1), std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether a claim was lost within [`RACES_LAST_MS`] before `now_ms`.
    pub(crate) fn lately(&self, now_ms: u64) -> bool {
        let last = self.last_lost_ms.load(std::sync::atomic::Ordering::Relaxed);
        last != 0 && now_ms.saturating_sub(last) < RACES_LAST_MS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looks_spread_for_a_while_after_a_lost_claim_and_not_before() {
        let races = ClaimRaces::default();
        assert!(!races.lately(0), "no loss yet, even at the clock's start");
        assert!(!races.lately(50_000));
        races.lost(50_000);
        assert!(races.lately(50_000));
        assert!(races.lately(50_000 + RACES_LAST_MS - 1));
        assert!(
            !races.lately(50_000 + RACES_LAST_MS),
            "a second without a loss"
        );
        races.lost(0);
        assert!(
            races.lately(0),
            "a loss at the clock's very start counts too"
        );
    }
}
