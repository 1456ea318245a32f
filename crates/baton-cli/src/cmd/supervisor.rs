//! The supervisor between baton and CMD: a copy of baton forked without exec that leads CMD's
//! process group, kills that whole group with SIGKILL the moment baton dies, and otherwise
//! exits exactly as CMD did.
//!
//! Why a process of its own: the kernel's parent-death signal reaches one process only. Given
//! to CMD it killed CMD, but what CMD started (a `terraform apply` under a deploy script) went on
//! running beside the next holder of the key. The supervisor hears baton's death by a catchable
//! signal and answers with `kill(0, SIGKILL)`: its group is CMD's, and so every process CMD
//! started that stayed in it dies at once, whatever signals it ignores.
//!
//! The layout, all set up by [`Plan::split`] from `pre_exec`, between `fork` and `exec`:
//!
//! ```text
//! baton ──fork──▶ supervisor (leads the group, blocks every signal, watches baton)
//!                     └──vfork──▶ CMD (same group; exec'd here, with the stdio std set up)
//! ```
//!
//! The standard library's `Command` forks the supervisor and sets up its stdio; the supervisor
//! starts CMD with `CLONE_VM | CLONE_VFORK` (as `posix_spawn` does) and never returns to std.
//! A second full fork would copy baton's page tables once more, only for CMD's `exec` to throw
//! the copy away: 0.4 to 0.6 ms of the 5 to 7 of a whole `baton run k -- true`
//! (BENCHMARKS.md). CMD's
//! arguments and environment are therefore built here ([`Exec`]), not by std. baton sees the
//! supervisor as its child: its pid is the group id that signals are forwarded to, and its exit
//! status is CMD's.
//!
//! Everything here runs in a fork of a multi-threaded process: only async-signal-safe calls
//! (plain system calls), no allocation, no locks, no Rust I/O. What it needs is computed before
//! the fork, in [`Plan::new`] and [`Exec::new`].

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use libc::{c_char, c_int, c_void, pid_t, sigset_t};

/// The signal the supervisor hears baton's death by: catchable (unlike SIGKILL), so that it
/// can kill the group first. Any other sender only wakes it to look again.
const PARENT_DIED: c_int = libc::SIGUSR1;

/// The exit code of a supervisor (or CMD) that ends because baton is already gone.
const BATON_GONE: c_int = 128 + libc::SIGKILL;

/// Above this, file descriptors are not closed one by one where `close_range` is missing.
const CLOSE_AT_MOST: c_int = 65_536;

/// The stack CMD's side of the `vfork` runs on until its `exec`, besides a pointer per argument
/// (the C library's `execvpe` copies the arguments onto the stack to run a script without a
/// `#!` line through `/bin/sh`). Mapped, not touched: only the pages used cost anything.
const CMD_STACK: usize = 256 * 1024;

/// CMD's `execvpe`, prepared before the fork: the supervisor may not allocate.
pub struct Exec {
    program: CString,
    /// Own the strings the pointer arrays point into.
    _strings: (Vec<CString>, Vec<CString>),
    /// `argv` and `envp`, each ending in a null pointer.
    argv: Vec<*const c_char>,
    envp: Vec<*const c_char>,
}

// SAFETY: the pointers point into the `CString`s the same value owns, which are never changed
// or moved (a `CString`'s bytes live on the heap) while it lives.
unsafe impl Send for Exec {}
// SAFETY: as for `Send`: nothing is ever written through the pointers.
unsafe impl Sync for Exec {}

impl Exec {
    /// `program` (as `execvp` finds it) with `argv` (`argv[0]` first), and this process's
    /// environment with `env` added: what std's `Command` with `envs(env)` would pass.
    pub fn new(program: &Path, argv: &[String], env: &[(String, String)]) -> io::Result<Exec> {
        let mut vars: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(name, _)| !env.iter().any(|(added, _)| OsStr::new(added) == name))
            .collect();
        // As std's `envs`: of a name given twice, the last value.
        let last_of_each = env
            .iter()
            .enumerate()
            .filter(|(i, (name, _))| !env[i + 1..].iter().any(|(later, _)| later == name));
        vars.extend(last_of_each.map(|(_, (n, v))| (n.into(), v.into())));
        let args = argv
            .iter()
            .map(|arg| c_string(arg.as_bytes()))
            .collect::<io::Result<Vec<_>>>()?;
        let vars = vars
            .iter()
            .map(|(name, value)| c_string(&[name.as_bytes(), b"=", value.as_bytes()].concat()))
            .collect::<io::Result<Vec<_>>>()?;
        let pointers = |strings: &[CString]| -> Vec<*const c_char> {
            strings
                .iter()
                .map(|s| s.as_ptr())
                .chain([std::ptr::null()])
                .collect()
        };
        Ok(Exec {
            program: c_string(program.as_os_str().as_bytes())?,
            argv: pointers(&args),
            envp: pointers(&vars),
            _strings: (args, vars),
        })
    }
}

