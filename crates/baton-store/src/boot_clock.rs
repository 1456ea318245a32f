//! The SQLite store's clock: time since boot, named by the boot id.
//!
//! Every process sharing one SQLite file runs on the same host, so they can agree on a clock
//! without a server: the kernel's boot-time clock. Unlike the wall clock it never steps (NTP,
//! `date -s`, a suspended laptop's catch-up), so a lease cannot end early because someone changed
//! the time. It restarts from zero at each boot, which is why every reading comes with the boot
//! id as its epoch: a reboot changes the epoch, and every deadline measured on the old clock is
//! void (no process that held a lease survived the reboot anyway).

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// Where Linux publishes a random id made fresh at each boot.
const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// Milliseconds since this host booted, counting time spent suspended.
///
/// Reads `CLOCK_BOOTTIME` (Linux, Android). Where that clock is missing or the call fails, falls
/// back to `CLOCK_MONOTONIC`, which also never steps but may pause while suspended; where even
/// that fails, to the wall clock, which is the best left and cannot fail.
pub fn boot_time_ms() -> u64 {
    boot_time_us() / 1000
}

/// Microseconds since this host booted, counting time spent suspended (falls back as
/// [`boot_time_ms`] does).
pub fn boot_time_us() -> u64 {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Some(us) = read_clock_us(libc::CLOCK_BOOTTIME) {
        return us;
    }
    #[cfg(unix)]
    if let Some(us) = read_clock_us(libc::CLOCK_MONOTONIC) {
        return us;
    }
    wall_time_ms().saturating_mul(1000)
}

/// An instant on the boot-time clock: what [`std::time::Instant`] is on the monotonic clock,
/// except that time spent suspended counts. Time measured to estimate a server's clock must
/// count it, or an estimate made after a resume lags the server by the whole suspend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct BootInstant {
    us: u64,
}

impl BootInstant {
    /// Now.
    pub fn now() -> BootInstant {
        BootInstant { us: boot_time_us() }
    }

    /// Microseconds from `earlier` to this instant (0 if `earlier` is later).
    pub fn micros_since(&self, earlier: BootInstant) -> u64 {
        self.us.saturating_sub(earlier.us)
    }

    /// Microseconds from this instant to now.
    pub fn elapsed_micros(&self) -> u64 {
        BootInstant::now().micros_since(*self)
    }

    /// This instant plus `micros` (for tests of what measures time).
    pub fn plus_micros(&self, micros: u64) -> BootInstant {
        BootInstant {
            us: self.us.saturating_add(micros),
        }
    }
}

/// The id of the current boot of this host: changes at every reboot, the same for every process
/// until then. Read once per process.
///
/// On Linux this is the kernel's random boot id. Elsewhere it is `boot-at-<seconds>`, the wall
/// clock's time of boot rounded to seconds: it changes across reboots too, but an NTP step
/// between two processes' first readings, or a reading that straddles a rounding boundary, can
/// give two processes of one boot different ids (which voids leases, never extends them).
pub fn boot_id() -> String {
    static BOOT_ID: OnceLock<String> = OnceLock::new();
    BOOT_ID.get_or_init(read_boot_id).clone()
}

fn read_boot_id() -> String {
    match std::fs::read_to_string(BOOT_ID_PATH) {
        Ok(text) if !text.trim().is_empty() => text.trim().to_owned(),
        _ => {
            let boot_at_ms = wall_time_ms().saturating_sub(boot_time_ms());
            // Rounded to the nearest second: the two clock readings above are not simultaneous.
            format!("boot-at-{}", (boot_at_ms + 500) / 1000)
        }
    }
}

#[cfg(unix)]
fn read_clock_us(clock_id: libc::clockid_t) -> Option<u64> {
    let mut timespec = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `timespec` is a valid, writable `struct timespec` that outlives the call, and
    // clock_gettime writes nothing else.
    let rc = unsafe { libc::clock_gettime(clock_id, &mut timespec) };
    if rc != 0 {
        return None;
    }
    let secs = u64::try_from(timespec.tv_sec).ok()?;
    let nanos = u64::try_from(timespec.tv_nsec).ok()?;
    secs.checked_mul(1_000_000)?.checked_add(nanos / 1_000)
}

fn wall_time_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn boot_time_does_not_go_backwards() {
        let first_ms = boot_time_ms();
        let second_ms = boot_time_ms();
        assert!(second_ms >= first_ms, "{second_ms} < {first_ms}");
        assert!(first_ms > 0);
    }

    #[test]
    fn boot_id_is_stable_and_not_empty() {
        let id = boot_id();
        assert!(!id.is_empty());
        assert_eq!(id, boot_id());
        assert_eq!(id, id.trim());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn boot_time_counts_from_boot_not_from_1970() {
        // A boot-time clock reads far less than the wall clock unless the host has been up for
        // decades.
        assert!(boot_time_ms() < wall_time_ms() / 2);
    }
}
