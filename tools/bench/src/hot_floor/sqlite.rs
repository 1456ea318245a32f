//! The floor on SQLite: each client a thread with its own connection, opened as baton's store
//! opens the file (WAL, `synchronous = NORMAL`, no checkpoint at close), waiting on a datagram
//! socket of its own.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rusqlite::config::DbConfig;
use rusqlite::{Connection, TransactionBehavior};

use super::{Checks, WAIT_BEFORE_READING};

/// How long a writer waits for the file's write lock between tries, as baton's store does at
/// first (`crates/baton-store/src/sqlite/schema.rs`).
const BUSY_PAUSE: Duration = Duration::from_micros(50);

/// Sets up the file: the queue table, one row per waiting or holding client.
pub(super) fn prepare(path: &Path) -> Result<()> {
    open(path)?.execute_batch(
        "CREATE TABLE floor_queue (
             seq INTEGER PRIMARY KEY AUTOINCREMENT,
             key TEXT NOT NULL,
             client TEXT NOT NULL
         );
         CREATE INDEX floor_queue_key ON floor_queue (key, seq);",
    )?;
    Ok(())
}

/// `n` clients cycling on `key` for `duration`: grants a second made inside it.
pub(super) fn one_round(path: &Path, key: &str, n: usize, duration: Duration) -> Result<f64> {
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
    checks.verdict()?;
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
        checks.hold(mine);
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
