//! What a grant or a renewal tells a client, and the one rule the client keeps with it.
//!
//! The server knows, on its own clock, until when a lease surely stands (`holds_until_ms`,
//! counted by the client library's rules from before the write that set it). A client cannot
//! read that clock, but it knows when it sent its request, which was before the server received
//! it. So the server answers with durations relative to its receipt, and the client counts
//! them from before its send:
//!
//! ```text
//! usable until = sent + lease_ms - started_before_ms - margin_ms
//! ```
//!
//! `lease_ms - started_before_ms` is how long after the receipt the server's bound lies, so
//! the client's bound is never later than the server's (the receipt came after the send).
//! `margin_ms` covers the two clocks counting at slightly different rates over the lease.
//!
//! A grant that came after the ticket queued is answered with `renew_first`: its lease began
//! after the request was sent, perhaps long after, and a bound counted from the send would either run out at once or,
//! on a clock that stops while the machine sleeps, be trusted too long. The client claims it
//! with a renewal first and counts from before that renewal's send.

use baton_client::turn::{Lease, Renewed};
use baton_core::lease::safety_margin_ms;
use serde::Serialize;

/// The counted part of a grant's or a renewal's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Counted {
    /// The lease's duration.
    pub lease_ms: u64,
    /// How long before the server received the request the lease began counting, for the
    /// client's bound ([`Counted::new`]).
    pub started_before_ms: u64,
    /// The client's safety margin: its bound is this much short of the server's.
    pub margin_ms: u64,
    /// The grant came after a wait: renew before acting on it, and count from that renewal.
    pub renew_first: bool,
}

impl Counted {
    /// The answer for a lease of `ttl_ms` that stands until `holds_until_ms`, on the server's
    /// clock, for a request received at `received_ms`; `renew_first` when the grant came after
    /// the ticket had queued.
    pub fn new(ttl_ms: u64, holds_until_ms: u64, received_ms: u64, renew_first: bool) -> Counted {
        Counted {
            lease_ms: ttl_ms,
            // A lease that began after the receipt counts from the receipt: shorter, so safe.
            started_before_ms: (received_ms + ttl_ms).saturating_sub(holds_until_ms),
            margin_ms: safety_margin_ms(ttl_ms),
            renew_first,
        }
    }

    /// The answer for a grant; `waited`: the ticket queued before it was granted.
    pub fn of_lease(lease: &Lease, received_ms: u64, waited: bool) -> Counted {
        Counted::new(lease.ttl_ms, lease.holds_until_ms, received_ms, waited)
    }

    /// The answer for a renewal: never to be renewed first, it is the renewal.
    pub fn of_renewal(renewed: &Renewed, received_ms: u64) -> Counted {
        Counted::new(renewed.ttl_ms, renewed.holds_until_ms, received_ms, false)
    }

    /// The client's bound, on the client's clock, for a request it sent at `sent_ms`: the rule
    /// every client keeps (here for the tests that hold the server to it).
    #[cfg(test)]
    pub fn usable_until(&self, sent_ms: u64) -> u64 {
        (sent_ms + self.lease_ms).saturating_sub(self.started_before_ms + self.margin_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever the delays on the way there and back, and however long after the receipt the
    /// lease began, the client's bound is never later than the server's; a lease that began
    /// at once is usable for its TTL less the two margins.
    #[test]
    fn the_clients_bound_is_never_later_than_the_servers() {
        let ttl = 30_000;
        let server_margin = safety_margin_ms(ttl);
        for received_after_send in [0, 5, 900, 29_000, 40_000] {
            for began_after_receipt in [0, 10, 300, 5_000, 600_000] {
                let sent = 1_000_000;
                let received = sent + received_after_send;
                let holds_until = received + began_after_receipt + ttl - server_margin;
                let counted = Counted::new(ttl, holds_until, received, false);
                assert!(counted.usable_until(sent) <= holds_until);
            }
        }
        let at_once = Counted::new(ttl, 2_000 + ttl - server_margin, 2_000, false);
        assert_eq!(at_once.started_before_ms, server_margin);
        assert_eq!(
            at_once.usable_until(2_000),
            2_000 + ttl - server_margin - at_once.margin_ms
        );
    }
}
