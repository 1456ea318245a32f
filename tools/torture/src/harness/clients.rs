//! How a client thread starts its processes, and the store as clients reach it (directly or
//! through the fault proxy).

use std::fs::File;
use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_torture::checker::Ending;
use baton_torture::proxy::Proxy;

use super::{lock, signal, ClientKind, Config, KeyPlan, Kind, Running, Shared, Work, CLIENT_MARK};

/// A store reached through the fault proxy: the proxy, and how clients are pointed at it.
pub(super) struct ProxiedStore {
    pub(super) proxy: Arc<Proxy>,
    /// The store URL clients use.
    url: String,
    /// For S3 and DynamoDB, whose endpoint is in the environment: `AWS_ENDPOINT_URL`.
    endpoint: Option<String>,
}

impl ProxiedStore {
    /// Starts a proxy in front of the loopback address in `store` (or in `AWS_ENDPOINT_URL`).
    pub(super) fn start(store: &str) -> Result<ProxiedStore, String> {
        let in_env = store.starts_with("s3://") || store.starts_with("dynamodb://");
        let text = if in_env {
            std::env::var("AWS_ENDPOINT_URL").map_err(|_| {
                "proxy faults on s3:// and dynamodb:// need AWS_ENDPOINT_URL (a loopback server)"
                    .to_owned()
            })?
        } else {
            store.to_owned()
        };
        let (address, at) = loopback_address(&text).ok_or_else(|| {
            format!("proxy faults need a store at 127.0.0.1:PORT; {text} has none")
        })?;
        let proxy = Proxy::start(address)
            .map_err(|e| format!("cannot start the fault proxy to {address}: {e}"))?;
        proxy.mark_writes(WRITE_MARKERS);
        let rewritten = format!("{}{}{}", &text[..at.0], proxy.address(), &text[at.1..]);
        Ok(if in_env {
            ProxiedStore {
                proxy: Arc::new(proxy),
                url: store.to_owned(),
                endpoint: Some(rewritten),
            }
        } else {
            ProxiedStore {
                proxy: Arc::new(proxy),
                url: rewritten,
                endpoint: None,
            }
        })
    }
}

/// What makes a request to the store a write, for the proxy's reply faults: a write carries
/// the key's new document, and a read never does. Every document is JSON that opens with its
/// format number, and goes over the wire as is: an `EVALSHA` argument (Redis), a `bytea`
/// parameter in binary (PostgreSQL), a put's value in a `Txn` (etcd, gRPC without compression),
/// the hot record's body of a conditional `PUT` (S3). DynamoDB's hot record is deflated, so its
/// writes are told by their operation instead (`X-Amz-Target: DynamoDB_20120810.PutItem`; the
/// history's `BatchWriteItem` says `PutRequest`, not `PutItem`).
const WRITE_MARKERS: &[&[u8]] = &[b"{\"format\":", b"PutItem"];

/// The first `127.0.0.1:PORT` in `text`, and where it is.
fn loopback_address(text: &str) -> Option<(SocketAddr, (usize, usize))> {
    let start = text.find("127.0.0.1:")?;
    let digits = &text[start + "127.0.0.1:".len()..];
    let len = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    let end = start + "127.0.0.1:".len() + len;
    let address = text[start..end].parse().ok()?;
    Some((address, (start, end)))
}

/// Stands for the client process's name (`cC-rR`) in a [`ClientPlan`]'s command.
const WHO: &str = "{who}";
/// Stands for the number of whole [`EPOCH`]s since the run began in a [`ClientPlan`]'s
/// command: run-once keys and shared values are new ones every epoch, so that each sees a
/// first run (or a short value) and then callers that must skip (or grow it).
const EPOCH_MARK: &str = "{epoch}";
/// How long a run-once key or a shared value is the clients' current one.
const EPOCH: Duration = Duration::from_secs(4);
/// How long a job worker runs before the client thread asks it to stop (SIGTERM: it finishes
/// or gives back its job) and starts the next: a worker restarted by its supervisor.
const WORKER_LIFETIME: Duration = Duration::from_secs(8);

/// How one client thread starts its processes.
pub(super) struct ClientPlan {
    c: usize,
    /// What this client does.
    work: Work,
    /// The command for each key, in key order.
    commands: Vec<Vec<String>>,
    /// What each command works on (a key, a job key prefix, a run-once key, a value's name).
    subjects: Vec<String>,
    /// Whether each key is a mutex, in key order.
    fenced: Vec<bool>,
    env: Vec<(String, String)>,
    log: File,
    /// The run's key, the first part of every client process's [`CLIENT_MARK`].
    run: String,
}

