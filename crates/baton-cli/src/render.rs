//! Output helpers shared by `status` and `log`: compact durations, aligned tables, colour, and
//! the terminal's size.
//!
//! Colour is plain ANSI SGR codes behind [`paint`]: three colours do not earn a dependency.
//! It is used only when stdout is a terminal and `NO_COLOR` is unset or empty (and `TERM` is not
//! `dumb`), never in JSON.

use std::io::IsTerminal;
use std::time::{Duration, UNIX_EPOCH};

/// A colour for a table cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Paint {
    /// Held tickets, succeeded turns.
    Green,
    /// Queued tickets.
    Yellow,
    /// Failed, expired and dead turns.
    Red,
}

/// Whether to colour what goes to stdout.
pub fn colour_wanted() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let dumb = std::env::var_os("TERM").is_some_and(|t| t == "dumb");
    !no_color && !dumb && std::io::stdout().is_terminal()
}

/// `text` in `paint`, when `colour` is on.
pub fn paint(text: &str, paint: Option<Paint>, colour: bool) -> String {
    let code = match (paint, colour) {
        (Some(Paint::Green), true) => "32",
        (Some(Paint::Yellow), true) => "33",
        (Some(Paint::Red), true) => "31",
        _ => return text.to_string(),
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

/// The colour of an outcome: red for the ones that mean the work did not get done right.
pub fn outcome_paint(outcome: &str) -> Option<Paint> {
    match outcome.split_whitespace().next().unwrap_or("") {
        "succeeded" => Some(Paint::Green),
        "failed" | "expired" | "dead" => Some(Paint::Red),
        _ => None,
    }
}

/// The terminal's (columns, rows) when stdout is a terminal.
pub fn terminal_size() -> Option<(usize, usize)> {
    if !std::io::stdout().is_terminal() {
        return None;
    }
    terminal_size_of(libc::STDOUT_FILENO)
}

/// The (columns, rows) of the terminal on file descriptor `fd` (stderr for the waiting line),
/// falling back to `COLUMNS` and `LINES`, then 80x24.
pub fn terminal_size_of(fd: libc::c_int) -> Option<(usize, usize)> {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct we pass, which we own.
    let rc = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut size) };
    if rc == 0 && size.ws_col > 0 {
        return Some((usize::from(size.ws_col), usize::from(size.ws_row.max(1))));
    }
    let columns = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok());
    let lines = std::env::var("LINES").ok().and_then(|c| c.parse().ok());
    Some((columns.unwrap_or(80), lines.unwrap_or(24)))
}

/// A duration, compactly (`850ms`, `12s`, `3m04s`, `1h`, `2d03h`): the one form baton writes
/// durations in, [`baton_core::duration::human_ms`].
pub fn duration_ms(ms: u64) -> String {
    baton_core::duration::human_ms(ms)
}

/// A duration as [`duration_ms`] writes it.
pub fn duration(duration: Duration) -> String {
    baton_core::duration::human(duration)
}

/// A wall-clock time in RFC 3339 to the second, UTC (`2026-11-22T01:02:03Z`).
pub fn rfc3339_seconds(wall_ms: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(wall_ms)).to_string()
}

/// `text` on one line: control characters (newlines, tabs, ESC, BEL, C1 controls such as CSI)
/// become spaces, so stored text cannot break a table or drive the terminal.
///
/// The one filter for text baton did not write itself: contexts, reasons, who paused, job
/// errors, kv contexts, a worker's name, and every error line (which may quote them). Every
/// print that can carry such text goes through it: status, log, the waiting line, check,
/// jobs, why, wait, pause, a run's messages and `baton: …` failure lines. JSON output needs
/// none (serde escapes control characters); a job's own output (`baton wait` replays its
/// tails) and `kv get`'s value are data, printed as they are.
pub fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// `text` cut to at most `max` characters, starting with `…` when cut: what keeps a key
/// recognisable, since keys under one prefix share their start.
pub fn cut_start(text: &str, max: usize) -> String {
    let n_chars = text.chars().count();
    if n_chars <= max {
        return text.to_string();
    }
    if max == 0 {
        return String::new();
    }
    let mut out = String::from("…");
    out.extend(text.chars().skip(n_chars - (max - 1)));
    out
}

