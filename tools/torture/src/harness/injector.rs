//! The fault thread: follows the seeded schedule and hits processes, the store's server and
//! the network between them.
//!
//! The reply faults are armed here and land later, in the fault proxy, on the next reply to a
//! write: the hooks given to the proxy record them (and, for `stop-before-reply`, find and stop
//! the client) when they do, so a fault is counted only once it has really happened.

use std::collections::{HashMap, HashSet};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_torture::faults::{Fault, Schedule};
use baton_torture::procfs;
use baton_torture::proxy::{Proxy, ReplyTo};
use baton_torture::resource::Holder;

use super::{lock, signal, Event, Running, Shared};

/// How long a reply fault stays armed beyond a black hole (`hole`, during which no reply comes
/// back at all): clients write several times a second, so one lands within it, and the fault
/// stays near the moment the schedule chose.
const REPLY_FAULT_WINDOW: Duration = Duration::from_secs(2);
/// The most replies one `proxy-lose-reply` loses (it loses one or this many).
const REPLIES_LOST_MAX: usize = 2;
/// How long a stopped client may take to stop in every thread before its reply is forwarded
/// anyway.
const STOP_PATIENCE: Duration = Duration::from_millis(100);
/// How long a process fault that found no process to hit is tried again, and how often.
const RETRY_FOR: Duration = Duration::from_secs(10);
const RETRY_EVERY: Duration = Duration::from_millis(250);

/// The fault thread.
pub(super) struct Injector {
    pub(super) schedule: Schedule,
    pub(super) shared: Arc<Shared>,
    pub(super) ttl: Duration,
    /// How long `stop-before-reply` keeps a client stopped: past its lease, its waiter lease
    /// and its claim window, so whatever the reply it reads afterwards says has ended.
    pub(super) stop_pause: Duration,
    pub(super) hole: Duration,
    pub(super) restart_cmd: Option<String>,
    pub(super) proxy: Option<Arc<Proxy>>,
    pub(super) store: String,
}

impl Injector {
    pub(super) fn run(mut self) {
        while let Some((wait, fault)) = self.schedule.next_fault() {
            if self.sleep(wait) {
                return;
            }
            // A process fault may find nothing to hit (no holder of a fenced key just then: in
            // a mixed run most hold the other keys, and a kept turn's client has exited): it
            // is tried again shortly rather than skipped, so each fault dealt lands (a run
            // on etcd once dealt `pause-holder` twice and never caught a holder).
            let give_up = Instant::now() + RETRY_FOR;
            let mut landed = self.inject(fault);
            while !landed && Instant::now() < give_up {
                if self.sleep(RETRY_EVERY) {
                    return;
                }
                landed = self.inject(fault);
            }
            if !landed {
                // Under a loaded machine a run can go that long without a holder (a black
                // hole, a restart, leases run out meanwhile): the log says what was seen, and
                // the fault is dealt again at the end of this round (once a round).
                self.shared.miss(fault, self.what_was_there());
                self.schedule.deal_later(fault);
            }
        }
    }

    /// What a process fault that found no one to hit saw, for the log.
    fn what_was_there(&self) -> String {
        let shared = &self.shared;
        let holders = lock(&shared.resource).holders();
        let running = lock(&shared.running).len();
        let fenced = holders.iter().filter(|h| shared.is_fenced(&h.key)).count();
        format!(
            "{} holders ({fenced} of fenced keys), {running} clients running, {} killed so far \
             or paused now",
            holders.len(),
            self.untouchable().len()
        )
    }

