//! The protected work: a holder's writes to the resource while it holds a key.
//!
//! Both kinds of client do the same work: the command `baton run` starts (`baton-torture use`,
//! which reads its fence from `BATON_FENCE`) and the library client (`baton-torture lib-client`,
//! which has its lease in hand). A holder writes once at once, then every [`WRITE_EVERY`] until
//! its hold is over, then once more and says it is done. The resource judges every write, so a
//! holder that lost its lease while paused is caught at its next write.
//!
//! The wire protocol is one line each way: `HELLO who pid`, then `WRITE key ticket fence
//! normal|shared` answered `OK` or `REJECTED why`, and `END key ticket` answered `OK`. A closed
//! connection ends the holds it made.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// How often a holder writes while it holds.
pub const WRITE_EVERY: Duration = Duration::from_millis(10);

/// How a hold ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HoldEnd {
    /// Every write was accepted and the hold ran its course.
    Done,
    /// A write was refused (a stale fence): the holder stopped at once.
    FencedOff(String),
    /// The holder was told to stop (its lease was lost) before the hold was over.
    Stopped,
}

/// A client's connection to the resource.
pub struct Session {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Session {
    /// Connects to the resource at `address` as `who` (process `pid`).
    pub fn connect(address: &str, who: &str) -> Result<Session, String> {
        let stream = TcpStream::connect(address)
            .map_err(|e| format!("cannot reach the resource at {address}: {e}"))?;
        let _ = stream.set_nodelay(true);
        let reader = BufReader::new(
            stream
                .try_clone()
                .map_err(|e| format!("cannot use the connection: {e}"))?,
        );
        let mut session = Session {
            reader,
            writer: stream,
        };
        let hello = session.ask(&format!("HELLO {who} {}", std::process::id()))?;
        if hello != "OK" {
            return Err(format!("the resource said {hello} to HELLO"));
        }
        Ok(session)
    }

    fn ask(&mut self, line: &str) -> Result<String, String> {
        writeln!(self.writer, "{line}").map_err(|e| format!("the resource went away: {e}"))?;
        let mut reply = String::new();
        match self.reader.read_line(&mut reply) {
            Ok(0) => Err("the resource closed the connection".to_owned()),
            Ok(_) => Ok(reply.trim().to_owned()),
            Err(e) => Err(format!("the resource went away: {e}")),
        }
    }

    /// Holds `key` as `ticket` with `fence` for `hold`, writing all along; stops early (without
    /// another write) as soon as `stop` says so.
    pub fn hold(
        &mut self,
        key: &str,
        ticket: &str,
        fence: u64,
        shared: bool,
        hold: Duration,
        stop: impl Fn() -> bool,
    ) -> Result<HoldEnd, String> {
        let mode = if shared { "shared" } else { "normal" };
        let write = format!("WRITE {key} {ticket} {fence} {mode}");
        let until = Instant::now() + hold;
        let end = loop {
            if stop() {
                break HoldEnd::Stopped;
            }
            let reply = self.ask(&write)?;
            if reply != "OK" {
                break HoldEnd::FencedOff(reply);
            }
            let now = Instant::now();
            if now >= until {
                break HoldEnd::Done;
            }
            std::thread::sleep(WRITE_EVERY.min(until - now));
        };
        let ended = self.ask(&format!("END {key} {ticket}"))?;
        if ended != "OK" {
            return Err(format!("the resource said {ended} to END"));
        }
        Ok(end)
    }
}

/// The holds (key, ticket) a connection made.
pub type Made = HashSet<(String, String)>;

/// The resource's side of one connection: `HELLO who pid` goes to `hello(who, pid)` (answered
/// `OK`), every other line to `answer(who, words, made)` (`None`: a line it cannot read). When
/// the connection closes, the holds it made go to `closed`, which ends them.
pub fn serve_connection(
    stream: TcpStream,
    mut hello: impl FnMut(&str, &str),
    mut answer: impl FnMut(&str, &[&str], &mut Made) -> Option<String>,
    closed: impl FnOnce(Made),
) {
    let _ = stream.set_nodelay(true);
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut who = String::from("?");
    let mut made = Made::new();
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        let reply = match words.as_slice() {
            ["HELLO", name, pid] => {
                (*name).clone_into(&mut who);
                hello(name, pid);
                "OK".to_owned()
            }
            words => answer(&who, words, &mut made)
                .unwrap_or_else(|| format!("ERROR cannot read {line:?}")),
        };
        if writeln!(writer, "{reply}").is_err() {
            break;
        }
    }
    closed(made);
}
