//! The protected resource: what a lock guards, written to by holders with their fences.
//!
//! A holder writes to a key again and again while it holds it ([`Resource::write`], with its
//! fence and mode) and says when it is done ([`Resource::end`]). On a mutex key (`fenced`) a
//! write with a fence below the highest accepted for that key is rejected, as a storage system
//! that remembers the highest fence rejects a writer that lost its lease while paused; the
//! ticket is then done with the key (it may not write again).
//!
//! What is recorded is what the resource *accepted*: a hold's [`Interval`] runs from its first
//! accepted write to its last, whatever the holder did in between or afterwards. A holder paused
//! mid-hold whose next write is rejected held the key only up to its last accepted write; one
//! killed mid-hold held it up to its last write too. That is the property a fenced lock gives
//! and the checker proves. Rejections are kept apart: they are the fence doing its job, and a
//! run without pauses should show none.

use std::collections::{HashMap, HashSet};

use crate::{Interval, Mode};

/// Why a write was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejected {
    /// The fence is below the highest this key has accepted.
    StaleFence {
        /// The fence offered.
        fence: u64,
        /// The highest accepted so far.
        highest: u64,
    },
    /// The ticket already ended its use of the key, or was fenced off.
    Ended,
}

/// One refused write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The key.
    pub key: String,
    /// The ticket that wrote.
    pub ticket: String,
    /// The client process that wrote (`cC-rR`).
    pub who: String,
    /// Why.
    pub why: Rejected,
    /// When (ns on the run's clock).
    pub at_ns: u64,
}

/// A hold in progress, as the fault injector sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// The key.
    pub key: String,
    /// The client process (`cC-rR`).
    pub who: String,
    /// The ticket.
    pub ticket: String,
}

/// The resource's state and records.
#[derive(Debug, Default)]
pub struct Resource {
    /// Keys whose writes are checked against the highest fence (mutex keys).
    fenced: HashMap<String, bool>,
    highest: HashMap<String, u64>,
    open: HashMap<(String, String), Interval>,
    done: HashSet<(String, String)>,
    accepted: Vec<Interval>,
    rejected: Vec<Rejection>,
    writes: u64,
}

impl Resource {
    /// A resource whose keys are fenced (mutex) or not (semaphores and shared keys, where
    /// several holders write at once and fences only order each holder's own writes).
    pub fn new(keys: impl IntoIterator<Item = (String, bool)>) -> Resource {
        Resource {
            fenced: keys.into_iter().collect(),
            ..Resource::default()
        }
    }

    /// `ticket` (of client process `who`) writes to `key` at `now_ns` with `fence`: the first
    /// accepted write begins its interval, each later one extends it.
    pub fn write(
        &mut self,
        key: &str,
        ticket: &str,
        who: &str,
        fence: u64,
        mode: Mode,
        now_ns: u64,
    ) -> Result<(), Rejected> {
        let id = (key.to_owned(), ticket.to_owned());
        let refused = if self.done.contains(&id) {
            Some(Rejected::Ended)
        } else {
            match self.highest.get(key) {
                Some(&highest) if self.is_fenced(key) && fence < highest => {
                    Some(Rejected::StaleFence { fence, highest })
                }
                _ => None,
            }
        };
        if let Some(why) = refused {
            self.rejected.push(Rejection {
                key: key.to_owned(),
                ticket: ticket.to_owned(),
                who: who.to_owned(),
                why: why.clone(),
                at_ns: now_ns,
            });
            // A fenced-off writer is done: whatever it held ends at its last accepted write.
            self.end(key, ticket);
            return Err(why);
        }
        self.writes += 1;
        let highest = self.highest.entry(key.to_owned()).or_default();
        *highest = (*highest).max(fence);
        // The interval is half-open: it covers the nanosecond of its last write.
        self.open
            .entry(id)
            .and_modify(|open| open.end_ns = now_ns + 1)
            .or_insert_with(|| Interval {
                key: key.to_owned(),
                ticket: ticket.to_owned(),
                who: who.to_owned(),
                fence,
                mode,
                start_ns: now_ns,
                end_ns: now_ns + 1,
            });
        Ok(())
    }

    /// `ticket` is done with `key` (it said so, its connection closed, or it was fenced off):
    /// its interval ends at its last accepted write. False if it had no interval open.
    pub fn end(&mut self, key: &str, ticket: &str) -> bool {
        let id = (key.to_owned(), ticket.to_owned());
        let interval = self.open.remove(&id);
        self.done.insert(id);
        match interval {
            Some(interval) => {
                self.accepted.push(interval);
                true
            }
            None => false,
        }
    }

