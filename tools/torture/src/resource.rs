//! The protected resource: what a lock guards, written to by holders with their fences.
//!
//! A holder calls [`Resource::begin`] when it starts using a key (with its fence and mode) and
//! [`Resource::end`] when it stops. On a mutex key (`fenced`), a begin with a fence below the
//! highest accepted for that key is rejected, as a storage system that remembers the highest
//! fence would reject a writer that lost its lease while paused. Everything accepted is
//! recorded as an [`Interval`] for the checker; rejections are counted, since they are the
//! fence doing its job, not a violation.

use std::collections::HashMap;

use crate::{Interval, Mode};

/// Why a begin was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejected {
    /// The fence is below the highest this key has accepted.
    StaleFence {
        /// The fence offered.
        fence: u64,
        /// The highest accepted so far.
        highest: u64,
    },
    /// The ticket is already using the key.
    AlreadyBegun,
}

/// The resource's state and records.
#[derive(Debug, Default)]
pub struct Resource {
    /// Keys whose writes are checked against the highest fence (mutex keys).
    fenced: HashMap<String, bool>,
    highest: HashMap<String, u64>,
    open: HashMap<(String, String), Interval>,
    accepted: Vec<Interval>,
    rejected: Vec<(String, String, Rejected)>,
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

    /// `ticket` starts using `key` at `now_ns` with `fence`.
    pub fn begin(
        &mut self,
        key: &str,
        ticket: &str,
        fence: u64,
        mode: Mode,
        now_ns: u64,
    ) -> Result<(), Rejected> {
        let id = (key.to_owned(), ticket.to_owned());
        let refused = if self.open.contains_key(&id) {
            Some(Rejected::AlreadyBegun)
        } else {
            match self.highest.get(key) {
                Some(&highest) if self.is_fenced(key) && fence < highest => {
                    Some(Rejected::StaleFence { fence, highest })
                }
                _ => None,
            }
        };
        if let Some(refused) = refused {
            self.rejected.push((id.0, id.1, refused.clone()));
            return Err(refused);
        }
        let highest = self.highest.entry(key.to_owned()).or_default();
        *highest = (*highest).max(fence);
        self.open.insert(
            id,
            Interval {
                key: key.to_owned(),
                ticket: ticket.to_owned(),
                fence,
                mode,
                start_ns: now_ns,
                end_ns: now_ns,
            },
        );
        Ok(())
    }

    /// `ticket` stops using `key` at `now_ns`; false if it had not begun (or was rejected).
    pub fn end(&mut self, key: &str, ticket: &str, now_ns: u64) -> bool {
        match self.open.remove(&(key.to_owned(), ticket.to_owned())) {
            Some(mut interval) => {
                interval.end_ns = now_ns.max(interval.start_ns);
                self.accepted.push(interval);
                true
            }
            None => false,
        }
    }

    /// Ends every open interval at `now_ns` (a holder killed mid-use never says it is done:
    /// its use lasts, as far as anyone can tell, until the run ends).
    pub fn close_all(&mut self, now_ns: u64) {
        let open: Vec<_> = self.open.keys().cloned().collect();
        for (key, ticket) in open {
            self.end(&key, &ticket, now_ns);
        }
    }

    /// Every accepted interval that has ended, in the order they ended.
    pub fn accepted(&self) -> &[Interval] {
        &self.accepted
    }

    /// Every rejected begin: key, ticket, why.
    pub fn rejected(&self) -> &[(String, String, Rejected)] {
        &self.rejected
    }

    fn is_fenced(&self, key: &str) -> bool {
        self.fenced.get(key).copied().unwrap_or(true)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;

    fn mutex() -> Resource {
        Resource::new([("m".to_owned(), true), ("s".to_owned(), false)])
    }

    #[test]
    fn a_stale_fence_is_rejected_on_a_mutex_and_recorded_as_such() {
        let mut resource = mutex();
        resource.begin("m", "a", 10, Mode::Normal, 1).unwrap();
        resource.end("m", "a", 2);
        resource.begin("m", "b", 20, Mode::Normal, 3).unwrap();
        // The paused holder of fence 10 comes back while 20 holds.
        assert_eq!(
            resource.begin("m", "a2", 10, Mode::Normal, 4),
            Err(Rejected::StaleFence {
                fence: 10,
                highest: 20
            })
        );
        assert!(
            !resource.end("m", "a2", 5),
            "a rejected use has nothing to end"
        );
        resource.end("m", "b", 6);
        let tickets: Vec<_> = resource.accepted().iter().map(|i| &i.ticket).collect();
        assert_eq!(tickets, ["a", "b"]);
        assert_eq!(resource.rejected().len(), 1);
    }

    #[test]
    fn unfenced_keys_accept_any_fence() {
        let mut resource = mutex();
        resource.begin("s", "a", 20, Mode::Shared, 1).unwrap();
        resource.begin("s", "b", 10, Mode::Shared, 1).unwrap();
        resource.close_all(5);
        assert_eq!(resource.accepted().len(), 2);
        assert!(resource.accepted().iter().all(|i| i.end_ns == 5));
    }

    #[test]
    fn a_ticket_cannot_begin_twice() {
        let mut resource = mutex();
        resource.begin("m", "a", 1, Mode::Normal, 1).unwrap();
        assert_eq!(
            resource.begin("m", "a", 1, Mode::Normal, 2),
            Err(Rejected::AlreadyBegun)
        );
    }
}
