//! `baton-torture`: real `baton run` processes taking turns at a protected resource, and the
//! checker's verdict on what the resource recorded.
//!
//! `baton-torture run` serves a [`Resource`] on a loopback TCP port and starts `--clients`
//! threads, each running `--rounds` times
//! `baton run KEY --context cC-rR [--limit N | --shared] -- baton-torture use …`; the `use`
//! command (the protected work) tells the resource it begins with the fence `baton run` gave it
//! (`BATON_FENCE`), holds for `--hold`, and tells it it is done. At the end the checker reads
//! the resource's records; any violation makes the exit status 1.
//!
//! Faults (kills, pauses, store restarts, a network fault proxy, clock skew) are the next step
//! of issue 6; this runs the clean schedule they will disturb.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use baton_torture::checker::{check_intervals, KeySpec};
use baton_torture::resource::Resource;
use baton_torture::Mode;
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "baton-torture",
    about = "Real baton clients taking turns at a protected resource, checked for violations",
    after_help = "Example: baton-torture run --store sqlite:/tmp/t.db --clients 6 --rounds 10 \
                  --kind semaphore --limit 2"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve the resource, run the clients, check the records.
    Run(RunArgs),
    /// The protected work, run by `baton run` (reads BATON_FENCE and BATON_TICKET).
    Use(UseArgs),
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Kind {
    /// One holder at a time; fences must rise.
    Mutex,
    /// Up to --limit holders at once.
    Semaphore,
    /// Every client shared except one in three, which is normal: shared never beside normal.
    Shared,
}

#[derive(clap::Args)]
struct RunArgs {
    /// The store URL every client uses.
    #[arg(long)]
    store: String,
    /// The baton binary (default: next to this one).
    #[arg(long)]
    baton: Option<PathBuf>,
    /// Client threads, each running `baton run` processes one after another.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// `baton run` processes per client.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// What the key is.
    #[arg(long, value_enum, default_value = "mutex")]
    kind: Kind,
    /// The semaphore's limit.
    #[arg(long, default_value_t = 2)]
    limit: u32,
    /// How long each holder uses the resource.
    #[arg(long, default_value = "20ms", value_parser = humantime::parse_duration)]
    hold: Duration,
    /// The key (default: a fresh one, so runs on a shared store never meet).
    #[arg(long)]
    key: Option<String>,
    /// Run the clients' work WITHOUT baton (a self-test: the checker must then report
    /// violations, or it could not catch a broken lock either).
    #[arg(long)]
    unprotected: bool,
}

#[derive(clap::Args)]
struct UseArgs {
    /// The resource's address (host:port).
    #[arg(long)]
    resource: String,
    /// The key being used.
    #[arg(long)]
    key: String,
    /// Hold as a shared holder.
    #[arg(long)]
    shared: bool,
    /// How long to use it.
    #[arg(long, value_parser = humantime::parse_duration)]
    hold: Duration,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Run(args) => run(args),
        Cmd::Use(args) => use_resource(args),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("baton-torture: {message}");
            ExitCode::from(2)
        }
    }
}

/// The resource and the clock its records are on.
struct Served {
    resource: Mutex<Resource>,
    started: Instant,
}

