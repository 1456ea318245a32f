//! The command line: every flag, its default, and the help text that teaches.

use std::time::Duration;

use baton_client::poll::PollBounds;
use clap::{Args, Parser, Subcommand, ValueEnum};

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
    let mut matches = command.try_get_matches_from_mut(std::env::args_os())?;
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
    #[command(after_help = RUN_HELP)]
    Run(RunArgs),
    /// Wait for a turn at KEY and print its token; release it later with `baton release`
    #[command(after_help = ACQUIRE_HELP)]
    Acquire(AcquireArgs),
    /// Give back a turn taken with `baton acquire`
    Release(ReleaseArgs),
    /// Extend the lease of a turn taken with `baton acquire`
    Renew(RenewArgs),
    /// Show who holds each key, who waits, and how the last turn ended
    Status(StatusArgs),
    /// Whether the turn with fence F still holds KEY: exit 0 if so, 78 if not, 76 if asked to stop
    #[command(after_help = CHECK_HELP)]
    Check(CheckArgs),
    /// Cancel a queued ticket, or force-release a held one (recorded as forced)
    #[command(override_usage = "baton cancel [OPTIONS] <KEY> <ID|--queued>")]
    Cancel(CancelArgs),
    /// Show how a key's past turns ended, newest first; --follow for new ones
    Log(LogArgs),
    // ----- jobs -----
    /// Queue a job for KEY: work a `baton worker` runs when the key has room
    #[command(after_help = SUBMIT_HELP)]
    Submit(SubmitArgs),
    /// Run the jobs of matching keys with CMD, each when its key has room
    #[command(after_help = WORKER_HELP)]
    Worker(WorkerArgs),
    /// List jobs (queued and running by default); `baton jobs show KEY JOB_ID` for one
    #[command(args_conflicts_with_subcommands = true, after_help = JOBS_HELP)]
    Jobs(JobsArgs),
    /// Wait until a job has ended; exit 0 succeeded, 1 dead, 77 cancelled, 76 superseded
    Wait(WaitJobArgs),
    /// Why a job (or KEY's next job) is not running yet, in a few lines
    Why(WhyArgs),
    /// End a job's run held under --async: `baton complete KEY JOB_ID --job-token TOKEN`
    Complete(CompleteArgs),
    /// Queue a dead job again (KEY JOB_ID), or give a dead run-once KEY its attempts back
    Retry(RetryArgs),
    // ----- run-once -----
    /// Run CMD unless a run of it already succeeded on KEY (--seq N: run step N in order)
    #[command(after_help = ONCE_HELP)]
    Once(OnceArgs),
    // ----- values -----
    /// Shared values: `baton kv set ci/version 1.4.2`, `baton kv get ci/version`
    #[command(subcommand, after_help = KV_HELP)]
    Kv(KvCommand),
    // ----- notifications -----
    /// Post events of keys (granted, released, failed, recovered, …) to a webhook or Slack
    #[command(subcommand, after_help = NOTIFY_HELP)]
    Notify(NotifyCommand),
    // ----- operations -----
    /// Stop new grants on KEY or PREFIX/ for a while (holders finish, waiters keep their places)
    #[command(after_help = PAUSE_HELP)]
    Pause(PauseArgs),
    /// End the freezes set on KEY or PREFIX/ with `baton pause`
    Resume(ResumeArgs),
    /// Prepare a store for use: create a DynamoDB table; check or create other stores' schemas
    #[command(after_help = INIT_HELP)]
    Init(InitArgs),
    // ----- server -----
    /// Serve the store over HTTP: an API for every command, for runners without store credentials
    #[command(after_help = SERVE_HELP)]
    Serve(ServeArgs),
    /// Tokens for `baton serve`: `baton tokens new ci --scope lock:deploy/ --file tokens.json`
    #[command(subcommand, after_help = TOKENS_HELP)]
    Tokens(TokensCommand),
    // ----- shell -----
    /// Print a shell completion script: `baton completions bash > /etc/bash_completion.d/baton`
    Completions(CompletionsArgs),
    /// Print a manual page (roff): `baton man > baton.1`, `baton man run > baton-run.1`
    Man(ManArgs),
}

// `\x20`: a line continuation eats the indentation of the first example line.
const SERVE_HELP: &str = "\
\x20 baton serve --store postgres://… --listen 127.0.0.1:7878
  baton tokens new ci --scope lock:deploy/ --scope read: --file tokens.json > ci.token
  baton serve --store s3://… --listen 0.0.0.0:7878 --tokens tokens.json \\
              --tls-cert server.pem --tls-key server.key
  BATON_STORE=https://ci-lock.example:7878 BATON_TOKEN=… baton run deploy/prod -- ./deploy.sh
  baton tokens revoke ci --file tokens.json && kill -HUP $SERVER_PID   # takes effect at once

Clients use --store http(s)://HOST:PORT[,HOST:PORT] (tried in turn) with BATON_TOKEN or --token:
every command works through a server as directly. Several servers may share one store. The
dashboard is at / (live; cancel and force-release with an admin token); metrics at /metrics
(Prometheus: with a tokens file it needs a token with read on some key, unless
--metrics-public); the API is described at /v1/openapi.json. /healthz and /readyz need none.

Without --tokens every caller may do everything, so the server listens on loopback only (unless
--insecure: a proxy in front checks callers), and answers only requests whose Host (and Origin,
when sent) is a loopback name or address, whatever the port: localhost, 127.0.0.1, [::1]
(403 host_not_allowed for others, so a web page cannot reach it by DNS rebinding). The dashboard
is at http://127.0.0.1:PORT/. With --insecure the listen address is answered too; --allow-host
adds names. With a tokens file, every request needs `Authorization: Bearer TOKEN` (401 without
a known token) with a scope on its key (403 without): read (status, log, values, the dashboard),
lock (acquire, renew and release one's own tickets, submit and run jobs, kv set), admin
(cancel, force-release, retry, kv delete, notification rules, acknowledging deliveries). A
job's parameters are never replaced once submitted. The file keeps SHA-256 hashes only; `baton
tokens new|ls|revoke --file` edit it, and SIGHUP makes the server read it again (a file that
does not parse is reported and the tokens as they were stay).

Waiters are pushed their turn: the server follows each waited-on key once (reading it every
--poll on S3 and DynamoDB, however many wait) and streams its changes. SIGTERM or Ctrl-C: stop
accepting, end every stream (clients follow another server), finish the requests under way.";

/// `baton serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where to listen (port 0: any free port; the address is printed on stderr)
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:7878")]
    pub listen: std::net::SocketAddr,
    /// The tokens file (written by `baton tokens new --file FILE`; read again on SIGHUP)
    #[arg(long, value_name = "FILE", env = "BATON_TOKENS_FILE")]
    pub tokens: Option<std::path::PathBuf>,
    /// Serve /metrics without a token (to a scraper that has none); by default, with a tokens
    /// file, /metrics needs a token with read on some key, since its gauges name key prefixes
    #[arg(long)]
    pub metrics_public: bool,
    /// Listen beyond loopback without a tokens file (when a proxy in front checks callers);
    /// requests naming the listen address are answered too
    #[arg(long)]
    pub insecure: bool,
    /// Without --tokens: also answer requests whose Host or Origin is NAME (a name or address
    /// of this machine, on any port; repeatable); loopback ones always are
    #[arg(long = "allow-host", value_name = "NAME", conflicts_with = "tokens")]
    pub allow_hosts: Vec<String>,
    /// How often the server reads a key that clients wait on, on a store that cannot push
    /// (S3, DynamoDB): once per key, however many wait (stores that push are read every
    /// second besides)
    #[arg(long, value_parser = parse_interval, default_value = "250ms", value_name = "DUR")]
    pub poll: Duration,
    /// Serve HTTPS with this certificate chain (PEM), and --tls-key
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1)
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
}