/// `bytes` as a C string; a NUL inside is the error std's `Command` would give.
fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "nul byte found in provided data",
        )
    })
}

/// What the supervisor needs, computed before the fork.
pub struct Plan {
    baton_pid: pid_t,
    give_terminal: bool,
    open_max: c_int,
    exec: Exec,
}

impl Plan {
    /// A plan to start `exec`, given the terminal or not.
    pub fn new(give_terminal: bool, exec: Exec) -> Plan {
        // SAFETY: getpid and sysconf have no preconditions.
        let (baton_pid, open_max) = unsafe { (libc::getpid(), libc::sysconf(libc::_SC_OPEN_MAX)) };
        Plan {
            baton_pid,
            give_terminal,
            open_max: c_int::try_from(open_max)
                .unwrap_or(CLOSE_AT_MOST)
                .clamp(3, CLOSE_AT_MOST),
            exec,
        }
    }

    /// Called in the process std forked for CMD: turns it into the supervisor and starts CMD.
    /// Returns only when CMD could not be started (std reports the error to baton); the
    /// supervisor itself never returns.
    ///
    /// # Safety
    ///
    /// Only from `pre_exec`, that is in a freshly forked child.
    pub unsafe fn split(&self) -> io::Result<()> {
        // SAFETY: each call is a plain system call on this process, made with stack memory.
        unsafe {
            let mut inherited = empty_set();
            let all = full_set();
            // From here on no signal runs a handler inherited from baton (they would write
            // into baton's own signal pipe); CMD gets the mask back.
            check(libc::sigprocmask(libc::SIG_SETMASK, &all, &mut inherited))?;
            check(libc::setpgid(0, 0))?;
            if self.give_terminal {
                // Allowed from a background group: SIGTTOU is blocked.
                libc::tcsetpgrp(0, libc::getpid());
            }
            check(libc::prctl(libc::PR_SET_PDEATHSIG, PARENT_DIED))?;
            // baton died before the prctl: nothing to start.
            if libc::getppid() != self.baton_pid {
                libc::_exit(BATON_GONE);
            }
            wake_on(PARENT_DIED)?;
            wake_on(libc::SIGCHLD)?;
            let cmd = start_cmd(&self.exec, &inherited)?;
            supervise(cmd, self.baton_pid, self.open_max)
        }
    }
}

/// What CMD's side of the `vfork` reads, and the error it leaves for the supervisor.
struct Start<'a> {
    exec: &'a Exec,
    supervisor: pid_t,
    inherited: sigset_t,
    /// The `errno` of the step that failed (0: CMD was exec'd).
    failed: c_int,
}

/// Starts CMD from the supervisor: `clone` with `CLONE_VM | CLONE_VFORK`, so that nothing is
/// copied and the supervisor sleeps until CMD's `exec` (or its failure). Returns CMD's pid, or
/// the error that stopped it before it became CMD (then reaped).
///
/// # Safety
///
/// Only in the supervisor, with every signal blocked.
unsafe fn start_cmd(exec: &Exec, inherited: &sigset_t) -> io::Result<pid_t> {
    // SAFETY: an anonymous private mapping, used only as the stack of the child below; plain
    // system calls on this process otherwise.
    unsafe {
        let size = CMD_STACK + exec.argv.len() * std::mem::size_of::<*const c_char>();
        let stack = libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        );
        if stack == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut start = Start {
            exec,
            supervisor: libc::getpid(),
            inherited: *inherited,
            failed: 0,
        };
        let start_ptr: *mut Start<'_> = &mut start;
        let cmd = libc::clone(
            become_cmd,
            stack.cast::<u8>().add(size).cast::<c_void>(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            start_ptr.cast::<c_void>(),
        );
        if cmd == -1 {
            return Err(io::Error::last_os_error());
        }
        // Written by the child in this memory before it ended, read once it has.
        let failed = std::ptr::read_volatile(&raw const (*start_ptr).failed);
        if failed != 0 {
            let mut status: c_int = 0;
            libc::waitpid(cmd, &mut status, 0);
            return Err(io::Error::from_raw_os_error(failed));
        }
        Ok(cmd)
    }
}