impl Served {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

fn run(args: RunArgs) -> Result<ExitCode, String> {
    let baton = match &args.baton {
        Some(path) => path.clone(),
        None => std::env::current_exe()
            .map_err(|e| format!("cannot find this binary's path: {e}"))?
            .with_file_name("baton"),
    };
    if !baton.is_file() {
        return Err(format!(
            "no baton binary at {}: build it (`cargo build -p baton-cli`) or pass --baton",
            baton.display()
        ));
    }
    let own = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    // Creates what the store needs (a DynamoDB table) or checks it; idempotent.
    let init = Command::new(&baton)
        .args(["init", "--store", &args.store])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", baton.display()))?;
    if !init.status.success() {
        return Err(format!(
            "`baton init --store {}` failed: {}",
            args.store,
            String::from_utf8_lossy(&init.stderr).trim()
        ));
    }
    let key = args.key.clone().unwrap_or_else(|| {
        format!(
            "torture/{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        )
    });
    let spec = match args.kind {
        Kind::Mutex => KeySpec {
            limit: 1,
            fenced: true,
        },
        Kind::Semaphore => KeySpec {
            limit: args.limit,
            fenced: false,
        },
        Kind::Shared => KeySpec {
            limit: 1,
            fenced: false,
        },
    };
    let served = Arc::new(Served {
        resource: Mutex::new(Resource::new([(key.clone(), spec.fenced)])),
        started: Instant::now(),
    });
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot listen: {e}"))?;
    let address = listener
        .local_addr()
        .map_err(|e| format!("no local address: {e}"))?
        .to_string();
    {
        let served = served.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let served = served.clone();
                std::thread::spawn(move || serve(stream, &served));
            }
        });
    }

    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let clients: Vec<_> = (0..args.clients)
        .map(|c| {
            let (baton, own, key, address, store, failures) = (
                baton.clone(),
                own.clone(),
                key.clone(),
                address.clone(),
                args.store.clone(),
                failures.clone(),
            );
            let (rounds, kind, limit, hold) = (args.rounds, args.kind, args.limit, args.hold);
            let unprotected = args.unprotected;
            std::thread::spawn(move || {
                for r in 0..rounds {
                    let shared = kind == Kind::Shared && c % 3 != 0;
                    let mut command = if unprotected {
                        let mut command = Command::new(&own);
                        command
                            .env("BATON_FENCE", "1")
                            .env("BATON_TICKET", format!("c{c}-r{r}"));
                        command
                    } else {
                        let mut command = Command::new(&baton);
                        command
                            .args(["run", &key, "--quiet", "--store", &store])
                            .args(["--context", &format!("c{c}-r{r}")]);
                        if kind == Kind::Semaphore {
                            command.args(["--limit", &limit.to_string()]);
                        }
                        if shared {
                            command.arg("--shared");
                        }
                        command.arg("--").arg(&own);
                        command
                    };
                    command.args([
                        "use",
                        "--resource",
                        &address,
                        "--key",
                        &key,
                        "--hold",
                        &format!("{}ms", hold.as_millis()),
                    ]);
                    if shared {
                        command.arg("--shared");
                    }
                    let status = command.stdin(Stdio::null()).status();
                    if !matches!(&status, Ok(s) if s.success()) {
                        failures
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push(format!("c{c}-r{r}: {status:?}"));
                    }
                }
            })
        })
        .collect();
    for client in clients {
        let _ = client.join();
    }

    let mut resource = served
        .resource
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    resource.close_all(served.now_ns());
    let specs = std::collections::HashMap::from([(key.clone(), spec)]);
    let violations = check_intervals(&specs, resource.accepted());
    let failures = failures.lock().unwrap_or_else(PoisonError::into_inner);
    println!("store:       {}", args.store);
    println!("key:         {key}");
    println!(
        "holds:       {} accepted, {} rejected (fenced off)",
        resource.accepted().len(),
        resource.rejected().len()
    );
    println!("failed runs: {}", failures.len());
    for failure in failures.iter() {
        println!("  {failure}");
    }
    println!("violations:  {}", violations.len());
    for violation in &violations {
        println!("  {violation:?}");
    }
    Ok(if violations.is_empty() && failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// One client connection: `BEGIN key ticket fence normal|shared` → `OK` or `REJECTED why`,
/// then `END key ticket` → `OK`.
fn serve(stream: TcpStream, served: &Served) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { return };
        let words: Vec<&str> = line.split_whitespace().collect();
        let reply = match words.as_slice() {
            ["BEGIN", key, ticket, fence, mode] => {
                let mode = if *mode == "shared" {
                    Mode::Shared
                } else {
                    Mode::Normal
                };
                match fence.parse::<u64>() {
                    Ok(fence) => {
                        let now = served.now_ns();
                        let mut resource = served
                            .resource
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner);
                        match resource.begin(key, ticket, fence, mode, now) {
                            Ok(()) => "OK".to_owned(),
                            Err(why) => format!("REJECTED {why:?}"),
                        }
                    }
                    Err(_) => format!("ERROR bad fence {fence}"),
                }
            }
            ["END", key, ticket] => {
                let now = served.now_ns();
                let mut resource = served
                    .resource
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if resource.end(key, ticket, now) {
                    "OK".to_owned()
                } else {
                    "ERROR not begun".to_owned()
                }
            }
            _ => format!("ERROR cannot read {line:?}"),
        };
        if writeln!(writer, "{reply}").is_err() {
            return;
        }
    }
}

/// The protected work: begin with the fence, hold, end.
fn use_resource(args: UseArgs) -> Result<ExitCode, String> {
    let fence = std::env::var("BATON_FENCE")
        .map_err(|_| "BATON_FENCE is not set: run me under `baton run`")?;
    let ticket = std::env::var("BATON_TICKET")
        .map_err(|_| "BATON_TICKET is not set: run me under `baton run`")?;
    let mode = if args.shared { "shared" } else { "normal" };
    let stream = TcpStream::connect(&args.resource)
        .map_err(|e| format!("cannot reach the resource at {}: {e}", args.resource))?;
    let mut reader = BufReader::new(
        stream
            .try_clone()
            .map_err(|e| format!("cannot use the connection: {e}"))?,
    );
    let mut writer = stream;
    let mut ask = |line: String| -> Result<String, String> {
        writeln!(writer, "{line}").map_err(|e| format!("the resource went away: {e}"))?;
        let mut reply = String::new();
        reader
            .read_line(&mut reply)
            .map_err(|e| format!("the resource went away: {e}"))?;
        Ok(reply.trim().to_owned())
    };
    let begun = ask(format!("BEGIN {} {ticket} {fence} {mode}", args.key))?;
    if begun != "OK" {
        eprintln!("baton-torture use: the resource said {begun}");
        return Ok(ExitCode::from(3));
    }
    std::thread::sleep(args.hold);
    let ended = ask(format!("END {} {ticket}", args.key))?;
    if ended != "OK" {
        return Err(format!("the resource said {ended} at the end"));
    }
    Ok(ExitCode::SUCCESS)
}