const TOKENS_HELP: &str = "\
\x20 baton tokens new ci --scope lock:deploy/ --scope read: --file tokens.json > ci.token
  baton tokens ls --file tokens.json
  baton tokens revoke ci --file tokens.json
  kill -HUP $(pidof baton)        a running `baton serve --tokens tokens.json` reads it again

--file defaults to $BATON_TOKENS_FILE, which `baton serve --tokens` reads too. The file keeps
each token's SHA-256 and scopes, never the token: `new` prints the token once, on stdout, and it
cannot be recovered later (revoke it and make another). Each edit replaces the file at once
(written beside it, mode 0600, then renamed), so a server reading it sees the old file or the
new one.";

/// `baton tokens`.
#[derive(Debug, Subcommand)]
pub enum TokensCommand {
    /// Make a token: adds it to the tokens file (--file) and prints the token on stdout, once
    New(TokensNewArgs),
    /// List the tokens file's names and scopes (never the hashes)
    Ls(TokensLsArgs),
    /// Remove a token from the tokens file (exit 3 if there is none of that name)
    Revoke(TokensRevokeArgs),
}

/// The tokens file of `baton tokens ls` and `revoke`.
#[derive(Debug, Args)]
pub struct TokensFileArg {
    /// The tokens file
    #[arg(long, value_name = "FILE", env = "BATON_TOKENS_FILE")]
    pub file: std::path::PathBuf,
}

/// `baton tokens ls`.
#[derive(Debug, Args)]
pub struct TokensLsArgs {
    /// The tokens file.
    #[command(flatten)]
    pub file: TokensFileArg,
    /// Print one JSON object: {"file", "tokens": [{"name", "scopes"}]}
    #[arg(long)]
    pub json: bool,
}

/// `baton tokens revoke`.
#[derive(Debug, Args)]
pub struct TokensRevokeArgs {
    /// The token's name
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The tokens file.
    #[command(flatten)]
    pub file: TokensFileArg,
}

/// `baton tokens new`.
#[derive(Debug, Args)]
pub struct TokensNewArgs {
    /// Its name, shown in the server's log and the dashboard (letters, digits, -, _, .)
    #[arg(value_name = "NAME")]
    pub name: String,
    /// SCOPE:PREFIX, repeatable: read, lock or admin on the keys that start with PREFIX
    /// (empty: every key), as lock:deploy/ or read:
    #[arg(long = "scope", value_name = "SCOPE:PREFIX", required = true)]
    pub scopes: Vec<String>,
    /// The tokens file to add it to (created, mode 0600, if missing) [default:
    /// $BATON_TOKENS_FILE; without either, the entry is printed on stderr instead, for a file
    /// kept elsewhere]
    #[arg(long, value_name = "FILE", env = "BATON_TOKENS_FILE")]
    pub file: Option<std::path::PathBuf>,
    /// Print one JSON object: {"token", "entry"} (and "file" when it was written)
    #[arg(long)]
    pub json: bool,
}

const NOTIFY_HELP: &str = "\
Events: granted, released (with its outcome), failed, recovered (a success after failures: the
\"fixed\" message), expired (a holder's lease ran out and the key went on without it),
superseded, cancelled (by `baton cancel`: `forced` when it held, `reason` says who), dead (a job's or a run-once key's
attempts are spent), waited (a ticket waited longer than --after).

  baton notify add deploy/ --url https://hooks.slack.com/services/… --on failed,recovered,expired
  baton notify add '' --name audit --url https://audit.example/baton --on all
  baton notify add deploy/ --name slow --url … --on waited --after 15m
  baton notify test audit                 posts a test event now and says what came back
  baton notify deliver --follow           delivers whatever is left, for as long as it runs

