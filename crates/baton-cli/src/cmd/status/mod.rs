//! `baton status [PREFIX]`: who holds each key, who waits, and how the last turn ended; with
//! `--watch`, as it changes.
//!
//! Every form is built from one [`KeyStatus`] per key, read once: the JSON, the table and the
//! change lines of a watch. Keys come in the order of what needs a look ([`select::Rank`]):
//! busy, then failing, then free. `--state` and `--max-rows` cut the same selection for all
//! forms; on a terminal, the table alone also leaves out the free keys that would push a busy
//! one off the screen ([`select::free_left_out`]), unless `--state` was given.
//!
//! - `select.rs`: the order of keys and which rows are shown
//! - `view.rs`: the options that shape every form, and the JSON object
//! - `table.rs`: the table and the lines under it
//! - `changes.rs`: what changed between two reads, as lines or JSON objects
//! - `watch.rs`: `--watch`, on a terminal and elsewhere

mod changes;
mod select;
mod table;
mod view;
mod watch;

use std::io::{IsTerminal, Write};
use std::time::Duration;

use baton_client::status::KeyStatus;
use clap::Args;

use crate::args::duration::parse_interval;
use crate::exit::{self, Failure};
use crate::render;
use crate::Opened;
use select::by_rank;
use view::View;
use watch::{watch_changes, watch_terminal};

/// `baton status`.
#[derive(Debug, Args)]
#[command(after_help = STATUS_HELP)]
pub struct StatusArgs {
    /// Only keys starting with PREFIX [default: every key]
    #[arg(value_name = "PREFIX", default_value = "", hide_default_value = true)]
    pub prefix: String,
    /// Keep watching: redraw every --interval on a terminal; elsewhere print the table once,
    /// then one line per change (granted, queued, left)
    #[arg(short, long)]
    pub watch: bool,
    /// Only rows in these states: a comma list of held, queued, free, or all [default: all,
    /// but on a terminal the free keys that would push a busy key off the screen]
    #[arg(short, long, value_name = "STATES")]
    pub state: Option<String>,
    /// The columns to show, in order: a comma list, or all (see below)
    #[arg(short, long, value_name = "COLUMNS")]
    pub columns: Option<String>,
    /// Show at most N rows (1..=1000), and say how many were left out
    // `-n`/`--max-rows` in every command that lists rows (`log` too); `-l`/`--limit-rows` still
    // work, unlisted, for scripts written before (`--limit` is a semaphore's size).
    #[arg(
        short = 'n',
        long,
        short_alias = 'l',
        alias = "limit-rows",
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=1000)
    )]
    pub max_rows: Option<u32>,
    /// How often --watch looks at the store (100ms..=1h)
    #[arg(long, value_parser = parse_interval, default_value = "1s", value_name = "DUR")]
    pub interval: Duration,
    /// Write JSON (only JSON) to stdout; with --watch, one JSON object per line
    #[arg(long)]
    pub json: bool,
}

const STATUS_HELP: &str = "\
What matters first: busy keys (held or queued), then keys whose last turn failed, then free
keys. One row per ticket: holders first, then the queue in the order it will be granted; a key
with no live tickets shows one `free` row with how its last turn ended. Below the default table,
one line per busy key gives its limit, last outcome, failures in a row and mean hold time.

On a terminal the table fits its width (the context, then the key, cut with `…`), and free keys
that would push a busy key off the screen are left out: the line under the table says how many
(`-s all` shows every row). Piped, and with --json, nothing is left out unless asked.

Columns (-c): key, state, position (POS), id, fence, for (held for / waiting for), lease_left
(LEASE; `?` where the store has no clock), context, order, mode, limit, last (last outcome),
failures (failures in a row). Default: key,state,position,id,fence,for,lease_left,context.

--watch, not on a terminal, prints lines such as
  2026-11-22T01:02:03Z deploy/prod: t-abc granted (fence 17) to ci run 12
  2026-11-22T01:02:03Z deploy/prod: t-def queued at position 2 (alice@host pid 7)
  2026-11-22T01:02:05Z deploy/prod: t-abc left (succeeded)
