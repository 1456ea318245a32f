//! The options that shape every form of a status (`--state`, `--columns`, `--max-rows`), and
//! the form scripts read: `--json`.

use std::collections::HashSet;
use std::time::Duration;

use baton_client::status::KeyStatus;
use serde_json::{json, Value};

use super::select::{select, States};
use super::StatusArgs;
use crate::cmd::acquire::now_rfc3339;
use crate::exit::Failure;
use crate::Opened;

// ----- what is shown -----

/// A column of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Column {
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

pub(super) const DEFAULT_COLUMNS: [Column; 8] = [
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
    pub(super) fn header(self) -> String {
        match self {
            Column::Position => "POS".into(),
            Column::LeaseLeft => "LEASE".into(),
            other => other.name().to_uppercase(),
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
pub(super) struct View {
    pub(super) states: States,
    pub(super) columns: Vec<Column>,
    /// `-c` given: exactly those columns, and no per-key lines under the table.
    pub(super) columns_chosen: bool,
    pub(super) limit_rows: Option<usize>,
    pub(super) state_text: String,
    /// No `--state`: on a terminal, free keys give way to busy ones.
    pub(super) fit_screen: bool,
}

impl View {
    pub(super) fn from_args(args: &StatusArgs) -> Result<View, Failure> {
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
    pub(super) fn json(&self, opened: &Opened, keys: Vec<KeyStatus>) -> Value {
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
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::exit;

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
}
