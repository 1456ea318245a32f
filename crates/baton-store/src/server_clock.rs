//! The clock of a store server (PostgreSQL, Redis), read without a round trip of its own.
//!
//! Every reply of such a server can carry its time (`clock_timestamp()`, `TIME`). Keeping the
//! last reading with the local instant it arrived, the store estimates the server's time now as
//! that reading plus the local time since — on the boot-time clock ([`BootInstant`]), which
//! counts a suspend as the server's clock does (the monotonic clock stops, and an estimate made
//! after a resume would lag the server by the whole suspend, unaccounted). Pairing the reading with its *arrival*
//! under-estimates by at most the reply's transit, so other clients judge a lease to end a
//! little late, never early: the holder's own safety margin stays intact. How far it may be
//! behind (the round trip of the request that carried it) goes with every estimate, for the
//! one who must bound the server's time from above (a waiter trusting another's grant). Only the first
//! operation of a process pays a round trip for the time (and a load returns it anyway).

use std::sync::Mutex;

use crate::boot_clock::BootInstant;
use crate::StoreClock;

/// The last reading of a server's clock.
#[derive(Debug, Default)]
pub struct ServerClock {
    /// The reading, when its reply arrived, and the round trip of the request that carried it.
    last: Mutex<Option<(u64, BootInstant, u64)>>,
    epoch: String,
}

impl ServerClock {
    /// A clock named `epoch` (deadlines on another epoch are void), with no reading yet.
    pub fn new(epoch: impl Into<String>) -> ServerClock {
        ServerClock {
            last: Mutex::new(None),
            epoch: epoch.into(),
        }
    }

    /// Records a reading of `server_ms` carried by the reply to a request sent at `sent` that
    /// arrived at `arrived`. The server read its clock between the two, so the estimates made
    /// from this reading are behind the server's time by at most the round trip.
    pub fn observe(&self, server_ms: u64, sent: BootInstant, arrived: BootInstant) {
        // Rounded up: the bound must not be short by a fraction.
        let round_trip_ms = arrived.micros_since(sent).div_ceil(1000);
        if let Ok(mut last) = self.last.lock() {
            // Replies can arrive out of order on a pool: keep the one that arrived last.
            if last.is_none_or(|(_, at, _)| arrived >= at) {
                *last = Some((server_ms, arrived, round_trip_ms));
            }
        }
    }

    /// The server's time now, estimated from the last reading; `None` before the first.
    pub fn now(&self) -> Option<StoreClock> {
        let (ms, at, round_trip_ms) = (*self.last.lock().ok()?)?;
        Some(StoreClock::Time {
            // Rounded down: never ahead of the server.
            now_ms: ms.saturating_add(at.elapsed_micros() / 1000),
            behind_ms: round_trip_ms,
            epoch: self.epoch.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn estimates_advance_with_local_time() {
        let clock = ServerClock::new("server");
        assert_eq!(clock.now(), None);
        let at = BootInstant::now();
        clock.observe(1_000_000, at, at);
        std::thread::sleep(Duration::from_millis(20));
        let Some(StoreClock::Time { now_ms, epoch, .. }) = clock.now() else {
            panic!("a reading was recorded");
        };
        assert_eq!(epoch, "server");
        assert!((1_000_020..1_001_000).contains(&now_ms), "{now_ms}");
    }

    #[test]
    fn a_reading_is_behind_by_at_most_its_round_trip() {
        let clock = ServerClock::new("server");
        let sent = BootInstant::now();
        // A reply held back for three seconds (a network's black hole, say): the server may
        // have read its clock at any moment of them.
        let arrived = sent.plus_micros(3_000_001);
        clock.observe(1_000_000, sent, arrived);
        let Some(StoreClock::Time { behind_ms, .. }) = clock.now() else {
            panic!("a reading was recorded");
        };
        assert_eq!(behind_ms, 3_001, "rounded up, never down");
        // A later reply with a quick round trip replaces it.
        let sent = arrived;
        clock.observe(1_003_000, sent, sent.plus_micros(200));
        let Some(StoreClock::Time { behind_ms, .. }) = clock.now() else {
            panic!("a reading was recorded");
        };
        assert_eq!(behind_ms, 1);
    }
}
