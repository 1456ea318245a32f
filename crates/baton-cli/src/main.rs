//! `baton`: fair, fenced locks and semaphores from the command line.
//!
//! This binary only parses arguments, opens the store, calls the client library and turns
//! results into output and exit codes. Every rule lives in `baton-core`.

#![warn(clippy::print_stdout)]

#[macro_use]
mod out;
mod args;
mod ci_run;
mod cli;
mod cmd;
mod context;
mod exit;
mod render;
mod signals;
mod wait;

use std::io::Write;
use std::sync::Arc;

use baton_store::url::OpenMode;

use crate::args::lazy::Lazy;
use crate::cli::{Cli, Command};
use crate::cmd::kv::KvCommand;
use crate::cmd::notify::NotifyCommand;
use crate::exit::Failure;

fn main() {
    let cli = match cli::parse() {
        Ok(cli) => cli,
        Err(error) => {
            // clap prints help and version to stdout (exit 0) and errors to stderr (exit 2).
            let _ = error.print();
            std::process::exit(if error.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            });
        }
    };
    setup_tracing(cli.verbose);
    // `--token` reaches the transport (and the commands `baton run` starts) as BATON_TOKEN; set
    // before any thread starts.
    if let Some(token) = &cli.server_token {
        std::env::set_var("BATON_TOKEN", token);
    } else if let Some(path) = &cli.token_file {
        match read_token_file(path) {
            Ok(token) => std::env::set_var("BATON_TOKEN", token),
            Err(message) => fail(Failure::usage(message)),
        }
    }
    let runtime = match runtime_for(&cli.command) {
        Ok(runtime) => runtime,
        Err(error) => fail(Failure::new(exit::ERROR, format!("cannot start: {error}"))),
    };
    // The main future runs on this (the main) thread, which lives as long as the process: a
    // command spawned from it dies with baton through its parent-death signal.
    let code = runtime.block_on(async {
        let code = dispatch(cli).await;
        // Events this process recorded get a moment to reach their receivers; what is left is
        // delivered by the next process that touches their keys, or `baton notify deliver`.
        baton_client::notify::flush(baton_client::notify::EXIT_FLUSH).await;
        code
    });
    let _ = std::io::stdout().flush();
    match code {
        Ok(code) => std::process::exit(code),
        Err(failure) => fail(failure),
    }
}

/// Whether the command stays to serve many things at once (a server, a worker, a keeper),
/// rather than doing one thing and exiting.
fn stays(command: &Command) -> bool {
    matches!(
        command,
        Command::Serve(_) | Command::Worker(_) | Command::Keep(_)
    )
}

/// A command that stays gets worker threads. One that does one thing and exits runs every task
/// on the main thread: its work is a few store requests, a heartbeat and a child, and starting
/// worker threads cost a cold `baton run` more CPU than that work (BENCHMARKS.md, B8's
/// profile). Name lookups go to the blocking pool, and SQLite's calls while CMD runs (`dispatch`).
fn runtime_for(command: &Command) -> std::io::Result<tokio::runtime::Runtime> {
    if stays(command) {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    }
}

fn fail(failure: Failure) -> ! {
    if failure.is_quiet() {
        std::process::exit(failure.code)
    }
    let message = render::one_line(failure.message.trim_end_matches('.'));
    let _ = writeln!(std::io::stderr(), "baton: {message}");
    std::process::exit(failure.code)
}