The body is JSON: delivery_id, rule, event, key, seq, ticket or job, outcome, forced, reason,
context, fence, enqueued_at, granted_at, at, ci_url (the run's URL when the context has one). A
Slack incoming-webhook URL (hooks.slack.com) gets {\"text\": …} with the same facts.

Delivery is at least once and never slows a lock: an event is appended to the key's history
by the write that made the change (a rule falls at most 100 events behind; older ones are
dropped and counted in `baton status`), then posted by the process that made the change (a short-lived command gives it at
most 2 s before it exits), or by the next one that touches the key, or by `baton notify deliver
--follow`. A failed POST is retried after 1 s, doubling up to 5 min, for a day; a key's events
reach each receiver in order. Every POST carries the X-Baton-Delivery header (also delivery_id
in the body): drop duplicates by it. Rules are read by each process at most 1 s late.";

/// `baton notify`.
#[derive(Debug, Subcommand)]
pub enum NotifyCommand {
    /// Add a rule (or replace the rule of the same --name)
    Add(NotifyAddArgs),
    /// List the rules
    Ls(NotifyLsArgs),
    /// Remove a rule (exit 3 if there is none of that name)
    Rm(NotifyRmArgs),
    /// Post a test event to a rule's URL now and say what came back
    Test(NotifyRmArgs),
    /// Deliver the events still waiting in keys' outboxes (--follow: keep at it)
    Deliver(NotifyDeliverArgs),
}

/// `baton notify add`.
#[derive(Debug, Args)]
pub struct NotifyAddArgs {
    /// Keys starting with PREFIX (`''` for every key)
    #[arg(value_name = "PREFIX")]
    pub prefix: String,
    /// Where to POST the events (http:// or https://; a Slack incoming webhook gets Slack text)
    #[arg(long, value_name = "URL")]
    pub url: String,
    /// Which events: a comma list of granted, released, failed, recovered, expired, superseded,
    /// cancelled, dead, waited; or all (with `waited` only when --after is given)
    #[arg(long, value_name = "EVENTS")]
    pub on: String,
    /// The rule's name [default: from the prefix]
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// For `waited`: how long a ticket waits before the event
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    pub after: Option<Duration>,
}

/// `baton notify ls`.
#[derive(Debug, Args)]
pub struct NotifyLsArgs {
    /// One JSON object per line: name, prefix, url, events, after_ms
    #[arg(long)]
    pub json: bool,
}

/// `baton notify rm` and `baton notify test`.
#[derive(Debug, Args)]
pub struct NotifyRmArgs {
    /// The rule's name
    #[arg(value_name = "NAME")]
    pub name: String,
}

/// `baton notify deliver`.
#[derive(Debug, Args)]
pub struct NotifyDeliverArgs {
    /// Keep delivering until SIGINT or SIGTERM
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// With --follow: how often to look
    #[arg(long, value_parser = parse_interval, default_value = "1s", value_name = "DUR")]
    pub poll: Duration,
}

const KV_HELP: &str = "\
Small values that parallel jobs share (a version to deploy, a build number, who approved),
kept in the same store as the locks, one document per NAME (the rules of keys: `ci/version`).

  baton kv set ci/version 1.4.2                   prints the new version (a number)
  baton kv get ci/version                         prints the value; exit 3 if there is none
  echo '{\"sha\":\"abc\"}' | baton kv set --json build/info -
  baton kv set --if-absent release/owner \"$USER\"  only the first writer wins (else exit 4)
  baton kv ls ci/                                 name, version, size, expires, writer

Compare-and-swap: read the version (`baton kv get --json NAME`), then `baton kv set NAME V
--if-version N`; exit 4 means someone wrote in between (the current version is on stderr):
read again and retry.

Fenced writes: inside `baton run`, pass `--fence \"$BATON_FENCE\"`. The value remembers the
highest fence that wrote it and refuses a lower one (exit 4), so a holder that was paused past
its lease cannot overwrite what the next holder wrote.

Values are UTF-8 text up to 64 KiB. --ttl expires a value on the reader's wall clock.";

/// `baton kv`.
#[derive(Debug, Subcommand)]
pub enum KvCommand {
    /// Print a value (exit 3 if it does not exist or has expired)
    Get(KvGetArgs),
    /// Set a value and print its new version (exit 4 if a condition or fence did not hold)
    Set(KvSetArgs),
    /// Delete a value (exit 3 if it does not exist, 4 if a condition or fence did not hold)
    Del(KvDelArgs),
    /// List values: name, version, size, expires, last writer
    Ls(KvLsArgs),
}

/// `baton kv get`.
#[derive(Debug, Args)]
pub struct KvGetArgs {
    /// The value's name (`ci/version`)
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Print a JSON object: name, value (parsed, if it was set with --json), version, size,
    /// expires_at, written_at, context, fence
    #[arg(long)]
    pub json: bool,
}

/// `baton kv set`.
#[derive(Debug, Args)]
pub struct KvSetArgs {
    /// The value's name (`ci/version`)
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The value; `-` reads it from stdin
    #[arg(value_name = "VALUE", allow_hyphen_values = true)]
    pub value: String,
    /// Write only if the current version is V (compare-and-swap); else exit 4
    #[arg(long, value_name = "V", conflicts_with = "if_absent")]
    pub if_version: Option<u64>,
    /// Write only if there is no value (or it has expired); else exit 4
    #[arg(long)]
    pub if_absent: bool,
    /// The value expires DUR after this write
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    pub ttl: Option<Duration>,
    /// Check that the value is JSON (refused with exit 2 if not)
    #[arg(long)]
    pub json: bool,
    /// The writer's fence (`$BATON_FENCE`): refused (exit 4) if a higher fence wrote the value
    #[arg(long, value_name = "F")]
    pub fence: Option<u64>,
    /// Who writes, shown by `baton kv ls` [default: from the CI's variables, else
    /// user@host pid N]
    #[arg(long, value_name = "TEXT")]
    pub context: Option<String>,
}

/// `baton kv del`.
#[derive(Debug, Args)]
pub struct KvDelArgs {
    /// The value's name
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Delete only if the current version is V; else exit 4
    #[arg(long, value_name = "V")]
    pub if_version: Option<u64>,
    /// The deleter's fence: refused (exit 4) if a higher fence wrote the value
    #[arg(long, value_name = "F")]
    pub fence: Option<u64>,
}

/// `baton kv ls`.
#[derive(Debug, Args)]
pub struct KvLsArgs {
    /// Only names starting with PREFIX [default: every value]
    #[arg(value_name = "PREFIX", default_value = "", hide_default_value = true)]
    pub prefix: String,
    /// One JSON object per line: name, version, size, expires_at, context
    #[arg(long)]
    pub json: bool,
}

const ONCE_HELP: &str = "\
For work that must not run twice (charge a card, send an email, migrate a database) when the
thing that starts it may deliver twice: a task queue, a re-run CI job, a retried webhook.

  runs      nobody has succeeded on KEY (within --retain): CMD runs while baton holds KEY;
            its exit status is recorded, and baton exits with it
  skipped   a run already succeeded: exit 0 at once, saying so, and CMD does not run.
            Callers that arrive while a run is going wait for it, then skip if it succeeded,
            or try in turn if it failed
  dead      --max-attempts runs failed: exit 1 until `baton retry KEY` gives the attempts back

The guarantee: CMD runs again only if the previous run's success was never recorded: baton
crashed between CMD's exit and the record, or the run lost its lease while it ran (its process
was killed, paused or cut off past --ttl). Such a run is recorded as `expired` (see `baton log
KEY`), spends an attempt, and the next caller runs CMD once the lease has run out.

Sequences: with --seq N, CMD runs only if KEY's last completed step is N-1 (a key with none has
completed 0, so --seq 1 runs first). A replay (step N or an earlier one already completed) is
skipped with exit 0; a gap (step N-1 not completed, or still running) is refused with exit 80,
naming the last completed step. A failed step may be tried again with the same N.

CMD gets BATON_KEY, BATON_TICKET, BATON_FENCE and BATON_ATTEMPT (1 for the first attempt since
the last success or retry), and BATON_SEQ with --seq.

Examples:
  baton once charge/order-1234 -- ./charge.sh 1234
  baton once --max-attempts 5 --retain 30d email/welcome/u42 -- ./send-welcome.sh u42
  baton once --seq \"$STEP\" --retain 365d migrate/billing -- ./migrate.sh \"$STEP\"";

const JOBS_HELP: &str = "\
One row per job: queued ones in the order they will run (READY says when a job waits for its
--not-before or its backoff), running ones with their fence, ended ones (with -s) newest first
per key with how they ended. --json prints one object per line with key, id, state, attempt,
position, ready_at, last_error, context, submitted_at, ended_at and fence.

  baton jobs deploy/                 what waits and runs under deploy/
  baton jobs -s dead,succeeded -l 20 what ended lately
  baton jobs show deploy/prod j-1f…  parameters, and every run with its exit and output";

const WORKER_HELP: &str = "\
Runs the oldest ready job of any matching key whose key has room, up to --concurrency at once;
keys take turns (the one whose head job has waited longest first), so a busy key never delays a
job of a free one. CMD gets the job's parameters on stdin and, in its environment, BATON_KEY,
BATON_JOB_ID, BATON_ATTEMPT (1 for the first attempt), BATON_FENCE, BATON_JOB_TOKEN,
BATON_PARAMS and BATON_STORE. Its output passes through; the last 16 KiB of each stream are kept
with the run (`baton jobs show`, `baton wait`).

CMD's exit status decides:
  0      succeeded (with --async: the job stays held until `baton complete`)
  75     released back (EX_TEMPFAIL): it keeps its place, spends no attempt, and is ready again
         after --release-delay; the 21st release back in a row counts as a failed attempt
  other  a failed attempt: retried after the job's backoff, dead when its attempts are spent

The worker renews each job's lease while CMD runs and kills CMD's process group before the
lease can end if it cannot (as `baton run` does); a job whose lease ran out is a failed attempt.
A job's --max-run stops CMD (SIGTERM, then SIGKILL 5s later), a failed attempt.

SIGTERM or SIGINT: stop claiming and let running jobs finish; after --grace, or at a second
signal, their commands are stopped and the jobs given back unspent. Exits 0 then.

Examples:
  baton worker deploy/ -- ./deploy.sh                 every key under deploy/, one job at a time
  baton worker --concurrency 8 -- ./handle-job.sh     every key, eight jobs at once";

