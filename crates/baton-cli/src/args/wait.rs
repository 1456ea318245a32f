//! How to wait for a turn and how to hold it: the flags `run`, `acquire` and `once` share.

use std::time::Duration;

use baton_client::poll::PollBounds;
use clap::Args;

use crate::args::duration::{parse_duration, parse_lease, parse_poll};
use crate::args::slots::SlotArgs;

/// How to wait for a turn and how to hold it (shared by `run` and `acquire`).
#[derive(Debug, Args, Clone)]
pub struct WaitArgs {
    /// How many may hold the key at once (1: a mutex). Every live ticket must agree
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub limit: u32,

    /// Hold together with other --shared tickets (readers), never beside a normal holder
    #[arg(long, conflicts_with = "slots")]
    pub shared: bool,

    #[command(flatten)]
    pub pool: SlotArgs,

    /// Lease duration [default: 30s for run (renewed every TTL/3), 15m for acquire, 1m for
    /// acquire --keep-alive (renewed every TTL/3)]
    #[arg(long, value_parser = parse_lease, value_name = "DUR")]
    pub ttl: Option<Duration>,

    /// Sort value: tickets with one go first, then by arrival. Two numbers (digits only, as
    /// GITHUB_RUN_NUMBER) compare as integers: 100 after 99, and 099 ties with 99 (then
    /// arrival); other values compare as strings (a zero-padded commit time, say). A key's
    /// live tickets all use numbers or all text: the other kind is refused (exit 2)
    #[arg(long, value_name = "VALUE")]
    pub order: Option<String>,

    /// Cancel every queued ticket that sorts before this one (they exit 76), unless it was
    /// enqueued with --keep
    #[arg(long)]
    pub supersede: bool,

    /// Never be superseded, and never asked to stop by --cancel-running
    #[arg(long)]
    pub keep: bool,

    /// Ask the key's holders to stop when this ticket is queued (GitHub's cancel-in-progress):
    /// a `baton run` holding the key stops its command (SIGTERM, then SIGKILL 10s later), exits
    /// 76 and is recorded superseded; a job a worker runs is stopped and ends superseded; a turn
    /// taken with `acquire` sees it in `baton check` (exit 76). Each hears at its next renewal
    /// (every TTL/3). Holders started with --keep are not asked. This ticket then waits its
    /// turn as usual
    #[arg(long)]
    pub cancel_running: bool,

    /// Be granted even while the key is paused (`baton pause`): the queue up to and including
    /// this ticket is granted in order as if it were not (nobody barges). The reason is
    /// recorded in the history
    #[arg(long, value_name = "REASON")]
    pub override_freeze: Option<String>,

    /// How to wait.
    #[command(flatten)]
    pub waiting: WaitingArgs,
}

/// How to wait for a turn (shared by `run`, `acquire` and `once`).
#[derive(Debug, Args, Clone)]
pub struct WaitingArgs {
    /// Give up waiting after DUR (exit 75); 0 tries once. Bounds the wait only, not CMD
    /// [default: wait as long as it takes]
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    pub timeout: Option<Duration>,

    /// Intervals between two looks at the store while waiting, MIN..MAX or just MAX. On S3
    /// and DynamoDB (no push) the waiter next in line looks every MIN, each place further back
    /// doubles it up to MAX, ±20% at random; stores that push wake waiters at once and are read
    /// by timer every MAX. Every waiter also wakes when the holder's lease is due to end
    #[arg(long, value_parser = parse_poll, default_value = "250ms..1s", value_name = "[MIN..]MAX")]
    pub poll: PollBounds,

    /// Who is waiting and why, shown to others [default: from the CI's variables, else
    /// user@host pid N]
    #[arg(long, value_name = "TEXT")]
    pub context: Option<String>,

    /// How long a wait rides out a store that cannot be reached (a restart, a failover, a
    /// network cut) before failing with exit 1, retrying meanwhile: from the start (opening the
    /// store, queuing) and while waiting; 0 fails at once. An outage longer than the waiter
    /// lease (60s) loses the place in the queue (exit 78)
    #[arg(long, value_parser = parse_duration, default_value = "60s", value_name = "DUR")]
    pub store_retry: Duration,

    /// A waiter that stops refreshing for this long is dropped from the queue
    #[arg(long, value_parser = parse_lease, default_value = "60s", value_name = "DUR", hide = true)]
    pub waiter_ttl: Duration,

    /// Print nothing while waiting
    #[arg(short, long)]
    pub quiet: bool,
}
