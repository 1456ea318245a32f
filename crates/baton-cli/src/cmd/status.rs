//! `baton status [PREFIX]`: who holds each key, who waits, and how the last turn ended; with
//! `--watch`, as it changes.
//!
//! Every form is built from one [`KeyStatus`] per key, read once: the JSON, the table and the
//! change lines of a watch. Keys come in the order of what needs a look ([`Rank`]): busy, then
//! failing, then free. `--state` and `--max-rows` cut the same selection for all forms; on a
//! terminal, the table alone also leaves out the free keys that would push a busy one off the
//! screen ([`free_left_out`]), unless `--state` was given.

use std::collections::{HashMap, HashSet};
use std::io::{IsTerminal, Write};
use std::time::Duration;

use baton_client::status::{mode_name, KeyStatus, TicketStatus};
use baton_core::{Finished, Mode, Outcome};
use clap::Args;
use serde_json::{json, Value};

use crate::args::duration::parse_interval;
use crate::cmd::acquire::{now_rfc3339, rfc3339};
use crate::exit::{self, Failure};
use crate::render::{self, Cell, Paint, Table};
use crate::Opened;

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

// ----- what is shown -----

/// A column of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Column {
    Key,
    State,
    Position,
    Id,
    Fence,
    For,
    LeaseLeft,
    Context,
    Order,
    Mode,
    Limit,
    Last,
    Failures,
}

/// Every column, in the order `-c all` shows them (the context last: it is the one cut to fit).
const ALL_COLUMNS: [Column; 13] = [
    Column::Key,
    Column::State,
    Column::Position,
    Column::Id,
    Column::Mode,
    Column::Fence,
    Column::For,
    Column::LeaseLeft,
    Column::Order,
    Column::Limit,
    Column::Last,
    Column::Failures,
    Column::Context,
];

const DEFAULT_COLUMNS: [Column; 8] = [
    Column::Key,
    Column::State,
    Column::Position,
    Column::Id,
    Column::Fence,
    Column::For,
    Column::LeaseLeft,
    Column::Context,
];

impl Column {
    fn name(self) -> &'static str {
        match self {
            Column::Key => "key",
            Column::State => "state",
            Column::Position => "position",
            Column::Id => "id",
            Column::Fence => "fence",
            Column::For => "for",
            Column::LeaseLeft => "lease_left",
            Column::Context => "context",
            Column::Order => "order",
            Column::Mode => "mode",
            Column::Limit => "limit",
            Column::Last => "last",
            Column::Failures => "failures",
        }
    }

    /// Its header: the name in capitals, shortened where the values are short, so the default
    /// columns leave room for the key and the context in 80 columns.
    fn header(self) -> String {
        match self {
            Column::Position => "POS".into(),
            Column::LeaseLeft => "LEASE".into(),
            other => other.name().to_uppercase(),
        }
    }
}

/// What a key needs: the order of the table, most pressing first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Rank {
    /// Held or queued.
    Busy,
    /// Idle, but its last turn failed, expired or died, or its run-once is dead: someone
    /// should look.
    Failing,
    /// Idle, and nothing went wrong.
    Free,
}

impl Rank {
    fn of(key: &KeyStatus) -> Rank {
        let failed = matches!(
            key.last_outcome,
            Some(Outcome::Failed | Outcome::Expired | Outcome::Dead)
        );
        let once_dead = key.once.as_ref().is_some_and(|record| record.dead);
        if key.busy {
            Rank::Busy
        } else if failed || key.consecutive_failures > 0 || once_dead {
            Rank::Failing
        } else {
            Rank::Free
        }
    }
}

/// `keys` (in key order) in the order of what they need, key order kept within a rank.
fn by_rank(mut keys: Vec<KeyStatus>) -> Vec<KeyStatus> {
    keys.sort_by_key(Rank::of);
    keys
}

/// How many of the `n_free` free rows at the end of a table of `n_lines` lines to leave out so
/// that the table and the line that says so fit a screen of `height` rows, with the prompt
/// under them: a busy key at the top is never scrolled off by idle ones.
fn free_left_out(n_lines: usize, n_free: usize, height: usize) -> usize {
    let room = height.saturating_sub(1);
    if n_lines <= room {
        return 0;
    }
    // One more: the line under the table that says how many were left out.
    (n_lines + 1 - room).min(n_free)
}

/// Which rows to show: `--state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct States {
    held: bool,
    queued: bool,
    free: bool,
}

impl States {
    fn parse(text: &str) -> Result<States, Failure> {
        let mut states = States {
            held: false,
            queued: false,
            free: false,
        };
        for name in text.split(',').map(str::trim) {
            match name {
                "held" => states.held = true,
                "queued" => states.queued = true,
                "free" => states.free = true,
                "all" => {
                    states = States {
                        held: true,
                        queued: true,
                        free: true,
                    }
                }
                other => {
                    return Err(Failure::usage(format!(
                        "unknown state `{other}` for --state; give a comma list of held, \
                         queued, free, or all"
                    )))
                }
            }
        }
        Ok(states)
    }

