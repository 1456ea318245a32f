//! The fault thread: follows the seeded schedule and hits processes, the store's server and
//! the network between them.

use std::collections::{HashMap, HashSet};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_torture::faults::{Fault, Schedule};
use baton_torture::proxy::Proxy;
use baton_torture::resource::Holder;

use super::{lock, signal, Event, Running, Shared};

/// The fault thread.
pub(super) struct Injector {
    pub(super) schedule: Schedule,
    pub(super) shared: Arc<Shared>,
    pub(super) ttl: Duration,
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
            self.inject(fault);
        }
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

    fn inject(&mut self, fault: Fault) {
        let shared = &self.shared;
        match fault {
            Fault::KillHolder => {
                let (live, running) = self.live_holders();
                if let Some(i) = self.schedule.pick(live.len()) {
                    let who = live[i].who.clone();
                    self.kill(&who, running[&who].pid);
                    shared.record(fault, Some(who), Duration::ZERO);
                }
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
                if let Some(i) = self.schedule.pick(waiting.len()) {
                    let (who, running) = waiting.swap_remove(i);
                    self.kill(&who, running.pid);
                    shared.record(fault, Some(who), Duration::ZERO);
                }
            }
            Fault::PauseHolder => {
                let (live, running) = self.live_holders();
                let live: Vec<Holder> = live
                    .into_iter()
                    .filter(|h| shared.fenced.contains(&h.key))
                    .collect();
                if let Some(i) = self.schedule.pick(live.len()) {
                    let who = live[i].who.clone();
                    let top = running[&who].pid;
                    let worker = lock(&shared.workers).get(&who).copied();
                    let pause = self.ttl + Duration::from_secs(1);
                    self.pause(&who, top, worker, pause);
                    shared.record(fault, Some(who), pause);
                }
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
        }
    }

    /// Processes already hit (killed, or paused and not yet continued): not hit again.
    fn untouchable(&self) -> HashSet<String> {
        let mut hit = lock(&self.shared.killed).clone();
        hit.extend(lock(&self.shared.paused).iter().map(|(who, _)| who.clone()));
        hit
    }

    /// The holders now whose processes run and were not hit yet (sorted, for the seed), and
    /// the running processes.
    ///
    /// Waits up to 3 s for one: holds are short, and a fault meant for a holder should not
    /// fall on the gaps between them.
    fn live_holders(&self) -> (Vec<Holder>, HashMap<String, Running>) {
        let give_up = Instant::now() + Duration::from_secs(3);
        loop {
            let holders = lock(&self.shared.resource).holders();
            let running = lock(&self.shared.running).clone();
            let untouchable = self.untouchable();
            let live: Vec<Holder> = holders
                .into_iter()
                .filter(|h| running.contains_key(&h.who) && !untouchable.contains(&h.who))
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
    }

    /// Stops `top` and the worker's process group for `pause`, then continues them (the
    /// worker first: the harder case for the fence, as the command may write before `baton
    /// run` sees its lease is gone).
    fn pause(&self, who: &str, top: i32, worker: Option<i32>, pause: Duration) {
        let mut pids = vec![top];
        if let Some(worker) = worker.filter(|&w| w != top) {
            pids.insert(0, -worker);
        }
        for &pid in pids.iter().rev() {
            signal(pid, libc::SIGSTOP);
        }
        lock(&self.shared.paused).push((who.to_owned(), pids.clone()));
        let shared = self.shared.clone();
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
            if all_threads_stopped(victim.pid) && holds_sqlite_write_lock(victim.pid, &path) {
                // Still stopped: it stays so, inside its transaction, until the pause is over.
                let pause = self.ttl + Duration::from_secs(1);
                self.shared
                    .record(Fault::PauseInTransaction, Some(who.clone()), pause);
                self.pause(&who, victim.pid, None, pause);
                return;
            }
            signal(victim.pid, libc::SIGCONT);
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Waits (100 ms at most) until every thread of `pid` is stopped (`T` in its
/// `/proc/PID/task/TID/stat`); false if one still runs.
fn all_threads_stopped(pid: i32) -> bool {
    let give_up = Instant::now() + Duration::from_millis(100);
    loop {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return false;
        };
        let running = tasks.flatten().any(|task| {
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            // The state follows the command name, which is in parentheses and may hold spaces.
            let state = stat
                .rsplit(") ")
                .next()
                .and_then(|rest| rest.chars().next());
            !matches!(state, Some('T' | 't'))
        });
        if !running {
            return true;
        }
        if Instant::now() >= give_up {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
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
