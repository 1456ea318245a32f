//! `baton check KEY --fence F [--min-left DUR]`: does the turn with fence F still hold KEY?
//! One read of the key and the store's clock; the verdict is `baton_core::check`'s.

use std::time::Duration;

use baton_core::check::{check_fence, FenceCheck};
use baton_store::StoreClock;
use clap::Args;
use serde_json::json;

use crate::args::duration::parse_lease;
use crate::args::key::check_key;
use crate::exit::{self, Failure};
use crate::Opened;

/// `baton check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The turn's fence ($BATON_FENCE in `baton run`'s command, `fence` of `acquire --json`)
    #[arg(long, value_name = "F", env = "BATON_FENCE")]
    pub fence: u64,
    /// Pass only with at least DUR of the lease left (on stores with a clock: SQLite,
    /// PostgreSQL, Redis, S3)
    #[arg(long, value_parser = parse_lease, value_name = "DUR")]
    pub min_left: Option<Duration>,
    /// Write one JSON object to stdout: key, fence, holds, lease_left_ms, why
    #[arg(long)]
    pub json: bool,
}

pub const CHECK_HELP: &str = "\
Before each irreversible step of a deploy script, stop if the turn is already gone:

  baton run deploy/production -- sh -c '
      ./migrate.sh
      baton check deploy/production --min-left 10s || exit 1  # run sets BATON_FENCE
      ./switch-traffic.sh'

  baton acquire --ttl 30m deploy/production --json > turn.json   # in one job; in a later one:
  baton check deploy/production --fence \"$(jq -r .fence turn.json)\" --min-left 5m

Exit 0: the turn with fence F holds KEY (with at least --min-left of its lease left); 78: it
does not, and stderr says why (released, its lease ran out, another turn holds the key, too
little left); 76: it holds, but a newer ticket asked it to stop (--cancel-running): stop, and
give the turn back (`baton release --outcome superseded`; `baton run` does this by itself);
1: the store could not be read; 2: bad usage, or --min-left on a store without a clock (etcd,
DynamoDB), where a lease's time left cannot be told from one read. Under
`baton run` the lease is renewed every TTL/3 (30s by default): --min-left there is at most the
TTL.

The check is advisory: the lease can end right after it. What protects a resource is the
resource refusing a lower fence itself, or `baton kv set --fence`.";

/// Runs the `check` subcommand.
pub async fn check(opened: &Opened, args: CheckArgs) -> Result<i32, Failure> {
    check_key(&args.key)?;
    let snapshot = opened.coord.read(&args.key).await?;
    let uncertain_ms = opened.coord.store().capabilities().clock_uncertain_ms;
    let store_now_ms = match &snapshot.clock {
        StoreClock::Time { now_ms, .. } => Some(*now_ms),
        StoreClock::None => None,
    };
    let min_left_ms = args.min_left.map(crate::args::duration::millis);
    let verdict = check_fence(
        snapshot.doc.as_ref(),
        args.fence,
        store_now_ms,
        uncertain_ms,
        min_left_ms,
    );
    if verdict == FenceCheck::NoClock {
        return Err(Failure::usage(format!(
            "--min-left cannot be judged on this store: it has no clock, so a lease's time left \
             cannot be told from one read (leases are judged by watching heartbeats). Check \
             without --min-left (store: {})",
            opened.coord.store().describe()
        )));
    }
    let why = verdict.why(&args.key, args.fence);
    if args.json {
        let value = json!({
            "key": args.key,
            "fence": args.fence,
            "holds": verdict.holds(),
            "stop_asked": verdict.stop_asked_by(),
            "lease_left_ms": verdict.lease_left_ms(),
            "why": why,
        });
        // The verdict is the exit code: a reader gone does not change it.
        crate::out::unless_reader_gone(outln!("{value}"), true)?;
    }
    eprintln!("baton: {}", crate::render::one_line(&why));
    Ok(match verdict {
        FenceCheck::Holds { .. } => exit::OK,
        FenceCheck::StopAsked { .. } => exit::SUPERSEDED,
        _ => exit::LOST,
    })
}
