//! `hot-floor`: what a first-come lock kept in a SQLite file, whose releaser wakes the next in
//! line, makes of one hot key with N clients against one client alone: the floor under B3 on
//! SQLite (BENCHMARKS.md). Not a lock anyone should use.
//!
//! It does what any such lock cannot skip, and nothing else: each client has its own
//! connection to the file (WAL, `synchronous = NORMAL`, no checkpoint at close, as baton's
//! store), enqueues in one write transaction (a row in a queue table, which says whether it is
//! first), waits on a datagram socket of its own for the releaser's word, and releases in a
//! second write transaction, which reads the next in line and sends it a datagram: two
//! commits a grant, as baton's. It has none of the rest: no document, lease, fence, heartbeat,
//! history or async runtime; a client woken by the datagram takes it as its grant without a
//! read. One client alone cycles through the same two transactions and never waits. What N
//! clients make against one here, no lock of this shape can beat; what baton makes against
//! this is baton's.
//!
//! Each client is a thread; a shared count of holders checks that no two hold at once, and the
//! queue's sequence numbers that grants follow arrival.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rusqlite::config::DbConfig;
use rusqlite::{Connection, TransactionBehavior};
use serde::Serialize;

use crate::peers::table::median;
use crate::setup::{describe_load, load_average_1m};

/// How long a waiter waits for the releaser's datagram before it reads the queue itself (a
/// datagram lost to a full queue).
const WAIT_BEFORE_READING: Duration = Duration::from_millis(100);

/// How long a writer waits for the file's write lock between tries, as baton's store does at
/// first (`crates/baton-store/src/sqlite/schema.rs`).
const BUSY_PAUSE: Duration = Duration::from_micros(50);

/// The results of `hot-floor`.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The host's 1-minute load average when the run started.
    pub load_average_1m: Option<f64>,
    /// Clients on the hot key in the contended rounds.
    pub clients: usize,
    /// Length of each round.
    pub duration_s: f64,
    /// Grants a second of one client alone, per round.
    pub alone: Vec<f64>,
    /// Grants a second of `clients` clients on one key, per round.
    pub contended: Vec<f64>,
    /// The median contended rate over the median lone rate.
    pub ratio: f64,
}

/// Rounds of one client alone and of `clients` on one key, alternating, in a fresh file.
pub fn run(clients: usize, rounds: usize, duration: Duration) -> Result<Report> {
    let load_average_1m = load_average_1m();
    let dir = tempfile::tempdir().context("cannot make a temporary directory")?;
    let path = dir.path().join("floor.db");
    open(&path)?.execute_batch(
        "CREATE TABLE floor_queue (
             seq INTEGER PRIMARY KEY AUTOINCREMENT,
             key TEXT NOT NULL,
             client TEXT NOT NULL
         );
         CREATE INDEX floor_queue_key ON floor_queue (key, seq);",
    )?;
    let (mut alone, mut contended) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let sizes = if round % 2 == 0 {
            [1, clients]
        } else {
            [clients, 1]
        };
        for n in sizes {
            let rate = one_round(&path, &format!("r{round}-n{n}"), n, duration)?;
            if n == 1 {
                alone.push(rate);
            } else {
                contended.push(rate);
            }
        }
    }
    let ratio = median(&contended) / median(&alone);
    Ok(Report {
        load_average_1m,
        clients,
        duration_s: duration.as_secs_f64(),
        alone,
        contended,
        ratio,
    })
}

/// What the clients of a round share: the checks of mutual exclusion and order.
#[derive(Default)]
struct Checks {
    holders: AtomicU64,
    last_granted: AtomicI64,
    violations: AtomicU64,
}

/// `n` clients cycling on `key` for `duration`: grants a second made inside it.
fn one_round(path: &Path, key: &str, n: usize, duration: Duration) -> Result<f64> {
    let start = Arc::new(Barrier::new(n));
    let checks = Arc::new(Checks::default());
    let threads: Vec<_> = (0..n)
        .map(|client| {
            let (path, key) = (path.to_owned(), key.to_owned());
            let (start, checks) = (start.clone(), checks.clone());
            std::thread::spawn(move || -> Result<u64> {
                let mut me = Client::new(&path, &key, client)?;
                start.wait();
                let deadline = Instant::now() + duration;
                let mut granted = 0;
                while Instant::now() < deadline {
                    if me.cycle(&checks)? <= deadline {
                        granted += 1;
                    }
                }
                Ok(granted)
            })
        })
        .collect();
    let mut grants = 0;
    for thread in threads {
        let joined = thread
            .join()
            .map_err(|_| anyhow::anyhow!("a client panicked"))?;
        grants += joined?;
    }
    let violations = checks.violations.load(Ordering::Relaxed);
    if violations > 0 {
        bail!("{violations} grants overlapped or passed an earlier arrival: the floor is wrong");
    }
    Ok(grants as f64 / duration.as_secs_f64())
}

/// One client: its connection and the socket the releaser before it writes to.
struct Client {
    connection: Connection,
    socket: UnixDatagram,
    key: String,
    name: String,
}

