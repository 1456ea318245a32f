//! The caller's clocks: wall time for display and the hybrid fence, a monotonic clock for
//! observation, and the local clock on which a process keeps its own safety deadlines.

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

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
