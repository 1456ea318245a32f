//! The caller's clocks: wall time for display and the hybrid fence, a monotonic clock for
//! observation, and the local clock on which a process keeps its own safety deadlines; and the
//! core's clock made from a reading of the store's (`core_clock`).

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use baton_core::{Clock, Observer};
use baton_store::StoreClock;

/// Milliseconds since the Unix epoch on this machine's wall clock (0 if it is before 1970).
pub fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Whole milliseconds of a duration a caller gave, saturating: a duration too long to count
/// in milliseconds is refused by the core's limits, never wrapped into a short one.
pub fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Milliseconds on this process's monotonic clock.
pub(crate) fn mono_ms() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    ORIGIN.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// The clock a process keeps its own safety deadlines on (when its lease surely stands): it
/// never steps, and it keeps counting while the machine is suspended, as the store's clock
/// does. `Instant` (`CLOCK_MONOTONIC`) stops during a suspend: a laptop resumed after an hour
/// would believe it still held a lease that ended long ago. Tests replace it to suspend a
/// process without suspending the machine.
pub trait LocalClock: Send + Sync + std::fmt::Debug {
    /// Now, in milliseconds from an arbitrary origin fixed for the process's life.
    fn now_ms(&self) -> u64;
}

/// `CLOCK_BOOTTIME`: time since boot, suspended time included (falls back to the monotonic
/// clock where the kernel has none; see [`baton_store::boot_clock::boot_time_ms`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct BootClock;

impl LocalClock for BootClock {
    fn now_ms(&self) -> u64 {
        baton_store::boot_clock::boot_time_ms()
    }
}

/// The core's clock from a reading of the store's (`uncertain_ms`: the store's
/// [`baton_store::Capabilities::clock_uncertain_ms`]), or from `observer` at `mono_ms` on a
/// store without a clock.
pub(crate) fn core_clock<'a>(
    store_clock: &'a StoreClock,
    uncertain_ms: u64,
    observer: &'a Observer,
    mono_ms: u64,
    wall_ms: u64,
) -> Clock<'a> {
    match store_clock {
        StoreClock::Time { now_ms, epoch, .. } => Clock::Store {
            now_ms: *now_ms,
            uncertain_ms,
            epoch,
            wall_ms,
        },
        StoreClock::None => Clock::Observed {
            observer,
            mono_ms,
            wall_ms,
        },
    }
}
