//! The SQLite store's clock: time since the host booted, named by the boot id.
//!
//! Every process sharing one SQLite file runs on the same host, so they can agree on a clock
//! without a server: the kernel's boot-time clock. Unlike the wall clock it never steps (NTP,
//! `date -s`, a suspended laptop's catch-up), so a lease cannot end early because someone changed
//! the time. It restarts from zero at each boot, which is why every reading comes with the boot
//! id as its epoch: a reboot changes the epoch, and every deadline measured on the old clock is
//! void (no process that held a lease survived the reboot anyway). Nothing but a reboot may
//! change the epoch, since a changed epoch ends every lease: on Linux it is the kernel's boot id,
//! and where that cannot be read the store refuses rather than guess.
//!
//! A process in a time namespace (`unshare -T`, a container restored by CRIU) reads
//! `CLOCK_BOOTTIME` shifted by its namespace's offset: one started under `unshare -T --boottime
//! 3600` reads an hour ahead, and would judge every other process's lease an hour over. So the
//! offset, published in `/proc/self/timens_offsets`, is subtracted: every process on the host
//! reads the host's boot time, and the boot id (which no namespace changes) names it.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// Where Linux publishes a random id made fresh at each boot.
#[cfg(any(target_os = "linux", target_os = "android"))]
const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// Where Linux (5.6 and later) says how far this process's time namespace shifts its clocks.
#[cfg(any(target_os = "linux", target_os = "android"))]
const TIMENS_OFFSETS_PATH: &str = "/proc/self/timens_offsets";

/// The host's boot-time clock as a reading: the same in every process on the host, whatever
/// time namespace it runs in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostBootClock {
    /// Milliseconds since the host booted, time suspended included.
    pub now_ms: u64,
    /// The boot it counts from: changes at a reboot and at nothing else (on Linux).
    pub epoch: String,
}

/// Reads the host's boot-time clock and its epoch: the SQLite store's clock.
///
/// Fails, saying why, when this process cannot know how its clocks relate to the host's (its
/// time namespace's offsets or the boot id are unreadable, as without `/proc`): judging leases on
/// a clock other processes do not share would end them early, so the store must refuse instead.
pub fn host_boot_clock() -> Result<HostBootClock, String> {
    let refused = |why: String| {
        format!(
            "the host's boot-time clock cannot be read here ({why}); the SQLite store judges leases \
             on it so that every process on the host agrees: mount /proc, or use another store"
        )
    };
    own_offsets().as_ref().map_err(|why| refused(why.clone()))?;
    let epoch = boot_id().map_err(refused)?;
    Ok(HostBootClock {
        now_ms: boot_time_ms(),
        epoch,
    })
}

/// Milliseconds since this host booted, counting time spent suspended.
///
/// Reads `CLOCK_BOOTTIME` (Linux, Android), less this process's time-namespace offset. Where
/// that clock is missing or the call fails, falls back to `CLOCK_MONOTONIC` (less its offset),
/// which also never steps but may pause while suspended; where even that fails, to the wall
/// clock, which is the best left and cannot fail. Where the offsets cannot be read the clock is
/// read as this process sees it: still right for measuring time, as every caller but the
/// SQLite store's clock does (that one goes through [`host_boot_clock`], which then refuses).
pub fn boot_time_ms() -> u64 {
    boot_time_us() / 1000
}

/// Microseconds since this host booted, counting time spent suspended (corrected and falling
/// back as [`boot_time_ms`] does).
pub fn boot_time_us() -> u64 {
    let offsets = own_offsets().as_ref().copied().unwrap_or_default();
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Some(us) = read_clock_us(libc::CLOCK_BOOTTIME, offsets.boottime_ns) {
        return us;
    }
    #[cfg(unix)]
    if let Some(us) = read_clock_us(libc::CLOCK_MONOTONIC, offsets.monotonic_ns) {
        return us;
    }
    #[cfg(not(unix))]
    let _ = offsets;
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

/// How far this process's clocks read ahead of the host's (behind when negative), in
/// nanoseconds: its time namespace's offsets, 0 outside one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct TimensOffsets {
    monotonic_ns: i64,
    boottime_ns: i64,
}