    fn shows(self, held: bool) -> bool {
        if held {
            self.held
        } else {
            self.queued
        }
    }
}

fn parse_columns(text: &str) -> Result<Vec<Column>, Failure> {
    let mut columns = Vec::new();
    for name in text.split(',').map(str::trim) {
        if name == "all" {
            columns.extend(ALL_COLUMNS);
            continue;
        }
        match ALL_COLUMNS.iter().find(|c| c.name() == name) {
            Some(column) => columns.push(*column),
            None => {
                let valid: Vec<&str> = ALL_COLUMNS.iter().map(|c| c.name()).collect();
                return Err(Failure::usage(format!(
                    "unknown column `{name}` for --columns; valid columns: {}, or all",
                    valid.join(", ")
                )));
            }
        }
    }
    let mut seen = HashSet::new();
    columns.retain(|c| seen.insert(*c));
    Ok(columns)
}

/// The options that shape every form of the output.
struct View {
    states: States,
    columns: Vec<Column>,
    /// `-c` given: exactly those columns, and no per-key lines under the table.
    columns_chosen: bool,
    limit_rows: Option<usize>,
    state_text: String,
    /// No `--state`: on a terminal, free keys give way to busy ones.
    fit_screen: bool,
}

impl View {
    fn from_args(args: &StatusArgs) -> Result<View, Failure> {
        let state_text = args.state.clone().unwrap_or_else(|| "all".into());
        let states = States::parse(&state_text)?;
        let (columns, columns_chosen) = match &args.columns {
            Some(text) => (parse_columns(text)?, true),
            None => (DEFAULT_COLUMNS.to_vec(), false),
        };
        if args.interval < Duration::from_millis(100) || args.interval > Duration::from_secs(3600) {
            return Err(Failure::usage("--interval must be between 100ms and 1h"));
        }
        Ok(View {
            states,
            columns,
            columns_chosen,
            limit_rows: args.max_rows.map(|n| n as usize),
            state_text,
            fit_screen: args.state.is_none(),
        })
    }

    /// `--json`: the status object (its shape is relied on by scripts and tests).
    fn json(&self, opened: &Opened, keys: Vec<KeyStatus>) -> Value {
        let (keys, left_out) = select(keys, self.states, self.limit_rows);
        json!({
            "store": opened.coord.store().describe(),
            // How leases are judged: by the store's clock (lease_left_ms is known), or by
            // observation of heartbeats (a store without a clock: lease_left_ms is null).
            "clock": if opened.coord.store().capabilities().clock { "store" } else { "observation" },
            // How far behind the store's time its clock readings may be (S3's `Date` has whole
            // seconds): a lease ends only once the clock reads this much past its deadline,
            // which lease_left_ms counts in.
            "clock_uncertain_ms": opened.coord.store().capabilities().clock_uncertain_ms,
            "now": now_rfc3339(),
            "keys": keys.iter().map(KeyStatus::json).collect::<Vec<_>>(),
            "rows_left_out": left_out,
        })
    }

    /// The table, with the store line above it and the per-key lines below it; fitted to
    /// `screen` (columns, rows) when on a terminal.
    fn table(&self, store: &str, keys: Vec<KeyStatus>, screen: Option<(usize, usize)>) -> String {
        let n_keys = keys.len();
        let (mut keys, left_out) = select(keys, self.states, self.limit_rows);
        let width = screen.map(|(width, _)| width);
        let mut parts = Shown {
            store,
            n_keys,
            left_out,
            free_left_out: 0,
        };
        let text = self.table_text(&parts, &keys, width);
        let Some((_, height)) = screen.filter(|_| self.fit_screen) else {
            return text;
        };
        let n_free = keys.iter().filter(|k| Rank::of(k) == Rank::Free).count();
        parts.free_left_out = free_left_out(text.lines().count(), n_free, height);
        if parts.free_left_out == 0 {
            return text;
        }
        // Free keys come last ([`by_rank`]).
        keys.truncate(keys.len() - parts.free_left_out);
        self.table_text(&parts, &keys, width)
    }

