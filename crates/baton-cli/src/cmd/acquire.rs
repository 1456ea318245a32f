//! `baton acquire KEY`: wait for a turn and print its token.

use std::io::Write;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use baton_client::acquire::{Pending, WaitProgress};
use baton_client::{AcquireOptions, Coordinator, Lease};
use clap::Args;

use crate::args::duration::parse_duration;
use crate::args::wait::WaitArgs;
use crate::exit::{self, Failure};
use crate::{wait, Opened};

pub const ACQUIRE_HELP: &str = "\
Prints the token alone on stdout (or a JSON object with --json). When GITHUB_OUTPUT is set, also
appends key=, ticket=, fence=, acquired-at=, waited-seconds= and position-at-start= lines to it
(and slot= on a pool), for later steps and jobs. position-at-start is 0 when the turn came at once, else 1 + the tickets
queued ahead when the wait began. In a GitHub Actions step (GITHUB_ACTIONS=true) it first prints
::add-mask::TOKEN on stderr, so the runner hides the token in the job's log; stdout is unchanged
(--no-mask leaves it out, for a token passed to another job as a job output).

Nothing renews the lease of an acquired turn: choose --ttl to cover the work (default 15m), or
call `baton renew KEY TOKEN` from the work itself, or pass --keep-alive: a small keeper process
(detached, holding none of this command's output open) then renews a short lease (default 1m)
every TTL/3 until the turn is released, cancelled or lost, or --max-hold (default 6h) passes.
A runner that dies, or kills the keeper, frees the key one lease later. --json adds the
keeper's pid as keeper_pid; its log is under $XDG_STATE_HOME/baton/keepers.";

/// `baton acquire`.
#[derive(Debug, Args)]
pub struct AcquireArgs {
    /// How to wait and hold.
    #[command(flatten)]
    pub wait: WaitArgs,

    /// The key to take
    #[arg(value_name = "KEY")]
    pub key: String,

    /// Print a JSON object (key, id, token, fence, acquired_at, lease_until, waited_ms,
    /// position_at_start; slot and slots on a pool) instead of the token alone
    #[arg(long)]
    pub json: bool,

    /// In a GitHub Actions step, leave the token unmasked: for a token handed to another job
    /// through a job output, which GitHub drops when it holds a masked value. Anyone who can
    /// read the job's log can then release or renew the turn. baton's GitHub Action sets it
    /// and masks the ticket as its `mask-ticket` input says
    #[arg(long, env = "BATON_NO_MASK", value_parser = clap::builder::BoolishValueParser::new())]
    pub no_mask: bool,

    /// Keep the turn alive from a keeper process that renews its lease every TTL/3 until the
    /// turn is released or cancelled (the lease: --ttl, default 1m here)
    #[arg(long)]
    pub keep_alive: bool,

    /// With --keep-alive: stop renewing this long after the turn began, whoever forgot to
    /// release it [default: 6h]
    #[arg(long, value_parser = parse_duration, value_name = "DUR", requires = "keep_alive")]
    pub max_hold: Option<Duration>,
}

/// The lease of a kept-alive turn when --ttl is not given: a runner that dies frees the key
/// about this long later.
const KEEP_ALIVE_TTL: Duration = Duration::from_secs(60);
/// How long a keeper renews at most when --max-hold is not given.
const KEEP_ALIVE_MAX_HOLD: Duration = Duration::from_secs(6 * 3600);

/// Runs the `acquire` subcommand.
pub async fn acquire(opened: &Opened, args: AcquireArgs) -> Result<i32, Failure> {
    let line = (!args.wait.waiting.quiet).then(wait::WaitLine::new);
    let default_ttl = match args.keep_alive {
        true => KEEP_ALIVE_TTL,
        false => Duration::from_secs(15 * 60),
    };
    let mut options = wait::options(&args.wait, default_ttl, line.clone())?;
    let started = Instant::now();
    let position_at_start = first_position(&mut options);
    let pendings = wait::pendings(std::slice::from_ref(&args.key))?;
    let coord = &opened.coord;
    let lease = wait_for_turn(coord, &pendings, &options, &line).await?;
    let mut turn = Turn {
        waited_ms: started.elapsed().as_millis(),
        // Never reported: granted at the first look.
        position_at_start: position_at_start.get().copied().unwrap_or(0),
        acquired_at: rfc3339(lease.acquired_wall_ms),
        lease,
        keeper: None,
    };
    let mut handoff = None;
    if args.keep_alive {
        let max_hold = args.max_hold.unwrap_or(KEEP_ALIVE_MAX_HOLD);
        let (pid, log, made) = start_keeper(opened, &turn.lease, options.ttl, max_hold).await?;
        turn.keeper = Some((pid, log));
        handoff = Some(made);
    }
    if !args.no_mask {
        mask_in_github_actions(&turn.lease.token);
    }
    if let Err(error) = print_turn(&turn, args.json) {
        // Nobody will see the token: give the turn back rather than strand it.
        let _ = baton_client::acquire::release(
            coord,
            &turn.lease.key,
            &turn.lease.token,
            baton_core::Outcome::Cancelled,
        )
        .await;
        return Err(Failure::new(
            exit::ERROR,
            format!("cannot print the token ({error}); the turn was given back"),
        ));
    }
    if let Some(path) = std::env::var_os("GITHUB_OUTPUT").filter(|p| !p.is_empty()) {
        append_github_output(&turn, std::path::Path::new(&path));
    }
    // The caller has the token: the keeper keeps the turn from now on (killed before this, the
    // keeper gives it back).
    if let Some(handoff) = handoff {
        handoff.made();
    }
    if !args.wait.waiting.quiet && !args.json {
        eprintln!(
            "baton: acquired {} (fence {}); release with: baton release {} <token>",
            turn.lease.key,
            turn.lease.fence,
            shell_quote(&turn.lease.key)
        );
        if let Some((pid, log)) = &turn.keeper {
            eprintln!(
                "baton: keeper pid {pid} renews it every {} (log: {})",
                humantime::format_duration(options.ttl / 3),
                log.display()
            );
        }
    }
    Ok(exit::OK)
}

/// Starts the keeper of `lease` (`cmd::keep`); a keeper that cannot start gives the turn back.
async fn start_keeper(
    opened: &Opened,
    lease: &Lease,
    ttl: Duration,
    max_hold: Duration,
) -> Result<(u32, std::path::PathBuf, crate::cmd::keep::Handoff), Failure> {
    match crate::cmd::keep::spawn(&opened.url, &lease.key, &lease.token, ttl, max_hold) {
        Ok(keeper) => Ok(keeper),
        Err(error) => {
            let _ = baton_client::acquire::release(
                &opened.coord,
                &lease.key,
                &lease.token,
                baton_core::Outcome::Cancelled,
            )
            .await;
            Err(Failure::new(
                exit::ERROR,
                format!("cannot start the keeper ({error}); the turn was given back"),
            ))
        }
    }
}

/// A turn taken, with what the caller is told about its wait.
struct Turn {
    lease: Lease,
    waited_ms: u128,
    /// 0 when granted at the first look, else 1 + the tickets queued ahead when the wait began.
    position_at_start: usize,
    acquired_at: String,
    /// With --keep-alive: the keeper's pid and log.
    keeper: Option<(u32, std::path::PathBuf)>,
}

/// Waits for the turn of `pendings`' one key; SIGINT or SIGTERM withdraws the ticket and ends
/// the wait with 130 or 143.
async fn wait_for_turn(
    coord: &Arc<Coordinator>,
    pendings: &[Pending],
    options: &AcquireOptions,
    line: &Option<Arc<wait::WaitLine>>,
) -> Result<Lease, Failure> {
    let Some(pending) = pendings.first() else {
        return Err(Failure::usage("no key given"));
    };
    let interrupted = crate::signals::interruption()
        .map_err(|e| Failure::new(exit::ERROR, format!("cannot install signal handlers: {e}")))?;
    tokio::pin!(interrupted);
    // The interruption first, as in `wait::acquire_unless_interrupted`.
    let acquired = tokio::select! {
        biased;
        code = &mut interrupted => {
            wait::finish(line);
            wait::withdraw(coord, pendings).await;
            return Err(Failure::new(code, "interrupted while waiting; the ticket was withdrawn"));
        }
        result = baton_client::acquire::acquire(coord, pending, options) => result,
    };
    wait::finish(line);
    Ok(acquired?)
}

/// Prints the token alone, or (`--json`) the turn as one object.
fn print_turn(turn: &Turn, json: bool) -> std::io::Result<()> {
    let lease = &turn.lease;
    let mut stdout = std::io::stdout().lock();
    if json {
        let value = serde_json::json!({
            "key": lease.key,
            "id": lease.id,
            "token": lease.token,
            "fence": lease.fence,
            "acquired_at": turn.acquired_at,
            "lease_until": rfc3339(lease.lease_until_wall_ms),
            "waited_ms": turn.waited_ms,
            "position_at_start": turn.position_at_start,
        });
        let mut value = value;
        if !lease.slots.is_empty() {
            // `slot` for the common case of one; `slots` always, for --count.
            value["slot"] = serde_json::json!(lease.slots.join(","));
            value["slots"] = serde_json::json!(lease.slots);
        }
        if let Some((pid, _)) = &turn.keeper {
            value["keeper_pid"] = serde_json::json!(pid);
        }
        writeln!(stdout, "{value}")
    } else {
        writeln!(stdout, "{}", lease.token)
    }
}

/// Appends the turn to GitHub's step outputs (`GITHUB_OUTPUT`), for later steps and jobs; a file
/// that cannot be written is warned of, the turn kept.
fn append_github_output(turn: &Turn, path: &std::path::Path) {
    let mut lines = format!(
        "key={}\nticket={}\nfence={}\nacquired-at={}\nwaited-seconds={:.1}\nposition-at-start={}\n",
        turn.lease.key,
        turn.lease.token,
        turn.lease.fence,
        turn.acquired_at,
        turn.waited_ms as f64 / 1000.0,
        turn.position_at_start
    );
    if !turn.lease.slots.is_empty() {
        lines.push_str(&format!("slot={}\n", turn.lease.slots.join(",")));
    }
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(lines.as_bytes()));
    if let Err(error) = appended {
        eprintln!(
            "baton: warning: cannot append to GITHUB_OUTPUT ({}): {error}",
            path.display()
        );
    }
}

