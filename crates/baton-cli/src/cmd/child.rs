//! Running CMD: its own process group, death with baton, the terminal, signals.

use std::io;
use std::process::ExitStatus;

use tokio::process::{Child, Command};

/// A running command in its own process group.
pub struct Running {
    /// The child process.
    pub child: Child,
    /// Its process group id (its pid).
    pub pgid: libc::pid_t,
    /// Whether it was given the terminal (and baton must take it back).
    gave_terminal: bool,
}

/// Whether stdin is a terminal whose foreground process group is baton's: then an
/// interactive CMD gets the terminal.
fn owns_terminal() -> bool {
    // SAFETY: plain libc queries on fd 0 with no memory passed.
    unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgrp() }
}

/// Spawns `argv` with `env` added. Call from the main thread: the parent-death signal fires
/// when the spawning thread exits.
pub fn spawn(argv: &[String], env: &[(String, String)]) -> io::Result<Running> {
    spawn_with(argv, env, false)
}

/// [`spawn`] with stdin, stdout and stderr piped to baton (a worker's job: parameters on stdin,
/// output kept), and never the terminal.
pub fn spawn_piped(argv: &[String], env: &[(String, String)]) -> io::Result<Running> {
    spawn_with(argv, env, true)
}

fn spawn_with(argv: &[String], env: &[(String, String)], piped: bool) -> io::Result<Running> {
    let Some((program, args)) = argv.split_first() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no command"));
    };
    let give_terminal = !piped && owns_terminal();
    // SAFETY: getpid has no preconditions.
    let baton_pid = unsafe { libc::getpid() };
    let mut command = Command::new(program);
    command
        .args(args)
        .envs(env.iter().cloned())
        .kill_on_drop(false);
    if piped {
        use std::process::Stdio;
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    }
    if give_terminal {
        // The child calls tcsetpgrp from what is briefly a background group: ignore SIGTTOU
        // around it (the disposition is inherited across fork and reset before exec).
        // SAFETY: setting a signal disposition to SIG_IGN is always valid.
        unsafe {
            libc::signal(libc::SIGTTOU, libc::SIG_IGN);
        }
    }
    // SAFETY: the closure only calls async-signal-safe functions (setpgid, prctl, getppid,
    // tcsetpgrp, signal, _exit) between fork and exec.
    unsafe {
        command.pre_exec(move || {
            if libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // baton died between fork and prctl: do not outlive it.
            if libc::getppid() != baton_pid {
                libc::_exit(137);
            }
            if give_terminal {
                libc::tcsetpgrp(0, libc::getpid());
            }
            libc::signal(libc::SIGTTOU, libc::SIG_DFL);
            Ok(())
        });
    }
    let child = command.spawn()?;
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
    })
}

impl Running {
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
