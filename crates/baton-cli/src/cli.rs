//! The command line: the list of commands, the global flags, and what parses them. Each
//! command's own arguments and help text live beside it, in `cmd/X.rs`; argument groups
//! several commands share, in `args/`.

use clap::{Parser, Subcommand};

use crate::args::lazy::Lazy;

use crate::cmd::{
    acquire, cancel, check, docs, init, job, jobs, keep, kv, log, notify, once, pause, reap, run,
    serve, status, token, tokens, why, worker,
};

/// Exit codes, documented in `--help` and the README.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0    success (for `run`: CMD's own exit code is passed through; 128+N if CMD died of signal N)
  1    error: the store failed, or the operation was refused (wrong or stale token, bad document);
       for `wait` and `submit --wait`: the job is dead (its attempts are spent);
       for `once`: the key is dead (its attempts are spent: `baton retry KEY`)
  2    usage error (bad flag, bad key, bad duration; `kv`: a bad name, value or JSON)
  3    `kv get`, `kv del`: no such value (never set, deleted, or expired); `resume`: no freeze
       on that target; `notify rm`, `notify test`: no rule of that name; `tokens revoke`: the
       tokens file has no token of that name
  4    `kv set`, `kv del`: a compare-and-swap was lost (--if-version, --if-absent) or a higher
       --fence wrote the value; nothing was written
  75   the wait for a turn timed out (--timeout)
  76   the ticket (or job) was superseded by a newer one while queued (--supersede); for
       `run`: a newer ticket asked it to stop (--cancel-running), and CMD was stopped; for
       `check`: the turn holds, but a newer ticket asked it to stop
  77   the ticket (or job) was cancelled or force-released by an operator (baton cancel)
  78   the lease was lost (a holder paused or cut off past its TTL), or the turn was lost;
       for `check`: the turn with that fence no longer holds the key (or has too little left)
  79   `run --max-hold`: CMD held the keys too long and was stopped
  80   `once --seq N`: step N-1 has not completed (a gap); nothing ran
  130  interrupted by SIGINT while waiting (143 for SIGTERM)";

const ABOUT: &str = "Fair, fenced locks and semaphores for CI pipelines, deployments and jobs";

const LONG_ABOUT: &str = "\
Fair, fenced locks and semaphores for CI pipelines, deployments and background jobs.

Every KEY (`deploy/production`) owns a queue. Callers wait their turn in order (no barging), hold
the key under a lease that baton renews, and get a fence number that strictly increases with every
grant, so a protected resource can refuse a stale holder.

Examples:
  baton run deploy/production -- ./deploy.sh         one deploy at a time, in arrival order
  baton run --limit 3 runners -- make test           at most three at once
  baton run --order \"$COMMIT_TIME\" --supersede deploy/prod -- ./deploy.sh
                                                     newest commit wins, older queued ones skip
  TOKEN=$(baton acquire --ttl 1h db/migrate)         acquire here ...
  baton release db/migrate \"$TOKEN\"                  ... release in another job
  baton status deploy/                               who holds what, who waits

Store (--store URL, or BATON_STORE), for every command:
  sqlite:PATH                       one machine; the default is $XDG_STATE_HOME/baton/baton.db,
                                    which gives no exclusion across machines or CI runners
  postgres://USER@HOST:PORT/DB      redis://HOST:PORT/DB      etcd://HOST:PORT/PREFIX
  s3://BUCKET/PREFIX                dynamodb://TABLE
  http(s)://HOST:PORT[,HOST:PORT]   through `baton serve` (tried in turn), with --token";

/// The commands where `--token` (a client's token for a server) means nothing: it is not offered
/// there, and refused (`serve` takes `--tokens FILE`).
const WITHOUT_CLIENT_TOKEN: [&str; 4] = ["serve", "tokens", "completions", "man"];

/// The commands that open no store: `--store` is not offered there either.
const WITHOUT_STORE: [&str; 3] = ["tokens", "completions", "man"];

/// The heading of the options every command takes.
const GLOBAL: &str = "Global options";

/// The command line as parsed: the derived [`Cli`], with `--token` taken out of the commands
/// it does not apply to. A command's own (hidden) argument of the same id stops the global one
/// from reaching it.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    let hidden = |id: &'static str, long: &'static str| {
        clap::Arg::new(id).long(long).value_name("VALUE").hide(true)
    };
    let command = WITHOUT_CLIENT_TOKEN
        .iter()
        .fold(Cli::command(), |command, name| {
            command.mut_subcommand(name, |sub| sub.arg(hidden("server_token", "token")))
        });
    WITHOUT_STORE.iter().fold(command, |command, name| {
        command.mut_subcommand(name, |sub| sub.arg(hidden("store", "store")))
    })
}

