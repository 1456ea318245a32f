//! Which keys and rows a status shows, and in what order: what needs a look first ([`Rank`]),
//! `--state`, `--max-rows`, and the free keys a terminal leaves out.

use baton_client::status::KeyStatus;
use baton_core::Outcome;

use crate::exit::Failure;

/// What a key needs: the order of the table, most pressing first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Rank {
    /// Held or queued.
    Busy,
    /// Idle, but its last turn failed, expired or died, or its run-once is dead: someone
    /// should look.
    Failing,
    /// Idle, and nothing went wrong.
    Free,
}

impl Rank {
    pub(super) fn of(key: &KeyStatus) -> Rank {
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
pub(super) fn by_rank(mut keys: Vec<KeyStatus>) -> Vec<KeyStatus> {
    keys.sort_by_key(Rank::of);
    keys
}

/// How many of the `n_free` free rows at the end of a table of `n_lines` lines to leave out so
/// that the table and the line that says so fit a screen of `height` rows, with the prompt
/// under them: a busy key at the top is never scrolled off by idle ones.
pub(super) fn free_left_out(n_lines: usize, n_free: usize, height: usize) -> usize {
    let room = height.saturating_sub(1);
    if n_lines <= room {
        return 0;
    }
    // One more: the line under the table that says how many were left out.
    (n_lines + 1 - room).min(n_free)
}

/// Which rows to show: `--state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct States {
    pub(super) held: bool,
    pub(super) queued: bool,
    pub(super) free: bool,
}

impl States {
    pub(super) fn parse(text: &str) -> Result<States, Failure> {
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

    pub(super) fn shows(self, held: bool) -> bool {
        if held {
            self.held
        } else {
            self.queued
        }
    }
}

/// The rows `states` asks for, at most `limit_rows` of them (holders before the queue, keys in
/// order), and how many were left out. A key keeps its place only if it has a row left: a
/// ticket, or its `free` row.
pub(super) fn select(
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::cmd::status::fixtures::{ended, key, names, ticket};

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
}