const SUBMIT_HELP: &str = "\
Prints the job's id on stdout. The job waits in KEY's queue, in submit order beside the turns
of `baton run` (--order first), until a `baton worker` for the key runs it. A failed attempt is
retried after its backoff (10s, doubling, at most 10m) and keeps its place; when its attempts are
spent it is dead (`baton retry KEY JOB_ID` queues it again).

Examples:
  baton submit deploy/staging --params '{\"commit\":\"abc123\"}'
  baton submit deploy/prod --params @request.json --id deploy-abc123 --wait
  baton submit reports/nightly --not-before 2026-12-01T02:00:00Z --max-run 1h";

const RUN_HELP: &str = "\
CMD gets BATON_KEY, BATON_TICKET (the token) and BATON_FENCE in its environment. With several keys
(taken one at a time in sorted order, so two callers can never deadlock), BATON_KEYS=N and
BATON_KEY_i, BATON_TICKET_i, BATON_FENCE_i for i = 1..N in sorted key order; BATON_KEY,
BATON_TICKET and BATON_FENCE then name the first.

While CMD runs baton renews the lease every TTL/3. If it cannot renew in time (the store is
unreachable, or baton itself was paused), it kills CMD's process group before the lease can end
and exits 78. CMD runs in its own process group, led by a supervisor (CMD's parent) that kills the
whole group with SIGKILL the moment baton dies, kill -9 included; SIGINT and SIGTERM are forwarded
to the group. A process that leaves the group (setsid) is not covered, nor is a paused baton: then
only fences protect the resource: check BATON_FENCE where you can. The turn is released as `succeeded` if CMD exits 0, else `failed`, and
baton exits with CMD's exit code.";

const ACQUIRE_HELP: &str = "\
Prints the token alone on stdout (or a JSON object with --json). When GITHUB_OUTPUT is set, also
appends key=, ticket=, fence=, acquired-at=, waited-seconds= and position-at-start= lines to it,
for later steps and jobs. position-at-start is 0 when the turn came at once, else 1 + the tickets
queued ahead when the wait began. In a GitHub Actions step (GITHUB_ACTIONS=true) it first prints
::add-mask::TOKEN on stderr, so the runner hides the token in the job's log; stdout is unchanged
(--no-mask leaves it out, for a token passed to another job as a job output).

Nothing renews the lease of an acquired turn: choose --ttl to cover the work (default 15m), or
call `baton renew KEY TOKEN` from the work itself.";

/// How to wait for a turn and how to hold it (shared by `run` and `acquire`).
#[derive(Debug, Args, Clone)]
pub struct WaitArgs {
    /// How many may hold the key at once (1: a mutex). Every live ticket must agree
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub limit: u32,

    /// Hold together with other --shared tickets (readers), never beside a normal holder
    #[arg(long)]
    pub shared: bool,

    /// Lease duration [default: 30s for run (renewed every TTL/3), 15m for acquire]
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

/// `baton run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// How to wait and hold.
    #[command(flatten)]
    pub wait: WaitArgs,

    /// Stop CMD (its process group: SIGTERM, then SIGKILL 5s later) once it has held the
    /// keys this long; the turn is recorded as failed, and baton exits 79
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    pub max_hold: Option<Duration>,

    /// The keys to hold while CMD runs, then `--`, then CMD and its arguments
    #[arg(required = true, num_args = 1.., value_name = "KEY")]
    pub keys: Vec<String>,

    /// The command to run while holding the keys.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `baton once`.
#[derive(Debug, Args)]
pub struct OnceArgs {
    /// Run only as step N of KEY's sequence: right after step N-1 completed (exit 80 if it
    /// has not; exit 0 without running if step N is already done)
    #[arg(long, value_name = "N")]
    pub seq: Option<u64>,

    /// Failed runs after which KEY is dead (every caller exits 1 until `baton retry KEY`)
    #[arg(long, default_value_t = baton_core::once::MAX_ATTEMPTS_DEFAULT, value_name = "N")]
    pub max_attempts: u32,

    /// How long a success is remembered: after it, CMD runs again
    #[arg(long, value_parser = parse_retention, default_value = "7d", value_name = "DUR")]
    pub retain: Duration,

    /// Lease while CMD runs, renewed every TTL/3: a run whose baton dies is taken over this
    /// long after its last renewal
    #[arg(long, value_parser = parse_lease, default_value = "30s", value_name = "DUR")]
    pub ttl: Duration,

    /// Stop CMD (SIGTERM, then SIGKILL 5s later) once it has run this long: a failed attempt,
    /// exit 79
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    pub max_hold: Option<Duration>,

    /// How to wait for a run already going.
    #[command(flatten)]
    pub waiting: WaitingArgs,

    /// The key that remembers the run
    #[arg(value_name = "KEY")]
    pub key: String,

    /// The command, after `--`
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `baton retry`.
#[derive(Debug, Args)]
pub struct RetryArgs {
    /// The key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The dead job's id; without it, KEY's dead run-once record gets its attempts back
    #[arg(value_name = "JOB_ID")]
    pub id: Option<String>,
}

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
    /// position_at_start) instead of the token alone
    #[arg(long)]
    pub json: bool,

    /// In a GitHub Actions step, leave the token unmasked: for a token handed to another job
    /// through a job output, which GitHub drops when it holds a masked value. Anyone who can
    /// read the job's log can then release or renew the turn. baton's GitHub Action sets it
    /// and masks the ticket as its `mask-ticket` input says
    #[arg(long, env = "BATON_NO_MASK", value_parser = clap::builder::BoolishValueParser::new())]
    pub no_mask: bool,
}

/// How a turn ended, as its owner reports it.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ReleaseOutcome {
    /// The work succeeded.
    Succeeded,
    /// The work failed.
    Failed,
    /// The work was not done.
    Cancelled,
    /// The work was stopped because a newer ticket asked (`--cancel-running`); refused for a
    /// turn nobody asked to stop
    Superseded,
}

/// `baton release`.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The token `baton acquire` printed
    #[arg(value_name = "TOKEN")]
    pub token: String,
    /// How the work went (recorded in the key's history)
    #[arg(long, value_enum, default_value = "succeeded")]
    pub outcome: ReleaseOutcome,
}

/// `baton renew`.
#[derive(Debug, Args)]
pub struct RenewArgs {
    /// The key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The token `baton acquire` printed
    #[arg(value_name = "TOKEN")]
    pub token: String,
    /// New lease duration from now; a renewal never ends the lease sooner than it would have
    /// ended [default: the ticket's own TTL]
    #[arg(long, value_parser = parse_lease, value_name = "DUR")]
    pub ttl: Option<Duration>,
}

