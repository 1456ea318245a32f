//! The keeper of `baton acquire --keep-alive`: a small process of its own that renews one turn's
//! lease until the turn ends, so that a CI job can hold a key across steps on a short lease,
//! and a runner that dies frees it about one lease later.
//!
//! `acquire` starts it ([`spawn`]) detached: a session of its own, nothing of the caller's
//! terminal or pipes (a CI step must not wait on it), the caller's environment (GitHub's runner
//! kills a job's leftover processes by the `RUNNER_TRACKING_ID` in theirs). It writes what it
//! does to a log file, and ends when:
//! - the turn ends (released, cancelled, taken over): its next read or renewal says so;
//! - its lease is lost (the store could not be reached for a whole lease);
//! - `--max-hold` has passed since it started: it stops renewing and the lease runs out, so a
//!   keeper that escaped its job (a self-hosted runner that kills nothing) cannot hold a key
//!   forever;
//! - it is killed: the lease then runs out by itself.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use baton_core::doc::token_hash;
use clap::Args;

use crate::args::duration::{parse_duration, parse_lease};
use crate::exit::{self, Failure};
use crate::Opened;

/// The environment variable that carries the token to the keeper: `ps` shows a process's
/// arguments to every user of the machine, not its environment.
pub const TOKEN_VARIABLE: &str = "BATON_KEEP_TOKEN";

/// How often the keeper looks whether its turn still holds, between renewals: a release from
/// anywhere ends it within about this long.
const LOOK_EVERY: Duration = Duration::from_secs(2);

/// `baton keep` (hidden: `acquire --keep-alive` runs it).
#[derive(Debug, Args)]
pub struct KeepArgs {
    /// The key whose turn to keep (the token comes in `BATON_KEEP_TOKEN`)
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The lease each renewal sets
    #[arg(long, value_parser = parse_lease, value_name = "DUR")]
    pub ttl: Duration,
    /// Stop renewing this long after starting
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    pub max_hold: Duration,
    /// Where to write what it does
    #[arg(long, value_name = "PATH")]
    pub log: PathBuf,
}

/// Starts a keeper for `key`'s turn `token` on the store `store_url`: its process id, and the
/// log it writes to.
pub fn spawn(
    store_url: &str,
    key: &str,
    token: &str,
    ttl: Duration,
    max_hold: Duration,
) -> std::io::Result<(u32, PathBuf)> {
    use std::os::unix::process::CommandExt;
    let log = log_path(key, token)?;
    // The image this process runs, not the path it was started from: a `baton` replaced
    // meanwhile (an upgrade while a CI job waited) leaves that path naming another file, or none.
    let mut command = std::process::Command::new("/proc/self/exe");
    command
        .arg0("baton")
        .args(["--store", store_url, "keep", key])
        .arg("--ttl")
        .arg(format!("{}ms", ttl.as_millis()))
        .arg("--max-hold")
        .arg(format!("{}ms", max_hold.as_millis()))
        .arg("--log")
        .arg(&log)
        .env(TOKEN_VARIABLE, token)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: setsid is async-signal-safe and touches no memory of this process.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = command.spawn()?;
    Ok((child.id(), log))
}

/// `$XDG_STATE_HOME/baton/keepers/KEY-TICKET.log` (beside the default store), with the key's
/// slashes and other unsafe characters made `_`.
fn log_path(key: &str, token: &str) -> std::io::Result<PathBuf> {
    let state = baton_store::url::default_sqlite_path()
        .and_then(|db| db.parent().map(Path::to_path_buf))
        .ok_or_else(|| {
            std::io::Error::other("neither XDG_STATE_HOME nor HOME is set: no place for its log")
        })?;
    let dir = state.join("keepers");
    std::fs::create_dir_all(&dir)?;
    let safe: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let ticket: String = token_hash(token).chars().take(12).collect();
    Ok(dir.join(format!("{safe}-{ticket}.log")))
}

