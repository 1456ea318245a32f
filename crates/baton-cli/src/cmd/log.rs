//! `baton log KEY`: how a key's past turns ended, from its history log; `--follow` for new ones.
//!
//! Newest first; with `--follow` the last N come oldest first, so that new entries append in
//! time order. An entry that cannot be decoded is shown as such, never a panic.

use std::io::Write;
use std::time::Duration;

use baton_core::{Finished, Mode};
use baton_store::{HistoryRecord, WatchHandle};
use clap::Args;
use serde_json::{json, Value};

use crate::args::key::check_key;
use crate::cmd::acquire::rfc3339;
use crate::exit::{self, Failure};
use crate::render::{self, Cell, Table};
use crate::Opened;

/// `baton log`.
#[derive(Debug, Args)]
#[command(after_help = LOG_HELP)]
pub struct LogArgs {
    /// The key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// How many entries (1..=10000)
    #[arg(
        short = 'n',
        long = "max-rows",
        alias = "lines",
        value_name = "N",
        default_value_t = 20,
        value_parser = clap::value_parser!(u32).range(1..=10000)
    )]
    pub n: u32,
    /// Print the last N oldest first, then each new entry as it is recorded, until Ctrl-C
    #[arg(short, long)]
    pub follow: bool,
    /// One JSON object per line (seq, key, id, outcome, forced, reason, context, order, mode,
    /// fence, enqueued_at, acquired_at, released_at, wait_ms, hold_ms)
    #[arg(long)]
    pub json: bool,
}

const LOG_HELP: &str = "\
Newest first: when the turn ended, its outcome (`cancelled (forced)` for an operator's forced
release), ticket id, fence, how long it waited (enqueued to granted, or to its end if never
granted), how long it held, its context and the reason. With --follow the last N come oldest
first, so new entries append in time order. Ctrl-C ends --follow (exit 0).";

/// How often `--follow` reads the history when the store cannot push.
const FOLLOW_POLL: Duration = Duration::from_millis(500);

/// How many new entries `--follow` reads at once.
const FOLLOW_BATCH: usize = 1000;

/// Runs the `log` subcommand.
pub async fn log(opened: &Opened, args: LogArgs) -> Result<i32, Failure> {
    check_key(&args.key)?;
    let store = opened.coord.store();
    let mut records = store.history_tail(&args.key, args.n as usize).await?;
    let freezes = freeze_lines(opened, &args.key, &records, args.n as usize).await;
    if records.is_empty() && freezes.is_empty() {
        eprintln!("baton: no history for {} yet", render::one_line(&args.key));
        if !args.follow {
            return Ok(exit::OK);
        }
    }
    if args.follow {
        records.reverse();
    }
    let mut printer = Printer::new(&args);
    let mut written = printer.first(&records, freezes, args.follow);
    if written.is_ok() && args.follow {
        written = follow(opened, &args, &mut printer, &records).await;
    }
    crate::out::written(written)?;
    Ok(exit::OK)
}

/// Follows the history after `shown` until Ctrl-C: on every push from the store, and every
/// [`FOLLOW_POLL`] anyway.
async fn follow(
    opened: &Opened,
    args: &LogArgs,
    printer: &mut Printer,
    shown: &[HistoryRecord],
) -> std::io::Result<()> {
    let store = opened.coord.store();
    let interrupted = crate::signals::interruption()?;
    tokio::pin!(interrupted);
    let mut watch = store.watch(&args.key).await.ok().flatten();
    let mut after_seq = shown.iter().map(|r| r.seq).max().unwrap_or(0);
    let mut last_error = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(FOLLOW_POLL) => {}
            () = next_change(&mut watch) => {}
            _ = &mut interrupted => return Ok(()),
        }
        loop {
            let records = match store.history(&args.key, after_seq, FOLLOW_BATCH).await {
                Ok(records) => records,
                Err(error) => {
                    // Say it once, and keep following: the store may come back.
                    let message = error.to_string();
                    if last_error.as_ref() != Some(&message) {
                        eprintln!("baton: {}", render::one_line(&message));
                        last_error = Some(message);
                    }
                    break;
                }
            };
            last_error = None;
            for record in &records {
                printer.later(record)?;
                after_seq = after_seq.max(record.seq);
            }
            if records.len() < FOLLOW_BATCH {
                break;
            }
        }
    }
}

/// Resolves at the store's next push about the key; never when it cannot push.
async fn next_change(watch: &mut Option<WatchHandle>) {
    let closed = match watch.as_mut() {
        Some(handle) => handle.changed().await.is_err(),
        None => std::future::pending().await,
    };
    if closed {
        *watch = None;
    }
}

