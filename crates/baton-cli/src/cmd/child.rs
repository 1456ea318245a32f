//! Running CMD: its own process group led by a supervisor that kills the group when baton
//! dies (see `supervisor.rs`), the terminal, signals.

use std::io;
use std::process::ExitStatus;

#[cfg(feature = "sqlite")]
use baton_store::sqlite::CallsElsewhere;
use tokio::process::{Child, Command};

use crate::cmd::supervisor;

/// A running command in its own process group.
pub struct Running {
    /// baton's child: CMD's supervisor, which exits as CMD does (its pipes are CMD's).
    pub child: Child,
    /// The process group of the supervisor, CMD and what CMD starts (the supervisor's pid).
    pub pgid: libc::pid_t,
    /// Whether it was given the terminal (and baton must take it back).
    gave_terminal: bool,
    /// Keeps a SQLite store's calls off baton's one thread until CMD is reaped, so that a
    /// renewal waiting for the file never holds up the lease's end ([`Running::wait`]).
    calls_elsewhere: Option<CallsElsewhere>,
}

/// Without SQLite, no call blocks baton's thread: nothing to keep elsewhere.
#[cfg(not(feature = "sqlite"))]
struct CallsElsewhere;

#[cfg(not(feature = "sqlite"))]
impl CallsElsewhere {
    fn begin() -> CallsElsewhere {
        CallsElsewhere
    }
}

/// Whether stdin is a terminal whose foreground process group is baton's: then an
/// interactive CMD gets the terminal.
fn owns_terminal() -> bool {
    // SAFETY: plain libc queries on fd 0 with no memory passed.
    unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgrp() }
}

/// Spawns `argv` with `env` added, under a supervisor that leads its process group. Call from
/// the main thread: the supervisor's parent-death signal fires when the spawning thread exits.
pub fn spawn(argv: &[String], env: &[(String, String)]) -> io::Result<Running> {
    spawn_with(argv, env, false)
}

/// [`spawn`] with stdin, stdout and stderr piped to baton (a worker's job: parameters on stdin,
/// output kept), and never the terminal.
pub fn spawn_piped(argv: &[String], env: &[(String, String)]) -> io::Result<Running> {
    spawn_with(argv, env, true)
}

fn spawn_with(argv: &[String], env: &[(String, String)], piped: bool) -> io::Result<Running> {
    let Some(program) = argv.first() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no command"));
    };
    let give_terminal = !piped && owns_terminal();
    let found = on_path(program);
    let exec = supervisor::Exec::new(&found, argv, env)?;
    // std's `Command` forks the supervisor and sets up its stdio; CMD's arguments and
    // environment are in `exec` alone, since std never execs anything here.
    let mut command = Command::new(found);
    command.kill_on_drop(false);
    if piped {
        use std::process::Stdio;
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    }
    if give_terminal {
        // baton gives the terminal away and takes it back from what is then a background
        // group: ignore SIGTTOU (CMD gets the default back before its exec).
        // SAFETY: setting a signal disposition to SIG_IGN is always valid.
        unsafe {
            libc::signal(libc::SIGTTOU, libc::SIG_IGN);
        }
    }
    let plan = supervisor::Plan::new(give_terminal, exec);
    // From before CMD can start until it is reaped.
    let calls_elsewhere = CallsElsewhere::begin();
    // SAFETY: the closure only makes async-signal-safe system calls (see supervisor.rs): it
    // turns the forked child into CMD's supervisor, which starts CMD itself, and returns only
    // when CMD could not be started.
    unsafe {
        command.pre_exec(move || plan.split());
    }
    let child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            if give_terminal {
                // SAFETY: as below; the supervisor may have taken the terminal before CMD's
                // exec failed.
                unsafe {
                    libc::tcsetpgrp(0, libc::getpgrp());
                }
            }
            return Err(error);
        }
    };
    let pgid = child.id().map_or(0, |id| id as libc::pid_t);
    if give_terminal && pgid > 0 {
        // Also from the parent, so the terminal is the child's whichever side runs first.
        // SAFETY: plain libc calls on a pid we just created.
        unsafe {
            libc::setpgid(pgid, pgid);
            libc::tcsetpgrp(0, pgid);
        }
    }
    Ok(Running {
        child,
        pgid,
        gave_terminal: give_terminal,
        calls_elsewhere: Some(calls_elsewhere),
    })
}

/// Where `program` is on `PATH`, found before the fork: the C library's `execvp` would try
/// every directory in turn in the forked child, one failed `exec` each, after baton's memory
/// was copied for it. The first executable file wins, as with `execvp`; a name with a `/`, or
/// one found nowhere, is passed on as it is, so the child's `exec` fails as it always did.
fn on_path(program: &str) -> std::path::PathBuf {
    let as_given = std::path::PathBuf::from(program);
    if program.is_empty() || program.contains('/') {
        return as_given;
    }
    let Some(path) = std::env::var_os("PATH") else {
        return as_given;
    };
    std::env::split_paths(&path)
        .map(|dir| {
            // An empty entry is the current directory, to execvp as to a shell.
            let dir = if dir.as_os_str().is_empty() {
                ".".into()
            } else {
                dir
            };
            dir.join(program)
        })
        .find(|candidate| is_executable_file(candidate))
        .unwrap_or(as_given)
}

/// A regular file this process may execute (`access(X_OK)`, as `execvp` finds out by trying).
fn is_executable_file(candidate: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    if !std::fs::metadata(candidate).is_ok_and(|meta| meta.is_file()) {
        return false;
    }
    let Ok(path) = std::ffi::CString::new(candidate.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: access reads the NUL-terminated path it is given and nothing else.
    unsafe { libc::access(path.as_ptr(), libc::X_OK) == 0 }
}

impl Running {
    /// Waits for the supervisor, and so CMD, to exit; from then on the store's calls may run
    /// on baton's thread again. Cancel-safe, as [`Child::wait`].
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        let status = self.child.wait().await;
        if status.is_ok() {
            self.calls_elsewhere = None;
        }
        status
    }

    /// Sends `signal` to the command's whole process group.
    pub fn signal_group(&self, signal: libc::c_int) {
        if self.pgid > 0 {
            // SAFETY: kill with a negative pid signals a process group; no memory involved.
            unsafe {
                libc::kill(-self.pgid, signal);
            }
        }
    }

    /// Takes the terminal back after the command ended.
    pub fn restore_terminal(&self) {
        if self.gave_terminal {
            // SAFETY: as in spawn; SIGTTOU stays ignored in baton.
            unsafe {
                libc::tcsetpgrp(0, libc::getpgrp());
            }
        }
    }
}

/// The exit code a shell would report for `status`: the code, or 128 + the signal.
pub fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 1,
    }
}
