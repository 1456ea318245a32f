//! What baton's real-process tests share: the CLI's (crates/baton-cli/tests) and the
//! integrations' (integrations/tests).
//!
//! # Layout
//!
//! - [`for_each_store`]: runs a test once per store under test. `BATON_TEST_STORES` (comma-separated
//!   URLs) names shared servers; the entry `fresh-sqlite`, and the default when the variable is
//!   unset, gives each test its own `sqlite:<tempdir>/baton.db`. An entry `serve+URL` (or
//!   `serve+fresh-sqlite`) runs the test through a `baton serve` of its own in front of that
//!   store: every command then goes through `--store http://127.0.0.1:PORT`. Every run gets a
//!   fresh random key prefix, so runs never collide on a shared server. A `dynamodb://` store is
//!   prepared with `baton init` once per test process, before its first use.
//! - [`Ctx`]: one test's store, key prefix and scratch directory, and the processes it started.
//!   Dropping it (also while unwinding from a failed assertion) kills every process that carries
//!   its scratch directory in its environment, so no test leaves processes behind.
//! - [`Cmd`], [`Proc`], [`Done`]: `baton` (or `sh -c`) invocations with their output in files,
//!   waits that are always bounded, and exit checks that print everything on failure.
//! - [`files::ReadOnlyFile`]: a file nobody, root included, may write, for as long as it lives.
//! - [`KeyView`], [`TicketView`]: `baton status --json`, read in one place, so a change of field
//!   names is one edit here.
//! - [`fake_ci`], [`fake_issuer`]: a CI provider's API and an OpenID issuer, faked on loopback.
//! - [`ci`]: what the tests of the integrations that hold a turn for a whole CI job share (the
//!   stores they run on, a job's work as a gate, the history's turns).
//!
//! Children find the binary in `$TEST_BATON` and the scratch directory in `$TEST_DIR`; the store
//! reaches every `baton` through `BATON_STORE`, set explicitly on each process (the tests never
//! fall back to the per-user default store).

pub mod ci;
pub mod dist;
pub mod fake_ci;
pub mod fake_issuer;
pub mod files;
pub mod help;
pub mod http;
mod process;
pub mod stopped;
mod view;

pub use process::{Cmd, Done, Proc};
pub use view::{as_u64_lenient, KeyView, TicketView};

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The `baton` of this build, beside the directory that holds the test binaries
/// (`target/debug/deps/TEST` beside `target/debug/baton`). cargo builds it before baton-cli's own
/// tests; the tests of other packages need `cargo build -p baton-cli` first, as
/// scripts/test.sh does.
pub fn baton_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let test = std::env::current_exe().expect("the path of the running test binary");
        let bin = test
            .parent()
            .and_then(Path::parent)
            .map(|profile| profile.join("baton"))
            .expect("a test binary lives in target/PROFILE/deps");
        assert!(
            bin.is_file(),
            "no baton at {}: run `cargo build -p baton-cli` first (scripts/test.sh does)",
            bin.display()
        );
        bin
    })
}

/// How long a `baton` invocation that should finish promptly may take before the test fails.
pub const PROMPT: Duration = Duration::from_secs(30);

/// The `--ttl` of a holder that should hear an ask or a cancel within a renewal or two, yet
/// keep its lease on every store of a loaded CI machine. Not 3 s: on S3, whose clock reads
/// whole seconds, such a lease stands 1.7 s after the renewal that sets it is sent, and the
/// emulator on a loaded machine took longer to answer (the holder lost its lease, as it must).
pub const RENEWING_TTL: &str = "6s";

/// Runs `test` once per store under test, each time with a fresh [`Ctx`].
pub fn for_each_store(test: impl Fn(&Ctx)) {
    for store in stores_under_test() {
        let ctx = Ctx::new(store);
        eprintln!(
            "--- store {} prefix {} dir {}",
            ctx.store,
            ctx.prefix,
            ctx.dir().display()
        );
        test(&ctx);
    }
}

/// Runs `test` once with a fresh SQLite store, whatever `BATON_TEST_STORES` says (for tests of
/// the SQLite store itself).
pub fn with_fresh_sqlite(test: impl Fn(&Ctx)) {
    let ctx = Ctx::new(None);
    test(&ctx);
}

/// Runs `test` once with a fresh [`Ctx`] on the store `url`, whatever `BATON_TEST_STORES` says
/// (for tests that need one kind of store, such as the clock-skew tests on etcd).
pub fn with_store(url: &str, test: impl Fn(&Ctx)) {
    let ctx = Ctx::new(Some(url.to_owned()));
    test(&ctx);
}