With --json --watch: the full status object on the first line, then one object per change:
  {\"time\",\"key\",\"event\":\"granted\"|\"queued\"|\"left\",\"id\",\"mode\",\"context\", and fence
  (granted), position (queued), outcome, forced, reason (left)}.
Ctrl-C ends a watch (exit 0). Colour only on a terminal, and never when NO_COLOR is set.";

/// Runs the `status` subcommand.
pub async fn status(opened: &Opened, args: StatusArgs) -> Result<i32, Failure> {
    let view = View::from_args(&args)?;
    let written = if !args.watch {
        let keys = read_all(opened, &args.prefix).await?;
        let mut out = std::io::stdout().lock();
        let text = if args.json {
            format!("{}\n", view.json(opened, keys))
        } else {
            view.table(&describe(opened), keys, render::terminal_size())
        };
        out.write_all(text.as_bytes()).and_then(|()| out.flush())
    } else if std::io::stdout().is_terminal() && !args.json {
        watch_terminal(opened, &args, &view).await
    } else {
        watch_changes(opened, &args, &view).await
    };
    match written {
        Ok(()) => Ok(exit::OK),
        // A closed pipe (`baton status | head`) is not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(exit::OK),
        Err(e) => Err(Failure::new(exit::ERROR, format!("cannot write: {e}"))),
    }
}

/// Reads every key under `prefix`, in the order of what they need ([`by_rank`]).
async fn read_all(opened: &Opened, prefix: &str) -> Result<Vec<KeyStatus>, Failure> {
    let keys = baton_client::status::read_all(&opened.coord, prefix).await?;
    Ok(by_rank(keys))
}

/// The store, as the line above the table names it.
fn describe(opened: &Opened) -> String {
    opened.coord.store().describe()
}

/// Keys and tickets for the tests of each part.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod fixtures {
    use baton_client::status::{KeyStatus, TicketStatus};
    use baton_core::{Mode, Outcome};

    use super::select::States;
    use super::view::{View, DEFAULT_COLUMNS};

    pub fn ticket(id: &str, held: bool, position: usize, fence: u64) -> TicketStatus {
        TicketStatus {
            ci_run: None,
            id: id.into(),
            held,
            mode: Mode::Normal,
            context: format!("ctx {id}"),
            order: None,
            keep: false,
            claimed: held,
            fence,
            position,
            since_wall_ms: 0,
            for_ms: 0,
            lease_left_ms: None,
            job: false,
            estimate_ms: None,
            stop_asked: None,
            slots: Vec::new(),
            wants_slot: None,
        }
    }

    pub fn key(name: &str, holders: Vec<TicketStatus>, queue: Vec<TicketStatus>) -> KeyStatus {
        KeyStatus {
            key: name.into(),
            limit: 1,
            slots: Vec::new(),
            fence: 0,
            busy: !holders.is_empty() || !queue.is_empty(),
            holders,
            queue,
            backlog: 0,
            backlog_turns: false,
            last_outcome: None,
            last_finished_wall_ms: 0,
            consecutive_failures: 0,
            mean_hold_ms: None,
            wall_ms: 0,
            finished: Vec::new(),
            once: None,
            outbox: (0, 0),
            paused: None,
        }
    }

    pub fn view(state: Option<&str>) -> View {
        let state_text = state.unwrap_or("all").to_owned();
        View {
            states: States::parse(&state_text).unwrap(),
            columns: DEFAULT_COLUMNS.to_vec(),
            columns_chosen: false,
            limit_rows: None,
            state_text,
            fit_screen: state.is_none(),
        }
    }

    pub fn ended(name: &str, outcome: Outcome, failures: u32) -> KeyStatus {
        let mut key = key(name, vec![], vec![]);
        key.last_outcome = Some(outcome);
        key.consecutive_failures = failures;
        key
    }

    pub fn names(keys: &[KeyStatus]) -> Vec<&str> {
        keys.iter().map(|k| k.key.as_str()).collect()
    }
}