/// Parses the process's arguments with [`command`].
pub fn parse() -> Result<Cli, clap::Error> {
    use clap::FromArgMatches;
    let mut command = command();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let mut matches = command
        .try_get_matches_from_mut(&args)
        .map_err(|error| with_token_tip(error, &args))?;
    if let Some((name, sub)) = matches.subcommand() {
        let given = |id| sub.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
        let refused = if given("server_token") && WITHOUT_CLIENT_TOKEN.contains(&name) {
            Some("`--token` is what a client sends to a server")
        } else if given("store") && WITHOUT_STORE.contains(&name) {
            Some("`--store` names the store a command reads or writes")
        } else {
            None
        };
        if let Some(what) = refused {
            return Err(command.error(
                clap::error::ErrorKind::ArgumentConflict,
                format!("{what}; `baton {name}` takes none"),
            ));
        }
    }
    Cli::from_arg_matches_mut(&mut matches).map_err(|error| error.format(&mut command))
}

/// The commands whose turn's token is an argument of its own (`baton release KEY TOKEN`).
const WITH_TURN_TOKEN: [&str; 2] = ["release", "renew"];

/// `baton release KEY --token T` reads like the turn's token given by name, but `--token` is
/// the one for `baton serve`: clap then says only that TOKEN is missing, and its usage line
/// shows `--token <TOKEN>` beside it. Say where the turn's token goes.
fn with_token_tip(mut error: clap::Error, args: &[std::ffi::OsString]) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let token_missing = matches!(
        error.get(ContextKind::InvalidArg),
        Some(ContextValue::Strings(missing)) if missing.iter().any(|arg| arg == "<TOKEN>")
    );
    let given = |flag: &str| {
        args.iter()
            .filter_map(|arg| arg.to_str())
            .any(|arg| arg == flag || arg.starts_with(&format!("{flag}=")))
    };
    let command = args
        .iter()
        .filter_map(|arg| arg.to_str())
        .find(|arg| WITH_TURN_TOKEN.contains(arg));
    if let (ErrorKind::MissingRequiredArgument, true, true, Some(command)) =
        (error.kind(), token_missing, given("--token"), command)
    {
        error.insert(
            ContextKind::Suggested,
            ContextValue::StyledStrs(vec![format!(
                "the turn's token is the argument after the key: `baton {command} KEY TOKEN`; \
                 `--token` is the token for `baton serve` (--store http://HOST:PORT)"
            )
            .into()]),
        );
    }
    error
}

/// The `baton` command line.
#[derive(Debug, Parser)]
#[command(name = "baton", version, about = ABOUT, long_about = LONG_ABOUT, after_help = EXIT_CODES_HELP)]
pub struct Cli {
    /// Where keys live (`baton --help` lists the URLs) [default: a per-user SQLite file]
    #[arg(
        long,
        global = true,
        env = "BATON_STORE",
        value_name = "URL",
        help_heading = GLOBAL
    )]
    pub store: Option<String>,

    /// The token for a store reached through `baton serve` (`--store http://HOST:PORT`)
    // Its own id: a subcommand's ticket token (`baton release KEY TOKEN`) is another value.
    #[arg(
        id = "server_token",
        long = "token",
        global = true,
        env = "BATON_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true,
        help_heading = GLOBAL
    )]
    pub server_token: Option<String>,

    /// A file holding the token for `baton serve` (a CI's ID token that a step rewrites
    /// before each call, say): read by every command; --token or BATON_TOKEN win over it
    #[arg(
        long = "token-file",
        global = true,
        env = "BATON_TOKEN_FILE",
        value_name = "FILE",
        help_heading = GLOBAL
    )]
    pub token_file: Option<std::path::PathBuf>,

    /// Log what baton does to stderr: -v each operation, wait step and notification, -vv each
    /// request made of the store (BATON_LOG=FILTER, e.g. `debug`, logs dependencies too)
    #[arg(short, long, global = true, action = clap::ArgAction::Count, help_heading = GLOBAL)]
    pub verbose: u8,

    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands, in the order `--help` lists them: a reader meets locks first, then jobs,