/// `text` cut to at most `max` characters, ending in `…` when cut.
pub fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    if max == 0 {
        return String::new();
    }
    let mut out: String = text.chars().take(max - 1).collect();
    out.push('…');
    out
}

/// One cell: its text and its colour.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cell {
    /// What it says (one line).
    pub text: String,
    /// Its colour, when colour is on.
    pub paint: Option<Paint>,
}

impl Cell {
    /// A plain cell.
    pub fn plain(text: impl Into<String>) -> Cell {
        Cell {
            text: one_line(&text.into()),
            paint: None,
        }
    }

    /// A coloured cell.
    pub fn painted(text: impl Into<String>, paint: Option<Paint>) -> Cell {
        Cell {
            text: one_line(&text.into()),
            paint,
        }
    }
}

/// Columns separated by two spaces, each as wide as its widest cell; one column (the context)
/// may be cut at its end so that lines fit the terminal, and when that is not enough, another
/// (the key) at its start.
#[derive(Clone, Debug)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<Cell>>,
    min_widths: Vec<usize>,
    flexible: Option<usize>,
    cut_start: Option<usize>,
}

const GAP: &str = "  ";

/// A flexible column is cut down to this first; then the column cut at its start gives way.
const FLEX_MIN: usize = 8;

/// Below this the column cut at its start is not cut further.
const CUT_START_MIN: usize = 10;

/// Below this a flexible column is not cut at all: the line wraps instead.
const FLEX_LEAST: usize = 3;

impl Table {
    /// A table with these headers.
    pub fn new(headers: Vec<String>) -> Table {
        let min_widths = vec![0; headers.len()];
        Table {
            headers,
            rows: Vec::new(),
            min_widths,
            flexible: None,
            cut_start: None,
        }
    }

    /// Column `index` is cut at its start (`…ef/prod`) when cutting the flexible column to
    /// its least does not make lines fit the width given to [`Table::render`].
    pub fn cut_start(mut self, index: Option<usize>) -> Table {
        self.cut_start = index;
        self
    }

    /// Column `index` is cut to fit the width given to [`Table::render`].
    pub fn flexible(mut self, index: Option<usize>) -> Table {
        self.flexible = index;
        self
    }

    /// Columns are at least this wide (so rows printed later, when following, still line up).
    pub fn min_widths(mut self, widths: &[usize]) -> Table {
        for (min, width) in self.min_widths.iter_mut().zip(widths) {
            *min = *width;
        }
        self
    }

    /// Adds a row (as many cells as headers).
    pub fn push(&mut self, row: Vec<Cell>) {
        debug_assert_eq!(row.len(), self.headers.len());
        self.rows.push(row);
    }

    /// How many rows it has.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Column widths: the widest cell, at least the header and the minimum; the flexible column
    /// shrunk so a line fits `width` (when given).
    pub fn widths(&self, width: Option<usize>) -> Vec<usize> {
        let mut widths: Vec<usize> = self
            .headers
            .iter()
            .zip(&self.min_widths)
            .map(|(h, min)| h.chars().count().max(*min))
            .collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.text.chars().count());
            }
        }
        if let Some(width) = width {
            shrink(&mut widths, self.flexible, width, FLEX_MIN);
            shrink(&mut widths, self.cut_start, width, CUT_START_MIN);
            shrink(&mut widths, self.flexible, width, FLEX_LEAST);
        }
        widths
    }

    /// The header line (never coloured), cut as the rows are.
    pub fn header_line(&self, widths: &[usize]) -> String {
        let cells: Vec<Cell> = self.headers.iter().map(Cell::plain).collect();
        line(&cells, widths, false, (self.flexible, self.cut_start))
    }

    /// Lays out a row that was not in the table (one printed later, when following) in
    /// `widths`: longer cells push the rest of the line right, except the flexible column,
    /// which is cut when `fit` (on a terminal).
    pub fn later_line(&self, cells: &[Cell], widths: &[usize], colour: bool, fit: bool) -> String {
        let cuts = (self.flexible, self.cut_start);
        line(cells, widths, colour, if fit { cuts } else { (None, None) })
    }

    /// The whole table, header first, one `\n`-terminated line per row.
    pub fn render(&self, width: Option<usize>, colour: bool) -> String {
        let widths = self.widths(width);
        let mut out = self.header_line(&widths);
        out.push('\n');
        for row in &self.rows {
            out.push_str(&line(row, &widths, colour, (self.flexible, self.cut_start)));
            out.push('\n');
        }
        out
    }
}

