//! What changed between two reads of the keys, as `--watch` prints it when not on a terminal:
//! one line (or JSON object) per grant, arrival and departure.

use std::collections::{HashMap, HashSet};

use baton_client::status::{mode_name, KeyStatus, TicketStatus};
use baton_core::{Finished, Mode, Outcome};
use serde_json::{json, Value};

use crate::cmd::acquire::rfc3339;
use crate::render;
use crate::Opened;

/// A change seen between two reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Change {
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
pub(super) struct Event {
    key: String,
    id: String,
    mode: Mode,
    context: String,
    change: Change,
}

impl Event {
    pub(super) fn held(&self) -> bool {
        match self.change {
            Change::Granted { .. } => true,
            Change::Queued { .. } => false,
            Change::Left { was_held, .. } => was_held,
        }
    }

    /// `deploy/prod: t-abc granted (fence 17) to ci run 12`, after a timestamp.
    pub(super) fn line(&self, wall_ms: u64) -> String {
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

    pub(super) fn json(&self, wall_ms: u64) -> Value {
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
pub(super) fn changes(before: &[KeyStatus], after: &[KeyStatus]) -> Vec<Event> {
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
pub(super) async fn resolve_outcomes(opened: &Opened, events: &mut Vec<Event>) {
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::cmd::status::fixtures::{key, ticket};
    use baton_core::doc::FinishedMark;

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