/// A freeze of the key, as a line of its log: paused (or resumed) when, by whom, why.
struct FreezeLine {
    at_ms: u64,
    resumed: bool,
    target: String,
    by: String,
    reason: String,
}

impl FreezeLine {
    fn json(&self, key: &str) -> Value {
        json!({
            "key": key,
            "freeze": if self.resumed { "resumed" } else { "paused" },
            "target": self.target,
            "by": self.by,
            "reason": self.reason,
            "at": rfc3339(self.at_ms),
        })
    }

    fn cells(&self) -> Vec<Cell> {
        let (word, paint) = if self.resumed {
            ("resumed", Some(render::Paint::Green))
        } else {
            ("paused", Some(render::Paint::Yellow))
        };
        vec![
            Cell::plain(render::rfc3339_seconds(self.at_ms)),
            Cell::painted(word, paint),
            Cell::plain(&self.target),
            Cell::default(),
            Cell::default(),
            Cell::default(),
            Cell::plain(&self.by),
            Cell::plain(&self.reason),
        ]
    }
}

/// The freezes of the store's settings that cover `key` (set, and ended by a resume), as log
/// lines no older than the oldest entry shown when the log is cut at `n` entries (through a
/// server, those the caller may read; none if they cannot be read).
async fn freeze_lines(
    opened: &Opened,
    key: &str,
    records: &[HistoryRecord],
    n: usize,
) -> Vec<FreezeLine> {
    let Ok(settings) = baton_client::freeze::list(&opened.coord).await else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    let paused = |f: &baton_core::freeze::Freeze| {
        let mut reason = f.reason.clone();
        if let Some(weekly) = &f.weekly {
            reason.push_str(&format!(" (every week {})", weekly.describe()));
        }
        if let Some(until) = f.until_ms {
            reason.push_str(&format!(" (until {})", rfc3339(until)));
        }
        FreezeLine {
            at_ms: f.from_ms.unwrap_or(f.set_wall_ms).max(f.set_wall_ms),
            resumed: false,
            target: f.target.clone(),
            by: f.by.clone(),
            reason,
        }
    };
    for f in settings.freezes.iter().filter(|f| f.covers(key)) {
        lines.push(paused(f));
    }
    for r in settings.resumed.iter().filter(|r| r.freeze.covers(key)) {
        lines.push(paused(&r.freeze));
        lines.push(FreezeLine {
            at_ms: r.at_ms,
            resumed: true,
            target: r.freeze.target.clone(),
            by: r.by.clone(),
            reason: r.freeze.reason.clone(),
        });
    }
    if records.len() >= n {
        let oldest = records
            .iter()
            .filter_map(|r| Finished::decode(&r.bytes).ok())
            .map(|f| f.finished_wall_ms)
            .min();
        if let Some(oldest) = oldest {
            lines.retain(|l| l.at_ms >= oldest);
        }
    }
    lines
}

/// One history entry, decoded or not.
struct Entry<'a> {
    seq: u64,
    finished: Result<Finished, String>,
    key: &'a str,
}