/// How the keeper ended.
enum Ended {
    /// The turn is no longer held by this token: why, as the store said.
    TurnOver(String),
    /// The lease could not be renewed before it ran out.
    Lost(String),
    /// `--max-hold` passed.
    MaxHold,
}

/// Runs the `keep` subcommand: renews until the turn ends, then says why in its log.
pub async fn keep(opened: &Opened, args: KeepArgs) -> Result<i32, Failure> {
    let token = std::env::var(TOKEN_VARIABLE).map_err(|_| {
        Failure::usage(format!(
            "{TOKEN_VARIABLE} is not set: `baton keep` is started by `baton acquire --keep-alive`"
        ))
    })?;
    let mut log = Log::open(&args.log)?;
    log.line(&format!(
        "keeping {} (pid {}): renewing a {} lease every {}, for at most {}",
        args.key,
        std::process::id(),
        humantime::format_duration(args.ttl),
        humantime::format_duration(args.ttl / 3),
        humantime::format_duration(args.max_hold)
    ));
    let ended = renew_until_over(opened, &args, &token, &mut log).await;
    let (line, code) = match ended {
        Ended::TurnOver(why) => (format!("the turn is over ({why}): done"), exit::OK),
        Ended::Lost(why) => (format!("the lease was lost: {why}"), exit::LOST),
        Ended::MaxHold => (
            format!(
                "--max-hold ({}) passed: no longer renewing; the lease runs out by itself",
                humantime::format_duration(args.max_hold)
            ),
            exit::OK,
        ),
    };
    log.line(&line);
    Ok(code)
}

/// Renews every TTL/3 and looks every [`LOOK_EVERY`] in between, until the turn is over, the
/// lease is lost or `--max-hold` passes.
async fn renew_until_over(opened: &Opened, args: &KeepArgs, token: &str, log: &mut Log) -> Ended {
    let started = Instant::now();
    let hash = token_hash(token);
    let mut renewed_at = Instant::now();
    let mut next_renewal = Instant::now();
    loop {
        if started.elapsed() >= args.max_hold {
            return Ended::MaxHold;
        }
        if Instant::now() >= next_renewal {
            match baton_client::acquire::renew(&opened.coord, &args.key, token, Some(args.ttl))
                .await
            {
                Ok(_) => {
                    renewed_at = Instant::now();
                    next_renewal = renewed_at + args.ttl / 3;
                }
                Err(error) if error.is_transient() => {
                    if renewed_at.elapsed() >= args.ttl {
                        return Ended::Lost(format!("no renewal for a whole lease: {error}"));
                    }
                    log.line(&format!("renewal failed, trying again: {error}"));
                    next_renewal = Instant::now() + Duration::from_secs(1);
                }
                Err(error) => return Ended::TurnOver(error.to_string()),
            }
        } else if let Ok(snapshot) = opened.coord.read(&args.key).await {
            let held = snapshot.doc.as_ref().is_some_and(|doc| {
                doc.by_token_hash(&hash)
                    .is_some_and(|mine| doc.holders().any(|holder| holder.id == mine.id))
            });
            if !held {
                return Ended::TurnOver("its ticket holds the key no more".into());
            }
        }
        let wake = next_renewal.min(Instant::now() + LOOK_EVERY);
        tokio::time::sleep_until(wake.into()).await;
    }
}

/// The keeper's log: lines with the time in front, appended; a line that cannot be written is
/// dropped (nobody is there to tell).
struct Log(std::fs::File);

impl Log {
    fn open(path: &Path) -> Result<Log, Failure> {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map(Log)
            .map_err(|e| Failure::new(exit::ERROR, format!("cannot open {}: {e}", path.display())))
    }

    fn line(&mut self, text: &str) {
        let _ = writeln!(self.0, "{} {text}", crate::cmd::acquire::now_rfc3339());
    }
}