async fn dispatch(cli: Cli) -> Result<i32, Failure> {
    warn_of_memory(cli.store.as_deref());
    // A process that runs one command leaves a SQLite store's WAL short for the next one, and
    // makes its calls on its one thread but while CMD runs (`child.rs`); a server, a worker or
    // a keeper stays, checkpoints at SQLite's default and calls through the blocking pool.
    #[cfg(feature = "sqlite")]
    if !stays(&cli.command) {
        baton_store::sqlite::one_command_per_process();
        baton_store::sqlite::calls_on_the_calling_thread();
    }
    // The store `--store` names, with whether this command may create it.
    let store_url = StoreChoice {
        url: cli.store.clone(),
        mode: open_mode(&cli.command),
    };
    match cli.command {
        Command::Run(Lazy(args)) => {
            let opened = open_retrying(
                store_url,
                args.wait.waiting.store_retry,
                args.wait.waiting.quiet,
            )
            .await?;
            cmd::run::run(&opened, args).await
        }
        Command::Once(Lazy(args)) => {
            let opened =
                open_retrying(store_url, args.waiting.store_retry, args.waiting.quiet).await?;
            cmd::once::once(&opened, args).await
        }
        Command::Acquire(Lazy(args)) => {
            let opened = open_retrying(
                store_url,
                args.wait.waiting.store_retry,
                args.wait.waiting.quiet,
            )
            .await?;
            cmd::acquire::acquire(&opened, args).await
        }
        Command::Release(Lazy(args)) => cmd::token::release(&open(store_url).await?, args).await,
        Command::Renew(Lazy(args)) => cmd::token::renew(&open(store_url).await?, args).await,
        Command::Keep(Lazy(args)) => {
            // A store out of reach at the start is ridden out as a renewal would be.
            let opened = open_retrying(store_url, args.ttl, true).await?;
            cmd::keep::keep(&opened, args).await
        }
        Command::Status(Lazy(args)) => cmd::status::status(&open(store_url).await?, args).await,
        Command::Cancel(Lazy(args)) => cmd::cancel::cancel(&open(store_url).await?, args).await,
        Command::Check(Lazy(args)) => cmd::check::check(&open(store_url).await?, args).await,
        Command::Pause(Lazy(args)) => cmd::pause::pause(&open(store_url).await?, args).await,
        Command::Resume(Lazy(args)) => cmd::pause::resume(&open(store_url).await?, args).await,
        Command::Reap(Lazy(args)) => cmd::reap::reap(&open(store_url).await?, args).await,
        Command::Completions(Lazy(args)) => cmd::docs::completions(args.shell),
        Command::Man(Lazy(args)) => cmd::docs::man(args.subcommand.as_deref()),
        Command::Log(Lazy(args)) => cmd::log::log(&open(store_url).await?, args).await,
        Command::Init(Lazy(args)) => cmd::init::init(&open(store_url).await?, args).await,
        Command::Submit(Lazy(args)) => cmd::job::submit(&open(store_url).await?, args).await,
        Command::Complete(Lazy(args)) => cmd::job::complete(&open(store_url).await?, args).await,
        Command::Wait(Lazy(args)) => cmd::job::wait(&open(store_url).await?, args).await,
        Command::Retry(Lazy(args)) => cmd::job::retry(&open(store_url).await?, args).await,
        Command::Why(Lazy(args)) => cmd::why::why(&open(store_url).await?, args).await,
        Command::Jobs(Lazy(args)) => cmd::jobs::jobs(&open(store_url).await?, args).await,
        Command::Worker(Lazy(args)) => cmd::worker::worker(&open(store_url).await?, args).await,
        Command::Kv(command) => cmd::kv::kv(&open(store_url).await?, command).await,
        Command::Notify(command) => cmd::notify::notify(&open(store_url).await?, command).await,
        Command::Serve(Lazy(args)) => cmd::serve::serve(&open(store_url).await?, args).await,
        Command::Tokens(command) => cmd::tokens::tokens(command),
    }
}

/// `memory:` lives and dies with this one process: from the command line it excludes nothing
/// (every other `baton` has a memory of its own), which a user who tried it should be told.
fn warn_of_memory(url: Option<&str>) {
    let is_memory = url.is_some_and(|url| {
        url.get(..7)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("memory:"))
    });
    if is_memory {
        eprintln!(
            "baton: warning: `memory:` keeps keys inside this one process, for tests of the \
             library: it excludes nothing across processes and forgets everything at exit; \
             use sqlite:PATH on one machine"
        );
    }
}

/// The store a command opens: the URL `--store`/`BATON_STORE` gave (`None`: the per-user
/// default), and whether opening it may create it.
#[derive(Clone)]
struct StoreChoice {
    url: Option<String>,
    mode: OpenMode,
}

/// [`OpenMode::Existing`] for the commands that only read, so that a mistyped path is an error
/// rather than a new, empty store reporting that nothing is held; [`OpenMode::Create`] for
/// every other (`init`, `serve`, `worker` and `notify deliver` included).
fn open_mode(command: &Command) -> OpenMode {
    let reads = match command {
        Command::Status(_) | Command::Log(_) | Command::Why(_) | Command::Jobs(_) => true,
        Command::Kv(command) => matches!(command, KvCommand::Get(_) | KvCommand::Ls(_)),
        Command::Notify(command) => matches!(command, NotifyCommand::Ls(_)),
        _ => false,
    };
    if reads {
        OpenMode::Existing
    } else {
        OpenMode::Create
    }
}

/// An opened store with its coordinator, and the URL it came from.
pub struct Opened {
    /// Runs operations.
    pub coord: Arc<baton_client::Coordinator>,
    /// The URL, to pass on to commands (`BATON_STORE`).
    pub url: String,
}