/// This process's time-namespace offsets, read once: a process's clocks must keep one origin for
/// its whole life (intervals are measured on them), and its offsets never change anyway (they
/// are fixed before the first process enters a namespace, and a process with threads cannot
/// enter another). An error is kept too, for the same reason.
fn own_offsets() -> &'static Result<TimensOffsets, String> {
    static OFFSETS: OnceLock<Result<TimensOffsets, String>> = OnceLock::new();
    OFFSETS.get_or_init(read_own_offsets)
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn read_own_offsets() -> Result<TimensOffsets, String> {
    match std::fs::read_to_string(TIMENS_OFFSETS_PATH) {
        Ok(text) => parse_timens_offsets(&text)
            .map_err(|why| format!("cannot understand {TIMENS_OFFSETS_PATH}: {why}")),
        // No such file in a /proc that is there: a kernel without time namespaces (before 5.6,
        // or built without CONFIG_TIME_NS), whose clocks are the host's.
        Err(error)
            if error.kind() == std::io::ErrorKind::NotFound
                && std::path::Path::new("/proc/self/stat").exists() =>
        {
            Ok(TimensOffsets::default())
        }
        Err(error) => Err(format!("cannot read {TIMENS_OFFSETS_PATH}: {error}")),
    }
}

/// No time namespaces outside Linux: the clocks are the host's.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn read_own_offsets() -> Result<TimensOffsets, String> {
    Ok(TimensOffsets::default())
}

/// Parses `/proc/self/timens_offsets`: one line per clock, `NAME SECONDS NANOSECONDS`
/// (`boottime 3600 0`; a negative offset is `-2 500000000` for -1.5 s, nanoseconds always in
/// 0..1e9, as the kernel prints them). A clock without a line is not shifted (offset 0); lines of
/// clocks other than `monotonic` and `boottime` are ignored.
///
/// Anything else is refused, never read as 0: a misread offset is the defect this corrects (a
/// clock an hour off ends leases an hour early), and a refusal names the line.
fn parse_timens_offsets(text: &str) -> Result<TimensOffsets, String> {
    let (mut monotonic_ns, mut boottime_ns) = (None, None);
    for (idx, line) in text.lines().enumerate() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [name, secs, nanos] = fields[..] else {
            if fields.is_empty() {
                continue;
            }
            return Err(format!(
                "line {}, `{line}`, is not `CLOCK SECONDS NANOSECONDS`",
                idx + 1
            ));
        };
        let offset_ns =
            offset_ns(secs, nanos).map_err(|why| format!("line {}, `{line}`: {why}", idx + 1))?;
        let slot = match name {
            "monotonic" => &mut monotonic_ns,
            "boottime" => &mut boottime_ns,
            _ => continue,
        };
        if slot.replace(offset_ns).is_some() {
            return Err(format!("line {}: a second `{name}` line", idx + 1));
        }
    }
    Ok(TimensOffsets {
        monotonic_ns: monotonic_ns.unwrap_or(0),
        boottime_ns: boottime_ns.unwrap_or(0),
    })
}

/// `secs` seconds and `nanos` nanoseconds (0..1e9, added) as nanoseconds.
fn offset_ns(secs: &str, nanos: &str) -> Result<i64, String> {
    const NANOS_PER_SEC: i64 = 1_000_000_000;
    let secs: i64 = secs
        .parse()
        .map_err(|_| format!("seconds `{secs}` are not an integer"))?;
    let nanos: i64 = nanos
        .parse()
        .ok()
        .filter(|nanos| (0..NANOS_PER_SEC).contains(nanos))
        .ok_or_else(|| format!("nanoseconds `{nanos}` are not an integer in 0..1000000000"))?;
    secs.checked_mul(NANOS_PER_SEC)
        .and_then(|ns| ns.checked_add(nanos))
        .ok_or_else(|| format!("{secs} s is too large an offset"))
}