    fn table_text(&self, shown: &Shown, keys: &[KeyStatus], width: Option<usize>) -> String {
        let colour = render::colour_wanted();
        let mut out = format!("store: {}\n", shown.store);
        if keys.is_empty() {
            if shown.n_keys == 0 {
                out.push_str("no keys\n");
            } else if shown.free_left_out > 0 {
                out.push_str("no busy keys\n");
            } else {
                out.push_str(&format!(
                    "no rows in state {} ({} keys)\n",
                    self.state_text, shown.n_keys
                ));
            }
        } else {
            let headers = self.columns.iter().map(|c| c.header()).collect();
            let at = |column| self.columns.iter().position(|c| *c == column);
            let mut table = Table::new(headers)
                .flexible(at(Column::Context))
                .cut_start(at(Column::Key));
            for key in keys {
                for ticket in key.holders.iter().chain(&key.queue) {
                    table.push(self.row(key, Some(ticket)));
                }
                if !key.busy {
                    table.push(self.row(key, None));
                }
            }
            out.push_str(&table.render(width, colour));
        }
        if shown.left_out > 0 {
            out.push_str(&format!(
                "… {} more rows not shown (--max-rows)\n",
                shown.left_out
            ));
        }
        if shown.free_left_out > 0 {
            out.push_str(&format!(
                "… {} free keys left out to keep the busy ones on screen (-s all shows them)\n",
                shown.free_left_out
            ));
        }
        if !self.columns_chosen {
            let lines: Vec<String> = keys
                .iter()
                .filter(|k| k.busy)
                .map(|k| key_line(k, colour))
                .collect();
            if !lines.is_empty() {
                out.push('\n');
                for line in lines {
                    out.push_str(&line);
                    out.push('\n');
                }
            }
        }
        out
    }

    /// One row: a ticket of `key`, or (`None`) the key's `free` row.
    fn row(&self, key: &KeyStatus, ticket: Option<&TicketStatus>) -> Vec<Cell> {
        self.columns
            .iter()
            .map(|column| match (column, ticket) {
                (Column::Key, _) => Cell::plain(&key.key),
                (Column::State, Some(t)) => {
                    let (name, paint) = match (t.held, t.stop_asked.is_some()) {
                        // Asked to stop by --cancel-running: still holding, on its way out.
                        (true, true) => ("stopping", Paint::Yellow),
                        (true, false) => ("held", Paint::Green),
                        (false, _) => ("queued", Paint::Yellow),
                    };
                    let shared = if t.mode == Mode::Shared {
                        " shared"
                    } else {
                        ""
                    };
                    Cell::painted(format!("{name}{shared}"), Some(paint))
                }
                (Column::State, None) => Cell::plain("free"),
                (Column::Position, Some(t)) if !t.held => Cell::plain(t.position.to_string()),
                (Column::Id, Some(t)) => Cell::plain(&t.id),
                (Column::Fence, Some(t)) if t.held => Cell::plain(t.fence.to_string()),
                // An idle key keeps its last fence.
                (Column::Fence, None) if key.fence > 0 => Cell::plain(key.fence.to_string()),
                (Column::For, Some(t)) => Cell::plain(render::duration_ms(t.for_ms)),
                (Column::For, None) if key.last_finished_wall_ms > 0 => Cell::plain(
                    render::duration_ms(key.wall_ms.saturating_sub(key.last_finished_wall_ms)),
                ),
                (Column::LeaseLeft, Some(t)) if t.held => match t.lease_left_ms {
                    Some(ms) => Cell::plain(render::duration_ms(ms)),
                    None => Cell::plain("?"),
                },
                (Column::Context, Some(t)) => Cell::plain(&t.context),
                (Column::Context, None) => {
                    let (text, paint) = last_turn(key);
                    Cell::painted(text, paint)
                }
                (Column::Order, Some(t)) => Cell::plain(t.order.as_deref().unwrap_or("")),
                (Column::Mode, Some(t)) => Cell::plain(mode_name(t.mode)),
                (Column::Limit, _) => Cell::plain(key.limit.to_string()),
                (Column::Last, _) => {
                    let outcome = key.last_outcome.map_or("", Outcome::as_str);
                    Cell::painted(outcome, render::outcome_paint(outcome))
                }
                (Column::Failures, _) => Cell::plain(key.consecutive_failures.to_string()),
                _ => Cell::default(),
            })
            .collect()
    }
}

/// How the key's last turn ended, for a free row: `last turn failed (2 failures in a row)`.
fn last_turn(key: &KeyStatus) -> (String, Option<Paint>) {
    if let Some(words) = paused_words(key) {
        return (words, Some(Paint::Yellow));
    }
    let Some(outcome) = key.last_outcome else {
        return ("no turn has ended yet".into(), None);
    };
    let mut text = format!("last turn {outcome}");
    if key.consecutive_failures > 1 {
        text.push_str(&format!(
            " ({} failures in a row)",
            key.consecutive_failures
        ));
    }
    if let Some(words) = once_words(key) {
        text.push_str(&format!("; {words}"));
    }
    (text, render::outcome_paint(outcome.as_str()))
}

/// The freeze in force, in words: `paused until resumed by alice: audit (deploy/)`.
fn paused_words(key: &KeyStatus) -> Option<String> {
    let paused = key.paused.as_ref()?;
    let target = if paused.target == key.key {
        String::new()
    } else {
        format!(" (baton pause {})", render::one_line(&paused.target))
    };
    Some(format!("{}{target}", render::paused(paused)))
}