impl Client {
    fn new(path: &Path, key: &str, client: usize) -> Result<Client> {
        let name = format!("baton-bench-floor/{}/{key}/{client}", std::process::id());
        let socket = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes())?)
            .context("cannot bind the client's socket")?;
        socket.set_read_timeout(Some(WAIT_BEFORE_READING))?;
        Ok(Client {
            connection: open(path)?,
            socket,
            key: key.to_owned(),
            name,
        })
    }

    /// Enqueues, waits for its turn, holds for no time, releases: returns when it held.
    fn cycle(&mut self, checks: &Checks) -> Result<Instant> {
        let (mine, first) = self.enqueue()?;
        if first != mine {
            self.wait_for(mine)?;
        }
        let held = Instant::now();
        if checks.holders.fetch_add(1, Ordering::SeqCst) != 0
            || checks.last_granted.fetch_max(mine, Ordering::SeqCst) > mine
        {
            checks.violations.fetch_add(1, Ordering::Relaxed);
        }
        checks.holders.fetch_sub(1, Ordering::SeqCst);
        self.release(mine)?;
        Ok(held)
    }

    /// The write that queues this client: its place, and the first place in the queue.
    fn enqueue(&mut self) -> Result<(i64, i64)> {
        let transaction = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        transaction
            .prepare_cached("INSERT INTO floor_queue (key, client) VALUES (?1, ?2)")?
            .execute([&self.key, &self.name])?;
        let mine = transaction.last_insert_rowid();
        let first: i64 = transaction
            .prepare_cached("SELECT seq FROM floor_queue WHERE key = ?1 ORDER BY seq LIMIT 1")?
            .query_row([&self.key], |row| row.get(0))?;
        transaction.commit()?;
        Ok((mine, first))
    }

    /// Waits for the releaser's datagram naming `mine`, reading the queue after each
    /// [`WAIT_BEFORE_READING`] without one.
    fn wait_for(&mut self, mine: i64) -> Result<()> {
        let mut buffer = [0u8; 8];
        loop {
            match self.socket.recv(&mut buffer) {
                Ok(8) if i64::from_be_bytes(buffer) == mine => return Ok(()),
                Ok(_) => {}
                Err(error)
                    if matches!(
                        error.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    let first: i64 = self
                        .connection
                        .prepare_cached(
                            "SELECT seq FROM floor_queue WHERE key = ?1 ORDER BY seq LIMIT 1",
                        )?
                        .query_row([&self.key], |row| row.get(0))?;
                    if first == mine {
                        return Ok(());
                    }
                }
                Err(error) => return Err(error).context("the client's socket failed"),
            }
        }
    }

    /// The write that takes this client's place out and tells the next in line.
    fn release(&mut self, mine: i64) -> Result<()> {
        let transaction = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        transaction
            .prepare_cached("DELETE FROM floor_queue WHERE seq = ?1")?
            .execute([mine])?;
        let next: Option<(i64, String)> = transaction
            .prepare_cached(
                "SELECT seq, client FROM floor_queue WHERE key = ?1 ORDER BY seq LIMIT 1",
            )?
            .query_row([&self.key], |row| Ok((row.get(0)?, row.get(1)?)))
            .map(Some)
            .or_else(|error| match error {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                other => Err(other),
            })?;
        transaction.commit()?;
        if let Some((seq, client)) = next {
            let address = SocketAddr::from_abstract_name(client.as_bytes())?;
            // A datagram lost (a full queue) costs the next client its timed read.
            let _ = self.socket.send_to_addr(&seq.to_be_bytes(), &address);
        }
        Ok(())
    }
}

/// Opens the file as baton's SQLite store does: WAL, `synchronous = NORMAL`, no checkpoint at
/// close, a writer that finds the write lock taken trying again every [`BUSY_PAUSE`].
fn open(path: &Path) -> Result<Connection> {
    let mut connection = Connection::open(path)?;
    connection.busy_handler(Some(|tries| {
        std::thread::sleep(BUSY_PAUSE);
        tries < 200_000
    }))?;
    connection.pragma_update_and_check(None, "journal_mode", "WAL", |_| Ok(()))?;
    connection.pragma_update(None, "synchronous", "NORMAL")?;
    connection.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    Ok(connection)
}

/// The report as a few lines of text.
pub fn print(report: &Report, out: &mut String) {
    use std::fmt::Write;
    let rates = |values: &[f64]| {
        values
            .iter()
            .map(|rate| format!("{rate:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(
        out,
        "hot-floor: a first-come lock in a SQLite file, the next woken by a datagram; \
         {} s rounds, load average {}",
        report.duration_s,
        describe_load(report.load_average_1m)
    );
    let _ = writeln!(out, "grants/s, 1 client alone: {}", rates(&report.alone));
    let _ = writeln!(
        out,
        "grants/s, {} clients on one key: {}",
        report.clients,
        rates(&report.contended)
    );
    let _ = writeln!(
        out,
        "{} vs 1 client, medians: {:.2}x",
        report.clients, report.ratio
    );
}