impl ClientPlan {
    pub(super) fn new(
        config: &Config,
        keys: &[KeyPlan],
        c: usize,
        resource: &str,
        proxy: Option<&ProxiedStore>,
        log: &File,
    ) -> Result<ClientPlan, String> {
        let mut env = Vec::new();
        if let Some(endpoint) = proxy.and_then(|p| p.endpoint.clone()) {
            env.push(("AWS_ENDPOINT_URL".to_owned(), endpoint));
        }
        // One client in three runs with its clock ahead, one behind (real skew leaves the
        // monotonic clock alone, so faketime must too). libfaketime is preloaded directly: the
        // `faketime` wrapper forks and waits, so the process the harness started would be the
        // wrapper, and a kill -9 or a SIGSTOP would miss the client behind it.
        if let (Some(skew), Some(library)) = (config.skew, libfaketime()) {
            // With the work half dealt round the clients (every third one works the same), the
            // skew is dealt so that each kind of work has clients ahead, behind and on time.
            let turn = if config.work == Work::All {
                c + c / 3
            } else {
                c
            };
            let sign = match turn % 3 {
                1 => Some('+'),
                2 => Some('-'),
                _ => None,
            };
            if let Some(sign) = sign {
                if !env.iter().any(|(k, _)| k == "FAKETIME") {
                    env.push(("LD_PRELOAD".into(), library.display().to_string()));
                    env.push(("FAKETIME".into(), format!("{sign}{}", skew.as_secs())));
                    env.push(("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()));
                }
            }
        }
        let work = config.work.of_client(c);
        let mut commands = Vec::new();
        let mut subjects = Vec::new();
        for (k, key) in keys.iter().enumerate() {
            let subject = work
                .subject(&config.key, k)
                .unwrap_or_else(|| key.name.clone());
            let command = match work {
                Work::Locks | Work::All => {
                    ClientPlan::command(config, key, c, resource, proxy, &mut env)
                }
                work => ClientPlan::work_command(config, work, &subject, c, resource, proxy),
            };
            commands.push(command);
            subjects.push(subject);
        }
        Ok(ClientPlan {
            c,
            work,
            commands,
            subjects,
            // A paused job worker or run-once caller is what the fences are for.
            fenced: keys
                .iter()
                .map(|k| work != Work::Locks || k.fenced())
                .collect(),
            env,
            log: log
                .try_clone()
                .map_err(|e| format!("cannot share the log: {e}"))?,
            run: config.key.clone(),
        })
    }

    /// Client `c`'s command line for `key`.
    fn command(
        config: &Config,
        key: &KeyPlan,
        c: usize,
        resource: &str,
        proxy: Option<&ProxiedStore>,
        env: &mut Vec<(String, String)>,
    ) -> Vec<String> {
        let store = client_store(config, proxy, c);
        let shared = key.kind == Kind::Shared && !c.is_multiple_of(3);
        let (library, kept) = match config.client {
            ClientKind::Cli | ClientKind::Turns => (false, false),
            ClientKind::Library => (true, false),
            ClientKind::Kept => (false, true),
            // Odd clients the library; of the even ones, every other takes kept-alive turns.
            ClientKind::Mixed => (c % 2 == 1, c % 4 == 2),
        };
        let mut command: Vec<String> = Vec::new();
        let own = config.own.display().to_string();
        let hold = format!("{}ms", config.hold.as_millis());
        let mut timing = vec![
            "--ttl".to_owned(),
            format!("{}ms", config.ttl.as_millis()),
            "--waiter-ttl".to_owned(),
            format!("{}ms", config.waiter_ttl.as_millis()),
        ];
        timing.extend(key.shape_flags());
        if library {
            timing.extend([
                "--poll-min".to_owned(),
                format!("{}ms", config.poll_min.as_millis()),
                "--poll-max".to_owned(),
                format!("{}ms", config.poll_max.as_millis()),
            ]);
        } else {
            timing.extend(["--poll".to_owned(), config.poll()]);
        }
        if config.unprotected {
            command.extend([own, "use".into()]);
            if !env.iter().any(|(k, _)| k == "BATON_FENCE") {
                env.push(("BATON_FENCE".into(), "1".into()));
            }
            // Without baton every client of a pool writes to its first slot.
            if let Some(first) = key.slots.first() {
                if !env.iter().any(|(k, _)| k == "BATON_SLOT") {
                    env.push(("BATON_SLOT".into(), first.clone()));
                }
            }
        } else if config.client == ClientKind::Turns {
            command.extend([own, "turns-client".into(), "--store".into(), store]);
            command.extend(["--ttl".into(), format!("{}ms", config.ttl.as_millis())]);
            let waiter_ttl = format!("{}ms", config.waiter_ttl.as_millis());
            command.extend(["--waiter-ttl".into(), waiter_ttl]);
        } else if library {
            command.extend([own, "lib-client".into(), "--store".into(), store]);
            command.append(&mut timing);
            if config.by_arrival {
                command.push("--by-arrival".into());
            }
            if shared {
                command.push("--shared".into());
            }
        } else if kept {
            let baton = config.baton.display().to_string();
            command.extend([own, "kept-client".into(), "--baton".into(), baton]);
            command.extend(["--store".into(), store]);
        } else {
            command.push(config.baton.display().to_string());
            command.extend(["run".into(), key.name.clone(), "--quiet".into()]);
            command.extend(["--store".into(), store, "--context".into(), WHO.into()]);
            command.append(&mut timing);
            if shared {
                command.push("--shared".into());
            }
            command.extend(["--".into(), own, "use".into()]);
        }
        command.extend(["--resource".into(), resource.to_owned()]);
        command.extend(["--key".into(), key.name.clone(), "--hold".into(), hold]);
        command.extend(["--who".into(), WHO.into()]);
        if shared && (config.unprotected || !library) {
            command.push("--shared".into());
        }
        if kept && !config.unprotected {
            // What `baton acquire` is given, after the work's own flags.
            command.extend(["--".into(), "--context".into(), WHO.into()]);
            command.extend(timing);
            if shared {
                command.push("--shared".into());
            }
        }
        command
    }

    /// Client `c`'s command line for `work` on `subject` (never `Locks`).
    fn work_command(
        config: &Config,
        work: Work,
        subject: &str,
        c: usize,
        resource: &str,
        proxy: Option<&ProxiedStore>,
    ) -> Vec<String> {
        let store = client_store(config, proxy, c);
        let own = config.own.display().to_string();
        let ttl = format!("{}ms", config.ttl.as_millis());
        let hold = format!("{}ms", config.hold.as_millis());
        let baton = config.baton.display().to_string();
        let strings = |words: &[&str]| words.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
        let mut command = match work {
            Work::Jobs => {
                let mut worker =
                    strings(&[&baton, "worker", subject, "--quiet", "--store", &store]);
                worker.extend(strings(&[
                    "--ttl", &ttl, "--poll", "300ms", "--grace", "1s",
                ]));
                worker.extend(strings(&["--release-delay", "100ms", "--"]));
                worker
            }
            Work::Once => {
                let mut once = strings(&[&baton, "once", subject, "--quiet", "--store", &store]);
                once.extend(strings(&[
                    "--context",
                    WHO,
                    "--ttl",
                    &ttl,
                    "--poll",
                    &config.poll(),
                ]));
                once.extend(strings(&["--max-attempts", "1000", "--"]));
                once
            }
            Work::Kv | Work::Locks | Work::All => {
                let mut kv = strings(&[&own, "kv-client", "--store", &store]);
                kv.extend(strings(&["--name", subject, "--who", WHO]));
                return kv;
            }
        };
        command.extend(strings(&[&own, "use", "--resource", resource]));
        command.extend(strings(&["--hold", &hold, "--who", WHO]));
        if work == Work::Once {
            // A flaky command: the next caller must run it again, until one succeeds.
            command.extend(strings(&["--key", subject, "--fail-one-in", "3"]));
        }
        command
    }

    /// Runs round `r` of this client to its end, on key `(c + r) mod keys`: (the key's
    /// index, the process's name, what it worked on, how it ended). A job worker is asked to
    /// stop after [`WORKER_LIFETIME`], or when the run is over.
    pub(super) fn turn(
        &self,
        shared: &Shared,
        r: usize,
        deadline: Option<Instant>,
    ) -> (usize, String, String, Ending) {
        let who = format!("c{}-r{r}", self.c);
        let k = (self.c + r) % self.commands.len();
        let epoch = (shared.started.elapsed().as_secs() / EPOCH.as_secs()).to_string();
        let fill = |a: &str| a.replace(WHO, &who).replace(EPOCH_MARK, &epoch);
        let line: Vec<String> = self.commands[k].iter().map(|a| fill(a)).collect();
        let subject = fill(&self.subjects[k]);
        let mut command = Command::new(&line[0]);
        command
            .args(&line[1..])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            // Read by `use` only when it runs without baton (`--unprotected`).
            .env("BATON_TICKET", &who)
            .env(CLIENT_MARK, format!("{} {who}", self.run))
            .stdout(Stdio::null())
            .stderr(self.log.try_clone().map_or(Stdio::null(), Stdio::from));
        let stop_at = (self.work == Work::Jobs).then(|| {
            let end = Instant::now() + WORKER_LIFETIME;
            deadline.map_or(end, |d| d.min(end))
        });
        let skewed = self.env.iter().any(|(k, _)| k == "LD_PRELOAD");
        let (ending, _) = run_client(
            shared,
            &who,
            self.fenced[k],
            command,
            stop_at,
            skewed,
            &self.log,
        );
        (k, who, subject, ending)
    }
}

/// Starts client process `who`, known to the fault thread while it runs, and waits for it:
/// how it ended and what it printed on stdout (when `command` pipes it). At `stop_at` it is
/// sent SIGTERM (once), as a supervisor stops a long-running process.
pub(super) fn run_client(
    shared: &Shared,
    who: &str,
    fenced: bool,
    mut command: Command,
    stop_at: Option<Instant>,
    skewed: bool,
    log: &File,
) -> (Ending, String) {
    let mut log = log;
    command.stdin(Stdio::null());
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let _ = writeln!(log, "{who}: cannot start: {e}");
            return (Ending::Exited(Some(-1)), String::new());
        }
    };
    let pid = i32::try_from(child.id()).unwrap_or(0);
    lock(&shared.running).insert(
        who.to_owned(),
        Running {
            pid,
            started: Instant::now(),
            fenced,
        },
    );
    let mut printed = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut stdout, &mut printed);
    }
    let status = match stop_at {
        None => child.wait(),
        Some(stop_at) => loop {
            match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) if Instant::now() >= stop_at && !lock(&shared.killed).contains(who) => {
                    signal(pid, libc::SIGTERM);
                    break child.wait();
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => break Err(e),
            }
        },
    };
    if skewed {
        remove_faketime_leftovers(pid);
    }
    lock(&shared.running).remove(who);
    lock(&shared.workers).remove(who);
    let ending = if lock(&shared.killed).contains(who) {
        Ending::Killed
    } else {
        Ending::Exited(status.ok().and_then(|s| s.code()))
    };
    if !matches!(ending, Ending::Exited(Some(0)) | Ending::Killed) {
        let _ = writeln!(log, "{who}: {ending:?}");
    }
    (ending, printed)
}