/// The `BATON_TEST_STORES` entry for "a fresh SQLite file in the test's own directory".
pub const FRESH_SQLITE: &str = "fresh-sqlite";

/// The prefix of a `BATON_TEST_STORES` entry for "through a server of the test's own".
pub const SERVE: &str = "serve+";

/// `None` stands for "a fresh SQLite file in the test's own directory".
fn stores_under_test() -> Vec<Option<String>> {
    match std::env::var("BATON_TEST_STORES") {
        Ok(list) if !list.trim().is_empty() => list
            .split(',')
            .map(str::trim)
            .filter(|url| !url.is_empty())
            .map(|url| (url != FRESH_SQLITE).then(|| url.to_owned()))
            .collect(),
        _ => vec![None],
    }
}

/// 64 random bits as hex, from the standard library's randomly seeded hasher (no RNG crate
/// needed for names).
pub fn random_hex() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_nanos())
            .unwrap_or(0),
    );
    hasher.write_u32(std::process::id());
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    format!("{:016x}", hasher.finish())
}

/// One test's store, key prefix and scratch directory.
pub struct Ctx {
    /// The store URL every process of this test uses.
    pub store: String,
    /// With a `serve+` entry: the store behind the test's own server, and the server.
    pub behind_server: Option<(String, Proc)>,
    /// `t<random>/`: every key of this test starts with it.
    pub prefix: String,
    dir: Option<tempfile::TempDir>,
    /// Process groups to kill when the test ends (commands whose pid a test learned).
    extra_groups: Mutex<Vec<i32>>,
    n_invocations: AtomicUsize,
}

impl Ctx {
    fn new(store: Option<String>) -> Ctx {
        let dir = tempfile::Builder::new()
            .prefix("baton-cli-test-")
            .tempdir()
            .expect("create a scratch directory");
        let (through_server, store) = match store.as_deref().and_then(|s| s.strip_prefix(SERVE)) {
            Some(FRESH_SQLITE) => (true, None),
            Some(behind) => (true, Some(behind.to_owned())),
            None => (false, store),
        };
        let fresh = store.is_none();
        let store = store.unwrap_or_else(|| format!("sqlite:{}/baton.db", dir.path().display()));
        if fresh {
            // Reading commands never create a store: a test may read before its first write.
            run_init(&store);
        }
        init_once(&store);
        let mut ctx = Ctx {
            store,
            behind_server: None,
            prefix: format!("t{}/", random_hex()),
            dir: Some(dir),
            extra_groups: Mutex::new(Vec::new()),
            n_invocations: AtomicUsize::new(0),
        };
        if through_server {
            let (proc, address) = ctx.serve(&[]);
            let behind = std::mem::replace(&mut ctx.store, format!("http://{address}"));
            ctx.behind_server = Some((behind, proc));
        }
        ctx
    }

    /// Starts `baton serve --listen 127.0.0.1:0` on this test's store with `extra` arguments;
    /// waits for the address it listens on.
    pub fn serve(&self, extra: &[&str]) -> (Proc, std::net::SocketAddr) {
        self.serve_with_env(extra, &[])
    }

    /// [`Ctx::serve`], with more variables in the server's environment.
    pub fn serve_with_env(
        &self,
        extra: &[&str],
        envs: &[(String, String)],
    ) -> (Proc, std::net::SocketAddr) {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let mut cmd = self.baton(&args).name("serve");
        for (name, value) in envs {
            cmd = cmd.env(name, value);
        }
        let mut proc = cmd.spawn();
        let address = wait_for("the server's address", PROMPT, || {
            if proc.has_exited() {
                panic!("baton serve exited:\n{}", proc.stderr());
            }
            let stderr = proc.stderr();
            let rest = stderr.lines().find_map(|line| {
                let (_, rest) = line
                    .split_once(" on http://")
                    .or_else(|| line.split_once(" on https://"))?;
                Some(rest)
            })?;
            rest.split_whitespace().next()?.parse().ok()
        });
        (proc, address)
    }

    /// Whether this test runs through a `baton serve` of its own (a `serve+` entry).
    pub fn through_server(&self) -> bool {
        self.behind_server.is_some()
    }

    /// The scratch directory (children see it as `$TEST_DIR`).
    pub fn dir(&self) -> &Path {
        self.dir
            .as_ref()
            .expect("the scratch directory lives as long as the Ctx")
            .path()
    }

