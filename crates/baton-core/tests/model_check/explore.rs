//! The explorer: breadth-first over every state reachable from the start, each state known by
//! a digest of what decides its future; the first state that breaks a check is reported with
//! the path that led to it.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Instant;

use sha2::{Digest as _, Sha256};

use crate::world::{self, Setup, Step, World};

/// The bytes a state is known by, hashed once at the end (hash compaction, as model checkers
/// do to fit large worlds in memory: a 128-bit digest, so a collision, which would skip one
/// state, is far less likely than any other failure). Written field by field, in a fixed
/// order, never through `Debug` (formatting was most of the explorer's time).
pub struct Digest(Vec<u8>);

impl Default for Digest {
    fn default() -> Self {
        Digest(Vec::with_capacity(2048))
    }
}

impl Digest {
    pub fn u64(&mut self, value: u64) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }

    pub fn u8(&mut self, value: u8) {
        self.0.push(value);
    }

    pub fn str(&mut self, value: &str) {
        self.u64(value.len() as u64);
        self.0.extend_from_slice(value.as_bytes());
    }

    pub fn opt(&mut self, value: Option<u64>) {
        match value {
            Some(value) => {
                self.u8(1);
                self.u64(value);
            }
            None => self.u8(0),
        }
    }

    pub fn finish(self) -> u128 {
        let digest = Sha256::digest(&self.0);
        u128::from_le_bytes(digest[..16].try_into().unwrap())
    }
}

/// A hasher for keys that are digests already: their low bits are the hash.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u128(&mut self, value: u128) {
        self.0 = value as u64;
    }
}

/// A bound on the states of one world, so that a world made too large fails in seconds instead
/// of exhausting the machine's memory (a state takes about 500 bytes with its queue entry).
const STATES_MAX: usize = 12_000_000;

type Seen = HashMap<u128, (u128, Step), BuildHasherDefault<Prehashed>>;

/// Explores every state reachable from the start of `setup`; panics with the path to the first
/// state that breaks a check. Prints and returns how many states there were.
pub fn explore(setup: &Setup) -> usize {
    let started = Instant::now();
    world::forget_memo();
    let start = World::start(setup);
    // Every state seen, with the state it was first reached from and the step (the path to a
    // broken state is rebuilt by following parents).
    let mut seen = Seen::default();
    let mut queue: VecDeque<(World, u128)> = VecDeque::new();
    let start_key = start.key(setup);
    seen.insert(start_key, (start_key, Step::start()));
    queue.push_back((start, start_key));
    while let Some((world, key)) = queue.pop_front() {
        if let Err(broken) = world.check(setup) {
            let path = path_to(&seen, start_key, key);
            panic!(
                "{}: {broken}\nafter {} steps: {}\nstate: {world:#?}",
                setup.name,
                path.len(),
                path.join(" → ")
            );
        }
        for (step, next) in world.successors(setup) {
            let next_key = next.key(setup);
            if let Entry::Vacant(entry) = seen.entry(next_key) {
                entry.insert((key, step));
                queue.push_back((next, next_key));
            }
        }
        assert!(
            seen.len() <= STATES_MAX,
            "{}: more than {STATES_MAX} states: shrink the world",
            setup.name
        );
    }
    println!(
        "{}: {} states in {:.1} s",
        setup.name,
        seen.len(),
        started.elapsed().as_secs_f64()
    );
    seen.len()
}

/// The steps from the start to `key`.
fn path_to(seen: &Seen, start: u128, key: u128) -> Vec<String> {
    let mut path = Vec::new();
    let mut at = key;
    while at != start {
        let (parent, step) = &seen[&at];
        path.push(step.to_string());
        at = *parent;
    }
    path.reverse();
    path
}