/// CMD's side of the `vfork`, on its own stack in the supervisor's memory: dies with the
/// supervisor should that be killed alone, gets back the signal mask and the SIGTTOU
/// disposition it would have had without one, and execs CMD. On failure it leaves `errno` for
/// the supervisor and ends.
extern "C" fn become_cmd(start: *mut c_void) -> c_int {
    // SAFETY: `start` is the `Start` that `start_cmd` passed, alive while the supervisor
    // sleeps in `clone`; only plain system calls and `execvpe` follow, as after `vfork`.
    unsafe {
        let start = &mut *start.cast::<Start<'_>>();
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
            start.failed = errno();
            libc::_exit(127);
        }
        if libc::getppid() != start.supervisor {
            libc::_exit(BATON_GONE);
        }
        // baton ignores SIGTTOU while it hands over the terminal; CMD must not inherit that.
        libc::signal(libc::SIGTTOU, libc::SIG_DFL);
        if libc::sigprocmask(libc::SIG_SETMASK, &start.inherited, std::ptr::null_mut()) == -1 {
            start.failed = errno();
            libc::_exit(127);
        }
        let exec = start.exec;
        libc::execvpe(
            exec.program.as_ptr(),
            exec.argv.as_ptr(),
            exec.envp.as_ptr(),
        );
        start.failed = errno();
        libc::_exit(127)
    }
}

/// This thread's `errno` (never 0 after a failed call).
fn errno() -> c_int {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The supervisor's life: let go of baton's files, then sleep until CMD ends (exit as it did)
/// or baton dies (kill the whole group). Signals baton forwards to the group stay blocked here
/// and reach CMD and its processes.
///
/// # Safety
///
/// Only in the supervisor, after CMD was forked.
unsafe fn supervise(cmd: pid_t, baton_pid: pid_t, open_max: c_int) -> ! {
    // SAFETY: plain system calls on this process, with stack memory.
    unsafe {
        close_all_files(open_max);
        let mut wake = full_set();
        libc::sigdelset(&mut wake, PARENT_DIED);
        libc::sigdelset(&mut wake, libc::SIGCHLD);
        loop {
            // Every signal is blocked between these checks and the sleep: none is missed.
            if libc::getppid() != baton_pid {
                libc::kill(0, libc::SIGKILL);
                libc::_exit(BATON_GONE);
            }
            let mut status: c_int = 0;
            let reaped = libc::waitpid(cmd, &mut status, libc::WNOHANG);
            if reaped == cmd {
                exit_as(status);
            }
            if reaped < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                // CMD can no longer be watched: nothing of it may run unsupervised.
                libc::kill(0, libc::SIGKILL);
                libc::_exit(BATON_GONE);
            }
            libc::sigsuspend(&wake);
        }
    }
}

/// Ends the supervisor as CMD ended: the same exit code, or death by the same signal (without
/// a core dump of its own), so that baton's exit codes and a worker's report stay CMD's.
///
/// # Safety
///
/// Only in the supervisor.
unsafe fn exit_as(status: c_int) -> ! {
    // SAFETY: plain system calls on this process, with stack memory.
    unsafe {
        if libc::WIFSIGNALED(status) {
            let signal = libc::WTERMSIG(status);
            libc::prctl(libc::PR_SET_DUMPABLE, 0);
            libc::signal(signal, libc::SIG_DFL);
            let mut only = empty_set();
            libc::sigaddset(&mut only, signal);
            libc::sigprocmask(libc::SIG_UNBLOCK, &only, std::ptr::null_mut());
            libc::kill(libc::getpid(), signal);
            libc::_exit(128 + signal);
        }
        libc::_exit(libc::WEXITSTATUS(status));
    }
}

/// Closes every file the supervisor inherited from baton: its sockets, its store's files, and
/// std's exec-error pipe, whose end held open here would make baton's spawn wait for CMD's end.
///
/// # Safety
///
/// Only in the supervisor, which uses no file afterwards.
unsafe fn close_all_files(open_max: c_int) {
    // SAFETY: closing descriptors this process owns; nothing here uses them any more.
    unsafe {
        if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) != 0 {
            for fd in 0..open_max {
                libc::close(fd);
            }
        }
    }
}

/// Makes `signal` wake [`supervise`]'s `sigsuspend` (a handler that does nothing; the loop looks
/// at what changed).
///
/// # Safety
///
/// Only in the supervisor.
unsafe fn wake_on(signal: c_int) -> io::Result<()> {
    extern "C" fn nothing(_: c_int) {}
    // SAFETY: a zeroed sigaction is valid; the handler is async-signal-safe (it does nothing).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = nothing as extern "C" fn(c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_NOCLDSTOP;
        libc::sigemptyset(&mut action.sa_mask);
        check(libc::sigaction(signal, &action, std::ptr::null_mut()))
    }
}

fn empty_set() -> sigset_t {
    let mut set = MaybeUninit::<sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set it is given.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        set.assume_init()
    }
}

fn full_set() -> sigset_t {
    let mut set = MaybeUninit::<sigset_t>::uninit();
    // SAFETY: sigfillset initialises the set it is given.
    unsafe {
        libc::sigfillset(set.as_mut_ptr());
        set.assume_init()
    }
}

/// A system call's `-1` as the error it stands for (no allocation: an OS error is a number).
fn check(rc: c_int) -> io::Result<()> {
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
