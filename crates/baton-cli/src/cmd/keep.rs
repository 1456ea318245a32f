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
//! - it is killed: the lease then runs out by itself;
//! - the `acquire` that started it ends before handing the turn to its caller (killed while it
//!   printed the token, say): nobody knows the token, so nobody would release it, and the keeper
//!   gives the turn back at once. `acquire` tells it the handoff was made through a pipe
//!   ([`Handoff`]): one byte when the token is out; the pipe closed without it means its caller
//!   never got the turn.

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
    /// The pipe on which `acquire` says it handed the turn to its caller ([`Handoff`])
    #[arg(long, value_name = "FD", hide = true)]
    pub handoff_fd: Option<i32>,
}

/// The file descriptor the keeper reads the handoff from.
const HANDOFF_FD: i32 = 3;

/// `acquire`'s end of the handoff pipe: [`Handoff::made`] once the caller has the token.
/// Dropped without it (or `acquire` killed), the keeper gives the turn back.
#[derive(Debug)]
pub struct Handoff(std::fs::File);

impl Handoff {
    /// Tells the keeper the caller has the turn: from now on it keeps it.
    pub fn made(mut self) {
        // A keeper already gone has nothing to be told.
        let _ = self.0.write_all(b"1");
    }
}

/// A pipe whose ends close on exec: the read end is made the keeper's [`HANDOFF_FD`] after the
/// fork, so that no other process holds the write end and its closing is seen.
fn handoff_pipe() -> std::io::Result<(std::os::fd::OwnedFd, std::fs::File)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made, and are owned here alone.
    let (read, write) = unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    };
    Ok((read, write))
}

/// Starts a keeper for `key`'s turn `token` on the store `store_url`: its process id, the log
/// it writes to, and the handoff to make once the caller has the token.
pub fn spawn(
    store_url: &str,
    key: &str,
    token: &str,
    ttl: Duration,
    max_hold: Duration,
) -> std::io::Result<(u32, PathBuf, Handoff)> {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let log = log_path(key, token)?;
    let (read, write) = handoff_pipe()?;
    let read_fd = read.as_raw_fd();
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
        .arg("--handoff-fd")
        .arg(HANDOFF_FD.to_string())
        .env(TOKEN_VARIABLE, token)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: setsid, dup2 and fcntl are async-signal-safe and touch no memory of this
    // process. dup2 onto another descriptor clears close-on-exec on the copy; a read end that
    // is already HANDOFF_FD has it cleared by fcntl.
    unsafe {
        command.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let kept = if read_fd == HANDOFF_FD {
                libc::fcntl(HANDOFF_FD, libc::F_SETFD, 0)
            } else {
                libc::dup2(read_fd, HANDOFF_FD)
            };
            if kept < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = command.spawn()?;
    drop(read);
    Ok((child.id(), log, Handoff(write)))
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
    /// The `acquire` that started it ended before its caller had the token.
    NotHandedOver,
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
    let handoff = args.handoff_fd.map(handed_over);
    let ended = renew_until_over(opened, &args, &token, &mut log, handoff).await;
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
        Ended::NotHandedOver => (give_back(opened, &args.key, &token).await, exit::OK),
    };
    log.line(&line);
    Ok(code)
}

/// Whether the `acquire` at the other end of pipe `fd` handed the turn over: one byte read, or
/// the pipe closed without it (read in a thread of its own: a blocking read of a pipe).
fn handed_over(fd: i32) -> tokio::sync::oneshot::Receiver<bool> {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    let (tx, rx) = tokio::sync::oneshot::channel();
    // SAFETY: the descriptor was made for this process by `spawn`, and is read here alone.
    let mut pipe = unsafe { std::fs::File::from_raw_fd(fd) };
    std::thread::spawn(move || {
        let mut byte = [0u8; 1];
        let made = matches!(pipe.read(&mut byte), Ok(1));
        let _ = tx.send(made);
    });
    rx
}

/// Gives the turn back: its `acquire` died before its caller had the token. Says so.
async fn give_back(opened: &Opened, key: &str, token: &str) -> String {
    let reason = "baton acquire --keep-alive ended before it handed the turn to its caller";
    let given = baton_client::acquire::release_with_reason(
        &opened.coord,
        key,
        token,
        baton_core::Outcome::Cancelled,
        Some(reason.to_owned()),
    )
    .await;
    match given {
        Ok(()) => format!("{reason}: the turn was given back"),
        Err(error) => format!("{reason}; giving the turn back failed ({error}): it runs out"),
    }
}

/// Renews every TTL/3 and looks every [`LOOK_EVERY`] in between, until the turn is over, the
/// lease is lost, `--max-hold` passes, or the `acquire` that started it ends without handing
/// the turn over (`handoff`).
async fn renew_until_over(
    opened: &Opened,
    args: &KeepArgs,
    token: &str,
    log: &mut Log,
    mut handoff: Option<tokio::sync::oneshot::Receiver<bool>>,
) -> Ended {
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
        let sleep = tokio::time::sleep_until(wake.into());
        match handoff.as_mut() {
            None => sleep.await,
            Some(told) => tokio::select! {
                () = sleep => {}
                made = told => {
                    if made != Ok(true) {
                        return Ended::NotHandedOver;
                    }
                    log.line("the caller has the token");
                    handoff = None;
                }
            },
        }
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