/// Undelivered and dropped notification events, when there are any.
fn outbox_words(key: &KeyStatus) -> Option<String> {
    match key.outbox {
        (0, 0) => None,
        (undelivered, 0) => Some(format!("{undelivered} notifications undelivered")),
        (undelivered, dropped) => Some(format!(
            "{undelivered} notifications undelivered, {dropped} dropped (the receiver was down too long)"
        )),
    }
}

/// What the key's run-once record says, in a few words (`None`: it has none).
fn once_words(key: &KeyStatus) -> Option<String> {
    let record = key.once.as_ref()?;
    let ago = |ms: u64| render::duration_ms(key.wall_ms.saturating_sub(ms));
    let done = record.done_seq_at(key.wall_ms);
    Some(if record.dead {
        format!(
            "run-once dead after {} failed attempts (`baton retry {}`)",
            record.failures,
            render::one_line(&key.key)
        )
    } else if done > 0 {
        let step = if done > 1 {
            format!(" through step {done}")
        } else {
            String::new()
        };
        format!(
            "run-once done{step} {} ago, remembered {} more",
            ago(record.done_wall_ms),
            render::duration_ms(record.forget_wall_ms.saturating_sub(key.wall_ms))
        )
    } else if record.failures > 0 {
        format!("run-once: {} failed attempts", record.failures)
    } else {
        "run-once: not done".into()
    })
}

/// The line under the table for a busy key: limit, last outcome, failures in a row, mean hold.
fn key_line(key: &KeyStatus, colour: bool) -> String {
    let mut parts = vec![format!("limit {}", key.limit)];
    if let Some(words) = paused_words(key) {
        parts.push(render::paint(&words, Some(Paint::Yellow), colour));
    }
    match key.last_outcome {
        Some(outcome) => {
            let ago = render::duration_ms(key.wall_ms.saturating_sub(key.last_finished_wall_ms));
            let name = render::paint(
                outcome.as_str(),
                render::outcome_paint(outcome.as_str()),
                colour,
            );
            parts.push(format!("last turn {name} {ago} ago"));
        }
        None => parts.push("no turn has ended yet".into()),
    }
    if key.backlog > 0 {
        parts.push(format!(
            "{} more jobs in the backlog (`baton jobs {}`)",
            key.backlog,
            render::one_line(&key.key)
        ));
    }
    if key.consecutive_failures > 0 {
        parts.push(format!("{} failures in a row", key.consecutive_failures));
    }
    if let Some(words) = once_words(key) {
        parts.push(words);
    }
    if let Some(words) = outbox_words(key) {
        parts.push(words);
    }
    if let Some(ms) = key.mean_hold_ms {
        parts.push(format!("mean hold {}", render::duration_ms(ms)));
    }
    format!("{}: {}", render::one_line(&key.key), parts.join(", "))
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

/// What a table says besides its rows.
struct Shown<'a> {
    store: &'a str,
    /// Keys read, before any was left out.
    n_keys: usize,
    /// Rows cut by `--max-rows`.
    left_out: usize,
    /// Free keys left out to fit the screen.
    free_left_out: usize,
}

/// The rows `states` asks for, at most `limit_rows` of them (holders before the queue, keys in
/// order), and how many were left out. A key keeps its place only if it has a row left: a
/// ticket, or its `free` row.
fn select(
    keys: Vec<KeyStatus>,
    states: States,
    limit_rows: Option<usize>,
) -> (Vec<KeyStatus>, usize) {
    let mut budget = limit_rows.unwrap_or(usize::MAX);
    let mut left_out = 0;
    let mut selected = Vec::new();
    for mut key in keys {
        if !key.busy {
            if !states.free {
                continue;
            }
            if budget == 0 {
                left_out += 1;
                continue;
            }
            budget -= 1;
            selected.push(key);
            continue;
        }
        key.holders.retain(|_| states.held);
        key.queue.retain(|_| states.queued);
        let n_rows = key.holders.len() + key.queue.len();
        let n_holders = key.holders.len().min(budget);
        key.holders.truncate(n_holders);
        let n_queued = key.queue.len().min(budget - n_holders);
        key.queue.truncate(n_queued);
        budget -= n_holders + n_queued;
        left_out += n_rows - n_holders - n_queued;
        if n_holders + n_queued > 0 {
            selected.push(key);
        }
    }
    (selected, left_out)
}

// ----- watching -----

