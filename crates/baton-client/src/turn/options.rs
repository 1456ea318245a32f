//! How a caller wants to wait for a turn and hold it, and where a wait stands.

use std::sync::Arc;
use std::time::Duration;

use baton_core::Mode;

use super::poll::PollBounds;

/// A callback told where a wait stands.
pub type ProgressFn = Arc<dyn Fn(&WaitProgress) + Send + Sync>;

/// How a caller wants to wait and hold.
#[derive(Clone)]
pub struct AcquireOptions {
    /// Normal (takes a permit) or shared.
    pub mode: Mode,
    /// The key's limit (1: a mutex).
    pub limit: u32,
    /// Lease duration once held; renewals extend it.
    pub ttl: Duration,
    /// Waiter-lease duration while queued.
    pub waiter_ttl: Duration,
    /// How long to wait for the turn: `None` waits as long as it takes, zero tries once.
    pub timeout: Option<Duration>,
    /// The shortest and longest interval between two reads while waiting.
    pub poll: PollBounds,
    /// Who is asking, and why (shown to others).
    pub context: String,
    /// Sort value: tickets with one go first, compared as strings.
    pub order: Option<String>,
    /// Cancel every queued ticket that sorts before this one, unless enqueued with `keep`.
    pub supersede: bool,
    /// Immune to a later `supersede`.
    pub keep: bool,
    /// Bound on the key's live tickets.
    pub max_live: u32,
    /// Called when the wait starts and after every look at the store while waiting.
    pub on_progress: Option<ProgressFn>,
    /// How long a wait rides out a store that fails with a transient error
    /// (`ClientError::is_transient`: a restart, a failover, a network cut) before giving up
    /// with that error: retried with a growing pause meanwhile, the trouble told through
    /// `on_progress`. Zero fails at the first error. The ticket outlives an outage shorter
    /// than its waiter lease; after a longer one the wait ends as lost (abandoned).
    pub store_retry: Duration,
    /// A run-once turn (`crate::once`): granted only when the key's verdict is to run.
    pub once: Option<baton_core::OnceSpec>,
    /// Ask the key's holders that were not queued with `keep` to stop when this ticket is
    /// queued ([`baton_core::Enqueue::cancel_running`]).
    pub cancel_running: bool,
    /// Be granted through a freeze of the key, with this reason
    /// ([`baton_core::Enqueue::override_freeze`]).
    pub override_freeze: Option<String>,
    /// The CI run taking the turn, recorded on the ticket for `baton reap`
    /// ([`baton_core::ci_run`]).
    pub ci_run: Option<baton_core::ci_run::CiRun>,
    /// A turn at a pool of named slots (`--slots`), and which it wants ([`baton_core::pool`]).
    /// `limit` must then be the number of slots, or the enqueue is refused.
    pub pool: Option<baton_core::pool::PoolAsk>,
    /// Enqueue beside the key's document when the key was last seen held with no room for the turn
    /// (its own write would only queue it), on a store that keeps arrivals
    /// ([`baton_store::Capabilities::arrivals`]): the enqueue then never loses a write to the
    /// holder's release or to another waiter, and the release takes it in
    /// ([`baton_core::arrival`]). Unset, the store decides
    /// ([`baton_store::Capabilities::arrivals_by_default`]: etcd does, where it pays on a hot key:
    /// 2.2 requests a grant against 5.7 in BENCHMARKS.md).
    pub by_arrival: Option<bool>,
}

impl std::fmt::Debug for AcquireOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcquireOptions")
            .field("mode", &self.mode)
            .field("limit", &self.limit)
            .field("ttl", &self.ttl)
            .field("timeout", &self.timeout)
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

impl Default for AcquireOptions {
    fn default() -> Self {
        AcquireOptions {
            mode: Mode::Normal,
            limit: 1,
            ttl: Duration::from_secs(30),
            waiter_ttl: Duration::from_secs(60),
            timeout: None,
            poll: PollBounds::default(),
            context: String::new(),
            order: None,
            supersede: false,
            keep: false,
            max_live: baton_core::limits::LIVE_TICKETS_DEFAULT,
            on_progress: None,
            store_retry: Duration::from_secs(60),
            once: None,
            cancel_running: false,
            override_freeze: None,
            ci_run: None,
            pool: None,
            by_arrival: None,
        }
    }
}

impl AcquireOptions {
    /// The claim window ([`baton_core::lease::claim_window_ms`] of the longest poll).
    pub fn claim(&self) -> Duration {
        let poll_max_ms = u64::try_from(self.poll.max.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(baton_core::lease::claim_window_ms(poll_max_ms))
    }
}

/// One holder, as a waiter sees it.
#[derive(Clone, Debug)]
pub struct HolderView {
    /// Its ticket id.
    pub id: String,
    /// Its context.
    pub context: String,
    /// How long it has held, by this machine's wall clock.
    pub held_ms: u64,
}

/// Where a wait stands.
#[derive(Clone, Debug)]
pub struct WaitProgress {
    /// The key.
    pub key: String,
    /// The waiting ticket.
    pub id: String,
    /// Queued tickets ahead (0: next).
    pub position: usize,
    /// Who holds the key.
    pub holders: Vec<HolderView>,
    /// How long this wait has lasted.
    pub waited: Duration,
    /// Estimated time until the grant, from the key's recent hold times.
    pub estimate: Option<Duration>,
    /// The store failed on the last look and the wait is retrying: the error.
    pub store_trouble: Option<String>,
    /// The key is paused ([`baton_core::freeze`]): why, by whom, until when.
    pub paused: Option<baton_core::freeze::Paused>,
}
