//! `baton-floor-run DB KEY -- CMD...`: the least a `baton run` on SQLite could cost as a whole
//! process, for B7 to measure next to it (BENCHMARKS.md). Not a lock anyone should use.
//!
//! It does what any lock whose state is a row in a SQLite file shared by many processes, and
//! that runs CMD as its child, cannot skip: open the file in WAL mode as baton does, take the
//! key in one write transaction, run CMD and wait for it, give the key back in a second one,
//! exit. It has none of the rest: no queue (a taken key is simply overwritten), no lease or
//! renewal, no async runtime or threads, no supervisor between it and CMD, a binary of a few
//! hundred kilobytes of its own. What `baton run` costs beyond this is what baton could still
//! win; what this costs beyond `flock FILE true` no such lock can.

use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (db, key, command) = match args.as_slice() {
        [db, key, dashes, command @ ..] if dashes == "--" && !command.is_empty() => {
            (db, key, command)
        }
        _ => {
            say("usage: baton-floor-run DB KEY -- CMD...");
            return ExitCode::from(2);
        }
    };
    match run(db, key, command) {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            say(&format!("baton-floor-run: {error}"));
            ExitCode::from(1)
        }
    }
}

/// Writes a line to standard error; a line nobody can read (a closed pipe) is dropped, where
/// `eprintln!` would panic and turn the exit code into 101.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn run(db: &str, key: &str, command: &[String]) -> Result<u8, Box<dyn std::error::Error>> {
    let Some((program, arguments)) = command.split_first() else {
        return Err("no command".into());
    };
    let mut connection = open(db)?;
    write(&mut connection, key, "held")?;
    let status = Command::new(program).args(arguments).status()?;
    write(&mut connection, key, "free")?;
    Ok(status.code().map_or(1, |code| (code & 0xff) as u8))
}

/// Opens the file as baton's SQLite store does: WAL, `synchronous = NORMAL`, no checkpoint at
/// close; the switch to WAL and the table's creation tried again while the file is busy.
fn open(db: &str) -> rusqlite::Result<Connection> {
    let connection = Connection::open(db)?;
    connection.busy_timeout(BUSY_FOR)?;
    while_busy(|| connection.pragma_update_and_check(None, "journal_mode", "WAL", |_| Ok(())))?;
    connection.pragma_update(None, "synchronous", "NORMAL")?;
    connection.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    connection.pragma_update(None, "wal_autocheckpoint", 128)?;
    while_busy(|| {
        connection.execute_batch(
            "CREATE TABLE IF NOT EXISTS floor_keys (key TEXT PRIMARY KEY, state TEXT NOT NULL)",
        )
    })?;
    Ok(connection)
}

/// How long the floor waits for a busy file, as baton's store does.
const BUSY_FOR: Duration = Duration::from_secs(10);

/// Runs `step` again while it fails with the file busy, for at most [`BUSY_FOR`]: SQLite calls
/// no busy handler where waiting could deadlock, as when a fresh file is switched to WAL while
/// another process holds its write lock, and answers "database is locked" at once. baton's
/// store retries the same steps when it opens a file.
fn while_busy<T>(mut step: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let started = Instant::now();
    loop {
        match step() {
            Err(error)
                if matches!(
                    error.sqlite_error_code(),
                    Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
                ) && started.elapsed() < BUSY_FOR =>
            {
                std::thread::sleep(Duration::from_millis(2));
            }
            done => return done,
        }
    }
}

/// One write transaction: read the key's row, write it (a lock's read-modify-write).
fn write(connection: &mut Connection, key: &str, state: &str) -> rusqlite::Result<()> {
    let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let _before: Option<String> = transaction
        .query_row(
            "SELECT state FROM floor_keys WHERE key = ?1",
            [key],
            |row| row.get(0),
        )
        .optional()?;
    transaction.execute(
        "INSERT INTO floor_keys (key, state) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET state = excluded.state",
        [key, state],
    )?;
    transaction.commit()
}