/// `--watch` on a terminal: redraw in place every interval until Ctrl-C.
async fn watch_terminal(opened: &Opened, args: &StatusArgs, view: &View) -> std::io::Result<()> {
    let interrupted = crate::signals::interruption()?;
    tokio::pin!(interrupted);
    let mut out = std::io::stdout();
    // Clear once; later frames overwrite in place (no flicker), erasing what is left over.
    out.write_all(b"\x1b[2J")?;
    loop {
        let (width, height) = render::terminal_size().unwrap_or((80, 24));
        let title = format!(
            "every {} · {} · Ctrl-C to stop",
            crate::render::duration(args.interval),
            render::rfc3339_seconds(baton_client::wall_ms()),
        );
        let body = match read_all(opened, &args.prefix).await {
            // The title takes a row.
            Ok(keys) => view.table(
                &describe(opened),
                keys,
                Some((width, height.saturating_sub(1))),
            ),
            Err(failure) => format!("baton: {}\n", failure.message),
        };
        let mut lines: Vec<&str> = std::iter::once(title.as_str())
            .chain(body.lines())
            .collect();
        // Stay within the screen, or the redraw scrolls instead of overwriting.
        let room = height.saturating_sub(1).max(2);
        let more;
        if lines.len() > room {
            more = format!(
                "… {} more lines (a taller window, --state or --max-rows)",
                lines.len() - (room - 1)
            );
            lines.truncate(room - 1);
            lines.push(&more);
        }
        let mut frame = String::from("\x1b[H");
        for line in lines {
            frame.push_str(line);
            frame.push_str("\x1b[K\n");
        }
        frame.push_str("\x1b[J");
        out.write_all(frame.as_bytes())?;
        out.flush()?;
        tokio::select! {
            () = tokio::time::sleep(args.interval) => {}
            _ = &mut interrupted => return Ok(()),
        }
    }
}