impl<'a> Entry<'a> {
    fn of(key: &'a str, record: &HistoryRecord) -> Entry<'a> {
        Entry {
            seq: record.seq,
            finished: Finished::decode(&record.bytes),
            key,
        }
    }

    /// The outcome as shown: `cancelled (forced)` for a forced release.
    fn outcome(f: &Finished) -> String {
        if f.forced {
            format!("{} (forced)", f.outcome)
        } else {
            f.outcome.to_string()
        }
    }

    /// Why it ended; for a run-once run, which attempt (and step) it was; on a pool, which
    /// slots it held.
    fn reason(f: &Finished) -> String {
        let mut reason = f.reason.clone().unwrap_or_default();
        if !f.slots.is_empty() {
            let held = format!("slot {}", f.slots.join(","));
            reason = if reason.is_empty() {
                held
            } else {
                format!("{held}; {reason}")
            };
        }
        if let Some(why) = &f.override_freeze {
            let through = format!("granted through a freeze: {why}");
            reason = if reason.is_empty() {
                through
            } else {
                format!("{through}; {reason}")
            };
        }
        match &f.once {
            Some(run) if run.attempt > 0 => {
                let step = run.seq.map(|n| format!(" of step {n}")).unwrap_or_default();
                let run = format!("run-once attempt {}{step}", run.attempt);
                if reason.is_empty() {
                    run
                } else {
                    format!("{run}: {reason}")
                }
            }
            _ => reason,
        }
    }

    /// How long it waited: enqueued to granted, or to its end if it was never granted.
    fn wait_ms(f: &Finished) -> u64 {
        f.granted_wall_ms
            .unwrap_or(f.finished_wall_ms)
            .saturating_sub(f.enqueued_wall_ms)
    }

    /// How long it held: granted to its end.
    fn hold_ms(f: &Finished) -> Option<u64> {
        f.granted_wall_ms
            .map(|granted| f.finished_wall_ms.saturating_sub(granted))
    }

    fn json(&self) -> Value {
        match &self.finished {
            Ok(f) => json!({
                "seq": self.seq,
                "key": self.key,
                "id": f.id,
                "outcome": f.outcome.as_str(),
                "forced": f.forced,
                "reason": f.reason,
                "context": f.context,
                "order": f.order,
                "arrival": f.arrival,
                "mode": match f.mode {
                    Mode::Normal => "normal",
                    Mode::Shared => "shared",
                },
                "fence": f.fence,
                "enqueued_at": rfc3339(f.enqueued_wall_ms),
                "acquired_at": f.granted_wall_ms.map(rfc3339),
                "released_at": rfc3339(f.finished_wall_ms),
                "wait_ms": Entry::wait_ms(f),
                "hold_ms": Entry::hold_ms(f),
                "once": f.once,
                "override_freeze": f.override_freeze,
                "slots": f.slots,
            }),
            Err(error) => json!({ "seq": self.seq, "key": self.key, "error": error }),
        }
    }

    fn cells(&self) -> Vec<Cell> {
        match &self.finished {
            Ok(f) => {
                let outcome = Entry::outcome(f);
                let paint = render::outcome_paint(&outcome);
                vec![
                    Cell::plain(render::rfc3339_seconds(f.finished_wall_ms)),
                    Cell::painted(outcome, paint),
                    Cell::plain(&f.id),
                    Cell::plain(f.fence.map(|n| n.to_string()).unwrap_or_default()),
                    Cell::plain(render::duration_ms(Entry::wait_ms(f))),
                    Cell::plain(
                        Entry::hold_ms(f)
                            .map(render::duration_ms)
                            .unwrap_or_default(),
                    ),
                    Cell::plain(&f.context),
                    Cell::plain(Entry::reason(f)),
                ]
            }
            Err(error) => vec![
                Cell::plain("?"),
                Cell::painted("unreadable", Some(render::Paint::Red)),
                Cell::plain(format!("seq {}", self.seq)),
                Cell::default(),
                Cell::default(),
                Cell::default(),
                Cell::plain(error),
                Cell::default(),
            ],
        }
    }
}

/// A line of the log: a history entry (boxed: an entry is large beside a freeze's line), or a
/// freeze of the key.
enum Row<'a> {
    Entry(Box<Entry<'a>>),
    Freeze(FreezeLine),
}

impl Row<'_> {
    fn json(&self, key: &str) -> Value {
        match self {
            Row::Entry(entry) => entry.json(),
            Row::Freeze(line) => line.json(key),
        }
    }

    fn cells(&self) -> Vec<Cell> {
        match self {
            Row::Entry(entry) => entry.cells(),
            Row::Freeze(line) => line.cells(),
        }
    }
}

/// The entries in their order (newest first, or oldest first when following) with the
/// freeze lines placed among them by time (an entry that cannot be decoded keeps its place).
fn merged<'a>(
    key: &'a str,
    records: &[HistoryRecord],
    mut freezes: Vec<FreezeLine>,
    oldest_first: bool,
) -> Vec<Row<'a>> {
    freezes.sort_by_key(|l| l.at_ms);
    if !oldest_first {
        freezes.reverse();
    }
    let mut freezes = freezes.into_iter().peekable();
    let mut rows = Vec::new();
    for record in records {
        let entry = Entry::of(key, record);
        if let Ok(f) = &entry.finished {
            let at = f.finished_wall_ms;
            while let Some(line) = freezes.next_if(|l| {
                if oldest_first {
                    l.at_ms <= at
                } else {
                    l.at_ms >= at
                }
            }) {
                rows.push(Row::Freeze(line));
            }
        }
        rows.push(Row::Entry(Box::new(entry)));
    }
    rows.extend(freezes.map(Row::Freeze));
    rows
}

const HEADERS: [&str; 8] = [
    "WHEN", "OUTCOME", "ID", "FENCE", "WAITED", "HELD", "CONTEXT", "REASON",
];

/// Typical widths, so that lines printed later while following still line up.
const MIN_WIDTHS: [usize; 8] = [20, 10, 18, 16, 6, 6, 0, 0];