    /// Sleeps `wait` unless the run ends first (true then).
    fn sleep(&self, wait: Duration) -> bool {
        let until = Instant::now() + wait;
        while Instant::now() < until {
            if self.shared.done.load(Ordering::SeqCst) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20).min(until - Instant::now()));
        }
        self.shared.done.load(Ordering::SeqCst)
    }

    /// Injects `fault`; false when it found no process to hit (the other faults are armed
    /// or done whenever asked).
    fn inject(&mut self, fault: Fault) -> bool {
        let shared = &self.shared;
        match fault {
            Fault::KillHolder => {
                let (live, running) = self.live_holders(|_| true);
                let Some(i) = self.schedule.pick(live.len()) else {
                    return false;
                };
                let who = live[i].who.clone();
                self.kill(&who, running[&who].pid);
                shared.record(fault, Some(who), Duration::ZERO);
            }
            Fault::KillWaiter => {
                let holders: HashSet<String> = lock(&shared.resource)
                    .holders()
                    .into_iter()
                    .map(|h| h.who)
                    .collect();
                let untouchable = self.untouchable();
                let mut waiting: Vec<(String, Running)> = lock(&shared.running)
                    .iter()
                    .filter(|(who, r)| {
                        !holders.contains(*who)
                            && !untouchable.contains(*who)
                            && r.started.elapsed() > Duration::from_millis(30)
                    })
                    .map(|(who, r)| (who.clone(), *r))
                    .collect();
                waiting.sort_by(|a, b| a.0.cmp(&b.0));
                let Some(i) = self.schedule.pick(waiting.len()) else {
                    return false;
                };
                let (who, running) = waiting.swap_remove(i);
                self.kill(&who, running.pid);
                shared.record(fault, Some(who), Duration::ZERO);
            }
            Fault::PauseHolder => {
                // Waits for a holder of a fenced key in particular: in a mixed run most holders
                // hold the other keys, and a wait for any holder would often end on one of them.
                let (live, running) = self.live_holders(|h| shared.is_fenced(&h.key));
                let Some(i) = self.schedule.pick(live.len()) else {
                    return false;
                };
                let who = live[i].who.clone();
                let pause = self.ttl + Duration::from_secs(1);
                if !pause_client(shared, &who, running[&who].pid, pause) {
                    return false;
                }
                shared.record(fault, Some(who), pause);
            }
            Fault::PauseInTransaction => self.pause_in_transaction(),
            Fault::Restart => {
                if let Some(cmd) = &self.restart_cmd {
                    let started = Instant::now();
                    let at_ns = shared.now_ns();
                    // The fault is a restart: a server left down by a restart that failed would
                    // be another fault (an outage for the rest of the run), so try again, twice.
                    for attempt in 1..=3 {
                        let status = Command::new("sh")
                            .args(["-c", cmd])
                            .stdin(Stdio::null())
                            .stdout(Stdio::null())
                            .status();
                        if matches!(status, Ok(s) if s.success()) {
                            break;
                        }
                        eprintln!(
                            "baton-torture: the restart command `{cmd}` failed (attempt \
                             {attempt} of 3): {status:?}"
                        );
                    }
                    lock(&shared.events).push(Event {
                        fault,
                        at_ns,
                        who: None,
                        lasted: started.elapsed(),
                    });
                }
            }
            Fault::ProxyDrop => {
                if let Some(proxy) = &self.proxy {
                    proxy.drop_connections();
                    shared.record(fault, None, Duration::ZERO);
                }
            }
            Fault::ProxyHole => {
                if let Some(proxy) = &self.proxy {
                    proxy.black_hole(self.hole);
                    shared.record(fault, None, self.hole);
                }
            }
            Fault::ProxyLatency => {
                if let Some(proxy) = &self.proxy {
                    let latency = self
                        .schedule
                        .between(Duration::from_millis(5), Duration::from_millis(50));
                    let lasted = Duration::from_secs(3);
                    proxy.set_latency(latency);
                    shared.record(fault, None, lasted);
                    let proxy = proxy.clone();
                    std::thread::spawn(move || {
                        std::thread::sleep(lasted);
                        proxy.set_latency(Duration::ZERO);
                    });
                }
            }
            Fault::ProxyLoseReply => {
                if let Some(proxy) = &self.proxy {
                    let replies = 1 + self.schedule.pick(REPLIES_LOST_MAX).unwrap_or(0);
                    let shared = self.shared.clone();
                    proxy.lose_replies(
                        u32::try_from(replies).unwrap_or(1),
                        self.reply_window(),
                        move |reply_to| record_lost_reply(&shared, reply_to),
                    );
                }
            }
            Fault::StopBeforeReply => {
                if let Some(proxy) = &self.proxy {
                    let shared = self.shared.clone();
                    let pause = self.stop_pause;
                    proxy.before_replies(1, self.reply_window(), move |reply_to| {
                        stop_before_reply(&shared, reply_to, pause)
                    });
                }
            }
        }
        true
    }

    /// Processes already hit (killed, or paused and not yet continued): not hit again.
    fn untouchable(&self) -> HashSet<String> {
        untouchable(&self.shared)
    }

    /// How long a reply fault stays armed: through a black hole that may have just opened, and
    /// [`REPLY_FAULT_WINDOW`] more.
    fn reply_window(&self) -> Duration {
        self.hole + REPLY_FAULT_WINDOW
    }

    /// The holders now that `wanted` accepts, whose processes run and were not hit yet (sorted,
    /// for the seed), and the running processes.
    ///
    /// Waits up to 3 s for one: holds are short, and a fault meant for a holder should not
    /// fall on the gaps between them.
    fn live_holders(
        &self,
        wanted: impl Fn(&Holder) -> bool,
    ) -> (Vec<Holder>, HashMap<String, Running>) {
        let give_up = Instant::now() + Duration::from_secs(3);
        loop {
            let holders = lock(&self.shared.resource).holders();
            let running = lock(&self.shared.running).clone();
            let untouchable = self.untouchable();
            let live: Vec<Holder> = holders
                .into_iter()
                .filter(|h| {
                    wanted(h) && running.contains_key(&h.who) && !untouchable.contains(&h.who)
                })
                .collect();
            if !live.is_empty()
                || Instant::now() >= give_up
                || self.shared.done.load(Ordering::SeqCst)
            {
                return (live, running);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn kill(&self, who: &str, pid: i32) {
        lock(&self.shared.killed).insert(who.to_owned());
        signal(pid, libc::SIGKILL);
        // A kept-alive turn's keeper dies with its client, as with a CI job's runner.
        for keeper in super::marked(&self.shared.run, who) {
            signal(keeper, libc::SIGKILL);
        }
    }

    /// Stops running client processes one after another until one is caught holding SQLite's
    /// write lock (the kernel's lock table says so: [`holds_sqlite_write_lock`]), then keeps
    /// that one stopped past the TTL. Each miss is continued at once (a stop of microseconds).
    fn pause_in_transaction(&mut self) {
        let Some(path) = self.store.strip_prefix("sqlite:") else {
            return;
        };
        let path = path.split('?').next().unwrap_or(path).to_owned();
        let give_up = Instant::now() + Duration::from_secs(3);
        while Instant::now() < give_up && !self.shared.done.load(Ordering::SeqCst) {
            let untouchable = self.untouchable();
            let mut running: Vec<(String, Running)> = lock(&self.shared.running)
                .iter()
                .filter(|(w, _)| !untouchable.contains(*w))
                .map(|(w, r)| (w.clone(), *r))
                .collect();
            running.sort_by(|a, b| a.0.cmp(&b.0));
            let Some(i) = self.schedule.pick(running.len()) else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            let (who, victim) = running.swap_remove(i);
            signal(victim.pid, libc::SIGSTOP);
            // kill(2) returns before the process stops: a thread still running could finish
            // its transaction after the lock table was read.
            if procfs::all_threads_stopped(victim.pid, STOP_PATIENCE)
                && holds_sqlite_write_lock(victim.pid, &path)
            {
                // Still stopped: it stays so, inside its transaction, until the pause is over.
                let pause = self.ttl + Duration::from_secs(1);
                self.shared
                    .record(Fault::PauseInTransaction, Some(who.clone()), pause);
                pause_pids(&self.shared, &who, vec![victim.pid], pause);
                return;
            }
            signal(victim.pid, libc::SIGCONT);
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Processes already hit (killed, or paused and not yet continued): not hit again.
fn untouchable(shared: &Shared) -> HashSet<String> {
    let mut hit = lock(&shared.killed).clone();
    hit.extend(lock(&shared.paused).iter().map(|(who, _)| who.clone()));
    hit
}

/// The hook of `proxy-lose-reply`: records the loss, naming the client process whose write
/// went unanswered when it is one of the run's (for the log), and takes the reply.
fn record_lost_reply(shared: &Shared, reply_to: ReplyTo) -> bool {
    if shared.done.load(Ordering::SeqCst) {
        return false;
    }
    let running: Vec<(String, i32)> = lock(&shared.running)
        .iter()
        .map(|(who, r)| (who.clone(), r.pid))
        .collect();
    let who = owner(&running, reply_to)
        .map(|(who, _)| who)
        .unwrap_or_else(|| format!("the client at {}", reply_to.client));
    shared.record(Fault::ProxyLoseReply, Some(who), Duration::ZERO);
    true
}

/// The hook of `stop-before-reply`, run by the proxy just before it forwards a reply to a
/// write: if the connection is a client's of the run on a mutex key that nothing else has hit,
/// stops it (with its command, for `baton run`) for `pause`, waits until it is stopped, and
/// records it as paused, so its reply waits in a stopped process's socket. Anyone else's reply
/// is declined (forwarded untouched) and the fault stays armed for the next one: a proxy never
/// stops a process that is not one of the run's clients.
///
/// Mutex keys only, as `pause-holder`: the client may already have started its work when it
/// is stopped (a grant started at once, the heartbeat's claim still unanswered), and a process
/// that held when it was stopped can only be stopped by a fence after it resumes.
fn stop_before_reply(shared: &Arc<Shared>, reply_to: ReplyTo, pause: Duration) -> bool {
    if shared.done.load(Ordering::SeqCst) {
        return false;
    }
    let untouchable = untouchable(shared);
    let candidates: Vec<(String, i32)> = lock(&shared.running)
        .iter()
        .filter(|(who, r)| r.fenced && !untouchable.contains(*who))
        .map(|(who, r)| (who.clone(), r.pid))
        .collect();
    let Some((who, pid)) = owner(&candidates, reply_to) else {
        return false;
    };
    if !pause_client(shared, &who, pid, pause) {
        return false;
    }
    // Best effort: a thread in the kernel (an fsync, say) stops when it returns from there.
    procfs::all_threads_stopped(pid, STOP_PATIENCE);
    shared.record(Fault::StopBeforeReply, Some(who), pause);
    true
}

/// Which of `candidates` (name, pid) owns the client end of the reply's connection.
fn owner(candidates: &[(String, i32)], reply_to: ReplyTo) -> Option<(String, i32)> {
    let pids: Vec<i32> = candidates.iter().map(|(_, pid)| *pid).collect();
    match procfs::owner_of_connection(reply_to.client, reply_to.proxy, &pids) {
        Ok(found) => found.and_then(|pid| candidates.iter().find(|(_, p)| *p == pid).cloned()),
        Err(e) => {
            eprintln!(
                "baton-torture: cannot tell whose connection {} is: {e}",
                reply_to.client
            );
            None
        }
    }
}

/// Stops client `who` (process `top`) and its command for `pause`, then continues them: see
/// [`pause_pids`]. Its command is the process group of the worker it said HELLO from and of
/// each child `top` has (a `baton run` whose command has not said HELLO yet); a library client
/// is its own worker and has no children.
fn pause_client(shared: &Arc<Shared>, who: &str, top: i32, pause: Duration) -> bool {
    let worker = lock(&shared.workers).get(who).copied();
    let mut commands = procfs::children(top);
    commands.extend(worker.filter(|&w| w != top));
    commands.sort_unstable();
    commands.dedup();
    let mut pids = Vec::new();
    for command in commands {
        // Its group, and itself: a command just spawned may not have its own group yet.
        pids.extend([-command, command]);
    }
    pids.push(top);
    // A kept-alive turn's keeper stops with its client, as on a runner that froze.
    pids.extend(super::marked(&shared.run, who));
    pause_pids(shared, who, pids, pause)
}

/// Stops `pids` (negative: process groups) for `pause`, then continues them, in order: the
/// command first, the harder case for the fence, as it may write before `baton run` sees its
/// lease is gone. Recorded in `paused` (so no other fault hits the process meanwhile, and the
/// run continues it if it ends first). False, and nothing stopped, if `who` is paused already.
fn pause_pids(shared: &Arc<Shared>, who: &str, pids: Vec<i32>, pause: Duration) -> bool {
    {
        let mut paused = lock(&shared.paused);
        if paused.iter().any(|(w, _)| w == who) {
            return false;
        }
        for &pid in pids.iter().rev() {
            signal(pid, libc::SIGSTOP);
        }
        paused.push((who.to_owned(), pids));
    }
    let shared = shared.clone();
    let who = who.to_owned();
    std::thread::spawn(move || {
        std::thread::sleep(pause);
        let mut paused = lock(&shared.paused);
        if let Some(at) = paused.iter().position(|(w, _)| *w == who) {
            for pid in paused.remove(at).1 {
                signal(pid, libc::SIGCONT);
            }
        }
    });
    true
}

/// Whether process `pid` holds SQLite's write lock on the database at `path`, by the kernel's
/// table of POSIX locks (`/proc/locks`: `N: POSIX ADVISORY WRITE PID MAJ:MIN:INODE START END`).
/// In WAL mode the writer holds byte 120 of `PATH-shm` (`WAL_WRITE_LOCK`); in rollback mode, the
/// database's RESERVED byte (`PENDING_BYTE + 1` = 0x40000001). Waiting requests (`->`) are not
/// held locks.
fn holds_sqlite_write_lock(pid: i32, path: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    let inode = |p: &str| std::fs::metadata(p).ok().map(|m| m.ino());
    let (shm, db) = (inode(&format!("{path}-shm")), inode(path));
    let Ok(table) = std::fs::read_to_string("/proc/locks") else {
        return false;
    };
    let pid = pid.to_string();
    table.lines().any(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || f[1] != "POSIX" || f[3] != "WRITE" || f[4] != pid {
            return false;
        }
        let held = f[5].rsplit(':').next().and_then(|i| i.parse::<u64>().ok());
        let (Ok(start), end) = (f[6].parse::<u64>(), f[7].parse::<u64>().unwrap_or(u64::MAX))
        else {
            return false;
        };
        let covers = |byte: u64| start <= byte && byte <= end;
        (held.is_some() && held == shm && covers(120))
            || (held.is_some() && held == db && covers(0x4000_0001))
    })
}
