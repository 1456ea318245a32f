//! What a key's arrivals watch has told: the arrivals pending as of a revision, so that a
//! pushed document can carry those pending at it, as a read would, and its holder's release
//! takes them in rather than losing its CAS to them.
//!
//! The arrivals come from a read of the key's arrivals at some revision (the *seed*) and the
//! events of a watch started just after it. etcd delivers one watch's events in revision order
//! and none twice, but says nothing of how two watches of one stream (the document's and the
//! arrivals') interleave, so a document at revision `d` is paired with the arrivals only when
//! they are surely those pending at `d` and after:
//!
//! - the arrivals are known as of `d` or later: every one created up to `d` is in, and every
//!   one taken in up to `d` is out (only a write of the document takes arrivals, in the same
//!   transaction, so at the document's own revision). A write that takes none from a pushed
//!   version that knew none pending puts the key's arrivals stamp, which the watch tells of as
//!   well: its document is known as soon as that comes, not at the next event of the arrivals
//!   (which any other write that takes none waits for: a create, one from a version that read
//!   none or another process's, an older baton's);
//! - no arrival was taken after `d`: that was a later write of the document, whose push is
//!   still to come, and whose taking would otherwise make arrivals pending at `d` look taken.
//!
//! Arrivals created after `d` may be among them: they are pending, and a CAS naming `d` takes
//! them as pending. Anything else and the document is pushed alone, naming none, as before.

use std::collections::BTreeMap;

/// One arrival: its etcd key and its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Arrival {
    pub(super) key: Vec<u8>,
    pub(super) bytes: Vec<u8>,
}

/// One event of the arrivals watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Event {
    /// An append: the arrival created at `created` (its revision, too: an arrival's key is put
    /// only while absent, so every put creates it).
    Created { created: i64, arrival: Arrival },
    /// A write of the document took the arrival of `key`, at `revision`.
    Taken { key: Vec<u8>, revision: i64 },
    /// A write of the document took none, at `revision` (it put the arrivals stamp).
    Stamped { revision: i64 },
}

impl Event {
    fn revision(&self) -> i64 {
        match self {
            Event::Created { created, .. } => *created,
            Event::Taken { revision, .. } | Event::Stamped { revision } => *revision,
        }
    }
}

/// The arrivals pending at a document, oldest first by creation revision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Pending {
    /// The revision they are known as of (at least the document's).
    pub(super) as_of: i64,
    pub(super) arrivals: Vec<(i64, Arrival)>,
}

impl Pending {
    /// Their creation revisions: what tells two pushes' arrivals apart.
    pub(super) fn creations(&self) -> Vec<i64> {
        self.arrivals.iter().map(|(created, _)| *created).collect()
    }
}

/// What the key's arrivals watch has told so far.
#[derive(Debug, Default)]
pub(super) struct WatchedArrivals {
    /// `None` until seeded, and again after a gap in the events (a reconnection, a cancel).
    known: Option<Known>,
}

#[derive(Debug)]
struct Known {
    /// By creation revision.
    pending: BTreeMap<i64, Arrival>,
    /// Every event up to this revision is in.
    as_of: i64,
    /// The latest revision at which an arrival was taken (deleted).
    last_taken: i64,
}

impl WatchedArrivals {
    /// Starts from a read at `revision` of the key's document, last written at `doc_revision`
    /// (0: none), and arrivals (`(creation revision, arrival)`). Any arrival taken before was
    /// taken by that write at the latest, so it counts as the last taking: a document older
    /// than it, pushed late, is not given these arrivals.
    pub(super) fn seed(&mut self, revision: i64, doc_revision: i64, arrivals: Vec<(i64, Arrival)>) {
        self.known = Some(Known {
            pending: arrivals.into_iter().collect(),
            as_of: revision,
            last_taken: doc_revision,
        });
    }

    /// Forgets everything: events may have gone by untold, so a new seed is needed.
    pub(super) fn forget(&mut self) {
        self.known = None;
    }