/// A change seen between two reads.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Change {
    Granted {
        fence: u64,
    },
    Queued {
        position: usize,
    },
    Left {
        was_held: bool,
        outcome: Option<Outcome>,
        forced: bool,
        reason: Option<String>,
        /// The fence the history says it held under, when it left a queue: it was granted
        /// and ended between two reads, and its grant was never seen.
        granted_unseen: Option<u64>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Event {
    key: String,
    id: String,
    mode: Mode,
    context: String,
    change: Change,
}

impl Event {
    fn held(&self) -> bool {
        match self.change {
            Change::Granted { .. } => true,
            Change::Queued { .. } => false,
            Change::Left { was_held, .. } => was_held,
        }
    }

    /// `deploy/prod: t-abc granted (fence 17) to ci run 12`, after a timestamp.
    fn line(&self, wall_ms: u64) -> String {
        let shared = if self.mode == Mode::Shared {
            " shared"
        } else {
            ""
        };
        let context = render::one_line(&self.context);
        let what = match &self.change {
            Change::Granted { fence } if context.is_empty() => {
                format!("granted{shared} (fence {fence})")
            }
            Change::Granted { fence } => format!("granted{shared} (fence {fence}) to {context}"),
            Change::Queued { position } if context.is_empty() => {
                format!("queued{shared} at position {position}")
            }
            Change::Queued { position } => {
                format!("queued{shared} at position {position} ({context})")
            }
            Change::Left {
                outcome,
                forced,
                reason,
                ..
            } => {
                let mut how = outcome.map_or_else(|| "outcome unknown".into(), |o| o.to_string());
                if *forced {
                    how.push_str(", forced");
                }
                if let Some(reason) = reason {
                    how.push_str(&format!(": {}", render::one_line(reason)));
                }
                format!("left ({how})")
            }
        };
        format!(
            "{} {}: {} {what}",
            render::rfc3339_seconds(wall_ms),
            render::one_line(&self.key),
            self.id
        )
    }

    fn json(&self, wall_ms: u64) -> Value {
        let mut value = json!({
            "time": rfc3339(wall_ms),
            "key": self.key,
            "id": self.id,
            "mode": mode_name(self.mode),
            "context": self.context,
        });
        let fields = match &self.change {
            Change::Granted { fence } => json!({ "event": "granted", "fence": fence }),
            Change::Queued { position } => json!({ "event": "queued", "position": position }),
            Change::Left {
                outcome,
                forced,
                reason,
                ..
            } => json!({
                "event": "left",
                "outcome": outcome.map(Outcome::as_str),
                "forced": forced,
                "reason": reason,
            }),
        };
        if let (Some(value), Value::Object(fields)) = (value.as_object_mut(), fields) {
            value.extend(fields);
        }
        value
    }
}

/// What changed from `before` to `after`, per key: tickets that left, then grants in fence
/// order, then arrivals in queue order. A ticket that left is looked up in the document's
/// recently finished tickets; its outcome is `None` when it is no longer there.
fn changes(before: &[KeyStatus], after: &[KeyStatus]) -> Vec<Event> {
    let before: HashMap<&str, &KeyStatus> = before.iter().map(|k| (k.key.as_str(), k)).collect();
    let mut events = Vec::new();
    for key in after {
        let old: HashMap<&str, &TicketStatus> = before
            .get(key.key.as_str())
            .map(|k| {
                k.holders
                    .iter()
                    .chain(&k.queue)
                    .map(|t| (t.id.as_str(), t))
                    .collect()
            })
            .unwrap_or_default();
        let live: HashSet<&str> = key
            .holders
            .iter()
            .chain(&key.queue)
            .map(|t| t.id.as_str())
            .collect();
        let event = |t: &TicketStatus, change: Change| Event {
            key: key.key.clone(),
            id: t.id.clone(),
            mode: t.mode,
            context: t.context.clone(),
            change,
        };
        let mut gone: Vec<&TicketStatus> = old
            .values()
            .copied()
            .filter(|t| !live.contains(t.id.as_str()))
            .collect();
        gone.sort_by_key(|t| (!t.held, t.position, t.fence));
        for t in gone {
            let mark = key.finished.iter().rev().find(|m| m.id == t.id);
            events.push(event(
                t,
                Change::Left {
                    was_held: t.held,
                    outcome: mark.map(|m| m.outcome),
                    forced: mark.is_some_and(|m| m.forced),
                    reason: None,
                    granted_unseen: None,
                },
            ));
        }
        let mut granted: Vec<&TicketStatus> = key
            .holders
            .iter()
            .filter(|t| !old.get(t.id.as_str()).is_some_and(|o| o.held))
            .collect();
        granted.sort_by_key(|t| t.fence);
        for t in granted {
            events.push(event(t, Change::Granted { fence: t.fence }));
        }
        for t in key
            .queue
            .iter()
            .filter(|t| !old.contains_key(t.id.as_str()))
        {
            events.push(event(
                t,
                Change::Queued {
                    position: t.position,
                },
            ));
        }
    }
    events
}

/// Fills in the outcome and reason of tickets that left from their keys' history (one read per
/// key with departures), and puts back the grant of a ticket that was granted and left between
/// two reads, so a watch never shows a turn going from `queued` straight to `left`.
async fn resolve_outcomes(opened: &Opened, events: &mut Vec<Event>) {
    let mut by_key: HashMap<String, usize> = HashMap::new();
    for event in events.iter() {
        if matches!(event.change, Change::Left { .. }) {
            *by_key.entry(event.key.clone()).or_default() += 1;
        }
    }
    for (key, n_left) in by_key {
        // Others may have finished since: look a little further back than the departures.
        let Ok(records) = opened
            .coord
            .store()
            .history_tail(&key, n_left * 2 + 100)
            .await
        else {
            continue;
        };
        let finished: HashMap<String, Finished> = records
            .iter()
            .filter_map(|r| Finished::decode(&r.bytes).ok())
            .map(|f| (f.id.clone(), f))
            .collect();
        for event in events.iter_mut().filter(|e| e.key == key) {
            if let (
                Change::Left {
                    was_held,
                    outcome,
                    forced,
                    reason,
                    granted_unseen,
                },
                Some(found),
            ) = (&mut event.change, finished.get(&event.id))
            {
                *outcome = Some(found.outcome);
                *forced = found.forced;
                reason.clone_from(&found.reason);
                *granted_unseen = found.fence.filter(|_| !*was_held);
            }
        }
    }
    *events = with_unseen_grants(std::mem::take(events));
}

/// `events` with a `granted` line before each departure whose grant was not seen.
fn with_unseen_grants(events: Vec<Event>) -> Vec<Event> {
    let mut out = Vec::with_capacity(events.len());
    for event in events {
        if let Change::Left {
            granted_unseen: Some(fence),
            ..
        } = event.change
        {
            out.push(Event {
                change: Change::Granted { fence },
                ..event.clone()
            });
        }
        out.push(event);
    }
    out
}

/// `--watch` elsewhere: the table (or the JSON object) once, then one line per change, each
/// flushed, until Ctrl-C.
async fn watch_changes(opened: &Opened, args: &StatusArgs, view: &View) -> std::io::Result<()> {
    let interrupted = crate::signals::interruption()?;
    tokio::pin!(interrupted);
    let mut out = std::io::stdout();
    let mut before = loop {
        match read_all(opened, &args.prefix).await {
            Ok(keys) => break keys,
            Err(failure) => eprintln!("baton: {}", render::one_line(&failure.message)),
        }
        tokio::select! {
            () = tokio::time::sleep(args.interval) => {}
            _ = &mut interrupted => return Ok(()),
        }
    };
    let first = if args.json {
        format!("{}\n", view.json(opened, before.clone()))
    } else {
        view.table(&describe(opened), before.clone(), None)
    };
    out.write_all(first.as_bytes())?;
    out.flush()?;
    let mut last_error = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(args.interval) => {}
            _ = &mut interrupted => return Ok(()),
        }
        let after = match read_all(opened, &args.prefix).await {
            Ok(keys) => keys,
            Err(failure) => {
                // Say it once, and keep watching: the store may come back.
                if last_error.as_ref() != Some(&failure.message) {
                    eprintln!("baton: {}", render::one_line(&failure.message));
                    last_error = Some(failure.message);
                }
                continue;
            }
        };
        last_error = None;
        let mut events = changes(&before, &after);
        resolve_outcomes(opened, &mut events).await;
        events.retain(|e| view.states.shows(e.held()));
        let wall_ms = baton_client::wall_ms();
        for event in &events {
            let line = if args.json {
                event.json(wall_ms).to_string()
            } else {
                event.line(wall_ms)
            };
            writeln!(out, "{line}")?;
            out.flush()?;
        }
        before = after;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use baton_core::doc::FinishedMark;

    fn ticket(id: &str, held: bool, position: usize, fence: u64) -> TicketStatus {
        TicketStatus {
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
        }
    }

    fn key(name: &str, holders: Vec<TicketStatus>, queue: Vec<TicketStatus>) -> KeyStatus {
        KeyStatus {
            key: name.into(),
            limit: 1,
            fence: 0,
            busy: !holders.is_empty() || !queue.is_empty(),
            holders,
            queue,
            backlog: 0,
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

    #[test]
    fn states_and_columns_parse_or_say_what_is_valid() {
        assert_eq!(
            States::parse("held,queued").ok(),
            Some(States {
                held: true,
                queued: true,
                free: false
            })
        );
        assert!(States::parse("all").is_ok_and(|s| s.held && s.queued && s.free));
        let bad = States::parse("held,gone")
            .err()
            .map(|f| (f.code, f.message));
        assert!(bad.is_some_and(|(code, m)| code == exit::USAGE && m.contains("gone")));
        assert_eq!(
            parse_columns("key,id,key").ok(),
            Some(vec![Column::Key, Column::Id])
        );
        assert_eq!(parse_columns("all").ok().map(|c| c.len()), Some(13));
        let bad = parse_columns("key,bogus").err().map(|f| f.message);
        assert!(bad.is_some_and(|m| m.contains("bogus") && m.contains("lease_left")));
    }

    #[test]
    fn select_filters_states_and_limits_rows() {
        let keys = vec![
            key(
                "a",
                vec![ticket("h1", true, 0, 5)],
                vec![ticket("q1", false, 1, 0), ticket("q2", false, 2, 0)],
            ),
            key("b", vec![], vec![]),
        ];
        let all = States::parse("all").unwrap_or(States {
            held: true,
            queued: true,
            free: true,
        });
        let ids = |(keys, left): (Vec<KeyStatus>, usize)| {
            let ids: Vec<String> = keys
                .iter()
                .flat_map(|k| {
                    let mut ids: Vec<String> = k
                        .holders
                        .iter()
                        .chain(&k.queue)
                        .map(|t| t.id.clone())
                        .collect();
                    if !k.busy {
                        ids.push(format!("{}:free", k.key));
                    }
                    ids
                })
                .collect();
            (ids, left)
        };
        assert_eq!(
            ids(select(keys.clone(), all, None)),
            (
                vec!["h1".into(), "q1".into(), "q2".into(), "b:free".into()],
                0
            )
        );
        assert_eq!(
            ids(select(keys.clone(), all, Some(2))),
            (vec!["h1".into(), "q1".into()], 2)
        );
        let queued = States {
            held: false,
            queued: true,
            free: false,
        };
        assert_eq!(
            ids(select(keys.clone(), queued, None)),
            (vec!["q1".into(), "q2".into()], 0)
        );
        let held = States {
            held: true,
            queued: false,
            free: false,
        };
        assert_eq!(ids(select(keys, held, None)), (vec!["h1".into()], 0));
    }

    fn view(state: Option<&str>) -> View {
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

    fn ended(name: &str, outcome: Outcome, failures: u32) -> KeyStatus {
        let mut key = key(name, vec![], vec![]);
        key.last_outcome = Some(outcome);
        key.consecutive_failures = failures;
        key
    }

    fn names(keys: &[KeyStatus]) -> Vec<&str> {
        keys.iter().map(|k| k.key.as_str()).collect()
    }

    #[test]
    fn keys_come_busy_then_failing_then_free_each_in_key_order() {
        let keys = vec![
            ended("a-ok", Outcome::Succeeded, 0),
            ended("b-failed", Outcome::Failed, 2),
            key("c-never", vec![], vec![]),
            ended("d-expired", Outcome::Expired, 0),
            ended("e-cancelled", Outcome::Cancelled, 0),
            key("m-queued", vec![], vec![ticket("q", false, 1, 0)]),
            ended("r-recovered", Outcome::Succeeded, 0),
            key("z-held", vec![ticket("h", true, 0, 3)], vec![]),
        ];
        assert_eq!(
            names(&by_rank(keys)),
            [
                "m-queued",
                "z-held",
                "b-failed",
                "d-expired",
                "a-ok",
                "c-never",
                "e-cancelled",
                "r-recovered"
            ]
        );
    }

    #[test]
    fn free_rows_give_way_only_when_a_busy_row_would_scroll_off() {
        // (lines of the whole table, free rows in it, screen height) -> free rows left out.
        let check = |n_lines, n_free, height, expected| {
            assert_eq!(
                free_left_out(n_lines, n_free, height),
                expected,
                "{n_lines} lines, {n_free} free, {height} rows"
            );
        };
        check(10, 5, 24, 0);
        // The prompt takes the last row.
        check(23, 5, 24, 0);
        // One too many: two go, one for the line that says so.
        check(24, 5, 24, 2);
        check(30, 20, 24, 8);
        // Busy rows alone overflow: every free row goes, and nothing more.
        check(40, 5, 24, 5);
        check(40, 0, 24, 0);
    }

    #[test]
    fn a_terminals_table_keeps_busy_keys_on_screen_and_fits_80_columns() {
        let long = "a context long enough to need cutting on any terminal narrower than this";
        let mut holder = ticket("t-00000000000000aa", true, 0, 7);
        holder.context = long.into();
        let mut keys = vec![key(
            "team-a/deploy/production",
            vec![holder],
            vec![ticket("t-00000000000000bb", false, 1, 0)],
        )];
        keys.extend((0..30).map(|n| ended(&format!("team-a/idle/{n:02}"), Outcome::Succeeded, 0)));
        keys.push(ended("team-a/broken", Outcome::Failed, 3));
        let keys = by_rank(keys);

        let shown = view(None).table("memory:", keys.clone(), Some((80, 24)));
        let lines: Vec<&str> = shown.lines().collect();
        assert!(lines.len() <= 23, "fits 24 rows with the prompt:\n{shown}");
        assert!(
            lines.iter().all(|l| l.chars().count() <= 80),
            "fits 80 columns:\n{shown}"
        );
        assert!(shown.contains("t-00000000000000aa") && shown.contains("t-00000000000000bb"));
        let at = |needle: &str| lines.iter().position(|l| l.contains(needle));
        assert!(
            at("team-a/broken") < at("team-a/idle/00"),
            "the failing key before the free ones:\n{shown}"
        );
        assert!(shown.contains("a con"), "{shown}");
        assert!(!shown.contains(long), "the context is cut:\n{shown}");
        let n_free_shown = lines.iter().filter(|l| l.contains("team-a/idle/")).count();
        assert_eq!(
            lines
                .iter()
                .find(|l| l.contains("free keys left out"))
                .copied(),
            Some(
                format!(
                    "… {} free keys left out to keep the busy ones on screen (-s all shows them)",
                    30 - n_free_shown
                )
                .as_str()
            ),
            "{shown}"
        );
        assert!(n_free_shown > 0 && n_free_shown < 30, "{shown}");

        // Asked for every row, piped, or a screen with room: nothing is left out.
        for shown in [
            view(Some("all")).table("memory:", keys.clone(), Some((80, 24))),
            view(None).table("memory:", keys.clone(), None),
            view(None).table("memory:", keys.clone(), Some((80, 100))),
        ] {
            assert_eq!(shown.matches("team-a/idle/").count(), 30, "{shown}");
            assert!(!shown.contains("left out"), "{shown}");
        }

        // A screen too short for even the busy rows: every free key gives way.
        let tiny = view(None).table("memory:", keys, Some((80, 4)));
        assert!(!tiny.contains("team-a/idle/"), "{tiny}");
        assert!(tiny.contains("… 30 free keys left out"), "{tiny}");
    }

    #[test]
    fn changes_are_grants_arrivals_and_departures_with_outcomes() {
        let before = vec![key(
            "k",
            vec![ticket("h1", true, 0, 5)],
            vec![ticket("q1", false, 1, 0)],
        )];
        let mut after = key(
            "k",
            vec![ticket("q1", true, 0, 6)],
            vec![ticket("q2", false, 1, 0)],
        );
        after
            .finished
            .push(FinishedMark::new("h1", "", Outcome::Cancelled, true, None));
        let events = changes(&before, &[after]);
        let lines: Vec<String> = events.iter().map(|e| e.line(0)).collect();
        assert_eq!(
            lines,
            [
                "1970-01-01T00:00:00Z k: h1 left (cancelled, forced)",
                "1970-01-01T00:00:00Z k: q1 granted (fence 6) to ctx q1",
                "1970-01-01T00:00:00Z k: q2 queued at position 1 (ctx q2)",
            ]
        );
        assert_eq!(
            events.iter().map(Event::held).collect::<Vec<_>>(),
            [true, true, false]
        );
        let json = events[0].json(0);
        assert_eq!(json["event"], "left");
        assert_eq!(json["outcome"], "cancelled");
        assert_eq!(json["forced"], true);
        assert_eq!(events[1].json(0)["fence"], 6);
        assert!(changes(&before, &before).is_empty());
    }
}
