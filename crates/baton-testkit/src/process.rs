//! `baton` (or `sh -c`) invocations: [`Cmd`] to set one up, [`Proc`] while it runs, [`Done`]
//! once it ended, with its output in files, waits that are always bounded, and exit checks that
//! print everything on failure.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::{baton_bin, Ctx, PROMPT};

/// A process to start: `baton` or `sh -c`.
pub struct Cmd<'c> {
    pub(crate) ctx: &'c Ctx,
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<OsString>,
    pub(crate) envs: Vec<(OsString, OsString)>,
    pub(crate) name: String,
    pub(crate) current_dir: Option<PathBuf>,
    pub(crate) stdout_closed: bool,
}

impl<'c> Cmd<'c> {
    /// Gives it a stdout whose reader has already gone (`baton … | head`, once `head` exits):
    /// a pipe with its read end closed, so that every write fails with EPIPE.
    pub fn stdout_closed(mut self) -> Self {
        self.stdout_closed = true;
        self
    }

    /// Runs it in `dir` instead of the test's own current directory.
    pub fn current_dir(mut self, dir: &Path) -> Self {
        self.current_dir = Some(dir.to_owned());
        self
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn env(mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.envs
            .push((name.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// The name used for its log files and in messages.
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// Starts it in its own process group, stdin from /dev/null, stdout and stderr into files.
    pub fn spawn(self) -> Proc {
        let (stdout_path, stderr_path) = self.log_paths();
        let mut command = self.command(&stdout_path, &stderr_path);
        let what = self.describe();
        let child = command
            .spawn()
            .unwrap_or_else(|error| panic!("spawn {what}: {error}"));
        Proc {
            child,
            exited: None,
            what,
            name: self.name,
            stdout_path,
            stderr_path,
            started: Instant::now(),
        }
    }

    /// Where its stdout and stderr go: numbered files named after it in the test's `logs/`.
    fn log_paths(&self) -> (PathBuf, PathBuf) {
        let n = self.ctx.next_invocation();
        let logs = self.ctx.dir().join("logs");
        fs::create_dir_all(&logs).expect("create the logs directory");
        let safe_name: String = self
            .name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(40)
            .collect();
        (
            logs.join(format!("{n:04}-{safe_name}.out")),
            logs.join(format!("{n:04}-{safe_name}.err")),
        )
    }

    /// The process to start: the test's store, binary and directory in its environment and
    /// nothing of the outer environment that could choose a store, a key or an output file.
    fn command(&self, stdout_path: &Path, stderr_path: &Path) -> Command {
        use std::os::unix::process::CommandExt;
        let stdout = fs::File::create(stdout_path).expect("create a stdout file");
        let stderr = fs::File::create(stderr_path).expect("create a stderr file");
        let mut command = Command::new(&self.program);
        command.args(&self.args);
        if let Some(dir) = &self.current_dir {
            command.current_dir(dir);
        }
        for (name, _) in std::env::vars_os() {
            let text = name.to_string_lossy();
            if text.starts_with("BATON_") || text == "GITHUB_OUTPUT" {
                command.env_remove(&name);
            }
        }
        command
            .env("BATON_STORE", &self.ctx.store)
            .env("TEST_BATON", baton_bin())
            .env("TEST_DIR", self.ctx.dir())
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0);
        if self.stdout_closed {
            let (reader, writer) = std::io::pipe().expect("make a pipe");
            drop(reader);
            command.stdout(writer);
        }
        command
    }

    /// The program and its arguments for messages, each argument cut at 80 characters.
    fn describe(&self) -> String {
        let program = self
            .program
            .file_name()
            .unwrap_or_default()
            .to_string_lossy();
        let args = self
            .args
            .iter()
            .map(|a| {
                let a = a.to_string_lossy();
                if a.len() > 80 {
                    format!("{}…", a.chars().take(80).collect::<String>())
                } else {
                    a.into_owned()
                }
            })
            .collect::<Vec<_>>();
        format!("{program} {}", args.join(" "))
    }

    /// Runs it to the end, failing the test if it takes longer than [`PROMPT`].
    pub fn run(self) -> Done {
        self.run_within(PROMPT)
    }

    /// Runs it to the end, failing the test if it takes longer than `timeout`.
    pub fn run_within(self, timeout: Duration) -> Done {
        self.spawn().wait(timeout)
    }
}

/// A started process, in its own process group. Dropping it kills the group if it still runs.
pub struct Proc {
    child: Child,
    exited: Option<ExitStatus>,
    what: String,
    name: String,
    stdout_path: PathBuf,
    stderr_path: PathBuf,
    started: Instant,
}

impl Proc {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Its exit status, if it has exited.
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().expect("try_wait");
        }
        self.exited
    }

    pub fn has_exited(&mut self) -> bool {
        self.try_exit().is_some()
    }

    /// Waits for it to exit; fails the test (killing it) after `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> Done {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_exit() {
                return self.done(status);
            }
            if Instant::now() >= deadline {
                self.kill();
                panic!(
                    "`{}` did not exit within {timeout:?}; killed it.\nstdout:\n{}\nstderr:\n{}",
                    self.what,
                    self.stdout(),
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills its process group and reaps it.
    pub fn kill(&mut self) {
        if self.try_exit().is_none() {
            // SAFETY: a plain signal send to the group we created at spawn.
            unsafe { libc::killpg(self.pid(), libc::SIGKILL) };
            self.exited = self.child.wait().ok();
            // A killed `faketime` leaves the segment and semaphore named after its PID, and a
            // later `faketime` with the same PID fails ("sem_open: File exists"). Reaped now:
            // the names are nobody's.
            for name in [
                format!("/dev/shm/faketime_shm_{}", self.pid()),
                format!("/dev/shm/sem.faketime_sem_{}", self.pid()),
            ] {
                let _ = fs::remove_file(name);
            }
        }
    }

    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&fs::read(&self.stdout_path).unwrap_or_default()).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&fs::read(&self.stderr_path).unwrap_or_default()).into_owned()
    }

    fn done(&self, status: ExitStatus) -> Done {
        use std::os::unix::process::ExitStatusExt;
        Done {
            what: self.what.clone(),
            name: self.name.clone(),
            code: status.code(),
            signal: status.signal(),
            stdout: self.stdout(),
            stderr: self.stderr(),
            elapsed: self.started.elapsed(),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A finished process.
#[derive(Debug, Clone)]
pub struct Done {
    pub what: String,
    pub name: String,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// From spawn to the moment the exit was seen.
    pub elapsed: Duration,
}

impl Done {
    pub fn describe(&self) -> String {
        format!(
            "`{}` exited with {} after {:?}\n--- stdout:\n{}\n--- stderr:\n{}",
            self.what,
            match (self.code, self.signal) {
                (Some(code), _) => format!("code {code}"),
                (None, Some(signal)) => format!("signal {signal}"),
                _ => "unknown status".to_owned(),
            },
            self.elapsed,
            self.stdout,
            self.stderr
        )
    }

    /// Fails the test unless it exited with `code`; also fails on panic text.
    pub fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code,
            Some(code),
            "expected exit code {code}:\n{}",
            self.describe()
        );
        self.assert_no_panic()
    }

    /// Fails the test unless it exited with one of `codes`.
    pub fn assert_code_in(&self, codes: &[i32]) -> &Self {
        assert!(
            self.code.is_some_and(|code| codes.contains(&code)),
            "expected an exit code in {codes:?}:\n{}",
            self.describe()
        );
        self.assert_no_panic()
    }

    /// A refusal: exit 1 or 2 (as given), a message on stderr, no panic.
    pub fn assert_refused(&self, codes: &[i32]) -> &Self {
        self.assert_code_in(codes);
        assert!(
            !self.stderr.trim().is_empty(),
            "a refusal must say why on stderr:\n{}",
            self.describe()
        );
        self
    }

    pub fn assert_no_panic(&self) -> &Self {
        assert!(
            !self.stderr.contains("panicked") && !self.stdout.contains("panicked"),
            "baton panicked:\n{}",
            self.describe()
        );
        self
    }
}