/// `baton status`.
#[derive(Debug, Args)]
#[command(after_help = STATUS_HELP)]
pub struct StatusArgs {
    /// Only keys starting with PREFIX [default: every key]
    #[arg(value_name = "PREFIX", default_value = "", hide_default_value = true)]
    pub prefix: String,
    /// Keep watching: redraw every --interval on a terminal; elsewhere print the table once,
    /// then one line per change (granted, queued, left)
    #[arg(short, long)]
    pub watch: bool,
    /// Only rows in these states: a comma list of held, queued, free, or all [default: all,
    /// but on a terminal the free keys that would push a busy key off the screen]
    #[arg(short, long, value_name = "STATES")]
    pub state: Option<String>,
    /// The columns to show, in order: a comma list, or all (see below)
    #[arg(short, long, value_name = "COLUMNS")]
    pub columns: Option<String>,
    /// Show at most N rows (1..=1000), and say how many were left out
    // `-n`/`--max-rows` in every command that lists rows (`log` too); `-l`/`--limit-rows` still
    // work, unlisted, for scripts written before (`--limit` is a semaphore's size).
    #[arg(
        short = 'n',
        long,
        short_alias = 'l',
        alias = "limit-rows",
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=1000)
    )]
    pub max_rows: Option<u32>,
    /// How often --watch looks at the store (100ms..=1h)
    #[arg(long, value_parser = parse_interval, default_value = "1s", value_name = "DUR")]
    pub interval: Duration,
    /// Write JSON (only JSON) to stdout; with --watch, one JSON object per line
    #[arg(long)]
    pub json: bool,
}

const STATUS_HELP: &str = "\
What matters first: busy keys (held or queued), then keys whose last turn failed, then free
keys. One row per ticket: holders first, then the queue in the order it will be granted; a key
with no live tickets shows one `free` row with how its last turn ended. Below the default table,
one line per busy key gives its limit, last outcome, failures in a row and mean hold time.

On a terminal the table fits its width (the context, then the key, cut with `…`), and free keys
that would push a busy key off the screen are left out: the line under the table says how many
(`-s all` shows every row). Piped, and with --json, nothing is left out unless asked.

Columns (-c): key, state, position (POS), id, fence, for (held for / waiting for), lease_left
(LEASE; `?` where the store has no clock), context, order, mode, limit, last (last outcome),
failures (failures in a row). Default: key,state,position,id,fence,for,lease_left,context.

--watch, not on a terminal, prints lines such as
  2026-11-22T01:02:03Z deploy/prod: t-abc granted (fence 17) to ci run 12
  2026-11-22T01:02:03Z deploy/prod: t-def queued at position 2 (alice@host pid 7)
  2026-11-22T01:02:05Z deploy/prod: t-abc left (succeeded)
With --json --watch: the full status object on the first line, then one object per change:
  {\"time\",\"key\",\"event\":\"granted\"|\"queued\"|\"left\",\"id\",\"mode\",\"context\", and fence
  (granted), position (queued), outcome, forced, reason (left)}.
Ctrl-C ends a watch (exit 0). Colour only on a terminal, and never when NO_COLOR is set.";

/// `baton log`.
#[derive(Debug, Args)]
#[command(after_help = LOG_HELP)]
pub struct LogArgs {
    /// The key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// How many entries (1..=10000)
    #[arg(
        short = 'n',
        long = "max-rows",
        alias = "lines",
        value_name = "N",
        default_value_t = 20,
        value_parser = clap::value_parser!(u32).range(1..=10000)
    )]
    pub n: u32,
    /// Print the last N oldest first, then each new entry as it is recorded, until Ctrl-C
    #[arg(short, long)]
    pub follow: bool,
    /// One JSON object per line (seq, key, id, outcome, forced, reason, context, order, mode,
    /// fence, enqueued_at, acquired_at, released_at, wait_ms, hold_ms)
    #[arg(long)]
    pub json: bool,
}

const LOG_HELP: &str = "\
Newest first: when the turn ended, its outcome (`cancelled (forced)` for an operator's forced
release), ticket id, fence, how long it waited (enqueued to granted, or to its end if never
granted), how long it held, its context and the reason. With --follow the last N come oldest
first, so new entries append in time order. Ctrl-C ends --follow (exit 0).";

/// `baton init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Print a JSON object (store, result) on stdout instead of a line on stderr
    #[arg(long)]
    pub json: bool,
}

const INIT_HELP: &str = "\
Run once per store, by someone allowed to create things there; everyday commands never create
anything, so the identity CI jobs use needs only read and write rights. Running it again does no
harm: it checks what exists and says so.

  dynamodb://TABLE   creates TABLE with on-demand billing (no capacity to plan) and waits until
                     it is active. An existing table with baton's key schema (pk: string
                     partition key, sk: string sort key) is fine; one with another schema is
                     refused. Needs dynamodb:CreateTable and dynamodb:DescribeTable on the table;
                     everyday use needs dynamodb:GetItem, PutItem, BatchWriteItem and Query.
  sqlite:PATH        creates the file and its schema (opening it would too).
  other stores       opening them creates or checks their schema; init says so.

Example:
  baton init --store dynamodb://baton-locks
  export BATON_STORE=dynamodb://baton-locks";

/// `baton completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `baton man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// A subcommand, for its own page (baton-SUBCOMMAND(1)) [default: baton(1)]
    #[arg(value_name = "SUBCOMMAND")]
    pub subcommand: Option<String>,
}

/// `baton cancel`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["id", "queued"])))]
pub struct CancelArgs {
    /// The key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The ticket id (from `baton status`)
    #[arg(value_name = "ID")]
    pub id: Option<String>,
    /// Cancel every queued ticket of the key
    #[arg(long)]
    pub queued: bool,
    /// Who cancels, for the history (`baton log`) and the `cancelled` notification
    /// [default: from the CI's variables, else user@host pid N]
    #[arg(long, value_name = "TEXT")]
    pub context: Option<String>,
}

/// `baton pause`.
#[derive(Debug, Args)]
pub struct PauseArgs {
    /// A key, a prefix ending in `/` (every key under it), or `*` (every key)
    #[arg(value_name = "KEY|PREFIX/", required_unless_present = "list")]
    pub target: Option<String>,
    /// Why: shown on every waiting line, in `baton status`, `baton log` and notifications
    #[arg(long, value_name = "TEXT", required_unless_present = "list")]
    pub reason: Option<String>,
    /// Start later: a time (`2026-12-24T16:00:00Z`, `2026-12-24 16:00` in UTC) or a
    /// duration from now (`2h`) [default: now]
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    pub from: Option<u64>,
    /// End by itself at a time or after a duration, as --from [default: at `baton resume`]
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    pub until: Option<u64>,
    /// Only inside this window of every week: "fri 16:00..mon 08:00", in UTC unless
    /// followed by an offset ("fri 16:00..mon 08:00 +01:00"; no time-zone names)
    #[arg(long, value_name = "WINDOW")]
    pub weekly: Option<String>,
    /// Who pauses, for the log [default: user@host, or the CI job]
    #[arg(long, value_name = "TEXT")]
    pub by: Option<String>,
    /// List the store's freezes instead (with --json: one JSON object per line)
    #[arg(long, conflicts_with_all = ["target", "reason", "from", "until", "weekly", "by"])]
    pub list: bool,
    /// Write JSON to stdout: what was paused, or with --list the freezes
    #[arg(long)]
    pub json: bool,
}

const PAUSE_HELP: &str = "\
While a key is paused no new turn is granted and no job is claimed on it: holders finish,
waiters keep their places, and their waiting line says why and until when.

  baton pause deploy/ --reason \"audit, ask #ops\"            every key under deploy/, until resumed
  baton pause deploy/prod --reason \"release freeze\" --until 2026-12-28T08:00:00Z
  baton pause db/ --reason \"maintenance\" --from 2026-12-24T22:00:00Z --until 2026-12-25T02:00:00Z
  baton pause deploy/ --reason \"no Friday deploys\" --weekly \"fri 16:00..mon 08:00 +01:00\"
  baton resume deploy/                                     ends the freezes set on deploy/
  baton pause --list                                       every freeze, and when it holds