const CONTEXT_COLUMN: usize = 6;

/// Prints entries as a table or as JSON lines, each line flushed.
struct Printer {
    json: bool,
    key: String,
    colour: bool,
    width: Option<usize>,
    table: Table,
    widths: Vec<usize>,
}

impl Printer {
    fn new(args: &LogArgs) -> Printer {
        Printer {
            json: args.json,
            key: args.key.clone(),
            colour: render::colour_wanted(),
            width: render::terminal_size().map(|(w, _)| w),
            table: Table::new(Vec::new()),
            widths: Vec::new(),
        }
    }

    /// The first entries, with the header (printed even with no entries when following, so
    /// later lines have it).
    fn first(
        &mut self,
        records: &[HistoryRecord],
        freezes: Vec<FreezeLine>,
        oldest_first: bool,
    ) -> std::io::Result<()> {
        let rows = merged(&self.key, records, freezes, oldest_first);
        let mut out = std::io::stdout().lock();
        if self.json {
            for row in &rows {
                writeln!(out, "{}", row.json(&self.key))?;
            }
            return out.flush();
        }
        let mut table = Table::new(HEADERS.iter().map(|h| h.to_string()).collect())
            .flexible(Some(CONTEXT_COLUMN))
            .min_widths(&MIN_WIDTHS);
        for row in &rows {
            table.push(row.cells());
        }
        self.widths = table.widths(self.width);
        if table.len() > 0 {
            out.write_all(table.render(self.width, self.colour).as_bytes())?;
        } else {
            writeln!(out, "{}", table.header_line(&self.widths))?;
        }
        self.table = table;
        out.flush()
    }

    /// One entry recorded after the first ones.
    fn later(&mut self, record: &HistoryRecord) -> std::io::Result<()> {
        let entry = Entry::of(&self.key, record);
        let line = if self.json {
            entry.json().to_string()
        } else {
            self.table.later_line(
                &entry.cells(),
                &self.widths,
                self.colour,
                self.width.is_some(),
            )
        };
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")?;
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_core::Outcome;

    fn finished(outcome: Outcome, forced: bool, granted: Option<u64>) -> Finished {
        Finished {
            id: "t-1".into(),
            mode: Mode::Normal,
            context: "ci\nrun".into(),
            order: None,
            arrival: 3,
            outcome,
            forced,
            reason: None,
            fence: granted.map(|_| 7),
            enqueued_wall_ms: 1_000,
            granted_wall_ms: granted,
            finished_wall_ms: 9_000,
            job: None,
            once: None,
            events: Vec::new(),
            override_freeze: None,
            slots: Vec::new(),
        }
    }

    fn record(seq: u64, bytes: Vec<u8>) -> HistoryRecord {
        HistoryRecord { seq, bytes }
    }

    #[test]
    fn entries_show_waits_holds_and_forced_releases() {
        let held = record(3, finished(Outcome::Succeeded, false, Some(4_000)).encode());
        let entry = Entry::of("k", &held);
        let json = entry.json();
        assert_eq!(json["wait_ms"], 3_000);
        assert_eq!(json["hold_ms"], 5_000);
        assert_eq!(json["acquired_at"], "1970-01-01T00:00:04.000Z");
        assert_eq!(json["released_at"], "1970-01-01T00:00:09.000Z");
        assert_eq!(json["seq"], 3);
        let cells: Vec<String> = entry.cells().into_iter().map(|c| c.text).collect();
        assert_eq!(
            cells,
            [
                "1970-01-01T00:00:09Z",
                "succeeded",
                "t-1",
                "7",
                "3s",
                "5s",
                "ci run",
                ""
            ]
        );

        let never_granted = record(4, finished(Outcome::TimedOut, false, None).encode());
        let json = Entry::of("k", &never_granted).json();
        assert_eq!(json["wait_ms"], 8_000);
        assert_eq!(json["hold_ms"], Value::Null);
        assert_eq!(json["acquired_at"], Value::Null);

        let forced = record(5, finished(Outcome::Cancelled, true, Some(2_000)).encode());
        let cells = Entry::of("k", &forced).cells();
        assert_eq!(cells[1].text, "cancelled (forced)");
    }

    #[test]
    fn an_unreadable_entry_is_shown_as_such() {
        let entry = Entry::of("k", &record(9, b"{not json".to_vec()));
        assert_eq!(entry.cells()[1].text, "unreadable");
        let json = entry.json();
        assert_eq!(json["seq"], 9);
        assert!(json["error"]
            .as_str()
            .is_some_and(|e| e.contains("unreadable history entry")));
    }
}