/// The id of the current boot of this host: changes at every reboot, the same for every process
/// (in every time namespace) until then. Read once per process.
///
/// On Linux this is the kernel's random boot id, and an error when it cannot be read: every other
/// choice can differ between two processes of one boot, which would end their leases. Elsewhere it
/// is `boot-at-<seconds>`, the wall clock's time of boot rounded to seconds: it changes across
/// reboots too, but an NTP step between two processes' first readings, or a reading that
/// straddles a rounding boundary, can give two processes of one boot different ids (which voids
/// leases).
fn boot_id() -> Result<String, String> {
    static BOOT_ID: OnceLock<String> = OnceLock::new();
    if let Some(id) = BOOT_ID.get() {
        return Ok(id.clone());
    }
    // A failure is not kept: the next reading may succeed, and gives the same id as any other.
    let id = read_boot_id()?;
    Ok(BOOT_ID.get_or_init(|| id).clone())
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn read_boot_id() -> Result<String, String> {
    match std::fs::read_to_string(BOOT_ID_PATH) {
        Ok(text) if !text.trim().is_empty() => Ok(text.trim().to_owned()),
        Ok(_) => Err(format!("{BOOT_ID_PATH} is empty")),
        Err(error) => Err(format!("cannot read {BOOT_ID_PATH}: {error}")),
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn read_boot_id() -> Result<String, String> {
    let boot_at_ms = wall_time_ms().saturating_sub(boot_time_ms());
    // Rounded to the nearest second: the two clock readings above are not simultaneous.
    Ok(format!("boot-at-{}", (boot_at_ms + 500) / 1000))
}

/// Reads `clock_id` in microseconds, less `offset_ns` (this process's namespace's offset for it).
#[cfg(unix)]
fn read_clock_us(clock_id: libc::clockid_t, offset_ns: i64) -> Option<u64> {
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
    let ns = secs.checked_mul(1_000_000_000)?.checked_add(nanos)?;
    // The kernel keeps a namespace's clocks at or past its offset, so the host's is never
    // negative; saturating is only a bound.
    Some(ns.saturating_add_signed(offset_ns.saturating_neg()) / 1_000)
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
        let id = boot_id().unwrap();
        assert!(!id.is_empty());
        assert_eq!(id, boot_id().unwrap());
        assert_eq!(id, id.trim());
    }

    #[test]
    fn the_host_clock_is_the_boot_clock_named_by_the_boot_id() {
        let before_ms = boot_time_ms();
        let host = host_boot_clock().unwrap();
        assert!(host.now_ms >= before_ms && host.now_ms <= boot_time_ms());
        assert_eq!(host.epoch, boot_id().unwrap());
    }

    /// Parses `text`, or says why not (the error text).
    fn parsed(text: &str) -> Result<(i64, i64), String> {
        parse_timens_offsets(text).map(|offsets| (offsets.monotonic_ns, offsets.boottime_ns))
    }

    #[test]
    fn timens_offsets_are_read_as_the_kernel_prints_them() {
        const S: i64 = 1_000_000_000;
        for (text, expected) in [
            // No namespace, or a kernel that prints nothing: no shift.
            ("", (0, 0)),
            ("\n\n", (0, 0)),
            (
                "monotonic           0         0\nboottime            0         0\n",
                (0, 0),
            ),
            // `unshare -T --boottime 3600`, as Linux prints it (padded columns).
            (
                "monotonic           0         0\nboottime         3600         0\n",
                (0, 3600 * S),
            ),
            // A clock without a line is not shifted; the order does not matter.
            ("boottime 5 250\n", (0, 5 * S + 250)),
            ("boottime 1 0\nmonotonic 2 0", (2 * S, S)),
            // Negative offsets: whole seconds, and -1.5 s as the kernel normalises it.
            ("monotonic -5 0\nboottime -100 0\n", (-5 * S, -100 * S)),
            ("boottime -2 500000000\n", (0, -1_500_000_000)),
            // Another clock's line (the kernel names clocks it has no name for `unknown`).
            ("unknown 7 0\nboottime 1 0\n", (0, S)),
        ] {
            assert_eq!(parsed(text), Ok(expected), "{text:?}");
        }
    }

    #[test]
    fn garbage_in_timens_offsets_is_refused_naming_the_line() {
        for (text, says) in [
            (
                "boottime 3600\n",
                "line 1, `boottime 3600`, is not `CLOCK SECONDS NANOSECONDS`",
            ),
            ("monotonic 0 0\nboottime 3600 0 0\n", "line 2"),
            ("boottime one 0\n", "seconds `one` are not an integer"),
            ("boottime 1.5 0\n", "seconds `1.5` are not an integer"),
            (
                "boottime 1 -1\n",
                "nanoseconds `-1` are not an integer in 0..1000000000",
            ),
            ("boottime 1 1000000000\n", "nanoseconds `1000000000`"),
            ("boottime 99999999999999999 0\n", "too large an offset"),
            (
                "boottime 1 0\nboottime 2 0\n",
                "line 2: a second `boottime` line",
            ),
            ("garbage\n", "line 1, `garbage`"),
        ] {
            let error = parsed(text).expect_err(text);
            assert!(error.contains(says), "{text:?}: {error}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_reads_its_own_offsets() {
        // Whatever namespace the tests run in, the file (where the kernel has it) parses.
        assert!(own_offsets().is_ok(), "{:?}", own_offsets());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn boot_time_counts_from_boot_not_from_1970() {
        // A boot-time clock reads far less than the wall clock unless the host has been up for
        // decades.
        assert!(boot_time_ms() < wall_time_ms() / 2);
    }
}
