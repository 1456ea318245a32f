//! The tickets this process made through `baton serve`, remembered so that its reads of their
//! keys (the document, the feed, the store's clock) can name one by its secret token when the
//! bearer token no longer proves who is asking: a CI's ID token lives minutes, and the wait or
//! the turn it began may last longer. A server that trusts CI identities reads a key for
//! whoever names a live ticket of it, as it runs the operations on that ticket.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use baton_core::Op;

/// The header in which a request names a ticket by its secret token.
pub const TICKET_HEADER: &str = "baton-ticket";

/// Key to the secret token of the last ticket this process made there.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tickets(Arc<Mutex<BTreeMap<String, String>>>);

impl Tickets {
    /// Remembers the ticket `op` makes on `key`, before it is sent: a ticket whose enqueue's
    /// answer is lost may still be live.
    pub(crate) fn before(&self, key: &str, op: &Op) {
        if let Op::Enqueue(enqueue) = op {
            self.lock().insert(key.to_owned(), enqueue.token.clone());
        }
    }

    /// Forgets the ticket `op` released on `key`, once it was.
    pub(crate) fn released(&self, key: &str, op: &Op) {
        if let Op::Release { token, .. } = op {
            let mut tickets = self.lock();
            if tickets.get(key) == Some(token) {
                tickets.remove(key);
            }
        }
    }

    /// The token of this process's ticket on `key`.
    pub(crate) fn of(&self, key: &str) -> Option<String> {
        self.lock().get(key).cloned()
    }

    /// Some key this process has a ticket on, and its token.
    pub(crate) fn any(&self) -> Option<(String, String)> {
        let tickets = self.lock();
        tickets.iter().next().map(|(k, t)| (k.clone(), t.clone()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `request` naming `ticket`, if any.
pub(crate) fn naming(
    request: reqwest::RequestBuilder,
    ticket: Option<&str>,
) -> reqwest::RequestBuilder {
    match ticket {
        Some(token) => request.header(TICKET_HEADER, token),
        None => request,
    }
}
