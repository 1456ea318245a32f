//! The clock of a store server (PostgreSQL, Redis), read without a round trip of its own.
//!
//! Every reply of such a server can carry its time (`clock_timestamp()`, `TIME`). Keeping the
//! last reading with the local instant it arrived, the store estimates the server's time now as
//! that reading plus the local monotonic time since. Pairing the reading with its *arrival*
//! under-estimates by at most the reply's transit, so other clients judge a lease to end a
//! little late, never early: the holder's own safety margin stays intact. Only the first
//! operation of a process pays a round trip for the time (and a load returns it anyway).

use std::sync::Mutex;
use std::time::Instant;

use crate::StoreClock;

/// The last reading of a server's clock.
#[derive(Debug, Default)]
pub struct ServerClock {
    last: Mutex<Option<(u64, Instant)>>,
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

    /// Records a reading of `server_ms` that arrived at `arrived`.
    pub fn observe(&self, server_ms: u64, arrived: Instant) {
        if let Ok(mut last) = self.last.lock() {
            // Replies can arrive out of order on a pool: keep the one that arrived last.
            if last.is_none_or(|(_, at)| arrived >= at) {
                *last = Some((server_ms, arrived));
            }
        }
    }

    /// The server's time now, estimated from the last reading; `None` before the first.
    pub fn now(&self) -> Option<StoreClock> {
        let (ms, at) = (*self.last.lock().ok()?)?;
        Some(StoreClock::Time {
            now_ms: ms.saturating_add(at.elapsed().as_millis() as u64),
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
        let at = Instant::now();
        clock.observe(1_000_000, at);
        std::thread::sleep(Duration::from_millis(20));
        let Some(StoreClock::Time { now_ms, epoch }) = clock.now() else {
            panic!("a reading was recorded");
        };
        assert_eq!(epoch, "server");
        assert!((1_000_020..1_001_000).contains(&now_ms), "{now_ms}");
    }
}
