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
//!                     └──fork──▶ CMD (same group; exec'd by the standard library)
//! ```
//!
//! The standard library's `Command` forks the supervisor, which forks again and returns only in
//! the grandchild: std then execs CMD there, with the stdio and environment it prepared. baton
//! sees the supervisor as its child: its pid is the group id that signals are forwarded to, and
//! its exit status is CMD's.
//!
//! Everything here runs in a fork of a multi-threaded process: only async-signal-safe calls
//! (plain system calls), no allocation, no locks, no Rust I/O. What it needs is computed before
//! the fork, in [`Plan::new`].

use std::io;
use std::mem::MaybeUninit;

use libc::{c_int, pid_t, sigset_t};

/// The signal the supervisor hears baton's death by: catchable (unlike SIGKILL), so that it
/// can kill the group first. Any other sender only wakes it to look again.
const PARENT_DIED: c_int = libc::SIGUSR1;

/// The exit code of a supervisor (or CMD) that ends because baton is already gone.
const BATON_GONE: c_int = 128 + libc::SIGKILL;

/// Above this, file descriptors are not closed one by one where `close_range` is missing.
const CLOSE_AT_MOST: c_int = 65_536;

/// What the supervisor needs, computed before the fork.
#[derive(Clone, Copy)]
pub struct Plan {
    baton_pid: pid_t,
    give_terminal: bool,
    open_max: c_int,
}

impl Plan {
    /// A plan for a command that is given the terminal or not.
    pub fn new(give_terminal: bool) -> Plan {
        // SAFETY: getpid and sysconf have no preconditions.
        let (baton_pid, open_max) = unsafe { (libc::getpid(), libc::sysconf(libc::_SC_OPEN_MAX)) };
        Plan {
            baton_pid,
            give_terminal,
            open_max: c_int::try_from(open_max)
                .unwrap_or(CLOSE_AT_MOST)
                .clamp(3, CLOSE_AT_MOST),
        }
    }

    /// Called in the process std forked for CMD: turns it into the supervisor and forks CMD.
    /// Returns only in CMD (`Ok`: std then execs it) or when nothing was started (`Err`: std
    /// reports it to baton); the supervisor itself never returns.
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
            let supervisor = libc::getpid();
            match raw_fork() {
                -1 => Err(io::Error::last_os_error()),
                0 => become_cmd(supervisor, &inherited),
                cmd => supervise(cmd, self.baton_pid, self.open_max),
            }
        }
    }
}

/// In CMD, before std execs it: dies with the supervisor should that be killed alone, and gets
/// back the signal mask and the SIGTTOU disposition it would have had without one.
///
/// # Safety
///
/// Only in the process [`raw_fork`] just made.
unsafe fn become_cmd(supervisor: pid_t, inherited: &sigset_t) -> io::Result<()> {
    // SAFETY: plain system calls on this process.
    unsafe {
        check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL))?;
        if libc::getppid() != supervisor {
            libc::_exit(BATON_GONE);
        }
        // baton ignores SIGTTOU while it hands over the terminal; CMD must not inherit that.
        libc::signal(libc::SIGTTOU, libc::SIG_DFL);
        check(libc::sigprocmask(
            libc::SIG_SETMASK,
            inherited,
            std::ptr::null_mut(),
        ))?;
    }
    Ok(())
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

/// `fork` as the bare system call: glibc's `fork` runs atfork handlers and takes allocator
/// locks, which a fork of a multi-threaded process must not.
///
/// # Safety
///
/// The child may only make async-signal-safe calls.
unsafe fn raw_fork() -> pid_t {
    // SAFETY: clone with only SIGCHLD and no new stack is fork: the child runs on a copy of
    // this stack.
    unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::c_long::from(libc::SIGCHLD),
            0usize,
            0usize,
            0usize,
            0usize,
        ) as pid_t
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