An emergency: `baton run --override-freeze \"hotfix INC-42\" deploy/prod -- ./deploy.sh` is
granted through the freeze in its turn (those queued before it go first), recorded with the
reason. When `baton pause` returns, every baton process has seen the freeze (a process reads
freezes at most 1 s old), and the keys under it show it. Times are UTC; a weekly window takes a
fixed offset, so a zone with summer time needs it moved twice a year. Needs admin on every
key through `baton serve`.";

/// `baton resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The target given to `baton pause`: a key, a prefix ending in `/`, or `*`
    #[arg(value_name = "KEY|PREFIX/")]
    pub target: String,
    /// Who resumes, for the log [default: user@host, or the CI job]
    #[arg(long, value_name = "TEXT")]
    pub by: Option<String>,
    /// Write one JSON object to stdout: the freezes ended and the keys written
    #[arg(long)]
    pub json: bool,
}

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

const CHECK_HELP: &str = "\
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

/// `baton submit`.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The key (the resource the job is for: an environment, a server, a tenant)
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The job's parameters: JSON, or @FILE to read it from FILE (@- for stdin); at most 256 KiB.
    /// The worker's command gets them on stdin and in BATON_PARAMS [default: null]
    #[arg(long, value_name = "JSON|@FILE")]
    pub params: Option<String>,
    /// The job's id (letters, digits, `-`, `_`): a second submit with the same id queues
    /// nothing, prints it again and says how that job stands (`--json`: `"already": true`).
    /// An id is remembered while the job is live and, after it ended, as long as the key's
    /// history keeps its end (the store's retention: 10,000 entries per key by default, 90
    /// days on S3 and DynamoDB); past that, such a submit is refused (exit 1), never run again
    /// [default: a new j-…]
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,
    /// How many of the key's jobs and turns may run at once. Every live ticket must agree
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub limit: u32,
    /// Sort value: jobs and tickets with one go first, then by arrival. Two numbers (digits
    /// only) compare as integers (100 after 99; 099 ties with 99), other values as strings. A
    /// key's live jobs and tickets all use numbers or all text: the other kind is refused
    /// (exit 2)
    #[arg(long, value_name = "VALUE")]
    pub order: Option<String>,
    /// Cancel every queued job or ticket of the key that sorts before this one (as
    /// superseded), unless it was queued with --keep
    #[arg(long)]
    pub supersede: bool,
    /// Never be superseded, and never asked to stop by --cancel-running
    #[arg(long)]
    pub keep: bool,
    /// Ask the key's holders to stop when this job is queued: a `baton run` stops its command
    /// and exits 76, a job a worker runs is stopped; both are recorded superseded (see `baton
    /// run --help`)
    #[arg(long)]
    pub cancel_running: bool,
    /// Attempts before the job is dead (1..=1000)
    #[arg(long, default_value_t = baton_core::job::ATTEMPTS_DEFAULT, value_name = "N")]
    pub max_attempts: u32,
    /// Wait after the first failed attempt; it doubles after each further one, up to 10m
    #[arg(long, value_parser = parse_lease, default_value = "10s", value_name = "DUR")]
    pub backoff: Duration,
    /// Not before this time (RFC 3339, as 2026-12-01T02:00:00Z) or this long from now (DUR,
    /// at most 366d)
    #[arg(long, value_parser = check_not_before, value_name = "TIME|DUR")]
    pub not_before: Option<String>,
    /// Stop a run after DUR (SIGTERM, then SIGKILL), counted as a failed attempt
    #[arg(long, value_parser = parse_lease, value_name = "DUR")]
    pub max_run: Option<Duration>,
    /// Who submits it and why, shown to others [default: from the CI's variables, else
    /// user@host pid N]
    #[arg(long, value_name = "TEXT")]
    pub context: Option<String>,
    /// Then wait until the job has ended, as `baton wait` does (and exit as it does)
    #[arg(long)]
    pub wait: bool,
    /// Print a JSON object (key, id, state) instead of the id alone
    #[arg(long)]
    pub json: bool,
}

/// How an asynchronous run ended, as `baton complete` reports it.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CompleteOutcome {
    /// The job is done.
    Succeeded,
    /// A failed attempt: retried after its backoff, or dead.
    Failed,
}

/// `baton complete`.
#[derive(Debug, Args)]
pub struct CompleteArgs {
    /// The key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The job's id
    #[arg(value_name = "JOB_ID")]
    pub id: String,
    /// The run's token (BATON_JOB_TOKEN in the worker's command, read from there by default)
    #[arg(
        long = "job-token",
        env = "BATON_JOB_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub token: String,
    /// How the run went
    #[arg(long, value_enum, default_value = "succeeded")]
    pub outcome: CompleteOutcome,
    /// Why it failed, kept with the job (`baton jobs`, `baton why`)
    #[arg(long, value_name = "TEXT")]
    pub error: Option<String>,
}

/// `baton wait`.
#[derive(Debug, Args)]
pub struct WaitJobArgs {
    /// The key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The job's id (`baton submit` printed it)
    #[arg(value_name = "JOB_ID")]
    pub id: String,
    /// How often to look on stores that cannot push (S3, DynamoDB)
    #[arg(long, value_parser = parse_interval, default_value = "1s", value_name = "DUR")]
    pub poll: Duration,
    /// Print nothing while waiting
    #[arg(short, long)]
    pub quiet: bool,
}

/// `baton worker`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Keys to serve: an exact key, or a prefix ending in `/`; none serves every key
    #[arg(value_name = "PATTERN")]
    pub patterns: Vec<String>,
    /// Jobs run at once (1..=1000)
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub concurrency: u32,
    /// Lease of a run, renewed every TTL/3 while CMD runs; with --async, how long
    /// `baton complete` has after CMD exits 0 (unless `baton renew KEY TOKEN` extends it)
    #[arg(long, value_parser = parse_lease, default_value = "30s", value_name = "DUR")]
    pub ttl: Duration,
    /// When a job released back (exit 75) is ready again
    #[arg(long, value_parser = parse_delay, default_value = "5s", value_name = "DUR")]
    pub release_delay: Duration,
    /// After SIGTERM, how long running jobs may take to finish before they are given back
    #[arg(long, value_parser = parse_duration, default_value = "30s", value_name = "DUR")]
    pub grace: Duration,
    /// Do not complete a job when CMD exits 0: it stays held under its lease until
    /// `baton complete KEY JOB_ID --job-token TOKEN` (from any process or machine)
    #[arg(long = "async")]
    pub asynchronous: bool,
    /// How often an idle worker looks for jobs
    #[arg(long, value_parser = parse_interval, default_value = "1s", value_name = "DUR")]
    pub poll: Duration,
    /// Print no line per job
    #[arg(short, long)]
    pub quiet: bool,
    /// The command that runs each job, after `--`
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `baton jobs`.
#[derive(Debug, Args)]
pub struct JobsArgs {
    /// `show KEY JOB_ID`: one job in full.
    #[command(subcommand)]
    pub show: Option<JobsCommand>,
    /// Only keys starting with PREFIX [default: every key]
    #[arg(value_name = "PREFIX", default_value = "", hide_default_value = true)]
    pub prefix: String,
    /// Words after PREFIX: none are taken; kept so that `jobs shwo KEY ID` can be answered as
    /// the mistyped subcommand it is rather than as a prefix with stray words.
    #[arg(value_name = "WORDS", hide = true)]
    pub stray: Vec<String>,
    /// Only jobs in these states: a comma list of queued, running, succeeded, dead,
    /// cancelled, superseded, or all
    #[arg(short, long, value_name = "STATES", default_value = "queued,running")]
    pub state: String,
    /// Show at most N rows (1..=100000)
    #[arg(
        short = 'n',
        long,
        short_alias = 'l',
        alias = "limit-rows",
        value_name = "N",
        default_value_t = 1000,
        value_parser = clap::value_parser!(u32).range(1..=100_000)
    )]
    pub max_rows: u32,
    /// One JSON object per line
    #[arg(long)]
    pub json: bool,
}

