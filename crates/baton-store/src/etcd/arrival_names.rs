//! The names an append gives its arrival's etcd key (`P/q/K\x00NAME`).
//!
//! etcd's index keeps every key ever written until it compacts past it, a deleted one too, and
//! a read of a range visits each kept key in it. Were every arrival named anew, a hot key's
//! arrivals range would hold one more dead key for each turn taken in, and every read of the key
//! would grow slower until etcd compacts (an hour, in a common setting). So an arrival takes a
//! *slot*, `s0`, `s1`, …, one free when it is put: the put is conditional on the name not
//! existing (`create_revision == 0`), so it never overwrites a pending arrival, and a key's
//! names come back turn after turn, as many as it ever had pending at once and a few spare.
//!
//! A slot is chosen at random among the lowest free ones, as far as this store last knew the
//! key's arrivals, so that appenders racing on a key rarely pick the same. One that finds its
//! slot taken learns the key's arrivals from the same answer and tries another; after
//! [`SLOT_TRIES`] it takes a name no other append uses, as baton did before slots, which
//! every reader still takes (arrivals are read in creation order, whatever their names). One
//! that finds its own arrival in its slot has landed: the same try, sent again after an error
//! that said it was not sent.

use std::hash::{BuildHasher, RandomState};

/// How many slots are offered beside those known taken: the chance that two appenders who
/// know the same arrivals pick the same slot is one in this.
const SPARE_SLOTS: usize = 16;

/// Slot names an append tries before a name of its own.
pub(super) const SLOT_TRIES: usize = 2;

/// The name of slot `n`.
pub(super) fn slot(n: usize) -> String {
    format!("s{n}")
}

/// The slot a name is, if it is one.
fn slot_of(name: &[u8]) -> Option<usize> {
    let digits = name.strip_prefix(b"s")?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// A free slot for an append, given the names (after the key's arrivals prefix) of the
/// arrivals known pending: one of the lowest `taken + SPARE_SLOTS` not among them, at random.
pub(super) fn free_slot<'a>(pending: impl IntoIterator<Item = &'a [u8]>) -> usize {
    let mut taken: Vec<usize> = pending.into_iter().filter_map(slot_of).collect();
    taken.sort_unstable();
    taken.dedup();
    let offered = taken.len() + SPARE_SLOTS;
    let free: Vec<usize> = (0..offered)
        .filter(|n| taken.binary_search(n).is_err())
        .collect();
    // At least SPARE_SLOTS of the `offered` are free, so `free` is never empty.
    free[random_below(free.len())]
}

/// A number below `n` (n > 0), different from call to call: std's hasher keys are random per
/// process and rise per call, which is all a spread of slots needs.
fn random_below(n: usize) -> usize {
    let drawn = RandomState::new().hash_one(0u8);
    (drawn % n.max(1) as u64) as usize
}

/// A name no other append uses: this process, the time and a count. Two appends that met
/// under one name could not both be put (the put is conditional), so this is the last resort
/// of an append whose slots were taken.
pub(super) fn unique() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}-{nanos}-{n}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn a_slot_name_reads_back_and_nothing_else_is_a_slot() {
        for n in [0, 7, 123] {
            assert_eq!(slot_of(slot(n).as_bytes()), Some(n));
        }
        for other in [
            "",
            "s",
            "s-1",
            "s1x",
            "12-345-6",
            "S1",
            "s99999999999999999999999",
        ] {
            assert_eq!(slot_of(other.as_bytes()), None, "{other:?}");
        }
        assert!(slot_of(unique().as_bytes()).is_none());
    }

    #[test]
    fn a_free_slot_is_never_one_known_taken_and_stays_among_the_lowest() {
        let pending = ["s0", "s2", "s3", "12-345-6", "s40"];
        let names: Vec<&[u8]> = pending.iter().map(|name| name.as_bytes()).collect();
        let mut chosen = HashSet::new();
        for _ in 0..2_000 {
            let n = free_slot(names.iter().copied());
            assert!(![0, 2, 3, 40].contains(&n), "{n} is taken");
            // Four slots taken, so the lowest 20 are offered.
            assert!(n < 4 + SPARE_SLOTS, "{n} is beyond the offered");
            chosen.insert(n);
        }
        assert_eq!(
            chosen.len(),
            4 + SPARE_SLOTS - 3,
            "every free one offered is chosen"
        );
    }

    #[test]
    fn with_none_known_the_spare_slots_are_offered() {
        let chosen: HashSet<usize> = (0..2_000).map(|_| free_slot([])).collect();
        assert_eq!(chosen, (0..SPARE_SLOTS).collect());
    }

    #[test]
    fn unique_names_differ() {
        let names: HashSet<String> = (0..1_000).map(|_| unique()).collect();
        assert_eq!(names.len(), 1_000);
    }
}