    /// A path in the scratch directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir().join(name)
    }

    /// This test's key `name` (the prefix prepended).
    pub fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// A `baton` invocation with `args`.
    pub fn baton<S: AsRef<OsStr>>(&self, args: impl IntoIterator<Item = S>) -> Cmd<'_> {
        let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let name = args
            .first()
            .map(|a| a.to_string_lossy().into_owned())
            .unwrap_or_else(|| "baton".to_owned());
        Cmd {
            ctx: self,
            program: baton_bin().to_owned(),
            args,
            envs: Vec::new(),
            name,
            current_dir: None,
            stdout_closed: false,
        }
    }

    /// `faketime -f OFFSET baton ARGS…`: `baton` with its wall clock shifted by `offset` (`+1h`,
    /// `-1h`) and its monotonic clock left alone (`FAKETIME_DONT_FAKE_MONOTONIC=1`). faketime
    /// forks: the spawned pid is faketime's, with baton its child in the same process group, so
    /// [`Proc::kill`] (the group) is what kills baton.
    pub fn baton_faketime<S: AsRef<OsStr>>(
        &self,
        offset: &str,
        args: impl IntoIterator<Item = S>,
    ) -> Cmd<'_> {
        let mut cmd = self.baton(args);
        cmd.args
            .splice(0..0, ["-f".into(), offset.into(), baton_bin().into()]);
        cmd.program = PathBuf::from("faketime");
        cmd.env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
    }

    /// `sh -c script`, with `$TEST_BATON`, `$TEST_DIR` and `BATON_STORE` in its environment.
    pub fn sh(&self, name: &str, script: &str) -> Cmd<'_> {
        Cmd {
            ctx: self,
            program: PathBuf::from("sh"),
            args: vec!["-c".into(), script.into()],
            envs: Vec::new(),
            name: name.to_owned(),
            current_dir: None,
            stdout_closed: false,
        }
    }

    /// `program ARGS…` run directly (no shell between: a shell drops environment variables whose
    /// names are not its own kind, such as the runner's `INPUT_TIMEOUT-POLL`), with the same
    /// environment as [`Ctx::sh`].
    pub fn program<S: AsRef<OsStr>>(
        &self,
        name: &str,
        program: impl AsRef<Path>,
        args: impl IntoIterator<Item = S>,
    ) -> Cmd<'_> {
        Cmd {
            ctx: self,
            program: program.as_ref().to_owned(),
            args: args.into_iter().map(|a| a.as_ref().to_owned()).collect(),
            envs: Vec::new(),
            name: name.to_owned(),
            current_dir: None,
            stdout_closed: false,
        }
    }

    /// Kill process group `pgid` (if still there) when the test ends.
    pub fn kill_group_on_drop(&self, pgid: i32) {
        self.extra_groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(pgid);
    }

    /// Creates (or truncates) a file in the scratch directory.
    pub fn touch(&self, name: &str) {
        fs::write(self.path(name), b"").expect("touch a file in the scratch directory");
    }

    /// The file's content, or an empty string if it does not exist.
    pub fn read(&self, name: &str) -> String {
        match fs::read(self.path(name)) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(error) => panic!("read {name}: {error}"),
        }
    }

    /// The file's non-empty lines.
    pub fn lines(&self, name: &str) -> Vec<String> {
        self.read(name)
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .map(str::to_owned)
            .collect()
    }

    pub fn exists(&self, name: &str) -> bool {
        self.path(name).exists()
    }

    /// Waits (bounded) for a file in the scratch directory to exist.
    pub fn wait_file(&self, name: &str, timeout: Duration) {
        let path = self.path(name);
        wait_until(&format!("{name} to appear"), timeout, || path.exists());
    }

    /// Reads the line a child wrote (`printf '%s\n' … > FILE`), once the file holds it whole:
    /// the shell's `>` creates the file before the command writes it, so a file that exists
    /// may still be empty.
    pub fn wait_line(&self, name: &str, timeout: Duration) -> String {
        wait_for(&format!("a whole line in {name}"), timeout, || {
            let text = self.read(name);
            text.ends_with('\n')
                .then(|| text.trim_end_matches('\n').to_owned())
        })
    }

    /// Reads a pid a child wrote, once the file holds a whole line.
    pub fn wait_pid(&self, name: &str, timeout: Duration) -> i32 {
        wait_for(&format!("a pid in {name}"), timeout, || {
            let text = self.read(name);
            if !text.ends_with('\n') {
                return None;
            }
            text.trim().parse::<i32>().ok()
        })
    }

    // ----- status -----

    /// `baton status PREFIX --json`: must exit 0 and print only JSON on stdout.
    pub fn status(&self) -> Value {
        let done = self
            .baton(["status", &self.prefix, "--json"])
            .run_within(PROMPT);
        done.assert_code(0);
        serde_json::from_str(&done.stdout).unwrap_or_else(|error| {
            panic!(
                "`baton status --json` printed something that is not one JSON value ({error}):\n{}",
                done.describe()
            )
        })
    }

    /// Whether the store has a clock (status then knows how much of a lease is left); stores
    /// without one judge leases by observation, and status shows no lease left.
    pub fn store_has_clock(&self) -> bool {
        let status = self.status();
        match status["clock"].as_str() {
            Some("store") => true,
            Some("observation") => false,
            _ => panic!("status --json says how leases are judged: {status}"),
        }
    }

    /// How far behind the store's time a clock reading may be (`status --json`'s
    /// `clock_uncertain_ms`: 1000 on S3, whose `Date` has whole seconds; 0 elsewhere).
    pub fn clock_uncertain_ms(&self) -> u64 {
        let status = self.status();
        status["clock_uncertain_ms"]
            .as_u64()
            .unwrap_or_else(|| panic!("status --json has no clock_uncertain_ms: {status}"))
    }

    /// The status of `key`, if status lists it.
    pub fn key_status(&self, key: &str) -> Option<KeyView> {
        let status = self.status();
        let keys = status
            .get("keys")
            .and_then(Value::as_array)
            .unwrap_or_else(|| panic!("status --json has no `keys` array: {status}"));
        keys.iter()
            .find(|entry| entry.get("key").and_then(Value::as_str) == Some(key))
            .map(|raw| KeyView { raw: raw.clone() })
    }

    /// The status of `key`; fails the test if status does not list it.
    pub fn key_view(&self, key: &str) -> KeyView {
        self.key_status(key)
            .unwrap_or_else(|| panic!("status does not list key {key}: {}", self.status()))
    }

    /// Waits until `check` holds for `key`'s status (a key status does not list counts as empty).
    pub fn wait_status(
        &self,
        what: &str,
        key: &str,
        timeout: Duration,
        mut check: impl FnMut(&KeyView) -> bool,
    ) -> KeyView {
        let started = Instant::now();
        loop {
            let view = self.key_status(key).unwrap_or(KeyView { raw: Value::Null });
            if check(&view) {
                return view;
            }
            if started.elapsed() > timeout {
                panic!(
                    "timed out after {timeout:?} waiting for {what} on {key}; last status: {}",
                    view.raw
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until a ticket with `context` is queued on `key`.
    pub fn wait_queued(&self, key: &str, context: &str) -> KeyView {
        self.wait_status(&format!("{context} queued"), key, PROMPT, |view| {
            view.queue().iter().any(|ticket| ticket.context == context)
        })
    }

    /// Waits until a ticket with `context` holds `key`.
    pub fn wait_holding(&self, key: &str, context: &str) -> KeyView {
        self.wait_status(&format!("{context} holding"), key, PROMPT, |view| {
            view.holders()
                .iter()
                .any(|ticket| ticket.context == context)
        })
    }

    // ----- gated holders -----

    /// The command of a gated run: appends `NAME start` to `log`, writes its pid (its process
    /// group) to `NAME.pid` and its fence to `NAME.fence`, waits until `NAME.go` exists, appends
    /// `NAME end` to `log` and exits 0.
    pub fn gate_script(name: &str) -> String {
        format!(
            r#"echo "{name} start" >> "$TEST_DIR/log"
echo "$BATON_FENCE" > "$TEST_DIR/{name}.fence"
echo $$ > "$TEST_DIR/{name}.pid"
while [ ! -e "$TEST_DIR/{name}.go" ]; do sleep 0.05; done
echo "{name} end" >> "$TEST_DIR/log""#
        )
    }

    /// Spawns `baton run KEY --context NAME EXTRA... -- sh -c <gate_script(NAME)>`.
    pub fn spawn_gated(&self, name: &str, key: &str, extra: &[&str]) -> Proc {
        let script = Self::gate_script(name);
        let mut args: Vec<&str> = vec!["run", key, "--context", name];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "sh", "-c", &script]);
        self.baton(args).name(name).spawn()
    }

    /// Waits until gated run `name` has started its command; registers its group for cleanup.
    pub fn wait_started(&self, name: &str) -> i32 {
        let pid = self.wait_pid(&format!("{name}.pid"), PROMPT);
        self.kill_group_on_drop(pid);
        pid
    }

    /// The fence gated run `name` wrote to `NAME.fence` ([`Ctx::gate_script`]).
    pub fn written_fence(&self, name: &str) -> u64 {
        self.read(&format!("{name}.fence"))
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}.fence holds no decimal fence"))
    }

    /// Lets gated run `name` finish.
    pub fn open_gate(&self, name: &str) {
        self.touch(&format!("{name}.go"));
    }

    /// The lines of the shared event log.
    pub fn log(&self) -> Vec<String> {
        self.lines("log")
    }

    /// `key`'s history as `baton log KEY --json` prints it, newest first (freeze lines too).
    pub fn history(&self, key: &str) -> Vec<Value> {
        let done = self.baton(["log", key, "--json"]).run();
        done.assert_code(0);
        done.stdout
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
            .collect()
    }

    fn next_invocation(&self) -> usize {
        self.n_invocations.fetch_add(1, Ordering::Relaxed)
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        let groups = std::mem::take(
            self.extra_groups
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for pgid in groups {
            if pid_alive(pgid) {
                // SAFETY: plain signal sends; a vanished group gives ESRCH, ignored.
                unsafe {
                    libc::killpg(pgid, libc::SIGKILL);
                    libc::kill(pgid, libc::SIGKILL);
                }
            }
        }
        let Some(dir) = self.dir.take() else { return };
        kill_processes_with_env("TEST_DIR", &dir.path().to_string_lossy());
        if std::thread::panicking() {
            let kept = dir.keep();
            eprintln!(
                "test failed: its scratch directory is kept at {}",
                kept.display()
            );
        }
    }
}

/// Runs `baton init --store URL` once per test process for a store that must be prepared
/// before use (a DynamoDB table: the test servers' script starts the server but creates no
/// table, and opening the store never creates one). Idempotent, so test processes running at
/// the same time may all do it.
fn init_once(url: &str) {
    static DONE: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let needs_init = url
        .split_once("://")
        .is_some_and(|(scheme, _)| scheme.eq_ignore_ascii_case("dynamodb"));
    if !needs_init {
        return;
    }
    let mut done = DONE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if done.iter().any(|initialised| initialised == url) {
        return;
    }
    run_init(url);
    done.push(url.to_owned());
}

/// `baton init --store URL`, which must succeed.
fn run_init(url: &str) {
    let mut command = Command::new(baton_bin());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("BATON_") {
            command.env_remove(&name);
        }
    }
    let output = command
        .args(["init", "--store", url])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| panic!("spawn `baton init --store {url}`: {error}"));
    assert!(
        output.status.success(),
        "`baton init --store {url}` failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// SIGKILLs every process (but this one) whose environment has `name=value`: every process a
/// test started carries its `TEST_DIR`, so this finds all of them, however deep.
fn kill_processes_with_env(name: &str, value: &str) {
    let needle = format!("{name}={value}\0").into_bytes();
    let own_pid = std::process::id();
    // A few passes: a process may fork while we look.
    for _ in 0..3 {
        let mut n_killed = 0;
        let Ok(entries) = fs::read_dir("/proc") else {
            return;
        };
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if pid == own_pid {
                continue;
            }
            let Ok(environ) = fs::read(entry.path().join("environ")) else {
                continue;
            };
            let has = environ
                .split_inclusive(|byte| *byte == 0)
                .any(|var| var == needle.as_slice());
            if has {
                // SAFETY: a plain signal send.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                n_killed += 1;
            }
        }
        if n_killed == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `pid` is a live process (a zombie counts as gone: it runs nothing).
pub fn pid_alive(pid: i32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may contain anything.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z' | 'X') | None)
}

/// Sends `signal` to `pid`.
pub fn send_signal(pid: i32, signal: i32) {
    // SAFETY: a plain signal send.
    let rc = unsafe { libc::kill(pid, signal) };
    assert_eq!(
        rc,
        0,
        "kill({pid}, {signal}) failed: {}",
        std::io::Error::last_os_error()
    );
}

/// Polls `check` every 50 ms until it holds; fails the test after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    wait_for(what, timeout, || check().then_some(()));
}

/// Polls `check` every 50 ms until it gives a value; fails the test after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        if started.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Appends a line to a file (for tests that write their own notes).
pub fn append_line(path: &Path, line: &str) {
    let mut file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open for append");
    writeln!(file, "{line}").expect("append a line");
}

/// Fails unless every value is strictly greater than the one before.
pub fn assert_strictly_increasing(what: &str, values: &[u64]) {
    for (index, pair) in values.windows(2).enumerate() {
        assert!(
            pair[0] < pair[1],
            "{what} not strictly increasing at {index}: {} then {} (all: {values:?})",
            pair[0],
            pair[1]
        );
    }
}