    /// Takes in the events of a response of the arrivals watch (started right after the seed),
    /// oldest first. The arrivals are then known as of the newest: a response holds every
    /// event of the revisions it tells of (the watch is made without fragments), and never
    /// more. Its header's revision may be later, but a watch catching up sends its events in
    /// batches each stamped with the current revision, so that says nothing. Events the seed
    /// already holds are passed over. Whether the arrivals pending changed.
    pub(super) fn apply(&mut self, events: &[Event]) -> bool {
        let Some(known) = self.known.as_mut() else {
            return false;
        };
        let mut changed = false;
        for event in events {
            let revision = event.revision();
            if revision <= known.as_of {
                continue;
            }
            match event {
                Event::Created {
                    created, arrival, ..
                } => {
                    known.pending.insert(*created, arrival.clone());
                }
                Event::Taken { key, revision } => {
                    known.pending.retain(|_, arrival| arrival.key != *key);
                    known.last_taken = known.last_taken.max(*revision);
                }
                Event::Stamped { .. } => continue,
            }
            changed = true;
        }
        let newest_event = events.iter().map(Event::revision).max().unwrap_or(0);
        known.as_of = known.as_of.max(newest_event);
        changed
    }

    /// The arrivals pending at the document of revision `doc_revision`, when surely known (see
    /// the module's doc).
    pub(super) fn at(&self, doc_revision: i64) -> Option<Pending> {
        let known = self.known.as_ref()?;
        if known.as_of < doc_revision || known.last_taken > doc_revision {
            return None;
        }
        Some(Pending {
            as_of: known.as_of,
            arrivals: known
                .pending
                .iter()
                .map(|(created, arrival)| (*created, arrival.clone()))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrival(name: &str) -> Arrival {
        Arrival {
            key: format!("q/k\0{name}").into_bytes(),
            bytes: name.as_bytes().to_vec(),
        }
    }

    fn created(name: &str, created: i64) -> Event {
        Event::Created {
            created,
            arrival: arrival(name),
        }
    }

    fn taken(name: &str, revision: i64) -> Event {
        Event::Taken {
            key: arrival(name).key,
            revision,
        }
    }

    fn names(pending: Option<Pending>) -> Option<Vec<String>> {
        pending.map(|pending| {
            let bytes = pending.arrivals.into_iter().map(|(_, a)| a.bytes);
            bytes
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .collect()
        })
    }

    #[test]
    fn nothing_is_known_before_the_seed_or_after_a_gap() {
        let mut watched = WatchedArrivals::default();
        assert_eq!(watched.at(1), None);
        assert!(!watched.apply(&[created("a", 3)]), "no seed: nothing taken");
        watched.seed(10, 4, vec![(5, arrival("a"))]);
        assert_eq!(names(watched.at(10)), Some(vec!["a".into()]));
        watched.forget();
        assert_eq!(watched.at(10), None);
    }

    #[test]
    fn a_document_gets_the_arrivals_only_once_they_are_known_as_of_it() {
        let mut watched = WatchedArrivals::default();
        watched.seed(10, 4, vec![(5, arrival("a")), (8, arrival("b"))]);
        assert_eq!(names(watched.at(9)), Some(vec!["a".into(), "b".into()]));
        assert_eq!(
            watched.at(11),
            None,
            "an append at 11 may not have been told yet"
        );
        assert!(watched.apply(&[created("c", 12)]));
        let at_11 = watched.at(11).expect("known as of 12");
        assert_eq!((at_11.as_of, at_11.creations()), (12, vec![5, 8, 12]));
        assert!(
            !watched.apply(&[]),
            "a response without events tells nothing"
        );
        assert_eq!(watched.at(20), None, "nor does its header's revision");
    }

    #[test]
    fn arrivals_taken_after_a_document_hide_the_arrivals_of_that_document() {
        let mut watched = WatchedArrivals::default();
        watched.seed(10, 4, vec![(5, arrival("a")), (8, arrival("b"))]);
        // A write of the document at 13 took a: the push of 10 would show b alone, as if a had
        // been taken before 10.
        assert!(watched.apply(&[taken("a", 13)]));
        assert_eq!(watched.at(10), None);
        assert_eq!(watched.at(12), None);
        assert_eq!(names(watched.at(13)), Some(vec!["b".into()]));
        assert!(watched.apply(&[created("c", 14), taken("b", 15), taken("c", 15)]));
        assert_eq!(names(watched.at(15)), Some(vec![]));
        assert_eq!(watched.at(15).expect("known as of 15").as_of, 15);
    }

    #[test]
    fn a_write_that_took_none_is_known_by_its_stamp() {
        let mut watched = WatchedArrivals::default();
        watched.seed(10, 4, vec![(5, arrival("a"))]);
        assert!(watched.apply(&[taken("a", 11)]));
        assert_eq!(
            watched.at(12),
            None,
            "a write at 12 may have taken one untold"
        );
        let stamp = Event::Stamped { revision: 12 };
        assert!(
            !watched.apply(&[stamp]),
            "a stamp leaves the arrivals pending"
        );
        let at_12 = watched.at(12).expect("known as of 12");
        assert_eq!((at_12.as_of, at_12.creations()), (12, vec![]));
        assert!(watched.apply(&[created("b", 13)]));
        assert_eq!(names(watched.at(12)), Some(vec!["b".into()]));
    }

    #[test]
    fn events_the_seed_holds_are_passed_over() {
        let mut watched = WatchedArrivals::default();
        watched.seed(10, 4, vec![(5, arrival("a"))]);
        assert!(!watched.apply(&[created("z", 9), taken("a", 10)]));
        assert!(!watched.apply(&[Event::Stamped { revision: 8 }]));
        assert_eq!(names(watched.at(10)), Some(vec!["a".into()]));
        assert_eq!(watched.at(10).expect("known as of 10").as_of, 10);
    }

    /// A key's history as etcd numbers it: revision 1 writes the document; each step after
    /// appends an arrival or writes the document taking the oldest `n` pending, putting the
    /// stamp when it takes none and `stamps` says so (a version that knew none pending; not an
    /// older baton, nor one that read none). An arrival takes the lowest slot no pending one
    /// holds, so names come back as the store's do.
    struct History {
        /// Per revision: the arrivals watch's events at it, and whether it wrote the document.
        events: Vec<(Vec<Event>, bool)>,
        /// Each arrival's name, by creation revision.
        names: BTreeMap<i64, String>,
    }

    impl History {
        fn of(steps: &[Option<(usize, bool)>]) -> History {
            let mut events = vec![(Vec::new(), true)];
            let mut names = BTreeMap::new();
            let mut pending: Vec<String> = Vec::new();
            for (index, step) in steps.iter().enumerate() {
                let revision = index as i64 + 2;
                events.push(match step {
                    None => {
                        let name = (0..)
                            .map(|n| format!("s{n}"))
                            .find(|name| !pending.contains(name))
                            .unwrap_or_default();
                        pending.push(name.clone());
                        names.insert(revision, name.clone());
                        (vec![created(&name, revision)], false)
                    }
                    Some((n, stamps)) => {
                        let taken_now = pending.drain(..(*n).min(pending.len()));
                        let mut events: Vec<Event> =
                            taken_now.map(|name| taken(&name, revision)).collect();
                        if events.is_empty() && *stamps {
                            events.push(Event::Stamped { revision });
                        }
                        (events, true)
                    }
                });
            }
            History { events, names }
        }

        /// The arrivals pending at `revision`, by creation revision.
        fn pending_at(&self, revision: i64) -> Vec<i64> {
            let mut pending = BTreeMap::new();
            for event in self
                .events
                .iter()
                .take(revision as usize)
                .flat_map(|(e, _)| e)
            {
                match event {
                    Event::Created { created, arrival } => {
                        pending.insert(arrival.key.clone(), *created);
                    }
                    Event::Taken { key, .. } => {
                        pending.remove(key);
                    }
                    Event::Stamped { .. } => {}
                }
            }
            let mut creations: Vec<i64> = pending.into_values().collect();
            creations.sort_unstable();
            creations
        }

        fn taken_between(&self, after: i64, through: i64) -> bool {
            let range = (after as usize)..(through as usize);
            self.events[range]
                .iter()
                .any(|(events, _)| events.iter().any(|e| matches!(e, Event::Taken { .. })))
        }

        fn seed_at(&self, revision: i64) -> Vec<(i64, Arrival)> {
            let mut seed: Vec<(i64, Arrival)> = Vec::new();
            for created in self.pending_at(revision) {
                seed.push((created, arrival(&self.names[&created])));
            }
            seed
        }
    }

    proptest::proptest! {
        /// However the document's events and the arrivals' (each in order) interleave, a
        /// document is given arrivals only when they are exactly those pending as of a
        /// revision at or after it with none taken in between (what a CAS naming that document
        /// takes, and all it may take); and once the arrivals watch has caught up, the latest
        /// document gets them.
        #[test]
        fn a_document_gets_exactly_the_arrivals_pending_at_it_and_after(
            steps in proptest::collection::vec(
                proptest::option::of((0usize..3, proptest::bool::ANY)),
                0..24,
            ),
            seed_step in 0usize..25,
            schedule in proptest::collection::vec(proptest::bool::ANY, 0..64),
            batches in proptest::collection::vec(1usize..4, 0..64),
        ) {
            let history = History::of(&steps);
            let last = history.events.len() as i64;
            let seed = (seed_step as i64 + 1).min(last);
            let writes = |r: &i64| history.events[*r as usize - 1].1;
            let written = (1..=seed).rev().find(writes).unwrap_or(0);
            let mut watched = WatchedArrivals::default();
            watched.seed(seed, written, history.seed_at(seed));
            // The document's watch, made before the seed, tells of every write; the arrivals'
            // of the revisions after the seed that changed or stamped them.
            let mut docs = (1..=last).filter(writes).peekable();
            let told = |r: &i64| !history.events[*r as usize - 1].0.is_empty();
            let mut arrivals = (seed + 1..=last).filter(told).peekable();
            let mut doc = None;
            let mut told_through = seed;
            let mut turns = schedule.into_iter().chain(std::iter::repeat(true));
            let mut sizes = batches.into_iter().chain(std::iter::repeat(1));
            while docs.peek().is_some() || arrivals.peek().is_some() {
                let doc_next = turns.next().unwrap_or(true);
                if (doc_next || arrivals.peek().is_none()) && docs.peek().is_some() {
                    doc = docs.next();
                } else {
                    // One response: the events of the next few revisions told, as a watch
                    // catching up sends them.
                    let batch: Vec<i64> = arrivals.by_ref().take(sizes.next().unwrap_or(1)).collect();
                    let events: Vec<Event> = batch
                        .iter()
                        .flat_map(|r| history.events[*r as usize - 1].0.clone())
                        .collect();
                    watched.apply(&events);
                    told_through = batch.last().copied().unwrap_or(told_through);
                }
                let Some(d) = doc else { continue };
                if let Some(pending) = watched.at(d) {
                    proptest::prop_assert!(pending.as_of >= d);
                    proptest::prop_assert!(!history.taken_between(d, pending.as_of));
                    proptest::prop_assert_eq!(pending.creations(), history.pending_at(pending.as_of));
                }
            }
            // Everything told: the latest document gets the arrivals once an event at or after
            // it was told.
            let latest = doc.unwrap_or(1);
            let expected = (told_through >= latest).then(|| history.pending_at(last));
            proptest::prop_assert_eq!(
                watched.at(latest).map(|pending| pending.creations()),
                expected
            );
        }
    }
}
