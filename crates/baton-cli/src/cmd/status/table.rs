//! A status as a table: one row per ticket (or a free key's one row), the store line above it,
//! and a line per busy key under it.

use baton_client::status::{mode_name, KeyStatus, TicketStatus};
use baton_core::{Mode, Outcome};

use super::select::{free_left_out, select, Rank};
use super::view::{Column, View};
use crate::render::{self, Cell, Paint, Table};

impl View {
    /// The table, with the store line above it and the per-key lines below it; fitted to
    /// `screen` (columns, rows) when on a terminal.
    pub(super) fn table(
        &self,
        store: &str,
        keys: Vec<KeyStatus>,
        screen: Option<(usize, usize)>,
    ) -> String {
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
                    Cell::painted(format!("{name}{shared}{}", slot_words(t)), Some(paint))
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

/// On a pool: the slots a holder holds (` slot a`), or the one a waiter waits for
/// (` for slot b`).
fn slot_words(t: &TicketStatus) -> String {
    match (&t.wants_slot, t.slots.as_slice()) {
        (_, [one]) => format!(" slot {one}"),
        (_, [_, ..]) => format!(" slots {}", t.slots.join(",")),
        (Some(wanted), []) => format!(" for slot {wanted}"),
        (None, []) => String::new(),
    }
}

/// A pool's slots as the line under the table gives them: `slots a held, b free`.
fn pool_words(key: &KeyStatus) -> Option<String> {
    if key.slots.is_empty() {
        return None;
    }
    let words: Vec<String> = key
        .slots
        .iter()
        .map(|slot| {
            let held = key.holders.iter().any(|t| t.slots.contains(slot));
            format!("{slot} {}", if held { "held" } else { "free" })
        })
        .collect();
    Some(format!("slots {}", words.join(", ")))
}

/// The line under the table for a busy key: limit (a pool's slots), last outcome, failures in
/// a row, mean hold.
fn key_line(key: &KeyStatus, colour: bool) -> String {
    let mut parts = vec![pool_words(key).unwrap_or_else(|| format!("limit {}", key.limit))];
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
    if key.backlog > 0 && key.backlog_turns {
        parts.push(format!("{} more waiting in the backlog", key.backlog));
    } else if key.backlog > 0 {
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::cmd::status::fixtures::{ended, key, ticket, view};
    use crate::cmd::status::select::by_rank;

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
}