/// run-once, values, notifications, operations, the server and the shell.
#[derive(Debug, Subcommand)]
pub enum Command {
    // ----- locks -----
    /// Wait for a turn at KEY..., run CMD while holding it, release when CMD exits
    #[command(after_help = run::RUN_HELP)]
    Run(Lazy<run::RunArgs>),
    /// Wait for a turn at KEY and print its token; release it later with `baton release`
    #[command(after_help = acquire::ACQUIRE_HELP)]
    Acquire(Lazy<acquire::AcquireArgs>),
    /// Give back a turn taken with `baton acquire`
    Release(Lazy<token::ReleaseArgs>),
    /// Extend the lease of a turn taken with `baton acquire`
    Renew(Lazy<token::RenewArgs>),
    /// Renew a turn until it ends: the keeper `baton acquire --keep-alive` starts
    #[command(hide = true)]
    Keep(Lazy<keep::KeepArgs>),
    /// Show who holds each key, who waits, and how the last turn ended
    Status(Lazy<status::StatusArgs>),
    /// Whether the turn with fence F still holds KEY: exit 0 if so, 78 if not, 76 if asked to stop
    #[command(after_help = check::CHECK_HELP)]
    Check(Lazy<check::CheckArgs>),
    /// Cancel a queued ticket, or force-release a held one (recorded as forced)
    #[command(override_usage = "baton cancel [OPTIONS] <KEY> <ID|--queued>")]
    Cancel(Lazy<cancel::CancelArgs>),
    /// Show how a key's past turns ended, newest first; --follow for new ones
    Log(Lazy<log::LogArgs>),
    // ----- jobs -----
    /// Queue a job for KEY: work a `baton worker` runs when the key has room
    #[command(after_help = job::SUBMIT_HELP)]
    Submit(Lazy<job::SubmitArgs>),
    /// Run the jobs of matching keys with CMD, each when its key has room
    #[command(after_help = worker::WORKER_HELP)]
    Worker(Lazy<worker::WorkerArgs>),
    /// List jobs (queued and running by default); `baton jobs show KEY JOB_ID` for one
    #[command(args_conflicts_with_subcommands = true, after_help = jobs::JOBS_HELP)]
    Jobs(Lazy<jobs::JobsArgs>),
    /// Wait until a job has ended; exit 0 succeeded, 1 dead, 77 cancelled, 76 superseded
    Wait(Lazy<job::WaitJobArgs>),
    /// Why a job (or KEY's next job) is not running yet, in a few lines
    Why(Lazy<why::WhyArgs>),
    /// End a job's run held under --async: `baton complete KEY JOB_ID --job-token TOKEN`
    Complete(Lazy<job::CompleteArgs>),
    /// Queue a dead job again (KEY JOB_ID), or give a dead run-once KEY its attempts back
    Retry(Lazy<job::RetryArgs>),
    // ----- run-once -----
    /// Run CMD unless a run of it already succeeded on KEY (--seq N: run step N in order)
    #[command(after_help = once::ONCE_HELP)]
    Once(Lazy<once::OnceArgs>),
    // ----- values -----
    /// Shared values: `baton kv set ci/version 1.4.2`, `baton kv get ci/version`
    #[command(subcommand, after_help = kv::KV_HELP)]
    Kv(kv::KvCommand),
    // ----- notifications -----
    /// Post events of keys (granted, released, failed, recovered, …) to a webhook or Slack
    #[command(subcommand, after_help = notify::NOTIFY_HELP)]
    Notify(notify::NotifyCommand),
    // ----- operations -----
    /// Stop new grants on KEY or PREFIX/ for a while (holders finish, waiters keep their places)
    #[command(after_help = pause::PAUSE_HELP)]
    Pause(Lazy<pause::PauseArgs>),
    /// End the freezes set on KEY or PREFIX/ with `baton pause`
    Resume(Lazy<pause::ResumeArgs>),
    /// Free the turns of CI runs that have ended (GitHub, CircleCI, GitLab), asking each CI
    #[command(after_help = reap::REAP_HELP)]
    Reap(Lazy<reap::ReapArgs>),
    /// Prepare a store for use: create a DynamoDB table; check or create other stores' schemas
    #[command(after_help = init::INIT_HELP)]
    Init(Lazy<init::InitArgs>),
    // ----- server -----
    /// Serve the store over HTTP: an API for every command, for runners without store credentials
    #[command(after_help = serve::SERVE_HELP)]
    Serve(Lazy<serve::ServeArgs>),
    /// Tokens for `baton serve`: `baton tokens new ci --scope lock:deploy/ --file tokens.json`
    #[command(subcommand, after_help = tokens::TOKENS_HELP)]
    Tokens(tokens::TokensCommand),
    // ----- shell -----
    /// Print a shell completion script: `baton completions bash > /etc/bash_completion.d/baton`
    Completions(Lazy<docs::CompletionsArgs>),
    /// Print a manual page (roff): `baton man > baton.1`, `baton man run > baton-run.1`
    Man(Lazy<docs::ManArgs>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