/// `baton jobs show`.
#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// One job in full: state, parameters, and every run with its exit, time and output tail
    Show(JobShowArgs),
}

/// `baton jobs show KEY JOB_ID`.
#[derive(Debug, Args)]
pub struct JobShowArgs {
    /// The key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The job's id
    #[arg(value_name = "JOB_ID")]
    pub id: String,
    /// One JSON object
    #[arg(long)]
    pub json: bool,
}

/// `baton why`.
#[derive(Debug, Args)]
pub struct WhyArgs {
    /// The key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The job [default: the key's next job]
    #[arg(value_name = "JOB_ID")]
    pub id: Option<String>,
}

/// A command naming one job: `KEY JOB_ID`.
#[derive(Debug, Args)]
pub struct JobRefArgs {
    /// The key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The job's id
    #[arg(value_name = "JOB_ID")]
    pub id: String,
}

/// The largest value a duration flag takes, and how to write it in a message.
///
/// Every duration is bounded where it is parsed, so no later `Instant + Duration`,
/// `SystemTime + Duration` or conversion to milliseconds can overflow or wrap (humantime
/// reads `500000000000y` without complaint). Flags the core bounds take the core's limit;
/// the rest take [`LONGEST`], longer than any wait or hold anyone means.
#[derive(Clone, Copy, Debug)]
pub struct Bound {
    /// The largest value allowed.
    pub max: Duration,
    /// It, as a user would write it.
    pub written: &'static str,
}

const DAY_S: u64 = 24 * 3600;

/// Waits, holds, retries, grace periods, kv TTLs and times from now: 100 years (humantime's
/// year, 365.25 days).
pub const LONGEST: Bound = Bound {
    max: Duration::from_secs(36_525 * DAY_S),
    written: "100y",
};
/// Leases (`--ttl`, `--waiter-ttl`), `--max-run`, `--backoff` and `--min-left`: the core's
/// longest lease, 7 days.
pub const LEASE: Bound = Bound {
    max: Duration::from_millis(baton_core::limits::TTL_MAX_MS),
    written: "7d",
};
/// How often to look (`--poll`, `--interval`): an hour.
pub const INTERVAL: Bound = Bound {
    max: Duration::from_secs(3600),
    written: "1h",
};
/// `once --retain`: the core's longest retention, 3650 days.
pub const RETENTION: Bound = Bound {
    max: Duration::from_millis(baton_core::once::RETAIN_MAX_MS),
    written: "3650d",
};
/// `--not-before` and `--release-delay`: the core's longest delay of a job, 366 days.
pub const DELAY: Bound = Bound {
    max: Duration::from_millis(baton_core::job::DELAY_MAX_MS),
    written: "366d",
};

/// Parses `500ms`, `5s`, `15m`, `1h30m`, or a bare `0`, up to `bound`.
pub fn parse_duration_within(text: &str, bound: Bound) -> Result<Duration, String> {
    let duration = if text.trim() == "0" {
        Duration::ZERO
    } else {
        humantime::parse_duration(text.trim()).map_err(|e| {
            format!("`{text}` is not a duration ({e}); write it like 500ms, 5s, 15m or 1h30m")
        })?
    };
    if duration > bound.max {
        return Err(format!(
            "`{text}` is too long: the largest value allowed is {}",
            bound.written
        ));
    }
    Ok(duration)
}

/// A duration up to [`LONGEST`] (100 years).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    parse_duration_within(text, LONGEST)
}

/// A lease or a run's length, up to [`LEASE`] (7 days).
pub fn parse_lease(text: &str) -> Result<Duration, String> {
    parse_duration_within(text, LEASE)
}

/// An interval between looks, up to [`INTERVAL`] (1 hour).
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    parse_duration_within(text, INTERVAL)
}

/// A run-once retention, up to [`RETENTION`] (3650 days).
pub fn parse_retention(text: &str) -> Result<Duration, String> {
    parse_duration_within(text, RETENTION)
}

/// A job's delay, up to [`DELAY`] (366 days).
pub fn parse_delay(text: &str) -> Result<Duration, String> {
    parse_duration_within(text, DELAY)
}