/// [`open`], for the commands that wait: a store that cannot be reached (restarting, failing
/// over, cut off) is tried again for up to `retry` (`--store-retry`), as the wait itself would
/// ride it out; saying so once unless `quiet`. Any failure the store says will not heal (a bad
/// URL, a file that is not a database, refused credentials, a denied permission:
/// [`baton_store::StoreError::heals`]) is reported at once.
async fn open_retrying(
    store: StoreChoice,
    retry: std::time::Duration,
    quiet: bool,
) -> Result<Opened, Failure> {
    let started = std::time::Instant::now();
    let mut told = false;
    loop {
        match open(store.clone()).await {
            Err(OpenError::Store(error)) if error.heals() => {
                if started.elapsed() >= retry {
                    return Err(error.into());
                }
                if !told && !quiet {
                    eprintln!(
                        "baton: {error}; retrying for up to {} (--store-retry)",
                        crate::render::duration(retry)
                    );
                    told = true;
                }
                let pause = baton_client::acquire::retry_pause(started.elapsed());
                tokio::time::sleep(pause).await;
            }
            Err(OpenError::Store(error)) => return Err(error.into()),
            Err(OpenError::Other(failure)) => return Err(failure),
            Ok(opened) => return Ok(opened),
        }
    }
}

/// Why [`open`] failed: the store's own error (which [`open_retrying`] may retry), or another.
enum OpenError {
    Store(baton_store::StoreError),
    Other(Failure),
}

impl From<OpenError> for Failure {
    fn from(error: OpenError) -> Failure {
        match error {
            OpenError::Store(error) => error.into(),
            OpenError::Other(failure) => failure,
        }
    }
}

/// Opens the store named by `--store`/`BATON_STORE`, or the per-user default.
///
/// The default store is created by the first command that writes; until then a command that
/// reads finds it empty (nothing held, no history) rather than an error, as on a fresh machine
/// nothing is.
async fn open(store: StoreChoice) -> Result<Opened, OpenError> {
    let is_default = store.url.as_deref().is_none_or(str::is_empty);
    let url = match store.url.filter(|u| !u.is_empty()) {
        Some(url) => url,
        None => {
            let path = baton_store::url::default_sqlite_path().ok_or_else(|| {
                OpenError::Other(Failure::usage(
                    "no store given and no home directory: pass --store sqlite:PATH",
                ))
            })?;
            if std::env::var_os("CI").is_some() {
                eprintln!(
                    "baton: warning: no store chosen, using {} on this machine only; a local \
                     file gives no exclusion across CI runners (set BATON_STORE)",
                    path.display()
                );
            }
            format!("sqlite:{}", path.display())
        }
    };
    let token = std::env::var("BATON_TOKEN").ok().filter(|t| !t.is_empty());
    let coord = match baton_client::Coordinator::open_in(&url, token, store.mode).await {
        Ok(coord) => coord,
        Err(baton_store::StoreError::Missing { store, .. }) if is_default => {
            let empty = baton_store::memory::MemoryStore::standing_for(format!(
                "{store} (not created yet: the first command that writes creates it)"
            ));
            baton_client::Coordinator::new(Arc::new(empty))
        }
        Err(error) => return Err(OpenError::Store(error)),
    };
    Ok(Opened {
        coord: Arc::new(coord),
        url,
    })
}

/// The token in `path` (`--token-file`, `BATON_TOKEN_FILE`): its one line, read at every
/// command so that a token that expires (a CI's ID token) can be written anew between calls.
fn read_token_file(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?;
    let token = text.trim();
    if token.is_empty() || token.contains(char::is_whitespace) {
        return Err(format!(
            "the token file {} must hold one token on one line; it holds {}",
            path.display(),
            if token.is_empty() {
                "none"
            } else {
                "several words"
            }
        ));
    }
    Ok(token.to_owned())
}

/// baton's own crates: what `-v` turns up. Everything else (hyper, h2, sqlx, the AWS SDK…)
/// stays at warn, its internals being no part of what baton does; `BATON_LOG` (an `EnvFilter`
/// such as `debug` or `baton_client=trace,sqlx=info`) replaces the whole filter.
const OWN_CRATES: [&str; 6] = [
    "baton",
    "baton_cli",
    "baton_client",
    "baton_core",
    "baton_server",
    "baton_store",
];

/// Logging to stderr: warnings only by default; `-v` baton's operations, wait transitions and
/// deliveries (info), `-vv` each request made of the store (debug), `-vvv` trace.
fn setup_tracing(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let own: Vec<String> = OWN_CRATES.iter().map(|c| format!("{c}={level}")).collect();
    let directives = format!("warn,{}", own.join(","));
    let filter = tracing_subscriber::EnvFilter::try_from_env("BATON_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(directives));
    // Colours only on a terminal: CI logs and files would get raw escape codes. NO_COLOR is
    // honoured as everywhere else in the output.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        // Asked for detail, the reader sees where each line comes from (whose crate).
        .with_target(verbose > 0)
        .try_init();
}