/// Column `index` of `widths` made narrower, down to `least` (or its width if less), until a
/// line fits `width`.
fn shrink(widths: &mut [usize], index: Option<usize>, width: usize, least: usize) {
    let Some(index) = index.filter(|i| *i < widths.len()) else {
        return;
    };
    let total: usize = widths.iter().sum::<usize>() + GAP.len() * widths.len().saturating_sub(1);
    if total > width {
        let others = total - widths[index];
        widths[index] = width.saturating_sub(others).max(least).min(widths[index]);
    }
}

/// One row laid out in `widths`, without trailing spaces; the cells in the columns of `cuts`
/// (cut at the end, cut at the start) are cut to their widths.
fn line(
    cells: &[Cell],
    widths: &[usize],
    colour: bool,
    cuts: (Option<usize>, Option<usize>),
) -> String {
    let mut out = String::new();
    let last = cells.len().saturating_sub(1);
    for (index, (cell, width)) in cells.iter().zip(widths).enumerate() {
        let text = if cuts.0 == Some(index) {
            cut(&cell.text, *width)
        } else if cuts.1 == Some(index) {
            cut_start(&cell.text, *width)
        } else {
            cell.text.clone()
        };
        let pad = width.saturating_sub(text.chars().count());
        out.push_str(&paint(&text, cell.paint, colour));
        if index < last {
            out.push_str(&" ".repeat(pad));
            out.push_str(GAP);
        }
    }
    out.truncate(out.trim_end().len());
    out
}

/// A freeze in force, in words (the waiting line, `status`): `paused until resumed by alice:
/// audit` or `paused until 2026-12-28T08:00:00Z by …`.
pub fn paused(paused: &baton_core::freeze::Paused) -> String {
    let until = match paused.until_ms {
        Some(until) => format!("until {}", rfc3339_seconds(until)),
        None => "until resumed".to_owned(),
    };
    format!(
        "paused {until} by {}: {}",
        one_line(&paused.by),
        one_line(&paused.reason)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_cut_and_made_one_line() {
        assert_eq!(cut("abcdef", 6), "abcdef");
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("abcdef", 0), "");
        assert_eq!(Cell::plain("a\nb\tc\x1b[31m").text, "a b c [31m");
        // An OSC that retitles the terminal, a CSI that clears it, and C1's one-byte CSI.
        assert_eq!(
            one_line("\x1b]0;pwned\x07\x1b[2J\u{9b}2J\x7f"),
            " ]0;pwned  [2J 2J "
        );
    }

    #[test]
    fn tables_align_and_the_flexible_column_fits_the_width() {
        let mut table =
            Table::new(vec!["KEY".into(), "CONTEXT".into(), "ID".into()]).flexible(Some(1));
        table.push(vec![
            Cell::plain("a"),
            Cell::plain("a long context that will not fit"),
            Cell::painted("t-1", Some(Paint::Green)),
        ]);
        table.push(vec![Cell::plain("bb"), Cell::plain(""), Cell::plain("t-2")]);
        assert_eq!(
            table.render(None, false),
            "KEY  CONTEXT                           ID\n\
             a    a long context that will not fit  t-1\n\
             bb                                     t-2\n"
        );
        let narrow = table.render(Some(24), false);
        assert_eq!(
            narrow,
            "KEY  CONTEXT         ID\n\
             a    a long contex…  t-1\n\
             bb                   t-2\n"
        );
        assert!(narrow.lines().all(|l| l.chars().count() <= 24), "{narrow}");
        let coloured = table.render(None, true);
        assert!(coloured.contains("\x1b[32mt-1\x1b[0m"), "{coloured}");
        assert!(!table.render(None, false).contains('\x1b'));
    }

    #[test]
    fn outcomes_are_coloured_by_what_they_mean() {
        assert_eq!(outcome_paint("succeeded"), Some(Paint::Green));
        assert_eq!(outcome_paint("failed"), Some(Paint::Red));
        assert_eq!(outcome_paint("expired"), Some(Paint::Red));
        assert_eq!(outcome_paint("cancelled (forced)"), None);
    }
}