/// Whole milliseconds of `duration`, saturating (a bounded flag never comes near).
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The instant `duration` from now; the far future, never a panic, if that overflows (a
/// bounded flag never does).
pub fn instant_after(duration: Duration) -> std::time::Instant {
    let now = std::time::Instant::now();
    now.checked_add(duration)
        .or_else(|| now.checked_add(LONGEST.max))
        .unwrap_or(now)
}

/// `--not-before`: a duration is bounded here (366 days); a time is judged against the clock
/// when the job is submitted.
pub fn check_not_before(text: &str) -> Result<String, String> {
    if is_duration(text) {
        parse_delay(text)?;
    }
    Ok(text.to_owned())
}

/// Whether `text` reads as a duration at all (however long): `0`, `5s`, `500000000000y`.
pub fn is_duration(text: &str) -> bool {
    text.trim() == "0" || humantime::parse_duration(text.trim()).is_ok()
}

/// Parses a time for `--from`/`--until`: RFC 3339 (`2026-12-24T16:00:00Z`, `2026-12-24
/// 16:00:00` in UTC, fractions allowed) or a duration from now (`2h`, up to 100 years); as
/// wall ms.
pub fn parse_time(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if is_duration(text) {
        let after = parse_duration(text)?;
        let now = std::time::SystemTime::now();
        let at = now.checked_add(after).ok_or_else(|| {
            format!("`{text}` from now is past what this machine's clock can count")
        })?;
        return Ok(wall_ms_of(at));
    }
    let with_seconds = |t: &str| {
        if t.len() == 16 {
            format!("{t}:00")
        } else {
            t.to_owned()
        }
    };
    humantime::parse_rfc3339_weak(&with_seconds(text))
        .map(wall_ms_of)
        .map_err(|_| {
            format!(
                "`{text}` is not a time; write it as 2026-12-24T16:00:00Z (UTC), \
                 2026-12-24 16:00 (UTC), or a duration from now such as 2h"
            )
        })
}

fn wall_ms_of(time: std::time::SystemTime) -> u64 {
    time.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Parses `--poll`: `MIN..MAX` (`250ms..5s`) or just `MAX` (the shortest interval then
/// defaults to 250ms, or MAX if shorter). Both within 10ms..1h, MIN no longer than MAX.
pub fn parse_poll(text: &str) -> Result<PollBounds, String> {
    let bounds = match text.split_once("..") {
        Some((min, max)) => PollBounds {
            min: parse_duration(min)?,
            max: parse_duration(max)?,
        },
        None => PollBounds::up_to(parse_duration(text)?),
    };
    let allowed = Duration::from_millis(10)..=Duration::from_secs(3600);
    if !allowed.contains(&bounds.min) || !allowed.contains(&bounds.max) {
        return Err(format!(
            "`{text}`: poll intervals must be between 10ms and 1h"
        ));
    }
    if bounds.min > bounds.max {
        return Err(format!(
            "`{text}`: the shortest interval is longer than the longest; write MIN..MAX, as in \
             250ms..5s"
        ));
    }
    Ok(bounds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_bounds() {
        let ms = Duration::from_millis;
        let ok = |text: &str| parse_poll(text).ok().map(|b| (b.min, b.max));
        assert_eq!(ok("250ms..5s"), Some((ms(250), ms(5000))));
        assert_eq!(ok("5s"), Some((ms(250), ms(5000))));
        assert_eq!(ok("100ms"), Some((ms(100), ms(100))));
        assert_eq!(ok("1s..1s"), Some((ms(1000), ms(1000))));
        for bad in [
            "5s..1s", "1ms", "1ms..1s", "1s..2h", "..", "1s..", "fast", "0",
        ] {
            assert!(parse_poll(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        let check = |text: &str, ms: Option<u64>| {
            assert_eq!(
                parse_duration(text).ok().map(|d| d.as_millis() as u64),
                ms,
                "{text}"
            );
        };
        check("500ms", Some(500));
        check("5s", Some(5_000));
        check("15m", Some(900_000));
        check("1h30m", Some(5_400_000));
        check("0", Some(0));
        check("0s", Some(0));
        check("5", None);
        check("soon", None);
        check("", None);
    }

    #[test]
    fn durations_are_bounded() {
        let ok = |text: &str, bound: Bound| parse_duration_within(text, bound).ok();
        assert_eq!(ok("36525d", LONGEST), Some(LONGEST.max));
        assert_eq!(ok("100y", LONGEST), Some(LONGEST.max));
        assert_eq!(ok("7d", LEASE), Some(Duration::from_secs(7 * DAY_S)));
        for (text, bound) in [
            ("36525d 1ns", LONGEST),
            ("500000000000y", LONGEST),
            ("18446744073709551615s", LONGEST),
            ("7d 1ms", LEASE),
            ("61m", INTERVAL),
            ("3651d", RETENTION),
            ("367d", DELAY),
        ] {
            let error = parse_duration_within(text, bound).expect_err(text);
            assert!(
                error.contains("largest value allowed") && error.contains(bound.written),
                "{text}: {error}"
            );
        }
        assert!(parse_time("100y").is_ok());
        assert!(parse_time("101y").is_err());
        assert!(parse_time("500000000000y").is_err());
        assert!(parse_time("2026-12-24T16:00:00Z").is_ok());
        assert!(check_not_before("367d").is_err());
        assert!(check_not_before("2099-01-01T00:00:00Z").is_ok());
    }

    /// Every flag that takes a duration or a time, with its command's path.
    fn duration_flags() -> Vec<(String, clap::Arg)> {
        use clap::CommandFactory;
        fn walk(path: String, cmd: &clap::Command, out: &mut Vec<(String, clap::Arg)>) {
            for arg in cmd.get_arguments() {
                let names = arg.get_value_names().unwrap_or_default();
                let timed = names.iter().any(|n| {
                    let n = n.as_str();
                    n.contains("DUR") || n.contains("TIME") || n == "MIN..MAX"
                });
                if timed {
                    out.push((path.clone(), arg.clone()));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(format!("{path} {}", sub.get_name()), sub, out);
            }
        }
        let mut out = Vec::new();
        let mut cmd = Cli::command();
        cmd.build();
        walk("baton".into(), &cmd, &mut out);
        out
    }

    /// Parses `--FLAG value` with `arg`'s own parser (alone in a command, so its command's
    /// other arguments are not needed): Ok, or the error clap prints.
    fn parse_flag(arg: &clap::Arg, value: &str) -> Result<(), String> {
        let long = arg.get_long().unwrap_or_default().to_owned();
        let alone = clap::Arg::new("flag")
            .long(long.clone())
            .value_name(arg.get_value_names().unwrap_or_default()[0].clone())
            .value_parser(arg.get_value_parser().clone());
        clap::Command::new("baton")
            .arg(alone)
            .try_get_matches_from(["baton".to_owned(), format!("--{long}={value}")])
            .map(drop)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn every_duration_flag_refuses_what_it_cannot_hold_by_name() {
        let flags = duration_flags();
        // The run, acquire, pause, kv set, submit, worker, once, check, status and serve flags.
        assert!(flags.len() >= 25, "found only {} flags", flags.len());
        for (path, arg) in &flags {
            let flag = format!("--{}", arg.get_long().unwrap_or_default());
            for huge in ["101y", "500000000000y", "18446744073709551615s", "1s..101y"] {
                if huge.contains("..") && arg.get_value_names().unwrap_or_default()[0] != "MIN..MAX"
                {
                    continue;
                }
                let error =
                    parse_flag(arg, huge).expect_err(&format!("{path} {flag} {huge} is refused"));
                assert!(
                    error.contains(&flag)
                        && (error.contains("largest value allowed") || error.contains("between")),
                    "{path} {flag} {huge}: the error names the flag and the bound: {error}"
                );
            }
            parse_flag(arg, "1s").unwrap_or_else(|e| panic!("{path} {flag} 1s: {e}"));
        }
    }

    proptest::proptest! {
        /// Whatever number and unit: a duration is read exactly or refused, never wrapped,
        /// and never past its bound; no flag's parser panics.
        #[test]
        fn durations_are_exact_or_refused(
            n in proptest::prop_oneof![
                proptest::prelude::any::<u64>(),
                0u64..100_000,
                proptest::prelude::Just(u64::MAX),
            ],
            unit in proptest::sample::select(vec![
                ("ns", 1u128),
                ("ms", 1_000_000),
                ("s", 1_000_000_000),
                ("m", 60_000_000_000),
                ("h", 3_600_000_000_000),
                ("d", 86_400_000_000_000),
                ("y", 31_557_600_000_000_000),
            ]),
        ) {
            let text = format!("{n}{}", unit.0);
            let exact_ns = u128::from(n) * unit.1;
            for bound in [LONGEST, LEASE, INTERVAL, RETENTION, DELAY] {
                match parse_duration_within(&text, bound) {
                    Ok(got) => {
                        proptest::prop_assert_eq!(got.as_nanos(), exact_ns, "{}", text);
                        proptest::prop_assert!(got <= bound.max);
                        proptest::prop_assert!(std::time::Instant::now().checked_add(got).is_some());
                        proptest::prop_assert!(u64::try_from(got.as_millis()).is_ok());
                    }
                    Err(_) => proptest::prop_assert!(
                        exact_ns > bound.max.as_nanos(),
                        "{} refused though within {}", text, bound.written
                    ),
                }
            }
            // No flag's parser panics on it (what each accepts is bounded as checked above).
            for (_, arg) in duration_flags() {
                let _ = parse_flag(&arg, &text);
            }
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