/// In a GitHub Actions step (`GITHUB_ACTIONS=true`), asks the runner to hide `token` in the
/// job's log before anything prints it: the runner reads workflow commands from stderr too, so
/// stdout stays the token alone for `TOKEN=$(baton acquire …)`.
fn mask_in_github_actions(token: &str) {
    if std::env::var_os("GITHUB_ACTIONS").is_some_and(|v| v == "true") {
        let mut stderr = std::io::stderr().lock();
        let _ = writeln!(stderr, "::add-mask::{token}");
        let _ = stderr.flush();
    }
}

/// Where the wait began: set by the first report of the wait (1 + the tickets queued ahead, so
/// 1 is next in line), never when the turn is granted at the first look (then 0). Wraps the
/// waiting line's report, if any.
fn first_position(options: &mut baton_client::acquire::AcquireOptions) -> Arc<OnceLock<usize>> {
    let first = Arc::new(OnceLock::new());
    let line = options.on_progress.take();
    let seen = first.clone();
    options.on_progress = Some(Arc::new(move |progress: &WaitProgress| {
        let _ = seen.set(progress.position + 1);
        if let Some(line) = &line {
            line(progress);
        }
    }));
    first
}

pub use baton_client::status::rfc3339;

/// Now, for output.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

fn shell_quote(text: &str) -> String {
    if text
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/-_.:@".contains(&b))
    {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}
