//! `baton status [PREFIX]`: who holds each key, who waits, and how the last turn ended.

use std::io::Write;
use std::time::Duration;

use baton_core::{Doc, Mode, TicketState};
use baton_store::StoreClock;
use serde_json::{json, Value};

use crate::cli::StatusArgs;
use crate::cmd::acquire::{now_rfc3339, rfc3339};
use crate::exit::{self, Failure};
use crate::Opened;

/// Runs the `status` subcommand.
pub async fn status(opened: &Opened, args: StatusArgs) -> Result<i32, Failure> {
    let store = opened.coord.store();
    let keys = store.list(&args.prefix).await?;
    let mut views = Vec::new();
    for key in &keys {
        let snapshot = opened.coord.read(key).await?;
        let Some(doc) = snapshot.doc else { continue };
        views.push(key_view(key, &doc, &snapshot.clock, snapshot.wall_ms));
    }
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        let value = json!({
            "store": store.describe(),
            "now": now_rfc3339(),
            "keys": views,
        });
        writeln!(out, "{value}")
    } else {
        write_table(&mut out, &store.describe(), &views)
    };
    match written {
        Ok(()) => Ok(exit::OK),
        // A closed pipe (`baton status | head`) is not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(exit::OK),
        Err(e) => Err(Failure::new(exit::ERROR, format!("cannot write: {e}"))),
    }
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Normal => "normal",
        Mode::Shared => "shared",
    }
}

/// One key as JSON (also the source of the table, so both always agree).
fn key_view(key: &str, doc: &Doc, clock: &StoreClock, wall_ms: u64) -> Value {
    let holders: Vec<Value> = doc
        .in_queue_order()
        .into_iter()
        .filter(|t| t.state == TicketState::Held)
        .map(|t| {
            let lease_left_ms = match (clock, t.deadline_ms) {
                (StoreClock::Time { now_ms, .. }, Some(deadline)) => {
                    Some(deadline.saturating_sub(*now_ms))
                }
                _ => None,
            };
            json!({
                "id": t.id,
                "mode": mode_name(t.mode),
                "context": t.context,
                "fence": t.fence,
                "acquired_at": rfc3339(t.granted_wall_ms),
                "held_ms": wall_ms.saturating_sub(t.granted_wall_ms),
                "lease_left_ms": lease_left_ms,
                "claimed": t.claimed,
            })
        })
        .collect();
    let queue: Vec<Value> = doc
        .queued()
        .into_iter()
        .enumerate()
        .map(|(position, t)| {
            json!({
                "id": t.id,
                "position": position + 1,
                "mode": mode_name(t.mode),
                "context": t.context,
                "order": t.order,
                "keep": t.keep,
                "enqueued_at": rfc3339(t.enqueued_wall_ms),
                "waiting_ms": wall_ms.saturating_sub(t.enqueued_wall_ms),
            })
        })
        .collect();
    json!({
        "key": key,
        "limit": doc.limit,
        "fence": doc.fence,
        "holders": holders,
        "queue": queue,
        "last_outcome": doc.summary.last_outcome.map(|o| o.as_str()),
        "last_finished_at": (doc.summary.last_finished_wall_ms > 0)
            .then(|| rfc3339(doc.summary.last_finished_wall_ms)),
        "consecutive_failures": doc.summary.consecutive_failures,
        "mean_hold_ms": doc.summary.mean_hold_ms(),
    })
}

fn ms(value: &Value) -> String {
    match value.as_u64() {
        Some(ms) => humantime::format_duration(Duration::from_secs(ms / 1000)).to_string(),
        None => "?".into(),
    }
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or("")
}

fn write_table(out: &mut impl Write, store: &str, views: &[Value]) -> std::io::Result<()> {
    writeln!(out, "store: {store}")?;
    if views.is_empty() {
        writeln!(out, "no keys")?;
    }
    for view in views {
        let last = match view["last_outcome"].as_str() {
            Some(outcome) => format!("  last: {outcome}"),
            None => String::new(),
        };
        writeln!(
            out,
            "\n{}  limit {}  fence {}{last}",
            text(&view["key"]),
            view["limit"],
            view["fence"]
        )?;
        let holders = view["holders"].as_array().map_or(&[][..], Vec::as_slice);
        let queue = view["queue"].as_array().map_or(&[][..], Vec::as_slice);
        if holders.is_empty() && queue.is_empty() {
            writeln!(out, "  free")?;
        }
        for h in holders {
            let mode = if h["mode"] == "shared" { " shared" } else { "" };
            writeln!(
                out,
                "  held{mode}  {}  fence {}  for {}  lease left {}  {}",
                text(&h["id"]),
                h["fence"],
                ms(&h["held_ms"]),
                ms(&h["lease_left_ms"]),
                text(&h["context"])
            )?;
        }
        for q in queue {
            let mode = if q["mode"] == "shared" { " shared" } else { "" };
            writeln!(
                out,
                "  #{}{mode}  {}  waiting {}  {}",
                q["position"],
                text(&q["id"]),
                ms(&q["waiting_ms"]),
                text(&q["context"])
            )?;
        }
    }
    Ok(())
}