    /// Answers one line of the resource's protocol (see [`crate::work`]) from client process
    /// `who` at `now_ns`: `WRITE KEY TICKET FENCE MODE` or `END KEY TICKET`. `made` collects the
    /// holds the connection made, to end them when it closes. `None` for any other line.
    pub fn answer(
        &mut self,
        who: &str,
        words: &[&str],
        now_ns: u64,
        made: &mut HashSet<(String, String)>,
    ) -> Option<String> {
        Some(match words {
            ["WRITE", key, ticket, fence, mode] => match fence.parse::<u64>() {
                Ok(fence) => {
                    let mode = if *mode == "shared" {
                        Mode::Shared
                    } else {
                        Mode::Normal
                    };
                    made.insert(((*key).to_owned(), (*ticket).to_owned()));
                    match self.write(key, ticket, who, fence, mode, now_ns) {
                        Ok(()) => "OK".to_owned(),
                        Err(why) => format!("REJECTED {why:?}"),
                    }
                }
                Err(_) => format!("ERROR bad fence {fence}"),
            },
            ["END", key, ticket] => {
                self.end(key, ticket);
                "OK".to_owned()
            }
            _ => return None,
        })
    }

    /// Ends every open interval (at the end of a run).
    pub fn close_all(&mut self) {
        let open: Vec<_> = self.open.keys().cloned().collect();
        for (key, ticket) in open {
            self.end(&key, &ticket);
        }
    }

    /// The holds in progress.
    pub fn holders(&self) -> Vec<Holder> {
        let mut holders: Vec<Holder> = self
            .open
            .values()
            .map(|i| Holder {
                key: i.key.clone(),
                who: i.who.clone(),
                ticket: i.ticket.clone(),
            })
            .collect();
        holders.sort_by(|a, b| a.who.cmp(&b.who));
        holders
    }

    /// Every accepted interval that has ended, in the order they ended.
    pub fn accepted(&self) -> &[Interval] {
        &self.accepted
    }

    /// Every refused write.
    pub fn rejected(&self) -> &[Rejection] {
        &self.rejected
    }

    /// How many writes were accepted.
    pub fn writes(&self) -> u64 {
        self.writes
    }

    fn is_fenced(&self, key: &str) -> bool {
        self.fenced.get(key).copied().unwrap_or(true)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;

    fn resource() -> Resource {
        Resource::new([("m".to_owned(), true), ("s".to_owned(), false)])
    }

    #[test]
    fn a_paused_holder_is_fenced_off_and_held_only_up_to_its_last_accepted_write() {
        let mut r = resource();
        r.write("m", "a", "c0", 10, Mode::Normal, 1).unwrap();
        r.write("m", "a", "c0", 10, Mode::Normal, 2).unwrap();
        // a pauses; b is granted a higher fence and writes.
        r.write("m", "b", "c1", 20, Mode::Normal, 5).unwrap();
        // a wakes up and writes again: refused, and done.
        assert_eq!(
            r.write("m", "a", "c0", 10, Mode::Normal, 6),
            Err(Rejected::StaleFence {
                fence: 10,
                highest: 20
            })
        );
        assert_eq!(
            r.write("m", "a", "c0", 10, Mode::Normal, 7),
            Err(Rejected::Ended)
        );
        r.write("m", "b", "c1", 20, Mode::Normal, 8).unwrap();
        assert!(r.end("m", "b"));
        assert!(!r.end("m", "a"), "a was closed when it was fenced off");
        let spans: Vec<_> = r
            .accepted()
            .iter()
            .map(|i| (i.ticket.as_str(), i.start_ns, i.end_ns))
            .collect();
        assert_eq!(spans, [("a", 1, 3), ("b", 5, 9)]);
        assert_eq!(r.rejected().len(), 2);
        assert_eq!(r.writes(), 4);
    }

    #[test]
    fn unfenced_keys_accept_any_fence() {
        let mut r = resource();
        r.write("s", "a", "c0", 20, Mode::Shared, 1).unwrap();
        r.write("s", "b", "c1", 10, Mode::Shared, 1).unwrap();
        assert_eq!(r.holders().len(), 2);
        r.close_all();
        assert_eq!(r.accepted().len(), 2);
        assert!(r.holders().is_empty());
    }

    #[test]
    fn a_ticket_cannot_write_after_it_ended() {
        let mut r = resource();
        r.write("m", "a", "c0", 1, Mode::Normal, 1).unwrap();
        assert!(r.end("m", "a"));
        assert_eq!(
            r.write("m", "a", "c0", 1, Mode::Normal, 2),
            Err(Rejected::Ended)
        );
    }
}