/// The store URL client `c` uses: through the fault proxy when there is one, and through
/// servers with the first one it asks spread over the clients.
pub(super) fn client_store(config: &Config, proxy: Option<&ProxiedStore>, c: usize) -> String {
    spread(&proxy.map_or(config.store.clone(), |p| p.url.clone()), c)
}

/// What a client that is not its own (the job submitter) needs in its environment to reach
/// the store through the proxy.
pub(super) fn proxy_env(proxy: Option<&ProxiedStore>) -> Vec<(String, String)> {
    proxy
        .and_then(|p| p.endpoint.clone())
        .map(|e| ("AWS_ENDPOINT_URL".to_owned(), e))
        .into_iter()
        .collect()
}

/// libfaketime makes a shared-memory segment and a semaphore named after its process
/// (`/dev/shm/faketime_shm_PID`, `/dev/shm/sem.faketime_sem_PID`) and removes them at a normal
/// exit only. A client killed with -9 leaves them behind, and a later `faketime` whose PID is
/// the same then fails ("sem_open: File exists") — the CLI's skew tests did, after a soak left
/// hundreds. The client has been reaped: its names are nobody's now.
fn remove_faketime_leftovers(pid: i32) {
    for name in [
        format!("/dev/shm/faketime_shm_{pid}"),
        format!("/dev/shm/sem.faketime_sem_{pid}"),
    ] {
        let _ = std::fs::remove_file(name);
    }
}

/// libfaketime (Debian's `faketime` package: `/usr/lib/<multiarch>/faketime/libfaketime.so.1`).
pub(super) fn libfaketime() -> Option<std::path::PathBuf> {
    let lib = std::fs::read_dir("/usr/lib").ok()?;
    lib.flatten()
        .map(|dir| dir.path().join("faketime/libfaketime.so.1"))
        .find(|path| path.is_file())
}

/// Client `c`'s store URL: through servers (`http://a,b`), every other client asks the second
/// first, so the clients are spread over both.
fn spread(store: &str, c: usize) -> String {
    let Some(hosts) = store.strip_prefix("http://") else {
        return store.to_owned();
    };
    let mut hosts: Vec<&str> = hosts.split(',').collect();
    let n = hosts.len();
    hosts.rotate_left(c % n.max(1));
    format!("http://{}", hosts.join(","))
}
