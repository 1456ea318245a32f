//! Which thread a call into SQLite runs on.
//!
//! rusqlite blocks, so a call normally runs on tokio's blocking pool and the caller's runtime
//! stays free while it waits for another process's write transaction. A command that does one
//! thing and exits pays for that pool in full: a thread (two, when one call is sent before the
//! last one's thread is free again), a malloc arena each, and a wake-up across threads for each
//! call (BENCHMARKS.md, B7). Such a process says so ([`calls_on_the_calling_thread`]) and its
//! calls then run where they are made, blocking its one thread for their length.
//!
//! That is only harmless while nothing in the process must happen on time meanwhile. While a
//! command runs under a lease, the heartbeat must be able to declare the lease lost (and have
//! the command killed) before the store can grant it to anyone else, even while its renewal
//! waits for the file's write lock; so the caller holds a [`CallsElsewhere`] for as long as the
//! command may run, and the calls go back to the pool.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Whether this process asked for its calls to run on the calling thread.
static ON_CALLING_THREAD: AtomicBool = AtomicBool::new(false);

/// How many [`CallsElsewhere`] are alive: while any is, calls run on the blocking pool.
static KEPT_ELSEWHERE: AtomicUsize = AtomicUsize::new(0);

/// Says that this process runs one command on a one-thread runtime and has nothing to do while
/// a call to a SQLite file waits: its calls from then on run on the thread that makes them,
/// but while a [`CallsElsewhere`] is alive.
pub fn calls_on_the_calling_thread() {
    ON_CALLING_THREAD.store(true, Ordering::SeqCst);
}

/// While alive, calls into SQLite run on tokio's blocking pool whatever the process said, so
/// that its runtime keeps running timers (a lease's end) while a call waits. Take it before a
/// command starts under a lease, drop it once the command has ended.
#[derive(Debug)]
#[must_use = "calls run on the calling thread again as soon as this is dropped"]
pub struct CallsElsewhere(());

impl CallsElsewhere {
    /// Sends the calls made from now on to the blocking pool, until dropped.
    pub fn begin() -> CallsElsewhere {
        KEPT_ELSEWHERE.fetch_add(1, Ordering::SeqCst);
        CallsElsewhere(())
    }
}

impl Drop for CallsElsewhere {
    fn drop(&mut self) {
        KEPT_ELSEWHERE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The error of a call that never returned: it panicked (on either thread), or the blocking
/// pool was shutting down.
pub(super) type Failed = Box<dyn std::error::Error + Send + Sync>;

/// Runs `call` on the calling thread or on the blocking pool, as the process asked. A panic
/// is an error either way, as it always was on the pool.
///
/// A call made here is followed by a yield, through the runtime's drivers: what came while it
/// blocked (a signal, a timer) is then seen before the caller goes on, as it was while a call
/// on the pool was awaited. Without it, a SIGINT that came while an enqueue waited for the
/// file was never seen by a wait that the enqueue's answer already ended.
pub(super) async fn run<T: Send + 'static>(
    call: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Failed> {
    let here =
        ON_CALLING_THREAD.load(Ordering::SeqCst) && KEPT_ELSEWHERE.load(Ordering::SeqCst) == 0;
    run_on(here, call).await
}

/// [`run`], on the calling thread when `here`.
async fn run_on<T: Send + 'static>(
    here: bool,
    call: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Failed> {
    if !here {
        return tokio::task::spawn_blocking(call)
            .await
            .map_err(Failed::from);
    }
    let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)).map_err(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|text| (*text).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Failed::from(format!("a call into SQLite panicked: {what}"))
    });
    tokio::task::yield_now().await;
    done
}

#[cfg(test)]
mod tests {
    use super::run_on;
    use std::thread;

    #[tokio::test]
    async fn a_call_made_here_runs_on_this_thread_and_one_sent_away_does_not() {
        let this = thread::current().id();
        let here = run_on(true, || thread::current().id()).await;
        let away = run_on(false, || thread::current().id()).await;
        assert_eq!(here.ok(), Some(this));
        assert!(away.is_ok_and(|id| id != this));
    }

    #[tokio::test]
    async fn a_panic_is_an_error_on_either_thread() {
        for here in [true, false] {
            let failed = run_on(here, || -> u8 { panic!("the call broke") }).await;
            let error = failed
                .err()
                .map(|error| error.to_string())
                .unwrap_or_default();
            assert!(error.contains("panic"), "on this thread: {here}: {error}");
        }
    }
}
